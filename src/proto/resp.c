/*
 * resp.c — the RESP2 request parser and reply encoders (see resp.h for the format, the
 * limits and the streaming of a last argument).
 *
 * The parser scans from the start of the buffer every call and keeps nothing between calls
 * but a sticky error; the caller avoids rescanning a long bulk by waiting for p->need more
 * bytes. Numbers are read digit by digit with an overflow check, and a number line may not
 * run past RESP_NUM_DIGITS characters, so no limit is ever compared against a value that
 * wrapped.
 */
#include "proto/resp.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "tide.h"

void resp_limits_default(resp_limits *lim) {
    lim->max_bulk = RESP_DEFAULT_MAX_BULK;
    lim->max_args = RESP_DEFAULT_MAX_ARGS;
    lim->max_inline = RESP_DEFAULT_MAX_INLINE;
    lim->max_cmd = RESP_DEFAULT_MAX_CMD;
}

__attribute__((format(printf, 3, 4))) static int fail(resp_parser *p, int code, const char *fmt,
                                                      ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->errstr, sizeof(p->errstr), fmt, ap);
    va_end(ap);
    p->err = code;
    return code;
}

int resp_parser_init(resp_parser *p, const resp_limits *lim, uint64_t stream_min) {
    memset(p, 0, sizeof(*p));
    if (lim)
        p->lim = *lim;
    else
        resp_limits_default(&p->lim);
    p->stream_min = stream_min ? stream_min : 1;
    if (!p->lim.max_bulk || !p->lim.max_args || !p->lim.max_inline || !p->lim.max_cmd) {
        snprintf(p->errstr, sizeof(p->errstr), "every RESP limit must be at least 1");
        return TIDE_ECONFIG;
    }
    return 0;
}

/* A byte as people can read it in a message. */
static const char *show(uint8_t c, char *buf) {
    if (c >= 0x20 && c < 0x7f)
        snprintf(buf, 8, "%c", c);
    else
        snprintf(buf, 8, "\\x%02x", c);
    return buf;
}

/*
 * Read the number line that starts at *pos ("-"? digits "\r\n"). Returns 1 and advances
 * *pos past the line, 0 when the line is not complete yet (p->need set), or an error. A
 * character that cannot be part of the line fails at once, without waiting for the rest.
 */
static int read_num(resp_parser *p, const uint8_t *buf, size_t len, size_t *pos, int64_t *out,
                    const char *what) {
    size_t i = *pos;
    int neg = 0;
    uint64_t v = 0;
    unsigned digits = 0;
    char b[8];
    if (i < len && buf[i] == '-') {
        neg = 1;
        i++;
    }
    for (; i < len && buf[i] != '\r'; i++) {
        if (buf[i] < '0' || buf[i] > '9')
            return fail(p, TIDE_EPROTO, "invalid %s: '%s' is not a digit", what, show(buf[i], b));
        if (++digits > RESP_NUM_DIGITS - 1)
            return fail(p, TIDE_EPROTO, "invalid %s: more than %d digits", what,
                        RESP_NUM_DIGITS - 1);
        v = v * 10 + (uint64_t)(buf[i] - '0'); /* 19 digits cannot wrap 64 bits */
    }
    if (i + 1 >= len) { /* no '\r' yet, or '\r' is the last byte */
        p->need = 1;
        return 0;
    }
    if (buf[i + 1] != '\n') return fail(p, TIDE_EPROTO, "invalid %s: '\\r' without '\\n'", what);
    if (digits == 0) return fail(p, TIDE_EPROTO, "invalid %s: no digits", what);
    /* One spelling per number, so that what parses re-encodes to the same bytes: no
     * leading zeros, no "-0". */
    if (digits > 1 && buf[i - digits] == '0')
        return fail(p, TIDE_EPROTO, "invalid %s: leading zero", what);
    if (neg && v == 0) return fail(p, TIDE_EPROTO, "invalid %s: -0", what);
    if (v > (uint64_t)INT64_MAX) return fail(p, TIDE_EPROTO, "invalid %s: too large", what);
    *out = neg ? -(int64_t)v : (int64_t)v;
    *pos = i + 2;
    return 1;
}

static ssize_t parse_inline(resp_parser *p, const uint8_t *buf, size_t len, resp_cmd *cmd) {
    size_t scan = len < p->lim.max_inline ? len : p->lim.max_inline;
    const uint8_t *nl = memchr(buf, '\n', scan);
    if (!nl) {
        if (len >= p->lim.max_inline)
            return fail(p, TIDE_ELIMIT, "inline command longer than %u bytes", p->lim.max_inline);
        p->need = 1;
        return 0;
    }
    size_t end = (size_t)(nl - buf);
    size_t line = end > 0 && buf[end - 1] == '\r' ? end - 1 : end;
    uint32_t n = 0;
    for (size_t i = 0; i < line;) {
        while (i < line && (buf[i] == ' ' || buf[i] == '\t'))
            i++;
        if (i == line) break;
        if (n == p->lim.max_args)
            return fail(p, TIDE_ELIMIT, "more than %u arguments", p->lim.max_args);
        size_t start = i;
        while (i < line && buf[i] != ' ' && buf[i] != '\t')
            i++;
        if (n < cmd->cap) cmd->argv[n] = (resp_arg){buf + start, i - start};
        n++;
    }
    if (n > cmd->cap) {
        p->need_args = n;
        return 0;
    }
    cmd->argc = n;
    return (ssize_t)(end + 1);
}

ssize_t resp_parse(resp_parser *p, const uint8_t *buf, size_t len, resp_cmd *cmd, int stream) {
    p->need = 0;
    p->need_args = 0;
    cmd->argc = 0;
    cmd->pending = 0;
    if (p->err) return p->err;
    if (len == 0) {
        p->need = 1;
        return 0;
    }
    if (buf[0] != '*') return parse_inline(p, buf, len, cmd);

    size_t pos = 1;
    int64_t n;
    int r = read_num(p, buf, len, &pos, &n, "multibulk length");
    if (r <= 0) return r;
    if (n < 0) return fail(p, TIDE_EPROTO, "invalid multibulk length %lld", (long long)n);
    if ((uint64_t)n > p->lim.max_args)
        return fail(p, TIDE_ELIMIT, "%lld arguments, over the limit of %u", (long long)n,
                    p->lim.max_args);
    if ((uint64_t)n > cmd->cap) {
        p->need_args = (uint32_t)n;
        return 0;
    }
    uint64_t total = 0;
    for (int64_t i = 0; i < n; i++) {
        char b[8];
        if (pos >= len) {
            p->need = 1;
            return 0;
        }
        if (buf[pos] != '$')
            return fail(p, TIDE_EPROTO, "expected '$', got '%s'", show(buf[pos], b));
        pos++;
        int64_t blen;
        if ((r = read_num(p, buf, len, &pos, &blen, "bulk length")) <= 0) return r;
        if (blen < 0) return fail(p, TIDE_EPROTO, "invalid bulk length %lld", (long long)blen);
        uint64_t bl = (uint64_t)blen;
        if (bl > p->lim.max_bulk)
            return fail(p, TIDE_ELIMIT, "bulk of %llu bytes, over the limit of %llu",
                        (unsigned long long)bl, (unsigned long long)p->lim.max_bulk);
        size_t have = len - pos;
        if (stream && i + 1 == n && bl >= p->stream_min && (uint64_t)have < bl + 2) {
            cmd->argv[i] = (resp_arg){NULL, (size_t)bl};
            cmd->argc = (uint32_t)n;
            cmd->pending = 1;
            return (ssize_t)pos;
        }
        if (total + bl > p->lim.max_cmd)
            return fail(p, TIDE_ELIMIT, "command of more than %llu bytes",
                        (unsigned long long)p->lim.max_cmd);
        total += bl;
        if ((uint64_t)have > bl && buf[pos + bl] != '\r')
            return fail(p, TIDE_EPROTO, "bulk of %llu bytes not followed by \\r\\n",
                        (unsigned long long)bl);
        if ((uint64_t)have < bl + 2) {
            p->need = (size_t)(bl + 2 - have);
            return 0;
        }
        if (buf[pos + bl + 1] != '\n')
            return fail(p, TIDE_EPROTO, "bulk of %llu bytes not followed by \\r\\n",
                        (unsigned long long)bl);
        cmd->argv[i] = (resp_arg){buf + pos, (size_t)bl};
        pos += (size_t)bl + 2;
    }
    cmd->argc = (uint32_t)n;
    return (ssize_t)pos;
}

size_t resp_enc_num(uint8_t *buf, char type, int64_t n) {
    char tmp[RESP_NUM_MAX + 1];
    int len = snprintf(tmp, sizeof(tmp), "%c%lld\r\n", type, (long long)n);
    memcpy(buf, tmp, (size_t)len);
    return (size_t)len;
}

size_t resp_enc_line(uint8_t *buf, char type, const char *s, size_t n) {
    buf[0] = (uint8_t)type;
    for (size_t i = 0; i < n; i++)
        buf[1 + i] = s[i] == '\r' || s[i] == '\n' ? ' ' : (uint8_t)s[i];
    buf[n + 1] = '\r';
    buf[n + 2] = '\n';
    return n + 3;
}

int resp_arg_is(const resp_arg *a, const char *word) {
    size_t n = strlen(word);
    if (!a->p || a->len != n) return 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t c = a->p[i];
        if (c >= 'a' && c <= 'z') c = (uint8_t)(c - 'a' + 'A');
        uint8_t w = (uint8_t)word[i];
        if (w >= 'a' && w <= 'z') w = (uint8_t)(w - 'a' + 'A');
        if (c != w) return 0;
    }
    return 1;
}

int resp_arg_int(const resp_arg *a, int64_t *out) {
    size_t i = 0;
    int neg = 0;
    uint64_t v = 0;
    if (!a->p || a->len == 0 || a->len > RESP_NUM_DIGITS) return TIDE_EPROTO;
    if (a->p[0] == '-') {
        neg = 1;
        i = 1;
    }
    if (i == a->len || a->len - i > RESP_NUM_DIGITS - 1) return TIDE_EPROTO;
    for (; i < a->len; i++) {
        if (a->p[i] < '0' || a->p[i] > '9') return TIDE_EPROTO;
        v = v * 10 + (uint64_t)(a->p[i] - '0');
    }
    if (v > (uint64_t)INT64_MAX) return TIDE_EPROTO;
    *out = neg ? -(int64_t)v : (int64_t)v;
    return 0;
}
