/*
 * mem.c — the embedded backend, mem://: a store in this process's memory.
 *
 *   mem://?capacity=1GiB&max_value=SIZE&prefault=0&hugepages=0&verify=1&policy=chain
 *         &disk_dir=DIR&disk_capacity=SIZE&disk_segment=SIZE&disk_io=auto|io_uring|pwritev
 *
 * disk_dir turns on the SSD tier (src/store/tier.c): evicted objects spill to segment
 * files under DIR, gets read them back, and a later open of the same DIR finds them again.
 * disk_capacity is then required.
 *
 * Puts copy the caller's scatter list into a reservation while hashing it, then commit
 * with that checksum. Gets pin the object, copy it out while hashing what the caller
 * received, and compare with the stored checksum (verify=1, the default): a mismatch
 * removes the object and reports a miss, so a damaged block is never handed out as good.
 *
 * Batch order is chain order (store.h, store_chain): a put_many commits its keys, and a
 * get_many releases its pins, through one chain cursor, the last key of a put_many of two
 * or more keys marked as the chain's tail (one key alone says nothing about a chain), so
 * the chain-aware policy keeps each batch in prefix order.
 *
 * Device values (put_many_dev / get_many_dev): a put reserves, queues the device-to-pool
 * copies a chunk (DEVIO_CHUNK) at a time, and as each chunk lands hashes the bytes in the
 * pool and commits (a chunk whose copies failed is aborted: TIDE_EDEVICE); a get pins,
 * checks each value's checksum in the pool, queues its pool-to-device copies, and unpins
 * once they landed (a value whose copies failed is TIDE_EDEVICE, never claimed).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "client/client.h"
#include "common/checksum.h"
#include "store/store.h"

#define MEM_DEFAULT_CAPACITY (1ull << 30)

typedef struct mem_impl {
    store *st;
    int verify;
} mem_impl;

static store *mem_store(tide_store *s) {
    return ((mem_impl *)s->impl)->st;
}

static int mem_open(tide_store *s, url *u) {
    char msg[ERR_MSG_MAX];
    store_config cfg = {0};
    int verify = 1, rc;
    if (u->authority[0] || u->path[0])
        return client_err(s, TIDE_EURL, "mem:// takes no host or path (got 'mem://%s%s')",
                          u->authority, u->path);
    if ((rc = url_opt_size(u, "capacity", MEM_DEFAULT_CAPACITY, &cfg.capacity, msg, sizeof(msg))) ||
        (rc = url_opt_size(u, "max_value", 0, &cfg.max_value, msg, sizeof(msg))) ||
        (rc = url_opt_size(u, "meta_budget", 0, &cfg.meta_budget, msg, sizeof(msg))) ||
        (rc = url_opt_bool(u, "prefault", 0, &cfg.prefault, msg, sizeof(msg))) ||
        (rc = url_opt_bool(u, "hugepages", 0, &cfg.hugepages, msg, sizeof(msg))) ||
        (rc = url_opt_bool(u, "verify", 1, &verify, msg, sizeof(msg))))
        return client_err(s, rc, "mem://: %s", msg);
    /* The default (adapt) is chosen by replaying traces through the store (docs/TRACES.md);
     * the same default is in server_config_defaults(). */
    const char *policy = url_get(u, "policy");
    cfg.policy = policy ? store_policy_parse(policy) : STORE_POLICY_DEFAULT;
    if (cfg.policy < 0)
        return client_err(s, TIDE_EOPTION, "mem://: option policy=%s: expected " STORE_POLICY_NAMES,
                          policy);
    if (cfg.capacity == 0)
        return client_err(s, TIDE_EOPTION, "mem://: option capacity must be above 0");
    cfg.disk_dir = url_get(u, "disk_dir");
    if ((rc = url_opt_size(u, "disk_capacity", 0, &cfg.disk_capacity, msg, sizeof(msg))) ||
        (rc = url_opt_size(u, "disk_segment", 0, &cfg.disk_segment, msg, sizeof(msg))))
        return client_err(s, rc, "mem://: %s", msg);
    if (cfg.disk_dir && (!cfg.disk_dir[0] || cfg.disk_capacity == 0))
        return client_err(s, TIDE_EOPTION,
                          "mem://: disk_dir needs a directory and disk_capacity above 0");
    if (!cfg.disk_dir && (cfg.disk_capacity || cfg.disk_segment))
        return client_err(s, TIDE_EOPTION, "mem://: disk_capacity and disk_segment need disk_dir");
    const char *dio = url_get(u, "disk_io");
    if (dio && (cfg.disk_io = store_disk_io_parse(dio)) < 0)
        return client_err(s, TIDE_EOPTION,
                          "mem://: option disk_io=%s: expected auto, io_uring or pwritev", dio);
    mem_impl *m = calloc(1, sizeof(*m));
    if (!m) return client_err(s, -ENOMEM, "mem://: out of memory");
    rc = store_create(&cfg, &m->st, msg, sizeof(msg));
    if (rc) {
        free(m);
        return client_err(s, rc, "mem://: cannot create the store: %s", msg);
    }
    m->verify = verify;
    s->impl = m;
    return 0;
}

static void mem_close(tide_store *s) {
    mem_impl *m = s->impl;
    if (!m) return;
    store_destroy(m->st);
    free(m);
    s->impl = NULL;
}

/* Check one put's key and value and reserve its room: the steps every put path takes
 * before it copies (the host copy here, the device copy in mem_put_many_dev). */
static int mem_reserve(store *st, const tide_key *key, const tide_iov *v, size_t cnt, size_t *vlen,
                       store_ref *ref) {
    int rc = client_key_check(key);
    *vlen = iov_total(v, cnt);
    if (rc == 0 && *vlen == 0) rc = TIDE_EVALEMPTY;
    if (rc == 0) rc = store_reserve(st, key->data, key->len, *vlen, 0, ref);
    return rc;
}

static int mem_put_many(tide_store *s, const tide_key *keys, size_t n, const tide_iov *iov,
                        const size_t *iovcnt, int *results) {
    store *st = mem_store(s);
    uint8_t *base = store_base(st);
    int ok = 0;
    uint64_t in = 0;
    store_chain chain = STORE_CHAIN_INIT;
    for (size_t i = 0; i < n; i++) {
        size_t cnt = iovcnt ? iovcnt[i] : 1;
        const tide_iov *v = iov;
        iov += cnt;
        size_t vlen;
        store_ref ref;
        int rc = mem_reserve(st, &keys[i], v, cnt, &vlen, &ref);
        if (rc == 0) {
            uint64_t sum = copy_gather(base + ref.offset, v, cnt, 1);
            rc = store_commit_chain(st, ref.id, sum, &chain, n > 1 && i + 1 == n);
            in += vlen;
        } else if (rc == STORE_DUP) {
            rc = 0;
        }
        results[i] = rc;
        ok += rc == 0;
    }
    store_count_io(st, in, 0);
    return ok;
}

static int mem_get_many(tide_store *s, const tide_key *keys, size_t n, const tide_iov *iov,
                        const size_t *iovcnt, int *results, size_t *vlens) {
    mem_impl *m = s->impl;
    uint8_t *base = store_base(m->st);
    int ok = 0;
    uint64_t out = 0;
    store_chain chain = STORE_CHAIN_INIT;
    for (size_t i = 0; i < n; i++) {
        size_t cnt = iovcnt ? iovcnt[i] : 1;
        const tide_iov *v = iov;
        iov += cnt;
        size_t len = 0;
        store_ref ref;
        int rc = client_key_check(&keys[i]);
        /* A value too long for the caller's room: its size, counted as neither a hit nor
         * a miss (store_pin_cap). */
        if (rc == 0)
            rc = store_pin_cap(m->st, keys[i].data, keys[i].len, 0, iov_total(v, cnt), &ref);
        if (rc == TIDE_EBUFSMALL) len = ref.len;
        if (rc == 0) {
            len = ref.len;
            uint64_t sum = copy_scatter(v, cnt, base + ref.offset, ref.len, m->verify);
            if (m->verify && sum != ref.checksum) {
                store_verify_failed(m->st, ref.id);
                rc = TIDE_ENOTFOUND;
                len = 0;
            } else {
                out += ref.len;
            }
            store_unpin_chain(m->st, ref.id, &chain);
        }
        if (vlens) vlens[i] = len;
        results[i] = rc;
        ok += rc == 0;
    }
    store_count_io(m->st, 0, out);
    return ok;
}

/* A value queued for device copies: which key, and the ticket its copies end at. */
typedef struct mem_dev_item {
    size_t i;
    store_ref ref;
    uint64_t ticket;
} mem_dev_item;

/* Flush the copies collected for items [from, to) and give them the ticket. */
static int mem_dev_flush(dev_queue *q, mem_dev_item *it, size_t from, size_t to, char *msg,
                         size_t mlen) {
    uint64_t t = 0;
    int rc = dev_queue_flush(q, &t, msg, mlen);
    for (size_t k = from; k < to; k++)
        it[k].ticket = t;
    return rc;
}

/* The items, their pool addresses and lengths, and their sums: one allocation. */
typedef struct mem_dev_batch {
    mem_dev_item *it;
    const uint8_t **ptr;
    size_t *len;
    uint64_t *sum;
} mem_dev_batch;

static int mem_dev_batch_alloc(mem_dev_batch *b, size_t n) {
    b->it = malloc(n * sizeof(*b->it));
    b->ptr = malloc(n * sizeof(*b->ptr));
    b->len = malloc(n * sizeof(*b->len));
    b->sum = malloc(n * sizeof(*b->sum));
    return b->it && b->ptr && b->len && b->sum ? 0 : -ENOMEM;
}

static void mem_dev_batch_free(mem_dev_batch *b) {
    free(b->it), free(b->ptr), free(b->len), free(b->sum);
}

static int mem_put_many_dev(tide_store *s, const tide_key *keys, size_t n, const tide_iov *iov,
                            const size_t *iovcnt, int *results, dev_queue *q) {
    char msg[ERR_MSG_MAX] = "";
    store *st = mem_store(s);
    uint8_t *base = store_base(st);
    mem_dev_batch b;
    if (mem_dev_batch_alloc(&b, n) < 0) {
        mem_dev_batch_free(&b);
        return client_err(s, -ENOMEM, "mem://: out of memory");
    }
    mem_dev_item *it = b.it;
    size_t nit = 0, flushed = 0, pending = 0;
    int ok = 0, failed = 0;
    uint64_t in = 0;
    for (size_t i = 0; i < n; i++) {
        size_t cnt = iovcnt ? iovcnt[i] : 1;
        const tide_iov *v = iov;
        iov += cnt;
        size_t vlen;
        store_ref ref;
        int rc = mem_reserve(st, &keys[i], v, cnt, &vlen, &ref);
        if (rc == STORE_DUP)
            rc = 0;
        else if (rc == 0) {
            it[nit] = (mem_dev_item){i, ref, 0};
            b.ptr[nit] = base + ref.offset;
            b.len[nit] = vlen;
            if (!failed && devio_gather(q, base + ref.offset, v, cnt) < 0) failed = -ENOMEM;
            nit++;
            if ((pending += vlen) >= DEVIO_CHUNK) {
                if (!failed) failed = mem_dev_flush(q, it, flushed, nit, msg, sizeof(msg));
                flushed = nit;
                pending = 0;
            }
        }
        results[i] = rc;
    }
    if (!failed && flushed < nit) failed = mem_dev_flush(q, it, flushed, nit, msg, sizeof(msg));
    if (failed) dev_queue_discard(q);
    /* As each chunk lands, its values are released for hashing in the pool (on several
     * threads) while the next chunk is still copying. The waits go on after a failure, so
     * that nothing is copying into space when it is aborted. */
    devio_hasher *h = devio_hash_start(b.ptr, b.len, b.sum, nit);
    store_chain chain = STORE_CHAIN_INIT;
    uint64_t waited = 0;
    int wrc = failed ? failed : h ? 0 : -ENOMEM;
    size_t good = 0; /* items [0, good) landed */
    for (size_t k = 0; k < nit; k++) {
        if (it[k].ticket == waited) continue;
        int r = dev_queue_wait(q, it[k].ticket, msg, sizeof(msg));
        if (!wrc) wrc = r;
        waited = it[k].ticket;
        if (wrc) continue;
        while (good < nit && it[good].ticket == waited)
            good++;
        devio_hash_release(h, good);
    }
    for (size_t k = 0; k < nit; k++) {
        if (k >= good) {
            store_abort(st, it[k].ref.id);
            results[it[k].i] = TIDE_EDEVICE;
            continue;
        }
        devio_hash_wait(h, k);
        results[it[k].i] =
            store_commit_chain(st, it[k].ref.id, b.sum[k], &chain, n > 1 && it[k].i + 1 == n);
        in += it[k].ref.len;
    }
    devio_hash_end(h);
    if (wrc) client_err(s, TIDE_EDEVICE, "mem://: copies from the device failed: %s", msg);
    for (size_t i = 0; i < n; i++)
        ok += results[i] == 0;
    store_count_io(st, in, 0);
    mem_dev_batch_free(&b);
    return ok;
}

static int mem_get_many_dev(tide_store *s, const tide_key *keys, size_t n, const tide_iov *iov,
                            const size_t *iovcnt, int *results, size_t *vlens, dev_queue *q) {
    char msg[ERR_MSG_MAX] = "";
    mem_impl *m = s->impl;
    uint8_t *base = store_base(m->st);
    mem_dev_batch b;
    const tide_iov **fv = malloc(n * sizeof(*fv));
    size_t *fcnt = malloc(n * sizeof(*fcnt));
    if (mem_dev_batch_alloc(&b, n) < 0 || !fv || !fcnt) {
        mem_dev_batch_free(&b);
        free(fv), free(fcnt);
        return client_err(s, -ENOMEM, "mem://: out of memory");
    }
    mem_dev_item *it = b.it;
    size_t nit = 0, flushed = 0, pending = 0;
    int ok = 0, failed = 0;
    uint64_t out = 0;
    store_chain chain = STORE_CHAIN_INIT; /* pins released in batch order, as mem_get_many */
    /* Pin everything first, so that the checksums can be computed on several threads. */
    for (size_t i = 0; i < n; i++) {
        size_t cnt = iovcnt ? iovcnt[i] : 1;
        const tide_iov *v = iov;
        iov += cnt;
        store_ref ref;
        int rc = client_key_check(&keys[i]);
        if (vlens) vlens[i] = 0;
        if (rc == 0)
            rc = store_pin_cap(m->st, keys[i].data, keys[i].len, 0, iov_total(v, cnt), &ref);
        if (rc == TIDE_EBUFSMALL) {
            if (vlens) vlens[i] = ref.len; /* size only: not counted (store_pin_cap) */
        } else if (rc == 0) {
            it[nit] = (mem_dev_item){i, ref, 0};
            b.ptr[nit] = base + ref.offset;
            b.len[nit] = ref.len;
            fv[nit] = v;
            fcnt[nit++] = cnt;
        }
        results[i] = rc;
    }
    devio_hasher *h = m->verify ? devio_hash_start(b.ptr, b.len, b.sum, nit) : NULL;
    if (m->verify && !h) failed = -ENOMEM;
    if (h) devio_hash_release(h, nit);
    /* In order: a value's checksum is checked before its copies are queued, so a damaged
     * value never reaches the device; chunks of copies go out as they fill. */
    for (size_t k = 0; k < nit; k++) {
        if (h) devio_hash_wait(h, k);
        if (h && b.sum[k] != it[k].ref.checksum) {
            store_verify_failed(m->st, it[k].ref.id);
            results[it[k].i] = TIDE_ENOTFOUND;
            it[k].ref.len = 0; /* nothing queued for it */
        } else if (!failed && devio_scatter(q, fv[k], fcnt[k], b.ptr[k], it[k].ref.len) < 0) {
            failed = -ENOMEM;
        }
        if ((pending += it[k].ref.len) >= DEVIO_CHUNK) {
            if (!failed) failed = mem_dev_flush(q, it, flushed, k + 1, msg, sizeof(msg));
            flushed = k + 1;
            pending = 0;
        }
    }
    devio_hash_end(h);
    if (!failed && flushed < nit) failed = mem_dev_flush(q, it, flushed, nit, msg, sizeof(msg));
    if (failed) dev_queue_discard(q);
    uint64_t waited = 0;
    int wrc = failed;
    for (size_t k = 0; k < nit; k++) {
        if (it[k].ticket != waited) {
            int r = dev_queue_wait(q, it[k].ticket, msg, sizeof(msg));
            if (!wrc) wrc = r;
            waited = it[k].ticket;
        }
        if (results[it[k].i] != 0) {
            /* failed its checksum */
        } else if (wrc) {
            results[it[k].i] = TIDE_EDEVICE;
        } else {
            if (vlens) vlens[it[k].i] = it[k].ref.len;
            out += it[k].ref.len;
        }
        store_unpin_chain(m->st, it[k].ref.id, &chain);
    }
    if (wrc) client_err(s, TIDE_EDEVICE, "mem://: copies to the device failed: %s", msg);
    for (size_t i = 0; i < n; i++)
        ok += results[i] == 0;
    store_count_io(m->st, 0, out);
    mem_dev_batch_free(&b);
    free(fv), free(fcnt);
    return ok;
}

static int mem_pool(tide_store *s, void **base, uint64_t *len) {
    store *st = mem_store(s);
    *base = store_base(st);
    *len = (store_capacity(st) + 4095) & ~(uint64_t)4095; /* whole pages: the mapping's */
    return 0;
}

static int mem_exists_many(tide_store *s, const tide_key *keys, size_t n, uint8_t *present) {
    store *st = mem_store(s);
    int count = 0;
    for (size_t i = 0; i < n; i++) {
        present[i] =
            client_key_check(&keys[i]) == 0 && store_exists(st, keys[i].data, keys[i].len) == 1;
        count += present[i];
    }
    return count;
}

static int mem_remove_many(tide_store *s, const tide_key *keys, size_t n, int *results) {
    store *st = mem_store(s);
    int count = 0;
    for (size_t i = 0; i < n; i++) {
        int rc = client_key_check(&keys[i]);
        results[i] = rc ? rc : store_remove(st, keys[i].data, keys[i].len);
        count += results[i] == 0;
    }
    return count;
}

static int mem_match_prefix(tide_store *s, const tide_key *keys, size_t n) {
    store *st = mem_store(s);
    size_t i = 0;
    while (i < n && client_key_check(&keys[i]) == 0 &&
           store_exists(st, keys[i].data, keys[i].len) == 1)
        i++;
    return (int)i;
}

static int mem_clear(tide_store *s) {
    int rc = store_clear(mem_store(s));
    return rc ? client_err(s, rc, "mem://: clear not recorded on the SSD tier: %s",
                           tide_strerror(rc))
              : 0;
}

static int mem_events(tide_store *s, uint64_t from, tide_event *ev, size_t max, uint64_t *next,
                      uint64_t *lost) {
    return (int)store_events_get(mem_store(s), from, ev, max, next, lost);
}

static int mem_stats(tide_store *s, tide_stats *st) {
    store_stats(mem_store(s), st);
    return 0;
}

const backend_ops mem_backend = {
    .scheme = "mem",
    .open = mem_open,
    .close = mem_close,
    .put_many = mem_put_many,
    .get_many = mem_get_many,
    .exists_many = mem_exists_many,
    .remove_many = mem_remove_many,
    .match_prefix = mem_match_prefix,
    .clear = mem_clear,
    .stats = mem_stats,
    .events = mem_events,
    .pool = mem_pool,
    .put_many_dev = mem_put_many_dev,
    .get_many_dev = mem_get_many_dev,
};
