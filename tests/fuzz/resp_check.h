/*
 * resp_check.h — the properties every input to the RESP parser must satisfy, shared by the
 * libFuzzer target (tests/fuzz/fuzz_resp.c) and the corpus replay in the unit tests.
 *
 * resp_check(data, size) parses the commands in data one after another (limits of
 * RC_LIMITS) and checks:
 *   - a parsed command's arguments lie inside its bytes, in order, without overlap, and an
 *     array command re-encodes to exactly its bytes (an inline one re-encodes to an array
 *     that parses to the same arguments);
 *   - every shorter prefix of the first command asks for more bytes (never past its end)
 *     when the whole parses, or fails with the same error when the whole fails;
 *   - with streaming allowed, a prefix either asks for more or stops at the last bulk's
 *     header with that bulk's length and the other arguments as the whole has them;
 *   - errors are sticky and come with a message;
 *   - a parser with tighter limits never accepts more than one with RC_LIMITS.
 * It returns NULL, or a description of the first property that failed. Static functions
 * only, so each includer gets its own copy.
 */
#ifndef TIDE_RESP_CHECK_H
#define TIDE_RESP_CHECK_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/resp.h"

#define RC_MAX_ARGS 64
#define RC_PREFIX_MAX 4096 /* prefixes are checked on the first command up to this size */

static char rc_msg[512];

__attribute__((format(printf, 1, 2))) static const char *rc_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rc_msg, sizeof(rc_msg), fmt, ap);
    va_end(ap);
    return rc_msg;
}

static void rc_limits(resp_limits *lim) {
    lim->max_bulk = 4096;
    lim->max_args = RC_MAX_ARGS;
    lim->max_inline = 1024;
    lim->max_cmd = 16384;
}

/* Encode argv as a RESP array into out (cap bytes); returns the length, 0 if it does not
 * fit. */
static size_t rc_encode(const resp_arg *argv, uint32_t argc, uint8_t *out, size_t cap) {
    size_t n = 0;
    if (cap < RESP_NUM_MAX) return 0;
    n += resp_enc_num(out, '*', argc);
    for (uint32_t i = 0; i < argc; i++) {
        if (n + RESP_NUM_MAX + argv[i].len + 2 > cap) return 0;
        n += resp_enc_num(out + n, '$', (int64_t)argv[i].len);
        if (argv[i].len) memcpy(out + n, argv[i].p, argv[i].len);
        n += argv[i].len;
        out[n++] = '\r';
        out[n++] = '\n';
    }
    return n;
}

static int rc_same_args(const resp_arg *a, const resp_arg *b, uint32_t n) {
    for (uint32_t i = 0; i < n; i++)
        if (a[i].len != b[i].len || (a[i].len && memcmp(a[i].p, b[i].p, a[i].len) != 0)) return 0;
    return 1;
}

/* Check the arguments of a command of n bytes parsed from buf. */
static const char *rc_check_cmd(const uint8_t *buf, size_t n, const resp_cmd *cmd) {
    const uint8_t *prev = buf;
    for (uint32_t i = 0; i < cmd->argc; i++) {
        const resp_arg *a = &cmd->argv[i];
        if (!a->p) return rc_fail("argument %u has no bytes", i);
        if (a->p < prev || a->p + a->len > buf + n)
            return rc_fail("argument %u lies outside its command or out of order", i);
        prev = a->p + a->len;
    }
    if (cmd->argc == 0) return NULL;
    size_t cap = n + 64 + (size_t)cmd->argc * (RESP_NUM_MAX + 2);
    uint8_t *out = malloc(cap);
    if (!out) return NULL;
    size_t len = rc_encode(cmd->argv, cmd->argc, out, cap);
    const char *bad = NULL;
    if (buf[0] == '*') {
        if (len != n || memcmp(out, buf, n) != 0) bad = rc_fail("an array does not re-encode");
    } else {
        resp_parser p;
        resp_arg argv[RC_MAX_ARGS];
        resp_cmd again = {argv, RC_MAX_ARGS, 0, 0};
        resp_limits lim;
        rc_limits(&lim);
        resp_parser_init(&p, &lim, 0);
        ssize_t r = resp_parse(&p, out, len, &again, 0);
        if (r != (ssize_t)len || again.argc != cmd->argc ||
            !rc_same_args(again.argv, cmd->argv, cmd->argc))
            bad = rc_fail("an inline command does not round-trip as an array (%zd)", r);
    }
    free(out);
    return bad;
}

/* The prefixes of the first command (n bytes, or the error `err` for the whole input). */
static const char *rc_check_prefixes(const uint8_t *data, size_t size, ssize_t whole,
                                     const resp_cmd *full) {
    resp_limits lim;
    rc_limits(&lim);
    resp_arg argv[RC_MAX_ARGS];
    size_t upto = whole > 0 ? (size_t)whole : size;
    if (upto > RC_PREFIX_MAX) upto = RC_PREFIX_MAX;
    for (size_t L = 0; L < upto; L++) {
        resp_parser p;
        resp_parser_init(&p, &lim, 0);
        resp_cmd cmd = {argv, RC_MAX_ARGS, 0, 0};
        ssize_t r = resp_parse(&p, data, L, &cmd, 0);
        if (whole > 0) {
            if (r != 0) return rc_fail("prefix %zu of a %zd-byte command gave %zd", L, whole, r);
            if (p.need == 0 || L + p.need > (size_t)whole)
                return rc_fail("prefix %zu of a %zd-byte command asks for %zu more", L, whole,
                               p.need);
            /* Streaming: the same prefix stops at the last bulk's header, or asks for more. */
            resp_parser_init(&p, &lim, 1);
            r = resp_parse(&p, data, L, &cmd, 1);
            if (r < 0) return rc_fail("prefix %zu fails when streaming", L);
            if (r > 0) {
                uint32_t last = full->argc - 1;
                if (!cmd.pending || cmd.argc != full->argc || cmd.argv[last].p ||
                    cmd.argv[last].len != full->argv[last].len ||
                    (size_t)r != (size_t)(full->argv[last].p - data) ||
                    !rc_same_args(cmd.argv, full->argv, last))
                    return rc_fail("prefix %zu: a streamed stop that does not match", L);
            }
        } else if (r < 0 && r != whole) {
            return rc_fail("prefix %zu fails with %zd, the whole input with %zd", L, r, whole);
        } else if (r > 0) {
            return rc_fail("prefix %zu parses (%zd) where the whole input fails", L, r);
        }
    }
    return NULL;
}

static const char *resp_check(const uint8_t *data, size_t size) {
    resp_limits lim, tight;
    rc_limits(&lim);
    tight = lim;
    tight.max_bulk = 16;
    tight.max_args = 3;
    tight.max_inline = 16;
    tight.max_cmd = 24;
    resp_parser p, pt;
    if (resp_parser_init(&p, &lim, 0) != 0 || resp_parser_init(&pt, &tight, 0) != 0)
        return rc_fail("parser init failed");
    resp_arg argv[RC_MAX_ARGS], targv[RC_MAX_ARGS];
    size_t off = 0;
    for (int first = 1; off <= size; first = 0) {
        resp_cmd cmd = {argv, RC_MAX_ARGS, 0, 0}, tcmd = {targv, RC_MAX_ARGS, 0, 0};
        ssize_t r = resp_parse(&p, data + off, size - off, &cmd, 0);
        ssize_t tr = resp_parse(&pt, data + off, size - off, &tcmd, 0);
        if (tr > 0 && tr != r)
            return rc_fail("tight limits accepted %zd bytes, defaults %zd", tr, r);
        if (p.need_args) return rc_fail("need_args %u with room for %u", p.need_args, RC_MAX_ARGS);
        if (first) {
            const char *bad = rc_check_prefixes(data, size, r, &cmd);
            if (bad) return bad;
        }
        if (r < 0) {
            if (!p.errstr[0]) return rc_fail("error %zd without a message", r);
            resp_cmd again = {argv, RC_MAX_ARGS, 0, 0};
            if (resp_parse(&p, data, size, &again, 0) != r) return rc_fail("error not sticky");
            return NULL;
        }
        if (r == 0) {
            if (p.need == 0) return rc_fail("more needed but need is 0");
            return NULL;
        }
        if ((size_t)r > size - off) return rc_fail("consumed %zd of %zu bytes", r, size - off);
        const char *bad = rc_check_cmd(data + off, (size_t)r, &cmd);
        if (bad) return bad;
        if (tr > 0 && (tcmd.argc != cmd.argc || !rc_same_args(tcmd.argv, cmd.argv, cmd.argc)))
            return rc_fail("tight limits parsed other arguments");
        if (tr <= 0) resp_parser_init(&pt, &tight, 0); /* resynchronise the tight parser */
        off += (size_t)r;
    }
    return NULL;
}

#endif
