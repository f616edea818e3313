/*
 * test_cluster_stale.c — a replica that missed acknowledged writes never serves the state
 * they replaced (docs/CLUSTER.md, "Replicas that missed writes").
 *
 * Two tided nodes, replicas=2 (each key on both). Every key is put (v1); one node is
 * stopped (SIGSTOP); every key is removed and every odd key put again with new bytes (v2),
 * all acknowledged by the other node alone; the stopped node comes back (SIGCONT, or a
 * SIGKILL and a restart from its SSD tier); keys are read by the old client, a second client
 * and a new one; the other node is killed; they are read again; and the odd keys are put
 * a third time (v3) and read back. A read of v1 (the removed or superseded bytes) is stale;
 * a miss is always allowed. Every figure is printed; the tests want 0 stale reads.
 *
 * The last tests cut a node off without stopping it: the clients reach it through a TCP
 * relay in this process, which resets every connection and refuses new ones while "cut"
 * (the node keeps running and sees no stall; only the writer knows it skipped the node, and
 * the node that took the writes holds a hint). Variants: the writer reads first after its
 * back-off; another client reads through the node at once; the writer is gone before the
 * heal; a client reads throughout, in flight across the cut and the heal.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cluster_util.h"
#include "common/prng.h"
#include "harness.h"
#include "server_util.h"
#include "tide.h"

#define NKEYS 120
#define VMAX (64 * 1024)

/* Key i's value of version ver: len bytes that differ between versions at every offset. */
static size_t stale_value(char *key, size_t cap, uint8_t *v, int i, int ver, size_t len) {
    snprintf(key, cap, "stale-%d", i);
    uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1) + (uint64_t)ver * 0x51ed27ull;
    for (size_t j = 0; j < len; j++) {
        v[j] = (uint8_t)(prng_next(&x) ^ (uint64_t)ver);
    }
    return len;
}

typedef struct stale_counts {
    int reads, stale, fresh, misses;
} stale_counts;

/* Read every key through s: v1 is stale; `want` is the version an odd key may hold now
 * (0: none), even keys were removed. */
static void read_all(tide_store *s, size_t vlen, int want, stale_counts *c) {
    static uint8_t v1[VMAX], vw[VMAX], got[VMAX];
    for (int i = 0; i < NKEYS; i++) {
        char key[32];
        stale_value(key, sizeof(key), v1, i, 1, vlen);
        if (want) stale_value(key, sizeof(key), vw, i, want, vlen);
        size_t n = 0;
        int rc = tide_get(s, key, strlen(key), got, sizeof(got), &n);
        /* A key whose only live member is still backing off in this client's view (it timed
         * out while stopped) fails until the back-off ends: bounded, 3 s. */
        for (int t = 0; t < 30 && rc < 0 && rc != TIDE_ENOTFOUND; t++) {
            usleep(100 * 1000);
            rc = tide_get(s, key, strlen(key), got, sizeof(got), &n);
        }
        c->reads++;
        if (rc == TIDE_ENOTFOUND) {
            c->misses++;
            continue;
        }
        CHECK_MSG(rc == 0, "%s: %s", key, tide_errmsg(s));
        CHECK_EQ(n, vlen);
        if (!memcmp(got, v1, vlen))
            c->stale++;
        else if (want && (i % 2 == 1) && !memcmp(got, vw, vlen))
            c->fresh++;
        else
            CHECK_MSG(0, "%s: bytes of no version written", key);
    }
}

/* A client reading every key in a loop throughout an attack (several clients; reads in
 * flight across the stop and the resume). state[i] is the last change to key i that was
 * acknowledged: 0 v1 put, 1 removed, 2 v2 put, 3 v3 put. A read is stale when it returns
 * bytes older than the change acknowledged before it began. */
typedef struct bgread {
    tide_store *s;
    size_t vlen;
    atomic_int stop, state[NKEYS];
    atomic_long reads, stale, wrong, errors;
    pthread_t th;
} bgread;
static bgread *g_bg; /* the one running, or NULL */

static void bg_note(int i, int change) {
    if (g_bg) atomic_store(&g_bg->state[i], change);
}

static void *bg_main(void *arg) {
    bgread *g = arg;
    static uint8_t want[3][VMAX], got[VMAX]; /* one reader at a time */
    while (!atomic_load(&g->stop)) {
        for (int i = 0; i < NKEYS && !atomic_load(&g->stop); i++) {
            char key[32];
            for (int v = 0; v < 3; v++)
                stale_value(key, sizeof(key), want[v], i, v + 1, g->vlen);
            int before = atomic_load(&g->state[i]);
            size_t n = 0;
            int rc = tide_get(g->s, key, strlen(key), got, sizeof(got), &n);
            atomic_fetch_add(&g->reads, 1);
            if (rc == TIDE_ENOTFOUND) continue;
            if (rc < 0) {
                atomic_fetch_add(&g->errors, 1);
                continue;
            }
            int v = 0;
            while (v < 3 && (n != g->vlen || memcmp(got, want[v], n) != 0))
                v++;
            if (v == 3) {
                atomic_fetch_add(&g->wrong, 1);
                continue;
            }
            int change = v == 0 ? 0 : v + 1; /* v1 -> 0, v2 -> 2, v3 -> 3 */
            if (change < before) atomic_fetch_add(&g->stale, 1);
        }
    }
    return NULL;
}

static void put_all(tide_store *s, size_t vlen, int ver, int odd_only) {
    static uint8_t v[VMAX];
    for (int i = odd_only ? 1 : 0; i < NKEYS; i += odd_only ? 2 : 1) {
        char key[32];
        stale_value(key, sizeof(key), v, i, ver, vlen);
        int rc = tide_put(s, key, strlen(key), v, vlen);
        CHECK_MSG(rc == 0, "put %s v%d: %s", key, ver, tide_errmsg(s));
        bg_note(i, ver == 1 ? 0 : ver);
    }
}

/* RESUME_RESTART_FULL: node 0's files stop growing at 3 MiB (RLIMIT_FSIZE, inherited), so
 * its SSD tier is full — spills and the records of removes and clears fail — and it is
 * killed and restarted a second time once alone. */
enum { RESUME_SIGCONT, RESUME_RESTART, RESUME_RESTART_FULL };

/* Start node i; node 0 with RESUME_RESTART_FULL under the file size limit. */
static void stale_start(test_server *ts, int port, const char **argv, int full) {
    struct rlimit old, rl;
    if (full) {
        CHECK_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
        rl = old;
        rl.rlim_cur = 3 << 20;
        CHECK_EQ(setrlimit(RLIMIT_FSIZE, &rl), 0);
    }
    cluster_start_node(ts, port, argv);
    if (full) CHECK_EQ(setrlimit(RLIMIT_FSIZE, &old), 0);
}

static void node_args(char (*a)[64], const char **argv, int disk, int idx) {
    int n = 0;
    if (disk) {
        snprintf(a[0], 64, "%s/ssd-%d", test_tmpdir(), idx);
        argv[n++] = "--capacity";
        argv[n++] = "2MiB";
        argv[n++] = "--disk-dir";
        argv[n++] = a[0];
        argv[n++] = "--disk-capacity";
        argv[n++] = "64MiB";
        argv[n++] = "--disk-segment";
        argv[n++] = "4MiB";
    }
    argv[n] = NULL;
}

/* The three reads' figures, then the background reader stopped, its figures printed and
 * its wrong bytes checked (none). Returns its stale reads (0 without one). */
static long attack_report(const stale_counts *before, const stale_counts *after,
                          const stale_counts *reput, bgread *g) {
    printf("    stale reads: %d of %d with both nodes up, %d of %d after the other node was "
           "killed, %d of %d after putting again (%d of those found the new bytes)\n",
           before->stale, before->reads, after->stale, after->reads, reput->stale, reput->reads,
           reput->fresh);
    if (!g) return 0;
    atomic_store(&g->stop, 1);
    pthread_join(g->th, NULL);
    g_bg = NULL;
    printf("    a client reading throughout: %ld stale of %ld reads (%ld failed while a node "
           "was stopped, killed or cut off), %ld of bytes never written\n",
           atomic_load(&g->stale), atomic_load(&g->reads), atomic_load(&g->errors),
           atomic_load(&g->wrong));
    CHECK_EQ(atomic_load(&g->wrong), 0);
    long stale = atomic_load(&g->stale);
    tide_close(g->s);
    free(g);
    return stale;
}

/*
 * The attack. resume: SIGCONT, or SIGKILL and a restart on the same port and disk;
 * reads_between: read before the other node is killed; bg: a client reads throughout.
 * Returns the stale reads in total.
 */
static int stale_attack(int resume, int reads_between, int bg) {
    const int disk = resume != RESUME_SIGCONT, full = resume == RESUME_RESTART_FULL;
    const size_t vlen = disk ? VMAX : 3000; /* with the SSD tier: 7.5 MiB through 2 MiB pools */
    test_server ts[2];
    int ports[2];
    char dirs[2][1][64];
    const char *argv[2][12];
    for (int i = 0; i < 2; i++) {
        ports[i] = test_free_port();
        node_args(dirs[i], argv[i], disk, i);
        stale_start(&ts[i], ports[i], argv[i], full && i == 0);
    }
    char u[512];
    cluster_url(u, sizeof(u), ts, 2, "replicas=2&timeout_ms=300&retry_ms=50");
    tide_store *a, *b, *c;
    CHECK_MSG(tide_open(u, &a) == 0, "%s", tide_errmsg(NULL));
    put_all(a, vlen, 1, 0);
    bgread *g = NULL;
    if (bg) {
        g = calloc(1, sizeof(*g));
        g->vlen = vlen;
        CHECK_MSG(tide_open(u, &g->s) == 0, "%s", tide_errmsg(NULL));
        g_bg = g;
        CHECK_EQ(pthread_create(&g->th, NULL, bg_main, g), 0);
    }
    if (disk) {
        tide_store *n0;
        CHECK_EQ(tide_open(ts[0].url, &n0), 0);
        tide_stats st;
        CHECK_EQ(tide_stats_get(n0, &st, sizeof(st)), 0);
        printf("    node 0 holds %llu objects, %llu of them on disk\n",
               (unsigned long long)st.objects, (unsigned long long)st.disk_objects);
        CHECK_MSG(st.disk_objects > 0, "nothing spilled: the restart would restore nothing");
        tide_close(n0);
    }

    /* Node 0 stops; every key removed, odd keys put again: acknowledged by node 1 alone. */
    server_sigstop(ts[0].pid);
    for (int i = 0; i < NKEYS; i++) {
        char key[32];
        snprintf(key, sizeof(key), "stale-%d", i);
        int rc = tide_remove(a, key, strlen(key));
        CHECK_MSG(rc == 0, "remove %s: %d %s", key, rc, tide_errmsg(a));
        bg_note(i, 1);
    }
    put_all(a, vlen, 2, 1);

    if (resume == RESUME_SIGCONT) {
        CHECK_EQ(kill(ts[0].pid, SIGCONT), 0);
    } else {
        CHECK_EQ(server_stop(&ts[0], SIGKILL), SIGKILL);
        stale_start(&ts[0], ports[0], argv[0], full);
    }
    CHECK_MSG(tide_open(u, &b) == 0, "%s", tide_errmsg(NULL));

    stale_counts before = {0};
    if (reads_between) {
        read_all(a, vlen, 2, &before);
        read_all(b, vlen, 2, &before);
    }

    CHECK_EQ(server_stop(&ts[1], SIGKILL), SIGKILL);
    CHECK_MSG(tide_open(u, &c) == 0, "%s", tide_errmsg(NULL));
    stale_counts after = {0};
    read_all(a, vlen, 2, &after);
    read_all(b, vlen, 2, &after);
    read_all(c, vlen, 2, &after);
    if (full) { /* alone now: killed and restarted again, what its full disk kept comes back */
        CHECK_EQ(server_stop(&ts[0], SIGKILL), SIGKILL);
        stale_start(&ts[0], ports[0], argv[0], full);
        read_all(a, vlen, 2, &after);
        read_all(c, vlen, 2, &after);
    }

    /* Put again after the heal: the new bytes must win on the node that was stale. */
    put_all(c, vlen, 3, 1);
    stale_counts reput = {0};
    read_all(a, vlen, 3, &reput);

    long bg_stale = attack_report(&before, &after, &reput, g);
    /* Node 1 was up with v2 of every odd key: the newest bytes were served (2 clients). */
    if (reads_between) CHECK_EQ(before.fresh, NKEYS);
    if (full) /* 2 MiB of memory and a full disk cannot hold the 3.75 MiB put again */
        CHECK(reput.fresh > 0 && reput.fresh + reput.misses == NKEYS);
    else
        CHECK_EQ(reput.fresh, NKEYS / 2);
    tide_close(a);
    tide_close(b);
    tide_close(c);
    CHECK_EQ(server_stop(&ts[0], SIGTERM), 0); /* a clean exit (66: a race under TSAN) */
    return before.stale + after.stale + reput.stale + (int)bg_stale;
}

/* Stopped, resumed, read by several clients, then the other replica killed. */
TEST_T(cluster_stale_replica_after_sigstop_reads_then_kill, 120) {
    CHECK_EQ(stale_attack(RESUME_SIGCONT, 1, 0), 0);
}

/* The same with a third client reading every key all along: in flight across the stop,
 * the resume and the kill. */
TEST_T(cluster_stale_replica_with_a_client_reading_throughout, 120) {
    CHECK_EQ(stale_attack(RESUME_SIGCONT, 1, 1), 0);
}

/* The other replica killed right after the resume, before anything reads. */
TEST_T(cluster_stale_replica_after_sigstop_kill_at_once, 120) {
    CHECK_EQ(stale_attack(RESUME_SIGCONT, 0, 0), 0);
}

/* Its SSD tier full, killed while stopped, restarted, then killed and restarted again. */
TEST_T(cluster_stale_replica_restarted_twice_from_a_full_disk, 180) {
    CHECK_EQ(stale_attack(RESUME_RESTART_FULL, 1, 0), 0);
}

/* Killed while stopped and restarted from its SSD tier, which still holds the old bytes. */
TEST_T(cluster_stale_replica_restarted_from_disk, 180) {
    CHECK_EQ(stale_attack(RESUME_RESTART, 1, 0), 0);
}

/* ---- a node cut off while it runs --------------------------------------------------- */

/* A TCP relay from a loopback port to a node: while `cut`, every connection is reset and
 * new ones are closed at once. One thread, at most RELAY_MAX pairs, polled every 20 ms. */
#define RELAY_MAX 64
typedef struct relay {
    int lfd, port, upstream;
    atomic_int cut, stop;
    int a[RELAY_MAX], b[RELAY_MAX]; /* client side, node side; -1 when free */
    pthread_t th;
} relay;

static void relay_close(relay *r, int i) {
    struct linger lg = {1, 0}; /* a reset, as a broken path would give */
    setsockopt(r->a[i], SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    close(r->a[i]);
    close(r->b[i]);
    r->a[i] = r->b[i] = -1;
}

static int relay_move(int from, int to) {
    char buf[65536];
    ssize_t n = recv(from, buf, sizeof(buf), MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) return -1;
    for (ssize_t off = 0; n > 0 && off < n;) {
        ssize_t w = send(to, buf + off, (size_t)(n - off), MSG_NOSIGNAL);
        if (w < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
            struct pollfd p = {to, POLLOUT, 0};
            poll(&p, 1, 100);
            continue;
        }
        off += w;
    }
    return 0;
}

static void *relay_main(void *arg) {
    relay *r = arg;
    while (!atomic_load(&r->stop)) {
        struct pollfd p[1 + 2 * RELAY_MAX];
        int idx[1 + 2 * RELAY_MAX], np = 0;
        p[np] = (struct pollfd){r->lfd, POLLIN, 0};
        idx[np++] = -1;
        for (int i = 0; i < RELAY_MAX; i++) {
            if (r->a[i] < 0) continue;
            if (atomic_load(&r->cut)) {
                relay_close(r, i);
                continue;
            }
            p[np] = (struct pollfd){r->a[i], POLLIN, 0};
            idx[np++] = i;
            p[np] = (struct pollfd){r->b[i], POLLIN, 0};
            idx[np++] = RELAY_MAX + i;
        }
        if (poll(p, (nfds_t)np, 20) <= 0) continue;
        for (int k = 0; k < np; k++) {
            if (!p[k].revents) continue;
            if (idx[k] < 0) {
                int fd = accept(r->lfd, NULL, NULL);
                if (fd < 0) continue;
                int slot = -1;
                for (int i = 0; i < RELAY_MAX && slot < 0; i++)
                    if (r->a[i] < 0) slot = i;
                int up = -1;
                if (slot >= 0 && !atomic_load(&r->cut)) {
                    up = socket(AF_INET, SOCK_STREAM, 0);
                    struct sockaddr_in sa = {.sin_family = AF_INET,
                                             .sin_port = htons((uint16_t)r->upstream)};
                    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
                    if (connect(up, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
                        close(up);
                        up = -1;
                    }
                }
                if (up < 0) {
                    close(fd);
                    continue;
                }
                r->a[slot] = fd;
                r->b[slot] = up;
                continue;
            }
            int i = idx[k] % RELAY_MAX, from_a = idx[k] < RELAY_MAX;
            if (r->a[i] < 0) continue;
            if (relay_move(from_a ? r->a[i] : r->b[i], from_a ? r->b[i] : r->a[i]) != 0)
                relay_close(r, i);
        }
    }
    for (int i = 0; i < RELAY_MAX; i++)
        if (r->a[i] >= 0) relay_close(r, i);
    return NULL;
}

static void relay_start(relay *r, int upstream) {
    memset(r, 0, sizeof(*r));
    for (int i = 0; i < RELAY_MAX; i++)
        r->a[i] = r->b[i] = -1;
    r->upstream = upstream;
    r->lfd = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(r->lfd >= 0);
    int one = 1;
    setsockopt(r->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK_EQ(bind(r->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    CHECK_EQ(listen(r->lfd, 64), 0);
    socklen_t sl = sizeof(sa);
    CHECK_EQ(getsockname(r->lfd, (struct sockaddr *)&sa, &sl), 0);
    r->port = ntohs(sa.sin_port);
    CHECK_EQ(pthread_create(&r->th, NULL, relay_main, r), 0);
}

static void relay_stop(relay *r) {
    atomic_store(&r->stop, 1);
    pthread_join(r->th, NULL);
    close(r->lfd);
}

/* How a cut-off attack runs: whether the writer waits out its back-off on node 0 after the
 * heal and reads first (CUT_WAIT, the writer then tells node 0 itself), or not; whether
 * the writer's handle is closed before the heal (nobody who skipped node 0 is left to tell
 * it); whether a client reads every key throughout (reads in flight across the cut and the
 * heal). */
enum { CUT_WAIT = 1, CUT_WRITER_GONE = 2, CUT_BG = 4, CUT_EXISTS = 8 };

/* EXISTS of every key through s, one call each: a removed (even) key said present is
 * stale. Returns those. */
static int exists_stale(tide_store *s) {
    int stale = 0;
    for (int i = 0; i < NKEYS; i += 2) {
        char key[32];
        snprintf(key, sizeof(key), "stale-%d", i);
        int rc = tide_exists(s, key, strlen(key));
        for (int t = 0; t < 30 && rc < 0; t++) { /* bounded, as read_all */
            usleep(100 * 1000);
            rc = tide_exists(s, key, strlen(key));
        }
        CHECK_MSG(rc >= 0, "exists %s: %s", key, tide_errmsg(s));
        stale += rc == 1;
    }
    return stale;
}

/*
 * Node 0 is cut off (running) while the writer removes every key and puts the odd ones
 * again; the path heals; clients read (with CUT_WAIT the writer first, after its back-off;
 * otherwise a second client at once, through node 0); node 1 is killed; they and a new
 * client read; the odd keys are put again and read back. Returns the stale reads in all.
 */
static int cut_attack(int mode) {
    test_server ts[2];
    for (int i = 0; i < 2; i++)
        cluster_start_node(&ts[i], 0, NULL);
    relay *r = calloc(1, sizeof(*r));
    relay_start(r, ts[0].port);
    char u[512];
    snprintf(u, sizeof(u), "tide://127.0.0.1:%d,127.0.0.1:%d?replicas=2&timeout_ms=300&retry_ms=50",
             r->port, ts[1].port);
    const size_t vlen = 3000;
    tide_store *a, *b, *c;
    CHECK_MSG(tide_open(u, &a) == 0, "%s", tide_errmsg(NULL));
    CHECK_MSG(tide_open(u, &b) == 0, "%s", tide_errmsg(NULL));
    put_all(a, vlen, 1, 0);
    bgread *g = NULL;
    if (mode & CUT_BG) {
        g = calloc(1, sizeof(*g));
        g->vlen = vlen;
        CHECK_MSG(tide_open(u, &g->s) == 0, "%s", tide_errmsg(NULL));
        g_bg = g;
        CHECK_EQ(pthread_create(&g->th, NULL, bg_main, g), 0);
    }
    atomic_store(&r->cut, 1);
    for (int i = 0; i < NKEYS; i++) {
        char key[32];
        snprintf(key, sizeof(key), "stale-%d", i);
        int rc = tide_remove(a, key, strlen(key));
        CHECK_MSG(rc == 0, "remove %s: %d %s", key, rc, tide_errmsg(a));
        bg_note(i, 1);
    }
    put_all(a, vlen, 2, 1);
    if (mode & CUT_WRITER_GONE) {
        tide_close(a);
        a = NULL;
    }
    atomic_store(&r->cut, 0);
    stale_counts before = {0}, after = {0}, reput = {0};
    int ex_stale = 0;
    if (mode & CUT_EXISTS) { /* first thing after the heal: "is it there?", at once */
        ex_stale = exists_stale(b);
        printf("    exists: %d of %d removed keys said present\n", ex_stale, NKEYS / 2);
    }
    if (mode & CUT_WAIT) {
        /* Past the writer's back-off on node 0 (retry_ms 50, doubling to 800 ms): its next
         * call there is its first after the cut, and tells node 0. */
        usleep(1000 * 1000);
        read_all(a, vlen, 2, &before);
        read_all(b, vlen, 2, &before);
    } else {
        /* At once, through node 0, by a client that never skipped it. */
        read_all(b, vlen, 2, &before);
        if (a) read_all(a, vlen, 2, &before);
    }
    CHECK_EQ(server_stop(&ts[1], SIGKILL), SIGKILL);
    CHECK_MSG(tide_open(u, &c) == 0, "%s", tide_errmsg(NULL));
    if (a) read_all(a, vlen, 2, &after);
    read_all(b, vlen, 2, &after);
    read_all(c, vlen, 2, &after);
    put_all(c, vlen, 3, 1);
    read_all(b, vlen, 3, &reput);
    long bg_stale = attack_report(&before, &after, &reput, g);
    /* Node 1 was up with v2 of every odd key: each client reading then found it. */
    CHECK_EQ(before.fresh, (a ? 2 : 1) * NKEYS / 2);
    CHECK_EQ(reput.fresh, NKEYS / 2);
    if (a) tide_close(a);
    tide_close(b);
    tide_close(c);
    relay_stop(r);
    free(r);
    CHECK_EQ(server_stop(&ts[0], SIGTERM), 0); /* a clean exit (66: a race under TSAN) */
    return before.stale + after.stale + reput.stale + (int)bg_stale + ex_stale;
}

/* The writer waits out its back-off and reads first: its first call tells node 0. */
TEST_T(cluster_stale_replica_cut_off_while_running, 120) {
    CHECK_EQ(cut_attack(CUT_WAIT), 0);
}

/* Another client reads through node 0 at once, while the writer still backs off: node 1's
 * hint, asked beside the read, is what tells node 0. */
TEST_T(cluster_stale_replica_cut_off_read_by_another_client_at_once, 120) {
    CHECK_EQ(cut_attack(0), 0);
}

/* The writer's handle is closed before the heal: no client that skipped node 0 is left. */
TEST_T(cluster_stale_replica_cut_off_writer_gone_before_the_heal, 120) {
    CHECK_EQ(cut_attack(CUT_WRITER_GONE), 0);
}

/* A client reads every key all along, in flight across the cut and the heal; the writer
 * is gone before the heal. */
TEST_T(cluster_stale_replica_cut_off_reads_in_flight_across_the_heal, 120) {
    CHECK_EQ(cut_attack(CUT_WRITER_GONE | CUT_BG), 0);
}

/* The first call after the heal is EXISTS, by a client that never skipped node 0: a
 * removed key must not be said present (match_prefix asks the same way). */
TEST_T(cluster_stale_replica_cut_off_exists_at_once, 120) {
    CHECK_EQ(cut_attack(CUT_EXISTS), 0);
}
