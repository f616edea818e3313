/*
 * conn.c — one client connection of tided: read frames, run them against the store, send
 * the replies. Owned by one worker thread; nothing here takes a lock except the store.
 *
 * Receiving. The header and key section of a frame are read into `in` (bounded by the
 * frame limits) and decoded with frame_decode_head. A PUT's value bytes are then read
 * straight into the reservations the store made for them by the intake that RESP's SET
 * uses too (intake.c: readv into pool memory, no staging copy, each piece hashed as soon
 * as it has landed, values that will not be stored dropped in a scratch buffer); when
 * the last value byte is in, each reservation's hash is compared with the sender's checksum
 * and the value committed (or aborted): a half-received value is never visible. A frame's
 * head is read with at most max(need, HEAD_READ) bytes, so only the first few KiB of a
 * value can land in `in` (they are copied to the pool from there); the rest goes from the
 * socket into the pool. No read is made that can only return EAGAIN: one that took less
 * than it asked for marks the socket drained (connio.h), and the connection then waits for
 * epoll (level-triggered, so bytes that came meanwhile are reported at once). Per 256 KiB
 * PUT that is epoll_wait, recv, readv, writev (docs/WRITE_PATH.md). While a body is short,
 * SO_RCVLOWAT is set to what is still to come (intake.c).
 *
 * Sending. Replies are queued as segments (outq.c): encoded headers (owned there) and,
 * for GET, values sent with writev straight from pool memory under a pin, released when
 * the segment has left. Requests are pipelined: the next frame is decoded while earlier
 * replies are still queued, up to CONNIO_OUT_HIGH bytes queued; beyond that the connection
 * stops reading until the peer catches up (a slow reader cannot make tided buffer without
 * bound).
 *
 * Timeouts: a connection whose partial frame or queued reply has not moved for
 * idle_timeout_s is closed, which aborts its reservations and releases its pins. So is
 * one that has not authenticated within idle_timeout_s (when the server has a token).
 *
 * Before authentication (a server with a token) the only request read is a HELLO: the
 * input buffer is IN_PREAUTH bytes, and a header announcing any other opcode is refused
 * as soon as its 40 bytes are in, before its key section is waited for or buffered. Such a
 * connection holds one of the server's pre-auth slots until its HELLO succeeds, and may be
 * cut for a newer one meanwhile (preauth.c); --max-conns counts it only from then on.
 *
 * This is a connection of the one connection interface (connio.h): the socket side —
 * epoll interest, backpressure, the per-wake-up budget, counted reads, the clocks, drain
 * and teardown — is connio.c's, shared with the RESP port; this file keeps the protocol
 * (conn_ops). Its requests count against the budget (connio_charge) and it stops when the
 * budget is spent, so a pipelining peer cannot hold its worker.
 *
 * Same-host connections (the Unix listener) may ask HELLO for the shared pool: the reply
 * then carries the pool's memfd (SCM_RIGHTS), once per connection (a second such HELLO is
 * refused: see op_hello), and conn_shm.c serves their RESERVE, COMMIT, PIN and RELEASE
 * requests and holds their leases (`shm`), released when they close.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/log.h"
#include "common/stats_fields.h"
#include "common/util.h"
#include "proto/frame.h"
#include "server/conn_shm.h"
#include "server/connio.h"
#include "server/intake.h"
#include "server/replica.h"
#include "server/server_int.h"
#include "server/ucx_srv.h"

/* The input buffer starts small: a peer that has not authenticated yet can only ever send
 * a HELLO (at most FRAME_HDR_SIZE + FRAME_HELLO_KEYS + FRAME_TOKEN_MAX bytes), so nothing
 * sizable is allocated for it before its token is checked. Once authenticated (or at once
 * when the server has no token) the buffer grows to IN_AUTHED on its first read. */
#define IN_PREAUTH CONNIO_PREAUTH_IN
#define IN_AUTHED (64 * 1024)
/* At a frame boundary a read asks for the bytes the decoder needs, and at least HEAD_READ:
 * enough for the head of a typical request (several small ones when pipelined), but so
 * few of a PUT's value bytes that almost all of them go from the socket straight into
 * their reservation rather than through `in`. The last read of a PUT's body also takes up
 * to HEAD_READ bytes of what follows, so that it can tell that the socket is empty. */
#define HEAD_READ (4 * 1024)

/* What the client announced for one value of the PUT being received, and its outcome. */
typedef struct put_slot {
    uint64_t sum;
    int32_t status;
} put_slot;

typedef struct conn conn;

struct conn {
    connio io; /* first: the connection interface (connio.h) */
    server *srv;
    frame_decoder dec;
    uint8_t *in;
    size_t in_len, in_cap;

    /* A PUT whose value bytes are arriving (io.in_body). */
    uint64_t put_req_id, put_start_ns;
    put_slot *slots; /* nslots of them, beside the intake's values */
    intake_val *vals;
    uint32_t nslots;
    intake body; /* a PUT's value bytes (intake.c) */

    int is_unix;          /* accepted on the Unix listener */
    int fd_sent;          /* the pool's memfd went (or is queued to go) to this peer: never twice */
    shm_state *shm;       /* leases of a connection granted FRAME_FEATURE_SHM, else NULL */
    uint64_t replica_gen; /* replica.c: the node's generation when this connection began */
    int hints;            /* its HELLO was granted FRAME_FEATURE_HINTS (a cluster member's) */
};

static const connio_ops conn_ops;

connio *conn_new(worker *w, int fd) {
    conn *c = calloc(1, sizeof(*c));
    if (!c) return NULL;
    c->srv = w->srv;
    c->in_cap = IN_PREAUTH;
    c->in = malloc(c->in_cap);
    frame_limits lim = {c->srv->cfg.max_keys, store_capacity(c->srv->st), c->srv->cfg.max_frame};
    if (c->srv->cfg.max_value && c->srv->cfg.max_value < lim.max_value)
        lim.max_value = c->srv->cfg.max_value;
    if (!c->in || frame_decoder_init(&c->dec, &lim) != 0) {
        free(c->in);
        free(c);
        return NULL;
    }
    struct sockaddr_storage sa;
    socklen_t salen = sizeof(sa);
    c->is_unix = getsockname(fd, (struct sockaddr *)&sa, &salen) == 0 && sa.ss_family == AF_UNIX;
    if (connio_init(&c->io, &conn_ops, c->srv, w->epfd, fd, 0) != 0) {
        free(c->in);
        free(c);
        return NULL;
    }
    return &c->io;
}

static void put_release(conn *c) {
    intake_abort(&c->body);
    free(c->slots);
    free(c->vals);
    c->slots = NULL;
    c->vals = NULL;
    c->nslots = 0;
    c->io.in_body = 0;
}

/* connio_ops.free: the socket is closed already (connio_close). */
static void conn_free(connio *io) {
    conn *c = (conn *)io;
    put_release(c);
    shm_free(c->srv->st, c->shm);
    free(c->in);
    intake_free(&c->body);
    free(c);
}

/* ---- request handlers: op_X() answers opcode X (do_x() elsewhere means "lock held") ---- */

/* Encode with a size query first, into a buffer the output queue will own. */
static int reply_encoded(conn *c, outq_encode_fn fn, void *arg) {
    return outq_encoded(&c->io.out, fn, arg);
}

/* REPLICA's reply: request id, fences, generation (replica_op). */
static int enc_replica_reply(void *buf, size_t cap, size_t *len, void *arg) {
    const uint64_t *a = arg;
    return frame_encode_replica_reply(buf, cap, len, a[0], a[1], a[2]);
}

static int reply_error(conn *c, unsigned op, uint64_t req_id, int32_t status, const char *msg) {
    size_t len = 0, mlen = strlen(msg);
    frame_encode_error(NULL, 0, &len, op, req_id, status, msg, mlen);
    uint8_t *buf = malloc(len);
    if (!buf) return -ENOMEM;
    int rc = frame_encode_error(buf, len, &len, op, req_id, status, msg, mlen);
    if (rc) {
        free(buf);
        return rc;
    }
    return outq_owned(&c->io.out, buf, len);
}

static int reply_empty(conn *c, unsigned op, uint64_t req_id) {
    uint8_t *buf = malloc(FRAME_HDR_SIZE);
    size_t len;
    if (!buf) return -ENOMEM;
    frame_encode_empty(buf, FRAME_HDR_SIZE, &len, op | FRAME_OP_REPLY, req_id);
    return outq_owned(&c->io.out, buf, len);
}

static int op_hello(conn *c, const frame_msg *m, int *status) {
    const frame_hello *h = &m->hello;
    if (c->srv->cfg.auth_token[0] &&
        !connio_token_equal(c->srv->cfg.auth_token, h->token ? h->token : (const uint8_t *)"",
                            h->token_len)) {
        atomic_fetch_add(&c->srv->m.auth_failures, 1);
        *status = MST_ERROR;
        c->io.close_after_flush = 1;
        return reply_error(c, FRAME_OP_HELLO, m->h.req_id, TIDE_EAUTH,
                           h->token_len ? "authentication failed: wrong token"
                                        : "authentication failed: this server requires a token");
    }
    if (h->min_version > FRAME_VERSION || h->max_version < FRAME_VERSION) {
        *status = MST_ERROR;
        c->io.close_after_flush = 1;
        char msg[128];
        snprintf(msg, sizeof(msg),
                 "no common protocol version: client speaks %u..%u, "
                 "server speaks %u",
                 h->min_version, h->max_version, FRAME_VERSION);
        return reply_error(c, FRAME_OP_HELLO, m->h.req_id, TIDE_EUNSUPPORTED, msg);
    }
    if (!c->io.authed) {
        /* Out of its pre-auth slot, into an authenticated one (preauth.c). */
        int rc = connio_authed(&c->io);
        if (rc == -ECONNABORTED) return rc;
        if (rc == TIDE_ELIMIT) {
            *status = MST_ERROR;
            c->io.close_after_flush = 1;
            char msg[128];
            snprintf(msg, sizeof(msg),
                     "too many connections: the server's limit is %d (--max-conns)",
                     c->srv->cfg.max_conns);
            return reply_error(c, FRAME_OP_HELLO, m->h.req_id, TIDE_ELIMIT, msg);
        }
    }
    uint64_t features = 0;
    if ((h->features & FRAME_FEATURE_SHM) && c->is_unix) {
        /* The pool's descriptor goes to a connection once. Each one sent sits in the
         * kernel's budget of descriptors in flight for tided's user until the peer reads
         * it: a peer pipelining HELLOs it never reads could otherwise spend that budget
         * and lock every other unix:// client out. */
        if (c->fd_sent) {
            *status = MST_ERROR;
            c->io.close_after_flush = 1;
            return reply_error(c, FRAME_OP_HELLO, m->h.req_id, TIDE_EPROTO,
                               "the pool's descriptor is sent once per connection: a second "
                               "HELLO asking for the shared pool is refused");
        }
        if (!c->shm && !(c->shm = shm_new())) return -ENOMEM;
        c->io.send_fd = store_fd(c->srv->st);
        c->fd_sent = 1;
        features |= FRAME_FEATURE_SHM;
    }
    features |= h->features & FRAME_FEATURE_REPLICA; /* replica.c */
    if (h->features & FRAME_FEATURE_REPLICA) features |= h->features & FRAME_FEATURE_HINTS;
    c->hints = (features & FRAME_FEATURE_HINTS) != 0;
    int ucx_port = ucx_srv_port(c->srv);
    if ((h->features & FRAME_FEATURE_UCX) && ucx_port > 0) {
        /* Values move by UCX RMA (ucx_srv.c) under this connection's leases. */
        if (!c->shm && !(c->shm = shm_new())) return -ENOMEM;
        features |= FRAME_FEATURE_UCX;
    } else {
        ucx_port = 0;
    }
    frame_hello_reply r = {FRAME_VERSION,        c->dec.lim.max_keys,  features,
                           c->dec.lim.max_value, c->dec.lim.max_frame, (uint16_t)ucx_port};
    uint8_t *buf = malloc(FRAME_HDR_SIZE + FRAME_HELLO_REPLY_KEYS);
    size_t len;
    if (!buf) return -ENOMEM;
    frame_encode_hello_reply(buf, FRAME_HDR_SIZE + FRAME_HELLO_REPLY_KEYS, &len, m->h.req_id, &r);
    return outq_owned(&c->io.out, buf, len);
}

struct get_reply_args {
    uint64_t req_id;
    int32_t *status;
    uint64_t *vlens, *sums;
    size_t n;
};

static int enc_get_reply(void *buf, size_t cap, size_t *len, void *arg) {
    struct get_reply_args *a = arg;
    return frame_encode_get_reply(buf, cap, len, a->req_id, a->status, a->vlens, a->sums, a->n,
                                  NULL);
}

static int op_get(conn *c, const frame_msg *m, int *status) {
    size_t n = m->h.count;
    int32_t *st = calloc(n ? n : 1, sizeof(*st));
    uint64_t *vlens = calloc(n ? n : 1, sizeof(*vlens)), *sums = calloc(n ? n : 1, 8);
    store_ref *refs = calloc(n ? n : 1, sizeof(*refs));
    int rc = -ENOMEM, outcome = MST_OK;
    if (!st || !vlens || !sums || !refs) goto out;
    frame_iter it;
    frame_entry e;
    frame_iter_init(&it, m);
    for (size_t i = 0; frame_iter_next(&it, &e); i++) {
        /* A value longer than the caller's room is answered with its size and counted as
         * neither a hit nor a miss (store_pin_cap): the read that follows counts. */
        st[i] = store_pin_cap(c->srv->st, e.key.data, e.key.len, 0, e.cap, &refs[i]);
        if (st[i] == 0) sums[i] = refs[i].checksum;
        if (st[i] == 0 || st[i] == TIDE_EBUFSMALL) vlens[i] = refs[i].len;
        outcome = metrics_worse(outcome, metrics_read_status(st[i]));
    }
    struct get_reply_args a = {m->h.req_id, st, vlens, sums, n};
    rc = reply_encoded(c, enc_get_reply, &a);
    /* Queue each value from pool memory; the pin passes to its segment. */
    uint64_t out_bytes = 0;
    for (size_t i = 0; i < n; i++) {
        if (st[i] != 0) continue;
        if (rc == 0) {
            rc = outq_push(&c->io.out, store_base(c->srv->st) + refs[i].offset, refs[i].len, NULL,
                           refs[i].id);
            out_bytes += refs[i].len;
        }
        if (rc != 0) store_unpin(c->srv->st, refs[i].id);
    }
    store_count_io(c->srv->st, 0, out_bytes);
    *status = outcome;
out:
    free(st);
    free(vlens);
    free(sums);
    free(refs);
    return rc;
}

struct keys_reply_args {
    unsigned op;
    uint64_t req_id;
    int32_t *status;
    uint8_t *present;
    size_t n;
};

static int enc_keys_reply(void *buf, size_t cap, size_t *len, void *arg) {
    struct keys_reply_args *a = arg;
    if (a->op == FRAME_OP_EXISTS)
        return frame_encode_exists_reply(buf, cap, len, a->req_id, a->present, a->n);
    return frame_encode_status_reply(buf, cap, len, a->op, a->req_id, a->status, a->n);
}

/* EXISTS and REMOVE: one answer per key. */
static int op_keys(conn *c, const frame_msg *m, int *status) {
    size_t n = m->h.count;
    struct keys_reply_args a = {m->h.opcode, m->h.req_id, calloc(n ? n : 1, 4),
                                calloc(n ? n : 1, 1), n};
    int rc = -ENOMEM, all = 1;
    if (!a.status || !a.present) goto out;
    frame_iter it;
    frame_entry e;
    frame_iter_init(&it, m);
    for (size_t i = 0; frame_iter_next(&it, &e); i++) {
        if (a.op == FRAME_OP_EXISTS) {
            a.present[i] = store_exists(c->srv->st, e.key.data, e.key.len) == 1;
            all &= a.present[i];
        } else {
            a.status[i] = store_remove(c->srv->st, e.key.data, e.key.len);
            all &= a.status[i] == 0;
        }
    }
    *status = all ? MST_OK : MST_MISS;
    rc = reply_encoded(c, enc_keys_reply, &a);
out:
    free(a.status);
    free(a.present);
    return rc;
}

static int op_match(conn *c, const frame_msg *m, int *status) {
    frame_iter it;
    frame_entry e;
    uint32_t matched = 0;
    frame_iter_init(&it, m);
    while (frame_iter_next(&it, &e) && store_exists(c->srv->st, e.key.data, e.key.len) == 1)
        matched++;
    *status = matched == m->h.count ? MST_OK : MST_MISS;
    uint8_t *buf = malloc(FRAME_HDR_SIZE + 4);
    size_t len;
    if (!buf) return -ENOMEM;
    frame_encode_match_reply(buf, FRAME_HDR_SIZE + 4, &len, m->h.req_id, matched);
    return outq_owned(&c->io.out, buf, len);
}

struct stat_args {
    uint64_t req_id;
    const char *const *names;
    const uint64_t *values;
    size_t n;
};

static int enc_stat(void *buf, size_t cap, size_t *len, void *arg) {
    struct stat_args *a = arg;
    return frame_encode_stat_reply(buf, cap, len, a->req_id, a->names, a->values, a->n);
}

static int op_stat(conn *c, const frame_msg *m) {
    tide_stats st;
    store_stats(c->srv->st, &st);
    static const char *const names[] = {
        "capacity_bytes",   "used_bytes",
        "objects",          "puts",
        "put_dups",         "gets",
        "misses",           "evictions",
        "evicted_bytes",    "checksum_errors",
        "bytes_in",         "bytes_out",
        "meta_bytes",       "pinned",
        "reserved",         "connections",
        "net_bytes_in",     "net_bytes_out",
        "fd_send_failures",
    };
    uint64_t values[] = {
        st.capacity_bytes,
        st.used_bytes,
        st.objects,
        st.puts,
        st.put_dups,
        st.gets,
        st.misses,
        st.evictions,
        st.evicted_bytes,
        st.checksum_errors,
        st.bytes_in,
        st.bytes_out,
        st.meta_bytes,
        st.pinned,
        st.reserved,
        (uint64_t)atomic_load(&c->srv->open_conns),
        atomic_load(&c->srv->m.bytes_in),
        atomic_load(&c->srv->m.bytes_out),
        (uint64_t)atomic_load(&c->srv->fd_send_failures),
    };
    /* The SSD tier's figures follow (zeros when the node has none). */
    const char *all_names[sizeof(names) / sizeof(names[0]) + 32];
    uint64_t all_values[sizeof(names) / sizeof(names[0]) + 32];
    size_t n = sizeof(values) / sizeof(values[0]);
    memcpy(all_names, names, sizeof(names));
    memcpy(all_values, values, sizeof(values));
    for (size_t i = 0; i < stats_disk_nfields && n < sizeof(all_values) / sizeof(uint64_t); i++) {
        all_names[n] = stats_disk_fields[i].name;
        all_values[n++] = stats_field_get(&st, &stats_disk_fields[i]);
    }
    struct stat_args a = {m->h.req_id, all_names, all_values, n};
    return reply_encoded(c, enc_stat, &a);
}

/* ---- PUT ----------------------------------------------------------------------------- */

/* Reserve room for every value of a PUT whose head was just decoded, and start the
 * intake of their bytes. */
static int put_begin(conn *c, const frame_msg *m) {
    size_t n = m->h.count;
    c->slots = calloc(n ? n : 1, sizeof(put_slot));
    c->vals = calloc(n ? n : 1, sizeof(intake_val));
    if (!c->slots || !c->vals) return -ENOMEM;
    c->nslots = (uint32_t)n;
    c->put_req_id = m->h.req_id;
    frame_iter it;
    frame_entry e;
    frame_iter_init(&it, m);
    for (size_t i = 0; frame_iter_next(&it, &e); i++) {
        store_ref ref;
        c->vals[i].vlen = e.vlen;
        c->slots[i].sum = e.sum;
        int rc = store_reserve(c->srv->st, e.key.data, e.key.len, e.vlen, 0, &ref);
        if (rc == 0) {
            c->vals[i].res_id = ref.id;
            c->vals[i].offset = ref.offset;
        } else {
            c->slots[i].status = rc == STORE_DUP ? 0 : rc;
        }
    }
    int rc = intake_start(&c->body, c->srv->st, c->vals, c->nslots, 0, 0);
    if (rc) {
        for (size_t i = 0; i < n; i++)
            if (c->vals[i].res_id) store_abort(c->srv->st, c->vals[i].res_id);
        return rc;
    }
    c->io.in_body = 1;
    return 0;
}

static int enc_put_reply(void *buf, size_t cap, size_t *len, void *arg) {
    conn *c = arg;
    int32_t *st = malloc((c->nslots ? c->nslots : 1) * sizeof(int32_t));
    if (!st) return -ENOMEM;
    for (uint32_t i = 0; i < c->nslots; i++)
        st[i] = c->slots[i].status;
    int rc = frame_encode_status_reply(buf, cap, len, FRAME_OP_PUT, c->put_req_id, st, c->nslots);
    free(st);
    return rc;
}

/* Every value byte is in: check, commit, reply. */
static int put_finish(conn *c) {
    store *st = c->srv->st;
    int all = 1;
    uint64_t stored = 0;
    store_chain chain = STORE_CHAIN_INIT; /* batch order is chain order (store.h) */
    for (uint32_t i = 0; i < c->nslots; i++) {
        put_slot *s = &c->slots[i];
        intake_val *v = &c->vals[i];
        if (!v->res_id) {
            all &= s->status == 0;
            continue;
        }
        if (v->got != s->sum) {
            store_abort(st, v->res_id);
            s->status = TIDE_ECHECKSUM;
            all = 0;
        } else {
            s->status = store_commit_chain(st, v->res_id, s->sum, &chain,
                                           c->nslots > 1 && i + 1 == c->nslots);
            stored += v->vlen;
        }
        v->res_id = 0;
    }
    store_count_io(st, stored, 0);
    int rc = reply_encoded(c, enc_put_reply, c);
    metrics_op_done(&c->srv->m, MOP_PUT, all ? MST_OK : MST_ERROR, c->nslots,
                    now_ns() - c->put_start_ns);
    put_release(c);
    return rc;
}

/* Move value bytes already sitting in `in` from `off` on into their places, and drop
 * in[0, off) with them (the frame's head, when the PUT has just begun). */
static void body_from_inbuf(conn *c, size_t off) {
    size_t used = off + intake_feed(&c->body, c->in + off, c->in_len - off);
    memmove(c->in, c->in + used, c->in_len - used);
    c->in_len -= used;
}

/* Read value bytes straight into place (intake_read). 1 when the body is complete, 0 when
 * the socket has nothing more now or the budget is spent, negative on error/EOF. The read
 * that ends the body also takes up to HEAD_READ bytes of what follows into `in`: a short
 * read then says the socket is empty, and the next frame's head needs no read of its own. */
static int body_read(conn *c) {
    body_from_inbuf(c, 0);
    size_t room = c->in_cap - c->in_len, got;
    int rc =
        intake_read(&c->body, &c->io, c->in + c->in_len, room < HEAD_READ ? room : HEAD_READ, &got);
    c->in_len += got;
    return rc;
}

/* ---- the request loop ---------------------------------------------------------------- */

static int metric_op(unsigned op) {
    switch (op) {
    case FRAME_OP_PUT:
        return MOP_PUT;
    case FRAME_OP_GET:
        return MOP_GET;
    case FRAME_OP_EXISTS:
        return MOP_EXISTS;
    case FRAME_OP_REMOVE:
        return MOP_REMOVE;
    case FRAME_OP_MATCH_PREFIX:
        return MOP_MATCH;
    case FRAME_OP_STAT:
        return MOP_STAT;
    case FRAME_OP_PING:
        return MOP_PING;
    case FRAME_OP_CLEAR:
        return MOP_CLEAR;
    case FRAME_OP_RESERVE:
        return MOP_RESERVE;
    case FRAME_OP_COMMIT:
        return MOP_COMMIT;
    case FRAME_OP_PIN:
        return MOP_PIN;
    case FRAME_OP_RELEASE:
        return MOP_RELEASE;
    case FRAME_OP_REPLICA:
        return MOP_REPLICA;
    case FRAME_OP_EVENTS:
        return MOP_EVENTS;
    case FRAME_OP_HELLO:
        return MOP_HELLO;
    default: /* an opcode added without a label is "other", never passed off as another */
        return MOP_OTHER;
    }
}

/* Run one decoded request (not a PUT with values, which put_begin starts). */
static int dispatch(conn *c, const frame_msg *m) {
    uint64_t t0 = now_ns();
    unsigned op = m->h.opcode;
    int status = MST_OK, rc;
    if (!c->io.authed && op != FRAME_OP_HELLO) {
        atomic_fetch_add(&c->srv->m.auth_failures, 1);
        c->io.close_after_flush = 1;
        return reply_error(c, op, m->h.req_id, TIDE_EAUTH,
                           "authentication required: send HELLO with the server's token first");
    }
    switch (op) {
    case FRAME_OP_HELLO:
        rc = op_hello(c, m, &status);
        break;
    case FRAME_OP_GET:
        rc = op_get(c, m, &status);
        break;
    case FRAME_OP_EXISTS:
    case FRAME_OP_REMOVE:
        rc = op_keys(c, m, &status);
        break;
    case FRAME_OP_MATCH_PREFIX:
        rc = op_match(c, m, &status);
        break;
    case FRAME_OP_STAT:
        rc = op_stat(c, m);
        break;
    case FRAME_OP_PING:
        rc = reply_empty(c, op, m->h.req_id);
        break;
    case FRAME_OP_REPLICA: {
        uint64_t reply[3];
        if (m->replica.flags & (FRAME_REPLICA_HINT | FRAME_REPLICA_ASK | FRAME_REPLICA_TOLD)) {
            /* Only a cluster member's connection may touch the hint table: TOLD from any
             * client would clear a member's hints, HINT fill the table. */
            if (!c->hints) {
                rc = reply_error(c, op, m->h.req_id, TIDE_EUNSUPPORTED,
                                 "REPLICA hint operations need a connection whose HELLO was "
                                 "granted the replica and hints features (a cluster member's)");
                status = MST_ERROR;
                break;
            }
            int e = replica_hint_op(c->srv, m, reply);
            rc = e ? reply_error(c, op, m->h.req_id, e,
                                 "this node's hint table is full: the write is not acknowledged")
                   : reply_encoded(c, enc_replica_reply, reply);
            break;
        }
        replica_op(c->srv, m, &c->replica_gen, reply);
        rc = reply_encoded(c, enc_replica_reply, reply);
        break;
    }
    case FRAME_OP_EVENTS:
        rc = events_op(c->srv, &c->io.out, m);
        break;
    case FRAME_OP_CLEAR: {
        int e = store_clear(c->srv->st);
        rc = e ? reply_error(c, op, m->h.req_id, e,
                             "clear not recorded on the SSD tier (see tided's log): a restart "
                             "would bring the objects back")
               : reply_empty(c, op, m->h.req_id);
        break;
    }
    case FRAME_OP_RESERVE:
    case FRAME_OP_COMMIT:
    case FRAME_OP_PIN:
    case FRAME_OP_RELEASE:
        if (c->shm) {
            rc = shm_dispatch(c->srv, &c->io.out, c->shm, m, &status);
            break;
        }
        status = MST_ERROR;
        rc = reply_error(c, op, m->h.req_id, TIDE_EUNSUPPORTED,
                         c->is_unix ? "shared-pool requests need HELLO with the shm feature"
                                    : "shared-pool requests are served on tided's Unix socket "
                                      "(unix:// URLs) or with the UCX feature");
        break;
    case FRAME_OP_PUT: /* a PUT of zero keys carries no value bytes */
        c->put_req_id = m->h.req_id;
        rc = reply_encoded(c, enc_put_reply, c);
        break;
    default:
        c->io.close_after_flush = 1;
        rc = reply_error(c, op, m->h.req_id, TIDE_EPROTO, "a reply opcode sent as a request");
        status = MST_ERROR;
    }
    metrics_op_done(&c->srv->m, metric_op(op), rc ? MST_ERROR : status, m->h.count, now_ns() - t0);
    return rc;
}

/* connio_ops.serve: decode and run the frames in `in`, reading more as needed, within the
 * wake-up's budget. 0, or negative to close now. */
static int conn_serve(connio *io) {
    conn *c = (conn *)io;
    while (!connio_held(&c->io) && !connio_spent(&c->io)) {
        if (!c->io.in_body && atomic_load(&c->srv->stopping)) return 0;
        if (replica_gate(c->srv, &c->replica_gen) != 0) return -ECONNRESET; /* replica.c */
        if (c->io.in_body) {
            int rc = body_read(c);
            if (rc <= 0) return rc;
            if ((rc = put_finish(c)) != 0) return rc;
            continue;
        }
        if (!c->io.authed && c->in_len >= FRAME_HDR_SIZE && le_rd32(c->in) == FRAME_MAGIC &&
            c->in[5] != FRAME_OP_HELLO && frame_op_valid(c->in[5]) &&
            !(c->in[5] & FRAME_OP_REPLY)) {
            /* Refused on its header alone: its key section is never read. */
            atomic_fetch_add(&c->srv->m.auth_failures, 1);
            c->io.close_after_flush = 1;
            return reply_error(c, c->in[5], le_rd64(c->in + 8), TIDE_EAUTH,
                               "authentication required: send HELLO with the server's token "
                               "first");
        }
        frame_msg m;
        ssize_t n = frame_decode_head(&c->dec, c->in, c->in_len, &m);
        if (n < 0) {
            atomic_fetch_add(&c->srv->m.proto_errors, 1);
            LOG_DEBUG("closing a connection after a protocol error: %s", c->dec.errstr);
            c->io.close_after_flush = 1;
            unsigned op = c->in_len >= 6 && frame_op_valid(c->in[5]) ? c->in[5] : FRAME_OP_ERROR;
            if (op & FRAME_OP_REPLY) op = FRAME_OP_ERROR;
            uint64_t req_id = c->in_len >= 16 ? le_rd64(c->in + 8) : 0;
            /* A request refused on its head (a value over --max-value, say) is still a
             * request of its opcode, and it failed. */
            if (op != FRAME_OP_ERROR) metrics_op_done(&c->srv->m, metric_op(op), MST_ERROR, 0, 0);
            return reply_error(c, op, req_id, (int32_t)n, c->dec.errstr);
        }
        if (n == 0) {
            /* The last read found the socket empty: epoll says when more has come. */
            if (c->io.drained) return 0;
            /* Need more bytes: make room for at least d->need, then read. */
            size_t want = c->in_len + (c->dec.need > 4096 ? c->dec.need : 4096);
            if (!c->io.authed) {
                /* A HELLO always fits IN_PREAUTH (the decoder bounds its token). */
                want = c->in_len + c->dec.need;
                if (want > IN_PREAUTH) return -EPROTO;
            } else if (want < IN_AUTHED) {
                want = IN_AUTHED;
            }
            if (connio_grow(&c->in, &c->in_cap, want) != 0) return -ENOMEM;
            size_t ask = c->dec.need > HEAD_READ ? c->dec.need : HEAD_READ;
            if (ask > c->in_cap - c->in_len) ask = c->in_cap - c->in_len;
            ssize_t r = connio_recv(&c->io, c->in + c->in_len, ask);
            if (r < 0) return r == -EAGAIN ? 0 : (int)r;
            if (r == 0) return c->in_len ? -EPROTO : -ECONNRESET;
            c->in_len += (size_t)r;
            continue;
        }
        int rc;
        connio_charge(&c->io);
        if (m.h.opcode == FRAME_OP_PUT && m.data_len > 0 && c->io.authed) {
            c->put_start_ns = now_ns();
            rc = put_begin(c, &m);
            /* The value bytes read with the head go to their places from where they are
             * (not moved to the front of `in` first), and the head is dropped with them. */
            if (rc == 0) {
                body_from_inbuf(c, (size_t)n);
                continue;
            }
        } else {
            rc = dispatch(c, &m);
        }
        /* The frame's keys are no longer needed: drop its head from the buffer. */
        memmove(c->in, c->in + n, c->in_len - (size_t)n);
        c->in_len -= (size_t)n;
        if (rc) return rc;
    }
    return 0;
}

/* connio_ops.buffered: bytes of a frame not yet run are in `in`. */
static int conn_buffered(const connio *io) {
    const conn *c = (const conn *)io;
    return c->in_len > 0 && !c->io.in_body;
}

/* connio_ops.tick: keep the idle clock honest while SO_RCVLOWAT hides arrivals, give a
 * grown input buffer back; 1 when a partial frame is buffered. */
static int conn_tick(connio *io, uint64_t now) {
    conn *c = (conn *)io;
    /* While epoll waits for the rest of a body (SO_RCVLOWAT), bytes that arrive wake nobody:
     * they count as progress here, so a peer that sends slowly but steadily is not taken
     * for a stalled one. */
    intake_tick(&c->body, &c->io, now);
    /* A large key section grew `in` (up to the frame limits); give the memory back once
     * the connection is between requests, so idle connections hold IN_AUTHED at most. */
    if (c->in_len == 0 && !c->io.in_body && c->in_cap > IN_AUTHED) {
        uint8_t *shrunk = realloc(c->in, IN_AUTHED);
        if (shrunk) {
            c->in = shrunk;
            c->in_cap = IN_AUTHED;
        }
    }
    return c->in_len > 0;
}

static const connio_ops conn_ops = {
    .who = "",
    .serve = conn_serve,
    .buffered = conn_buffered,
    .tick = conn_tick,
    .free = conn_free,
    .unfinished = "request not finished",
};
