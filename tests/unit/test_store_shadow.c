/*
 * test_store_shadow.c — adapt's miniature simulations (src/store/shadow.c): on a stream
 * where popularity wins (a hot set larger than half the cache, read over and over between
 * one-time keys) they move protected's share up from its start of 1/2, because the
 * miniature with the larger share hits more; the same stream gives the same choices every
 * time; past SHADOW_MAX objects only the hash-sampled keys reach the miniatures.
 */
#include "harness.h"
#include "store/shadow.h"

/* A well-mixed 32-bit hash of key number i (what store_ghost_hash gives a key). */
static uint32_t key_hash_of(uint32_t i) {
    uint64_t z = (uint64_t)i * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (uint32_t)(z ^ (z >> 31));
}

/* One round: the hot keys read one by one (each its own batch), then `cold` keys never seen
 * before saved as one batch. The first round saves the hot keys instead. */
static void popularity_round(shadow *s, int round, uint32_t hot, uint32_t cold, uint32_t nmax,
                             uint32_t *next_cold) {
    for (uint32_t k = 0; k < hot; k++)
        shadow_ref(s, key_hash_of(k), round > 0, 1, 0, nmax);
    for (uint32_t k = 0; k < cold; k++, (*next_cold)++)
        shadow_ref(s, key_hash_of(*next_cold), 0, k == 0, k + 1 == cold, nmax);
}

TEST(shadow_popularity_raises_the_share) {
    shadow s;
    CHECK_EQ(shadow_init(&s), 0);
    CHECK_EQ(shadow_share(&s), SHADOW_SHARE_DEN / 2); /* the start: 1/2 */
    /* A cache of 64: 56 hot keys fit protected only at a share of 7/8 or more. */
    uint32_t next_cold = 1000000;
    for (int round = 0; round < 40; round++)
        popularity_round(&s, round, 56, 24, 64, &next_cold);
    CHECK_MSG(s.choices > 0, "no choice made");
    CHECK_MSG(shadow_share(&s) >= SHADOW_SHARE_DEN * 7 / 8, "share %u/64 after %llu choices",
              shadow_share(&s), (unsigned long long)s.choices);
    CHECK(s.moves > 0);
    uint32_t pick = s.pick;
    CHECK(s.score[pick] > s.score[SHADOW_START]);
    shadow_fini(&s);
}

TEST(shadow_same_stream_same_choices) {
    shadow a, b;
    CHECK_EQ(shadow_init(&a), 0);
    CHECK_EQ(shadow_init(&b), 0);
    uint32_t ca = 5000000, cb = 5000000;
    for (int round = 0; round < 30; round++) {
        popularity_round(&a, round, 40 + round % 7, 30, 64, &ca);
        popularity_round(&b, round, 40 + round % 7, 30, 64, &cb);
        CHECK_EQ(shadow_share(&a), shadow_share(&b));
        CHECK_EQ(a.choices, b.choices);
        for (int k = 0; k < SHADOW_K; k++)
            CHECK_EQ(a.score[k], b.score[k]);
    }
    shadow_fini(&a);
    shadow_fini(&b);
}

TEST(shadow_samples_by_hash_past_its_size) {
    shadow s;
    CHECK_EQ(shadow_init(&s), 0);
    const uint64_t nmax = 1u << 20; /* sampled: SHADOW_MAX / nmax of the keys, 1 in 512 */
    const uint32_t thresh = (uint32_t)(((uint64_t)SHADOW_MAX << 32) / nmax);
    uint32_t unsampled = 0, sampled = 0;
    for (uint32_t i = 0; i < 200000 && unsampled < 10000; i++) {
        uint32_t h = key_hash_of(i);
        if (h * 0x9E3779B1u < thresh) continue;
        shadow_ref(&s, h, 0, 1, 0, nmax);
        unsampled++;
    }
    CHECK_EQ(unsampled, 10000);
    for (int k = 0; k < SHADOW_K; k++)
        CHECK_EQ(s.m[k].count[1] + s.m[k].count[2], 0);
    for (uint32_t i = 0; i < 2000000 && sampled < 100; i++) {
        uint32_t h = key_hash_of(i);
        if (h * 0x9E3779B1u >= thresh) continue;
        shadow_ref(&s, h, 0, 1, 0, nmax);
        sampled++;
    }
    CHECK_EQ(sampled, 100);
    for (int k = 0; k < SHADOW_K; k++)
        CHECK_EQ(s.m[k].count[1] + s.m[k].count[2], 100);
    CHECK_EQ(s.cap, SHADOW_MAX);
    shadow_fini(&s);
}
