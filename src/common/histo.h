/*
 * histo.h — a latency histogram with bounded memory and bounded relative error.
 *
 * Log-linear buckets: values below 2^HISTO_SUB_BITS nanoseconds have a bucket each; above
 * that, every power of two is cut into 2^HISTO_SUB_BITS equal sub-buckets, so a reported
 * percentile is within 1/2^HISTO_SUB_BITS (about 3%) of the true value. Values up to
 * 2^HISTO_MAX_EXP ns (about 18 minutes) are kept; larger ones count in the last bucket.
 *
 * A histogram is plain memory (no locks): give each thread its own and histo_merge()
 * them when the threads are done.
 */
#ifndef TIDE_HISTO_H
#define TIDE_HISTO_H

#include <stdint.h>

#define HISTO_SUB_BITS 5
#define HISTO_MAX_EXP 40
#define HISTO_NBUCKETS ((HISTO_MAX_EXP - HISTO_SUB_BITS + 1) << HISTO_SUB_BITS)

typedef struct histo {
    uint64_t count;
    uint64_t min, max; /* exact; min is UINT64_MAX while empty */
    uint64_t sum;      /* saturating */
    uint64_t bucket[HISTO_NBUCKETS];
} histo;

void histo_init(histo *h);
void histo_add(histo *h, uint64_t ns);
/* Add every value of src into dst. */
void histo_merge(histo *dst, const histo *src);
/* The value at quantile q (0..1): the midpoint of the bucket holding the ceil(q*count)-th
 * smallest value, clamped to [min, max]. 0 for an empty histogram. */
uint64_t histo_quantile(const histo *h, double q);
/* Arithmetic mean, 0 when empty. */
double histo_mean(const histo *h);

#endif
