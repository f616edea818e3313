/*
 * test_store_policy.c — eviction policies compared on the same workloads: LRU and S3-FIFO
 * under a scan, S3-FIFO's ghost readmission, and a random mix of every operation under
 * each policy with the store's invariants checked as it goes.
 */
#include "common/checksum.h"
#include "harness.h"
#include "store/store.h"
#include "store/store_int.h"
#include "tide.h"

static store *mkp(uint64_t cap, int which) {
    store_config c = {.capacity = cap, .policy = which};
    store *st;
    char err[256];
    int rc = store_create(&c, &st, err, sizeof(err));
    CHECK_MSG(rc == 0, "store_create: %d %s", rc, err);
    return st;
}

static int put(store *st, const char *key, uint64_t vlen) {
    store_ref r;
    int rc = store_reserve(st, key, strlen(key), vlen, 0, &r);
    if (rc != 0) return rc;
    memset(store_base(st) + r.offset, (int)vlen, vlen);
    CHECK_EQ(store_commit(st, r.id, 0), 0);
    return 0;
}

static int read_key(store *st, const char *key) {
    store_ref r;
    int rc = store_pin(st, key, strlen(key), 0, &r);
    if (rc == TIDE_ENOTFOUND) return 0;
    CHECK_EQ(rc, 0);
    CHECK_EQ(store_unpin(st, r.id), 0);
    return 1;
}

/* 32 hot keys read twice, then 1000 one-time keys: how many hot keys are left. */
static int hot_left_after_scan(int which) {
    store *st = mkp(1 << 20, which); /* 256 values of 4 KiB */
    char k[32];
    for (int i = 0; i < 32; i++) {
        snprintf(k, sizeof(k), "hot%d", i);
        CHECK_EQ(put(st, k, 4096), 0);
    }
    for (int round = 0; round < 2; round++)
        for (int i = 0; i < 32; i++) {
            snprintf(k, sizeof(k), "hot%d", i);
            CHECK_EQ(read_key(st, k), 1);
        }
    for (int i = 0; i < 1000; i++) {
        snprintf(k, sizeof(k), "scan%d", i);
        CHECK_EQ(put(st, k, 4096), 0);
        if (i % 100 == 0) CHECK_EQ(store_check(st), 0);
    }
    int left = 0;
    for (int i = 0; i < 32; i++) {
        snprintf(k, sizeof(k), "hot%d", i);
        left += store_exists(st, k, strlen(k));
    }
    tide_stats s;
    store_stats(st, &s);
    CHECK(s.used_bytes <= s.capacity_bytes);
    CHECK_EQ(s.objects + s.evictions, 1032);
    store_destroy(st);
    return left;
}

TEST(store_policy_s3fifo_resists_a_scan_lru_does_not) {
    CHECK_EQ(hot_left_after_scan(STORE_POLICY_LRU), 0);
    CHECK_EQ(hot_left_after_scan(STORE_POLICY_S3FIFO), 32);
}

TEST(store_policy_s3fifo_ghost_readmits_to_main) {
    store *st = mkp(1 << 20, STORE_POLICY_S3FIFO);
    char k[32];
    CHECK_EQ(put(st, "g", 4096), 0);
    int i = 0;
    for (; i < 2000 && store_exists(st, "g", 1); i++) {
        snprintf(k, sizeof(k), "s%d", i);
        CHECK_EQ(put(st, k, 4096), 0);
    }
    CHECK_EQ(store_exists(st, "g", 1), 0); /* evicted from the small queue, never read */
    CHECK_EQ(put(st, "g", 4096), 0);       /* its key is in the ghost: it goes to main */
    for (int j = 0; j < 1000; j++, i++) {
        snprintf(k, sizeof(k), "s%d", i);
        CHECK_EQ(put(st, k, 4096), 0);
    }
    CHECK_EQ(store_exists(st, "g", 1), 1);
    CHECK_EQ(store_check(st), 0);
    store_destroy(st);
}

/* Every operation at random on a small pool, invariants checked along the way. */
static void random_mix(int which) {
    store *st = mkp(256 << 10, which);
    uint64_t seed = 0xC0FFEE + (uint64_t)which;
    store_ref held[16];
    int nheld = 0;
    char k[32];
    for (int op = 0; op < 20000; op++) {
        seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
        snprintf(k, sizeof(k), "m%u", (unsigned)(seed % 200));
        int what = (int)((seed >> 16) % 16);
        store_ref r;
        if (what < 6) {
            int rc = put(st, k, 1 + (seed >> 24) % 20000);
            CHECK(rc == 0 || rc == STORE_DUP || rc == TIDE_ENOSPACE);
        } else if (what < 10) {
            read_key(st, k);
        } else if (what < 12 && nheld < 16) {
            if (store_pin(st, k, strlen(k), 0, &r) == 0) held[nheld++] = r;
        } else if (what < 14 && nheld > 0) {
            CHECK_EQ(store_unpin(st, held[--nheld].id), 0);
        } else if (what == 14) {
            int rc = store_remove(st, k, strlen(k));
            CHECK(rc == 0 || rc == TIDE_ENOTFOUND);
        } else if ((seed >> 40) % 50 == 0) {
            store_clear(st);
        }
        if (op % 97 == 0) CHECK_EQ(store_check(st), 0);
    }
    while (nheld > 0)
        CHECK_EQ(store_unpin(st, held[--nheld].id), 0);
    CHECK_EQ(store_check(st), 0);
    tide_stats s;
    store_stats(st, &s);
    CHECK_EQ(s.pinned, 0);
    CHECK(s.evictions > 0);
    store_clear(st);
    store_stats(st, &s);
    CHECK_EQ(s.used_bytes, 0);
    store_destroy(st);
}

TEST(store_policy_lru_random_mix) {
    random_mix(STORE_POLICY_LRU);
}

TEST(store_policy_s3fifo_random_mix) {
    random_mix(STORE_POLICY_S3FIFO);
}
