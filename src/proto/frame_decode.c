/*
 * frame_decode.c — bytes to frames: the header checks, the key-section parser and the
 * entry iterator.
 *
 * Invariants: nothing here reads outside buf[0..len); every length that comes off the wire
 * is compared with the bytes present and with the limits before it is used; and a frame is
 * accepted only in canonical form (frame.h), which lets the iterator walk an accepted key
 * section without checking it again.
 */
#include "frame.h"

#include <stdarg.h>
#include <stdio.h>

#include "common/checksum.h"

/* The kinds of key section (see the layout in frame.h). */
enum kind {
    K_EMPTY,
    K_HELLO,
    K_HELLO_REPLY,
    K_PUT,
    K_GET,
    K_KEYS,
    K_STATUS,
    K_GET_REPLY,
    K_EXISTS_REPLY,
    K_MATCH_REPLY,
    K_STAT_REPLY,
    K_ERROR,
    K_RESERVE,
    K_COMMIT,
    K_RELEASE,
    K_RESERVE_REPLY,
    K_PIN_REPLY,
    K_REPLICA,
    K_REPLICA_REPLY,
    K_EVENTS,
    K_EVENTS_REPLY,
};

/* A key section holds fmin..fmax fixed bytes plus count entries of emin..emax bytes each
 * (emax 0: count must be 0); `data` says whether value bytes may follow it. */
typedef struct shape {
    enum kind kind;
    uint32_t fmin, fmax;
    uint32_t emin, emax;
    int data;
} shape;

#define KEY_ENTRY_MIN 3u                  /* u16 klen + 1 byte */
#define KEY_ENTRY_MAX (2u + TIDE_KEY_MAX) /* u16 klen + TIDE_KEY_MAX bytes */
#define STAT_ENTRY_MIN 10u                /* u8 name_len + 1 byte + u64 */
#define STAT_ENTRY_MAX (9u + FRAME_STAT_NAME_MAX)
#define GET_REPLY_ENTRY 20u     /* i32 status + u64 vlen + u64 sum */
#define COMMIT_ENTRY 16u        /* u64 id + u64 sum */
#define RELEASE_ENTRY 12u       /* u64 id + i32 outcome */
#define RESERVE_REPLY_ENTRY 20u /* i32 status + u64 id + u64 offset */
#define PIN_REPLY_ENTRY 36u     /* i32 status + u64 id, offset, vlen, sum */

/* How parse_keys treats the u64 after each key. */
enum key_extra { X_NONE, X_PUT_VLEN, X_RESERVE_VLEN };

static shape shape_of(unsigned op, int32_t status) {
    if (status != 0) return (shape){K_ERROR, 0, FRAME_ERRMSG_MAX, 0, 0, 0};
    switch (op) {
    case FRAME_OP_HELLO:
        return (shape){K_HELLO, FRAME_HELLO_KEYS, FRAME_HELLO_KEYS + FRAME_TOKEN_MAX, 0, 0, 0};
    case FRAME_OP_HELLO | FRAME_OP_REPLY:
        return (shape){K_HELLO_REPLY, FRAME_HELLO_REPLY_KEYS, FRAME_HELLO_REPLY_KEYS, 0, 0, 0};
    case FRAME_OP_PUT:
        return (shape){K_PUT, 0, 0, KEY_ENTRY_MIN + 16, KEY_ENTRY_MAX + 16, 1};
    case FRAME_OP_GET:
    case FRAME_OP_PIN:
        return (shape){K_GET, 0, 0, KEY_ENTRY_MIN + 8, KEY_ENTRY_MAX + 8, 0};
    case FRAME_OP_RESERVE:
        return (shape){K_RESERVE, 0, 0, KEY_ENTRY_MIN + 8, KEY_ENTRY_MAX + 8, 0};
    case FRAME_OP_COMMIT:
        return (shape){K_COMMIT, 0, 0, COMMIT_ENTRY, COMMIT_ENTRY, 0};
    case FRAME_OP_RELEASE:
        return (shape){K_RELEASE, 0, 0, RELEASE_ENTRY, RELEASE_ENTRY, 0};
    case FRAME_OP_RESERVE | FRAME_OP_REPLY:
        return (shape){K_RESERVE_REPLY, 0, 0, RESERVE_REPLY_ENTRY, RESERVE_REPLY_ENTRY, 0};
    case FRAME_OP_PIN | FRAME_OP_REPLY:
        return (shape){K_PIN_REPLY, 0, 0, PIN_REPLY_ENTRY, PIN_REPLY_ENTRY, 0};
    case FRAME_OP_EXISTS:
    case FRAME_OP_REMOVE:
    case FRAME_OP_MATCH_PREFIX:
        return (shape){K_KEYS, 0, 0, KEY_ENTRY_MIN, KEY_ENTRY_MAX, 0};
    case FRAME_OP_PUT | FRAME_OP_REPLY:
    case FRAME_OP_REMOVE | FRAME_OP_REPLY:
    case FRAME_OP_COMMIT | FRAME_OP_REPLY:
    case FRAME_OP_RELEASE | FRAME_OP_REPLY:
        return (shape){K_STATUS, 0, 0, 4, 4, 0};
    case FRAME_OP_GET | FRAME_OP_REPLY:
        return (shape){K_GET_REPLY, 0, 0, GET_REPLY_ENTRY, GET_REPLY_ENTRY, 1};
    case FRAME_OP_EXISTS | FRAME_OP_REPLY:
        return (shape){K_EXISTS_REPLY, 0, 0, 1, 1, 0};
    case FRAME_OP_MATCH_PREFIX | FRAME_OP_REPLY:
        return (shape){K_MATCH_REPLY, 4, 4, 0, 0, 0};
    case FRAME_OP_STAT | FRAME_OP_REPLY:
        return (shape){K_STAT_REPLY, 0, 0, STAT_ENTRY_MIN, STAT_ENTRY_MAX, 0};
    case FRAME_OP_REPLICA:
        return (shape){K_REPLICA, FRAME_REPLICA_KEYS, FRAME_REPLICA_HINT_META, 0, 0, 0};
    case FRAME_OP_REPLICA | FRAME_OP_REPLY:
        return (shape){K_REPLICA_REPLY, FRAME_REPLICA_KEYS, FRAME_REPLICA_KEYS, 0, 0, 0};
    case FRAME_OP_EVENTS:
        return (shape){K_EVENTS, FRAME_EVENTS_KEYS, FRAME_EVENTS_KEYS, 0, 0, 0};
    case FRAME_OP_EVENTS | FRAME_OP_REPLY:
        return (shape){K_EVENTS_REPLY,
                       FRAME_EVENTS_KEYS,
                       FRAME_EVENTS_KEYS,
                       FRAME_EVENT_ENTRY_MIN,
                       FRAME_EVENT_ENTRY_MIN + TIDE_KEY_MAX,
                       0};
    case FRAME_OP_ERROR: /* only valid with a status, which returned above */
    default:
        return (shape){K_EMPTY, 0, 0, 0, 0, 0};
    }
}

__attribute__((format(printf, 3, 4))) static int fail(frame_decoder *d, int code, const char *fmt,
                                                      ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->errstr, sizeof(d->errstr), fmt, ap);
    va_end(ap);
    d->err = code;
    return code;
}

int frame_decoder_init(frame_decoder *d, const frame_limits *lim) {
    memset(d, 0, sizeof(*d));
    if (lim)
        d->lim = *lim;
    else
        frame_limits_default(&d->lim);
    int rc = frame_limits_check(&d->lim, d->errstr, sizeof(d->errstr));
    if (rc) {
        frame_limits_default(&d->lim);
        d->err = rc;
    }
    return rc;
}

void frame_decoder_reset(frame_decoder *d) {
    d->err = 0;
    d->need = 0;
    d->errstr[0] = '\0';
}

/* Check whatever part of the magic and version the first len bytes hold, so that a peer
 * speaking something else is refused on its first bytes. */
static int check_prefix(frame_decoder *d, const uint8_t *p, size_t len) {
    static const uint8_t magic[4] = {'T', 'I', 'D', 'E'};
    for (size_t i = 0; i < len && i < 4; i++)
        if (p[i] != magic[i])
            return fail(d, TIDE_EPROTO, "bad magic: byte %zu is 0x%02x, want 0x%02x ('%c')", i,
                        p[i], magic[i], magic[i]);
    if (len > 4 && p[4] != FRAME_VERSION)
        return fail(d, TIDE_EUNSUPPORTED, "frame version %u, this side speaks version %d", p[4],
                    FRAME_VERSION);
    return 0;
}

/* Decode and check a complete header, everything that can be judged before the body. */
static int check_header(frame_decoder *d, const uint8_t *p, frame_header *h, shape *sh) {
    int rc = check_prefix(d, p, FRAME_HDR_SIZE);
    if (rc) return rc;
    h->version = p[4];
    h->opcode = p[5];
    h->flags = le_rd16(p + 6);
    h->req_id = le_rd64(p + 8);
    h->count = le_rd32(p + 16);
    h->status = (int32_t)le_rd32(p + 20);
    h->keys_len = le_rd32(p + 24);
    uint32_t reserved = le_rd32(p + 28);
    h->body_len = le_rd64(p + 32);
    const char *op = frame_op_name(h->opcode);
    const frame_limits *lim = &d->lim;

    if (!frame_op_valid(h->opcode)) return fail(d, TIDE_EPROTO, "unknown opcode 0x%02x", h->opcode);
    if (h->flags)
        return fail(d, TIDE_EPROTO, "%s: unknown flags 0x%04x (version 1 defines none)", op,
                    h->flags);
    if (reserved)
        return fail(d, TIDE_EPROTO, "%s: reserved header field is 0x%08x, must be 0", op, reserved);
    if (!(h->opcode & FRAME_OP_REPLY) && h->status != 0)
        return fail(d, TIDE_EPROTO, "%s request carries status %d, must be 0", op, h->status);
    if (h->status > 0)
        return fail(d, TIDE_EPROTO, "%s: positive status %d (statuses are 0 or negative)", op,
                    h->status);
    if (h->opcode == FRAME_OP_ERROR && h->status == 0)
        return fail(d, TIDE_EPROTO, "ERROR reply with status 0");
    if (h->count > lim->max_keys)
        return fail(d, TIDE_ELIMIT, "%s: frame has %u entries, limit max_keys=%u", op, h->count,
                    lim->max_keys);
    if (h->body_len > lim->max_frame - FRAME_HDR_SIZE)
        return fail(d, TIDE_ELIMIT, "%s: frame of %d+%llu bytes, limit max_frame=%llu", op,
                    FRAME_HDR_SIZE, (unsigned long long)h->body_len,
                    (unsigned long long)lim->max_frame);
    if (h->keys_len > h->body_len)
        return fail(d, TIDE_EPROTO, "%s: key section of %u bytes overruns the body of %llu", op,
                    h->keys_len, (unsigned long long)h->body_len);

    *sh = shape_of(h->opcode, h->status);
    if (sh->emax == 0 && h->count != 0)
        return fail(d, TIDE_EPROTO, "%s%s carries no entries, header count is %u", op,
                    sh->kind == K_ERROR ? " error reply" : "", h->count);
    uint64_t lo = sh->fmin + (uint64_t)h->count * sh->emin;
    uint64_t hi = sh->fmax + (uint64_t)h->count * sh->emax;
    if (h->keys_len < lo || h->keys_len > hi)
        return fail(d, TIDE_EPROTO,
                    "%s: %u entries need %llu..%llu bytes of key section, header says %u", op,
                    h->count, (unsigned long long)lo, (unsigned long long)hi, h->keys_len);
    uint64_t data = h->body_len - h->keys_len;
    if (!sh->data && data)
        return fail(d, TIDE_EPROTO, "%s carries no value bytes, header says %llu", op,
                    (unsigned long long)data);
    if (sh->kind == K_PUT && data < h->count)
        return fail(d, TIDE_EPROTO, "%s: %u values cannot fit in %llu value bytes", op, h->count,
                    (unsigned long long)data);
    if (sh->data && data && h->count == 0)
        return fail(d, TIDE_EPROTO, "%s: %llu value bytes but no entries", op,
                    (unsigned long long)data);
    if (sh->data && h->count && lim->max_value <= UINT64_MAX / h->count &&
        data > lim->max_value * h->count)
        return fail(d, TIDE_EVALBIG, "%s: %llu value bytes for %u entries, limit max_value=%llu",
                    op, (unsigned long long)data, h->count, (unsigned long long)lim->max_value);
    return 0;
}

/* Keys of PUT, GET, EXISTS, REMOVE, MATCH_PREFIX, RESERVE, PIN: `extra` bytes follow each
 * key; `mode` says whether they start with a value length to check. A RESERVE's length is
 * not held to max_value here: no value bytes follow it, and the store answers a value too
 * large for it per key. */
static int parse_keys(frame_decoder *d, frame_msg *m, size_t extra, enum key_extra mode) {
    const int put = mode == X_PUT_VLEN;
    const uint8_t *p = m->keysec, *end = m->keysec + m->h.keys_len;
    const char *op = frame_op_name(m->h.opcode);
    uint64_t total = 0;
    for (uint32_t i = 0; i < m->h.count; i++) {
        if (end - p < 2)
            return fail(d, TIDE_EPROTO, "%s: key section ends inside entry %u of %u", op, i,
                        m->h.count);
        unsigned klen = le_rd16(p);
        p += 2;
        if (klen == 0) return fail(d, TIDE_EKEYEMPTY, "%s: key %u is empty", op, i);
        if (klen > TIDE_KEY_MAX)
            return fail(d, TIDE_EKEYLONG, "%s: key %u is %u bytes, limit TIDE_KEY_MAX=%d", op, i,
                        klen, TIDE_KEY_MAX);
        if ((size_t)(end - p) < klen + extra)
            return fail(d, TIDE_EPROTO, "%s: key section ends inside entry %u of %u", op, i,
                        m->h.count);
        p += klen;
        if (mode == X_RESERVE_VLEN && le_rd64(p) == 0)
            return fail(d, TIDE_EVALEMPTY, "%s: value of key %u is empty", op, i);
        if (put) {
            uint64_t vlen = le_rd64(p);
            if (vlen == 0) return fail(d, TIDE_EVALEMPTY, "%s: value of key %u is empty", op, i);
            if (vlen > d->lim.max_value)
                return fail(d, TIDE_EVALBIG,
                            "%s: value of key %u is %llu bytes, limit "
                            "max_value=%llu",
                            op, i, (unsigned long long)vlen, (unsigned long long)d->lim.max_value);
            if (vlen > m->data_len - total)
                return fail(d, TIDE_EPROTO,
                            "%s: values through key %u add up to more than the "
                            "%llu value bytes in the header",
                            op, i, (unsigned long long)m->data_len);
            total += vlen;
        }
        p += extra;
    }
    if (p != end)
        return fail(d, TIDE_EPROTO, "%s: %zu bytes left over after %u entries of the key section",
                    op, (size_t)(end - p), m->h.count);
    if (put && total != m->data_len)
        return fail(d, TIDE_EPROTO, "%s: values add up to %llu bytes, header says %llu", op,
                    (unsigned long long)total, (unsigned long long)m->data_len);
    return 0;
}

static int parse_get_reply(frame_decoder *d, frame_msg *m) {
    const uint8_t *p = m->keysec;
    uint64_t total = 0;
    for (uint32_t i = 0; i < m->h.count; i++, p += GET_REPLY_ENTRY) {
        int32_t st = (int32_t)le_rd32(p);
        uint64_t vlen = le_rd64(p + 4), sum = le_rd64(p + 12);
        if (st > 0)
            return fail(d, TIDE_EPROTO, "GET_REPLY: entry %u has positive status %d", i, st);
        if (st == 0) {
            if (vlen == 0)
                return fail(d, TIDE_EPROTO, "GET_REPLY: entry %u found a value of 0 bytes", i);
            if (vlen > d->lim.max_value)
                return fail(d, TIDE_EVALBIG,
                            "GET_REPLY: value %u is %llu bytes, limit "
                            "max_value=%llu",
                            i, (unsigned long long)vlen, (unsigned long long)d->lim.max_value);
            if (vlen > m->data_len - total)
                return fail(d, TIDE_EPROTO,
                            "GET_REPLY: values through entry %u add up to more "
                            "than the %llu value bytes in the header",
                            i, (unsigned long long)m->data_len);
            total += vlen;
        } else if (sum != 0 || (vlen != 0 && st != TIDE_EBUFSMALL)) {
            return fail(d, TIDE_EPROTO,
                        "GET_REPLY: entry %u with status %d carries vlen %llu "
                        "and sum 0x%llx, must be 0",
                        i, st, (unsigned long long)vlen, (unsigned long long)sum);
        }
    }
    if (total != m->data_len)
        return fail(d, TIDE_EPROTO, "GET_REPLY: values add up to %llu bytes, header says %llu",
                    (unsigned long long)total, (unsigned long long)m->data_len);
    return 0;
}

/* The fixed-size entries of the shared-pool frames, held to their canonical form. */
static int parse_leases(frame_decoder *d, frame_msg *m, enum kind kind) {
    const char *op = frame_op_name(m->h.opcode);
    const uint32_t esize = kind == K_COMMIT      ? COMMIT_ENTRY
                           : kind == K_RELEASE   ? RELEASE_ENTRY
                           : kind == K_PIN_REPLY ? PIN_REPLY_ENTRY
                                                 : RESERVE_REPLY_ENTRY;
    for (uint32_t i = 0; i < m->h.count; i++) {
        const uint8_t *p = m->keysec + (size_t)i * esize;
        if (kind == K_COMMIT || kind == K_RELEASE) {
            if (le_rd64(p) == 0) return fail(d, TIDE_EPROTO, "%s: entry %u has id 0", op, i);
            int32_t out = kind == K_RELEASE ? (int32_t)le_rd32(p + 8) : 0;
            if (out != 0 && out != TIDE_ECHECKSUM)
                return fail(d, TIDE_EPROTO, "%s: entry %u has outcome %d (0 or %d)", op, i, out,
                            TIDE_ECHECKSUM);
            continue;
        }
        int32_t st = (int32_t)le_rd32(p);
        uint64_t id = le_rd64(p + 4), off = le_rd64(p + 12);
        if (st > 0) return fail(d, TIDE_EPROTO, "%s: entry %u has positive status %d", op, i, st);
        if (kind == K_RESERVE_REPLY) {
            if ((st != 0 || id == 0) && off != 0)
                return fail(d, TIDE_EPROTO,
                            "%s: entry %u without a reservation has offset "
                            "%llu, must be 0",
                            op, i, (unsigned long long)off);
            if (st != 0 && id != 0)
                return fail(d, TIDE_EPROTO, "%s: entry %u with status %d has an id", op, i, st);
            continue;
        }
        uint64_t vlen = le_rd64(p + 20), sum = le_rd64(p + 28);
        if (st == 0 && (id == 0 || vlen == 0))
            return fail(d, TIDE_EPROTO, "%s: entry %u pinned with id %llu and vlen %llu", op, i,
                        (unsigned long long)id, (unsigned long long)vlen);
        if (st != 0 && (id || off || sum || (vlen && st != TIDE_EBUFSMALL)))
            return fail(d, TIDE_EPROTO,
                        "%s: entry %u with status %d carries fields that must "
                        "be 0",
                        op, i, st);
    }
    return 0;
}

static int stat_name_char(uint8_t c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.';
}

static int parse_stat_reply(frame_decoder *d, frame_msg *m) {
    const uint8_t *p = m->keysec, *end = m->keysec + m->h.keys_len;
    for (uint32_t i = 0; i < m->h.count; i++) {
        if (end - p < 1)
            return fail(d, TIDE_EPROTO, "STAT_REPLY: key section ends inside entry %u of %u", i,
                        m->h.count);
        unsigned nl = *p++;
        if (nl < 1 || nl > FRAME_STAT_NAME_MAX)
            return fail(d, TIDE_EPROTO, "STAT_REPLY: name %u is %u bytes, must be 1..%d", i, nl,
                        FRAME_STAT_NAME_MAX);
        if ((size_t)(end - p) < nl + 8u)
            return fail(d, TIDE_EPROTO, "STAT_REPLY: key section ends inside entry %u of %u", i,
                        m->h.count);
        for (unsigned j = 0; j < nl; j++)
            if (!stat_name_char(p[j]))
                return fail(d, TIDE_EPROTO, "STAT_REPLY: name %u has byte 0x%02x", i, p[j]);
        p += nl + 8;
    }
    if (p != end)
        return fail(d, TIDE_EPROTO, "STAT_REPLY: %zu bytes left over after %u entries",
                    (size_t)(end - p), m->h.count);
    return 0;
}

/* EVENTS reply: next and lost, then entries held to their canonical form. */
static int parse_events_reply(frame_decoder *d, frame_msg *m) {
    const uint8_t *p = m->keysec + FRAME_EVENTS_KEYS, *end = m->keysec + m->h.keys_len;
    m->ev_next = le_rd64(m->keysec);
    m->ev_lost = le_rd64(m->keysec + 8);
    for (uint32_t i = 0; i < m->h.count; i++) {
        if ((size_t)(end - p) < FRAME_EVENT_ENTRY_MIN)
            return fail(d, TIDE_EPROTO, "EVENTS_REPLY: key section ends inside entry %u of %u", i,
                        m->h.count);
        unsigned kind = p[8], klen = le_rd16(p + 9);
        if (kind < TIDE_DEPARTURE_REMOVED || kind > TIDE_DEPARTURE_CLEARED)
            return fail(d, TIDE_EPROTO, "EVENTS_REPLY: entry %u has kind %u (1..4)", i, kind);
        if ((klen == 0) != (kind == TIDE_DEPARTURE_CLEARED) || klen > TIDE_KEY_MAX)
            return fail(d, TIDE_EPROTO, "EVENTS_REPLY: entry %u of kind %u has a key of %u bytes",
                        i, kind, klen);
        p += FRAME_EVENT_ENTRY_MIN;
        if ((size_t)(end - p) < klen)
            return fail(d, TIDE_EPROTO, "EVENTS_REPLY: key section ends inside entry %u of %u", i,
                        m->h.count);
        p += klen;
    }
    if (p != end)
        return fail(d, TIDE_EPROTO, "EVENTS_REPLY: %zu bytes left over after %u entries",
                    (size_t)(end - p), m->h.count);
    return 0;
}

/* Parse the key section of m (whose header check_header accepted) and fill the fields of
 * the fixed-form bodies. */
static int parse_meta(frame_decoder *d, frame_msg *m, const shape *sh) {
    const uint8_t *p = m->keysec;
    const uint32_t n = m->h.count;
    switch (sh->kind) {
    case K_EMPTY:
        return 0;
    case K_PUT:
        return parse_keys(d, m, 16, X_PUT_VLEN);
    case K_GET:
        return parse_keys(d, m, 8, X_NONE);
    case K_KEYS:
        return parse_keys(d, m, 0, X_NONE);
    case K_RESERVE:
        return parse_keys(d, m, 8, X_RESERVE_VLEN);
    case K_COMMIT:
    case K_RELEASE:
    case K_RESERVE_REPLY:
    case K_PIN_REPLY:
        return parse_leases(d, m, sh->kind);
    case K_GET_REPLY:
        return parse_get_reply(d, m);
    case K_STAT_REPLY:
        return parse_stat_reply(d, m);
    case K_STATUS:
        for (uint32_t i = 0; i < n; i++) {
            int32_t st = (int32_t)le_rd32(p + 4 * (size_t)i);
            if (st > 0)
                return fail(d, TIDE_EPROTO, "%s: entry %u has positive status %d",
                            frame_op_name(m->h.opcode), i, st);
        }
        return 0;
    case K_EXISTS_REPLY:
        for (uint32_t i = 0; i < n; i++)
            if (p[i] > 1)
                return fail(d, TIDE_EPROTO, "EXISTS_REPLY: entry %u is %u, must be 0 or 1", i,
                            p[i]);
        return 0;
    case K_MATCH_REPLY:
        m->matched = le_rd32(p);
        return 0;
    case K_EVENTS:
        m->ev_from = le_rd64(p);
        m->ev_max = le_rd32(p + 8);
        if (le_rd32(p + 12)) return fail(d, TIDE_EPROTO, "EVENTS: reserved field is not 0");
        if (m->ev_max < 1 || m->ev_max > d->lim.max_keys)
            return fail(d, TIDE_EPROTO, "EVENTS: max %u events, must be 1..%u", m->ev_max,
                        d->lim.max_keys);
        return 0;
    case K_EVENTS_REPLY:
        return parse_events_reply(d, m);
    case K_ERROR:
        m->errmsg = (const char *)p;
        m->errmsg_len = m->h.keys_len;
        return 0;
    case K_HELLO: {
        frame_hello *h = &m->hello;
        h->min_version = le_rd16(p);
        h->max_version = le_rd16(p + 2);
        uint32_t reserved = le_rd32(p + 4);
        h->features = le_rd64(p + 8);
        h->token_len = le_rd16(p + 16);
        h->token = h->token_len ? p + FRAME_HELLO_KEYS : NULL;
        if (h->min_version == 0 || h->min_version > h->max_version)
            return fail(d, TIDE_EPROTO, "HELLO: version range %u..%u", h->min_version,
                        h->max_version);
        if (reserved) return fail(d, TIDE_EPROTO, "HELLO: reserved field is 0x%08x", reserved);
        if (h->token_len != m->h.keys_len - FRAME_HELLO_KEYS)
            return fail(d, TIDE_EPROTO, "HELLO: token of %u bytes in a key section of %u",
                        h->token_len, m->h.keys_len);
        return 0;
    }
    case K_REPLICA: {
        frame_replica *r = &m->replica;
        r->flags = le_rd32(p);
        r->timeout_ms = le_rd32(p + 4);
        uint64_t reserved = le_rd64(p + 8);
        r->member = r->seq = 0;
        if (r->timeout_ms == 0) return fail(d, TIDE_EPROTO, "REPLICA: timeout_ms is 0");
        if (m->h.keys_len == FRAME_REPLICA_HINT_META) { /* a hint operation */
            r->member = reserved;
            r->seq = le_rd64(p + 16);
            if (r->flags != FRAME_REPLICA_HINT && r->flags != FRAME_REPLICA_ASK &&
                r->flags != FRAME_REPLICA_TOLD)
                return fail(d, TIDE_EPROTO,
                            "REPLICA hint: flags 0x%08x are not one of HINT, ASK, TOLD", r->flags);
            if (r->flags != FRAME_REPLICA_TOLD && r->seq)
                return fail(d, TIDE_EPROTO, "REPLICA hint: seq %llu given without TOLD",
                            (unsigned long long)r->seq);
            return 0;
        }
        if (m->h.keys_len != FRAME_REPLICA_KEYS)
            return fail(d, TIDE_EPROTO, "REPLICA: key section of %u bytes (16 or 24)",
                        m->h.keys_len);
        if (r->flags & ~FRAME_REPLICA_MISSED)
            return fail(d, TIDE_EPROTO, "REPLICA: unknown flags 0x%08x", r->flags);
        if (reserved)
            return fail(d, TIDE_EPROTO, "REPLICA: reserved field is 0x%016llx",
                        (unsigned long long)reserved);
        return 0;
    }
    case K_REPLICA_REPLY:
        m->replica.fences = le_rd64(p);
        m->replica.generation = le_rd64(p + 8);
        return 0;
    case K_HELLO_REPLY: {
        frame_hello_reply *r = &m->hello_reply;
        r->version = le_rd16(p);
        r->ucx_port = le_rd16(p + 2);
        r->max_keys = le_rd32(p + 4);
        r->features = le_rd64(p + 8);
        r->max_value = le_rd64(p + 16);
        r->max_frame = le_rd64(p + 24);
        if (r->version == 0) return fail(d, TIDE_EPROTO, "HELLO_REPLY: version 0");
        if (!(r->features & FRAME_FEATURE_UCX) != !r->ucx_port)
            return fail(d, TIDE_EPROTO, "HELLO_REPLY: UCX port %u with features 0x%llx",
                        r->ucx_port, (unsigned long long)r->features);
        return 0;
    }
    }
    return fail(d, TIDE_EPROTO, "internal: key section of unknown kind");
}

/* The common part of both decode calls: header, then (if `whole`, once the frame is all
 * there; else once the head is) the key section. */
static ssize_t decode(frame_decoder *d, const void *buf, size_t len, frame_msg *m, int whole) {
    const uint8_t *p = buf;
    if (d->err) return d->err;
    d->need = 0;
    if (len < FRAME_HDR_SIZE) {
        int rc = check_prefix(d, p, len);
        if (rc) return rc;
        d->need = FRAME_HDR_SIZE - len;
        return 0;
    }
    frame_header h;
    shape sh = {K_EMPTY, 0, 0, 0, 0, 0};
    int rc = check_header(d, p, &h, &sh);
    if (rc) return rc;
    size_t head = FRAME_HDR_SIZE + (size_t)h.keys_len;
    size_t end = whole ? FRAME_HDR_SIZE + (size_t)h.body_len : head;
    if (len < end) {
        d->need = end - len;
        return 0;
    }
    memset(m, 0, sizeof(*m));
    m->h = h;
    m->keysec = p + FRAME_HDR_SIZE;
    m->data_len = h.body_len - h.keys_len;
    rc = parse_meta(d, m, &sh);
    if (rc) return rc;
    if (whole) m->data = p + head;
    return (ssize_t)end;
}

ssize_t frame_decode(frame_decoder *d, const void *buf, size_t len, frame_msg *m) {
    return decode(d, buf, len, m, 1);
}

ssize_t frame_decode_head(frame_decoder *d, const void *buf, size_t len, frame_msg *m) {
    return decode(d, buf, len, m, 0);
}

void frame_iter_init(frame_iter *it, const frame_msg *m) {
    it->m = m;
    it->p = m->keysec;
    if (shape_of(m->h.opcode, m->h.status).kind == K_EVENTS_REPLY) it->p += FRAME_EVENTS_KEYS;
    it->i = 0;
    it->voff = 0;
}

int frame_iter_next(frame_iter *it, frame_entry *e) {
    const frame_msg *m = it->m;
    if (it->i >= m->h.count) return 0;
    memset(e, 0, sizeof(*e));
    const uint8_t *p = it->p;
    shape sh = shape_of(m->h.opcode, m->h.status);
    switch (sh.kind) {
    case K_PUT:
    case K_GET:
    case K_KEYS:
        e->key.len = le_rd16(p);
        e->key.data = p + 2;
        p += 2 + e->key.len;
        if (sh.kind == K_GET) {
            e->cap = le_rd64(p);
            p += 8;
        } else if (sh.kind == K_PUT) {
            e->vlen = le_rd64(p);
            e->sum = le_rd64(p + 8);
            p += 16;
        }
        break;
    case K_STATUS:
        e->status = (int32_t)le_rd32(p);
        p += 4;
        break;
    case K_GET_REPLY:
        e->status = (int32_t)le_rd32(p);
        e->vlen = le_rd64(p + 4);
        e->sum = le_rd64(p + 12);
        p += GET_REPLY_ENTRY;
        break;
    case K_EXISTS_REPLY:
        e->present = *p++;
        break;
    case K_RESERVE:
        e->key.len = le_rd16(p);
        e->key.data = p + 2;
        p += 2 + e->key.len;
        e->vlen = le_rd64(p);
        p += 8;
        break;
    case K_COMMIT:
        e->id = le_rd64(p);
        e->sum = le_rd64(p + 8);
        p += COMMIT_ENTRY;
        break;
    case K_RELEASE:
        e->id = le_rd64(p);
        e->status = (int32_t)le_rd32(p + 8);
        p += RELEASE_ENTRY;
        break;
    case K_RESERVE_REPLY:
        e->status = (int32_t)le_rd32(p);
        e->id = le_rd64(p + 4);
        e->offset = le_rd64(p + 12);
        p += RESERVE_REPLY_ENTRY;
        break;
    case K_PIN_REPLY:
        e->status = (int32_t)le_rd32(p);
        e->id = le_rd64(p + 4);
        e->offset = le_rd64(p + 12);
        e->vlen = le_rd64(p + 20);
        e->sum = le_rd64(p + 28);
        p += PIN_REPLY_ENTRY;
        break;
    case K_EVENTS_REPLY:
        e->seq = le_rd64(p);
        e->kind = p[8];
        e->key.len = le_rd16(p + 9);
        e->key.data = p + FRAME_EVENT_ENTRY_MIN;
        p += FRAME_EVENT_ENTRY_MIN + e->key.len;
        break;
    case K_STAT_REPLY:
        e->key.len = *p;
        e->key.data = p + 1;
        p += 1 + e->key.len;
        e->figure = le_rd64(p);
        p += 8;
        break;
    default:
        return 0;
    }
    if ((sh.kind == K_PUT || sh.kind == K_GET_REPLY) && e->status == 0) {
        e->voff = it->voff;
        if (m->data) e->val = m->data + it->voff;
        it->voff += e->vlen;
    }
    it->p = p;
    it->i++;
    return 1;
}

int frame_value_check(const frame_entry *e, const void *val) {
    return checksum_buf(val, e->vlen) == e->sum ? 0 : TIDE_ECHECKSUM;
}
