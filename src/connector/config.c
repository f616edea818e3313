/*
 * config.c — JSON -> ccfg: syntax errors with line and column, then a walk over the
 * document that knows every key of every object it accepts.
 *
 * Each JSON object is read through an objrd: asking for a key marks it as known; closing
 * the reader reports every key nobody asked for ("unknown key", with a suggestion when a
 * known key is one or two edits away) and every key given twice. Type mismatches name the
 * path, what was expected and what was found. Nothing stops at the first problem: the walk
 * goes on, so a user sees every mistake in one run.
 */
#include "connector/config.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json_diag.h"
#include "tide.h"

/* ------------------------------------------------------------------------------------
 * Problem lists.
 * ---------------------------------------------------------------------------------- */
void ccfg_errs_init(ccfg_errs *e) {
    memset(e, 0, sizeof(*e));
}

void ccfg_errs_free(ccfg_errs *e) {
    for (size_t i = 0; i < e->n; i++)
        free(e->msg[i]);
    free(e->msg);
    memset(e, 0, sizeof(*e));
}

void ccfg_errs_add(ccfg_errs *e, const char *fmt, ...) {
    if (e->n == e->cap) {
        size_t cap = e->cap ? e->cap * 2 : 16;
        char **m = realloc(e->msg, cap * sizeof(*m));
        if (!m) {
            e->oom = 1;
            return;
        }
        e->msg = m;
        e->cap = cap;
    }
    va_list ap;
    va_start(ap, fmt);
    char *line = NULL;
    int r = vasprintf(&line, fmt, ap);
    va_end(ap);
    if (r < 0) {
        e->oom = 1;
        return;
    }
    e->msg[e->n++] = line;
}

/* ------------------------------------------------------------------------------------
 * Names.
 * ---------------------------------------------------------------------------------- */
/* By connector_spec_kind. */
static const char *const spec_names[] = {
    "FullAttentionSpec",  "SlidingWindowSpec", "MambaSpec",
    "CrossAttentionSpec", "MLAAttentionSpec",  "SlidingWindowMLASpec",
    "CircularBufferSpec", "HiSparseHotSpec",   "HiSparseResidentSpec"};
static const char *const mamba_mode_names[] = {"none", "align", "all"};
static const char *const hash_names[] = {"sha256", "sha256_cbor", "xxhash", "xxhash_cbor"};
#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

const char *ccfg_spec_name(connector_spec_kind k) {
    return (unsigned)k < NELEM(spec_names) ? spec_names[k] : "?";
}

const char *ccfg_mamba_mode_name(connector_mamba_mode m) {
    return (unsigned)m < NELEM(mamba_mode_names) ? mamba_mode_names[m] : "?";
}

int ccfg_spec_prefix_cacheable(const connector_group *g) {
    switch (g->kind) {
    case CONNECTOR_SPEC_CIRCULAR:
    case CONNECTOR_SPEC_HISPARSE_HOT:
    case CONNECTOR_SPEC_HISPARSE_RESIDENT:
        return 0;
    case CONNECTOR_SPEC_SLIDING_MLA:
        return !g->bounded_replay;
    default:
        return 1;
    }
}

/* Element types by torch name (an optional "torch." prefix is accepted). */
static const struct {
    const char *name;
    int size;
} dtype_table[] = {
    {"float32", 4},       {"float16", 2},         {"bfloat16", 2},    {"float64", 8},
    {"float8_e4m3fn", 1}, {"float8_e4m3fnuz", 1}, {"float8_e5m2", 1}, {"float8_e5m2fnuz", 1},
    {"int8", 1},          {"uint8", 1},           {"int16", 2},       {"int32", 4},
};

static int dtype_lookup(const char *s, connector_dtype *out) {
    if (strncmp(s, "torch.", 6) == 0) s += 6;
    for (size_t i = 0; i < NELEM(dtype_table); i++)
        if (strcmp(s, dtype_table[i].name) == 0) {
            snprintf(out->name, sizeof(out->name), "%s", dtype_table[i].name);
            out->size = dtype_table[i].size;
            return 0;
        }
    return -1;
}

/* ------------------------------------------------------------------------------------
 * Object reader.
 * ---------------------------------------------------------------------------------- */
#define RD_MAX_KEYS 48

typedef struct objrd {
    const cJSON *obj; /* NULL when the object is absent or not an object */
    char path[256];   /* "" for the document root */
    ccfg_errs *errs;
    const char *known[RD_MAX_KEYS]; /* keys asked for, for unknown-key suggestions */
    size_t nknown;
    const char *what; /* extra words for unknown keys ("for MambaSpec"), or NULL */
} objrd;

static const char *json_kind(const cJSON *j) {
    if (cJSON_IsString(j)) return "a string";
    if (cJSON_IsBool(j)) return "a boolean";
    if (cJSON_IsNull(j)) return "null";
    if (cJSON_IsArray(j)) return "an array";
    if (cJSON_IsObject(j)) return "an object";
    if (cJSON_IsNumber(j)) {
        double v = j->valuedouble;
        return (isfinite(v) && v == floor(v)) ? "an integer" : "a non-integer number";
    }
    return "an invalid value";
}

static void join_path(char *out, size_t cap, const char *base, const char *key) {
    if (base[0])
        snprintf(out, cap, "%s.%s", base, key);
    else
        snprintf(out, cap, "%s", key);
}

/* Open a reader over j (which must be an object) at path. A non-object is reported. */
static void rd_open(objrd *rd, const cJSON *j, const char *path, ccfg_errs *errs) {
    memset(rd, 0, sizeof(*rd));
    snprintf(rd->path, sizeof(rd->path), "%s", path);
    rd->errs = errs;
    if (j && cJSON_IsObject(j))
        rd->obj = j;
    else if (j)
        ccfg_errs_add(errs, "%s: expected an object, got %s", path[0] ? path : "document",
                      json_kind(j));
}

/* The member named key (NULL when absent), marking the key as known. */
static const cJSON *rd_get(objrd *rd, const char *key) {
    if (rd->nknown < RD_MAX_KEYS) rd->known[rd->nknown++] = key;
    if (!rd->obj) return NULL;
    for (const cJSON *c = rd->obj->child; c; c = c->next)
        if (c->string && strcmp(c->string, key) == 0) return c;
    return NULL;
}

static size_t edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63) return 99;
    size_t prev[64], cur[64];
    for (size_t j = 0; j <= lb; j++)
        prev[j] = j;
    for (size_t i = 1; i <= la; i++) {
        cur[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
            size_t del = prev[j] + 1, ins = cur[j - 1] + 1;
            cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
        memcpy(prev, cur, (lb + 1) * sizeof(size_t));
    }
    return prev[lb];
}

/* Report unknown and duplicated keys. */
static void rd_close(objrd *rd) {
    if (!rd->obj) return;
    for (const cJSON *c = rd->obj->child; c; c = c->next) {
        const char *k = c->string ? c->string : "";
        char p[320];
        join_path(p, sizeof(p), rd->path, k);
        for (const cJSON *d = rd->obj->child; d != c; d = d->next)
            if (d->string && strcmp(d->string, k) == 0) {
                ccfg_errs_add(rd->errs, "%s: duplicate key", p);
                break;
            }
        int known = 0;
        const char *best = NULL;
        size_t bestd = 3;
        for (size_t i = 0; i < rd->nknown; i++) {
            if (strcmp(rd->known[i], k) == 0) {
                known = 1;
                break;
            }
            size_t d = edit_distance(k, rd->known[i]);
            if (d < bestd) {
                bestd = d;
                best = rd->known[i];
            }
        }
        if (known) continue;
        char hint[128] = "";
        if (best) snprintf(hint, sizeof(hint), " (did you mean '%s'?)", best);
        ccfg_errs_add(rd->errs, "%s: unknown key%s%s%s", p, rd->what ? " " : "",
                      rd->what ? rd->what : "", hint);
    }
}

static void type_error(objrd *rd, const char *key, const char *expected, const cJSON *j) {
    char p[320];
    join_path(p, sizeof(p), rd->path, key);
    ccfg_errs_add(rd->errs, "%s: expected %s, got %s", p, expected, json_kind(j));
}

static void missing(objrd *rd, const char *key) {
    char p[320];
    join_path(p, sizeof(p), rd->path, key);
    ccfg_errs_add(rd->errs, "%s: required key is missing", p);
}

/* Integers: JSON numbers without a fraction, within the exactly representable range. */
static int json_int(const cJSON *j, int64_t *out) {
    if (!cJSON_IsNumber(j)) return -1;
    double v = j->valuedouble;
    if (!isfinite(v) || v != floor(v) || fabs(v) > 9007199254740992.0) return -1;
    *out = (int64_t)v;
    return 0;
}

/* Flags for the field readers. */
#define F_REQUIRED 1 /* report when absent */
#define F_NULLABLE 2 /* null is accepted and leaves the default (reported through *isnull) */

/* Read an integer field. Returns 1 when a value was read, 0 when absent/null/bad. */
static int rd_int(objrd *rd, const char *key, int flags, int64_t *out, int *isnull) {
    const cJSON *j = rd_get(rd, key);
    if (isnull) *isnull = 0;
    if (!j) {
        if ((flags & F_REQUIRED) && rd->obj) missing(rd, key);
        return 0;
    }
    if (cJSON_IsNull(j) && (flags & F_NULLABLE)) {
        if (isnull) *isnull = 1;
        return 0;
    }
    if (json_int(j, out) < 0) {
        type_error(rd, key, (flags & F_NULLABLE) ? "an integer or null" : "an integer", j);
        return 0;
    }
    return 1;
}

static int rd_bool(objrd *rd, const char *key, int *out) {
    const cJSON *j = rd_get(rd, key);
    if (!j) return 0;
    if (!cJSON_IsBool(j)) {
        type_error(rd, key, "a boolean", j);
        return 0;
    }
    *out = cJSON_IsTrue(j) ? 1 : 0;
    return 1;
}

/* A flag vLLM reads as str(value).lower() == "true": a boolean or the strings
 * "true"/"false" in any case. */
static int rd_boolish(objrd *rd, const char *key, int *out) {
    const cJSON *j = rd_get(rd, key);
    if (!j) return 0;
    if (cJSON_IsBool(j)) {
        *out = cJSON_IsTrue(j) ? 1 : 0;
        return 1;
    }
    if (cJSON_IsString(j) &&
        (strcasecmp(j->valuestring, "true") == 0 || strcasecmp(j->valuestring, "false") == 0)) {
        *out = strcasecmp(j->valuestring, "true") == 0;
        return 1;
    }
    type_error(rd, key, "a boolean (or \"true\"/\"false\")", j);
    return 0;
}

/* Read a string field into a fresh allocation (*out replaced). Returns 1 when read, 0 when
 * absent/null/bad, -1 when out of memory. */
static int rd_str(objrd *rd, const char *key, int flags, char **out) {
    const cJSON *j = rd_get(rd, key);
    if (!j) {
        if ((flags & F_REQUIRED) && rd->obj) missing(rd, key);
        return 0;
    }
    if (cJSON_IsNull(j) && (flags & F_NULLABLE)) return 0;
    if (!cJSON_IsString(j)) {
        type_error(rd, key, (flags & F_NULLABLE) ? "a string or null" : "a string", j);
        return 0;
    }
    char *s = strdup(j->valuestring);
    if (!s) return -1;
    free(*out);
    *out = s;
    return 1;
}

/* Read a short string into a fixed buffer; too long is reported. */
static int rd_name(objrd *rd, const char *key, int flags, char *buf, size_t cap) {
    const cJSON *j = rd_get(rd, key);
    if (!j) {
        if ((flags & F_REQUIRED) && rd->obj) missing(rd, key);
        return 0;
    }
    if (cJSON_IsNull(j) && (flags & F_NULLABLE)) return 0;
    if (!cJSON_IsString(j)) {
        type_error(rd, key, (flags & F_NULLABLE) ? "a string or null" : "a string", j);
        return 0;
    }
    if (strlen(j->valuestring) >= cap) {
        char p[320];
        join_path(p, sizeof(p), rd->path, key);
        ccfg_errs_add(rd->errs, "%s: longer than %zu characters", p, cap - 1);
        return 0;
    }
    snprintf(buf, cap, "%s", j->valuestring);
    return 1;
}

/* Read a string that must be one of names[]; *out is its index. */
static int rd_enum(objrd *rd, const char *key, int flags, const char *const *names, size_t n,
                   int *out) {
    const cJSON *j = rd_get(rd, key);
    if (!j) {
        if ((flags & F_REQUIRED) && rd->obj) missing(rd, key);
        return 0;
    }
    if (!cJSON_IsString(j)) {
        type_error(rd, key, "a string", j);
        return 0;
    }
    for (size_t i = 0; i < n; i++)
        if (strcmp(j->valuestring, names[i]) == 0) {
            *out = (int)i;
            return 1;
        }
    char p[320], list[256] = "";
    join_path(p, sizeof(p), rd->path, key);
    for (size_t i = 0; i < n; i++) {
        size_t l = strlen(list);
        snprintf(list + l, sizeof(list) - l, "%s'%s'", i ? ", " : "", names[i]);
    }
    ccfg_errs_add(rd->errs, "%s: '%s' is not one of %s", p, j->valuestring, list);
    return 0;
}

/* ------------------------------------------------------------------------------------
 * Sections.
 * ---------------------------------------------------------------------------------- */

static int parse_model(ccfg *c, const cJSON *j, ccfg_errs *e) {
    objrd rd;
    rd_open(&rd, j, "model_config", e);
    if (!j) ccfg_errs_add(e, "model_config: required key is missing");
    if (rd_str(&rd, "model", F_REQUIRED, &c->model) < 0) return -ENOMEM;
    rd_int(&rd, "total_num_kv_heads", F_NULLABLE, &c->total_num_kv_heads, NULL);
    rd_int(&rd, "max_model_len", F_NULLABLE, &c->max_model_len, NULL);
    char dtype[CONNECTOR_NAME_MAX];
    rd_name(&rd, "dtype", F_NULLABLE, dtype, sizeof(dtype)); /* informational only */
    rd_close(&rd);
    return 0;
}

static int parse_cache(ccfg *c, const cJSON *j, ccfg_errs *e) {
    objrd rd;
    int v, isnull;
    rd_open(&rd, j, "cache_config", e);
    if (!j) ccfg_errs_add(e, "cache_config: required key is missing");
    rd_int(&rd, "block_size", F_REQUIRED, &c->block_size, NULL);
    if (rd_str(&rd, "cache_dtype", 0, &c->cache_dtype) < 0) return -ENOMEM;
    if (rd_enum(&rd, "mamba_cache_mode", 0, mamba_mode_names, NELEM(mamba_mode_names), &v))
        c->mamba_cache_mode = (connector_mamba_mode)v;
    rd_int(&rd, "prefix_match_unit", F_NULLABLE, &c->prefix_match_unit, NULL);
    rd_int(&rd, "mamba_block_size", F_NULLABLE, &c->mamba_block_size, NULL);
    rd_bool(&rd, "enable_prefix_caching", &c->enable_prefix_caching);
    if (rd_enum(&rd, "prefix_caching_hash_algo", 0, hash_names, NELEM(hash_names), &v))
        c->hash_algo = (connector_hash_algo)v;
    rd_int(&rd, "prefix_cache_retention_interval", F_NULLABLE, &c->retention_interval, &isnull);
    if (isnull) c->retention_interval = -1;
    rd_bool(&rd, "use_replayssm", &c->use_replayssm);
    rd_close(&rd);
    return 0;
}

static void parse_parallel(ccfg *c, const cJSON *j, ccfg_errs *e) {
    objrd rd;
    rd_open(&rd, j, "parallel_config", e);
    rd_int(&rd, "tensor_parallel_size", 0, &c->tp_size, NULL);
    rd_int(&rd, "pipeline_parallel_size", 0, &c->pp_size, NULL);
    rd_int(&rd, "prefill_context_parallel_size", 0, &c->pcp_size, NULL);
    rd_int(&rd, "decode_context_parallel_size", 0, &c->dcp_size, NULL);
    rd_int(&rd, "data_parallel_size", 0, &c->dp_size, NULL);
    rd_int(&rd, "tp_rank", 0, &c->tp_rank, NULL);
    rd_int(&rd, "pp_rank", 0, &c->pp_rank, NULL);
    rd_int(&rd, "pcp_rank", 0, &c->pcp_rank, NULL);
    c->dcp_rank_given = rd_int(&rd, "dcp_rank", 0, &c->dcp_rank, NULL);
    rd_int(&rd, "data_parallel_rank", 0, &c->dp_rank, NULL);
    rd_close(&rd);
}

/* ------------------------------------------------------------------------------------
 * The key tables of kv_transfer_config and kv_connector_extra_config.
 *
 * Every key tide's connector accepts, whoever reads it: the parser reads these tables both
 * for `tide check-config` and when the connector is created (tide.vllm hands the whole
 * configuration, its own keys included, to the C parser), so the two accept the same keys.
 * ---------------------------------------------------------------------------------- */
static const char *const role_enum[] = {"kv_producer", "kv_consumer", "kv_both", NULL};
static const char *const failure_enum[] = {"fail", "recompute", NULL};

#define TK(name, type, reader, req, names, field)                                                  \
    { name, type, reader, req, names, field }
#define IN_CFG(f) offsetof(ccfg, f)
#define IN_EXTRA(f) offsetof(connector_extra, f)

static const ccfg_key transfer_keys[] = {
    TK("kv_connector", CCFG_KEY_STRING_NULL, CCFG_READ_CONNECTOR, 0, NULL, IN_CFG(kv_connector)),
    TK("kv_role", CCFG_KEY_ENUM, CCFG_READ_CONNECTOR, 1, role_enum, IN_CFG(kv_role)),
    TK("kv_load_failure_policy", CCFG_KEY_ENUM, CCFG_READ_CONNECTOR, 0, failure_enum,
       IN_CFG(load_failure_policy)),
    TK("kv_connector_extra_config", CCFG_KEY_OBJECT, CCFG_READ_CONNECTOR, 0, NULL, CCFG_NO_FIELD),
    /* vLLM's own KVTransferConfig fields (0.32, 0.33): vLLM reads them, the connector not. */
    TK("kv_connector_module_path", CCFG_KEY_STRING_NULL, CCFG_READ_VLLM, 0, NULL, CCFG_NO_FIELD),
    TK("engine_id", CCFG_KEY_STRING_NULL, CCFG_READ_VLLM, 0, NULL, CCFG_NO_FIELD),
    TK("kv_buffer_device", CCFG_KEY_STRING, CCFG_READ_VLLM, 0, NULL, CCFG_NO_FIELD),
    TK("kv_port", CCFG_KEY_INT, CCFG_READ_VLLM, 0, NULL, CCFG_NO_FIELD),
    TK("enable_permute_local_kv", CCFG_KEY_BOOL, CCFG_READ_VLLM, 0, NULL, CCFG_NO_FIELD),
};

static const ccfg_key extra_keys[] = {
    TK("load_async", CCFG_KEY_BOOL, CCFG_READ_CONNECTOR, 0, NULL, IN_EXTRA(load_async)),
    TK("lookup_async", CCFG_KEY_BOOL, CCFG_READ_CONNECTOR, 0, NULL, IN_EXTRA(lookup_async)),
    TK("enable_lookup", CCFG_KEY_BOOL, CCFG_READ_CONNECTOR, 0, NULL, IN_EXTRA(enable_lookup)),
    TK("save_decode_cache", CCFG_KEY_BOOL, CCFG_READ_CONNECTOR, 0, NULL,
       IN_EXTRA(save_decode_cache)),
    TK("cache_prefix", CCFG_KEY_STRING, CCFG_READ_CONNECTOR, 0, NULL, IN_EXTRA(cache_prefix)),
    TK("preferred_segment", CCFG_KEY_STRING_NULL, CCFG_READ_CONNECTOR, 0, NULL,
       IN_EXTRA(preferred_segment)),
    TK("lookup_rpc_port", CCFG_KEY_INT, CCFG_READ_CONNECTOR, 0, NULL, IN_EXTRA(lookup_rpc_port)),
    TK("enable_group_semantics", CCFG_KEY_BOOLISH, CCFG_READ_CONNECTOR, 0, NULL,
       IN_EXTRA(enable_group_semantics)),
    TK("enable_cross_layers_blocks", CCFG_KEY_BOOLISH, CCFG_READ_CONNECTOR, 0, NULL,
       IN_EXTRA(enable_cross_layers_blocks)),
    /* Read by tide.vllm (python/tide/vllm/config.py, connector.py). */
    TK("url", CCFG_KEY_STRING, CCFG_READ_BINDING, 0, NULL, CCFG_NO_FIELD),
    TK("reconnect_s", CCFG_KEY_NUMBER_POS, CCFG_READ_BINDING, 0, NULL, CCFG_NO_FIELD),
    TK("kv_events", CCFG_KEY_BOOL, CCFG_READ_BINDING, 0, NULL, CCFG_NO_FIELD),
};

const ccfg_key *ccfg_transfer_keys(size_t *n) {
    *n = NELEM(transfer_keys);
    return transfer_keys;
}

const ccfg_key *ccfg_extra_keys(size_t *n) {
    *n = NELEM(extra_keys);
    return extra_keys;
}

static size_t enum_count(const char *const *names) {
    size_t n = 0;
    while (names[n])
        n++;
    return n;
}

/* Read every key of a table from rd into base (a ccfg or a connector_extra); OBJECT
 * keys are left to the caller. Returns 0 or -ENOMEM. */
static int read_keys(objrd *rd, const ccfg_key *keys, size_t n, void *base) {
    for (size_t i = 0; i < n; i++) {
        const ccfg_key *k = &keys[i];
        char *field = k->offset == CCFG_NO_FIELD ? NULL : (char *)base + k->offset;
        int flags = k->required ? F_REQUIRED : 0;
        int iv = 0;
        int64_t lv = 0;
        char *sv = NULL;
        int r;
        switch (k->type) {
        case CCFG_KEY_BOOL:
            if (rd_bool(rd, k->name, &iv) && field) memcpy(field, &iv, sizeof(int));
            break;
        case CCFG_KEY_BOOLISH:
            if (rd_boolish(rd, k->name, &iv) && field) memcpy(field, &iv, sizeof(int));
            break;
        case CCFG_KEY_STRING:
        case CCFG_KEY_STRING_NULL:
            r = rd_str(rd, k->name, flags | (k->type == CCFG_KEY_STRING_NULL ? F_NULLABLE : 0),
                       field ? (char **)(void *)field : &sv);
            free(sv);
            if (r < 0) return -ENOMEM;
            break;
        case CCFG_KEY_INT:
        case CCFG_KEY_INT_NULL:
            if (rd_int(rd, k->name, flags | (k->type == CCFG_KEY_INT_NULL ? F_NULLABLE : 0), &lv,
                       NULL) &&
                field)
                memcpy(field, &lv, sizeof(int64_t));
            break;
        case CCFG_KEY_NUMBER_POS:
        case CCFG_KEY_NUMBER_NULL: {
            const cJSON *j = rd_get(rd, k->name);
            if (!j || (cJSON_IsNull(j) && k->type == CCFG_KEY_NUMBER_NULL)) break;
            if (!cJSON_IsNumber(j)) {
                type_error(rd, k->name,
                           k->type == CCFG_KEY_NUMBER_NULL ? "a number or null" : "a number", j);
            } else if (k->type == CCFG_KEY_NUMBER_POS &&
                       !(isfinite(j->valuedouble) && j->valuedouble > 0)) {
                char p[320];
                join_path(p, sizeof(p), rd->path, k->name);
                ccfg_errs_add(rd->errs, "%s: must be > 0, got %g", p, j->valuedouble);
            }
            break;
        }
        case CCFG_KEY_ENUM:
            if (rd_enum(rd, k->name, flags, k->names, enum_count(k->names), &iv) && field)
                memcpy(field, &iv, sizeof(int));
            break;
        case CCFG_KEY_OBJECT:
            rd_get(rd, k->name); /* known; read by the caller */
            break;
        case CCFG_KEY_OBJECT_NULL: {
            const cJSON *j = rd_get(rd, k->name);
            if (j && !cJSON_IsObject(j) && !cJSON_IsNull(j))
                type_error(rd, k->name, "an object or null", j);
            break;
        }
        }
    }
    return 0;
}

static int parse_extra(ccfg *c, const cJSON *j, const char *path, ccfg_errs *e) {
    objrd rd;
    rd_open(&rd, j, path, e);
    int r = read_keys(&rd, extra_keys, NELEM(extra_keys), &c->extra);
    rd_close(&rd);
    return r;
}

static int parse_transfer(ccfg *c, const cJSON *j, ccfg_errs *e) {
    objrd rd;
    rd_open(&rd, j, "kv_transfer_config", e);
    if (!j) ccfg_errs_add(e, "kv_transfer_config: required key is missing");
    int r = read_keys(&rd, transfer_keys, NELEM(transfer_keys), c);
    if (r == 0) {
        const cJSON *x =
            rd.obj ? cJSON_GetObjectItemCaseSensitive(rd.obj, "kv_connector_extra_config") : NULL;
        r = parse_extra(c, x, "kv_transfer_config.kv_connector_extra_config", e);
    }
    rd_close(&rd);
    return r;
}

/* shapes: [[d, d, ...], ...]; dtypes: ["bfloat16", ...] */
static void parse_mamba_states(connector_group *g, objrd *rd, ccfg_errs *e) {
    const cJSON *sh = rd_get(rd, "shapes");
    const cJSON *dt = rd_get(rd, "dtypes");
    char p[320];
    if (!sh) missing(rd, "shapes");
    if (!dt) missing(rd, "dtypes");
    if (sh && !cJSON_IsArray(sh)) type_error(rd, "shapes", "an array of arrays of integers", sh);
    if (dt && !cJSON_IsArray(dt)) type_error(rd, "dtypes", "an array of strings", dt);
    if (sh && cJSON_IsArray(sh)) {
        int n = cJSON_GetArraySize(sh);
        join_path(p, sizeof(p), rd->path, "shapes");
        if (n < 1 || n > CONNECTOR_MAX_STATES)
            ccfg_errs_add(e, "%s: expected 1 to %d state shapes, got %d", p, CONNECTOR_MAX_STATES,
                          n);
        int i = 0;
        for (const cJSON *s = sh->child; s && i < CONNECTOR_MAX_STATES; s = s->next, i++) {
            if (!cJSON_IsArray(s)) {
                ccfg_errs_add(e, "%s[%d]: expected an array of integers, got %s", p, i,
                              json_kind(s));
                continue;
            }
            int nd = cJSON_GetArraySize(s);
            if (nd < 1 || nd > CONNECTOR_MAX_DIMS) {
                ccfg_errs_add(e, "%s[%d]: expected 1 to %d dimensions, got %d", p, i,
                              CONNECTOR_MAX_DIMS, nd);
                continue;
            }
            int k = 0;
            for (const cJSON *d = s->child; d; d = d->next, k++) {
                if (json_int(d, &g->shapes[i][k]) < 0)
                    ccfg_errs_add(e, "%s[%d][%d]: expected an integer, got %s", p, i, k,
                                  json_kind(d));
            }
            g->ndims[i] = (size_t)nd;
        }
        g->nstates = (size_t)(n > CONNECTOR_MAX_STATES ? CONNECTOR_MAX_STATES : n);
    }
    if (dt && cJSON_IsArray(dt)) {
        join_path(p, sizeof(p), rd->path, "dtypes");
        int i = 0;
        for (const cJSON *d = dt->child; d; d = d->next, i++) {
            if (i >= CONNECTOR_MAX_STATES) break;
            if (!cJSON_IsString(d))
                ccfg_errs_add(e, "%s[%d]: expected a string, got %s", p, i, json_kind(d));
            else if (dtype_lookup(d->valuestring, &g->dtypes[i]) < 0)
                ccfg_errs_add(e, "%s[%d]: unknown dtype '%s'", p, i, d->valuestring);
        }
        if (sh && cJSON_IsArray(sh) && cJSON_GetArraySize(dt) != cJSON_GetArraySize(sh))
            ccfg_errs_add(e, "%s: %d dtypes for %d shapes (one dtype per state shape)", p,
                          cJSON_GetArraySize(dt), cJSON_GetArraySize(sh));
    }
}

static void parse_spec(ccfg *c, connector_group *g, const cJSON *j, const char *path,
                       ccfg_errs *e) {
    objrd rd;
    rd_open(&rd, j, path, e);
    if (!rd.obj) return;
    int kind = -1;
    const cJSON *t = rd_get(&rd, "type");
    if (!t) {
        missing(&rd, "type");
    } else if (!cJSON_IsString(t)) {
        type_error(&rd, "type", "a string", t);
    } else {
        for (size_t i = 0; i < NELEM(spec_names); i++)
            if (strcmp(t->valuestring, spec_names[i]) == 0) kind = (int)i;
        if (kind < 0) {
            char list[512] = "";
            for (size_t i = 0; i < NELEM(spec_names); i++) {
                size_t l = strlen(list);
                snprintf(list + l, sizeof(list) - l, "%s%s", i ? ", " : "", spec_names[i]);
            }
            ccfg_errs_add(e,
                          "%s.type: unknown KV-cache spec '%s': tide knows neither its layout "
                          "nor how vLLM's rules treat it (known: %s)",
                          path, t->valuestring, list);
        }
    }
    if (kind < 0) {
        /* Without a known class the other keys cannot be judged; do not list them. */
        return;
    }
    g->kind = (connector_spec_kind)kind;
    char what[64];
    snprintf(what, sizeof(what), "for %s", spec_names[kind]);
    rd.what = what;
    rd_int(&rd, "block_size", F_REQUIRED, &g->block_size, NULL);
    rd_int(&rd, "page_size_padded", F_NULLABLE, &g->page_size_padded, NULL);
    if (g->kind == CONNECTOR_SPEC_MAMBA) {
        int v;
        parse_mamba_states(g, &rd, e);
        g->mamba_mode = c->mamba_cache_mode;
        if (rd_enum(&rd, "mamba_cache_mode", 0, mamba_mode_names, NELEM(mamba_mode_names), &v)) {
            g->mamba_mode = (connector_mamba_mode)v;
            if (g->mamba_mode != c->mamba_cache_mode)
                ccfg_errs_add(e,
                              "%s.mamba_cache_mode: '%s' differs from "
                              "cache_config.mamba_cache_mode '%s'",
                              path, mamba_mode_names[v], mamba_mode_names[c->mamba_cache_mode]);
        }
        rd_name(&rd, "mamba_type", 0, g->mamba_type, sizeof(g->mamba_type));
        rd_int(&rd, "num_speculative_blocks", 0, &g->num_speculative_blocks, NULL);
    } else if (g->kind == CONNECTOR_SPEC_HISPARSE_HOT ||
               g->kind == CONNECTOR_SPEC_HISPARSE_RESIDENT) {
        rd_int(&rd, "page_size", F_REQUIRED, &g->page_size, NULL);
        if (g->kind == CONNECTOR_SPEC_HISPARSE_HOT)
            rd_int(&rd, "blocks_per_request", F_REQUIRED, &g->blocks_per_request, NULL);
    } else {
        int hv = 0;
        int latent = g->kind == CONNECTOR_SPEC_MLA || g->kind == CONNECTOR_SPEC_SLIDING_MLA;
        rd_int(&rd, "num_kv_heads", F_REQUIRED, &g->num_kv_heads, NULL);
        rd_int(&rd, "head_size", F_REQUIRED, &g->head_size, NULL);
        hv = rd_int(&rd, "head_size_v", F_NULLABLE, &g->head_size_v, NULL);
        if (!hv) g->head_size_v = latent ? 0 : g->head_size;
        char dt[CONNECTOR_NAME_MAX] = "";
        if (rd_name(&rd, "dtype", F_REQUIRED, dt, sizeof(dt)) && dtype_lookup(dt, &g->dtype) < 0)
            ccfg_errs_add(e, "%s.dtype: unknown dtype '%s'", path, dt);
        if (g->kind == CONNECTOR_SPEC_SLIDING || g->kind == CONNECTOR_SPEC_SLIDING_MLA) {
            rd_int(&rd, "sliding_window", F_REQUIRED, &g->sliding_window, NULL);
            rd_int(&rd, "extra_retained_tokens", 0, &g->extra_retained_tokens, NULL);
        }
        if (g->kind == CONNECTOR_SPEC_FULL || g->kind == CONNECTOR_SPEC_MLA) {
            rd_int(&rd, "sliding_window", F_NULLABLE, &g->sliding_window, NULL);
            rd_int(&rd, "attention_chunk_size", F_NULLABLE, &g->attention_chunk_size, NULL);
        }
        if (latent)
            rd_name(&rd, "cache_dtype_str", F_NULLABLE, g->cache_dtype_str,
                    sizeof(g->cache_dtype_str));
        if (g->kind == CONNECTOR_SPEC_MLA)
            rd_int(&rd, "compress_ratio", 0, &g->compress_ratio, NULL);
        if (g->kind == CONNECTOR_SPEC_SLIDING_MLA)
            rd_bool(&rd, "bounded_replay", &g->bounded_replay);
    }
    rd_close(&rd);
}

static int parse_groups(ccfg *c, const cJSON *j, ccfg_errs *e) {
    objrd rd;
    rd_open(&rd, j, "kv_cache_config", e);
    if (!j) ccfg_errs_add(e, "kv_cache_config: required key is missing");
    rd_int(&rd, "num_blocks", F_NULLABLE, &c->num_blocks, NULL);
    int isnull = 0;
    int64_t ri = 0;
    if (rd_int(&rd, "prefix_cache_retention_interval", F_NULLABLE, &ri, &isnull))
        c->retention_interval = ri;
    else if (isnull)
        c->retention_interval = -1;
    const cJSON *gs = rd_get(&rd, "kv_cache_groups");
    if (rd.obj && !gs) missing(&rd, "kv_cache_groups");
    if (gs && !cJSON_IsArray(gs)) type_error(&rd, "kv_cache_groups", "an array", gs);
    if (gs && cJSON_IsArray(gs)) {
        int n = cJSON_GetArraySize(gs);
        if (n > CONNECTOR_MAX_GROUPS)
            ccfg_errs_add(e, "kv_cache_config.kv_cache_groups: %d groups, at most %d", n,
                          CONNECTOR_MAX_GROUPS);
        int i = 0;
        for (const cJSON *gj = gs->child; gj && i < CONNECTOR_MAX_GROUPS; gj = gj->next, i++) {
            connector_group *g = &c->groups[i];
            g->compress_ratio = 1;
            c->ngroups = (size_t)i + 1;
            char gp[128], sp[160];
            snprintf(gp, sizeof(gp), "kv_cache_config.kv_cache_groups[%d]", i);
            objrd gr;
            rd_open(&gr, gj, gp, e);
            if (!gr.obj) continue;
            const cJSON *spec = rd_get(&gr, "kv_cache_spec");
            if (!spec) missing(&gr, "kv_cache_spec");
            snprintf(sp, sizeof(sp), "%s.kv_cache_spec", gp);
            parse_spec(c, g, spec, sp, e);
            rd_bool(&gr, "is_eagle_group", &g->is_eagle_group);
            g->enable_kv_transfer = 1;
            rd_bool(&gr, "enable_kv_transfer", &g->enable_kv_transfer);
            const cJSON *ln = rd_get(&gr, "layer_names");
            if (ln && !cJSON_IsArray(ln)) type_error(&gr, "layer_names", "an array of strings", ln);
            if (ln && cJSON_IsArray(ln) && cJSON_GetArraySize(ln) > 0) {
                size_t nl = (size_t)cJSON_GetArraySize(ln);
                g->layer_names = calloc(nl, sizeof(char *));
                if (!g->layer_names) return -ENOMEM;
                size_t k = 0;
                for (const cJSON *s = ln->child; s; s = s->next, k++) {
                    if (!cJSON_IsString(s)) {
                        ccfg_errs_add(e, "%s.layer_names[%zu]: expected a string, got %s", gp, k,
                                      json_kind(s));
                        continue;
                    }
                    g->layer_names[g->nlayers] = strdup(s->valuestring);
                    if (!g->layer_names[g->nlayers]) return -ENOMEM;
                    g->nlayers++;
                }
            }
            rd_close(&gr);
        }
    }
    rd_close(&rd);
    return 0;
}

/* ------------------------------------------------------------------------------------
 * Entry points.
 * ---------------------------------------------------------------------------------- */

static void set_defaults(ccfg *c) {
    memset(c, 0, sizeof(*c));
    c->enable_prefix_caching = 1;
    c->tp_size = c->pp_size = c->pcp_size = c->dcp_size = c->dp_size = 1;
    c->kv_role = CONNECTOR_ROLE_BOTH;
    c->extra.load_async = 1;
    c->extra.enable_lookup = 1;
}

/* Line and column (1-based, columns in bytes) of offset pos in text. */
static void line_col(const char *text, size_t pos, int *line, int *col) {
    int l = 1, c = 1;
    for (size_t i = 0; i < pos; i++) {
        if (text[i] == '\n') {
            l++;
            c = 1;
        } else {
            c++;
        }
    }
    *line = l;
    *col = c;
}

/* The offset of the first "\u0000" escape inside a string of a well-formed document, or
 * len when none. cJSON turns it into a NUL that ends the C string early, so a name such as
 * a cache_prefix of "a\u0000b" would silently become "a" (and two tenants could share one
 * namespace); such strings are refused instead. */
static size_t nul_escape_at(const char *text, size_t len) {
    int in_str = 0;
    for (size_t i = 0; i < len; i++) {
        char ch = text[i];
        if (!in_str) {
            in_str = ch == '"';
        } else if (ch == '"') {
            in_str = 0;
        } else if (ch == '\\' && i + 1 < len) {
            if (text[i + 1] == 'u' && i + 5 < len && memcmp(text + i + 2, "0000", 4) == 0) return i;
            i++; /* the escaped character (a quote or a backslash) is not structure */
        }
    }
    return len;
}

int ccfg_parse_string(const char *json, size_t len, ccfg *cfg, ccfg_errs *errs) {
    set_defaults(cfg);
    /* Copy so the text ends with a NUL. The NUL is handed to cJSON as part of the buffer:
     * a document cut short then fails at offset len, which reads as "end of input",
     * rather than at len - 1, where cJSON puts errors past the end of its buffer. */
    char *text = malloc(len + 1);
    if (!text) return -ENOMEM;
    memcpy(text, json, len);
    text[len] = '\0';
    size_t before = errs->n;
    int rc = 0;

    /* The strict grammar first, naming what was expected ("a trailing comma before '}'");
     * cJSON also takes texts JSON refuses, such as 0600. */
    {
        int line, col;
        char what[300];
        if (json_diagnose(text, len, &line, &col, what, sizeof(what)) != 0) {
            ccfg_errs_add(errs, "line %d, column %d: invalid JSON: %s", line, col, what);
            free(text);
            return TIDE_EPARSE;
        }
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len + 1, &end, 0);
    if (!root) {
        size_t pos = end ? (size_t)(end - text) : 0;
        if (pos > len) pos = len;
        int line, col;
        line_col(text, pos, &line, &col);
        size_t p = pos;
        while (p < len && (text[p] == ' ' || text[p] == '\t' || text[p] == '\r' || text[p] == '\n'))
            p++;
        if (p >= len) {
            ccfg_errs_add(errs, "line %d, column %d: invalid JSON: unexpected end of input", line,
                          col);
        } else {
            char near[24];
            size_t k = 0;
            while (k < sizeof(near) - 1 && p + k < len && text[p + k] != '\n') {
                near[k] = text[p + k];
                k++;
            }
            near[k] = '\0';
            ccfg_errs_add(errs, "line %d, column %d: invalid JSON near '%s'", line, col, near);
        }
        free(text);
        return TIDE_EPARSE;
    }
    /* Anything after the document other than white space is an error too. */
    if (end) {
        size_t pos = (size_t)(end - text);
        size_t p = pos;
        while (p < len && (text[p] == ' ' || text[p] == '\t' || text[p] == '\r' || text[p] == '\n'))
            p++;
        if (p < len) {
            int line, col;
            line_col(text, p, &line, &col);
            ccfg_errs_add(errs, "line %d, column %d: invalid JSON: text after the document", line,
                          col);
            cJSON_Delete(root);
            free(text);
            return TIDE_EPARSE;
        }
    }

    size_t nul = nul_escape_at(text, len);
    if (nul < len) {
        int line, col;
        line_col(text, nul, &line, &col);
        ccfg_errs_add(errs,
                      "line %d, column %d: a string contains \\u0000 (NUL), which no "
                      "name or prefix may hold",
                      line, col);
        cJSON_Delete(root);
        free(text);
        return TIDE_EPARSE;
    }

    objrd rd;
    rd_open(&rd, root, "", errs);
    if (rd.obj) {
        /* cache_config first: a MambaSpec inherits its mamba_cache_mode. */
        const cJSON *cache = rd_get(&rd, "cache_config");
        if ((rc = parse_cache(cfg, cache, errs)) < 0) goto out;
        if ((rc = parse_model(cfg, rd_get(&rd, "model_config"), errs)) < 0) goto out;
        parse_parallel(cfg, rd_get(&rd, "parallel_config"), errs);
        if ((rc = parse_transfer(cfg, rd_get(&rd, "kv_transfer_config"), errs)) < 0) goto out;
        if ((rc = parse_groups(cfg, rd_get(&rd, "kv_cache_config"), errs)) < 0) goto out;
        rd_close(&rd);
    }
    if (!cfg->cache_dtype && !(cfg->cache_dtype = strdup("auto"))) rc = -ENOMEM;
    if (!cfg->extra.cache_prefix && !(cfg->extra.cache_prefix = strdup(""))) rc = -ENOMEM;
    if (rc == 0 && (errs->n > before || errs->oom)) rc = TIDE_EPARSE;
out:
    cJSON_Delete(root);
    free(text);
    return rc;
}

int ccfg_parse_file(const char *path, ccfg *cfg, ccfg_errs *errs) {
    set_defaults(cfg);
    FILE *f = fopen(path, "rb");
    if (!f) {
        int err = errno;
        ccfg_errs_add(errs, "%s: %s", path, strerror(err));
        return -err;
    }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            cap = cap ? cap * 2 : 65536;
            if (cap > (64u << 20)) {
                fclose(f);
                free(buf);
                ccfg_errs_add(errs, "%s: larger than 64 MiB", path);
                return -EFBIG;
            }
            char *nb = realloc(buf, cap);
            if (!nb) {
                fclose(f);
                free(buf);
                return -ENOMEM;
            }
            buf = nb;
        }
        size_t r = fread(buf + len, 1, cap - len, f);
        len += r;
        if (r == 0) break;
    }
    int err = ferror(f) ? errno : 0;
    fclose(f);
    if (err) {
        free(buf);
        ccfg_errs_add(errs, "%s: %s", path, strerror(err));
        return -err;
    }
    int rc = ccfg_parse_string(buf ? buf : "", len, cfg, errs);
    free(buf);
    return rc;
}

void ccfg_free(ccfg *cfg) {
    free(cfg->model);
    free(cfg->cache_dtype);
    free(cfg->kv_connector);
    free(cfg->extra.cache_prefix);
    free(cfg->extra.preferred_segment);
    for (size_t i = 0; i < cfg->ngroups; i++) {
        for (size_t k = 0; k < cfg->groups[i].nlayers; k++)
            free(cfg->groups[i].layer_names[k]);
        free(cfg->groups[i].layer_names);
    }
    memset(cfg, 0, sizeof(*cfg));
}
