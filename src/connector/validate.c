/*
 * validate.c — value rules, derived values and the two connectors' verdicts.
 *
 * ccfg_check() decides whether a configuration is coherent at all (vLLM itself would
 * refuse it otherwise) and derives what the rest of the connector reads: each group's
 * effective block size, page size, TP replication factor and fingerprint, the scheduler
 * block size and the hash block size.
 *
 * connector_validate() then answers "does this connector take it?" for two rule sets:
 *
 *   CONNECTOR_IMPL_REFERENCE  vLLM's MooncakeStoreConnector of one release: its items, their
 *                        order and wording, and its capacity-only skip, exactly. The rules
 *                        changed in 0.29 and 0.30 (connector_rules; the release table
 *                        vllm_releases maps a release to its rule set); tests/vllm33 checks
 *                        them against the real function of vLLM 0.32 and 0.33.
 *   CONNECTOR_IMPL_TIDE       tide's connector. Each combination the reference rejects has one
 *                        rule function below that decides tide's answer; supporting a
 *                        combination later means changing that one function (and the
 *                        README table), nothing else.
 *
 * The checks run in vLLM's order. vLLM checks its configuration and computes the page
 * sizes (to size the KV cache) before it builds a connector; its KV-cache manager checks
 * the block sizes against the hash block size and the retention interval after. So once
 * the first part passes (cfg->reached_connector), the reference's verdict is defined even
 * when the block-size checks fail: it is what vLLM would say. tide's own verdict needs the
 * whole check (cfg->checked).
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "connector/config.h"
#include "connector/keys.h"
#include "tide.h"

#define GP "kv_cache_config.kv_cache_groups[%zu].kv_cache_spec"

const char *connector_impl_name(connector_impl impl) {
    return impl == CONNECTOR_IMPL_TIDE ? "TideStoreConnector" : "MooncakeStoreConnector";
}

int connector_capacity_only(const ccfg *cfg) {
    return cfg->kv_role == CONNECTOR_ROLE_CONSUMER && !cfg->extra.enable_lookup &&
           !cfg->extra.save_decode_cache;
}

int connector_tp_factor(const ccfg *cfg, size_t g) {
    const connector_group *gr = &cfg->groups[g];
    if (cfg->dcp_size > 1) return 1;
    if (gr->kind == CONNECTOR_SPEC_MAMBA) return 1; /* each rank holds its own state shard */
    if (gr->kind == CONNECTOR_SPEC_MLA) return (int)cfg->tp_size; /* one latent, on every rank */
    /* Without the model's total, assume every rank holds distinct heads: factor 1 keeps
     * keys correct (only deduplication across replicated ranks is lost). */
    int64_t total =
        cfg->total_num_kv_heads > 0 ? cfg->total_num_kv_heads : gr->num_kv_heads * cfg->tp_size;
    int64_t f = total > 0 ? cfg->tp_size / total : 1;
    return f < 1 ? 1 : (int)f;
}

static int64_t gcd64(int64_t a, int64_t b) {
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* Multiply with a bound; -1 past it. */
static int64_t mul_capped(int64_t a, int64_t b) {
    int64_t r;
    if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r) || r > ((int64_t)1 << 48)) return -1;
    return r;
}

/* Page bytes of one block of one layer, before padding; -1 on overflow. */
static int64_t unpadded_page(const connector_group *g) {
    if (g->kind == CONNECTOR_SPEC_MAMBA) {
        int64_t total = 0;
        for (size_t i = 0; i < g->nstates; i++) {
            int64_t n = g->dtypes[i].size;
            for (size_t d = 0; d < g->ndims[i] && n >= 0; d++)
                n = mul_capped(n, g->shapes[i][d]);
            if (n < 0) return -1;
            total += n;
        }
        return total;
    }
    if (g->kind == CONNECTOR_SPEC_HISPARSE_HOT || g->kind == CONNECTOR_SPEC_HISPARSE_RESIDENT)
        return g->page_size;
    int64_t tokens = g->block_size / (g->compress_ratio > 0 ? g->compress_ratio : 1);
    int64_t n = mul_capped(g->num_kv_heads, tokens);
    n = n < 0 ? -1 : mul_capped(n, g->head_size + g->head_size_v);
    return n < 0 ? -1 : mul_capped(n, g->dtype.size);
}

static void positive(ccfg_errs *e, const char *path, int64_t v) {
    if (v <= 0) ccfg_errs_add(e, "%s: must be > 0, got %" PRId64, path, v);
}

/* Parallel sizes: positive and at most CONNECTOR_MAX_PARALLEL, so that namespace counts and
 * factors stay small numbers. */
#define CONNECTOR_MAX_PARALLEL 4096
static void parallel_size(ccfg_errs *e, const char *name, int64_t v) {
    if (v <= 0 || v > CONNECTOR_MAX_PARALLEL)
        ccfg_errs_add(e, "parallel_config.%s: must be 1..%d, got %" PRId64, name,
                      CONNECTOR_MAX_PARALLEL, v);
}

static void check_group(ccfg *c, size_t i, ccfg_errs *e) {
    connector_group *g = &c->groups[i];
    char p[160];
#define FIELD(name) (snprintf(p, sizeof(p), GP "." name, i), p)
    positive(e, FIELD("block_size"), g->block_size);
    if (g->kind == CONNECTOR_SPEC_MAMBA) {
        for (size_t s = 0; s < g->nstates; s++)
            for (size_t d = 0; d < g->ndims[s]; d++)
                if (g->shapes[s][d] <= 0)
                    ccfg_errs_add(e, GP ".shapes[%zu][%zu]: must be > 0, got %" PRId64, i, s, d,
                                  g->shapes[s][d]);
        if (g->num_speculative_blocks < 0)
            ccfg_errs_add(e, GP ".num_speculative_blocks: must be >= 0, got %" PRId64, i,
                          g->num_speculative_blocks);
        if (c->mamba_block_size > 0 && g->block_size != c->mamba_block_size)
            ccfg_errs_add(e,
                          GP ".block_size: %" PRId64 " differs from cache_config."
                             "mamba_block_size %" PRId64,
                          i, g->block_size, c->mamba_block_size);
    } else if (g->kind == CONNECTOR_SPEC_HISPARSE_HOT ||
               g->kind == CONNECTOR_SPEC_HISPARSE_RESIDENT) {
        positive(e, FIELD("page_size"), g->page_size);
        if (g->kind == CONNECTOR_SPEC_HISPARSE_HOT)
            positive(e, FIELD("blocks_per_request"), g->blocks_per_request);
    } else {
        positive(e, FIELD("num_kv_heads"), g->num_kv_heads);
        positive(e, FIELD("head_size"), g->head_size);
        /* head_size_v defaults to head_size: report it only when it says something else. */
        if (g->head_size_v < 0 && g->head_size_v != g->head_size)
            ccfg_errs_add(e, GP ".head_size_v: must be >= 0, got %" PRId64, i, g->head_size_v);
        if (g->kind == CONNECTOR_SPEC_SLIDING || g->kind == CONNECTOR_SPEC_SLIDING_MLA) {
            positive(e, FIELD("sliding_window"), g->sliding_window);
            if (g->extra_retained_tokens < 0)
                ccfg_errs_add(e, GP ".extra_retained_tokens: must be >= 0, got %" PRId64, i,
                              g->extra_retained_tokens);
        } else if (g->sliding_window < 0) {
            ccfg_errs_add(e, GP ".sliding_window: must be > 0 or null, got %" PRId64, i,
                          g->sliding_window);
        }
        if (g->attention_chunk_size < 0)
            ccfg_errs_add(e, GP ".attention_chunk_size: must be > 0 or null, got %" PRId64, i,
                          g->attention_chunk_size);
        if (g->kind == CONNECTOR_SPEC_MLA) {
            if (g->compress_ratio <= 0)
                ccfg_errs_add(e, GP ".compress_ratio: must be > 0, got %" PRId64, i,
                              g->compress_ratio);
            else if (g->block_size > 0 && g->block_size % g->compress_ratio)
                ccfg_errs_add(e,
                              GP ".compress_ratio: %" PRId64 " does not divide block_size %" PRId64,
                              i, g->compress_ratio, g->block_size);
        }
    }
    if (g->page_size_padded < 0)
        ccfg_errs_add(e, GP ".page_size_padded: must be > 0 or null, got %" PRId64, i,
                      g->page_size_padded);
#undef FIELD
}

/* Derived sizes of every group; returns 0 or -1 when a page size overflows. */
static int derive_pages(ccfg *c, ccfg_errs *e) {
    int bad = 0;
    for (size_t i = 0; i < c->ngroups; i++) {
        connector_group *g = &c->groups[i];
        int64_t page = unpadded_page(g);
        if (page < 0) {
            ccfg_errs_add(e, GP ": page size is too large", i);
            bad = 1;
            continue;
        }
        if (g->page_size_padded > 0 && g->page_size_padded < page) {
            ccfg_errs_add(
                e, GP ".page_size_padded: %" PRId64 " is smaller than the page (%" PRId64 " bytes)",
                i, g->page_size_padded, page);
            bad = 1;
        }
        g->page_bytes = g->page_size_padded > 0 ? g->page_size_padded : page;
        /* DCP spreads an attention block's tokens over the DCP ranks; Mamba state is
         * replicated across them and keeps its own block size. */
        g->eff_block_size =
            g->kind == CONNECTOR_SPEC_MAMBA ? g->block_size : g->block_size * c->dcp_size;
    }
    return bad ? -1 : 0;
}

/* Scheduler and hash block sizes, as vLLM resolves them with a KV connector present, over
 * the groups whose blocks prefix caching hashes (a CircularBufferSpec's block is a ring,
 * a HiSparse spec's a per-request allocation). */
static int derive_block_sizes(ccfg *c, ccfg_errs *e) {
    size_t ncacheable = 0;
    for (size_t i = 0; i < c->ngroups; i++)
        ncacheable += ccfg_spec_prefix_cacheable(&c->groups[i]);
    if (c->ngroups == 1 || ncacheable == 0) {
        c->scheduler_block_size = c->hash_block_size = c->block_size * c->dcp_size;
        c->partial_hits = 0;
        return 0;
    }
    int64_t lcm = 1, gcd = 0;
    int mamba_unaligned = 0;
    for (size_t i = 0; i < c->ngroups; i++) {
        if (!ccfg_spec_prefix_cacheable(&c->groups[i])) continue;
        int64_t b = c->groups[i].eff_block_size;
        lcm = mul_capped(lcm / gcd64(lcm, b), b);
        if (lcm < 0) {
            ccfg_errs_add(e, "kv_cache_config.kv_cache_groups: the least common multiple of "
                             "the group block sizes is too large");
            return -1; /* scheduler and hash block sizes stay 0: unknown */
        }
        gcd = gcd64(gcd, b);
        if (c->groups[i].kind == CONNECTOR_SPEC_MAMBA &&
            c->groups[i].mamba_mode != CONNECTOR_MAMBA_ALIGN)
            mamba_unaligned = 1;
    }
    c->scheduler_block_size = lcm;
    /* A Mamba group outside align mode has snapshots only at its own block ends, so vLLM
     * hashes at scheduler-block granularity. */
    if (mamba_unaligned)
        c->hash_block_size = lcm;
    else
        c->hash_block_size = c->prefix_match_unit > 0 ? c->prefix_match_unit : gcd;
    /* vLLM enables partial hash hits when an align-mode Mamba group's block is larger than
     * the hash block (and DCP is off); its sliding-window manager has no sub-block hits, so
     * tide keeps them off with a sliding-window group, and off under PCP too. */
    int mamba_partial = 0, sliding = 0;
    for (size_t i = 0; i < c->ngroups; i++) {
        const connector_group *g = &c->groups[i];
        if (g->kind == CONNECTOR_SPEC_MAMBA && g->mamba_mode == CONNECTOR_MAMBA_ALIGN &&
            g->block_size > c->hash_block_size)
            mamba_partial = 1;
        if (g->kind == CONNECTOR_SPEC_SLIDING) sliding = 1;
    }
    c->partial_hits = mamba_partial && !sliding && c->dcp_size == 1 && c->pcp_size == 1;
    int bad = 0;
    for (size_t i = 0; i < c->ngroups; i++) {
        if (!ccfg_spec_prefix_cacheable(&c->groups[i])) continue;
        int64_t b = c->groups[i].eff_block_size;
        if (b % c->hash_block_size) {
            ccfg_errs_add(e,
                          GP ".block_size: block_size (%" PRId64
                             ") must be a multiple of hash_block_size (%" PRId64 ")",
                          i, b, c->hash_block_size);
            bad = 1;
        }
    }
    return bad ? -1 : 0;
}

static void check_rank(ccfg_errs *e, const char *rank, int64_t r, const char *size, int64_t n) {
    if (n >= 1 && (r < 0 || r >= n))
        ccfg_errs_add(e,
                      "parallel_config.%s: %" PRId64 " is out of range for %s %" PRId64
                      " (0..%" PRId64 ")",
                      rank, r, size, n, n - 1);
}

static int blank(const char *s) {
    for (; *s; s++)
        if (!isspace((unsigned char)*s)) return 0;
    return 1;
}

int ccfg_check(ccfg *c, ccfg_errs *e) {
    size_t before = e->n;
    c->checked = c->reached_connector = 0;
    c->scheduler_block_size = c->hash_block_size = 0;

    /* model_config */
    c->model_name[0] = '\0';
    if (!c->model || !c->model[0]) {
        ccfg_errs_add(e, "model_config.model: must not be empty");
    } else {
        /* The last path component, ignoring trailing slashes (as the reference does). */
        size_t len = strlen(c->model);
        while (len > 0 && c->model[len - 1] == '/')
            len--;
        size_t start = len;
        while (start > 0 && c->model[start - 1] != '/')
            start--;
        if (len == start)
            ccfg_errs_add(e, "model_config.model: '%s' has no name component", c->model);
        else if (len - start >= sizeof(c->model_name))
            ccfg_errs_add(e, "model_config.model: name longer than %zu characters",
                          sizeof(c->model_name) - 1);
        else
            snprintf(c->model_name, sizeof(c->model_name), "%.*s", (int)(len - start),
                     c->model + start);
    }
    if (c->total_num_kv_heads < 0)
        ccfg_errs_add(e, "model_config.total_num_kv_heads: must be > 0, got %" PRId64,
                      c->total_num_kv_heads);

    /* cache_config */
    positive(e, "cache_config.block_size", c->block_size);
    if (c->prefix_match_unit < 0)
        ccfg_errs_add(e, "cache_config.prefix_match_unit: must be > 0 or null, got %" PRId64,
                      c->prefix_match_unit);
    if (c->mamba_block_size < 0)
        ccfg_errs_add(e, "cache_config.mamba_block_size: must be > 0 or null, got %" PRId64,
                      c->mamba_block_size);
    if (c->retention_interval < -1)
        ccfg_errs_add(e,
                      "cache_config.prefix_cache_retention_interval: must be >= 0 or null, "
                      "got %" PRId64,
                      c->retention_interval);
    /* vLLM checks the align-mode rule first, then the connector rule; both are listed. */
    if (c->use_replayssm && c->mamba_cache_mode == CONNECTOR_MAMBA_ALL)
        ccfg_errs_add(e, "cache_config.use_replayssm: --use-replayssm supports prefix caching "
                         "only in align mode; pass --mamba-cache-mode align");
    if (c->use_replayssm)
        ccfg_errs_add(e, "cache_config.use_replayssm: --use-replayssm is incompatible with KV "
                         "connectors (P/D disaggregation, KV cache offload)");

    /* parallel_config */
    parallel_size(e, "tensor_parallel_size", c->tp_size);
    parallel_size(e, "pipeline_parallel_size", c->pp_size);
    parallel_size(e, "prefill_context_parallel_size", c->pcp_size);
    parallel_size(e, "decode_context_parallel_size", c->dcp_size);
    parallel_size(e, "data_parallel_size", c->dp_size);
    check_rank(e, "tp_rank", c->tp_rank, "tensor_parallel_size", c->tp_size);
    check_rank(e, "pp_rank", c->pp_rank, "pipeline_parallel_size", c->pp_size);
    check_rank(e, "pcp_rank", c->pcp_rank, "prefill_context_parallel_size", c->pcp_size);
    check_rank(e, "data_parallel_rank", c->dp_rank, "data_parallel_size", c->dp_size);
    if (c->tp_size >= 1 && c->dcp_size >= 1) {
        if (c->tp_size % c->dcp_size) {
            ccfg_errs_add(e,
                          "parallel_config.decode_context_parallel_size: %" PRId64
                          " does not divide tensor_parallel_size %" PRId64
                          " (DCP ranks subdivide the TP group)",
                          c->dcp_size, c->tp_size);
        } else if (c->tp_rank >= 0 && c->tp_rank < c->tp_size) {
            int64_t want = c->tp_rank % c->dcp_size;
            if (!c->dcp_rank_given)
                c->dcp_rank = want;
            else if (c->dcp_rank != want)
                ccfg_errs_add(e,
                              "parallel_config.dcp_rank: %" PRId64
                              " does not match tp_rank %% decode_context_parallel_size = "
                              "%" PRId64,
                              c->dcp_rank, want);
        }
    }

    /* kv_transfer_config */
    if (c->extra.preferred_segment && blank(c->extra.preferred_segment))
        ccfg_errs_add(e, "kv_transfer_config.kv_connector_extra_config.preferred_segment: "
                         "must be a non-empty string");
    if (c->extra.lookup_rpc_port < 0 || c->extra.lookup_rpc_port > 65535)
        ccfg_errs_add(e,
                      "kv_transfer_config.kv_connector_extra_config.lookup_rpc_port: %" PRId64
                      " is not a port number (0..65535)",
                      c->extra.lookup_rpc_port);

    /* kv_cache_config */
    if (c->num_blocks < 0)
        ccfg_errs_add(e, "kv_cache_config.num_blocks: must be > 0 or null, got %" PRId64,
                      c->num_blocks);
    if (c->ngroups == 0)
        ccfg_errs_add(e, "kv_cache_config.kv_cache_groups: at least one group is required");
    for (size_t i = 0; i < c->ngroups; i++)
        check_group(c, i, e);

    /* Derived values need coherent inputs. */
    if (e->n > before || e->oom) return TIDE_ECONFIG;
    if (derive_pages(c, e) < 0) return TIDE_ECONFIG;
    /* vLLM has checked all of the above before it builds a connector; what follows is its
     * KV-cache manager's, after the connector's own rules have run. */
    c->reached_connector = 1;
    derive_block_sizes(c, e);
    if (c->retention_interval > 0 && c->scheduler_block_size > 0 &&
        c->retention_interval % c->scheduler_block_size)
        ccfg_errs_add(e,
                      "cache_config.prefix_cache_retention_interval: %" PRId64
                      " is not a multiple of the scheduler block size (%" PRId64 ")",
                      c->retention_interval, c->scheduler_block_size);
    if (e->n > before || e->oom) return TIDE_ECONFIG;
    for (size_t i = 0; i < c->ngroups; i++)
        c->groups[i].tp_factor = connector_tp_factor(c, i);
    for (size_t i = 0; i < c->ngroups; i++)
        if (connector_fingerprint(c, i, c->groups[i].fingerprint) < 0) return -ENOMEM;
    c->checked = 1;
    return 0;
}

/* ------------------------------------------------------------------------------------
 * Verdicts.
 * ---------------------------------------------------------------------------------- */

static void add_item(connector_verdict *v, connector_item_kind kind, int group, int64_t a,
                     int64_t b, const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static void add_item(connector_verdict *v, connector_item_kind kind, int group, int64_t a,
                     int64_t b, const char *fmt, ...) {
    if (v->nitems >= CONNECTOR_MAX_ITEMS) return;
    connector_item *it = &v->items[v->nitems++];
    it->kind = kind;
    it->group = group;
    it->a = a;
    it->b = b;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(it->text, sizeof(it->text), fmt, ap);
    va_end(ap);
}

/* ------------------------------------------------------------------------------------
 * vLLM releases and their rule sets.
 * ---------------------------------------------------------------------------------- */

/* Each 0.x release range and the rules its MooncakeStoreConnector applies; the last row
 * ends at CONNECTOR_VLLM_NEWEST. Supporting a new release: extend the last row or add one
 * (and a case to reference_rules), and update CONNECTOR_VLLM_NEWEST. */
static const struct {
    int minor_lo, minor_hi;
    connector_rules rules;
    const char *span;
} vllm_releases[] = {
    {0, 28, CONNECTOR_RULES_SEED, "vLLM <= 0.28"},
    {29, 29, CONNECTOR_RULES_V029, "vLLM 0.29"},
    {30, 33, CONNECTOR_RULES_V030, "vLLM 0.30 to 0.33"},
};
#define NRELEASES (sizeof(vllm_releases) / sizeof(vllm_releases[0]))

const char *connector_rules_span(connector_rules r) {
    for (size_t i = 0; i < NRELEASES; i++)
        if (vllm_releases[i].rules == r) return vllm_releases[i].span;
    return "?";
}

/* A decimal number of at most 4 digits at *s; -1 when none. */
static int version_part(const char **s) {
    int n = 0, d = 0;
    while (isdigit((unsigned char)**s) && d < 5) {
        n = n * 10 + (**s - '0');
        (*s)++;
        d++;
    }
    return d == 0 || d > 4 ? -1 : n;
}

int connector_vllm_parse(const char *s, connector_vllm *out, char *err, size_t cap) {
    const char *p = s;
    int major = version_part(&p), minor = -1;
    if (major >= 0 && *p == '.') {
        p++;
        minor = version_part(&p);
    }
    if (minor >= 0 && *p == '.') {
        p++;
        if (version_part(&p) < 0) minor = -1;
    }
    if (major < 0 || minor < 0 || *p) {
        snprintf(err, cap, "'%s' is not a vLLM version (MAJOR.MINOR or MAJOR.MINOR.PATCH, e.g. %s)",
                 s, CONNECTOR_VLLM_NEWEST);
        return -EINVAL;
    }
    for (size_t i = 0; major == 0 && i < NRELEASES; i++)
        if (minor >= vllm_releases[i].minor_lo && minor <= vllm_releases[i].minor_hi) {
            out->major = major;
            out->minor = minor;
            out->rules = vllm_releases[i].rules;
            snprintf(out->name, sizeof(out->name), "%d.%d", major, minor);
            return 0;
        }
    snprintf(err, cap,
             "vLLM %s is newer than the releases whose MooncakeStoreConnector rules tide knows "
             "(up to vLLM %s): pass --vllm %s, or use a tide that knows vLLM %s",
             s, CONNECTOR_VLLM_NEWEST, CONNECTOR_VLLM_NEWEST, s);
    return -EINVAL;
}

/* ------------------------------------------------------------------------------------
 * The reference's rules.
 * ---------------------------------------------------------------------------------- */

/* i: the group's index in the configuration (item.group); idx: the number the message
 * names. */
static void reference_mamba_block_size(const ccfg *c, size_t i, size_t idx, connector_verdict *v) {
    const connector_group *g = &c->groups[i];
    if (g->kind == CONNECTOR_SPEC_MAMBA && g->block_size != c->block_size)
        add_item(v, CONNECTOR_ITEM_MAMBA_BLOCK_SIZE, (int)i, g->block_size, c->block_size,
                 "group %zu: MambaSpec with block_size=%" PRId64
                 " != cache_config.block_size=%" PRId64 " (mamba_cache_mode != 'align')",
                 idx, g->block_size, c->block_size);
}

static void reference_cross(const ccfg *c, size_t i, size_t idx, connector_verdict *v) {
    if (c->groups[i].kind == CONNECTOR_SPEC_CROSS)
        add_item(v, CONNECTOR_ITEM_CROSS_ATTENTION, (int)i, 0, 0, "group %zu: CrossAttentionSpec",
                 idx);
}

static void reference_hybrid_pcp(const ccfg *c, size_t ngroups, connector_verdict *v) {
    if (ngroups > 1 && c->pcp_size > 1)
        add_item(v, CONNECTOR_ITEM_HYBRID_PCP, -1, c->pcp_size, c->dcp_size,
                 "PCP > 1 (pcp=%" PRId64 ") with hybrid attention", c->pcp_size);
}

/* The reference's rules, in its order, under one release's rule set. Items carry the group's
 * index (item.group); the message names it (<= 0.28, >= 0.30), or its position among the
 * transfer groups (0.29). Returns 1 when the verdict is the stand-alone "no prefix-cacheable
 * group" error. */
static int reference_rules(const ccfg *c, connector_rules rules, connector_verdict *v) {
    size_t n = 0;
    switch (rules) {
    case CONNECTOR_RULES_SEED:
        for (size_t i = 0; i < c->ngroups; i++) {
            reference_cross(c, i, i, v);
            reference_mamba_block_size(c, i, i, v);
        }
        if (c->ngroups > 1 && c->pcp_size * c->dcp_size > 1)
            add_item(v, CONNECTOR_ITEM_HYBRID_CP, -1, c->pcp_size, c->dcp_size,
                     "PCP/DCP > 1 (pcp=%" PRId64 ", dcp=%" PRId64 ") with hybrid attention",
                     c->pcp_size, c->dcp_size);
        return 0;
    case CONNECTOR_RULES_V029:
        for (size_t i = 0; i < c->ngroups; i++) {
            if (!c->groups[i].enable_kv_transfer) continue;
            reference_cross(c, i, n, v);
            reference_mamba_block_size(c, i, n, v);
            n++;
        }
        reference_hybrid_pcp(c, n, v);
        return 0;
    case CONNECTOR_RULES_V030:
        for (size_t i = 0; i < c->ngroups; i++)
            n += c->groups[i].enable_kv_transfer && ccfg_spec_prefix_cacheable(&c->groups[i]);
        if (n == 0) {
            add_item(v, CONNECTOR_ITEM_NO_CACHEABLE_GROUP, -1, 0, 0,
                     "MooncakeStore requires at least one prefix-cacheable KV cache group");
            return 1;
        }
        for (size_t i = 0; i < c->ngroups; i++) {
            const connector_group *g = &c->groups[i];
            if (!g->enable_kv_transfer || !ccfg_spec_prefix_cacheable(g)) continue;
            reference_cross(c, i, i, v);
            if (g->kind == CONNECTOR_SPEC_MAMBA && g->mamba_mode != CONNECTOR_MAMBA_ALIGN)
                add_item(v, CONNECTOR_ITEM_MAMBA_MODE, (int)i, 0, 0,
                         "group %zu: mamba_cache_mode='%s' != 'align'", i,
                         ccfg_mamba_mode_name(g->mamba_mode));
        }
        reference_hybrid_pcp(c, n, v);
        return 0;
    }
    return 0;
}

/*
 * tide's rules. One function per combination the reference rejects; each says whether tide
 * takes it and, if not, words the item.
 */

/* Cross attention: the encoder's KV is computed when the encoder input is scheduled, which
 * a prefix hit over the decoder prompt would skip; the blocks are keyed by decoder tokens
 * that do not determine them. Rejected. */
static void tide_rule_cross(const ccfg *c, size_t i, connector_verdict *v) {
    (void)c;
    add_item(v, CONNECTOR_ITEM_CROSS_ATTENTION, (int)i, 0, 0, "group %zu: CrossAttentionSpec", i);
}

/* Mamba: tide keys a state snapshot by the hash at the block end it was taken, so any mode
 * that takes snapshots at block ends works: 'align' whatever the block sizes (hashes come
 * at the GCD granularity), 'all' whenever the hash block size divides every group (which
 * ccfg_check has already enforced). 'none' keeps one running state and no snapshot. */
static void tide_rule_mamba(const ccfg *c, size_t i, connector_verdict *v) {
    const connector_group *g = &c->groups[i];
    if (g->mamba_mode == CONNECTOR_MAMBA_NONE)
        add_item(v, CONNECTOR_ITEM_MAMBA_MODE_NONE, (int)i, g->block_size, c->block_size,
                 "group %zu: MambaSpec with mamba_cache_mode='none' (no state snapshots at "
                 "block ends; needs 'align' or 'all')",
                 i);
}

/* Hybrid models under context parallelism: with DCP every rank keys its own slice (factor
 * 1, a namespace per TP rank) and Mamba state is whole on every rank, so DCP is taken.
 * PCP splits one prompt's prefill across ranks, so no rank holds a group's whole block at
 * a shared boundary; rejected for hybrid models. */
static void tide_rule_hybrid_cp(const ccfg *c, connector_verdict *v) {
    if (c->ngroups > 1 && c->pcp_size > 1)
        add_item(v, CONNECTOR_ITEM_HYBRID_PCP, -1, c->pcp_size, c->dcp_size,
                 "PCP > 1 (pcp=%" PRId64 ", dcp=%" PRId64 ") with hybrid attention", c->pcp_size,
                 c->dcp_size);
}

/* Groups tide's connector would not transfer: tide keys, saves and loads every group, and
 * looks up a prefix in every group; a group vLLM keeps out of transfer (enable_kv_transfer
 * false), or whose blocks vLLM's prefix caching does not cover, has no meaning at a shared
 * prefix boundary. Rejected, naming the group and why. */
static void tide_rule_not_transferred(const ccfg *c, size_t i, connector_verdict *v) {
    const connector_group *g = &c->groups[i];
    if (!g->enable_kv_transfer)
        add_item(v, CONNECTOR_ITEM_NOT_TRANSFERRED, (int)i, 0, 0,
                 "group %zu: %s with enable_kv_transfer=false (tide transfers every group)", i,
                 ccfg_spec_name(g->kind));
    else if (!ccfg_spec_prefix_cacheable(g))
        add_item(v, CONNECTOR_ITEM_NOT_TRANSFERRED, (int)i, 0, 0,
                 "group %zu: %s%s is not prefix-cacheable (tide transfers prefix-cacheable "
                 "groups only)",
                 i, ccfg_spec_name(g->kind),
                 g->kind == CONNECTOR_SPEC_SLIDING_MLA ? " with bounded_replay" : "");
}

static void tide_rules(const ccfg *c, connector_verdict *v) {
    for (size_t i = 0; i < c->ngroups; i++) {
        if (c->groups[i].kind == CONNECTOR_SPEC_CROSS) tide_rule_cross(c, i, v);
        if (c->groups[i].kind == CONNECTOR_SPEC_MAMBA) tide_rule_mamba(c, i, v);
        tide_rule_not_transferred(c, i, v);
    }
    tide_rule_hybrid_cp(c, v);
    size_t klen = connector_key_max_len(c);
    if (klen > TIDE_KEY_MAX)
        add_item(v, CONNECTOR_ITEM_KEY_TOO_LONG, -1, (int64_t)klen, TIDE_KEY_MAX,
                 "keys of %zu bytes (limit %d; shorten cache_prefix or the model name)", klen,
                 TIDE_KEY_MAX);
}

static int verdict_of(const ccfg *cfg, connector_impl impl, connector_rules rules,
                      connector_verdict *v) {
    memset(v, 0, sizeof(*v));
    v->impl = impl;
    v->rules = rules;
    /* ccfg_check() first; the reference needs only what vLLM checks before it. */
    if (!(impl == CONNECTOR_IMPL_REFERENCE ? cfg->reached_connector : cfg->checked))
        return TIDE_ECONFIG;
    if (connector_capacity_only(cfg)) {
        v->capacity_only = 1;
        return 0;
    }
    if (impl == CONNECTOR_IMPL_REFERENCE && reference_rules(cfg, rules, v)) {
        /* An error of its own, not an item of the aggregated list. */
        snprintf(v->message, sizeof(v->message), "%s", v->items[0].text);
        return TIDE_EUNSUPPORTED;
    }
    if (impl == CONNECTOR_IMPL_TIDE) tide_rules(cfg, v);
    if (v->nitems == 0) return 0;
    size_t len = (size_t)snprintf(v->message, sizeof(v->message),
                                  "%s does not support: ", connector_impl_name(impl));
    for (size_t i = 0; i < v->nitems && len < sizeof(v->message); i++)
        len += (size_t)snprintf(v->message + len, sizeof(v->message) - len, "%s%s", i ? "; " : "",
                                v->items[i].text);
    return TIDE_EUNSUPPORTED;
}

int connector_validate(const ccfg *cfg, connector_impl impl, connector_verdict *v) {
    return verdict_of(cfg, impl, CONNECTOR_RULES_V030, v);
}

int connector_validate_reference(const ccfg *cfg, connector_rules rules, connector_verdict *v) {
    return verdict_of(cfg, CONNECTOR_IMPL_REFERENCE, rules, v);
}
