/*
 * prng.h — the one pseudo-random generator of the tree: SplitMix64 (Steele, Lea and Flood,
 * "Fast splittable pseudorandom number generators", 2014). Not for secrets: it makes
 * repeatable streams (synthetic prompts and values of the CLI's demo, bench and replay, the
 * engine's weights, the load generators and the tests) from a seed.
 *
 * prng_mix(x) is a pure function of x: the generator's output for counter x, so a stream
 * can be indexed without state (word i of a block = prng_mix(base + i)). prng_next(&s)
 * walks a stream: it returns prng_mix(s) and advances s by one step. Where one variable
 * must be both the state and the draw, x = prng_mix(x) walks a sequence too (the mixer is
 * a bijection of 64-bit words).
 */
#ifndef TIDE_COMMON_PRNG_H
#define TIDE_COMMON_PRNG_H

#include <stdint.h>

/* The golden-ratio step between a stream's counters. */
#define PRNG_GOLDEN 0x9E3779B97F4A7C15ull

static inline uint64_t prng_mix(uint64_t x) {
    x += PRNG_GOLDEN;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static inline uint64_t prng_next(uint64_t *s) {
    uint64_t x = prng_mix(*s);
    *s += PRNG_GOLDEN;
    return x;
}

#endif
