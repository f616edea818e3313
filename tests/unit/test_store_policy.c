/*
 * test_store_policy.c — eviction policies compared on the same workloads: LRU and S3-FIFO
 * under a scan, S3-FIFO's ghost readmission, the chain policy's order (a saved batch
 * leaves from its tail, reads protect, a stale or self-naming cursor costs only the hint),
 * adapt's counted reads, the default's name, and a random mix of every operation under each policy
 * with the store's invariants checked as it goes.
 */
#include "common/checksum.h"
#include "common/prng.h"
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

/* Put keys prefix0..prefix(n-1) as one chain batch (the last marked as its tail). */
static void put_batch(store *st, const char *prefix, int n) {
    store_chain c = STORE_CHAIN_INIT;
    char k[32];
    for (int i = 0; i < n; i++) {
        snprintf(k, sizeof(k), "%s%d", prefix, i);
        store_ref r;
        CHECK_EQ(store_reserve(st, k, strlen(k), 4096, 0, &r), 0);
        CHECK_EQ(store_commit_chain(st, r.id, 0, &c, i + 1 == n), 0);
    }
}

/* Read keys prefix0..prefix(n-1) as one chain batch of reads. */
static void read_batch(store *st, const char *prefix, int n) {
    store_chain c = STORE_CHAIN_INIT;
    char k[32];
    for (int i = 0; i < n; i++) {
        snprintf(k, sizeof(k), "%s%d", prefix, i);
        store_ref r;
        CHECK_EQ(store_pin(st, k, strlen(k), 0, &r), 0);
        CHECK_EQ(store_unpin_chain(st, r.id, &c), 0);
    }
}

/* Which of prefix0..prefix(n-1) are present, as a string of 0/1. */
static const char *present(store *st, const char *prefix, int n) {
    static char out[64];
    char k[32];
    for (int i = 0; i < n; i++) {
        snprintf(k, sizeof(k), "%s%d", prefix, i);
        out[i] = store_exists(st, k, strlen(k)) ? '1' : '0';
    }
    out[n] = '\0';
    return out;
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

/* The default is adapt, and the name the help texts print for it is its name. */
TEST(store_policy_default_is_adapt_and_named_so) {
    CHECK_EQ(STORE_POLICY_DEFAULT, STORE_POLICY_ADAPT);
    CHECK_STR(store_policy_name(STORE_POLICY_DEFAULT), STORE_POLICY_DEFAULT_NAME);
    CHECK_EQ(store_policy_parse(STORE_POLICY_DEFAULT_NAME), STORE_POLICY_DEFAULT);
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

/*
 * Two saved chains of 8 fill a pool of 16 blocks; a third batch of 4 needs 4 victims.
 * LRU takes chain a's first four blocks, which strands the other four (a hit is a prefix).
 * chain takes the tails: b7 and a7 (each batch's last block waits at the eviction end),
 * then a6 and a5, keeping both heads.
 */
TEST(store_policy_chain_evicts_a_batch_from_its_tail) {
    for (int which = 0; which < 2; which++) {
        store *st = mkp(64 << 10, which ? STORE_POLICY_CHAIN : STORE_POLICY_LRU);
        put_batch(st, "a", 8);
        put_batch(st, "b", 8);
        put_batch(st, "c", 4);
        CHECK_EQ(store_check(st), 0);
        if (which) {
            CHECK_STR(present(st, "a", 8), "11111000");
            CHECK_STR(present(st, "b", 8), "11111110");
        } else {
            CHECK_STR(present(st, "a", 8), "00001111");
            CHECK_STR(present(st, "b", 8), "11111111");
        }
        CHECK_STR(present(st, "c", 4), "1111");
        store_destroy(st);
    }
}

/* A chain that was read (a prefix hit) is protected from a stream of new blocks that would
 * flush it from LRU; the blocks never read are evicted first. */
TEST(store_policy_chain_reads_protect_a_chain) {
    for (int which = 0; which < 2; which++) {
        store *st = mkp(64 << 10, which ? STORE_POLICY_CHAIN : STORE_POLICY_LRU);
        put_batch(st, "a", 8);
        read_batch(st, "a", 4); /* a0..a3 were a hit; a4..a7 were not */
        char k[32];
        for (int i = 0; i < 40; i++) {
            snprintf(k, sizeof(k), "s%d", i);
            CHECK_EQ(put(st, k, 4096), 0); /* no chain hint: each at probation's head */
        }
        CHECK_EQ(store_check(st), 0);
        CHECK_STR(present(st, "a", 8), which ? "11110000" : "00000000");
        store_destroy(st);
    }
}

/* Protected holds at most 2/5 of the pool (6 of 16 blocks): a read batch of 10 keeps its
 * first 6 there and sends its last 4 back to probation, in order behind them. */
TEST(store_policy_chain_protected_is_bounded) {
    store *st = mkp(64 << 10, STORE_POLICY_CHAIN);
    put_batch(st, "a", 10);
    read_batch(st, "a", 10);
    put_batch(st, "b", 6);  /* fills the pool: 16 blocks */
    put_batch(st, "c", 10); /* 10 victims: b5 (its tail), a9..a6, b4..b0 */
    CHECK_EQ(store_check(st), 0);
    CHECK_STR(present(st, "a", 10), "1111110000");
    CHECK_STR(present(st, "b", 6), "000000");
    CHECK_STR(present(st, "c", 10), "1111111111");
    tide_stats s;
    store_stats(st, &s);
    CHECK_EQ(s.evictions, 10);
    store_destroy(st);
}

/* A cursor whose object was removed, evicted, pinned or is the object itself only costs
 * the hint: the insert goes to its list's head and every invariant holds. */
TEST(store_policy_chain_stale_cursor_is_harmless) {
    store *st = mkp(64 << 10, STORE_POLICY_CHAIN);
    store_chain c = STORE_CHAIN_INIT;
    store_ref r, pin;
    CHECK_EQ(store_reserve(st, "x", 1, 4096, 0, &r), 0);
    CHECK_EQ(store_commit_chain(st, r.id, 0, &c, 0), 0);
    CHECK_EQ(store_remove(st, "x", 1), 0);               /* the cursor's object is gone */
    CHECK_EQ(store_reserve(st, "y", 1, 4096, 0, &r), 0); /* may take x's allocator node */
    CHECK_EQ(store_commit_chain(st, r.id, 0, &c, 0), 0);
    CHECK_EQ(store_check(st), 0);
    CHECK_EQ(store_pin(st, "y", 1, 0, &pin), 0); /* the cursor's object is pinned */
    CHECK_EQ(store_reserve(st, "z", 1, 4096, 0, &r), 0);
    CHECK_EQ(store_commit_chain(st, r.id, 0, &c, 0), 0);
    CHECK_EQ(store_check(st), 0);
    CHECK_EQ(store_unpin_chain(st, pin.id, &c), 0); /* c names z; y goes to protected */
    CHECK_EQ(store_pin(st, "y", 1, 0, &pin), 0);
    CHECK_EQ(store_unpin_chain(st, pin.id, &c), 0); /* c names y itself */
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
    store_chain c = STORE_CHAIN_INIT; /* a batch cursor, restarted now and then */
    for (int op = 0; op < 20000; op++) {
        seed = prng_mix(seed);
        snprintf(k, sizeof(k), "m%u", (unsigned)(seed % 200));
        int what = (int)((seed >> 16) % 16);
        store_ref r;
        if ((seed >> 48) % 6 == 0) c = STORE_CHAIN_INIT;
        if (what < 4) {
            int rc = put(st, k, 1 + (seed >> 24) % 20000);
            CHECK(rc == 0 || rc == STORE_DUP || rc == TIDE_ENOSPACE);
        } else if (what < 6) {
            int rc = store_reserve(st, k, strlen(k), 1 + (seed >> 24) % 20000, 0, &r);
            CHECK(rc == 0 || rc == STORE_DUP || rc == TIDE_ENOSPACE);
            if (rc == 0) CHECK_EQ(store_commit_chain(st, r.id, 0, &c, (seed >> 52) % 4 == 0), 0);
        } else if (what < 8) {
            read_key(st, k);
        } else if (what < 10) {
            if (store_pin(st, k, strlen(k), 0, &r) == 0)
                CHECK_EQ(store_unpin_chain(st, r.id, &c), 0);
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

TEST(store_policy_chain_random_mix) {
    random_mix(STORE_POLICY_CHAIN);
}

TEST(store_policy_adapt_random_mix) {
    random_mix(STORE_POLICY_ADAPT);
}

/* adapt's protected list counts reads: a chain read three times outlasts chains read once
 * when protected (1/2 of the pool, 8 of 16 blocks) overflows, although it was read least
 * recently; the once-read chain whose uses ran out goes back to probation and is evicted
 * first. (chain, pure recency in protected, demotes the thrice-read chain instead.) */
TEST(store_policy_adapt_reads_count) {
    store *st = mkp(64 << 10, STORE_POLICY_ADAPT);
    put_batch(st, "a", 4);
    for (int i = 0; i < 3; i++)
        read_batch(st, "a", 4);
    put_batch(st, "b", 4);
    read_batch(st, "b", 4);
    put_batch(st, "c", 4);
    read_batch(st, "c", 4); /* protected: 12 blocks, over its 8: b's uses run out first */
    CHECK_EQ(store_check(st), 0);
    put_batch(st, "d", 8); /* 4 free blocks, then 4 victims from probation's tail */
    CHECK_EQ(store_check(st), 0);
    CHECK_STR(present(st, "a", 4), "1111");
    CHECK_STR(present(st, "b", 4), "0000");
    CHECK_STR(present(st, "c", 4), "1111");
    CHECK_STR(present(st, "d", 8), "11111111");
    tide_stats s;
    store_stats(st, &s);
    CHECK_EQ(s.evictions, 4);
    store_destroy(st);
}
