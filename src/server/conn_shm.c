/*
 * conn_shm.c — the shared-pool requests of a same-host (Unix socket) connection: RESERVE,
 * COMMIT, PIN and RELEASE, and the set of leases the connection holds.
 *
 * A connection gets here only after its HELLO asked for FRAME_FEATURE_SHM on the Unix
 * listener and passed the auth check; the pool's memfd went out with that HELLO's reply.
 * The client copies the value bytes itself; tided only hands out offsets under leases.
 *
 * Every reservation and pin taken here is a store lease with a deadline (now +
 * cfg.unix_lease_ms), so a client that hangs cannot hold space past it, and is also
 * recorded in this connection's lease set, so that:
 *   - COMMIT and RELEASE act only on ids this connection holds (another client's id, or a
 *     forged one, answers TIDE_ENOTFOUND and touches nothing);
 *   - when the connection closes — the client exited, crashed or was killed — shm_free()
 *     aborts its reservations (nothing half-written becomes visible, the space is freed)
 *     and releases its pins (eviction may take those objects again) at once, without
 *     waiting for the deadlines.
 * An id whose lease expired stays in the set until the client names it or the connection
 * closes; the store answers it TIDE_ENOTFOUND. SHM_MAX_LEASES bounds the set.
 *
 * Arrows: conn.c calls this file; this file calls only the store and the output queue.
 *
 * The set: open addressing on the (nonzero, never reused) lease id with linear probing,
 * at most half full, deletion by backward shift so that no tombstones accumulate.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "common/idhash.h"
#include "common/util.h"
#include "server/conn_shm.h"

#define SHM_MAX_LEASES (1u << 18) /* leases one connection may hold at once */
#define SHM_INITIAL_SLOTS 64u

enum { SHM_RESV = 1, SHM_PIN = 2 };

typedef struct shm_lease {
    uint64_t id; /* 0 = empty slot */
    uint64_t len;
    int kind;
} shm_lease;

struct shm_state {
    shm_lease *slots;
    uint32_t cap; /* a power of two */
    uint32_t n;
};

static uint32_t shm_slot_of(const shm_state *s, uint64_t id) {
    return idhash32(id) & (s->cap - 1);
}

shm_state *shm_new(void) {
    shm_state *s = calloc(1, sizeof(*s));
    if (!s) return NULL;
    s->cap = SHM_INITIAL_SLOTS;
    s->slots = calloc(s->cap, sizeof(shm_lease));
    if (!s->slots) {
        free(s);
        return NULL;
    }
    return s;
}

static shm_lease *shm_find(shm_state *s, uint64_t id) {
    for (uint32_t i = shm_slot_of(s, id);; i = (i + 1) & (s->cap - 1)) {
        if (s->slots[i].id == id) return &s->slots[i];
        if (s->slots[i].id == 0) return NULL;
    }
}

static int shm_grow(shm_state *s) {
    uint32_t old_cap = s->cap;
    shm_lease *old = s->slots;
    shm_lease *slots = calloc((size_t)old_cap * 2, sizeof(shm_lease));
    if (!slots) return -ENOMEM;
    s->slots = slots;
    s->cap = old_cap * 2;
    for (uint32_t i = 0; i < old_cap; i++) {
        if (!old[i].id) continue;
        uint32_t j = shm_slot_of(s, old[i].id);
        while (s->slots[j].id)
            j = (j + 1) & (s->cap - 1);
        s->slots[j] = old[i];
    }
    free(old);
    return 0;
}

static int shm_add(shm_state *s, uint64_t id, uint64_t len, int kind) {
    if (2 * (s->n + 1) > s->cap && shm_grow(s) != 0) return -ENOMEM;
    uint32_t i = shm_slot_of(s, id);
    while (s->slots[i].id)
        i = (i + 1) & (s->cap - 1);
    s->slots[i] = (shm_lease){id, len, kind};
    s->n++;
    return 0;
}

/* Remove the entry at e, shifting back later members of its probe run into the gap. */
static void shm_del(shm_state *s, shm_lease *e) {
    uint32_t mask = s->cap - 1, hole = (uint32_t)(e - s->slots);
    for (uint32_t i = (hole + 1) & mask; s->slots[i].id; i = (i + 1) & mask) {
        uint32_t home = shm_slot_of(s, s->slots[i].id);
        /* Move i into the hole unless its home lies cyclically in (hole, i]. */
        int stays = hole <= i ? (home > hole && home <= i) : (home > hole || home <= i);
        if (!stays) {
            s->slots[hole] = s->slots[i];
            hole = i;
        }
    }
    s->slots[hole].id = 0;
    s->n--;
}

void shm_free(store *st, shm_state *s) {
    if (!s) return;
    for (uint32_t i = 0; i < s->cap; i++) {
        if (!s->slots[i].id) continue;
        if (s->slots[i].kind == SHM_RESV)
            store_abort(st, s->slots[i].id);
        else
            store_unpin(st, s->slots[i].id);
    }
    free(s->slots);
    free(s);
}

/* ---- requests ------------------------------------------------------------------------ */

/* The arrays of one reply; the encoders take what their layout needs. */
typedef struct shm_reply {
    uint64_t req_id;
    unsigned op;
    size_t n;
    int32_t *status;
    uint64_t *ids, *offsets, *vlens, *sums;
} shm_reply;

static int shm_encode(void *buf, size_t cap, size_t *len, void *arg) {
    shm_reply *r = arg;
    switch (r->op) {
    case FRAME_OP_RESERVE:
        return frame_encode_reserve_reply(buf, cap, len, r->req_id, r->status, r->ids, r->offsets,
                                          r->n);
    case FRAME_OP_PIN:
        return frame_encode_pin_reply(buf, cap, len, r->req_id, r->status, r->ids, r->offsets,
                                      r->vlens, r->sums, r->n);
    default:
        return frame_encode_status_reply(buf, cap, len, r->op, r->req_id, r->status, r->n);
    }
}

/* One entry of a request; returns its status and fills the reply's arrays at i. */
static int32_t shm_one(server *srv, shm_state *s, unsigned op, const frame_entry *e, shm_reply *r,
                       size_t i, uint64_t deadline, store_chain *chain, int last) {
    store *st = srv->st;
    store_ref ref;
    int rc;
    shm_lease *l;
    switch (op) {
    case FRAME_OP_RESERVE:
        if (s->n >= SHM_MAX_LEASES) return TIDE_ELIMIT;
        rc = store_reserve(st, e->key.data, e->key.len, e->vlen, deadline, &ref);
        if (rc == STORE_DUP) return 0; /* the key exists: id 0, nothing to write */
        if (rc) return rc;
        if (shm_add(s, ref.id, e->vlen, SHM_RESV) != 0) {
            store_abort(st, ref.id);
            return -ENOMEM;
        }
        r->ids[i] = ref.id;
        r->offsets[i] = ref.offset;
        return 0;
    case FRAME_OP_PIN:
        if (s->n >= SHM_MAX_LEASES) return TIDE_ELIMIT;
        /* Too long for the caller's room: its size only, counted as neither a hit nor a
         * miss (store_pin_cap). */
        rc = store_pin_cap(st, e->key.data, e->key.len, deadline, e->cap, &ref);
        if (rc == TIDE_EBUFSMALL) r->vlens[i] = ref.len;
        if (rc) return rc;
        if (shm_add(s, ref.id, ref.len, SHM_PIN) != 0) {
            store_unpin(st, ref.id);
            return -ENOMEM;
        }
        r->ids[i] = ref.id;
        r->offsets[i] = ref.offset;
        r->vlens[i] = ref.len;
        r->sums[i] = ref.checksum;
        /* Counted as read when handed out, as tide:// counts a value when it is queued. */
        store_count_io(st, 0, ref.len);
        return 0;
    case FRAME_OP_COMMIT:
        l = shm_find(s, e->id);
        if (!l || l->kind != SHM_RESV) return TIDE_ENOTFOUND;
        rc = store_commit_chain(st, e->id, e->sum, chain, last);
        if (rc == 0) store_count_io(st, l->len, 0);
        shm_del(s, l);
        return rc;
    default: /* RELEASE */
        l = shm_find(s, e->id);
        if (!l) return TIDE_ENOTFOUND;
        if (l->kind == SHM_RESV) {
            rc = store_abort(st, e->id);
        } else {
            if (e->status == TIDE_ECHECKSUM) store_verify_failed(st, e->id);
            rc = store_unpin_chain(st, e->id, chain);
        }
        shm_del(s, l);
        return rc;
    }
}

int shm_dispatch(server *srv, outq *out, shm_state *s, const frame_msg *m, int *status) {
    size_t n = m->h.count, k = n ? n : 1;
    shm_reply r = {
        m->h.req_id,  m->h.opcode,  n,           calloc(k, sizeof(int32_t)), calloc(k, 8),
        calloc(k, 8), calloc(k, 8), calloc(k, 8)};
    int rc = -ENOMEM, all = 1, outcome = MST_OK;
    if (!r.status || !r.ids || !r.offsets || !r.vlens || !r.sums) goto out;
    uint64_t deadline = now_ns() + (uint64_t)srv->cfg.unix_lease_ms * 1000000ull;
    frame_iter it;
    frame_entry e;
    frame_iter_init(&it, m);
    store_chain chain = STORE_CHAIN_INIT; /* one frame's COMMITs or RELEASEs: one batch */
    for (size_t i = 0; frame_iter_next(&it, &e); i++) {
        int last = n > 1 && i + 1 == n;
        r.status[i] = shm_one(srv, s, m->h.opcode, &e, &r, i, deadline, &chain, last);
        all &= r.status[i] == 0;
        outcome = metrics_worse(outcome, metrics_read_status(r.status[i]));
    }
    /* A pin is a read (ok, too_small, miss or error); the other requests fail or not. */
    *status = m->h.opcode == FRAME_OP_PIN ? outcome : all ? MST_OK : MST_ERROR;
    rc = outq_encoded(out, shm_encode, &r);
    if (rc != 0 && (m->h.opcode == FRAME_OP_RESERVE || m->h.opcode == FRAME_OP_PIN)) {
        /* The client will never learn these ids: give them back now. */
        for (size_t i = 0; i < n; i++) {
            shm_lease *l = r.ids[i] ? shm_find(s, r.ids[i]) : NULL;
            if (!l) continue;
            if (l->kind == SHM_RESV)
                store_abort(srv->st, l->id);
            else
                store_unpin(srv->st, l->id);
            shm_del(s, l);
        }
    }
out:
    free(r.status);
    free(r.ids);
    free(r.offsets);
    free(r.vlens);
    free(r.sums);
    return rc;
}
