/*
 * test_histo.c — the log-linear latency histogram: exact small values, bounded relative
 * error, quantiles, merging and the overflow bucket.
 */
#include "common/histo.h"
#include "harness.h"

TEST(histo_empty) {
    histo h;
    histo_init(&h);
    CHECK_EQ(h.count, 0);
    CHECK_EQ(histo_quantile(&h, 0.5), 0);
    CHECK(histo_mean(&h) == 0);
}

TEST(histo_small_values_exact) {
    histo h;
    histo_init(&h);
    for (uint64_t v = 1; v <= 20; v++)
        histo_add(&h, v);
    CHECK_EQ(histo_quantile(&h, 0.5), 10);
    CHECK_EQ(histo_quantile(&h, 0.05), 1);
    CHECK_EQ(histo_quantile(&h, 1.0), 20);
    CHECK_EQ(histo_quantile(&h, 0.0), 1);
    CHECK(histo_mean(&h) == 10.5);
}

/* 1..100000 ns once each: every quantile lands within the bucket error (1/32) of the true
 * rank value. */
TEST(histo_quantile_error_bounded) {
    static histo h;
    histo_init(&h);
    const uint64_t n = 100000;
    for (uint64_t v = 1; v <= n; v++)
        histo_add(&h, v);
    const double qs[] = {0.01, 0.1, 0.5, 0.9, 0.99, 0.999};
    for (size_t i = 0; i < sizeof(qs) / sizeof(qs[0]); i++) {
        double want = qs[i] * (double)n;
        double got = (double)histo_quantile(&h, qs[i]);
        double rel = (got - want) / want;
        if (rel < 0) rel = -rel;
        CHECK_MSG(rel <= 1.0 / 32, "q=%g: got %.0f want %.0f", qs[i], got, want);
    }
    CHECK_EQ(h.min, 1);
    CHECK_EQ(h.max, n);
}

TEST(histo_merge_and_outliers) {
    static histo a, b;
    histo_init(&a);
    histo_init(&b);
    for (int i = 0; i < 990; i++)
        histo_add(&a, 1000);
    for (int i = 0; i < 10; i++)
        histo_add(&b, 1000000);
    histo_add(&b, UINT64_MAX); /* beyond the last bucket: counted, max exact */
    histo_merge(&a, &b);
    CHECK_EQ(a.count, 1001);
    uint64_t p50 = histo_quantile(&a, 0.5);
    CHECK_MSG(p50 >= 1000 && p50 < 1000 + 1000 / 32 + 1, "p50 %llu", (unsigned long long)p50);
    uint64_t p999 = histo_quantile(&a, 0.999);
    CHECK_MSG(p999 >= 1000000 && p999 < 1000000 + 1000000 / 32 + 1, "p999 %llu",
              (unsigned long long)p999);
    CHECK(histo_quantile(&a, 1.0) == UINT64_MAX);
    CHECK_EQ(a.sum, UINT64_MAX); /* saturated, not wrapped */
}
