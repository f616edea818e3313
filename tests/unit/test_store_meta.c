/*
 * test_store_meta.c — the memory tier's metadata budget (store.c): puts evict to stay
 * within it under every policy, a put with nothing evictable is refused (TIDE_ENOSPACE)
 * and nothing stored is touched, the default leaves short-key stores limited by the pool
 * alone, a budget too small for one object is refused at creation, and mem:// takes it as
 * meta_budget=.
 */
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "store/shadow.h"
#include "store/store.h"
#include "store/store_int.h"
#include "tide.h"

static const int policies[] = {STORE_POLICY_LRU, STORE_POLICY_S3FIFO, STORE_POLICY_CHAIN,
                               STORE_POLICY_ADAPT};

static store *mk(int pol, uint64_t cap, uint64_t budget) {
    store_config c = {.capacity = cap, .policy = pol, .meta_budget = budget};
    store *st;
    char err[256];
    int rc = store_create(&c, &st, err, sizeof(err));
    CHECK_MSG(rc == 0, "store_create: %d %s", rc, err);
    return st;
}

/* A klen-byte key ending in i's digits. */
static void key_of(char *k, size_t klen, int i) {
    memset(k, 'q', klen);
    char d[16];
    int n = snprintf(d, sizeof(d), "%d", i);
    memcpy(k + klen - (size_t)n, d, (size_t)n);
}

static int put1(store *st, const char *k, size_t klen) {
    store_ref r;
    int rc = store_reserve(st, k, klen, 1, 0, &r);
    if (rc) return rc;
    return store_commit(st, r.id, 0);
}

TEST(store_meta_budget_evicts_then_refuses) {
    enum { KLEN = 200, N = 500 };
    const uint64_t budget = 32 * 1024, fit = budget / store_meta_cost(KLEN);
    for (size_t p = 0; p < sizeof(policies) / sizeof(policies[0]); p++) {
        test_context = store_policy_name(policies[p]);
        store *st = mk(policies[p], 1 << 20, budget); /* 4096 units: room for N values */
        CHECK_EQ(store_meta_budget(st), budget);
        char k[KLEN];
        for (int i = 0; i < N; i++) {
            key_of(k, KLEN, i);
            CHECK_EQ(put1(st, k, KLEN), 0);
            CHECK(store_meta_charged(st) <= budget);
        }
        tide_stats s;
        store_stats(st, &s);
        CHECK_EQ(s.objects, fit);
        CHECK_EQ(s.evictions, N - fit);
        CHECK_EQ(store_check(st), 0);
        /* Pin every object: nothing is evictable, so a new put is refused, and every
         * object stays as it was. */
        uint64_t ids[N];
        int npinned = 0;
        for (int i = 0; i < N; i++) {
            key_of(k, KLEN, i);
            store_ref r;
            if (store_pin(st, k, KLEN, 0, &r) == 0) ids[npinned++] = r.id;
        }
        CHECK_EQ(npinned, fit);
        key_of(k, KLEN, N);
        store_ref r;
        CHECK_EQ(store_reserve(st, k, KLEN, 1, 0, &r), TIDE_ENOSPACE);
        store_stats(st, &s);
        CHECK_EQ(s.objects, fit);
        CHECK_EQ(s.evictions, N - fit);
        CHECK_EQ(store_check(st), 0);
        /* What is left of the budget pays for as many shorter keys as it can (held as
         * reservations, which are not evictable either), and no more. */
        uint64_t left = budget - store_meta_charged(st), resv[64];
        int nresv = 0;
        for (; nresv < 64; nresv++) {
            char sk[8];
            snprintf(sk, sizeof(sk), "s%d", nresv);
            if (store_reserve(st, sk, strlen(sk), 1, 0, &r) != 0) break;
            resv[nresv] = r.id;
        }
        CHECK_EQ(nresv, left / store_meta_cost(2));
        CHECK_EQ(store_reserve(st, "s999", 4, 1, 0, &r), TIDE_ENOSPACE);
        CHECK_EQ(store_check(st), 0);
        for (int i = 0; i < nresv; i++)
            CHECK_EQ(store_abort(st, resv[i]), 0);
        for (int i = 0; i < npinned; i++)
            CHECK_EQ(store_unpin(st, ids[i]), 0);
        CHECK_EQ(put1(st, k, KLEN), 0); /* room again: one evicted for it */
        CHECK_EQ(store_exists(st, k, KLEN), 1);
        CHECK_EQ(store_check(st), 0);
        store_destroy(st);
    }
    test_context = NULL;
}

/* With the default (capacity/2), 1-unit values under short keys fill the whole pool: the
 * budget binds only where metadata would outgrow it. Long keys are bounded by it. */
TEST(store_meta_budget_default) {
    store *st = mk(STORE_POLICY_LRU, 1 << 20, 0);
    CHECK_EQ(store_meta_budget(st), (1 << 20) / STORE_META_BUDGET_DIV);
    char k[TIDE_KEY_MAX];
    for (int i = 0; i < 5000; i++) {
        key_of(k, 8, i);
        CHECK_EQ(put1(st, k, 8), 0);
    }
    tide_stats s;
    store_stats(st, &s);
    CHECK_EQ(s.objects, (1 << 20) / ALLOC_UNIT); /* the pool is what is full */
    store_destroy(st);
    st = mk(STORE_POLICY_LRU, 1 << 20, 0);
    for (int i = 0; i < 5000; i++) {
        key_of(k, TIDE_KEY_MAX, i);
        CHECK_EQ(put1(st, k, TIDE_KEY_MAX), 0);
    }
    store_stats(st, &s);
    CHECK_EQ(s.objects, store_meta_budget(st) / store_meta_cost(TIDE_KEY_MAX));
    CHECK(s.meta_bytes < (1 << 20) / STORE_META_BUDGET_DIV + 64 * 1024);
    store_destroy(st);
    /* A pool too small for the default: the budget still holds one longest-key object. */
    st = mk(STORE_POLICY_LRU, 256, 0);
    CHECK_EQ(store_meta_budget(st), store_meta_cost(TIDE_KEY_MAX));
    CHECK_EQ(put1(st, k, TIDE_KEY_MAX), 0);
    store_destroy(st);
}

TEST(store_meta_budget_refused_when_too_small) {
    store_config c = {.capacity = 1 << 20, .meta_budget = 100};
    store *st = NULL;
    char err[256] = "";
    CHECK_EQ(store_create(&c, &st, err, sizeof(err)), TIDE_ECONFIG);
    CHECK(st == NULL);
    CHECK_CONTAINS(err, "metadata budget 100 bytes is below");
    tide_store *s;
    CHECK_EQ(tide_open("mem://?meta_budget=100", &s), TIDE_ECONFIG);
    CHECK_CONTAINS(tide_errmsg(NULL), "metadata budget 100 bytes");
    CHECK_EQ(tide_open("mem://?meta_budget=lots", &s), TIDE_ESIZE);
    CHECK_CONTAINS(tide_errmsg(NULL), "meta_budget");
    /* Through mem://: the budget bounds the objects a put of tiny values keeps. */
    CHECK_EQ(tide_open("mem://?capacity=1MiB&meta_budget=32KiB&policy=lru", &s), 0);
    char k[200];
    for (int i = 0; i < 500; i++) {
        key_of(k, sizeof(k), i);
        CHECK_EQ(tide_put(s, k, sizeof(k), "v", 1), 0);
    }
    tide_stats st2;
    CHECK_EQ(tide_stats_get(s, &st2, sizeof(st2)), 0);
    CHECK_EQ(st2.objects, 32 * 1024 / store_meta_cost(sizeof(k)));
    tide_close(s);
}

/* With an SSD tier, metadata over the budget spills as pool pressure does: every put
 * succeeds, memory keeps what the budget pays for, and every key reads back. */
TEST(store_meta_budget_spills_to_disk) {
    char url[512];
    snprintf(url, sizeof(url),
             "mem://?capacity=1MiB&meta_budget=32KiB&policy=lru&disk_dir=%s/d&disk_capacity=64MiB",
             test_tmpdir());
    tide_store *s;
    CHECK_MSG(tide_open(url, &s) == 0, "%s", tide_errmsg(NULL));
    char k[200];
    for (int i = 0; i < 500; i++) {
        key_of(k, sizeof(k), i);
        CHECK_MSG(tide_put(s, k, sizeof(k), "v", 1) == 0, "put %d: %s", i, tide_errmsg(s));
    }
    tide_stats st;
    CHECK_EQ(tide_stats_get(s, &st, sizeof(st)), 0);
    CHECK(st.objects <= 32 * 1024 / store_meta_cost(sizeof(k)));
    for (int i = 0; i < 500; i++) {
        key_of(k, sizeof(k), i);
        char v[4];
        size_t len = 0;
        CHECK_MSG(tide_get(s, k, sizeof(k), v, sizeof(v), &len) == 0, "get %d: %s", i,
                  tide_errmsg(s));
        CHECK(len == 1 && v[0] == 'v');
    }
    tide_close(s);
}

/* Metadata of the adapt policy beyond chain's: the same puts into a chain and an adapt
 * store, and the difference of their meta_bytes is the ghost plus the miniature
 * simulations (shadow.c). The miniatures are a fixed size whatever the store holds
 * (sizeof(shadow) + shadow_bytes(), about 320 KiB); the ghost is within its stated bound of
 * 64 to 128 bytes per object held (adapt.c) once the store holds more than its minimum,
 * and no more after evictions than the most it held. */
TEST(store_adapt_meta_bytes_per_object) {
    const int n = 6000; /* 256-byte values in a 1 MiB pool: 4096 fit */
    store *st[2] = {mk(STORE_POLICY_CHAIN, 1 << 20, 0), mk(STORE_POLICY_ADAPT, 1 << 20, 0)};
    const uint64_t fixed = sizeof(shadow) + shadow_bytes();
    CHECK(fixed <= 400u << 10); /* the stated size: about 320 KiB */
    uint64_t held = 0;
    for (int i = 0; i < n; i++) {
        char k[16];
        key_of(k, sizeof(k), i);
        for (int s = 0; s < 2; s++)
            CHECK_EQ(put1(st[s], k, sizeof(k)), 0);
        tide_stats a, b;
        store_stats(st[0], &a);
        store_stats(st[1], &b);
        CHECK_EQ(a.objects, b.objects);
        if (a.objects > held) held = a.objects;
        CHECK(b.meta_bytes - a.meta_bytes >= fixed);
        uint64_t ghost = b.meta_bytes - a.meta_bytes - fixed;
        CHECK_MSG(ghost <= (held < 64 ? 64 : held) * 128,
                  "ghost %llu bytes for %llu objects held at most", (unsigned long long)ghost,
                  (unsigned long long)held);
        if (held >= 64) CHECK(ghost >= held * 64);
    }
    CHECK_EQ(held, 4096);
    for (int s = 0; s < 2; s++) {
        CHECK_EQ(store_check(st[s]), 0);
        store_destroy(st[s]);
    }
}
