/*
 * unixshm.c — the unix:// backend: a tided on this host, reached through its Unix socket,
 * with value bytes copied straight between the caller's memory and tided's pool.
 *
 *   unix:///path/to/tide.sock[?timeout_ms=5000&conns=4&token=SECRET&verify=1&populate=0]
 *
 * On each connection the HELLO asks for FRAME_FEATURE_SHM; tided's reply carries the pool's
 * memfd (SCM_RIGHTS). The first connection maps it MAP_SHARED (with MAP_POPULATE when
 * populate=1, so no page of it faults later); later connections must bring the same memfd
 * (device and inode), else tided restarted and the handle fails with TIDE_ECLOSED (reopen).
 *
 *   put: RESERVE (one round trip for a batch: tided allocates, returns offsets) -> copy each
 *        scatter list into the pool, hashing it on the way -> COMMIT (one round trip) with
 *        those checksums. Keys that exist already come back with id 0: nothing to copy.
 *   get: PIN (one round trip: offsets, lengths, checksums) -> copy out into each scatter
 *        list, hashing what landed (verify=1) -> RELEASE, reporting any mismatch so tided
 *        drops the object; the key is then a miss, never wrong data. With verify=1 the
 *        RELEASE is sent without waiting for its reply (the checksum already proved the
 *        bytes, so its answer changes nothing): the connection reads that reply before the
 *        reply of its next request, and a get costs one round trip, not two.
 *   exists, remove, match_prefix, clear, stats: the native frames, as on tide:// (wire.c).
 *
 * Leases: tided gives every reservation and pin a deadline and also ties it to the
 * connection, so a caller that dies mid-put or mid-get leaves nothing behind. A call holds
 * one connection from its RESERVE/PIN to its COMMIT/RELEASE; any failure in between closes
 * that connection, which makes tided abort or release whatever it held. A pin whose lease
 * ran out before RELEASE (RELEASE answers TIDE_ENOTFOUND) is a miss when verify=0, because
 * the space may have been reused during the copy; with verify=1 the checksum already proved
 * the bytes.
 *
 * Connections, HELLO and the requests without values are wire.c's (s->impl starts with a
 * wire); unlike tide://, a failed call is not retried: a fresh connection could meet a
 * restarted tided, whose pool is not the one mapped.
 *
 * Offsets from tided are checked against the mapping before any copy: a bad one fails the
 * call with TIDE_EPROTO instead of touching memory outside the pool.
 *
 * Device values (put_many_dev / get_many_dev, the same exchanges): the copies between the
 * device and the mapped pool go through the caller's device queue, a chunk (DEVIO_CHUNK) at
 * a time. A put hashes each value in the pool once its chunk landed, then COMMITs. A get
 * checks each value's checksum in the pool before its copies are queued (verify=1), waits
 * for them, and always waits for the RELEASE reply: a pin that lapsed while the device was
 * copying makes the key a miss. A failed copy fails the call (TIDE_EDEVICE) after every
 * queued copy has landed or failed, and the connection is closed, which makes tided abort
 * the reservations or drop the pins: nothing is committed or claimed.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "client/wire.h"

#define UX_DEFAULT_CONNS 4

typedef struct ux_impl {
    wire w; /* first: s->impl is also a wire */
    int verify, populate;
    /* The pool, mapped by the first connection at open; never changes after. */
    uint8_t *base;
    uint64_t map_size;
    uint64_t pool_dev, pool_ino;
} ux_impl;

/* ---- the pool mapping ----------------------------------------------------------------- */

/* Map the pool from the memfd tided passed (first connection), or check that a later
 * connection passed the same one. Closes fd. */
static int ux_adopt_pool(wire_call *k, int fd) {
    ux_impl *u = k->w->owner;
    struct stat sb;
    int rc = 0;
    if (fstat(fd, &sb) != 0) {
        rc = client_err(k->s, -errno, "%s: fstat of the pool's memfd: %s", u->w.addr,
                        strerror(errno));
    } else if (u->base) {
        if ((uint64_t)sb.st_dev != u->pool_dev || (uint64_t)sb.st_ino != u->pool_ino)
            rc = client_err(k->s, TIDE_ECLOSED,
                            "%s: tided restarted (it passed a different "
                            "pool); reopen the store",
                            u->w.addr);
    } else if (sb.st_size <= 0) {
        rc = client_err(k->s, TIDE_EPROTO, "%s: the pool's memfd is empty", u->w.addr);
    } else {
        int flags = MAP_SHARED | (u->populate ? MAP_POPULATE : 0);
        void *p = mmap(NULL, (size_t)sb.st_size, PROT_READ | PROT_WRITE, flags, fd, 0);
        if (p == MAP_FAILED) {
            rc = client_err(k->s, -errno, "%s: mmap of the %lld-byte pool: %s", u->w.addr,
                            (long long)sb.st_size, strerror(errno));
        } else {
            u->base = p;
            u->map_size = (uint64_t)sb.st_size;
            u->pool_dev = (uint64_t)sb.st_dev;
            u->pool_ino = (uint64_t)sb.st_ino;
        }
    }
    close(fd);
    return rc;
}

/* After HELLO: tided must have granted the shared pool and passed its memfd; map it or check
 * it. Takes fd. */
static int ux_on_hello(wire_call *k, const frame_msg *m, int fd) {
    if (!(m->hello_reply.features & FRAME_FEATURE_SHM) || fd < 0) {
        if (fd >= 0) close(fd);
        return client_err(k->s, TIDE_EUNSUPPORTED,
                          "%s: tided did not share its pool on this "
                          "socket (a tided without the shared-pool feature?)",
                          k->w->addr);
    }
    return ux_adopt_pool(k, fd);
}

/* Is [off, off + len) inside the mapped pool? */
static int ux_in_pool(const ux_impl *u, uint64_t off, uint64_t len) {
    return off <= u->map_size && len <= u->map_size - off;
}

/* ---- put ------------------------------------------------------------------------------ */

/* One RESERVE + copies + COMMIT for keys fk[0..n) on connection k. res[j] gets key j's
 * result. Returns 0, or a code that failed the whole exchange (the connection is then
 * broken). */
/* With a device queue: collect value j's copies into the pool at dst and flush every
 * DEVIO_CHUNK bytes; tickets[nc] = the ticket of the chunk holding it (set at the flush). */
typedef struct ux_dev {
    dev_queue *q;
    uint64_t *tickets;
    size_t flushed, pending;
    int rc, waited;
    char msg[ERR_MSG_MAX];
} ux_dev;

static void ux_dev_flush(ux_dev *d, size_t upto) {
    uint64_t t = 0;
    if (d->rc == 0) d->rc = dev_queue_flush(d->q, &t, d->msg, sizeof(d->msg));
    for (size_t i = d->flushed; i < upto; i++)
        d->tickets[i] = t;
    d->flushed = upto;
    d->pending = 0;
}

static void ux_dev_add(ux_dev *d, size_t nc, uint64_t len) {
    if ((d->pending += len) >= DEVIO_CHUNK) ux_dev_flush(d, nc + 1);
}

/* On a way out before ux_dev_wait_all (a bad offset from tided): drop what was collected
 * and wait for what was issued, so no copy still moves when the pins or reservations go. */
static void ux_dev_drain(ux_dev *d) {
    char scratch[ERR_MSG_MAX];
    if (!d->q || d->waited) return;
    dev_queue_discard(d->q);
    dev_queue_wait(d->q, d->q->ticket, scratch, sizeof(scratch));
    d->waited = 1;
}

/* Wait for every chunk (all of them, even after a failure, so no copy is still moving when
 * the caller lets go of the space); returns the first failure. With h, the values of each
 * chunk that landed are released for hashing while the next chunks are still copying. */
static int ux_dev_wait_all(ux_dev *d, size_t n, devio_hasher *h) {
    uint64_t waited = 0;
    size_t good = 0;
    d->waited = 1;
    if (d->flushed < n) ux_dev_flush(d, n);
    if (d->rc) dev_queue_discard(d->q);
    for (size_t i = 0; i < n; i++) {
        if (d->tickets[i] == waited) continue;
        waited = d->tickets[i];
        int r = dev_queue_wait(d->q, waited, d->rc ? (char[ERR_MSG_MAX]){0} : d->msg, ERR_MSG_MAX);
        if (!d->rc) d->rc = r;
        if (d->rc || !h) continue;
        while (good < n && d->tickets[good] == waited)
            good++;
        devio_hash_release(h, good);
    }
    return d->rc;
}

static int ux_put_chunk(wire_call *k, const tide_key *fk, const tide_iov *const *fv,
                        const size_t *fcnt, const uint64_t *vl, size_t n, int *res, size_t *lens,
                        void *arg) {
    (void)lens;
    tide_store *s = k->s;
    dev_queue *q = arg;
    ux_impl *u = k->w->owner;
    uint64_t *ids = malloc(n * sizeof(*ids)), *sums = malloc(n * sizeof(*sums));
    size_t *owner = malloc(n * sizeof(*owner));
    uint8_t *head = NULL;
    size_t head_len = 0, nc = 0;
    int rc = -ENOMEM;
    ux_dev d = {.q = q, .tickets = q ? calloc(n, sizeof(uint64_t)) : NULL};
    uint64_t *offs = q ? malloc(n * sizeof(*offs)) : NULL;
    const uint8_t **pptr = q ? malloc(n * sizeof(*pptr)) : NULL;
    size_t *plen = q ? malloc(n * sizeof(*plen)) : NULL;
    if (!ids || !sums || !owner || (q && (!d.tickets || !offs || !pptr || !plen))) {
        client_err(s, rc, "%s: out of memory", u->w.addr);
        goto out;
    }
    WIRE_ENCODE(s, rc, head, head_len, frame_encode_reserve(NULL, 0, len, 0, fk, vl, n),
                frame_encode_reserve(buf, cap, len, 0, fk, vl, n));
    if (rc) goto out;
    frame_msg m;
    if ((rc = wire_exchange_n(k, head, head_len, n, &m)) != 0) goto out;
    rc = TIDE_EPROTO;
    frame_iter it;
    frame_entry e;
    frame_iter_init(&it, &m);
    /* Copy each reserved value into the pool, hashing it on the way. */
    for (size_t j = 0; frame_iter_next(&it, &e); j++) {
        res[j] = e.status;
        if (e.status != 0 || e.id == 0) continue;
        if (!ux_in_pool(u, e.offset, vl[j])) {
            client_err(s, rc,
                       "%s: RESERVE gave offset %llu for %llu bytes, outside the "
                       "%llu-byte pool",
                       u->w.addr, (unsigned long long)e.offset, (unsigned long long)vl[j],
                       (unsigned long long)u->map_size);
            goto out;
        }
        if (q) {
            if (d.rc == 0) d.rc = devio_gather(q, u->base + e.offset, fv[j], fcnt[j]);
            offs[nc] = e.offset;
            ux_dev_add(&d, nc, vl[j]);
        } else {
            sums[nc] = copy_gather(u->base + e.offset, fv[j], fcnt[j], 1);
        }
        ids[nc] = e.id;
        owner[nc++] = j;
    }
    if (q) {
        /* Hash each value in the pool once its chunk landed, on several threads. */
        for (size_t i = 0; i < nc; i++) {
            pptr[i] = u->base + offs[i];
            plen[i] = vl[owner[i]];
        }
        devio_hasher *h = devio_hash_start(pptr, plen, sums, nc);
        int wr = ux_dev_wait_all(&d, nc, h);
        for (size_t i = 0; h && wr == 0 && i < nc; i++)
            devio_hash_wait(h, i);
        devio_hash_end(h);
        if (wr || !h) {
            rc = client_err(s, wr ? TIDE_EDEVICE : -ENOMEM, "%s: copies from the device: %s",
                            u->w.addr, wr ? d.msg : "out of memory");
            goto out;
        }
    }
    rc = 0;
    if (nc == 0) goto out;
    free(head);
    WIRE_ENCODE(s, rc, head, head_len, frame_encode_commit(NULL, 0, len, 0, ids, sums, nc),
                frame_encode_commit(buf, cap, len, 0, ids, sums, nc));
    if (rc) goto out;
    if ((rc = wire_exchange_n(k, head, head_len, nc, &m)) != 0) goto out;
    frame_iter_init(&it, &m);
    for (size_t i = 0; frame_iter_next(&it, &e); i++)
        res[owner[i]] = e.status;
out:
    ux_dev_drain(&d);
    free(head);
    free(ids);
    free(sums);
    free(owner);
    free(d.tickets);
    free(offs);
    free(pptr);
    free(plen);
    return rc;
}

static int ux_put(tide_store *s, const tide_key *keys, size_t n, const tide_iov *iov,
                  const size_t *iovcnt, int *results, dev_queue *q) {
    ux_impl *u = s->impl;
    return wire_batch(s, &u->w, 1, keys, n, iov, iovcnt, results, NULL, ux_put_chunk, q);
}

static int ux_put_many(tide_store *s, const tide_key *keys, size_t n, const tide_iov *iov,
                       const size_t *iovcnt, int *results) {
    return ux_put(s, keys, n, iov, iovcnt, results, NULL);
}

static int ux_put_many_dev(tide_store *s, const tide_key *keys, size_t n, const tide_iov *iov,
                           const size_t *iovcnt, int *results, dev_queue *q) {
    return ux_put(s, keys, n, iov, iovcnt, results, q);
}

/* ---- get ------------------------------------------------------------------------------ */

/* One PIN + copies + RELEASE for keys fk[0..n). res[j] and lens[j] get key j's result. */
static int ux_get_chunk(wire_call *k, const tide_key *fk, const tide_iov *const *fv,
                        const size_t *fcnt, const uint64_t *caps, size_t n, int *res, size_t *lens,
                        void *arg) {
    tide_store *s = k->s;
    dev_queue *q = arg;
    ux_impl *u = k->w->owner;
    uint64_t *ids = malloc(n * sizeof(*ids));
    int32_t *outs = malloc(n * sizeof(*outs));
    size_t *owner = malloc(n * sizeof(*owner));
    uint8_t *head = NULL;
    size_t head_len = 0, nr = 0;
    int rc = -ENOMEM;
    ux_dev d = {.q = q, .tickets = q ? calloc(n, sizeof(uint64_t)) : NULL};
    /* Device copies: each pinned value's place, length, stored and computed checksum. */
    const uint8_t **gptr = q ? malloc(n * sizeof(*gptr)) : NULL;
    size_t *glen = q ? malloc(n * sizeof(*glen)) : NULL;
    uint64_t *gwant = q ? malloc(n * sizeof(*gwant)) : NULL;
    uint64_t *gsum = q ? malloc(n * sizeof(*gsum)) : NULL;
    if (!ids || !outs || !owner || (q && (!d.tickets || !gptr || !glen || !gwant || !gsum))) {
        client_err(s, rc, "%s: out of memory", u->w.addr);
        goto out;
    }
    WIRE_ENCODE(s, rc, head, head_len, frame_encode_pin(NULL, 0, len, 0, fk, caps, n),
                frame_encode_pin(buf, cap, len, 0, fk, caps, n));
    if (rc) goto out;
    frame_msg m;
    if ((rc = wire_exchange_n(k, head, head_len, n, &m)) != 0) goto out;
    rc = TIDE_EPROTO;
    frame_iter it;
    frame_entry e;
    frame_iter_init(&it, &m);
    /* Copy each pinned value out, hashing what lands in the caller's memory. */
    for (size_t j = 0; frame_iter_next(&it, &e); j++) {
        res[j] = e.status;
        lens[j] = e.status == 0 || e.status == TIDE_EBUFSMALL ? e.vlen : 0;
        if (e.status != 0) continue;
        ids[nr] = e.id;
        outs[nr] = 0;
        owner[nr++] = j;
        if (!ux_in_pool(u, e.offset, e.vlen) || e.vlen > caps[j]) {
            client_err(s, rc,
                       "%s: PIN gave %llu bytes at offset %llu: outside the %llu-byte "
                       "pool or beyond the %llu bytes asked for",
                       u->w.addr, (unsigned long long)e.vlen, (unsigned long long)e.offset,
                       (unsigned long long)u->map_size, (unsigned long long)caps[j]);
            goto out;
        }
        if (q) { /* checked and copied below, once every value is pinned */
            gptr[nr - 1] = u->base + e.offset;
            glen[nr - 1] = e.vlen;
            gwant[nr - 1] = e.sum;
            continue;
        }
        uint64_t h = copy_scatter(fv[j], fcnt[j], u->base + e.offset, e.vlen, u->verify);
        if (u->verify && h != e.sum) {
            char kb[80];
            client_err(s, TIDE_ECHECKSUM,
                       "%s: value of key '%s' failed its checksum; reported "
                       "as a miss",
                       u->w.addr, client_key_repr(fk[j].data, fk[j].len, kb, sizeof(kb)));
            outs[nr - 1] = TIDE_ECHECKSUM;
            res[j] = TIDE_ENOTFOUND;
            lens[j] = 0;
        }
    }
    if (q) {
        /* Checksums on several threads; each value checked before its copies are queued, so
         * a damaged value never reaches the device. */
        devio_hasher *h = u->verify ? devio_hash_start(gptr, glen, gsum, nr) : NULL;
        if (u->verify && !h) d.rc = -ENOMEM;
        if (h) devio_hash_release(h, nr);
        for (size_t i = 0; i < nr && d.rc == 0; i++) {
            size_t j = owner[i];
            if (h) devio_hash_wait(h, i);
            if (h && gsum[i] != gwant[i]) {
                char kb[80];
                client_err(s, TIDE_ECHECKSUM,
                           "%s: value of key '%s' failed its checksum; reported as a miss",
                           u->w.addr, client_key_repr(fk[j].data, fk[j].len, kb, sizeof(kb)));
                outs[i] = TIDE_ECHECKSUM;
                res[j] = TIDE_ENOTFOUND;
                lens[j] = 0;
                continue;
            }
            d.rc = devio_scatter(q, fv[j], fcnt[j], gptr[i], glen[i]);
            ux_dev_add(&d, i, glen[i]);
        }
        devio_hash_end(h);
        if (ux_dev_wait_all(&d, nr, NULL)) {
            rc = client_err(s, TIDE_EDEVICE, "%s: copies to the device failed: %s", u->w.addr,
                            d.msg);
            goto out;
        }
    }
    rc = 0;
    if (nr == 0) goto out;
    free(head);
    WIRE_ENCODE(s, rc, head, head_len, frame_encode_release(NULL, 0, len, 0, ids, outs, nr),
                frame_encode_release(buf, cap, len, 0, ids, outs, nr));
    if (rc) goto out;
    if (u->verify && !q) {
        /* Every copy was checked: send and go; a connection that cannot send is closed,
         * which releases the pins just as well. */
        wire_send_nowait(k, head, head_len);
        goto out;
    }
    if ((rc = wire_exchange_n(k, head, head_len, nr, &m)) != 0) goto out;
    frame_iter_init(&it, &m);
    for (size_t i = 0; frame_iter_next(&it, &e); i++) {
        /* The pin lapsed before the copy was known good (without a checksum, or with a
         * device copy that read the pool after the check): a miss. */
        if (e.status != 0 && (!u->verify || q) && res[owner[i]] == 0) {
            res[owner[i]] = TIDE_ENOTFOUND;
            lens[owner[i]] = 0;
        }
    }
out:
    ux_dev_drain(&d);
    free(head);
    free(ids);
    free(outs);
    free(owner);
    free(d.tickets);
    free(gptr), free(glen), free(gwant), free(gsum);
    return rc;
}

static int ux_get(tide_store *s, const tide_key *keys, size_t n, const tide_iov *iov,
                  const size_t *iovcnt, int *results, size_t *vlens, dev_queue *q) {
    ux_impl *u = s->impl;
    return wire_batch(s, &u->w, 0, keys, n, iov, iovcnt, results, vlens, ux_get_chunk, q);
}

static int ux_get_many(tide_store *s, const tide_key *keys, size_t n, const tide_iov *iov,
                       const size_t *iovcnt, int *results, size_t *vlens) {
    return ux_get(s, keys, n, iov, iovcnt, results, vlens, NULL);
}

static int ux_get_many_dev(tide_store *s, const tide_key *keys, size_t n, const tide_iov *iov,
                           const size_t *iovcnt, int *results, size_t *vlens, dev_queue *q) {
    return ux_get(s, keys, n, iov, iovcnt, results, vlens, q);
}

static int ux_pool(tide_store *s, void **base, uint64_t *len) {
    ux_impl *u = s->impl;
    *base = u->base;
    *len = u->map_size;
    return 0;
}

/* ---- open / close -------------------------------------------------------------------- */

static void ux_close(tide_store *s) {
    ux_impl *u = s->impl;
    if (!u) return;
    wire_destroy(&u->w);
    if (u->base) munmap(u->base, u->map_size);
    free(u);
    s->impl = NULL;
}

static int ux_open(tide_store *s, url *uo) {
    char msg[ERR_MSG_MAX];
    const size_t path_max = sizeof(((struct sockaddr_un *)0)->sun_path) - 1;
    if (uo->authority[0] || uo->path[0] != '/')
        return client_err(s, TIDE_EURL, "unix://%s%s: expected unix:///ABSOLUTE/PATH/OF/tide.sock",
                          uo->authority, uo->path);
    if (strlen(uo->path) > path_max)
        return client_err(s, TIDE_EURL, "unix://%s: the socket path is longer than %zu bytes",
                          uo->path, path_max);
    char name[sizeof(((struct sockaddr_un *)0)->sun_path) + 8];
    snprintf(name, sizeof(name), "unix://%s", uo->path);
    uint64_t timeout_ms, conns;
    const char *token;
    int verify, populate;
    int rc = wire_url_opts(s, uo, name, UX_DEFAULT_CONNS, &timeout_ms, &conns, &token);
    if (rc) return rc;
    if ((rc = url_opt_bool(uo, "verify", 1, &verify, msg, sizeof(msg))) ||
        (rc = url_opt_bool(uo, "populate", 0, &populate, msg, sizeof(msg))))
        return client_err(s, rc, "%s: %s", name, msg);
    if ((rc = url_check_unused(uo, msg, sizeof(msg))) != 0)
        return client_err(s, rc, "%s: %s", name, msg);

    ux_impl *u = calloc(1, sizeof(*u));
    if (!u) return client_err(s, -ENOMEM, "out of memory");
    s->impl = u;
    u->verify = verify;
    u->populate = populate;
    struct sockaddr_un *sa = (struct sockaddr_un *)&u->w.sa;
    sa->sun_family = AF_UNIX;
    memcpy(sa->sun_path, uo->path, strlen(uo->path) + 1);
    u->w.salen = sizeof(*sa);
    snprintf(u->w.addr, sizeof(u->w.addr), "%s", name);
    u->w.features = FRAME_FEATURE_SHM;
    u->w.heads_only = 1;
    u->w.on_hello = ux_on_hello;
    u->w.owner = u;
    /* Connect now: a wrong path, mode or token fails tide_open, and the pool is mapped. */
    if ((rc = wire_init(s, &u->w, (int)conns, timeout_ms, token)) != 0 ||
        (rc = wire_connect_now(s, &u->w)) != 0)
        ux_close(s);
    return rc;
}

const backend_ops unix_backend = {
    .scheme = "unix",
    .open = ux_open,
    .close = ux_close,
    .put_many = ux_put_many,
    .get_many = ux_get_many,
    .exists_many = wire_exists_many,
    .remove_many = wire_remove_many,
    .match_prefix = wire_match_prefix,
    .clear = wire_clear,
    .stats = wire_stats,
    .events = wire_events,
    .pool = ux_pool,
    .put_many_dev = ux_put_many_dev,
    .get_many_dev = ux_get_many_dev,
};
