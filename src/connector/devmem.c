/*
 * devmem.c — the memory a worker's regions live in: host memory (the store calls copy with
 * the CPU) or one CUDA device (the device's copy engine moves the bytes between the pages
 * and the store's pool; src/device/).
 *
 * A device connector opens the device with its first device region and registers the
 * store's pool with it once (cudaHostRegister: the embedded pool of mem://, or the pool a
 * unix:// client mapped from tided); a backend without a pool in this process (tide://, a
 * cluster) is staged through host buffers instead (src/client/devio.c). Each job thread
 * makes its own queue (a CUDA stream of tide's) on its first device job. Every job's
 * copies wait, on the device, for the event tide_connector_start_jobs_stream recorded on
 * the engine's stream: a save's read what the step's forward pass wrote, a load's land
 * after any forward pass still in flight that writes the same pages (blocks handed over
 * from another request). A load job returns only once its copies landed, so
 * get_finished(LOAD) never reports a load whose bytes are still moving.
 * A queue on which a copy failed is closed after its job and made again by the next.
 *
 * Pool registrations are counted per pool and memory (regs, under reg_lock): connectors
 * sharing a store handle register its pool once, and the last of them to stop unregisters it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "client/client.h"
#include "common/log.h"
#include "connector/connector.h"
#include "device/device.h"

#define MAX_POOL_REGS 16

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    void *base;
    int kind, device;
    size_t refs;
    int owned; /* registered by tide (not found registered already) */
} regs[MAX_POOL_REGS];

/* Register [base, base + len) with d, or count one more user of an earlier registration. */
static int devmem_register_pool(dev *d, void *base, uint64_t len, char *msg, size_t mlen) {
    int rc = 0;
    pthread_mutex_lock(&reg_lock);
    size_t i, free_slot = MAX_POOL_REGS;
    for (i = 0; i < MAX_POOL_REGS; i++) {
        if (regs[i].refs && regs[i].base == base && regs[i].kind == d->kind &&
            regs[i].device == d->device)
            break;
        if (!regs[i].refs && free_slot == MAX_POOL_REGS) free_slot = i;
    }
    if (i < MAX_POOL_REGS) {
        regs[i].refs++;
    } else if (free_slot == MAX_POOL_REGS) {
        snprintf(msg, mlen, "more than %d pools registered with devices", MAX_POOL_REGS);
        rc = TIDE_EDEVICE;
    } else if ((rc = dev_host_register(d, base, len, msg, mlen)) >= 0) {
        regs[free_slot].base = base;
        regs[free_slot].kind = d->kind;
        regs[free_slot].device = d->device;
        regs[free_slot].refs = 1;
        regs[free_slot].owned = rc == 0;
        rc = 0;
    }
    pthread_mutex_unlock(&reg_lock);
    return rc;
}

static void devmem_unregister_pool(dev *d, void *base) {
    pthread_mutex_lock(&reg_lock);
    for (size_t i = 0; i < MAX_POOL_REGS; i++) {
        if (regs[i].refs && regs[i].base == base && regs[i].kind == d->kind &&
            regs[i].device == d->device) {
            if (--regs[i].refs == 0 && regs[i].owned) dev_host_unregister(d, base);
            break;
        }
    }
    pthread_mutex_unlock(&reg_lock);
}

int connector_mem_claim(tide_connector *c, const char *fn, int kind, int device, void *base,
                        uint64_t nbytes) {
    char msg[ERR_MSG_MAX];
    const char *name = dev_kind_name(kind);
    if (!name)
        return connector_err(
            c, -EINVAL, "%s: memory kind %d is neither TIDE_MEM_HOST nor TIDE_MEM_CUDA", fn, kind);
    if (kind == TIDE_MEM_HOST && device != 0)
        return connector_err(c, -EINVAL, "%s: host memory is device 0 (got %d)", fn, device);
    pthread_mutex_lock(&c->wlock);
    int nmem = c->nmem, mkind = c->mem_kind, mdev = c->mem_device;
    dev *d = c->dev;
    pthread_mutex_unlock(&c->wlock);
    if (nmem && (mkind != kind || mdev != device))
        return connector_err(c, -EINVAL,
                             "%s: a region in %s memory (device %d) after regions in %s memory "
                             "(device %d): every region of a connector is on the same memory",
                             fn, name, device, dev_kind_name(mkind), mdev);
    if (kind == TIDE_MEM_HOST) {
        pthread_mutex_lock(&c->wlock);
        c->nmem++;
        pthread_mutex_unlock(&c->wlock);
        return 0;
    }
    void *pool = NULL;
    int rc;
    if (!d) {
        if ((rc = dev_open(kind, device, &d, msg, sizeof(msg))) != 0)
            return connector_err(c, rc, "%s: %s", fn, msg);
    }
    rc = dev_check(d, base, nbytes, msg, sizeof(msg));
    if (rc) {
        if (d != c->dev) dev_close(d);
        return connector_err(c, rc, "%s: %s", fn, msg);
    }
    uint64_t plen = 0;
    if (d != c->dev && client_pool(c->store, &pool, &plen) == 0 &&
        (rc = devmem_register_pool(d, pool, plen, msg, sizeof(msg))) != 0) {
        dev_close(d);
        return connector_err(c, rc, "%s: registering the store's %llu-byte pool: %s", fn,
                             (unsigned long long)plen, msg);
    }
    pthread_mutex_lock(&c->wlock);
    if (!c->dev) {
        c->dev = d;
        c->pool_base = pool; /* NULL: no pool here, staged through host buffers */
        c->pool_owned = pool != NULL;
        c->mem_kind = kind;
        c->mem_device = device;
    }
    c->nmem++;
    pthread_mutex_unlock(&c->wlock);
    return 0;
}

int connector_mem_event(tide_connector *c, const char *fn, uint64_t stream, connector_event **out) {
    char msg[ERR_MSG_MAX];
    *out = NULL;
    pthread_mutex_lock(&c->wlock);
    dev *d = c->dev;
    pthread_mutex_unlock(&c->wlock);
    if (!d) return 0;
    connector_event *e = calloc(1, sizeof(*e));
    if (!e) return connector_err(c, -ENOMEM, "%s: out of memory", fn);
    int rc = dev_event_record(d, (uintptr_t)stream, &e->ev, msg, sizeof(msg));
    if (rc) {
        free(e);
        return connector_err(c, rc, "%s: %s", fn, msg);
    }
    e->refs = 1;
    *out = e;
    return 0;
}

void do_connector_event_unref(connector_event *e) {
    if (e && --e->refs == 0) {
        dev_event_free(e->ev);
        free(e);
    }
}

/* Thread t's queue, made on first use; NULL with a message on the handle when it cannot be. */
static dev_queue *thread_queue(tide_connector *c, size_t t) {
    if (c->dq[t]) return c->dq[t];
    char msg[ERR_MSG_MAX];
    int rc = dev_queue_open(c->dev, &c->dq[t], msg, sizeof(msg));
    if (rc) connector_err(c, rc, "connector: a queue of copies for job thread %zu: %s", t, msg);
    return c->dq[t];
}

/* After a job: a queue on which a copy failed is replaced by the next job. */
static void settle_queue(tide_connector *c, size_t t) {
    if (c->dq[t] && c->dq[t]->failed) {
        dev_queue_close(c->dq[t]);
        c->dq[t] = NULL;
    }
}

int connector_mem_declare(tide_connector *c, int kind, void *base, uint64_t nbytes) {
    return client_ucx_declare(c->store, base, nbytes, kind != TIDE_MEM_HOST);
}

/* Once per connector with device regions and no pool here, on a transport=ucx store: the
 * path their values take — straight between the GPU and tided's pool when the store's UCX
 * moves CUDA memory (the regions were declared as CUDA memory), else staged through the job
 * threads' pinned buffers — logged once with the reason, kept for figures. */
static void connector_gpu_path(tide_connector *c) {
    pthread_mutex_lock(&c->ucx_lock);
    if (c->gpu_path == CONNECTOR_GPU_UNDECIDED && client_uses_ucx(c->store)) {
        char why[ERR_MSG_MAX - 128];
        int r = client_ucx_cuda(c->store, why, sizeof(why));
        c->gpu_path = r == 1 ? CONNECTOR_GPU_DIRECT : CONNECTOR_GPU_STAGED;
        if (r == 1)
            snprintf(c->gpu_why, sizeof(c->gpu_why),
                     "ucx: GPU regions registered with UCX as CUDA memory and moved straight to "
                     "and from tided's pool (%s)",
                     why);
        else
            snprintf(c->gpu_why, sizeof(c->gpu_why),
                     "ucx: %s; GPU regions staged through the pinned pool", why);
        LOG_INFO("%s", c->gpu_why);
    }
    pthread_mutex_unlock(&c->ucx_lock);
}

void connector_ucx_figures(tide_connector *c, size_t *regions, int *gpu_path, char *why,
                           size_t len) {
    pthread_mutex_lock(&c->ucx_lock);
    *regions = c->ucx_regions;
    *gpu_path = c->gpu_path;
    snprintf(why, len, "%s", c->gpu_why);
    pthread_mutex_unlock(&c->ucx_lock);
}

int connector_store_put(tide_connector *c, size_t t, const connector_event *ev,
                        const tide_key *keys, size_t n, const tide_iov *iov, const size_t *iovcnt,
                        int *results) {
    if (!c->dev) return tide_put_many(c->store, keys, n, iov, iovcnt, results);
    dev_queue *q = thread_queue(c, t);
    if (!q) return TIDE_EDEVICE;
    char msg[ERR_MSG_MAX];
    int rc = ev ? dev_queue_wait_event(q, ev->ev, msg, sizeof(msg)) : 0;
    if (rc) {
        q->failed = 1;
        connector_err(c, rc, "connector: waiting for the forward pass: %s", msg);
    } else {
        if (!c->pool_base) connector_gpu_path(c);
        rc = client_put_many_dev(c->store, keys, n, iov, iovcnt, results, q);
    }
    settle_queue(c, t);
    return rc;
}

int connector_store_get(tide_connector *c, size_t t, const connector_event *ev,
                        const tide_key *keys, size_t n, const tide_iov *iov, const size_t *iovcnt,
                        int *results, size_t *vlens) {
    if (!c->dev) return tide_get_many(c->store, keys, n, iov, iovcnt, results, vlens);
    dev_queue *q = thread_queue(c, t);
    if (!q) return TIDE_EDEVICE;
    char msg[ERR_MSG_MAX];
    int rc = ev ? dev_queue_wait_event(q, ev->ev, msg, sizeof(msg)) : 0;
    if (rc) {
        q->failed = 1;
        connector_err(c, rc, "connector: a load waiting for the engine's earlier work: %s", msg);
    } else {
        if (!c->pool_base) connector_gpu_path(c);
        rc = client_get_many_dev(c->store, keys, n, iov, iovcnt, results, vlens, q);
    }
    settle_queue(c, t);
    return rc;
}

void connector_mem_thread_exit(tide_connector *c, size_t t) {
    if (c->dq[t]) dev_queue_close(c->dq[t]);
    c->dq[t] = NULL;
}

void connector_mem_stop(tide_connector *c) {
    if (!c->dev) return;
    if (c->pool_owned) devmem_unregister_pool(c->dev, c->pool_base);
    dev_close(c->dev);
    c->dev = NULL;
    c->pool_base = NULL;
    c->pool_owned = 0;
    c->nmem = 0;
}
