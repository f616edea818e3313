/*
 * test_cluster_etcd.c — membership through a real etcd started by the test: nodes
 * register under leases, a client of etcd://.../CLUSTER sees joins and leaves (a killed
 * node drops out when its lease expires, a stopped one at once), and when etcd itself is
 * killed nodes and clients keep serving on the last view.
 *
 * Waits for a change are bounded loops that fail the test when the change never comes.
 * The two leaves the docs time (docs/CLUSTER.md: a killed node drops out within the TTL
 * plus one poll, a stopped one within one poll) are checked against those figures plus a
 * stated margin; joins, which include starting a process, only against a hang.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cluster_util.h"
#include "common/etcd.h"
#include "harness.h"
#include "tide.h"

#define TTL_S 2
#define POLL_MS 200
/* etcd drops expired leases in a sweep every 500 ms (its lessor), after the TTL. */
#define ETCD_SWEEP_MS 500
/* For scheduling on a loaded 2-core machine; below the TTL, so that a stopped node whose
 * lease is not revoked (it then leaves at the TTL) fails the bound. */
#define MARGIN_MS 500

static uint64_t ms_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

static void sleep_ms(int ms) {
    struct timespec d = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&d, NULL);
}

/* Start node i on ports[i], registered in cluster `name` of etcd e. */
static void start_member(test_server *ts, int port, const test_etcd *e, const char *name) {
    char ep[80], adv[40], ttl[8];
    snprintf(ep, sizeof(ep), "http://%s", e->endpoint);
    snprintf(adv, sizeof(adv), "127.0.0.1:%d", port);
    snprintf(ttl, sizeof(ttl), "%d", TTL_S);
    const char *const extra[] = {"--etcd",     ep,  "--cluster",   name,   "--advertise", adv,
                                 "--etcd-ttl", ttl, "--log-level", "info", NULL};
    cluster_start_node(ts, port, extra);
}

static int members(tide_store *s) {
    tide_cluster_info info;
    CHECK_EQ(tide_cluster_info_get(s, &info, sizeof info), 0);
    return (int)info.members;
}

/* Wait until the client's view has `want` members: within bound_ms of since (a time from
 * ms_now()) when bound_ms > 0, else only within ~20 s, a guard against a hang. */
static void wait_members(tide_store *s, int want, const char *what, uint64_t since,
                         uint64_t bound_ms) {
    for (int i = 0; i < 1000 && members(s) != want; i++)
        sleep_ms(20); /* up to ~20 s */
    char list[1024] = "";
    tide_cluster_members(s, list, sizeof(list));
    CHECK_MSG(members(s) == want, "%s: the view has %d members, expected %d:\n%s", what, members(s),
              want, list);
    uint64_t dt = ms_now() - since;
    printf("    %s: seen after %llu ms (lease TTL %d s", what, (unsigned long long)dt, TTL_S);
    if (bound_ms) printf(", bound %llu ms", (unsigned long long)bound_ms);
    printf(")\n");
    if (bound_ms)
        CHECK_MSG(dt <= bound_ms, "%s: seen after %llu ms, bound %llu ms", what,
                  (unsigned long long)dt, (unsigned long long)bound_ms);
}

/* Every key of [from, n) reads back with its bytes. */
static void read_range(tide_store *s, int from, int n, const char *when) {
    uint8_t v[4096], o[4096];
    for (int i = from; i < n; i++) {
        char key[32];
        size_t len = cluster_value(key, sizeof(key), v, i), vlen = 0;
        int rc = tide_get(s, key, strlen(key), o, sizeof(o), &vlen);
        CHECK_MSG(rc == 0, "%s: %s: %s", when, key, tide_errmsg(s));
        CHECK(vlen == len && memcmp(o, v, len) == 0);
    }
}

static void read_all(tide_store *s, int n, const char *when) {
    read_range(s, 0, n, when);
}

static void write_range(tide_store *s, int from, int to) {
    uint8_t v[4096];
    for (int i = from; i < to; i++) {
        char key[32];
        size_t len = cluster_value(key, sizeof(key), v, i);
        CHECK_MSG(tide_put(s, key, strlen(key), v, len) == 0, "%s", tide_errmsg(s));
    }
}

static int file_count(const char *path, const char *needle) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof(line), f))
        n += strstr(line, needle) != NULL;
    fclose(f);
    return n;
}

static int file_contains(const char *path, const char *needle) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[1024];
    int found = 0;
    while (!found && fgets(line, sizeof(line), f))
        found = strstr(line, needle) != NULL;
    fclose(f);
    return found;
}

TEST_T(cluster_etcd_membership, 90) {
    test_etcd e;
    etcd_start(&e);
    char u[256];
    snprintf(u, sizeof(u), "etcd://%s/c1?replicas=2&poll_ms=%d&retry_ms=200&timeout_ms=1000",
             e.endpoint, POLL_MS);
    /* No member yet: the handle opens, calls say why they fail. */
    tide_store *s;
    CHECK_MSG(tide_open(u, &s) == 0, "%s", tide_errmsg(NULL));
    CHECK_EQ(members(s), 0);
    CHECK_EQ(tide_put(s, "k", 1, "v", 1), -EHOSTUNREACH);
    CHECK_CONTAINS(tide_errmsg(s), "no members registered in etcd");
    /* Every call says the same (tide stat used to get a bare "no members"). */
    tide_stats st0;
    CHECK_EQ(tide_stats_get(s, &st0, sizeof(st0)), -EHOSTUNREACH);
    CHECK_CONTAINS(tide_errmsg(s), "no members registered in etcd under /tide/c1/members/");
    CHECK_EQ(tide_clear(s), -EHOSTUNREACH);
    CHECK_CONTAINS(tide_errmsg(s), "no members registered in etcd");
    /* And `tide stat` prints that message, not the bare code's "No route to host". */
    char cmd[700], out[4096];
    snprintf(cmd, sizeof(cmd), "timeout 20 %s stat '%s' 2>&1", test_tide_bin(), u);
    CHECK_EQ(test_run(cmd, out, sizeof(out)), 1);
    CHECK_CONTAINS(out, "no members registered in etcd under /tide/c1/members/");

    test_server ts[3];
    int ports[3];
    for (int i = 0; i < 3; i++) {
        ports[i] = test_free_port();
        start_member(&ts[i], ports[i], &e, "c1");
    }
    wait_members(s, 3, "3 nodes registered", ms_now(), 0);
    tide_cluster_info info;
    CHECK_EQ(tide_cluster_info_get(s, &info, sizeof info), 0);
    CHECK(info.view_changes >= 1);
    write_range(s, 0, 300);
    read_all(s, 300, "3 nodes");

    /* SIGKILL: the node stops renewing and drops out when its lease expires. */
    uint64_t killed = ms_now();
    CHECK_EQ(server_stop(&ts[1], SIGKILL), SIGKILL);
    read_all(s, 300, "a node killed, still in the view");
    wait_members(s, 2, "node killed (SIGKILL), lease expired", killed,
                 TTL_S * 1000 + ETCD_SWEEP_MS + POLL_MS + MARGIN_MS);
    read_all(s, 300, "a node killed, out of the view");
    /* It comes back empty and rejoins; keys stay readable (the fallback ranks). */
    start_member(&ts[1], ports[1], &e, "c1");
    wait_members(s, 3, "killed node restarted, rejoined", ms_now(), 0);
    read_all(s, 300, "after the rejoin");
    /* Node 1 came back empty, so some of those keys now have one copy; write new ones that
     * have both copies before the next node goes. */
    write_range(s, 300, 600);

    /* A clean stop revokes the lease: the node leaves without waiting for the TTL. */
    CHECK_EQ(server_stop(&ts[0], SIGTERM), 0);
    uint64_t stopped = ms_now(); /* it has exited: its lease is revoked */
    wait_members(s, 2, "node stopped (SIGTERM), lease revoked", stopped, POLL_MS + MARGIN_MS);
    CHECK(file_contains(ts[0].log, "lease") && file_contains(ts[0].log, "revoked"));
    start_member(&ts[0], ports[0], &e, "c1");
    wait_members(s, 3, "stopped node restarted, rejoined", ms_now(), 0);
    read_range(s, 300, 600, "after the second rejoin");

    /* etcd goes away: the client keeps its view, the nodes keep serving. */
    etcd_kill(&e);
    for (int i = 0; i < 500; i++) { /* up to ~10 s */
        CHECK_EQ(tide_cluster_info_get(s, &info, sizeof info), 0);
        if (info.etcd_errors > 0) break;
        sleep_ms(20);
    }
    CHECK(info.etcd_errors > 0);
    CHECK_EQ(info.members, 3);
    write_range(s, 600, 700);
    read_range(s, 300, 700, "etcd killed");
    int warned = 0;
    for (int i = 0; i < 500 && !warned; i++) { /* the next renewal logs it: up to ~10 s */
        warned = file_contains(ts[2].log, "etcd unreachable");
        if (!warned) sleep_ms(20);
    }
    CHECK_MSG(warned, "node log %s has no etcd warning", ts[2].log);
    sleep_ms(TTL_S * 1000); /* well past a lease TTL without etcd */
    CHECK_EQ(members(s), 3);
    read_range(s, 300, 700, "etcd gone for a TTL");
    /* A new client cannot start without etcd, and says where it looked. */
    tide_store *s2;
    CHECK(tide_open(u, &s2) < 0);
    CHECK_CONTAINS(tide_errmsg(NULL), e.endpoint);
    tide_close(s);
    for (int i = 0; i < 3; i++)
        server_stop(&ts[i], SIGTERM);
}

/* A node started while etcd is down serves at once and registers when etcd comes. */
TEST_T(cluster_etcd_node_registers_when_etcd_comes, 60) {
    test_etcd e = {0};
    int eport = test_free_port(), port = test_free_port();
    snprintf(e.endpoint, sizeof(e.endpoint), "127.0.0.1:%d", eport);
    test_server ts;
    start_member(&ts, port, &e, "late");
    tide_store *n;
    CHECK_EQ(tide_open(ts.url, &n), 0);
    CHECK_EQ(tide_put(n, "k", 1, "v", 1), 0);
    tide_close(n);
    CHECK(file_contains(ts.log, "cannot register"));
    etcd_start_on(&e, eport);
    char u[256];
    snprintf(u, sizeof(u), "etcd://%s/late?poll_ms=200", e.endpoint);
    tide_store *s = NULL;
    for (int i = 0; i < 100; i++) { /* up to ~20 s: the node retries every TTL/3 */
        CHECK_MSG(tide_open(u, &s) == 0, "%s", tide_errmsg(NULL));
        if (members(s) == 1) break;
        tide_close(s);
        s = NULL;
        sleep_ms(200);
    }
    CHECK_MSG(s != NULL, "the node never registered; see %s", ts.log);
    CHECK_EQ(tide_exists(s, "k", 1), 1);
    tide_close(s);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
    etcd_kill(&e);
}

/* A node whose etcd lease lapsed was out of every client's view meanwhile, and so may have
 * missed writes: it drops what it holds (docs/CLUSTER.md, "Replicas that missed writes").
 * The lease is revoked behind the node's back; its next renewal finds it gone. */
TEST_T(cluster_etcd_lapsed_lease_drops_what_may_be_stale, 60) {
    test_etcd e;
    etcd_start(&e);
    test_server ts;
    int port = test_free_port();
    start_member(&ts, port, &e, "lapse");
    char u[256];
    snprintf(u, sizeof(u), "etcd://%s/lapse?poll_ms=200", e.endpoint);
    tide_store *s;
    CHECK_MSG(tide_open(u, &s) == 0, "%s", tide_errmsg(NULL));
    wait_members(s, 1, "registered", ms_now(), 0);
    for (int i = 0; i < 20; i++) {
        char key[16];
        snprintf(key, sizeof(key), "lapse-%d", i);
        CHECK_EQ(tide_put(s, key, strlen(key), "old bytes", 9), 0);
    }
    /* The lease id, from the node's log: "(lease 1a2b..., TTL 2 s)". */
    unsigned long long lease = 0;
    FILE *f = fopen(ts.log, "r");
    CHECK(f);
    char line[1024];
    while (fgets(line, sizeof(line), f)) {
        const char *p = strstr(line, "(lease ");
        if (p) sscanf(p, "(lease %llx", &lease);
    }
    fclose(f);
    CHECK_MSG(lease != 0, "no lease in %s", ts.log);
    etcd_client *c;
    char err[512];
    CHECK_MSG(etcd_open(e.endpoint, 2000, &c, err, sizeof(err)) == 0, "%s", err);
    CHECK_MSG(etcd_lease_revoke(c, (int64_t)lease, err, sizeof(err)) == 0, "%s", err);
    etcd_close(c);
    int lapsed = 0;
    for (int i = 0; i < 500 && !lapsed; i++) { /* the next renewal, TTL/3: up to ~10 s */
        lapsed = file_contains(ts.log, "expired in etcd");
        if (!lapsed) sleep_ms(20);
    }
    CHECK_MSG(lapsed, "the node never noticed its lease expired; see %s", ts.log);
    /* Its second registration, which follows whatever it did about the lapse (bounded: 2 s). */
    for (int i = 0; i < 100 && file_count(ts.log, "registered 127.0.0.1") < 2; i++)
        sleep_ms(20);
    CHECK_EQ(file_count(ts.log, "registered 127.0.0.1"), 2);
    wait_members(s, 1, "registered again", ms_now(), 0);
    int found = 0;
    for (int i = 0; i < 20; i++) {
        char key[16], v[16];
        size_t n;
        snprintf(key, sizeof(key), "lapse-%d", i);
        found += tide_get(s, key, strlen(key), v, sizeof(v), &n) == 0;
    }
    printf("    lease revoked: %d of 20 keys written before it still served after the lapse\n",
           found);
    CHECK_EQ(found, 0);
    tide_close(s);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
    etcd_kill(&e);
}

/* Flags that cannot work stop the start with a message. */
TEST(cluster_serve_flags) {
    char cmd[600];
    const char *bad[] = {"--etcd http://127.0.0.1:1", "--cluster c1",
                         "--etcd http://127.0.0.1:1 --cluster 'a/b'",
                         "--etcd http://127.0.0.1:1 --cluster c1 --advertise nope",
                         "--etcd http://127.0.0.1:1 --cluster c1 --etcd-ttl 1"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(cmd, sizeof(cmd), "%s serve --port 0 --metrics-port 0 %s 2>/dev/null",
                 test_tide_bin(), bad[i]);
        int st = system(cmd);
        test_context = bad[i];
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 2);
    }
    test_context = NULL;
    /* Listening on every address needs the address to advertise. */
    snprintf(cmd, sizeof(cmd),
             "%s serve --bind 0.0.0.0 --port 0 --metrics-port 0 --etcd http://127.0.0.1:1 "
             "--cluster c1 2>%s/err",
             test_tide_bin(), test_tmpdir());
    int st = system(cmd);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1);
    snprintf(cmd, sizeof(cmd), "%s/err", test_tmpdir());
    CHECK(file_contains(cmd, "--advertise"));
}
