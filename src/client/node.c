/*
 * node.c — the tide:// backend: one tided over TCP, native protocol.
 *
 *   tide://HOST:PORT[?timeout_ms=5000&conns=8&token=SECRET&transport=tcp|ucx]
 *
 * transport=ucx: values move over UCX when tided serves it (ucx.c, docs/UCX.md), over TCP
 * otherwise.
 *
 * The token may also come from the TIDE_AUTH_TOKEN environment variable (the URL wins).
 *
 * Connections: up to `conns` sockets, opened on demand, each used by one call at
 * a time. A call takes an idle connection (or opens one, or waits for one), sends its
 * frames, reads the replies, and gives the connection back. A connection that failed in
 * any way (timeout, reset, protocol error) is closed rather than reused: after an error
 * the stream's framing is unknown.
 *
 * Timeouts: each call has `timeout_ms` from its start to its last reply byte; every wait
 * on the socket polls with what is left. Errors name the server and the errno.
 *
 * Retries: a call that fails on a kept connection before any reply byte arrived is
 * retried once on a fresh connection (the server may have closed an idle socket). Every
 * tide operation is idempotent — a repeated PUT is a no-op — so this is always safe.
 *
 * Large batches are cut to the server's limits (keys per frame, frame bytes) learnt from
 * HELLO. GET values are read straight into the caller's scatter lists, hashed piece by piece
 * as they arrive, and checked against the checksum the server sent; a mismatch is a miss,
 * never wrong data handed back. A reply's head is read in one recvmsg (its length follows
 * from the request), and after a send or a short read the next read polls first rather
 * than trying a recvmsg that would say EAGAIN (wire.c): a PUT is sendmsg, poll, recvmsg.
 */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "client/ucx.h"
#include "client/wire.h"
#include "common/hostport.h"

#define NODE_DEFAULT_CONNS 8
#define NODE_IOV_MAX 512
/* Value bytes taken from the socket per call while hashing them: small enough that the hash
 * reads them from L2 right after the kernel wrote them there. */
#define NODE_RECV_PIECE (128 * 1024)
/* The head of a PUT reply (n statuses) and of a GET reply (status, length, checksum for
 * each of n keys): known in advance, so it is read in one recvmsg (wire_recv_head). */
#define NODE_PUT_REPLY_HEAD(n) (FRAME_HDR_SIZE + 4 * (size_t)(n))
#define NODE_GET_REPLY_HEAD(n) (FRAME_HDR_SIZE + 20 * (size_t)(n))

/* s->impl is a wire (wire.h): connections, HELLO, retries and the requests without values
 * live there; this file has PUT and GET, whose values travel in the frames. */

/* Receive exactly the bytes of iov[0..cnt) (the array is consumed) and hash them into cs
 * piece by piece as they land: at most NODE_RECV_PIECE bytes a call, each piece hashed
 * while it is still in cache, and while the server keeps sending the rest (one pass over
 * the value instead of a receive and then a second pass to check it). */
static int node_recv_hashed(wire_call *k, struct iovec *iov, int cnt, checksum_state *cs) {
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
        ssize_t r = wire_recvmsg(k, &mh, 0, NODE_RECV_PIECE - room);
        if (r < 0) return (int)r;
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

/* ---- PUT and GET --------------------------------------------------------------------- */

struct status_arg {
    int *results;
    size_t n;
};

static int node_on_status_reply(wire_call *k, const frame_msg *m, void *arg) {
    struct status_arg *a = arg;
    if (m->h.count != a->n) return TIDE_EPROTO;
    frame_iter it;
    frame_entry e;
    frame_iter_init(&it, m);
    for (size_t i = 0; frame_iter_next(&it, &e); i++)
        a->results[i] = e.status;
    return 0;
}

static int node_put_tcp(tide_store *s, const tide_key *keys, size_t n, const tide_iov *iov,
                        const size_t *iovcnt, int *results) {
    wire *w = s->impl;
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
        size_t take = wire_chunk(w, NULL, nf - done, 0);
        uint64_t max_frame = wire_max_frame(w);
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
        wire_request x = {.vals = vals,
                          .on_reply = node_on_status_reply,
                          .reply_head = NODE_PUT_REPLY_HEAD(take)};
        char what[64];
        snprintf(what, sizeof(what), "PUT of %zu keys", take);
        x.what = what;
        WIRE_ENCODE(
            s, rc, x.head, x.head_len,
            frame_encode_put(NULL, 0, len, 0, fk + done, take, flat, fcnt + done, NULL, NULL),
            frame_encode_put(buf, cap, len, 0, fk + done, take, flat, fcnt + done, NULL, NULL));
        if (rc) {
            free(flat), free(vals), free(st), free(res);
            goto out;
        }
        /* Drop zero-length pieces: they carry nothing and would only lengthen the list. */
        int nv = 0;
        for (size_t q = 0; q < nvals; q++)
            if (vals[q].iov_len) vals[nv++] = vals[q];
        x.nvals = nv;
        struct status_arg a = {res, take};
        x.arg = &a;
        rc = wire_run(s, s->impl, &x);
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

static int node_on_get_reply(wire_call *k, const frame_msg *m, void *arg) {
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
                int rc = node_recv_hashed(k, v, nv, cs);
                if (rc) return rc;
                nv = 0;
            }
            v[nv++] = (struct iovec){src[q].base, take};
            left -= take;
        }
        int rc = node_recv_hashed(k, v, nv, cs);
        if (rc) return rc;
        if (checksum_digest(cs) != e.sum) {
            char kb[80];
            client_err(k->s, TIDE_ECHECKSUM,
                       "%s: value of key '%s' failed its checksum; "
                       "reported as a miss",
                       k->w->addr,
                       client_key_repr(a->keys[i].data, a->keys[i].len, kb, sizeof(kb)));
            a->results[i] = TIDE_ENOTFOUND;
            a->vlens[i] = 0;
        }
    }
    return 0;
}

static int node_get_tcp(tide_store *s, const tide_key *keys, size_t n, const tide_iov *iov,
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
        size_t take = wire_chunk(s->impl, NULL, nf - done, 0);
        int *res = malloc(take * sizeof(*res));
        size_t *vl = malloc(take * sizeof(*vl));
        if (!res || !vl) {
            free(res), free(vl);
            rc = client_err(s, -ENOMEM, "out of memory");
            goto out;
        }
        wire_request x = {.on_reply = node_on_get_reply, .reply_head = NODE_GET_REPLY_HEAD(take)};
        char what[64];
        snprintf(what, sizeof(what), "GET of %zu keys", take);
        x.what = what;
        WIRE_ENCODE(s, rc, x.head, x.head_len,
                    frame_encode_get(NULL, 0, len, 0, fk + done, caps + done, take),
                    frame_encode_get(buf, cap, len, 0, fk + done, caps + done, take));
        if (rc) {
            free(res), free(vl);
            goto out;
        }
        struct get_arg a = {fk + done, iovs + done, cnts + done, res, vl, take};
        x.arg = &a;
        rc = wire_run(s, s->impl, &x);
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
        for (size_t i = 0; i < n; i++)
            vlens[i] = lens[i];
out:
    free(iovs), free(cnts), free(lens), free(caps), free(fk), free(fidx);
    return rc ? rc : ok;
}

/* transport=ucx: the values over UCX while tided serves it (ucx.c). */
static int node_put_many(tide_store *s, const tide_key *keys, size_t n, const tide_iov *iov,
                         const size_t *iovcnt, int *results) {
    wire *w = s->impl;
    if (w->owner && tucx_usable(s, w)) return tucx_put_many(s, w, keys, n, iov, iovcnt, results);
    return node_put_tcp(s, keys, n, iov, iovcnt, results);
}

static int node_get_many(tide_store *s, const tide_key *keys, size_t n, const tide_iov *iov,
                         const size_t *iovcnt, int *results, size_t *vlens) {
    wire *w = s->impl;
    if (w->owner && tucx_usable(s, w))
        return tucx_get_many(s, w, keys, n, iov, iovcnt, results, vlens);
    return node_get_tcp(s, keys, n, iov, iovcnt, results, vlens);
}

/* Device values: over a UCX that moves CUDA memory, values in declared GPU regions go
 * straight between the GPU and the pool (each checksum taken through the queue's staging
 * buffer, devio_sum); otherwise staged through that buffer (devio.c). */
static int node_put_many_dev(tide_store *s, const tide_key *keys, size_t n, const tide_iov *iov,
                             const size_t *iovcnt, int *results, dev_queue *q) {
    wire *w = s->impl;
    if (w->owner && tucx_usable(s, w) && tucx_dev_direct(w, iov, iovcnt, n))
        return tucx_put_many_dev(s, w, keys, n, iov, iovcnt, results, devio_sum, q);
    return client_staged_put(s, keys, n, iov, iovcnt, results, q);
}

static int node_get_many_dev(tide_store *s, const tide_key *keys, size_t n, const tide_iov *iov,
                             const size_t *iovcnt, int *results, size_t *vlens, dev_queue *q) {
    wire *w = s->impl;
    if (w->owner && tucx_usable(s, w) && tucx_dev_direct(w, iov, iovcnt, n))
        return tucx_get_many_dev(s, w, keys, n, iov, iovcnt, results, vlens, devio_sum, q);
    return client_staged_get(s, keys, n, iov, iovcnt, results, vlens, q);
}

static int node_uses_ucx(tide_store *s) {
    return s->impl && ((wire *)s->impl)->owner != NULL;
}

static int node_ucx_cuda(tide_store *s, char *why, size_t len) {
    if (!node_uses_ucx(s)) {
        snprintf(why, len, "not a transport=ucx store");
        return -1;
    }
    return tucx_cuda_support(s, s->impl, why, len);
}

/* ---- open / close -------------------------------------------------------------------- */

/* HOST:PORT (hostport.h: an IPv6 host in brackets) resolved with AF_UNSPEC: a name may
 * give an IPv4 or an IPv6 address; the first one getaddrinfo orders is used. */
static int node_resolve(tide_store *s, wire *n, const char *authority) {
    hostport hp;
    char why[200], port[8];
    if (hostport_parse(authority, strlen(authority), 0, &hp, why, sizeof(why)) != 0)
        return client_err(s, TIDE_EURL, "tide://%s: %s%s", authority, why,
                          strstr(why, "no port") ? " (tided listens on 7474 by default)" : "");
    snprintf(port, sizeof(port), "%d", hp.port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICSERV | (hp.ipv6 ? AI_NUMERICHOST : 0)},
                    *res = NULL;
    int g = getaddrinfo(hp.host, port, &hints, &res);
    if (g != 0 || !res)
        return client_err(s, -EHOSTUNREACH, "tide://%s: cannot resolve '%s': %s", authority,
                          hp.host, gai_strerror(g));
    memcpy(&n->sa, res->ai_addr, res->ai_addrlen);
    n->salen = res->ai_addrlen;
    freeaddrinfo(res);
    snprintf(n->addr, sizeof(n->addr), "tide://%s", authority);
    return 0;
}

static void node_close(tide_store *s) {
    wire *w = s->impl;
    if (!w) return;
    wire_destroy(w);
    if (w->owner) tucx_detach(w);
    free(w);
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
    uint64_t timeout_ms, conns, replica;
    const char *token;
    int rc = wire_url_opts(s, u, "tide://", NODE_DEFAULT_CONNS, &timeout_ms, &conns, &token);
    if (rc) return rc;
    /* replica=1: a cluster's member handle (cluster.c sets it; see wire.h). */
    if ((rc = url_opt_uint(u, "replica", 0, &replica, msg, sizeof(msg))) != 0)
        return client_err(s, rc, "tide://: %s", msg);
    if (replica > 1)
        return client_err(s, TIDE_EOPTION, "tide://: replica must be 0 or 1, got %llu",
                          (unsigned long long)replica);
    const char *transport = url_get(u, "transport");
    if (transport && strcmp(transport, "tcp") != 0 && strcmp(transport, "ucx") != 0)
        return client_err(s, TIDE_EOPTION, "tide://: transport must be tcp or ucx, got '%s'",
                          transport);
    wire *w = calloc(1, sizeof(*w));
    if (!w) return client_err(s, -ENOMEM, "out of memory");
    s->impl = w;
    w->retry = 1;     /* see atop */
    w->checksums = 1; /* GET values are hashed as they arrive */
    w->replica = (int)replica;
    if ((rc = wire_init(s, w, (int)conns, timeout_ms, token)) != 0 ||
        (rc = node_resolve(s, w, u->authority)) != 0 ||
        (transport && !strcmp(transport, "ucx") && (rc = tucx_attach(s, w)) != 0))
        goto fail;
    /* Report an unknown option before trying the network, which could hide it. */
    if ((rc = url_check_unused(u, msg, sizeof(msg))) != 0) {
        rc = client_err(s, rc, "%s", msg);
        goto fail;
    }
    /* Connect now, so that a wrong address or token fails tide_open, not the first call. */
    if ((rc = wire_connect_now(s, w)) != 0) goto fail;
    /* transport=ucx: the UCX endpoint too, so that the first call does not pay UCX's start
     * (its context, worker and wire-up: 0.4-0.5 s with UCX 1.22 here). One that cannot be
     * made is warned about, and values go over TCP, as on any later call (tucx_usable). */
    if (w->owner) (void)tucx_usable(s, w);
    return 0;
fail:
    node_close(s);
    return rc;
}

void node_mark_missed(tide_store *s) {
    if (s && s->ops == &node_backend && s->impl) wire_mark_missed(s->impl);
}

int node_replica_call(tide_store *s, uint32_t flags, uint64_t member, uint64_t seq,
                      uint64_t out[2]) {
    if (!s || s->ops != &node_backend || !s->impl)
        return client_err(s, TIDE_EUNSUPPORTED, "not a tide:// node handle");
    return wire_replica_call(s, s->impl, flags, member, seq, out);
}

node_pending *node_ask_send(tide_store *s, uint64_t member) {
    if (!s || s->ops != &node_backend || !s->impl) return NULL;
    wire_pending *p = malloc(sizeof(*p));
    if (p) wire_ask_send(s, s->impl, member, p);
    return (node_pending *)p;
}

int node_ask_recv(tide_store *s, uint64_t member, node_pending *pend, uint64_t out[2]) {
    wire_pending *p = (wire_pending *)pend;
    int rc = wire_ask_recv(s, s->impl, member, p, out);
    free(p);
    return rc;
}

const backend_ops node_backend = {
    .scheme = "tide",
    .open = node_open,
    .close = node_close,
    .put_many = node_put_many,
    .get_many = node_get_many,
    .exists_many = wire_exists_many,
    .remove_many = wire_remove_many,
    .match_prefix = wire_match_prefix,
    .clear = wire_clear,
    .stats = wire_stats,
    .events = wire_events,
    .put_many_dev = node_put_many_dev,
    .get_many_dev = node_get_many_dev,
    .uses_ucx = node_uses_ucx,
    .ucx_cuda = node_ucx_cuda,
};
