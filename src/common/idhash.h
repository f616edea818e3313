/*
 * idhash.h — the hash of a 64-bit id that a counter hands out (a lease id), for the tables
 * keyed by such ids: tided's table of a unix:// connection's leases (server/conn_shm.c) and
 * the store's lease table (store/lease.c). Fibonacci hashing: the id times 2^64 over the
 * golden ratio, whose top 32 bits spread consecutive ids evenly over any power-of-two table.
 */
#ifndef TIDE_COMMON_IDHASH_H
#define TIDE_COMMON_IDHASH_H

#include <stdint.h>

#include "common/prng.h" /* PRNG_GOLDEN: 2^64 over the golden ratio */

static inline uint32_t idhash32(uint64_t id) {
    return (uint32_t)((id * PRNG_GOLDEN) >> 32);
}

#endif
