/*
 * test_server_outq.c — tided's output queue (src/server/outq.c): owned and pinned
 * segments sent in order with writev, zero-length segments, appendable chunks and the
 * spare, a full socket (partial sends), pins released when sent or when the queue is
 * freed, and the bytes_out count.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/checksum.h"
#include "harness.h"
#include "server/outq.h"
#include "tide.h"

static store *mk_store(void) {
    store_config c = {.capacity = 1 << 20, .max_value = 1 << 16};
    store *st;
    char err[256];
    int rc = store_create(&c, &st, err, sizeof(err));
    CHECK_MSG(rc == 0, "store_create: %d %s", rc, err);
    return st;
}

/* Store key with n bytes of 'v' and pin it. */
static store_ref put_pin(store *st, const char *key, size_t n) {
    store_ref r;
    CHECK_EQ(store_reserve(st, key, strlen(key), n, 0, &r), 0);
    memset(store_base(st) + r.offset, 'v', n);
    CHECK_EQ(store_commit(st, r.id, checksum_buf(store_base(st) + r.offset, n)), 0);
    CHECK_EQ(store_pin(st, key, strlen(key), 0, &r), 0);
    return r;
}

static uint64_t pinned(store *st) {
    tide_stats s;
    store_stats(st, &s);
    return s.pinned;
}

static void socket_pair(int sv[2]) {
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    CHECK_EQ(fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK), 0);
}

static size_t read_all(int fd, uint8_t *buf, size_t cap) {
    size_t got = 0;
    for (;;) {
        ssize_t r = recv(fd, buf + got, cap - got, MSG_DONTWAIT);
        if (r <= 0) return got;
        got += (size_t)r;
    }
}

/* A store, counters, a socket pair (g.sv[0] non-blocking, the queue's end) and a queue. */
typedef struct rig {
    store *st;
    metrics m;
    int sv[2];
    outq q;
} rig;

static void rig_open(rig *r, size_t chunk) {
    memset(r, 0, sizeof(*r));
    r->st = mk_store();
    socket_pair(r->sv);
    outq_init(&r->q, r->st, &r->m, chunk);
}

static void rig_close(rig *r) {
    outq_free(&r->q);
    close(r->sv[0]);
    close(r->sv[1]);
    store_destroy(r->st);
}

TEST(outq_owned_pinned_and_empty_in_order) {
    rig g;
    rig_open(&g, 0);
    store *st = g.st;
    outq *q = &g.q;
    store_ref r = put_pin(st, "k", 100);
    CHECK_EQ(pinned(st), 1);
    uint8_t *a = malloc(3);
    memcpy(a, "abc", 3);
    CHECK_EQ(outq_owned(q, a, 3), 0);
    CHECK_EQ(outq_push(q, (const uint8_t *)"", 0, malloc(1), 0), 0); /* empty, owned */
    CHECK_EQ(outq_push(q, store_base(st) + r.offset, r.len, NULL, r.id), 0);
    CHECK_EQ(outq_push(q, (const uint8_t *)"xy", 2, NULL, 0), 0);
    CHECK_EQ(q->pending, 105);
    CHECK(outq_busy(q));
    uint64_t progress = 0;
    CHECK_EQ(outq_flush(q, g.sv[0], NULL, &progress), 0);
    CHECK(!outq_busy(q));
    CHECK_EQ(q->pending, 0);
    CHECK(progress != 0);
    CHECK_EQ(atomic_load(&g.m.bytes_out), 105);
    CHECK_EQ(pinned(st), 0); /* released once sent */
    uint8_t buf[256];
    CHECK_EQ(read_all(g.sv[1], buf, sizeof(buf)), 105);
    CHECK(memcmp(buf, "abc", 3) == 0);
    for (int i = 0; i < 100; i++)
        CHECK_EQ(buf[3 + i], 'v');
    CHECK(memcmp(buf + 103, "xy", 2) == 0);
    rig_close(&g);
}

TEST(outq_chunks_append_and_keep_a_spare) {
    rig g;
    rig_open(&g, 64);
    outq *q = &g.q;
    uint8_t *b = outq_room(q, 5);
    memcpy(b, "hello", 5);
    outq_wrote(q, 5);
    b = outq_room(q, 6); /* fits in the same chunk */
    memcpy(b, " world", 6);
    outq_wrote(q, 6);
    CHECK_EQ(q->n, 1);
    b = outq_room(q, 100); /* larger than a chunk: a chunk of its own */
    memset(b, 'z', 100);
    outq_wrote(q, 100);
    CHECK_EQ(q->n, 2);
    CHECK_EQ(q->pending, 111);
    uint64_t progress = 0;
    CHECK_EQ(outq_flush(q, g.sv[0], NULL, &progress), 0);
    CHECK(q->spare != NULL); /* the chunk-sized buffer is kept */
    uint8_t *spare = q->spare;
    CHECK(outq_room(q, 1) == spare);
    outq_wrote(q, 0);
    uint8_t buf[256];
    CHECK_EQ(read_all(g.sv[1], buf, sizeof(buf)), 111);
    CHECK(memcmp(buf, "hello world", 11) == 0);
    rig_close(&g);
}

/* A peer that does not read: the queue keeps what the socket refused, and a pin still
 * queued is released when the queue is freed. */
TEST(outq_full_socket_then_free_releases_pins) {
    rig g;
    rig_open(&g, 0);
    store *st = g.st;
    outq *q = &g.q;
    int small = 4096;
    setsockopt(g.sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
    store_ref r = put_pin(st, "big", 60000);
    for (int i = 0; i < 100; i++) {
        uint8_t *p = malloc(1000);
        memset(p, 'o', 1000);
        CHECK_EQ(outq_owned(q, p, 1000), 0); /* grows the segment array past 16 */
    }
    CHECK_EQ(outq_push(q, store_base(st) + r.offset, r.len, NULL, r.id), 0);
    uint64_t progress = 0;
    CHECK_EQ(outq_flush(q, g.sv[0], NULL, &progress), 0);
    CHECK(outq_busy(q));
    CHECK(q->pending > 0 && q->pending < 160000);
    CHECK_EQ(atomic_load(&g.m.bytes_out) + q->pending, 160000);
    CHECK_EQ(pinned(st), 1);
    /* Drain a little and send again: the rest moves on, in order. */
    uint8_t *buf = malloc(200000);
    size_t got = read_all(g.sv[1], buf, 200000);
    while (outq_busy(q)) {
        CHECK_EQ(outq_flush(q, g.sv[0], NULL, &progress), 0);
        got += read_all(g.sv[1], buf + got, 200000 - got);
        if (got > 100000) break; /* leave the pinned segment partly unsent */
    }
    if (outq_busy(q)) {
        outq_free(q);
    } else {
        outq_free(q);
        CHECK_EQ(got + read_all(g.sv[1], buf + got, 200000 - got), 160000);
    }
    CHECK_EQ(pinned(st), 0);
    for (size_t i = 0; i < got && i < 100000; i++)
        if (buf[i] != 'o') CHECK_EQ(buf[i], 'o');
    free(buf);
    rig_close(&g); /* frees the emptied queue again: harmless */
}

/* A checked segment (pool memory others may write): copied and checked when it reaches the
 * head, its framing around it, so the bytes sent are the bytes checked; the pin goes once
 * the copy is made. */
TEST(outq_checked_segment_sends_the_checked_copy) {
    rig g;
    rig_open(&g, 0);
    store *st = g.st;
    outq *q = &g.q;
    store_ref r = put_pin(st, "k", 5000);
    outq_frame fr = {
        .pre = "$5000\r\n", .post = "\r\n", .fail = "$-1\r\n", .npre = 7, .npost = 2, .nfail = 5};
    CHECK_EQ(outq_push(q, (const uint8_t *)"*1\r\n", 4, NULL, 0), 0);
    CHECK_EQ(outq_push_checked(q, store_base(st) + r.offset, r.len, r.id, r.checksum, &fr), 0);
    CHECK_EQ(outq_push(q, (const uint8_t *)"+OK\r\n", 5, NULL, 0), 0);
    CHECK_EQ(q->pending, 5018);
    uint64_t progress = 0;
    CHECK_EQ(outq_flush(q, g.sv[0], NULL, &progress), 0);
    CHECK(!outq_busy(q));
    CHECK_EQ(q->pending, 0);
    CHECK_EQ(pinned(st), 0);
    uint8_t buf[6000];
    CHECK_EQ(read_all(g.sv[1], buf, sizeof(buf)), 5018);
    CHECK(memcmp(buf, "*1\r\n$5000\r\n", 11) == 0);
    for (int i = 0; i < 5000; i++)
        if (buf[11 + i] != 'v') CHECK_EQ(buf[11 + i], 'v');
    CHECK(memcmp(buf + 5011, "\r\n+OK\r\n", 7) == 0);
    tide_stats s;
    store_stats(st, &s);
    CHECK_EQ(s.checksum_errors, 0);
    rig_close(&g);
}

/* Pool bytes changed between the queueing and the send: none of them is sent, the fail
 * bytes go instead (the queue goes on), the object is reported (removed, counted) and its
 * pin released. */
TEST(outq_checked_segment_that_fails_sends_its_fail_bytes) {
    rig g;
    rig_open(&g, 0);
    store *st = g.st;
    outq *q = &g.q;
    store_ref r = put_pin(st, "k", 5000);
    outq_frame fr = {
        .pre = "$5000\r\n", .post = "\r\n", .fail = "$-1\r\n", .npre = 7, .npost = 2, .nfail = 5};
    CHECK_EQ(outq_push_checked(q, store_base(st) + r.offset, r.len, r.id, r.checksum, &fr), 0);
    CHECK_EQ(outq_push(q, (const uint8_t *)"+OK\r\n", 5, NULL, 0), 0);
    store_base(st)[r.offset + 4000] ^= 1; /* another client's write */
    uint64_t progress = 0;
    CHECK_EQ(outq_flush(q, g.sv[0], NULL, &progress), 0);
    CHECK(!outq_busy(q));
    CHECK_EQ(q->pending, 0);
    uint8_t buf[6000];
    CHECK_EQ(read_all(g.sv[1], buf, sizeof(buf)), 10);
    CHECK(memcmp(buf, "$-1\r\n+OK\r\n", 10) == 0);
    tide_stats s;
    store_stats(st, &s);
    CHECK_EQ(s.checksum_errors, 1);
    CHECK_EQ(store_exists(st, "k", 1), 0);
    CHECK_EQ(pinned(st), 0);
    rig_close(&g);
}

/* A checked segment still queued when the queue is freed: its pin is released. */
TEST(outq_checked_segment_freed_unsent_releases_its_pin) {
    rig g;
    rig_open(&g, 0);
    store *st = g.st;
    store_ref r = put_pin(st, "k", 5000);
    outq_frame fr = {.npre = 0};
    CHECK_EQ(outq_push_checked(&g.q, store_base(st) + r.offset, r.len, r.id, r.checksum, &fr), 0);
    CHECK_EQ(pinned(st), 1);
    outq_free(&g.q);
    CHECK_EQ(pinned(st), 0);
    rig_close(&g);
}

/* outq_flush_some stops once its bound is sent, with the socket still writable, and the
 * next call goes on where it stopped: one wake-up of a connection sends a bounded amount
 * however much is queued (connio.h, fairness). */
TEST(outq_flush_some_stops_at_its_bound) {
    rig g;
    rig_open(&g, 0);
    outq *q = &g.q;
    for (int i = 0; i < 8; i++) {
        uint8_t *b = malloc(1000);
        memset(b, 'a' + i, 1000);
        CHECK_EQ(outq_owned(q, b, 1000), 0);
    }
    uint64_t progress = 0;
    size_t sent = 0;
    CHECK_EQ(outq_flush_some(q, g.sv[0], NULL, &progress, 2500, &sent), 0);
    CHECK_EQ(sent, 2500);
    CHECK(outq_busy(q));
    CHECK_EQ(q->pending, 8000 - sent);
    CHECK_EQ(outq_flush_some(q, g.sv[0], NULL, &progress, SIZE_MAX, &sent), 0);
    CHECK(!outq_busy(q));
    uint8_t buf[9000];
    CHECK_EQ(read_all(g.sv[1], buf, sizeof(buf)), 8000);
    for (int i = 0; i < 8; i++)
        CHECK_EQ(buf[i * 1000 + 999], 'a' + i);
    rig_close(&g);
}
