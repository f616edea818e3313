/*
 * frame_check.h — the properties every input to the frame decoder must satisfy, shared by
 * the libFuzzer target (tests/fuzz/fuzz_frame.c) and the corpus replay in the unit tests.
 *
 * frame_check(data, size) decodes the frames in data one after another and checks:
 *   - a decoded frame re-encodes, through the public encoders, to exactly its bytes;
 *   - frame_decode_head agrees with frame_decode on the header and the head's length;
 *   - the iterator yields `count` entries whose values tile the value bytes;
 *   - every shorter prefix of the first frame asks for more bytes (never more than the frame
 *     needs) or fails with the same error as the whole input — never anything else;
 *   - errors are sticky and come with a message;
 *   - a decoder with tight limits never accepts more than one with the defaults.
 * It returns NULL, or a description of the first property that failed. Static functions
 * only, so that each includer gets its own copy.
 */
#ifndef TIDE_FRAME_CHECK_H
#define TIDE_FRAME_CHECK_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/frame.h"

static char fc_msg[512];

__attribute__((format(printf, 1, 2))) static const char *fc_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(fc_msg, sizeof(fc_msg), fmt, ap);
    va_end(ap);
    return fc_msg;
}

/* Encode m again through the public encoders into out[0..cap). */
static int fc_reencode(const frame_msg *m, uint8_t *out, size_t cap, size_t *len,
                       uint64_t *data_len) {
    size_t n = m->h.count, k = 0;
    tide_key *keys = calloc(n + 1, sizeof(*keys));
    tide_iov *iov = calloc(n + 1, sizeof(*iov));
    uint64_t *a = calloc(n + 1, sizeof(*a)), *b = calloc(n + 1, sizeof(*b));
    uint64_t *ids = calloc(n + 1, sizeof(*ids)), *offs = calloc(n + 1, sizeof(*offs));
    int32_t *st = calloc(n + 1, sizeof(*st));
    uint8_t *present = calloc(n + 1, 1);
    char(*names)[FRAME_STAT_NAME_MAX + 1] = calloc(n + 1, sizeof(*names));
    const char **np = calloc(n + 1, sizeof(*np));
    tide_event *evs = calloc(n + 1, sizeof(*evs));
    int rc = -1;
    if (!keys || !iov || !a || !b || !ids || !offs || !st || !present || !names || !np || !evs)
        goto out;
    frame_iter it;
    frame_entry e;
    frame_iter_init(&it, m);
    for (; frame_iter_next(&it, &e); k++) {
        if (k >= n) goto out;
        keys[k] = e.key;
        iov[k] = (tide_iov){(void *)e.val, e.vlen};
        st[k] = e.status;
        present[k] = e.present;
        np[k] = names[k];
        evs[k].seq = e.seq;
        evs[k].kind = e.kind;
        evs[k].klen = (uint32_t)(e.key.len <= TIDE_KEY_MAX ? e.key.len : 0);
        if (e.key.len) memcpy(evs[k].key, e.key.data, evs[k].klen);
        ids[k] = e.id;
        offs[k] = e.offset;
        switch (m->h.opcode) {
        case FRAME_OP_GET:
        case FRAME_OP_PIN:
            a[k] = e.cap;
            break;
        case FRAME_OP_STAT | FRAME_OP_REPLY:
            if (e.key.len > FRAME_STAT_NAME_MAX) goto out;
            memcpy(names[k], e.key.data, e.key.len);
            a[k] = e.figure;
            break;
        default:
            a[k] = e.vlen;
            break;
        }
        b[k] = e.sum;
    }
    if (k != n) goto out;
    *data_len = 0;
    unsigned op = m->h.opcode;
    uint64_t id = m->h.req_id;
    if (m->h.status != 0) {
        rc = frame_encode_error(out, cap, len, op, id, m->h.status, m->errmsg, m->errmsg_len);
        goto out;
    }
    switch (op) {
    case FRAME_OP_HELLO:
        rc = frame_encode_hello(out, cap, len, id, &m->hello);
        break;
    case FRAME_OP_HELLO | FRAME_OP_REPLY:
        rc = frame_encode_hello_reply(out, cap, len, id, &m->hello_reply);
        break;
    case FRAME_OP_REPLICA:
        rc = m->h.keys_len == FRAME_REPLICA_HINT_META
                 ? frame_encode_replica_hint(out, cap, len, id, m->replica.flags,
                                             m->replica.timeout_ms, m->replica.member,
                                             m->replica.seq)
                 : frame_encode_replica(out, cap, len, id, m->replica.flags, m->replica.timeout_ms);
        break;
    case FRAME_OP_REPLICA | FRAME_OP_REPLY:
        rc =
            frame_encode_replica_reply(out, cap, len, id, m->replica.fences, m->replica.generation);
        break;
    case FRAME_OP_PUT:
        rc = frame_encode_put(out, cap, len, id, keys, n, iov, NULL, b, data_len);
        break;
    case FRAME_OP_GET:
        rc = frame_encode_get(out, cap, len, id, keys, a, n);
        break;
    case FRAME_OP_EXISTS:
    case FRAME_OP_REMOVE:
    case FRAME_OP_MATCH_PREFIX:
        rc = frame_encode_keys(out, cap, len, op, id, keys, n);
        break;
    case FRAME_OP_STAT:
    case FRAME_OP_PING:
    case FRAME_OP_CLEAR:
    case FRAME_OP_PING | FRAME_OP_REPLY:
    case FRAME_OP_CLEAR | FRAME_OP_REPLY:
        rc = frame_encode_empty(out, cap, len, op, id);
        break;
    case FRAME_OP_PIN:
        rc = frame_encode_pin(out, cap, len, id, keys, a, n);
        break;
    case FRAME_OP_RESERVE:
        rc = frame_encode_reserve(out, cap, len, id, keys, a, n);
        break;
    case FRAME_OP_COMMIT:
        rc = frame_encode_commit(out, cap, len, id, ids, b, n);
        break;
    case FRAME_OP_RELEASE:
        rc = frame_encode_release(out, cap, len, id, ids, st, n);
        break;
    case FRAME_OP_RESERVE | FRAME_OP_REPLY:
        rc = frame_encode_reserve_reply(out, cap, len, id, st, ids, offs, n);
        break;
    case FRAME_OP_PIN | FRAME_OP_REPLY:
        rc = frame_encode_pin_reply(out, cap, len, id, st, ids, offs, a, b, n);
        break;
    case FRAME_OP_COMMIT | FRAME_OP_REPLY:
    case FRAME_OP_RELEASE | FRAME_OP_REPLY:
    case FRAME_OP_PUT | FRAME_OP_REPLY:
    case FRAME_OP_REMOVE | FRAME_OP_REPLY:
        rc = frame_encode_status_reply(out, cap, len, op, id, st, n);
        break;
    case FRAME_OP_GET | FRAME_OP_REPLY:
        rc = frame_encode_get_reply(out, cap, len, id, st, a, b, n, data_len);
        break;
    case FRAME_OP_EXISTS | FRAME_OP_REPLY:
        rc = frame_encode_exists_reply(out, cap, len, id, present, n);
        break;
    case FRAME_OP_MATCH_PREFIX | FRAME_OP_REPLY:
        rc = frame_encode_match_reply(out, cap, len, id, m->matched);
        break;
    case FRAME_OP_STAT | FRAME_OP_REPLY:
        rc = frame_encode_stat_reply(out, cap, len, id, np, a, n);
        break;
    case FRAME_OP_EVENTS:
        rc = frame_encode_events(out, cap, len, id, m->ev_from, m->ev_max);
        break;
    case FRAME_OP_EVENTS | FRAME_OP_REPLY:
        rc = frame_encode_events_reply(out, cap, len, id, m->ev_next, m->ev_lost, evs, n);
        break;
    default:
        rc = -2;
        break;
    }
out:
    free(keys);
    free(iov);
    free(a);
    free(b);
    free(ids);
    free(offs);
    free(st);
    free(present);
    free(names);
    free(evs);
    free(np);
    return rc;
}

static int fc_hdr_eq(const frame_header *a, const frame_header *b) {
    return a->version == b->version && a->opcode == b->opcode && a->flags == b->flags &&
           a->req_id == b->req_id && a->count == b->count && a->status == b->status &&
           a->keys_len == b->keys_len && a->body_len == b->body_len;
}

/* Check one decoded frame f (n bytes at p). */
static const char *fc_frame(const frame_msg *f, const uint8_t *p, size_t n) {
    size_t head = FRAME_HDR_SIZE + f->h.keys_len;
    if (n != head + f->data_len) return fc_fail("length %zu != head %zu + data", n, head);
    if (f->data != p + head || f->keysec != p + FRAME_HDR_SIZE)
        return fc_fail("keysec/data pointers do not point into the input");

    /* The entries tile the value bytes, in order. */
    frame_iter it;
    frame_entry e;
    uint64_t off = 0, k = 0;
    frame_iter_init(&it, f);
    while (frame_iter_next(&it, &e)) {
        k++;
        if (e.val) {
            if (e.voff != off || e.val != f->data + off)
                return fc_fail("entry %llu: bad voff", (unsigned long long)k);
            off += e.vlen;
        }
        if (e.key.len > TIDE_KEY_MAX) return fc_fail("entry key of %zu bytes", e.key.len);
    }
    if (k != f->h.count)
        return fc_fail("iterator gave %llu of %u entries", (unsigned long long)k, f->h.count);
    if (off != f->data_len)
        return fc_fail("values tile %llu of %llu value bytes", (unsigned long long)off,
                       (unsigned long long)f->data_len);

    /* The head alone decodes to the same thing. */
    frame_decoder d;
    frame_msg h;
    frame_decoder_init(&d, NULL);
    d.lim.max_frame = FRAME_MAX_FRAME_CAP;
    d.lim.max_value = UINT64_MAX;
    d.lim.max_keys = TIDE_BATCH_MAX;
    ssize_t r = frame_decode_head(&d, p, head, &h);
    if (r != (ssize_t)head || !fc_hdr_eq(&h.h, &f->h) || h.data != NULL)
        return fc_fail("decode_head returned %zd (want %zu): %s", r, head, d.errstr);

    /* Re-encoding gives the same bytes. */
    uint8_t *out = malloc(head);
    size_t len = 0;
    uint64_t dl = 0;
    int rc = out ? fc_reencode(f, out, head, &len, &dl) : -1;
    const char *bad = NULL;
    if (rc != 0)
        bad = fc_fail("%s re-encode failed: %d", frame_op_name(f->h.opcode), rc);
    else if (len != head)
        bad = fc_fail("re-encoded head of %zu bytes, want %zu", len, head);
    else if (memcmp(out, p, head))
        bad = fc_fail("re-encoded bytes differ");
    else if (dl != f->data_len)
        bad = fc_fail("re-encoded data_len differs");
    free(out);
    return bad;
}

/* Every prefix of data shorter than `end` must ask for more, or fail as the whole did. */
static const char *fc_prefixes(const uint8_t *data, size_t size, ssize_t whole, int head,
                               size_t end) {
    size_t limit = size < 4096 ? size : 4096;
    for (size_t l = 0; l < limit && l < end; l++) {
        frame_decoder d;
        frame_msg m;
        frame_decoder_init(&d, NULL);
        ssize_t r = head ? frame_decode_head(&d, data, l, &m) : frame_decode(&d, data, l, &m);
        if (r == 0) {
            if (d.need == 0 || l + d.need > end)
                return fc_fail("prefix %zu: need %zu but the frame ends at %zu", l, d.need, end);
        } else if (r < 0) {
            if (r != whole)
                return fc_fail("prefix %zu fails with %zd, the whole with %zd", l, r, whole);
        } else {
            return fc_fail("prefix %zu decoded a frame of %zd bytes", l, r);
        }
    }
    return NULL;
}

static const char *frame_check(const uint8_t *data, size_t size) {
    frame_decoder d;
    frame_msg m;
    frame_decoder_init(&d, NULL);

    /* The first frame, whole and as a head, against all its prefixes. */
    for (int head = 0; head < 2; head++) {
        ssize_t r = head ? frame_decode_head(&d, data, size, &m) : frame_decode(&d, data, size, &m);
        size_t end = r > 0 ? (size_t)r : r == 0 ? size + d.need : (size_t)-1;
        const char *bad = fc_prefixes(data, size, r, head, end);
        if (bad) return bad;
        frame_decoder_reset(&d);
    }

    /* All the frames, one after another. */
    size_t off = 0;
    for (;;) {
        ssize_t r = frame_decode(&d, data + off, size - off, &m);
        if (r > 0) {
            const char *bad = fc_frame(&m, data + off, (size_t)r);
            if (bad) return bad;
            off += (size_t)r;
            continue;
        }
        if (r == 0) {
            if (d.need == 0) return fc_fail("need 0 after a partial frame");
            break;
        }
        if (d.errstr[0] == '\0') return fc_fail("error %zd without a message", r);
        if (frame_decode(&d, data + off, size - off, &m) != r) return fc_fail("not sticky");
        break;
    }

    /* Tight limits accept nothing the defaults refuse, and read the same frame length. */
    frame_limits tight = {4, 64, 1024};
    frame_decoder t;
    frame_decoder_init(&t, &tight);
    frame_decoder_reset(&d);
    ssize_t rt = frame_decode(&t, data, size, &m);
    ssize_t rd = frame_decode(&d, data, size, &m);
    if (rt > 0 && rt != rd) return fc_fail("tight limits read %zd, defaults %zd", rt, rd);
    return NULL;
}

#endif
