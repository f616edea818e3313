/*
 * test_etide.c — the reference engine through the connector (src/engine/etide.c), as vLLM
 * drives it. Engine instance A computes and saves a prompt; instance B, a second model with
 * the same weights, asks another prompt on the same document and loads the shared prefix.
 * Every served prompt's logits must equal a from-scratch recompute bit for bit — for
 * attention-only and hybrid models, with TP 2 and with DCP 2; a stored block damaged behind
 * the store's back must become a load error and a recompute, never a wrong answer; and a
 * store that dies must become warnings and recomputes.
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client/client.h"
#include "connector/config.h"
#include "connector/keys.h"
#include "engine/etide.h"
#include "harness.h"
#include "server_util.h"
#include "store/store.h"
#include "test_engine_util.h"

#define DOC 100 /* tokens of the shared document */
#define QUESTION 9
#define INTERVAL 16 /* tokens between stored Mamba snapshots */

typedef struct inst {
    engine_model *m;
    etide *e;
} inst;

static void inst_open(inst *in, const engine_config *c, tide_store *s) {
    in->m = eng_model(c);
    etide_options o = {.interval = INTERVAL};
    char err[512];
    int rc = etide_create(in->m, s, &o, &in->e, err, sizeof(err));
    CHECK_MSG(rc == 0, "etide_create: %d %s", rc, err);
}

static void inst_close(inst *in) {
    etide_destroy(in->e);
    engine_destroy(in->m);
}

/* The document (its own token stream), then question q's tokens. */
static uint32_t *prompt(const engine_config *c, uint32_t q) {
    uint32_t *doc = eng_tokens(DOC, c->vocab, 1000);
    uint32_t *qt = eng_tokens(QUESTION, c->vocab, 2000 + q);
    uint32_t *p = malloc((DOC + QUESTION) * sizeof(uint32_t));
    CHECK(p != NULL);
    memcpy(p, doc, DOC * sizeof(uint32_t));
    memcpy(p + DOC, qt, QUESTION * sizeof(uint32_t));
    free(doc);
    free(qt);
    return p;
}

/* Serve prompt q on an instance and check its logits against a fresh model's recompute. */
static void serve(inst *in, const engine_config *c, uint32_t q, etide_result *res) {
    char id[32];
    snprintf(id, sizeof(id), "req-%u", q);
    uint32_t *tok = prompt(c, q);
    float *l = malloc(c->vocab * sizeof(float));
    CHECK(l != NULL);
    int rc = etide_prefill(in->e, id, tok, DOC + QUESTION, l, res);
    CHECK_MSG(rc == 0, "etide_prefill %s: %d %s", id, rc, etide_errmsg(in->e));
    float *ref = eng_full_logits_tok(c, tok, DOC + QUESTION);
    CHECK_MSG(memcmp(l, ref, c->vocab * sizeof(float)) == 0,
              "%s: logits after hit %u (resumed at %u) differ from the recompute", id,
              res->hit_tokens, res->resumed_tokens);
    CHECK_EQ(res->resumed_tokens + res->computed_tokens, DOC + QUESTION);
    free(ref);
    free(l);
    free(tok);
}

static void small(engine_config *c, engine_preset p, uint32_t tp, uint32_t dcp) {
    eng_small(c, p);
    c->tp = tp;
    c->dcp = dcp;
}

/*
 * A saves question 0; B loads the document for question 1 (expect_hit tokens) and then
 * A's own prompt, whose hit stops short of the last token (expect_full).
 */
static void share_case(const engine_config *c, uint32_t expect_hit, uint32_t expect_full) {
    tide_store *s;
    CHECK_EQ(tide_open("mem://?capacity=64MiB", &s), 0);
    inst a, b;
    inst_open(&a, c, s);
    inst_open(&b, c, s);
    etide_result r;
    serve(&a, c, 0, &r);
    CHECK_EQ(r.hit_tokens, 0);
    CHECK(r.saved_objects > 0);
    CHECK_STR(r.warning, "");
    serve(&b, c, 1, &r);
    CHECK_EQ(r.hit_tokens, expect_hit);
    CHECK_EQ(r.resumed_tokens, expect_hit);
    CHECK_EQ(r.load_errors, 0);
    CHECK(r.loaded_objects > 0 && r.loaded_bytes > 0);
    CHECK_STR(r.warning, "");
    serve(&b, c, 0, &r);
    CHECK_EQ(r.hit_tokens, expect_full);
    CHECK_EQ(r.resumed_tokens, expect_full);
    inst_close(&a);
    inst_close(&b);
    tide_close(s);
}

TEST(etide_attention_load_is_bit_identical) {
    engine_config c;
    small(&c, ENGINE_PRESET_ATTENTION, 1, 1);
    share_case(&c, 100, 108); /* blocks of 4 tokens: the whole document; 108 of 109 */
}

TEST(etide_hybrid_load_is_bit_identical) {
    engine_config c;
    small(&c, ENGINE_PRESET_HYBRID, 1, 1);
    /* Snapshots every 16 tokens and at the replay boundary 108. */
    share_case(&c, 96, 108);
}

TEST(etide_tp2_load_is_bit_identical) {
    engine_config c;
    small(&c, ENGINE_PRESET_ATTENTION, 2, 1);
    share_case(&c, 100, 108);
    small(&c, ENGINE_PRESET_HYBRID, 2, 1);
    share_case(&c, 96, 108);
}

TEST(etide_dcp2_load_is_bit_identical) {
    engine_config c;
    small(&c, ENGINE_PRESET_ATTENTION, 1, 2); /* logical blocks of 8 tokens */
    share_case(&c, 96, 104);
    small(&c, ENGINE_PRESET_HYBRID, 1, 2); /* vLLM <= 0.28's reference rejected this one */
    share_case(&c, 96, 104);
    small(&c, ENGINE_PRESET_HYBRID, 2, 2);
    share_case(&c, 96, 104);
}

/* The generated configuration passes tide's validation. vLLM's reference up to 0.28 rejects
 * only the hybrid model under DCP, with its own message; from 0.29 on DCP is no longer
 * rejected (only PCP is), so the newest rules accept every case. */
TEST(etide_config_is_validated) {
    static const struct {
        engine_preset p;
        uint32_t tp, dcp;
        int reference_ok;
    } cases[] = {
        {ENGINE_PRESET_ATTENTION, 1, 1, 1}, {ENGINE_PRESET_HYBRID, 1, 1, 1},
        {ENGINE_PRESET_ATTENTION, 2, 2, 1}, {ENGINE_PRESET_HYBRID, 2, 1, 1},
        {ENGINE_PRESET_HYBRID, 1, 2, 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        engine_config c;
        small(&c, cases[i].p, cases[i].tp, cases[i].dcp);
        engine_model *m = eng_model(&c);
        for (uint32_t rank = 0; rank < engine_num_ranks(m); rank++) {
            char *json;
            CHECK_EQ(etide_config_json(m, rank, NULL, &json), 0);
            ccfg cfg;
            ccfg_errs errs;
            ccfg_errs_init(&errs);
            int rc = ccfg_parse_string(json, strlen(json), &cfg, &errs);
            if (rc == 0) rc = ccfg_check(&cfg, &errs);
            CHECK_MSG(rc == 0, "case %zu rank %u: %s\n%s", i, rank, errs.n ? errs.msg[0] : "",
                      json);
            CHECK_EQ(cfg.tp_rank, rank);
            CHECK_EQ(cfg.dcp_rank, rank % cases[i].dcp);
            CHECK_EQ(cfg.scheduler_block_size, engine_block_tokens(m));
            connector_verdict v;
            CHECK_EQ(connector_validate(&cfg, CONNECTOR_IMPL_TIDE, &v), 0);
            CHECK_EQ(connector_validate(&cfg, CONNECTOR_IMPL_REFERENCE, &v), 0);
            rc = connector_validate_reference(&cfg, CONNECTOR_RULES_SEED, &v);
            if (cases[i].reference_ok) {
                CHECK_EQ(rc, 0);
            } else {
                CHECK_EQ(rc, TIDE_EUNSUPPORTED);
                CHECK_CONTAINS(v.message, "PCP/DCP > 1 (pcp=1, dcp=2) with hybrid attention");
            }
            ccfg_free(&cfg);
            ccfg_errs_free(&errs);
            free(json);
        }
        engine_destroy(m);
    }
}

/* Flip one byte of the object holding block `block` of `group` on rank 0 of model c for
 * prompt q, inside the embedded store's pool. */
static void damage(tide_store *s, engine_model *m, const engine_config *c, uint32_t q, int group,
                   uint32_t end_token) {
    char *json;
    CHECK_EQ(etide_config_json(m, 0, &(etide_options){.interval = INTERVAL}, &json), 0);
    ccfg cfg;
    ccfg_errs errs;
    ccfg_errs_init(&errs);
    CHECK_EQ(ccfg_parse_string(json, strlen(json), &cfg, &errs), 0);
    CHECK_EQ(ccfg_check(&cfg, &errs), 0);
    uint32_t *tok = prompt(c, q);
    uint32_t hb = (uint32_t)cfg.hash_block_size;
    uint8_t h[64 * TIDE_HASH_BYTES];
    CHECK(end_token / hb <= 64);
    CHECK_EQ(tide_prefix_hashes(TIDE_HASH_XXH3, tok, end_token, hb, NULL, 0, h, 64),
             end_token / hb);
    connector_ns ns = connector_own_ns(&cfg, (size_t)group);
    char key[TIDE_KEY_MAX + 1];
    int klen = connector_key(&cfg, (size_t)group, &ns, h + (end_token / hb - 1) * TIDE_HASH_BYTES,
                             TIDE_HASH_BYTES, key, sizeof(key));
    CHECK(klen > 0);
    store *st = *(store **)s->impl;
    store_ref ref;
    CHECK_MSG(store_pin(st, key, (size_t)klen, 0, &ref) == 0, "not stored: %s", key);
    store_base(st)[ref.offset + ref.len / 2] ^= 0x20;
    CHECK_EQ(store_unpin(st, ref.id), 0);
    free(tok);
    ccfg_free(&cfg);
    ccfg_errs_free(&errs);
    free(json);
}

TEST(etide_damaged_attention_block_is_recomputed) {
    engine_config c;
    small(&c, ENGINE_PRESET_ATTENTION, 1, 1);
    tide_store *s;
    CHECK_EQ(tide_open("mem://?capacity=64MiB", &s), 0);
    inst a, b, d;
    inst_open(&a, &c, s);
    inst_open(&b, &c, s);
    inst_open(&d, &c, s);
    etide_result r;
    serve(&a, &c, 0, &r);
    damage(s, a.m, &c, 0, 0, 24); /* block 5: tokens 20..23 */
    serve(&b, &c, 1, &r);         /* the logits are checked inside */
    CHECK_EQ(r.hit_tokens, 100);
    CHECK_EQ(r.load_errors, 1);
    CHECK_EQ(r.resumed_tokens, 20);
    CHECK_CONTAINS(r.warning, "1 block failed to load");
    tide_stats st;
    CHECK_EQ(tide_stats_get(s, &st, sizeof(st)), 0);
    CHECK_EQ(st.checksum_errors, 1);
    /* B saved the damaged block again: the next engine loads everything cleanly. */
    serve(&d, &c, 2, &r);
    CHECK_EQ(r.resumed_tokens, 100);
    CHECK_EQ(r.load_errors, 0);
    CHECK_STR(r.warning, "");
    inst_close(&a);
    inst_close(&b);
    inst_close(&d);
    tide_close(s);
}

TEST(etide_damaged_hybrid_objects_are_recomputed) {
    engine_config c;
    small(&c, ENGINE_PRESET_HYBRID, 2, 1);
    for (int group = 0; group < 2; group++) {
        tide_store *s;
        CHECK_EQ(tide_open("mem://?capacity=64MiB", &s), 0);
        inst a, b;
        inst_open(&a, &c, s);
        inst_open(&b, &c, s);
        etide_result r;
        serve(&a, &c, 0, &r);
        /* group 0: attention block 3 (tokens 12..15); group 1: the snapshot at 96 */
        damage(s, a.m, &c, 0, group, group ? 96 : 16);
        serve(&b, &c, 1, &r);
        CHECK_EQ(r.hit_tokens, 96);
        CHECK_EQ(r.load_errors, 1);
        CHECK_EQ(r.resumed_tokens, 0); /* the only snapshot loaded was at 96 */
        CHECK_CONTAINS(r.warning, "recomputing from token 0");
        inst_close(&a);
        inst_close(&b);
        tide_close(s);
    }
}

/* A tided that dies between two engines' prompts, reached over TCP or over its Unix socket
 * (shared pool): B's lookup and saves fail, B warns and computes, and its answer is still
 * right. */
TEST_T(etide_store_killed_is_a_recompute, 120) {
    engine_config c;
    small(&c, ENGINE_PRESET_HYBRID, 1, 1);
    for (int over_unix = 0; over_unix < 2; over_unix++) {
        test_server ts;
        char sock[300], surl[400];
        snprintf(sock, sizeof(sock), "%s/tide.sock", test_tmpdir());
        const char *extra[] = {"--unix", sock, NULL};
        server_start(&ts, over_unix ? extra : NULL);
        if (over_unix)
            snprintf(surl, sizeof(surl), "unix://%s?timeout_ms=2000", sock);
        else
            snprintf(surl, sizeof(surl), "%s?timeout_ms=2000", ts.url);
        test_context = surl;
        tide_store *sa, *sb;
        CHECK_EQ(tide_open(surl, &sa), 0);
        CHECK_EQ(tide_open(surl, &sb), 0);
        inst a, b;
        inst_open(&a, &c, sa);
        inst_open(&b, &c, sb);
        etide_result r;
        serve(&a, &c, 0, &r);
        CHECK(r.saved_objects > 0);
        serve(&b, &c, 1, &r); /* the store is up: a hit */
        CHECK_EQ(r.resumed_tokens, 96);
        server_stop(&ts, SIGKILL);
        serve(&b, &c, 2, &r);
        CHECK_EQ(r.lookup_failed, 1);
        CHECK_EQ(r.hit_tokens, 0);
        CHECK_CONTAINS(r.warning, "lookup failed");
        CHECK_CONTAINS(r.warning, "saving failed");
        inst_close(&a);
        inst_close(&b);
        tide_close(sa);
        tide_close(sb);
        unlink(sock);
    }
}

/* No store at all (it could not be opened): every prompt is computed, with a warning. */
TEST(etide_without_store_computes) {
    engine_config c;
    small(&c, ENGINE_PRESET_HYBRID, 1, 1);
    inst a;
    inst_open(&a, &c, NULL);
    etide_result r;
    serve(&a, &c, 0, &r);
    CHECK_EQ(r.computed_tokens, DOC + QUESTION);
    CHECK_CONTAINS(r.warning, "no store");
    inst_close(&a);
}
