/*
 * checksum.h — the object checksum (xxh3-64, through libxxhash's x86 dispatch so the
 * widest vector unit is used) and copies that compute it on the way.
 *
 * Copies go in chunks small enough to stay in cache: each chunk of the source is hashed,
 * then copied from cache, so the bytes cross the memory bus once. Large copies write the
 * destination with non-temporal stores (see checksum.c). The checksum returned is that of
 * the bytes copied.
 */
#ifndef TIDE_CHECKSUM_H
#define TIDE_CHECKSUM_H

#include <stddef.h>
#include <stdint.h>

#include "tide.h"

/* xxh3-64 of n bytes. */
uint64_t checksum_buf(const void *p, size_t n);

/* xxh3-64 of the first len bytes of a scatter list, as one stream (same value as
 * checksum_buf over the bytes laid end to end). */
uint64_t checksum_iov(const tide_iov *iov, size_t cnt, size_t len);

/* Total length of a scatter list. */
size_t iov_total(const tide_iov *iov, size_t cnt);

/* Copy the scatter list into dst (which holds iov_total bytes); return the checksum of
 * the bytes copied when want_sum, else 0. */
uint64_t copy_gather(uint8_t *dst, const tide_iov *iov, size_t cnt, int want_sum);

/* Copy len bytes from src across the scatter list in order (the list must hold at least
 * len bytes); return the checksum of the bytes copied when want_sum, else 0. */
uint64_t copy_scatter(const tide_iov *iov, size_t cnt, const uint8_t *src, size_t len,
                      int want_sum);

/* Incremental checksum: bytes given in pieces, in order, digest to the same value as
 * checksum_buf() of all of them (hash each piece while it is still in cache). Made by
 * checksum_new() (NULL when out of memory), released by checksum_free(). */
typedef struct checksum_state checksum_state;
checksum_state *checksum_new(void);
void checksum_reset(checksum_state *s);
void checksum_update(checksum_state *s, const void *p, size_t n);
uint64_t checksum_digest(const checksum_state *s);
void checksum_free(checksum_state *s);

#endif
