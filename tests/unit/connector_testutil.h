/*
 * connector_testutil.h — shared helpers of the connector tests: build a configuration
 * document from its parts, parse and check it, and look for exact problem lines.
 */
#ifndef TIDE_CONNECTOR_TESTUTIL_H
#define TIDE_CONNECTOR_TESTUTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "connector/config.h"
#include "harness.h"

/* Spec snippets: one group each. */
#define G_FULL(bs)                                                                                 \
    "{\"kv_cache_spec\":{\"type\":\"FullAttentionSpec\",\"block_size\":" #bs                       \
    ",\"num_kv_heads\":8,\"head_size\":128,\"dtype\":\"bfloat16\"}}"
#define G_SLIDING(bs, w)                                                                           \
    "{\"kv_cache_spec\":{\"type\":\"SlidingWindowSpec\",\"block_size\":" #bs                       \
    ",\"num_kv_heads\":8,\"head_size\":128,\"dtype\":\"bfloat16\",\"sliding_window\":" #w "}}"
#define G_CROSS(bs)                                                                                \
    "{\"kv_cache_spec\":{\"type\":\"CrossAttentionSpec\",\"block_size\":" #bs                      \
    ",\"num_kv_heads\":8,\"head_size\":64,\"dtype\":\"float16\"}}"
#define G_MLA(bs)                                                                                  \
    "{\"kv_cache_spec\":{\"type\":\"MLAAttentionSpec\",\"block_size\":" #bs                        \
    ",\"num_kv_heads\":1,\"head_size\":576,\"dtype\":\"bfloat16\"}}"
#define G_MAMBA(bs)                                                                                \
    "{\"kv_cache_spec\":{\"type\":\"MambaSpec\",\"block_size\":" #bs                               \
    ",\"shapes\":[[3,1024],[8,64,64]],\"dtypes\":[\"bfloat16\",\"float32\"]}}"

/* An attention group with a one-byte page per token, so that a block of ~2^47 tokens still
 * has a page tide accepts (for the least-common-multiple limit). */
#define G_TINY(bs)                                                                                 \
    "{\"kv_cache_spec\":{\"type\":\"FullAttentionSpec\",\"block_size\":" #bs                       \
    ",\"num_kv_heads\":1,\"head_size\":1,\"head_size_v\":0,\"dtype\":\"int8\"}}"

/* A whole document. Each part is the inside of its object ("" for none); groups is the
 * inside of the kv_cache_groups array. Returns a static buffer. */
static inline const char *doc(const char *cache, const char *parallel, const char *transfer,
                              const char *groups) {
    static char buf[16384];
    snprintf(buf, sizeof(buf),
             "{\"model_config\":{\"model\":\"org/Model-7B\"},"
             "\"cache_config\":{\"block_size\":16%s%s},"
             "\"parallel_config\":{%s},"
             "\"kv_transfer_config\":{\"kv_role\":\"kv_both\"%s%s},"
             "\"kv_cache_config\":{\"kv_cache_groups\":[%s]}}",
             cache[0] ? "," : "", cache, parallel, transfer[0] ? "," : "", transfer, groups);
    return buf;
}

/* Parse and check; fail the test on any problem. */
static inline void load_ok(const char *json, ccfg *cfg) {
    ccfg_errs e;
    ccfg_errs_init(&e);
    int rc = ccfg_parse_string(json, strlen(json), cfg, &e);
    if (rc == 0) rc = ccfg_check(cfg, &e);
    if (rc != 0)
        test_fail(__FILE__, __LINE__, "rc %d, first problem: %s", rc, e.n ? e.msg[0] : "(none)");
    ccfg_errs_free(&e);
}

/* Parse (and check, when parsing passed); return the rc and leave the problems in *e. */
static inline int load_errs(const char *json, ccfg *cfg, ccfg_errs *e) {
    ccfg_errs_init(e);
    int rc = ccfg_parse_string(json, strlen(json), cfg, e);
    if (rc == 0) rc = ccfg_check(cfg, e);
    return rc;
}

/* Is this exact line among the problems? */
static inline int has_line(const ccfg_errs *e, const char *line) {
    for (size_t i = 0; i < e->n; i++)
        if (strcmp(e->msg[i], line) == 0) return 1;
    return 0;
}

static inline void dump_errs(const ccfg_errs *e) {
    for (size_t i = 0; i < e->n; i++)
        fprintf(stderr, "      problem: %s\n", e->msg[i]);
}

/*
 * Configurations the reference connector gives its verdict on although tide's own derived
 * checks (block sizes against the hash block size, the least common multiple of the block
 * sizes, the retention interval) refuse them: vLLM builds the connector before its KV-cache
 * manager checks group block sizes, so the connector's message is what vLLM says. One case
 * per reference rule (none, cross attention, Mamba block size, hybrid under PCP/DCP, all of
 * them) and tide check that can fire with it. 140737488355329 is 2^47 + 1: odd, so its
 * least common multiple with 16 is past tide's 2^48 limit.
 */
#define REF_SAYS "MooncakeStoreConnector does not support: "
#define REF_MAMBA(g, b)                                                                            \
    "group " #g ": MambaSpec with block_size=" #b " != cache_config.block_size=16 "                \
    "(mamba_cache_mode != 'align')"
#define HASH_LINE(g, b, h)                                                                         \
    "kv_cache_config.kv_cache_groups[" #g "].kv_cache_spec.block_size: block_size (" #b            \
    ") must be a multiple of hash_block_size (" #h ")"
#define RETENTION_LINE(r, s)                                                                       \
    "cache_config.prefix_cache_retention_interval: " #r " is not a multiple of the scheduler "     \
    "block size (" #s ")"
#define LCM_LINE                                                                                   \
    "kv_cache_config.kv_cache_groups: the least common multiple of the group block sizes is "      \
    "too large"
#define TP2_DCP2 "\"tensor_parallel_size\":2,\"decode_context_parallel_size\":2"

typedef struct derived_case {
    const char *name;
    const char *cache, *parallel, *groups; /* doc() parts */
    const char *ref;                       /* the reference's message; "" = it accepts */
    const char *problem, *problem2;        /* tide's problem lines (problem2 may be NULL) */
} derived_case;

static const derived_case derived_cases[] = {
    /* The example: a Mamba group outside align mode hashes in scheduler blocks
     * (the LCM, 64), which the 16-token attention block does not fill. */
    {"mamba 'all', block 64 vs 16", "\"mamba_cache_mode\":\"all\"", "", G_FULL(16) "," G_MAMBA(64),
     REF_SAYS REF_MAMBA(1, 64), HASH_LINE(0, 16, 64), NULL},
    {"mamba 'none', block 64 vs 16", "", "", G_FULL(16) "," G_MAMBA(64), REF_SAYS REF_MAMBA(1, 64),
     HASH_LINE(0, 16, 64), NULL},
    {"mamba block x prefix_match_unit", "\"mamba_cache_mode\":\"align\",\"prefix_match_unit\":32",
     "", G_FULL(16) "," G_MAMBA(64), REF_SAYS REF_MAMBA(1, 64), HASH_LINE(0, 16, 32), NULL},
    {"mamba block x retention",
     "\"mamba_cache_mode\":\"align\",\"prefix_cache_retention_interval\":40", "",
     G_FULL(16) "," G_MAMBA(64), REF_SAYS REF_MAMBA(1, 64), RETENTION_LINE(40, 64), NULL},
    {"mamba block x LCM", "\"mamba_cache_mode\":\"align\"", "",
     G_FULL(16) "," G_MAMBA(140737488355329), REF_SAYS REF_MAMBA(1, 140737488355329), LCM_LINE,
     NULL},
    {"cross x mamba outside align", "\"mamba_cache_mode\":\"all\"", "",
     G_CROSS(16) "," G_FULL(48) "," G_MAMBA(16), REF_SAYS "group 0: CrossAttentionSpec",
     HASH_LINE(0, 16, 48), HASH_LINE(2, 16, 48)},
    {"cross x prefix_match_unit", "\"prefix_match_unit\":32", "", G_CROSS(16) "," G_FULL(64),
     REF_SAYS "group 0: CrossAttentionSpec", HASH_LINE(0, 16, 32), NULL},
    {"cross x retention", "\"prefix_cache_retention_interval\":40", "", G_CROSS(16) "," G_FULL(32),
     REF_SAYS "group 0: CrossAttentionSpec", RETENTION_LINE(40, 32), NULL},
    {"cross x LCM", "", "", G_CROSS(16) "," G_TINY(140737488355329),
     REF_SAYS "group 0: CrossAttentionSpec", LCM_LINE, NULL},
    {"hybrid DCP x mamba outside align", "\"mamba_cache_mode\":\"all\"", TP2_DCP2,
     G_FULL(16) "," G_MAMBA(16), REF_SAYS "PCP/DCP > 1 (pcp=1, dcp=2) with hybrid attention",
     HASH_LINE(1, 16, 32), NULL},
    {"hybrid DCP x prefix_match_unit", "\"prefix_match_unit\":48", TP2_DCP2,
     G_SLIDING(16, 128) "," G_FULL(16), REF_SAYS "PCP/DCP > 1 (pcp=1, dcp=2) with hybrid attention",
     HASH_LINE(0, 32, 48), HASH_LINE(1, 32, 48)},
    {"hybrid DCP x retention", "\"prefix_cache_retention_interval\":48", TP2_DCP2,
     G_SLIDING(16, 128) "," G_FULL(16), REF_SAYS "PCP/DCP > 1 (pcp=1, dcp=2) with hybrid attention",
     RETENTION_LINE(48, 32), NULL},
    {"hybrid PCP x LCM", "", "\"prefill_context_parallel_size\":2",
     G_FULL(16) "," G_TINY(140737488355329),
     REF_SAYS "PCP/DCP > 1 (pcp=2, dcp=1) with hybrid attention", LCM_LINE, NULL},
    /* The reference accepts; vLLM's KV-cache manager then stops at tide's problem. */
    {"accepted x mamba outside align", "\"mamba_cache_mode\":\"all\"", "",
     G_FULL(48) "," G_MAMBA(16), "", HASH_LINE(1, 16, 48), NULL},
    {"accepted x prefix_match_unit", "\"prefix_match_unit\":32", "",
     G_FULL(64) "," G_SLIDING(48, 128), "", HASH_LINE(1, 48, 32), NULL},
    {"accepted x retention", "\"prefix_cache_retention_interval\":40", "", G_FULL(16), "",
     RETENTION_LINE(40, 16), NULL},
    {"accepted x LCM", "", "", G_FULL(16) "," G_TINY(140737488355329), "", LCM_LINE, NULL},
    /* Every reference rule at once, with two of tide's problems. */
    {"all rules x hash block and retention",
     "\"mamba_cache_mode\":\"all\",\"prefix_cache_retention_interval\":40",
     "\"tensor_parallel_size\":2,\"prefill_context_parallel_size\":2,"
     "\"decode_context_parallel_size\":2",
     G_CROSS(16) "," G_MAMBA(32) "," G_FULL(16) "," G_MAMBA(48),
     REF_SAYS "group 0: CrossAttentionSpec; " REF_MAMBA(1, 32) "; " REF_MAMBA(
         3, 48) "; PCP/DCP > 1 (pcp=2, dcp=2) with hybrid attention",
     HASH_LINE(3, 48, 96), RETENTION_LINE(40, 96)},
};
#define N_DERIVED_CASES (sizeof(derived_cases) / sizeof(derived_cases[0]))

#define CHECK_LINE(errs, line)                                                                     \
    do {                                                                                           \
        if (!has_line((errs), (line))) {                                                           \
            dump_errs(errs);                                                                       \
            test_fail(__FILE__, __LINE__, "no problem line \"%s\"", (line));                       \
        }                                                                                          \
    } while (0)

#endif
