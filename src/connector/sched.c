/*
 * sched.c — the scheduler side: per-request state and the plan of each step's jobs.
 *
 * A request's life as the scheduler sees it:
 *
 *   lookup            the hit length; tokens beyond those computed locally become a load
 *                     spec, not yet armed
 *   update_after_alloc  its block table; the load is armed when the engine granted exactly
 *                     the tokens offered
 *   request_step      each scheduled step: the tokens computed once the step's forward pass
 *                     is done, its hashes, new blocks
 *   build_meta        one job per request that stepped: its armed load, or else a save of
 *                     the blocks completed since its last save (never both in one step)
 *   request_finished  dropped; kept in the next metadata's finished list when saves were
 *                     issued for it, so the workers report it once they are done
 *
 * What a save covers, per group (S = tokens saved so far, E = tokens computed — no further
 * than the prompt unless save_decode_cache — aligned down to the scheduler block size A;
 * R = the replay boundary floor((prompt - 1) / A) * A; a
 * boundary Q is retained when Q == R, or Q is a multiple of the retention interval, or
 * every boundary is when the interval is null):
 *   full attention / MLA  every block in [S, E)
 *   sliding window        the window's blocks before each retained boundary in (S, E]
 *   Mamba                 the snapshot at each retained boundary in (S, E] that a step ended
 *                         on (align mode) or any block end (mode 'all'); it is in the block
 *                         table slot of the Mamba block that ends there
 * A load of tokens [V, H) covers: full attention blocks [V, H); sliding window the window
 * before H; Mamba the snapshot at H.
 *
 * All of it runs under sched_lock except the lookup's store query.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "connector/connector.h"

#define CONNECTOR_BUCKETS 1024
#define PARTIAL_TAIL_MSG "Partial-tail offloads for one request must share a boundary"

typedef struct connector_req {
    struct connector_req *next;
    char id[CONNECTOR_REQ_ID_MAX + 1];
    int64_t prompt_tokens, computed, prev_computed, saved;
    uint8_t *hashes;
    size_t nhashes, hash_len, hcap;
    int32_t **blocks; /* per group */
    size_t *nblk, *capblk;
    int has_load, can_load;
    int64_t load_from, load_to;
    int stepped;      /* a step since the last metadata */
    int saves_issued; /* a save job was planned for it */
    /* A partial-tail offload waiting for the next metadata: the boundary and, per group,
     * the private block holding the boundary state (-1: none). */
    int64_t tail_boundary; /* 0: none */
    int32_t tail_block[CONNECTOR_MAX_GROUPS];
    int finishing; /* finished with a tail pending: planned once more, then dropped */
} connector_req;

void connector_sched_init(tide_connector *c) {
    c->buckets = calloc(CONNECTOR_BUCKETS, sizeof(connector_req *));
    c->nbuckets = c->buckets ? CONNECTOR_BUCKETS : 0;
}

static void req_free(const tide_connector *c, connector_req *r) {
    if (!r) return;
    if (r->blocks)
        for (size_t g = 0; g < c->cfg.ngroups; g++)
            free(r->blocks[g]);
    free(r->blocks);
    free(r->nblk);
    free(r->capblk);
    free(r->hashes);
    free(r);
}

static void sched_clear(tide_connector *c) {
    for (size_t b = 0; b < c->nbuckets; b++) {
        connector_req *r = c->buckets[b];
        while (r) {
            connector_req *n = r->next;
            req_free(c, r);
            r = n;
        }
        c->buckets[b] = NULL;
    }
    c->nreqs = 0;
    for (size_t i = 0; i < c->nfinished; i++)
        free(c->finished[i]);
    c->nfinished = 0;
}

void connector_sched_free(tide_connector *c) {
    sched_clear(c);
    free(c->buckets);
    free(c->finished);
    c->buckets = NULL;
    c->finished = NULL;
    c->cap_finished = 0;
}

static size_t bucket_of(const tide_connector *c, const char *id) {
    return (size_t)(XXH3_64bits(id, strlen(id)) % c->nbuckets);
}

static connector_req *req_find(tide_connector *c, const char *id) {
    if (!c->nbuckets) return NULL;
    for (connector_req *r = c->buckets[bucket_of(c, id)]; r; r = r->next)
        if (strcmp(r->id, id) == 0) return r;
    return NULL;
}

static connector_req *req_get(tide_connector *c, const char *id) {
    connector_req *r = req_find(c, id);
    if (r || !c->nbuckets) return r;
    size_t ng = c->cfg.ngroups;
    r = calloc(1, sizeof(*r));
    if (!r) return NULL;
    r->blocks = calloc(ng, sizeof(int32_t *));
    r->nblk = calloc(ng, sizeof(size_t));
    r->capblk = calloc(ng, sizeof(size_t));
    if (!r->blocks || !r->nblk || !r->capblk) {
        req_free(c, r);
        return NULL;
    }
    snprintf(r->id, sizeof(r->id), "%s", id);
    size_t b = bucket_of(c, id);
    r->next = c->buckets[b];
    c->buckets[b] = r;
    c->nreqs++;
    return r;
}

static void req_remove(tide_connector *c, connector_req *r) {
    connector_req **pp = &c->buckets[bucket_of(c, r->id)];
    while (*pp && *pp != r)
        pp = &(*pp)->next;
    if (*pp) *pp = r->next;
    c->nreqs--;
    req_free(c, r);
}

/* Append (or, with replace, set) a group's block ids. */
static int blocks_add(connector_req *r, size_t g, const int32_t *ids, size_t n, int replace) {
    if (replace) r->nblk[g] = 0;
    if (r->nblk[g] + n > r->capblk[g]) {
        size_t cap = r->capblk[g] ? r->capblk[g] : 16;
        while (cap < r->nblk[g] + n)
            cap *= 2;
        int32_t *p = realloc(r->blocks[g], cap * sizeof(int32_t));
        if (!p) return -ENOMEM;
        r->blocks[g] = p;
        r->capblk[g] = cap;
    }
    if (n) memcpy(r->blocks[g] + r->nblk[g], ids, n * sizeof(int32_t));
    r->nblk[g] += n;
    return 0;
}

static int set_tables(tide_connector *c, connector_req *r, const char *fn, const int32_t *ids,
                      const size_t *counts, size_t ngroups, int replace) {
    if (ngroups != c->cfg.ngroups)
        return connector_err(c, -EINVAL, "%s: %zu groups of block ids, the configuration has %zu",
                             fn, ngroups, c->cfg.ngroups);
    if (!counts) return connector_err(c, -EINVAL, "%s: counts is NULL", fn);
    size_t off = 0;
    for (size_t g = 0; g < ngroups; g++) {
        if (counts[g] && !ids) return connector_err(c, -EINVAL, "%s: block_ids is NULL", fn);
        if (blocks_add(r, g, ids ? ids + off : NULL, counts[g], replace) < 0)
            return connector_err(c, -ENOMEM, "%s: out of memory", fn);
        off += counts[g];
    }
    return 0;
}

static int set_hashes(tide_connector *c, connector_req *r, const uint8_t *h, size_t n, size_t len) {
    size_t bytes = n * len;
    if (bytes > r->hcap) {
        uint8_t *p = realloc(r->hashes, bytes);
        if (!p) return connector_err(c, -ENOMEM, "out of memory for %zu block hashes", n);
        r->hashes = p;
        r->hcap = bytes;
    }
    if (bytes) memcpy(r->hashes, h, bytes);
    r->nhashes = n;
    r->hash_len = len;
    return 0;
}

TIDE_API int tide_connector_lookup(tide_connector *c, const char *req_id, int64_t num_tokens,
                                   const uint8_t *hashes, size_t nhashes, size_t hash_len,
                                   int64_t num_computed, int64_t *num_new) {
    static const char fn[] = "tide_connector_lookup";
    if (!c) return err_set(NULL, NULL, -EINVAL, "%s: connector is NULL", fn);
    int rc = connector_check_id(c, fn, req_id);
    if (!rc) rc = connector_check_hashes(c, fn, hashes, nhashes, hash_len);
    if (rc) return rc;
    if (!num_new) return connector_err(c, -EINVAL, "%s: num_new is NULL", fn);
    *num_new = 0;
    int64_t hit = 0;
    rc = connector_hit_tokens(c, num_tokens, hashes, nhashes, hash_len, &hit);
    if (rc) return rc;
    pthread_mutex_lock(&c->sched_lock);
    connector_req *r = req_get(c, req_id);
    if (!r) {
        pthread_mutex_unlock(&c->sched_lock);
        return connector_err(c, -ENOMEM, "%s: out of memory", fn);
    }
    r->has_load = hit > num_computed;
    r->can_load = 0;
    r->load_from = num_computed;
    r->load_to = hit;
    pthread_mutex_unlock(&c->sched_lock);
    *num_new = hit > num_computed ? hit - num_computed : 0;
    return 0;
}

TIDE_API int tide_connector_update_after_alloc(tide_connector *c, const char *req_id,
                                               const int32_t *block_ids, const size_t *counts,
                                               size_t ngroups, int64_t num_external_tokens) {
    static const char fn[] = "tide_connector_update_after_alloc";
    if (!c) return err_set(NULL, NULL, -EINVAL, "%s: connector is NULL", fn);
    int rc = connector_check_id(c, fn, req_id);
    if (rc) return rc;
    pthread_mutex_lock(&c->sched_lock);
    connector_req *r = req_get(c, req_id);
    if (!r) {
        rc = connector_err(c, -ENOMEM, "%s: out of memory", fn);
        goto out;
    }
    if ((rc = set_tables(c, r, fn, block_ids, counts, ngroups, 1))) goto out;
    if (!r->has_load) goto out;
    if (num_external_tokens == 0) {
        r->can_load = 0;
    } else if (num_external_tokens != r->load_to - r->load_from) {
        rc = connector_err(c, -EINVAL,
                           "%s: request '%s': %" PRId64
                           " external tokens granted, the lookup offered "
                           "%" PRId64,
                           fn, req_id, num_external_tokens, r->load_to - r->load_from);
        r->has_load = r->can_load = 0;
    } else {
        r->can_load = 1;
    }
out:
    pthread_mutex_unlock(&c->sched_lock);
    return rc;
}

TIDE_API int tide_connector_request_step(tide_connector *c, const char *req_id,
                                         int64_t prompt_tokens, int64_t computed_tokens,
                                         const uint8_t *hashes, size_t nhashes, size_t hash_len,
                                         const int32_t *new_block_ids, const size_t *counts,
                                         size_t ngroups, int is_new) {
    static const char fn[] = "tide_connector_request_step";
    if (!c) return err_set(NULL, NULL, -EINVAL, "%s: connector is NULL", fn);
    int rc = connector_check_id(c, fn, req_id);
    if (!rc) rc = connector_check_hashes(c, fn, hashes, nhashes, hash_len);
    if (rc) return rc;
    if (computed_tokens < 0 || prompt_tokens < 0)
        return connector_err(c, -EINVAL, "%s: negative token count", fn);
    pthread_mutex_lock(&c->sched_lock);
    connector_req *r = req_get(c, req_id);
    if (!r) {
        rc = connector_err(c, -ENOMEM, "%s: out of memory", fn);
        goto out;
    }
    if (!is_new && computed_tokens < r->computed) {
        rc = connector_err(
            c, -EINVAL, "%s: request '%s': computed tokens went back from %" PRId64 " to %" PRId64,
            fn, req_id, r->computed, computed_tokens);
        goto out;
    }
    if ((rc = set_tables(c, r, fn, new_block_ids, counts, ngroups, is_new))) goto out;
    if ((rc = set_hashes(c, r, hashes, nhashes, hash_len))) goto out;
    if (is_new) r->saved = r->prev_computed = 0;
    r->prompt_tokens = prompt_tokens;
    r->computed = computed_tokens;
    r->stepped = 1;
out:
    pthread_mutex_unlock(&c->sched_lock);
    return rc;
}

TIDE_API int tide_connector_request_partial_tail(tide_connector *c, const char *req_id,
                                                 const int32_t *groups, const int32_t *block_ids,
                                                 const int64_t *boundaries, size_t n) {
    static const char fn[] = "tide_connector_request_partial_tail";
    if (!c) return err_set(NULL, NULL, -EINVAL, "%s: connector is NULL", fn);
    int rc = connector_check_id(c, fn, req_id);
    if (rc) return rc;
    if (n && (!groups || !block_ids || !boundaries))
        return connector_err(c, -EINVAL, "%s: NULL array with %zu entries", fn, n);
    for (size_t i = 0; i < n; i++)
        if (groups[i] < 0 || (size_t)groups[i] >= c->cfg.ngroups)
            return connector_err(c, -EINVAL, "%s: entry %zu: group %" PRId32 " of %zu", fn, i,
                                 groups[i], c->cfg.ngroups);
    /* vLLM's rule, its words: every entry of one request names the same boundary. */
    for (size_t i = 1; i < n; i++)
        if (boundaries[i] != boundaries[0])
            return connector_err(c, TIDE_EPARTIALTAIL, PARTIAL_TAIL_MSG);
    if (!n || !c->saves || !c->cfg.partial_hits) return 0;
    int64_t q = boundaries[0];
    int accepted = 0;
    pthread_mutex_lock(&c->sched_lock);
    connector_req *r = req_find(c, req_id);
    /* A request that is unknown, finished or preempted has no tail to save (dropped, as
     * the reference drops it); so is a boundary past its prompt. */
    if (!r || r->finishing || q <= 0 || q > r->prompt_tokens) goto out;
    if (r->tail_boundary > 0 && r->tail_boundary != q) {
        rc = connector_err(c, TIDE_EPARTIALTAIL, PARTIAL_TAIL_MSG);
        goto out;
    }
    int32_t blk[CONNECTOR_MAX_GROUPS];
    for (size_t g = 0; g < c->cfg.ngroups; g++)
        blk[g] = r->tail_boundary > 0 ? r->tail_block[g] : -1;
    for (size_t i = 0; i < n; i++) {
        /* Only Mamba groups have a boundary state; a null block backs nothing. */
        if (c->cfg.groups[groups[i]].kind != CONNECTOR_SPEC_MAMBA || block_ids[i] < 0) continue;
        blk[groups[i]] = block_ids[i];
        accepted++;
    }
    if (!accepted) goto out;
    memcpy(r->tail_block, blk, sizeof(blk));
    r->tail_boundary = q;
    r->stepped = 1;
out:
    pthread_mutex_unlock(&c->sched_lock);
    return rc ? rc : accepted;
}

TIDE_API int tide_connector_request_preempted(tide_connector *c, const char *req_id) {
    static const char fn[] = "tide_connector_request_preempted";
    if (!c) return err_set(NULL, NULL, -EINVAL, "%s: connector is NULL", fn);
    int rc = connector_check_id(c, fn, req_id);
    if (rc) return rc;
    pthread_mutex_lock(&c->sched_lock);
    connector_req *r = req_find(c, req_id);
    if (r) {
        for (size_t g = 0; g < c->cfg.ngroups; g++)
            r->nblk[g] = 0;
        r->has_load = r->can_load = r->stepped = 0;
        r->saved = r->computed = r->prev_computed = 0;
        r->tail_boundary = 0; /* its blocks are going away */
    }
    pthread_mutex_unlock(&c->sched_lock);
    return 0;
}

TIDE_API int tide_connector_request_finished(tide_connector *c, const char *req_id) {
    static const char fn[] = "tide_connector_request_finished";
    if (!c) return err_set(NULL, NULL, -EINVAL, "%s: connector is NULL", fn);
    int rc = connector_check_id(c, fn, req_id);
    if (rc) return rc;
    pthread_mutex_lock(&c->sched_lock);
    connector_req *r = req_find(c, req_id);
    /* A partial tail registered at finish time is still saved (vLLM's
     * register_finished_partial_tail): the request is planned once more, then dropped. */
    int tail = r && r->tail_boundary > 0 && c->saves && !r->finishing;
    int delayed = r && (r->saves_issued || tail);
    if (delayed) {
        if (c->nfinished == c->cap_finished) {
            size_t cap = c->cap_finished ? c->cap_finished * 2 : 16;
            char **p = realloc(c->finished, cap * sizeof(char *));
            if (!p) {
                pthread_mutex_unlock(&c->sched_lock);
                return connector_err(c, -ENOMEM, "%s: out of memory", fn);
            }
            c->finished = p;
            c->cap_finished = cap;
        }
        char *id = strdup(req_id);
        if (!id) {
            pthread_mutex_unlock(&c->sched_lock);
            return connector_err(c, -ENOMEM, "%s: out of memory", fn);
        }
        c->finished[c->nfinished++] = id;
    }
    if (tail) {
        r->finishing = r->stepped = 1;
    } else if (r) {
        req_remove(c, r);
    }
    pthread_mutex_unlock(&c->sched_lock);
    return delayed;
}

/* Add block i of group g (covering up to `end` tokens) when the table has it. */
static int plan_block(connector_mjob *j, const connector_req *r, size_t g, int64_t i, int64_t end,
                      int64_t hash_block) {
    if (i < 0 || (size_t)i >= r->nblk[g] || r->blocks[g][i] < 0) return 0;
    size_t h = (size_t)(end / hash_block - 1);
    if (h >= r->nhashes) return 0;
    return connector_step_add_block(j, (int)g, r->blocks[g][i], end, r->hashes + h * r->hash_len);
}

static int plan_load(const tide_connector *c, const connector_req *r, connector_mjob *j) {
    const ccfg *cfg = &c->cfg;
    int64_t v = r->load_from, h = r->load_to, hb = cfg->hash_block_size;
    int rc = 0;
    for (size_t g = 0; g < cfg->ngroups && !rc; g++) {
        const connector_group *gr = &cfg->groups[g];
        int64_t b = gr->eff_block_size;
        /* A hit inside a block (partial hits) ends in the block that holds it: the state
         * at h in align mode, or the attention block's first h % b tokens. */
        int64_t last = (h + b - 1) / b;
        if (gr->kind == CONNECTOR_SPEC_MAMBA) {
            rc = plan_block(j, r, g, last - 1, h, hb);
            continue;
        }
        int64_t first = v / b;
        if (gr->kind == CONNECTOR_SPEC_SLIDING && last - connector_window_blocks(gr) > first)
            first = last - connector_window_blocks(gr);
        for (int64_t i = first; i < last && !rc; i++)
            rc = plan_block(j, r, g, i, (i + 1) * b < h ? (i + 1) * b : h, hb);
    }
    return rc;
}

/* Is boundary q one the retention rule keeps (Mamba snapshots, sliding windows)? */
static int retained(const ccfg *cfg, const connector_req *r, int64_t q) {
    int64_t a = cfg->scheduler_block_size;
    if (q <= 0 || q % a) return 0;
    if (cfg->retention_interval < 0) return 1; /* null: every boundary */
    int64_t replay = r->prompt_tokens > 0 ? (r->prompt_tokens - 1) / a * a : 0;
    if (q == replay) return 1;
    return cfg->retention_interval > 0 && q % cfg->retention_interval == 0;
}

static int plan_save(const tide_connector *c, const connector_req *r, connector_mjob *j, int64_t s,
                     int64_t e) {
    const ccfg *cfg = &c->cfg;
    int64_t a = cfg->scheduler_block_size, hb = cfg->hash_block_size;
    int rc = 0;
    for (size_t g = 0; g < cfg->ngroups && !rc; g++) {
        const connector_group *gr = &cfg->groups[g];
        int64_t b = gr->eff_block_size;
        if (gr->kind == CONNECTOR_SPEC_MAMBA) {
            /* Snapshots exist at step ends (align) or at every block end (all). */
            int64_t lo = s > r->prev_computed ? s : r->prev_computed;
            for (int64_t q = (lo / a + 1) * a; q <= e && !rc; q += a) {
                if (gr->mamba_mode != CONNECTOR_MAMBA_ALL && q != r->computed) continue;
                if (retained(cfg, r, q)) rc = plan_block(j, r, g, q / b - 1, q, hb);
            }
            continue;
        }
        if (gr->kind == CONNECTOR_SPEC_SLIDING) {
            int64_t need = connector_window_blocks(gr), next = 0;
            for (int64_t q = (s / a + 1) * a; q <= e && !rc; q += a) {
                if (!retained(cfg, r, q)) continue;
                int64_t first = q / b - need;
                if (first < next) first = next;
                for (int64_t i = first; i < q / b && !rc; i++)
                    rc = plan_block(j, r, g, i, (i + 1) * b, hb);
                next = q / b;
            }
            continue;
        }
        for (int64_t i = s / b; i < e / b && !rc; i++)
            rc = plan_block(j, r, g, i, (i + 1) * b, hb);
    }
    return rc;
}

/* Is (group, end) in the job already? */
static int job_has(const connector_mjob *j, size_t g, int64_t end) {
    for (size_t i = 0; i < j->nblocks; i++)
        if (j->blocks[i].group == (int)g && j->blocks[i].end_token == end) return 1;
    return 0;
}

/*
 * The partial-tail offload at boundary Q (vLLM's worker _maybe_offload_partial_tail): for
 * each attention group, its blocks from where saves stopped to the one holding Q, the last
 * keyed by Q's sub-hash (the save floors to the scheduler block, so a smaller block in the
 * gap is stored nowhere else); for each Mamba group named, the boundary state from its
 * private block, keyed by Q's sub-hash.
 */
static int plan_tail(const tide_connector *c, const connector_req *r, connector_mjob *j) {
    const ccfg *cfg = &c->cfg;
    int64_t q = r->tail_boundary, hb = cfg->hash_block_size;
    if (q <= 0 || q % hb || (size_t)(q / hb) > r->nhashes) return 0;
    const uint8_t *qh = r->hashes + (size_t)(q / hb - 1) * r->hash_len;
    int rc = 0;
    for (size_t g = 0; g < cfg->ngroups && !rc; g++) {
        const connector_group *gr = &cfg->groups[g];
        int64_t b = gr->eff_block_size, last = (q + b - 1) / b - 1;
        if (gr->kind == CONNECTOR_SPEC_MAMBA) {
            if (r->tail_block[g] >= 0 && !job_has(j, g, q))
                rc = connector_step_add_block(j, (int)g, r->tail_block[g], q, qh);
            continue;
        }
        if (gr->kind == CONNECTOR_SPEC_SLIDING) continue; /* no partial hits with one */
        int64_t first = r->saved / b < last ? r->saved / b : last;
        for (int64_t i = first; i <= last && !rc; i++) {
            int64_t end = (i + 1) * b < q ? (i + 1) * b : q;
            if (!job_has(j, g, end)) rc = plan_block(j, r, g, i, end, hb);
        }
    }
    return rc;
}

/* The step's job for one request (none, a load, or a save). */
static int plan_request(tide_connector *c, connector_req *r, tide_connector_meta *m) {
    const ccfg *cfg = &c->cfg;
    int64_t a = cfg->scheduler_block_size;
    int rc = 0;
    if (r->has_load && r->can_load && !r->finishing) {
        connector_mjob *j = connector_step_add_job(m, TIDE_CONNECTOR_LOAD, r->id, r->load_from,
                                                   r->load_to, r->hash_len);
        if (!j) return -ENOMEM;
        rc = plan_load(c, r, j);
        /* What was loaded is in the store already: saves resume after it. */
        if (r->saved < r->load_to) r->saved = r->load_to;
        if (r->prev_computed < r->load_to) r->prev_computed = r->load_to;
    } else if (c->saves && r->hash_len) {
        int64_t covered = (int64_t)r->nhashes * cfg->hash_block_size;
        int64_t e = r->computed < covered ? r->computed : covered;
        /* Decode-produced KV is saved only with save_decode_cache (as the reference):
         * otherwise a save stops at the prompt. */
        if (!cfg->extra.save_decode_cache && e > r->prompt_tokens) e = r->prompt_tokens;
        e = e / a * a;
        if (e > r->saved) {
            connector_mjob *j =
                connector_step_add_job(m, TIDE_CONNECTOR_SAVE, r->id, r->saved, e, r->hash_len);
            if (!j) return -ENOMEM;
            rc = plan_save(c, r, j, r->saved, e);
            if (j->nblocks == 0) { /* nothing to store in this range */
                free(j->req_id);
                free(j->blocks);
                m->njobs--;
            } else {
                r->saves_issued = 1;
            }
            r->saved = e;
        }
        if (!rc && r->tail_boundary > 0) {
            /* The partial tail rides this step's save, or a save job of its own. */
            connector_mjob *j = m->njobs ? &m->jobs[m->njobs - 1] : NULL;
            if (!j || j->kind != TIDE_CONNECTOR_SAVE || strcmp(j->req_id, r->id) != 0) {
                int64_t from = r->saved < r->tail_boundary ? r->saved : r->tail_boundary;
                j = connector_step_add_job(m, TIDE_CONNECTOR_SAVE, r->id, from, r->tail_boundary,
                                           r->hash_len);
                if (!j) return -ENOMEM;
            }
            rc = plan_tail(c, r, j);
            if (j->end < r->tail_boundary) j->end = r->tail_boundary;
            if (j->nblocks == 0) {
                free(j->req_id);
                free(j->blocks);
                m->njobs--;
            } else {
                r->saves_issued = 1;
            }
            r->tail_boundary = 0;
        }
    }
    r->has_load = r->can_load = 0;
    r->prev_computed = r->computed;
    return rc;
}

TIDE_API int tide_connector_build_meta(tide_connector *c, tide_connector_meta **out) {
    static const char fn[] = "tide_connector_build_meta";
    if (!c || !out) return err_set(c, c ? &c->err : NULL, -EINVAL, "%s: NULL argument", fn);
    *out = NULL;
    tide_connector_meta *m = calloc(1, sizeof(*m));
    if (!m) return connector_err(c, -ENOMEM, "%s: out of memory", fn);
    int rc = 0;
    pthread_mutex_lock(&c->sched_lock);
    for (size_t b = 0; b < c->nbuckets && !rc; b++)
        for (connector_req *r = c->buckets[b], *next; r && !rc; r = next) {
            next = r->next;
            if (r->stepped) {
                r->stepped = 0;
                rc = plan_request(c, r, m);
            }
            if (r->finishing) req_remove(c, r);
        }
    if (!rc) {
        /* The finished list moves into the metadata. */
        m->finished = c->finished;
        m->nfinished = c->nfinished;
        c->finished = NULL;
        c->nfinished = c->cap_finished = 0;
    }
    pthread_mutex_unlock(&c->sched_lock);
    if (rc) {
        tide_connector_meta_free(m);
        return connector_err(c, rc, "%s: out of memory", fn);
    }
    *out = m;
    return 0;
}

TIDE_API int tide_connector_reset(tide_connector *c, int clear_store) {
    if (!c) return err_set(NULL, NULL, -EINVAL, "tide_connector_reset: connector is NULL");
    if (c->role == TIDE_CONNECTOR_WORKER) {
        int rc = connector_worker_reset(c);
        if (rc) return rc;
    }
    pthread_mutex_lock(&c->sched_lock);
    sched_clear(c);
    pthread_mutex_unlock(&c->sched_lock);
    if (clear_store) {
        int rc = tide_clear(c->store);
        if (rc < 0)
            return connector_err(c, rc, "tide_connector_reset: clearing the store failed: %s",
                                 tide_errmsg(c->store));
    }
    return 0;
}
