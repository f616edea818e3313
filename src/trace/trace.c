/*
 * trace.c — loading Mooncake-format traces (trace.h) and the model presets.
 *
 * Lines are parsed one at a time with cJSON. Every rule a line breaks is reported with its
 * 1-based line number, so a bad trace is fixed by reading one message. Hash ids get dense
 * indices through an open-addressing table from id to index, grown by doubling at half
 * full; the simulator then keeps per-block state in arrays indexed by them.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common/json_diag.h"
#include "tide.h"
#include "trace/trace.h"

/* 2^53: above this a JSON number (a double to cJSON) no longer holds every integer. */
#define EXACT_MAX 9007199254740992.0

/*
 * Presets. Bytes per token of KV cache in bf16 (2 bytes an element), all layers:
 *   grouped-query attention: 2 (K and V) x layers x KV heads x head dim x 2 bytes;
 *   DeepSeek's multi-head latent attention (MLA) caches one compressed latent per layer
 *   and token: (kv_lora_rank 512 + rope dim 64) x layers x 2 bytes, no separate K and V.
 * Shapes are those of each model's published config.json.
 */
static const trace_model models[] = {
    /* 2 x 16 x 8 x 64 x 2 */
    {"llama-3.2-1b", 32768, "16 layers x 8 KV heads x 64 dims x K,V x bf16"},
    /* 2 x 32 x 8 x 128 x 2 */
    {"llama-3-8b", 131072, "32 layers x 8 KV heads x 128 dims x K,V x bf16"},
    /* 2 x 80 x 8 x 128 x 2 */
    {"llama-3-70b", 327680, "80 layers x 8 KV heads x 128 dims x K,V x bf16"},
    /* 2 x 126 x 8 x 128 x 2 */
    {"llama-3.1-405b", 516096, "126 layers x 8 KV heads x 128 dims x K,V x bf16"},
    /* 2 x 32 x 8 x 128 x 2 */
    {"mistral-7b", 131072, "32 layers x 8 KV heads x 128 dims x K,V x bf16"},
    /* 2 x 28 x 4 x 128 x 2 */
    {"qwen2.5-7b", 57344, "28 layers x 4 KV heads x 128 dims x K,V x bf16"},
    /* 2 x 80 x 8 x 128 x 2 */
    {"qwen2.5-72b", 327680, "80 layers x 8 KV heads x 128 dims x K,V x bf16"},
    /* 61 x (512 + 64) x 2 */
    {"deepseek-v3", 70272, "61 layers x MLA latent (512 + 64 rope) x bf16"},
};

int trace_model_find(const char *name, uint64_t *bytes_per_token) {
    for (size_t i = 0; i < sizeof(models) / sizeof(models[0]); i++)
        if (strcmp(models[i].name, name) == 0) {
            *bytes_per_token = models[i].bytes_per_token;
            return 0;
        }
    return -1;
}

size_t trace_model_count(void) {
    return sizeof(models) / sizeof(models[0]);
}

const trace_model *trace_model_at(size_t i) {
    return i < trace_model_count() ? &models[i] : NULL;
}

uint64_t trace_block_tokens(const trace *t, const trace_req *r, uint32_t i) {
    uint64_t start = (uint64_t)i * t->block_tokens;
    if (start >= r->input_len) return 0;
    uint64_t left = r->input_len - start;
    return left < t->block_tokens ? left : t->block_tokens;
}

/* The loader's state: growing arrays and the id table. */
typedef struct loader {
    trace *t;
    size_t reqs_cap, refs_cap;
    uint64_t *keys; /* id table: hash id + 1 (0 = empty slot) */
    uint32_t *vals;
    size_t tab_cap;
    char *err;
    size_t errlen;
} loader;

static int fail(loader *l, size_t lineno, const char *fmt, ...) {
    va_list ap;
    int n = snprintf(l->err, l->errlen, "line %zu: ", lineno);
    if (n < 0 || (size_t)n >= l->errlen) return TIDE_EPARSE;
    va_start(ap, fmt);
    vsnprintf(l->err + n, l->errlen - (size_t)n, fmt, ap);
    va_end(ap);
    return TIDE_EPARSE;
}

static uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xFF51AFD7ED558CCDull;
    x ^= x >> 33;
    x *= 0xC4CEB9FE1A85EC53ull;
    return x ^ (x >> 33);
}

static int tab_grow(loader *l) {
    size_t cap = l->tab_cap ? l->tab_cap * 2 : 1024;
    uint64_t *keys = calloc(cap, sizeof(*keys));
    uint32_t *vals = malloc(cap * sizeof(*vals));
    if (!keys || !vals) {
        free(keys);
        free(vals);
        return -ENOMEM;
    }
    for (size_t i = 0; i < l->tab_cap; i++) {
        if (!l->keys[i]) continue;
        size_t at = mix64(l->keys[i]) & (cap - 1);
        while (keys[at])
            at = (at + 1) & (cap - 1);
        keys[at] = l->keys[i];
        vals[at] = l->vals[i];
    }
    free(l->keys);
    free(l->vals);
    l->keys = keys;
    l->vals = vals;
    l->tab_cap = cap;
    return 0;
}

/* The dense index of hash id h, given a new one on first sight. */
static int dense_id(loader *l, uint64_t h, uint32_t *out) {
    if ((l->t->ndistinct + 1) * 2 > l->tab_cap && tab_grow(l)) return -ENOMEM;
    uint64_t k = h + 1; /* h < 2^53, so k is never 0 */
    /* At most half full, so the probe meets an empty slot within tab_cap steps. */
    size_t at = mix64(k) & (l->tab_cap - 1);
    for (size_t n = 0; n < l->tab_cap; n++, at = (at + 1) & (l->tab_cap - 1)) {
        if (l->keys[at] == k) {
            *out = l->vals[at];
            return 0;
        }
        if (!l->keys[at]) {
            if (l->t->ndistinct >= UINT32_MAX) return -ENOMEM;
            l->keys[at] = k;
            l->vals[at] = (uint32_t)l->t->ndistinct++;
            *out = l->vals[at];
            return 0;
        }
    }
    return -ENOMEM;
}

/* A required non-negative integer field of obj. */
static int get_uint(loader *l, size_t lineno, const cJSON *obj, const char *name, uint64_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    if (!v) return fail(l, lineno, "missing field \"%s\"", name);
    if (!cJSON_IsNumber(v)) return fail(l, lineno, "field \"%s\" is not a number", name);
    double d = v->valuedouble;
    if (d < 0) return fail(l, lineno, "field \"%s\" is negative (%g)", name, d);
    if (d != floor(d) || d >= EXACT_MAX)
        return fail(l, lineno, "field \"%s\" is not an integer below 2^53 (%g)", name, d);
    *out = (uint64_t)d;
    return 0;
}

static int parse_line(loader *l, const char *line, size_t lineno) {
    trace *t = l->t;
    const char *end = NULL;
    cJSON *obj = cJSON_ParseWithOpts(line, &end, 1);
    int rc = 0;
    if (!obj) {
        int dl, dc;
        char what[300];
        if (json_diagnose(line, strlen(line), &dl, &dc, what, sizeof(what)) != 0)
            return fail(l, lineno, "malformed JSON near column %d: %s", dc, what);
        size_t col = end && end >= line ? (size_t)(end - line) + 1 : 1;
        return fail(l, lineno, "malformed JSON near column %zu", col);
    }
    if (!cJSON_IsObject(obj)) {
        rc = fail(l, lineno, "expected a JSON object");
        goto out;
    }
    trace_req r = {0};
    if ((rc = get_uint(l, lineno, obj, "timestamp", &r.ts_ms)) ||
        (rc = get_uint(l, lineno, obj, "input_length", &r.input_len)) ||
        (rc = get_uint(l, lineno, obj, "output_length", &r.output_len)))
        goto out;
    const cJSON *ids = cJSON_GetObjectItemCaseSensitive(obj, "hash_ids");
    if (!ids) {
        rc = fail(l, lineno, "missing field \"hash_ids\"");
        goto out;
    }
    if (!cJSON_IsArray(ids)) {
        rc = fail(l, lineno, "field \"hash_ids\" is not an array");
        goto out;
    }
    int n = cJSON_GetArraySize(ids);
    if (n < 0 || (unsigned)n > TRACE_REQ_BLOCKS_MAX) {
        rc = fail(l, lineno, "more than %u hash ids", TRACE_REQ_BLOCKS_MAX);
        goto out;
    }
    uint64_t want = (r.input_len + t->block_tokens - 1) / t->block_tokens;
    if ((uint64_t)n != want) {
        rc = fail(l, lineno,
                  "%d hash ids for input_length %llu: blocks of %llu tokens need %llu "
                  "(is --block-tokens right?)",
                  n, (unsigned long long)r.input_len, (unsigned long long)t->block_tokens,
                  (unsigned long long)want);
        goto out;
    }
    if (t->nreqs == l->reqs_cap) {
        size_t cap = l->reqs_cap ? l->reqs_cap * 2 : 1024;
        trace_req *p = realloc(t->reqs, cap * sizeof(*p));
        if (!p) goto oom;
        t->reqs = p;
        l->reqs_cap = cap;
    }
    while (t->nrefs + (size_t)n > l->refs_cap) {
        size_t cap = l->refs_cap ? l->refs_cap * 2 : 16384;
        uint64_t *h = realloc(t->hash_ids, cap * sizeof(*h));
        if (!h) goto oom;
        t->hash_ids = h;
        uint32_t *d = realloc(t->ids, cap * sizeof(*d));
        if (!d) goto oom;
        t->ids = d;
        l->refs_cap = cap;
    }
    r.first = t->nrefs;
    r.nblocks = (uint32_t)n;
    int i = 0;
    for (const cJSON *e = ids->child; e; e = e->next, i++) {
        double d = cJSON_IsNumber(e) ? e->valuedouble : -1;
        if (!cJSON_IsNumber(e) || d < 0 || d != floor(d) || d >= EXACT_MAX) {
            rc = fail(l, lineno, "hash_ids[%d] is not an integer from 0 to 2^53", i);
            goto out;
        }
        t->hash_ids[t->nrefs + (size_t)i] = (uint64_t)d;
        if (dense_id(l, (uint64_t)d, &t->ids[t->nrefs + (size_t)i])) goto oom;
    }
    t->nrefs += (size_t)n;
    t->tokens += r.input_len;
    t->reqs[t->nreqs++] = r;
    goto out;
oom:
    snprintf(l->err, l->errlen, "line %zu: out of memory", lineno);
    rc = -ENOMEM;
out:
    cJSON_Delete(obj);
    return rc;
}

/* Only spaces, tabs and a CR: a blank line, skipped. */
static int blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r') return 0;
    return 1;
}

/* Check one raw line (without its newline, NUL-terminated at len) and parse it. */
static int take_line(loader *l, const char *line, size_t len, size_t lineno) {
    if (len > TRACE_LINE_MAX) return fail(l, lineno, "line longer than %u bytes", TRACE_LINE_MAX);
    if (strlen(line) != len) return fail(l, lineno, "NUL byte in the line");
    if (blank(line, len)) return 0;
    return parse_line(l, line, lineno);
}

static int loader_start(loader *l, trace *t, uint64_t block_tokens, char *err, size_t errlen) {
    memset(t, 0, sizeof(*t));
    memset(l, 0, sizeof(*l));
    l->t = t;
    l->err = err;
    l->errlen = errlen;
    if (errlen) err[0] = '\0';
    if (block_tokens == 0) {
        snprintf(err, errlen, "block_tokens must be at least 1");
        return -EINVAL;
    }
    t->block_tokens = block_tokens;
    return 0;
}

static int loader_end(loader *l, int rc) {
    free(l->keys);
    free(l->vals);
    if (rc) trace_free(l->t);
    return rc;
}

int trace_load_text(const char *text, uint64_t block_tokens, uint64_t limit, trace *t, char *err,
                    size_t errlen) {
    loader l;
    int rc = loader_start(&l, t, block_tokens, err, errlen);
    if (rc) return rc;
    char *buf = NULL;
    size_t cap = 0, lineno = 0;
    const char *p = text;
    /* One line per pass; the pass count is bounded by the text's length. */
    while (*p && (!limit || t->nreqs < limit)) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        lineno++;
        if (len + 1 > cap) {
            char *b = realloc(buf, len + 1);
            if (!b) {
                rc = -ENOMEM;
                break;
            }
            buf = b;
            cap = len + 1;
        }
        memcpy(buf, p, len);
        buf[len] = '\0';
        if ((rc = take_line(&l, buf, len, lineno))) break;
        p += len + (nl ? 1 : 0);
    }
    free(buf);
    return loader_end(&l, rc);
}

int trace_load(const char *path, uint64_t block_tokens, uint64_t limit, trace *t, char *err,
               size_t errlen) {
    loader l;
    int rc = loader_start(&l, t, block_tokens, err, errlen);
    if (rc) return rc;
    FILE *f = fopen(path, "r");
    if (!f) {
        rc = -errno;
        snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return loader_end(&l, rc);
    }
    char *line = NULL;
    size_t cap = 0, lineno = 0;
    ssize_t n;
    /* getline() reads one line a pass, so the loop ends with the file. */
    while ((!limit || t->nreqs < limit) && (n = getline(&line, &cap, f)) >= 0) {
        lineno++;
        size_t len = (size_t)n;
        if (len && line[len - 1] == '\n') line[--len] = '\0';
        if ((rc = take_line(&l, line, len, lineno))) break;
    }
    if (!rc && ferror(f)) {
        rc = -EIO;
        snprintf(err, errlen, "reading %s: %s", path, strerror(EIO));
    }
    free(line);
    fclose(f);
    return loader_end(&l, rc);
}

void trace_free(trace *t) {
    free(t->reqs);
    free(t->hash_ids);
    free(t->ids);
    memset(t, 0, sizeof(*t));
}
