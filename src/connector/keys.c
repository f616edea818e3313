/*
 * keys.c — object keys, layout fingerprints and lookup namespaces (see keys.h).
 *
 * Everything here is a pure function of a checked configuration (ccfg_check returned
 * 0): the replication factors, page sizes and block sizes it derived are read, not
 * recomputed.
 */
#include "connector/keys.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "tide.h"

/* Append to a bounded buffer, remembering the length a big enough buffer would hold. */
typedef struct sbuf {
    char *p;
    size_t cap, len;
} sbuf;

static void sb_add(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_add(sbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    size_t room = b->len < b->cap ? b->cap - b->len : 0;
    int n = vsnprintf(room ? b->p + b->len : NULL, room, fmt, ap);
    va_end(ap);
    if (n > 0) b->len += (size_t)n;
}

int connector_layout_string(const ccfg *cfg, size_t g, char *buf, size_t cap) {
    const connector_group *gr = &cfg->groups[g];
    sbuf b = {buf, cap, 0};
    if (cap) buf[0] = '\0';
    sb_add(&b, "tide-layout-v1|model=%s|spec=%s|block_size=%" PRId64, cfg->model_name,
           ccfg_spec_name(gr->kind), gr->block_size);
    if (gr->kind == CONNECTOR_SPEC_MAMBA) {
        sb_add(&b, "|states=");
        for (size_t i = 0; i < gr->nstates; i++) {
            sb_add(&b, "%s%s(", i ? ";" : "", gr->dtypes[i].name);
            for (size_t d = 0; d < gr->ndims[i]; d++)
                sb_add(&b, "%s%" PRId64, d ? "," : "", gr->shapes[i][d]);
            sb_add(&b, ")");
        }
    } else {
        sb_add(&b,
               "|dtype=%s|cache_dtype=%s|kv_heads=%" PRId64 "|head_size=%" PRId64
               "|head_size_v=%" PRId64,
               gr->dtype.name, cfg->cache_dtype, gr->num_kv_heads, gr->head_size, gr->head_size_v);
        if (gr->kind == CONNECTOR_SPEC_MLA)
            sb_add(&b, "|mla_cache_dtype=%s|compress_ratio=%" PRId64, gr->cache_dtype_str,
                   gr->compress_ratio);
    }
    sb_add(&b,
           "|page_bytes=%" PRId64 "|tp_shards=%" PRId64 "|pp=%" PRId64 "|pcp=%" PRId64
           "|dcp=%" PRId64,
           gr->page_bytes, cfg->tp_size / (gr->tp_factor > 0 ? gr->tp_factor : 1), cfg->pp_size,
           cfg->pcp_size, cfg->dcp_size);
    sb_add(&b, "|layers=");
    for (size_t i = 0; i < gr->nlayers; i++)
        sb_add(&b, "%s%s", i ? "," : "", gr->layer_names[i]);
    return (int)b.len;
}

int connector_fingerprint(const ccfg *cfg, size_t g, char out[CONNECTOR_FP_HEX + 1]) {
    char small[1024];
    int n = connector_layout_string(cfg, g, small, sizeof(small));
    uint64_t h;
    if ((size_t)n < sizeof(small)) {
        h = XXH3_64bits(small, (size_t)n);
    } else {
        /* A long layer list: build the whole string on the heap. */
        char *big = malloc((size_t)n + 1);
        if (!big) return -ENOMEM;
        connector_layout_string(cfg, g, big, (size_t)n + 1);
        h = XXH3_64bits(big, (size_t)n);
        free(big);
    }
    snprintf(out, CONNECTOR_FP_HEX + 1, "%016" PRIx64, h);
    return 0;
}

connector_ns connector_own_ns(const ccfg *cfg, size_t g) {
    int f = cfg->groups[g].tp_factor > 0 ? cfg->groups[g].tp_factor : 1;
    connector_ns ns = {cfg->tp_rank / f, cfg->pcp_rank, cfg->dcp_rank, cfg->pp_rank};
    return ns;
}

size_t connector_lookup_namespaces(const ccfg *cfg, size_t g, connector_ns *out, size_t cap) {
    int f = cfg->groups[g].tp_factor > 0 ? cfg->groups[g].tp_factor : 1;
    /* With DCP every TP rank holds its own token slice (factor 1) and its DCP rank is its
     * position inside the DCP group, tp_rank % dcp_size. */
    int64_t shards = cfg->dcp_size > 1 ? cfg->tp_size : cfg->tp_size / f;
    size_t total = (size_t)(cfg->pcp_size * shards * cfg->pp_size), n = 0;
    for (int64_t pcp = 0; pcp < cfg->pcp_size && n < cap; pcp++)
        for (int64_t s = 0; s < shards && n < cap; s++)
            for (int64_t pp = 0; pp < cfg->pp_size && n < cap; pp++, n++) {
                out[n].tp = s;
                out[n].pcp = pcp;
                out[n].dcp = cfg->dcp_size > 1 ? s % cfg->dcp_size : 0;
                out[n].pp = pp;
            }
    return total;
}

static void key_prefix_sb(const ccfg *cfg, size_t g, const connector_ns *ns, sbuf *b) {
    const char *prefix = cfg->extra.cache_prefix ? cfg->extra.cache_prefix : "";
    if (prefix[0]) sb_add(b, "%s@", prefix);
    sb_add(b,
           "%s@fp:%s@tp_rank:%" PRId64 "@pcp%" PRId64 "@dcp%" PRId64 "@pp_rank:%" PRId64
           "@group:%zu",
           cfg->model_name, cfg->groups[g].fingerprint, ns->tp, ns->pcp, ns->dcp, ns->pp, g);
}

int connector_key_prefix(const ccfg *cfg, size_t g, const connector_ns *ns, char *buf, size_t cap) {
    sbuf b = {buf, cap, 0};
    if (cap) buf[0] = '\0';
    key_prefix_sb(cfg, g, ns, &b);
    if (b.len + 2 > TIDE_KEY_MAX) return TIDE_EKEYLONG; /* "@" and one hex digit at least */
    if (b.len >= cap) return TIDE_EBUFSMALL;
    return (int)b.len;
}

int connector_key(const ccfg *cfg, size_t g, const connector_ns *ns, const uint8_t *hash,
                  size_t hlen, char *buf, size_t cap) {
    sbuf b = {buf, cap, 0};
    if (cap) buf[0] = '\0';
    key_prefix_sb(cfg, g, ns, &b);
    sb_add(&b, "@");
    for (size_t i = 0; i < hlen; i++)
        sb_add(&b, "%02x", hash[i]);
    if (b.len > TIDE_KEY_MAX) return TIDE_EKEYLONG;
    if (b.len >= cap) return TIDE_EBUFSMALL;
    return (int)b.len;
}

size_t connector_hash_bytes(const ccfg *cfg) {
    return (cfg->hash_algo == CONNECTOR_HASH_XXHASH || cfg->hash_algo == CONNECTOR_HASH_XXHASH_CBOR)
               ? 16
               : 32;
}

size_t connector_key_max_len(const ccfg *cfg) {
    size_t worst = 0;
    for (size_t g = 0; g < cfg->ngroups; g++) {
        /* The largest rank of every field gives the longest decimal digits. */
        connector_ns ns = {cfg->tp_size - 1, cfg->pcp_size - 1, cfg->dcp_size - 1,
                           cfg->pp_size - 1};
        char tmp[8];
        sbuf b = {tmp, 0, 0};
        key_prefix_sb(cfg, g, &ns, &b);
        size_t len = b.len + 1 + 2 * connector_hash_bytes(cfg);
        if (len > worst) worst = len;
    }
    return worst;
}
