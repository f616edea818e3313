/*
 * test_engine_ranks.c — simulated ranks and damaged pages. TP and DCP split the KV cache
 * (and TP the Mamba state) across per-rank regions, yet the logits equal one rank's bit for
 * bit; resuming from copied per-rank pages equals a recompute; and a single damaged byte
 * in any page that a later token reads changes the logits, so a load that goes wrong
 * cannot pass unnoticed by a bit-exact comparison.
 */
#include <errno.h>

#include "harness.h"
#include "test_engine_util.h"

static const struct { uint32_t tp, dcp; } rank_cases[] = {{2, 1}, {1, 2}, {2, 2}, {4, 1}, {1, 3}};

TEST(engine_ranks_same_logits) {
    for (int p = 0; p < 2; p++) {
        engine_config c;
        eng_small(&c, (engine_preset)p);
        const uint32_t n = 47;
        float *one = eng_full_logits(&c, n);
        for (size_t i = 0; i < sizeof(rank_cases) / sizeof(rank_cases[0]); i++) {
            c.tp = rank_cases[i].tp;
            c.dcp = rank_cases[i].dcp;
            c.chunk_size = 5 + (uint32_t)i;
            float *l = eng_full_logits(&c, n);
            CHECK_MSG(memcmp(one, l, c.vocab * sizeof(float)) == 0, "preset %d tp %u dcp %u", p,
                      c.tp, c.dcp);
            free(l);
        }
        free(one);
    }
}

TEST(engine_ranks_resume_equals_recompute) {
    for (int p = 0; p < 2; p++)
        for (size_t i = 0; i < sizeof(rank_cases) / sizeof(rank_cases[0]); i++) {
            engine_config c;
            eng_small(&c, (engine_preset)p);
            c.tp = rank_cases[i].tp;
            c.dcp = rank_cases[i].dcp;
            const uint32_t n = 50;
            eng_run a;
            eng_prefill_run(&a, &c, n);
            uint32_t bt = engine_block_tokens(a.m);
            for (uint32_t P = bt; P < n; P += 2 * bt) {
                float *l = eng_resumed_logits(&a, &c, P, n, NULL);
                CHECK_MSG(memcmp(a.logits, l, c.vocab * sizeof(float)) == 0,
                          "preset %d tp %u dcp %u resume at %u", p, c.tp, c.dcp, P);
                free(l);
            }
            eng_run_free(&a);
        }
}

/* Which byte to damage: in logical block `block` of the request, in one rank's page. */
typedef struct damage {
    int group;
    uint32_t rank, block;
    size_t byte; /* offset inside the gathered page */
} damage;

static void tamper(engine_model *m, engine_req *r, void *arg) {
    const damage *d = arg;
    uint32_t n;
    int32_t id;
    if (d->group == ENGINE_GROUP_ATTN) {
        const int32_t *blocks = engine_req_blocks(r, &n);
        CHECK(d->block < n);
        id = blocks[d->block];
    } else {
        id = engine_req_mamba_slot(r, d->block, 0);
        CHECK(id >= 0);
    }
    size_t pb = engine_page_bytes(m, d->group, d->rank);
    CHECK(d->byte < pb);
    unsigned char *page = malloc(pb);
    CHECK_EQ(engine_page_read(m, d->group, d->rank, (uint32_t)id, page), 0);
    page[d->byte] ^= 0x40; /* an exponent bit of a float: a large change */
    CHECK_EQ(engine_page_write(m, d->group, d->rank, (uint32_t)id, page), 0);
    free(page);
}

/* Resume at P with one damaged byte; the logits must differ from the recompute. */
static void check_damage_shows(const engine_config *c, const damage *d, uint32_t P, uint32_t n,
                               const char *what) {
    test_context = what;
    eng_run a;
    eng_prefill_run(&a, c, n);
    float *ok = eng_resumed_logits(&a, c, P, n, NULL);
    CHECK(memcmp(a.logits, ok, c->vocab * sizeof(float)) == 0);
    damage dd = *d;
    float *bad = eng_resumed_logits_t(&a, c, P, n, tamper, &dd, NULL);
    CHECK_MSG(memcmp(a.logits, bad, c->vocab * sizeof(float)) != 0, "%s: no effect", what);
    free(ok);
    free(bad);
    eng_run_free(&a);
}

TEST(engine_corrupt_page_changes_logits) {
    engine_config c;
    eng_small(&c, ENGINE_PRESET_HYBRID);
    uint32_t bt = c.block_size, P = 4 * bt, n = P + 3;
    size_t kv_block = (size_t)bt * c.n_kv_heads * c.head_dim * 4; /* one segment, one rank */
    /* Page = [layer 1: K, V][layer 3: K, V]. */
    damage k0 = {ENGINE_GROUP_ATTN, 0, 0, 3};
    check_damage_shows(&c, &k0, P, n, "K of the first token, first attention layer");
    damage v_last = {ENGINE_GROUP_ATTN, 0, 3, 3 * kv_block + kv_block - 1};
    check_damage_shows(&c, &v_last, P, n, "V of the last cached token, second layer");
    damage mid = {ENGINE_GROUP_ATTN, 0, 2, kv_block + kv_block / 2 + 3};
    check_damage_shows(&c, &mid, P, n, "V, first layer, middle of a page");
    engine_model *m = eng_model(&c);
    size_t slot = engine_page_bytes(m, ENGINE_GROUP_MAMBA, 0);
    engine_destroy(m);
    damage conv = {ENGINE_GROUP_MAMBA, 0, 3, 3};
    check_damage_shows(&c, &conv, P, n, "conv state in the Mamba snapshot");
    damage ssm = {ENGINE_GROUP_MAMBA, 0, 3, slot - 1};
    check_damage_shows(&c, &ssm, P, n, "SSM state of the last Mamba layer");

    engine_config a;
    eng_small(&a, ENGINE_PRESET_ATTENTION);
    check_damage_shows(&a, &k0, P, n, "attention preset, K of the first token");
}

/* Every rank's region is really read: damage on any rank shows in the logits. */
TEST(engine_corrupt_each_rank_changes_logits) {
    for (size_t i = 0; i < sizeof(rank_cases) / sizeof(rank_cases[0]); i++) {
        engine_config c;
        eng_small(&c, ENGINE_PRESET_HYBRID);
        c.tp = rank_cases[i].tp;
        c.dcp = rank_cases[i].dcp;
        uint32_t bt = c.block_size * c.dcp, P = 3 * bt, n = P + 2;
        for (uint32_t rank = 0; rank < c.tp * c.dcp; rank++) {
            char what[96];
            snprintf(what, sizeof(what), "tp %u dcp %u: KV on rank %u", c.tp, c.dcp, rank);
            damage d = {ENGINE_GROUP_ATTN, rank, 1, 7};
            check_damage_shows(&c, &d, P, n, what);
            /* Mamba state is read from each TP shard's dcp_rank 0 copy. */
            if (rank % c.dcp == 0) {
                snprintf(what, sizeof(what), "tp %u dcp %u: Mamba on rank %u", c.tp, c.dcp, rank);
                damage s = {ENGINE_GROUP_MAMBA, rank, 2, 11};
                check_damage_shows(&c, &s, P, n, what);
            }
        }
    }
}
