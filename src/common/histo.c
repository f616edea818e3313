/*
 * histo.c — log-linear latency histogram (see histo.h for the bucket layout).
 *
 * Bucket index of v: for v < 2^S (S = HISTO_SUB_BITS) it is v itself. Otherwise, with e the
 * position of v's highest set bit (e >= S), the S bits below the highest one choose the
 * sub-bucket: index = (e - S + 1) * 2^S + ((v >> (e - S)) & (2^S - 1)). Each bucket then
 * spans 2^(e-S) values, a 2^-S fraction of its lower bound.
 */
#include "histo.h"

#include <string.h>

#define SUB (1u << HISTO_SUB_BITS)

static unsigned bucket_of(uint64_t v) {
    if (v < SUB) return (unsigned)v;
    unsigned e = 63u - (unsigned)__builtin_clzll(v);
    if (e >= HISTO_MAX_EXP) return HISTO_NBUCKETS - 1;
    return (e - HISTO_SUB_BITS + 1) * SUB + (unsigned)((v >> (e - HISTO_SUB_BITS)) & (SUB - 1));
}

/* Lowest value of a bucket and its width. */
static void bucket_range(unsigned b, uint64_t *lo, uint64_t *width) {
    if (b < SUB) {
        *lo = b;
        *width = 1;
        return;
    }
    unsigned e = b / SUB + HISTO_SUB_BITS - 1;
    uint64_t sub = b % SUB;
    *width = 1ull << (e - HISTO_SUB_BITS);
    *lo = (1ull << e) + sub * *width;
}

void histo_init(histo *h) {
    memset(h, 0, sizeof(*h));
    h->min = UINT64_MAX;
}

void histo_add(histo *h, uint64_t ns) {
    h->bucket[bucket_of(ns)]++;
    h->count++;
    if (ns < h->min) h->min = ns;
    if (ns > h->max) h->max = ns;
    h->sum = h->sum + ns < h->sum ? UINT64_MAX : h->sum + ns;
}

void histo_merge(histo *dst, const histo *src) {
    for (unsigned i = 0; i < HISTO_NBUCKETS; i++)
        dst->bucket[i] += src->bucket[i];
    dst->count += src->count;
    if (src->min < dst->min) dst->min = src->min;
    if (src->max > dst->max) dst->max = src->max;
    dst->sum = dst->sum + src->sum < dst->sum ? UINT64_MAX : dst->sum + src->sum;
}

uint64_t histo_quantile(const histo *h, double q) {
    if (h->count == 0) return 0;
    if (q <= 0) return h->min;
    if (q >= 1) return h->max;
    /* The rank of the wanted value, 1-based: ceil(q * count). */
    double r = q * (double)h->count;
    uint64_t rank = (uint64_t)r;
    if ((double)rank < r) rank++;
    if (rank == 0) rank = 1;
    uint64_t seen = 0;
    for (unsigned b = 0; b < HISTO_NBUCKETS; b++) {
        seen += h->bucket[b];
        if (seen < rank) continue;
        uint64_t lo, width;
        bucket_range(b, &lo, &width);
        uint64_t v = lo + width / 2;
        if (v < h->min) v = h->min;
        if (v > h->max) v = h->max;
        return v;
    }
    return h->max;
}

double histo_mean(const histo *h) {
    return h->count ? (double)h->sum / (double)h->count : 0;
}
