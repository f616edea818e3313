/*
 * forward.c — requests and the forward pass around the layers: the request lifecycle
 * (block table, Mamba snapshot table, running state), resuming at a block boundary,
 * chunked prefill, decode steps, greedy generation and timing.
 *
 * A compute call first takes every block and snapshot slot it will need, so it either
 * fails before computing anything or runs to the end. Within a chunk the layers run one
 * after the other over all the chunk's tokens; only the last token of a call goes through
 * the final norm and the LM head.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <time.h>

#include "internal.h"

uint64_t engine_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int engine_req_new(engine_model *m, engine_req **out) {
    *out = NULL;
    engine_req *r = calloc(1, sizeof(*r));
    if (!r) return -ENOMEM;
    const engine_config *c = &m->cfg;
    r->m = m;
    r->snapshot_every = 1;
    r->blocks = malloc((size_t)c->num_blocks * sizeof(int32_t));
    r->slots = malloc((size_t)c->num_blocks * sizeof(int32_t));
    size_t conv = (size_t)m->n_mamba * (c->d_conv - 1) * c->d_inner;
    size_t ssm = (size_t)m->n_mamba * c->d_inner * c->d_state;
    r->conv = calloc(conv + 1, sizeof(float));
    r->ssm = calloc(ssm + 1, sizeof(float));
    if (!r->blocks || !r->slots || !r->conv || !r->ssm) {
        engine_req_free(r);
        return -ENOMEM;
    }
    for (uint32_t i = 0; i < c->num_blocks; i++)
        r->slots[i] = -1;
    *out = r;
    return 0;
}

void engine_req_free(engine_req *r) {
    if (!r) return;
    engine_model *m = r->m;
    for (uint32_t i = 0; i < r->nblocks; i++)
        engine_stack_put(&m->stacks[ENGINE_GROUP_ATTN], r->blocks[i]);
    for (uint32_t i = 0; i < r->nslots; i++)
        if (r->slots[i] >= 0) engine_stack_put(&m->stacks[ENGINE_GROUP_MAMBA], r->slots[i]);
    free(r->blocks);
    free(r->slots);
    free(r->conv);
    free(r->ssm);
    free(r);
}

uint32_t engine_req_pos(const engine_req *r) {
    return r->pos;
}

void engine_req_set_snapshot_every(engine_req *r, uint32_t every) {
    r->snapshot_every = every;
}

const int32_t *engine_req_blocks(const engine_req *r, uint32_t *n) {
    *n = r->nblocks;
    return r->blocks;
}

const int32_t *engine_req_mamba_slots(const engine_req *r, uint32_t *n) {
    *n = r->nslots;
    return r->slots;
}

int engine_req_reserve(engine_req *r, uint32_t ntokens) {
    engine_model *m = r->m;
    uint64_t need = ((uint64_t)ntokens + m->block_tokens - 1) / m->block_tokens;
    if (need > m->cfg.num_blocks) return -ENOSPC;
    while (r->nblocks < need) {
        int32_t id = engine_stack_take(&m->stacks[ENGINE_GROUP_ATTN]);
        if (id < 0) return id;
        r->blocks[r->nblocks++] = id;
    }
    return 0;
}

int engine_req_mamba_slot(engine_req *r, uint32_t block, int create) {
    engine_model *m = r->m;
    if (!m->n_mamba || block >= m->cfg.num_blocks) return -EINVAL;
    if (block < r->nslots && r->slots[block] >= 0) return r->slots[block];
    if (!create) return -ENOENT;
    int32_t id = engine_stack_take(&m->stacks[ENGINE_GROUP_MAMBA]);
    if (id < 0) return id;
    r->slots[block] = id;
    if (block >= r->nslots) r->nslots = block + 1;
    return id;
}

int engine_req_resume(engine_req *r, uint32_t pos) {
    engine_model *m = r->m;
    if (pos % m->block_tokens || pos > m->max_pos) return -EINVAL;
    if (pos == 0) {
        size_t conv = (size_t)m->n_mamba * (m->cfg.d_conv - 1) * m->cfg.d_inner;
        memset(r->conv, 0, conv * sizeof(float));
        memset(r->ssm, 0, (size_t)m->n_mamba * m->cfg.d_inner * m->cfg.d_state * sizeof(float));
        r->pos = 0;
        return 0;
    }
    uint32_t nb = pos / m->block_tokens;
    if (r->nblocks < nb) return -ENOENT;
    if (m->n_mamba) {
        int slot = engine_req_mamba_slot(r, nb - 1, 0);
        if (slot < 0) return -ENOENT;
        engine_mamba_restore(r, slot);
    }
    r->pos = pos;
    return 0;
}

/* Take the snapshot slots due at the boundaries inside positions [p0, p1). */
static int reserve_snapshots(engine_req *r, uint32_t p0, uint32_t p1) {
    engine_model *m = r->m;
    if (!m->n_mamba || !r->snapshot_every) return 0;
    uint32_t bt = m->block_tokens;
    for (uint32_t b = p0 / bt; (uint64_t)(b + 1) * bt <= p1; b++) {
        if ((b + 1) % r->snapshot_every) continue;
        int rc = engine_req_mamba_slot(r, b, 1);
        if (rc < 0) return rc;
    }
    return 0;
}

/* RoPE angles of the chunk's positions, shared by every attention layer. */
static void rope_tables(engine_model *m, uint32_t p0, uint32_t c) {
    uint32_t half = m->cfg.head_dim / 2;
    for (uint32_t t = 0; t < c; t++)
        for (uint32_t i = 0; i < half; i++) {
            double ang = (double)(p0 + t) * (double)m->inv_freq[i];
            m->s.rope_cos[(size_t)t * half + i] = (float)cos(ang);
            m->s.rope_sin[(size_t)t * half + i] = (float)sin(ang);
        }
}

static void chunk_forward(engine_req *r, const uint32_t *tok, uint32_t p0, uint32_t c) {
    engine_model *m = r->m;
    uint32_t d = m->cfg.d_model;
    for (uint32_t t = 0; t < c; t++)
        memcpy(m->s.x + (size_t)t * d, m->embed + (size_t)tok[t] * d, d * sizeof(float));
    rope_tables(m, p0, c);
    for (uint32_t l = 0; l < m->cfg.n_layers; l++) {
        const layer *L = &m->layers[l];
        if (L->kind == 'A')
            engine_attn_forward(r, L, p0, c);
        else
            engine_mamba_forward(r, L, p0, c);
    }
}

/* Compute tokens tok[0..n) at positions [pos, pos + n); logits of the last one. */
static int run(engine_req *r, const uint32_t *tok, uint32_t n, float *logits) {
    engine_model *m = r->m;
    uint64_t t0 = engine_now_ns();
    uint32_t p0 = r->pos;
    if (n == 0 || (uint64_t)p0 + n > m->max_pos) return n ? -ENOSPC : -EINVAL;
    for (uint32_t i = 0; i < n; i++)
        if (tok[i] >= m->cfg.vocab) return -EINVAL;
    int rc = engine_req_reserve(r, p0 + n);
    if (rc == 0) rc = reserve_snapshots(r, p0, p0 + n);
    if (rc) return rc;
    uint32_t cs = m->cfg.chunk_size, c = 0;
    for (uint32_t done = 0; done < n; done += c) {
        c = n - done < cs ? n - done : cs;
        chunk_forward(r, tok + done, p0 + done, c);
        r->pos = p0 + done + c;
    }
    if (logits) {
        uint32_t d = m->cfg.d_model;
        engine_rmsnorm(m->s.h, m->s.x + (size_t)(c - 1) * d, m->final_norm, 1, d);
        engine_matmul(logits, m->lm_head, m->s.h, 1, m->cfg.vocab, d);
    }
    uint64_t dt = engine_now_ns() - t0;
    r->stats.tokens_computed += n;
    r->stats.compute_ns += dt;
    r->stats.last_call_ns = dt;
    return 0;
}

int engine_prefill(engine_req *r, const uint32_t *tokens, uint32_t n, float *logits) {
    if (r->pos >= n) return -EINVAL;
    return run(r, tokens + r->pos, n - r->pos, logits);
}

int engine_decode(engine_req *r, uint32_t token, float *logits) {
    return run(r, &token, 1, logits);
}

uint32_t engine_argmax(const float *logits, uint32_t vocab) {
    uint32_t best = 0;
    for (uint32_t i = 1; i < vocab; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

int engine_generate(engine_req *r, const uint32_t *prompt, uint32_t n, uint32_t *out,
                    uint32_t n_out) {
    uint32_t vocab = r->m->cfg.vocab;
    float *logits = malloc((size_t)vocab * sizeof(float));
    if (!logits) return -ENOMEM;
    int rc = n_out ? engine_prefill(r, prompt, n, logits) : -EINVAL;
    for (uint32_t i = 0; rc == 0 && i < n_out; i++) {
        out[i] = engine_argmax(logits, vocab);
        if (i + 1 < n_out) rc = engine_decode(r, out[i], logits);
    }
    free(logits);
    return rc;
}

void engine_req_stats_get(const engine_req *r, engine_req_stats *out) {
    *out = r->stats;
}
