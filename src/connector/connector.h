/*
 * connector.h — the connector's internals behind the public tide_connector_* calls:
 * the handle, the lookup search, the scheduler's request table, the per-step metadata and
 * the worker's regions and job threads.
 *
 * Files: handle.c (create/destroy, info, stats, messages), base.c (the helpers every file
 * calls: messages, counting, argument checks), lookup.c (keys, the one existence round
 * trip, the hit search), sched.c (request state, load and save plans), step.c (the
 * metadata: build, read, serialize, parse), worker.c (regions, job threads, completions),
 * devmem.c (device memory). Arrows point one way: handle.c calls the others, every file
 * may call base.c, base.c calls none of them.
 *
 * Lock order: c->sched_lock (scheduler state) and c->wlock (worker state) are never
 * held together; neither is held across a store call.
 */
#ifndef TIDE_CONNECTOR_CONNECTOR_H
#define TIDE_CONNECTOR_CONNECTOR_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "common/errors.h"
#include "connector/config.h"
#include "connector/keys.h"
#include "tide.h"

#define CONNECTOR_REQ_ID_MAX 255 /* bytes of a request id */
#define CONNECTOR_HASH_MAX 64    /* bytes of one block hash */
#define CONNECTOR_THREADS 2      /* background job threads of a worker */
#define CONNECTOR_MAX_REGIONS 4096

/* ---- lookup ------------------------------------------------------------------------ */

/*
 * What the store holds for one lookup, as the hit search reads it: for each group, which
 * of its candidate objects are present in every lookup namespace. Attention groups have one
 * candidate per block (index i: the block ending at (i + 1) * eff_block_size); Mamba groups
 * one per scheduler-block boundary (index k: the snapshot at (k + 1) * scheduler block).
 * With partial hits (cfg->partial_hits) every group has one candidate per hash block
 * (index k: the object ending at (k + 1) * hash_block_size).
 */
typedef struct connector_presence {
    uint8_t *present[CONNECTOR_MAX_GROUPS];
    size_t n[CONNECTOR_MAX_GROUPS];
} connector_presence;

/* Blocks a sliding-window group needs before a boundary: ceil((window - 1) / block). */
int64_t connector_window_blocks(const connector_group *g);

/*
 * The hit search over a presence map: the longest boundary B <= bound, a multiple of
 * connector_hit_unit, such that every group can resume at B (full attention: every block
 * before B; sliding window: the window's blocks before B; Mamba: the snapshot exactly at
 * B), iterated to a fixed point. Pure.
 */
int64_t connector_hit_search(const ccfg *cfg, const connector_presence *p, int64_t bound);

/* The granularity of hits: the scheduler block size, or the hash block size when the
 * configuration has partial hits. */
int64_t connector_hit_unit(const ccfg *cfg);

/* The aligned length a lookup considers: num_tokens and the hashes' coverage, aligned
 * down to connector_hit_unit. */
int64_t connector_lookup_bound(const ccfg *cfg, int64_t num_tokens, size_t nhashes);

/* ---- the handle --------------------------------------------------------------------- */

/* One registered tensor of a group: nseg segments, block b of segment s at
 * seg_base[s] + b * block_stride, seg_len bytes long. */
typedef struct connector_region {
    int group;
    size_t nseg;
    uint8_t **seg_base;
    uint64_t seg_len;
    uint64_t block_stride;
    int64_t num_blocks;
    /* The tensor [ucx_base, ucx_base + ucx_len) declared to UCX (tucx_declare) for a
     * transport=ucx store: registered once per UCX context, undeclared at stop. NULL: not
     * declared (another store, or the range overlaps one declared already). */
    void *ucx_base;
    uint64_t ucx_len;
} connector_region;

/* How a connector's device regions move over a transport=ucx store (devmem.c). */
enum { CONNECTOR_GPU_UNDECIDED = 0, CONNECTOR_GPU_STAGED, CONNECTOR_GPU_DIRECT };

struct connector_req;
struct connector_job;
struct connector_done;
struct connector_errs;
struct dev;
struct dev_queue;
struct dev_event;

/* A job thread's argument: which thread it is (its device queue is dq[idx]). */
typedef struct connector_wthread {
    struct tide_connector *c;
    size_t idx;
} connector_wthread;

/* One step's forward-pass event (devmem.c), shared by that step's save jobs; refs under
 * wlock. */
typedef struct connector_event {
    struct dev_event *ev;
    size_t refs;
} connector_event;

struct tide_connector {
    int role;
    ccfg cfg;
    tide_store *store;
    int own_store;
    errbuf err;
    int saves; /* this role saves */

    /* Scheduler state (sched_lock). */
    pthread_mutex_t sched_lock;
    struct connector_req **buckets; /* request table */
    size_t nbuckets, nreqs;
    char **finished; /* delayed-free requests finished since the last metadata */
    size_t nfinished, cap_finished;

    /* Worker state (wlock). Helpers named do_x() (worker.c, devmem.c) expect wlock held;
     * the others take it. */
    pthread_mutex_t wlock;
    pthread_cond_t wcond;    /* a job was queued, or the pool stops */
    pthread_cond_t donecond; /* a job finished */
    connector_region *regions;
    size_t nregions;
    uint64_t obj_bytes[CONNECTOR_MAX_GROUPS]; /* bytes of one object of each group on this rank */
    size_t obj_iovs[CONNECTOR_MAX_GROUPS];    /* segments of one object of each group */
    int64_t min_blocks[CONNECTOR_MAX_GROUPS]; /* fewest blocks among the group's regions */
    struct connector_job *qhead, *qtail;
    size_t queued, running;
    int stopping;
    pthread_t threads[CONNECTOR_THREADS];
    size_t nthreads;
    struct connector_wreq **wbuckets; /* worker's view of requests: pending jobs, finished mark */
    size_t nwreqs;
    /* Reports waiting for get_finished, oldest first, [TIDE_CONNECTOR_LOAD] and
     * [TIDE_CONNECTOR_SAVE]; and load errors waiting for get_load_errors. Each was
     * allocated when its work was accepted, so reporting never allocates (worker.c). */
    struct connector_done *done_head[3], *done_tail[3];
    struct connector_errs *errs_head, *errs_tail;
    int pressure; /* a put ran out of space; skip the marked requests' saves */
    connector_wthread targs[CONNECTOR_THREADS];

    /* Memory of the regions (devmem.c). Every region of a connector is on the same memory,
     * set by the first one (kind TIDE_MEM_HOST or TIDE_MEM_CUDA, device); written under
     * wlock before any job can use them. */
    int nmem, mem_kind, mem_device;
    struct dev *dev;                         /* opened with the first device region */
    void *pool_base;                         /* the store's pool, registered with dev(counted)... */
    int pool_owned;                          /* ...for this connector: released at stop */
    struct dev_queue *dq[CONNECTOR_THREADS]; /* job thread i's queue: made, used, closed by it */

    /* UCX (ucx_lock): the regions declared to UCX, and for device regions the path their
     * values take, decided and logged once, at the first device job (connector_gpu_path). */
    pthread_mutex_t ucx_lock;
    size_t ucx_regions;
    int gpu_path;
    char gpu_why[ERR_MSG_MAX];

    /* Figures (stats_lock). */
    pthread_mutex_t stats_lock;
    tide_connector_stats stats;
};

/* ---- device memory (devmem.c) ---------------------------------------------------------- */

/* A region of kind/device at [base, base + nbytes) may join the connector's regions: the
 * same memory as the earlier ones; the first device region opens the device and registers
 * the store's pool with it. 0, -EINVAL or TIDE_EDEVICE with a message. */
int connector_mem_claim(tide_connector *c, const char *fn, int kind, int device, void *base,
                        uint64_t nbytes);
/* The event a step's jobs (saves and loads) wait for: recorded on the engine's stream now.
 * NULL in *out for host regions. */
int connector_mem_event(tide_connector *c, const char *fn, uint64_t stream, connector_event **out);
/* Drop a reference to an event (wlock held). */
void do_connector_event_unref(connector_event *e);
/* The store calls of job thread t: host regions use the plain calls; device regions go
 * through the thread's queue (a save's and a load's copies after ev). */
int connector_store_put(tide_connector *c, size_t t, const connector_event *ev,
                        const tide_key *keys, size_t n, const tide_iov *iov, const size_t *iovcnt,
                        int *results);
int connector_store_get(tide_connector *c, size_t t, const connector_event *ev,
                        const tide_key *keys, size_t n, const tide_iov *iov, const size_t *iovcnt,
                        int *results, size_t *vlens);
/* Declare a region's tensor to the store's UCX (client_ucx_declare): 1 when declared (the
 * caller undeclares it at stop with tide_buffer_unregister), 0 when not (not a
 * transport=ucx store, or the range overlaps one declared already). */
int connector_mem_declare(tide_connector *c, int kind, void *base, uint64_t nbytes);
/* The connector's UCX figures (tests, logs): regions declared to UCX, and the device path
 * (CONNECTOR_GPU_*) with its reason in why. */
void connector_ucx_figures(tide_connector *c, size_t *regions, int *gpu_path, char *why,
                           size_t len);
/* Job thread t ends: close its queue (in that thread). */
void connector_mem_thread_exit(tide_connector *c, size_t t);
/* After the threads stopped: unregister the pool, close the device. */
void connector_mem_stop(tide_connector *c);

/* ---- base.c: what every file calls ------------------------------------------------------ */

/* Record a message on the handle and return code. */
int connector_err(tide_connector *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Count one store operation into op (stats_lock). */
void connector_count_op(tide_connector *c, tide_connector_op_stats *op, uint64_t keys,
                        uint64_t bytes, uint64_t failed, int whole_error, uint64_t ns);

/* Check a request id and a hash array; 0 or -EINVAL with a message. */
int connector_check_id(tide_connector *c, const char *fn, const char *req_id);
int connector_check_hashes(tide_connector *c, const char *fn, const uint8_t *hashes, size_t nhashes,
                           size_t hash_len);

/* The hit length for a prompt (lookup.c). */
int connector_hit_tokens(tide_connector *c, int64_t num_tokens, const uint8_t *hashes,
                         size_t nhashes, size_t hash_len, int64_t *hit);

/* Build the key of (group, own namespace, hash) into buf[TIDE_KEY_MAX + 1]; returns its
 * length or a negative code. */
int connector_own_key(const tide_connector *c, int group, const uint8_t *hash, size_t hash_len,
                      char *buf);

/* ---- metadata ------------------------------------------------------------------------ */

typedef struct connector_mblock {
    int group;
    int32_t block_id;
    int64_t end_token;
    uint8_t hash[CONNECTOR_HASH_MAX];
} connector_mblock;

typedef struct connector_mjob {
    int kind;
    char *req_id;
    int64_t start, end;
    size_t hash_len;
    connector_mblock *blocks;
    size_t nblocks, cap;
} connector_mjob;

struct tide_connector_meta {
    connector_mjob *jobs;
    size_t njobs, cap;
    char **finished;
    size_t nfinished;
};

/* Append a job (step.c); returns it or NULL when out of memory. */
connector_mjob *connector_step_add_job(tide_connector_meta *m, int kind, const char *req_id,
                                       int64_t start, int64_t end, size_t hash_len);
/* Append a block to a job; 0 or -ENOMEM. */
int connector_step_add_block(connector_mjob *j, int group, int32_t block_id, int64_t end_token,
                             const uint8_t *hash);

/* ---- scheduler (sched.c) ---------------------------------------------------------------- */

void connector_sched_init(tide_connector *c);
void connector_sched_free(tide_connector *c);

/* ---- worker (worker.c) ------------------------------------------------------------------ */

int connector_worker_start(tide_connector *c);
void connector_worker_stop(tide_connector *c);
int connector_worker_reset(tide_connector *c);

#endif
