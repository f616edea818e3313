/*
 * endian.h — little-endian loads and stores, the one copy of them: the wire frames
 * (proto/), the SSD tier's records (store/disk.c), the connector's metadata bytes, the key
 * hashes and the tests that forge any of these. Byte by byte, so they need no alignment and
 * read the same on any host; compilers turn them into single moves.
 */
#ifndef TIDE_COMMON_ENDIAN_H
#define TIDE_COMMON_ENDIAN_H

#include <stddef.h>
#include <stdint.h>

/* The n (0..8) low bytes of v at p, least significant first. */
static inline void le_wrn(uint8_t *p, uint64_t v, size_t n) {
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* The n (0..8) bytes at p, least significant first. */
static inline uint64_t le_rdn(const uint8_t *p, size_t n) {
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static inline uint16_t le_rd16(const uint8_t *p) {
    return (uint16_t)(p[0] | p[1] << 8);
}
static inline uint32_t le_rd32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t le_rd64(const uint8_t *p) {
    return (uint64_t)le_rd32(p) | (uint64_t)le_rd32(p + 4) << 32;
}
static inline void le_wr16(uint8_t *p, uint16_t v) {
    le_wrn(p, v, 2);
}
static inline void le_wr32(uint8_t *p, uint32_t v) {
    le_wrn(p, v, 4);
}
static inline void le_wr64(uint8_t *p, uint64_t v) {
    le_wrn(p, v, 8);
}

#endif
