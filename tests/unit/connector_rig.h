/*
 * connector_rig.h — helpers of the connector's lookup and I/O tests: configurations with
 * small pages, block hashes, keys stored straight into a store for chosen namespaces, and
 * worker ranks with paged buffers that are registered, filled and compared.
 */
#ifndef TIDE_CONNECTOR_RIG_H
#define TIDE_CONNECTOR_RIG_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "connector/connector.h"
#include "connector/keys.h"
#include "harness.h"
#include "tide.h"

/* Groups with small pages: 1 KV head of size 4 in float16, 16 tokens a block -> 256 bytes. */
#define R_FULL(bs)                                                                                 \
    "{\"kv_cache_spec\":{\"type\":\"FullAttentionSpec\",\"block_size\":" #bs                       \
    ",\"num_kv_heads\":1,\"head_size\":4,\"dtype\":\"float16\"},\"layer_names\":[\"a0\",\"a1\"]}"
#define R_SWA(bs, w)                                                                               \
    "{\"kv_cache_spec\":{\"type\":\"SlidingWindowSpec\",\"block_size\":" #bs                       \
    ",\"num_kv_heads\":1,\"head_size\":4,\"dtype\":\"float16\",\"sliding_window\":" #w "}}"
#define R_MLA(bs)                                                                                  \
    "{\"kv_cache_spec\":{\"type\":\"MLAAttentionSpec\",\"block_size\":" #bs                        \
    ",\"num_kv_heads\":1,\"head_size\":8,\"dtype\":\"bfloat16\"}}"
#define R_MAMBA(bs)                                                                                \
    "{\"kv_cache_spec\":{\"type\":\"MambaSpec\",\"block_size\":" #bs                               \
    ",\"shapes\":[[2,8],[4,4]],\"dtypes\":[\"float16\",\"float32\"]}}"

/* A configuration document (static buffer): cache block size, extra cache_config keys
 * ("" for none), parallel_config inside, role, extra config inside, the groups. */
static inline const char *rig_doc(int block, const char *cache, const char *parallel,
                                  const char *role, const char *extra, const char *groups) {
    static char buf[8192];
    snprintf(buf, sizeof(buf),
             "{\"model_config\":{\"model\":\"org/Rig-1B\",\"total_num_kv_heads\":8},"
             "\"cache_config\":{\"block_size\":%d%s%s},"
             "\"parallel_config\":{%s},"
             "\"kv_transfer_config\":{\"kv_role\":\"%s\",\"kv_connector_extra_config\":{%s}},"
             "\"kv_cache_config\":{\"kv_cache_groups\":[%s]}}",
             block, cache[0] ? "," : "", cache, parallel, role, extra, groups);
    return buf;
}

static inline tide_connector *rig_open(const char *json, tide_store *st, int role) {
    tide_connector *c = NULL;
    int rc = tide_connector_create_with_store(json, st, role, &c);
    if (rc) test_fail(__FILE__, __LINE__, "create: %s", tide_connector_errmsg(NULL));
    return c;
}

/* n deterministic hashes of len bytes (seeded), into a malloc'd array. */
static inline uint8_t *rig_hashes(uint64_t seed, size_t n, size_t len) {
    uint8_t *h = malloc(n * len + 1);
    for (size_t i = 0; i < n * len; i++) {
        uint64_t x = XXH3_64bits_withSeed(&i, sizeof(i), seed);
        h[i] = (uint8_t)x;
    }
    return h;
}

/* tide's own prefix hashes (tide_prefix_hashes, xxh3: RIG_TIDE_HL bytes each) of a prompt
 * of n tokens (token i = seed * 1000 + i) at `unit` tokens a hash; *nh says how many. */
#define RIG_TIDE_HL 16
static inline uint8_t *rig_prompt_hashes(uint32_t seed, size_t n, size_t unit, size_t *nh) {
    uint32_t *tok = malloc(n * sizeof(uint32_t));
    for (size_t i = 0; i < n; i++)
        tok[i] = seed * 1000 + (uint32_t)i;
    uint8_t *h = malloc((n / unit + 1) * RIG_TIDE_HL);
    int k = tide_prefix_hashes(TIDE_HASH_XXH3, tok, n, unit, NULL, 0, h, n / unit + 1);
    CHECK(k >= 0);
    *nh = (size_t)k;
    free(tok);
    return h;
}

/* Store a small value under the key of (group, namespace ns[which], hash). */
static inline void rig_put_key(tide_store *st, const tide_connector *c, size_t g,
                               const connector_ns *ns, const uint8_t *hash, size_t hlen) {
    char key[TIDE_KEY_MAX + 1];
    int len = connector_key(&c->cfg, g, ns, hash, hlen, key, sizeof(key));
    CHECK(len > 0);
    CHECK_EQ(tide_put(st, key, (size_t)len, "x", 1), 0);
}

/*
 * Store, for every group and every lookup namespace except namespace `skip` (-1: none),
 * what a lookup of `upto` tokens wants: attention blocks ending at or before upto, Mamba
 * snapshots at every scheduler-block boundary up to upto. groups_mask limits the groups.
 */
static inline void rig_store_prefix(tide_store *st, const tide_connector *c, const uint8_t *h,
                                    size_t hlen, int64_t upto, long skip, unsigned groups_mask) {
    const ccfg *cfg = &c->cfg;
    for (size_t g = 0; g < cfg->ngroups; g++) {
        if (!(groups_mask & (1u << g))) continue;
        connector_ns ns[64];
        size_t nns = connector_lookup_namespaces(cfg, g, ns, 64);
        CHECK(nns <= 64);
        int64_t unit = cfg->groups[g].kind == CONNECTOR_SPEC_MAMBA ? cfg->scheduler_block_size
                                                                   : cfg->groups[g].eff_block_size;
        for (int64_t end = unit; end <= upto; end += unit)
            for (size_t s = 0; s < nns; s++)
                if ((long)s != skip)
                    rig_put_key(st, c, g, &ns[s], h + (end / cfg->hash_block_size - 1) * hlen,
                                hlen);
    }
}

static inline int64_t rig_hit(tide_connector *c, int64_t ntok, const uint8_t *h, size_t nh,
                              size_t hlen) {
    int64_t hit = -1;
    int rc = tide_connector_hit_tokens(c, ntok, h, nh, hlen, &hit);
    if (rc) test_fail(__FILE__, __LINE__, "hit_tokens: %s", tide_connector_errmsg(c));
    return hit;
}

/* A worker rank's paged memory: for each group, `layers` tensors of shape
 * (2, nblocks, page/2) bytes (K and V planes: two segments each). */
typedef struct rig_rank {
    tide_connector *w;
    uint8_t *mem[8][4]; /* [group][layer] */
    size_t page[8];
    int layers, ngroups;
    int64_t nblocks;
} rig_rank;

static inline void rig_rank_open(rig_rank *r, const char *json, tide_store *st, int64_t nblocks,
                                 int layers) {
    memset(r, 0, sizeof(*r));
    r->w = rig_open(json, st, TIDE_CONNECTOR_WORKER);
    r->ngroups = (int)r->w->cfg.ngroups;
    r->layers = layers;
    r->nblocks = nblocks;
    for (int g = 0; g < r->ngroups; g++) {
        r->page[g] = (size_t)r->w->cfg.groups[g].page_bytes;
        for (int l = 0; l < layers; l++) {
            size_t bytes = r->page[g] * (size_t)nblocks;
            r->mem[g][l] = calloc(1, bytes);
            int64_t shape[3] = {2, nblocks, (int64_t)r->page[g] / 2};
            int64_t strides[3] = {nblocks * (int64_t)r->page[g] / 2, (int64_t)r->page[g] / 2, 1};
            int rc = tide_connector_register_region(r->w, g, r->mem[g][l], bytes, nblocks, 3, shape,
                                                    strides, 1);
            if (rc) test_fail(__FILE__, __LINE__, "register: %s", tide_connector_errmsg(r->w));
        }
    }
}

static inline void rig_rank_close(rig_rank *r) {
    tide_connector_destroy(r->w);
    for (int g = 0; g < r->ngroups; g++)
        for (int l = 0; l < r->layers; l++)
            free(r->mem[g][l]);
}

/* The byte at offset i of block b's bytes in group g, layer l, plane p of a rank, as a
 * pattern derived from (seed, g, b, l, p, i). */
static inline uint8_t rig_pattern(uint64_t seed, int g, int64_t b, int l, int p, size_t i) {
    uint64_t v[6] = {seed, (uint64_t)g, (uint64_t)b, (uint64_t)l, (uint64_t)p, i};
    return (uint8_t)XXH3_64bits(v, sizeof(v));
}

static inline uint8_t *rig_at(rig_rank *r, int g, int l, int p, int64_t b) {
    return r->mem[g][l] + (size_t)p * (size_t)r->nblocks * (r->page[g] / 2) +
           (size_t)b * (r->page[g] / 2);
}

static inline void rig_fill(rig_rank *r, int g, int64_t b, uint64_t seed) {
    for (int l = 0; l < r->layers; l++)
        for (int p = 0; p < 2; p++)
            for (size_t i = 0; i < r->page[g] / 2; i++)
                rig_at(r, g, l, p, b)[i] = rig_pattern(seed, g, b, l, p, i);
}

/* Block b2 of rank r2 holds exactly what block b1 of rank r1 holds (group g). */
static inline int rig_same(rig_rank *r1, int64_t b1, rig_rank *r2, int64_t b2, int g) {
    for (int l = 0; l < r1->layers; l++)
        for (int p = 0; p < 2; p++)
            if (memcmp(rig_at(r1, g, l, p, b1), rig_at(r2, g, l, p, b2), r1->page[g] / 2)) return 0;
    return 1;
}

static inline int rig_zero(rig_rank *r, int64_t b, int g) {
    for (int l = 0; l < r->layers; l++)
        for (int p = 0; p < 2; p++)
            for (size_t i = 0; i < r->page[g] / 2; i++)
                if (rig_at(r, g, l, p, b)[i]) return 0;
    return 1;
}

/* The ids get_finished reports, joined with ',' (static buffer). */
static inline const char *rig_finished(tide_connector *w, int kind) {
    static char out[1024];
    char buf[512];
    out[0] = '\0';
    int n = tide_connector_get_finished(w, kind, buf, sizeof(buf));
    CHECK(n >= 0);
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        snprintf(out + strlen(out), sizeof(out) - strlen(out), "%s%s", i ? "," : "", buf + off);
        off += strlen(buf + off) + 1;
    }
    return out;
}

#endif
