/*
 * attention.c — one attention layer over a chunk of tokens: RMSNorm, Q/K/V projections,
 * RoPE, KV written into the paged cache of every rank that owns it, causal grouped-query
 * attention read back from the cache, output projection, then the SwiGLU MLP.
 *
 * Bit-exactness: the chunk's own keys are written to the cache before any query reads, so
 * every query reads every key (its own included) from the cache, whether that key was
 * computed in this chunk, an earlier one, or loaded from outside. Each query's softmax and
 * value sum run over keys 0..pos in ascending order with fixed per-key arithmetic.
 *
 * Ranks: query head h is computed by TP rank h / q_heads_rank and reads its KV head from
 * that rank's region; key t is read from DCP rank t % dcp. So a rank's region is really
 * used: corrupting it changes exactly the heads and positions that rank owns.
 */
#include <math.h>

#include "internal.h"

/* First KV head held by a TP rank. */
static uint32_t kv_head_off(const engine_model *m, uint32_t tr) {
    const engine_config *c = &m->cfg;
    if (c->tp <= c->n_kv_heads) return tr * m->kv_heads_rank;
    return tr / (c->tp / c->n_kv_heads);
}

/* K of (rank, layer region, block, slot, local head); V is kv_region_floats / 2 further. */
static inline float *kv_at(const engine_model *m, uint32_t rank, uint32_t li, int32_t blk,
                           uint32_t slot, uint32_t lh) {
    size_t off =
        (((size_t)blk * m->cfg.block_size + slot) * m->kv_heads_rank + lh) * m->cfg.head_dim;
    return m->kv[rank][li] + off;
}

static void rope(float *x, const float *cs, const float *sn, uint32_t nheads, uint32_t hd) {
    uint32_t half = hd / 2;
    for (uint32_t h = 0; h < nheads; h++) {
        float *v = x + (size_t)h * hd;
        for (uint32_t i = 0; i < half; i++) {
            float a = v[i], b = v[i + half];
            v[i] = a * cs[i] - b * sn[i];
            v[i + half] = a * sn[i] + b * cs[i];
        }
    }
}

/* Write the chunk's K and V into every rank that holds them. */
static void write_kv(engine_req *r, uint32_t li, uint32_t p0, uint32_t c) {
    engine_model *m = r->m;
    const engine_config *cf = &m->cfg;
    uint32_t hd = cf->head_dim, kvd = cf->n_kv_heads * hd;
    size_t vplane = m->kv_region_floats / 2;
    for (uint32_t t = 0; t < c; t++) {
        uint32_t pos = p0 + t;
        int32_t blk = r->blocks[pos / m->block_tokens];
        uint32_t within = pos % m->block_tokens;
        uint32_t d = within % cf->dcp, slot = within / cf->dcp;
        for (uint32_t tr = 0; tr < cf->tp; tr++) {
            uint32_t off = kv_head_off(m, tr);
            for (uint32_t lh = 0; lh < m->kv_heads_rank; lh++) {
                float *k = kv_at(m, tr * cf->dcp + d, li, blk, slot, lh);
                memcpy(k, m->s.k + (size_t)t * kvd + (size_t)(off + lh) * hd, hd * sizeof(float));
                memcpy(k + vplane, m->s.v + (size_t)t * kvd + (size_t)(off + lh) * hd,
                       hd * sizeof(float));
            }
        }
    }
}

/* Point kp[j] at key j's K (local head 0) on TP rank tr, for j < n, following the block
 * table: key j lives on DCP rank j % dcp. */
static void key_pointers(engine_req *r, uint32_t li, uint32_t tr, uint32_t n) {
    engine_model *m = r->m;
    uint32_t bs = m->cfg.block_size, dcp = m->cfg.dcp;
    const float **kp = m->s.kptr;
    uint32_t j = 0;
    for (uint32_t b = 0; j < n; b++)
        for (uint32_t s = 0; s < bs && j < n; s++)
            for (uint32_t d = 0; d < dcp && j < n; d++)
                kp[j++] = kv_at(m, tr * dcp + d, li, r->blocks[b], s, 0);
}

/* Score rows for these many queries at once; keys are visited in tiles of ATT_KT so that a
 * tile's K and V stay in L1 while every query of the tile uses them. */
#define ATT_KT 64

/*
 * Causal attention of one query head for nt consecutive tokens at positions pos0.., whose
 * queries are q + t * qd; key j is at kp[j] + off. Writes each token's head output to
 * out + t * qd.
 *
 * For every query the arithmetic is fixed by its position alone: scores key by key
 * (engine_dot_x4 gives, per lane, engine_dot's bits); softmax max, exp and a 4-lane sum
 * folded then tail, over keys 0..pos; the value sum per output lane in ascending key
 * order. Tiling queries and keys changes only the order in which queries progress, never
 * the order of any one query's sums — accumulators go to memory between key tiles and
 * come back exactly.
 */
static void attend(engine_model *m, size_t off, const float *q, float *out, uint32_t qd,
                   uint32_t pos0, uint32_t nt) {
    uint32_t hd = m->cfg.head_dim, max_pos = m->max_pos, nmax = pos0 + nt;
    size_t voff = off + m->kv_region_floats / 2;
    const float *const *kp = m->s.kptr;
    float scale = 1.0f / sqrtf((float)hd), inv[ENGINE_ATT_QT];

    for (uint32_t j0 = 0; j0 < nmax; j0 += ATT_KT)
        for (uint32_t t = 0; t < nt; t++) {
            uint32_t n = pos0 + t + 1, jend = j0 + ATT_KT < n ? j0 + ATT_KT : n, j = j0;
            const float *qh = q + (size_t)t * qd;
            float *s = m->s.scores + (size_t)t * max_pos;
            for (; j + 4 <= jend; j += 4) {
                const float *k4[4] = {kp[j] + off, kp[j + 1] + off, kp[j + 2] + off,
                                      kp[j + 3] + off};
                v4_store(s + j, engine_dot_x4(qh, k4, hd) * scale);
            }
            for (; j < jend; j++)
                s[j] = engine_dot(qh, kp[j] + off, hd) * scale;
        }

    for (uint32_t t = 0; t < nt; t++) {
        uint32_t n = pos0 + t + 1, j;
        float *s = m->s.scores + (size_t)t * max_pos, mx = s[0];
        /* The maximum is exact whatever the order, so it may take four lanes. */
        v4f m4 = v4_set1(mx);
        for (j = 0; j + 4 <= n; j += 4) {
            v4f x = v4_load(s + j);
            v4i gt = x > m4;
            m4 = (v4f)((gt & (v4i)x) | (~gt & (v4i)m4));
        }
        for (uint32_t l = 0; l < 4; l++)
            mx = m4[l] > mx ? m4[l] : mx;
        for (; j < n; j++)
            mx = s[j] > mx ? s[j] : mx;
        v4f mx4 = v4_set1(mx), sum4 = {0, 0, 0, 0};
        for (j = 0; j + 4 <= n; j += 4) {
            v4f e = engine_expf4(v4_load(s + j) - mx4);
            v4_store(s + j, e);
            sum4 += e;
        }
        float tot = v4_fold(sum4);
        for (; j < n; j++) {
            s[j] = engine_expf(s[j] - mx);
            tot += s[j];
        }
        inv[t] = 1.0f / tot;
        memset(out + (size_t)t * qd, 0, hd * sizeof(float));
    }

    for (uint32_t j0 = 0; j0 < nmax; j0 += ATT_KT)
        for (uint32_t t = 0; t < nt; t++) {
            uint32_t n = pos0 + t + 1, jend = j0 + ATT_KT < n ? j0 + ATT_KT : n, i0 = 0;
            const float *s = m->s.scores + (size_t)t * max_pos;
            float *o = out + (size_t)t * qd;
            if (j0 >= n) continue;
            for (; i0 + 16 <= hd; i0 += 16) {
                v4f a0 = v4_load(o + i0), a1 = v4_load(o + i0 + 4);
                v4f a2 = v4_load(o + i0 + 8), a3 = v4_load(o + i0 + 12);
                for (uint32_t j = j0; j < jend; j++) {
                    const float *v = kp[j] + voff + i0;
                    v4f w = v4_set1(s[j]);
                    a0 += w * v4_load(v);
                    a1 += w * v4_load(v + 4);
                    a2 += w * v4_load(v + 8);
                    a3 += w * v4_load(v + 12);
                }
                v4_store(o + i0, a0);
                v4_store(o + i0 + 4, a1);
                v4_store(o + i0 + 8, a2);
                v4_store(o + i0 + 12, a3);
            }
            for (; i0 + 4 <= hd; i0 += 4) {
                v4f a0 = v4_load(o + i0);
                for (uint32_t j = j0; j < jend; j++)
                    a0 += v4_set1(s[j]) * v4_load(kp[j] + voff + i0);
                v4_store(o + i0, a0);
            }
            for (; i0 < hd; i0++)
                for (uint32_t j = j0; j < jend; j++)
                    o[i0] += s[j] * kp[j][voff + i0];
        }

    for (uint32_t t = 0; t < nt; t++)
        for (uint32_t i = 0; i < hd; i++)
            out[(size_t)t * qd + i] *= inv[t];
}

void engine_attn_forward(engine_req *r, const layer *L, uint32_t p0, uint32_t c) {
    engine_model *m = r->m;
    const engine_config *cf = &m->cfg;
    const attn_weights *a = &L->attn;
    scratch *s = &m->s;
    uint32_t d = cf->d_model, hd = cf->head_dim, nq = cf->n_q_heads, nkv = cf->n_kv_heads;
    uint32_t qd = nq * hd, kvd = nkv * hd, gq = nq / nkv, half = hd / 2;

    engine_rmsnorm(s->h, s->x, a->norm, c, d);
    engine_matmul(s->q, a->wq, s->h, c, qd, d);
    engine_matmul(s->k, a->wk, s->h, c, kvd, d);
    engine_matmul(s->v, a->wv, s->h, c, kvd, d);
    for (uint32_t t = 0; t < c; t++) {
        const float *cs = s->rope_cos + (size_t)t * half, *sn = s->rope_sin + (size_t)t * half;
        rope(s->q + (size_t)t * qd, cs, sn, nq, hd);
        rope(s->k + (size_t)t * kvd, cs, sn, nkv, hd);
    }
    write_kv(r, a->kv_index, p0, c);

    /* Per TP rank, each of its query heads, reading the rank's copy of its KV head. */
    for (uint32_t tr = 0; tr < cf->tp; tr++) {
        key_pointers(r, a->kv_index, tr, p0 + c);
        uint32_t off = kv_head_off(m, tr);
        for (uint32_t h = tr * m->q_heads_rank; h < (tr + 1) * m->q_heads_rank; h++)
            for (uint32_t t0 = 0; t0 < c; t0 += ENGINE_ATT_QT)
                attend(m, (size_t)(h / gq - off) * hd, s->q + (size_t)t0 * qd + (size_t)h * hd,
                       s->att + (size_t)t0 * qd + (size_t)h * hd, qd, p0 + t0,
                       c - t0 < ENGINE_ATT_QT ? c - t0 : ENGINE_ATT_QT);
    }
    engine_matmul(s->proj, a->wo, s->att, c, d, qd);
    for (size_t i = 0; i < (size_t)c * d; i++)
        s->x[i] += s->proj[i];

    /* SwiGLU MLP. */
    engine_rmsnorm(s->h, s->x, a->mlp_norm, c, d);
    engine_matmul(s->gate, a->w_gate, s->h, c, cf->d_ff, d);
    engine_matmul(s->up, a->w_up, s->h, c, cf->d_ff, d);
    size_t nf = (size_t)c * cf->d_ff, i = 0;
    for (; i + 4 <= nf; i += 4)
        v4_store(s->gate + i, engine_silu4(v4_load(s->gate + i)) * v4_load(s->up + i));
    for (; i < nf; i++)
        s->gate[i] = engine_silu(s->gate[i]) * s->up[i];
    engine_matmul(s->proj, a->w_down, s->gate, c, d, cf->d_ff);
    for (i = 0; i < (size_t)c * d; i++)
        s->x[i] += s->proj[i];
}
