/*
 * test_store.c — store.h behaviour: two-phase puts, visibility, duplicates, pins and
 * eviction, remove while pinned, leases, stale ids, figures and the metadata cost.
 *
 * Every test that is not about one policy's order runs once under each eviction policy
 * (STORE_TEST): pins, reservations and two-phase puts must keep their guarantees under
 * all of them. The failure message names the policy (test_context).
 */
#include <errno.h>

#include "common/checksum.h"
#include "common/prng.h"
#include "harness.h"
#include "store/store.h"
#include "store/store_int.h"
#include "tide.h"

static int cur_policy = STORE_POLICY_LRU;

static const int all_policies[] = {STORE_POLICY_LRU, STORE_POLICY_S3FIFO, STORE_POLICY_CHAIN};

/* STORE_TEST(name): the body runs once per policy, with mk() creating stores of it. */
#define STORE_TEST(name)                                                                           \
    static void body_##name(void);                                                                 \
    TEST(name) {                                                                                   \
        for (size_t pi_ = 0; pi_ < sizeof(all_policies) / sizeof(all_policies[0]); pi_++) {        \
            cur_policy = all_policies[pi_];                                                        \
            test_context = store_policy_name(cur_policy);                                          \
            body_##name();                                                                         \
        }                                                                                          \
        test_context = NULL;                                                                       \
    }                                                                                              \
    static void body_##name(void)

static store *mk(uint64_t cap, uint64_t max_value) {
    store_config c = {.capacity = cap, .max_value = max_value, .policy = cur_policy};
    store *st;
    char err[256];
    int rc = store_create(&c, &st, err, sizeof(err));
    CHECK_MSG(rc == 0, "store_create: %d %s", rc, err);
    return st;
}

/* Value bytes derived from the key, so any misplaced or torn byte shows. */
static unsigned key_seed(const char *key) {
    return (unsigned)(key[0] * 31 + key[strlen(key) - 1] * 7);
}
static uint8_t byte_at(unsigned seed, uint64_t i) {
    return (uint8_t)(seed + i * 13 + (i >> 8));
}
static uint8_t byte_for(const char *key, uint64_t i) {
    return byte_at(key_seed(key), i);
}

/* Put key with vlen bytes of content derived from the key; returns reserve's result. */
static int put(store *st, const char *key, uint64_t vlen) {
    store_ref r;
    int rc = store_reserve(st, key, strlen(key), vlen, 0, &r);
    if (rc != 0) return rc;
    CHECK(r.id != 0);
    CHECK_EQ(r.len, vlen);
    CHECK(r.offset + vlen <= store_capacity(st));
    uint8_t *p = store_base(st) + r.offset;
    unsigned seed = key_seed(key);
    for (uint64_t i = 0; i < vlen; i++)
        p[i] = byte_at(seed, i);
    CHECK_EQ(store_commit(st, r.id, checksum_buf(p, vlen)), 0);
    return 0;
}

/* Pin key, check every byte and the checksum, unpin. 1 if found, 0 if not. */
static int get_ok(store *st, const char *key, uint64_t vlen) {
    store_ref r;
    int rc = store_pin(st, key, strlen(key), 0, &r);
    if (rc == TIDE_ENOTFOUND) return 0;
    CHECK_EQ(rc, 0);
    CHECK_EQ(r.len, vlen);
    const uint8_t *p = store_base(st) + r.offset;
    unsigned seed = key_seed(key);
    for (uint64_t i = 0; i < vlen; i++)
        if (p[i] != byte_at(seed, i)) CHECK_EQ(p[i], byte_at(seed, i));
    CHECK_EQ(r.checksum, checksum_buf(p, vlen));
    CHECK_EQ(store_unpin(st, r.id), 0);
    return 1;
}

static tide_stats stats(store *st) {
    tide_stats s;
    store_stats(st, &s);
    CHECK(s.used_bytes <= s.capacity_bytes);
    CHECK_EQ(store_check(st), 0);
    return s;
}

TEST(store_config_errors) {
    store *st;
    char err[256];
    store_config c = {.capacity = 0};
    CHECK_EQ(store_create(&c, &st, err, sizeof(err)), TIDE_ECONFIG);
    CHECK_CONTAINS(err, "capacity");
    c = (store_config){.capacity = 1 << 20, .policy = 7};
    CHECK_EQ(store_create(&c, &st, err, sizeof(err)), TIDE_ECONFIG);
    CHECK_CONTAINS(err, "policy");
    c = (store_config){.capacity = 1000, .prefault = 1, .hugepages = 1};
    CHECK_EQ(store_create(&c, &st, err, sizeof(err)), 0);
    CHECK_EQ(store_capacity(st), 1024); /* rounded up to the unit */
    CHECK(store_fd(st) >= 0);
    CHECK(store_base(st) != NULL);
    store_destroy(st);
}

STORE_TEST(store_key_and_value_errors) {
    store *st = mk(1 << 20, 4096);
    store_ref r;
    char key[TIDE_KEY_MAX + 1];
    memset(key, 'k', sizeof(key));
    CHECK_EQ(store_reserve(st, key, 0, 10, 0, &r), TIDE_EKEYEMPTY);
    CHECK_EQ(store_reserve(st, key, TIDE_KEY_MAX + 1, 10, 0, &r), TIDE_EKEYLONG);
    CHECK_EQ(store_reserve(st, key, 4, 0, 0, &r), TIDE_EVALEMPTY);
    CHECK_EQ(store_reserve(st, key, 4, 4097, 0, &r), TIDE_EVALBIG);
    CHECK_EQ(store_reserve(st, key, 4, (1 << 20) + 1, 0, &r), TIDE_EVALBIG);
    CHECK_EQ(store_pin(st, key, 0, 0, &r), TIDE_EKEYEMPTY);
    CHECK_EQ(store_pin(st, key, TIDE_KEY_MAX + 1, 0, &r), TIDE_EKEYLONG);
    CHECK_EQ(store_exists(st, key, 0), TIDE_EKEYEMPTY);
    CHECK_EQ(store_remove(st, key, TIDE_KEY_MAX + 1), TIDE_EKEYLONG);
    /* A key of exactly TIDE_KEY_MAX bytes and a one-byte value work. */
    CHECK_EQ(store_reserve(st, key, TIDE_KEY_MAX, 1, 0, &r), 0);
    store_base(st)[r.offset] = 42;
    CHECK_EQ(store_commit(st, r.id, 9), 0);
    CHECK_EQ(store_exists(st, key, TIDE_KEY_MAX), 1);
    CHECK_EQ(store_exists(st, key, TIDE_KEY_MAX - 1), 0);
    CHECK_EQ(store_pin(st, key, TIDE_KEY_MAX, 0, &r), 0);
    CHECK_EQ(r.len, 1);
    CHECK_EQ(r.checksum, 9);
    CHECK_EQ(store_base(st)[r.offset], 42);
    CHECK_EQ(stats(st).used_bytes, ALLOC_UNIT);
    store_destroy(st); /* with a pin still held: nothing leaks (ASan checks) */
}

STORE_TEST(store_reserve_commit_visibility_and_dups) {
    store *st = mk(1 << 20, 0);
    store_ref r, r2;
    CHECK_EQ(store_reserve(st, "a", 1, 5000, 0, &r), 0);
    CHECK_EQ(store_exists(st, "a", 1), 0);
    CHECK_EQ(store_pin(st, "a", 1, 0, &r2), TIDE_ENOTFOUND);
    CHECK_EQ(store_remove(st, "a", 1), TIDE_ENOTFOUND);
    CHECK_EQ(store_reserve(st, "a", 1, 5000, 0, &r2), STORE_DUP); /* in flight */
    tide_stats s = stats(st);
    CHECK_EQ(s.reserved, 1);
    CHECK_EQ(s.objects, 0);
    CHECK_EQ(s.used_bytes, 5120);
    memset(store_base(st) + r.offset, 1, 5000);
    CHECK_EQ(store_commit(st, r.id, 77), 0);
    CHECK_EQ(store_exists(st, "a", 1), 1);
    CHECK_EQ(store_reserve(st, "a", 1, 10, 0, &r2), STORE_DUP); /* committed */
    s = stats(st);
    CHECK_EQ(s.reserved, 0);
    CHECK_EQ(s.objects, 1);
    CHECK_EQ(s.puts, 1);
    CHECK_EQ(s.put_dups, 2);
    CHECK_EQ(store_pin(st, "a", 1, 0, &r2), 0);
    CHECK_EQ(r2.offset, r.offset);
    CHECK_EQ(r2.len, 5000);
    CHECK_EQ(r2.checksum, 77);
    CHECK(r2.id != r.id);
    CHECK_EQ(store_unpin(st, r2.id), 0);
    store_destroy(st);
}

STORE_TEST(store_abort_frees_and_allows_a_new_put) {
    store *st = mk(1 << 20, 0);
    store_ref r;
    CHECK_EQ(store_reserve(st, "k", 1, 100000, 0, &r), 0);
    CHECK_EQ(stats(st).used_bytes, alloc_units_for(100000) * ALLOC_UNIT);
    CHECK_EQ(store_abort(st, r.id), 0);
    CHECK_EQ(store_abort(st, r.id), TIDE_ENOTFOUND);
    CHECK_EQ(store_commit(st, r.id, 0), TIDE_ENOTFOUND);
    tide_stats s = stats(st);
    CHECK_EQ(s.used_bytes, 0);
    CHECK_EQ(s.reserved, 0);
    CHECK_EQ(s.puts, 0);
    CHECK_EQ(put(st, "k", 300), 0);
    CHECK_EQ(get_ok(st, "k", 300), 1);
    store_destroy(st);
}

STORE_TEST(store_stale_and_wrong_kind_ids) {
    store *st = mk(1 << 20, 0);
    store_ref r, p;
    CHECK_EQ(store_commit(st, 0, 0), TIDE_ENOTFOUND);
    CHECK_EQ(store_unpin(st, 0), TIDE_ENOTFOUND);
    CHECK_EQ(store_reserve(st, "x", 1, 10, 0, &r), 0);
    CHECK_EQ(store_unpin(st, r.id), TIDE_ENOTFOUND); /* a reservation is not a pin */
    CHECK_EQ(store_commit(st, r.id, 1), 0);
    CHECK_EQ(store_commit(st, r.id, 1), TIDE_ENOTFOUND);
    CHECK_EQ(store_pin(st, "x", 1, 0, &p), 0);
    CHECK(p.id > r.id);
    CHECK_EQ(store_commit(st, p.id, 1), TIDE_ENOTFOUND); /* a pin is not a reservation */
    CHECK_EQ(store_abort(st, p.id), TIDE_ENOTFOUND);
    CHECK_EQ(store_unpin(st, p.id), 0);
    CHECK_EQ(store_unpin(st, p.id), TIDE_ENOTFOUND);
    /* A stale id never reaches a later object, even one in the same place. */
    CHECK_EQ(store_remove(st, "x", 1), 0);
    CHECK_EQ(store_reserve(st, "x", 1, 10, 0, &r), 0);
    CHECK_EQ(store_commit(st, r.id, 2), 0);
    CHECK_EQ(store_pin(st, "x", 1, 0, &p), 0);
    uint64_t live = p.id;
    CHECK_EQ(store_unpin(st, live - 1), TIDE_ENOTFOUND);
    tide_stats s = stats(st);
    CHECK_EQ(s.pinned, 1);
    CHECK_EQ(store_unpin(st, live), 0);
    CHECK_EQ(stats(st).pinned, 0);
    store_destroy(st);
}

TEST(store_eviction_is_lru_and_by_bytes) {
    cur_policy = STORE_POLICY_LRU;
    /* 64 KiB: sixteen 4 KiB values fill it. */
    store *st = mk(64 << 10, 0);
    char k[16];
    for (int i = 0; i < 16; i++) {
        snprintf(k, sizeof(k), "k%d", i);
        CHECK_EQ(put(st, k, 4096), 0);
    }
    CHECK_EQ(stats(st).used_bytes, 64 << 10);
    CHECK_EQ(get_ok(st, "k0", 4096), 1); /* k0 becomes most recent; k1 is now oldest */
    CHECK_EQ(put(st, "new1", 4096), 0);
    CHECK_EQ(store_exists(st, "k1", 2), 0);
    CHECK_EQ(store_exists(st, "k0", 2), 1);
    CHECK_EQ(store_exists(st, "k2", 2), 1);
    tide_stats s = stats(st);
    CHECK_EQ(s.evictions, 1);
    CHECK_EQ(s.evicted_bytes, 4096);
    /* A 12 KiB value evicts the next three oldest by bytes: k2, k3, k4. */
    CHECK_EQ(put(st, "big", 12288), 0);
    for (int i = 2; i <= 4; i++) {
        snprintf(k, sizeof(k), "k%d", i);
        CHECK_EQ(store_exists(st, k, strlen(k)), 0);
    }
    CHECK_EQ(store_exists(st, "k5", 2), 1);
    s = stats(st);
    CHECK_EQ(s.evictions, 4);
    CHECK_EQ(s.evicted_bytes, 4 * 4096);
    CHECK_EQ(s.used_bytes, 64 << 10);
    CHECK_EQ(get_ok(st, "big", 12288), 1);
    CHECK_EQ(get_ok(st, "k0", 4096), 1);
    /* A value as large as the pool evicts everything unpinned. */
    CHECK_EQ(put(st, "all", 64 << 10), 0);
    s = stats(st);
    CHECK_EQ(s.objects, 1);
    CHECK_EQ(get_ok(st, "all", 64 << 10), 1);
    store_destroy(st);
}

STORE_TEST(store_eviction_respects_capacity_under_random_load) {
    store *st = mk(1 << 20, 200000);
    uint64_t seed = 7, puts = 0;
    char k[32];
    for (int i = 0; i < 3000; i++) {
        seed = prng_mix(seed);
        snprintf(k, sizeof(k), "r%u", (unsigned)(seed % 500));
        uint64_t len = 1 + (seed >> 20) % 200000;
        int rc = put(st, k, len);
        CHECK(rc == 0 || rc == STORE_DUP);
        puts += rc == 0;
        if (i % 50 == 0) CHECK_EQ(store_check(st), 0);
        tide_stats s;
        store_stats(st, &s);
        CHECK(s.used_bytes <= s.capacity_bytes);
    }
    tide_stats s = stats(st);
    CHECK_EQ(s.puts, puts);
    CHECK(s.evictions > 0);
    CHECK_EQ(s.puts - s.evictions, s.objects);
    store_destroy(st);
}

STORE_TEST(store_pins_block_eviction_and_reuse) {
    store *st = mk(64 << 10, 0);
    CHECK_EQ(put(st, "held", 4096), 0);
    store_ref p;
    CHECK_EQ(store_pin(st, "held", 4, 0, &p), 0);
    char k[16];
    for (int i = 0; i < 100; i++) { /* churn far more than the pool holds */
        snprintf(k, sizeof(k), "c%d", i);
        CHECK_EQ(put(st, k, 4096), 0);
    }
    CHECK_EQ(store_exists(st, "held", 4), 1);
    const uint8_t *b = store_base(st) + p.offset;
    for (int i = 0; i < 4096; i++)
        CHECK_EQ(b[i], byte_for("held", (uint64_t)i));
    CHECK_EQ(store_unpin(st, p.id), 0);
    CHECK_EQ(stats(st).pinned, 0);
    store_destroy(st);
}

STORE_TEST(store_enospace_when_everything_is_pinned_or_reserved) {
    store *st = mk(16 << 10, 0);
    store_ref p[4], r;
    char k[16];
    for (int i = 0; i < 4; i++) {
        snprintf(k, sizeof(k), "p%d", i);
        CHECK_EQ(put(st, k, 4096), 0);
        CHECK_EQ(store_pin(st, k, strlen(k), 0, &p[i]), 0);
    }
    CHECK_EQ(store_reserve(st, "more", 4, 1, 0, &r), TIDE_ENOSPACE);
    CHECK_EQ(stats(st).pinned, 4);
    CHECK_EQ(store_unpin(st, p[2].id), 0);
    CHECK_EQ(store_reserve(st, "more", 4, 4096, 0, &r), 0); /* evicts p2 only */
    CHECK_EQ(store_exists(st, "p2", 2), 0);
    CHECK_EQ(store_exists(st, "p1", 2), 1);
    /* A reservation is not evictable either. */
    CHECK_EQ(store_reserve(st, "again", 5, 1, 0, &r), TIDE_ENOSPACE);
    /* Fragmentation: two free 4 KiB holes that are not neighbours do not fit 8 KiB. */
    CHECK_EQ(store_unpin(st, p[0].id), 0);
    CHECK_EQ(store_unpin(st, p[3].id), 0);
    CHECK_EQ(store_remove(st, "p0", 2), 0);
    CHECK_EQ(store_remove(st, "p3", 2), 0);
    tide_stats s = stats(st);
    CHECK_EQ(s.used_bytes, 8192);
    CHECK_EQ(store_reserve(st, "two", 3, 8192, 0, &r), TIDE_ENOSPACE);
    CHECK_EQ(store_reserve(st, "one", 3, 4096, 0, &r), 0); /* one hole is enough for 4 KiB */
    CHECK_EQ(store_abort(st, r.id), 0);
    store_destroy(st);
}

STORE_TEST(store_remove_while_pinned) {
    store *st = mk(64 << 10, 0);
    CHECK_EQ(put(st, "v", 8000), 0);
    store_ref p1, p2, r;
    CHECK_EQ(store_pin(st, "v", 1, 0, &p1), 0);
    CHECK_EQ(store_pin(st, "v", 1, 0, &p2), 0);
    CHECK_EQ(store_remove(st, "v", 1), 0);
    CHECK_EQ(store_exists(st, "v", 1), 0);
    CHECK_EQ(store_pin(st, "v", 1, 0, &r), TIDE_ENOTFOUND);
    CHECK_EQ(store_remove(st, "v", 1), TIDE_ENOTFOUND);
    tide_stats s = stats(st);
    CHECK_EQ(s.objects, 0);
    CHECK_EQ(s.pinned, 1);
    CHECK_EQ(s.used_bytes, alloc_units_for(8000) * ALLOC_UNIT);
    /* A new put of the key goes elsewhere; the pinned bytes stay intact. */
    CHECK_EQ(put(st, "v", 100), 0);
    CHECK_EQ(get_ok(st, "v", 100), 1);
    const uint8_t *b = store_base(st) + p1.offset;
    for (int i = 0; i < 8000; i++)
        CHECK_EQ(b[i], byte_for("v", (uint64_t)i));
    CHECK_EQ(store_unpin(st, p1.id), 0);
    CHECK_EQ(stats(st).used_bytes, (alloc_units_for(8000) + 1) * ALLOC_UNIT);
    CHECK_EQ(store_unpin(st, p2.id), 0);
    s = stats(st);
    CHECK_EQ(s.used_bytes, ALLOC_UNIT);
    CHECK_EQ(s.pinned, 0);
    CHECK_EQ(s.objects, 1);
    store_destroy(st);
}

STORE_TEST(store_lease_expiry_of_pins_and_reservations) {
    store *st = mk(64 << 10, 0);
    CHECK_EQ(put(st, "a", 4096), 0);
    store_ref pa, pb, ra;
    CHECK_EQ(store_pin(st, "a", 1, 100, &pa), 0);
    CHECK_EQ(store_pin(st, "a", 1, 0, &pb), 0); /* no expiry */
    CHECK_EQ(store_reserve(st, "b", 1, 4096, 200, &ra), 0);
    CHECK_EQ(store_expire(st, 50), 0);
    CHECK_EQ(store_expire(st, 100), 0); /* due only once the deadline is before now */
    CHECK_EQ(store_expire(st, 150), 1);
    CHECK_EQ(store_unpin(st, pa.id), TIDE_ENOTFOUND);
    tide_stats s = stats(st);
    CHECK_EQ(s.pinned, 1);
    CHECK_EQ(s.reserved, 1);
    CHECK_EQ(store_expire(st, 1000), 1);
    CHECK_EQ(store_commit(st, ra.id, 0), TIDE_ENOTFOUND);
    CHECK_EQ(store_exists(st, "b", 1), 0);
    s = stats(st);
    CHECK_EQ(s.reserved, 0);
    CHECK_EQ(s.used_bytes, 4096);
    CHECK_EQ(store_expire(st, UINT64_MAX), 0);
    CHECK_EQ(store_unpin(st, pb.id), 0);
    /* The reclaimed key can be written again. */
    CHECK_EQ(put(st, "b", 10), 0);
    store_destroy(st);
}

STORE_TEST(store_lease_expiry_in_deadline_order) {
    store *st = mk(1 << 20, 0);
    CHECK_EQ(put(st, "o", 64), 0);
    enum { N = 500 };
    static store_ref p[N];
    static uint64_t dl[N];
    uint64_t seed = 5;
    for (int i = 0; i < N; i++) {
        seed = prng_mix(seed);
        dl[i] = 1 + seed % 10000;
        CHECK_EQ(store_pin(st, "o", 1, dl[i], &p[i]), 0);
    }
    for (int i = 0; i < N; i += 3)
        CHECK_EQ(store_unpin(st, p[i].id), 0); /* out of order */
    CHECK_EQ(store_check(st), 0);
    for (uint64_t now = 0; now < 10000 + 2 * 997; now += 997) {
        int expect = 0;
        for (int i = 0; i < N; i++)
            if (i % 3 && dl[i] < now && dl[i] >= (now >= 997 ? now - 997 : 0)) expect++;
        CHECK_EQ(store_expire(st, now), expect);
        CHECK_EQ(store_check(st), 0);
    }
    for (int i = 0; i < N; i++)
        CHECK_EQ(store_unpin(st, p[i].id), TIDE_ENOTFOUND);
    CHECK_EQ(stats(st).pinned, 0);
    store_destroy(st);
}

STORE_TEST(store_stats_counters_and_verify_failed) {
    store *st = mk(1 << 20, 0);
    CHECK_EQ(put(st, "a", 1000), 0);
    CHECK_EQ(put(st, "b", 2000), 0);
    CHECK_EQ(put(st, "a", 1000), STORE_DUP);
    CHECK_EQ(get_ok(st, "a", 1000), 1);
    CHECK_EQ(get_ok(st, "zz", 1), 0);
    store_count_io(st, 3000, 1000);
    tide_stats s = stats(st);
    CHECK_EQ(s.capacity_bytes, 1 << 20);
    CHECK_EQ(s.objects, 2);
    CHECK_EQ(s.puts, 2);
    CHECK_EQ(s.put_dups, 1);
    CHECK_EQ(s.gets, 1);
    CHECK_EQ(s.misses, 1);
    CHECK_EQ(s.bytes_in, 3000);
    CHECK_EQ(s.bytes_out, 1000);
    CHECK_EQ(s.used_bytes, (alloc_units_for(1000) + alloc_units_for(2000)) * ALLOC_UNIT);
    CHECK(s.meta_bytes > 0);
    /* A reader finds bad bytes: the object goes, the read is a miss, the space is freed at
     * the unpin. */
    store_ref p;
    CHECK_EQ(store_pin(st, "b", 1, 0, &p), 0);
    store_verify_failed(st, p.id);
    CHECK_EQ(store_exists(st, "b", 1), 0);
    s = stats(st);
    CHECK_EQ(s.checksum_errors, 1);
    CHECK_EQ(s.gets, 1);
    CHECK_EQ(s.misses, 2);
    CHECK_EQ(s.objects, 1);
    CHECK_EQ(s.pinned, 1);
    CHECK_EQ(store_unpin(st, p.id), 0);
    s = stats(st);
    CHECK_EQ(s.used_bytes, alloc_units_for(1000) * ALLOC_UNIT);
    CHECK_EQ(s.pinned, 0);
    store_destroy(st);
}

STORE_TEST(store_clear_keeps_reservations_and_pinned_bytes) {
    store *st = mk(1 << 20, 0);
    char k[16];
    for (int i = 0; i < 300; i++) {
        snprintf(k, sizeof(k), "c%d", i);
        CHECK_EQ(put(st, k, 300), 0);
    }
    store_ref p, r;
    CHECK_EQ(store_pin(st, "c7", 2, 0, &p), 0);
    CHECK_EQ(store_reserve(st, "w", 1, 500, 0, &r), 0);
    store_clear(st);
    tide_stats s = stats(st);
    CHECK_EQ(s.objects, 0);
    CHECK_EQ(s.reserved, 1);
    CHECK_EQ(s.pinned, 1);
    for (int i = 0; i < 300; i++) {
        snprintf(k, sizeof(k), "c%d", i);
        CHECK_EQ(store_exists(st, k, strlen(k)), 0);
    }
    CHECK_EQ(store_commit(st, r.id, 0), 0);
    CHECK_EQ(store_exists(st, "w", 1), 1);
    CHECK_EQ(store_unpin(st, p.id), 0);
    s = stats(st);
    CHECK_EQ(s.used_bytes, alloc_units_for(500) * ALLOC_UNIT);
    store_destroy(st);
}

/*
 * The published figure: metadata per object (record with its heap header, index slots,
 * allocator nodes) beyond the key bytes, at several fill levels so the index's load factor
 * varies, and key lengths that give the heap's rounding its best and worst cases. The
 * figure counts what is allocated, not just what is in use.
 */
STORE_TEST(store_metadata_per_object_under_100_bytes) {
    const int klens[] = {3, 24, 40, 57, 256};
    const int marks[] = {1000, 3000, 7000, 20000, 45000};
    for (size_t kl = 0; kl < sizeof(klens) / sizeof(klens[0]); kl++) {
        int klen = klens[kl];
        store *st = mk(64 << 20, 0);
        tide_stats s0 = stats(st);
        char k[TIDE_KEY_MAX + 1];
        int n = 0;
        for (size_t m = 0; m < sizeof(marks) / sizeof(marks[0]); m++) {
            for (; n < marks[m]; n++) {
                memset(k, 'k', (size_t)klen); /* n in the key's last 3 bytes */
                for (int b = 0; b < 3; b++)
                    k[klen - 1 - b] = (char)(n >> (8 * b));
                store_ref r;
                CHECK_EQ(store_reserve(st, k, (size_t)klen, 64, 0, &r), 0);
                CHECK_EQ(store_commit(st, r.id, 0), 0);
            }
            tide_stats s;
            store_stats(st, &s);
            CHECK_EQ(s.objects, (uint64_t)n);
            double per = (double)(s.meta_bytes - s0.meta_bytes) / n - klen;
            CHECK_MSG(per <= 100.0, "key %d, %d objects: %.1f bytes an object beyond the key", klen,
                      n, per);
            if (getenv("TIDE_TEST_VERBOSE"))
                fprintf(stderr, "    key %3d, %6d objects: %.1f bytes/object + key\n", klen, n,
                        per);
        }
        store_destroy(st);
    }
}
