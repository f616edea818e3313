/*
 * model.c — model configuration, presets, validation, deterministic weight generation,
 * and the allocation of the model's registered regions.
 *
 * Weights are a pure function of (seed, dimensions): every tensor draws from its own
 * splitmix64 stream seeded by (seed, tensor number), so the same configuration always
 * yields the same bytes. Scales keep activations near unit size: input projections use
 * uniform(-1, 1) * sqrt(3 / fan_in), projections back into the residual stream are further
 * divided by sqrt(2 * n_layers), and Mamba's dt, A and D follow the usual Mamba-1
 * initialisation (dt log-uniform in [0.001, 0.1], A = -(1..d_state), D = 1).
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/prng.h"
#include "internal.h"

void engine_config_init(engine_config *cfg, engine_preset preset) {
    memset(cfg, 0, sizeof(*cfg));
    cfg->preset = preset;
    cfg->n_layers = 4;
    cfg->vocab = 4096;
    cfg->d_model = 256;
    cfg->n_q_heads = 4;
    cfg->n_kv_heads = 2;
    cfg->head_dim = 16;
    cfg->d_ff = 512;
    cfg->d_inner = 256;
    cfg->d_state = 16;
    cfg->d_conv = 4;
    cfg->dt_rank = 16;
    cfg->rope_theta = 10000.0f;
    cfg->seed = 42;
    cfg->block_size = 16;
    cfg->num_blocks = 4096;
    cfg->mamba_slots = 0;
    cfg->chunk_size = 512;
    cfg->tp = 1;
    cfg->dcp = 1;
}

int engine_preset_parse(const char *name, engine_preset *out) {
    if (name && !strcmp(name, "hybrid")) {
        *out = ENGINE_PRESET_HYBRID;
        return 0;
    }
    if (name && !strcmp(name, "attention")) {
        *out = ENGINE_PRESET_ATTENTION;
        return 0;
    }
    return -EINVAL;
}

static int fail(char *err, size_t errlen, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -EINVAL;
}

/* Expand the layout and check every dimension; fills m->cfg and m->layout. */
static int validate(engine_model *m, const engine_config *in, char *err, size_t errlen) {
    engine_config c = *in;
    uint32_t nl = c.layout ? (uint32_t)strlen(c.layout) : c.n_layers;
    if (nl == 0 || nl > 256) return fail(err, errlen, "n_layers must be 1..256 (got %u)", nl);
    if (!c.layout && c.preset != ENGINE_PRESET_HYBRID && c.preset != ENGINE_PRESET_ATTENTION)
        return fail(err, errlen, "unknown preset %d", (int)c.preset);
    m->layout = malloc(nl + 1);
    if (!m->layout) return -ENOMEM;
    for (uint32_t i = 0; i < nl; i++) {
        char k;
        if (c.layout)
            k = c.layout[i];
        else
            k = c.preset == ENGINE_PRESET_ATTENTION || i % 2 == 1 ? 'A' : 'M';
        if (k != 'A' && k != 'M')
            return fail(err, errlen, "layout letter '%c' is not 'A' or 'M'", k);
        m->layout[i] = k;
        if (k == 'A')
            m->n_attn++;
        else
            m->n_mamba++;
    }
    m->layout[nl] = 0;
    c.n_layers = nl;
    c.layout = NULL;
    if (m->n_attn == 0) return fail(err, errlen, "the layout needs at least one attention layer");
    if (c.vocab < 2 || c.vocab > (1u << 24)) return fail(err, errlen, "vocab must be 2..2^24");
    if (c.d_model == 0 || c.d_model > 65536) return fail(err, errlen, "d_model out of range");
    if (c.n_q_heads == 0 || c.n_kv_heads == 0 || c.n_q_heads % c.n_kv_heads)
        return fail(err, errlen, "n_q_heads (%u) must be a multiple of n_kv_heads (%u)",
                    c.n_q_heads, c.n_kv_heads);
    if (c.head_dim == 0 || c.head_dim % 2 || c.head_dim > ENGINE_MAX_HEAD_DIM)
        return fail(err, errlen, "head_dim must be even and at most %d (got %u)",
                    ENGINE_MAX_HEAD_DIM, c.head_dim);
    if (c.d_ff == 0) return fail(err, errlen, "d_ff must be positive");
    if (m->n_mamba &&
        (c.d_inner == 0 || c.d_state == 0 || c.d_conv < 2 || c.d_conv > 64 || c.dt_rank == 0))
        return fail(err, errlen, "Mamba needs d_inner, d_state, dt_rank > 0 and d_conv >= 2");
    if (c.rope_theta <= 1.0f) return fail(err, errlen, "rope_theta must exceed 1");
    if (c.block_size == 0 || c.block_size > 4096)
        return fail(err, errlen, "block_size must be 1..4096");
    if (c.num_blocks == 0) return fail(err, errlen, "num_blocks must be positive");
    if (c.mamba_slots == 0) c.mamba_slots = c.num_blocks;
    if (c.chunk_size == 0) return fail(err, errlen, "chunk_size must be positive");
    if (c.tp == 0 || c.dcp == 0 || c.tp > 64 || c.dcp > 64)
        return fail(err, errlen, "tp and dcp must be 1..64");
    if (c.n_q_heads % c.tp)
        return fail(err, errlen, "tp (%u) must divide n_q_heads (%u)", c.tp, c.n_q_heads);
    if (c.n_kv_heads % c.tp && c.tp % c.n_kv_heads)
        return fail(err, errlen, "tp (%u) must divide n_kv_heads (%u) or be a multiple of it", c.tp,
                    c.n_kv_heads);
    if (m->n_mamba && c.d_inner % c.tp)
        return fail(err, errlen, "tp (%u) must divide d_inner (%u)", c.tp, c.d_inner);
    uint64_t max_pos = (uint64_t)c.num_blocks * c.block_size * c.dcp;
    if (max_pos > (1u << 30)) return fail(err, errlen, "num_blocks * block_size * dcp too big");
    m->cfg = c;
    m->max_pos = (uint32_t)max_pos;
    m->ranks = c.tp * c.dcp;
    m->block_tokens = c.block_size * c.dcp;
    m->kv_heads_rank = c.tp <= c.n_kv_heads ? c.n_kv_heads / c.tp : 1;
    m->q_heads_rank = c.n_q_heads / c.tp;
    m->ch_rank = m->n_mamba ? c.d_inner / c.tp : 0;
    return 0;
}

/* ---- weights -------------------------------------------------------------------------- */

typedef struct rng {
    uint64_t s;
} rng;

/* Uniform in [-1, 1), 24 random bits. */
static float uniform(rng *r) {
    return (float)(prng_next(&r->s) >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

typedef struct gen {
    engine_model *m;
    float *next;  /* next free float in m->weights; NULL while only counting */
    size_t count; /* floats handed out */
    uint32_t tensor;
} gen;

/* Hand out a tensor of n floats and fill it from its own stream: value = uniform * scale
 * + offset. While counting (g->next == NULL) only sizes are added up. */
static float *tensor(gen *g, size_t n, float scale, float offset) {
    uint32_t id = g->tensor++;
    g->count += n;
    if (!g->next) return NULL;
    float *t = g->next;
    g->next += n;
    rng r = {g->m->cfg.seed ^ ((uint64_t)(id + 1) * 0xd1b54a32d192ed03ull)};
    prng_next(&r.s);
    for (size_t i = 0; i < n; i++)
        t[i] = uniform(&r) * scale + offset;
    return t;
}

static float fan(uint32_t fan_in) {
    return sqrtf(3.0f / (float)fan_in);
}

/* One pass over every tensor, in a fixed order; run once to count, once to fill. */
static void generate(gen *g) {
    engine_model *m = g->m;
    const engine_config *c = &m->cfg;
    uint32_t d = c->d_model, qd = c->n_q_heads * c->head_dim, kvd = c->n_kv_heads * c->head_dim;
    uint32_t di = c->d_inner, ns = c->d_state, dr = c->dt_rank;
    float resid = 1.0f / sqrtf(2.0f * (float)c->n_layers);
    m->embed = tensor(g, (size_t)c->vocab * d, 1.0f, 0.0f);
    uint32_t ai = 0, mi = 0;
    for (uint32_t l = 0; l < c->n_layers; l++) {
        layer *L = &m->layers[l];
        L->kind = m->layout[l];
        if (L->kind == 'A') {
            attn_weights *a = &L->attn;
            a->kv_index = ai++;
            a->norm = tensor(g, d, 0.1f, 1.0f);
            a->wq = tensor(g, (size_t)qd * d, fan(d), 0.0f);
            a->wk = tensor(g, (size_t)kvd * d, fan(d), 0.0f);
            a->wv = tensor(g, (size_t)kvd * d, fan(d), 0.0f);
            a->wo = tensor(g, (size_t)d * qd, fan(qd) * resid, 0.0f);
            a->mlp_norm = tensor(g, d, 0.1f, 1.0f);
            a->w_gate = tensor(g, (size_t)c->d_ff * d, fan(d), 0.0f);
            a->w_up = tensor(g, (size_t)c->d_ff * d, fan(d), 0.0f);
            a->w_down = tensor(g, (size_t)d * c->d_ff, fan(c->d_ff) * resid, 0.0f);
        } else {
            mamba_weights *w = &L->mamba;
            w->state_index = mi++;
            w->norm = tensor(g, d, 0.1f, 1.0f);
            w->in_proj = tensor(g, (size_t)2 * di * d, fan(d), 0.0f);
            w->conv_w = tensor(g, (size_t)di * c->d_conv, fan(c->d_conv), 0.0f);
            w->conv_b = tensor(g, di, 0.1f, 0.0f);
            w->x_proj = tensor(g, (size_t)(dr + 2 * ns) * di, fan(di), 0.0f);
            w->dt_proj = tensor(g, (size_t)di * dr, 1.0f / sqrtf((float)dr), 0.0f);
            w->dt_bias = tensor(g, di, 1.0f, 0.0f);
            w->a = tensor(g, (size_t)di * ns, 0.0f, 0.0f);
            w->d_skip = tensor(g, di, 0.0f, 1.0f);
            w->out_proj = tensor(g, (size_t)d * di, fan(di) * resid, 0.0f);
            if (g->next) {
                /* dt = exp(log-uniform in [ln 0.001, ln 0.1]); bias = softplus^-1(dt). */
                for (uint32_t i = 0; i < di; i++) {
                    float u01 = (w->dt_bias[i] + 1.0f) * 0.5f;
                    float dt = expf(logf(0.001f) + u01 * (logf(0.1f) - logf(0.001f)));
                    w->dt_bias[i] = dt + logf(-expm1f(-dt));
                    for (uint32_t n = 0; n < ns; n++)
                        w->a[(size_t)i * ns + n] = -(float)(n + 1);
                }
            }
        }
    }
    m->final_norm = tensor(g, d, 0.1f, 1.0f);
    m->lm_head = tensor(g, (size_t)c->vocab * d, fan(d), 0.0f);
    m->inv_freq = tensor(g, c->head_dim / 2, 0.0f, 0.0f);
    if (g->next)
        for (uint32_t i = 0; i < c->head_dim / 2; i++)
            m->inv_freq[i] =
                (float)pow((double)c->rope_theta, -2.0 * (double)i / (double)c->head_dim);
}

/* ---- scratch -------------------------------------------------------------------------- */

static void scratch_free(scratch *s) {
    float **all[] = {&s->x,    &s->h,    &s->q,  &s->k,        &s->v,        &s->att,
                     &s->proj, &s->gate, &s->up, &s->xz,       &s->u,        &s->dtr,
                     &s->bc,   &s->dt,   &s->y,  &s->rope_cos, &s->rope_sin, &s->scores};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        free(*all[i]);
        *all[i] = NULL;
    }
}

static int scratch_alloc(engine_model *m) {
    const engine_config *c = &m->cfg;
    scratch *s = &m->s;
    size_t n = c->chunk_size, qd = (size_t)c->n_q_heads * c->head_dim;
    size_t kvd = (size_t)c->n_kv_heads * c->head_dim, di = c->d_inner;
    struct {
        float **p;
        size_t n;
    } want[] = {
        {&s->x, n * c->d_model},
        {&s->h, n * c->d_model},
        {&s->q, n * qd},
        {&s->k, n * kvd},
        {&s->v, n * kvd},
        {&s->att, n * qd},
        {&s->proj, n * c->d_model},
        {&s->gate, n * c->d_ff},
        {&s->up, n * c->d_ff},
        {&s->xz, n * 2 * di + 1},
        {&s->u, n * di + 1},
        {&s->dtr, n * c->dt_rank + 1},
        {&s->bc, n * 2 * (size_t)c->d_state + 1},
        {&s->dt, n * di + 1},
        {&s->y, n * di + 1},

        {&s->rope_cos, n * c->head_dim / 2},
        {&s->rope_sin, n * c->head_dim / 2},
        {&s->scores, ENGINE_ATT_QT * (size_t)m->max_pos},
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        *want[i].p = malloc(want[i].n * sizeof(float));
        if (!*want[i].p) return -ENOMEM;
    }
    return 0;
}

/* ---- create / destroy ----------------------------------------------------------------- */

int engine_create(const engine_config *cfg, engine_model **out, char *err, size_t errlen) {
    *out = NULL;
    if (err && errlen) err[0] = 0;
    engine_model *m = calloc(1, sizeof(*m));
    if (!m) return -ENOMEM;
    int rc = validate(m, cfg, err, errlen);
    if (rc) goto fail;
    rc = -ENOMEM;
    const engine_config *c = &m->cfg;
    m->layers = calloc(c->n_layers, sizeof(layer));
    if (!m->layers) goto fail;
    gen g = {.m = m};
    generate(&g);
    m->n_weights = g.count;
    m->weights = malloc(g.count * sizeof(float));
    if (!m->weights) goto fail;
    g = (gen){.m = m, .next = m->weights};
    generate(&g);
    if (scratch_alloc(m)) goto fail;
    m->s.kptr = malloc((size_t)m->max_pos * sizeof(float *));
    if (!m->s.kptr) goto fail;

    m->kv_block_floats = (size_t)c->block_size * m->kv_heads_rank * c->head_dim;
    m->kv_region_floats = 2 * (size_t)c->num_blocks * m->kv_block_floats;
    m->kv = calloc(m->ranks, sizeof(float **));
    if (!m->kv) goto fail;
    for (uint32_t r = 0; r < m->ranks; r++) {
        m->kv[r] = calloc(m->n_attn, sizeof(float *));
        if (!m->kv[r]) goto fail;
        for (uint32_t l = 0; l < m->n_attn; l++) {
            m->kv[r][l] = engine_region_alloc(m->kv_region_floats * sizeof(float));
            if (!m->kv[r][l]) goto fail;
        }
    }
    if (engine_stack_init(&m->stacks[ENGINE_GROUP_ATTN], c->num_blocks)) goto fail;
    if (m->n_mamba) {
        m->slot_floats = (size_t)m->n_mamba * m->ch_rank * ((size_t)(c->d_conv - 1) + c->d_state);
        m->mamba = calloc(m->ranks, sizeof(float *));
        if (!m->mamba) goto fail;
        for (uint32_t r = 0; r < m->ranks; r++) {
            m->mamba[r] = engine_region_alloc((size_t)c->mamba_slots * m->slot_floats * 4);
            if (!m->mamba[r]) goto fail;
        }
        if (engine_stack_init(&m->stacks[ENGINE_GROUP_MAMBA], c->mamba_slots)) goto fail;
    }
    *out = m;
    return 0;
fail:
    engine_destroy(m);
    return rc;
}

void engine_destroy(engine_model *m) {
    if (!m) return;
    if (m->kv) {
        for (uint32_t r = 0; r < m->ranks; r++) {
            if (!m->kv[r]) continue;
            for (uint32_t l = 0; l < m->n_attn; l++)
                engine_region_free(m->kv[r][l], m->kv_region_floats * sizeof(float));
            free(m->kv[r]);
        }
        free(m->kv);
    }
    if (m->mamba) {
        for (uint32_t r = 0; r < m->ranks; r++)
            engine_region_free(m->mamba[r], (size_t)m->cfg.mamba_slots * m->slot_floats * 4);
        free(m->mamba);
    }
    for (int g = 0; g < ENGINE_MAX_GROUPS; g++)
        engine_stack_fini(&m->stacks[g]);
    scratch_free(&m->s);
    free(m->s.kptr);
    free(m->weights);
    free(m->layers);
    free(m->layout);
    free(m);
}

const engine_config *engine_config_of(const engine_model *m) {
    return &m->cfg;
}

const char *engine_layout(const engine_model *m) {
    return m->layout;
}

uint32_t engine_vocab(const engine_model *m) {
    return m->cfg.vocab;
}

uint32_t engine_block_tokens(const engine_model *m) {
    return m->block_tokens;
}

uint32_t engine_num_ranks(const engine_model *m) {
    return m->ranks;
}

uint32_t engine_num_groups(const engine_model *m) {
    return m->n_mamba ? 2 : 1;
}
