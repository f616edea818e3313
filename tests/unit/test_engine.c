/*
 * test_engine.c — the reference engine: configuration, determinism, chunked prefill and
 * resume at block boundaries bit for bit, block stacks, snapshots, greedy decoding.
 * Ranks (TP/DCP) and corruption are in test_engine_ranks.c. Logits are compared with
 * memcmp, never with a tolerance. Models are tiny so the suite also runs in seconds under
 * the sanitizers; odd sizes make every kernel take its tail paths.
 */
#include <errno.h>

#include "engine/engine.h"
#include "harness.h"
#include "test_engine_util.h"

/* Break one field of a valid small configuration; returns what was broken. */
static const char *break_config(engine_config *c, int k) {
    switch (k) {
    case 0:
        c->n_kv_heads = 3;
        return "n_q_heads not a multiple of n_kv_heads";
    case 1:
        c->head_dim = 7;
        return "odd head_dim";
    case 2:
        c->tp = 3;
        return "tp not dividing the heads";
    case 3:
        c->layout = "MAXM";
        return "bad layout letter";
    case 4:
        c->layout = "MMM";
        return "no attention layer";
    case 5:
        c->block_size = 0;
        return "block_size 0";
    case 6:
        c->vocab = 1;
        return "vocab 1";
    case 7:
        c->tp = 4;
        c->d_inner = 18;
        return "tp not dividing d_inner";
    case 8:
        c->chunk_size = 0;
        return "chunk_size 0";
    case 9:
        c->dcp = 0;
        return "dcp 0";
    case 10:
        c->head_dim = 512;
        return "head_dim too big";
    default:
        return NULL;
    }
}

TEST(engine_config_rejects) {
    for (int k = 0;; k++) {
        engine_config c;
        eng_small(&c, ENGINE_PRESET_HYBRID);
        const char *what = break_config(&c, k);
        if (!what) break;
        test_context = what;
        engine_model *m = (engine_model *)&c;
        char err[200] = "";
        CHECK_EQ(engine_create(&c, &m, err, sizeof(err)), -EINVAL);
        CHECK(m == NULL);
        CHECK(err[0] != 0);
    }
    test_context = NULL;
    engine_preset p;
    CHECK_EQ(engine_preset_parse("hybrid", &p), 0);
    CHECK_EQ(p, ENGINE_PRESET_HYBRID);
    CHECK_EQ(engine_preset_parse("attention", &p), 0);
    CHECK_EQ(p, ENGINE_PRESET_ATTENTION);
    CHECK_EQ(engine_preset_parse("mamba", &p), -EINVAL);
}

TEST(engine_presets_and_layout) {
    engine_config c;
    engine_config_init(&c, ENGINE_PRESET_HYBRID);
    c.num_blocks = 64; /* keep the default dimensions, shrink the stacks */
    engine_model *m = eng_model(&c);
    CHECK_STR(engine_layout(m), "MAMA");
    CHECK_EQ(engine_num_groups(m), 2);
    engine_destroy(m);
    engine_config_init(&c, ENGINE_PRESET_ATTENTION);
    c.num_blocks = 64;
    m = eng_model(&c);
    CHECK_STR(engine_layout(m), "AAAA");
    CHECK_EQ(engine_num_groups(m), 1);
    CHECK_EQ(engine_num_regions(m, ENGINE_GROUP_MAMBA, 0), 0);
    CHECK_EQ(engine_page_bytes(m, ENGINE_GROUP_MAMBA, 0), 0);
    engine_destroy(m);
    eng_small(&c, ENGINE_PRESET_HYBRID);
    c.layout = "AMMAM";
    m = eng_model(&c);
    CHECK_STR(engine_layout(m), "AMMAM");
    CHECK_EQ(engine_config_of(m)->n_layers, 5);
    CHECK_EQ(engine_num_regions(m, ENGINE_GROUP_ATTN, 0), 2);
    engine_destroy(m);
}

/* Same configuration, two models (as two processes would build them): same logits. */
TEST(engine_logits_deterministic) {
    for (int p = 0; p < 2; p++) {
        engine_config c;
        eng_small(&c, (engine_preset)p);
        float *a = eng_full_logits(&c, 53), *b = eng_full_logits(&c, 53);
        CHECK(memcmp(a, b, c.vocab * sizeof(float)) == 0);
        int finite = 1, spread = 0;
        for (uint32_t i = 0; i < c.vocab; i++) {
            finite &= a[i] == a[i] && a[i] < 1e30f && a[i] > -1e30f;
            spread |= a[i] != a[0];
        }
        CHECK(finite && spread);
        c.seed++;
        float *d = eng_full_logits(&c, 53);
        CHECK(memcmp(a, d, c.vocab * sizeof(float)) != 0);
        free(a);
        free(b);
        free(d);
    }
}

/* The prompt's logits do not depend on the chunk size, for both presets. */
TEST(engine_chunked_equals_unchunked) {
    const uint32_t chunks[] = {1, 2, 3, 4, 5, 7, 16, 33};
    const uint32_t n = 61;
    for (int p = 0; p < 2; p++) {
        engine_config c;
        eng_small(&c, (engine_preset)p);
        c.chunk_size = 1024;
        float *whole = eng_full_logits(&c, n);
        for (size_t i = 0; i < sizeof(chunks) / sizeof(chunks[0]); i++) {
            c.chunk_size = chunks[i];
            float *l = eng_full_logits(&c, n);
            CHECK_MSG(memcmp(whole, l, c.vocab * sizeof(float)) == 0, "preset %d chunk %u differs",
                      p, chunks[i]);
            free(l);
        }
        free(whole);
    }
}

/* A prompt fed in several prefill calls (each ending anywhere) equals one call. */
TEST(engine_prefill_in_pieces) {
    engine_config c;
    eng_small(&c, ENGINE_PRESET_HYBRID);
    const uint32_t n = 45;
    float *whole = eng_full_logits(&c, n);
    uint32_t *tok = eng_tokens(n, c.vocab, 1);
    engine_model *m = eng_model(&c);
    engine_req *r;
    CHECK_EQ(engine_req_new(m, &r), 0);
    float *l = malloc(c.vocab * sizeof(float));
    const uint32_t cuts[] = {1, 9, 10, 23, 40, n};
    for (size_t i = 0; i < sizeof(cuts) / sizeof(cuts[0]); i++)
        CHECK_EQ(engine_prefill(r, tok, cuts[i], l), 0);
    CHECK_EQ(engine_req_pos(r), n);
    CHECK(memcmp(whole, l, c.vocab * sizeof(float)) == 0);
    /* Nothing left to compute is an error, not a silent success. */
    CHECK_EQ(engine_prefill(r, tok, n, l), -EINVAL);
    engine_req_stats st;
    engine_req_stats_get(r, &st);
    CHECK_EQ(st.tokens_computed, n);
    CHECK(st.compute_ns > 0);
    free(l);
    free(tok);
    free(whole);
    engine_req_free(r);
    engine_destroy(m);
}

/*
 * Resume at every block boundary from KV pages and a Mamba snapshot copied (as a store
 * round trip would) into a second model's fresh blocks: logits equal the full recompute.
 */
TEST(engine_resume_equals_recompute) {
    for (int p = 0; p < 2; p++) {
        engine_config c;
        eng_small(&c, (engine_preset)p);
        c.chunk_size = 6;
        const uint32_t n = 58;
        eng_run a;
        eng_prefill_run(&a, &c, n);
        uint32_t bt = engine_block_tokens(a.m);
        for (uint32_t P = bt; P < n; P += bt) {
            test_context = p ? "attention" : "hybrid";
            float *l = eng_resumed_logits(&a, &c, P, n, NULL);
            CHECK_MSG(memcmp(a.logits, l, c.vocab * sizeof(float)) == 0, "resume at %u", P);
            free(l);
        }
        eng_run_free(&a);
    }
}

/* A request can also go back to one of its own boundaries and recompute from there. */
TEST(engine_rewind_to_own_snapshot) {
    engine_config c;
    eng_small(&c, ENGINE_PRESET_HYBRID);
    const uint32_t n = 30;
    eng_run a;
    eng_prefill_run(&a, &c, n);
    float *l = malloc(c.vocab * sizeof(float));
    CHECK_EQ(engine_req_resume(a.r, 12), 0);
    CHECK_EQ(engine_req_pos(a.r), 12);
    CHECK_EQ(engine_prefill(a.r, a.tok, n, l), 0);
    CHECK(memcmp(a.logits, l, c.vocab * sizeof(float)) == 0);
    CHECK_EQ(engine_req_resume(a.r, 0), 0);
    CHECK_EQ(engine_prefill(a.r, a.tok, n, l), 0);
    CHECK(memcmp(a.logits, l, c.vocab * sizeof(float)) == 0);
    free(l);
    eng_run_free(&a);
}

TEST(engine_resume_errors) {
    engine_config c;
    eng_small(&c, ENGINE_PRESET_HYBRID);
    engine_model *m = eng_model(&c);
    engine_req *r;
    CHECK_EQ(engine_req_new(m, &r), 0);
    uint32_t bt = engine_block_tokens(m);
    CHECK_EQ(engine_req_resume(r, bt + 1), -EINVAL); /* not a boundary */
    CHECK_EQ(engine_req_resume(r, bt), -ENOENT);     /* no blocks */
    CHECK_EQ(engine_req_reserve(r, 2 * bt), 0);
    CHECK_EQ(engine_req_resume(r, 2 * bt), -ENOENT); /* no snapshot at block 1 */
    CHECK_EQ(engine_req_mamba_slot(r, 1, 0), -ENOENT);
    CHECK(engine_req_mamba_slot(r, 1, 1) >= 0);
    CHECK_EQ(engine_req_resume(r, 2 * bt), 0);
    CHECK_EQ(engine_req_pos(r), 2 * bt);
    /* A hit covering the whole prompt leaves nothing to compute: the caller must cut it. */
    uint32_t *tok = eng_tokens(2 * bt, c.vocab, 1);
    CHECK_EQ(engine_prefill(r, tok, 2 * bt, NULL), -EINVAL);
    uint32_t bad = c.vocab;
    CHECK_EQ(engine_decode(r, bad, NULL), -EINVAL);
    free(tok);
    engine_req_free(r);
    engine_destroy(m);
}

TEST(engine_block_stack) {
    engine_config c;
    eng_small(&c, ENGINE_PRESET_HYBRID);
    c.num_blocks = 8;
    c.mamba_slots = 3;
    engine_model *m = eng_model(&c);
    uint32_t bt = engine_block_tokens(m);
    CHECK_EQ(engine_blocks_total(m, ENGINE_GROUP_ATTN), 8);
    CHECK_EQ(engine_blocks_total(m, ENGINE_GROUP_MAMBA), 3);
    engine_req *a, *b;
    CHECK_EQ(engine_req_new(m, &a), 0);
    CHECK_EQ(engine_req_new(m, &b), 0);
    CHECK_EQ(engine_req_reserve(a, 5 * bt - 1), 0);
    CHECK_EQ(engine_blocks_free(m, ENGINE_GROUP_ATTN), 3);
    CHECK_EQ(engine_req_reserve(b, 4 * bt), -ENOSPC);
    uint32_t na, nb;
    const int32_t *ba = engine_req_blocks(a, &na);
    const int32_t *bb = engine_req_blocks(b, &nb);
    CHECK_EQ(na, 5);
    CHECK_EQ(nb, 3);
    for (uint32_t i = 0; i < na; i++)
        for (uint32_t j = 0; j < nb; j++)
            CHECK(ba[i] != bb[j]);
    engine_req_free(b);
    CHECK_EQ(engine_blocks_free(m, ENGINE_GROUP_ATTN), 3);
    /* Three slots: a prompt of 4 blocks wants 4 snapshots and fails before computing. */
    CHECK_EQ(engine_req_new(m, &b), 0);
    uint32_t *tok = eng_tokens(3 * bt, c.vocab, 1);
    CHECK_EQ(engine_prefill(b, tok, 3 * bt, NULL), 0);
    CHECK_EQ(engine_blocks_free(m, ENGINE_GROUP_MAMBA), 0);
    engine_req *d;
    CHECK_EQ(engine_req_new(m, &d), 0);
    CHECK_EQ(engine_prefill(d, tok, bt, NULL), -ENOSPC);
    CHECK_EQ(engine_req_pos(d), 0);
    engine_req_set_snapshot_every(d, 0);
    CHECK_EQ(engine_prefill(d, tok, bt, NULL), -ENOSPC); /* no attention blocks left */
    engine_req_free(a);
    CHECK_EQ(engine_prefill(d, tok, bt, NULL), 0);
    engine_req_free(b);
    engine_req_free(d);
    CHECK_EQ(engine_blocks_free(m, ENGINE_GROUP_ATTN), 8);
    CHECK_EQ(engine_blocks_free(m, ENGINE_GROUP_MAMBA), 3);
    free(tok);
    engine_destroy(m);
}

TEST(engine_snapshot_interval) {
    engine_config c;
    eng_small(&c, ENGINE_PRESET_HYBRID);
    engine_model *m = eng_model(&c);
    engine_req *r;
    CHECK_EQ(engine_req_new(m, &r), 0);
    engine_req_set_snapshot_every(r, 3);
    uint32_t bt = engine_block_tokens(m), n = 7 * bt + 2, ns;
    uint32_t *tok = eng_tokens(n, c.vocab, 1);
    CHECK_EQ(engine_prefill(r, tok, n, NULL), 0);
    const int32_t *slots = engine_req_mamba_slots(r, &ns);
    CHECK_EQ(ns, 6);
    for (uint32_t i = 0; i < ns; i++)
        CHECK_EQ(slots[i] >= 0, (i + 1) % 3 == 0);
    free(tok);
    engine_req_free(r);
    engine_destroy(m);
}

/* Region descriptions add up, and one page is exactly what page_read gathers. */
TEST(engine_regions_layout) {
    engine_config c;
    eng_small(&c, ENGINE_PRESET_HYBRID);
    c.tp = 2;
    c.dcp = 2;
    engine_model *m = eng_model(&c);
    CHECK_EQ(engine_num_ranks(m), 4);
    CHECK_EQ(engine_block_tokens(m), c.block_size * 2);
    for (uint32_t rank = 0; rank < 4; rank++) {
        size_t total = 0;
        engine_region rg;
        for (uint32_t i = 0; i < engine_num_regions(m, ENGINE_GROUP_ATTN, rank); i++) {
            CHECK_EQ(engine_region_get(m, ENGINE_GROUP_ATTN, rank, i, &rg), 0);
            CHECK_EQ(rg.num_segments, 2);
            CHECK_EQ(rg.num_blocks, c.num_blocks);
            /* block_size tokens x (n_kv_heads / tp) heads x head_dim floats */
            CHECK_EQ(rg.block_len, c.block_size * (c.n_kv_heads / 2) * c.head_dim * 4);
            CHECK_EQ(rg.segment_stride, rg.num_blocks * rg.block_len);
            CHECK_EQ(rg.nbytes, 2 * rg.segment_stride);
            total += 2 * rg.block_len;
        }
        CHECK_EQ(engine_page_bytes(m, ENGINE_GROUP_ATTN, rank), total);
        CHECK_EQ(engine_region_get(m, ENGINE_GROUP_ATTN, rank, 2, &rg), -EINVAL);
        CHECK_EQ(engine_num_regions(m, ENGINE_GROUP_MAMBA, rank), 1);
        CHECK_EQ(engine_region_get(m, ENGINE_GROUP_MAMBA, rank, 0, &rg), 0);
        CHECK_EQ(rg.num_segments, 1);
        CHECK_EQ(rg.num_blocks, c.mamba_slots ? c.mamba_slots : c.num_blocks);
        /* 2 Mamba layers x (d_inner / tp) channels x (d_conv - 1 + d_state) floats */
        CHECK_EQ(rg.block_len, 2 * (c.d_inner / 2) * (c.d_conv - 1 + c.d_state) * 4);
        CHECK_EQ(engine_page_bytes(m, ENGINE_GROUP_MAMBA, rank), rg.block_len);
    }
    CHECK_EQ(engine_num_regions(m, ENGINE_GROUP_ATTN, 4), 0);
    char buf[8];
    CHECK_EQ(engine_page_read(m, ENGINE_GROUP_ATTN, 4, 0, buf), -EINVAL);
    CHECK_EQ(engine_page_read(m, ENGINE_GROUP_ATTN, 0, c.num_blocks, buf), -EINVAL);
    CHECK_EQ(engine_page_read(m, 2, 0, 0, buf), -EINVAL);

    /* A prefill writes exactly its blocks: used pages are non-zero, others stay zero. */
    engine_req *r;
    CHECK_EQ(engine_req_new(m, &r), 0);
    uint32_t n = 3 * engine_block_tokens(m), nb;
    uint32_t *tok = eng_tokens(n, c.vocab, 1);
    CHECK_EQ(engine_prefill(r, tok, n, NULL), 0);
    const int32_t *blocks = engine_req_blocks(r, &nb);
    CHECK_EQ(nb, 3);
    size_t pb = engine_page_bytes(m, ENGINE_GROUP_ATTN, 0);
    unsigned char *page = malloc(pb);
    for (uint32_t rank = 0; rank < 4; rank++)
        for (uint32_t b = 0; b < 6; b++) {
            CHECK_EQ(engine_page_read(m, ENGINE_GROUP_ATTN, rank, b, page), 0);
            int used = 0, zero = 1;
            for (uint32_t i = 0; i < nb; i++)
                used |= blocks[i] == (int32_t)b;
            for (size_t i = 0; i < pb; i++)
                zero &= page[i] == 0;
            CHECK_MSG(zero == !used, "rank %u block %u", rank, b);
        }
    free(page);
    free(tok);
    engine_req_free(r);
    engine_destroy(m);
}

/* Greedy decoding gives the same tokens every time, and the same after a resume. */
TEST(engine_greedy_decode_deterministic) {
    for (int p = 0; p < 2; p++) {
        engine_config c;
        eng_small(&c, (engine_preset)p);
        const uint32_t n = 21, gen = 12;
        uint32_t out[2][12];
        uint32_t *tok = eng_tokens(n, c.vocab, 1);
        for (int k = 0; k < 2; k++) {
            engine_model *m = eng_model(&c);
            engine_req *r;
            CHECK_EQ(engine_req_new(m, &r), 0);
            CHECK_EQ(engine_generate(r, tok, n, out[k], gen), 0);
            CHECK_EQ(engine_req_pos(r), n + gen - 1);
            engine_req_free(r);
            engine_destroy(m);
        }
        CHECK(memcmp(out[0], out[1], sizeof(out[0])) == 0);
        int varied = 0;
        for (uint32_t i = 1; i < gen; i++)
            varied |= out[0][i] != out[0][0];
        CHECK(varied);

        /* Resume at a boundary in a second model, then decode: the same tokens. */
        eng_run a;
        eng_prefill_run(&a, &c, n);
        CHECK_EQ(engine_argmax(a.logits, c.vocab), out[0][0]);
        uint32_t P = engine_block_tokens(a.m) * 3;
        eng_resumed kb;
        float *l = eng_resumed_logits(&a, &c, P, n, &kb);
        engine_req *rb = kb.r;
        uint32_t t = engine_argmax(l, c.vocab);
        for (uint32_t i = 0; i < gen; i++) {
            CHECK_EQ(t, out[0][i]);
            CHECK_EQ(engine_decode(rb, t, l), 0);
            t = engine_argmax(l, c.vocab);
        }
        free(l);
        engine_req_free(rb);
        engine_destroy(kb.m);
        eng_run_free(&a);
        free(tok);
    }
}

/* Snapshots taken during decode are as good as those taken during prefill. */
TEST(engine_snapshot_during_decode) {
    engine_config c;
    eng_small(&c, ENGINE_PRESET_HYBRID);
    uint32_t bt = c.block_size, n = 2 * bt + 1, steps = 2 * bt;
    uint32_t *tok = eng_tokens(n + steps, c.vocab, 1);
    engine_model *m = eng_model(&c);
    engine_req *r;
    CHECK_EQ(engine_req_new(m, &r), 0);
    CHECK_EQ(engine_prefill(r, tok, n, NULL), 0);
    for (uint32_t i = 0; i < steps; i++)
        CHECK_EQ(engine_decode(r, tok[n + i], NULL), 0);
    /* The whole sequence as one prompt, from scratch and from the decode-time snapshot. */
    uint32_t total = n + steps;
    float *full = eng_full_logits_tok(&c, tok, total);
    eng_run a = {.m = m, .r = r, .tok = tok, .n = total};
    float *l = eng_resumed_logits(&a, &c, 4 * bt, total, NULL);
    CHECK(memcmp(full, l, c.vocab * sizeof(float)) == 0);
    free(l);
    free(full);
    free(tok);
    engine_req_free(r);
    engine_destroy(m);
}

/* The default dimensions (no kernel tails, full 16-lane value tiles, query tiles of 16):
 * chunked, unchunked and resumed give the same bits there too. */
TEST_T(engine_default_dims_bit_exact, 120) {
    for (int p = 0; p < 2; p++) {
        engine_config c;
        engine_config_init(&c, (engine_preset)p);
        c.num_blocks = 40;
        const uint32_t n = 150;
        float *whole = eng_full_logits(&c, n);
        c.chunk_size = 37;
        eng_run a;
        eng_prefill_run(&a, &c, n);
        CHECK(memcmp(whole, a.logits, c.vocab * sizeof(float)) == 0);
        c.chunk_size = 512;
        float *l = eng_resumed_logits(&a, &c, 128, n, NULL);
        CHECK(memcmp(whole, l, c.vocab * sizeof(float)) == 0);
        free(l);
        free(whole);
        eng_run_free(&a);
    }
}
