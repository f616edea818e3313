/*
 * test_cluster_hints.c — the cluster's hints and read check (docs/CLUSTER.md, "Hints")
 * against real tided nodes: many threads reading through few connections per node never
 * wait for each other forever (the read's hint question holds a connection to the witness
 * while the read takes one to the member), and the hint table is touched only on a cluster
 * member's connection (a plain client's REPLICA HINT or TOLD is refused, the table kept).
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cluster_util.h"
#include "harness.h"
#include "proto/frame.h"
#include "server_util.h"
#include "tide.h"

#define HK_KEYS 64
#define HK_THREADS 16
#define HK_RUN_MS 2000.0
#define HK_WAIT_MS 30000.0

typedef struct hk_reader {
    pthread_t th;
    tide_store *s;
    atomic_int *done;
    int idx;
    long gets, bad;
} hk_reader;

/* Single-key gets of keys that either member may own, for HK_RUN_MS (at most 100,000). */
static void *hk_main(void *arg) {
    hk_reader *r = arg;
    uint8_t v[4096], got[4096];
    char key[64];
    double t0 = test_now_ms();
    for (int n = 0; n < 100000 && test_now_ms() - t0 < HK_RUN_MS; n++) {
        int i = (r->idx * 7 + n) % HK_KEYS;
        size_t len = cluster_value(key, sizeof(key), v, i), glen = 0;
        int rc = tide_get(r->s, key, strlen(key), got, sizeof(got), &glen);
        r->gets++;
        if (rc != 0 || glen != len || memcmp(got, v, len) != 0) r->bad++;
    }
    atomic_fetch_add(r->done, 1);
    return NULL;
}

static void hk_run(const char *opts) {
    test_server ts[2];
    cluster_start_nodes(ts, 2, NULL);
    char u[512];
    cluster_url(u, sizeof(u), ts, 2, opts);
    tide_store *s;
    CHECK_MSG(tide_open(u, &s) == 0, "%s", tide_errmsg(NULL));
    uint8_t v[4096];
    char key[64];
    for (int i = 0; i < HK_KEYS; i++) {
        size_t len = cluster_value(key, sizeof(key), v, i);
        CHECK_MSG(tide_put(s, key, strlen(key), v, len) == 0, "put %s: %s", key, tide_errmsg(s));
    }
    atomic_int done = 0;
    hk_reader *r = calloc(HK_THREADS, sizeof(*r));
    for (int i = 0; i < HK_THREADS; i++) {
        r[i] = (hk_reader){.s = s, .done = &done, .idx = i};
        CHECK_EQ(pthread_create(&r[i].th, NULL, hk_main, &r[i]), 0);
    }
    /* The watchdog: readers stop after HK_RUN_MS; one still in a call long after is stuck. */
    double t0 = test_now_ms();
    while (atomic_load(&done) < HK_THREADS && test_now_ms() - t0 < HK_RUN_MS + HK_WAIT_MS)
        usleep(20000);
    int finished = atomic_load(&done);
    CHECK_MSG(finished == HK_THREADS,
              "%d of %d reader threads are still inside a get %.0f s after they were due to stop "
              "(%s): threads wait for each other's connections",
              HK_THREADS - finished, HK_THREADS, HK_WAIT_MS / 1000, opts);
    long gets = 0, bad = 0;
    for (int i = 0; i < HK_THREADS; i++) {
        pthread_join(r[i].th, NULL);
        gets += r[i].gets;
        bad += r[i].bad;
    }
    printf("    %s: %ld gets by %d threads, %ld wrong or failed\n", opts, gets, HK_THREADS, bad);
    CHECK_EQ(bad, 0);
    free(r);
    tide_close(s);
    for (int i = 0; i < 2; i++)
        server_stop(&ts[i], SIGTERM);
}

/* conns=1: every question holds the only connection to its witness; conns=2 as asked. */
TEST_T(cluster_hints_many_readers_few_connections_never_deadlock, 120) {
    hk_run("replicas=2&read_check=1&conns=1&timeout_ms=5000");
    hk_run("replicas=2&read_check=1&conns=2&timeout_ms=5000");
}

/* One request on fd and its reply into *m (buf holds it). */
static void hk_call(int fd, const uint8_t *req, size_t len, uint8_t *buf, size_t cap,
                    frame_msg *m) {
    CHECK_EQ(send(fd, req, len, MSG_NOSIGNAL), (ssize_t)len);
    frame_decoder d;
    frame_decoder_init(&d, NULL);
    size_t have = 0;
    for (;;) {
        ssize_t n = frame_decode(&d, buf, have, m);
        CHECK_MSG(n >= 0, "a reply that does not decode (%zd)", n);
        if (n > 0) return;
        CHECK_MSG(have < cap, "a reply larger than %zu bytes", cap);
        ssize_t r = recv(fd, buf + have, cap - have, 0);
        CHECK_MSG(r > 0, "the connection closed or timed out before the reply");
        have += (size_t)r;
    }
}

/* A connection whose HELLO asked for `features`; the grant checked. */
static int hk_dial(int port, uint64_t features) {
    int fd = server_connect(port, 5);
    uint8_t req[256], buf[4096];
    size_t len;
    frame_msg m;
    frame_hello h = {FRAME_VERSION, FRAME_VERSION, features, NULL, 0};
    CHECK_EQ(frame_encode_hello(req, sizeof(req), &len, 1, &h), 0);
    hk_call(fd, req, len, buf, sizeof(buf), &m);
    CHECK_EQ(m.h.status, 0);
    CHECK_EQ(m.hello_reply.features & features, features);
    return fd;
}

/* REPLICA hint operation `flags` about `member` on fd: its status, counters in out. */
static int hk_hint_about(int fd, uint32_t flags, uint64_t member, uint64_t seq, uint64_t out[2]) {
    uint8_t req[256], buf[4096];
    size_t len;
    frame_msg m;
    static uint64_t req_id = 100;
    CHECK_EQ(frame_encode_replica_hint(req, sizeof(req), &len, req_id++, flags, 1000, member, seq),
             0);
    hk_call(fd, req, len, buf, sizeof(buf), &m);
    if (m.h.status == 0) {
        out[0] = m.replica.fences;
        out[1] = m.replica.generation & ~FRAME_REPLICA_TOLD_RECENT;
    } else {
        char msg[FRAME_ERRMSG_MAX + 1];
        snprintf(msg, sizeof(msg), "%.*s", (int)m.errmsg_len, m.errmsg ? m.errmsg : "");
        CHECK_CONTAINS(msg, m.h.status == TIDE_ELIMIT ? "hint table is full" : "hints features");
    }
    return m.h.status;
}

static int hk_hint(int fd, uint32_t flags, uint64_t seq, uint64_t out[2]) {
    return hk_hint_about(fd, flags, 77, seq, out);
}

TEST(cluster_hints_refused_on_a_plain_client_connection) {
    test_server ts;
    cluster_start_nodes(&ts, 1, NULL);
    /* A member's connection: HELLO with REPLICA and HINTS, then REPLICA as node.c sends. */
    int member = hk_dial(ts.port, FRAME_FEATURE_REPLICA | FRAME_FEATURE_HINTS);
    uint8_t req[256], buf[4096];
    size_t len;
    frame_msg m;
    CHECK_EQ(frame_encode_replica(req, sizeof(req), &len, 2, 0, 1000), 0);
    hk_call(member, req, len, buf, sizeof(buf), &m);
    CHECK_EQ(m.h.status, 0);
    uint64_t out[2];
    CHECK_EQ(hk_hint(member, FRAME_REPLICA_HINT, 0, out), 0);
    CHECK_EQ(hk_hint(member, FRAME_REPLICA_HINT, 0, out), 0);
    CHECK_EQ(out[0], 2);
    CHECK_EQ(out[1], 0);
    /* Plain clients: no features, and REPLICA granted without HINTS. */
    const uint64_t plain[2] = {0, FRAME_FEATURE_REPLICA};
    for (int p = 0; p < 2; p++) {
        int fd = hk_dial(ts.port, plain[p]);
        uint64_t junk[2];
        CHECK_EQ(hk_hint(fd, FRAME_REPLICA_TOLD, 2, junk), TIDE_EUNSUPPORTED);
        CHECK_EQ(hk_hint(fd, FRAME_REPLICA_HINT, 0, junk), TIDE_EUNSUPPORTED);
        CHECK_EQ(hk_hint(fd, FRAME_REPLICA_ASK, 0, junk), TIDE_EUNSUPPORTED);
        close(fd);
    }
    /* The table as the member left it: two hints, none told. */
    CHECK_EQ(hk_hint(member, FRAME_REPLICA_ASK, 0, out), 0);
    CHECK_EQ(out[0], 2);
    CHECK_EQ(out[1], 0);
    close(member);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}

/* A node whose hint table is full refuses a write's hint (TIDE_ELIMIT): an answer, not a
 * failure. The client must not mark that node down (it would fail over every call to it). */
TEST_T(cluster_hints_full_table_refusal_does_not_mark_the_node_down, 90) {
    test_server ts[2];
    cluster_start_nodes(ts, 2, NULL);
    /* Fill node 1's table through a member's connection: 1024 members never told. */
    int member = hk_dial(ts[1].port, FRAME_FEATURE_REPLICA | FRAME_FEATURE_HINTS);
    uint64_t out[2];
    int full = 0;
    for (int i = 0; i < 4096 && !full; i++) {
        int st = hk_hint_about(member, FRAME_REPLICA_HINT, 0xf00d0000ull + (uint64_t)i, 0, out);
        if (st == TIDE_ELIMIT)
            full = 1;
        else
            CHECK_EQ(st, 0);
    }
    CHECK_MSG(full, "the hint table never filled");
    /* A third member that is never started: writes that skip it leave hints. */
    int dead = test_free_port();
    char u[512];
    cluster_url(u, sizeof(u), ts, 2, "replicas=3&read_check=1&timeout_ms=2000&retry_ms=60000");
    char u3[600];
    snprintf(u3, sizeof(u3), "tide://127.0.0.1:%d,%s", dead, u + strlen("tide://"));
    tide_store *s;
    CHECK_MSG(tide_open(u3, &s) == 0, "%s", tide_errmsg(NULL));
    uint8_t v[4096];
    char key[64];
    /* Every key is on all three: each put skips the dead one and owes node 1 a hint, which
     * node 1 refuses; node 0's hinted copy still acknowledges the put. */
    for (int i = 0; i < 16; i++) {
        size_t len = cluster_value(key, sizeof(key), v, i);
        int rc = tide_put(s, key, strlen(key), v, len);
        CHECK_MSG(rc == 0, "put %s: %d %s", key, rc, tide_errmsg(s));
    }
    tide_cluster_info info;
    CHECK_EQ(tide_cluster_info_get(s, &info, sizeof(info)), 0);
    char members[1024];
    CHECK(tide_cluster_members(s, members, sizeof(members)) >= 0);
    CHECK_MSG(info.members_down == 1, "%u members down, want 1 (the one never started):\n%s",
              info.members_down, members);
    tide_close(s);
    close(member);
    for (int i = 0; i < 2; i++)
        server_stop(&ts[i], SIGTERM);
}
