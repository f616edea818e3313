/*
 * mamba.c — one Mamba-style selective state-space layer over a chunk of tokens, and the
 * snapshots of its state at block boundaries (vLLM's align mode).
 *
 *   h = RMSNorm(x); [xi, z] = in_proj h
 *   u_t = SiLU(conv_b + sum_k conv_w[k] * xi_{t-K+1+k})      depthwise causal conv, K taps
 *   dt_t = softplus(dt_proj (x_proj_dt u_t) + dt_bias); B_t, C_t = x_proj_B u_t, x_proj_C u_t
 *   s_t[c][n] = exp(dt_t[c] A[c][n]) s_{t-1}[c][n] + dt_t[c] B_t[n] u_t[c]
 *   y_t[c] = (sum_n C_t[n] s_t[c][n] + D[c] u_t[c]) * SiLU(z_t[c]);  x += out_proj y
 *
 * (The sum over n runs in four lanes, folded, then the tail: fixed for a given d_state.)
 *
 * The request's running state is the conv state (the last K-1 inputs xi, oldest first)
 * and the SSM state s, per Mamba layer, in global channel order. Both recurrences run one
 * token at a time in position order, so the state after token t is the same however the
 * prompt was chunked. When a token ends a logical block whose snapshot slot is assigned,
 * that state is written into the slot on every rank (rank r takes its TP shard's channels).
 */
#include "internal.h"

/* Where layer `li`'s part of a slot starts on a rank. */
static float *slot_at(const engine_model *m, uint32_t rank, int32_t slot, uint32_t li) {
    size_t per_layer = (size_t)m->ch_rank * (m->cfg.d_conv - 1 + m->cfg.d_state);
    return m->mamba[rank] + (size_t)slot * m->slot_floats + li * per_layer;
}

/* Slot of the snapshot due after the token at pos, or -1. */
static int32_t boundary_slot(const engine_req *r, uint32_t pos) {
    uint32_t bt = r->m->block_tokens;
    if ((pos + 1) % bt) return -1;
    uint32_t b = (pos + 1) / bt - 1;
    return b < r->nslots ? r->slots[b] : -1;
}

static void save_conv(engine_req *r, uint32_t li, int32_t slot, const float *st) {
    const engine_model *m = r->m;
    uint32_t km1 = m->cfg.d_conv - 1, ch = m->ch_rank, di = m->cfg.d_inner;
    for (uint32_t rank = 0; rank < m->ranks; rank++) {
        uint32_t c0 = rank / m->cfg.dcp * ch;
        float *dst = slot_at(m, rank, slot, li);
        for (uint32_t k = 0; k < km1; k++)
            memcpy(dst + (size_t)k * ch, st + (size_t)k * di + c0, ch * sizeof(float));
    }
}

static void save_ssm(engine_req *r, uint32_t li, int32_t slot, const float *ssm) {
    const engine_model *m = r->m;
    uint32_t km1 = m->cfg.d_conv - 1, ch = m->ch_rank, ns = m->cfg.d_state;
    for (uint32_t rank = 0; rank < m->ranks; rank++) {
        uint32_t c0 = rank / m->cfg.dcp * ch;
        float *dst = slot_at(m, rank, slot, li) + (size_t)km1 * ch;
        memcpy(dst, ssm + (size_t)c0 * ns, (size_t)ch * ns * sizeof(float));
    }
}

void engine_mamba_restore(engine_req *r, int32_t slot) {
    const engine_model *m = r->m;
    uint32_t km1 = m->cfg.d_conv - 1, ch = m->ch_rank, di = m->cfg.d_inner, ns = m->cfg.d_state;
    for (uint32_t li = 0; li < m->n_mamba; li++) {
        float *st = r->conv + (size_t)li * km1 * di, *ssm = r->ssm + (size_t)li * di * ns;
        for (uint32_t tr = 0; tr < m->cfg.tp; tr++) {
            const float *src = slot_at(m, tr * m->cfg.dcp, slot, li);
            uint32_t c0 = tr * ch;
            for (uint32_t k = 0; k < km1; k++)
                memcpy(st + (size_t)k * di + c0, src + (size_t)k * ch, ch * sizeof(float));
            memcpy(ssm + (size_t)c0 * ns, src + (size_t)km1 * ch, (size_t)ch * ns * sizeof(float));
        }
    }
}

void engine_mamba_forward(engine_req *r, const layer *L, uint32_t p0, uint32_t c) {
    engine_model *m = r->m;
    const engine_config *cf = &m->cfg;
    const mamba_weights *w = &L->mamba;
    scratch *s = &m->s;
    uint32_t d = cf->d_model, di = cf->d_inner, ns = cf->d_state, K = cf->d_conv;
    uint32_t dr = cf->dt_rank, li = w->state_index;
    float *st = r->conv + (size_t)li * (K - 1) * di;
    float *ssm = r->ssm + (size_t)li * di * ns;

    engine_rmsnorm(s->h, s->x, w->norm, c, d);
    engine_matmul(s->xz, w->in_proj, s->h, c, 2 * di, d);

    /* Causal depthwise conv, token by token, shifting the conv state. */
    for (uint32_t t = 0; t < c; t++) {
        const float *xi = s->xz + (size_t)t * 2 * di;
        float *u = s->u + (size_t)t * di;
        for (uint32_t ch = 0; ch < di; ch++) {
            const float *cw = w->conv_w + (size_t)ch * K;
            float acc = 0.0f;
            for (uint32_t k = 0; k + 1 < K; k++)
                acc += cw[k] * st[(size_t)k * di + ch];
            acc += cw[K - 1] * xi[ch];
            acc += w->conv_b[ch];
            u[ch] = engine_silu(acc);
        }
        memmove(st, st + di, (size_t)(K - 2) * di * sizeof(float));
        memcpy(st + (size_t)(K - 2) * di, xi, di * sizeof(float));
        int32_t slot = boundary_slot(r, p0 + t);
        if (slot >= 0) save_conv(r, li, slot, st);
    }

    /* Input-dependent dt, B, C. */
    engine_matmul(s->dtr, w->x_proj, s->u, c, dr, di);
    engine_matmul(s->bc, w->x_proj + (size_t)dr * di, s->u, c, 2 * ns, di);
    engine_matmul(s->dt, w->dt_proj, s->dtr, c, di, dr);
    for (uint32_t t = 0; t < c; t++)
        for (uint32_t ch = 0; ch < di; ch++) {
            float *v = &s->dt[(size_t)t * di + ch];
            *v = engine_softplus(*v + w->dt_bias[ch]);
        }

    /* The selective scan, token by token. */
    for (uint32_t t = 0; t < c; t++) {
        const float *u = s->u + (size_t)t * di, *dt = s->dt + (size_t)t * di;
        const float *B = s->bc + (size_t)t * 2 * ns, *C = B + ns;
        const float *z = s->xz + (size_t)t * 2 * di + di;
        float *y = s->y + (size_t)t * di;
        for (uint32_t ch = 0; ch < di; ch++) {
            float *h = ssm + (size_t)ch * ns;
            const float *A = w->a + (size_t)ch * ns;
            float dtc = dt[ch], du = dtc * u[ch];
            v4f dt4 = v4_set1(dtc), du4 = v4_set1(du), acc4 = {0, 0, 0, 0};
            uint32_t n = 0;
            for (; n + 4 <= ns; n += 4) {
                v4f hn = engine_expf4(dt4 * v4_load(A + n)) * v4_load(h + n) + v4_load(B + n) * du4;
                v4_store(h + n, hn);
                acc4 += v4_load(C + n) * hn;
            }
            float acc = v4_fold(acc4);
            for (; n < ns; n++) {
                h[n] = engine_expf(dtc * A[n]) * h[n] + B[n] * du;
                acc += C[n] * h[n];
            }
            acc += w->d_skip[ch] * u[ch];
            y[ch] = acc * engine_silu(z[ch]);
        }
        int32_t slot = boundary_slot(r, p0 + t);
        if (slot >= 0) save_ssm(r, li, slot, ssm);
    }
    engine_matmul(s->proj, w->out_proj, s->y, c, d, di);
    for (size_t i = 0; i < (size_t)c * d; i++)
        s->x[i] += s->proj[i];
}
