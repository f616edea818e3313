/*
 * test_store_alloc.c — the store's building blocks: the offset allocator against a shadow
 * model, the pointer table, and the memfd pool.
 */
#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/prng.h"
#include "harness.h"
#include "store/store_int.h"
#include "tide.h"

/* Smallest size the good-fit search is sure to satisfy for a request of u units. */
static uint32_t goodfit_size(uint32_t u) {
    if (u < ALLOC_SL_COUNT) return u;
    int m = 31 - __builtin_clz(u);
    uint32_t step = 1u << (m - ALLOC_SL_BITS);
    return (u + step - 1) / step * step;
}

static uint32_t shadow_largest_free(const int *owner, uint32_t total) {
    uint32_t best = 0, run = 0;
    for (uint32_t i = 0; i < total; i++) {
        run = owner[i] < 0 ? run + 1 : 0;
        if (run > best) best = run;
    }
    return best;
}

TEST(store_alloc_random_against_shadow) {
    enum { TOTAL = 8192, SLOTS = 256, STEPS = 20000 };
    alloc a;
    CHECK_EQ(alloc_init(&a, TOTAL), 0);
    static int owner[TOTAL];
    for (int i = 0; i < TOTAL; i++)
        owner[i] = -1;
    uint32_t node[SLOTS], size[SLOTS];
    int held[SLOTS] = {0};
    uint64_t seed = 0x1234567;
    uint32_t used = 0;
    for (int step = 0; step < STEPS; step++) {
        int s = (int)(prng_next(&seed) % SLOTS);
        if (held[s]) {
            uint64_t off = alloc_offset(&a, node[s]) / ALLOC_UNIT;
            for (uint32_t k = 0; k < size[s]; k++) {
                CHECK(owner[off + k] == s);
                owner[off + k] = -1;
            }
            alloc_put(&a, node[s]);
            held[s] = 0;
            used -= size[s];
        } else {
            uint64_t r = prng_next(&seed);
            uint32_t u = (r & 3) == 0 ? 1 + (uint32_t)(r >> 8) % 4 : 1 + (uint32_t)(r >> 8) % 400;
            int rc = alloc_get(&a, u, &node[s]);
            if (rc == TIDE_ENOSPACE) {
                /* Fragmentation bound: failure only when no free run is good-fit sized. */
                CHECK(shadow_largest_free(owner, TOTAL) < goodfit_size(u));
                continue;
            }
            CHECK_EQ(rc, 0);
            CHECK_EQ(alloc_units(&a, node[s]), u); /* exact: waste < 1 unit a value */
            uint64_t off = alloc_offset(&a, node[s]);
            CHECK_EQ(off % ALLOC_UNIT, 0);
            off /= ALLOC_UNIT;
            CHECK(off + u <= TOTAL);
            for (uint32_t k = 0; k < u; k++) {
                CHECK_MSG(owner[off + k] < 0, "overlap at unit %llu",
                          (unsigned long long)(off + k));
                owner[off + k] = s;
            }
            held[s] = 1;
            size[s] = u;
            used += u;
        }
        CHECK_EQ(a.used, used);
        if (step % 64 == 0) {
            CHECK_EQ(alloc_check(&a), 0);
            CHECK_EQ(alloc_largest_free(&a), shadow_largest_free(owner, TOTAL));
        }
    }
    for (int s = 0; s < SLOTS; s++)
        if (held[s]) alloc_put(&a, node[s]);
    CHECK_EQ(alloc_check(&a), 0);
    CHECK_EQ(a.used, 0);
    CHECK_EQ(a.nfree, 1); /* everything merged back into one range */
    CHECK_EQ(alloc_largest_free(&a), TOTAL);
    alloc_fini(&a);
}

TEST(store_alloc_reuses_holes_of_the_same_size) {
    /* 101 units: the good-fit search rounds up to 104, so holes of exactly 101 are found
     * only by the scan of the request's own bin. */
    alloc a;
    CHECK_EQ(alloc_init(&a, 1024), 0);
    uint32_t n[10];
    for (int i = 0; i < 10; i++)
        CHECK_EQ(alloc_get(&a, 101, &n[i]), 0);
    CHECK_EQ(alloc_largest_free(&a), 14);
    for (int i = 0; i < 10; i += 2)
        alloc_put(&a, n[i]);
    CHECK_EQ(a.nfree, 6);
    for (int i = 0; i < 10; i += 2)
        CHECK_EQ(alloc_get(&a, 101, &n[i]), 0);
    CHECK_EQ(alloc_get(&a, 15, &n[0]), TIDE_ENOSPACE);
    CHECK_EQ(alloc_check(&a), 0);
    alloc_fini(&a);
}

TEST(store_alloc_many_tiny_blocks_and_limits) {
    alloc a;
    CHECK_EQ(alloc_init(&a, 0), -EINVAL);
    alloc_fini(&a);
    CHECK_EQ(alloc_init(&a, ALLOC_MAX_UNITS + 1u), -EINVAL);
    alloc_fini(&a);
    enum { N = 5000 };
    CHECK_EQ(alloc_init(&a, N), 0);
    static uint32_t n[N];
    for (int i = 0; i < N; i++)
        CHECK_EQ(alloc_get(&a, 1, &n[i]), 0);
    CHECK_EQ(alloc_get(&a, 1, &n[0]), TIDE_ENOSPACE);
    CHECK(a.nchunks >= N / 1024); /* node storage grew across chunks */
    CHECK_EQ(alloc_check(&a), 0);
    for (int i = N - 1; i >= 0; i -= 2)
        alloc_put(&a, n[i]);
    CHECK_EQ(alloc_check(&a), 0);
    for (int i = N - 2; i >= 0; i -= 2)
        alloc_put(&a, n[i]);
    CHECK_EQ(alloc_check(&a), 0);
    CHECK_EQ(a.nfree, 1);
    CHECK_EQ(alloc_largest_free(&a), N);
    CHECK_EQ(alloc_get(&a, N, &n[0]), 0);
    CHECK_EQ(alloc_offset(&a, n[0]), 0);
    alloc_fini(&a);
}

/* Entries for the table test: a value and a deliberately poor hash (many collisions). */
typedef struct hent {
    uint32_t v;
} hent;
static uint32_t hent_hash(const void *e) {
    return ((const hent *)e)->v % 13 * 0x01000193u;
}
static int hent_eq(const void *e, const void *k) {
    return ((const hent *)e)->v == *(const uint32_t *)k;
}

TEST(store_htab_random_against_shadow) {
    enum { N = 600 };
    static hent ents[N];
    int in[N] = {0};
    htab t;
    CHECK_EQ(htab_init(&t, 4, hent_hash), 0);
    uint64_t seed = 99;
    for (int step = 0; step < 20000; step++) {
        uint32_t v = (uint32_t)(prng_next(&seed) % N);
        ents[v].v = v;
        uint32_t h = hent_hash(&ents[v]);
        if (in[v]) {
            CHECK(htab_find(&t, h, hent_eq, &v) == &ents[v]);
            htab_delete(&t, &ents[v]);
            in[v] = 0;
        } else {
            CHECK(htab_find(&t, h, hent_eq, &v) == NULL);
            CHECK_EQ(htab_reserve(&t, 1), 0);
            htab_insert(&t, &ents[v]);
            in[v] = 1;
        }
        CHECK((uint64_t)t.count * 4 <= (uint64_t)htab_slots(&t) * 3);
        if (step % 500 == 0) {
            for (uint32_t k = 0; k < N; k++) {
                hent probe = {k};
                void *f = htab_find(&t, hent_hash(&probe), hent_eq, &k);
                CHECK(in[k] ? f == &ents[k] : f == NULL);
            }
        }
    }
    htab_fini(&t);
}

TEST(store_pool_shared_and_prefaulted) {
    pool p;
    char err[256];
    CHECK_EQ(pool_open(&p, 0, 0, 0, err, sizeof(err)), -EINVAL);
    CHECK_CONTAINS(err, "size");
    /* hugepages=1 falls back to normal pages when none are reserved. */
    CHECK_EQ(pool_open(&p, 3 << 20, 1, 1, err, sizeof(err)), 0);
    CHECK(p.fd >= 0);
    CHECK(p.map_size >= p.size);
    memset(p.base, 0xAB, p.size);
    /* A second mapping of the fd (what a same-host client does) sees the same bytes. */
    uint8_t *other = mmap(NULL, p.size, PROT_READ | PROT_WRITE, MAP_SHARED, p.fd, 0);
    CHECK(other != MAP_FAILED);
    CHECK_EQ(other[p.size - 1], 0xAB);
    other[12345] = 7;
    CHECK_EQ(p.base[12345], 7);
    munmap(other, p.size);
    pool_close(&p);
    CHECK_EQ(p.fd, -1);
}
