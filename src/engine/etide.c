/*
 * etide.c — the reference engine driven through libtide's connector as vLLM drives it
 * (see etide.h for the sequence). Only public calls of engine.h and tide.h are used: this
 * is the code a real engine integration would hold.
 *
 * Invariants: a request's blocks and slots are allocated before its first step and never
 * change until it is freed, so the connector learns its block tables once (with the first
 * step, is_new = 1) and every later step passes no new blocks. A request is freed only
 * after every worker reported its saves finished, so no save ever reads a page that a
 * later request reuses.
 */
#include "engine/etide.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HASH_LEN TIDE_HASH_BYTES
#define REQ_ID_MAX 200
#define IDS_BUF 4096

struct etide {
    engine_model *m;
    tide_store *store;
    tide_connector *sched;
    tide_connector *workers[ETIDE_MAX_RANKS];
    uint32_t nranks, ngroups, bt, interval;
    uint32_t hash_block, sched_block;
    char err[512];
};

/* ---- configuration ----------------------------------------------------------------------- */

typedef struct sbuf {
    char *p;
    size_t len, cap;
    int oom;
} sbuf;

static void sb_add(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_add(sbuf *b, const char *fmt, ...) {
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = 1;
            return;
        }
        if (b->p && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 2048;
        while (cap <= b->len + (size_t)n)
            cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->oom = 1;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
}

/* "tide-ref-<layout>-<16 hex>": the hex digits hash every dimension and the seed, so two
 * models whose weights differ never read each other's cache. */
static void model_name(const engine_model *m, char *out, size_t cap) {
    const engine_config *c = engine_config_of(m);
    uint32_t theta;
    memcpy(&theta, &c->rope_theta, sizeof(theta));
    const uint32_t dims[] = {c->vocab,
                             c->d_model,
                             c->n_q_heads,
                             c->n_kv_heads,
                             c->head_dim,
                             c->d_ff,
                             c->d_inner,
                             c->d_state,
                             c->d_conv,
                             c->dt_rank,
                             theta,
                             (uint32_t)c->seed,
                             (uint32_t)(c->seed >> 32),
                             c->block_size,
                             c->tp,
                             c->dcp};
    const char *layout = engine_layout(m);
    uint8_t h[TIDE_HASH_BYTES];
    char hex[33];
    tide_block_hash(TIDE_HASH_XXH3, NULL, dims, sizeof(dims) / sizeof(dims[0]), layout,
                    strlen(layout), h);
    tide_hash_hex(h, hex);
    hex[16] = '\0';
    snprintf(out, cap, "tide-ref-%.40s-%s", layout, hex);
}

static uint32_t interval_of(const engine_model *m, const etide_options *o) {
    uint32_t bt = engine_block_tokens(m);
    uint32_t iv = o && o->interval ? o->interval : ETIDE_DEFAULT_INTERVAL;
    return (iv + bt - 1) / bt * bt;
}

/* Layer names of one kind, as vLLM names a model's layers. */
static void layer_names(sbuf *b, const char *layout, char kind, const char *what) {
    sb_add(b, "\"layer_names\": [");
    int first = 1;
    for (size_t i = 0; layout[i]; i++)
        if (layout[i] == kind) {
            sb_add(b, "%s\"model.layers.%zu.%s\"", first ? "" : ", ", i, what);
            first = 0;
        }
    sb_add(b, "]");
}

int etide_config_json(const engine_model *m, uint32_t rank, const etide_options *o, char **out) {
    const engine_config *c = engine_config_of(m);
    *out = NULL;
    if (rank >= engine_num_ranks(m)) return -EINVAL;
    const char *layout = engine_layout(m);
    char name[96];
    model_name(m, name, sizeof(name));
    uint32_t kvh = c->tp <= c->n_kv_heads ? c->n_kv_heads / c->tp : 1;
    uint32_t ch = c->d_inner / c->tp;
    int hybrid = engine_num_groups(m) > 1;
    sbuf b = {0};
    sb_add(&b,
           "{\n  \"model_config\": {\"model\": \"tide-reference/%s\", "
           "\"total_num_kv_heads\": %u, \"dtype\": \"float32\"},\n",
           name, c->n_kv_heads);
    sb_add(&b,
           "  \"cache_config\": {\"block_size\": %u, \"cache_dtype\": \"auto\", "
           "\"prefix_caching_hash_algo\": \"xxhash\"",
           c->block_size);
    if (hybrid)
        sb_add(&b, ", \"mamba_cache_mode\": \"align\", \"prefix_cache_retention_interval\": %u",
               interval_of(m, o));
    sb_add(&b, "},\n");
    sb_add(&b,
           "  \"parallel_config\": {\"tensor_parallel_size\": %u, "
           "\"decode_context_parallel_size\": %u, \"tp_rank\": %u},\n",
           c->tp * c->dcp, c->dcp, rank);
    sb_add(&b, "  \"kv_transfer_config\": {\"kv_connector\": \"TideStoreConnector\", "
               "\"kv_role\": \"kv_both\", \"kv_load_failure_policy\": \"recompute\"},\n");
    sb_add(&b, "  \"kv_cache_config\": {\"num_blocks\": %u, \"kv_cache_groups\": [\n    {",
           c->num_blocks);
    layer_names(&b, layout, 'A', "self_attn");
    sb_add(&b,
           ", \"kv_cache_spec\": {\"type\": \"FullAttentionSpec\", \"block_size\": %u, "
           "\"num_kv_heads\": %u, \"head_size\": %u, \"dtype\": \"float32\"}}",
           c->block_size, kvh, c->head_dim);
    if (hybrid) {
        sb_add(&b, ",\n    {");
        layer_names(&b, layout, 'M', "mixer");
        /* A Mamba block is one snapshot at a logical block end: block_tokens long. */
        sb_add(&b,
               ", \"kv_cache_spec\": {\"type\": \"MambaSpec\", \"block_size\": %u, "
               "\"shapes\": [[%u, %u], [%u, %u]], \"dtypes\": [\"float32\", \"float32\"], "
               "\"mamba_cache_mode\": \"align\", \"mamba_type\": \"mamba1\"}}",
               engine_block_tokens(m), c->d_conv - 1, ch, ch, c->d_state);
    }
    sb_add(&b, "\n  ]}\n}\n");
    if (b.oom) {
        free(b.p);
        return -ENOMEM;
    }
    *out = b.p;
    return 0;
}

/* ---- the handle ------------------------------------------------------------------------- */

static int fail(etide *e, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(etide *e, int rc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->err, sizeof(e->err), fmt, ap);
    va_end(ap);
    return rc;
}

/* Register every region of every group of one rank with its worker, as vLLM's
 * register_kv_caches does with each layer's tensor: an attention region is a float32
 * tensor (2, num_blocks, page floats) — K and V planes outside the block dimension — and a
 * Mamba region (num_slots, slot floats), one segment of whole pages. */
static int register_rank(etide *e, uint32_t rank) {
    tide_connector *w = e->workers[rank];
    for (uint32_t g = 0; g < e->ngroups; g++) {
        uint32_t nreg = engine_num_regions(e->m, (int)g, rank);
        for (uint32_t i = 0; i < nreg; i++) {
            engine_region r;
            int rc = engine_region_get(e->m, (int)g, rank, i, &r);
            if (rc) return fail(e, rc, "rank %u group %u region %u: not found", rank, g, i);
            int64_t shape[3], strides[3];
            size_t ndim = 0;
            if (r.num_segments > 1) {
                shape[0] = r.num_segments;
                shape[1] = r.num_blocks;
                shape[2] = (int64_t)(r.block_len / sizeof(float));
                strides[0] = (int64_t)(r.segment_stride / sizeof(float));
                strides[1] = shape[2];
                strides[2] = 1;
                ndim = 3;
            }
            rc = tide_connector_register_region(w, (int)g, r.base, r.nbytes, r.num_blocks, ndim,
                                                ndim ? shape : NULL, ndim ? strides : NULL,
                                                sizeof(float));
            if (rc)
                return fail(e, rc, "rank %u group %u region %u: %s", rank, g, i,
                            tide_connector_errmsg(w));
        }
    }
    return 0;
}

static int make_connector(etide *e, const etide_options *o, uint32_t rank, int role,
                          tide_connector **out) {
    char *json = NULL;
    int rc = etide_config_json(e->m, rank, o, &json);
    if (rc) return fail(e, rc, "cannot build the connector configuration of rank %u", rank);
    rc = tide_connector_create_with_store(json, e->store, role, out);
    free(json);
    if (rc) return fail(e, rc, "connector for rank %u: %s", rank, tide_connector_errmsg(NULL));
    return 0;
}

int etide_create(engine_model *m, tide_store *store, const etide_options *opts, etide **out,
                 char *err, size_t errlen) {
    *out = NULL;
    etide *e = calloc(1, sizeof(*e));
    if (!e) {
        if (errlen) snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    e->m = m;
    e->store = store;
    e->nranks = engine_num_ranks(m);
    e->ngroups = engine_num_groups(m);
    e->bt = engine_block_tokens(m);
    e->interval = interval_of(m, opts);
    int rc = 0;
    if (!store) goto out; /* no store: every prompt is computed (etide_prefill warns) */
    if (e->nranks > ETIDE_MAX_RANKS) {
        rc = fail(e, -EINVAL, "%u ranks: at most %d", e->nranks, ETIDE_MAX_RANKS);
        goto out;
    }
    if ((rc = make_connector(e, opts, 0, TIDE_CONNECTOR_SCHEDULER, &e->sched))) goto out;
    tide_connector_info info;
    if ((rc = tide_connector_get_info(e->sched, &info, sizeof info))) {
        rc = fail(e, rc, "connector info: %s", tide_connector_errmsg(e->sched));
        goto out;
    }
    if (info.hash_bytes != HASH_LEN || info.ngroups != (int)e->ngroups) {
        rc = fail(e, -EINVAL, "the connector resolved %d groups and %d-byte hashes", info.ngroups,
                  info.hash_bytes);
        goto out;
    }
    e->hash_block = (uint32_t)info.hash_block_size;
    e->sched_block = (uint32_t)info.scheduler_block_size;
    for (uint32_t r = 0; r < e->nranks; r++) {
        if ((rc = make_connector(e, opts, r, TIDE_CONNECTOR_WORKER, &e->workers[r]))) goto out;
        if ((rc = register_rank(e, r))) goto out;
    }
out:
    if (rc) {
        if (errlen) snprintf(err, errlen, "%s", e->err);
        etide_destroy(e);
        return rc;
    }
    *out = e;
    return 0;
}

void etide_destroy(etide *e) {
    if (!e) return;
    for (uint32_t r = 0; r < ETIDE_MAX_RANKS; r++)
        tide_connector_destroy(e->workers[r]);
    tide_connector_destroy(e->sched);
    free(e);
}

const char *etide_errmsg(const etide *e) {
    return e->err;
}

/* ---- one prompt ------------------------------------------------------------------------- */

static void warn(etide_result *res, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void warn(etide_result *res, const char *fmt, ...) {
    size_t len = strlen(res->warning);
    if (len + 3 >= sizeof(res->warning)) return;
    if (len) {
        memcpy(res->warning + len, "; ", 3);
        len += 2;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(res->warning + len, sizeof(res->warning) - len, fmt, ap);
    va_end(ap);
}

/* Connector figures summed over every worker. */
static void worker_stats(const etide *e, tide_connector_stats *sum) {
    memset(sum, 0, sizeof(*sum));
    for (uint32_t r = 0; r < e->nranks; r++) {
        tide_connector_stats s;
        if (tide_connector_get_stats(e->workers[r], &s, sizeof s)) continue;
        sum->load_get.bytes += s.load_get.bytes;
        sum->load_get.errors += s.load_get.errors;
        sum->loaded_objects += s.loaded_objects;
        sum->load_errors += s.load_errors;
        sum->save_put.bytes += s.save_put.bytes;
        sum->save_put.failed_keys += s.save_put.failed_keys;
        sum->save_put.errors += s.save_put.errors;
        sum->save_exists.errors += s.save_exists.errors;
        sum->saved_objects += s.saved_objects;
        sum->dedup_skipped += s.dedup_skipped;
    }
}

/* One step's metadata from the scheduler, handed to every rank's worker. */
static int run_step(etide *e, const char *id) {
    tide_connector_meta *meta;
    int rc = tide_connector_build_meta(e->sched, &meta);
    if (rc) return fail(e, rc, "%s: build_meta: %s", id, tide_connector_errmsg(e->sched));
    for (uint32_t r = 0; r < e->nranks && rc >= 0; r++) {
        rc = tide_connector_start_jobs(e->workers[r], meta,
                                       TIDE_CONNECTOR_LOAD | TIDE_CONNECTOR_SAVE);
        if (rc < 0)
            rc = fail(e, rc, "%s: rank %u: start_jobs: %s", id, r,
                      tide_connector_errmsg(e->workers[r]));
    }
    tide_connector_meta_free(meta);
    return rc < 0 ? rc : 0;
}

/* Wait for every worker's queued jobs and count how many ranks reported `id` finished
 * for `kind`. */
static uint32_t wait_finished(etide *e, int kind, const char *id) {
    uint32_t seen = 0;
    for (uint32_t r = 0; r < e->nranks; r++) {
        tide_connector_wait(e->workers[r]);
        char buf[IDS_BUF];
        /* Bounded: each call takes at least one id off the list, or none is left. */
        for (int round = 0; round < 1024; round++) {
            int n = tide_connector_get_finished(e->workers[r], kind, buf, sizeof(buf));
            if (n <= 0) break;
            const char *p = buf;
            for (int i = 0; i < n; i++, p += strlen(p) + 1)
                if (strcmp(p, id) == 0) seen++;
        }
    }
    return seen;
}

/* The resume point after a load of [0, hit) whose failed block ids are in failed[0..n):
 * attention resumes at the first failed block; a hybrid model has one snapshot, at hit, so
 * any failure sends it back to 0. An id may be an attention block or the Mamba slot (the
 * stacks number from 0 each); either reading is taken. */
static uint32_t resume_point(const etide *e, const int32_t *blocks, int32_t hit_slot, uint32_t hit,
                             const int32_t *failed, size_t n) {
    uint32_t cut = hit;
    for (size_t k = 0; k < n; k++) {
        for (uint32_t i = 0; i < hit / e->bt; i++)
            if (blocks[i] == failed[k] && i * e->bt < cut) cut = i * e->bt;
        if (hit_slot >= 0 && failed[k] == hit_slot) cut = 0;
    }
    if (e->ngroups > 1 && cut < hit) cut = 0;
    return cut;
}

/* Where the step that starts at pos ends: the next retention boundary, the replay boundary
 * or the prompt's end, whichever comes first. */
static uint32_t step_end(const etide *e, uint32_t pos, uint32_t replay, uint32_t n) {
    uint32_t end = (pos / e->interval + 1) * e->interval;
    if (replay > pos && replay < end) end = replay;
    return end < n ? end : n;
}

int etide_prefill(etide *e, const char *id, const uint32_t *tokens, uint32_t n, float *logits,
                  etide_result *res) {
    memset(res, 0, sizeof(*res));
    res->prompt_tokens = n;
    if (n == 0 || !id || !id[0] || strlen(id) > REQ_ID_MAX)
        return fail(e, -EINVAL, "a prompt needs tokens and a request id of 1..%d bytes",
                    REQ_ID_MAX);
    if (!e->sched) { /* no store */
        uint64_t ns = 0;
        int rc = etide_recompute(e, tokens, n, logits, &ns);
        res->computed_tokens = n;
        res->compute_ns = res->ttft_ns = ns;
        res->lookup_failed = 1;
        warn(res, "no store: computed the whole prompt, saved nothing");
        return rc;
    }
    uint64_t t0 = engine_now_ns();
    tide_connector_stats before, after;
    worker_stats(e, &before);
    size_t nh = n / e->hash_block, nblk = (n + e->bt - 1) / e->bt;
    uint8_t *hashes = malloc((nh ? nh : 1) * HASH_LEN);
    int32_t *ids = malloc(2 * nblk * sizeof(int32_t));
    int32_t *failed = NULL;
    engine_req *r = NULL;
    int rc = 0, live = 0;
    if (!hashes || !ids) {
        rc = fail(e, -ENOMEM, "%s: out of memory", id);
        goto out;
    }
    int nhr = tide_prefix_hashes(TIDE_HASH_XXH3, tokens, n, e->hash_block, NULL, 0, hashes, nh);
    if (nhr < 0 || (size_t)nhr != nh) {
        rc = fail(e, nhr < 0 ? nhr : -EINVAL, "%s: hashing the prompt failed", id);
        goto out;
    }

    /* Lookup: a store that cannot answer is a miss. */
    int64_t offered = 0;
    rc = tide_connector_lookup(e->sched, id, n, hashes, nh, HASH_LEN, 0, &offered);
    live = 1;
    if (rc) {
        res->lookup_failed = 1;
        warn(res, "lookup failed (%s): computing the whole prompt",
             tide_connector_errmsg(e->sched));
        offered = 0;
        rc = 0;
    }
    uint32_t hit = (uint32_t)offered;
    res->hit_tokens = hit;
    res->lookup_ns = engine_now_ns() - t0;

    /* Allocate: every attention block of the prompt, and the Mamba slots align mode uses. */
    if ((rc = engine_req_new(e->m, &r))) {
        rc = fail(e, rc, "%s: no engine request", id);
        goto out;
    }
    engine_req_set_snapshot_every(r, 0); /* snapshots only in the slots given below */
    if ((rc = engine_req_reserve(r, n))) {
        rc = fail(e, rc, "%s: the engine's block stack cannot hold %u tokens", id, n);
        goto out;
    }
    uint32_t replay = (n - 1) / e->sched_block * e->sched_block;
    int32_t hit_slot = -1;
    if (e->ngroups > 1) {
        for (uint32_t q = e->interval; q <= replay && rc >= 0; q += e->interval)
            rc = engine_req_mamba_slot(r, q / e->bt - 1, 1);
        if (rc >= 0 && replay) rc = engine_req_mamba_slot(r, replay / e->bt - 1, 1);
        if (rc >= 0 && hit) rc = hit_slot = engine_req_mamba_slot(r, hit / e->bt - 1, 1);
        if (rc < 0) {
            rc = fail(e, rc, "%s: out of Mamba snapshot slots", id);
            goto out;
        }
        rc = 0;
    }
    uint32_t nb;
    const int32_t *blocks = engine_req_blocks(r, &nb);
    memcpy(ids, blocks, nblk * sizeof(int32_t));
    size_t counts[ENGINE_MAX_GROUPS] = {nblk, 0}, none[ENGINE_MAX_GROUPS] = {0, 0};
    if (e->ngroups > 1) {
        uint32_t ns;
        const int32_t *slots = engine_req_mamba_slots(r, &ns);
        for (size_t i = 0; i < nblk; i++)
            ids[nblk + i] = i < ns ? slots[i] : -1;
        counts[1] = nblk;
    }
    rc = tide_connector_update_after_alloc(e->sched, id, ids, counts, e->ngroups, hit);
    if (rc) {
        rc = fail(e, rc, "%s: update_after_alloc: %s", id, tide_connector_errmsg(e->sched));
        goto out;
    }

    /* Load: one step whose only job is the load, run by every rank's worker. */
    uint32_t pos = 0;
    int is_new = 1;
    if (hit) {
        uint64_t tl = engine_now_ns();
        rc = tide_connector_request_step(e->sched, id, n, hit, hashes, nh, HASH_LEN, ids, counts,
                                         e->ngroups, 1);
        if (rc) {
            rc = fail(e, rc, "%s: request_step: %s", id, tide_connector_errmsg(e->sched));
            goto out;
        }
        is_new = 0;
        if ((rc = run_step(e, id))) goto out;
        uint32_t done = wait_finished(e, TIDE_CONNECTOR_LOAD, id);
        pos = hit;
        /* Every failed id of this load, from every rank: at most one per object loaded. */
        size_t nfailed = 0, cap = (size_t)e->nranks * e->ngroups * (hit / e->bt + 1);
        failed = malloc(cap * sizeof(int32_t));
        if (!failed) {
            rc = fail(e, -ENOMEM, "%s: out of memory", id);
            goto out;
        }
        for (uint32_t k = 0; k < e->nranks; k++)
            for (int round = 0; round < 64 && nfailed < cap; round++) {
                int f =
                    tide_connector_get_load_errors(e->workers[k], failed + nfailed, cap - nfailed);
                if (f <= 0) break;
                nfailed += (size_t)f;
            }
        res->load_errors = (uint32_t)nfailed;
        if (done != e->nranks) pos = 0; /* a rank never reported: trust nothing */
        pos = pos ? resume_point(e, blocks, hit_slot, hit, failed, nfailed) : 0;
        if (pos < hit) {
            warn(res,
                 "%zu block%s failed to load (missing, evicted or damaged): recomputing "
                 "from token %u",
                 nfailed, nfailed == 1 ? "" : "s", pos);
            is_new = 1; /* the connector sees the request afresh: it saves from 0 again */
        }
        res->load_ns = engine_now_ns() - tl;
    }
    res->resumed_tokens = pos;
    if ((rc = engine_req_resume(r, pos))) {
        rc = fail(e, rc, "%s: resume at %u failed", id, pos);
        goto out;
    }

    /* Compute, step by step; each step's new pages are saved in the background. */
    uint64_t tc = engine_now_ns();
    for (int guard = 0; pos < n && guard <= (int)(n / e->interval) + 2; guard++) {
        uint32_t end = step_end(e, pos, replay, n);
        if ((rc = engine_prefill(r, tokens, end, end == n ? logits : NULL))) {
            rc = fail(e, rc, "%s: prefill to %u failed", id, end);
            goto out;
        }
        rc = tide_connector_request_step(e->sched, id, n, end, hashes, nh, HASH_LEN,
                                         is_new ? ids : NULL, is_new ? counts : none, e->ngroups,
                                         is_new);
        if (rc) {
            rc = fail(e, rc, "%s: request_step: %s", id, tide_connector_errmsg(e->sched));
            goto out;
        }
        is_new = 0;
        if ((rc = run_step(e, id))) goto out;
        pos = end;
    }
    res->compute_ns = engine_now_ns() - tc;
    res->computed_tokens = n - res->resumed_tokens;
    res->ttft_ns = engine_now_ns() - t0;

    /* Finish: the blocks stay until every rank has stored what it was given. */
    uint64_t tw = engine_now_ns();
    rc = tide_connector_request_finished(e->sched, id);
    live = 0;
    if (rc < 0) {
        rc = fail(e, rc, "%s: request_finished: %s", id, tide_connector_errmsg(e->sched));
        goto out;
    }
    int delayed = rc;
    if ((rc = run_step(e, id))) goto out;
    uint32_t saved = wait_finished(e, TIDE_CONNECTOR_SAVE, id);
    if (delayed && saved != e->nranks)
        warn(res, "only %u of %u ranks reported their saves finished", saved, e->nranks);
    res->save_wait_ns = engine_now_ns() - tw;

    worker_stats(e, &after);
    res->loaded_objects = after.loaded_objects - before.loaded_objects;
    res->loaded_bytes = after.load_get.bytes - before.load_get.bytes;
    res->saved_objects = after.saved_objects - before.saved_objects;
    res->saved_bytes = after.save_put.bytes - before.save_put.bytes;
    res->dedup_objects = after.dedup_skipped - before.dedup_skipped;
    res->save_failed = after.save_put.failed_keys - before.save_put.failed_keys;
    uint64_t whole = (after.save_put.errors - before.save_put.errors) +
                     (after.save_exists.errors - before.save_exists.errors);
    if (res->save_failed || whole)
        warn(res,
             "saving failed (%" PRIu64 " objects not stored, %" PRIu64
             " store calls failed): later prompts will miss them",
             res->save_failed, whole);
out:
    if (live) tide_connector_request_finished(e->sched, id);
    if (rc && r) /* jobs may still read or write the request's pages */
        for (uint32_t k = 0; k < e->nranks; k++)
            tide_connector_wait(e->workers[k]);
    engine_req_free(r);
    free(hashes);
    free(ids);
    free(failed);
    return rc;
}

int etide_recompute(etide *e, const uint32_t *tokens, uint32_t n, float *logits, uint64_t *ns) {
    engine_req *r;
    int rc = engine_req_new(e->m, &r);
    if (rc) return fail(e, rc, "recompute: no request");
    engine_req_set_snapshot_every(r, 0); /* a plain engine keeps no snapshots */
    uint64_t t0 = engine_now_ns();
    rc = engine_prefill(r, tokens, n, logits);
    *ns = engine_now_ns() - t0;
    engine_req_free(r);
    if (rc) return fail(e, rc, "recompute: prefill of %u tokens failed", n);
    return 0;
}
