/*
 * checksum.c — xxh3-64 checksums and copy-while-hashing helpers.
 */
#include "checksum.h"

#include <stdlib.h>
#include <string.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>
#include <xxh_x86dispatch.h>

/* 64 KiB fits in L2 next to the destination; larger chunks let the bytes fall out. */
#define COPY_CHUNK (64 * 1024)

uint64_t checksum_buf(const void *p, size_t n) {
    return XXH3_64bits_dispatch(p, n);
}

/* A wrapper, so that XXH3_state_t (which needs XXH_STATIC_LINKING_ONLY) stays in here. */
struct checksum_stream {
    XXH3_state_t st;
};

checksum_stream *checksum_stream_new(void) {
    /* XXH3_state_t wants 64-byte alignment. */
    void *p = NULL;
    if (posix_memalign(&p, 64, sizeof(checksum_stream)) != 0) return NULL;
    checksum_stream_reset(p);
    return p;
}

void checksum_stream_free(checksum_stream *cs) {
    free(cs);
}

void checksum_stream_reset(checksum_stream *cs) {
    XXH3_64bits_reset(&cs->st);
}

void checksum_stream_update(checksum_stream *cs, const void *p, size_t n) {
    XXH3_64bits_update_dispatch(&cs->st, p, n);
}

uint64_t checksum_stream_digest(const checksum_stream *cs) {
    return XXH3_64bits_digest(&cs->st);
}

size_t iov_total(const tide_iov *iov, size_t cnt) {
    size_t t = 0;
    for (size_t i = 0; i < cnt; i++) t += iov[i].len;
    return t;
}

uint64_t copy_gather(uint8_t *dst, const tide_iov *iov, size_t cnt, int want_sum) {
    XXH3_state_t st;
    if (want_sum) XXH3_64bits_reset(&st);
    for (size_t i = 0; i < cnt; i++) {
        const uint8_t *src = iov[i].base;
        size_t left = iov[i].len;
        while (left) {
            size_t n = left < COPY_CHUNK ? left : COPY_CHUNK;
            memcpy(dst, src, n);
            if (want_sum) XXH3_64bits_update_dispatch(&st, dst, n);
            dst += n;
            src += n;
            left -= n;
        }
    }
    return want_sum ? XXH3_64bits_digest(&st) : 0;
}

uint64_t copy_scatter(const tide_iov *iov, size_t cnt, const uint8_t *src, size_t len,
                      int want_sum) {
    XXH3_state_t st;
    if (want_sum) XXH3_64bits_reset(&st);
    for (size_t i = 0; i < cnt && len; i++) {
        uint8_t *dst = iov[i].base;
        size_t left = iov[i].len < len ? iov[i].len : len;
        len -= left;
        while (left) {
            size_t n = left < COPY_CHUNK ? left : COPY_CHUNK;
            memcpy(dst, src, n);
            if (want_sum) XXH3_64bits_update_dispatch(&st, dst, n);
            dst += n;
            src += n;
            left -= n;
        }
    }
    return want_sum ? XXH3_64bits_digest(&st) : 0;
}
