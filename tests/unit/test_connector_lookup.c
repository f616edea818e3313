/*
 * test_connector_lookup.c — the scheduler's hit length: the hit search on presence maps,
 * and lookups over a real mem:// store for full attention, sliding window, hybrid Mamba
 * (block size equal to and different from the cache block size), partial and whole-prompt
 * hits, and every kind of lookup namespace (TP with its replication factor, PCP, DCP, PP,
 * MLA): a hit needs every namespace.
 *
 * Cases reproduced from vLLM's tests/v1/kv_connector/unit/test_mooncake_store_*.py are
 * marked "vLLM:" with the test they follow.
 */
#include <errno.h>

#include "connector_rig.h"

static const size_t HL = 32; /* sha256-sized hashes, as vLLM's default */

static tide_store *mem_store(void) {
    tide_store *st = NULL;
    CHECK_EQ(tide_open("mem://?capacity=64MiB", &st), 0);
    return st;
}

/* ---- the hit search on presence maps ---------------------------------------------------- */

typedef struct pmap {
    connector_presence p;
    uint8_t bits[4][64];
} pmap;

static void pmap_init(pmap *m, const ccfg *cfg, int64_t bound) {
    memset(m, 0, sizeof(*m));
    for (size_t g = 0; g < cfg->ngroups; g++) {
        m->p.present[g] = m->bits[g];
        int64_t unit = cfg->groups[g].kind == CONNECTOR_SPEC_MAMBA ? cfg->scheduler_block_size
                                                                   : cfg->groups[g].eff_block_size;
        m->p.n[g] = (size_t)(bound / unit);
    }
}

TEST(connector_hit_search_fixed_point) {
    tide_store *st = mem_store();
    tide_connector *c = rig_open(rig_doc(16, "\"mamba_cache_mode\":\"align\"", "", "kv_both", "",
                                         R_FULL(16) "," R_SWA(16, 33) "," R_MAMBA(16)),
                                 st, TIDE_CONNECTOR_SCHEDULER);
    CHECK_EQ(connector_window_blocks(&c->cfg.groups[1]), 2);
    pmap m;
    pmap_init(&m, &c->cfg, 96);
    for (int i = 0; i < 6; i++)
        m.bits[0][i] = 1; /* full attention: 96 tokens */
    int swa[] = {0, 1, 2, 4, 5};
    for (size_t i = 0; i < sizeof(swa) / sizeof(swa[0]); i++)
        m.bits[1][swa[i]] = 1;                           /* sliding window: block 3 missing */
    m.bits[2][80 / 16 - 1] = m.bits[2][32 / 16 - 1] = 1; /* Mamba snapshots at 80 and 32 */
    /* Round 1: Mamba says 80; the window before 80 needs block 3, the first window found
     * below is before 48; round 2: Mamba has no snapshot at 48, says 32; the window before
     * 32 (blocks 0, 1) is there: 32 is stable. */
    CHECK_EQ(connector_hit_search(&c->cfg, &m.p, 96), 32);
    m.bits[1][3] = 1;
    CHECK_EQ(connector_hit_search(&c->cfg, &m.p, 96), 80);
    CHECK_EQ(connector_hit_search(&c->cfg, &m.p, 79), 32); /* bounds are aligned down */
    m.bits[0][1] = 0;                                      /* full attention stops at 16 */
    CHECK_EQ(connector_hit_search(&c->cfg, &m.p, 96), 0);  /* no snapshot at 16 */
    tide_connector_destroy(c);
    tide_close(st);
}

/* ---- full attention -------------------------------------------------------------------- */

TEST(connector_lookup_full_attention) {
    tide_store *st = mem_store();
    tide_connector *c =
        rig_open(rig_doc(16, "", "", "kv_both", "", R_FULL(16)), st, TIDE_CONNECTOR_SCHEDULER);
    uint8_t *h = rig_hashes(1, 8, HL);
    /* Nothing stored: no hit, and still exactly one existence query. */
    CHECK_EQ(rig_hit(c, 100, h, 6, HL), 0);
    tide_connector_stats s;
    tide_connector_get_stats(c, &s, sizeof s);
    CHECK_EQ(s.lookup_exists.calls, 1);
    CHECK_EQ(s.lookup_exists.keys, 6); /* floor(100 / 16) blocks, one namespace */

    /* vLLM: test_mooncake_store_scheduler partial prefix hit — 4 of 6 blocks stored. */
    rig_store_prefix(st, c, h, HL, 64, -1, 1);
    CHECK_EQ(rig_hit(c, 100, h, 6, HL), 64);
    int64_t n = -1;
    CHECK_EQ(tide_connector_lookup(c, "r1", 100, h, 6, HL, 32, &n), 0);
    CHECK_EQ(n, 32); /* 64 hit - 32 already computed */
    CHECK_EQ(tide_connector_lookup(c, "r2", 100, h, 6, HL, 64, &n), 0);
    CHECK_EQ(n, 0);

    /* Whole stored prefix, prompt not block-aligned: the hit is every full block. */
    rig_store_prefix(st, c, h, HL, 96, -1, 1);
    CHECK_EQ(rig_hit(c, 100, h, 6, HL), 96);
    /* vLLM: whole-prompt hit is re-derived below the last token — 96 tokens, all stored:
     * the last block is recomputed. */
    CHECK_EQ(rig_hit(c, 96, h, 6, HL), 80);
    CHECK_EQ(rig_hit(c, 97, h, 6, HL), 96);
    /* Fewer than one block: nothing to look up. */
    CHECK_EQ(rig_hit(c, 15, h, 0, HL), 0);
    /* The hashes bound the lookup as well as the token count. */
    CHECK_EQ(rig_hit(c, 100, h, 3, HL), 48);
    /* A gap in the chain ends the prefix. */
    connector_ns ns = connector_own_ns(&c->cfg, 0);
    char key[TIDE_KEY_MAX + 1];
    int len = connector_key(&c->cfg, 0, &ns, h + 2 * HL, HL, key, sizeof(key));
    CHECK_EQ(tide_remove(st, key, (size_t)len), 0);
    CHECK_EQ(rig_hit(c, 100, h, 6, HL), 32);
    free(h);
    tide_connector_destroy(c);
    tide_close(st);
}

TEST(connector_lookup_disabled_and_capacity_only) {
    tide_store *st = mem_store();
    uint8_t *h = rig_hashes(2, 4, HL);
    tide_connector *c =
        rig_open(rig_doc(16, "", "", "kv_both", "\"enable_lookup\":false", R_FULL(16)), st,
                 TIDE_CONNECTOR_SCHEDULER);
    rig_store_prefix(st, c, h, HL, 64, -1, 1);
    CHECK_EQ(rig_hit(c, 70, h, 4, HL), 0);
    tide_connector_destroy(c);
    c = rig_open(rig_doc(16, "", "", "kv_consumer", "\"enable_lookup\":false", R_FULL(16)), st,
                 TIDE_CONNECTOR_SCHEDULER);
    tide_connector_info info;
    CHECK_EQ(tide_connector_get_info(c, &info, sizeof info), 0);
    CHECK_EQ(info.capacity_only, 1);
    CHECK_EQ(info.saves, 0);
    CHECK_EQ(rig_hit(c, 70, h, 4, HL), 0);
    tide_connector_destroy(c);
    free(h);
    tide_close(st);
}

/* ---- sliding window -------------------------------------------------------------------- */

TEST(connector_lookup_sliding_window) {
    tide_store *st = mem_store();
    /* Gemma-like: full attention + a 33-token window (2 blocks before a boundary). */
    tide_connector *c = rig_open(rig_doc(16, "", "", "kv_both", "", R_FULL(16) "," R_SWA(16, 33)),
                                 st, TIDE_CONNECTOR_SCHEDULER);
    uint8_t *h = rig_hashes(3, 9, HL);
    rig_store_prefix(st, c, h, HL, 128, -1, 1); /* full attention: 8 blocks */
    /* Only the window's blocks before 64 (blocks 2, 3) are stored for the window group. */
    connector_ns ns = connector_own_ns(&c->cfg, 1);
    rig_put_key(st, c, 1, &ns, h + 2 * HL, HL);
    rig_put_key(st, c, 1, &ns, h + 3 * HL, HL);
    CHECK_EQ(rig_hit(c, 130, h, 8, HL), 64);
    /* The window before 128 (blocks 6, 7): the right-to-left search finds it first. */
    rig_put_key(st, c, 1, &ns, h + 6 * HL, HL);
    CHECK_EQ(rig_hit(c, 130, h, 8, HL), 64);
    rig_put_key(st, c, 1, &ns, h + 7 * HL, HL);
    CHECK_EQ(rig_hit(c, 130, h, 8, HL), 128);
    /* A window group alone does not need blocks far before the boundary, but full
     * attention does: drop full block 0 and nothing is left. */
    connector_ns ns0 = connector_own_ns(&c->cfg, 0);
    char key[TIDE_KEY_MAX + 1];
    int len = connector_key(&c->cfg, 0, &ns0, h, HL, key, sizeof(key));
    CHECK_EQ(tide_remove(st, key, (size_t)len), 0);
    CHECK_EQ(rig_hit(c, 130, h, 8, HL), 0);
    free(h);
    tide_connector_destroy(c);
    tide_close(st);
}

/* ---- hybrid (Mamba) -------------------------------------------------------------------- */

TEST(connector_lookup_hybrid_mamba_snapshot_at_boundary) {
    tide_store *st = mem_store();
    tide_connector *c = rig_open(rig_doc(16, "\"mamba_cache_mode\":\"align\"", "", "kv_both", "",
                                         R_FULL(16) "," R_MAMBA(16)),
                                 st, TIDE_CONNECTOR_SCHEDULER);
    uint8_t *h = rig_hashes(4, 7, HL);
    rig_store_prefix(st, c, h, HL, 96, -1, 1); /* attention: 6 blocks */
    CHECK_EQ(rig_hit(c, 100, h, 6, HL), 0);    /* no snapshot anywhere */
    connector_ns ns = connector_own_ns(&c->cfg, 1);
    rig_put_key(st, c, 1, &ns, h + (48 / 16 - 1) * HL, HL);
    CHECK_EQ(rig_hit(c, 100, h, 6, HL), 48);
    rig_put_key(st, c, 1, &ns, h + (80 / 16 - 1) * HL, HL);
    CHECK_EQ(rig_hit(c, 100, h, 6, HL), 80);
    /* vLLM: test_mooncake_store_coordinator — a snapshot past the attention prefix does
     * not help; the hit is the last boundary both have. */
    rig_put_key(st, c, 1, &ns, h + (96 / 16 - 1) * HL, HL);
    CHECK_EQ(rig_hit(c, 100, h, 6, HL), 96);
    CHECK_EQ(rig_hit(c, 96, h, 6, HL), 80); /* whole prompt: the boundary below it */
    free(h);
    tide_connector_destroy(c);
    tide_close(st);
}

TEST(connector_lookup_mamba_block_differs_from_cache_block) {
    tide_store *st = mem_store();
    /* Falcon-H1 shape: attention blocks of 16, Mamba blocks of 64 (the reference rejects
     * this). Scheduler block 64, hashes every 16 tokens. */
    tide_connector *c = rig_open(rig_doc(16, "\"mamba_cache_mode\":\"align\"", "", "kv_both", "",
                                         R_FULL(16) "," R_MAMBA(64)),
                                 st, TIDE_CONNECTOR_SCHEDULER);
    CHECK_EQ(c->cfg.scheduler_block_size, 64);
    CHECK_EQ(c->cfg.hash_block_size, 16);
    uint8_t *h = rig_hashes(5, 12, HL);
    rig_store_prefix(st, c, h, HL, 192, -1, 1); /* 12 attention blocks */
    connector_ns ns = connector_own_ns(&c->cfg, 1);
    /* Mamba blocks larger than the hash block: partial hits, at every hash boundary. */
    CHECK_EQ(c->cfg.partial_hits, 1);
    CHECK_EQ(rig_hit(c, 200, h, 12, HL), 0);
    /* The snapshot at 128 is keyed by the hash of tokens [0, 128): unit 128/16 - 1. */
    rig_put_key(st, c, 1, &ns, h + (128 / 16 - 1) * HL, HL);
    CHECK_EQ(rig_hit(c, 200, h, 12, HL), 128);
    CHECK_EQ(rig_hit(c, 191, h, 11, HL), 128);
    CHECK_EQ(rig_hit(c, 127, h, 7, HL), 0); /* no snapshot below 127 */
    /* A state at 144, inside Mamba block 2 (what a partial tail stores, keyed by the
     * hash unit after 128), is a hit there; below it, 128 again. */
    rig_put_key(st, c, 1, &ns, h + (144 / 16 - 1) * HL, HL);
    CHECK_EQ(rig_hit(c, 200, h, 12, HL), 144);
    CHECK_EQ(rig_hit(c, 150, h, 9, HL), 144);
    CHECK_EQ(rig_hit(c, 144, h, 9, HL), 128); /* the whole prompt: the last token computed */
    free(h);
    tide_connector_destroy(c);
    tide_close(st);
}

/* ---- namespaces ------------------------------------------------------------------------ */

/* For a parallel layout: store the prefix in every namespace but one -> no hit; in all ->
 * the hit. Returns the number of namespaces of group 0. */
static size_t every_namespace(const char *cache, const char *parallel, const char *groups,
                              int64_t ntok, int64_t want) {
    tide_store *st = mem_store();
    tide_connector *c =
        rig_open(rig_doc(16, cache, parallel, "kv_both", "", groups), st, TIDE_CONNECTOR_SCHEDULER);
    size_t nh = (size_t)(ntok / c->cfg.hash_block_size);
    uint8_t *h = rig_hashes(6, nh + 1, HL);
    size_t nns = connector_lookup_namespaces(&c->cfg, 0, NULL, 0);
    unsigned all = (1u << c->cfg.ngroups) - 1;
    for (size_t skip = 0; skip < nns; skip++) {
        CHECK(tide_clear(st) == 0);
        rig_store_prefix(st, c, h, HL, want, (long)skip, 1);
        rig_store_prefix(st, c, h, HL, want, -1, all & ~1u);
        CHECK_EQ(rig_hit(c, ntok, h, nh, HL), 0);
    }
    rig_store_prefix(st, c, h, HL, want, -1, all);
    CHECK_EQ(rig_hit(c, ntok, h, nh, HL), want);
    free(h);
    tide_connector_destroy(c);
    tide_close(st);
    return nns;
}

TEST(connector_lookup_needs_every_namespace) {
    /* TP 2 over 8 KV heads: factor 1, both shards. */
    CHECK_EQ(every_namespace("", "\"tensor_parallel_size\":2,\"tp_rank\":1", R_FULL(16), 100, 96),
             2);
    /* TP 16 over 8 KV heads: factor 2, 8 shards. */
    CHECK_EQ(every_namespace("", "\"tensor_parallel_size\":16,\"tp_rank\":5", R_FULL(16), 100, 96),
             8);
    /* MLA: one latent on every rank -> one namespace whatever the TP size. */
    CHECK_EQ(every_namespace("", "\"tensor_parallel_size\":8,\"tp_rank\":3", R_MLA(16), 100, 96),
             1);
    /* PP 3: every stage holds other layers. */
    CHECK_EQ(every_namespace("", "\"pipeline_parallel_size\":3,\"pp_rank\":2", R_FULL(16), 100, 96),
             3);
    /* PCP 2 x TP 2. */
    CHECK_EQ(every_namespace("",
                             "\"prefill_context_parallel_size\":2,\"pcp_rank\":1,"
                             "\"tensor_parallel_size\":2",
                             R_FULL(16), 100, 96),
             4);
    /* DCP 2 inside TP 2: each TP rank keys its own token slice; blocks of 32 tokens. */
    CHECK_EQ(every_namespace("",
                             "\"tensor_parallel_size\":2,\"decode_context_parallel_size\":2,"
                             "\"tp_rank\":1",
                             R_FULL(16), 100, 96),
             2);
    /* Hybrid under DCP (tide only): attention blocks of 32, Mamba blocks of 32; every TP
     * rank's attention slice and Mamba shard must be there. */
    CHECK_EQ(every_namespace("\"mamba_cache_mode\":\"align\"",
                             "\"tensor_parallel_size\":2,\"decode_context_parallel_size\":2",
                             R_FULL(16) "," R_MAMBA(32), 100, 96),
             2);
}

TEST(connector_lookup_hybrid_dcp_mamba_namespace_missing) {
    /* The Mamba group's namespaces matter too: all attention slices present, one rank's
     * Mamba snapshot missing -> no hit. */
    tide_store *st = mem_store();
    tide_connector *c =
        rig_open(rig_doc(16, "\"mamba_cache_mode\":\"align\"",
                         "\"tensor_parallel_size\":2,\"decode_context_parallel_size\":2", "kv_both",
                         "", R_FULL(16) "," R_MAMBA(32)),
                 st, TIDE_CONNECTOR_SCHEDULER);
    CHECK_EQ(c->cfg.scheduler_block_size, 32);
    uint8_t *h = rig_hashes(7, 4, HL);
    rig_store_prefix(st, c, h, HL, 96, -1, 1);
    rig_store_prefix(st, c, h, HL, 96, 1, 2);
    CHECK_EQ(rig_hit(c, 100, h, 3, HL), 0);
    rig_store_prefix(st, c, h, HL, 96, -1, 2);
    CHECK_EQ(rig_hit(c, 100, h, 3, HL), 96);
    free(h);
    tide_connector_destroy(c);
    tide_close(st);
}

TEST(connector_create_errors) {
    tide_connector *c = (tide_connector *)1;
    CHECK_EQ(tide_connector_create("{", NULL, TIDE_CONNECTOR_SCHEDULER, &c), TIDE_EPARSE);
    CHECK(c == NULL);
    CHECK_CONTAINS(tide_connector_errmsg(NULL), "line 1");
    /* Cross attention is refused with tide's wording. */
    CHECK_EQ(tide_connector_create(rig_doc(16, "", "", "kv_both", "",
                                           "{\"kv_cache_spec\":{\"type\":\"CrossAttentionSpec\","
                                           "\"block_size\":16,\"num_kv_heads\":1,\"head_size\":4,"
                                           "\"dtype\":\"float16\"}}"),
                                   NULL, TIDE_CONNECTOR_WORKER, &c),
             TIDE_EUNSUPPORTED);
    CHECK_STR(tide_connector_errmsg(NULL),
              "TideStoreConnector does not support: group 0: CrossAttentionSpec");
    CHECK_EQ(tide_connector_create(rig_doc(16, "", "", "kv_both", "", R_FULL(16)), "nope://x",
                                   TIDE_CONNECTOR_WORKER, &c),
             TIDE_ESCHEME);
    CHECK_CONTAINS(tide_connector_errmsg(NULL), "cannot open the store 'nope://x'");
    CHECK_EQ(tide_connector_create(rig_doc(16, "", "", "kv_both", "", R_FULL(16)), NULL, 7, &c),
             -EINVAL);
    CHECK_EQ(tide_connector_create_file("/nonexistent/x.json", NULL, 0, &c), -ENOENT);
}
