/*
 * test_hash.c — prefix hashing: fixed vectors, chaining, the extra key, partial blocks,
 * the max_hashes bound and bad arguments.
 *
 * How the vectors were produced (independently of src/common/hash.c):
 * scripts/hash-vectors.py builds each input byte string exactly as include/tide.h
 * specifies (P[16] || le32(n) || le32(t[i])... || le32(|E|) || E) with Python's struct
 * module, then
 *   - SHA-256: Python's hashlib.sha256(input).digest()[:16] (Debian's /usr/bin/python3);
 *   - XXH3-128: Debian's `xxhsum -H2` (package xxhash 0.8.1) over the input written to a
 *     file. xxhsum prints the canonical form, big-endian high64 then big-endian low64; the
 *     spec's le64(low64) || le64(high64) is that 16-byte string reversed, so the script
 *     reverses it. Example: xxhsum printed 0b2bdf679ef9bc9bcb912eca8d362c3a for block A.
 * Chained vectors use the parent as the script computed it, not as the C code did.
 *
 * Inputs (the same in the script):
 *   A = {i*1000+7 for i in 0..13} + {0x12345678, 0xFFFFFFFF}   (16 tokens)
 *   B = {(i*7919) % 50000 for i in 0..15}                       (16 tokens)
 *   L = {(i*2654435761) mod 2^32 for i in 0..999}                (1000 tokens: the input is
 *       4024 bytes, longer than hash.c's stage buffer, so it takes the streaming path)
 *   SALT = "salt:v1" (7 bytes)
 */
#include <errno.h>
#include <string.h>

#include "harness.h"
#include "tide.h"

typedef struct vectors {
    const char *a;              /* block A, parent zero, no extra */
    const char *a_salt;         /* block A, parent zero, extra SALT */
    const char *b_after_a;      /* block B, parent = a, no extra */
    const char *b_after_a_salt; /* block B, parent = a_salt, no extra */
    const char *long1000;       /* block L, parent zero, no extra */
    const char *empty;          /* zero tokens, parent zero, no extra */
} vectors;

static const vectors xxh3_vec = {
    "3a2c368dca2e91cb9bbcf99e67df2b0b", "279a340f8a41c9eb297bca76992f669d",
    "25b73fb95ef6631ca35df5fd043503c0", "340681a75fb348a11543ab4e1b6579e6",
    "717ffd106918288448625f987019a339", "2a8ac7e44ef93d74202329e27c5ce410",
};
static const vectors sha256_vec = {
    "67e81a4ab96603dc9b9d1943cc3bf67a", "c2a02a29f22688b43258cd80e5ad52e2",
    "2178eddb4ee55030c7ac4dbedacdc80f", "46c4a6c98307328d2f78598dfd1449b2",
    "d674baf9ee4ec101119ebdadc1ca3ef0", "9d908ecfb6b256def8b49a7c504e6c88",
};

static const char SALT[] = "salt:v1";
#define SALT_LEN 7

static void fill_a(uint32_t *t) {
    for (uint32_t i = 0; i < 14; i++)
        t[i] = i * 1000 + 7;
    t[14] = 0x12345678;
    t[15] = 0xFFFFFFFF;
}

static void fill_b(uint32_t *t) {
    for (uint32_t i = 0; i < 16; i++)
        t[i] = (i * 7919) % 50000;
}

static const char *hex(const uint8_t *h, char *buf) {
    tide_hash_hex(h, buf);
    return buf;
}

static void check_vectors(tide_hash_algo algo, const vectors *v) {
    uint32_t a[16], b[16], l[1000];
    fill_a(a);
    fill_b(b);
    for (uint32_t i = 0; i < 1000; i++)
        l[i] = (uint32_t)(i * 2654435761u);
    uint8_t h[TIDE_HASH_BYTES], ha[TIDE_HASH_BYTES], has[TIDE_HASH_BYTES];
    char x[33];

    CHECK_EQ(tide_block_hash(algo, NULL, a, 16, NULL, 0, ha), 0);
    CHECK_STR(hex(ha, x), v->a);
    CHECK_EQ(tide_block_hash(algo, NULL, a, 16, SALT, SALT_LEN, has), 0);
    CHECK_STR(hex(has, x), v->a_salt);
    CHECK_EQ(tide_block_hash(algo, ha, b, 16, NULL, 0, h), 0);
    CHECK_STR(hex(h, x), v->b_after_a);
    CHECK_EQ(tide_block_hash(algo, has, b, 16, NULL, 0, h), 0);
    CHECK_STR(hex(h, x), v->b_after_a_salt);
    CHECK_EQ(tide_block_hash(algo, NULL, l, 1000, NULL, 0, h), 0);
    CHECK_STR(hex(h, x), v->long1000);
    CHECK_EQ(tide_block_hash(algo, NULL, NULL, 0, NULL, 0, h), 0);
    CHECK_STR(hex(h, x), v->empty);

    /* A parent of 16 zero bytes is the same as no parent. */
    static const uint8_t zero[TIDE_HASH_BYTES];
    CHECK_EQ(tide_block_hash(algo, zero, a, 16, NULL, 0, h), 0);
    CHECK_STR(hex(h, x), v->a);
    /* An extra pointer with length 0 is no extra. */
    CHECK_EQ(tide_block_hash(algo, NULL, a, 16, SALT, 0, h), 0);
    CHECK_STR(hex(h, x), v->a);
}

TEST(hash_vectors_xxh3) {
    check_vectors(TIDE_HASH_XXH3, &xxh3_vec);
}

TEST(hash_vectors_sha256) {
    check_vectors(TIDE_HASH_SHA256, &sha256_vec);
}

/* A chain of A then B then 5 tokens of a partial block: two hashes, the second chained on
 * the first, the salt only in the first, the partial block ignored. */
static void check_chain(tide_hash_algo algo, const vectors *v) {
    uint32_t t[37];
    fill_a(t);
    fill_b(t + 16);
    for (int i = 32; i < 37; i++)
        t[i] = 99;
    uint8_t out[4 * TIDE_HASH_BYTES];
    char x[33];

    memset(out, 0xAB, sizeof(out));
    CHECK_EQ(tide_prefix_hashes(algo, t, 37, 16, NULL, 0, out, 4), 2);
    CHECK_STR(hex(out, x), v->a);
    CHECK_STR(hex(out + 16, x), v->b_after_a);
    /* Nothing written past the hashes returned. */
    for (int i = 32; i < 64; i++)
        CHECK_EQ(out[i], 0xAB);

    CHECK_EQ(tide_prefix_hashes(algo, t, 37, 16, SALT, SALT_LEN, out, 4), 2);
    CHECK_STR(hex(out, x), v->a_salt);
    CHECK_STR(hex(out + 16, x), v->b_after_a_salt);

    /* Exactly two full blocks, and the partial tail's tokens do not matter. */
    CHECK_EQ(tide_prefix_hashes(algo, t, 32, 16, NULL, 0, out, 4), 2);
    CHECK_STR(hex(out + 16, x), v->b_after_a);
    t[33] = 12345;
    CHECK_EQ(tide_prefix_hashes(algo, t, 37, 16, NULL, 0, out, 4), 2);
    CHECK_STR(hex(out + 16, x), v->b_after_a);

    /* Fewer tokens than a block: no hashes. */
    CHECK_EQ(tide_prefix_hashes(algo, t, 15, 16, NULL, 0, out, 4), 0);
    CHECK_EQ(tide_prefix_hashes(algo, NULL, 0, 16, NULL, 0, NULL, 0), 0);
}

TEST(hash_chain_xxh3) {
    check_chain(TIDE_HASH_XXH3, &xxh3_vec);
}

TEST(hash_chain_sha256) {
    check_chain(TIDE_HASH_SHA256, &sha256_vec);
}

TEST(hash_max_hashes_bound) {
    uint32_t t[32];
    fill_a(t);
    fill_b(t + 16);
    uint8_t out[2 * TIDE_HASH_BYTES];
    char x[33];
    memset(out, 0xCD, sizeof(out));
    CHECK_EQ(tide_prefix_hashes(TIDE_HASH_XXH3, t, 32, 16, NULL, 0, out, 1), 1);
    CHECK_STR(hex(out, x), xxh3_vec.a);
    for (int i = 16; i < 32; i++)
        CHECK_EQ(out[i], 0xCD);
    /* max_hashes 0 writes nothing and may take a NULL out. */
    CHECK_EQ(tide_prefix_hashes(TIDE_HASH_XXH3, t, 32, 16, NULL, 0, NULL, 0), 0);
}

/* The prefix property the store relies on: two sequences that share their first k full
 * blocks share their first k hashes and differ from there on. */
TEST(hash_shared_prefix) {
    enum { N = 16 * 8 };
    uint32_t s1[N], s2[N];
    for (uint32_t i = 0; i < N; i++)
        s1[i] = s2[i] = i * 31 + 5;
    s2[16 * 5 + 3] ^= 1; /* differ inside block 5 */
    uint8_t h1[8 * TIDE_HASH_BYTES], h2[8 * TIDE_HASH_BYTES];
    CHECK_EQ(tide_prefix_hashes(TIDE_HASH_XXH3, s1, N, 16, NULL, 0, h1, 8), 8);
    CHECK_EQ(tide_prefix_hashes(TIDE_HASH_XXH3, s2, N, 16, NULL, 0, h2, 8), 8);
    for (int b = 0; b < 8; b++) {
        int same = memcmp(h1 + b * 16, h2 + b * 16, 16) == 0;
        CHECK_EQ(same, b < 5);
    }
    /* Different block sizes give different chains (the token count is hashed). */
    uint8_t h3[16 * TIDE_HASH_BYTES];
    CHECK_EQ(tide_prefix_hashes(TIDE_HASH_XXH3, s1, N, 8, NULL, 0, h3, 16), 16);
    CHECK(memcmp(h1, h3, 16) != 0);
    /* A different salt changes every hash of the chain. */
    CHECK_EQ(tide_prefix_hashes(TIDE_HASH_XXH3, s1, N, 16, "x", 1, h2, 8), 8);
    for (int b = 0; b < 8; b++)
        CHECK(memcmp(h1 + b * 16, h2 + b * 16, 16) != 0);
}

TEST(hash_bad_args) {
    uint32_t t[16] = {0};
    uint8_t out[TIDE_HASH_BYTES * 2];
    CHECK_EQ(tide_block_hash((tide_hash_algo)7, NULL, t, 16, NULL, 0, out), -EINVAL);
    CHECK_EQ(tide_block_hash(TIDE_HASH_XXH3, NULL, NULL, 16, NULL, 0, out), -EINVAL);
    CHECK_EQ(tide_block_hash(TIDE_HASH_XXH3, NULL, t, 16, NULL, 3, out), -EINVAL);
    CHECK_EQ(tide_block_hash(TIDE_HASH_SHA256, NULL, t, 16, NULL, 0, NULL), -EINVAL);
    CHECK_EQ(tide_prefix_hashes(TIDE_HASH_XXH3, t, 16, 0, NULL, 0, out, 2), -EINVAL);
    CHECK_EQ(tide_prefix_hashes((tide_hash_algo)-1, t, 16, 16, NULL, 0, out, 2), -EINVAL);
    CHECK_EQ(tide_prefix_hashes(TIDE_HASH_XXH3, NULL, 16, 16, NULL, 0, out, 2), -EINVAL);
    CHECK_EQ(tide_prefix_hashes(TIDE_HASH_XXH3, t, 16, 16, NULL, 5, out, 2), -EINVAL);
    CHECK_EQ(tide_prefix_hashes(TIDE_HASH_XXH3, t, 16, 16, NULL, 0, NULL, 2), -EINVAL);
    /* Lengths that do not fit the le32 fields are refused before anything is read. */
    CHECK_EQ(tide_block_hash(TIDE_HASH_XXH3, NULL, t, (size_t)UINT32_MAX + 1, NULL, 0, out),
             -EINVAL);
    CHECK_EQ(tide_prefix_hashes(TIDE_HASH_XXH3, t, 64, (size_t)UINT32_MAX + 1, NULL, 0, out, 2),
             -EINVAL);
}

TEST(hash_hex) {
    uint8_t h[TIDE_HASH_BYTES];
    for (int i = 0; i < TIDE_HASH_BYTES; i++)
        h[i] = (uint8_t)(i * 17);
    char x[33];
    memset(x, 'Z', sizeof(x));
    tide_hash_hex(h, x);
    CHECK_STR(x, "00112233445566778899aabbccddeeff");
}
