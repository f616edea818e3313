/*
 * device.c — the kind table and what every kind shares: opening a device, events, and the
 * queue's collection of copies into runs before they are issued as one batch.
 *
 * Why runs of copies rather than a gather kernel: the copy engines move bytes without
 * taking SMs from the engine's own kernels, need no code compiled for the GPU (libtide
 * ships no device code and links no CUDA library), and reach host memory that is merely
 * registered (a kernel would need the pool mapped into the device's address space and
 * would read it over the bus at kernel speed, competing with the forward pass). Many small
 * runs cost launch overhead, so a flush issues them with one batched call where the
 * runtime has one (cudaMemcpyBatchAsync); scripts/gpu-check.sh measures both ways.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "tide.h"

static const dev_ops *builtin[DEV_KINDS] = {&dev_host_ops, &dev_cuda_ops};
static const dev_ops *table[DEV_KINDS] = {&dev_host_ops, &dev_cuda_ops};

const char *dev_kind_name(int kind) {
    return kind == DEV_HOST ? "host" : kind == DEV_CUDA ? "cuda" : NULL;
}

void dev_set_ops(int kind, const dev_ops *ops) {
    if (kind >= 0 && kind < DEV_KINDS) table[kind] = ops ? ops : builtin[kind];
}

int dev_open(int kind, int device, dev **out, char *msg, size_t mlen) {
    *out = NULL;
    if (kind < 0 || kind >= DEV_KINDS) {
        snprintf(msg, mlen, "memory kind %d is neither host (0) nor cuda (1)", kind);
        return -EINVAL;
    }
    if (device < 0) {
        snprintf(msg, mlen, "device %d: a device index is 0 or more", device);
        return -EINVAL;
    }
    dev *d = calloc(1, sizeof(*d));
    if (!d) {
        snprintf(msg, mlen, "out of memory");
        return -ENOMEM;
    }
    d->ops = table[kind];
    d->kind = kind;
    d->device = device;
    int rc = d->ops->open(device, &d->impl, msg, mlen);
    if (rc) {
        free(d);
        return rc;
    }
    *out = d;
    return 0;
}

void dev_close(dev *d) {
    if (!d) return;
    d->ops->close(d->impl);
    free(d);
}

void dev_describe(dev *d, char *buf, size_t len) {
    if (d->ops->describe)
        d->ops->describe(d->impl, buf, len);
    else
        snprintf(buf, len, "%s device %d", d->ops->name, d->device);
}

int dev_check(dev *d, const void *p, uint64_t len, char *msg, size_t mlen) {
    return d->ops->check(d->impl, p, len, msg, mlen);
}

int dev_host_register(dev *d, void *p, uint64_t len, char *msg, size_t mlen) {
    return d->ops->host_register(d->impl, p, len, msg, mlen);
}

void dev_host_unregister(dev *d, void *p) {
    d->ops->host_unregister(d->impl, p);
}

int dev_event_record(dev *d, uintptr_t stream, dev_event **out, char *msg, size_t mlen) {
    *out = NULL;
    dev_event *e = calloc(1, sizeof(*e));
    if (!e) {
        snprintf(msg, mlen, "out of memory");
        return -ENOMEM;
    }
    e->d = d;
    int rc = d->ops->event_record(d->impl, stream, &e->ev, msg, mlen);
    if (rc) {
        free(e);
        return rc;
    }
    *out = e;
    return 0;
}

void dev_event_free(dev_event *e) {
    if (!e) return;
    e->d->ops->event_destroy(e->d->impl, e->ev);
    free(e);
}

int dev_queue_open(dev *d, dev_queue **out, char *msg, size_t mlen) {
    *out = NULL;
    dev_queue *q = calloc(1, sizeof(*q));
    if (!q) {
        snprintf(msg, mlen, "out of memory");
        return -ENOMEM;
    }
    q->d = d;
    int rc = d->ops->queue_create(d->impl, &q->q, msg, mlen);
    if (rc) {
        free(q);
        return rc;
    }
    *out = q;
    return 0;
}

void dev_queue_close(dev_queue *q) {
    if (!q) return;
    if (q->on_close) q->on_close(q);
    q->d->ops->queue_destroy(q->d->impl, q->q);
    free(q->runs);
    free(q);
}

int dev_queue_wait_event(dev_queue *q, const dev_event *e, char *msg, size_t mlen) {
    return q->d->ops->queue_wait_event(q->d->impl, q->q, e->ev, msg, mlen);
}

int dev_queue_add(dev_queue *q, void *dst, const void *src, size_t len) {
    if (len == 0) return 0;
    q->copies++;
    if (q->nruns) {
        dev_copy *r = &q->runs[q->nruns - 1];
        if ((uint8_t *)r->dst + r->len == (uint8_t *)dst &&
            (const uint8_t *)r->src + r->len == (const uint8_t *)src) {
            r->len += len;
            return 0;
        }
    }
    if (q->nruns == q->cap) {
        size_t cap = q->cap ? q->cap * 2 : 64;
        dev_copy *p = realloc(q->runs, cap * sizeof(*p));
        if (!p) return -ENOMEM;
        q->runs = p;
        q->cap = cap;
    }
    q->runs[q->nruns++] = (dev_copy){dst, src, len};
    return 0;
}

int dev_queue_flush(dev_queue *q, uint64_t *ticket, char *msg, size_t mlen) {
    if (q->failed) {
        dev_queue_discard(q);
        snprintf(msg, mlen, "%s device %d: an earlier copy on this queue failed", q->d->ops->name,
                 q->d->device);
        return TIDE_EDEVICE;
    }
    if (q->nruns == 0) {
        *ticket = q->ticket;
        return 0;
    }
    uint64_t t = 0;
    int rc = q->d->ops->copy(q->d->impl, q->q, q->runs, q->nruns, &t, msg, mlen);
    q->issued_runs += q->nruns;
    q->nruns = 0;
    if (rc) {
        q->failed = 1;
        return rc;
    }
    *ticket = q->ticket = t;
    return 0;
}

int dev_queue_wait(dev_queue *q, uint64_t ticket, char *msg, size_t mlen) {
    int rc = q->d->ops->wait(q->d->impl, q->q, ticket, msg, mlen);
    if (rc) q->failed = 1;
    if (!rc && q->failed) {
        snprintf(msg, mlen, "%s device %d: an earlier copy on this queue failed", q->d->ops->name,
                 q->d->device);
        rc = TIDE_EDEVICE;
    }
    return rc;
}

void dev_queue_discard(dev_queue *q) {
    q->nruns = 0;
}
