/*
 * checksum.h — the object checksum (xxh3-64, through libxxhash's x86 dispatch so the
 * widest vector unit is used) and copies that compute it on the way.
 *
 * Copies go in chunks small enough to stay in cache, and each chunk is hashed right after
 * it is copied, so the checksum reads cache-hot bytes instead of a second pass over memory.
 */
#ifndef TIDE_CHECKSUM_H
#define TIDE_CHECKSUM_H

#include <stddef.h>
#include <stdint.h>

#include "tide.h"

/* xxh3-64 of n bytes. */
uint64_t checksum_buf(const void *p, size_t n);

/* The same checksum over bytes that arrive in pieces: hash each piece as it lands, while
 * it is still in cache (and while the next piece is still on its way), instead of a second
 * pass over the whole value. checksum_stream_new returns NULL when out of memory; free the
 * stream with checksum_stream_free. reset starts a new value; digest does not end it. */
typedef struct checksum_stream checksum_stream;
checksum_stream *checksum_stream_new(void);
void checksum_stream_free(checksum_stream *cs);
void checksum_stream_reset(checksum_stream *cs);
void checksum_stream_update(checksum_stream *cs, const void *p, size_t n);
uint64_t checksum_stream_digest(const checksum_stream *cs);

/* Total length of a scatter list. */
size_t iov_total(const tide_iov *iov, size_t cnt);

/* Copy the scatter list into dst (which holds iov_total bytes); return the checksum of
 * the bytes copied when want_sum, else 0. */
uint64_t copy_gather(uint8_t *dst, const tide_iov *iov, size_t cnt, int want_sum);

/* Copy len bytes from src across the scatter list in order (the list must hold at least
 * len bytes); return the checksum of the bytes copied when want_sum, else 0. */
uint64_t copy_scatter(const tide_iov *iov, size_t cnt, const uint8_t *src, size_t len,
                      int want_sum);

#endif
