/*
 * checksum.c — xxh3-64 checksums and copy-while-hashing helpers.
 */
#include "checksum.h"

#include <string.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>
#include <xxh_x86dispatch.h>

/* 64 KiB fits in L2 next to the destination; larger chunks let the bytes fall out. */
#define COPY_CHUNK (64 * 1024)

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
