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
static inline void load_ok(const char *json, conncfg *cfg) {
    conncfg_errs e;
    conncfg_errs_init(&e);
    int rc = conncfg_parse_string(json, strlen(json), cfg, &e);
    if (rc == 0) rc = conncfg_check(cfg, &e);
    if (rc != 0)
        test_fail(__FILE__, __LINE__, "rc %d, first problem: %s", rc, e.n ? e.msg[0] : "(none)");
    conncfg_errs_free(&e);
}

/* Parse (and check, when parsing passed); return the rc and leave the problems in *e. */
static inline int load_errs(const char *json, conncfg *cfg, conncfg_errs *e) {
    conncfg_errs_init(e);
    int rc = conncfg_parse_string(json, strlen(json), cfg, e);
    if (rc == 0) rc = conncfg_check(cfg, e);
    return rc;
}

/* Is this exact line among the problems? */
static inline int has_line(const conncfg_errs *e, const char *line) {
    for (size_t i = 0; i < e->n; i++)
        if (strcmp(e->msg[i], line) == 0) return 1;
    return 0;
}

static inline void dump_errs(const conncfg_errs *e) {
    for (size_t i = 0; i < e->n; i++)
        fprintf(stderr, "      problem: %s\n", e->msg[i]);
}

#define CHECK_LINE(errs, line)                                                                     \
    do {                                                                                           \
        if (!has_line((errs), (line))) {                                                           \
            dump_errs(errs);                                                                       \
            test_fail(__FILE__, __LINE__, "no problem line \"%s\"", (line));                       \
        }                                                                                          \
    } while (0)

#endif
