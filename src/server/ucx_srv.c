/*
 * ucx_srv.c — tided's UCX data path (`tide serve --ucx-port P`, docs/UCX.md): a UCP
 * listener whose endpoints, once they have shown the tide:// token, move values by active
 * messages, and a second UCP worker on UCX's shared-memory transports through which
 * clients on this host read and write the pool by RMA.
 *
 * Design. The control path (RESERVE, COMMIT, PIN, RELEASE, with their leases) stays on the
 * tide:// connection (conn_shm.c, exactly as for unix:// clients); the bytes move at the
 * offsets those replies give. On the UCX port's worker, UCX_AM_GET is answered with the
 * pool's bytes as UCX_AM_GETDATA's data and UCX_AM_PUT's data is received into the pool
 * (UCX's rendezvous when large: zero-copy both ways, the NIC's own on RDMA), then
 * UCX_AM_PUTDONE; the handlers queue the answers, which the progress loop sends.
 *
 * No RMA on the UCX port. Where a transport has no RMA of its own (TCP), UCX emulates RMA
 * with messages, and the emulation in the target writes and reads whatever address the
 * peer names, registered or not, rkey or not: a context with UCP_FEATURE_RMA behind a port
 * would let any peer that reaches the port, token or not, write anywhere in this process
 * (ucx_unauthenticated_rma_reaches_nothing). So that worker's context has active messages
 * only. The same-host worker (its own context, with RMA) is given UCX's shared-memory
 * transports only: cma, which needs the right to trace this process, and posix/sysv
 * segments made 0600 — only this user's processes on this host reach it, which could trace
 * tided anyway. Its address and the pool's rkey (registered there) go in the WELCOME.
 *
 * Thread. One progress thread owns both UCP workers (UCS_THREAD_MODE_SINGLE): it sleeps in
 * epoll on their event fds (ucp_worker_arm) and a stop eventfd, and between waits runs
 * ucp_worker_progress, answers handshakes, closes endpoints. Nothing else touches UCX, so
 * the I/O workers' epoll loops (worker.c) never wait on it.
 *
 * Authentication. A GET or PUT is served only on an endpoint whose UCX_AM_HELLO carried the
 * server's token (compared in constant time, connio_token_equal, as HELLO on tide://); a
 * wrong token is answered TIDE_EAUTH and the endpoint closed; one that shows nothing within
 * the idle timeout (10 s at least) is closed. At most max_conns endpoints at once; more are
 * rejected at the listener. The leases are the tide:// connection's, whose HELLO passed the
 * same token.
 *
 * UCX's log. UCX logs what peers send it (a message of an id no handler is installed for:
 * 18 lines with a backtrace, each time), so from before the first context its lines go
 * through tided's handler (ucx_log.c): tide's levels and format, a burst and then a few
 * lines a second, the rest counted; a peer without the token cannot grow tided's log
 * faster than that.
 *
 * Failure to start (no usable UCX transport, the port taken) is logged with UCX's reason
 * and tided serves tide:// alone: HELLO then never grants FRAME_FEATURE_UCX, and clients
 * use TCP. A same-host worker that cannot be made is logged, and clients use the port.
 */
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "client/ucx_dl.h"
#include "common/hostport.h"
#include "common/log.h"
#include "common/util.h"
#include "proto/frame.h"
#include "proto/ucx_msg.h"
#include "server/connio.h"
#include "server/server_int.h"
#include "server/ucx_log.h"
#include "server/ucx_srv.h"

#ifdef TIDE_HAVE_UCX

#define PEER_HS_GRACE_NS (2ull * 1000000000ull) /* a refusal's reply gets this long to leave */

typedef struct ucx_peer {
    ucp_ep_h ep;    /* NULL: free slot */
    uint64_t since; /* accepted at */
    int authed;
    int hello;         /* 1: a good HELLO to answer, -1: a bad one, 0: none */
    int failed;        /* the endpoint's error handler ran */
    void *reply_req;   /* the WELCOME being sent */
    uint8_t *reply;    /* its bytes */
    uint64_t close_at; /* close once the reply left or at this time; 0: not closing */
    void *close_req;   /* ucp_ep_close_nbx in progress */
    uint32_t gen;      /* bumped each time the slot takes an endpoint (an op names its own) */
    uint32_t open_ops; /* GETDATA/PUTDONE answers to this endpoint queued or in flight */
} ucx_peer;

/* A GETDATA or PUTDONE to send (from the progress loop, not from a UCX callback); then
 * its header while the send is in flight (UCX 1.13 reads it until completion). */
typedef struct srv_op {
    struct srv_op *next;
    int rndv;                     /* a GETDATA by rendezvous only (the client's device memory) */
    struct srv_op *fprev, *fnext; /* in u->flying while UCX holds it */
    struct ucx_srv *u;
    ucp_ep_h ep;
    int peer; /* u->peers[peer] while its gen is this gen: the endpoint answered */
    uint32_t gen;
    uint8_t hdr[UCX_DONE_HDR];
    int put;           /* PUTDONE; else GETDATA */
    uint64_t off, len; /* GETDATA's bytes in the pool */
} srv_op;

struct ucx_srv {
    server *srv;
    srv_op *todo, **todo_tail; /* answers to send, oldest first */
    srv_op *flying;            /* sends and receives UCX has not completed (a peer that died
                                * mid-transfer may leave some for good: freed at stop) */
    ucp_context_h ctx;         /* the UCX port's: active messages only (no RMA: see the top) */
    ucp_worker_h wk;
    ucp_listener_h lis;
    ucp_context_h hctx; /* the same-host worker's: RMA, shared-memory transports only */
    ucp_worker_h hwk;   /* NULL: none */
    ucp_mem_h memh;     /* the pool, registered in hctx */
    void *rkey;         /* its packed rkey, for the WELCOME */
    size_t rkey_len;
    int efd, hefd, stopfd, epfd;
    pthread_t th;
    int started;
    int port;
    ucx_peer *peers;
    int cap;
    int used;          /* slots [0, used) have been taken at some point: the scans stop there */
    uint32_t open_max; /* answers one endpoint may leave untaken: 4 x max_keys (peer_may_move) */
    uint64_t hs_timeout_ns;
    ucp_address_t *waddr; /* hwk's address, for same-host endpoints (NULL: none) */
    size_t waddr_len;
    char boot_id[UCX_BOOT_ID]; /* this kernel's; zeros when unreadable */
};

static const char *ust(ucs_status_t st) {
    return ucs_status_string(st);
}

static ucx_peer *peer_of(ucx_srv *u, ucp_ep_h ep) {
    for (int i = 0; i < u->used; i++)
        if (u->peers[i].ep == ep && ep) return &u->peers[i];
    return NULL;
}

static void on_ep_error(void *arg, ucp_ep_h ep, ucs_status_t status) {
    ucx_srv *u = arg;
    ucx_peer *p = peer_of(u, ep);
    if (!p) return;
    if (p->authed) LOG_DEBUG("UCX: an endpoint failed: %s", ust(status));
    p->failed = 1;
}

static void on_conn_request(ucp_conn_request_h req, void *arg) {
    ucx_srv *u = arg;
    ucx_peer *p = NULL;
    for (int i = 0; i < u->cap && !p; i++)
        if (!u->peers[i].ep && !u->peers[i].close_req) p = &u->peers[i];
    int stopping = atomic_load(&u->srv->stopping);
    if (stopping || !p) {
        if (stopping)
            LOG_LIMITED(LOG_LEVEL_WARN, "UCX: endpoint refused: tided is stopping");
        else
            LOG_LIMITED(LOG_LEVEL_WARN,
                        "UCX: endpoint refused: %d endpoints are open (--max-conns)", u->cap);
        ucp_listener_reject(u->lis, req);
        return;
    }
    if (p - u->peers >= u->used) u->used = (int)(p - u->peers) + 1;
    uint32_t gen = p->gen + 1;
    ucp_ep_params_t ep = {
        .field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLER |
                      UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
        .conn_request = req,
        .err_mode = UCP_ERR_HANDLING_MODE_PEER,
        .err_handler = {on_ep_error, u},
    };
    memset(p, 0, sizeof(*p));
    p->gen = gen;
    ucs_status_t st = ucp_ep_create(u->wk, &ep, &p->ep);
    if (st != UCS_OK) {
        p->ep = NULL;
        unsigned v = ucx_dl_version();
        /* What UCX says when it cannot parse the client's request: seen with a client's
         * UCX 1.22 against 1.13 here, and the reverse. */
        LOG_LIMITED(LOG_LEVEL_WARN,
                    "UCX: cannot accept an endpoint: %s%s (this tided's UCX is %u.%u)", ust(st),
                    st == UCS_ERR_INVALID_PARAM ? "; a client with a UCX this one cannot talk to?"
                                                : "",
                    v / 1000, v % 1000);
        return;
    }
    p->since = now_ns();
}

/* UCX_AM_HELLO: note the verdict; the progress loop answers (no send from a callback). */
static ucs_status_t on_hello(void *arg, const void *hdr, size_t hdr_len, void *data, size_t len,
                             const ucp_am_recv_param_t *param) {
    ucx_srv *u = arg;
    (void)hdr, (void)hdr_len;
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) return UCS_OK; /* too big to be one */
    ucx_peer *p = peer_of(u, param->reply_ep);
    if (!p || p->authed || p->hello || p->close_at) return UCS_OK;
    const uint8_t *b = data;
    int ok = len >= 6 && le_rd32(b) == UCX_MSG_MAGIC && le_rd16(b + 4) == len - 6;
    const char *want = u->srv->cfg.auth_token;
    if (ok && want[0]) ok = connio_token_equal(want, b + 6, len - 6);
    if (!ok) atomic_fetch_add(&u->srv->m.auth_failures, 1);
    p->hello = ok ? 1 : -1;
    return UCS_OK;
}

static void op_queue(ucx_srv *u, srv_op *op) {
    op->next = NULL;
    *u->todo_tail = op;
    u->todo_tail = &op->next;
}

/* An answer to p's endpoint, counted in p->open_ops until op_free. */
static srv_op *op_new(ucx_srv *u, ucx_peer *p, uint64_t tag, int put) {
    srv_op *op = calloc(1, sizeof(*op));
    if (!op) return NULL;
    op->u = u;
    op->ep = p->ep;
    op->peer = (int)(p - u->peers);
    op->gen = p->gen;
    op->put = put;
    le_wr64(op->hdr, tag);
    p->open_ops++;
    return op;
}

static void op_free(srv_op *op) {
    ucx_peer *p = &op->u->peers[op->peer];
    if (p->gen == op->gen && p->open_ops) p->open_ops--;
    free(op);
}

static void op_fly(ucx_srv *u, srv_op *op) {
    op->fprev = NULL;
    op->fnext = u->flying;
    if (u->flying) u->flying->fprev = op;
    u->flying = op;
}

static void op_land(srv_op *op) {
    ucx_srv *u = op->u;
    if (op->fprev)
        op->fprev->fnext = op->fnext;
    else
        u->flying = op->fnext;
    if (op->fnext) op->fnext->fprev = op->fprev;
}

static void op_set_status(srv_op *op, int32_t st) {
    le_wr32(op->hdr + 8, (uint32_t)st);
}

/* 1 when the sender of a GET or PUT may have it answered; otherwise the caller closes it.
 * A client has at most one call of at most max_keys values in flight per endpoint
 * (src/client/ucx.c), and answers of the call before may still be completing here: an
 * endpoint that leaves more than 4 x max_keys answers untaken asks without reading (each
 * costs this process memory until it is taken), and is cut. */
static int peer_may_move(ucx_srv *u, const ucp_am_recv_param_t *param, ucx_peer **pp) {
    *pp = NULL;
    if (!(param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP)) return 0;
    ucx_peer *p = peer_of(u, param->reply_ep);
    *pp = p;
    if (!p || !p->authed || p->failed || p->close_at) return 0;
    if (p->open_ops < u->open_max) return 1;
    LOG_LIMITED(LOG_LEVEL_WARN,
                "UCX: an endpoint closed: it left %u answers untaken (4 x --max-keys; a client "
                "that asks without reading)",
                p->open_ops);
    atomic_fetch_add(&u->srv->m.ucx_cut, 1);
    return 0;
}

static int in_pool(const ucx_srv *u, uint64_t off, uint64_t len) {
    uint64_t cap = store_capacity(u->srv->st);
    return off <= cap && len <= cap - off;
}

/* UCX_AM_GET: queue the answer: the pool's bytes, sent zero-copy (rendezvous when large). */
static ucs_status_t on_get(void *arg, const void *hdr, size_t hdr_len, void *data, size_t len,
                           const ucp_am_recv_param_t *param) {
    ucx_srv *u = arg;
    ucx_peer *p;
    (void)data, (void)len;
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) ucp_am_data_release(u->wk, data);
    if (!peer_may_move(u, param, &p) || hdr_len != UCX_GET_HDR) {
        if (p) p->failed = 1; /* not authenticated, or malformed: closed */
        return UCS_OK;
    }
    const uint8_t *h = hdr;
    srv_op *op = op_new(u, p, le_rd64(h), 0);
    if (!op) {
        p->failed = 1;
        return UCS_OK;
    }
    op->off = le_rd64(h + 8);
    op->len = le_rd64(h + 16) & ~UCX_GET_RNDV;
    op->rndv = (le_rd64(h + 16) & UCX_GET_RNDV) != 0;
    op_set_status(op, in_pool(u, op->off, op->len) ? 0 : TIDE_EPROTO);
    op_queue(u, op);
    return UCS_OK;
}

static void put_landed(void *req, ucs_status_t st, size_t length, void *user) {
    srv_op *op = user;
    ucx_srv *u = op->u;
    (void)length;
    op_land(op);
    op_set_status(op, st == UCS_OK ? 0 : TIDE_ECLOSED);
    op_queue(u, op);
    ucp_request_free(req);
}

/* UCX_AM_PUT: the value into pool + offset (an offset one of this client's RESERVEs gave;
 * COMMIT checks the checksum), by rendezvous straight into the pool when large. */
static ucs_status_t on_put(void *arg, const void *hdr, size_t hdr_len, void *data, size_t len,
                           const ucp_am_recv_param_t *param) {
    ucx_srv *u = arg;
    ucx_peer *p;
    int rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
    const uint8_t *h = hdr;
    srv_op *op = NULL;
    if (!peer_may_move(u, param, &p) || hdr_len != UCX_PUT_HDR ||
        !(op = op_new(u, p, le_rd64(h), 1))) {
        if (p) p->failed = 1;
        if (rndv) ucp_am_data_release(u->wk, data);
        return UCS_OK;
    }
    uint64_t off = le_rd64(h + 8);
    if (!in_pool(u, off, len)) {
        op_set_status(op, TIDE_EPROTO);
        if (rndv) ucp_am_data_release(u->wk, data);
        op_queue(u, op);
        return UCS_OK;
    }
    uint8_t *dst = (uint8_t *)store_base(u->srv->st) + off;
    if (!rndv) {
        memcpy(dst, data, len);
        op_queue(u, op);
        return UCS_OK;
    }
    ucp_request_param_t rp = {.op_attr_mask =
                                  UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
                              .cb.recv_am = put_landed,
                              .user_data = op};
    op_fly(u, op);
    void *r = ucp_am_recv_data_nbx(u->wk, data, dst, len, &rp);
    if (r == NULL || UCS_PTR_IS_ERR(r)) {
        op_land(op);
        op_set_status(op, r == NULL ? 0 : TIDE_ECLOSED);
        op_queue(u, op);
    }
    return UCS_OK;
}

static void op_sent(void *req, ucs_status_t st, void *user) {
    (void)st;
    op_land(user);
    op_free(user);
    ucp_request_free(req);
}

/* Send the queued answers whose endpoint is still open. */
static void ops_send(ucx_srv *u) {
    srv_op *op;
    while ((op = u->todo) != NULL) {
        u->todo = op->next;
        if (!u->todo) u->todo_tail = &u->todo;
        ucx_peer *p = peer_of(u, op->ep);
        if (!p || p->failed) {
            op_free(op);
            continue;
        }
        int32_t st = (int32_t)le_rd32(op->hdr + 8);
        ucp_request_param_t rp = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                                  UCP_OP_ATTR_FIELD_USER_DATA |
                                                  UCP_OP_ATTR_FIELD_FLAGS,
                                  .cb.send = op_sent,
                                  .user_data = op,
                                  .flags = op->rndv ? UCP_AM_SEND_FLAG_RNDV : 0};
        const void *bytes = NULL;
        size_t n = 0;
        if (!op->put && st == 0) {
            bytes = (const uint8_t *)store_base(u->srv->st) + op->off;
            n = op->len;
        }
        op_fly(u, op);
        void *r = ucp_am_send_nbx(op->ep, op->put ? UCX_AM_PUTDONE : UCX_AM_GETDATA, op->hdr,
                                  UCX_DONE_HDR, bytes, n, &rp);
        if (r == NULL) {
            op_land(op);
            op_free(op);
        } else if (UCS_PTR_IS_ERR(r)) {
            op_land(op);
            LOG_DEBUG("UCX: an answer not sent: %s", ust(UCS_PTR_STATUS(r)));
            p->failed = 1;
            op_free(op);
        }
    }
}

static void peer_send(ucx_srv *u, ucx_peer *p, uint8_t *buf, size_t len) {
    ucp_request_param_t rp = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                              .flags = UCP_AM_SEND_FLAG_EAGER};
    p->reply = buf;
    void *r = ucp_am_send_nbx(p->ep, UCX_AM_WELCOME, NULL, 0, buf, len, &rp);
    if (UCS_PTR_IS_ERR(r)) {
        LOG_DEBUG("UCX: reply not sent: %s", ust(UCS_PTR_STATUS(r)));
        p->failed = 1;
    } else {
        p->reply_req = r; /* NULL: sent already */
    }
    (void)u;
}

static void peer_answer(ucx_srv *u, ucx_peer *p) {
    int good = p->hello == 1;
    p->hello = 0;
    if (good) {
        size_t len = UCX_WELCOME_HEAD + 20 + u->rkey_len + UCX_BOOT_ID + 4 + u->waddr_len;
        uint8_t *b = malloc(len);
        if (!b) {
            p->failed = 1;
            return;
        }
        le_wr32(b, UCX_MSG_MAGIC);
        le_wr32(b + 4, 0);
        le_wr64(b + 8, (uint64_t)(uintptr_t)store_base(u->srv->st));
        le_wr64(b + 16, store_capacity(u->srv->st));
        le_wr32(b + 24, (uint32_t)u->rkey_len);
        if (u->rkey_len) memcpy(b + 28, u->rkey, u->rkey_len);
        uint8_t *at = b + 28 + u->rkey_len; /* the same-host part (proto/ucx_msg.h) */
        memcpy(at, u->boot_id, UCX_BOOT_ID);
        le_wr32(at + UCX_BOOT_ID, (uint32_t)u->waddr_len);
        if (u->waddr_len) memcpy(at + 4 + UCX_BOOT_ID, u->waddr, u->waddr_len);
        p->authed = 1;
        peer_send(u, p, b, len);
        return;
    }
    const char *msg = u->srv->cfg.auth_token[0]
                          ? "UCX endpoint refused: authentication failed (wrong or missing token)"
                          : "UCX endpoint refused: malformed hello";
    size_t ml = strlen(msg), len = UCX_WELCOME_HEAD + 4 + ml;
    uint8_t *b = malloc(len);
    if (!b) {
        p->failed = 1;
        return;
    }
    le_wr32(b, UCX_MSG_MAGIC);
    le_wr32(b + 4, (uint32_t)TIDE_EAUTH);
    le_wr32(b + 8, (uint32_t)ml);
    memcpy(b + 12, msg, ml);
    peer_send(u, p, b, len);
    p->close_at = now_ns() + PEER_HS_GRACE_NS;
}

/* Start closing p: with flush, so that a refusal's reply reaches the peer before the
 * disconnect; else at once (the peer failed or is gone). */
static void peer_close(ucx_srv *u, ucx_peer *p, int flush) {
    if (p->reply_req) {
        ucp_request_cancel(u->wk, p->reply_req);
        ucp_request_free(p->reply_req);
        p->reply_req = NULL;
    }
    ucp_request_param_t rp = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                              .flags = flush ? 0 : UCP_EP_CLOSE_FLAG_FORCE};
    void *r = ucp_ep_close_nbx(p->ep, &rp);
    p->ep = NULL;
    free(p->reply);
    p->reply = NULL;
    p->close_req = UCS_PTR_IS_PTR(r) ? r : NULL;
    p->authed = p->hello = p->failed = 0;
    p->close_at = 0;
}

/* After progress: answer HELLOs, finish sends and closes, apply the handshake deadline. */
static void peers_tend(ucx_srv *u, uint64_t now) {
    for (int i = 0; i < u->used; i++) {
        ucx_peer *p = &u->peers[i];
        if (p->close_req && ucp_request_check_status(p->close_req) != UCS_INPROGRESS) {
            ucp_request_free(p->close_req);
            p->close_req = NULL;
        }
        if (!p->ep) continue;
        if (p->reply_req && ucp_request_check_status(p->reply_req) != UCS_INPROGRESS) {
            ucp_request_free(p->reply_req);
            p->reply_req = NULL;
        }
        if (!p->reply_req && p->reply) {
            free(p->reply);
            p->reply = NULL;
        }
        if (p->hello) peer_answer(u, p);
        if (p->failed || (p->close_at && (!p->reply_req || now >= p->close_at)) ||
            (!p->authed && !p->close_at && now - p->since > u->hs_timeout_ns)) {
            if (!p->authed && !p->failed && !p->close_at)
                LOG_LIMITED(LOG_LEVEL_WARN,
                            "UCX: an endpoint showed no token within %llu s: closed",
                            (unsigned long long)(u->hs_timeout_ns / 1000000000ull));
            peer_close(u, p, p->close_at && !p->failed && !p->reply_req);
        }
    }
}

static void *ucx_main(void *arg) {
    ucx_srv *u = arg;
    for (;;) {
        do {
            while (ucp_worker_progress(u->wk) != 0) {
            }
            while (u->hwk && ucp_worker_progress(u->hwk) != 0) {
            }
            ops_send(u);
        } while (u->todo);
        peers_tend(u, now_ns());
        ucx_log_tick();
        if (ucp_worker_arm(u->wk) == UCS_ERR_BUSY) continue;
        if (u->hwk && ucp_worker_arm(u->hwk) == UCS_ERR_BUSY) continue;
        struct epoll_event ev[3];
        int n = epoll_wait(u->epfd, ev, 3, 100);
        int stop = 0;
        for (int i = 0; i < n; i++)
            if (ev[i].data.fd == u->stopfd) stop = 1;
        if (stop) break;
    }
    /* Stop: every endpoint closed, waited for (bounded). */
    for (int i = 0; i < u->cap; i++)
        if (u->peers[i].ep) peer_close(u, &u->peers[i], 0);
    uint64_t until = now_ns() + 1000000000ull;
    for (int busy = 1; busy && now_ns() < until;) {
        ucp_worker_progress(u->wk);
        busy = 0;
        for (int i = 0; i < u->cap; i++) {
            ucx_peer *p = &u->peers[i];
            if (p->close_req && ucp_request_check_status(p->close_req) == UCS_INPROGRESS)
                busy = 1;
            else if (p->close_req) {
                ucp_request_free(p->close_req);
                p->close_req = NULL;
            }
        }
    }
    return NULL;
}

static int ucx_fail(const char *what, ucs_status_t st) {
    LOG_ERROR("UCX data path off (tide:// still serves): %s: %s", what, ust(st));
    return -EIO;
}

/* A UCP context with features (and wake-up) and a worker for this thread; tls: UCX_TLS
 * for it (NULL: the environment's). */
static ucs_status_t ucx_worker_new(const char *tls, uint64_t features, ucp_context_h *ctx,
                                   ucp_worker_h *wk) {
    ucp_config_t *conf;
    ucs_status_t st = ucp_config_read(NULL, NULL, &conf);
    if (st != UCS_OK) return st;
    if (tls) st = ucp_config_modify(conf, "TLS", tls);
    ucp_params_t pp = {.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME,
                       .features = features | UCP_FEATURE_WAKEUP,
                       .name = "tided"};
    if (st == UCS_OK) st = ucp_init(&pp, conf, ctx);
    ucp_config_release(conf);
    if (st != UCS_OK) {
        *ctx = NULL;
        return st;
    }
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SINGLE};
    if ((st = ucp_worker_create(*ctx, &wp, wk)) != UCS_OK) {
        *wk = NULL;
        ucp_cleanup(*ctx);
        *ctx = NULL;
    }
    return st;
}

static void same_host_drop(ucx_srv *u);

/* The same-host worker (see the top), with a UCX that survives a peer's death mid-transfer
 * (UCX_SAME_HOST_MIN) and a shared-memory transport in UCX_TLS: its context, the pool
 * registered there, its rkey and address. Logged and left off when it cannot be made:
 * clients on this host then use the UCX port. */
static void same_host_setup(ucx_srv *u) {
    char tls[64];
    if (ucx_dl_version() < UCX_SAME_HOST_MIN || !ucx_tls_same_host(tls, sizeof(tls))) return;
    const char *what = "ucp_init";
    ucs_status_t st = ucx_worker_new(tls, UCP_FEATURE_RMA, &u->hctx, &u->hwk);
    if (st == UCS_OK) {
        ucp_mem_map_params_t mp = {.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
                                                 UCP_MEM_MAP_PARAM_FIELD_LENGTH,
                                   .address = store_base(u->srv->st),
                                   .length = store_capacity(u->srv->st)};
        what = "registering the pool (ucp_mem_map)";
        st = ucp_mem_map(u->hctx, &mp, &u->memh);
    }
    if (st == UCS_OK) {
        what = "ucp_rkey_pack";
        st = ucp_rkey_pack(u->hctx, u->memh, &u->rkey, &u->rkey_len);
        if (st == UCS_OK && u->rkey_len > UCX_RKEY_MAX) st = UCS_ERR_EXCEEDS_LIMIT;
    }
    if (st == UCS_OK) {
        what = "ucp_worker_get_address";
        st = ucp_worker_get_address(u->hwk, &u->waddr, &u->waddr_len);
        if (st == UCS_OK && u->waddr_len > UCX_ADDR_MAX) st = UCS_ERR_EXCEEDS_LIMIT;
    }
    if (st == UCS_OK) {
        what = "ucp_worker_get_efd";
        st = ucp_worker_get_efd(u->hwk, &u->hefd);
    }
    if (st == UCS_OK) return;
    LOG_WARN("UCX: no same-host worker (%s over %s: %s); clients on this host use the UCX port",
             what, tls, ust(st));
    same_host_drop(u);
}

/* Undo same_host_setup. */
static void same_host_drop(ucx_srv *u) {
    if (u->rkey) ucp_rkey_buffer_release(u->rkey);
    if (u->waddr) ucp_worker_release_address(u->hwk, u->waddr);
    if (u->memh) ucp_mem_unmap(u->hctx, u->memh);
    if (u->hwk) ucp_worker_destroy(u->hwk);
    if (u->hctx) ucp_cleanup(u->hctx);
    u->rkey = NULL;
    u->waddr = NULL;
    u->memh = NULL;
    u->hwk = NULL;
    u->hctx = NULL;
    u->rkey_len = u->waddr_len = 0;
    u->hefd = -1;
}

static int ucx_setup(ucx_srv *u) {
    server *srv = u->srv;
    const server_config *cfg = &srv->cfg;
    char why[256];
    if (ucx_dl_load(why, sizeof(why)) != 0) {
        LOG_ERROR("UCX data path off (tide:// still serves): %s", why);
        return -ENOENT;
    }
    ucx_log_start(&srv->m); /* before any context: UCX's lines from here on are tided's */

    char tls[256];
    int no_tcp = ucx_tls_no_tcp(tls, sizeof(tls));
    if (no_tcp < 0) {
        LOG_ERROR("UCX data path off (tide:// still serves): UCX_TLS=%s names UCX's TCP "
                  "transport alone, which tided uses only with TIDE_UCX_TCP=1 (any peer that "
                  "reaches it can write tided's memory: docs/UCX.md)",
                  getenv("UCX_TLS"));
        return -EPERM;
    }
    ucs_status_t st = ucx_worker_new(no_tcp ? tls : NULL, UCP_FEATURE_AM, &u->ctx, &u->wk);
    if (st != UCS_OK) return ucx_fail("ucp_init (no usable transport in UCX_TLS?)", st);
    ucp_am_handler_param_t hp = {.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
                                               UCP_AM_HANDLER_PARAM_FIELD_CB |
                                               UCP_AM_HANDLER_PARAM_FIELD_ARG,
                                 .id = UCX_AM_HELLO,
                                 .cb = on_hello,
                                 .arg = u};
    if ((st = ucp_worker_set_am_recv_handler(u->wk, &hp)) != UCS_OK)
        return ucx_fail("ucp_worker_set_am_recv_handler", st);
    hp.id = UCX_AM_GET;
    hp.cb = on_get;
    if ((st = ucp_worker_set_am_recv_handler(u->wk, &hp)) != UCS_OK)
        return ucx_fail("ucp_worker_set_am_recv_handler", st);
    hp.id = UCX_AM_PUT;
    hp.cb = on_put;
    if ((st = ucp_worker_set_am_recv_handler(u->wk, &hp)) != UCS_OK)
        return ucx_fail("ucp_worker_set_am_recv_handler", st);
    same_host_setup(u);
    if (ucx_boot_id(u->boot_id) != 0) memset(u->boot_id, 0, sizeof(u->boot_id));

    struct sockaddr_storage ss;
    socklen_t sl;
    if (hostport_bind_addr(cfg->bind, cfg->ucx_port, &ss, &sl, NULL, 0, why, sizeof(why)) != 0) {
        LOG_ERROR("UCX data path off: the address %s: %s", cfg->bind, why);
        return -EINVAL;
    }
    ucp_listener_params_t lp = {.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR |
                                              UCP_LISTENER_PARAM_FIELD_CONN_HANDLER,
                                .sockaddr = {(const struct sockaddr *)&ss, sl},
                                .conn_handler = {on_conn_request, u}};
    if ((st = ucp_listener_create(u->wk, &lp, &u->lis)) != UCS_OK)
        return ucx_fail("the UCX listener (port taken, or no sockaddr transport)", st);
    ucp_listener_attr_t la = {.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR};
    if ((st = ucp_listener_query(u->lis, &la)) != UCS_OK) return ucx_fail("ucp_listener_query", st);
    u->port =
        ntohs(la.sockaddr.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&la.sockaddr)->sin6_port
                                                : ((struct sockaddr_in *)&la.sockaddr)->sin_port);

    if ((st = ucp_worker_get_efd(u->wk, &u->efd)) != UCS_OK)
        return ucx_fail("ucp_worker_get_efd", st);
    u->stopfd = eventfd(0, EFD_CLOEXEC);
    u->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (u->stopfd < 0 || u->epfd < 0) return ucx_fail("eventfd/epoll", UCS_ERR_IO_ERROR);
    struct epoll_event e1 = {.events = EPOLLIN, .data.fd = u->efd};
    struct epoll_event e2 = {.events = EPOLLIN, .data.fd = u->stopfd};
    struct epoll_event e3 = {.events = EPOLLIN, .data.fd = u->hefd};
    if (epoll_ctl(u->epfd, EPOLL_CTL_ADD, u->efd, &e1) ||
        epoll_ctl(u->epfd, EPOLL_CTL_ADD, u->stopfd, &e2) ||
        (u->hwk && epoll_ctl(u->epfd, EPOLL_CTL_ADD, u->hefd, &e3)))
        return ucx_fail("epoll_ctl", UCS_ERR_IO_ERROR);
    int rc = pthread_create(&u->th, NULL, ucx_main, u);
    if (rc) {
        LOG_ERROR("UCX data path off: its thread: %s", strerror(rc));
        return -rc;
    }
    u->started = 1;
    char where[HOSTPORT_HOST_MAX + 8];
    LOG_INFO("UCX data path on %s (active messages; %s)",
             hostport_format(cfg->bind, u->port, where, sizeof(where)),
             u->hwk ? "same-host RMA on shared memory" : "no same-host worker");
    return 0;
}

int ucx_srv_start(server *srv) {
    const server_config *cfg = &srv->cfg;
    if (cfg->ucx_port < 0) return 0;
    ucx_srv *u = calloc(1, sizeof(*u));
    if (!u) return -ENOMEM;
    u->srv = srv;
    u->efd = u->hefd = u->stopfd = u->epfd = -1;
    u->todo_tail = &u->todo;
    u->cap = cfg->max_conns;
    u->open_max = 4 * cfg->max_keys;
    u->peers = calloc((size_t)u->cap, sizeof(ucx_peer));
    uint64_t hs = cfg->idle_timeout_s > 10 ? cfg->idle_timeout_s : 10;
    u->hs_timeout_ns = hs * 1000000000ull;
    srv->ucx = u; /* ucx_srv_stop undoes whatever was made */
    if (!u->peers) return -ENOMEM;
    int rc = ucx_setup(u);
    return rc == -ENOMEM ? rc : 0; /* otherwise logged: tide:// serves alone */
}

int ucx_srv_port(const server *srv) {
    const ucx_srv *u = srv->ucx;
    return u && u->started ? u->port : 0;
}

void ucx_srv_stop(server *srv) {
    ucx_srv *u = srv->ucx;
    if (!u) return;
    if (u->started) {
        uint64_t one = 1;
        if (write(u->stopfd, &one, sizeof(one)) != sizeof(one)) LOG_WARN("UCX: stop: write failed");
        pthread_join(u->th, NULL);
    }
    if (u->lis) ucp_listener_destroy(u->lis);
    same_host_drop(u);
    if (u->wk) ucp_worker_destroy(u->wk);
    if (u->ctx) ucp_cleanup(u->ctx);
    ucx_log_stop();
    if (u->stopfd >= 0) close(u->stopfd);
    if (u->epfd >= 0) close(u->epfd);
    for (int i = 0; u->peers && i < u->cap; i++)
        free(u->peers[i].reply);
    while (u->todo) {
        srv_op *op = u->todo;
        u->todo = op->next;
        free(op);
    }
    while (u->flying) { /* UCX, gone now, never completed them */
        srv_op *op = u->flying;
        u->flying = op->fnext;
        free(op);
    }
    free(u->peers);
    free(u);
    srv->ucx = NULL;
}
#else /* no UCX headers at build time */
int ucx_srv_start(server *srv) {
    if (srv->cfg.ucx_port >= 0)
        LOG_ERROR("UCX data path off (tide:// still serves): this tided was built without UCX "
                  "(install libucx-dev and rebuild)");
    return 0;
}

int ucx_srv_port(const server *srv) {
    (void)srv;
    return 0;
}

void ucx_srv_stop(server *srv) {
    (void)srv;
}
#endif
