/*
 * test_proto_frame.c — the native frame codec: round trips of every opcode, input fed a
 * byte at a time, the two-stage (head, then values) receive path, every limit, and the
 * malformed frames a peer can send.
 */
#include <errno.h>

#include "common/checksum.h"
#include "harness.h"
#include "proto/frame.h"
#include "tide.h"

/* A byte stream being built: encoder output and value bytes appended in turn. */
typedef struct stream {
    uint8_t *p;
    size_t len, cap;
} stream;

static void s_room(stream *s, size_t n) {
    if (s->len + n <= s->cap) return;
    while (s->len + n > s->cap)
        s->cap = s->cap ? s->cap * 2 : 4096;
    s->p = realloc(s->p, s->cap);
    CHECK(s->p != NULL);
}

static void s_raw(stream *s, const void *b, size_t n) {
    s_room(s, n);
    memcpy(s->p + s->len, b, n);
    s->len += n;
}

/* Size-query the encoder call, make room, then encode into the stream. */
#define S_ENC(s, fn, ...)                                                                          \
    do {                                                                                           \
        size_t need_;                                                                              \
        CHECK_EQ(fn(NULL, 0, &need_, __VA_ARGS__), TIDE_EBUFSMALL);                                \
        s_room((s), need_);                                                                        \
        size_t got_ = 0;                                                                           \
        CHECK_EQ(fn((s)->p + (s)->len, (s)->cap - (s)->len, &got_, __VA_ARGS__), 0);               \
        CHECK_EQ(got_, need_);                                                                     \
        (s)->len += got_;                                                                          \
    } while (0)

/* n keys of lengths 1..TIDE_KEY_MAX, distinct, with binary bytes in them. */
static tide_key *make_keys(size_t n, char **store) {
    tide_key *k = calloc(n, sizeof(*k));
    *store = malloc(n * TIDE_KEY_MAX);
    CHECK(k && *store);
    for (size_t i = 0; i < n; i++) {
        char *p = *store + i * TIDE_KEY_MAX;
        size_t len = 1 + (i * 37) % TIDE_KEY_MAX;
        for (size_t j = 0; j < len; j++)
            p[j] = (char)(i * 131 + j * 7);
        if (len >= 4) memcpy(p, &i, 4 < sizeof(i) ? 4 : sizeof(i));
        k[i] = (tide_key){p, len};
    }
    return k;
}

static int key_eq(tide_key a, tide_key b) {
    return a.len == b.len && memcmp(a.data, b.data, a.len) == 0;
}

/* Decode one whole frame at s->p[off..], which must be exactly `want` bytes long. */
static frame_msg decode_one(frame_decoder *d, const stream *s, size_t off) {
    frame_msg m;
    ssize_t r = frame_decode(d, s->p + off, s->len - off, &m);
    CHECK_MSG(r > 0, "decode returned %zd: %s", r, d->errstr);
    CHECK_EQ((size_t)r, s->len - off);
    return m;
}

TEST(proto_frame_put_roundtrip_many_keys) {
    enum { N = 1000 };
    char *kstore;
    tide_key *keys = make_keys(N, &kstore);
    uint8_t *vals = malloc(N * 64);
    tide_iov *iov = calloc(N * 2, sizeof(*iov));
    size_t *iovcnt = calloc(N, sizeof(*iovcnt));
    size_t vlen[N], at = 0, total = 0;
    for (size_t i = 0; i < N; i++) {
        vlen[i] = 1 + i % 64;
        for (size_t j = 0; j < vlen[i]; j++)
            vals[total + j] = (uint8_t)(i ^ j);
        /* Odd keys give their value as two pieces, to exercise scatter lists. */
        if (i % 2 && vlen[i] > 1) {
            iov[at++] = (tide_iov){vals + total, 1};
            iov[at++] = (tide_iov){vals + total + 1, vlen[i] - 1};
            iovcnt[i] = 2;
        } else {
            iov[at++] = (tide_iov){vals + total, vlen[i]};
            iovcnt[i] = 1;
        }
        total += vlen[i];
    }
    stream s = {0};
    uint64_t data_len = 0;
    S_ENC(&s, frame_encode_put, 0x1122334455667788ull, keys, N, iov, iovcnt, NULL, &data_len);
    CHECK_EQ(data_len, total);
    s_raw(&s, vals, total);

    frame_decoder d;
    CHECK_EQ(frame_decoder_init(&d, NULL), 0);
    frame_msg m = decode_one(&d, &s, 0);
    CHECK_EQ(m.h.opcode, FRAME_OP_PUT);
    CHECK_EQ(m.h.version, FRAME_VERSION);
    CHECK(m.h.req_id == 0x1122334455667788ull);
    CHECK_EQ(m.h.count, N);
    CHECK_EQ(m.h.status, 0);
    CHECK_EQ(m.data_len, total);
    frame_iter it;
    frame_entry e;
    frame_iter_init(&it, &m);
    size_t i = 0, off = 0;
    while (frame_iter_next(&it, &e)) {
        CHECK(i < N);
        CHECK(key_eq(e.key, keys[i]));
        CHECK_EQ(e.vlen, vlen[i]);
        CHECK_EQ(e.voff, off);
        CHECK(e.val == m.data + off);
        CHECK(memcmp(e.val, vals + off, vlen[i]) == 0);
        CHECK(e.sum == checksum_buf(vals + off, vlen[i]));
        CHECK_EQ(frame_value_check(&e, e.val), 0);
        off += vlen[i];
        i++;
    }
    CHECK_EQ(i, N);
    CHECK_EQ(frame_iter_next(&it, &e), 0);

    /* A flipped value byte fails its checksum. */
    uint8_t bad[64];
    frame_iter_init(&it, &m);
    CHECK(frame_iter_next(&it, &e));
    memcpy(bad, e.val, e.vlen);
    bad[0] ^= 1;
    CHECK_EQ(frame_value_check(&e, bad), TIDE_ECHECKSUM);

    /* Caller-given checksums are sent as given. */
    uint64_t sums[2] = {7, 9};
    stream s2 = {0};
    S_ENC(&s2, frame_encode_put, 1, keys, 2, iov, NULL, sums, NULL);
    s_raw(&s2, vals, iov[0].len + iov[1].len);
    m = decode_one(&d, &s2, 0);
    frame_iter_init(&it, &m);
    CHECK(frame_iter_next(&it, &e) && e.sum == 7);
    CHECK(frame_iter_next(&it, &e) && e.sum == 9);
    free(keys), free(kstore), free(vals), free(iov), free(iovcnt), free(s.p), free(s2.p);
}

TEST(proto_frame_key_opcodes_roundtrip) {
    enum { N = 300 };
    char *kstore;
    tide_key *keys = make_keys(N, &kstore);
    uint64_t caps[N];
    for (size_t i = 0; i < N; i++)
        caps[i] = i * 1000 + (i == 7 ? UINT64_MAX - 1000 * 7 : 0);
    const unsigned ops[] = {FRAME_OP_GET, FRAME_OP_EXISTS, FRAME_OP_REMOVE, FRAME_OP_MATCH_PREFIX};
    frame_decoder d;
    frame_decoder_init(&d, NULL);
    for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++) {
        stream s = {0};
        if (ops[o] == FRAME_OP_GET)
            S_ENC(&s, frame_encode_get, 40 + o, keys, caps, N);
        else
            S_ENC(&s, frame_encode_keys, ops[o], 40 + o, keys, N);
        frame_msg m = decode_one(&d, &s, 0);
        CHECK_EQ(m.h.opcode, ops[o]);
        CHECK_EQ(m.h.req_id, 40 + o);
        CHECK_EQ(m.h.count, N);
        CHECK_EQ(m.data_len, 0);
        frame_iter it;
        frame_entry e;
        frame_iter_init(&it, &m);
        size_t i = 0;
        for (; frame_iter_next(&it, &e); i++) {
            CHECK(key_eq(e.key, keys[i]));
            CHECK(e.cap == (ops[o] == FRAME_OP_GET ? caps[i] : 0));
            CHECK(e.val == NULL && e.vlen == 0);
        }
        CHECK_EQ(i, N);
        free(s.p);
    }
    /* GET without caps asks for any size. */
    stream s = {0};
    S_ENC(&s, frame_encode_get, 1, keys, NULL, 3);
    frame_msg m = decode_one(&d, &s, 0);
    frame_iter it;
    frame_entry e;
    frame_iter_init(&it, &m);
    while (frame_iter_next(&it, &e))
        CHECK(e.cap == UINT64_MAX);
    free(keys), free(kstore), free(s.p);
}

TEST(proto_frame_replies_roundtrip) {
    enum { N = 500 };
    frame_decoder d;
    frame_decoder_init(&d, NULL);
    frame_iter it;
    frame_entry e;
    frame_msg m;

    /* PUT and REMOVE replies: a status per key. */
    int32_t st[N];
    for (int i = 0; i < N; i++)
        st[i] = i % 3 == 0 ? 0 : i % 3 == 1 ? TIDE_ENOTFOUND : -ENOMEM;
    for (unsigned op = FRAME_OP_PUT; op <= FRAME_OP_REMOVE; op += FRAME_OP_REMOVE - FRAME_OP_PUT) {
        stream s = {0};
        S_ENC(&s, frame_encode_status_reply, op, 5, st, N);
        m = decode_one(&d, &s, 0);
        CHECK_EQ(m.h.opcode, op | FRAME_OP_REPLY);
        CHECK_EQ(m.h.count, N);
        frame_iter_init(&it, &m);
        for (int i = 0; frame_iter_next(&it, &e); i++)
            CHECK_EQ(e.status, st[i]);
        free(s.p);
    }

    /* GET reply: found values carried, misses and too-small buffers not. */
    uint64_t vl[N], sums[N], total = 0;
    uint8_t *vals = malloc(N * 100);
    for (int i = 0; i < N; i++) {
        st[i] = i % 4 == 1 ? TIDE_ENOTFOUND : i % 4 == 2 ? TIDE_EBUFSMALL : 0;
        vl[i] = st[i] == TIDE_ENOTFOUND ? 12345 /* ignored */ : 1 + (uint64_t)i % 100;
        if (st[i] == 0) {
            memset(vals + total, i, vl[i]);
            sums[i] = checksum_buf(vals + total, vl[i]);
            total += vl[i];
        } else {
            sums[i] = 99; /* ignored for entries that carry no value */
        }
    }
    stream s = {0};
    uint64_t dl;
    S_ENC(&s, frame_encode_get_reply, 6, st, vl, sums, N, &dl);
    CHECK_EQ(dl, total);
    s_raw(&s, vals, total);
    m = decode_one(&d, &s, 0);
    CHECK_EQ(m.h.opcode, FRAME_OP_GET | FRAME_OP_REPLY);
    CHECK_EQ(m.data_len, total);
    frame_iter_init(&it, &m);
    uint64_t off = 0;
    for (int i = 0; frame_iter_next(&it, &e); i++) {
        CHECK_EQ(e.status, st[i]);
        if (st[i] == 0) {
            CHECK_EQ(e.vlen, vl[i]);
            CHECK(e.val == m.data + off && e.voff == off);
            CHECK_EQ(frame_value_check(&e, e.val), 0);
            off += e.vlen;
        } else {
            CHECK(e.val == NULL && e.sum == 0);
            CHECK_EQ(e.vlen, st[i] == TIDE_EBUFSMALL ? vl[i] : 0); /* size needed */
        }
    }
    CHECK_EQ(off, total);
    free(s.p);
    free(vals);

    /* EXISTS reply. */
    uint8_t pres[N];
    for (int i = 0; i < N; i++)
        pres[i] = (uint8_t)(i % 5 == 0 ? 0 : i % 5 == 1 ? 1 : 200);
    s = (stream){0};
    S_ENC(&s, frame_encode_exists_reply, 7, pres, N);
    m = decode_one(&d, &s, 0);
    frame_iter_init(&it, &m);
    for (int i = 0; frame_iter_next(&it, &e); i++)
        CHECK_EQ(e.present, pres[i] ? 1 : 0);
    free(s.p);

    /* MATCH_PREFIX reply. */
    s = (stream){0};
    S_ENC(&s, frame_encode_match_reply, 8, 4000);
    m = decode_one(&d, &s, 0);
    CHECK_EQ(m.h.opcode, FRAME_OP_MATCH_PREFIX | FRAME_OP_REPLY);
    CHECK_EQ(m.matched, 4000);
    CHECK_EQ(m.h.count, 0);
    free(s.p);

    /* STAT reply: named figures. */
    const char *names[] = {
        "capacity_bytes", "used_bytes",
        "objects",        "a",
        "x.y_Z9",         "n123456789012345678901234567890123456789012345678901234567890123"};
    uint64_t figs[] = {1ull << 40, 5, 0, UINT64_MAX, 42, 1};
    s = (stream){0};
    S_ENC(&s, frame_encode_stat_reply, 9, names, figs, 6);
    m = decode_one(&d, &s, 0);
    frame_iter_init(&it, &m);
    int i = 0;
    for (; frame_iter_next(&it, &e); i++) {
        CHECK_EQ(e.key.len, strlen(names[i]));
        CHECK(memcmp(e.key.data, names[i], e.key.len) == 0);
        CHECK(e.figure == figs[i]);
    }
    CHECK_EQ(i, 6);
    free(s.p);
    const char *badname[] = {"has space"};
    const char *longname[] = {"n1234567890123456789012345678901234567890123456789012345678901234"};
    const char *empty[] = {""};
    size_t len;
    uint8_t buf[256];
    CHECK_EQ(frame_encode_stat_reply(buf, sizeof(buf), &len, 1, badname, figs, 1), TIDE_EPROTO);
    CHECK_EQ(frame_encode_stat_reply(buf, sizeof(buf), &len, 1, longname, figs, 1), TIDE_EPROTO);
    CHECK_EQ(frame_encode_stat_reply(buf, sizeof(buf), &len, 1, empty, figs, 1), TIDE_EPROTO);
}

TEST(proto_frame_control_opcodes_roundtrip) {
    frame_decoder d;
    frame_decoder_init(&d, NULL);
    frame_msg m;
    const unsigned empty_ops[] = {FRAME_OP_STAT, FRAME_OP_PING, FRAME_OP_CLEAR,
                                  FRAME_OP_PING | FRAME_OP_REPLY, FRAME_OP_CLEAR | FRAME_OP_REPLY};
    for (size_t i = 0; i < 5; i++) {
        stream s = {0};
        S_ENC(&s, frame_encode_empty, empty_ops[i], 100 + i);
        CHECK_EQ(s.len, FRAME_HDR_SIZE);
        m = decode_one(&d, &s, 0);
        CHECK_EQ(m.h.opcode, empty_ops[i]);
        CHECK_EQ(m.h.req_id, 100 + i);
        CHECK(m.h.count == 0 && m.h.body_len == 0);
        free(s.p);
    }
    size_t len;
    uint8_t buf[2048];
    CHECK_EQ(frame_encode_empty(buf, sizeof(buf), &len, FRAME_OP_GET, 1), -EINVAL);
    CHECK_EQ(frame_encode_keys(buf, sizeof(buf), &len, FRAME_OP_PUT, 1, NULL, 0), -EINVAL);

    /* HELLO with and without a token, and its reply. */
    uint8_t token[FRAME_TOKEN_MAX];
    memset(token, 0xab, sizeof(token));
    frame_hello h = {1, 2, 0xf00f, token, FRAME_TOKEN_MAX};
    stream s = {0};
    S_ENC(&s, frame_encode_hello, 1, &h);
    m = decode_one(&d, &s, 0);
    CHECK_EQ(m.h.opcode, FRAME_OP_HELLO);
    CHECK_EQ(m.hello.min_version, 1);
    CHECK_EQ(m.hello.max_version, 2);
    CHECK(m.hello.features == 0xf00f);
    CHECK_EQ(m.hello.token_len, FRAME_TOKEN_MAX);
    CHECK(memcmp(m.hello.token, token, FRAME_TOKEN_MAX) == 0);
    free(s.p);
    h.token_len = FRAME_TOKEN_MAX + 1;
    CHECK_EQ(frame_encode_hello(buf, sizeof(buf), &len, 1, &h), TIDE_EPROTO);
    h = (frame_hello){2, 1, 0, NULL, 0};
    CHECK_EQ(frame_encode_hello(buf, sizeof(buf), &len, 1, &h), TIDE_EPROTO);
    h = (frame_hello){1, 1, 0, NULL, 0};
    s = (stream){0};
    S_ENC(&s, frame_encode_hello, 2, &h);
    m = decode_one(&d, &s, 0);
    CHECK(m.hello.token == NULL && m.hello.token_len == 0);
    free(s.p);

    frame_hello_reply r = {1, 4096, 3, 64 << 20, 1ull << 30, 0};
    s = (stream){0};
    S_ENC(&s, frame_encode_hello_reply, 1, &r);
    m = decode_one(&d, &s, 0);
    CHECK_EQ(m.h.opcode, FRAME_OP_HELLO | FRAME_OP_REPLY);
    CHECK_EQ(m.hello_reply.version, 1);
    CHECK_EQ(m.hello_reply.max_keys, 4096);
    CHECK_EQ(m.hello_reply.features, 3);
    CHECK_EQ(m.hello_reply.max_value, 64 << 20);
    CHECK(m.hello_reply.max_frame == 1ull << 30);
    CHECK_EQ(m.hello_reply.ucx_port, 0);
    free(s.p);
    /* FRAME_FEATURE_UCX comes with the UCX port, and only with it. */
    r = (frame_hello_reply){1, 4096, FRAME_FEATURE_UCX, 64 << 20, 1ull << 30, 7475};
    s = (stream){0};
    S_ENC(&s, frame_encode_hello_reply, 1, &r);
    m = decode_one(&d, &s, 0);
    CHECK_EQ(m.hello_reply.ucx_port, 7475);
    CHECK(m.hello_reply.features == FRAME_FEATURE_UCX);
    s.p[FRAME_HDR_SIZE + 8] = 0; /* the bit cleared, the port left: refused */
    CHECK(frame_decode(&d, s.p, s.len, &m) < 0);
    CHECK(strstr(d.errstr, "UCX port") != NULL);
    free(s.p);
    frame_decoder_init(&d, NULL);
    r.ucx_port = 0;
    CHECK_EQ(frame_encode_hello_reply(buf, sizeof(buf), &len, 1, &r), TIDE_EPROTO);
    r = (frame_hello_reply){1, 4096, 0, 64 << 20, 1ull << 30, 7475};
    CHECK_EQ(frame_encode_hello_reply(buf, sizeof(buf), &len, 1, &r), TIDE_EPROTO);

    /* Error replies: status, message (cut at FRAME_ERRMSG_MAX), ERROR for unknown ops. */
    s = (stream){0};
    S_ENC(&s, frame_encode_error, FRAME_OP_HELLO, 3, TIDE_EAUTH, "bad token", 9);
    m = decode_one(&d, &s, 0);
    CHECK_EQ(m.h.opcode, FRAME_OP_HELLO | FRAME_OP_REPLY);
    CHECK_EQ(m.h.status, TIDE_EAUTH);
    CHECK(m.errmsg_len == 9 && memcmp(m.errmsg, "bad token", 9) == 0);
    free(s.p);
    char big[FRAME_ERRMSG_MAX + 100];
    memset(big, 'e', sizeof(big));
    s = (stream){0};
    S_ENC(&s, frame_encode_error, 0x77, 4, TIDE_EPROTO, big, sizeof(big));
    m = decode_one(&d, &s, 0);
    CHECK_EQ(m.h.opcode, FRAME_OP_ERROR);
    CHECK_EQ(m.errmsg_len, FRAME_ERRMSG_MAX);
    free(s.p);
    CHECK_EQ(frame_encode_error(buf, sizeof(buf), &len, FRAME_OP_GET, 1, 0, "x", 1), TIDE_EPROTO);

    CHECK_STR(frame_op_name(FRAME_OP_MATCH_PREFIX), "MATCH_PREFIX");
    CHECK_STR(frame_op_name(FRAME_OP_GET | FRAME_OP_REPLY), "GET_REPLY");
    CHECK_STR(frame_op_name(FRAME_OP_ERROR), "ERROR");
    CHECK_STR(frame_op_name(0), "?");
    CHECK_STR(frame_op_name(0xbe), "?");
    CHECK(!frame_op_valid(0x3e) && !frame_op_valid(0x80) && !frame_op_valid(0x100));
}

/* REPLICA (a cluster client's notice, docs/CLUSTER.md) and its reply; bad flags, a zero
 * timeout and a reserved field refused with the field named. */
TEST(proto_frame_replica_roundtrip_and_refusals) {
    frame_decoder d;
    CHECK_EQ(frame_decoder_init(&d, NULL), 0);
    stream s = {0};
    S_ENC(&s, frame_encode_replica, 7, FRAME_REPLICA_MISSED, 300);
    frame_msg m = decode_one(&d, &s, 0);
    CHECK_EQ(m.h.opcode, FRAME_OP_REPLICA);
    CHECK_EQ(m.replica.flags, FRAME_REPLICA_MISSED);
    CHECK_EQ(m.replica.timeout_ms, 300);
    free(s.p);
    s = (stream){0};
    S_ENC(&s, frame_encode_replica_reply, 8, 3, 4);
    m = decode_one(&d, &s, 0);
    CHECK_EQ(m.h.opcode, FRAME_OP_REPLICA | FRAME_OP_REPLY);
    CHECK(m.replica.fences == 3 && m.replica.generation == 4);
    free(s.p);
    CHECK_STR(frame_op_name(FRAME_OP_REPLICA), "REPLICA");

    uint8_t buf[FRAME_HDR_SIZE + FRAME_REPLICA_KEYS];
    size_t len;
    CHECK_EQ(frame_encode_replica(buf, sizeof(buf), &len, 1, 2, 300), TIDE_EPROTO);
    CHECK_EQ(frame_encode_replica(buf, sizeof(buf), &len, 1, 0, 0), TIDE_EPROTO);
    const struct {
        size_t off;
        uint8_t byte;
        const char *msg;
    } bad[] = {{FRAME_HDR_SIZE, 2, "REPLICA: unknown flags 0x00000002"},
               {FRAME_HDR_SIZE + 4, 0, "REPLICA: timeout_ms is 0"},
               {FRAME_HDR_SIZE + 8, 1, "REPLICA: reserved field"}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        CHECK_EQ(frame_encode_replica(buf, sizeof(buf), &len, 1, 0, 1), 0);
        buf[bad[i].off] = bad[i].byte;
        frame_decoder_reset(&d);
        CHECK_EQ(frame_decode(&d, buf, len, &m), TIDE_EPROTO);
        CHECK_CONTAINS(d.errstr, bad[i].msg);
    }
}

/* REPLICA hint operations (docs/CLUSTER.md, "Hints"): HINT, ASK and TOLD round-trip with
 * their member and seq; two operations at once, a seq without TOLD and a key section of
 * neither 16 nor 24 bytes are refused with the field named. */
TEST(proto_frame_replica_hint_roundtrip_and_refusals) {
    frame_decoder d;
    CHECK_EQ(frame_decoder_init(&d, NULL), 0);
    const uint32_t ops[] = {FRAME_REPLICA_HINT, FRAME_REPLICA_ASK, FRAME_REPLICA_TOLD};
    for (size_t i = 0; i < 3; i++) {
        stream s = {0};
        uint64_t seq = ops[i] == FRAME_REPLICA_TOLD ? 42 : 0;
        S_ENC(&s, frame_encode_replica_hint, 9, ops[i], 300, 0x1122334455667788ull, seq);
        frame_msg m = decode_one(&d, &s, 0);
        CHECK_EQ(m.h.opcode, FRAME_OP_REPLICA);
        CHECK_EQ(m.replica.flags, ops[i]);
        CHECK_EQ(m.replica.timeout_ms, 300);
        CHECK(m.replica.member == 0x1122334455667788ull && m.replica.seq == seq);
        free(s.p);
    }
    uint8_t buf[FRAME_HDR_SIZE + FRAME_REPLICA_HINT_META];
    size_t len;
    frame_msg m;
    CHECK_EQ(frame_encode_replica_hint(buf, sizeof(buf), &len, 1, 0, 300, 1, 0), TIDE_EPROTO);
    CHECK_EQ(frame_encode_replica_hint(buf, sizeof(buf), &len, 1,
                                       FRAME_REPLICA_HINT | FRAME_REPLICA_ASK, 300, 1, 0),
             TIDE_EPROTO);
    CHECK_EQ(frame_encode_replica_hint(buf, sizeof(buf), &len, 1, FRAME_REPLICA_HINT, 300, 1, 5),
             TIDE_EPROTO);
    CHECK_EQ(frame_encode_replica_hint(buf, sizeof(buf), &len, 1, FRAME_REPLICA_ASK, 0, 1, 0),
             TIDE_EPROTO);
    const struct {
        size_t off;
        uint8_t byte;
        const char *msg;
    } bad[] = {{FRAME_HDR_SIZE, 6, "REPLICA hint: flags 0x00000006 are not one of"},
               {FRAME_HDR_SIZE, 1, "REPLICA hint: flags 0x00000001 are not one of"},
               {FRAME_HDR_SIZE + 16, 3, "REPLICA hint: seq 3 given without TOLD"},
               {FRAME_HDR_SIZE + 4, 0, "REPLICA: timeout_ms is 0"}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        CHECK_EQ(frame_encode_replica_hint(buf, sizeof(buf), &len, 1, FRAME_REPLICA_ASK, 1, 7, 0),
                 0);
        buf[bad[i].off] = bad[i].byte;
        frame_decoder_reset(&d);
        CHECK_EQ(frame_decode(&d, buf, len, &m), TIDE_EPROTO);
        CHECK_CONTAINS(d.errstr, bad[i].msg);
    }
    /* A 20-byte key section: the header's keys_len and body_len say 20. */
    CHECK_EQ(frame_encode_replica_hint(buf, sizeof(buf), &len, 1, FRAME_REPLICA_ASK, 1, 7, 0), 0);
    uint8_t *h = buf;
    uint32_t keysec = 20;
    memcpy(h + 24, &keysec, 4); /* little-endian hosts: the key section's length */
    uint64_t body = 20;
    memcpy(h + 32, &body, 8);
    frame_decoder_reset(&d);
    CHECK_EQ(frame_decode(&d, buf, FRAME_HDR_SIZE + 20, &m), TIDE_EPROTO);
    CHECK_CONTAINS(d.errstr, "REPLICA: key section of 20 bytes");
}

TEST(proto_frame_zero_keys) {
    frame_decoder d;
    frame_decoder_init(&d, NULL);
    stream s = {0};
    S_ENC(&s, frame_encode_put, 1, NULL, 0, NULL, NULL, NULL, NULL);
    S_ENC(&s, frame_encode_get, 2, NULL, NULL, 0);
    S_ENC(&s, frame_encode_keys, FRAME_OP_EXISTS, 3, NULL, 0);
    S_ENC(&s, frame_encode_keys, FRAME_OP_REMOVE, 4, NULL, 0);
    S_ENC(&s, frame_encode_keys, FRAME_OP_MATCH_PREFIX, 5, NULL, 0);
    S_ENC(&s, frame_encode_status_reply, FRAME_OP_PUT, 1, NULL, 0);
    S_ENC(&s, frame_encode_get_reply, 2, NULL, NULL, NULL, 0, NULL);
    S_ENC(&s, frame_encode_exists_reply, 3, NULL, 0);
    CHECK_EQ(s.len, 8 * FRAME_HDR_SIZE);
    size_t off = 0;
    for (int i = 0; i < 8; i++) {
        frame_msg m;
        ssize_t r = frame_decode(&d, s.p + off, s.len - off, &m);
        CHECK_MSG(r == FRAME_HDR_SIZE, "frame %d: %zd %s", i, r, d.errstr);
        CHECK_EQ(m.h.count, 0);
        frame_iter it;
        frame_entry e;
        frame_iter_init(&it, &m);
        CHECK_EQ(frame_iter_next(&it, &e), 0);
        off += (size_t)r;
    }
    /* Zero keys but value bytes: the values belong to nobody. */
    le_wr64(s.p + 32, 5);
    s_raw(&s, "hello", 5);
    frame_msg m;
    CHECK_EQ(frame_decode(&d, s.p, FRAME_HDR_SIZE + 5, &m), TIDE_EPROTO);
    CHECK_CONTAINS(d.errstr, "no entries");
    free(s.p);
}

/* A pipeline of frames of every kind, fed to a receive buffer one byte at a time. */
TEST(proto_frame_one_byte_at_a_time) {
    char *kstore;
    tide_key *keys = make_keys(20, &kstore);
    uint8_t vals[20 * 8];
    for (size_t i = 0; i < sizeof(vals); i++)
        vals[i] = (uint8_t)i;
    tide_iov iov[20];
    for (int i = 0; i < 20; i++)
        iov[i] = (tide_iov){vals + i * 8, 8};
    stream s = {0};
    S_ENC(&s, frame_encode_empty, FRAME_OP_PING, 1);
    S_ENC(&s, frame_encode_put, 2, keys, 20, iov, NULL, NULL, NULL);
    s_raw(&s, vals, sizeof(vals));
    S_ENC(&s, frame_encode_get, 3, keys, NULL, 20);
    S_ENC(&s, frame_encode_keys, FRAME_OP_MATCH_PREFIX, 4, keys, 20);
    S_ENC(&s, frame_encode_error, FRAME_OP_GET, 5, TIDE_ELIMIT, "too many", 8);

    frame_decoder d;
    frame_decoder_init(&d, NULL);
    uint8_t *rx = malloc(s.len); /* the receive buffer; bytes arrive one by one */
    size_t have = 0, start = 0, frames = 0;
    uint64_t ids = 0;
    for (size_t i = 0; i < s.len; i++) {
        rx[have++] = s.p[i];
        frame_msg m;
        ssize_t r = frame_decode(&d, rx + start, have - start, &m);
        CHECK_MSG(r >= 0, "byte %zu: %s", i, d.errstr);
        if (r == 0) {
            CHECK(d.need >= 1);
            CHECK(have + d.need <= s.len);
            continue;
        }
        CHECK_EQ(start + (size_t)r, have); /* a frame completes exactly on its last byte */
        frames++;
        ids = ids * 10 + m.h.req_id;
        if (m.h.opcode == FRAME_OP_PUT) {
            frame_iter it;
            frame_entry e;
            frame_iter_init(&it, &m);
            while (frame_iter_next(&it, &e))
                CHECK_EQ(frame_value_check(&e, e.val), 0);
        }
        start = have;
    }
    CHECK_EQ(frames, 5);
    CHECK_EQ(ids, 12345);
    free(rx), free(keys), free(kstore), free(s.p);
}

/* The server's receive path: the head first, then the values straight into their own
 * destination buffers (the pool), then the checksums checked there. */
TEST(proto_frame_head_then_values) {
    char *kstore;
    tide_key *keys = make_keys(3, &kstore);
    uint8_t v[3][1000];
    tide_iov iov[3];
    for (int i = 0; i < 3; i++) {
        memset(v[i], 'a' + i, sizeof(v[i]));
        iov[i] = (tide_iov){v[i], 300 * (size_t)(i + 1)};
    }
    stream s = {0};
    uint64_t dl;
    S_ENC(&s, frame_encode_put, 9, keys, 3, iov, NULL, NULL, &dl);
    size_t head_len = s.len;
    for (int i = 0; i < 3; i++)
        s_raw(&s, v[i], iov[i].len);
    CHECK_EQ(s.len, head_len + dl);

    frame_decoder d;
    frame_decoder_init(&d, NULL);
    frame_msg m;
    /* Byte by byte until the head is complete; never waits for the values. */
    ssize_t r = 0;
    size_t have = 0;
    while (r == 0 && have <= s.len) {
        r = frame_decode_head(&d, s.p, have, &m);
        CHECK(r >= 0);
        if (r == 0)
            CHECK(have + d.need <= head_len);
        else
            CHECK_EQ(have, head_len);
        have++;
    }
    CHECK_EQ((size_t)r, head_len);
    CHECK(m.data == NULL);
    CHECK_EQ(m.data_len, 1800);
    uint8_t *pool[3];
    frame_iter it;
    frame_entry e;
    frame_iter_init(&it, &m);
    for (int i = 0; frame_iter_next(&it, &e); i++) {
        CHECK(e.val == NULL);
        CHECK_EQ(e.vlen, iov[i].len);
        pool[i] = malloc(e.vlen);
        memcpy(pool[i], s.p + head_len + e.voff, e.vlen); /* "recv into the pool" */
        CHECK_EQ(frame_value_check(&e, pool[i]), 0);
        free(pool[i]);
    }
    free(keys), free(kstore), free(s.p);
}

/* A PUT of n values of vlen bytes each (value bytes included), keys of klen bytes. */
static stream put_frame(size_t n, size_t klen, size_t vlen) {
    static char kb[TIDE_KEY_MAX];
    memset(kb, 'k', sizeof(kb));
    tide_key *keys = calloc(n, sizeof(*keys));
    tide_iov *iov = calloc(n, sizeof(*iov));
    uint8_t *val = calloc(1, vlen);
    for (size_t i = 0; i < n; i++) {
        keys[i] = (tide_key){kb, klen};
        iov[i] = (tide_iov){val, vlen};
    }
    stream s = {0};
    S_ENC(&s, frame_encode_put, 1, keys, n, iov, NULL, NULL, NULL);
    for (size_t i = 0; i < n; i++)
        s_raw(&s, val, vlen);
    free(keys), free(iov), free(val);
    return s;
}

TEST(proto_frame_limit_max_keys) {
    frame_limits lim = {16, 1000, 1 << 20};
    frame_decoder d;
    CHECK_EQ(frame_decoder_init(&d, &lim), 0);
    frame_msg m;
    stream ok = put_frame(16, 10, 4), bad = put_frame(17, 10, 4);
    CHECK_EQ(frame_decode(&d, ok.p, ok.len, &m), (ssize_t)ok.len);
    /* Refused from the header alone, before the body is waited for. */
    CHECK_EQ(frame_decode(&d, bad.p, FRAME_HDR_SIZE, &m), TIDE_ELIMIT);
    CHECK_CONTAINS(d.errstr, "max_keys=16");
    CHECK_CONTAINS(d.errstr, "17 entries");
    /* Sticky until reset. */
    CHECK_EQ(frame_decode(&d, ok.p, ok.len, &m), TIDE_ELIMIT);
    frame_decoder_reset(&d);
    CHECK_EQ(frame_decode(&d, ok.p, ok.len, &m), (ssize_t)ok.len);
    free(ok.p), free(bad.p);

    /* The default is 4096 keys, and a configuration above TIDE_BATCH_MAX is refused. */
    frame_decoder_init(&d, NULL);
    CHECK_EQ(d.lim.max_keys, 4096);
    lim.max_keys = TIDE_BATCH_MAX + 1;
    CHECK_EQ(frame_decoder_init(&d, &lim), TIDE_ECONFIG);
    CHECK_CONTAINS(d.errstr, "max_keys");
    CHECK_CONTAINS(d.errstr, "65537");
    lim.max_keys = 0;
    CHECK_EQ(frame_limits_check(&lim, NULL, 0), TIDE_ECONFIG);
    lim = (frame_limits){TIDE_BATCH_MAX, 1, FRAME_HDR_SIZE};
    CHECK_EQ(frame_limits_check(&lim, NULL, 0), 0);
    lim.max_frame = FRAME_HDR_SIZE - 1;
    CHECK_EQ(frame_limits_check(&lim, NULL, 0), TIDE_ECONFIG);
    lim = (frame_limits){1, 0, 100};
    CHECK_EQ(frame_limits_check(&lim, NULL, 0), TIDE_ECONFIG);
}

TEST(proto_frame_limit_key_length) {
    frame_decoder d;
    frame_decoder_init(&d, NULL);
    frame_msg m;
    stream ok = put_frame(2, TIDE_KEY_MAX, 4);
    CHECK_EQ(frame_decode(&d, ok.p, ok.len, &m), (ssize_t)ok.len);
    /* Say the first key is 257 bytes: refused as soon as the key section is in. */
    le_wr16(ok.p + FRAME_HDR_SIZE, TIDE_KEY_MAX + 1);
    size_t head = FRAME_HDR_SIZE + le_rd32(ok.p + 24);
    CHECK_EQ(frame_decode_head(&d, ok.p, head, &m), TIDE_EKEYLONG);
    CHECK_CONTAINS(d.errstr, "257 bytes");
    CHECK_CONTAINS(d.errstr, "TIDE_KEY_MAX=256");
    frame_decoder_reset(&d);
    CHECK_EQ(frame_decode(&d, ok.p, ok.len, &m), TIDE_EKEYLONG);
    frame_decoder_reset(&d);
    le_wr16(ok.p + FRAME_HDR_SIZE, 0);
    CHECK_EQ(frame_decode(&d, ok.p, ok.len, &m), TIDE_EKEYEMPTY);
    CHECK_CONTAINS(d.errstr, "key 0 is empty");
    free(ok.p);

    /* The encoders refuse such keys too. */
    char kb[TIDE_KEY_MAX + 1] = {0};
    tide_key k = {kb, TIDE_KEY_MAX + 1};
    size_t len;
    CHECK_EQ(frame_encode_keys(NULL, 0, &len, FRAME_OP_EXISTS, 1, &k, 1), TIDE_EKEYLONG);
    k.len = 0;
    CHECK_EQ(frame_encode_get(NULL, 0, &len, 1, &k, NULL, 1), TIDE_EKEYEMPTY);
}

TEST(proto_frame_limit_value_size) {
    frame_limits lim = {64, 1000, 1 << 20};
    frame_decoder d;
    frame_decoder_init(&d, &lim);
    frame_msg m;
    stream ok = put_frame(1, 5, 1000);
    CHECK_EQ(frame_decode(&d, ok.p, ok.len, &m), (ssize_t)ok.len);
    free(ok.p);
    /* One value of 1001 bytes: the header's value-byte total already shows it. */
    stream one = put_frame(1, 5, 1001);
    CHECK_EQ(frame_decode(&d, one.p, FRAME_HDR_SIZE, &m), TIDE_EVALBIG);
    CHECK_CONTAINS(d.errstr, "1001 value bytes");
    CHECK_CONTAINS(d.errstr, "max_value=1000");
    free(one.p);
    /* 1001 + 1 bytes in two values: the total fits 2 x 1000, the key section shows which. */
    frame_decoder_reset(&d);
    tide_key k[2] = {{"a", 1}, {"b", 1}};
    static uint8_t big[1001];
    tide_iov iov[2] = {{big, 1001}, {big, 1}};
    stream two = {0};
    S_ENC(&two, frame_encode_put, 1, k, 2, iov, NULL, NULL, NULL);
    CHECK_EQ(frame_decode_head(&d, two.p, two.len, &m), TIDE_EVALBIG);
    CHECK_CONTAINS(d.errstr, "value of key 0 is 1001 bytes");
    CHECK_CONTAINS(d.errstr, "max_value=1000");
    free(two.p);
    /* A GET reply is held to the same limit. */
    frame_decoder_reset(&d);
    int32_t st[2] = {0, 0};
    uint64_t vl[2] = {1001, 1}, sums[2] = {0, 0};
    stream gr = {0};
    S_ENC(&gr, frame_encode_get_reply, 1, st, vl, sums, 2, NULL);
    CHECK_EQ(frame_decode_head(&d, gr.p, gr.len, &m), TIDE_EVALBIG);
    CHECK_CONTAINS(d.errstr, "max_value=1000");
    free(gr.p);
    /* Empty values are refused on both sides. */
    frame_decoder_reset(&d);
    stream e = put_frame(1, 5, 1);
    le_wr64(e.p + FRAME_HDR_SIZE + 2 + 5, 0);
    CHECK_EQ(frame_decode_head(&d, e.p, e.len, &m), TIDE_EVALEMPTY);
    CHECK_CONTAINS(d.errstr, "value of key 0 is empty");
    free(e.p);
    size_t len;
    tide_iov none = {big, 0};
    CHECK_EQ(frame_encode_put(NULL, 0, &len, 1, k, 1, &none, NULL, NULL, NULL), TIDE_EVALEMPTY);
}

TEST(proto_frame_limit_frame_size) {
    frame_limits lim = {64, 1 << 20, 4096};
    frame_decoder d;
    frame_decoder_init(&d, &lim);
    frame_msg m;
    /* Exactly max_frame: accepted. */
    stream ok = put_frame(1, 5, 4096 - FRAME_HDR_SIZE - (2 + 5 + 16));
    CHECK_EQ(ok.len, 4096);
    CHECK_EQ(frame_decode(&d, ok.p, ok.len, &m), 4096);
    free(ok.p);
    stream bad = put_frame(1, 5, 4096 - FRAME_HDR_SIZE - (2 + 5 + 16) + 1);
    CHECK_EQ(frame_decode(&d, bad.p, FRAME_HDR_SIZE, &m), TIDE_ELIMIT);
    CHECK_CONTAINS(d.errstr, "max_frame=4096");
    CHECK_CONTAINS(d.errstr, "40+4057 bytes");
    free(bad.p);
    /* A body length near 2^64 does not wrap around. */
    frame_decoder_reset(&d);
    stream p = {0};
    S_ENC(&p, frame_encode_empty, FRAME_OP_PING, 1);
    le_wr64(p.p + 32, UINT64_MAX);
    CHECK_EQ(frame_decode(&d, p.p, p.len, &m), TIDE_ELIMIT);
    free(p.p);
}

TEST(proto_frame_bad_magic_and_version) {
    stream s = {0};
    S_ENC(&s, frame_encode_empty, FRAME_OP_PING, 1);
    frame_decoder d;
    frame_msg m;
    /* A wrong magic byte is refused as soon as it arrives. */
    for (size_t i = 0; i < 4; i++) {
        frame_decoder_init(&d, NULL);
        uint8_t copy[FRAME_HDR_SIZE];
        memcpy(copy, s.p, sizeof(copy));
        copy[i] ^= 0x20;
        CHECK_EQ(frame_decode(&d, copy, i + 1, &m), TIDE_EPROTO);
        CHECK_CONTAINS(d.errstr, "bad magic");
    }
    frame_decoder_init(&d, NULL);
    CHECK_EQ(frame_decode(&d, "*1\r\n$4\r\nPING\r\n", 14, &m), TIDE_EPROTO); /* RESP */
    frame_decoder_init(&d, NULL);
    s.p[4] = 2;
    CHECK_EQ(frame_decode(&d, s.p, 5, &m), TIDE_EUNSUPPORTED);
    CHECK_CONTAINS(d.errstr, "version 2");
    s.p[4] = 0;
    frame_decoder_init(&d, NULL);
    CHECK_EQ(frame_decode(&d, s.p, s.len, &m), TIDE_EUNSUPPORTED);
    free(s.p);
}

TEST(proto_frame_bad_header_fields) {
    stream s = {0};
    S_ENC(&s, frame_encode_empty, FRAME_OP_PING, 1);
    struct {
        size_t off, width;
        uint64_t val;
        int want;
        const char *says;
    } cases[] = {
        {5, 1, 0x00, TIDE_EPROTO, "unknown opcode 0x00"},
        {5, 1, 0x3e, TIDE_EPROTO, "unknown opcode 0x3e"},
        {5, 1, 0x80, TIDE_EPROTO, "unknown opcode 0x80"},
        {6, 2, 0x0100, TIDE_EPROTO, "unknown flags 0x0100"},
        {28, 4, 7, TIDE_EPROTO, "reserved"},
        {20, 4, (uint32_t)TIDE_EPROTO, TIDE_EPROTO, "request carries status"},
        {16, 4, 1, TIDE_EPROTO, "carries no entries"},
        {24, 4, 1, TIDE_EPROTO, "overruns the body"},
        {32, 8, 3, TIDE_EPROTO, "carries no value bytes"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        uint8_t copy[FRAME_HDR_SIZE + 8] = {0};
        memcpy(copy, s.p, FRAME_HDR_SIZE);
        for (size_t b = 0; b < cases[i].width; b++)
            copy[cases[i].off + b] = (uint8_t)(cases[i].val >> (8 * b));
        frame_decoder d;
        frame_decoder_init(&d, NULL);
        frame_msg m;
        CHECK_EQ(frame_decode(&d, copy, FRAME_HDR_SIZE, &m), cases[i].want);
        CHECK_CONTAINS(d.errstr, cases[i].says);
    }
    /* Replies: a positive status, and an ERROR reply that reports no error. */
    frame_decoder d;
    frame_msg m;
    frame_decoder_init(&d, NULL);
    s.p[5] = FRAME_OP_PING | FRAME_OP_REPLY;
    le_wr32(s.p + 20, 5);
    CHECK_EQ(frame_decode(&d, s.p, s.len, &m), TIDE_EPROTO);
    CHECK_CONTAINS(d.errstr, "positive status 5");
    frame_decoder_init(&d, NULL);
    s.p[5] = FRAME_OP_ERROR;
    le_wr32(s.p + 20, 0);
    CHECK_EQ(frame_decode(&d, s.p, s.len, &m), TIDE_EPROTO);
    CHECK_CONTAINS(d.errstr, "ERROR reply with status 0");
    free(s.p);
}

TEST(proto_frame_truncated) {
    char *kstore;
    tide_key *keys = make_keys(5, &kstore);
    uint8_t v[5] = {1, 2, 3, 4, 5};
    tide_iov iov[5];
    for (int i = 0; i < 5; i++)
        iov[i] = (tide_iov){v + i, 1};
    stream s = {0};
    S_ENC(&s, frame_encode_put, 1, keys, 5, iov, NULL, NULL, NULL);
    s_raw(&s, v, 5);
    /* Every prefix asks for exactly the bytes up to the next point where it can judge. */
    size_t head = FRAME_HDR_SIZE + le_rd32(s.p + 24);
    for (size_t l = 0; l < s.len; l++) {
        frame_decoder d;
        frame_decoder_init(&d, NULL);
        frame_msg m;
        CHECK_EQ(frame_decode(&d, s.p, l, &m), 0);
        CHECK_EQ(d.need, l < FRAME_HDR_SIZE ? FRAME_HDR_SIZE - l : s.len - l);
        frame_decoder_init(&d, NULL);
        ssize_t r = frame_decode_head(&d, s.p, l, &m);
        if (l < head) {
            CHECK_EQ(r, 0);
            CHECK_EQ(d.need, l < FRAME_HDR_SIZE ? FRAME_HDR_SIZE - l : head - l);
        } else {
            CHECK_EQ(r, (ssize_t)head);
        }
    }
    free(keys), free(kstore), free(s.p);
}

TEST(proto_frame_counts_that_lie) {
    tide_key k[3] = {{"one", 3}, {"two", 3}, {"three", 5}};
    frame_decoder d;
    frame_msg m;
    stream s = {0};
    S_ENC(&s, frame_encode_keys, FRAME_OP_REMOVE, 1, k, 3);
    struct {
        uint32_t count, keysec;
        const char *says;
    } cases[] = {
        {4, 17, "ends inside entry 3 of 4"}, /* one key more than the section holds */
        {2, 17, "7 bytes left over"},        /* one key fewer */
        {3, 16, "ends inside entry 2"},      /* section a byte short for its keys */
        {9, 17, "need 27..2322 bytes"},      /* too few bytes for 9 keys at all */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        uint8_t copy[128];
        CHECK_EQ(s.len, FRAME_HDR_SIZE + 17);
        memcpy(copy, s.p, s.len);
        le_wr32(copy + 16, cases[i].count);
        le_wr32(copy + 24, cases[i].keysec);
        le_wr64(copy + 32, cases[i].keysec);
        frame_decoder_init(&d, NULL);
        CHECK_EQ(frame_decode(&d, copy, FRAME_HDR_SIZE + cases[i].keysec, &m), TIDE_EPROTO);
        CHECK_CONTAINS(d.errstr, cases[i].says);
    }
    free(s.p);

    /* PUT: value lengths that add up to more or less than the value bytes. */
    uint8_t v[4] = "abcd";
    tide_iov iov[2] = {{v, 2}, {v + 2, 2}};
    s = (stream){0};
    S_ENC(&s, frame_encode_put, 1, k, 2, iov, NULL, NULL, NULL);
    s_raw(&s, v, 4);
    size_t vlen0 = FRAME_HDR_SIZE + 2 + 3;
    le_wr64(s.p + vlen0, 3);
    frame_decoder_init(&d, NULL);
    CHECK_EQ(frame_decode(&d, s.p, s.len, &m), TIDE_EPROTO);
    CHECK_CONTAINS(d.errstr, "add up to more than the 4 value bytes");
    le_wr64(s.p + vlen0, 1);
    frame_decoder_init(&d, NULL);
    CHECK_EQ(frame_decode(&d, s.p, s.len, &m), TIDE_EPROTO);
    CHECK_CONTAINS(d.errstr, "values add up to 3 bytes, header says 4");
    free(s.p);

    /* A GET reply whose found values add up to less than its value bytes. */
    int32_t st[2] = {0, TIDE_ENOTFOUND};
    uint64_t vl[2] = {4, 0}, sums[2] = {0, 0};
    s = (stream){0};
    S_ENC(&s, frame_encode_get_reply, 1, st, vl, sums, 2, NULL);
    s_raw(&s, v, 4);
    le_wr32(s.p + FRAME_HDR_SIZE + 20, 0); /* the miss now says "found", 0 bytes */
    frame_decoder_init(&d, NULL);
    CHECK_EQ(frame_decode(&d, s.p, s.len, &m), TIDE_EPROTO);
    CHECK_CONTAINS(d.errstr, "value of 0 bytes");
    free(s.p);
}

TEST(proto_frame_trailing_garbage) {
    frame_decoder d;
    frame_decoder_init(&d, NULL);
    frame_msg m;
    tide_key k = {"key", 3};
    stream s = {0};
    S_ENC(&s, frame_encode_keys, FRAME_OP_EXISTS, 1, &k, 1);
    size_t one = s.len;
    s_raw(&s, "\x00\x01garbage", 9);
    /* The frame before the garbage decodes; the garbage is refused as the next frame. */
    CHECK_EQ(frame_decode(&d, s.p, s.len, &m), (ssize_t)one);
    CHECK_EQ(frame_decode(&d, s.p + one, s.len - one, &m), TIDE_EPROTO);
    CHECK_CONTAINS(d.errstr, "bad magic: byte 0");
    /* Garbage inside the body, after the last key, is bytes left over. */
    le_wr32(s.p + 24, le_rd32(s.p + 24) + 9);
    le_wr64(s.p + 32, le_rd64(s.p + 32) + 9);
    frame_decoder_init(&d, NULL);
    CHECK_EQ(frame_decode(&d, s.p, s.len, &m), TIDE_EPROTO);
    CHECK_CONTAINS(d.errstr, "9 bytes left over");
    free(s.p);
}

TEST(proto_frame_encoder_buffer_sizes) {
    tide_key k[2] = {{"alpha", 5}, {"beta", 4}};
    uint8_t buf[256], guard[256];
    memset(buf, 0x5a, sizeof(buf));
    memcpy(guard, buf, sizeof(buf));
    size_t len = 0;
    /* Ask the size with no buffer, then with one byte too few: nothing is written. */
    CHECK_EQ(frame_encode_keys(NULL, 0, &len, FRAME_OP_EXISTS, 1, k, 2), TIDE_EBUFSMALL);
    CHECK_EQ(len, FRAME_HDR_SIZE + 2 + 5 + 2 + 4);
    size_t need = len;
    CHECK_EQ(frame_encode_keys(buf, need - 1, &len, FRAME_OP_EXISTS, 1, k, 2), TIDE_EBUFSMALL);
    CHECK_EQ(len, need);
    CHECK(memcmp(buf, guard, sizeof(buf)) == 0);
    CHECK_EQ(frame_encode_keys(buf, need, &len, FRAME_OP_EXISTS, 1, k, 2), 0);
    CHECK_EQ(len, need);
    CHECK(buf[need] == 0x5a); /* and nothing past the frame */
    /* The header is what the layout says, byte for byte. */
    const uint8_t want[FRAME_HDR_SIZE] = {'T', 'I', 'D', 'E', 1, FRAME_OP_EXISTS,
                                          0,   0,   1,   0,   0, 0,
                                          0,   0,   0,   0,   2, 0,
                                          0,   0,   0,   0,   0, 0,
                                          13,  0,   0,   0,   0, 0,
                                          0,   0,   13,  0,   0, 0,
                                          0,   0,   0,   0};
    CHECK(memcmp(buf, want, FRAME_HDR_SIZE) == 0);
    CHECK(memcmp(buf + FRAME_HDR_SIZE,
                 "\x05\x00"
                 "alpha"
                 "\x04\x00"
                 "beta",
                 13) == 0);
    /* More than TIDE_BATCH_MAX entries cannot be framed. */
    CHECK_EQ(frame_encode_status_reply(NULL, 0, &len, FRAME_OP_PUT, 1, NULL, TIDE_BATCH_MAX + 1),
             TIDE_ELIMIT);
}
