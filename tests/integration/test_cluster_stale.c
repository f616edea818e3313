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
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cluster_util.h"
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
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v[j] = (uint8_t)(x ^ (uint64_t)ver);
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

static void put_all(tide_store *s, size_t vlen, int ver, int odd_only) {
    static uint8_t v[VMAX];
    for (int i = odd_only ? 1 : 0; i < NKEYS; i += odd_only ? 2 : 1) {
        char key[32];
        stale_value(key, sizeof(key), v, i, ver, vlen);
        int rc = tide_put(s, key, strlen(key), v, vlen);
        CHECK_MSG(rc == 0, "put %s v%d: %s", key, ver, tide_errmsg(s));
    }
}

enum { RESUME_SIGCONT, RESUME_RESTART };

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

/*
 * The attack. resume: SIGCONT, or SIGKILL and a restart on the same port and disk;
 * reads_between: read before the other node is killed. Returns the stale reads in total.
 */
static int stale_attack(int resume, int reads_between) {
    const int disk = resume == RESUME_RESTART;
    const size_t vlen = disk ? VMAX : 3000; /* with the SSD tier: 7.5 MiB through 2 MiB pools */
    test_server ts[2];
    int ports[2];
    char dirs[2][1][64];
    const char *argv[2][12];
    for (int i = 0; i < 2; i++) {
        ports[i] = test_free_port();
        node_args(dirs[i], argv[i], disk, i);
        cluster_start_node(&ts[i], ports[i], argv[i]);
    }
    char u[512];
    cluster_url(u, sizeof(u), ts, 2, "replicas=2&timeout_ms=300&retry_ms=50");
    tide_store *a, *b, *c;
    CHECK_MSG(tide_open(u, &a) == 0, "%s", tide_errmsg(NULL));
    put_all(a, vlen, 1, 0);
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
    CHECK_EQ(kill(ts[0].pid, SIGSTOP), 0);
    for (int i = 0; i < NKEYS; i++) {
        char key[32];
        snprintf(key, sizeof(key), "stale-%d", i);
        int rc = tide_remove(a, key, strlen(key));
        CHECK_MSG(rc == 0, "remove %s: %d %s", key, rc, tide_errmsg(a));
    }
    put_all(a, vlen, 2, 1);

    if (resume == RESUME_SIGCONT) {
        CHECK_EQ(kill(ts[0].pid, SIGCONT), 0);
    } else {
        CHECK_EQ(server_stop(&ts[0], SIGKILL), SIGKILL);
        cluster_start_node(&ts[0], ports[0], argv[0]);
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

    /* Put again after the heal: the new bytes must win on the node that was stale. */
    put_all(c, vlen, 3, 1);
    stale_counts reput = {0};
    read_all(a, vlen, 3, &reput);

    printf("    stale reads: %d of %d with both nodes up, %d of %d after the other node was "
           "killed, %d of %d after putting again (%d of those found the new bytes)\n",
           before.stale, before.reads, after.stale, after.reads, reput.stale, reput.reads,
           reput.fresh);
    /* Node 1 was up with v2 of every odd key: the newest bytes were served (2 clients). */
    if (reads_between) CHECK_EQ(before.fresh, NKEYS);
    CHECK_EQ(reput.fresh, NKEYS / 2);
    tide_close(a);
    tide_close(b);
    tide_close(c);
    server_stop(&ts[0], SIGTERM);
    return before.stale + after.stale + reput.stale;
}

/* Stopped, resumed, read by several clients, then the other replica killed. */
TEST_T(cluster_stale_replica_after_sigstop_reads_then_kill, 120) {
    CHECK_EQ(stale_attack(RESUME_SIGCONT, 1), 0);
}

/* The other replica killed right after the resume, before anything reads. */
TEST_T(cluster_stale_replica_after_sigstop_kill_at_once, 120) {
    CHECK_EQ(stale_attack(RESUME_SIGCONT, 0), 0);
}

/* Killed while stopped and restarted from its SSD tier, which still holds the old bytes. */
TEST_T(cluster_stale_replica_restarted_from_disk, 180) {
    CHECK_EQ(stale_attack(RESUME_RESTART, 1), 0);
}
