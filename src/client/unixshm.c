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
 *   exists, remove, match_prefix, clear, stats: the native frames, as on tide://.
 *
 * Leases: tided gives every reservation and pin a deadline and also ties it to the
 * connection, so a caller that dies mid-put or mid-get leaves nothing behind. A call holds
 * one connection from its RESERVE/PIN to its COMMIT/RELEASE; any failure in between closes
 * that connection, which makes tided abort or release whatever it held. A pin whose lease
 * ran out before RELEASE (RELEASE answers TIDE_ENOTFOUND) is a miss when verify=0, because
 * the space may have been reused during the copy; with verify=1 the checksum already proved
 * the bytes.
 *
 * Offsets from tided are checked against the mapping before any copy: a bad one fails the
 * call with TIDE_EPROTO instead of touching memory outside the pool.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "client/client.h"
#include "common/checksum.h"
#include "proto/frame.h"

#define UX_DEFAULT_TIMEOUT_MS 5000
#define UX_DEFAULT_CONNS 4

typedef struct ux_conn {
    int fd;
    int busy;
    uint64_t next_req;
    int unread;   /* replies to RELEASEs sent without waiting, read before the next reply */
    uint8_t *buf; /* reply head buffer */
    size_t buf_cap;
    frame_decoder dec;
} ux_conn;

typedef struct ux_impl {
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    char addr[sizeof(((struct sockaddr_un *)0)->sun_path) + 8]; /* "unix://PATH" */
    uint64_t timeout_ns;
    char token[FRAME_TOKEN_MAX + 1];
    int verify, populate;
    int nconns;
    ux_conn *conns;
    pthread_mutex_t lock;
    pthread_cond_t idle;
    uint32_t max_keys; /* the server's limits, from HELLO (under lock) */
    uint64_t max_frame;
    /* The pool, mapped by the first connection at open; never changes after. */
    uint8_t *base;
    uint64_t map_size;
    uint64_t pool_dev, pool_ino;
} ux_impl;

/* A call in progress: its deadline and the connection it holds. */
typedef struct ux_call {
    tide_store *s;
    ux_impl *u;
    ux_conn *c;
    uint64_t deadline;
} ux_call;

/* ---- socket I/O with a deadline ------------------------------------------------------- */

static int ux_wait(ux_call *k, short events) {
    for (;;) {
        uint64_t now = now_ns();
        if (now >= k->deadline) return -ETIMEDOUT;
        int ms = (int)((k->deadline - now + 999999) / 1000000);
        struct pollfd p = {k->c->fd, events, 0};
        int r = poll(&p, 1, ms);
        if (r > 0) return 0;
        if (r == 0) return -ETIMEDOUT;
        if (errno != EINTR) return -errno;
    }
}

static int ux_send(ux_call *k, const uint8_t *p, size_t len) {
    while (len) {
        ssize_t w = send(k->c->fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK) return -errno;
            int rc = ux_wait(k, POLLOUT);
            if (rc) return rc;
            continue;
        }
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

/* Receive exactly len bytes. A file descriptor passed with them goes to *fd when fd is not
 * NULL and *fd is still -1; any other is closed (a client never keeps fds it did not ask
 * for). */
static int ux_recv(ux_call *k, uint8_t *p, size_t len, int *fd) {
    while (len) {
        union {
            struct cmsghdr h;
            char buf[CMSG_SPACE(4 * sizeof(int))];
        } ctl;
        struct iovec v = {p, len};
        struct msghdr mh = {.msg_iov = &v,
                            .msg_iovlen = 1,
                            .msg_control = ctl.buf,
                            .msg_controllen = sizeof(ctl.buf)};
        ssize_t r = recvmsg(k->c->fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (r < 0) {
            if (errno == EINTR) continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK) return -errno;
            int rc = ux_wait(k, POLLIN);
            if (rc) return rc;
            continue;
        }
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
            if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
            size_t nfd = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t i = 0; i < nfd; i++) {
                int got;
                memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
                if (fd && *fd < 0)
                    *fd = got;
                else
                    close(got);
            }
        }
        if (r == 0) return -ECONNRESET;
        p += r;
        len -= (size_t)r;
    }
    return 0;
}

/* Read one reply's header and key section (no value bytes follow on this backend). */
static int ux_recv_head(ux_call *k, frame_msg *m, int *fd) {
    ux_conn *c = k->c;
    size_t have = 0;
    for (;;) {
        ssize_t n = frame_decode_head(&c->dec, c->buf, have, m);
        if (n < 0) return client_err(k->s, (int)n, "%s: bad reply: %s", k->u->addr, c->dec.errstr);
        if (n > 0) {
            if (m->data_len)
                return client_err(k->s, TIDE_EPROTO, "%s: %s reply carries value bytes", k->u->addr,
                                  frame_op_name(m->h.opcode));
            return 0;
        }
        size_t want = have + c->dec.need;
        if (want > c->buf_cap) {
            size_t cap = c->buf_cap;
            while (cap < want)
                cap *= 2;
            uint8_t *grown = realloc(c->buf, cap);
            if (!grown) return client_err(k->s, -ENOMEM, "%s: out of memory", k->u->addr);
            c->buf = grown;
            c->buf_cap = cap;
        }
        int rc = ux_recv(k, c->buf + have, c->dec.need, fd);
        if (rc) return rc;
        have = want;
    }
}

/* Name an I/O failure once, with the socket path and the errno. */
static int ux_io_fail(ux_call *k, const char *what, int rc) {
    if (rc == -ETIMEDOUT)
        return client_err(k->s, rc, "%s: %s timed out after %llu ms", k->u->addr, what,
                          (unsigned long long)(k->u->timeout_ns / 1000000));
    if (rc == -ECONNRESET || rc == -EPIPE)
        return client_err(k->s, rc, "%s: %s: tided closed the connection (%s)", k->u->addr, what,
                          strerror(-rc));
    if (rc > -TIDE_ERRBASE)
        return client_err(k->s, rc, "%s: %s: %s", k->u->addr, what, strerror(-rc));
    return rc; /* a tide code: the message is already set */
}

/* Send one request frame and read its reply's head into *m (valid until the connection's
 * next read). An error reply becomes its status, with tided's message. */
static int ux_exchange(ux_call *k, uint8_t *head, size_t head_len, const char *what, frame_msg *m) {
    unsigned op = head[5];
    uint64_t req_id = k->c->next_req++;
    frame_wr64(head + 8, req_id); /* every encoder puts req_id at offset 8 */
    int rc = ux_send(k, head, head_len);
    if (rc) return ux_io_fail(k, what, rc);
    /* Replies come in order: first those of the RELEASEs not waited for. Their statuses
     * matter to nobody (see atop), only that they are RELEASE replies. */
    for (; k->c->unread > 0; k->c->unread--) {
        if ((rc = ux_recv_head(k, m, NULL)) != 0) return ux_io_fail(k, what, rc);
        if (m->h.opcode != (FRAME_OP_RELEASE | FRAME_OP_REPLY))
            return client_err(k->s, TIDE_EPROTO, "%s: %s answered a RELEASE", k->u->addr,
                              frame_op_name(m->h.opcode));
    }
    if ((rc = ux_recv_head(k, m, NULL)) != 0) return ux_io_fail(k, what, rc);
    if (m->h.status != 0)
        return client_err(k->s, m->h.status, "%s: %s failed: %.*s", k->u->addr, what,
                          (int)m->errmsg_len, m->errmsg ? m->errmsg : "");
    if (m->h.req_id != req_id || m->h.opcode != (op | FRAME_OP_REPLY))
        return client_err(k->s, TIDE_EPROTO, "%s: %s answered with %s for request %llu", k->u->addr,
                          what, frame_op_name(m->h.opcode), (unsigned long long)m->h.req_id);
    return 0;
}

/* ---- connections and the pool mapping ------------------------------------------------- */

static void ux_conn_close(ux_conn *c) {
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
}

/* Map the pool from the memfd tided passed (first connection), or check that a later
 * connection passed the same one. Closes fd. */
static int ux_adopt_pool(ux_call *k, int fd) {
    ux_impl *u = k->u;
    struct stat sb;
    int rc = 0;
    if (fstat(fd, &sb) != 0) {
        rc =
            client_err(k->s, -errno, "%s: fstat of the pool's memfd: %s", u->addr, strerror(errno));
    } else if (u->base) {
        if ((uint64_t)sb.st_dev != u->pool_dev || (uint64_t)sb.st_ino != u->pool_ino)
            rc = client_err(k->s, TIDE_ECLOSED,
                            "%s: tided restarted (it passed a different "
                            "pool); reopen the store",
                            u->addr);
    } else if (sb.st_size <= 0) {
        rc = client_err(k->s, TIDE_EPROTO, "%s: the pool's memfd is empty", u->addr);
    } else {
        int flags = MAP_SHARED | (u->populate ? MAP_POPULATE : 0);
        void *p = mmap(NULL, (size_t)sb.st_size, PROT_READ | PROT_WRITE, flags, fd, 0);
        if (p == MAP_FAILED) {
            rc = client_err(k->s, -errno, "%s: mmap of the %lld-byte pool: %s", u->addr,
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

/* HELLO asking for the shared pool; maps it or checks it. */
static int ux_hello(ux_call *k) {
    ux_impl *u = k->u;
    frame_hello h = {FRAME_VERSION, FRAME_VERSION, FRAME_FEATURE_SHM, (const uint8_t *)u->token,
                     (uint16_t)strlen(u->token)};
    if (!h.token_len) h.token = NULL;
    uint8_t buf[FRAME_HDR_SIZE + FRAME_HELLO_META + FRAME_TOKEN_MAX];
    size_t len;
    int rc = frame_encode_hello(buf, sizeof(buf), &len, k->c->next_req++, &h);
    if (rc) return client_err(k->s, rc, "%s: cannot encode HELLO", u->addr);
    if ((rc = ux_send(k, buf, len)) != 0) return ux_io_fail(k, "HELLO", rc);
    frame_msg m;
    int fd = -1;
    rc = ux_recv_head(k, &m, &fd);
    if (rc == 0 && m.h.status != 0)
        rc = client_err(k->s, m.h.status, "%s: HELLO refused: %.*s", u->addr, (int)m.errmsg_len,
                        m.errmsg ? m.errmsg : "");
    else if (rc == 0 && m.h.opcode != (FRAME_OP_HELLO | FRAME_OP_REPLY))
        rc = client_err(k->s, TIDE_EPROTO, "%s: HELLO answered with %s", u->addr,
                        frame_op_name(m.h.opcode));
    else if (rc == 0 && (!(m.hello_reply.features & FRAME_FEATURE_SHM) || fd < 0))
        rc = client_err(k->s, TIDE_EUNSUPPORTED,
                        "%s: tided did not share its pool on this "
                        "socket (a tided without the shared-pool feature?)",
                        u->addr);
    else if (rc)
        rc = ux_io_fail(k, "HELLO", rc);
    if (rc) {
        if (fd >= 0) close(fd);
        return rc;
    }
    pthread_mutex_lock(&u->lock);
    u->max_keys = m.hello_reply.max_keys;
    u->max_frame = m.hello_reply.max_frame;
    pthread_mutex_unlock(&u->lock);
    return ux_adopt_pool(k, fd);
}

static int ux_connect(ux_call *k) {
    ux_impl *u = k->u;
    ux_conn *c = k->c;
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    memcpy(a.sun_path, u->path, strlen(u->path) + 1);
    c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0) return client_err(k->s, -errno, "%s: socket: %s", u->addr, strerror(errno));
    for (;;) {
        if (connect(c->fd, (struct sockaddr *)&a, sizeof(a)) == 0) break;
        int e = errno;
        if ((e == EAGAIN || e == EINTR) && now_ns() < k->deadline) {
            /* The listener's backlog is full: nothing was started, try again shortly. */
            struct timespec d = {0, 1000000};
            nanosleep(&d, NULL);
            continue;
        }
        ux_conn_close(c);
        const char *hint = e == ENOENT || e == ECONNREFUSED ? " (is tided running with --unix "
                                                              "on this path?)"
                           : e == EACCES ? " (the socket's mode does not admit this user; see "
                                           "tide serve --unix-mode)"
                                         : "";
        return client_err(k->s, -e, "%s: connect: %s%s", u->addr, strerror(e), hint);
    }
    frame_decoder_reset(&c->dec);
    c->unread = 0;
    int rc = ux_hello(k);
    if (rc) ux_conn_close(c);
    return rc;
}

/* Take a connection for this call, opening one if none is idle. */
static int ux_take(ux_call *k) {
    ux_impl *u = k->u;
    pthread_mutex_lock(&u->lock);
    for (;;) {
        ux_conn *pick = NULL;
        for (int i = 0; i < u->nconns && !pick; i++)
            if (!u->conns[i].busy && u->conns[i].fd >= 0) pick = &u->conns[i];
        for (int i = 0; i < u->nconns && !pick; i++)
            if (!u->conns[i].busy) pick = &u->conns[i];
        if (pick) {
            pick->busy = 1;
            k->c = pick;
            break;
        }
        pthread_cond_wait(&u->idle, &u->lock);
    }
    pthread_mutex_unlock(&u->lock);
    return k->c->fd >= 0 ? 0 : ux_connect(k);
}

/* Give the connection back; a broken one is closed, which makes tided release whatever
 * leases it still held for it. */
static void ux_give(ux_call *k, int broken) {
    ux_impl *u = k->u;
    if (!k->c) return;
    if (broken) ux_conn_close(k->c);
    pthread_mutex_lock(&u->lock);
    k->c->busy = 0;
    pthread_cond_signal(&u->idle);
    pthread_mutex_unlock(&u->lock);
    k->c = NULL;
}

static ux_call ux_begin(tide_store *s) {
    ux_impl *u = s->impl;
    return (ux_call){s, u, NULL, now_ns() + u->timeout_ns};
}

/* How many keys (keys[0..left)) go in one frame: the server's key limit, and key sections
 * of at most half its frame limit. */
static size_t ux_chunk(ux_impl *u, const tide_key *keys, size_t left, size_t per_key) {
    pthread_mutex_lock(&u->lock);
    size_t mk = u->max_keys ? u->max_keys : FRAME_DEFAULT_MAX_KEYS;
    uint64_t mf = u->max_frame ? u->max_frame : FRAME_DEFAULT_MAX_FRAME;
    pthread_mutex_unlock(&u->lock);
    size_t take = 0;
    uint64_t bytes = FRAME_HDR_SIZE;
    while (take < left && take < mk) {
        uint64_t b = (keys ? 2 + keys[take].len : 0) + per_key;
        if (take > 0 && bytes + b > mf / 2) break;
        bytes += b;
        take++;
    }
    return take;
}

/* Encode into a malloc'd buffer: the size query, then the frame. */
#define UX_ENCODE(s, out, outlen, expr_null, expr_buf)                                             \
    do {                                                                                           \
        size_t *len = &(outlen);                                                                   \
        uint8_t *buf = NULL;                                                                       \
        size_t cap = 0;                                                                            \
        int erc = (expr_null);                                                                     \
        if (erc == TIDE_EBUFSMALL) {                                                               \
            cap = *len;                                                                            \
            buf = malloc(cap);                                                                     \
            erc = buf ? (expr_buf) : -ENOMEM;                                                      \
        }                                                                                          \
        if (erc) {                                                                                 \
            free(buf);                                                                             \
            buf = NULL;                                                                            \
            client_err(s, erc, "cannot encode request: %s", tide_strerror(erc));                   \
        }                                                                                          \
        (out) = buf;                                                                               \
    } while (0)

/* Is [off, off + len) inside the mapped pool? */
static int ux_in_pool(const ux_impl *u, uint64_t off, uint64_t len) {
    return off <= u->map_size && len <= u->map_size - off;
}

/* ---- put ------------------------------------------------------------------------------ */

/* One RESERVE + copies + COMMIT for keys fk[0..n) on connection k. res[j] gets key j's
 * result. Returns 0, or a code that failed the whole exchange (the connection is then
 * broken). */
static int ux_put_chunk(ux_call *k, const tide_key *fk, const tide_iov *const *fv,
                        const size_t *fcnt, const uint64_t *vl, size_t n, int *res) {
    tide_store *s = k->s;
    ux_impl *u = k->u;
    uint64_t *ids = malloc(n * sizeof(*ids)), *sums = malloc(n * sizeof(*sums));
    size_t *owner = malloc(n * sizeof(*owner));
    uint8_t *head = NULL;
    size_t head_len = 0, nc = 0;
    int rc = -ENOMEM;
    char what[64];
    if (!ids || !sums || !owner) {
        client_err(s, rc, "%s: out of memory", u->addr);
        goto out;
    }
    UX_ENCODE(s, head, head_len, frame_encode_reserve(NULL, 0, len, 0, fk, vl, n),
              frame_encode_reserve(buf, cap, len, 0, fk, vl, n));
    if (!head) {
        rc = TIDE_EPROTO;
        goto out;
    }
    snprintf(what, sizeof(what), "RESERVE of %zu keys", n);
    frame_msg m;
    if ((rc = ux_exchange(k, head, head_len, what, &m)) != 0) goto out;
    rc = TIDE_EPROTO;
    if (m.h.count != n) {
        client_err(s, rc, "%s: %s answered for %u keys", u->addr, what, m.h.count);
        goto out;
    }
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
                       u->addr, (unsigned long long)e.offset, (unsigned long long)vl[j],
                       (unsigned long long)u->map_size);
            goto out;
        }
        sums[nc] = copy_gather(u->base + e.offset, fv[j], fcnt[j], 1);
        ids[nc] = e.id;
        owner[nc++] = j;
    }
    rc = 0;
    if (nc == 0) goto out;
    free(head);
    UX_ENCODE(s, head, head_len, frame_encode_commit(NULL, 0, len, 0, ids, sums, nc),
              frame_encode_commit(buf, cap, len, 0, ids, sums, nc));
    if (!head) {
        rc = TIDE_EPROTO;
        goto out;
    }
    snprintf(what, sizeof(what), "COMMIT of %zu keys", nc);
    if ((rc = ux_exchange(k, head, head_len, what, &m)) != 0) goto out;
    if (m.h.count != nc) {
        rc = client_err(s, TIDE_EPROTO, "%s: %s answered for %u keys", u->addr, what, m.h.count);
        goto out;
    }
    frame_iter_init(&it, &m);
    for (size_t q = 0; frame_iter_next(&it, &e); q++)
        res[owner[q]] = e.status;
out:
    free(head);
    free(ids);
    free(sums);
    free(owner);
    return rc;
}

static int ux_put_many(tide_store *s, const tide_key *keys, size_t n, const tide_iov *iov,
                       const size_t *iovcnt, int *results) {
    ux_impl *u = s->impl;
    tide_key *fk = malloc(n * sizeof(*fk));
    const tide_iov **fv = malloc(n * sizeof(*fv));
    size_t *fcnt = malloc(n * sizeof(*fcnt)), *fidx = malloc(n * sizeof(*fidx));
    uint64_t *vl = malloc(n * sizeof(*vl));
    int *res = malloc(n * sizeof(*res));
    int rc = 0, ok = 0;
    if (!fk || !fv || !fcnt || !fidx || !vl || !res) {
        rc = client_err(s, -ENOMEM, "%s: out of memory", u->addr);
        goto out;
    }
    /* Bad keys and empty values are answered here; the rest are reserved in chunks. */
    size_t nf = 0;
    const tide_iov *v = iov;
    for (size_t i = 0; i < n; i++) {
        size_t cnt = iovcnt ? iovcnt[i] : 1;
        int krc = client_key_check(&keys[i]);
        size_t total = iov_total(v, cnt);
        if (krc == 0 && total == 0) krc = TIDE_EVALEMPTY;
        results[i] = krc;
        if (krc == 0) {
            fk[nf] = keys[i];
            fv[nf] = v;
            fcnt[nf] = cnt;
            vl[nf] = total;
            fidx[nf++] = i;
        }
        v += cnt;
    }
    for (size_t done = 0; done < nf;) {
        size_t take = ux_chunk(u, fk + done, nf - done, 8);
        ux_call k = ux_begin(s);
        if ((rc = ux_take(&k)) != 0) {
            ux_give(&k, 1);
            goto out;
        }
        rc = ux_put_chunk(&k, fk + done, fv + done, fcnt + done, vl + done, take, res);
        ux_give(&k, rc != 0);
        if (rc) goto out;
        for (size_t j = 0; j < take; j++)
            results[fidx[done + j]] = res[j];
        done += take;
    }
    for (size_t i = 0; i < n; i++)
        ok += results[i] == 0;
out:
    free(fk), free(fv), free(fcnt), free(fidx), free(vl), free(res);
    return rc ? rc : ok;
}

/* ---- get ------------------------------------------------------------------------------ */

/* One PIN + copies + RELEASE for keys fk[0..n). res[j] and lens[j] get key j's result. */
static int ux_get_chunk(ux_call *k, const tide_key *fk, const tide_iov *const *fv,
                        const size_t *fcnt, const uint64_t *caps, size_t n, int *res,
                        size_t *lens) {
    tide_store *s = k->s;
    ux_impl *u = k->u;
    uint64_t *ids = malloc(n * sizeof(*ids));
    int32_t *outs = malloc(n * sizeof(*outs));
    size_t *owner = malloc(n * sizeof(*owner));
    uint8_t *head = NULL;
    size_t head_len = 0, nr = 0;
    int rc = -ENOMEM;
    char what[64];
    if (!ids || !outs || !owner) {
        client_err(s, rc, "%s: out of memory", u->addr);
        goto out;
    }
    UX_ENCODE(s, head, head_len, frame_encode_pin(NULL, 0, len, 0, fk, caps, n),
              frame_encode_pin(buf, cap, len, 0, fk, caps, n));
    if (!head) {
        rc = TIDE_EPROTO;
        goto out;
    }
    snprintf(what, sizeof(what), "PIN of %zu keys", n);
    frame_msg m;
    if ((rc = ux_exchange(k, head, head_len, what, &m)) != 0) goto out;
    rc = TIDE_EPROTO;
    if (m.h.count != n) {
        client_err(s, rc, "%s: %s answered for %u keys", u->addr, what, m.h.count);
        goto out;
    }
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
                       u->addr, (unsigned long long)e.vlen, (unsigned long long)e.offset,
                       (unsigned long long)u->map_size, (unsigned long long)caps[j]);
            goto out;
        }
        uint64_t h = copy_scatter(fv[j], fcnt[j], u->base + e.offset, e.vlen, u->verify);
        if (u->verify && h != e.sum) {
            char kb[80];
            client_err(s, TIDE_ECHECKSUM,
                       "%s: value of key '%s' failed its checksum; reported "
                       "as a miss",
                       u->addr, client_key_repr(fk[j].data, fk[j].len, kb, sizeof(kb)));
            outs[nr - 1] = TIDE_ECHECKSUM;
            res[j] = TIDE_ENOTFOUND;
            lens[j] = 0;
        }
    }
    rc = 0;
    if (nr == 0) goto out;
    free(head);
    UX_ENCODE(s, head, head_len, frame_encode_release(NULL, 0, len, 0, ids, outs, nr),
              frame_encode_release(buf, cap, len, 0, ids, outs, nr));
    if (!head) {
        rc = TIDE_EPROTO;
        goto out;
    }
    if (u->verify) {
        /* Every copy was checked: send and go; a connection that cannot send is closed,
         * which releases the pins just as well. */
        frame_wr64(head + 8, k->c->next_req++);
        if (ux_send(k, head, head_len) == 0)
            k->c->unread++;
        else
            ux_conn_close(k->c);
        goto out;
    }
    snprintf(what, sizeof(what), "RELEASE of %zu keys", nr);
    if ((rc = ux_exchange(k, head, head_len, what, &m)) != 0) goto out;
    if (m.h.count != nr) {
        rc = client_err(s, TIDE_EPROTO, "%s: %s answered for %u keys", u->addr, what, m.h.count);
        goto out;
    }
    frame_iter_init(&it, &m);
    for (size_t q = 0; frame_iter_next(&it, &e); q++) {
        /* The pin lapsed before the copy was known good: without a checksum, a miss. */
        if (e.status != 0 && !u->verify && res[owner[q]] == 0) {
            res[owner[q]] = TIDE_ENOTFOUND;
            lens[owner[q]] = 0;
        }
    }
out:
    free(head);
    free(ids);
    free(outs);
    free(owner);
    return rc;
}

static int ux_get_many(tide_store *s, const tide_key *keys, size_t n, const tide_iov *iov,
                       const size_t *iovcnt, int *results, size_t *vlens) {
    ux_impl *u = s->impl;
    tide_key *fk = malloc(n * sizeof(*fk));
    const tide_iov **fv = malloc(n * sizeof(*fv));
    size_t *fcnt = malloc(n * sizeof(*fcnt)), *fidx = malloc(n * sizeof(*fidx));
    size_t *lens = calloc(n, sizeof(*lens)), *fl = malloc(n * sizeof(*fl));
    uint64_t *caps = malloc(n * sizeof(*caps));
    int *res = malloc(n * sizeof(*res));
    int rc = 0, ok = 0;
    if (!fk || !fv || !fcnt || !fidx || !lens || !fl || !caps || !res) {
        rc = client_err(s, -ENOMEM, "%s: out of memory", u->addr);
        goto out;
    }
    size_t nf = 0;
    const tide_iov *v = iov;
    for (size_t i = 0; i < n; i++) {
        size_t cnt = iovcnt ? iovcnt[i] : 1;
        results[i] = client_key_check(&keys[i]);
        if (results[i] == 0) {
            fk[nf] = keys[i];
            fv[nf] = v;
            fcnt[nf] = cnt;
            caps[nf] = iov_total(v, cnt);
            fidx[nf++] = i;
        }
        v += cnt;
    }
    for (size_t done = 0; done < nf;) {
        size_t take = ux_chunk(u, fk + done, nf - done, 8);
        ux_call k = ux_begin(s);
        if ((rc = ux_take(&k)) != 0) {
            ux_give(&k, 1);
            goto out;
        }
        rc = ux_get_chunk(&k, fk + done, fv + done, fcnt + done, caps + done, take, res, fl);
        ux_give(&k, rc != 0);
        if (rc) goto out;
        for (size_t j = 0; j < take; j++) {
            results[fidx[done + j]] = res[j];
            lens[fidx[done + j]] = fl[j];
            ok += res[j] == 0;
        }
        done += take;
    }
    if (vlens) memcpy(vlens, lens, n * sizeof(*lens));
out:
    free(fk), free(fv), free(fcnt), free(fidx), free(lens), free(fl), free(caps), free(res);
    return rc ? rc : ok;
}

/* ---- the native requests -------------------------------------------------------------- */

/* EXISTS, REMOVE or MATCH_PREFIX of keys that are all valid, in chunks. present/results
 * (whichever the op fills) are indexed like keys. MATCH_PREFIX returns the count. */
static int ux_keys(tide_store *s, unsigned op, const tide_key *keys, size_t n, uint8_t *present,
                   int *results) {
    ux_impl *u = s->impl;
    int count = 0;
    for (size_t done = 0; done < n;) {
        size_t take = ux_chunk(u, keys + done, n - done, 0);
        uint8_t *head = NULL;
        size_t head_len = 0;
        UX_ENCODE(s, head, head_len, frame_encode_keys(NULL, 0, len, op, 0, keys + done, take),
                  frame_encode_keys(buf, cap, len, op, 0, keys + done, take));
        if (!head) return TIDE_EPROTO;
        char what[64];
        snprintf(what, sizeof(what), "%s of %zu keys", frame_op_name(op), take);
        ux_call k = ux_begin(s);
        int rc = ux_take(&k);
        frame_msg m;
        if (rc == 0) rc = ux_exchange(&k, head, head_len, what, &m);
        free(head);
        if (rc == 0 && op == FRAME_OP_MATCH_PREFIX && m.matched > take)
            rc = client_err(s, TIDE_EPROTO, "%s: %s matched %u", u->addr, what, m.matched);
        if (rc == 0 && op != FRAME_OP_MATCH_PREFIX && m.h.count != take)
            rc =
                client_err(s, TIDE_EPROTO, "%s: %s answered for %u keys", u->addr, what, m.h.count);
        if (rc) {
            ux_give(&k, 1);
            return rc;
        }
        if (op == FRAME_OP_MATCH_PREFIX) {
            count += (int)m.matched;
            ux_give(&k, 0);
            if (m.matched < take) return count;
        } else {
            frame_iter it;
            frame_entry e;
            frame_iter_init(&it, &m);
            for (size_t j = 0; frame_iter_next(&it, &e); j++) {
                if (present) present[done + j] = e.present;
                if (results) results[done + j] = e.status;
                count += present ? e.present : e.status == 0;
            }
            ux_give(&k, 0);
        }
        done += take;
    }
    return count;
}

/* EXISTS or REMOVE over a batch that may hold bad keys: those answer for themselves. */
static int ux_keys_checked(tide_store *s, unsigned op, const tide_key *keys, size_t n,
                           uint8_t *present, int *results) {
    tide_key *fk = malloc(n * sizeof(*fk));
    size_t *fidx = malloc(n * sizeof(*fidx));
    uint8_t *fp = malloc(n);
    int *fr = malloc(n * sizeof(*fr));
    int rc = -ENOMEM;
    if (!fk || !fidx || !fp || !fr) {
        client_err(s, rc, "out of memory");
        goto out;
    }
    size_t nf = 0;
    for (size_t i = 0; i < n; i++) {
        int krc = client_key_check(&keys[i]);
        if (present) present[i] = 0;
        if (results) results[i] = krc;
        if (krc == 0) {
            fk[nf] = keys[i];
            fidx[nf++] = i;
        }
    }
    rc = ux_keys(s, op, fk, nf, present ? fp : NULL, results ? fr : NULL);
    for (size_t j = 0; rc >= 0 && j < nf; j++) {
        if (present) present[fidx[j]] = fp[j];
        if (results) results[fidx[j]] = fr[j];
    }
out:
    free(fk), free(fidx), free(fp), free(fr);
    return rc;
}

static int ux_exists_many(tide_store *s, const tide_key *keys, size_t n, uint8_t *present) {
    return ux_keys_checked(s, FRAME_OP_EXISTS, keys, n, present, NULL);
}

static int ux_remove_many(tide_store *s, const tide_key *keys, size_t n, int *results) {
    return ux_keys_checked(s, FRAME_OP_REMOVE, keys, n, NULL, results);
}

static int ux_match_prefix(tide_store *s, const tide_key *keys, size_t n) {
    /* A bad key is never present, so the prefix ends before the first one. */
    size_t good = 0;
    while (good < n && client_key_check(&keys[good]) == 0)
        good++;
    return ux_keys(s, FRAME_OP_MATCH_PREFIX, keys, good, NULL, NULL);
}

/* A request without keys (CLEAR, STAT); *m is the reply, read on the held call k. */
static int ux_simple(ux_call *k, unsigned op, frame_msg *m) {
    uint8_t head[FRAME_HDR_SIZE];
    size_t len;
    frame_encode_empty(head, sizeof(head), &len, op, 0);
    int rc = ux_take(k);
    if (rc == 0) rc = ux_exchange(k, head, len, frame_op_name(op), m);
    return rc;
}

static int ux_clear(tide_store *s) {
    ux_call k = ux_begin(s);
    frame_msg m;
    int rc = ux_simple(&k, FRAME_OP_CLEAR, &m);
    ux_give(&k, rc != 0);
    return rc;
}

static int ux_stats(tide_store *s, tide_stats *st) {
    static const struct {
        const char *name;
        size_t off;
    } fields[] = {
        {"capacity_bytes", offsetof(tide_stats, capacity_bytes)},
        {"used_bytes", offsetof(tide_stats, used_bytes)},
        {"objects", offsetof(tide_stats, objects)},
        {"puts", offsetof(tide_stats, puts)},
        {"put_dups", offsetof(tide_stats, put_dups)},
        {"gets", offsetof(tide_stats, gets)},
        {"misses", offsetof(tide_stats, misses)},
        {"evictions", offsetof(tide_stats, evictions)},
        {"evicted_bytes", offsetof(tide_stats, evicted_bytes)},
        {"checksum_errors", offsetof(tide_stats, checksum_errors)},
        {"bytes_in", offsetof(tide_stats, bytes_in)},
        {"bytes_out", offsetof(tide_stats, bytes_out)},
        {"meta_bytes", offsetof(tide_stats, meta_bytes)},
        {"pinned", offsetof(tide_stats, pinned)},
        {"reserved", offsetof(tide_stats, reserved)},
    };
    ux_call k = ux_begin(s);
    frame_msg m;
    int rc = ux_simple(&k, FRAME_OP_STAT, &m);
    if (rc == 0) {
        frame_iter it;
        frame_entry e;
        frame_iter_init(&it, &m);
        while (frame_iter_next(&it, &e))
            for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
                if (e.key.len == strlen(fields[i].name) &&
                    memcmp(e.key.data, fields[i].name, e.key.len) == 0)
                    *(uint64_t *)((char *)st + fields[i].off) = e.figure;
    }
    ux_give(&k, rc != 0);
    return rc;
}

/* ---- open / close -------------------------------------------------------------------- */

static void ux_close(tide_store *s) {
    ux_impl *u = s->impl;
    if (!u) return;
    for (int i = 0; i < u->nconns; i++) {
        ux_conn_close(&u->conns[i]);
        free(u->conns[i].buf);
    }
    free(u->conns);
    if (u->base) munmap(u->base, u->map_size);
    pthread_mutex_destroy(&u->lock);
    pthread_cond_destroy(&u->idle);
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
    uint64_t timeout_ms, conns;
    int verify, populate, rc;
    if ((rc = url_opt_uint(uo, "timeout_ms", UX_DEFAULT_TIMEOUT_MS, &timeout_ms, msg,
                           sizeof(msg))) ||
        (rc = url_opt_uint(uo, "conns", UX_DEFAULT_CONNS, &conns, msg, sizeof(msg))) ||
        (rc = url_opt_bool(uo, "verify", 1, &verify, msg, sizeof(msg))) ||
        (rc = url_opt_bool(uo, "populate", 0, &populate, msg, sizeof(msg))))
        return client_err(s, rc, "unix://%s: %s", uo->path, msg);
    if (timeout_ms == 0 || conns == 0 || conns > 1024)
        return client_err(s, TIDE_EOPTION,
                          "unix://%s: timeout_ms must be above 0 and conns "
                          "1..1024",
                          uo->path);
    const char *token = url_get(uo, "token");
    if (!token) token = getenv("TIDE_AUTH_TOKEN");
    if (token && strlen(token) > FRAME_TOKEN_MAX)
        return client_err(s, TIDE_EOPTION, "unix://%s: the auth token is longer than %d bytes",
                          uo->path, FRAME_TOKEN_MAX);
    if ((rc = url_check_unused(uo, msg, sizeof(msg))) != 0)
        return client_err(s, rc, "unix://%s: %s", uo->path, msg);

    ux_impl *u = calloc(1, sizeof(*u));
    if (!u) return client_err(s, -ENOMEM, "out of memory");
    s->impl = u;
    pthread_mutex_init(&u->lock, NULL);
    pthread_cond_init(&u->idle, NULL);
    snprintf(u->path, sizeof(u->path), "%s", uo->path);
    snprintf(u->addr, sizeof(u->addr), "unix://%s", uo->path);
    u->timeout_ns = timeout_ms * 1000000ull;
    u->verify = verify;
    u->populate = populate;
    u->nconns = (int)conns;
    if (token) snprintf(u->token, sizeof(u->token), "%s", token);
    u->conns = calloc(conns, sizeof(ux_conn));
    if (!u->conns) {
        ux_close(s);
        return client_err(s, -ENOMEM, "out of memory");
    }
    frame_limits lim = {TIDE_BATCH_MAX, UINT64_MAX >> 16, FRAME_MAX_FRAME_CAP};
    for (uint64_t i = 0; i < conns; i++) {
        u->conns[i].fd = -1;
        u->conns[i].buf_cap = 4096;
        u->conns[i].buf = malloc(4096);
        if (!u->conns[i].buf || frame_decoder_init(&u->conns[i].dec, &lim) != 0) {
            ux_close(s);
            return client_err(s, -ENOMEM, "out of memory");
        }
    }
    /* Connect now: a wrong path, mode or token fails tide_open, and the pool is mapped. */
    ux_call k = ux_begin(s);
    rc = ux_take(&k);
    ux_give(&k, rc != 0);
    if (rc) ux_close(s);
    return rc;
}

const backend_ops unix_backend = {
    .scheme = "unix",
    .open = ux_open,
    .close = ux_close,
    .put_many = ux_put_many,
    .get_many = ux_get_many,
    .exists_many = ux_exists_many,
    .remove_many = ux_remove_many,
    .match_prefix = ux_match_prefix,
    .clear = ux_clear,
    .stats = ux_stats,
};
