/*
 * kernels.c — the out-of-line arithmetic: matrix products, RMSNorm, softplus. The small
 * kernels (dot products, exp, SiLU) are inline in internal.h.
 *
 * Bit-exactness rests on one rule: a dot product of length n always uses the same sequence
 * of float operations (engine_dot(): two 4-lane accumulators over steps of 8, a fixed
 * pairwise fold, then the tail in order). engine_matmul() computes every output with
 * exactly that sequence, whether a token is handled alone or in a group of four, so a
 * token's result depends only on its own input — never on how many tokens share the call.
 * The build uses neither -ffast-math nor FMA contraction (ISO C mode turns it off), so the
 * compiler keeps this order.
 */
#include <math.h>
#include <string.h>

#include "internal.h"

/* Four dot products of one weight row with four inputs: each is engine_dot() exactly,
 * sharing the weight loads. */
static inline void dot4(const float *w, const float *x, uint32_t n, float *y, size_t ystride) {
    const float *x0 = x, *x1 = x + n, *x2 = x + 2 * (size_t)n, *x3 = x + 3 * (size_t)n;
    v4f a0 = {0, 0, 0, 0}, a1 = a0, b0 = a0, b1 = a0, c0 = a0, c1 = a0, d0 = a0, d1 = a0;
    uint32_t i = 0;
    for (; i + 8 <= n; i += 8) {
        v4f wl = v4_load(w + i), wh = v4_load(w + i + 4);
        a0 += wl * v4_load(x0 + i);
        a1 += wh * v4_load(x0 + i + 4);
        b0 += wl * v4_load(x1 + i);
        b1 += wh * v4_load(x1 + i + 4);
        c0 += wl * v4_load(x2 + i);
        c1 += wh * v4_load(x2 + i + 4);
        d0 += wl * v4_load(x3 + i);
        d1 += wh * v4_load(x3 + i + 4);
    }
    float ra = v4_fold(a0 + a1), rb = v4_fold(b0 + b1);
    float rc = v4_fold(c0 + c1), rd = v4_fold(d0 + d1);
    for (; i < n; i++) {
        ra += w[i] * x0[i];
        rb += w[i] * x1[i];
        rc += w[i] * x2[i];
        rd += w[i] * x3[i];
    }
    y[0] = ra;
    y[ystride] = rb;
    y[2 * ystride] = rc;
    y[3 * ystride] = rd;
}

/*
 * y[t][o] = dot(w[o], x[t]) for t < ntok, o < rows; w is [rows][cols], x is [ntok][cols],
 * y is [ntok][rows]. Rows are taken in tiles that stay in cache while a tile of tokens
 * passes over them; the tiling changes only the order outputs are produced in.
 */
void engine_matmul(float *y, const float *w, const float *x, uint32_t ntok, uint32_t rows,
                   uint32_t cols) {
    const uint32_t TT = 64; /* tokens per tile */
    uint32_t rt = (uint32_t)(32768 / ((size_t)cols * sizeof(float)));
    if (rt < 4) rt = 4;
    for (uint32_t t0 = 0; t0 < ntok; t0 += TT) {
        uint32_t t1 = t0 + TT < ntok ? t0 + TT : ntok;
        for (uint32_t r0 = 0; r0 < rows; r0 += rt) {
            uint32_t r1 = r0 + rt < rows ? r0 + rt : rows;
            uint32_t t = t0;
            for (; t + 4 <= t1; t += 4)
                for (uint32_t o = r0; o < r1; o++)
                    dot4(w + (size_t)o * cols, x + (size_t)t * cols, cols, &y[(size_t)t * rows + o],
                         rows);
            for (; t < t1; t++)
                for (uint32_t o = r0; o < r1; o++)
                    y[(size_t)t * rows + o] =
                        engine_dot(w + (size_t)o * cols, x + (size_t)t * cols, cols);
        }
    }
}

void engine_rmsnorm(float *y, const float *x, const float *w, uint32_t ntok, uint32_t d) {
    for (uint32_t t = 0; t < ntok; t++) {
        const float *xt = x + (size_t)t * d;
        float *yt = y + (size_t)t * d;
        float ss = engine_dot(xt, xt, d);
        float inv = 1.0f / sqrtf(ss / (float)d + 1e-5f);
        for (uint32_t i = 0; i < d; i++)
            yt[i] = xt[i] * inv * w[i];
    }
}

/* log(1 + e^x); large x returns x, where the difference is below float precision. */
float engine_softplus(float x) {
    if (x > 20.0f) return x;
    return log1pf(engine_expf(x));
}
