/*
 * devio.c — puts and gets whose scatter lists are in device memory (GPU KV pages).
 *
 * A backend with a pool (mem://, unix://) implements put_many_dev / get_many_dev: the
 * device's copy engine moves the bytes straight between the pages and the pool, which the
 * connector registered with the device once. The other backends (tide://, clusters) get the
 * staged form here: the pages are copied into a host buffer and put from it, or got into
 * one and copied out to the pages — at most DEVIO_STAGE bytes of values at a time. That
 * buffer is the queue's own (stage_buf: made once per job thread's queue, pinned with the
 * device, declared to UCX for a transport=ucx store, released with the queue).
 * tide:// over a UCX that moves CUDA memory sends GPU regions straight instead (node.c,
 * ucx.c): devio_sum then takes each value's checksum through the same buffer.
 *
 * In both, a key whose copies failed gets TIDE_EDEVICE and is never stored (a put) or
 * claimed (a get). Checksums are those of the host bytes: the pool's after a put's copies
 * landed, the staging buffer's as the backend fills or reads it.
 *
 * Also here: devio_hasher, the checksums of one call's values on several threads (helpers
 * started per call and joined at its end), for the pool backends' device paths.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/client.h"
#include "client/ucx.h"
#include "common/checksum.h"

#define DEVIO_STAGE (64u << 20)

/* ---- hashing on several threads ------------------------------------------------------- */

size_t devio_hash_min = 32u << 20;

/* Lock rules: everything below `lock` is under it, except the values and sums themselves:
 * sum[k] is written by the one thread that took k (next++) and read after done[k]. Helpers named
 * do_x() expect `lock` held. */
struct devio_hasher {
    const uint8_t *const *ptr;
    const size_t *len;
    uint64_t *sum;
    size_t n;
    pthread_mutex_t lock;
    pthread_cond_t cond; /* released grew, a value was done, or stop */
    uint8_t *done;
    size_t released, next;
    int stop;
    size_t nthreads;
    pthread_t th[DEVIO_HASH_THREADS];
};

/* Hash one value taken by this thread; lock held on entry and on return. */
static void do_hash_one(devio_hasher *h, size_t k) {
    pthread_mutex_unlock(&h->lock);
    uint64_t v = checksum_buf(h->ptr[k], h->len[k]);
    pthread_mutex_lock(&h->lock);
    h->sum[k] = v;
    h->done[k] = 1;
    pthread_cond_broadcast(&h->cond);
}

static void *hash_helper(void *arg) {
    devio_hasher *h = arg;
    pthread_mutex_lock(&h->lock);
    for (;;) {
        while (!h->stop && h->next >= h->released)
            pthread_cond_wait(&h->cond, &h->lock);
        if (h->stop) break;
        do_hash_one(h, h->next++);
    }
    pthread_mutex_unlock(&h->lock);
    return NULL;
}

devio_hasher *devio_hash_start(const uint8_t *const *ptr, const size_t *len, uint64_t *sum,
                               size_t n) {
    devio_hasher *h = calloc(1, sizeof(*h));
    if (!h || !(h->done = calloc(n ? n : 1, 1))) {
        free(h);
        return NULL;
    }
    h->ptr = ptr;
    h->len = len;
    h->sum = sum;
    h->n = n;
    pthread_mutex_init(&h->lock, NULL);
    pthread_cond_init(&h->cond, NULL);
    size_t total = 0;
    for (size_t k = 0; k < n; k++)
        total += len[k];
    size_t want = total >= devio_hash_min ? DEVIO_HASH_THREADS : 0;
    while (h->nthreads < want && h->nthreads + 1 < n &&
           pthread_create(&h->th[h->nthreads], NULL, hash_helper, h) == 0)
        h->nthreads++;
    return h;
}

void devio_hash_release(devio_hasher *h, size_t upto) {
    pthread_mutex_lock(&h->lock);
    if (upto > h->n) upto = h->n;
    if (upto > h->released) h->released = upto;
    pthread_cond_broadcast(&h->cond);
    pthread_mutex_unlock(&h->lock);
}

void devio_hash_wait(devio_hasher *h, size_t k) {
    pthread_mutex_lock(&h->lock);
    while (!h->done[k]) {
        if (h->next < h->released)
            do_hash_one(h, h->next++);
        else
            pthread_cond_wait(&h->cond, &h->lock);
    }
    pthread_mutex_unlock(&h->lock);
}

void devio_hash_end(devio_hasher *h) {
    if (!h) return;
    pthread_mutex_lock(&h->lock);
    h->stop = 1;
    pthread_cond_broadcast(&h->cond);
    pthread_mutex_unlock(&h->lock);
    for (size_t i = 0; i < h->nthreads; i++)
        pthread_join(h->th[i], NULL);
    pthread_mutex_destroy(&h->lock);
    pthread_cond_destroy(&h->cond);
    free(h->done);
    free(h);
}

/* ---- copies ---------------------------------------------------------------------------- */

int devio_gather(dev_queue *q, uint8_t *dst, const tide_iov *iov, size_t cnt) {
    for (size_t k = 0; k < cnt; k++) {
        int rc = dev_queue_add(q, dst, iov[k].base, iov[k].len);
        if (rc) return rc;
        dst += iov[k].len;
    }
    return 0;
}

int devio_scatter(dev_queue *q, const tide_iov *iov, size_t cnt, const uint8_t *src, size_t len) {
    for (size_t k = 0; k < cnt && len; k++) {
        size_t take = iov[k].len < len ? iov[k].len : len;
        int rc = dev_queue_add(q, iov[k].base, src, take);
        if (rc) return rc;
        src += take;
        len -= take;
    }
    return 0;
}

int client_pool(tide_store *s, void **base, uint64_t *len) {
    if (!s->ops->pool)
        return client_err(s, TIDE_EUNSUPPORTED, "the %s:// backend has no pool in this process",
                          s->ops->scheme);
    return s->ops->pool(s, base, len);
}

static int dev_args(tide_store *s, const char *fn, const tide_key *keys, size_t n,
                    const tide_iov *iov, const void *out, dev_queue *q) {
    if (!s) return err_set(NULL, NULL, -EINVAL, "%s: store is NULL", fn);
    if (n > TIDE_BATCH_MAX)
        return client_err(s, TIDE_ELIMIT, "%s: %zu keys in one call, the limit is %d", fn, n,
                          TIDE_BATCH_MAX);
    if (n && (!keys || !out || !iov || !q)) return client_err(s, -EINVAL, "%s: NULL array", fn);
    return 0;
}

/* ---- the staging buffer ----------------------------------------------------------------- */

static void stage_free(dev_queue *q) {
    if (!q->stage) return;
    if (q->stage_declared) tide_buffer_unregister(q->stage, q->stage_len);
    if (q->stage_pinned) dev_host_unregister(q->d, q->stage);
    free(q->stage);
    q->stage = NULL;
    q->stage_len = 0;
    q->stage_pinned = q->stage_declared = 0;
}

/* q's staging buffer, at least len bytes: made once and kept with the queue (one per job
 * thread of a connector), pinned with the queue's device (its copies then run at the
 * device's full speed) and, for a store whose values go over UCX, declared to UCX
 * (tucx_declare: registered once per UCX context, not per transfer). Grown when a call needs
 * more; released when the queue closes. NULL: out of memory. */
static uint8_t *stage_buf(tide_store *s, dev_queue *q, size_t len) {
    if (q->stage && q->stage_len >= len) {
        if (!q->stage_declared && s && client_uses_ucx(s))
            q->stage_declared = tucx_declare(q->stage, q->stage_len, 0) == 0;
        return q->stage;
    }
    stage_free(q);
    size_t want = 1u << 20;
    while (want < len)
        want <<= 1;
    if (want > DEVIO_STAGE && len <= DEVIO_STAGE) want = DEVIO_STAGE;
    void *b = NULL;
    if (posix_memalign(&b, 4096, want) != 0) return NULL;
    char msg[ERR_MSG_MAX];
    q->stage = b;
    q->stage_len = want;
    q->stage_pinned = dev_host_register(q->d, b, want, msg, sizeof(msg)) == 0;
    q->stage_declared = s && client_uses_ucx(s) && tucx_declare(b, want, 0) == 0;
    q->on_close = stage_free;
    return b;
}

int devio_sum(void *arg, const tide_iov *v, size_t cnt, uint64_t len, uint64_t *sum, char *why,
              size_t wl) {
    dev_queue *q = arg;
    uint8_t *b = stage_buf(NULL, q, len);
    if (!b) {
        snprintf(why, wl, "out of memory for a staging buffer of %llu bytes",
                 (unsigned long long)len);
        return -ENOMEM;
    }
    int rc = 0;
    uint64_t left = len, t = 0;
    uint8_t *p = b;
    for (size_t k = 0; k < cnt && left && rc == 0; k++) {
        size_t take = v[k].len < left ? v[k].len : left;
        rc = dev_queue_add(q, p, v[k].base, take);
        p += take;
        left -= take;
    }
    if (rc == 0) rc = dev_queue_flush(q, &t, why, wl);
    if (rc == 0) rc = dev_queue_wait(q, t, why, wl);
    if (rc) {
        dev_queue_discard(q);
        if (rc == -ENOMEM) snprintf(why, wl, "out of memory");
        return rc;
    }
    *sum = checksum_buf(b, len);
    return 0;
}

/* The keys [i, j) of a staged call: as many as fit DEVIO_STAGE bytes (at least one). */
static size_t stage_span(const tide_iov *iov, const size_t *iovcnt, size_t i, size_t n,
                         size_t *bytes) {
    size_t j = i, total = 0;
    for (const tide_iov *v = iov; j < n; j++) {
        size_t cnt = iovcnt ? iovcnt[j] : 1, len = iov_total(v, cnt);
        if (j > i && total + len > DEVIO_STAGE) break;
        total += len;
        v += cnt;
    }
    *bytes = total;
    return j;
}

int client_staged_put(tide_store *s, const tide_key *keys, size_t n, const tide_iov *iov,
                      const size_t *iovcnt, int *results, dev_queue *q) {
    char msg[ERR_MSG_MAX];
    int ok = 0;
    for (size_t i = 0; i < n;) {
        size_t bytes;
        size_t j = stage_span(iov, iovcnt, i, n, &bytes);
        uint8_t *buf = stage_buf(s, q, bytes ? bytes : 1);
        tide_iov *one = malloc((j - i) * sizeof(*one));
        if (!buf || !one) {
            free(one);
            return client_err(s, -ENOMEM, "out of memory staging device values");
        }
        const tide_iov *v = iov;
        uint8_t *p = buf;
        int rc = 0;
        for (size_t k = i; k < j; k++) {
            size_t cnt = iovcnt ? iovcnt[k] : 1, len = iov_total(v, cnt);
            if (rc == 0) rc = devio_gather(q, p, v, cnt);
            one[k - i] = (tide_iov){p, len};
            p += len;
            v += cnt;
        }
        uint64_t t = 0;
        if (rc == 0) rc = dev_queue_flush(q, &t, msg, sizeof(msg));
        if (rc == 0) rc = dev_queue_wait(q, t, msg, sizeof(msg));
        if (rc) {
            dev_queue_discard(q);
            for (size_t k = i; k < j; k++)
                results[k] = TIDE_EDEVICE;
            client_err(s, rc, "copying values from the device: %s", msg);
        } else {
            int r = s->ops->put_many(s, keys + i, j - i, one, NULL, results + i);
            if (r < 0) {
                free(one);
                return r;
            }
            ok += r;
        }
        free(one);
        iov = v;
        i = j;
    }
    return ok;
}

int client_staged_get(tide_store *s, const tide_key *keys, size_t n, const tide_iov *iov,
                      const size_t *iovcnt, int *results, size_t *vlens, dev_queue *q) {
    char msg[ERR_MSG_MAX];
    int ok = 0;
    for (size_t i = 0; i < n;) {
        size_t bytes;
        size_t j = stage_span(iov, iovcnt, i, n, &bytes);
        uint8_t *buf = stage_buf(s, q, bytes ? bytes : 1);
        tide_iov *one = malloc((j - i) * sizeof(*one));
        size_t *lens = calloc(j - i, sizeof(*lens));
        if (!buf || !one || !lens) {
            free(one), free(lens);
            return client_err(s, -ENOMEM, "out of memory staging device values");
        }
        const tide_iov *v = iov;
        uint8_t *p = buf;
        for (size_t k = i; k < j; k++) {
            size_t cnt = iovcnt ? iovcnt[k] : 1, len = iov_total(v, cnt);
            one[k - i] = (tide_iov){p, len};
            p += len;
            v += cnt;
        }
        int r = s->ops->get_many(s, keys + i, j - i, one, NULL, results + i, lens);
        if (r < 0) {
            free(one), free(lens);
            return r;
        }
        int rc = 0;
        v = iov;
        for (size_t k = i; k < j; k++) {
            size_t cnt = iovcnt ? iovcnt[k] : 1;
            if (rc == 0 && results[k] == 0)
                rc = devio_scatter(q, v, cnt, one[k - i].base, lens[k - i]);
            v += cnt;
        }
        uint64_t t = 0;
        if (rc == 0) rc = dev_queue_flush(q, &t, msg, sizeof(msg));
        if (rc == 0) rc = dev_queue_wait(q, t, msg, sizeof(msg));
        if (rc) {
            dev_queue_discard(q);
            client_err(s, rc, "copying values to the device: %s", msg);
        }
        for (size_t k = i; k < j; k++) {
            if (rc && results[k] == 0) results[k] = TIDE_EDEVICE;
            if (vlens) vlens[k] = results[k] == 0 ? lens[k - i] : 0;
            ok += results[k] == 0;
        }
        free(one), free(lens);
        iov = v;
        i = j;
    }
    return ok;
}

int client_put_many_dev(tide_store *s, const tide_key *keys, size_t n, const tide_iov *iov,
                        const size_t *iovcnt, int *results, dev_queue *q) {
    int rc = dev_args(s, "tide_put_many (device)", keys, n, iov, results, q);
    if (rc || n == 0) return rc;
    if (s->ops->put_many_dev) return s->ops->put_many_dev(s, keys, n, iov, iovcnt, results, q);
    return client_staged_put(s, keys, n, iov, iovcnt, results, q);
}

int client_get_many_dev(tide_store *s, const tide_key *keys, size_t n, const tide_iov *iov,
                        const size_t *iovcnt, int *results, size_t *vlens, dev_queue *q) {
    int rc = dev_args(s, "tide_get_many (device)", keys, n, iov, results, q);
    if (rc || n == 0) return rc;
    if (s->ops->get_many_dev)
        return s->ops->get_many_dev(s, keys, n, iov, iovcnt, results, vlens, q);
    return client_staged_get(s, keys, n, iov, iovcnt, results, vlens, q);
}
