/*
 * worker.c — the worker side: paged regions, the background job threads, completions and
 * load errors.
 *
 * Threads: CONNECTOR_THREADS threads take jobs from one FIFO queue. A job is one request's load
 * or save from one step's metadata and costs at most two store round trips: a save asks
 * which of its objects exist (one batched query) and puts the missing ones (one batched
 * scatter-list put); a load gets every object in one batched scatter-list get straight into
 * the block pages.
 *
 * State under wlock: the queue, the per-request view (jobs pending, finished mark), the
 * reports, the load errors, the pressure mark. Store calls run without it.
 *
 * Save striping: TP ranks that hold byte-identical blocks of a group (its replication
 * factor f > 1) share keys; of a job's objects of that group, rank r puts those whose index
 * i satisfies i % f == r % f, so the f ranks split the puts between them.
 *
 * Pressure: a put that finds no space (TIDE_ENOSPACE) marks its request; while pressure is
 * on, the marked requests' later saves are skipped; the first save that stores objects
 * again clears the pressure and every mark.
 *
 * Reports cannot be lost. A request waits for its completion (get_finished) and trusts
 * every block not listed by get_load_errors, so neither may ever be dropped for want of
 * memory. Everything a report needs is allocated when its work is accepted
 * (start_jobs, which refuses the whole step with -ENOMEM otherwise): a load job carries its
 * completion node and room for a load error per block, a request record carries the node
 * of its SAVE completion. Finishing a job only links those nodes onto the lists.
 *
 * A load succeeds for an object only when the store returned exactly the object's size on
 * this rank; anything else (missing, evicted, failed checksum, wrong size, a failed device
 * copy) makes that block a load error — the pages may hold partial bytes, and the engine
 * must recompute it.
 *
 * Device regions (devmem.c): the same jobs, with the store calls going through the job
 * thread's device queue; a step's save jobs share the forward-pass event recorded when
 * they were queued, and their copies wait for it on the device.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "common/fault.h"
#include "common/util.h"
#include "connector/connector.h"

#define WBUCKETS 1024
#define REGION_MAX_SEGMENTS 4096
#define REGION_MAX_DIMS 16

/* A report ready to be handed out by get_finished. */
typedef struct connector_done {
    struct connector_done *next;
    char id[];
} connector_done;

/* The load errors of one load job: room for one per block, `n` used, `off` handed out. */
typedef struct connector_errs {
    struct connector_errs *next;
    size_t n, off;
    int32_t ids[];
} connector_errs;

typedef struct connector_job {
    struct connector_job *next;
    connector_mjob j;     /* owned copy */
    connector_done *done; /* LOAD: its completion, made with the job */
    connector_errs *errs; /* LOAD: its load errors, room made with the job */
    connector_event *ev;  /* device regions: the engine's stream when the step started (a
                           * reference): a save's copies read, and a load's copies write,
                           * only after what the engine had queued there */
} connector_job;

typedef struct connector_wreq {
    struct connector_wreq *next;
    char id[CONNECTOR_REQ_ID_MAX + 1];
    size_t pending_loads, pending_saves;
    int finished;         /* the scheduler keeps it alive for its saves */
    int pressure_skip;    /* a save of it ran out of space */
    connector_done *done; /* its SAVE completion, made with the record; NULL once reported */
} connector_wreq;

static connector_done *done_new(const char *id) {
    size_t n = strlen(id) + 1;
    connector_done *d = fault_malloc(sizeof(*d) + n);
    if (!d) return NULL;
    d->next = NULL;
    memcpy(d->id, id, n);
    return d;
}

static void job_free(connector_job *job) {
    free(job->j.req_id);
    free(job->j.blocks);
    free(job->done);
    free(job->errs);
    free(job);
}

/* ---- per-request view (caller holds wlock) ---------------------------------------------- */

static size_t wbucket(const char *id) {
    return (size_t)(XXH3_64bits(id, strlen(id)) % WBUCKETS);
}

static connector_wreq *do_wreq_find(tide_connector *c, const char *id) {
    for (connector_wreq *w = c->wbuckets[wbucket(id)]; w; w = w->next)
        if (strcmp(w->id, id) == 0) return w;
    return NULL;
}

static connector_wreq *do_wreq_get(tide_connector *c, const char *id) {
    connector_wreq *w = do_wreq_find(c, id);
    if (w) return w;
    w = fault_calloc(1, sizeof(*w));
    if (!w) return NULL;
    if (!(w->done = done_new(id))) {
        free(w);
        return NULL;
    }
    snprintf(w->id, sizeof(w->id), "%s", id);
    size_t b = wbucket(id);
    w->next = c->wbuckets[b];
    c->wbuckets[b] = w;
    c->nwreqs++;
    return w;
}

static void do_wreq_remove(tide_connector *c, connector_wreq *w) {
    connector_wreq **pp = &c->wbuckets[wbucket(w->id)];
    while (*pp && *pp != w)
        pp = &(*pp)->next;
    if (*pp) *pp = w->next;
    c->nwreqs--;
    free(w->done);
    free(w);
}

/* Hand a completion made in advance to get_finished(kind). Cannot fail. */
static void do_report(tide_connector *c, int kind, connector_done *d) {
    d->next = NULL;
    if (c->done_tail[kind])
        c->done_tail[kind]->next = d;
    else
        c->done_head[kind] = d;
    c->done_tail[kind] = d;
}

/* A request with nothing pending: report it saved when it finished, then forget it. */
static void do_wreq_settle(tide_connector *c, connector_wreq *w) {
    if (w->pending_loads || w->pending_saves) return;
    if (w->finished && w->done) {
        do_report(c, TIDE_CONNECTOR_SAVE, w->done);
        w->done = NULL;
    }
    if (w->finished || !w->pressure_skip) do_wreq_remove(c, w);
}

/* ---- regions ---------------------------------------------------------------------------- */

static int add_region(tide_connector *c, const char *fn, int group, int kind, int device,
                      void *base, uint64_t nbytes, int64_t num_blocks, size_t ndim,
                      const int64_t *shape, const int64_t *strides, size_t elem_size) {
    if (!c) return err_set(NULL, NULL, -EINVAL, "%s: connector is NULL", fn);
    if (c->role != TIDE_CONNECTOR_WORKER)
        return connector_err(c, -EINVAL, "%s: not a worker connector", fn);
    if (group < 0 || (size_t)group >= c->cfg.ngroups)
        return connector_err(c, -EINVAL, "%s: group %d does not exist (the configuration has %zu)",
                             fn, group, c->cfg.ngroups);
    if (!base || nbytes == 0 || num_blocks <= 0)
        return connector_err(c, -EINVAL, "%s: group %d: base, nbytes and num_blocks must be set",
                             fn, group);
    if (nbytes % (uint64_t)num_blocks)
        return connector_err(c, -EINVAL,
                             "%s: group %d: %" PRIu64 " bytes do not split into %" PRId64 " pages",
                             fn, group, nbytes, num_blocks);
    uint64_t page = nbytes / (uint64_t)num_blocks;
    size_t nseg = 1, outer = 0;
    uint64_t block_stride = page;
    int64_t idx[REGION_MAX_DIMS] = {0};
    if (ndim > 0) {
        if (ndim > REGION_MAX_DIMS || !shape || !strides || elem_size == 0)
            return connector_err(c, -EINVAL,
                                 "%s: group %d: shape and strides need 1..%d dimensions and an "
                                 "element size",
                                 fn, group, REGION_MAX_DIMS);
        for (size_t d = 0; d < ndim; d++)
            if (shape[d] <= 0 || strides[d] < 0)
                return connector_err(c, -EINVAL,
                                     "%s: group %d: dimension %zu: size %" PRId64
                                     ", stride %" PRId64 " (need size > 0, stride >= 0)",
                                     fn, group, d, shape[d], strides[d]);
        /* Outer dimensions: their stride spans more than a page. */
        while (outer < ndim && (uint64_t)strides[outer] * elem_size > page) {
            if (nseg * (uint64_t)shape[outer] > REGION_MAX_SEGMENTS)
                return connector_err(c, -EINVAL, "%s: group %d: more than %d segments", fn, group,
                                     REGION_MAX_SEGMENTS);
            nseg *= (size_t)shape[outer];
            outer++;
        }
        if (outer == ndim || shape[outer] != num_blocks)
            return connector_err(
                c, -EINVAL,
                "%s: group %d: after %zu outer dimensions the block dimension should "
                "have %" PRId64 " entries",
                fn, group, outer, num_blocks);
        if (page % nseg)
            return connector_err(c, -EINVAL,
                                 "%s: group %d: a page of %" PRIu64
                                 " bytes does not split into %zu segments",
                                 fn, group, page, nseg);
        block_stride = (uint64_t)strides[outer] * elem_size;
        if (block_stride < page / nseg)
            return connector_err(c, -EINVAL,
                                 "%s: group %d: block stride %" PRIu64
                                 " is shorter than a segment's "
                                 "block (%" PRIu64 " bytes)",
                                 fn, group, block_stride, page / nseg);
    }
    connector_region r = {.group = group,
                          .nseg = nseg,
                          .seg_len = page / nseg,
                          .block_stride = block_stride,
                          .num_blocks = num_blocks};
    r.seg_base = fault_calloc(nseg, sizeof(uint8_t *));
    if (!r.seg_base) return connector_err(c, -ENOMEM, "%s: out of memory", fn);
    uint8_t *lo = base, *hi = (uint8_t *)base + nbytes;
    for (size_t s = 0; s < nseg; s++) {
        uint64_t off = 0;
        for (size_t d = 0; d < outer; d++)
            off += (uint64_t)idx[d] * (uint64_t)strides[d] * elem_size;
        r.seg_base[s] = lo + off;
        uint8_t *end = r.seg_base[s] + (uint64_t)(num_blocks - 1) * block_stride + r.seg_len;
        if (off >= nbytes || end > hi || end < r.seg_base[s]) {
            free(r.seg_base);
            return connector_err(c, -EINVAL,
                                 "%s: group %d: segment %zu reaches past the %" PRIu64
                                 " bytes of the tensor",
                                 fn, group, s, nbytes);
        }
        /* Next multi-index over the outer dimensions, last one fastest. */
        for (size_t d = outer; d-- > 0;) {
            if (++idx[d] < shape[d]) break;
            idx[d] = 0;
        }
    }
    int mrc = connector_mem_claim(c, fn, kind, device, base, nbytes);
    if (mrc) {
        free(r.seg_base);
        return mrc;
    }
    /* Over UCX: the tensor declared once (GPU memory as CUDA memory), so that each UCX
     * context registers it once and every load and save reuses that registration. A range
     * that overlaps one declared already (the same tensor seen twice) stays undeclared: UCX
     * registers its transfers itself. */
    if (connector_mem_declare(c, kind, base, nbytes)) {
        r.ucx_base = base;
        r.ucx_len = nbytes;
    }
    pthread_mutex_lock(&c->wlock);
    connector_region *p =
        c->nregions < CONNECTOR_MAX_REGIONS
            ? fault_realloc(c->regions, (c->nregions + 1) * sizeof(connector_region))
            : NULL;
    if (!p) {
        pthread_mutex_unlock(&c->wlock);
        if (r.ucx_base) tide_buffer_unregister(r.ucx_base, r.ucx_len);
        free(r.seg_base);
        return connector_err(c, c->nregions < CONNECTOR_MAX_REGIONS ? -ENOMEM : -EINVAL,
                             "%s: cannot add region %zu (at most %d)", fn, c->nregions,
                             CONNECTOR_MAX_REGIONS);
    }
    c->regions = p;
    c->regions[c->nregions++] = r;
    if (r.ucx_base) {
        pthread_mutex_lock(&c->ucx_lock);
        c->ucx_regions++;
        pthread_mutex_unlock(&c->ucx_lock);
    }
    c->obj_bytes[group] += nseg * r.seg_len;
    c->obj_iovs[group] += nseg;
    if (c->min_blocks[group] == 0 || num_blocks < c->min_blocks[group])
        c->min_blocks[group] = num_blocks;
    pthread_mutex_unlock(&c->wlock);
    return 0;
}

TIDE_API int tide_connector_register_region(tide_connector *c, int group, void *base,
                                            uint64_t nbytes, int64_t num_blocks, size_t ndim,
                                            const int64_t *shape, const int64_t *strides,
                                            size_t elem_size) {
    return add_region(c, "tide_connector_register_region", group, TIDE_MEM_HOST, 0, base, nbytes,
                      num_blocks, ndim, shape, strides, elem_size);
}

TIDE_API int tide_connector_register_device_region(tide_connector *c, int group, int kind,
                                                   int device, void *base, uint64_t nbytes,
                                                   int64_t num_blocks, size_t ndim,
                                                   const int64_t *shape, const int64_t *strides,
                                                   size_t elem_size) {
    return add_region(c, "tide_connector_register_device_region", group, kind, device, base, nbytes,
                      num_blocks, ndim, shape, strides, elem_size);
}

/* The scatter list of block `id` of group g into iov; returns the entries written. */
static size_t block_iovs(const tide_connector *c, int g, int32_t id, tide_iov *iov) {
    size_t n = 0;
    for (size_t i = 0; i < c->nregions; i++) {
        const connector_region *r = &c->regions[i];
        if (r->group != g) continue;
        for (size_t s = 0; s < r->nseg; s++) {
            iov[n].base = r->seg_base[s] + (uint64_t)id * r->block_stride;
            iov[n].len = r->seg_len;
            n++;
        }
    }
    return n;
}

static int block_ok(const tide_connector *c, const connector_mblock *b) {
    return b->group >= 0 && (size_t)b->group < c->cfg.ngroups && b->block_id >= 0 &&
           c->obj_bytes[b->group] > 0 && b->block_id < c->min_blocks[b->group];
}

/* ---- jobs ------------------------------------------------------------------------------- */

/* Keys, scatter lists and result arrays for up to n objects of one job. */
typedef struct batch {
    tide_key *keys;
    char *text;
    tide_iov *iov;
    size_t *iovcnt;
    int *results;
    size_t *vlens;
    uint8_t *present;
    size_t *which; /* index of the block in the job */
    size_t n;
} batch;

static void batch_free(batch *b) {
    free(b->keys);
    free(b->text);
    free(b->iov);
    free(b->iovcnt);
    free(b->results);
    free(b->vlens);
    free(b->present);
    free(b->which);
}

static int batch_alloc(const tide_connector *c, const connector_mjob *j, batch *b) {
    memset(b, 0, sizeof(*b));
    size_t n = j->nblocks ? j->nblocks : 1, niov = 0;
    for (size_t k = 0; k < j->nblocks; k++)
        if (block_ok(c, &j->blocks[k])) niov += c->obj_iovs[j->blocks[k].group];
    b->keys = fault_calloc(n, sizeof(tide_key));
    b->text = fault_malloc(n * (TIDE_KEY_MAX + 1));
    b->iov = fault_calloc(niov ? niov : 1, sizeof(tide_iov));
    b->iovcnt = fault_calloc(n, sizeof(size_t));
    b->results = fault_calloc(n, sizeof(int));
    b->vlens = fault_calloc(n, sizeof(size_t));
    b->present = fault_calloc(n, 1);
    b->which = fault_calloc(n, sizeof(size_t));
    if (!b->keys || !b->text || !b->iov || !b->iovcnt || !b->results || !b->vlens || !b->present ||
        !b->which) {
        batch_free(b);
        return -ENOMEM;
    }
    return 0;
}

/* Add block k of the job: its key and scatter list. */
static int batch_add(const tide_connector *c, const connector_mjob *j, size_t k, batch *b,
                     size_t *iov_used) {
    const connector_mblock *blk = &j->blocks[k];
    char *kt = b->text + b->n * (TIDE_KEY_MAX + 1);
    int len = connector_own_key(c, blk->group, blk->hash, j->hash_len, kt);
    if (len < 0) return len;
    b->keys[b->n].data = kt;
    b->keys[b->n].len = (size_t)len;
    b->iovcnt[b->n] = block_iovs(c, blk->group, blk->block_id, b->iov + *iov_used);
    *iov_used += b->iovcnt[b->n];
    b->which[b->n] = k;
    b->n++;
    return 0;
}

/* Block k of a load job failed: note it in the job's own room (one per block). */
static void load_failed(connector_job *job, size_t k) {
    if (job->j.blocks[k].block_id >= 0) job->errs->ids[job->errs->n++] = job->j.blocks[k].block_id;
}

static void run_load(tide_connector *c, size_t t, connector_job *job) {
    const connector_mjob *j = &job->j;
    batch b;
    size_t iov_used = 0, ok = 0;
    uint64_t bytes = 0;
    if (batch_alloc(c, j, &b) < 0) {
        /* Out of memory: every block of the load failed. */
        for (size_t k = 0; k < j->nblocks; k++)
            load_failed(job, k);
        return;
    }
    for (size_t k = 0; k < j->nblocks; k++)
        if (!block_ok(c, &j->blocks[k]) || batch_add(c, j, k, &b, &iov_used) < 0)
            load_failed(job, k);
    uint64_t t0 = now_ns();
    int rc =
        b.n ? connector_store_get(c, t, job->ev, b.keys, b.n, b.iov, b.iovcnt, b.results, b.vlens)
            : 0;
    for (size_t i = 0; i < b.n; i++) {
        const connector_mblock *blk = &j->blocks[b.which[i]];
        if (rc >= 0 && b.results[i] == 0 && b.vlens[i] == c->obj_bytes[blk->group]) {
            ok++;
            bytes += b.vlens[i];
        } else {
            load_failed(job, b.which[i]);
        }
    }
    if (b.n) connector_count_op(c, &c->stats.load_get, b.n, bytes, b.n - ok, rc < 0, now_ns() - t0);
    pthread_mutex_lock(&c->stats_lock);
    c->stats.load_jobs++;
    c->stats.loaded_objects += ok;
    pthread_mutex_unlock(&c->stats_lock);
    batch_free(&b);
}

static void set_pressure(tide_connector *c, const char *req_id, int on) {
    pthread_mutex_lock(&c->wlock);
    if (on) {
        connector_wreq *w = do_wreq_find(c, req_id);
        if (w) w->pressure_skip = 1;
        c->pressure = 1;
    } else if (c->pressure) {
        c->pressure = 0;
        for (size_t i = 0; i < WBUCKETS; i++) {
            connector_wreq *w = c->wbuckets[i];
            while (w) {
                connector_wreq *n = w->next;
                w->pressure_skip = 0;
                if (!w->pending_loads && !w->pending_saves && !w->finished) do_wreq_remove(c, w);
                w = n;
            }
        }
    }
    pthread_mutex_unlock(&c->wlock);
    if (on) {
        pthread_mutex_lock(&c->stats_lock);
        c->stats.pressure_events++;
        pthread_mutex_unlock(&c->stats_lock);
    }
}

static void run_save(tide_connector *c, size_t t, const connector_mjob *j,
                     const connector_event *ev) {
    pthread_mutex_lock(&c->wlock);
    connector_wreq *w = do_wreq_find(c, j->req_id);
    int skip = c->pressure && w && w->pressure_skip;
    pthread_mutex_unlock(&c->wlock);
    pthread_mutex_lock(&c->stats_lock);
    if (skip) c->stats.pressure_skipped_jobs++;
    c->stats.save_jobs++;
    pthread_mutex_unlock(&c->stats_lock);
    if (skip) return;

    batch b;
    if (batch_alloc(c, j, &b) < 0) return; /* nothing stored: a later save or lookup retries */
    size_t iov_used = 0, striped = 0, seen[CONNECTOR_MAX_GROUPS] = {0};
    for (size_t k = 0; k < j->nblocks; k++) {
        const connector_mblock *blk = &j->blocks[k];
        if (!block_ok(c, blk)) continue;
        int f = c->cfg.groups[blk->group].tp_factor;
        if (f > 1 && (int64_t)(seen[blk->group]++ % (size_t)f) != c->cfg.tp_rank % f) {
            striped++;
            continue;
        }
        if (batch_add(c, j, k, &b, &iov_used) < 0) continue;
    }
    /* Dedup: one existence query, then put what is missing. */
    uint64_t t0 = now_ns();
    int rc = b.n ? tide_exists_many(c->store, b.keys, b.n, b.present) : 0;
    if (b.n)
        connector_count_op(c, &c->stats.save_exists, b.n, 0, rc < 0 ? b.n : 0, rc < 0,
                           now_ns() - t0);
    if (rc < 0) memset(b.present, 0, b.n); /* unknown: put them all (a put of a key is a no-op) */
    size_t m = 0, iv = 0, iv_out = 0;
    for (size_t i = 0; i < b.n; i++) {
        size_t cnt = b.iovcnt[i];
        if (!b.present[i]) {
            b.keys[m] = b.keys[i];
            memmove(b.iov + iv_out, b.iov + iv, cnt * sizeof(tide_iov));
            b.iovcnt[m] = cnt;
            b.which[m] = b.which[i];
            iv_out += cnt;
            m++;
        }
        iv += cnt;
    }
    size_t dups = b.n - m, stored = 0, nospace = 0;
    uint64_t bytes = 0;
    t0 = now_ns();
    rc = m ? connector_store_put(c, t, ev, b.keys, m, b.iov, b.iovcnt, b.results) : 0;
    for (size_t i = 0; i < m; i++) {
        if (rc < 0) break;
        if (b.results[i] == 0) {
            stored++;
            bytes += c->obj_bytes[j->blocks[b.which[i]].group];
        } else if (b.results[i] == TIDE_ENOSPACE) {
            nospace++;
        }
    }
    if (rc == TIDE_ENOSPACE) nospace = m;
    if (m) connector_count_op(c, &c->stats.save_put, m, bytes, m - stored, rc < 0, now_ns() - t0);
    pthread_mutex_lock(&c->stats_lock);
    c->stats.saved_objects += stored;
    c->stats.dedup_skipped += dups;
    c->stats.striped_skipped += striped;
    pthread_mutex_unlock(&c->stats_lock);
    if (nospace)
        set_pressure(c, j->req_id, 1);
    else if (stored)
        set_pressure(c, j->req_id, 0);
    batch_free(&b);
}

static void *job_thread(void *arg) {
    tide_connector *c = ((connector_wthread *)arg)->c;
    size_t t = ((connector_wthread *)arg)->idx;
    for (;;) {
        pthread_mutex_lock(&c->wlock);
        while (!c->qhead && !c->stopping)
            pthread_cond_wait(&c->wcond, &c->wlock);
        if (!c->qhead) {
            pthread_mutex_unlock(&c->wlock);
            connector_mem_thread_exit(c, t);
            return NULL;
        }
        connector_job *job = c->qhead;
        c->qhead = job->next;
        if (!c->qhead) c->qtail = NULL;
        c->running++;
        pthread_mutex_unlock(&c->wlock);

        if (job->j.kind == TIDE_CONNECTOR_LOAD)
            run_load(c, t, job);
        else
            run_save(c, t, &job->j, job->ev);

        size_t nerr = job->errs ? job->errs->n : 0;
        if (nerr) { /* counted before the job is done, so that a waiter sees them */
            pthread_mutex_lock(&c->stats_lock);
            c->stats.load_errors += nerr;
            pthread_mutex_unlock(&c->stats_lock);
        }
        pthread_mutex_lock(&c->wlock);
        connector_wreq *w = do_wreq_find(c, job->j.req_id);
        if (job->j.kind == TIDE_CONNECTOR_LOAD) {
            /* Its load errors first, then its completion: both were made with the job. */
            if (nerr) {
                if (c->errs_tail)
                    c->errs_tail->next = job->errs;
                else
                    c->errs_head = job->errs;
                c->errs_tail = job->errs;
                job->errs = NULL;
            }
            do_report(c, TIDE_CONNECTOR_LOAD, job->done);
            job->done = NULL;
            if (w && w->pending_loads) w->pending_loads--;
        } else if (w && w->pending_saves) {
            w->pending_saves--;
        }
        if (w) do_wreq_settle(c, w);
        do_connector_event_unref(job->ev);
        c->running--;
        c->queued--;
        pthread_cond_broadcast(&c->donecond);
        pthread_mutex_unlock(&c->wlock);
        job_free(job);
    }
}

int connector_worker_start(tide_connector *c) {
    c->wbuckets = fault_calloc(WBUCKETS, sizeof(connector_wreq *));
    if (!c->wbuckets) return connector_err(c, -ENOMEM, "connector: out of memory");
    for (size_t i = 0; i < CONNECTOR_THREADS; i++) {
        c->targs[i] = (connector_wthread){c, i};
        int e = pthread_create(&c->threads[i], NULL, job_thread, &c->targs[i]);
        if (e) {
            connector_worker_stop(c);
            return connector_err(c, -e, "connector: cannot start job thread %zu: %s", i,
                                 strerror(e));
        }
        c->nthreads++;
    }
    return 0;
}

static void do_clear_reports(tide_connector *c) {
    for (int k = 0; k < 3; k++) {
        while (c->done_head[k]) {
            connector_done *d = c->done_head[k];
            c->done_head[k] = d->next;
            free(d);
        }
        c->done_tail[k] = NULL;
    }
    while (c->errs_head) {
        connector_errs *e = c->errs_head;
        c->errs_head = e->next;
        free(e);
    }
    c->errs_tail = NULL;
    c->pressure = 0;
    for (size_t i = 0; c->wbuckets && i < WBUCKETS; i++) {
        while (c->wbuckets[i])
            do_wreq_remove(c, c->wbuckets[i]);
    }
}

void connector_worker_stop(tide_connector *c) {
    pthread_mutex_lock(&c->wlock);
    c->stopping = 1;
    pthread_cond_broadcast(&c->wcond);
    pthread_mutex_unlock(&c->wlock);
    for (size_t i = 0; i < c->nthreads; i++)
        pthread_join(c->threads[i], NULL);
    c->nthreads = 0;
    do_clear_reports(c);
    /* No job runs any more: the UCX registrations of the regions go before their memory
     * can (the engine frees it after destroy). */
    for (size_t i = 0; i < c->nregions; i++) {
        if (c->regions[i].ucx_base)
            tide_buffer_unregister(c->regions[i].ucx_base, c->regions[i].ucx_len);
        free(c->regions[i].seg_base);
    }
    pthread_mutex_lock(&c->ucx_lock);
    c->ucx_regions = 0;
    pthread_mutex_unlock(&c->ucx_lock);
    free(c->regions);
    c->regions = NULL;
    c->nregions = 0;
    connector_mem_stop(c);
    free(c->wbuckets);
    c->wbuckets = NULL;
}

TIDE_API int tide_connector_wait(tide_connector *c) {
    if (!c) return err_set(NULL, NULL, -EINVAL, "tide_connector_wait: connector is NULL");
    if (c->role != TIDE_CONNECTOR_WORKER) return 0;
    pthread_mutex_lock(&c->wlock);
    while (c->queued > 0)
        pthread_cond_wait(&c->donecond, &c->wlock);
    pthread_mutex_unlock(&c->wlock);
    return 0;
}

int connector_worker_reset(tide_connector *c) {
    tide_connector_wait(c);
    pthread_mutex_lock(&c->wlock);
    do_clear_reports(c);
    pthread_mutex_unlock(&c->wlock);
    return 0;
}

static void job_list_free(connector_job *head) {
    while (head) {
        connector_job *nx = head->next;
        job_free(head);
        head = nx;
    }
}

/* A deep copy of a metadata job, with what reporting it will need: for a load, its
 * completion and room for a load error per block. */
static connector_job *job_copy(const connector_mjob *src) {
    connector_job *job = fault_calloc(1, sizeof(*job));
    if (!job) return NULL;
    job->j = *src;
    job->j.req_id = fault_strdup(src->req_id);
    job->j.blocks = fault_malloc((src->nblocks ? src->nblocks : 1) * sizeof(connector_mblock));
    int ok = job->j.req_id && job->j.blocks;
    if (ok && src->kind == TIDE_CONNECTOR_LOAD) {
        job->done = done_new(src->req_id);
        job->errs = fault_calloc(1, sizeof(connector_errs) + src->nblocks * sizeof(int32_t));
        ok = job->done && job->errs;
    }
    if (!ok) {
        job_free(job);
        return NULL;
    }
    if (src->nblocks) memcpy(job->j.blocks, src->blocks, src->nblocks * sizeof(connector_mblock));
    job->j.cap = src->nblocks;
    return job;
}

static int start_jobs(tide_connector *c, const char *fn, const tide_connector_meta *m, int kinds,
                      uint64_t stream);

TIDE_API int tide_connector_start_jobs(tide_connector *c, const tide_connector_meta *m, int kinds) {
    return start_jobs(c, "tide_connector_start_jobs", m, kinds, 0);
}

TIDE_API int tide_connector_start_jobs_stream(tide_connector *c, const tide_connector_meta *m,
                                              int kinds, uint64_t stream) {
    return start_jobs(c, "tide_connector_start_jobs_stream", m, kinds, stream);
}

static int start_jobs(tide_connector *c, const char *fn, const tide_connector_meta *m, int kinds,
                      uint64_t stream) {
    if (!c || !m) return err_set(c, c ? &c->err : NULL, -EINVAL, "%s: NULL argument", fn);
    if (c->role != TIDE_CONNECTOR_WORKER)
        return connector_err(c, -EINVAL, "%s: not a worker connector", fn);
    /* Copy first, so that running out of memory queues nothing rather than half a step. */
    connector_job *head = NULL, *tail = NULL;
    size_t n = 0, nsaves = 0;
    for (size_t i = 0; i < m->njobs; i++) {
        const connector_mjob *mj = &m->jobs[i];
        if (!(mj->kind & kinds)) continue;
        if (mj->hash_len == 0 || mj->hash_len > CONNECTOR_HASH_MAX) continue;
        connector_job *job = job_copy(mj);
        if (!job) {
            job_list_free(head);
            return connector_err(c, -ENOMEM, "%s: out of memory", fn);
        }
        if (tail)
            tail->next = job;
        else
            head = job;
        tail = job;
        n++;
        nsaves += mj->kind == TIDE_CONNECTOR_SAVE;
    }
    /* Device regions: every job's copies wait for what the engine queued on its stream so
     * far. A save's, for the step's forward pass that wrote the pages it reads; a load's,
     * for any forward pass still in flight that writes the pages it fills (blocks the
     * scheduler just took back from a preempted or finished request and handed to this
     * one): without the wait, that write could land over the loaded bytes after the load
     * was reported good. Without jobs nothing is recorded. */
    connector_event *ev = NULL;
    int rc = n ? connector_mem_event(c, fn, stream, &ev) : 0;
    if (rc) {
        job_list_free(head);
        return rc;
    }
    for (connector_job *u = head; ev && u; u = u->next) {
        u->ev = ev;
        ev->refs++;
    }
    /* Every request record the step needs is made before anything is queued or marked, so
     * that running out of memory leaves the step wholly undone. */
    size_t nfin = (kinds & TIDE_CONNECTOR_SAVE) ? m->nfinished : 0, fin_made = 0;
    pthread_mutex_lock(&c->wlock);
    connector_job *job = head;
    for (; job; job = job->next) {
        connector_wreq *w = do_wreq_get(c, job->j.req_id);
        if (!w) break;
        if (job->j.kind == TIDE_CONNECTOR_LOAD)
            w->pending_loads++;
        else
            w->pending_saves++;
    }
    if (!job)
        for (; fin_made < nfin && do_wreq_get(c, m->finished[fin_made]); fin_made++) {
        }
    if (job || fin_made < nfin) {
        /* Out of memory: take back what was counted and made, queue nothing. */
        for (connector_job *u = head; u != job; u = u->next) {
            connector_wreq *w = do_wreq_find(c, u->j.req_id);
            if (u->j.kind == TIDE_CONNECTOR_LOAD)
                w->pending_loads--;
            else
                w->pending_saves--;
            do_wreq_settle(c, w);
        }
        for (size_t i = 0; i < fin_made; i++) {
            connector_wreq *w = do_wreq_find(c, m->finished[i]);
            if (w) do_wreq_settle(c, w);
        }
        rc = -ENOMEM;
    } else {
        if (tail) {
            if (c->qtail)
                c->qtail->next = head;
            else
                c->qhead = head;
            c->qtail = tail;
            c->queued += n;
            head = NULL; /* the queue owns the jobs now */
            pthread_cond_broadcast(&c->wcond);
        }
        /* Finished requests: reported once nothing of theirs is pending. */
        for (size_t i = 0; i < nfin; i++) {
            connector_wreq *w = do_wreq_find(c, m->finished[i]);
            w->finished = 1;
            do_wreq_settle(c, w);
        }
    }
    /* Jobs not queued (out of memory) drop their references; then the caller's. */
    for (connector_job *u = head; u; u = u->next)
        do_connector_event_unref(u->ev);
    do_connector_event_unref(ev);
    pthread_mutex_unlock(&c->wlock);
    job_list_free(head);
    if (rc) return connector_err(c, rc, "%s: out of memory", fn);
    return (int)n;
}

TIDE_API int tide_connector_get_finished(tide_connector *c, int kind, char *buf, size_t cap) {
    static const char fn[] = "tide_connector_get_finished";
    if (!c) return err_set(NULL, NULL, -EINVAL, "%s: connector is NULL", fn);
    if (kind != TIDE_CONNECTOR_LOAD && kind != TIDE_CONNECTOR_SAVE)
        return connector_err(c, -EINVAL, "%s: kind %d is neither LOAD nor SAVE", fn, kind);
    if (cap && !buf) return connector_err(c, -EINVAL, "%s: buf is NULL", fn);
    if (c->role != TIDE_CONNECTOR_WORKER) return 0;
    pthread_mutex_lock(&c->wlock);
    size_t used = 0, n = 0;
    while (c->done_head[kind]) {
        connector_done *d = c->done_head[kind];
        size_t len = strlen(d->id) + 1;
        if (used + len > cap) break;
        memcpy(buf + used, d->id, len);
        used += len;
        c->done_head[kind] = d->next;
        free(d);
        n++;
    }
    if (!c->done_head[kind]) c->done_tail[kind] = NULL;
    pthread_mutex_unlock(&c->wlock);
    return (int)n;
}

TIDE_API int tide_connector_get_load_errors(tide_connector *c, int32_t *block_ids, size_t cap) {
    if (!c) return err_set(NULL, NULL, -EINVAL, "tide_connector_get_load_errors: NULL connector");
    if (cap && !block_ids)
        return connector_err(c, -EINVAL, "tide_connector_get_load_errors: block_ids is NULL");
    if (c->role != TIDE_CONNECTOR_WORKER) return 0;
    pthread_mutex_lock(&c->wlock);
    size_t n = 0;
    while (c->errs_head && n < cap) {
        connector_errs *e = c->errs_head;
        size_t take = e->n - e->off < cap - n ? e->n - e->off : cap - n;
        memcpy(block_ids + n, e->ids + e->off, take * sizeof(int32_t));
        n += take;
        e->off += take;
        if (e->off == e->n) {
            c->errs_head = e->next;
            free(e);
        }
    }
    if (!c->errs_head) c->errs_tail = NULL;
    pthread_mutex_unlock(&c->wlock);
    return (int)n;
}
