/*
 * checksum.h — the object checksum (xxh3-64, through libxxhash's x86 dispatch so the
 * widest vector unit is used) and copies that compute it on the way.
 *
 * Copies go in chunks small enough to stay in cache, so the bytes cross the memory bus
 * once. Large copies write the destination with non-temporal stores (see checksum.c). A
 * copy into the store hashes the caller's bytes; a copy out of it hashes the bytes that
 * landed in the caller's memory, never the pool's, which another process may be writing.
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
 * len bytes); when want_sum, return the checksum of the bytes as they landed in the
 * scatter list (not of src, which may change under the copy), else 0. */
uint64_t copy_scatter(const tide_iov *iov, size_t cnt, const uint8_t *src, size_t len,
                      int want_sum);

/* Copy n bytes from src into dst, a buffer this thread reads again soon (a reply about to
 * be sent): plain stores, in cache-sized chunks, each chunk hashed from dst while it is in
 * cache. Returns the checksum of the bytes as they landed in dst. */
uint64_t copy_out_hashed(uint8_t *dst, const uint8_t *src, size_t n);

/* Incremental checksum: bytes given in pieces, in order, digest to the same value as
 * checksum_buf() of all of them (hash each piece while it is still in cache). Made by
 * checksum_new() (NULL when out of memory), released by checksum_free(). */
typedef struct checksum_state checksum_state;
checksum_state *checksum_new(void);
void checksum_reset(checksum_state *s);
void checksum_update(checksum_state *s, const void *p, size_t n);
uint64_t checksum_digest(const checksum_state *s);
/* Hash n bytes of src into s, then copy them to dst with non-temporal stores (dst is not
 * read back soon: a reservation being filled). The caller's bytes are hashed, as in
 * copy_gather: src must be memory nobody else writes. */
void checksum_update_copy(checksum_state *s, uint8_t *dst, const void *src, size_t n);
void checksum_free(checksum_state *s);

#endif
