/*
 * test_connector_validate.c — value rules with their messages, derived block sizes and
 * replication factors, and both connectors' verdicts: every item alone and aggregated, in
 * order, and the capacity-only skip.
 */
#include <errno.h>
#include <string.h>

#include "connector/config.h"
#include "connector_testutil.h"
#include "harness.h"
#include "tide.h"

/* Validate a document with one implementation (the reference under the seed's rules,
 * vLLM <= 0.28, which most tests here pin); returns the rc and fills *v. */
static int verdict(const char *json, connector_impl impl, connector_verdict *v) {
    ccfg c;
    load_ok(json, &c);
    int rc = impl == CONNECTOR_IMPL_REFERENCE
                 ? connector_validate_reference(&c, CONNECTOR_RULES_SEED, v)
                 : connector_validate(&c, impl, v);
    ccfg_free(&c);
    return rc;
}

#define REF CONNECTOR_IMPL_REFERENCE
#define TIDE CONNECTOR_IMPL_TIDE

/* ---- value rules ------------------------------------------------------------------- */

TEST(connector_check_sizes_and_ranks) {
    ccfg c;
    ccfg_errs e;
    const char *par = "\"tensor_parallel_size\":8,\"pipeline_parallel_size\":0,"
                      "\"prefill_context_parallel_size\":2,\"decode_context_parallel_size\":3,"
                      "\"tp_rank\":8,\"pcp_rank\":-1,\"data_parallel_size\":100000";
    const char *groups = "{\"kv_cache_spec\":{\"type\":\"FullAttentionSpec\",\"block_size\":0,"
                         "\"num_kv_heads\":0,\"head_size\":-4,\"dtype\":\"bfloat16\"}}";
    CHECK_EQ(load_errs(doc("", par, "", groups), &c, &e), TIDE_ECONFIG);
    CHECK_LINE(&e, "parallel_config.pipeline_parallel_size: must be 1..4096, got 0");
    CHECK_LINE(&e, "parallel_config.tp_rank: 8 is out of range for tensor_parallel_size 8 (0..7)");
    CHECK_LINE(&e, "parallel_config.pcp_rank: -1 is out of range for "
                   "prefill_context_parallel_size 2 (0..1)");
    CHECK_LINE(&e, "parallel_config.decode_context_parallel_size: 3 does not divide "
                   "tensor_parallel_size 8 (DCP ranks subdivide the TP group)");
    CHECK_LINE(&e, "kv_cache_config.kv_cache_groups[0].kv_cache_spec.block_size: must be > 0, "
                   "got 0");
    CHECK_LINE(&e, "kv_cache_config.kv_cache_groups[0].kv_cache_spec.num_kv_heads: must be > 0, "
                   "got 0");
    CHECK_LINE(&e, "kv_cache_config.kv_cache_groups[0].kv_cache_spec.head_size: must be > 0, "
                   "got -4");
    CHECK_LINE(&e, "parallel_config.data_parallel_size: must be 1..4096, got 100000");
    CHECK_EQ(e.n, 8);
    ccfg_errs_free(&e);
    ccfg_free(&c);

    CHECK_EQ(load_errs(doc("",
                           "\"tensor_parallel_size\":4,\"decode_context_parallel_size\":2,"
                           "\"tp_rank\":3,\"dcp_rank\":0",
                           "", G_FULL(16)),
                       &c, &e),
             TIDE_ECONFIG);
    CHECK_LINE(&e, "parallel_config.dcp_rank: 0 does not match tp_rank % "
                   "decode_context_parallel_size = 1");
    ccfg_errs_free(&e);
    ccfg_free(&c);

    /* dcp_rank is derived when not given. */
    load_ok(doc("", "\"tensor_parallel_size\":4,\"decode_context_parallel_size\":2,\"tp_rank\":3",
                "", G_FULL(16)),
            &c);
    CHECK_EQ(c.dcp_rank, 1);
    ccfg_free(&c);

    CHECK_EQ(load_errs(doc("\"block_size\":0", "", "", G_FULL(16)), &c, &e), TIDE_EPARSE);
    ccfg_errs_free(&e);
    ccfg_free(&c);
    /* Unchecked configurations get no verdict. */
    connector_verdict v;
    memset(&c, 0, sizeof(c));
    CHECK_EQ(connector_validate(&c, CONNECTOR_IMPL_TIDE, &v), TIDE_ECONFIG);
    CHECK_EQ(load_errs(doc("", "", "", ""), &c, &e), TIDE_ECONFIG);
    CHECK_LINE(&e, "kv_cache_config.kv_cache_groups: at least one group is required");
    ccfg_errs_free(&e);
    ccfg_free(&c);
}

TEST(connector_check_block_size_multiple_of_hash_block_size) {
    ccfg c;
    ccfg_errs e;
    CHECK_EQ(load_errs(doc("\"prefix_match_unit\":32", "", "", G_FULL(64) "," G_SLIDING(48, 128)),
                       &c, &e),
             TIDE_ECONFIG);
    CHECK_EQ(e.n, 1);
    CHECK_STR(e.msg[0], "kv_cache_config.kv_cache_groups[1].kv_cache_spec.block_size: "
                        "block_size (48) must be a multiple of hash_block_size (32)");
    CHECK_CONTAINS(e.msg[0], "block_size (48) must be a multiple of hash_block_size (32)");
    ccfg_errs_free(&e);
    ccfg_free(&c);
}

TEST(connector_check_replayssm) {
    ccfg c;
    ccfg_errs e;
    CHECK_EQ(load_errs(doc("\"use_replayssm\":true,\"mamba_cache_mode\":\"align\"", "", "",
                           G_FULL(16) "," G_MAMBA(16)),
                       &c, &e),
             TIDE_ECONFIG);
    CHECK_EQ(e.n, 1);
    CHECK_STR(e.msg[0], "cache_config.use_replayssm: --use-replayssm is incompatible with KV "
                        "connectors (P/D disaggregation, KV cache offload)");
    ccfg_errs_free(&e);
    ccfg_free(&c);

    CHECK_EQ(load_errs(doc("\"use_replayssm\":true,\"mamba_cache_mode\":\"all\"", "", "",
                           G_FULL(16) "," G_MAMBA(16)),
                       &c, &e),
             TIDE_ECONFIG);
    CHECK_EQ(e.n, 2);
    CHECK_STR(e.msg[0], "cache_config.use_replayssm: --use-replayssm supports prefix caching "
                        "only in align mode; pass --mamba-cache-mode align");
    CHECK_STR(e.msg[1], "cache_config.use_replayssm: --use-replayssm is incompatible with KV "
                        "connectors (P/D disaggregation, KV cache offload)");
    ccfg_errs_free(&e);
    ccfg_free(&c);
}

TEST(connector_check_other_values) {
    ccfg c;
    ccfg_errs e;
    CHECK_EQ(load_errs(doc("\"prefix_cache_retention_interval\":40", "",
                           "\"kv_connector_extra_config\":{\"preferred_segment\":\"  \","
                           "\"lookup_rpc_port\":70000}",
                           G_FULL(16)),
                       &c, &e),
             TIDE_ECONFIG);
    CHECK_LINE(&e, "kv_transfer_config.kv_connector_extra_config.preferred_segment: must be a "
                   "non-empty string");
    CHECK_LINE(&e, "kv_transfer_config.kv_connector_extra_config.lookup_rpc_port: 70000 is not a "
                   "port number (0..65535)");
    ccfg_errs_free(&e);
    ccfg_free(&c);

    /* The retention interval is checked once the rest is coherent. */
    CHECK_EQ(load_errs(doc("\"prefix_cache_retention_interval\":40", "", "", G_FULL(16)), &c, &e),
             TIDE_ECONFIG);
    CHECK_EQ(e.n, 1);
    CHECK_STR(e.msg[0], "cache_config.prefix_cache_retention_interval: 40 is not a multiple of "
                        "the scheduler block size (16)");
    ccfg_errs_free(&e);
    ccfg_free(&c);
    load_ok(doc("\"prefix_cache_retention_interval\":null", "", "", G_FULL(16)), &c);
    CHECK_EQ(c.retention_interval, -1);
    ccfg_free(&c);

    CHECK_EQ(load_errs(doc("\"mamba_block_size\":32", "", "", G_FULL(16) "," G_MAMBA(64)), &c, &e),
             TIDE_ECONFIG);
    CHECK_LINE(&e, "kv_cache_config.kv_cache_groups[1].kv_cache_spec.block_size: 64 differs from "
                   "cache_config.mamba_block_size 32");
    ccfg_errs_free(&e);
    ccfg_free(&c);

    const char *padded = "{\"kv_cache_spec\":{\"type\":\"FullAttentionSpec\",\"block_size\":16,"
                         "\"num_kv_heads\":1,\"head_size\":8,\"dtype\":\"float32\","
                         "\"page_size_padded\":100}}";
    CHECK_EQ(load_errs(doc("", "", "", padded), &c, &e), TIDE_ECONFIG);
    CHECK_LINE(&e, "kv_cache_config.kv_cache_groups[0].kv_cache_spec.page_size_padded: 100 is "
                   "smaller than the page (1024 bytes)");
    ccfg_errs_free(&e);
    ccfg_free(&c);

    CHECK_EQ(load_errs("{\"model_config\":{\"model\":\"///\"},\"cache_config\":{\"block_size\":16},"
                       "\"kv_transfer_config\":{\"kv_role\":\"kv_both\"},"
                       "\"kv_cache_config\":{\"kv_cache_groups\":[" G_FULL(16) "]}}",
                       &c, &e),
             TIDE_ECONFIG);
    CHECK_LINE(&e, "model_config.model: '///' has no name component");
    ccfg_errs_free(&e);
    ccfg_free(&c);
}

/* ---- derived values ---------------------------------------------------------------- */

TEST(connector_derived_block_sizes) {
    ccfg c;
    /* One group: cache block size x dcp for both. */
    load_ok(
        doc("", "\"tensor_parallel_size\":4,\"decode_context_parallel_size\":4", "", G_FULL(16)),
        &c);
    CHECK_EQ(c.scheduler_block_size, 64);
    CHECK_EQ(c.hash_block_size, 64);
    ccfg_free(&c);
    /* prefix_match_unit does not apply to a single group. */
    load_ok(doc("\"prefix_match_unit\":8", "", "", G_FULL(16)), &c);
    CHECK_EQ(c.hash_block_size, 16);
    ccfg_free(&c);
    /* Several groups: LCM and GCD. */
    load_ok(doc("", "", "", G_FULL(16) "," G_SLIDING(24, 512)), &c);
    CHECK_EQ(c.scheduler_block_size, 48);
    CHECK_EQ(c.hash_block_size, 8);
    ccfg_free(&c);
    /* prefix_match_unit overrides the GCD. */
    load_ok(doc("\"prefix_match_unit\":4", "", "", G_FULL(16) "," G_SLIDING(24, 512)), &c);
    CHECK_EQ(c.scheduler_block_size, 48);
    CHECK_EQ(c.hash_block_size, 4);
    ccfg_free(&c);
    /* Mamba in align mode: the GCD; outside align mode: the scheduler block size. */
    load_ok(doc("\"mamba_cache_mode\":\"align\"", "", "", G_FULL(16) "," G_MAMBA(64)), &c);
    CHECK_EQ(c.scheduler_block_size, 64);
    CHECK_EQ(c.hash_block_size, 16);
    ccfg_free(&c);
    load_ok(doc("\"mamba_cache_mode\":\"all\",\"prefix_match_unit\":8", "", "",
                G_FULL(64) "," G_MAMBA(64)),
            &c);
    CHECK_EQ(c.hash_block_size, 64);
    ccfg_free(&c);
    /* ... so smaller attention blocks no longer divide it. */
    ccfg_errs e;
    CHECK_EQ(
        load_errs(doc("\"mamba_cache_mode\":\"all\"", "", "", G_FULL(16) "," G_MAMBA(64)), &c, &e),
        TIDE_ECONFIG);
    CHECK_EQ(e.n, 1);
    CHECK_STR(e.msg[0], "kv_cache_config.kv_cache_groups[0].kv_cache_spec.block_size: "
                        "block_size (16) must be a multiple of hash_block_size (64)");
    ccfg_errs_free(&e);
    ccfg_free(&c);
    /* DCP scales attention groups, not Mamba. */
    load_ok(doc("\"mamba_cache_mode\":\"align\"",
                "\"tensor_parallel_size\":2,\"decode_context_parallel_size\":2", "",
                G_FULL(16) "," G_MAMBA(48)),
            &c);
    CHECK_EQ(c.groups[0].eff_block_size, 32);
    CHECK_EQ(c.groups[1].eff_block_size, 48);
    CHECK_EQ(c.scheduler_block_size, 96);
    CHECK_EQ(c.hash_block_size, 16);
    ccfg_free(&c);
}

static int factor_of(const char *model_total, const char *par, const char *group) {
    char json[4096];
    snprintf(json, sizeof(json),
             "{\"model_config\":{\"model\":\"m\"%s},\"cache_config\":{\"block_size\":16},"
             "\"parallel_config\":{%s},\"kv_transfer_config\":{\"kv_role\":\"kv_both\"},"
             "\"kv_cache_config\":{\"kv_cache_groups\":[%s]}}",
             model_total, par, group);
    ccfg c;
    load_ok(json, &c);
    int f = c.groups[0].tp_factor;
    CHECK_EQ(f, connector_tp_factor(&c, 0));
    ccfg_free(&c);
    return f;
}

TEST(connector_replication_factors) {
    const char *tp8 = "\"tensor_parallel_size\":8";
    /* GQA: tp / total KV heads, at least 1. */
    CHECK_EQ(factor_of(",\"total_num_kv_heads\":8", tp8, G_FULL(16)), 1);
    CHECK_EQ(factor_of(",\"total_num_kv_heads\":2", tp8, G_FULL(16)), 4);
    CHECK_EQ(factor_of(",\"total_num_kv_heads\":1", tp8, G_FULL(16)), 8);
    CHECK_EQ(factor_of(",\"total_num_kv_heads\":32", tp8, G_FULL(16)), 1);
    /* Without the model's total, every rank is taken to hold distinct heads. */
    CHECK_EQ(factor_of("", tp8, G_FULL(16)), 1);
    /* MLA: the latent is on every rank. */
    CHECK_EQ(factor_of(",\"total_num_kv_heads\":1", tp8, G_MLA(64)), 8);
    CHECK_EQ(factor_of("", "\"tensor_parallel_size\":1", G_MLA(64)), 1);
    /* DCP > 1: each rank holds its own token slice. */
    CHECK_EQ(factor_of(",\"total_num_kv_heads\":2",
                       "\"tensor_parallel_size\":8,"
                       "\"decode_context_parallel_size\":2",
                       G_FULL(16)),
             1);
    CHECK_EQ(factor_of(",\"total_num_kv_heads\":1",
                       "\"tensor_parallel_size\":8,"
                       "\"decode_context_parallel_size\":8",
                       G_MLA(64)),
             1);
    /* Mamba: TP-sharded state, one namespace per rank. */
    CHECK_EQ(factor_of(",\"total_num_kv_heads\":1", tp8, G_MAMBA(16)), 1);
    /* Cross attention follows GQA. */
    CHECK_EQ(factor_of(",\"total_num_kv_heads\":4", tp8, G_CROSS(16)), 2);
}

/* ---- the reference's verdict ------------------------------------------------------- */

TEST(connector_reference_accepts_plain_models) {
    connector_verdict v;
    CHECK_EQ(verdict(doc("", "", "", G_FULL(16)), REF, &v), 0);
    CHECK_EQ(v.nitems, 0);
    CHECK_STR(v.message, "");
    CHECK_EQ(verdict(doc("", "", "", G_SLIDING(16, 1024) "," G_FULL(16)), REF, &v), 0);
    CHECK_EQ(verdict(doc("", "\"tensor_parallel_size\":8", "", G_MLA(64)), REF, &v), 0);
    CHECK_EQ(
        verdict(doc("\"mamba_cache_mode\":\"align\"", "", "", G_FULL(16) "," G_MAMBA(16)), REF, &v),
        0);
    /* One group under DCP is fine: the hybrid rule needs more than one group. */
    CHECK_EQ(verdict(doc("", "\"tensor_parallel_size\":2,\"decode_context_parallel_size\":2", "",
                         G_FULL(16)),
                     REF, &v),
             0);
}

TEST(connector_reference_cross_attention) {
    connector_verdict v;
    CHECK_EQ(verdict(doc("", "", "", G_FULL(16) "," G_CROSS(16)), REF, &v), TIDE_EUNSUPPORTED);
    CHECK_EQ(v.nitems, 1);
    CHECK_EQ(v.items[0].kind, CONNECTOR_ITEM_CROSS_ATTENTION);
    CHECK_EQ(v.items[0].group, 1);
    CHECK_STR(v.message, "MooncakeStoreConnector does not support: group 1: CrossAttentionSpec");
}

TEST(connector_reference_mamba_block_size) {
    connector_verdict v;
    CHECK_EQ(
        verdict(doc("\"mamba_cache_mode\":\"align\"", "", "", G_FULL(16) "," G_MAMBA(64)), REF, &v),
        TIDE_EUNSUPPORTED);
    CHECK_STR(v.message, "MooncakeStoreConnector does not support: group 1: MambaSpec with "
                         "block_size=64 != cache_config.block_size=16 (mamba_cache_mode != "
                         "'align')");
    CHECK_EQ(v.items[0].a, 64);
    CHECK_EQ(v.items[0].b, 16);
    /* The reference looks at block sizes only: mode 'none' with equal sizes passes. */
    CHECK_EQ(verdict(doc("", "", "", G_FULL(16) "," G_MAMBA(16)), REF, &v), 0);
}

TEST(connector_reference_hybrid_context_parallel) {
    connector_verdict v;
    CHECK_EQ(verdict(doc("", "\"tensor_parallel_size\":2,\"decode_context_parallel_size\":2", "",
                         G_SLIDING(16, 128) "," G_FULL(16)),
                     REF, &v),
             TIDE_EUNSUPPORTED);
    CHECK_STR(v.message, "MooncakeStoreConnector does not support: PCP/DCP > 1 (pcp=1, dcp=2) "
                         "with hybrid attention");
    CHECK_EQ(verdict(doc("", "\"prefill_context_parallel_size\":4", "",
                         G_SLIDING(16, 128) "," G_FULL(16)),
                     REF, &v),
             TIDE_EUNSUPPORTED);
    CHECK_STR(v.message, "MooncakeStoreConnector does not support: PCP/DCP > 1 (pcp=4, dcp=1) "
                         "with hybrid attention");
}

TEST(connector_reference_aggregates_in_order) {
    connector_verdict v;
    const char *groups = G_CROSS(16) "," G_MAMBA(32) "," G_FULL(16) "," G_MAMBA(48);
    CHECK_EQ(verdict(doc("\"mamba_cache_mode\":\"align\"",
                         "\"tensor_parallel_size\":2,\"prefill_context_parallel_size\":2,"
                         "\"decode_context_parallel_size\":2",
                         "", groups),
                     REF, &v),
             TIDE_EUNSUPPORTED);
    CHECK_EQ(v.nitems, 4);
    CHECK_STR(v.message, "MooncakeStoreConnector does not support: group 0: CrossAttentionSpec; "
                         "group 1: MambaSpec with block_size=32 != cache_config.block_size=16 "
                         "(mamba_cache_mode != 'align'); "
                         "group 3: MambaSpec with block_size=48 != cache_config.block_size=16 "
                         "(mamba_cache_mode != 'align'); "
                         "PCP/DCP > 1 (pcp=2, dcp=2) with hybrid attention");
}

/* ---- the reference's verdict when tide's derived checks fail ------------------------ */

/* vLLM builds the connector before its KV-cache manager checks the group block sizes, the
 * hash block size and the retention interval: the reference's verdict stands whatever those
 * checks say, while tide's connector gets no verdict (the configuration is invalid). */
TEST(connector_reference_verdict_survives_derived_problems) {
    for (size_t i = 0; i < N_DERIVED_CASES; i++) {
        const derived_case *t = &derived_cases[i];
        ccfg c;
        ccfg_errs e;
        int rc = load_errs(doc(t->cache, t->parallel, "", t->groups), &c, &e);
        CHECK_MSG(rc == TIDE_ECONFIG, "%s: check rc %d", t->name, rc);
        CHECK_MSG(has_line(&e, t->problem), "%s: no problem line \"%s\"", t->name, t->problem);
        CHECK_MSG(!t->problem2 || has_line(&e, t->problem2), "%s: no problem line \"%s\"", t->name,
                  t->problem2);
        connector_verdict v;
        rc = connector_validate_reference(&c, CONNECTOR_RULES_SEED, &v);
        CHECK_MSG(rc == (t->ref[0] ? TIDE_EUNSUPPORTED : 0), "%s: reference rc %d", t->name, rc);
        CHECK_MSG(strcmp(v.message, t->ref) == 0, "%s: reference said \"%s\"", t->name, v.message);
        CHECK_MSG(connector_validate(&c, TIDE, &v) == TIDE_ECONFIG, "%s: tide gave a verdict",
                  t->name);
        ccfg_errs_free(&e);
        ccfg_free(&c);
    }
}

TEST(connector_reference_capacity_only_survives_derived_problems) {
    ccfg c;
    ccfg_errs e;
    const char *json =
        "{\"model_config\":{\"model\":\"m\"},"
        "\"cache_config\":{\"block_size\":16,\"mamba_cache_mode\":\"all\"},"
        "\"kv_transfer_config\":{\"kv_role\":\"kv_consumer\","
        "\"kv_connector_extra_config\":{\"enable_lookup\":false}},"
        "\"kv_cache_config\":{\"kv_cache_groups\":[" G_CROSS(16) "," G_MAMBA(64) "]}}";
    CHECK_EQ(load_errs(json, &c, &e), TIDE_ECONFIG);
    CHECK_LINE(&e, HASH_LINE(0, 16, 64));
    connector_verdict v;
    CHECK_EQ(connector_validate(&c, REF, &v), 0);
    CHECK_EQ(v.capacity_only, 1);
    CHECK_EQ(connector_validate(&c, TIDE, &v), TIDE_ECONFIG);
    ccfg_errs_free(&e);
    ccfg_free(&c);
}

/* What vLLM refuses before it builds a connector (its own configuration checks, the page
 * sizes it computes to size the KV cache) leaves the reference without a verdict. */
TEST(connector_reference_verdict_needs_what_vllm_checks_first) {
    ccfg c;
    ccfg_errs e;
    connector_verdict v;
    CHECK_EQ(load_errs(doc("\"use_replayssm\":true,\"mamba_cache_mode\":\"align\"", "", "",
                           G_FULL(16) "," G_MAMBA(64)),
                       &c, &e),
             TIDE_ECONFIG);
    CHECK_EQ(connector_validate(&c, REF, &v), TIDE_ECONFIG);
    CHECK_EQ(v.nitems, 0);
    ccfg_errs_free(&e);
    ccfg_free(&c);

    const char *groups = G_CROSS(16) ",{\"kv_cache_spec\":{\"type\":\"FullAttentionSpec\","
                                     "\"block_size\":16,\"num_kv_heads\":1,\"head_size\":8,"
                                     "\"dtype\":\"float32\",\"page_size_padded\":100}}";
    CHECK_EQ(load_errs(doc("", "", "", groups), &c, &e), TIDE_ECONFIG);
    CHECK_LINE(&e, "kv_cache_config.kv_cache_groups[1].kv_cache_spec.page_size_padded: 100 is "
                   "smaller than the page (1024 bytes)");
    CHECK_EQ(connector_validate(&c, REF, &v), TIDE_ECONFIG);
    ccfg_errs_free(&e);
    ccfg_free(&c);
}

/* ---- capacity-only ----------------------------------------------------------------- */

TEST(connector_capacity_only_skips_validation) {
    const char *groups = G_CROSS(16) "," G_MAMBA(32);
    const char *par = "\"tensor_parallel_size\":2,\"decode_context_parallel_size\":2";
    connector_verdict v;
    char json[16384];
    snprintf(json, sizeof(json),
             "{\"model_config\":{\"model\":\"m\"},\"cache_config\":{\"block_size\":16},"
             "\"parallel_config\":{%s},\"kv_transfer_config\":{\"kv_role\":\"%s\","
             "\"kv_connector_extra_config\":{\"enable_lookup\":%s,\"save_decode_cache\":%s}},"
             "\"kv_cache_config\":{\"kv_cache_groups\":[%s]}}",
             par, "kv_consumer", "false", "false", groups);
    for (int impl = 0; impl < 2; impl++) {
        CHECK_EQ(verdict(json, (connector_impl)impl, &v), 0);
        CHECK_EQ(v.capacity_only, 1);
        CHECK_EQ(v.nitems, 0);
    }
    /* Any one of the three conditions failing brings validation back. */
    const char *cases[][3] = {{"kv_both", "false", "false"},
                              {"kv_producer", "false", "false"},
                              {"kv_consumer", "true", "false"},
                              {"kv_consumer", "false", "true"}};
    for (size_t i = 0; i < 4; i++) {
        snprintf(json, sizeof(json),
                 "{\"model_config\":{\"model\":\"m\"},\"cache_config\":{\"block_size\":16},"
                 "\"parallel_config\":{%s},\"kv_transfer_config\":{\"kv_role\":\"%s\","
                 "\"kv_connector_extra_config\":{\"enable_lookup\":%s,\"save_decode_cache\":%s}},"
                 "\"kv_cache_config\":{\"kv_cache_groups\":[%s]}}",
                 par, cases[i][0], cases[i][1], cases[i][2], groups);
        for (int impl = 0; impl < 2; impl++) {
            CHECK_EQ(verdict(json, (connector_impl)impl, &v), TIDE_EUNSUPPORTED);
            CHECK_EQ(v.capacity_only, 0);
        }
    }
}

/* ---- tide's verdict ---------------------------------------------------------------- */

TEST(connector_tide_accepts_what_it_supports) {
    connector_verdict v;
    /* Mamba in align mode whatever the block sizes. */
    CHECK_EQ(verdict(doc("\"mamba_cache_mode\":\"align\"", "", "", G_FULL(16) "," G_MAMBA(64)),
                     TIDE, &v),
             0);
    /* Mamba in 'all' mode. */
    CHECK_EQ(
        verdict(doc("\"mamba_cache_mode\":\"all\"", "", "", G_FULL(64) "," G_MAMBA(64)), TIDE, &v),
        0);
    /* Hybrid models under DCP. */
    CHECK_EQ(verdict(doc("\"mamba_cache_mode\":\"align\"",
                         "\"tensor_parallel_size\":4,\"decode_context_parallel_size\":2", "",
                         G_FULL(16) "," G_MAMBA(64)),
                     TIDE, &v),
             0);
    CHECK_EQ(verdict(doc("", "\"tensor_parallel_size\":2,\"decode_context_parallel_size\":2", "",
                         G_SLIDING(16, 128) "," G_FULL(16)),
                     TIDE, &v),
             0);
    CHECK_STR(v.message, "");
}

TEST(connector_tide_rejects_with_its_own_words) {
    connector_verdict v;
    CHECK_EQ(verdict(doc("", "", "", G_FULL(16) "," G_CROSS(16)), TIDE, &v), TIDE_EUNSUPPORTED);
    CHECK_STR(v.message, "TideStoreConnector does not support: group 1: CrossAttentionSpec");

    CHECK_EQ(verdict(doc("", "", "", G_FULL(16) "," G_MAMBA(16)), TIDE, &v), TIDE_EUNSUPPORTED);
    CHECK_STR(v.message, "TideStoreConnector does not support: group 1: MambaSpec with "
                         "mamba_cache_mode='none' (no state snapshots at block ends; needs "
                         "'align' or 'all')");
    CHECK_EQ(v.items[0].kind, CONNECTOR_ITEM_MAMBA_MODE_NONE);

    CHECK_EQ(verdict(doc("", "\"prefill_context_parallel_size\":2", "",
                         G_SLIDING(16, 128) "," G_FULL(16)),
                     TIDE, &v),
             TIDE_EUNSUPPORTED);
    CHECK_STR(v.message, "TideStoreConnector does not support: PCP > 1 (pcp=2, dcp=1) with "
                         "hybrid attention");
    /* A single group under PCP is fine. */
    CHECK_EQ(verdict(doc("", "\"prefill_context_parallel_size\":2", "", G_FULL(16)), TIDE, &v), 0);
}

TEST(connector_tide_aggregates_in_order) {
    connector_verdict v;
    const char *groups = G_CROSS(16) "," G_MAMBA(16) "," G_FULL(16);
    CHECK_EQ(verdict(doc("", "\"prefill_context_parallel_size\":2", "", groups), TIDE, &v),
             TIDE_EUNSUPPORTED);
    CHECK_EQ(v.nitems, 3);
    CHECK_STR(v.message, "TideStoreConnector does not support: group 0: CrossAttentionSpec; "
                         "group 1: MambaSpec with mamba_cache_mode='none' (no state snapshots "
                         "at block ends; needs 'align' or 'all'); PCP > 1 (pcp=2, dcp=1) with "
                         "hybrid attention");
}

TEST(connector_tide_rejects_keys_over_the_limit) {
    char extra[512], prefix[260];
    memset(prefix, 'p', 200);
    prefix[200] = '\0';
    snprintf(extra, sizeof(extra), "\"kv_connector_extra_config\":{\"cache_prefix\":\"%s\"}",
             prefix);
    connector_verdict v;
    CHECK_EQ(verdict(doc("", "", extra, G_FULL(16)), TIDE, &v), TIDE_EUNSUPPORTED);
    CHECK_EQ(v.items[0].kind, CONNECTOR_ITEM_KEY_TOO_LONG);
    /* 200 + "@" + "Model-7B@fp:" (12) + 16 + "@tp_rank:0@pcp0@dcp0@pp_rank:0@group:0" (38)
       + "@" + 64 hex digits */
    CHECK_EQ(v.items[0].a, 200 + 1 + 8 + 4 + 16 + 38 + 1 + 64);
    CHECK_CONTAINS(v.message, "TideStoreConnector does not support: keys of ");
    /* The reference has no such limit. */
    CHECK_EQ(verdict(doc("", "", extra, G_FULL(16)), REF, &v), 0);
}

/* ---- the reference's rules by vLLM release ------------------------------------------ */

/* The reference's message under one rule set, "" when it accepts. The configuration need
 * only reach the connector (vLLM's KV-cache manager checks block sizes after it). */
static const char *ref_under(const char *json, connector_rules rules) {
    static connector_verdict v;
    ccfg c;
    ccfg_errs e;
    load_errs(json, &c, &e);
    CHECK_MSG(c.reached_connector, "not reached: %s", e.n ? e.msg[0] : "?");
    int rc = connector_validate_reference(&c, rules, &v);
    ccfg_errs_free(&e);
    ccfg_free(&c);
    CHECK_MSG(rc == (v.message[0] ? TIDE_EUNSUPPORTED : 0), "rc %d for \"%s\"", rc, v.message);
    return v.message;
}

#define R028 CONNECTOR_RULES_SEED
#define R029 CONNECTOR_RULES_V029
#define R030 CONNECTOR_RULES_V030
#define G_FULL_OFF(bs)                                                                             \
    "{\"enable_kv_transfer\":false,\"kv_cache_spec\":{\"type\":\"FullAttentionSpec\","             \
    "\"block_size\":" #bs ",\"num_kv_heads\":8,\"head_size\":128,\"dtype\":\"bfloat16\"}}"
#define G_CIRCULAR(bs)                                                                             \
    "{\"kv_cache_spec\":{\"type\":\"CircularBufferSpec\",\"block_size\":" #bs                      \
    ",\"num_kv_heads\":8,\"head_size\":128,\"dtype\":\"bfloat16\"}}"
#define G_HOT(bs)                                                                                  \
    "{\"kv_cache_spec\":{\"type\":\"HiSparseHotSpec\",\"block_size\":" #bs                         \
    ",\"page_size\":4096,\"blocks_per_request\":4}}"
#define G_SWMLA(bs, bounded)                                                                       \
    "{\"kv_cache_spec\":{\"type\":\"SlidingWindowMLASpec\",\"block_size\":" #bs                    \
    ",\"num_kv_heads\":1,\"head_size\":576,\"dtype\":\"bfloat16\",\"sliding_window\":128,"         \
    "\"bounded_replay\":" #bounded "}}"

/* The hybrid item: PCP and DCP until 0.28, PCP only (and its own wording) from 0.29. */
TEST(connector_reference_rules_hybrid_cp_by_release) {
    const char *dcp = doc("", "\"tensor_parallel_size\":2,\"decode_context_parallel_size\":2", "",
                          G_SLIDING(16, 128) "," G_FULL(16));
    CHECK_STR(ref_under(dcp, R028), "MooncakeStoreConnector does not support: PCP/DCP > 1 (pcp=1, "
                                    "dcp=2) with hybrid attention");
    CHECK_STR(ref_under(dcp, R029), "");
    CHECK_STR(ref_under(dcp, R030), "");
    const char *pcp =
        doc("", "\"prefill_context_parallel_size\":2", "", G_SLIDING(16, 128) "," G_FULL(16));
    CHECK_STR(ref_under(pcp, R029),
              "MooncakeStoreConnector does not support: PCP > 1 (pcp=2) with hybrid attention");
    CHECK_STR(ref_under(pcp, R030),
              "MooncakeStoreConnector does not support: PCP > 1 (pcp=2) with hybrid attention");
}

/* Mamba: by block size until 0.29, by mode from 0.30 (the spec's mode, as Python's repr). */
TEST(connector_reference_rules_mamba_by_release) {
    const char *align64 = doc("\"mamba_cache_mode\":\"align\"", "", "", G_FULL(16) "," G_MAMBA(64));
    const char *item = "MooncakeStoreConnector does not support: group 1: MambaSpec with "
                       "block_size=64 != cache_config.block_size=16 (mamba_cache_mode != 'align')";
    CHECK_STR(ref_under(align64, R028), item);
    CHECK_STR(ref_under(align64, R029), item);
    CHECK_STR(ref_under(align64, R030), "");
    const char *none16 = doc("", "", "", G_FULL(16) "," G_MAMBA(16));
    CHECK_STR(ref_under(none16, R029), "");
    CHECK_STR(ref_under(none16, R030), "MooncakeStoreConnector does not support: group 1: "
                                       "mamba_cache_mode='none' != 'align'");
    const char *all16 = doc("\"mamba_cache_mode\":\"all\"", "", "", G_MAMBA(16) "," G_FULL(16));
    CHECK_STR(ref_under(all16, R030), "MooncakeStoreConnector does not support: group 0: "
                                      "mamba_cache_mode='all' != 'align'");
}

/* Groups out of transfer: every group until 0.28; 0.29 skips them and numbers the rest among
 * themselves; 0.30 skips them and the groups that are not prefix-cacheable, and names groups
 * by their index; with none left it has a message of its own. */
TEST(connector_reference_rules_transfer_groups_by_release) {
    const char *g = doc("", "\"prefill_context_parallel_size\":2", "",
                        G_FULL_OFF(16) "," G_CROSS(16) "," G_MAMBA(32));
    CHECK_STR(ref_under(g, R028), "MooncakeStoreConnector does not support: group 1: "
                                  "CrossAttentionSpec; group 2: MambaSpec with block_size=32 != "
                                  "cache_config.block_size=16 (mamba_cache_mode != 'align'); "
                                  "PCP/DCP > 1 (pcp=2, dcp=1) with hybrid attention");
    CHECK_STR(ref_under(g, R029), "MooncakeStoreConnector does not support: group 0: "
                                  "CrossAttentionSpec; group 1: MambaSpec with block_size=32 != "
                                  "cache_config.block_size=16 (mamba_cache_mode != 'align'); PCP "
                                  "> 1 (pcp=2) with hybrid attention");
    CHECK_STR(ref_under(g, R030), "MooncakeStoreConnector does not support: group 1: "
                                  "CrossAttentionSpec; group 2: mamba_cache_mode='none' != "
                                  "'align'; PCP > 1 (pcp=2) with hybrid attention");
    /* Not prefix-cacheable groups count for 0.29's PCP rule, not for 0.30's. */
    const char *nc = doc("", "\"prefill_context_parallel_size\":2", "",
                         G_FULL(16) "," G_CIRCULAR(16) "," G_HOT(16) "," G_SWMLA(16, true));
    CHECK_STR(ref_under(nc, R029),
              "MooncakeStoreConnector does not support: PCP > 1 (pcp=2) with hybrid attention");
    CHECK_STR(ref_under(nc, R030), "");
    const char *cacheable_swmla =
        doc("", "\"prefill_context_parallel_size\":2", "", G_FULL(16) "," G_SWMLA(16, false));
    CHECK_STR(ref_under(cacheable_swmla, R030),
              "MooncakeStoreConnector does not support: PCP > 1 (pcp=2) with hybrid attention");
    const char *none_left = doc("", "", "", G_FULL_OFF(16) "," G_CIRCULAR(16));
    CHECK_STR(ref_under(none_left, R030),
              "MooncakeStore requires at least one prefix-cacheable KV cache group");
    CHECK_STR(ref_under(none_left, R029), "");
    /* tide transfers every group: it names the ones it would not. */
    connector_verdict v;
    CHECK_EQ(verdict(none_left, TIDE, &v), TIDE_EUNSUPPORTED);
    CHECK_STR(v.message, "TideStoreConnector does not support: group 0: FullAttentionSpec with "
                         "enable_kv_transfer=false (tide transfers every group); group 1: "
                         "CircularBufferSpec is not prefix-cacheable (tide transfers "
                         "prefix-cacheable groups only)");
}

TEST(connector_vllm_versions_parse_to_rule_sets) {
    static const struct {
        const char *in;
        connector_rules rules;
        const char *name;
    } ok[] = {{"0.28", R028, "0.28"},  {"0.10.2", R028, "0.10"}, {"0.29.0", R029, "0.29"},
              {"0.30", R030, "0.30"},  {"0.32.0", R030, "0.32"}, {"0.33", R030, "0.33"},
              {"0.33.1", R030, "0.33"}};
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        connector_vllm v;
        char err[256];
        CHECK_MSG(connector_vllm_parse(ok[i].in, &v, err, sizeof(err)) == 0, "%s: %s", ok[i].in,
                  err);
        CHECK_EQ(v.rules, ok[i].rules);
        CHECK_STR(v.name, ok[i].name);
    }
    static const char *const bad[] = {"",      "0",   "0.",   "33",  "0.33.",    "0.33.0rc1",
                                      "v0.33", "1.0", "0.34", "0.x", "0.33.0.1", "00000.1"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        connector_vllm v;
        char err[256] = "";
        CHECK_MSG(connector_vllm_parse(bad[i], &v, err, sizeof(err)) == -EINVAL, "'%s' accepted",
                  bad[i]);
        CHECK_MSG(strstr(err, bad[i]) != NULL, "'%s': %s", bad[i], err);
    }
    char err[256];
    connector_vllm v;
    connector_vllm_parse("0.34", &v, err, sizeof(err));
    CHECK_STR(err, "vLLM 0.34 is newer than the releases whose MooncakeStoreConnector rules tide "
                   "knows (up to vLLM 0.33): pass --vllm 0.33, or use a tide that knows vLLM 0.34");
    CHECK_STR(connector_rules_span(R029), "vLLM 0.29");
}
