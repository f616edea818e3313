/*
 * internal.h — the engine's private structures and the functions its files share.
 * Nothing outside src/engine/ includes this; the public API is engine.h.
 *
 * Invariants: weights are immutable after engine_create(); every region is zeroed anonymous
 * memory (pages are only touched when used); a request's block table only grows until
 * engine_req_free(); the scratch buffers hold chunk_size tokens.
 */
#ifndef ENGINE_INTERNAL_H
#define ENGINE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "engine.h"

#define ENGINE_MAX_HEAD_DIM 256
/* Queries attended together (attention.c); the score scratch holds this many rows. */
#define ENGINE_ATT_QT 16

typedef struct attn_weights {
    float *norm;          /* [d_model] */
    float *wq, *wk, *wv;  /* [nq*hd][d], [nkv*hd][d], [nkv*hd][d] */
    float *wo;            /* [d][nq*hd] */
    float *mlp_norm;      /* [d] */
    float *w_gate, *w_up; /* [d_ff][d] */
    float *w_down;        /* [d][d_ff] */
    uint32_t kv_index;    /* index among attention layers (region index) */
} attn_weights;

typedef struct mamba_weights {
    float *norm;          /* [d] */
    float *in_proj;       /* [2*di][d]: x rows then z rows */
    float *conv_w;        /* [di][d_conv] */
    float *conv_b;        /* [di] */
    float *x_proj;        /* [dt_rank + 2*N][di]: dt rows, B rows, C rows */
    float *dt_proj;       /* [di][dt_rank] */
    float *dt_bias;       /* [di] */
    float *a;             /* [di][N], negative */
    float *d_skip;        /* [di] */
    float *out_proj;      /* [d][di] */
    uint32_t state_index; /* index among Mamba layers */
} mamba_weights;

typedef struct layer {
    char kind; /* 'A' or 'M' */
    attn_weights attn;
    mamba_weights mamba;
} layer;

/* The free block ids of a group: a stack. */
typedef struct block_stack {
    uint32_t total;
    uint32_t nfree;
    int32_t *free_ids;
} block_stack;

/* Scratch of the forward pass, sized for chunk_size tokens. */
typedef struct scratch {
    float *x, *h;               /* [c][d] residual stream, normed input */
    float *q, *k, *v;           /* [c][nq*hd], [c][nkv*hd] x2 */
    float *att;                 /* [c][nq*hd] */
    float *proj;                /* [c][d] output of a projection */
    float *gate, *up;           /* [c][d_ff] */
    float *xz;                  /* [c][2*di] */
    float *u;                   /* [c][di] conv output */
    float *dtr;                 /* [c][dt_rank] */
    float *bc;                  /* [c][2N]: B then C */
    float *dt;                  /* [c][di] */
    float *y;                   /* [c][di] */
    float *rope_cos, *rope_sin; /* [c][hd/2] */
    float *scores;              /* [ENGINE_ATT_QT][max_pos] */
    const float **kptr;         /* [max_pos] key pointers */
    float *acc;                 /* [hd] */
} scratch;

struct engine_model {
    engine_config cfg;
    char *layout; /* n_layers letters */
    layer *layers;
    uint32_t n_attn, n_mamba;
    float *embed;      /* [vocab][d] */
    float *final_norm; /* [d] */
    float *lm_head;    /* [vocab][d] */
    float *inv_freq;   /* [hd/2] RoPE */
    float *weights;    /* one allocation holding every tensor above */
    size_t n_weights;

    uint32_t ranks, block_tokens;
    uint32_t kv_heads_rank; /* KV heads each rank holds */
    uint32_t q_heads_rank;  /* query heads each TP rank computes */
    uint32_t ch_rank;       /* Mamba channels each TP rank holds */
    /* kv[rank][attention layer]: (2, num_blocks, block_size, kv_heads_rank, hd) floats. */
    float ***kv;
    size_t kv_region_floats;
    size_t kv_block_floats; /* one block in one plane */
    /* mamba[rank]: (mamba_slots, slot_floats). */
    float **mamba;
    size_t slot_floats;
    block_stack stacks[ENGINE_MAX_GROUPS];
    uint32_t max_pos; /* num_blocks * block_tokens */
    scratch s;
};

struct engine_req {
    engine_model *m;
    uint32_t pos;
    uint32_t snapshot_every;
    int32_t *blocks; /* attention block table, capacity num_blocks */
    uint32_t nblocks;
    int32_t *slots; /* Mamba table, capacity num_blocks; -1 = none */
    uint32_t nslots;
    float *conv; /* running state: [n_mamba][d_conv-1][di] */
    float *ssm;  /* [n_mamba][di][N] */
    engine_req_stats stats;
};

/* kernels.c and the inline kernels below are the only arithmetic with reductions; see the
 * comment atop kernels.c. The vector forms give, lane for lane, exactly the bits of the
 * scalar forms (IEEE operations are exact per lane; nothing is fused or reassociated). */
typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));

static inline v4f v4_load(const float *p) {
    v4f v;
    memcpy(&v, p, sizeof(v));
    return v;
}

static inline void v4_store(float *p, v4f v) {
    memcpy(p, &v, sizeof(v));
}

static inline v4f v4_set1(float x) {
    return (v4f){x, x, x, x};
}

/* The fold every dot product ends with: (l0 + l1) + (l2 + l3). */
static inline float v4_fold(v4f s) {
    return (s[0] + s[1]) + (s[2] + s[3]);
}

/*
 * exp(x), lane-wise, to within a few ulp: x = k ln2 + r with |r| <= ln2/2 (ln2 in two
 * parts so k ln2 is exact), e^r by a degree-6 Horner polynomial, times 2^k built in the
 * exponent bits. Inputs are clamped to [-87, 88]: no overflow, no denormals. Pure
 * arithmetic, so the same bits on every machine (a libm picks its variant by CPU).
 */
static inline v4f engine_expf4(v4f x) {
    const v4f lo = v4_set1(-87.0f), hi = v4_set1(88.0f), magic = v4_set1(12582912.0f);
    v4i below = x<lo, above = x> hi;
    x = (v4f)((below & (v4i)lo) | (~below & (v4i)x));
    x = (v4f)((above & (v4i)hi) | (~above & (v4i)x));
    v4f kf = (x * 1.44269504f + magic) - magic; /* round to nearest integer */
    v4f r = x - kf * 0.693145752f;              /* ln2, high part: 12 significant bits */
    r = r - kf * 1.42860677e-06f;               /* ln2, low part */
    v4f p = v4_set1(1.0f / 720.0f);
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    v4i k = __builtin_convertvector(kf, v4i);
    v4i bits = (k + 127) << 23;
    return p * (v4f)bits;
}

static inline float engine_expf(float x) {
    return engine_expf4(v4_set1(x))[0];
}

static inline v4f engine_silu4(v4f x) {
    return x / (1.0f + engine_expf4(-x));
}

static inline float engine_silu(float x) {
    return engine_silu4(v4_set1(x))[0];
}

/* Dot product of length n: two 4-lane accumulators over steps of 8, summed, folded, then
 * the tail in order. */
static inline float engine_dot(const float *a, const float *b, uint32_t n) {
    v4f s0 = {0, 0, 0, 0}, s1 = {0, 0, 0, 0};
    uint32_t i = 0;
    for (; i + 8 <= n; i += 8) {
        s0 += v4_load(a + i) * v4_load(b + i);
        s1 += v4_load(a + i + 4) * v4_load(b + i + 4);
    }
    float r = v4_fold(s0 + s1);
    for (; i < n; i++)
        r += a[i] * b[i];
    return r;
}

/* engine_dot(q, k[j], n) for four vectors k[0..3] at once, one per lane. */
static inline v4f engine_dot_x4(const float *q, const float *const k[4], uint32_t n) {
    v4f a0 = {0, 0, 0, 0}, a1 = a0, b0 = a0, b1 = a0, c0 = a0, c1 = a0, d0 = a0, d1 = a0;
    uint32_t i = 0;
    for (; i + 8 <= n; i += 8) {
        v4f ql = v4_load(q + i), qh = v4_load(q + i + 4);
        a0 += ql * v4_load(k[0] + i);
        a1 += qh * v4_load(k[0] + i + 4);
        b0 += ql * v4_load(k[1] + i);
        b1 += qh * v4_load(k[1] + i + 4);
        c0 += ql * v4_load(k[2] + i);
        c1 += qh * v4_load(k[2] + i + 4);
        d0 += ql * v4_load(k[3] + i);
        d1 += qh * v4_load(k[3] + i + 4);
    }
    v4f sa = a0 + a1, sb = b0 + b1, sc = c0 + c1, sd = d0 + d1;
    /* Transpose so lane j of t_l holds lane l of vector j, then fold all four at once. */
    v4f t0 = {sa[0], sb[0], sc[0], sd[0]}, t1 = {sa[1], sb[1], sc[1], sd[1]};
    v4f t2 = {sa[2], sb[2], sc[2], sd[2]}, t3 = {sa[3], sb[3], sc[3], sd[3]};
    v4f r = (t0 + t1) + (t2 + t3);
    for (; i < n; i++)
        r += (v4f){k[0][i], k[1][i], k[2][i], k[3][i]} * q[i];
    return r;
}

void engine_matmul(float *y, const float *w, const float *x, uint32_t ntok, uint32_t rows,
                   uint32_t cols);
void engine_rmsnorm(float *y, const float *x, const float *w, uint32_t ntok, uint32_t d);
float engine_softplus(float x);

/* kvcache.c */
int engine_stack_init(block_stack *p, uint32_t total);
void engine_stack_fini(block_stack *p);
int32_t engine_stack_take(block_stack *p);
void engine_stack_put(block_stack *p, int32_t id);
void *engine_region_alloc(size_t bytes);
void engine_region_free(void *p, size_t bytes);

/* attention.c: one attention layer (and its MLP) over c tokens starting at position p0. */
void engine_attn_forward(engine_req *r, const layer *L, uint32_t p0, uint32_t c);
/* mamba.c: one Mamba layer over c tokens at p0; snapshots into r->slots at boundaries. */
void engine_mamba_forward(engine_req *r, const layer *L, uint32_t p0, uint32_t c);
/* Copy the running state of every Mamba layer into slot / out of it (all ranks). */
void engine_mamba_restore(engine_req *r, int32_t slot);

#endif
