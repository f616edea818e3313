/*
 * node.c — the tide:// backend: one tided over TCP, native protocol.
 *
 *   tide://HOST:PORT[?timeout_ms=5000&conns=8&token=SECRET]
 *
 * The token may also come from the TIDE_AUTH_TOKEN environment variable (the URL wins).
 *
 * Connections: a pool of up to `conns` sockets, opened on demand, each used by one call at
 * a time. A call takes an idle connection (or opens one, or waits for one), sends its
 * frames, reads the replies, and gives the connection back. A connection that failed in
 * any way (timeout, reset, protocol error) is closed rather than reused: after an error
 * the stream's framing is unknown.
 *
 * Timeouts: each call has `timeout_ms` from its start to its last reply byte; every wait
 * on the socket polls with what is left. Errors name the server and the errno.
 *
 * Retries: a call that fails on a pooled connection before any reply byte arrived is
 * retried once on a fresh connection (the server may have closed an idle socket). Every
 * tide operation is idempotent — a repeated PUT is a no-op — so this is always safe.
 *
 * Large batches are cut to the server's limits (keys per frame, frame bytes) learnt from
 * HELLO. GET values are read straight into the caller's scatter lists, hashed piece by piece
 * as they arrive, and checked against the checksum the server sent; a mismatch is a miss,
 * never wrong data handed back.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "client/client.h"
#include "common/checksum.h"
#include "common/stats_fields.h"
#include "proto/frame.h"

#define NODE_DEFAULT_TIMEOUT_MS 5000
#define NODE_DEFAULT_CONNS 8
#define NODE_IOV_MAX 512
/* Value bytes taken from the socket per call while hashing them: small enough that the hash
 * reads them from L2 right after the kernel wrote them there. */
#define NODE_RECV_PIECE (128 * 1024)

typedef struct node_conn {
    int fd;
    int busy;
    int fresh; /* opened by the call that holds it */
    uint64_t next_req;
    uint8_t *buf; /* reply head buffer */
    size_t buf_cap;
    frame_decoder dec;
    checksum_state *cs; /* checksum of the GET value being received */
} node_conn;

typedef struct node_impl {
    char addr[300]; /* "host:port" for messages */
    struct sockaddr_storage sa;
    socklen_t salen;
    uint64_t timeout_ns;
    char token[FRAME_TOKEN_MAX + 1];
    int nconns;
    node_conn *conns;
    pthread_mutex_t lock;
    pthread_cond_t idle;
    /* The server's limits, from HELLO (guarded by lock; 0 until the first HELLO). */
    uint32_t max_keys;
    uint64_t max_frame;
} node_impl;

/* A call in progress: its deadline and the connection it holds. */
typedef struct call {
    tide_store *s;
    node_impl *n;
    node_conn *c;
    uint64_t deadline;
    int got_reply_bytes;
} call;

/* ---- socket I/O with a deadline ------------------------------------------------------- */

static int wait_fd(call *k, short events) {
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

/* Drop n bytes from the front of an iovec list. */
static void iov_advance(struct iovec **iov, int *cnt, size_t n) {
    while (*cnt > 0 && n >= (*iov)->iov_len) {
        n -= (*iov)->iov_len;
        (*iov)++;
        (*cnt)--;
    }
    if (*cnt > 0) {
        (*iov)->iov_base = (uint8_t *)(*iov)->iov_base + n;
        (*iov)->iov_len -= n;
    }
}

/* Send every byte of iov[0..cnt) (the array is consumed). */
static int send_all(call *k, struct iovec *iov, int cnt) {
    while (cnt > 0) {
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)(cnt > 1024 ? 1024 : cnt)};
        ssize_t w = sendmsg(k->c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK) return -errno;
            int rc = wait_fd(k, POLLOUT);
            if (rc) return rc;
            continue;
        }
        iov_advance(&iov, &cnt, (size_t)w);
    }
    return 0;
}

/* Receive exactly the bytes of iov[0..cnt) (the array is consumed). */
static int recv_all(call *k, struct iovec *iov, int cnt) {
    while (cnt > 0) {
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)(cnt > 1024 ? 1024 : cnt)};
        ssize_t r = recvmsg(k->c->fd, &mh, MSG_DONTWAIT);
        if (r < 0) {
            if (errno == EINTR) continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK) return -errno;
            int rc = wait_fd(k, POLLIN);
            if (rc) return rc;
            continue;
        }
        if (r == 0) return -ECONNRESET;
        k->got_reply_bytes = 1;
        iov_advance(&iov, &cnt, (size_t)r);
    }
    return 0;
}

/* Receive exactly the bytes of iov[0..cnt) (the array is consumed) and hash them into cs
 * piece by piece as they land: at most NODE_RECV_PIECE bytes a call, each piece hashed
 * while it is still in cache, and while the server keeps sending the rest (one pass over
 * the value instead of a receive and then a second pass to check it). */
static int recv_hashed(call *k, struct iovec *iov, int cnt, checksum_state *cs) {
    while (cnt > 0) {
        /* A view of the first NODE_RECV_PIECE bytes of what is left. */
        struct iovec view[64];
        int nv = 0;
        size_t room = NODE_RECV_PIECE;
        for (int i = 0; i < cnt && nv < 64 && room; i++) {
            size_t take = iov[i].iov_len < room ? iov[i].iov_len : room;
            view[nv++] = (struct iovec){iov[i].iov_base, take};
            room -= take;
        }
        struct msghdr mh = {.msg_iov = view, .msg_iovlen = (size_t)nv};
        ssize_t r = recvmsg(k->c->fd, &mh, MSG_DONTWAIT);
        if (r < 0) {
            if (errno == EINTR) continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK) return -errno;
            int rc = wait_fd(k, POLLIN);
            if (rc) return rc;
            continue;
        }
        if (r == 0) return -ECONNRESET;
        k->got_reply_bytes = 1;
        size_t left = (size_t)r;
        while (cnt > 0 && left) {
            size_t take = iov->iov_len < left ? iov->iov_len : left;
            checksum_update(cs, iov->iov_base, take);
            left -= take;
            iov->iov_base = (uint8_t *)iov->iov_base + take;
            iov->iov_len -= take;
            if (iov->iov_len == 0) {
                iov++;
                cnt--;
            }
        }
    }
    return 0;
}

/* Read one reply's header and key section into the connection's buffer. Value bytes, if
 * any, stay in the socket for the caller. */
static int recv_head(call *k, frame_msg *m) {
    node_conn *c = k->c;
    size_t have = 0;
    for (;;) {
        ssize_t n = frame_decode_head(&c->dec, c->buf, have, m);
        if (n < 0) return client_err(k->s, (int)n, "%s: bad reply: %s", k->n->addr, c->dec.errstr);
        if (n > 0) return 0;
        size_t want = have + c->dec.need;
        if (want > c->buf_cap) {
            size_t cap = c->buf_cap;
            while (cap < want) cap *= 2;
            uint8_t *grown = realloc(c->buf, cap);
            if (!grown) return client_err(k->s, -ENOMEM, "%s: out of memory", k->n->addr);
            c->buf = grown;
            c->buf_cap = cap;
        }
        /* Read exactly what the decoder asked for, so no byte of the value section (or of
         * a later frame) is swallowed into the head buffer. */
        struct iovec v = {c->buf + have, c->dec.need};
        int rc = recv_all(k, &v, 1);
        if (rc) return rc;
        have = want;
    }
}

/* ---- connections ---------------------------------------------------------------------- */

static void conn_close(node_conn *c) {
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
}

/* Name an I/O failure once, with the server and the errno. */
static int io_fail(call *k, const char *what, int rc) {
    if (rc == -ETIMEDOUT)
        return client_err(k->s, rc, "%s: %s timed out after %llu ms", k->n->addr, what,
                          (unsigned long long)(k->n->timeout_ns / 1000000));
    if (rc > -TIDE_ERRBASE)
        return client_err(k->s, rc, "%s: %s: %s", k->n->addr, what, strerror(-rc));
    return rc; /* a tide code: the message is already set */
}

/* HELLO on a new connection: version, token, and the server's limits. */
static int node_hello(call *k) {
    node_impl *n = k->n;
    frame_hello h = {FRAME_VERSION, FRAME_VERSION, 0, (const uint8_t *)n->token,
                     (uint16_t)strlen(n->token)};
    if (!h.token_len) h.token = NULL;
    uint8_t buf[FRAME_HDR_SIZE + FRAME_HELLO_META + FRAME_TOKEN_MAX];
    size_t len;
    int rc = frame_encode_hello(buf, sizeof(buf), &len, k->c->next_req++, &h);
    if (rc) return client_err(k->s, rc, "%s: cannot encode HELLO", n->addr);
    struct iovec v = {buf, len};
    if ((rc = send_all(k, &v, 1)) != 0) return io_fail(k, "HELLO", rc);
    frame_msg m;
    if ((rc = recv_head(k, &m)) != 0) return io_fail(k, "HELLO", rc);
    if (m.h.status != 0)
        return client_err(k->s, m.h.status, "%s: HELLO refused: %.*s", n->addr,
                          (int)m.errmsg_len, m.errmsg ? m.errmsg : "");
    if (m.h.opcode != (FRAME_OP_HELLO | FRAME_OP_REPLY))
        return client_err(k->s, TIDE_EPROTO, "%s: HELLO answered with %s", n->addr,
                          frame_op_name(m.h.opcode));
    pthread_mutex_lock(&n->lock);
    n->max_keys = m.hello_reply.max_keys;
    n->max_frame = m.hello_reply.max_frame;
    pthread_mutex_unlock(&n->lock);
    return 0;
}

static int conn_open(call *k) {
    node_impl *n = k->n;
    node_conn *c = k->c;
    c->fd = socket(n->sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0) return client_err(k->s, -errno, "%s: socket: %s", n->addr, strerror(errno));
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(c->fd, (struct sockaddr *)&n->sa, n->salen) != 0 && errno != EINPROGRESS) {
        int e = errno;
        conn_close(c);
        return client_err(k->s, -e, "%s: connect: %s", n->addr, strerror(e));
    }
    int rc = wait_fd(k, POLLOUT);
    int soerr = 0;
    socklen_t sl = sizeof(soerr);
    if (rc == 0) getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
    if (rc || soerr) {
        conn_close(c);
        rc = rc ? rc : -soerr;
        return client_err(k->s, rc, "%s: connect: %s", n->addr, strerror(-rc));
    }
    frame_decoder_reset(&c->dec);
    c->fresh = 1;
    if ((rc = node_hello(k)) != 0) {
        conn_close(c);
        return rc;
    }
    return 0;
}

/* Take a connection for this call (opening one if none is idle). */
static int conn_take(call *k) {
    node_impl *n = k->n;
    pthread_mutex_lock(&n->lock);
    for (;;) {
        node_conn *pick = NULL;
        for (int i = 0; i < n->nconns && !pick; i++)
            if (!n->conns[i].busy && n->conns[i].fd >= 0) pick = &n->conns[i];
        for (int i = 0; i < n->nconns && !pick; i++)
            if (!n->conns[i].busy) pick = &n->conns[i];
        if (pick) {
            pick->busy = 1;
            k->c = pick;
            break;
        }
        pthread_cond_wait(&n->idle, &n->lock);
    }
    pthread_mutex_unlock(&n->lock);
    k->c->fresh = 0;
    if (k->c->fd >= 0) return 0;
    return conn_open(k);
}

static void conn_give(call *k, int broken) {
    node_impl *n = k->n;
    if (broken) conn_close(k->c);
    pthread_mutex_lock(&n->lock);
    k->c->busy = 0;
    pthread_cond_signal(&n->idle);
    pthread_mutex_unlock(&n->lock);
    k->c = NULL;
}

/* ---- one exchange -------------------------------------------------------------------- */

/* Everything one request needs: the encoded head, value iovecs to send after it, and a
 * function that reads and interprets the reply. */
typedef struct exchange {
    const char *what; /* "GET of 12 keys", for messages */
    unsigned op;
    uint8_t *head;
    size_t head_len;
    const struct iovec *vals; /* PUT values */
    int nvals;
    int (*on_reply)(call *k, const frame_msg *m, void *arg);
    void *arg;
} exchange;

static int exchange_once(call *k, exchange *x) {
    struct iovec *iov = malloc((size_t)(x->nvals + 1) * sizeof(*iov));
    if (!iov) return client_err(k->s, -ENOMEM, "%s: out of memory", k->n->addr);
    uint64_t req_id = k->c->next_req++;
    frame_wr64(x->head + 8, req_id); /* every encoder puts req_id at offset 8 */
    iov[0] = (struct iovec){x->head, x->head_len};
    if (x->nvals) memcpy(iov + 1, x->vals, (size_t)x->nvals * sizeof(*iov));
    int rc = send_all(k, iov, x->nvals + 1);
    free(iov);
    if (rc) return io_fail(k, x->what, rc);
    frame_msg m;
    if ((rc = recv_head(k, &m)) != 0) return io_fail(k, x->what, rc);
    if (m.h.req_id != req_id)
        return client_err(k->s, TIDE_EPROTO, "%s: %s: reply for request %llu, expected %llu",
                          k->n->addr, x->what, (unsigned long long)m.h.req_id,
                          (unsigned long long)req_id);
    if (m.h.status != 0)
        return client_err(k->s, m.h.status, "%s: %s failed: %.*s", k->n->addr, x->what,
                          (int)m.errmsg_len, m.errmsg ? m.errmsg : "");
    if (m.h.opcode != (x->op | FRAME_OP_REPLY))
        return client_err(k->s, TIDE_EPROTO, "%s: %s answered with %s", k->n->addr, x->what,
                          frame_op_name(m.h.opcode));
    rc = x->on_reply(k, &m, x->arg);
    return rc ? io_fail(k, x->what, rc) : 0;
}

/* Run an exchange: take a connection, send, read, give back; one retry as explained atop. */
static int run(tide_store *s, exchange *x) {
    call k = {s, s->impl, NULL, now_ns() + ((node_impl *)s->impl)->timeout_ns, 0};
    for (int attempt = 0;; attempt++) {
        int rc = conn_take(&k);
        if (rc) {
            conn_give(&k, 1);
            return rc;
        }
        int fresh = k.c->fresh;
        k.got_reply_bytes = 0;
        rc = exchange_once(&k, x);
        conn_give(&k, rc != 0);
        if (rc == 0) return 0;
        int io_error = rc > -TIDE_ERRBASE && rc != -ETIMEDOUT;
        if (attempt == 0 && !fresh && !k.got_reply_bytes && io_error) continue;
        return rc;
    }
}

/* ---- operations ---------------------------------------------------------------------- */

/* Encode with a size query into a malloc'd buffer. */
#define ENCODE(out, outlen, call_expr_null, call_expr_buf)                                    \
    do {                                                                                      \
        size_t *len = &(outlen);                                                              \
        uint8_t *buf = NULL;                                                                  \
        size_t cap = 0;                                                                       \
        int erc = (call_expr_null);                                                           \
        if (erc == TIDE_EBUFSMALL) {                                                          \
            cap = *len;                                                                       \
            buf = malloc(cap);                                                                \
            if (!buf) return client_err(s, -ENOMEM, "out of memory");                         \
            erc = (call_expr_buf);                                                            \
        }                                                                                     \
        if (erc) {                                                                            \
            free(buf);                                                                        \
            return client_err(s, erc, "cannot encode request: %s", tide_strerror(erc));      \
        }                                                                                     \
        (out) = buf;                                                                          \
    } while (0)

/* How many keys (from `from`) fit in one frame under the server's limits. */
static size_t chunk_keys(node_impl *n, size_t left) {
    pthread_mutex_lock(&n->lock);
    size_t mk = n->max_keys ? n->max_keys : FRAME_DEFAULT_MAX_KEYS;
    pthread_mutex_unlock(&n->lock);
    return left < mk ? left : mk;
}

struct status_arg {
    int *results;
    size_t n;
};

static int on_status_reply(call *k, const frame_msg *m, void *arg) {
    struct status_arg *a = arg;
    if (m->h.count != a->n) return TIDE_EPROTO;
    frame_iter it;
    frame_entry e;
    frame_iter_init(&it, m);
    for (size_t i = 0; frame_iter_next(&it, &e); i++) a->results[i] = e.status;
    return 0;
}

static int node_put_many(tide_store *s, const tide_key *keys, size_t n, const tide_iov *iov,
                         const size_t *iovcnt, int *results) {
    node_impl *ni = s->impl;
    int ok = 0;
    size_t done = 0;
    const tide_iov *v = iov;
    /* Keys with a bad key or an empty value are answered here; the rest go in frames. */
    tide_key *fk = malloc(n * sizeof(*fk));
    size_t *fidx = malloc(n * sizeof(*fidx)), *fcnt = malloc(n * sizeof(*fcnt));
    const tide_iov **fv = malloc(n * sizeof(*fv));
    int rc = 0;
    if (!fk || !fidx || !fcnt || !fv) {
        rc = client_err(s, -ENOMEM, "out of memory");
        goto out;
    }
    size_t nf = 0;
    for (size_t i = 0; i < n; i++) {
        size_t cnt = iovcnt ? iovcnt[i] : 1;
        int krc = client_key_check(&keys[i]);
        if (krc == 0 && iov_total(v, cnt) == 0) krc = TIDE_EVALEMPTY;
        results[i] = krc;
        if (krc == 0) {
            fk[nf] = keys[i];
            fidx[nf] = i;
            fcnt[nf] = cnt;
            fv[nf] = v;
            nf++;
        }
        v += cnt;
    }
    while (done < nf) {
        /* Cut by keys and by bytes (values travel in the frame). */
        size_t take = chunk_keys(ni, nf - done);
        pthread_mutex_lock(&ni->lock);
        uint64_t max_frame = ni->max_frame ? ni->max_frame : FRAME_DEFAULT_MAX_FRAME;
        pthread_mutex_unlock(&ni->lock);
        uint64_t bytes = 0;
        size_t nvals = 0;
        for (size_t j = 0; j < take; j++) {
            uint64_t vb = iov_total(fv[done + j], fcnt[done + j]) + fk[done + j].len + 32;
            if (j > 0 && bytes + vb > max_frame / 2) {
                take = j;
                break;
            }
            bytes += vb;
            nvals += fcnt[done + j];
        }
        /* The frame's values as one iovec list, and the keys' scatter lists contiguous. */
        tide_iov *flat = malloc((nvals ? nvals : 1) * sizeof(*flat));
        struct iovec *vals = malloc((nvals ? nvals : 1) * sizeof(*vals));
        int32_t *st = malloc(take * sizeof(*st));
        int *res = malloc(take * sizeof(*res));
        if (!flat || !vals || !st || !res) {
            free(flat), free(vals), free(st), free(res);
            rc = client_err(s, -ENOMEM, "out of memory");
            goto out;
        }
        size_t p = 0;
        for (size_t j = 0; j < take; j++)
            for (size_t q = 0; q < fcnt[done + j]; q++, p++) {
                flat[p] = fv[done + j][q];
                vals[p] = (struct iovec){flat[p].base, flat[p].len};
            }
        exchange x = {.op = FRAME_OP_PUT, .vals = vals, .on_reply = on_status_reply};
        char what[64];
        snprintf(what, sizeof(what), "PUT of %zu keys", take);
        x.what = what;
        ENCODE(x.head, x.head_len,
               frame_encode_put(NULL, 0, len, 0, fk + done, take, flat, fcnt + done, NULL, NULL),
               frame_encode_put(buf, cap, len, 0, fk + done, take, flat, fcnt + done, NULL,
                                NULL));
        /* Drop zero-length pieces: they carry nothing and would only lengthen the list. */
        int nv = 0;
        for (size_t q = 0; q < nvals; q++)
            if (vals[q].iov_len) vals[nv++] = vals[q];
        x.nvals = nv;
        struct status_arg a = {res, take};
        x.arg = &a;
        rc = run(s, &x);
        free(x.head);
        for (size_t j = 0; rc == 0 && j < take; j++) {
            results[fidx[done + j]] = res[j];
            ok += res[j] == 0;
        }
        free(flat), free(vals), free(st), free(res);
        if (rc) goto out;
        done += take;
    }
out:
    free(fk), free(fidx), free(fcnt), free(fv);
    return rc ? rc : ok;
}

struct get_arg {
    const tide_key *keys;
    const tide_iov *const *iovs; /* per key: its scatter list */
    const size_t *cnts;
    int *results;
    size_t *vlens;
    size_t n;
};

static int on_get_reply(call *k, const frame_msg *m, void *arg) {
    struct get_arg *a = arg;
    if (m->h.count != a->n) return TIDE_EPROTO;
    frame_iter it;
    frame_entry e;
    frame_iter_init(&it, m);
    uint64_t total = 0;
    for (size_t i = 0; frame_iter_next(&it, &e); i++) {
        a->results[i] = e.status;
        a->vlens[i] = e.vlen;
        if (e.status == 0) {
            if (e.vlen > iov_total(a->iovs[i], a->cnts[i])) return TIDE_EPROTO;
            total += e.vlen;
        }
    }
    if (total != m->data_len) return TIDE_EPROTO;
    /* Read each value straight into its key's scatter list, hashing it as it lands, then
     * check the hash. */
    checksum_state *cs = k->c->cs;
    frame_iter_init(&it, m);
    for (size_t i = 0; frame_iter_next(&it, &e); i++) {
        if (e.status != 0) continue;
        struct iovec v[NODE_IOV_MAX];
        const tide_iov *src = a->iovs[i];
        uint64_t left = e.vlen;
        int nv = 0;
        checksum_reset(cs);
        for (size_t q = 0; q < a->cnts[i] && left; q++) {
            size_t take = src[q].len < left ? src[q].len : (size_t)left;
            if (!take) continue;
            if (nv == NODE_IOV_MAX) { /* a very long scatter list: read in rounds */
                int rc = recv_hashed(k, v, nv, cs);
                if (rc) return rc;
                nv = 0;
            }
            v[nv++] = (struct iovec){src[q].base, take};
            left -= take;
        }
        int rc = recv_hashed(k, v, nv, cs);
        if (rc) return rc;
        if (checksum_digest(cs) != e.sum) {
            char kb[80];
            client_err(k->s, TIDE_ECHECKSUM, "%s: value of key '%s' failed its checksum; "
                       "reported as a miss", k->n->addr,
                       client_key_repr(a->keys[i].data, a->keys[i].len, kb, sizeof(kb)));
            a->results[i] = TIDE_ENOTFOUND;
            a->vlens[i] = 0;
        }
    }
    return 0;
}

static int node_get_many(tide_store *s, const tide_key *keys, size_t n, const tide_iov *iov,
                         const size_t *iovcnt, int *results, size_t *vlens) {
    int ok = 0, rc = 0;
    const tide_iov **iovs = malloc(n * sizeof(*iovs));
    size_t *cnts = malloc(n * sizeof(*cnts)), *lens = malloc(n * sizeof(*lens));
    uint64_t *caps = malloc(n * sizeof(*caps));
    tide_key *fk = malloc(n * sizeof(*fk));
    size_t *fidx = malloc(n * sizeof(*fidx));
    if (!iovs || !cnts || !lens || !caps || !fk || !fidx) {
        rc = client_err(s, -ENOMEM, "out of memory");
        goto out;
    }
    size_t nf = 0;
    const tide_iov *v = iov;
    for (size_t i = 0; i < n; i++) {
        size_t cnt = iovcnt ? iovcnt[i] : 1;
        results[i] = client_key_check(&keys[i]);
        lens[i] = 0;
        if (results[i] == 0) {
            fk[nf] = keys[i];
            fidx[nf] = i;
            iovs[nf] = v;
            cnts[nf] = cnt;
            caps[nf] = iov_total(v, cnt);
            nf++;
        }
        v += cnt;
    }
    for (size_t done = 0; done < nf;) {
        size_t take = chunk_keys(s->impl, nf - done);
        int *res = malloc(take * sizeof(*res));
        size_t *vl = malloc(take * sizeof(*vl));
        if (!res || !vl) {
            free(res), free(vl);
            rc = client_err(s, -ENOMEM, "out of memory");
            goto out;
        }
        exchange x = {.op = FRAME_OP_GET, .on_reply = on_get_reply};
        char what[64];
        snprintf(what, sizeof(what), "GET of %zu keys", take);
        x.what = what;
        ENCODE(x.head, x.head_len, frame_encode_get(NULL, 0, len, 0, fk + done, caps + done, take),
               frame_encode_get(buf, cap, len, 0, fk + done, caps + done, take));
        struct get_arg a = {fk + done, iovs + done, cnts + done, res, vl, take};
        x.arg = &a;
        rc = run(s, &x);
        free(x.head);
        for (size_t j = 0; rc == 0 && j < take; j++) {
            results[fidx[done + j]] = res[j];
            lens[fidx[done + j]] = vl[j];
            ok += res[j] == 0;
        }
        free(res), free(vl);
        if (rc) goto out;
        done += take;
    }
    if (vlens)
        for (size_t i = 0; i < n; i++) vlens[i] = lens[i];
out:
    free(iovs), free(cnts), free(lens), free(caps), free(fk), free(fidx);
    return rc ? rc : ok;
}

struct keys_arg {
    uint8_t *present;
    int *results;
    uint32_t matched;
    size_t n;
};

static int on_keys_reply(call *k, const frame_msg *m, void *arg) {
    struct keys_arg *a = arg;
    if (m->h.opcode == (FRAME_OP_MATCH_PREFIX | FRAME_OP_REPLY)) {
        if (m->matched > a->n) return TIDE_EPROTO;
        a->matched = m->matched;
        return 0;
    }
    if (m->h.count != a->n) return TIDE_EPROTO;
    frame_iter it;
    frame_entry e;
    frame_iter_init(&it, m);
    for (size_t i = 0; frame_iter_next(&it, &e); i++) {
        if (a->present) a->present[i] = e.present;
        if (a->results) a->results[i] = e.status;
    }
    return 0;
}

/* EXISTS, REMOVE and MATCH_PREFIX over chunks of valid keys. */
static int node_keys(tide_store *s, unsigned op, const tide_key *keys, size_t n,
                     uint8_t *present, int *results) {
    int count = 0;
    for (size_t done = 0; done < n;) {
        size_t take = chunk_keys(s->impl, n - done);
        /* A bad key answers for itself and ends the chunk before it. */
        size_t good = 0;
        while (good < take && client_key_check(&keys[done + good]) == 0) good++;
        if (good == 0) {
            int krc = client_key_check(&keys[done]);
            if (op == FRAME_OP_MATCH_PREFIX) return count;
            if (present) present[done] = 0;
            if (results) results[done] = krc;
            done++;
            continue;
        }
        exchange x = {.op = op, .on_reply = on_keys_reply};
        char what[64];
        snprintf(what, sizeof(what), "%s of %zu keys", frame_op_name(op), good);
        x.what = what;
        ENCODE(x.head, x.head_len, frame_encode_keys(NULL, 0, len, op, 0, keys + done, good),
               frame_encode_keys(buf, cap, len, op, 0, keys + done, good));
        struct keys_arg a = {present ? present + done : NULL, results ? results + done : NULL, 0,
                             good};
        x.arg = &a;
        int rc = run(s, &x);
        free(x.head);
        if (rc) return rc;
        if (op == FRAME_OP_MATCH_PREFIX) {
            count += (int)a.matched;
            if (a.matched < good) return count;
        } else {
            for (size_t j = 0; j < good; j++)
                count += present ? present[done + j] : results[done + j] == 0;
        }
        done += good;
    }
    return count;
}

static int node_exists_many(tide_store *s, const tide_key *keys, size_t n, uint8_t *present) {
    return node_keys(s, FRAME_OP_EXISTS, keys, n, present, NULL);
}

static int node_remove_many(tide_store *s, const tide_key *keys, size_t n, int *results) {
    return node_keys(s, FRAME_OP_REMOVE, keys, n, NULL, results);
}

static int node_match_prefix(tide_store *s, const tide_key *keys, size_t n) {
    return node_keys(s, FRAME_OP_MATCH_PREFIX, keys, n, NULL, NULL);
}

static int on_empty_reply(call *k, const frame_msg *m, void *arg) {
    return 0;
}

static int node_clear(tide_store *s) {
    uint8_t head[FRAME_HDR_SIZE];
    size_t len;
    frame_encode_empty(head, sizeof(head), &len, FRAME_OP_CLEAR, 0);
    exchange x = {"CLEAR", FRAME_OP_CLEAR, head, len, NULL, 0, on_empty_reply, NULL};
    return run(s, &x);
}

static int on_stat_reply(call *k, const frame_msg *m, void *arg) {
    tide_stats *st = arg;
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
    frame_iter it;
    frame_entry e;
    frame_iter_init(&it, m);
    while (frame_iter_next(&it, &e)) {
        for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
            if (e.key.len == strlen(fields[i].name) &&
                memcmp(e.key.data, fields[i].name, e.key.len) == 0)
                *(uint64_t *)((char *)st + fields[i].off) = e.figure;
        }
        for (size_t i = 0; i < stats_disk_nfields; i++) {
            const stats_field *f = &stats_disk_fields[i];
            if (e.key.len == strlen(f->name) && memcmp(e.key.data, f->name, e.key.len) == 0)
                stats_field_set(st, f, e.figure);
        }
    }
    return 0;
}

static int node_stats(tide_store *s, tide_stats *st) {
    uint8_t head[FRAME_HDR_SIZE];
    size_t len;
    frame_encode_empty(head, sizeof(head), &len, FRAME_OP_STAT, 0);
    exchange x = {"STAT", FRAME_OP_STAT, head, len, NULL, 0, on_stat_reply, st};
    return run(s, &x);
}

/* ---- open / close -------------------------------------------------------------------- */

static int resolve(tide_store *s, node_impl *n, const char *authority) {
    char host[256];
    const char *colon = strrchr(authority, ':');
    if (!colon || colon == authority || !colon[1])
        return client_err(s, TIDE_EURL, "tide://%s: expected HOST:PORT", authority);
    size_t hl = (size_t)(colon - authority);
    if (hl >= sizeof(host)) return client_err(s, TIDE_EURL, "tide://: host name too long");
    memcpy(host, authority, hl);
    host[hl] = '\0';
    char *end;
    long port = strtol(colon + 1, &end, 10);
    if (*end || port < 1 || port > 65535)
        return client_err(s, TIDE_EURL, "tide://%s: '%s' is not a port", authority, colon + 1);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int g = getaddrinfo(host, colon + 1, &hints, &res);
    if (g != 0 || !res)
        return client_err(s, -EHOSTUNREACH, "tide://%s: cannot resolve '%s': %s", authority,
                          host, gai_strerror(g));
    memcpy(&n->sa, res->ai_addr, res->ai_addrlen);
    n->salen = res->ai_addrlen;
    freeaddrinfo(res);
    snprintf(n->addr, sizeof(n->addr), "tide://%s", authority);
    return 0;
}

static void node_close(tide_store *s) {
    node_impl *n = s->impl;
    if (!n) return;
    for (int i = 0; i < n->nconns; i++) {
        conn_close(&n->conns[i]);
        free(n->conns[i].buf);
        checksum_free(n->conns[i].cs);
    }
    free(n->conns);
    pthread_mutex_destroy(&n->lock);
    pthread_cond_destroy(&n->idle);
    free(n);
    s->impl = NULL;
}

static int node_open(tide_store *s, url *u) {
    char msg[ERR_MSG_MAX];
    if (strchr(u->authority, ','))
        return client_err(s, TIDE_EUNSUPPORTED,
                          "tide://%s: several nodes in one URL need the cluster backend, which "
                          "this build does not have yet; give one HOST:PORT",
                          u->authority);
    if (u->path[0] && strcmp(u->path, "/") != 0)
        return client_err(s, TIDE_EURL, "tide://%s%s: a node URL takes no path", u->authority,
                          u->path);
    uint64_t timeout_ms, conns;
    int rc;
    if ((rc = url_opt_uint(u, "timeout_ms", NODE_DEFAULT_TIMEOUT_MS, &timeout_ms, msg,
                           sizeof(msg))) ||
        (rc = url_opt_uint(u, "conns", NODE_DEFAULT_CONNS, &conns, msg, sizeof(msg))))
        return client_err(s, rc, "tide://: %s", msg);
    if (timeout_ms == 0 || conns == 0 || conns > 1024)
        return client_err(s, TIDE_EOPTION, "tide://: timeout_ms must be above 0 and conns "
                                           "1..1024");
    const char *token = url_get(u, "token");
    if (!token) token = getenv("TIDE_AUTH_TOKEN");
    if (token && strlen(token) > FRAME_TOKEN_MAX)
        return client_err(s, TIDE_EOPTION, "tide://: the auth token is longer than %d bytes",
                          FRAME_TOKEN_MAX);
    node_impl *n = calloc(1, sizeof(*n));
    if (!n) return client_err(s, -ENOMEM, "out of memory");
    s->impl = n;
    pthread_mutex_init(&n->lock, NULL);
    pthread_cond_init(&n->idle, NULL);
    n->timeout_ns = timeout_ms * 1000000ull;
    n->nconns = (int)conns;
    if (token) snprintf(n->token, sizeof(n->token), "%s", token);
    n->conns = calloc(conns, sizeof(node_conn));
    if (!n->conns) {
        node_close(s);
        return client_err(s, -ENOMEM, "out of memory");
    }
    frame_limits lim;
    frame_limits_default(&lim);
    lim.max_value = UINT64_MAX >> 16; /* replies: trust sizes, the caller bounded them */
    lim.max_frame = FRAME_MAX_FRAME_CAP;
    lim.max_keys = TIDE_BATCH_MAX;
    for (uint64_t i = 0; i < conns; i++) {
        n->conns[i].fd = -1;
        n->conns[i].buf_cap = 4096;
        n->conns[i].buf = malloc(4096);
        n->conns[i].cs = checksum_new();
        if (!n->conns[i].buf || !n->conns[i].cs ||
            frame_decoder_init(&n->conns[i].dec, &lim) != 0) {
            node_close(s);
            return client_err(s, -ENOMEM, "out of memory");
        }
    }
    if ((rc = resolve(s, n, u->authority)) != 0) {
        node_close(s);
        return rc;
    }
    /* Report an unknown option before trying the network, which could hide it. */
    if ((rc = url_check_unused(u, msg, sizeof(msg))) != 0) {
        node_close(s);
        return client_err(s, rc, "%s", msg);
    }
    /* Connect now, so that a wrong address or token fails tide_open, not the first call. */
    call k = {s, n, NULL, now_ns() + n->timeout_ns, 0};
    if ((rc = conn_take(&k)) != 0) {
        conn_give(&k, 1);
        node_close(s);
        return rc;
    }
    conn_give(&k, 0);
    return 0;
}

const backend_ops node_backend = {
    .scheme = "tide",
    .open = node_open,
    .close = node_close,
    .put_many = node_put_many,
    .get_many = node_get_many,
    .exists_many = node_exists_many,
    .remove_many = node_remove_many,
    .match_prefix = node_match_prefix,
    .clear = node_clear,
    .stats = node_stats,
};
