/*
 * checksum.c — xxh3-64 checksums and copy-while-hashing helpers.
 *
 * A copy goes in chunks of COPY_CHUNK bytes. Each chunk of the source is hashed first —
 * which pulls it into cache — and then copied from cache. For large copies (at least
 * STREAM_MIN bytes) the destination is written with non-temporal stores: the bytes go to
 * memory without first reading the destination lines into cache (a plain memcpy of cold
 * memory reads each destination line before overwriting it), and without evicting what
 * the cache holds. A value copied in or out of the store is not read back at once by this
 * thread, so nothing is lost by leaving it out of cache. The checksum is therefore of the
 * source bytes: the stored bytes on a get, the caller's bytes on a put.
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

/* Copy one piece, hashing its source chunk by chunk. */
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
    for (size_t i = 0; i < cnt; i++) t += iov[i].len;
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
        copy_piece(iov[i].base, src, n, stream, want_sum ? &st : NULL);
        src += n;
        len -= n;
    }
    if (stream) stream_fence();
    return want_sum ? XXH3_64bits_digest(&st) : 0;
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

uint64_t checksum_digest(const checksum_state *s) {
    return XXH3_64bits_digest(&s->st);
}

void checksum_free(checksum_state *s) {
    free(s);
}
