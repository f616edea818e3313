/*
 * wire.c — a connection to a tided: framed exchanges with deadlines, a set of idle
 * connections to reuse, HELLO, retries.
 *
 * What tide:// (node.c) and unix:// (unixshm.c) share; each backend keeps only what differs:
 * node.c its PUT/GET with values on the wire, unixshm.c its RESERVE/COMMIT/PIN/RELEASE and
 * the mapped pool. The differences left here are set in the `wire` by the backend: the
 * address (TCP or AF_UNIX, which also decides whether file descriptors are taken from the
 * socket), the HELLO features and what to do with the reply (unixshm.c maps the pool's memfd),
 * whether a stale kept connection is retried, whether replies may carry value bytes.
 *
 * Invariants: a connection is used by the one call that holds it (busy, under lock); a
 * connection that failed in any way is closed before it is given back, so every open one is
 * at a frame boundary, except for `unread` replies, which the next exchange reads first.
 */
#include "client/wire.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/stats_fields.h"

/* ---- socket I/O with a deadline ------------------------------------------------------- */

int wire_wait(wire_call *k, short events) {
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

int wire_io_again(wire_call *k, short events) {
    if (errno == EINTR) return 0;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return -errno;
    return wire_wait(k, events);
}

/* Drop n bytes from the front of an iovec list. */
static void wire_iov_advance(struct iovec **iov, int *cnt, size_t n) {
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

int wire_send(wire_call *k, struct iovec *iov, int cnt) {
    /* The reply to what is sent here cannot be in yet: the next read polls first. */
    k->c->drained = 1;
    while (cnt > 0) {
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)(cnt > 1024 ? 1024 : cnt)};
        ssize_t w = sendmsg(k->c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0) {
            int rc = wire_io_again(k, POLLOUT);
            if (rc) return rc;
            continue;
        }
        wire_iov_advance(&iov, &cnt, (size_t)w);
    }
    return 0;
}

/* Keep the first descriptor passed (when asked for one) and close every other: a client
 * never keeps fds it did not ask for. */
static void wire_take_fds(struct msghdr *mh, int *fd) {
    for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c)) {
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
}

ssize_t wire_recvmsg(wire_call *k, struct msghdr *mh, int flags, size_t asked) {
    wire_sock *c = k->c;
    for (;;) {
        if (c->drained) {
            int rc = wire_wait(k, POLLIN);
            if (rc) return rc;
            c->drained = 0;
        }
        ssize_t r = recvmsg(c->fd, mh, flags | MSG_DONTWAIT);
        if (r < 0) {
            if (errno == EINTR) continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK) return -errno;
            c->drained = 1;
            continue;
        }
        c->drained = (size_t)r < asked;
        return r;
    }
}

/* Read at least min and at most max bytes into buf (see wire_recv for fd). *got: the
 * bytes read. */
static int wire_recv_upto(wire_call *k, uint8_t *buf, size_t min, size_t max, int *fd,
                          size_t *got) {
    /* Only a Unix socket can pass descriptors; over TCP no control buffer is offered. */
    int unix_fds = k->w->sa.ss_family == AF_UNIX;
    *got = 0;
    while (*got < min) {
        union {
            struct cmsghdr h;
            char buf[CMSG_SPACE(4 * sizeof(int))];
        } ctl;
        struct iovec v = {buf + *got, max - *got};
        struct msghdr mh = {.msg_iov = &v, .msg_iovlen = 1};
        if (unix_fds) {
            mh.msg_control = ctl.buf;
            mh.msg_controllen = sizeof(ctl.buf);
        }
        ssize_t r = wire_recvmsg(k, &mh, unix_fds ? MSG_CMSG_CLOEXEC : 0, v.iov_len);
        if (r < 0) return (int)r;
        if (unix_fds) wire_take_fds(&mh, fd);
        if (r == 0) return -ECONNRESET;
        k->got_reply_bytes = 1;
        *got += (size_t)r;
    }
    return 0;
}

int wire_recv(wire_call *k, struct iovec *iov, int cnt, int *fd) {
    for (int i = 0; i < cnt; i++) {
        size_t got;
        int rc = wire_recv_upto(k, iov[i].iov_base, iov[i].iov_len, iov[i].iov_len, fd, &got);
        if (rc) return rc;
    }
    return 0;
}

int wire_recv_head(wire_call *k, frame_msg *m, int *fd) {
    wire_sock *c = k->c;
    const char *addr = k->w->addr;
    size_t have = 0, hint = k->head_hint;
    k->head_hint = 0;
    for (;;) {
        ssize_t n = frame_decode_head(&c->dec, c->buf, have, m);
        if (n < 0) return client_err(k->s, (int)n, "%s: bad reply: %s", addr, c->dec.errstr);
        if (n > 0) {
            if ((size_t)n != have) /* bytes past the reply: only a broken server sends them */
                return client_err(k->s, TIDE_EPROTO, "%s: %s reply followed by more bytes", addr,
                                  frame_op_name(m->h.opcode));
            if (k->w->heads_only && m->data_len)
                return client_err(k->s, TIDE_EPROTO, "%s: %s reply carries value bytes", addr,
                                  frame_op_name(m->h.opcode));
            return 0;
        }
        size_t want = have + c->dec.need, most = want;
        if (have == 0 && hint > want) most = hint; /* header and key section in one read */
        if (most > c->buf_cap) {
            size_t cap = c->buf_cap;
            while (cap < most)
                cap *= 2;
            uint8_t *grown = realloc(c->buf, cap);
            if (!grown) return client_err(k->s, -ENOMEM, "%s: out of memory", addr);
            c->buf = grown;
            c->buf_cap = cap;
        }
        /* Read what the decoder asked for, and no more than the hint, so no byte of the
         * value section (or of a later frame) is swallowed into the head buffer. */
        size_t got;
        int rc = wire_recv_upto(k, c->buf + have, want - have, most - have, fd, &got);
        if (rc) return rc;
        have += got;
    }
}

int wire_io_fail(wire_call *k, const char *what, int rc) {
    const char *addr = k->w->addr;
    if (rc == -ETIMEDOUT)
        return client_err(k->s, rc, "%s: %s timed out after %llu ms", addr, what,
                          (unsigned long long)(k->w->timeout_ns / 1000000));
    if (rc == -ECONNRESET || rc == -EPIPE)
        return client_err(k->s, rc, "%s: %s: tided closed the connection (%s)", addr, what,
                          strerror(-rc));
    if (rc > -TIDE_ERRBASE) return client_err(k->s, rc, "%s: %s: %s", addr, what, strerror(-rc));
    return rc; /* a tide code: the message is already set */
}

/* After a send failed with rc: a tided that closes the connection (EPIPE, ECONNRESET)
 * often said why first — a HELLO refused (--unix-allow-uid, --max-conns) or a request
 * refused on its head (--max-value, --max-keys, --max-frame) while the client was still
 * sending its value — and that reason, waiting in the socket, is the error to report.
 * Replies owed to earlier requests come before it. 1 with the refusal in *m (and any
 * descriptor in *fd), else 0. */
static int wire_read_refusal(wire_call *k, int rc, frame_msg *m, int *fd) {
    if (rc != -EPIPE && rc != -ECONNRESET) return 0;
    for (; k->c->unread > 0; k->c->unread--)
        if (wire_recv_head(k, m, NULL) != 0) return 0;
    return wire_recv_head(k, m, fd) == 0 && m->h.status != 0;
}

/* ---- connections ---------------------------------------------------------------------- */

static void wire_sock_close(wire_sock *c) {
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
}

/* What a peer that is not tided answered our HELLO with, said from its first bytes: an
 * HTTP server (tided's own metrics port among them), a Redis server, a TLS server, an SSH
 * server or other banner, or bytes we cannot place. */
static void wire_peer_kind(const uint8_t *b, size_t n, char *out, size_t cap) {
    char text[48];
    size_t k = 0;
    for (; k < n && k < sizeof(text) - 1 && b[k] != '\r' && b[k] != '\n'; k++)
        text[k] = b[k] >= 0x20 && b[k] < 0x7f ? (char)b[k] : '.';
    text[k] = '\0';
    if (n >= 5 && memcmp(b, "HTTP/", 5) == 0)
        snprintf(out, cap,
                 "an HTTP server answered ('%s'), not tided: is this tided's metrics port "
                 "(--metrics-port)? tide:// wants tided's native port (--port)",
                 text);
    else if (n >= 1 && strchr("+-:$*", b[0]) && b[0])
        snprintf(out, cap,
                 "a Redis (RESP) server answered ('%s'), not tided's native protocol: is this "
                 "a redis-server or tided's --resp-port? tide:// wants tided's --port",
                 text);
    else if (n >= 2 && (b[0] == 0x15 || b[0] == 0x16) && b[1] == 0x03)
        snprintf(out, cap,
                 "a TLS server answered (a TLS %s record), not tided: tide:// speaks "
                 "plain TCP; point it at tided's native port",
                 b[0] == 0x15 ? "alert" : "handshake");
    else if (n >= 4 && memcmp(b, "SSH-", 4) == 0)
        snprintf(out, cap, "an SSH server answered ('%s'), not tided", text);
    else {
        char hex[3 * 8 + 1] = "";
        for (size_t i = 0; i < n && i < 8; i++)
            snprintf(hex + 3 * i, sizeof(hex) - 3 * i, "%02x ", b[i]);
        if (hex[0]) hex[strlen(hex) - 1] = '\0';
        snprintf(out, cap,
                 "the peer is not tided: it answered HELLO with bytes %s ('%s'), where tided's "
                 "replies begin with \"TIDE\"",
                 hex, text);
    }
}

/* Before the HELLO reply is decoded: the first bytes that came back, without taking them.
 * 1 with the message set when they cannot begin a tide frame (a wrong port: an HTTP or
 * Redis server answers at once), 0 to go on reading the reply, or an error. Over TCP only:
 * a Unix socket's reply carries a descriptor, which a peek would not deliver. */
static int wire_hello_peek(wire_call *k, int *rc) {
    static const uint8_t magic[4] = {'T', 'I', 'D', 'E'};
    _Static_assert(FRAME_MAGIC == 0x45444954u, "the magic reads \"TIDE\" on the wire");
    uint8_t b[64];
    ssize_t n;
    for (;;) {
        n = recv(k->c->fd, b, sizeof(b), MSG_PEEK | MSG_DONTWAIT);
        if (n >= 0 || errno == EINTR) {
            if (n >= 0) break;
            continue;
        }
        if (errno != EAGAIN && errno != EWOULDBLOCK) return 0; /* the read reports it */
        if ((*rc = wire_wait(k, POLLIN)) != 0) return 1;
    }
    size_t cmp = (size_t)n < sizeof(magic) ? (size_t)n : sizeof(magic);
    if (n == 0 || memcmp(b, magic, cmp) == 0) return 0;
    /* More may be on its way (an HTTP status line in pieces): wait briefly for a line. */
    for (int tries = 0; tries < 5 && n < (ssize_t)sizeof(b) && !memchr(b, '\n', (size_t)n);
         tries++) {
        struct pollfd p = {k->c->fd, POLLIN, 0};
        if (poll(&p, 1, 10) <= 0) break;
        ssize_t more = recv(k->c->fd, b, sizeof(b), MSG_PEEK | MSG_DONTWAIT);
        if (more <= n) break;
        n = more;
    }
    char kind[320];
    wire_peer_kind(b, (size_t)n, kind, sizeof(kind));
    *rc = client_err(k->s, TIDE_EPROTO, "%s: %s", k->w->addr, kind);
    return 1;
}

/* HELLO on a new connection: version, token, features; the server's limits; then the
 * backend's on_hello with the reply and any descriptor that came with it. */
static int wire_hello(wire_call *k) {
    wire *w = k->w;
    frame_hello h = {FRAME_VERSION, FRAME_VERSION,
                     w->features | (w->replica ? FRAME_FEATURE_REPLICA | FRAME_FEATURE_HINTS : 0),
                     (const uint8_t *)w->token, (uint16_t)strlen(w->token)};
    if (!h.token_len) h.token = NULL;
    uint8_t buf[FRAME_HDR_SIZE + FRAME_HELLO_KEYS + FRAME_TOKEN_MAX];
    size_t len;
    int rc = frame_encode_hello(buf, sizeof(buf), &len, k->c->next_req++, &h);
    if (rc) return client_err(k->s, rc, "%s: cannot encode HELLO", w->addr);
    struct iovec v = {buf, len};
    frame_msg m;
    int fd = -1;
    if ((rc = wire_send(k, &v, 1)) != 0) {
        if (wire_read_refusal(k, rc, &m, &fd)) {
            if (fd >= 0) close(fd);
            return client_err(k->s, m.h.status, "%s: HELLO refused: %.*s", w->addr,
                              (int)m.errmsg_len, m.errmsg ? m.errmsg : "");
        }
        if (fd >= 0) close(fd);
        return wire_io_fail(k, "HELLO", rc);
    }
    if (w->sa.ss_family != AF_UNIX && wire_hello_peek(k, &rc)) {
        if (rc == -ETIMEDOUT)
            return client_err(k->s, rc,
                              "%s: HELLO timed out after %llu ms: the peer accepted the "
                              "connection and sent nothing back, where tided answers at once "
                              "(a busy tided, or a server of another kind waiting for its own "
                              "request: is this tided's --port?)",
                              w->addr, (unsigned long long)(w->timeout_ns / 1000000));
        return rc > -TIDE_ERRBASE ? wire_io_fail(k, "HELLO", rc) : rc; /* else: said */
    }
    rc = wire_recv_head(k, &m, &fd);
    if (rc)
        rc = wire_io_fail(k, "HELLO", rc);
    else if (m.h.status != 0)
        rc = client_err(k->s, m.h.status, "%s: HELLO refused: %.*s", w->addr, (int)m.errmsg_len,
                        m.errmsg ? m.errmsg : "");
    else if (m.h.opcode != (FRAME_OP_HELLO | FRAME_OP_REPLY))
        rc = client_err(k->s, TIDE_EPROTO, "%s: HELLO answered with %s", w->addr,
                        frame_op_name(m.h.opcode));
    if (rc) {
        if (fd >= 0) close(fd);
        return rc;
    }
    pthread_mutex_lock(&w->lock);
    w->max_keys = m.hello_reply.max_keys;
    w->max_frame = m.hello_reply.max_frame;
    pthread_mutex_unlock(&w->lock);
    k->c->replica = w->replica && (m.hello_reply.features & FRAME_FEATURE_REPLICA);
    k->c->hints = k->c->replica && (m.hello_reply.features & FRAME_FEATURE_HINTS);
    if (w->replica) atomic_store(&w->hints, k->c->hints);
    if (w->on_hello) return w->on_hello(k, &m, fd);
    if (fd >= 0) close(fd);
    return 0;
}

/* The client's timeout as REPLICA carries it: milliseconds, 1..UINT32_MAX. */
static uint32_t wire_timeout_ms(const wire *w) {
    uint64_t ms = w->timeout_ns / 1000000;
    return (uint32_t)(ms > UINT32_MAX ? UINT32_MAX : ms ? ms : 1);
}

/* REPLICA on k's connection (a cluster member's): the client's timeout and, when the
 * cluster skipped this node since the last one, the MISSED flag, so that the node drops
 * what may be stale before it answers anything else. */
static int wire_replica(wire_call *k) {
    wire *w = k->w;
    int missed = atomic_exchange(&w->missed, 0);
    uint8_t buf[FRAME_HDR_SIZE + FRAME_REPLICA_KEYS];
    size_t len;
    frame_msg m;
    int rc = frame_encode_replica(buf, sizeof(buf), &len, 0, missed ? FRAME_REPLICA_MISSED : 0,
                                  wire_timeout_ms(w));
    if (rc == 0) rc = wire_exchange(k, buf, len, NULL, 0, "REPLICA", &m);
    if (rc != 0 && missed) atomic_store(&w->missed, 1); /* not delivered: said next time */
    return rc;
}

void wire_mark_missed(wire *w) {
    atomic_store(&w->missed, 1);
}

static int wire_on_replica_reply(wire_call *k, const frame_msg *m, void *arg) {
    (void)k;
    uint64_t *out = arg;
    out[0] = m->replica.fences;
    out[1] = m->replica.generation;
    return 0;
}

int wire_replica_call(tide_store *s, wire *w, uint32_t flags, uint64_t member, uint64_t seq,
                      uint64_t out[2]) {
    if (!w->replica) return client_err(s, TIDE_EUNSUPPORTED, "%s: not a cluster member", w->addr);
    int hint = flags != FRAME_REPLICA_MISSED;
    if (hint && !atomic_load(&w->hints))
        return client_err(s, TIDE_EUNSUPPORTED, "%s: this tided holds no hints", w->addr);
    uint32_t tms = wire_timeout_ms(w);
    uint8_t buf[FRAME_HDR_SIZE + FRAME_REPLICA_HINT_META];
    size_t len;
    int rc = hint ? frame_encode_replica_hint(buf, sizeof(buf), &len, 0, flags, tms, member, seq)
                  : frame_encode_replica(buf, sizeof(buf), &len, 0, flags, tms);
    if (rc) return client_err(s, rc, "%s: cannot encode REPLICA (flags 0x%x)", w->addr, flags);
    wire_request x = {.what = "REPLICA",
                      .head = buf,
                      .head_len = len,
                      .on_reply = wire_on_replica_reply,
                      .arg = out,
                      .hints = hint};
    return wire_run(s, w, &x);
}

/* TCP: a non-blocking connect, waited for against the deadline. */
static int wire_connect_tcp(wire_call *k) {
    wire *w = k->w;
    wire_sock *c = k->c;
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(c->fd, (struct sockaddr *)&w->sa, w->salen) != 0 && errno != EINPROGRESS) {
        int e = errno;
        wire_sock_close(c);
        return client_err(k->s, -e, "%s: connect: %s", w->addr, strerror(e));
    }
    int rc = wire_wait(k, POLLOUT);
    int soerr = 0;
    socklen_t sl = sizeof(soerr);
    if (rc == 0) getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
    if (rc || soerr) {
        wire_sock_close(c);
        rc = rc ? rc : -soerr;
        return client_err(k->s, rc, "%s: connect: %s", w->addr, strerror(-rc));
    }
    return 0;
}

/* AF_UNIX: connect completes at once or not at all; a full backlog is tried again. */
static int wire_connect_unix(wire_call *k) {
    wire *w = k->w;
    wire_sock *c = k->c;
    for (;;) {
        if (connect(c->fd, (struct sockaddr *)&w->sa, w->salen) == 0) return 0;
        int e = errno;
        if ((e == EAGAIN || e == EINTR) && now_ns() < k->deadline) {
            /* The listener's backlog is full: nothing was started, try again shortly. */
            struct timespec d = {0, 1000000};
            nanosleep(&d, NULL);
            continue;
        }
        wire_sock_close(c);
        const char *hint = e == ENOENT || e == ECONNREFUSED ? " (is tided running with --unix "
                                                              "on this path?)"
                           : e == EACCES ? " (the socket's mode does not admit this user; see "
                                           "tide serve --unix-mode)"
                                         : "";
        return client_err(k->s, -e, "%s: connect: %s%s", w->addr, strerror(e), hint);
    }
}

/* A TCP connection that tided closes before answering its HELLO is opened again, up to
 * WIRE_HELLO_TRIES times within the deadline: a tided with a token sheds the oldest of its
 * unauthenticated connections under a flood of them (--max-preauth-conns), and a new
 * connection is briefly one of those. Nothing has been asked on it yet, so trying again
 * is safe. */
#define WIRE_HELLO_TRIES 3

static int wire_sock_open(wire_call *k) {
    wire *w = k->w;
    wire_sock *c = k->c;
    int rc = 0;
    for (int tries = 0; tries < WIRE_HELLO_TRIES; tries++) {
        c->fd = socket(w->sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (c->fd < 0) return client_err(k->s, -errno, "%s: socket: %s", w->addr, strerror(errno));
        rc = w->sa.ss_family == AF_UNIX ? wire_connect_unix(k) : wire_connect_tcp(k);
        if (rc) return rc;
        frame_decoder_reset(&c->dec);
        c->fresh = 1;
        c->unread = 0;
        if ((rc = wire_hello(k)) == 0 && (!c->replica || (rc = wire_replica(k)) == 0)) return 0;
        wire_sock_close(c);
        if (w->sa.ss_family == AF_UNIX || (rc != -ECONNRESET && rc != -EPIPE) ||
            now_ns() >= k->deadline)
            break;
    }
    return rc;
}

int wire_take(wire_call *k) {
    wire *w = k->w;
    pthread_mutex_lock(&w->lock);
    for (;;) {
        wire_sock *pick = NULL;
        for (int i = 0; i < w->nconns && !pick; i++)
            if (!w->conns[i].busy && w->conns[i].fd >= 0) pick = &w->conns[i];
        for (int i = 0; i < w->nconns && !pick; i++)
            if (!w->conns[i].busy) pick = &w->conns[i];
        if (pick) {
            pick->busy = 1;
            k->c = pick;
            break;
        }
        pthread_cond_wait(&w->idle, &w->lock);
    }
    pthread_mutex_unlock(&w->lock);
    k->c->fresh = 0;
    if (k->c->fd >= 0) return 0;
    return wire_sock_open(k);
}

/* Take a connection without waiting, and only when another stays free (idle or
 * unopened): the hint question holds its connection while its caller's own call waits for
 * one to another node in wire_take, so two threads, each holding the last connection to
 * the node the other waits for, would wait forever. Leaving one connection to every taker
 * that waits means a waiter only ever waits for calls that finish on their own. 1: none
 * to spare (k->c unset); else as wire_take. */
static int wire_take_spare(wire_call *k) {
    wire *w = k->w;
    pthread_mutex_lock(&w->lock);
    wire_sock *pick = NULL;
    int free_ = 0;
    for (int i = 0; i < w->nconns; i++)
        if (!w->conns[i].busy) free_++;
    for (int i = 0; i < w->nconns && !pick && free_ >= 2; i++)
        if (!w->conns[i].busy && w->conns[i].fd >= 0) pick = &w->conns[i];
    for (int i = 0; i < w->nconns && !pick && free_ >= 2; i++)
        if (!w->conns[i].busy) pick = &w->conns[i];
    if (pick) {
        pick->busy = 1;
        k->c = pick;
    }
    pthread_mutex_unlock(&w->lock);
    if (!pick) return 1;
    k->c->fresh = 0;
    if (k->c->fd >= 0) return 0;
    return wire_sock_open(k);
}

void wire_give(wire_call *k, int broken) {
    wire *w = k->w;
    if (!k->c) return;
    if (broken) wire_sock_close(k->c);
    pthread_mutex_lock(&w->lock);
    k->c->busy = 0;
    pthread_cond_signal(&w->idle);
    pthread_mutex_unlock(&w->lock);
    k->c = NULL;
}

int wire_url_opts(tide_store *s, url *u, const char *name, uint64_t default_conns,
                  uint64_t *timeout_ms, uint64_t *conns, const char **token) {
    char msg[ERR_MSG_MAX];
    int rc;
    if ((rc = url_opt_uint(u, "timeout_ms", WIRE_DEFAULT_TIMEOUT_MS, timeout_ms, msg,
                           sizeof(msg))) ||
        (rc = url_opt_uint(u, "conns", default_conns, conns, msg, sizeof(msg))))
        return client_err(s, rc, "%s: %s", name, msg);
    if (*timeout_ms == 0 || *conns == 0 || *conns > 1024)
        return client_err(s, TIDE_EOPTION, "%s: timeout_ms must be above 0 and conns 1..1024",
                          name);
    *token = url_get(u, "token");
    if (!*token) *token = getenv("TIDE_AUTH_TOKEN");
    if (*token && strlen(*token) > FRAME_TOKEN_MAX)
        return client_err(s, TIDE_EOPTION, "%s: the auth token is longer than %d bytes", name,
                          FRAME_TOKEN_MAX);
    return 0;
}

int wire_connect_now(tide_store *s, wire *w) {
    wire_call k = wire_begin(s, w);
    int rc = wire_take(&k);
    wire_give(&k, rc != 0);
    return rc;
}

wire_call wire_begin(tide_store *s, wire *w) {
    return (wire_call){.s = s, .w = w, .deadline = now_ns() + w->timeout_ns};
}

int wire_init(tide_store *s, wire *w, int nconns, uint64_t timeout_ms, const char *token) {
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->idle, NULL);
    w->timeout_ns = timeout_ms * 1000000ull;
    if (token) snprintf(w->token, sizeof(w->token), "%s", token);
    w->conns = calloc((size_t)nconns, sizeof(wire_sock));
    if (!w->conns) return client_err(s, -ENOMEM, "out of memory");
    w->nconns = nconns;
    for (int i = 0; i < nconns; i++)
        w->conns[i].fd = -1;
    frame_limits lim;
    frame_limits_default(&lim);
    lim.max_value = UINT64_MAX >> 16; /* replies: trust sizes, the caller bounded them */
    lim.max_frame = FRAME_MAX_FRAME_CAP;
    lim.max_keys = TIDE_BATCH_MAX;
    for (int i = 0; i < nconns; i++) {
        wire_sock *c = &w->conns[i];
        c->buf_cap = 4096;
        c->buf = malloc(4096);
        if (w->checksums) c->cs = checksum_new();
        if (!c->buf || (w->checksums && !c->cs) || frame_decoder_init(&c->dec, &lim) != 0)
            return client_err(s, -ENOMEM, "out of memory");
    }
    return 0;
}

void wire_destroy(wire *w) {
    for (int i = 0; i < w->nconns; i++) {
        wire_sock_close(&w->conns[i]);
        free(w->conns[i].buf);
        checksum_free(w->conns[i].cs);
    }
    free(w->conns);
    w->conns = NULL;
    w->nconns = 0;
    pthread_mutex_destroy(&w->lock);
    pthread_cond_destroy(&w->idle);
}

/* ---- exchanges ------------------------------------------------------------------------ */

int wire_exchange(wire_call *k, uint8_t *head, size_t head_len, const struct iovec *vals, int nvals,
                  const char *what, frame_msg *m) {
    const char *addr = k->w->addr;
    unsigned op = head[5];      /* every encoder puts the opcode at offset 5, req_id at 8 */
    size_t hint = k->head_hint; /* for this request's reply, not the unread ones before it */
    k->head_hint = 0;
    uint64_t req_id = k->c->next_req++;
    le_wr64(head + 8, req_id);
    struct iovec one, *iov = &one;
    if (nvals) {
        iov = malloc((size_t)(nvals + 1) * sizeof(*iov));
        if (!iov) return client_err(k->s, -ENOMEM, "%s: out of memory", addr);
        memcpy(iov + 1, vals, (size_t)nvals * sizeof(*iov));
    }
    iov[0] = (struct iovec){head, head_len};
    int rc = wire_send(k, iov, nvals + 1);
    if (iov != &one) free(iov);
    if (rc) {
        if (wire_read_refusal(k, rc, m, NULL))
            return client_err(k->s, m->h.status, "%s: %s failed: %.*s", addr, what,
                              (int)m->errmsg_len, m->errmsg ? m->errmsg : "");
        return wire_io_fail(k, what, rc);
    }
    /* Replies come in order: first those of the requests not waited for. Their statuses
     * matter to nobody (unixshm.c says why), only that they answer what was sent. */
    for (; k->c->unread > 0; k->c->unread--) {
        if ((rc = wire_recv_head(k, m, NULL)) != 0) return wire_io_fail(k, what, rc);
        if (m->h.opcode != (k->c->unread_op | FRAME_OP_REPLY))
            return client_err(k->s, TIDE_EPROTO, "%s: %s answered a %s", addr,
                              frame_op_name(m->h.opcode), frame_op_name(k->c->unread_op));
    }
    k->head_hint = hint;
    if ((rc = wire_recv_head(k, m, NULL)) != 0) return wire_io_fail(k, what, rc);
    if (m->h.req_id != req_id)
        return client_err(k->s, TIDE_EPROTO, "%s: %s: reply for request %llu, expected %llu", addr,
                          what, (unsigned long long)m->h.req_id, (unsigned long long)req_id);
    if (m->h.status != 0)
        return client_err(k->s, m->h.status, "%s: %s failed: %.*s", addr, what, (int)m->errmsg_len,
                          m->errmsg ? m->errmsg : "");
    if (m->h.opcode != (op | FRAME_OP_REPLY))
        return client_err(k->s, TIDE_EPROTO, "%s: %s answered with %s", addr, what,
                          frame_op_name(m->h.opcode));
    return 0;
}

int wire_exchange_n(wire_call *k, uint8_t *head, size_t head_len, size_t n, frame_msg *m) {
    char what[64];
    snprintf(what, sizeof(what), "%s of %zu keys", frame_op_name(head[5]), n);
    int rc = wire_exchange(k, head, head_len, NULL, 0, what, m);
    if (rc == 0 && m->h.count != n)
        rc = client_err(k->s, TIDE_EPROTO, "%s: %s answered for %u keys", k->w->addr, what,
                        m->h.count);
    return rc;
}

void wire_send_nowait(wire_call *k, uint8_t *head, size_t head_len) {
    le_wr64(head + 8, k->c->next_req++);
    struct iovec v = {head, head_len};
    if (wire_send(k, &v, 1) == 0) {
        k->c->unread_op = head[5];
        k->c->unread++;
    } else {
        wire_sock_close(k->c);
    }
}

/* Close every idle kept connection: one was found dead, and those opened before it likely
 * are too (the node restarted, or dropped its contents and closed its connections), so the
 * retry opens a fresh one instead of trying them in turn and failing the call. */
static void wire_drop_idle(wire *w) {
    pthread_mutex_lock(&w->lock);
    for (int i = 0; i < w->nconns; i++)
        if (!w->conns[i].busy) wire_sock_close(&w->conns[i]);
    pthread_mutex_unlock(&w->lock);
}

int wire_run(tide_store *s, wire *w, wire_request *x) {
    wire_call k = wire_begin(s, w);
    for (int attempt = 0;; attempt++) {
        int rc = wire_take(&k);
        if (rc) {
            wire_give(&k, 1);
            return rc;
        }
        int fresh = k.c->fresh;
        k.got_reply_bytes = 0;
        if (k.c->replica && !fresh && atomic_load(&w->missed) && (rc = wire_replica(&k)) != 0) {
            /* A kept connection the node closed (it dropped its contents since): again. */
            wire_give(&k, 1);
            int io_error = rc > -TIDE_ERRBASE && rc != -ETIMEDOUT;
            if (w->retry && attempt == 0 && !k.got_reply_bytes && io_error) {
                wire_drop_idle(w);
                continue;
            }
            return rc;
        }
        if (x->hints && !k.c->hints) { /* the grant is per connection: this one lacks it */
            wire_give(&k, 0);
            return client_err(s, TIDE_EUNSUPPORTED, "%s: this tided holds no hints", w->addr);
        }
        k.got_reply_bytes = 0;
        k.head_hint = x->reply_head;
        frame_msg m;
        rc = wire_exchange(&k, x->head, x->head_len, x->vals, x->nvals, x->what, &m);
        if (rc == 0 && (rc = x->on_reply(&k, &m, x->arg)) != 0) rc = wire_io_fail(&k, x->what, rc);
        wire_give(&k, rc != 0);
        if (rc == 0) return 0;
        int io_error = rc > -TIDE_ERRBASE && rc != -ETIMEDOUT;
        if (w->retry && attempt == 0 && !fresh && !k.got_reply_bytes && io_error) {
            wire_drop_idle(w);
            continue;
        }
        return rc;
    }
}

void wire_ask_send(tide_store *s, wire *w, uint64_t member, wire_pending *p) {
    memset(p, 0, sizeof(*p));
    if (!w->replica || !atomic_load(&w->hints) || atomic_load(&w->missed)) return;
    uint8_t buf[FRAME_HDR_SIZE + FRAME_REPLICA_HINT_META];
    size_t len;
    if (frame_encode_replica_hint(buf, sizeof(buf), &len, 0, FRAME_REPLICA_ASK, wire_timeout_ms(w),
                                  member, 0) != 0)
        return;
    p->k = wire_begin(s, w);
    int rc = wire_take_spare(&p->k);
    if (rc == 1) return; /* none to spare: the whole call after the caller's own */
    if (rc || p->k.c->unread > 0 || !p->k.c->hints) {
        /* No connection: that is the answer. Replies owed first, or a connection just
         * opened to a tided that grants no hints (the grant is per connection): the whole
         * call, which says what this tided holds. */
        wire_give(&p->k, rc != 0);
        p->rc = rc;
        return;
    }
    p->req_id = p->k.c->next_req++;
    le_wr64(buf + 8, p->req_id);
    struct iovec v = {buf, len};
    if (wire_send(&p->k, &v, 1) != 0) {
        wire_give(&p->k, 1);
        return;
    }
    p->active = 1;
}

int wire_ask_recv(tide_store *s, wire *w, uint64_t member, wire_pending *p, uint64_t out[2]) {
    if (p->rc) return p->rc;
    if (!p->active) return wire_replica_call(s, w, FRAME_REPLICA_ASK, member, 0, out);
    p->active = 0;
    frame_msg m;
    /* The wait starts now: the caller's own call in between (one to a hung node may take
     * the whole timeout) is not this answer's fault. */
    p->k.deadline = now_ns() + w->timeout_ns;
    p->k.got_reply_bytes = 0;
    p->k.head_hint = 0;
    int fresh = p->k.c->fresh;
    int rc = wire_recv_head(&p->k, &m, NULL);
    if (rc == 0) {
        if (m.h.req_id != p->req_id || m.h.opcode != (FRAME_OP_REPLICA | FRAME_OP_REPLY)) {
            rc = client_err(s, TIDE_EPROTO, "%s: REPLICA answered with %s for request %llu",
                            w->addr, frame_op_name(m.h.opcode), (unsigned long long)m.h.req_id);
            wire_give(&p->k, 1);
            return rc;
        }
        if (m.h.status != 0) {
            rc = client_err(s, m.h.status, "%s: REPLICA failed: %.*s", w->addr, (int)m.errmsg_len,
                            m.errmsg ? m.errmsg : "");
            wire_give(&p->k, 0);
            return rc;
        }
        out[0] = m.replica.fences;
        out[1] = m.replica.generation;
        wire_give(&p->k, 0);
        return 0;
    }
    int got = p->k.got_reply_bytes, io_error = rc > -TIDE_ERRBASE && rc != -ETIMEDOUT;
    rc = wire_io_fail(&p->k, "REPLICA", rc);
    wire_give(&p->k, 1);
    if (w->retry && !fresh && !got && io_error) { /* a dead kept connection: as wire_run */
        wire_drop_idle(w);
        return wire_replica_call(s, w, FRAME_REPLICA_ASK, member, 0, out);
    }
    return rc;
}

size_t wire_chunk(wire *w, const tide_key *keys, size_t left, size_t per_key) {
    pthread_mutex_lock(&w->lock);
    size_t mk = w->max_keys ? w->max_keys : FRAME_DEFAULT_MAX_KEYS;
    uint64_t mf = w->max_frame ? w->max_frame : FRAME_DEFAULT_MAX_FRAME;
    pthread_mutex_unlock(&w->lock);
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

uint64_t wire_max_frame(wire *w) {
    pthread_mutex_lock(&w->lock);
    uint64_t mf = w->max_frame ? w->max_frame : FRAME_DEFAULT_MAX_FRAME;
    pthread_mutex_unlock(&w->lock);
    return mf;
}

int wire_batch(tide_store *s, wire *w, int is_put, const tide_key *keys, size_t n,
               const tide_iov *iov, const size_t *iovcnt, int *results, size_t *vlens,
               wire_batch_chunk chunk, void *arg) {
    size_t nn = n ? n : 1;
    tide_key *fk = malloc(nn * sizeof(*fk));
    const tide_iov **fv = malloc(nn * sizeof(*fv));
    size_t *fcnt = malloc(nn * sizeof(*fcnt)), *fidx = malloc(nn * sizeof(*fidx));
    size_t *lens = calloc(nn, sizeof(*lens)), *fl = calloc(nn, sizeof(*fl));
    uint64_t *sizes = malloc(nn * sizeof(*sizes));
    int *res = malloc(nn * sizeof(*res));
    int rc = 0, ok = 0;
    if (!fk || !fv || !fcnt || !fidx || !lens || !fl || !sizes || !res) {
        rc = client_err(s, -ENOMEM, "%s: out of memory", w->addr);
        goto out;
    }
    size_t nf = 0;
    const tide_iov *v = iov;
    for (size_t i = 0; i < n; i++) {
        size_t cnt = iovcnt ? iovcnt[i] : 1;
        size_t total = iov_total(v, cnt);
        int krc = client_key_check(&keys[i]);
        if (krc == 0 && is_put && total == 0) krc = TIDE_EVALEMPTY;
        results[i] = krc;
        if (krc == 0) {
            fk[nf] = keys[i];
            fv[nf] = v;
            fcnt[nf] = cnt;
            sizes[nf] = total;
            fidx[nf++] = i;
        }
        v += cnt;
    }
    for (size_t done = 0; done < nf;) {
        size_t take = wire_chunk(w, fk + done, nf - done, 8);
        wire_call k = wire_begin(s, w);
        if ((rc = wire_take(&k)) != 0) {
            wire_give(&k, 1);
            goto out;
        }
        rc = chunk(&k, fk + done, fv + done, fcnt + done, sizes + done, take, res, fl, arg);
        wire_give(&k, rc != 0);
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
    free(fk), free(fv), free(fcnt), free(fidx), free(lens), free(fl), free(sizes), free(res);
    return rc ? rc : ok;
}

/* ---- EXISTS, REMOVE, MATCH_PREFIX ----------------------------------------------------- */

struct wire_keys_arg {
    const char *what;
    uint8_t *present;
    int *results;
    uint32_t matched;
    size_t n;
};

static int wire_on_keys_reply(wire_call *k, const frame_msg *m, void *arg) {
    struct wire_keys_arg *a = arg;
    if (m->h.opcode == (FRAME_OP_MATCH_PREFIX | FRAME_OP_REPLY)) {
        if (m->matched > a->n)
            return client_err(k->s, TIDE_EPROTO, "%s: %s matched %u", k->w->addr, a->what,
                              m->matched);
        a->matched = m->matched;
        return 0;
    }
    if (m->h.count != a->n)
        return client_err(k->s, TIDE_EPROTO, "%s: %s answered for %u keys", k->w->addr, a->what,
                          m->h.count);
    frame_iter it;
    frame_entry e;
    frame_iter_init(&it, m);
    for (size_t i = 0; frame_iter_next(&it, &e); i++) {
        if (a->present) a->present[i] = e.present;
        if (a->results) a->results[i] = e.status;
    }
    return 0;
}

/* EXISTS, REMOVE or MATCH_PREFIX over chunks of valid keys. A bad key answers for itself
 * (never present) and ends the chunk before it; MATCH_PREFIX stops there. present/results
 * (whichever the op fills) are indexed like keys. Returns the count present, removed or
 * matched. */
static int wire_keys(tide_store *s, unsigned op, const tide_key *keys, size_t n, uint8_t *present,
                     int *results) {
    wire *w = s->impl;
    int count = 0;
    for (size_t done = 0; done < n;) {
        size_t take = wire_chunk(w, keys + done, n - done, 0);
        size_t good = 0;
        while (good < take && client_key_check(&keys[done + good]) == 0)
            good++;
        if (good == 0) {
            if (op == FRAME_OP_MATCH_PREFIX) return count;
            if (present) present[done] = 0;
            if (results) results[done] = client_key_check(&keys[done]);
            done++;
            continue;
        }
        char what[64];
        snprintf(what, sizeof(what), "%s of %zu keys", frame_op_name(op), good);
        wire_request x = {.what = what, .on_reply = wire_on_keys_reply};
        int rc;
        WIRE_ENCODE(s, rc, x.head, x.head_len,
                    frame_encode_keys(NULL, 0, len, op, 0, keys + done, good),
                    frame_encode_keys(buf, cap, len, op, 0, keys + done, good));
        if (rc) return rc;
        struct wire_keys_arg a = {what, present ? present + done : NULL,
                                  results ? results + done : NULL, 0, good};
        x.arg = &a;
        rc = wire_run(s, w, &x);
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

int wire_exists_many(tide_store *s, const tide_key *keys, size_t n, uint8_t *present) {
    return wire_keys(s, FRAME_OP_EXISTS, keys, n, present, NULL);
}

int wire_remove_many(tide_store *s, const tide_key *keys, size_t n, int *results) {
    return wire_keys(s, FRAME_OP_REMOVE, keys, n, NULL, results);
}

int wire_match_prefix(tide_store *s, const tide_key *keys, size_t n) {
    return wire_keys(s, FRAME_OP_MATCH_PREFIX, keys, n, NULL, NULL);
}

/* ---- CLEAR, STAT ---------------------------------------------------------------------- */

static int wire_on_empty_reply(wire_call *k, const frame_msg *m, void *arg) {
    return 0;
}

/* The figures a STAT reply names that are not the SSD tier's (those are in stats_fields.h);
 * names the client does not know (connections, net_bytes_*) are skipped. */
static const struct {
    const char *name;
    size_t off;
} wire_stat_fields[] = {
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

static int wire_key_is(const frame_entry *e, const char *name) {
    return e->key.len == strlen(name) && memcmp(e->key.data, name, e->key.len) == 0;
}

static int wire_on_stat_reply(wire_call *k, const frame_msg *m, void *arg) {
    tide_stats *st = arg;
    frame_iter it;
    frame_entry e;
    frame_iter_init(&it, m);
    while (frame_iter_next(&it, &e)) {
        for (size_t i = 0; i < sizeof(wire_stat_fields) / sizeof(wire_stat_fields[0]); i++)
            if (wire_key_is(&e, wire_stat_fields[i].name))
                *(uint64_t *)((char *)st + wire_stat_fields[i].off) = e.figure;
        for (size_t i = 0; i < stats_disk_nfields; i++)
            if (wire_key_is(&e, stats_disk_fields[i].name))
                stats_field_set(st, &stats_disk_fields[i], e.figure);
    }
    return 0;
}

/* A request without keys. */
static int wire_simple(tide_store *s, unsigned op, const char *what,
                       int (*on_reply)(wire_call *, const frame_msg *, void *), void *arg) {
    uint8_t head[FRAME_HDR_SIZE];
    size_t len;
    frame_encode_empty(head, sizeof(head), &len, op, 0);
    wire_request x = {
        .what = what, .head = head, .head_len = len, .on_reply = on_reply, .arg = arg};
    return wire_run(s, s->impl, &x);
}

int wire_clear(tide_store *s) {
    return wire_simple(s, FRAME_OP_CLEAR, "CLEAR", wire_on_empty_reply, NULL);
}

struct wire_events_arg {
    tide_event *ev;
    size_t max, n;
    uint64_t *next, *lost;
};

static int wire_on_events_reply(wire_call *k, const frame_msg *m, void *arg) {
    struct wire_events_arg *a = arg;
    frame_iter it;
    frame_entry e;
    frame_iter_init(&it, m);
    while (a->n < a->max && frame_iter_next(&it, &e)) {
        tide_event *v = &a->ev[a->n++];
        v->seq = e.seq;
        v->kind = e.kind;
        v->klen = (uint32_t)e.key.len;
        memcpy(v->key, e.key.data, e.key.len);
    }
    *a->next = m->ev_next;
    *a->lost = m->ev_lost;
    return 0;
}

int wire_events(tide_store *s, uint64_t from, tide_event *ev, size_t max, uint64_t *next,
                uint64_t *lost) {
    uint8_t head[FRAME_HDR_SIZE + FRAME_EVENTS_KEYS];
    size_t len;
    if (max > FRAME_EVENTS_MAX) max = FRAME_EVENTS_MAX;
    max = wire_chunk(s->impl, NULL, max, 0); /* the server's key limit bounds a reply's events */
    frame_encode_events(head, sizeof(head), &len, 0, from, (uint32_t)max);
    struct wire_events_arg a = {ev, max, 0, next, lost};
    wire_request x = {.what = "EVENTS",
                      .head = head,
                      .head_len = len,
                      .on_reply = wire_on_events_reply,
                      .arg = &a};
    int rc = wire_run(s, s->impl, &x);
    return rc < 0 ? rc : (int)a.n;
}

int wire_stats(tide_store *s, tide_stats *st) {
    return wire_simple(s, FRAME_OP_STAT, "STAT", wire_on_stat_reply, st);
}
