/*
 * hash.c — chained prefix hashes over token ids (tide_block_hash, tide_prefix_hashes).
 *
 * The byte layout hashed for one block is specified in include/tide.h:
 *
 *   P[16] || le32(n) || le32(t[0]) || ... || le32(t[n-1]) || le32(|E|) || E
 *
 * The hash functions themselves come from Debian's libraries: XXH3-128 from libxxhash and
 * SHA-256 from OpenSSL's libcrypto (EVP). This file only lays the bytes out.
 *
 * The input is staged in a buffer on the stack. A typical block (16 tokens, a short salt)
 * fits, and is hashed with one one-shot call; a longer input switches to the library's
 * streaming interface when the buffer fills, so no block size needs a heap allocation
 * for XXH3. Both paths hash the same byte string, which the test vectors pin down.
 */
#include <errno.h>
#include <limits.h>
#include <string.h>

#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <openssl/evp.h>
#include <xxhash.h>

#include "common/endian.h"
#include "tide.h"

/* 2 KiB holds a block of up to ~500 tokens with a short extra key. */
#define STAGE_BYTES 2048

typedef struct hash_sink {
    tide_hash_algo algo;
    int streaming; /* 1 once the stage overflowed and the streaming state is in use */
    int failed;    /* an OpenSSL call failed; the result is an error */
    size_t used;
    XXH3_state_t xxh;
    EVP_MD_CTX *md;
    uint8_t stage[STAGE_BYTES];
} hash_sink;

/* Move the staged bytes into the streaming state, starting it on first use. */
static void sink_flush(hash_sink *s) {
    if (!s->streaming) {
        s->streaming = 1;
        if (s->algo == TIDE_HASH_XXH3) {
            XXH3_128bits_reset(&s->xxh);
        } else {
            s->md = EVP_MD_CTX_new();
            if (!s->md || EVP_DigestInit_ex(s->md, EVP_sha256(), NULL) != 1) s->failed = 1;
        }
    }
    if (s->used && !s->failed) {
        if (s->algo == TIDE_HASH_XXH3)
            XXH3_128bits_update(&s->xxh, s->stage, s->used);
        else if (EVP_DigestUpdate(s->md, s->stage, s->used) != 1)
            s->failed = 1;
    }
    s->used = 0;
}

static void sink_write(hash_sink *s, const void *p, size_t n) {
    const uint8_t *b = p;
    while (n) {
        if (s->used == STAGE_BYTES) sink_flush(s);
        size_t k = STAGE_BYTES - s->used;
        if (k > n) k = n;
        memcpy(s->stage + s->used, b, k);
        s->used += k;
        b += k;
        n -= k;
    }
}

static void sink_le32(hash_sink *s, uint32_t v) {
    uint8_t b[4];
    le_wr32(b, v);
    sink_write(s, b, 4);
}

/* Finish and write the 16-byte result; 0, or -ENOMEM when OpenSSL failed. */
static int sink_final(hash_sink *s, uint8_t out[TIDE_HASH_BYTES]) {
    int rc = 0;
    if (s->algo == TIDE_HASH_XXH3) {
        XXH128_hash_t h;
        if (s->streaming) {
            sink_flush(s);
            h = XXH3_128bits_digest(&s->xxh);
        } else {
            h = XXH3_128bits(s->stage, s->used);
        }
        le_wr64(out, h.low64);
        le_wr64(out + 8, h.high64);
        return 0;
    }
    uint8_t md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    if (s->streaming) {
        sink_flush(s);
        if (s->failed || EVP_DigestFinal_ex(s->md, md, &mdlen) != 1) rc = -ENOMEM;
        EVP_MD_CTX_free(s->md);
        s->md = NULL;
    } else if (EVP_Digest(s->stage, s->used, md, &mdlen, EVP_sha256(), NULL) != 1) {
        rc = -ENOMEM;
    }
    if (rc == 0 && mdlen < TIDE_HASH_BYTES) rc = -ENOMEM;
    if (rc == 0) memcpy(out, md, TIDE_HASH_BYTES);
    return rc;
}

static int check_args(tide_hash_algo algo, const uint32_t *tokens, size_t ntokens,
                      const void *extra, size_t extra_len) {
    if (algo != TIDE_HASH_XXH3 && algo != TIDE_HASH_SHA256) return -EINVAL;
    if (ntokens && !tokens) return -EINVAL;
    if (extra_len && !extra) return -EINVAL;
    /* Both lengths are hashed as le32. */
    if (ntokens > UINT32_MAX || extra_len > UINT32_MAX) return -EINVAL;
    return 0;
}

/* The block hash without argument checks (the callers have made them). */
static int block_hash(tide_hash_algo algo, const uint8_t *parent, const uint32_t *tokens,
                      size_t ntokens, const void *extra, size_t extra_len,
                      uint8_t out[TIDE_HASH_BYTES]) {
    static const uint8_t zero[TIDE_HASH_BYTES];
    hash_sink s;
    s.algo = algo;
    s.streaming = 0;
    s.failed = 0;
    s.used = 0;
    s.md = NULL;
    sink_write(&s, parent ? parent : zero, TIDE_HASH_BYTES);
    sink_le32(&s, (uint32_t)ntokens);
    for (size_t i = 0; i < ntokens; i++)
        sink_le32(&s, tokens[i]);
    sink_le32(&s, (uint32_t)extra_len);
    if (extra_len) sink_write(&s, extra, extra_len);
    return sink_final(&s, out);
}

TIDE_API int tide_block_hash(tide_hash_algo algo, const uint8_t *parent, const uint32_t *tokens,
                             size_t ntokens, const void *extra, size_t extra_len,
                             uint8_t out[TIDE_HASH_BYTES]) {
    int rc = check_args(algo, tokens, ntokens, extra, extra_len);
    if (rc) return rc;
    if (!out) return -EINVAL;
    return block_hash(algo, parent, tokens, ntokens, extra, extra_len, out);
}

TIDE_API int tide_prefix_hashes(tide_hash_algo algo, const uint32_t *tokens, size_t ntokens,
                                size_t block_tokens, const void *extra, size_t extra_len,
                                uint8_t *out, size_t max_hashes) {
    if (block_tokens == 0 || block_tokens > UINT32_MAX) return -EINVAL;
    int rc = check_args(algo, tokens, ntokens, extra, extra_len);
    if (rc) return rc;
    size_t nblocks = ntokens / block_tokens;
    if (nblocks > max_hashes) nblocks = max_hashes;
    if (nblocks && !out) return -EINVAL;
    if (nblocks > INT_MAX) return -EOVERFLOW;
    for (size_t b = 0; b < nblocks; b++) {
        const uint8_t *parent = b ? out + (b - 1) * TIDE_HASH_BYTES : NULL;
        /* The extra key (a cache salt) separates whole chains, so it enters the first
         * block only; every later block inherits it through its parent. */
        rc = block_hash(algo, parent, tokens + b * block_tokens, block_tokens, b ? NULL : extra,
                        b ? 0 : extra_len, out + b * TIDE_HASH_BYTES);
        if (rc) return rc;
    }
    return (int)nblocks;
}

TIDE_API void tide_hash_hex(const uint8_t h[TIDE_HASH_BYTES], char out[33]) {
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < TIDE_HASH_BYTES; i++) {
        out[2 * i] = digits[h[i] >> 4];
        out[2 * i + 1] = digits[h[i] & 15];
    }
    out[32] = '\0';
}
