/*
 * ucx.c — tide://HOST:PORT?transport=ucx: values move over UCX (docs/UCX.md), by active
 * messages with UCX's rendezvous on the endpoint to tided's UCX port (UCX_AM_GET/GETDATA,
 * UCX_AM_PUT/PUTDONE: proto/ucx_msg.h), and by RMA on a second endpoint, to tided's
 * same-host worker, when this process runs on tided's host (tucx_same_host).
 *
 * Control stays on the handle's tide:// connections (wire.c): their HELLO asks for
 * FRAME_FEATURE_UCX, and a tided started with --ucx-port grants it with its UCX port and
 * then serves the shared-pool requests (RESERVE, COMMIT, PIN, RELEASE, leases: conn_shm.c)
 * on them. tide_open makes a UCP context, a worker and one endpoint to that port; the
 * endpoint's UCX_AM_HELLO carries the token (proto/ucx_msg.h) and the reply the pool's
 * address and size, and for the same-host endpoint the address of tided's same-host worker
 * and the pool's rkey packed there.
 *
 *   put: RESERVE (offsets) -> one UCX_AM_PUT per value (its scatter list as the data; UCX's
 *        rendezvous moves large ones zero-copy into the pool), each answered UCX_AM_PUTDONE
 *        once the bytes are there (same host: ucp_put_nbx of each piece, then
 *        ucp_ep_flush_nbx) -> COMMIT with the checksum of the caller's bytes. A failure in
 *        between closes the connection: tided aborts the reservations, nothing half-written
 *        becomes visible.
 *   get: PIN (offsets, lengths, checksums) -> one UCX_AM_GET per value, answered with the
 *        bytes as UCX_AM_GETDATA's data, received into the caller's scatter list (same host:
 *        ucp_get_nbx) -> each value hashed where it landed and compared with the stored
 *        checksum (a torn read, or an object whose lease ran out and was reused, is a miss)
 *        -> RELEASE sent without waiting (as unix:// with verify=1), reporting a mismatch so
 *        tided drops it.
 *
 * No RMA on the endpoint to the UCX port: tided's worker there has none (UCX's emulation of
 * RMA over TCP would let any peer write anywhere in tided: ucx_srv.c). On RDMA NICs the
 * rendezvous is the NIC's zero-copy all the same.
 *
 * Threads: the UCP worker is single-threaded; one mutex (mu) holds it for the whole data
 * phase of a call (several calls of one handle move their bytes one after another; their
 * control requests still overlap on separate connections).
 *
 * Failures: every wait has the call's deadline (timeout_ms); past it, or when the endpoint's
 * error handler ran (tided died), the endpoint is force-closed, the call fails with a message
 * naming UCX's reason, and the next call connects again. When tided does not grant UCX (no
 * --ucx-port, or its UCX did not start) or the endpoint cannot be made, the handle moves
 * values over TCP as plain tide:// does, with one warning, and tries UCX again after
 * TUCX_RETRY_NS.
 *
 * Registration: buffers the caller declared (tide_buffer_register) are registered once per
 * UCX context (ucp_mem_map, at most TUCX_REG_SLOTS per context, the least recently used
 * dropped) and passed as the requests' memh; others are given to UCX unregistered and UCX
 * registers them itself. Kept declarations (tucx_declare: the connector's regions and
 * staging buffers) have no slot limit: each context registers each once, at first use,
 * until it is undeclared. The same-host path passes a registration with every piece; the
 * active-message path with values in one piece (a value in several goes as one UCX iov
 * message, which carries none: UCX registers it itself, free on TCP; one message per
 * piece, to carry ours, measured 2-4x slower there).
 *
 * GPU memory: each context asks UCX which memory types it moves (ucp_context_query). When
 * CUDA is one, values whose pieces all lie in regions declared as CUDA memory
 * (tucx_put_many_dev / tucx_get_many_dev, from node.c) go by active messages straight
 * between the GPU and the pool, by rendezvous only (UCX_GET_RNDV; a put's send forced to
 * it), registered as CUDA memory; their checksums are taken by the caller's function (the
 * device queue reads each value back into its staging buffer, devio_sum). Otherwise node.c
 * stages them through that buffer (devio.c).
 */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client/ucx.h"
#include "client/ucx_dl.h"
#include "common/log.h"
#include "common/util.h"
#include "proto/ucx_msg.h"

/* ---- declared buffers (tide_buffer_register, docs/UCX.md) ------------------------------ */

typedef struct reg_range {
    uintptr_t base;
    size_t len;
    uint64_t id; /* never reused: a context's registration names the range by it */
    int kept;    /* tucx_declare: registered once per context and kept until unregistered */
    int cuda;    /* ... as CUDA memory (a GPU region) */
} reg_range;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static reg_range g_ranges[TIDE_BUFFER_MAX];
static atomic_size_t g_n;
static uint64_t g_next_id = 1;

static void tucx_forget(uint64_t id);

static int declare(const void *base, size_t len, int kept, int cuda) {
    if (!base || !len || (uintptr_t)base + len < (uintptr_t)base) return -EINVAL;
    uintptr_t b = (uintptr_t)base;
    int rc = 0;
    pthread_mutex_lock(&g_mu);
    size_t n = atomic_load(&g_n);
    for (size_t i = 0; i < n && !rc; i++)
        if (b < g_ranges[i].base + g_ranges[i].len && g_ranges[i].base < b + len) rc = TIDE_EBUSY;
    if (!rc && n == TIDE_BUFFER_MAX) rc = TIDE_ELIMIT;
    if (!rc) {
        g_ranges[n] = (reg_range){b, len, g_next_id++, kept, cuda};
        atomic_store(&g_n, n + 1);
    }
    pthread_mutex_unlock(&g_mu);
    return rc;
}

int tide_buffer_register(const void *base, size_t len) {
    return declare(base, len, 0, 0);
}

int tucx_declare(const void *base, size_t len, int cuda) {
    return declare(base, len, 1, cuda);
}

int client_ucx_declare(tide_store *s, const void *base, size_t len, int cuda) {
    return client_uses_ucx(s) && declare(base, len, 1, cuda) == 0;
}

int tucx_declared_cuda(const void *p, size_t l) {
    int found = 0;
    pthread_mutex_lock(&g_mu);
    size_t n = atomic_load(&g_n);
    for (size_t i = 0; i < n && !found; i++) {
        const reg_range *r = &g_ranges[i];
        found = r->cuda && (uintptr_t)p >= r->base && (uintptr_t)p - r->base <= r->len &&
                l <= r->len - ((uintptr_t)p - r->base);
    }
    pthread_mutex_unlock(&g_mu);
    return found;
}

int tide_buffer_unregister(const void *base, size_t len) {
    uint64_t id = 0;
    pthread_mutex_lock(&g_mu);
    size_t n = atomic_load(&g_n);
    for (size_t i = 0; i < n && !id; i++)
        if (g_ranges[i].base == (uintptr_t)base && g_ranges[i].len == len) {
            id = g_ranges[i].id;
            g_ranges[i] = g_ranges[n - 1];
            atomic_store(&g_n, n - 1);
        }
    pthread_mutex_unlock(&g_mu);
    if (!id) return TIDE_ENOTFOUND;
    tucx_forget(id); /* every context's registration of it goes now */
    return 0;
}

#ifdef TIDE_HAVE_UCX
/* The declared range that holds [p, p+l), into *out: 1, or 0 (none). */
static int range_find(const void *p, size_t l, reg_range *out) {
    if (atomic_load(&g_n) == 0) return 0;
    int found = 0;
    pthread_mutex_lock(&g_mu);
    size_t n = atomic_load(&g_n);
    for (size_t i = 0; i < n && !found; i++) {
        const reg_range *r = &g_ranges[i];
        if ((uintptr_t)p >= r->base && (uintptr_t)p - r->base <= r->len &&
            l <= r->len - ((uintptr_t)p - r->base)) {
            *out = *r;
            found = 1;
        }
    }
    pthread_mutex_unlock(&g_mu);
    return found;
}
#endif

#ifdef TIDE_HAVE_UCX

#define TUCX_RETRY_NS (5ull * 1000000000ull) /* after a failed connect, TCP for this long */
#define TUCX_IOV_MAX 64                      /* pieces of one value moved by active messages */
#define TUCX_REG_SLOTS 16                    /* declared buffers one context keeps registered */

/* One declared buffer registered with this context (ucp_mem_map). */
typedef struct reg_slot {
    uint64_t id; /* the declared range's; 0: free */
    ucp_mem_h memh;
    uint64_t used; /* the context's clock at the last use (least recent goes first) */
    uint64_t call; /* the context's call that last used it: never dropped during that call */
} reg_slot;

/* A kept declaration's registration with this context (NULL memh: it failed, and is not
 * tried again: UCX registers those bytes itself, per transfer). */
typedef struct kept_reg {
    uint64_t id;
    ucp_mem_h memh;
} kept_reg;

/* One value of an active-message call (docs/UCX.md): its scatter list, and what came of it. */
typedef struct tucx_op {
    const tide_iov *v;
    size_t cnt;
    uint64_t len;
    int done;        /* answered (GETDATA/PUTDONE), or its receive finished */
    int posted;      /* a rendezvous receive into v is in flight */
    int status;      /* 0 or a tide code */
    const char *why; /* with a status this client raised itself: what went wrong (NULL: the
                      * status is tided's answer) */
    uint64_t got;    /* the bytes that arrived, when their count was wrong */
    int dev;         /* device memory: by rendezvous only (UCX_GET_RNDV) */
    uint8_t hdr[UCX_GET_HDR];
    ucp_dt_iov_t *keep; /* a put's iov array, while UCX reads it */
} tucx_op;

typedef struct tucx {
    wire *w;
    atomic_int port; /* tided's UCX port from the latest HELLO; 0: not granted */
    pthread_mutex_t mu;
    ucp_context_h ctx;
    ucp_worker_h wk;
    int efd;
    ucp_ep_h ep;
    uint64_t rbase, rsize;
    ucp_ep_h sep;           /* the same-host endpoint, or NULL: values by RMA on it, which
                             * UCX does by cma (tucx_same_host) */
    ucp_rkey_h srkey;       /* the pool's rkey unpacked for sep */
    int ep_failed;          /* the endpoint's error handler ran */
    ucs_status_t ep_status; /* with what */
    uint8_t *welcome;       /* UCX_AM_WELCOME's bytes, once arrived */
    size_t welcome_len;
    uint32_t seq; /* the current call's number: the high half of its tags */
    tucx_op *ops; /* the current call's values (under mu), NULL between calls */
    size_t nops;
    reg_slot regs[TUCX_REG_SLOTS]; /* under mu */
    kept_reg *kept;                /* kept declarations registered here (under mu) */
    size_t nkept, capkept;
    uint64_t mem_types; /* UCS_BIT(memory type) of what this context's UCX moves */
    uint64_t reg_clock;
    uint64_t call;      /* the current put or get call's number (under mu), for regs[].call */
    struct tucx *next;  /* every tucx, for tucx_forget (under list_mu) */
    uint64_t off_until; /* TCP until then (a connect failed) */
    int warned;         /* the fall-back was logged */
} tucx;

static const char *ust(ucs_status_t st) {
    return ucs_status_string(st);
}

/* ---- the registration cache ---------------------------------------------------------- */

/* Lock order: list_mu, then a tucx's mu, then g_mu. */
static pthread_mutex_t list_mu = PTHREAD_MUTEX_INITIALIZER;
static tucx *list_head;
static atomic_uint_fast64_t n_maps, n_hits, n_unmaps, n_full;

static atomic_uint_fast64_t n_same_host, n_endpoints;

uint64_t tucx_same_host_values(void) {
    return atomic_load(&n_same_host);
}

uint64_t tucx_endpoints_made(void) {
    return atomic_load(&n_endpoints);
}

void tucx_reg_counts(uint64_t *maps, uint64_t *hits, uint64_t *unmaps, uint64_t *full) {
    *maps = atomic_load(&n_maps);
    *hits = atomic_load(&n_hits);
    *unmaps = atomic_load(&n_unmaps);
    *full = atomic_load(&n_full);
}

static void reg_drop(tucx *t, reg_slot *r) {
    ucp_mem_unmap(t->ctx, r->memh);
    atomic_fetch_add(&n_unmaps, 1);
    r->id = 0;
    r->memh = NULL;
}

/* Under t->mu: this context's registration of the declared buffer that holds [p, p+l),
 * made now if it has none (the least recently used one dropped when all slots are taken);
 * NULL when [p, p+l) was not declared, when every slot holds a registration the current
 * call has already handed to a posted request (dropping one would unmap memory a transfer
 * in flight uses), or when the registration failed (UCX then registers the bytes itself,
 * as for any buffer). */
static ucp_mem_h kept_memh(tucx *t, const reg_range *rr);

static ucp_mem_h tucx_memh(tucx *t, const void *p, size_t l) {
    reg_range rr;
    if (!t->ctx || !range_find(p, l, &rr)) return NULL;
    if (rr.kept) return kept_memh(t, &rr);
    reg_slot *victim = NULL;
    for (int i = 0; i < TUCX_REG_SLOTS; i++) {
        reg_slot *r = &t->regs[i];
        if (r->id == rr.id) {
            r->used = ++t->reg_clock;
            r->call = t->call;
            atomic_fetch_add(&n_hits, 1);
            return r->memh;
        }
        if (!r->id) {
            if (!victim || victim->id) victim = r; /* a free slot before any taken one */
        } else if (r->call != t->call && (!victim || (victim->id && r->used < victim->used))) {
            victim = r;
        }
    }
    if (!victim) {
        atomic_fetch_add(&n_full, 1);
        return NULL;
    }
    if (victim->id) reg_drop(t, victim);
    ucp_mem_map_params_t mp = {.field_mask =
                                   UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH,
                               .address = (void *)rr.base,
                               .length = rr.len};
    ucs_status_t st = ucp_mem_map(t->ctx, &mp, &victim->memh);
    if (st != UCS_OK) {
        LOG_DEBUG("UCX: registering a declared buffer of %zu bytes: %s", rr.len, ust(st));
        victim->memh = NULL;
        return NULL;
    }
    atomic_fetch_add(&n_maps, 1);
    victim->id = rr.id;
    victim->used = ++t->reg_clock;
    victim->call = t->call;
    return victim->memh;
}

/* Under t->mu: this context's registration of a kept declaration (the connector's regions),
 * made at its first use and kept until the declaration goes (tucx_forget) or the context
 * does: never dropped to make room. A CUDA region is registered as CUDA memory, and only
 * by a context whose UCX moves CUDA memory (else NULL: such a context is never handed its
 * bytes, tucx_dev_direct). */
static ucp_mem_h kept_memh(tucx *t, const reg_range *rr) {
    for (size_t i = 0; i < t->nkept; i++)
        if (t->kept[i].id == rr->id) {
            if (t->kept[i].memh) atomic_fetch_add(&n_hits, 1);
            return t->kept[i].memh;
        }
    if (rr->cuda && !(t->mem_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA))) return NULL;
    if (t->nkept == t->capkept) {
        size_t cap = t->capkept ? 2 * t->capkept : 16;
        kept_reg *k = realloc(t->kept, cap * sizeof(*k));
        if (!k) return NULL;
        t->kept = k;
        t->capkept = cap;
    }
    ucp_mem_map_params_t mp = {.field_mask =
                                   UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH,
                               .address = (void *)rr->base,
                               .length = rr->len};
    if (rr->cuda) {
        mp.field_mask |= UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
        mp.memory_type = UCS_MEMORY_TYPE_CUDA;
    }
    ucp_mem_h m = NULL;
    ucs_status_t st = ucp_mem_map(t->ctx, &mp, &m);
    if (st != UCS_OK) {
        LOG_WARN("%s: UCX could not register a %s region of %zu bytes (%s); UCX registers its "
                 "transfers itself",
                 t->w->addr, rr->cuda ? "GPU" : "host", rr->len, ust(st));
        m = NULL;
    } else {
        atomic_fetch_add(&n_maps, 1);
    }
    t->kept[t->nkept++] = (kept_reg){rr->id, m};
    return m;
}

static void kept_drop(tucx *t, size_t i) {
    if (t->kept[i].memh) {
        ucp_mem_unmap(t->ctx, t->kept[i].memh);
        atomic_fetch_add(&n_unmaps, 1);
    }
    t->kept[i] = t->kept[--t->nkept];
}

/* The declared range id was unregistered: every context drops its registration. */
static void tucx_forget(uint64_t id) {
    pthread_mutex_lock(&list_mu);
    for (tucx *t = list_head; t; t = t->next) {
        pthread_mutex_lock(&t->mu);
        for (int i = 0; i < TUCX_REG_SLOTS; i++)
            if (t->regs[i].id == id) reg_drop(t, &t->regs[i]);
        for (size_t i = t->nkept; i-- > 0;)
            if (t->kept[i].id == id) kept_drop(t, i);
        pthread_mutex_unlock(&t->mu);
    }
    pthread_mutex_unlock(&list_mu);
}

/* A request parameter's memh for [p, p+l), when a declared buffer holds it. */
static void with_memh(tucx *t, ucp_request_param_t *rp, const void *p, size_t l) {
    ucp_mem_h m = tucx_memh(t, p, l);
    if (m) {
        rp->op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
        rp->memh = m;
    } else {
        rp->op_attr_mask &= ~(uint32_t)UCP_OP_ATTR_FIELD_MEMH;
    }
}

static int tucx_on_hello(wire_call *k, const frame_msg *m, int fd) {
    tucx *t = k->w->owner;
    if (fd >= 0) close(fd);
    atomic_store(&t->port,
                 (m->hello_reply.features & FRAME_FEATURE_UCX) ? (int)m->hello_reply.ucx_port : 0);
    return 0;
}

int tucx_attach(tide_store *s, wire *w) {
    tucx *t = calloc(1, sizeof(*t));
    if (!t) return client_err(s, -ENOMEM, "out of memory");
    t->w = w;
    t->efd = -1;
    pthread_mutex_init(&t->mu, NULL);
    w->features |= FRAME_FEATURE_UCX;
    w->owner = t;
    pthread_mutex_lock(&list_mu);
    t->next = list_head;
    list_head = t;
    pthread_mutex_unlock(&list_mu);
    w->on_hello = tucx_on_hello;
    return 0;
}

static void on_ep_error(void *arg, ucp_ep_h ep, ucs_status_t status) {
    tucx *t = arg;
    (void)ep;
    t->ep_failed = 1;
    t->ep_status = status;
}

static ucs_status_t on_welcome(void *arg, const void *hdr, size_t hdr_len, void *data, size_t len,
                               const ucp_am_recv_param_t *param) {
    tucx *t = arg;
    (void)hdr, (void)hdr_len;
    if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) || t->welcome || len > UCX_RKEY_MAX + 64)
        return UCS_OK;
    t->welcome = malloc(len ? len : 1);
    if (t->welcome) {
        memcpy(t->welcome, data, len);
        t->welcome_len = len;
    }
    return UCS_OK;
}

static tucx_op *op_of(tucx *t, uint64_t tag) {
    size_t i = (size_t)(tag & 0xffffffffu);
    if (!t->ops || (uint32_t)(tag >> 32) != t->seq || i >= t->nops) return NULL;
    return &t->ops[i];
}

/* A rendezvous receive's end; ctx is the op's tag, heap-held so that a receive outliving
 * its call (it cannot once the endpoint is force-closed, but UCX owns the timing) finds
 * no op rather than a freed one. */
typedef struct recv_ctx {
    tucx *t;
    uint64_t tag;
} recv_ctx;

static void got_data(void *req, ucs_status_t st, size_t length, void *user) {
    recv_ctx *c = user;
    tucx_op *op = op_of(c->t, c->tag);
    if (op) {
        op->posted = 0;
        op->done = 1;
        if (st != UCS_OK) {
            op->status = TIDE_ECLOSED;
            op->why = "the receive of a value's bytes failed";
        } else if (length != op->len) {
            op->status = TIDE_EPROTO;
            op->why = "a value's bytes arrived in a count other than asked";
            op->got = length;
        }
    }
    free(c);
    ucp_request_free(req);
}

/* Up to len bytes of v as UCX's iov (same layout, trimmed to len); the count. */
static size_t op_dt(tucx_op *op, ucp_dt_iov_t *dt) {
    size_t n = 0;
    uint64_t left = op->len;
    for (size_t i = 0; i < op->cnt && left; i++) {
        size_t take = op->v[i].len < left ? op->v[i].len : left;
        if (!take) continue;
        dt[n].buffer = op->v[i].base;
        dt[n++].length = take;
        left -= take;
    }
    return n;
}

/* A value's receive that cannot be posted (no memory): its data released, the op failed. */
static ucs_status_t recv_refused(tucx *t, tucx_op *op, void *data, recv_ctx *c) {
    free(c);
    ucp_am_data_release(t->wk, data);
    op->status = -ENOMEM;
    op->why = "out of memory for a value's receive";
    op->done = 1;
    return UCS_OK;
}

static ucs_status_t on_getdata(void *arg, const void *hdr, size_t hdr_len, void *data, size_t len,
                               const ucp_am_recv_param_t *param) {
    tucx *t = arg;
    int rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
    tucx_op *op = hdr_len == UCX_DONE_HDR ? op_of(t, le_rd64(hdr)) : NULL;
    int32_t st = hdr_len == UCX_DONE_HDR ? (int32_t)le_rd32((const uint8_t *)hdr + 8) : 0;
    if (!op || op->done || op->posted || st != 0 || len != op->len) {
        if (op && !op->done && !op->posted) {
            if (st != 0) {
                op->status = st; /* tided's answer */
            } else {
                op->status = TIDE_EPROTO;
                op->why = "a value's bytes arrived in a count other than asked";
                op->got = len;
            }
            op->done = 1;
        }
        if (rndv) ucp_am_data_release(t->wk, data);
        return UCS_OK;
    }
    if (!rndv && op->dev) { /* asked by rendezvous only: a tided that ignored UCX_GET_RNDV */
        op->status = TIDE_EPROTO;
        op->why = "a value for device memory answered eagerly (the CPU cannot copy it there)";
        op->done = 1;
        return UCS_OK;
    }
    if (!rndv) {
        const uint8_t *b = data;
        for (size_t i = 0, at = 0; i < op->cnt && at < len; i++) {
            size_t take = op->v[i].len < len - at ? op->v[i].len : len - at;
            memcpy(op->v[i].base, b + at, take);
            at += take;
        }
        op->done = 1;
        return UCS_OK;
    }
    recv_ctx *c = malloc(sizeof(*c));
    ucp_dt_iov_t dtv[TUCX_IOV_MAX];
    if (!c || op->cnt > TUCX_IOV_MAX) return recv_refused(t, op, data, c);
    c->t = t;
    c->tag = le_rd64(hdr);
    size_t nd = op_dt(op, dtv);
    ucp_request_param_t rp = {.op_attr_mask =
                                  UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
                              .cb.recv_am = got_data,
                              .user_data = c};
    void *buf = op->v[0].base;
    size_t count = len;
    if (nd > 1) {
        /* UCX reads the iov array until the receive completes, after this handler returned:
         * kept with the op until ops_end, never on this stack. */
        ucp_dt_iov_t *keep = malloc(nd * sizeof(*keep));
        if (!keep) return recv_refused(t, op, data, c);
        memcpy(keep, dtv, nd * sizeof(*keep));
        free(op->keep);
        op->keep = keep;
        rp.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
        rp.datatype = ucp_dt_make_iov();
        buf = keep;
        count = nd;
    } else if (nd == 1) {
        buf = dtv[0].buffer;
        with_memh(t, &rp, buf, len);
    }
    void *r = ucp_am_recv_data_nbx(t->wk, data, buf, count, &rp);
    if (r == NULL || UCS_PTR_IS_ERR(r)) {
        free(c);
        op->status = r == NULL ? 0 : TIDE_ECLOSED;
        if (r != NULL) op->why = "the receive of a value's bytes failed";
        op->done = 1;
    } else {
        op->posted = 1;
    }
    return UCS_OK;
}

static ucs_status_t on_putdone(void *arg, const void *hdr, size_t hdr_len, void *data, size_t len,
                               const ucp_am_recv_param_t *param) {
    tucx *t = arg;
    (void)len;
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) ucp_am_data_release(t->wk, data);
    tucx_op *op = hdr_len == UCX_DONE_HDR ? op_of(t, le_rd64(hdr)) : NULL;
    if (!op || op->done) return UCS_OK;
    op->status = (int32_t)le_rd32((const uint8_t *)hdr + 8);
    op->done = 1;
    return UCS_OK;
}

/* Progress once; with nothing done for a while, sleep on the worker's fd up to 1 ms. */
static void tucx_progress(tucx *t, unsigned *idle) {
    if (ucp_worker_progress(t->wk)) {
        *idle = 0;
        return;
    }
    if (++*idle < 256) return;
    if (ucp_worker_arm(t->wk) == UCS_OK) {
        struct pollfd p = {t->efd, POLLIN, 0};
        poll(&p, 1, 1);
    }
}

/* Close *ep at once (requests in flight complete with an error) and wait, a bounded time,
 * for the close. */
static void ep_force_close(tucx *t, ucp_ep_h *ep) {
    if (!*ep) return;
    ucp_request_param_t rp = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                              .flags = UCP_EP_CLOSE_FLAG_FORCE};
    void *r = ucp_ep_close_nbx(*ep, &rp);
    uint64_t until = now_ns() + 1000000000ull;
    unsigned idle = 0;
    while (UCS_PTR_IS_PTR(r) && ucp_request_check_status(r) == UCS_INPROGRESS && now_ns() < until)
        tucx_progress(t, &idle);
    if (UCS_PTR_IS_PTR(r)) ucp_request_free(r);
    *ep = NULL;
}

/* Close the endpoints (the same-host one first: its failures show on the first one). */
static void tucx_drop(tucx *t) {
    if (t->srkey) ucp_rkey_destroy(t->srkey);
    t->srkey = NULL;
    ep_force_close(t, &t->sep);
    ep_force_close(t, &t->ep);
    t->ep_failed = 0;
    free(t->welcome);
    t->welcome = NULL;
}

/* Wait for reqs[0..n) (NULL entries are done) until deadline. 0, or a tide code with a
 * message; past the deadline or on an endpoint failure the endpoint is dropped first, so
 * that no request still touches the caller's memory on return. */
static int tucx_wait(tide_store *s, tucx *t, void **reqs, size_t n, uint64_t deadline,
                     const char *what) {
    ucs_status_t bad = UCS_OK;
    unsigned idle = 0;
    int timed_out = 0;
    for (;;) {
        size_t pending = 0;
        for (size_t i = 0; i < n; i++) {
            if (!reqs[i]) continue;
            ucs_status_t st = ucp_request_check_status(reqs[i]);
            if (st == UCS_INPROGRESS) {
                pending++;
                continue;
            }
            if (st != UCS_OK && bad == UCS_OK) bad = st;
            ucp_request_free(reqs[i]);
            reqs[i] = NULL;
        }
        for (size_t i = 0; i < t->nops; i++) {
            tucx_op *op = &t->ops[i];
            if (!op->done && !op->posted && !t->ep) { /* no answer can come any more */
                op->status = TIDE_ECLOSED;
                op->why = "the endpoint closed before tided answered";
                op->done = 1;
            }
            pending += !op->done;
        }
        if (!pending) break;
        if (t->ep && (t->ep_failed || now_ns() > deadline)) {
            timed_out = !t->ep_failed;
            tucx_drop(t); /* the requests complete, with an error */
            continue;
        }
        if (!t->ep && now_ns() > deadline + 2000000000ull) {
            /* UCX did not complete them even after the force close: leak rather than free
             * requests UCX still holds. */
            return client_err(s, -ETIMEDOUT, "%s: UCX %s did not finish", t->w->addr, what);
        }
        tucx_progress(t, &idle);
    }
    if (timed_out)
        return client_err(s, -ETIMEDOUT, "%s: UCX %s timed out (timeout_ms)", t->w->addr, what);
    const tucx_op *bad_op = NULL;
    for (size_t i = 0; i < t->nops && !bad_op; i++)
        if (t->ops[i].status) bad_op = &t->ops[i];
    if (bad_op && bad == UCS_OK && !t->ep_failed) {
        int opst = bad_op->status;
        tucx_drop(t);
        if (bad_op->why && opst == TIDE_EPROTO)
            return client_err(s, opst, "%s: UCX %s failed: %s (%llu bytes, %llu asked for)",
                              t->w->addr, what, bad_op->why, (unsigned long long)bad_op->got,
                              (unsigned long long)bad_op->len);
        if (bad_op->why)
            return client_err(s, opst, "%s: UCX %s failed: %s", t->w->addr, what, bad_op->why);
        return client_err(s, opst, "%s: UCX %s failed: tided answered %d (%s%s)", t->w->addr, what,
                          opst, tide_strerror(opst),
                          opst == TIDE_EPROTO    ? ": a range outside its pool"
                          : opst == TIDE_ECLOSED ? ": its side of the transfer failed"
                                                 : "");
    }
    if (bad != UCS_OK || t->ep_failed) {
        ucs_status_t why = bad != UCS_OK ? bad : t->ep_status;
        tucx_drop(t);
        unsigned v = ucx_dl_version();
        if (why == UCS_ERR_REJECTED) /* tided's listener or its UCX turned the endpoint down */
            return client_err(s, TIDE_ECLOSED,
                              "%s: UCX %s failed: %s: tided's --max-conns endpoints were open, "
                              "it was stopping, or its UCX cannot talk to this one (%u.%u): "
                              "tided's log says which",
                              t->w->addr, what, ust(why), v / 1000, v % 1000);
        if (why == UCS_ERR_UNREACHABLE) /* no lane could be made to tided's worker */
            return client_err(s, TIDE_ECLOSED,
                              "%s: UCX %s failed: %s: no transport in common with tided "
                              "(UCX_TLS and UCX_NET_DEVICES on both sides; UCX's TCP needs "
                              "TIDE_UCX_TCP=1 on both), or tided gone",
                              t->w->addr, what, ust(why));
        /* Also what UCX versions apart can end in: the other's wire-up parsed as a bad
         * parameter (seen with 1.13 and 1.22, as often as "rejected" under load). */
        return client_err(s, TIDE_ECLOSED,
                          "%s: UCX %s failed: %s: tided gone, or its UCX cannot talk to this "
                          "one (%u.%u)",
                          t->w->addr, what, ust(why), v / 1000, v % 1000);
    }
    return 0;
}

/* Whether one of ep's lanes used for usage (a word of UCX's lane table: "rma_bw", "am";
 * NULL: any) runs on a transport named in names (space-separated). UCX 1.13 has no query
 * for it: its lane table, as ucp_ep_print_info writes it, names them
 * ("lane[1]:  3:cma/memory.0 md[3] -> ... rma_bw#0"). */
static int ep_lane_on(ucp_ep_h ep, const char *usage, const char *names) {
    char *txt = NULL;
    size_t tl = 0;
    FILE *f = open_memstream(&txt, &tl);
    if (!f) return 0;
    ucp_ep_print_info(ep, f);
    fclose(f);
    int found = 0;
    for (char *line = txt; line && *line && !found;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        char *c = strchr(line, ':');
        if (strstr(line, "lane[") && (!usage || strstr(line, usage)) && c &&
            (c = strchr(c + 1, ':'))) {
            const char *tl_name = c + 1;
            size_t n = strcspn(tl_name, "/");
            int named = 0;
            for (const char *w = names; *w && !named;) {
                size_t wl = strcspn(w, " ");
                named = wl == n && !strncmp(w, tl_name, n);
                w += wl + (w[wl] == ' ');
            }
            found = named;
        }
        line = nl ? nl + 1 : NULL;
    }
    free(txt);
    return found;
}

/* UCX's transports that move bytes between processes of one host, by shared memory or a
 * copy through the kernel (cma's RMA: UCX's emulation by messages in 1.13, a zero-copy
 * process_vm_readv/writev from 1.22 on, tucx_same_host). */
#define TUCX_SHM_TLS "posix sysv cma knem xpmem"

/* On tided's host (the same kernel boot id), with a UCX of UCX_SAME_HOST_MIN or newer and
 * unless TIDE_UCX_SAME_HOST=0: a second endpoint, made from tided's worker address without
 * peer-failure handling (the only endpoints UCX puts on its shared-memory transports), kept
 * as t->sep, with the pool's rkey unpacked on it, only when UCX gave it a shared-memory
 * lane. Values then move by RMA on it: UCX's cma, this process reading and writing tided's
 * pool with process_vm_readv/writev, tided's CPU untouched. Its failures show on the first
 * endpoint (peer-failure handling): a tided that dies fails that one, and tucx_drop closes
 * both. Before 1.22, UCX aborted the process when a cma transfer's peer died. */
static void tucx_same_host(tucx *t, const char *boot_id, const uint8_t *addr, const uint8_t *rkey) {
    char mine[UCX_BOOT_ID];
    const char *e = getenv("TIDE_UCX_SAME_HOST");
    if ((e && !strcmp(e, "0")) || ucx_dl_version() < UCX_SAME_HOST_MIN || ucx_boot_id(mine) != 0 ||
        memcmp(mine, boot_id, UCX_BOOT_ID))
        return;
    ucp_ep_params_t ep = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                                        UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
                          .address = (const ucp_address_t *)addr,
                          .err_mode = UCP_ERR_HANDLING_MODE_NONE};
    if (ucp_ep_create(t->wk, &ep, &t->sep) != UCS_OK) {
        t->sep = NULL;
        return;
    }
    /* The lanes are chosen at creation: without a same-host RMA lane it goes at once. */
    if (!ep_lane_on(t->sep, "rma_bw", TUCX_SHM_TLS) ||
        ucp_ep_rkey_unpack(t->sep, rkey, &t->srkey) != UCS_OK) {
        t->srkey = NULL;
        ep_force_close(t, &t->sep);
    }
}

/* Make the context and worker (once), then an endpoint to tided's UCX port, and trade the
 * token for the pool's address and rkey. 0, or a code with a message on s. */
static int tucx_connect(tide_store *s, tucx *t, int port) {
    ucs_status_t st;
    char why[256];
    if (ucx_dl_load(why, sizeof(why)) != 0) return client_err(s, TIDE_EUNSUPPORTED, "%s", why);
    if (!t->ctx) {
        char tls[256];
        int no_tcp = ucx_tls_no_tcp(tls, sizeof(tls));
        if (no_tcp < 0)
            return client_err(s, TIDE_EUNSUPPORTED,
                              "UCX_TLS=%s names UCX's TCP transport alone, which tide uses only "
                              "with TIDE_UCX_TCP=1 (any peer that reaches it can write this "
                              "process's memory: docs/UCX.md)",
                              getenv("UCX_TLS"));
        ucp_config_t *conf;
        if ((st = ucp_config_read(NULL, NULL, &conf)) != UCS_OK)
            return client_err(s, TIDE_EUNSUPPORTED, "UCX configuration: %s", ust(st));
        if (no_tcp && (st = ucp_config_modify(conf, "TLS", tls)) != UCS_OK) {
            ucp_config_release(conf);
            return client_err(s, TIDE_EUNSUPPORTED, "UCX_TLS=%s: %s", tls, ust(st));
        }
        ucp_params_t pp = {.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME,
                           .features = UCP_FEATURE_RMA | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP,
                           .name = "libtide"};
        st = ucp_init(&pp, conf, &t->ctx);
        ucp_config_release(conf);
        if (st != UCS_OK) {
            t->ctx = NULL;
            return client_err(s, TIDE_EUNSUPPORTED,
                              "ucp_init: %s (no usable transport in UCX_TLS?)", ust(st));
        }
        /* What memory this UCX moves (host; CUDA where it was built with CUDA and finds
         * the CUDA driver): decides whether GPU regions go to it directly (tucx_dev_direct). */
        ucp_context_attr_t ca = {.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES};
        t->mem_types = ucp_context_query(t->ctx, &ca) == UCS_OK ? ca.memory_types
                                                                : UCS_BIT(UCS_MEMORY_TYPE_HOST);
        ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                                  .thread_mode = UCS_THREAD_MODE_SINGLE};
        if ((st = ucp_worker_create(t->ctx, &wp, &t->wk)) != UCS_OK) {
            ucp_cleanup(t->ctx);
            t->ctx = NULL;
            return client_err(s, TIDE_EUNSUPPORTED, "ucp_worker_create: %s", ust(st));
        }
        ucp_am_handler_param_t hp = {.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
                                                   UCP_AM_HANDLER_PARAM_FIELD_CB |
                                                   UCP_AM_HANDLER_PARAM_FIELD_ARG,
                                     .id = UCX_AM_WELCOME,
                                     .cb = on_welcome,
                                     .arg = t};
        ucp_am_handler_param_t hg = hp, hd = hp;
        hg.id = UCX_AM_GETDATA;
        hg.cb = on_getdata;
        hd.id = UCX_AM_PUTDONE;
        hd.cb = on_putdone;
        if ((st = ucp_worker_set_am_recv_handler(t->wk, &hp)) != UCS_OK ||
            (st = ucp_worker_set_am_recv_handler(t->wk, &hg)) != UCS_OK ||
            (st = ucp_worker_set_am_recv_handler(t->wk, &hd)) != UCS_OK ||
            (st = ucp_worker_get_efd(t->wk, &t->efd)) != UCS_OK) {
            ucp_worker_destroy(t->wk);
            ucp_cleanup(t->ctx);
            t->ctx = NULL;
            t->wk = NULL;
            return client_err(s, TIDE_EUNSUPPORTED, "UCX worker: %s", ust(st));
        }
    }
    struct sockaddr_storage sa = t->w->sa;
    if (sa.ss_family == AF_INET6)
        ((struct sockaddr_in6 *)&sa)->sin6_port = htons((uint16_t)port);
    else
        ((struct sockaddr_in *)&sa)->sin_port = htons((uint16_t)port);
    ucp_ep_params_t ep = {.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                                        UCP_EP_PARAM_FIELD_ERR_HANDLER |
                                        UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
                          .flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER,
                          .sockaddr = {(const struct sockaddr *)&sa, t->w->salen},
                          .err_mode = UCP_ERR_HANDLING_MODE_PEER,
                          .err_handler = {on_ep_error, t}};
    t->ep_failed = 0;
    if ((st = ucp_ep_create(t->wk, &ep, &t->ep)) != UCS_OK) {
        t->ep = NULL;
        return client_err(s, TIDE_ECLOSED, "UCX endpoint to port %d: %s", port, ust(st));
    }
    /* HELLO with the token; the reply comes to on_welcome. */
    size_t tl = strlen(t->w->token), hl = 6 + tl;
    uint8_t hello[6 + FRAME_TOKEN_MAX];
    le_wr32(hello, UCX_MSG_MAGIC);
    le_wr16(hello + 4, (uint16_t)tl);
    memcpy(hello + 6, t->w->token, tl);
    ucp_request_param_t rp = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                              .flags = UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER};
    void *r = ucp_am_send_nbx(t->ep, UCX_AM_HELLO, NULL, 0, hello, hl, &rp);
    uint64_t deadline = now_ns() + t->w->timeout_ns;
    int rc;
    if (UCS_PTR_IS_ERR(r)) {
        rc = client_err(s, TIDE_ECLOSED, "UCX hello: %s", ust(UCS_PTR_STATUS(r)));
        goto fail;
    }
    void *reqs[1] = {r};
    if ((rc = tucx_wait(s, t, reqs, 1, deadline, "hello")) != 0) goto fail;
    unsigned idle = 0;
    while (!t->welcome && !t->ep_failed && now_ns() < deadline)
        tucx_progress(t, &idle);
    const uint8_t *b = t->welcome;
    size_t bl = t->welcome_len;
    if (!b) {
        rc = client_err(s, t->ep_failed ? TIDE_ECLOSED : -ETIMEDOUT, "UCX hello: no answer (%s)",
                        t->ep_failed ? ust(t->ep_status) : "timed out");
        goto fail;
    }
    if (bl < UCX_WELCOME_HEAD + 4 || le_rd32(b) != UCX_MSG_MAGIC) {
        rc = client_err(s, TIDE_EPROTO, "UCX hello: a malformed answer (%zu bytes)", bl);
        goto fail;
    }
    int32_t status = (int32_t)le_rd32(b + 4);
    if (status != 0) {
        uint32_t ml = le_rd32(b + 8);
        if (ml > bl - 12) ml = (uint32_t)(bl - 12);
        rc = client_err(s, status < 0 ? status : TIDE_EPROTO, "%s: %.*s", t->w->addr, (int)ml,
                        (const char *)b + 12);
        goto fail;
    }
    /* ... rkey_len, rkey, boot id, addr_len, worker address (proto/ucx_msg.h) */
    const size_t tail = UCX_BOOT_ID + 4;
    uint32_t kl = bl >= 28 ? le_rd32(b + 24) : 0;
    const uint8_t *tl_at = b + 28 + kl;
    uint32_t al = bl >= 28 + tail && kl <= bl - 28 - tail ? le_rd32(tl_at + UCX_BOOT_ID) : 0;
    if (bl < 28 + tail || kl > bl - 28 - tail || al != bl - 28 - tail - kl) {
        rc = client_err(s, TIDE_EPROTO, "UCX hello: a malformed answer (%zu bytes)", bl);
        goto fail;
    }
    t->rbase = le_rd64(b + 8);
    t->rsize = le_rd64(b + 16);
    if (al && kl) tucx_same_host(t, (const char *)tl_at, tl_at + tail, b + 28);
    if (getenv("TIDE_UCX_DEBUG")) {
        ucp_ep_print_info(t->ep, stderr); /* the lanes UCX chose */
        if (t->sep) ucp_ep_print_info(t->sep, stderr);
        fprintf(stderr, "tide: values by %s\n",
                t->sep ? "RMA on the same-host endpoint" : "active messages");
    }
    atomic_fetch_add(&n_endpoints, 1);
    return 0;
fail:
    tucx_drop(t);
    return rc;
}

int tucx_usable(tide_store *s, wire *w) {
    tucx *t = w->owner;
    int port = atomic_load(&t->port);
    if (port == 0) {
        /* No connection has said yet: make one (its HELLO tells). */
        wire_call k = wire_begin(s, w);
        int rc = wire_take(&k);
        wire_give(&k, rc != 0);
        port = atomic_load(&t->port);
        if (rc || port == 0) return 0;
    }
    pthread_mutex_lock(&t->mu);
    int ok = t->ep && !t->ep_failed;
    if (!ok && t->ep) tucx_drop(t);
    if (!ok && now_ns() >= t->off_until) {
        int rc = tucx_connect(s, t, port);
        if (rc == 0) {
            ok = 1;
            t->warned = 0;
        } else {
            if (!t->warned) LOG_WARN("%s: values over TCP: %s", w->addr, tide_errmsg(s));
            t->warned = 1;
            t->off_until = now_ns() + TUCX_RETRY_NS;
        }
    }
    pthread_mutex_unlock(&t->mu);
    return ok;
}

void tucx_detach(wire *w) {
    tucx *t = w->owner;
    if (!t) return;
    pthread_mutex_lock(&list_mu);
    for (tucx **pp = &list_head; *pp; pp = &(*pp)->next)
        if (*pp == t) {
            *pp = t->next;
            break;
        }
    pthread_mutex_unlock(&list_mu);
    for (int i = 0; i < TUCX_REG_SLOTS; i++)
        if (t->regs[i].id) reg_drop(t, &t->regs[i]);
    while (t->nkept)
        kept_drop(t, t->nkept - 1);
    free(t->kept);
    if (t->wk) {
        tucx_drop(t);
        ucp_worker_destroy(t->wk);
    }
    if (t->ctx) ucp_cleanup(t->ctx);
    pthread_mutex_destroy(&t->mu);
    free(t);
    w->owner = NULL;
}

/* ---- put ----------------------------------------------------------------------------- */

/* One put or get call: the handle's UCX path, and how a value's checksum is taken where it
 * lies: by the CPU (sum NULL), or, for values in device memory, by the caller's function. */
typedef struct tucx_call {
    tucx *t;
    tucx_sum_fn sum;
    void *sum_arg;
} tucx_call;

static int value_sum(const tucx_call *cl, const tide_iov *v, size_t cnt, uint64_t len,
                     uint64_t *out, char *why, size_t wl) {
    if (!cl->sum) {
        *out = checksum_iov(v, cnt, len);
        return 0;
    }
    return cl->sum(cl->sum_arg, v, cnt, len, out, why, wl);
}

static int tucx_in_pool(const tucx *t, uint64_t off, uint64_t len) {
    return off <= t->rsize && len <= t->rsize - off;
}

/* RMA of value j's scatter list against pool offset off on the same-host endpoint: one
 * request per piece. */
static int tucx_rma(tide_store *s, tucx *t, int put, const tide_iov *v, size_t cnt, uint64_t off,
                    uint64_t len, void **reqs, size_t *nreq) {
    ucp_request_param_t rp = {.op_attr_mask = 0};
    uint64_t at = t->rbase + off;
    ucp_ep_h ep = t->sep;
    ucp_rkey_h rk = t->srkey;
    atomic_fetch_add(&n_same_host, 1);
    for (size_t i = 0; i < cnt && len; i++) {
        size_t take = v[i].len < len ? v[i].len : len;
        if (!take) continue;
        with_memh(t, &rp, v[i].base, take);
        void *r = put ? ucp_put_nbx(ep, v[i].base, take, at, rk, &rp)
                      : ucp_get_nbx(ep, v[i].base, take, at, rk, &rp);
        if (UCS_PTR_IS_ERR(r))
            return client_err(s, TIDE_ECLOSED, "%s: UCX %s: %s", t->w->addr, put ? "put" : "get",
                              ust(UCS_PTR_STATUS(r)));
        reqs[(*nreq)++] = r;
        at += take;
        len -= take;
    }
    return 0;
}

/* Start an active-message call of n values: every op done until armed. */
static int ops_begin(tide_store *s, tucx *t, size_t n) {
    t->ops = calloc(n ? n : 1, sizeof(*t->ops));
    if (!t->ops) return client_err(s, -ENOMEM, "%s: out of memory", t->w->addr);
    t->nops = n;
    t->seq++;
    for (size_t i = 0; i < n; i++)
        t->ops[i].done = 1;
    return 0;
}

static void ops_end(tucx *t) {
    for (size_t i = 0; i < t->nops; i++)
        free(t->ops[i].keep);
    free(t->ops);
    t->ops = NULL;
    t->nops = 0;
}

/* Value j by active message: GET asks tided for pool[off, off+len) into v; PUT sends v's
 * len bytes for pool + off; on_dev: v is device memory, moved by rendezvous only. The send's
 * request goes to reqs. */
static int tucx_am(tide_store *s, tucx *t, int put, int on_dev, size_t j, const tide_iov *v,
                   size_t cnt, uint64_t off, uint64_t len, void **reqs, size_t *nreq) {
    tucx_op *op = &t->ops[j];
    if (cnt > TUCX_IOV_MAX)
        return client_err(s, TIDE_ELIMIT, "%s: a value in %zu pieces (transport=ucx takes %d)",
                          t->w->addr, cnt, TUCX_IOV_MAX);
    op->v = v;
    op->cnt = cnt;
    op->len = len;
    op->done = op->posted = op->status = 0;
    op->why = NULL;
    op->got = 0;
    op->dev = on_dev;
    le_wr64(op->hdr, ((uint64_t)t->seq << 32) | j);
    le_wr64(op->hdr + 8, off);
    le_wr64(op->hdr + 16, len | (!put && on_dev ? UCX_GET_RNDV : 0));
    ucp_request_param_t rp = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                              .flags = UCP_AM_SEND_FLAG_REPLY};
    void *r;
    if (!put) {
        rp.flags |= UCP_AM_SEND_FLAG_EAGER;
        r = ucp_am_send_nbx(t->ep, UCX_AM_GET, op->hdr, UCX_GET_HDR, NULL, 0, &rp);
    } else {
        if (on_dev) rp.flags |= UCP_AM_SEND_FLAG_RNDV; /* no CPU copy of device memory */
        ucp_dt_iov_t dt[TUCX_IOV_MAX];
        size_t nd = op_dt(op, dt);
        if (nd == 1) {
            with_memh(t, &rp, dt[0].buffer, len);
            r = ucp_am_send_nbx(t->ep, UCX_AM_PUT, op->hdr, UCX_PUT_HDR, dt[0].buffer, len, &rp);
        } else {
            /* UCX reads the iov array until the send completes: kept until ops_end. */
            ucp_dt_iov_t *keep = malloc(nd * sizeof(*keep));
            if (!keep) return client_err(s, -ENOMEM, "%s: out of memory", t->w->addr);
            memcpy(keep, dt, nd * sizeof(*keep));
            op->keep = keep;
            rp.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
            rp.datatype = ucp_dt_make_iov();
            r = ucp_am_send_nbx(t->ep, UCX_AM_PUT, op->hdr, UCX_PUT_HDR, keep, nd, &rp);
        }
    }
    if (UCS_PTR_IS_ERR(r)) {
        op->done = 1;
        return client_err(s, TIDE_ECLOSED, "%s: UCX %s: %s", t->w->addr, put ? "put" : "get",
                          ust(UCS_PTR_STATUS(r)));
    }
    if (r) reqs[(*nreq)++] = r;
    return 0;
}

static size_t pieces(const size_t *cnt, size_t n) {
    size_t p = 1;
    for (size_t i = 0; i < n; i++)
        p += cnt[i];
    return p;
}

static int put_chunk(wire_call *k, const tide_key *fk, const tide_iov *const *fv,
                     const size_t *fcnt, const uint64_t *vl, size_t n, int *res, size_t *lens,
                     void *arg) {
    (void)lens;
    tide_store *s = k->s;
    const tucx_call *cl = arg;
    tucx *t = cl->t;
    uint64_t *ids = malloc(n * sizeof(*ids)), *sums = malloc(n * sizeof(*sums));
    size_t *owner = malloc(n * sizeof(*owner));
    void **reqs = calloc(pieces(fcnt, n), sizeof(void *));
    uint64_t *dsum = cl->sum ? malloc(n * sizeof(*dsum)) : NULL;
    uint8_t *head = NULL;
    size_t head_len = 0, nc = 0, nreq = 0;
    int rc = -ENOMEM, locked = 0, same = 0;
    if (!ids || !sums || !owner || !reqs || (cl->sum && !dsum)) {
        client_err(s, rc, "%s: out of memory", t->w->addr);
        goto out;
    }
    /* Values in device memory: their checksums first, read back by the caller's function
     * (the device's queue), before anything is reserved and outside the UCX lock. */
    for (size_t j = 0; dsum && j < n; j++) {
        char why[ERR_MSG_MAX];
        if ((rc = value_sum(cl, fv[j], fcnt[j], vl[j], &dsum[j], why, sizeof(why))) != 0) {
            client_err(s, rc, "%s: the checksum of a value in device memory: %s", t->w->addr, why);
            goto out;
        }
    }
    WIRE_ENCODE(s, rc, head, head_len, frame_encode_reserve(NULL, 0, len, 0, fk, vl, n),
                frame_encode_reserve(buf, cap, len, 0, fk, vl, n));
    if (rc) goto out;
    frame_msg m;
    if ((rc = wire_exchange_n(k, head, head_len, n, &m)) != 0) goto out;
    frame_iter it;
    frame_entry e;
    frame_iter_init(&it, &m);
    pthread_mutex_lock(&t->mu);
    locked = 1;
    t->call++;
    if (!t->ep) {
        rc = client_err(s, TIDE_ECLOSED, "%s: the UCX endpoint closed", t->w->addr);
        goto out;
    }
    /* Host values on one host: RMA on the same-host endpoint. Device values by active
     * messages (cma reads and writes host memory only), by rendezvous (tucx_am). */
    same = t->sep && !cl->sum;
    if (!same && (rc = ops_begin(s, t, n)) != 0) goto out;
    for (size_t j = 0; frame_iter_next(&it, &e); j++) {
        res[j] = e.status;
        if (e.status != 0 || e.id == 0) continue;
        if (!tucx_in_pool(t, e.offset, vl[j])) {
            rc = client_err(
                s, TIDE_EPROTO,
                "%s: RESERVE gave offset %llu for %llu bytes, outside the %llu-byte pool",
                t->w->addr, (unsigned long long)e.offset, (unsigned long long)vl[j],
                (unsigned long long)t->rsize);
            goto wait;
        }
        rc = same ? tucx_rma(s, t, 1, fv[j], fcnt[j], e.offset, vl[j], reqs, &nreq)
                  : tucx_am(s, t, 1, cl->sum != NULL, j, fv[j], fcnt[j], e.offset, vl[j], reqs,
                            &nreq);
        if (rc) goto wait;
        sums[nc] = dsum ? dsum[j] : checksum_iov(fv[j], fcnt[j], vl[j]);
        ids[nc] = e.id;
        owner[nc++] = j;
    }
    if (nc && same) {
        /* Remote completion: every byte is in tided's pool before COMMIT (by active
         * messages: each PUTDONE says so). */
        ucp_request_param_t rp = {.op_attr_mask = 0};
        void *r = ucp_ep_flush_nbx(t->sep, &rp);
        if (UCS_PTR_IS_ERR(r))
            rc = client_err(s, TIDE_ECLOSED, "%s: UCX flush: %s", t->w->addr,
                            ust(UCS_PTR_STATUS(r)));
        else
            reqs[nreq++] = r;
    }
wait:;
    int wr = tucx_wait(s, t, reqs, nreq, k->deadline, "put");
    if (!rc) rc = wr;
    ops_end(t);
    pthread_mutex_unlock(&t->mu);
    locked = 0;
    if (rc || nc == 0) goto out;
    free(head);
    WIRE_ENCODE(s, rc, head, head_len, frame_encode_commit(NULL, 0, len, 0, ids, sums, nc),
                frame_encode_commit(buf, cap, len, 0, ids, sums, nc));
    if (rc) goto out;
    if ((rc = wire_exchange_n(k, head, head_len, nc, &m)) != 0) goto out;
    frame_iter_init(&it, &m);
    for (size_t i = 0; frame_iter_next(&it, &e); i++)
        res[owner[i]] = e.status;
out:
    if (locked) pthread_mutex_unlock(&t->mu);
    free(head);
    free(ids);
    free(sums);
    free(owner);
    free(reqs);
    free(dsum);
    return rc;
}

/* ---- get ----------------------------------------------------------------------------- */

static int get_chunk(wire_call *k, const tide_key *fk, const tide_iov *const *fv,
                     const size_t *fcnt, const uint64_t *caps, size_t n, int *res, size_t *lens,
                     void *arg) {
    tide_store *s = k->s;
    const tucx_call *cl = arg;
    tucx *t = cl->t;
    uint64_t *ids = malloc(n * sizeof(*ids)), *want = malloc(n * sizeof(*want));
    int32_t *outs = malloc(n * sizeof(*outs));
    size_t *owner = malloc(n * sizeof(*owner));
    void **reqs = calloc(pieces(fcnt, n), sizeof(void *));
    uint8_t *head = NULL;
    size_t head_len = 0, nr = 0, nreq = 0;
    int rc = -ENOMEM;
    if (!ids || !want || !outs || !owner || !reqs) {
        client_err(s, rc, "%s: out of memory", t->w->addr);
        goto out;
    }
    WIRE_ENCODE(s, rc, head, head_len, frame_encode_pin(NULL, 0, len, 0, fk, caps, n),
                frame_encode_pin(buf, cap, len, 0, fk, caps, n));
    if (rc) goto out;
    frame_msg m;
    if ((rc = wire_exchange_n(k, head, head_len, n, &m)) != 0) goto out;
    frame_iter it;
    frame_entry e;
    frame_iter_init(&it, &m);
    pthread_mutex_lock(&t->mu);
    t->call++;
    if (!t->ep) rc = client_err(s, TIDE_ECLOSED, "%s: the UCX endpoint closed", t->w->addr);
    int same = t->sep && !cl->sum; /* as put_chunk */
    if (!rc && !same) rc = ops_begin(s, t, n);
    for (size_t j = 0; rc == 0 && frame_iter_next(&it, &e); j++) {
        res[j] = e.status;
        lens[j] = e.status == 0 || e.status == TIDE_EBUFSMALL ? e.vlen : 0;
        if (e.status != 0) continue;
        ids[nr] = e.id;
        outs[nr] = 0;
        want[nr] = e.sum;
        owner[nr++] = j;
        if (!tucx_in_pool(t, e.offset, e.vlen) || e.vlen > caps[j]) {
            rc = client_err(s, TIDE_EPROTO,
                            "%s: PIN gave %llu bytes at offset %llu: outside the %llu-byte "
                            "pool or beyond the %llu bytes asked for",
                            t->w->addr, (unsigned long long)e.vlen, (unsigned long long)e.offset,
                            (unsigned long long)t->rsize, (unsigned long long)caps[j]);
            break;
        }
        rc = same ? tucx_rma(s, t, 0, fv[j], fcnt[j], e.offset, e.vlen, reqs, &nreq)
                  : tucx_am(s, t, 0, cl->sum != NULL, j, fv[j], fcnt[j], e.offset, e.vlen, reqs,
                            &nreq);
    }
    int wr = tucx_wait(s, t, reqs, nreq, k->deadline, "get");
    if (!rc) rc = wr;
    ops_end(t);
    pthread_mutex_unlock(&t->mu);
    if (rc) goto out;
    /* Each value checked where it landed. */
    for (size_t i = 0; i < nr; i++) {
        size_t j = owner[i];
        uint64_t got = 0;
        char why[ERR_MSG_MAX], kb[80];
        int hr = value_sum(cl, fv[j], fcnt[j], lens[j], &got, why, sizeof(why));
        if (hr) {
            /* The device could not be read back: not claimed, and not the value's fault. */
            client_err(s, hr,
                       "%s: value of key '%s' landed in device memory that could not be "
                       "read back: %s",
                       t->w->addr, client_key_repr(fk[j].data, fk[j].len, kb, sizeof(kb)), why);
            res[j] = hr;
            lens[j] = 0;
            continue;
        }
        if (got == want[i]) continue;
        client_err(s, TIDE_ECHECKSUM,
                   "%s: value of key '%s' failed its checksum; reported as a miss", t->w->addr,
                   client_key_repr(fk[j].data, fk[j].len, kb, sizeof(kb)));
        outs[i] = TIDE_ECHECKSUM;
        res[j] = TIDE_ENOTFOUND;
        lens[j] = 0;
    }
    if (nr == 0) goto out;
    free(head);
    WIRE_ENCODE(s, rc, head, head_len, frame_encode_release(NULL, 0, len, 0, ids, outs, nr),
                frame_encode_release(buf, cap, len, 0, ids, outs, nr));
    if (rc) goto out;
    /* Every value was checked: send and go (its reply is read before the next one). */
    wire_send_nowait(k, head, head_len);
out:
    free(head);
    free(ids);
    free(want);
    free(outs);
    free(owner);
    free(reqs);
    return rc;
}

/* ---- batches ------------------------------------------------------------------------- */

static atomic_uint_fast64_t n_dev_values;

int tucx_put_many(tide_store *s, wire *w, const tide_key *keys, size_t n, const tide_iov *iov,
                  const size_t *iovcnt, int *results) {
    tucx_call cl = {w->owner, NULL, NULL};
    return wire_batch(s, w, 1, keys, n, iov, iovcnt, results, NULL, put_chunk, &cl);
}

int tucx_get_many(tide_store *s, wire *w, const tide_key *keys, size_t n, const tide_iov *iov,
                  const size_t *iovcnt, int *results, size_t *vlens) {
    tucx_call cl = {w->owner, NULL, NULL};
    return wire_batch(s, w, 0, keys, n, iov, iovcnt, results, vlens, get_chunk, &cl);
}

/* ---- device memory (GPU regions) ----------------------------------------------------- */

static const char *const mem_type_names[] = {"host", "cuda", "cuda-managed", "rocm",
                                             "rocm-managed"};

int tucx_cuda_support(tide_store *s, wire *w, char *why, size_t len) {
    tucx *t = w->owner;
    if (!t || !tucx_usable(s, w)) {
        snprintf(why, len, "values over TCP (%s)",
                 !t ? "not transport=ucx" : "no UCX endpoint to tided: see the warning above");
        return -1;
    }
    pthread_mutex_lock(&t->mu);
    uint64_t types = t->mem_types;
    pthread_mutex_unlock(&t->mu);
    char list[160] = "";
    size_t at = 0;
    for (unsigned b = 0; b < 64 && at < sizeof(list); b++) {
        if (!(types & (1ull << b))) continue;
        int k =
            b < sizeof(mem_type_names) / sizeof(mem_type_names[0])
                ? snprintf(list + at, sizeof(list) - at, "%s%s", at ? ", " : "", mem_type_names[b])
                : snprintf(list + at, sizeof(list) - at, "%stype %u", at ? ", " : "", b);
        if (k < 0) break;
        at += (size_t)k;
    }
    if (types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) {
        snprintf(why, len, "memory types: %s", list);
        return 1;
    }
    snprintf(why, len, "CUDA memory not supported by this UCX (memory types: %s)",
             at ? list : "none reported");
    return 0;
}

int tucx_dev_direct(wire *w, const tide_iov *iov, const size_t *iovcnt, size_t n) {
    tucx *t = w->owner;
    if (!t) return 0;
    pthread_mutex_lock(&t->mu);
    int cuda = t->ctx && (t->mem_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA));
    pthread_mutex_unlock(&t->mu);
    if (!cuda) return 0;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t c = 0, cnt = iovcnt ? iovcnt[i] : 1; c < cnt; c++, k++)
            if (iov[k].len && !tucx_declared_cuda(iov[k].base, iov[k].len)) return 0;
    return 1;
}

int tucx_put_many_dev(tide_store *s, wire *w, const tide_key *keys, size_t n, const tide_iov *iov,
                      const size_t *iovcnt, int *results, tucx_sum_fn sum, void *arg) {
    tucx_call cl = {w->owner, sum, arg};
    int rc = wire_batch(s, w, 1, keys, n, iov, iovcnt, results, NULL, put_chunk, &cl);
    if (rc > 0) atomic_fetch_add(&n_dev_values, (uint64_t)rc);
    return rc;
}

int tucx_get_many_dev(tide_store *s, wire *w, const tide_key *keys, size_t n, const tide_iov *iov,
                      const size_t *iovcnt, int *results, size_t *vlens, tucx_sum_fn sum,
                      void *arg) {
    tucx_call cl = {w->owner, sum, arg};
    int rc = wire_batch(s, w, 0, keys, n, iov, iovcnt, results, vlens, get_chunk, &cl);
    if (rc > 0) atomic_fetch_add(&n_dev_values, (uint64_t)rc);
    return rc;
}

uint64_t tucx_dev_values(void) {
    return atomic_load(&n_dev_values);
}
#else /* no UCX headers at build time: values over TCP */
static void tucx_forget(uint64_t id) {
    (void)id; /* nothing is ever registered */
}

uint64_t tucx_same_host_values(void) {
    return 0;
}

uint64_t tucx_endpoints_made(void) {
    return 0;
}

void tucx_reg_counts(uint64_t *maps, uint64_t *hits, uint64_t *unmaps, uint64_t *full) {
    *maps = *hits = *unmaps = *full = 0;
}

int tucx_attach(tide_store *s, wire *w) {
    (void)s;
    LOG_WARN("%s: transport=ucx: this libtide was built without UCX (install libucx-dev and "
             "rebuild); values over TCP",
             w->addr);
    return 0;
}

int tucx_usable(tide_store *s, wire *w) {
    (void)s, (void)w;
    return 0;
}

int tucx_put_many(tide_store *s, wire *w, const tide_key *keys, size_t n, const tide_iov *iov,
                  const size_t *iovcnt, int *results) {
    (void)w, (void)keys, (void)n, (void)iov, (void)iovcnt, (void)results;
    return client_err(s, TIDE_EUNSUPPORTED, "built without UCX");
}

int tucx_get_many(tide_store *s, wire *w, const tide_key *keys, size_t n, const tide_iov *iov,
                  const size_t *iovcnt, int *results, size_t *vlens) {
    (void)w, (void)keys, (void)n, (void)iov, (void)iovcnt, (void)results, (void)vlens;
    return client_err(s, TIDE_EUNSUPPORTED, "built without UCX");
}

void tucx_detach(wire *w) {
    (void)w;
}

int tucx_cuda_support(tide_store *s, wire *w, char *why, size_t len) {
    (void)s, (void)w;
    snprintf(why, len, "values over TCP (this libtide was built without UCX)");
    return -1;
}

int tucx_dev_direct(wire *w, const tide_iov *iov, const size_t *iovcnt, size_t n) {
    (void)w, (void)iov, (void)iovcnt, (void)n;
    return 0;
}

int tucx_put_many_dev(tide_store *s, wire *w, const tide_key *keys, size_t n, const tide_iov *iov,
                      const size_t *iovcnt, int *results, tucx_sum_fn sum, void *arg) {
    (void)w, (void)keys, (void)n, (void)iov, (void)iovcnt, (void)results, (void)sum, (void)arg;
    return client_err(s, TIDE_EUNSUPPORTED, "built without UCX");
}

int tucx_get_many_dev(tide_store *s, wire *w, const tide_key *keys, size_t n, const tide_iov *iov,
                      const size_t *iovcnt, int *results, size_t *vlens, tucx_sum_fn sum,
                      void *arg) {
    (void)w, (void)keys, (void)n, (void)iov, (void)iovcnt, (void)results, (void)vlens, (void)sum,
        (void)arg;
    return client_err(s, TIDE_EUNSUPPORTED, "built without UCX");
}

uint64_t tucx_dev_values(void) {
    return 0;
}
#endif
