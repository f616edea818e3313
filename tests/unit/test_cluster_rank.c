/*
 * test_cluster_rank.c — rendezvous placement without a network: ranks are sorted by
 * weight, a join only inserts the new member, keys spread evenly; and cluster URLs that
 * must fail before any connection is tried.
 */
#include <errno.h>
#include <xxhash.h>

#include "client/cluster.h"
#include "harness.h"
#include "tide.h"

static void member_seeds(uint64_t *seeds, int n) {
    for (int i = 0; i < n; i++) {
        char a[32];
        snprintf(a, sizeof(a), "10.0.0.%d:7474", i + 1);
        seeds[i] = cluster_seed(a);
    }
}

TEST(cluster_rank_sorted_by_weight) {
    uint64_t seeds[7];
    member_seeds(seeds, 7);
    for (int k = 0; k < 500; k++) {
        char key[32];
        snprintf(key, sizeof(key), "key-%d", k);
        uint32_t order[7];
        cluster_rank(seeds, 7, key, strlen(key), order, 7);
        uint8_t seen[7] = {0};
        for (int r = 0; r < 7; r++) {
            CHECK(order[r] < 7);
            CHECK(!seen[order[r]]);
            seen[order[r]] = 1;
            if (r > 0)
                CHECK(XXH3_64bits_withSeed(key, strlen(key), seeds[order[r - 1]]) >
                      XXH3_64bits_withSeed(key, strlen(key), seeds[order[r]]));
        }
        /* A shorter depth is the prefix of the full order. */
        uint32_t top2[2];
        cluster_rank(seeds, 7, key, strlen(key), top2, 2);
        CHECK_EQ(top2[0], order[0]);
        CHECK_EQ(top2[1], order[1]);
    }
}

TEST(cluster_rank_join_moves_only_to_the_new_member) {
    enum { KEYS = 20000 };
    uint64_t seeds[4];
    member_seeds(seeds, 4);
    int moved = 0, count[3] = {0};
    for (int k = 0; k < KEYS; k++) {
        char key[32];
        snprintf(key, sizeof(key), "blk-%d", k);
        uint32_t before[3], after[4];
        cluster_rank(seeds, 3, key, strlen(key), before, 3);
        cluster_rank(seeds, 4, key, strlen(key), after, 4);
        count[before[0]]++;
        /* Dropping the new member (index 3) from the new order gives the old order. */
        int j = 0;
        for (int r = 0; r < 4; r++)
            if (after[r] != 3) CHECK_EQ(after[r], before[j++]);
        if (after[0] != before[0]) {
            CHECK_EQ(after[0], 3);
            moved++;
        }
    }
    /* About a quarter of the keys move to the fourth member; the inputs are fixed, so the
     * figure is too (it is printed for the record). */
    printf("    join 3 -> 4 members: %d of %d keys (%.1f%%) change their first member\n", moved,
           KEYS, 100.0 * moved / KEYS);
    CHECK(moved > KEYS / 5 && moved < KEYS * 3 / 10);
    for (int m = 0; m < 3; m++)
        CHECK(count[m] > KEYS * 3 / 10 && count[m] < KEYS * 37 / 100);
}

TEST(cluster_url_errors) {
    tide_store *s = NULL;
    CHECK_EQ(tide_open("tide://127.0.0.1:1,127.0.0.1:2?replicas=0", &s), TIDE_EOPTION);
    CHECK_CONTAINS(tide_errmsg(NULL), "replicas");
    CHECK_EQ(tide_open("tide://127.0.0.1:1,127.0.0.1:2?replicas=9", &s), TIDE_EOPTION);
    CHECK_EQ(tide_open("tide://127.0.0.1:1,,127.0.0.1:2", &s), TIDE_EURL);
    CHECK_CONTAINS(tide_errmsg(NULL), "member 2");
    CHECK_EQ(tide_open("tide://127.0.0.1:1,127.0.0.1", &s), TIDE_EURL);
    CHECK_CONTAINS(tide_errmsg(NULL), "'127.0.0.1' is not HOST:PORT");
    CHECK_EQ(tide_open("tide://127.0.0.1:1,127.0.0.1:2?colour=blue", &s), TIDE_EOPTION);
    CHECK_CONTAINS(tide_errmsg(NULL), "colour");
    CHECK_EQ(tide_open("tide://127.0.0.1:1,127.0.0.1:2?read_check=2", &s), TIDE_EOPTION);
    CHECK_CONTAINS(tide_errmsg(NULL), "read_check must be 0 or 1, got 2");
    CHECK_EQ(tide_open("tide://127.0.0.1:1,127.0.0.1:2/x", &s), TIDE_EURL);
    CHECK_EQ(tide_open("etcd://127.0.0.1:1", &s), TIDE_EURL);
    CHECK_CONTAINS(tide_errmsg(NULL), "CLUSTER");
    CHECK(s == NULL);
}

TEST(cluster_open_fails_when_no_member_answers) {
    int p1 = test_free_port(), p2 = test_free_port();
    char u[128];
    snprintf(u, sizeof(u), "tide://127.0.0.1:%d,127.0.0.1:%d?replicas=2&timeout_ms=500", p1, p2);
    tide_store *s = NULL;
    int rc = tide_open(u, &s);
    CHECK(rc == -ECONNREFUSED);
    CHECK_CONTAINS(tide_errmsg(NULL), "none of the 2 members answered");
    CHECK_CONTAINS(tide_errmsg(NULL), "127.0.0.1:");
    CHECK(s == NULL);
    /* etcd that is not there: the message names it. */
    snprintf(u, sizeof(u), "etcd://127.0.0.1:%d/c1?timeout_ms=500", p1);
    CHECK_EQ(tide_open(u, &s), -ECONNREFUSED);
    CHECK_CONTAINS(tide_errmsg(NULL), "etcd http://127.0.0.1:");
    CHECK_CONTAINS(tide_errmsg(NULL), "Connection refused");
}

TEST(cluster_info_needs_a_cluster) {
    tide_store *s;
    CHECK_EQ(tide_open("mem://?capacity=1MiB", &s), 0);
    tide_cluster_info info;
    CHECK_EQ(tide_cluster_info_get(s, &info, sizeof info), TIDE_EUNSUPPORTED);
    char buf[64];
    CHECK_EQ(tide_cluster_members(s, buf, sizeof(buf)), TIDE_EUNSUPPORTED);
    tide_close(s);
}
