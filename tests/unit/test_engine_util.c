/*
 * test_engine_util.c — helpers for the engine tests (see test_engine_util.h).
 */
#include <stdlib.h>
#include <string.h>

#include "common/prng.h"
#include "harness.h"
#include "test_engine_util.h"

void eng_small(engine_config *c, engine_preset p) {
    engine_config_init(c, p);
    c->vocab = 97;
    c->d_model = 36;
    c->n_q_heads = 4;
    c->n_kv_heads = 2;
    c->head_dim = 22; /* one 16-lane tile, one 4-lane step, a 2-float tail */
    c->d_ff = 50;
    c->d_inner = 28;
    c->d_state = 6;
    c->d_conv = 4;
    c->dt_rank = 5;
    c->block_size = 4;
    c->num_blocks = 64;
    c->chunk_size = 13;
    c->seed = 7;
}

engine_model *eng_model(const engine_config *c) {
    engine_model *m = NULL;
    char err[256];
    int rc = engine_create(c, &m, err, sizeof(err));
    CHECK_MSG(rc == 0, "engine_create: %d %s", rc, err);
    return m;
}

uint32_t *eng_tokens(uint32_t n, uint32_t vocab, uint32_t seed) {
    uint32_t *t = malloc((n ? n : 1) * sizeof(uint32_t));
    CHECK(t != NULL);
    uint64_t x = 0x9e3779b97f4a7c15ull * (seed + 1);
    for (uint32_t i = 0; i < n; i++) {
        t[i] = (uint32_t)(prng_next(&x) % vocab);
    }
    return t;
}

float *eng_full_logits_tok(const engine_config *c, const uint32_t *tok, uint32_t n) {
    engine_model *m = eng_model(c);
    engine_req *r;
    CHECK_EQ(engine_req_new(m, &r), 0);
    float *l = malloc(c->vocab * sizeof(float));
    CHECK(l != NULL);
    CHECK_EQ(engine_prefill(r, tok, n, l), 0);
    engine_req_free(r);
    engine_destroy(m);
    return l;
}

float *eng_full_logits(const engine_config *c, uint32_t n) {
    uint32_t *tok = eng_tokens(n, c->vocab, 1);
    float *l = eng_full_logits_tok(c, tok, n);
    free(tok);
    return l;
}

void eng_prefill_run(eng_run *a, const engine_config *c, uint32_t n) {
    a->m = eng_model(c);
    CHECK_EQ(engine_req_new(a->m, &a->r), 0);
    a->tok = eng_tokens(n, c->vocab, 1);
    a->n = n;
    a->logits = malloc(c->vocab * sizeof(float));
    CHECK_EQ(engine_prefill(a->r, a->tok, n, a->logits), 0);
}

void eng_run_free(eng_run *a) {
    engine_req_free(a->r);
    engine_destroy(a->m);
    free(a->tok);
    free(a->logits);
}

static void copy_page(engine_model *ma, engine_model *mb, int group, uint32_t rank, int32_t from,
                      int32_t to) {
    size_t pb = engine_page_bytes(ma, group, rank);
    CHECK_EQ(pb, engine_page_bytes(mb, group, rank));
    void *buf = malloc(pb);
    CHECK_EQ(engine_page_read(ma, group, rank, (uint32_t)from, buf), 0);
    CHECK_EQ(engine_page_write(mb, group, rank, (uint32_t)to, buf), 0);
    free(buf);
}

float *eng_resumed_logits_t(eng_run *a, const engine_config *c, uint32_t P, uint32_t n,
                            eng_tamper_fn fn, void *arg, eng_resumed *keep) {
    engine_model *mb = eng_model(c);
    uint32_t bt = engine_block_tokens(mb), nb = P / bt;
    CHECK_EQ(P % bt, 0);
    /* Another request holds a few blocks, so the copies land on different block ids. */
    engine_req *other, *rb;
    CHECK_EQ(engine_req_new(mb, &other), 0);
    CHECK_EQ(engine_req_reserve(other, 3 * bt), 0);
    CHECK_EQ(engine_req_mamba_slot(other, 0, 1) >= 0 || engine_num_groups(mb) == 1, 1);
    CHECK_EQ(engine_req_new(mb, &rb), 0);
    CHECK_EQ(engine_req_reserve(rb, P), 0);
    uint32_t na, nbb;
    const int32_t *ba = engine_req_blocks(a->r, &na), *bb = engine_req_blocks(rb, &nbb);
    CHECK(na >= nb && nbb == nb);
    for (uint32_t rank = 0; rank < engine_num_ranks(mb); rank++)
        for (uint32_t i = 0; i < nb; i++) {
            CHECK(ba[i] != bb[i]);
            copy_page(a->m, mb, ENGINE_GROUP_ATTN, rank, ba[i], bb[i]);
        }
    if (engine_num_groups(mb) == 2 && nb > 0) {
        int sa = engine_req_mamba_slot(a->r, nb - 1, 0);
        int sb = engine_req_mamba_slot(rb, nb - 1, 1);
        CHECK(sa >= 0 && sb >= 0);
        for (uint32_t rank = 0; rank < engine_num_ranks(mb); rank++)
            copy_page(a->m, mb, ENGINE_GROUP_MAMBA, rank, sa, sb);
    }
    engine_req_free(other);
    if (fn) fn(mb, rb, arg);
    CHECK_EQ(engine_req_resume(rb, P), 0);
    float *l = malloc(c->vocab * sizeof(float));
    CHECK_EQ(engine_prefill(rb, a->tok, n, l), 0);
    engine_req_stats st;
    engine_req_stats_get(rb, &st);
    CHECK_EQ(st.tokens_computed, n - P);
    if (keep) {
        keep->m = mb;
        keep->r = rb;
    } else {
        engine_req_free(rb);
        engine_destroy(mb);
    }
    return l;
}

float *eng_resumed_logits(eng_run *a, const engine_config *c, uint32_t P, uint32_t n,
                          eng_resumed *keep) {
    return eng_resumed_logits_t(a, c, P, n, NULL, NULL, keep);
}
