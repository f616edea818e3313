/*
 * conn.c — one client connection of tided: read frames, run them against the store, send
 * the replies. Owned by one worker thread; nothing here takes a lock except the store.
 *
 * Receiving. The header and key section of a frame are read into `in` (bounded by the
 * frame limits) and decoded with frame_decode_head. A PUT's value bytes are then read
 * straight into the reservations the store made for them (readv into pool memory, no
 * staging copy); values that will not be stored (a duplicate key, no space) are read into
 * a scratch buffer and dropped. Each piece of a value is hashed as soon as it has landed
 * (while it is still in cache: one pass over the bytes, not a second one at the end); when
 * the last value byte is in, each reservation's hash is compared with the sender's checksum
 * and the value committed (or aborted): a half-received value is never visible. A frame's
 * head is read with at most max(need, HEAD_READ) bytes, so only the first few KiB of a
 * value can land in `in` (they are copied to the pool from there); the rest goes from the
 * socket into the pool. No read is made that can only return EAGAIN: one that took less
 * than it asked for marks the socket drained (connio.h), and the connection then waits for
 * epoll (level-triggered, so bytes that came meanwhile are reported at once). Per 256 KiB
 * PUT that is epoll_wait, recv, readv, writev (docs/WRITE_PATH.md). While a body is short,
 * SO_RCVLOWAT is set to what is still to come (at most 4 MiB): one wake-up when it is in,
 * not one per arrival; conn_tick counts bytes queued meanwhile as progress.
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
 * The socket side — epoll interest, backpressure, counted reads, the idle clock, drain and
 * teardown — is connio.c's, shared with the RESP port; this file keeps the protocol.
 *
 * Same-host connections (the Unix listener) may ask HELLO for the shared pool: the reply
 * then carries the pool's memfd (SCM_RIGHTS) and conn_shm.c serves their RESERVE, COMMIT,
 * PIN and RELEASE requests and holds their leases (`shm`), released when they close.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common/checksum.h"
#include "common/log.h"
#include "common/stats_fields.h"
#include "common/util.h"
#include "proto/frame.h"
#include "server/connio.h"
#include "server/server_int.h"

/* The input buffer starts small: a peer that has not authenticated yet can only ever send
 * a HELLO (at most FRAME_HDR_SIZE + FRAME_HELLO_META + FRAME_TOKEN_MAX bytes), so nothing
 * sizable is allocated for it before its token is checked. Once authenticated (or at once
 * when the server has no token) the buffer grows to IN_AUTHED on its first read. */
#define IN_PREAUTH 512
#define IN_AUTHED (64 * 1024)
#define SCRATCH_SIZE (64 * 1024)
#define IOV_BATCH 64 /* iovecs per readv of value bytes */
/* At a frame boundary a read asks for the bytes the decoder needs, and at least HEAD_READ:
 * enough for the head of a typical request (several small ones when pipelined), but so
 * few of a PUT's value bytes that almost all of them go from the socket straight into
 * their reservation rather than through `in`. The last read of a PUT's body also takes up
 * to HEAD_READ bytes of what follows, so that it can tell that the socket is empty. */
#define HEAD_READ (4 * 1024)
/* Value bytes taken from the socket per readv: small enough that hashing them right after
 * reads them from L2. */
#define BODY_PIECE (256 * 1024)

/* One value of the PUT being received. */
typedef struct put_slot {
    uint64_t res_id; /* the store's reservation, 0 when the value is dropped */
    uint64_t offset; /* pool offset of the reservation */
    uint64_t vlen, sum;
    uint64_t got; /* checksum of the bytes received, once all are in */
    int32_t status;
} put_slot;

struct conn {
    connio io; /* socket, epoll interest, output queue, timeouts (connio.c) */
    worker *w;
    server *srv;
    conn *prev, *next;
    frame_decoder dec;
    uint8_t *in;
    size_t in_len, in_cap;
    int authed;

    /* A PUT whose value bytes are arriving (io.in_body). */
    uint64_t put_req_id, put_start_ns;
    put_slot *slots;
    uint32_t nslots, slot;   /* all slots; the one being filled */
    uint64_t slot_off;       /* bytes of slots[slot] received */
    uint64_t body_left;      /* value bytes of the PUT not yet received */
    int lowat;               /* SO_RCVLOWAT set above 1 for the body (body_wait) */
    int lowat_queued;        /* bytes queued in the socket at the last tick, while lowat */
    uint8_t *scratch;
    checksum_state *cs;     /* hash of slots[slot]'s bytes so far */

    int is_unix;    /* accepted on the Unix listener */
    int send_fd;    /* the pool's memfd, to pass with the next bytes sent; -1 = none */
    shm_state *shm; /* leases of a connection granted FRAME_FEATURE_SHM, else NULL */
};

conn *conn_next(conn *c) {
    return c->next;
}

server *conn_server(conn *c) {
    return c->srv;
}

conn *conn_new(worker *w, int fd) {
    conn *c = calloc(1, sizeof(*c));
    if (!c) return NULL;
    c->w = w;
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
    c->authed = c->srv->cfg.auth_token[0] == '\0';
    struct sockaddr_storage sa;
    socklen_t salen = sizeof(sa);
    c->is_unix = getsockname(fd, (struct sockaddr *)&sa, &salen) == 0 && sa.ss_family == AF_UNIX;
    c->send_fd = -1;
    if (connio_init(&c->io, c->srv, w->epfd, fd, c, 0) != 0) {
        free(c->in);
        free(c);
        return NULL;
    }
    c->next = w->conns;
    if (w->conns) w->conns->prev = c;
    w->conns = c;
    return c;
}

static void put_release(conn *c) {
    for (uint32_t i = 0; i < c->nslots; i++)
        if (c->slots[i].res_id) store_abort(c->srv->st, c->slots[i].res_id);
    free(c->slots);
    c->slots = NULL;
    c->nslots = 0;
    c->io.in_body = 0;
}

void conn_free(conn *c) {
    worker *w = c->w;
    if (c->prev)
        c->prev->next = c->next;
    else
        w->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    preauth_release(c->srv, c->io.fd, c->authed); /* before its fd is closed: preauth.c */
    connio_close(&c->io);
    put_release(c);
    shm_free(c->srv->st, c->shm);
    free(c->in);
    free(c->scratch);
    checksum_free(c->cs);
    free(c);
}

/* ---- request handlers: op_X() answers opcode X (do_x() elsewhere means "lock held") ---- */

typedef int (*encode_fn)(void *buf, size_t cap, size_t *len, void *arg);

/* Encode with a size query first, into a buffer the output queue will own. */
static int reply_encoded(conn *c, encode_fn fn, void *arg) {
    size_t len = 0;
    int rc = fn(NULL, 0, &len, arg);
    if (rc != TIDE_EBUFSMALL && rc != 0) return rc;
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf) return -ENOMEM;
    if ((rc = fn(buf, len, &len, arg)) != 0) {
        free(buf);
        return rc;
    }
    return outq_owned(&c->io.out, buf, len);
}

int conn_reply(conn *c, conn_encode_fn fn, void *arg) {
    return reply_encoded(c, fn, arg);
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
        snprintf(msg, sizeof(msg), "no common protocol version: client speaks %u..%u, "
                 "server speaks %u", h->min_version, h->max_version, FRAME_VERSION);
        return reply_error(c, FRAME_OP_HELLO, m->h.req_id, TIDE_EUNSUPPORTED, msg);
    }
    if (!c->authed) {
        /* Out of its pre-auth slot, into an authenticated one (preauth.c). */
        int rc = preauth_promote(c->srv, c->io.fd);
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
    c->authed = 1;
    uint64_t features = 0;
    if ((h->features & FRAME_FEATURE_SHM) && c->is_unix) {
        if (!c->shm && !(c->shm = shm_new())) return -ENOMEM;
        c->send_fd = store_fd(c->srv->st);
        features |= FRAME_FEATURE_SHM;
    }
    frame_hello_reply r = {FRAME_VERSION, c->dec.lim.max_keys, features, c->dec.lim.max_value,
                           c->dec.lim.max_frame};
    uint8_t *buf = malloc(FRAME_HDR_SIZE + FRAME_HELLO_REPLY_META);
    size_t len;
    if (!buf) return -ENOMEM;
    frame_encode_hello_reply(buf, FRAME_HDR_SIZE + FRAME_HELLO_REPLY_META, &len, m->h.req_id, &r);
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
    int rc = -ENOMEM, hits = 0;
    if (!st || !vlens || !sums || !refs) goto out;
    frame_iter it;
    frame_entry e;
    frame_iter_init(&it, m);
    for (size_t i = 0; frame_iter_next(&it, &e); i++) {
        st[i] = store_pin(c->srv->st, e.key.data, e.key.len, 0, &refs[i]);
        if (st[i] == 0 && refs[i].len > e.cap) {
            store_unpin(c->srv->st, refs[i].id);
            st[i] = TIDE_EBUFSMALL;
            vlens[i] = refs[i].len;
        } else if (st[i] == 0) {
            vlens[i] = refs[i].len;
            sums[i] = refs[i].checksum;
            hits++;
        }
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
    *status = hits == (int)n ? MST_OK : MST_MISS;
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
        "capacity_bytes", "used_bytes",  "objects",        "puts",           "put_dups",
        "gets",           "misses",      "evictions",      "evicted_bytes",  "checksum_errors",
        "bytes_in",       "bytes_out",   "meta_bytes",     "pinned",         "reserved",
        "connections",    "net_bytes_in", "net_bytes_out",
    };
    uint64_t values[] = {
        st.capacity_bytes, st.used_bytes, st.objects, st.puts, st.put_dups, st.gets, st.misses,
        st.evictions, st.evicted_bytes, st.checksum_errors, st.bytes_in, st.bytes_out,
        st.meta_bytes, st.pinned, st.reserved, (uint64_t)atomic_load(&c->srv->open_conns),
        atomic_load(&c->srv->m.bytes_in), atomic_load(&c->srv->m.bytes_out),
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

/* Reserve room for every value of a PUT whose head was just decoded. */
static int put_begin(conn *c, const frame_msg *m) {
    size_t n = m->h.count;
    c->slots = calloc(n ? n : 1, sizeof(put_slot));
    if (!c->slots) return -ENOMEM;
    c->nslots = (uint32_t)n;
    c->slot = 0;
    c->slot_off = 0;
    c->put_req_id = m->h.req_id;
    c->body_left = m->data_len;
    frame_iter it;
    frame_entry e;
    frame_iter_init(&it, m);
    for (size_t i = 0; frame_iter_next(&it, &e); i++) {
        put_slot *s = &c->slots[i];
        store_ref ref;
        s->vlen = e.vlen;
        s->sum = e.sum;
        int rc = store_reserve(c->srv->st, e.key.data, e.key.len, e.vlen, 0, &ref);
        if (rc == 0) {
            s->res_id = ref.id;
            s->offset = ref.offset;
        } else {
            s->status = rc == STORE_DUP ? 0 : rc;
        }
    }
    c->io.in_body = 1;
    return 0;
}

static int enc_put_reply(void *buf, size_t cap, size_t *len, void *arg) {
    conn *c = arg;
    int32_t *st = malloc((c->nslots ? c->nslots : 1) * sizeof(int32_t));
    if (!st) return -ENOMEM;
    for (uint32_t i = 0; i < c->nslots; i++) st[i] = c->slots[i].status;
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
        if (!s->res_id) {
            all &= s->status == 0;
            continue;
        }
        if (s->got != s->sum) {
            store_abort(st, s->res_id);
            s->status = TIDE_ECHECKSUM;
            all = 0;
        } else {
            s->status = store_commit_chain(st, s->res_id, s->sum, &chain,
                                           c->nslots > 1 && i + 1 == c->nslots);
            stored += s->vlen;
        }
        s->res_id = 0;
    }
    store_count_io(st, stored, 0);
    int rc = reply_encoded(c, enc_put_reply, c);
    metrics_op_done(&c->srv->m, MOP_PUT, all ? MST_OK : MST_ERROR, c->nslots,
                    now_ns() - c->put_start_ns);
    put_release(c);
    return rc;
}

/* Where the next value bytes go: pool memory of a reservation, or scratch. Fills up to
 * IOV_BATCH iovecs covering at most BODY_PIECE of the bytes still expected. */
static int body_iov(conn *c, struct iovec *iov) {
    int n = 0;
    uint64_t off = c->slot_off;
    size_t room = BODY_PIECE;
    for (uint32_t i = c->slot; i < c->nslots && n < IOV_BATCH && room; i++, off = 0) {
        put_slot *s = &c->slots[i];
        uint64_t left = s->vlen - off;
        while (left && n < IOV_BATCH && room) {
            size_t take = left < room ? (size_t)left : room;
            if (s->res_id) {
                iov[n].iov_base = store_base(c->srv->st) + s->offset + off;
            } else {
                take = take > SCRATCH_SIZE ? SCRATCH_SIZE : take;
                iov[n].iov_base = c->scratch;
            }
            iov[n++].iov_len = take;
            left -= take;
            off += take;
            room -= take;
        }
    }
    return n;
}

/* Account n value bytes as received (they are in place already): hash the ones that belong
 * to a reservation, and keep each finished value's hash for put_finish. */
static void body_advance(conn *c, uint64_t n) {
    while (n && c->slot < c->nslots) {
        put_slot *s = &c->slots[c->slot];
        uint64_t left = s->vlen - c->slot_off;
        uint64_t take = n < left ? n : left;
        if (s->res_id) {
            if (c->slot_off == 0) checksum_reset(c->cs);
            checksum_update(c->cs, store_base(c->srv->st) + s->offset + c->slot_off,
                                   (size_t)take);
        }
        c->slot_off += take;
        c->body_left -= take;
        n -= take;
        if (c->slot_off == s->vlen) {
            if (s->res_id) s->got = checksum_digest(c->cs);
            c->slot++;
            c->slot_off = 0;
        }
    }
}

/* Move value bytes already sitting in `in` from `off` on into their places, and drop
 * in[0, off) with them (the frame's head, when the PUT has just begun). */
static void body_from_inbuf(conn *c, size_t off) {
    size_t used = off;
    while (used < c->in_len && c->slot < c->nslots) {
        put_slot *s = &c->slots[c->slot];
        uint64_t left = s->vlen - c->slot_off;
        size_t take = c->in_len - used < left ? c->in_len - used : (size_t)left;
        if (s->res_id) memcpy(store_base(c->srv->st) + s->offset + c->slot_off, c->in + used, take);
        used += take;
        body_advance(c, take);
    }
    memmove(c->in, c->in + used, c->in_len - used);
    c->in_len -= used;
}

/* The body is not all in and the socket is empty: have epoll wake the connection only
 * once the rest of it (up to 4 MiB) has arrived, not at each arrival. Never more than the
 * body still to come, so that a peer that sends nothing after it is still woken. */
static void body_wait(conn *c) {
    uint64_t left = c->body_left;
    int want = left > (4u << 20) ? (4 << 20) : (int)left;
    if (want > 1 && want != c->lowat &&
        setsockopt(c->io.fd, SOL_SOCKET, SO_RCVLOWAT, &want, sizeof(want)) == 0) {
        c->lowat = want;
        c->lowat_queued = 0;
    }
}

static void body_wait_end(conn *c) {
    int one = 1;
    if (c->lowat && setsockopt(c->io.fd, SOL_SOCKET, SO_RCVLOWAT, &one, sizeof(one)) == 0)
        c->lowat = 0;
}

/* Read value bytes straight into place. Returns 1 when the body is complete, 0 when the
 * socket has nothing more now, negative on error/EOF. When the read covers the rest of the
 * body it also takes up to HEAD_READ bytes of what follows into `in`: a short read then
 * says the socket is empty, and the next frame's head needs no read of its own. */
static int body_read(conn *c) {
    if (!c->scratch && !(c->scratch = malloc(SCRATCH_SIZE))) return -ENOMEM;
    if (!c->cs && !(c->cs = checksum_new())) return -ENOMEM;
    body_from_inbuf(c, 0);
    while (c->slot < c->nslots) {
        if (c->io.drained) { /* epoll says when more has come */
            body_wait(c);
            return 0;
        }
        struct iovec iov[IOV_BATCH + 1];
        int n = body_iov(c, iov);
        size_t cover = 0;
        for (int i = 0; i < n; i++)
            cover += iov[i].iov_len;
        if (cover == c->body_left && c->in_len < c->in_cap) {
            size_t tail = c->in_cap - c->in_len < HEAD_READ ? c->in_cap - c->in_len : HEAD_READ;
            iov[n++] = (struct iovec){c->in + c->in_len, tail};
        }
        ssize_t r = connio_readv(&c->io, iov, n);
        if (r <= 0) return (int)r;
        size_t body = (size_t)r < cover ? (size_t)r : cover;
        body_advance(c, body);
        c->in_len += (size_t)r - body;
    }
    body_wait_end(c);
    return 1;
}

/* ---- the request loop ---------------------------------------------------------------- */

static int metric_op(unsigned op) {
    switch (op) {
    case FRAME_OP_PUT: return MOP_PUT;
    case FRAME_OP_GET: return MOP_GET;
    case FRAME_OP_EXISTS: return MOP_EXISTS;
    case FRAME_OP_REMOVE: return MOP_REMOVE;
    case FRAME_OP_MATCH_PREFIX: return MOP_MATCH;
    case FRAME_OP_STAT: return MOP_STAT;
    case FRAME_OP_PING: return MOP_PING;
    case FRAME_OP_CLEAR: return MOP_CLEAR;
    case FRAME_OP_RESERVE: return MOP_RESERVE;
    case FRAME_OP_COMMIT: return MOP_COMMIT;
    case FRAME_OP_PIN: return MOP_PIN;
    case FRAME_OP_RELEASE: return MOP_RELEASE;
    default: return MOP_HELLO;
    }
}

/* Run one decoded request (not a PUT with values, which put_begin starts). */
static int dispatch(conn *c, const frame_msg *m) {
    uint64_t t0 = now_ns();
    unsigned op = m->h.opcode;
    int status = MST_OK, rc;
    if (!c->authed && op != FRAME_OP_HELLO) {
        atomic_fetch_add(&c->srv->m.auth_failures, 1);
        c->io.close_after_flush = 1;
        return reply_error(c, op, m->h.req_id, TIDE_EAUTH,
                           "authentication required: send HELLO with the server's token first");
    }
    switch (op) {
    case FRAME_OP_HELLO: rc = op_hello(c, m, &status); break;
    case FRAME_OP_GET: rc = op_get(c, m, &status); break;
    case FRAME_OP_EXISTS:
    case FRAME_OP_REMOVE: rc = op_keys(c, m, &status); break;
    case FRAME_OP_MATCH_PREFIX: rc = op_match(c, m, &status); break;
    case FRAME_OP_STAT: rc = op_stat(c, m); break;
    case FRAME_OP_EVENTS: rc = events_op(c, m); break;
    case FRAME_OP_PING: rc = reply_empty(c, op, m->h.req_id); break;
    case FRAME_OP_CLEAR:
        store_clear(c->srv->st);
        rc = reply_empty(c, op, m->h.req_id);
        break;
    case FRAME_OP_RESERVE:
    case FRAME_OP_COMMIT:
    case FRAME_OP_PIN:
    case FRAME_OP_RELEASE:
        if (c->shm) {
            rc = shm_dispatch(c, c->shm, m, &status);
            break;
        }
        status = MST_ERROR;
        rc = reply_error(c, op, m->h.req_id, TIDE_EUNSUPPORTED,
                         c->is_unix ? "shared-pool requests need HELLO with the shm feature"
                                    : "shared-pool requests are served on tided's Unix socket "
                                      "only (unix:// URLs)");
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
    metrics_op_done(&c->srv->m, metric_op(op), rc ? MST_ERROR : status, m->h.count,
                    now_ns() - t0);
    return rc;
}

/* Decode and run the frames in `in`; returns 0, or negative to close now. */
static int process_input(conn *c) {
    while (!connio_held(&c->io)) {
        if (!c->io.in_body && atomic_load(&c->srv->stopping)) return 0;
        if (c->io.in_body) {
            int rc = body_read(c);
            if (rc <= 0) return rc;
            if ((rc = put_finish(c)) != 0) return rc;
            continue;
        }
        if (!c->authed && c->in_len >= FRAME_HDR_SIZE && frame_rd32(c->in) == FRAME_MAGIC &&
            c->in[5] != FRAME_OP_HELLO && frame_op_valid(c->in[5]) &&
            !(c->in[5] & FRAME_OP_REPLY)) {
            /* Refused on its header alone: its key section is never read. */
            atomic_fetch_add(&c->srv->m.auth_failures, 1);
            c->io.close_after_flush = 1;
            return reply_error(c, c->in[5], frame_rd64(c->in + 8), TIDE_EAUTH,
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
            uint64_t req_id = c->in_len >= 16 ? frame_rd64(c->in + 8) : 0;
            return reply_error(c, op, req_id, (int32_t)n, c->dec.errstr);
        }
        if (n == 0) {
            /* The last read found the socket empty: epoll says when more has come. */
            if (c->io.drained) return 0;
            /* Need more bytes: make room for at least d->need, then read. */
            size_t want = c->in_len + (c->dec.need > 4096 ? c->dec.need : 4096);
            if (!c->authed) {
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
        if (m.h.opcode == FRAME_OP_PUT && m.data_len > 0 && c->authed) {
            c->put_start_ns = now_ns();
            rc = put_begin(c, &m);
            /* The value bytes read with the head go to their places from where they are
             * (not moved to the front of `in` first), and the head is dropped with them. */
            if (rc == 0) {
                if (!c->cs && !(c->cs = checksum_new())) return -ENOMEM;
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

int conn_on_event(conn *c, uint32_t events) {
    int rc = 0;
    if (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
        c->io.drained = 0;
        rc = process_input(c);
    }
    for (;;) {
        if (rc < 0) return rc;
        int frc = connio_flush(&c->io, &c->send_fd);
        if (frc) return frc;
        /* Sending may have lifted the backpressure on frames already buffered: level-
         * triggered epoll will not report them again, so run them now. */
        if (connio_held(&c->io) || c->io.in_body || !c->in_len) break;
        size_t before = c->in_len;
        rc = process_input(c);
        if (rc == 0 && c->in_len == before && !outq_busy(&c->io.out)) break;
    }
    if (c->io.close_after_flush && !outq_busy(&c->io.out)) return -ECONNABORTED;
    connio_watch(&c->io);
    return 0;
}

int conn_tick(conn *c, uint64_t now) {
    /* While epoll waits for the rest of a body (body_wait), bytes that arrive wake nobody:
     * they count as progress here, so a peer that sends slowly but steadily is not taken
     * for a stalled one. */
    int queued;
    if (c->lowat && ioctl(c->io.fd, FIONREAD, &queued) == 0 && queued != c->lowat_queued) {
        c->lowat_queued = queued;
        c->io.last_progress_ns = now;
    }
    /* A large key section grew `in` (up to the frame limits); give the memory back once
     * the connection is between requests, so idle connections hold IN_AUTHED at most. */
    if (c->in_len == 0 && !c->io.in_body && c->in_cap > IN_AUTHED) {
        uint8_t *shrunk = realloc(c->in, IN_AUTHED);
        if (shrunk) {
            c->in = shrunk;
            c->in_cap = IN_AUTHED;
        }
    }
    /* A peer that has not authenticated is waited for no longer than a stalled request. */
    return connio_stalled(&c->io, now, c->in_len > 0 || !c->authed, "",
                          c->authed ? "request not finished" : "no HELLO with the token")
               ? -ETIMEDOUT
               : 0;
}

int conn_drain(conn *c) {
    return connio_drain(&c->io, &c->send_fd);
}
