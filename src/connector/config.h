/*
 * config.h — the connector's configuration model: what one engine rank looks like to the
 * connector (its KV-cache groups and their specs, block sizes, parallel sizes and ranks,
 * role and extra options), parsed from a JSON document that mirrors vLLM's own config
 * objects (see docs/CONNECTOR_CONFIG.md), then checked and validated.
 *
 * The life of a configuration:
 *
 *   ccfg_parse_string / ccfg_parse_file   JSON -> ccfg; syntax and schema errors
 *                                               (unknown keys, wrong types, missing keys)
 *   ccfg_check                               value rules (sizes, ranks, block/hash
 *                                               sizes, replay-SSM) and the derived values,
 *                                               in vLLM's order (see reached_connector)
 *   connector_validate                          the verdict of one connector implementation
 *                                               (vLLM's MooncakeStoreConnector, or tide's)
 *   ccfg_free
 *
 * Invariants after a successful ccfg_check: every size is > 0, every rank is within its
 * size, ngroups >= 1, and the derived fields (scheduler_block_size, hash_block_size,
 * group.page_bytes, group.tp_factor, group.fingerprint) are set.
 *
 * Problems are collected, never just the first: each is one line "path: message" (or
 * "line L, column C: message" for JSON syntax) in a ccfg_errs list. Nothing here prints.
 */
#ifndef TIDE_CONNECTOR_CONFIG_H
#define TIDE_CONNECTOR_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#define CONNECTOR_MAX_GROUPS 64 /* KV-cache groups in one configuration */
#define CONNECTOR_MAX_STATES 8  /* Mamba state tensors (shapes/dtypes) in one spec */
#define CONNECTOR_MAX_DIMS 8    /* dimensions of one Mamba state shape */
#define CONNECTOR_MAX_ITEMS (CONNECTOR_MAX_GROUPS + 4)
#define CONNECTOR_NAME_MAX 64 /* dtype and similar short names */
#define CONNECTOR_FP_HEX 16   /* hex digits of a layout fingerprint */

/* ------------------------------------------------------------------------------------
 * Collected problems.
 * ---------------------------------------------------------------------------------- */
typedef struct ccfg_errs {
    char **msg; /* n lines, each "path: message" */
    size_t n, cap;
    int oom; /* a line could not be stored (the list is then incomplete) */
} ccfg_errs;

void ccfg_errs_init(ccfg_errs *e);
void ccfg_errs_free(ccfg_errs *e);
/* Append one formatted line. */
void ccfg_errs_add(ccfg_errs *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ------------------------------------------------------------------------------------
 * The model.
 * ---------------------------------------------------------------------------------- */

/* The KV-cache spec classes of vLLM that the connector knows, by their class names. */
typedef enum connector_spec_kind {
    CONNECTOR_SPEC_FULL = 0, /* FullAttentionSpec */
    CONNECTOR_SPEC_SLIDING,  /* SlidingWindowSpec */
    CONNECTOR_SPEC_MAMBA,    /* MambaSpec */
    CONNECTOR_SPEC_CROSS,    /* CrossAttentionSpec */
    CONNECTOR_SPEC_MLA,      /* MLAAttentionSpec */
    /* Kinds of vLLM >= 0.29 whose groups are not (or not always) prefix-cacheable: the
     * reference skips them from 0.30 on; tide's connector does not transfer them. */
    CONNECTOR_SPEC_SLIDING_MLA,       /* SlidingWindowMLASpec (not cacheable with bounded_replay) */
    CONNECTOR_SPEC_CIRCULAR,          /* CircularBufferSpec */
    CONNECTOR_SPEC_HISPARSE_HOT,      /* HiSparseHotSpec */
    CONNECTOR_SPEC_HISPARSE_RESIDENT, /* HiSparseResidentSpec */
} connector_spec_kind;

typedef enum connector_role {
    CONNECTOR_ROLE_PRODUCER = 0, /* kv_producer */
    CONNECTOR_ROLE_CONSUMER,     /* kv_consumer */
    CONNECTOR_ROLE_BOTH,         /* kv_both */
} connector_role;

typedef enum connector_mamba_mode {
    CONNECTOR_MAMBA_NONE = 0, /* "none": one running state per request, no snapshots */
    CONNECTOR_MAMBA_ALIGN,    /* "align": a snapshot at block ends reached by a step */
    CONNECTOR_MAMBA_ALL,      /* "all": a snapshot at every block end */
} connector_mamba_mode;

typedef enum connector_hash_algo {
    CONNECTOR_HASH_SHA256 = 0, /* "sha256" (vLLM's default) */
    CONNECTOR_HASH_SHA256_CBOR,
    CONNECTOR_HASH_XXHASH,
    CONNECTOR_HASH_XXHASH_CBOR,
} connector_hash_algo;

typedef enum connector_load_failure {
    CONNECTOR_LOAD_FAIL = 0,      /* "fail": the request fails */
    CONNECTOR_LOAD_RECOMPUTE = 1, /* "recompute": the blocks are computed again */
} connector_load_failure;

/* An element type of a KV page or a Mamba state, by its torch name ("bfloat16"). */
typedef struct connector_dtype {
    char name[CONNECTOR_NAME_MAX];
    int size; /* bytes per element */
} connector_dtype;

/* One KV-cache group: the layers that share one block table, and their spec. */
typedef struct connector_group {
    connector_spec_kind kind;
    int64_t block_size; /* tokens per block */
    char **layer_names; /* nlayers names (may be 0) */
    size_t nlayers;
    int is_eagle_group;
    int enable_kv_transfer; /* true; false: vLLM keeps the group out of external transfer */

    /* Attention specs (FULL, SLIDING, CROSS, MLA). */
    int64_t num_kv_heads; /* KV heads held on this rank */
    int64_t head_size;
    int64_t head_size_v; /* defaults to head_size (0 for MLA: one latent per token) */
    connector_dtype dtype;
    int64_t sliding_window;                   /* SLIDING (required); FULL/MLA optional; 0 = none */
    int64_t attention_chunk_size;             /* FULL/MLA optional; 0 = none */
    int64_t extra_retained_tokens;            /* SLIDING */
    char cache_dtype_str[CONNECTOR_NAME_MAX]; /* MLA, SLIDING_MLA; "" = none */
    int64_t compress_ratio;                   /* MLA; 1 = none */
    int bounded_replay;                       /* SLIDING_MLA: replays the window, not cacheable */

    /* HiSparse specs: the page is given whole. */
    int64_t page_size;          /* HISPARSE_HOT, HISPARSE_RESIDENT */
    int64_t blocks_per_request; /* HISPARSE_HOT */

    /* MambaSpec. */
    size_t nstates;
    size_t ndims[CONNECTOR_MAX_STATES];
    int64_t shapes[CONNECTOR_MAX_STATES][CONNECTOR_MAX_DIMS];
    connector_dtype dtypes[CONNECTOR_MAX_STATES];
    connector_mamba_mode mamba_mode; /* the spec's own, or cache_config's when not given */
    char mamba_type[CONNECTOR_NAME_MAX];
    int64_t num_speculative_blocks;

    int64_t page_size_padded; /* attention and Mamba; 0 = not padded */

    /* Derived by ccfg_check. */
    int64_t page_bytes;     /* bytes of one block of one layer on this rank */
    int64_t eff_block_size; /* tokens a block covers: attention x dcp, Mamba as is */
    int tp_factor;          /* TP ranks holding identical bytes for this group */
    char fingerprint[CONNECTOR_FP_HEX + 1];
} connector_group;

/* kv_transfer_config.kv_connector_extra_config */
typedef struct connector_extra {
    int load_async;                 /* true */
    int lookup_async;               /* false */
    int enable_lookup;              /* true */
    int save_decode_cache;          /* false */
    char *cache_prefix;             /* "" */
    char *preferred_segment;        /* NULL = not set */
    int64_t lookup_rpc_port;        /* 0 */
    int enable_group_semantics;     /* false */
    int enable_cross_layers_blocks; /* false */
} connector_extra;

typedef struct ccfg {
    /* model_config */
    char *model;                /* required */
    int64_t total_num_kv_heads; /* 0 = not given (see docs) */
    int64_t max_model_len;      /* 0 = not given */

    /* cache_config */
    int64_t block_size;                    /* required */
    char *cache_dtype;                     /* "auto" */
    connector_mamba_mode mamba_cache_mode; /* "none" */
    int64_t prefix_match_unit;             /* 0 = not given */
    int64_t mamba_block_size;              /* 0 = not given */
    int enable_prefix_caching;             /* true */
    connector_hash_algo hash_algo;         /* sha256 */
    int64_t retention_interval;            /* 0; -1 = null (dense) */
    int use_replayssm;                     /* false */

    /* parallel_config */
    int64_t tp_size, pp_size, pcp_size, dcp_size, dp_size; /* each 1 */
    int64_t tp_rank, pp_rank, pcp_rank, dcp_rank, dp_rank; /* each 0; dcp_rank = tp % dcp */
    int dcp_rank_given;

    /* kv_transfer_config */
    char *kv_connector;                         /* NULL = not given */
    connector_role kv_role;                     /* required */
    connector_load_failure load_failure_policy; /* fail */
    connector_extra extra;

    /* kv_cache_config */
    int64_t num_blocks; /* 0 = not given */
    connector_group groups[CONNECTOR_MAX_GROUPS];
    size_t ngroups;

    /* Derived by ccfg_check. */
    int checked; /* every check passed */
    /* The checks vLLM makes before it builds a connector passed (configuration values, page
     * sizes): the reference's verdict is defined, even when what vLLM's KV-cache manager
     * checks afterwards (block sizes against hash_block_size, the retention interval) fails. */
    int reached_connector;
    int64_t scheduler_block_size; /* 0 when the LCM of the group block sizes is too large */
    int64_t hash_block_size;
    /* Sub-block ("partial") hits and partial-tail offloads: a Mamba group in align mode whose
     * block is larger than hash_block_size, no sliding-window group, no PCP/DCP. Lookups and
     * loads then work at hash_block_size granularity. */
    int partial_hits;
    char model_name[CONNECTOR_NAME_MAX * 4]; /* last path component of model */
} ccfg;

/* The name of a spec kind, for messages and the CLI. */
const char *ccfg_spec_name(connector_spec_kind k); /* "FullAttentionSpec" ... */

/* Whether vLLM's prefix caching covers the group's spec (vLLM's `prefix_cacheable`):
 * false for CircularBufferSpec, the HiSparse specs and SlidingWindowMLASpec with
 * bounded_replay. */
int ccfg_spec_prefix_cacheable(const connector_group *g);

/* "none", "align" or "all". */
const char *ccfg_mamba_mode_name(connector_mamba_mode m);

/* ------------------------------------------------------------------------------------
 * Keys of kv_transfer_config and kv_connector_extra_config: one table, read by the parser
 * (so by `tide check-config` and by the connector alike). Each key says who reads it.
 * ---------------------------------------------------------------------------------- */
typedef enum ccfg_key_reader {
    CCFG_READ_CONNECTOR = 0, /* libtide's connector */
    CCFG_READ_BINDING,       /* tide.vllm, the Python binding (url, reconnect_s, ...) */
    CCFG_READ_VLLM,          /* vLLM itself (kv_connector_module_path, ...); not used */
} ccfg_key_reader;

typedef enum ccfg_key_type {
    CCFG_KEY_BOOL = 0,    /* true/false */
    CCFG_KEY_BOOLISH,     /* true/false or the strings "true"/"false" */
    CCFG_KEY_STRING,      /* a string */
    CCFG_KEY_STRING_NULL, /* a string or null */
    CCFG_KEY_INT,         /* an integer */
    CCFG_KEY_INT_NULL,    /* an integer or null */
    CCFG_KEY_NUMBER_POS,  /* a number > 0 */
    CCFG_KEY_NUMBER_NULL, /* a number or null */
    CCFG_KEY_ENUM,        /* one of the strings in names */
    CCFG_KEY_OBJECT,      /* an object (read by its own table) */
    CCFG_KEY_OBJECT_NULL, /* an object or null, not looked into */
} ccfg_key_type;

#define CCFG_NO_FIELD ((size_t)-1)

typedef struct ccfg_key {
    const char *name;
    ccfg_key_type type;
    ccfg_key_reader reader;
    int required;
    const char *const *names; /* ENUM: the accepted strings, NULL-terminated */
    size_t offset;            /* of the field in ccfg (transfer) or connector_extra (extra)
                                 that receives the value: int for BOOL, BOOLISH and ENUM,
                                 char * for STRING(_NULL), int64_t for INT(_NULL);
                                 CCFG_NO_FIELD when the connector does not keep it */
} ccfg_key;

/* The tables: kv_transfer_config's keys and kv_connector_extra_config's (n set to the
 * count). */
const ccfg_key *ccfg_transfer_keys(size_t *n);
const ccfg_key *ccfg_extra_keys(size_t *n);

/*
 * Parse a JSON document (len bytes at json; it need not end with a NUL) into *cfg, which
 * the call initialises. Every problem found is appended to errs.
 * Returns 0, TIDE_EPARSE (syntax: one line "line L, column C: ..."; or schema: unknown
 * keys, wrong types, missing required keys, bad enum values — all of them), or -ENOMEM.
 * On any return *cfg must be released with ccfg_free().
 */
int ccfg_parse_string(const char *json, size_t len, ccfg *cfg, ccfg_errs *errs);

/* Read and parse a file. Errors as above, plus a negative errno when it cannot be read
 * (with "PATH: strerror" in errs). */
int ccfg_parse_file(const char *path, ccfg *cfg, ccfg_errs *errs);

void ccfg_free(ccfg *cfg);

/*
 * Check the values (sizes > 0, ranks in range, DCP dividing TP, block sizes multiple of
 * the hash block size, retention interval, replay-SSM, Mamba modes agreeing) and compute
 * the derived fields. Every problem is appended to errs. Returns 0 or TIDE_ECONFIG; on
 * TIDE_ECONFIG, cfg->reached_connector tells whether only the block-size checks vLLM makes
 * after building its connector failed (the derived block sizes are then set where known).
 */
int ccfg_check(ccfg *cfg, ccfg_errs *errs);

/* ------------------------------------------------------------------------------------
 * Verdicts.
 * ---------------------------------------------------------------------------------- */

/* Which connector's rules to apply. */
typedef enum connector_impl {
    CONNECTOR_IMPL_REFERENCE = 0, /* vLLM's built-in MooncakeStoreConnector, exactly */
    CONNECTOR_IMPL_TIDE = 1,      /* tide's TideStoreConnector */
} connector_impl;

/*
 * The rule sets of vLLM's MooncakeStoreConnector._validate_kv_cache_config, by release
 * (read from the released wheels; docs/VLLM.md):
 *
 *   SEED  (vLLM <= 0.28)   every group; Mamba by block size; hybrid under PCP or DCP
 *   V029  (vLLM 0.29)      the transfer groups, numbered among themselves; Mamba by block
 *                          size; hybrid under PCP only
 *   V030  (vLLM 0.30-0.33) the prefix-cacheable transfer groups, by their group id (none:
 *                          its own message); Mamba by mode; hybrid under PCP only
 */
typedef enum connector_rules {
    CONNECTOR_RULES_SEED = 0,
    CONNECTOR_RULES_V029,
    CONNECTOR_RULES_V030,
} connector_rules;

/* The newest vLLM release tide knows the rules of: check-config's default. */
#define CONNECTOR_VLLM_NEWEST "0.33"

/* A vLLM release as `tide check-config --vllm` takes it. */
typedef struct connector_vllm {
    int major, minor;
    connector_rules rules;
    char name[32]; /* "0.33" */
} connector_vllm;

/*
 * Parse "MAJOR.MINOR" or "MAJOR.MINOR.PATCH" and find the rule set of that release.
 * Returns 0, or -EINVAL with a sentence in err (a malformed version, or one newer than
 * CONNECTOR_VLLM_NEWEST: both versions are named).
 */
int connector_vllm_parse(const char *s, connector_vllm *out, char *err, size_t cap);

/* "vLLM <= 0.28", "vLLM 0.29", "vLLM 0.30 to 0.33". */
const char *connector_rules_span(connector_rules r);

typedef enum connector_item_kind {
    CONNECTOR_ITEM_CROSS_ATTENTION = 0, /* a CrossAttentionSpec group */
    CONNECTOR_ITEM_MAMBA_BLOCK_SIZE,    /* reference <= 0.29: Mamba block_size != cache's */
    CONNECTOR_ITEM_MAMBA_MODE_NONE,     /* tide: Mamba with mamba_cache_mode 'none' */
    CONNECTOR_ITEM_HYBRID_CP,           /* reference <= 0.28: >1 group with pcp*dcp > 1 */
    CONNECTOR_ITEM_HYBRID_PCP,          /* reference >= 0.29 and tide: >1 group, pcp > 1 */
    CONNECTOR_ITEM_KEY_TOO_LONG,        /* tide: keys over TIDE_KEY_MAX bytes */
    CONNECTOR_ITEM_MAMBA_MODE,          /* reference >= 0.30: Mamba mode other than 'align' */
    CONNECTOR_ITEM_NO_CACHEABLE_GROUP,  /* reference >= 0.30: no prefix-cacheable group (its
                                           message stands alone) */
    CONNECTOR_ITEM_NOT_TRANSFERRED,     /* tide: a group tide would not transfer (not
                                           prefix-cacheable, or enable_kv_transfer false) */
} connector_item_kind;

/* One unsupported combination, with the figures its message names. */
typedef struct connector_item {
    connector_item_kind kind;
    int group;      /* the group it is about, or -1 */
    int64_t a, b;   /* MAMBA_BLOCK_SIZE: spec and cache block sizes; HYBRID_*: pcp, dcp;
                       KEY_TOO_LONG: key length and limit */
    char text[256]; /* the item as the connector words it */
} connector_item;

typedef struct connector_verdict {
    connector_impl impl;
    connector_rules rules; /* the reference's rule set applied (REFERENCE only) */
    int capacity_only;     /* validation skipped: the rank only lends memory to the pool */
    connector_item items[CONNECTOR_MAX_ITEMS];
    size_t nitems;
    char message[CONNECTOR_MAX_ITEMS * 260]; /* "<Connector> does not support: <item>; ..." or "" */
} connector_verdict;

/* "MooncakeStoreConnector" or "TideStoreConnector". */
const char *connector_impl_name(connector_impl impl);

/* True when the rank only contributes memory: kv_consumer, enable_lookup false and
 * save_decode_cache false (the reference's condition). */
int connector_capacity_only(const ccfg *cfg);

/*
 * Apply one connector's rules to a checked configuration: tide's need ccfg_check to have
 * returned 0, the reference's only cfg->reached_connector (vLLM builds its connector before
 * its KV-cache manager checks block sizes); TIDE_ECONFIG otherwise. Fills *v. Returns 0
 * when the connector accepts it (or skips validation because the rank is capacity-only),
 * TIDE_EUNSUPPORTED when not (v->message then holds the one message listing every item, in
 * the reference's order).
 */
int connector_validate(const ccfg *cfg, connector_impl impl, connector_verdict *v);

/* The reference's verdict under one release's rules (connector_validate applies the newest,
 * CONNECTOR_VLLM_NEWEST's). Same returns as connector_validate. */
int connector_validate_reference(const ccfg *cfg, connector_rules rules, connector_verdict *v);

/* TP ranks that hold byte-identical copies of group g: 1 when dcp > 1 or for Mamba;
 * tp_size for MLA; else max(1, tp_size / total_num_kv_heads). */
int connector_tp_factor(const ccfg *cfg, size_t g);

#endif
