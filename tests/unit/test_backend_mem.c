/*
 * test_backend_mem.c — the shared backend suite on mem://, and what only mem:// shows:
 * its URL options, capacity limits, eviction and checksum checks on the way out.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "backend_suite.h"
#include "client/client.h"
#include "harness.h"
#include "store/store.h"
#include "tide.h"

TEST(mem_backend_suite) {
    backend_suite("mem://?capacity=128MiB");
}

TEST(mem_default_url) {
    tide_store *s;
    CHECK_EQ(tide_open(NULL, &s), 0);
    tide_stats st;
    CHECK_EQ(tide_stats_get(s, &st, sizeof(st)), 0);
    CHECK_EQ(st.capacity_bytes, 1ull << 30);
    tide_close(s);
    CHECK_EQ(tide_open("", &s), 0);
    tide_close(s);
}

TEST(mem_bad_urls) {
    tide_store *s = (tide_store *)1;
    CHECK_EQ(tide_open("nope://x", &s), TIDE_ESCHEME);
    CHECK(s == NULL);
    CHECK_CONTAINS(tide_errmsg(NULL), "nope://");
    CHECK_EQ(tide_open("mem://?bogus=1", &s), TIDE_EOPTION);
    CHECK_CONTAINS(tide_errmsg(NULL), "bogus");
    CHECK_EQ(tide_open("mem://?capacity=lots", &s), TIDE_ESIZE);
    CHECK_CONTAINS(tide_errmsg(NULL), "capacity=lots");
    CHECK_EQ(tide_open("mem://?capacity=0", &s), TIDE_EOPTION);
    CHECK_EQ(tide_open("mem://?verify=maybe", &s), TIDE_EOPTION);
    CHECK_EQ(tide_open("mem://?policy=fifo", &s), TIDE_EOPTION);
    CHECK_EQ(tide_open("mem://host:1", &s), TIDE_EURL);
    CHECK_EQ(tide_open("justtext", &s), TIDE_EURL);
    CHECK_EQ(tide_open("mem://?capacity=512MB&prefault=0&verify=1&policy=lru", &s), 0);
    tide_close(s);
}

TEST(mem_value_bigger_than_capacity) {
    tide_store *s;
    CHECK_EQ(tide_open("mem://?capacity=1MiB", &s), 0);
    size_t n = 2u << 20;
    uint8_t *v = calloc(1, n);
    CHECK_EQ(tide_put(s, "big", 3, v, n), TIDE_EVALBIG);
    CHECK_CONTAINS(tide_errmsg(s), "big");
    CHECK_EQ(tide_exists(s, "big", 3), 0);
    free(v);
    tide_close(s);
}

/* By bytes, keeping what is read: LRU, and the default (chain, whose probation is LRU for
 * keys put one at a time and whose protected list keeps what was read). */
TEST(mem_evicts_by_bytes_lru) {
    for (int which = 0; which < 2; which++) {
        tide_store *s;
        CHECK_EQ(tide_open(which ? "mem://?capacity=4MiB" : "mem://?capacity=4MiB&policy=lru", &s),
                 0);
        static uint8_t v[256 * 1024];
        char k[16];
        /* 32 × 256 KiB = 8 MiB through a 4 MiB store. */
        for (int i = 0; i < 32; i++) {
            memset(v, i, sizeof(v));
            snprintf(k, sizeof(k), "e%d", i);
            CHECK_EQ(tide_put(s, k, strlen(k), v, sizeof(v)), 0);
            if (i >= 4) { /* keep e0 recently used */
                size_t len;
                CHECK_EQ(tide_get(s, "e0", 2, v, sizeof(v), &len), 0);
                CHECK_EQ(v[100], 0);
            }
        }
        tide_stats st;
        CHECK_EQ(tide_stats_get(s, &st, sizeof(st)), 0);
        CHECK(st.used_bytes <= st.capacity_bytes);
        CHECK(st.evictions >= 16);
        CHECK_EQ(tide_exists(s, "e0", 2), 1);  /* used all along */
        CHECK_EQ(tide_exists(s, "e1", 2), 0);  /* oldest unused */
        CHECK_EQ(tide_exists(s, "e31", 3), 1); /* newest */
        tide_close(s);
    }
}

TEST(mem_checksum_failure_is_a_miss) {
    tide_store *s;
    CHECK_EQ(tide_open("mem://?capacity=16MiB", &s), 0);
    uint8_t v[65536], o[65536];
    for (size_t i = 0; i < sizeof(v); i++)
        v[i] = (uint8_t)(i * 31);
    CHECK_EQ(tide_put(s, "blk", 3, v, sizeof(v)), 0);
    /* Flip one byte inside the pool, behind the store's back. */
    store *st = *(store **)s->impl;
    store_ref ref;
    CHECK_EQ(store_pin(st, "blk", 3, 0, &ref), 0);
    store_base(st)[ref.offset + 12345] ^= 0x40;
    CHECK_EQ(store_unpin(st, ref.id), 0);
    size_t len;
    CHECK_EQ(tide_get(s, "blk", 3, o, sizeof(o), &len), TIDE_ENOTFOUND);
    tide_stats stats;
    CHECK_EQ(tide_stats_get(s, &stats, sizeof(stats)), 0);
    CHECK_EQ(stats.checksum_errors, 1);
    CHECK_EQ(tide_exists(s, "blk", 3), 0); /* removed, so nobody reads it again */
    /* Written again, it reads back fine. */
    CHECK_EQ(tide_put(s, "blk", 3, v, sizeof(v)), 0);
    CHECK_EQ(tide_get(s, "blk", 3, o, sizeof(o), &len), 0);
    CHECK(memcmp(v, o, sizeof(v)) == 0);
    tide_close(s);
}

TEST(mem_batch_limit) {
    tide_store *s;
    CHECK_EQ(tide_open("mem://", &s), 0);
    tide_key k = {"a", 1};
    uint8_t p;
    CHECK_EQ(tide_exists_many(s, &k, TIDE_BATCH_MAX + 1, &p), TIDE_ELIMIT);
    CHECK_CONTAINS(tide_errmsg(s), "65537");
    tide_close(s);
}

/* tide_stats_get's size: a caller built against the first header (the 15 fields up to
 * `reserved`) gets exactly those and nothing past its struct. */
TEST(stats_size_old_struct_gets_only_its_fields) {
    tide_store *s;
    CHECK_EQ(tide_open("mem://?capacity=16MiB", &s), 0);
    CHECK_EQ(tide_put(s, "k", 1, "value", 5), 0);
    tide_stats full;
    CHECK_EQ(tide_stats_get(s, &full, sizeof(full)), 0);
    CHECK_EQ(full.objects, 1);
    CHECK_EQ(full.puts, 1);
    /* The old struct, then a canary where a newer library's fields would land. */
    struct {
        uint64_t v[TIDE_STATS_SIZE_V1 / 8 + 4];
    } old;
    memset(&old, 0xA5, sizeof(old));
    CHECK_EQ(tide_stats_get(s, (tide_stats *)old.v, TIDE_STATS_SIZE_V1), 0);
    CHECK_EQ(old.v[0], full.capacity_bytes);
    CHECK_EQ(old.v[offsetof(tide_stats, objects) / 8], 1);
    CHECK_EQ(old.v[offsetof(tide_stats, puts) / 8], 1);
    CHECK_EQ(old.v[offsetof(tide_stats, reserved) / 8], full.reserved);
    for (size_t i = TIDE_STATS_SIZE_V1 / 8; i < sizeof(old.v) / 8; i++)
        CHECK_MSG(old.v[i] == 0xA5A5A5A5A5A5A5A5ull, "word %zu past the old struct written", i);
    tide_close(s);
}

/* A caller built against a newer header (a bigger struct) gets zeros in the fields this
 * library does not know. */
TEST(stats_size_newer_struct_reads_zero_past_ours) {
    tide_store *s;
    CHECK_EQ(tide_open("mem://?capacity=16MiB", &s), 0);
    CHECK_EQ(tide_put(s, "k", 1, "value", 5), 0);
    uint64_t big[sizeof(tide_stats) / 8 + 6];
    memset(big, 0xA5, sizeof(big));
    CHECK_EQ(tide_stats_get(s, (tide_stats *)big, sizeof(big)), 0);
    CHECK_EQ(big[offsetof(tide_stats, objects) / 8], 1);
    for (size_t i = sizeof(tide_stats) / 8; i < sizeof(big) / 8; i++)
        CHECK_EQ(big[i], 0);
    tide_close(s);
}

/* A size that cannot be a tide_stats is -EINVAL, named in the message, and nothing is
 * written. */
TEST(stats_size_wrong_is_an_error) {
    tide_store *s;
    CHECK_EQ(tide_open("mem://?capacity=16MiB", &s), 0);
    static const size_t bad[] = {0,
                                 1,
                                 8,
                                 TIDE_STATS_SIZE_V1 - 8,
                                 TIDE_STATS_SIZE_V1 + 4,
                                 sizeof(tide_stats) + 1,
                                 TIDE_STATS_SIZE_MAX + 8,
                                 (size_t)-1};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint64_t buf[TIDE_STATS_SIZE_MAX / 8 + 2];
        memset(buf, 0xA5, sizeof(buf));
        char ctx[64];
        snprintf(ctx, sizeof(ctx), "size %zu", bad[i]);
        test_context = ctx;
        CHECK_EQ(tide_stats_get(s, (tide_stats *)buf, bad[i]), -EINVAL);
        char want[64];
        snprintf(want, sizeof(want), "size %zu", bad[i]);
        CHECK_CONTAINS(tide_errmsg(s), want);
        CHECK_EQ(buf[0], 0xA5A5A5A5A5A5A5A5ull);
    }
    test_context = NULL;
    CHECK_EQ(tide_stats_get(NULL, (tide_stats *)&s, TIDE_STATS_SIZE_V1), -EINVAL);
    CHECK_EQ(tide_stats_get(s, NULL, sizeof(tide_stats)), -EINVAL);
    tide_close(s);
}
