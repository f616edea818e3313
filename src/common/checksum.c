/*
 * checksum.c — xxh3-64 checksums and copy-while-hashing helpers.
 *
 * A copy goes in chunks of COPY_CHUNK bytes. For large copies (at least STREAM_MIN bytes)
 * the destination is written with non-temporal stores: the bytes go to memory without
 * first reading the destination lines into cache (a plain memcpy of cold memory reads each
 * destination line before overwriting it), and without evicting what the cache holds. A
 * value copied in or out of the store is not read back at once by this thread, so nothing
 * is lost by leaving it out of cache.
 *
 * What is hashed differs by direction, and that is the point of the two functions:
 *   - copy_gather (into the store, a put) hashes the caller's bytes, chunk by chunk just
 *     before copying them: the checksum says what the caller meant to store, so a write
 *     into the pool by anyone else afterwards is caught by every reader.
 *   - copy_scatter (out of the store, a get) hashes the bytes that landed, never the
 *     source: the pool may be written by another process while it is read (a unix://
 *     client maps all of it read-write), and hashing the source and then copying it would
 *     let a write between the two reach the caller under a matching checksum (issue 17).
 *     A small copy is made with memcpy and the destination, still in cache, is hashed. A
 *     large one goes TEE bytes at a time: each 64-byte block of the source is loaded into
 *     registers once, streamed from them to the destination and also stored from them
 *     into a small buffer on the stack (in L1), which is then hashed. So the bytes hashed
 *     are the bytes written, the source is read once and the destination is still written
 *     without being read. Copying into a bounce buffer first and streaming from it cost
 *     25-35% of a 1 MiB get here; this costs nothing measurable (bench/RESULTS.md,
 *     "integrity (issue 17)").
 */
#include "checksum.h"

#include <stdlib.h>
#include <string.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>
#include <xxh_x86dispatch.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif

/* 64 KiB sits in L2 between its hash and its copy. */
#define COPY_CHUNK (64 * 1024)
/* Below this a copy stays in cache: the reader is likely to touch it soon. */
#define STREAM_MIN (64 * 1024)
/* The piece of copy_scatter's large copies kept in L1 for hashing (measured: 4 KiB and
 * 8 KiB did best, 16 KiB and more lose; see bench/RESULTS.md, "integrity (issue 17)"). */
#define TEE (4 * 1024)

/* Copy with non-temporal stores where the CPU has them (SSE2 on every x86-64). The
 * caller issues the store fence once the whole copy is done. */
static void copy_stream(uint8_t *d, const uint8_t *s, size_t n) {
#if defined(__x86_64__)
    size_t head = (16 - ((uintptr_t)d & 15)) & 15;
    if (head > n) head = n;
    memcpy(d, s, head);
    d += head, s += head, n -= head;
    for (; n >= 64; n -= 64, d += 64, s += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)s);
        __m128i b = _mm_loadu_si128((const __m128i *)(s + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(s + 32));
        __m128i e = _mm_loadu_si128((const __m128i *)(s + 48));
        _mm_stream_si128((__m128i *)d, a);
        _mm_stream_si128((__m128i *)(d + 16), b);
        _mm_stream_si128((__m128i *)(d + 32), c);
        _mm_stream_si128((__m128i *)(d + 48), e);
    }
#endif
    memcpy(d, s, n);
}

static void stream_fence(void) {
#if defined(__x86_64__)
    _mm_sfence(); /* order the non-temporal stores before whatever the caller does next */
#endif
}

/* Copy one piece into the store, hashing its source chunk by chunk. */
static void copy_piece(uint8_t *d, const uint8_t *s, size_t n, int stream, XXH3_state_t *st) {
    while (n) {
        size_t k = n < COPY_CHUNK ? n : COPY_CHUNK;
        if (st) XXH3_64bits_update_dispatch(st, s, k);
        if (stream)
            copy_stream(d, s, k);
        else
            memcpy(d, s, k);
        d += k, s += k, n -= k;
    }
}

/* Copy n bytes from s to d as copy_stream does, and also store every byte written to d
 * into tee (n bytes, in cache): from the same registers, so that tee holds exactly what d
 * received, whatever s held a moment before or after. The caller fences. */
static void copy_stream_tee(uint8_t *d, uint8_t *tee, const uint8_t *s, size_t n) {
#if defined(__x86_64__)
    size_t head = (16 - ((uintptr_t)d & 15)) & 15;
    if (head > n) head = n;
    memcpy(tee, s, head);
    memcpy(d, tee, head);
    d += head, tee += head, s += head, n -= head;
    for (; n >= 64; n -= 64, d += 64, tee += 64, s += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)s);
        __m128i b = _mm_loadu_si128((const __m128i *)(s + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(s + 32));
        __m128i e = _mm_loadu_si128((const __m128i *)(s + 48));
        _mm_storeu_si128((__m128i *)tee, a);
        _mm_storeu_si128((__m128i *)(tee + 16), b);
        _mm_storeu_si128((__m128i *)(tee + 32), c);
        _mm_storeu_si128((__m128i *)(tee + 48), e);
        _mm_stream_si128((__m128i *)d, a);
        _mm_stream_si128((__m128i *)(d + 16), b);
        _mm_stream_si128((__m128i *)(d + 32), c);
        _mm_stream_si128((__m128i *)(d + 48), e);
    }
#endif
    memcpy(tee, s, n);
    memcpy(d, tee, n);
}

/* Copy one piece out of the store, hashing what lands in d (see the top of the file). */
static void copy_piece_out(uint8_t *d, const uint8_t *s, size_t n, int stream, XXH3_state_t *st) {
    if (!st) {
        copy_piece(d, s, n, stream, NULL);
        return;
    }
    if (!stream) {
        while (n) {
            size_t k = n < COPY_CHUNK ? n : COPY_CHUNK;
            memcpy(d, s, k);
            XXH3_64bits_update_dispatch(st, d, k);
            d += k, s += k, n -= k;
        }
        return;
    }
    _Alignas(64) uint8_t tee[TEE];
    while (n) {
        size_t k = n < TEE ? n : TEE;
        copy_stream_tee(d, tee, s, k);
        XXH3_64bits_update_dispatch(st, tee, k);
        d += k, s += k, n -= k;
    }
}

uint64_t checksum_buf(const void *p, size_t n) {
    return XXH3_64bits_dispatch(p, n);
}

uint64_t checksum_iov(const tide_iov *iov, size_t cnt, size_t len) {
    if (cnt == 1) return XXH3_64bits_dispatch(iov[0].base, len < iov[0].len ? len : iov[0].len);
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    for (size_t i = 0; i < cnt && len; i++) {
        size_t n = iov[i].len < len ? iov[i].len : len;
        XXH3_64bits_update_dispatch(&st, iov[i].base, n);
        len -= n;
    }
    return XXH3_64bits_digest(&st);
}

size_t iov_total(const tide_iov *iov, size_t cnt) {
    size_t t = 0;
    for (size_t i = 0; i < cnt; i++)
        t += iov[i].len;
    return t;
}

uint64_t copy_gather(uint8_t *dst, const tide_iov *iov, size_t cnt, int want_sum) {
    XXH3_state_t st;
    if (want_sum) XXH3_64bits_reset(&st);
    int stream = iov_total(iov, cnt) >= STREAM_MIN;
    for (size_t i = 0; i < cnt; i++) {
        copy_piece(dst, iov[i].base, iov[i].len, stream, want_sum ? &st : NULL);
        dst += iov[i].len;
    }
    if (stream) stream_fence();
    return want_sum ? XXH3_64bits_digest(&st) : 0;
}

uint64_t copy_scatter(const tide_iov *iov, size_t cnt, const uint8_t *src, size_t len,
                      int want_sum) {
    XXH3_state_t st;
    if (want_sum) XXH3_64bits_reset(&st);
    int stream = len >= STREAM_MIN;
    for (size_t i = 0; i < cnt && len; i++) {
        size_t n = iov[i].len < len ? iov[i].len : len;
        copy_piece_out(iov[i].base, src, n, stream, want_sum ? &st : NULL);
        src += n;
        len -= n;
    }
    if (stream) stream_fence();
    return want_sum ? XXH3_64bits_digest(&st) : 0;
}

uint64_t copy_out_hashed(uint8_t *dst, const uint8_t *src, size_t n) {
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    copy_piece_out(dst, src, n, 0, &st);
    return XXH3_64bits_digest(&st);
}

/* ---- incremental checksum ------------------------------------------------------------ */

struct checksum_state {
    XXH3_state_t st;
};

checksum_state *checksum_new(void) {
    checksum_state *s = malloc(sizeof(*s));
    if (s) XXH3_64bits_reset(&s->st);
    return s;
}

void checksum_reset(checksum_state *s) {
    XXH3_64bits_reset(&s->st);
}

void checksum_update(checksum_state *s, const void *p, size_t n) {
    XXH3_64bits_update_dispatch(&s->st, p, n);
}

void checksum_update_copy(checksum_state *s, uint8_t *dst, const void *src, size_t n) {
    copy_piece(dst, src, n, 1, &s->st);
    stream_fence();
}

uint64_t checksum_digest(const checksum_state *s) {
    return XXH3_64bits_digest(&s->st);
}

void checksum_free(checksum_state *s) {
    free(s);
}
