/*
 * store.c — store.h: reserve/commit/abort, pin/unpin, remove, expiry, eviction and
 * figures, on top of the pool, the allocator, the index, the policy and the leases.
 *
 * Object life: reserve puts a RESERVED record in the index (so a second writer gets
 * STORE_DUP) with a reservation lease; commit makes it LIVE and evictable; abort or an
 * expired reservation frees it. A pin takes a LIVE object out of the policy (so it cannot
 * be evicted) until its last pin goes. Remove of a pinned object makes it HIDDEN: out of
 * the index at once (a new put of the key may proceed), freed at its last unpin.
 *
 * Invariants: the policy holds exactly the LIVE objects with pins == 0; the index holds
 * exactly the RESERVED and LIVE ones; every RESERVED object has one reservation lease and
 * every pinned object `pins` pin leases; allocator used units = the units of all records;
 * used_bytes <= capacity because the allocator never hands out more than the pool.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/checksum.h"
#include "store/store.h"
#include "store/store_int.h"

struct store {
    /*
     * Lock rules: `mu` guards every field below except the immutable ones (pool, capacity,
     * max_value, pol.ops). Every public function takes it for its whole body, and no
     * function in src/store calls back out while holding it. Value bytes are never
     * touched under it: callers copy while holding a pin or a reservation, which is what
     * keeps the space from being reused. Helpers named do_x() expect the lock held.
     */
    pthread_mutex_t mu;
    pool pool;
    uint64_t capacity;  /* bytes the allocator manages */
    uint64_t max_value;
    alloc al;
    htab index; /* key -> obj (RESERVED or LIVE) */
    policy pol;
    leases ls;
    uint64_t objects;   /* LIVE objects */
    uint64_t pinned;    /* objects with pins > 0 (LIVE or HIDDEN) */
    uint64_t rec_bytes; /* heap cost of every record */
    uint64_t puts, put_dups, gets, misses, evictions, evicted_bytes, checksum_errors;
    uint64_t bytes_in, bytes_out;
};

typedef struct keyref {
    const void *p;
    size_t len;
} keyref;

static uint32_t obj_hash(const void *e) {
    return ((const obj *)e)->hash;
}

static int obj_eq(const void *e, const void *k) {
    const obj *o = e;
    const keyref *kr = k;
    return o->klen == kr->len && memcmp(o->key, kr->p, kr->len) == 0;
}

static uint32_t key_hash(const void *key, size_t klen) {
    uint64_t h = checksum_buf(key, klen);
    return (uint32_t)(h ^ (h >> 32));
}

static int check_key(const void *key, size_t klen) {
    if (klen == 0 || !key) return TIDE_EKEYEMPTY;
    if (klen > TIDE_KEY_MAX) return TIDE_EKEYLONG;
    return 0;
}

static uint64_t rec_cost(size_t klen) {
    return malloc_cost(offsetof(obj, key) + klen);
}

static uint64_t obj_len(const store *st, const obj *o) {
    return (uint64_t)alloc_units(&st->al, o->node) * ALLOC_UNIT - o->tail;
}

static obj *do_lookup(store *st, const void *key, size_t klen) {
    keyref kr = {key, klen};
    return htab_find(&st->index, key_hash(key, klen), obj_eq, &kr);
}

/* Give an object's space and record back. It must be out of the index and the policy. */
static void do_free_obj(store *st, obj *o) {
    alloc_put(&st->al, o->node);
    st->rec_bytes -= rec_cost(o->klen);
    free(o);
}

/* Remove a LIVE object: gone from the index now, freed now or at its last unpin. */
static void do_remove_live(store *st, obj *o) {
    htab_delete(&st->index, o);
    st->objects--;
    if (o->pins == 0) {
        st->pol.ops->erase(&st->pol, o);
        do_free_obj(st, o);
    } else {
        o->state = OBJ_HIDDEN;
    }
}

static void do_release_pin(store *st, obj *o) {
    if (--o->pins > 0) return;
    st->pinned--;
    if (o->state == OBJ_HIDDEN)
        do_free_obj(st, o);
    else
        st->pol.ops->insert(&st->pol, o, 1);
}

static void do_drop_reservation(store *st, obj *o) {
    htab_delete(&st->index, o);
    do_free_obj(st, o);
}

int store_create(const store_config *cfg, store **out, char *err, size_t errlen) {
    *out = NULL;
    uint64_t units = alloc_units_for(cfg->capacity);
    if (units == 0 || units > ALLOC_MAX_UNITS) {
        snprintf(err, errlen, "store capacity %llu bytes is outside 1..%llu",
                 (unsigned long long)cfg->capacity,
                 (unsigned long long)ALLOC_MAX_UNITS * ALLOC_UNIT);
        return TIDE_ECONFIG;
    }
    const policy_ops *ops;
    switch (cfg->policy) {
    case STORE_POLICY_LRU: ops = &policy_lru; break;
    case STORE_POLICY_S3FIFO:
        snprintf(err, errlen, "eviction policy s3fifo is not built yet");
        return TIDE_EUNSUPPORTED;
    default:
        snprintf(err, errlen, "unknown eviction policy %d", cfg->policy);
        return TIDE_ECONFIG;
    }
    store *st = calloc(1, sizeof(*st));
    if (!st) {
        snprintf(err, errlen, "out of memory for the store");
        return -ENOMEM;
    }
    st->capacity = units * ALLOC_UNIT;
    st->max_value = cfg->max_value && cfg->max_value < st->capacity ? cfg->max_value
                                                                     : st->capacity;
    int rc = pool_open(&st->pool, st->capacity, cfg->hugepages, cfg->prefault, err, errlen);
    if (rc < 0) {
        free(st);
        return rc;
    }
    rc = alloc_init(&st->al, (uint32_t)units);
    if (rc == 0) rc = htab_init(&st->index, 1024, obj_hash);
    if (rc == 0) rc = leases_init(&st->ls);
    if (rc < 0) {
        snprintf(err, errlen, "out of memory for the store's metadata");
        htab_fini(&st->index);
        alloc_fini(&st->al);
        pool_close(&st->pool);
        free(st);
        return rc;
    }
    st->pol.ops = ops;
    ops->init(&st->pol);
    pthread_mutex_init(&st->mu, NULL);
    *out = st;
    return 0;
}

void store_destroy(store *st) {
    if (!st) return;
    /* HIDDEN objects are reachable only through their pins. */
    for (uint32_t i = 0; i < htab_slots(&st->ls.ids); i++) {
        lease *e = htab_slot(&st->ls.ids, i);
        if (e && e->kind == LEASE_PIN && e->o->state == OBJ_HIDDEN && --e->o->pins == 0)
            free(e->o);
    }
    for (uint32_t i = 0; i < htab_slots(&st->index); i++) free(htab_slot(&st->index, i));
    leases_fini(&st->ls);
    htab_fini(&st->index);
    alloc_fini(&st->al);
    pool_close(&st->pool);
    pthread_mutex_destroy(&st->mu);
    free(st);
}

uint8_t *store_base(store *st) {
    return st->pool.base;
}

uint64_t store_capacity(store *st) {
    return st->capacity;
}

int store_fd(store *st) {
    return st->pool.fd;
}

/* Find room for `units`, evicting in policy order. The caller holds the lock. */
static int do_make_room(store *st, uint32_t units, uint32_t *node) {
    for (;;) {
        int rc = alloc_get(&st->al, units, node);
        if (rc != TIDE_ENOSPACE) return rc;
        obj *v = st->pol.ops->victim(&st->pol);
        if (!v) return TIDE_ENOSPACE;
        st->evictions++;
        st->evicted_bytes += (uint64_t)alloc_units(&st->al, v->node) * ALLOC_UNIT;
        do_remove_live(st, v);
    }
}

int store_reserve(store *st, const void *key, size_t klen, uint64_t vlen, uint64_t deadline_ns,
                  store_ref *ref) {
    int rc = check_key(key, klen);
    if (rc < 0) return rc;
    if (vlen == 0) return TIDE_EVALEMPTY;
    if (vlen > st->max_value) return TIDE_EVALBIG;
    uint32_t units = (uint32_t)alloc_units_for(vlen);
    uint32_t h = key_hash(key, klen);

    pthread_mutex_lock(&st->mu);
    keyref kr = {key, klen};
    obj *o = NULL;
    if (htab_find(&st->index, h, obj_eq, &kr)) {
        st->put_dups++;
        rc = STORE_DUP;
        goto out;
    }
    rc = htab_reserve(&st->index, 1);
    if (rc < 0) goto out;
    o = malloc(offsetof(obj, key) + klen);
    if (!o) {
        rc = -ENOMEM;
        goto out;
    }
    rc = do_make_room(st, units, &o->node);
    if (rc < 0) goto out;
    lease *e;
    rc = leases_add(&st->ls, LEASE_RESV, o, deadline_ns, &e);
    if (rc < 0) {
        alloc_put(&st->al, o->node);
        goto out;
    }
    o->link.prev = o->link.next = NULL;
    o->checksum = 0;
    o->hash = h;
    o->pins = 0;
    o->klen = (uint16_t)klen;
    o->state = OBJ_RESERVED;
    o->tail = (uint8_t)((uint64_t)units * ALLOC_UNIT - vlen);
    o->pbits = 0;
    memcpy(o->key, key, klen);
    htab_insert(&st->index, o);
    st->rec_bytes += rec_cost(klen);
    *ref = (store_ref){.id = e->id, .offset = alloc_offset(&st->al, o->node), .len = vlen};
    o = NULL;
out:
    pthread_mutex_unlock(&st->mu);
    free(o);
    return rc;
}

int store_commit(store *st, uint64_t id, uint64_t checksum) {
    pthread_mutex_lock(&st->mu);
    lease *e = leases_find(&st->ls, id, LEASE_RESV);
    if (!e) {
        pthread_mutex_unlock(&st->mu);
        return TIDE_ENOTFOUND;
    }
    obj *o = e->o;
    leases_drop(&st->ls, e);
    o->checksum = checksum;
    o->state = OBJ_LIVE;
    st->objects++;
    st->puts++;
    st->pol.ops->insert(&st->pol, o, 0);
    pthread_mutex_unlock(&st->mu);
    return 0;
}

int store_abort(store *st, uint64_t id) {
    pthread_mutex_lock(&st->mu);
    lease *e = leases_find(&st->ls, id, LEASE_RESV);
    if (!e) {
        pthread_mutex_unlock(&st->mu);
        return TIDE_ENOTFOUND;
    }
    obj *o = e->o;
    leases_drop(&st->ls, e);
    do_drop_reservation(st, o);
    pthread_mutex_unlock(&st->mu);
    return 0;
}

int store_pin(store *st, const void *key, size_t klen, uint64_t deadline_ns, store_ref *ref) {
    int rc = check_key(key, klen);
    if (rc < 0) return rc;
    pthread_mutex_lock(&st->mu);
    obj *o = do_lookup(st, key, klen);
    if (!o || o->state != OBJ_LIVE) {
        st->misses++;
        rc = TIDE_ENOTFOUND;
        goto out;
    }
    lease *e;
    rc = leases_add(&st->ls, LEASE_PIN, o, deadline_ns, &e);
    if (rc < 0) goto out;
    if (o->pins++ == 0) {
        st->pol.ops->erase(&st->pol, o);
        st->pinned++;
    }
    st->pol.ops->access(&st->pol, o);
    st->gets++;
    *ref = (store_ref){.id = e->id, .offset = alloc_offset(&st->al, o->node),
                       .len = obj_len(st, o), .checksum = o->checksum};
out:
    pthread_mutex_unlock(&st->mu);
    return rc;
}

int store_unpin(store *st, uint64_t id) {
    pthread_mutex_lock(&st->mu);
    lease *e = leases_find(&st->ls, id, LEASE_PIN);
    if (!e) {
        pthread_mutex_unlock(&st->mu);
        return TIDE_ENOTFOUND;
    }
    obj *o = e->o;
    leases_drop(&st->ls, e);
    do_release_pin(st, o);
    pthread_mutex_unlock(&st->mu);
    return 0;
}

/* The failed read counts as a miss, not a get, and the object goes so nobody reads it
 * again; its space is freed when the pins on it (this one included) are released. */
void store_verify_failed(store *st, uint64_t pin_id) {
    pthread_mutex_lock(&st->mu);
    st->checksum_errors++;
    lease *e = leases_find(&st->ls, pin_id, LEASE_PIN);
    if (e) {
        if (st->gets) st->gets--;
        st->misses++;
        obj *o = e->o;
        if (o->state == OBJ_LIVE) {
            htab_delete(&st->index, o);
            st->objects--;
            o->state = OBJ_HIDDEN;
        }
    }
    pthread_mutex_unlock(&st->mu);
}

int store_exists(store *st, const void *key, size_t klen) {
    int rc = check_key(key, klen);
    if (rc < 0) return rc;
    pthread_mutex_lock(&st->mu);
    obj *o = do_lookup(st, key, klen);
    rc = o && o->state == OBJ_LIVE;
    pthread_mutex_unlock(&st->mu);
    return rc;
}

int store_remove(store *st, const void *key, size_t klen) {
    int rc = check_key(key, klen);
    if (rc < 0) return rc;
    pthread_mutex_lock(&st->mu);
    obj *o = do_lookup(st, key, klen);
    if (o && o->state == OBJ_LIVE)
        do_remove_live(st, o);
    else
        rc = TIDE_ENOTFOUND;
    pthread_mutex_unlock(&st->mu);
    return rc;
}

void store_clear(store *st) {
    pthread_mutex_lock(&st->mu);
    /* A delete may pull a later entry into slot i (see htab.c): look at slot i again. */
    for (uint32_t i = 0; i < htab_slots(&st->index); i++) {
        obj *o;
        while ((o = htab_slot(&st->index, i)) && o->state == OBJ_LIVE) do_remove_live(st, o);
    }
    pthread_mutex_unlock(&st->mu);
}

int store_expire(store *st, uint64_t now) {
    int n = 0;
    pthread_mutex_lock(&st->mu);
    lease *e;
    while ((e = leases_earliest(&st->ls)) && e->deadline < now && n < INT32_MAX) {
        obj *o = e->o;
        int kind = e->kind;
        leases_drop(&st->ls, e);
        if (kind == LEASE_PIN)
            do_release_pin(st, o);
        else
            do_drop_reservation(st, o);
        n++;
    }
    pthread_mutex_unlock(&st->mu);
    return n;
}

void store_stats(store *st, tide_stats *out) {
    pthread_mutex_lock(&st->mu);
    *out = (tide_stats){
        .capacity_bytes = st->capacity,
        .used_bytes = (uint64_t)st->al.used * ALLOC_UNIT,
        .objects = st->objects,
        .puts = st->puts,
        .put_dups = st->put_dups,
        .gets = st->gets,
        .misses = st->misses,
        .evictions = st->evictions,
        .evicted_bytes = st->evicted_bytes,
        .checksum_errors = st->checksum_errors,
        .bytes_in = st->bytes_in,
        .bytes_out = st->bytes_out,
        .meta_bytes = sizeof(*st) + alloc_meta_bytes(&st->al) + htab_meta_bytes(&st->index) +
                      leases_meta_bytes(&st->ls) + st->rec_bytes,
        .pinned = st->pinned,
        .reserved = st->ls.nresv,
    };
    pthread_mutex_unlock(&st->mu);
}

void store_count_io(store *st, uint64_t bytes_in, uint64_t bytes_out) {
    pthread_mutex_lock(&st->mu);
    st->bytes_in += bytes_in;
    st->bytes_out += bytes_out;
    pthread_mutex_unlock(&st->mu);
}

static int cmp_ptr(const void *a, const void *b) {
    uintptr_t x = (uintptr_t)*(void *const *)a, y = (uintptr_t)*(void *const *)b;
    return x < y ? -1 : x > y;
}

#define CHECK_OR(cond)                                                                        \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            rc = -__LINE__;                                                                   \
            goto out;                                                                         \
        }                                                                                     \
    } while (0)

int store_check(store *st) {
    obj **hidden = NULL;
    pthread_mutex_lock(&st->mu);
    int rc = alloc_check(&st->al);
    if (rc < 0) goto out;
    uint64_t live = 0, resv = 0, evictable = 0, pinned = 0, units = 0, live_pins = 0;
    uint64_t rec = 0;
    for (uint32_t i = 0; i < htab_slots(&st->index); i++) {
        obj *o = htab_slot(&st->index, i);
        if (!o) continue;
        CHECK_OR(o->hash == key_hash(o->key, o->klen));
        CHECK_OR(do_lookup(st, o->key, o->klen) == o);
        CHECK_OR(o->state == OBJ_LIVE || o->state == OBJ_RESERVED);
        if (o->state == OBJ_LIVE) {
            live++;
            live_pins += o->pins;
            if (o->pins)
                pinned++;
            else
                evictable++;
        } else {
            resv++;
            CHECK_OR(o->pins == 0);
        }
        units += alloc_units(&st->al, o->node);
        rec += rec_cost(o->klen);
    }
    CHECK_OR(live == st->objects && resv == st->ls.nresv);
    CHECK_OR(evictable == st->pol.count + st->pol.count2);
    hidden = malloc((st->ls.npin + 1) * sizeof(*hidden));
    CHECK_OR(hidden);
    uint64_t nh = 0, pin_leases = 0, resv_leases = 0, live_pin_leases = 0;
    for (uint32_t i = 0; i < htab_slots(&st->ls.ids); i++) {
        lease *e = htab_slot(&st->ls.ids, i);
        if (!e) continue;
        CHECK_OR(leases_find(&st->ls, e->id, e->kind) == e);
        CHECK_OR((e->deadline != 0) == (e->heap_pos != ALLOC_NIL));
        if (e->kind == LEASE_RESV) {
            resv_leases++;
            CHECK_OR(e->o->state == OBJ_RESERVED);
            continue;
        }
        pin_leases++;
        CHECK_OR(e->o->pins > 0 && e->o->state != OBJ_RESERVED);
        if (e->o->state == OBJ_HIDDEN)
            hidden[nh++] = e->o;
        else
            live_pin_leases++;
    }
    CHECK_OR(pin_leases == st->ls.npin && resv_leases == st->ls.nresv);
    CHECK_OR(live_pin_leases == live_pins);
    qsort(hidden, nh, sizeof(*hidden), cmp_ptr);
    for (uint64_t i = 0; i < nh; i++) {
        if (i > 0 && hidden[i] == hidden[i - 1]) continue;
        pinned++;
        units += alloc_units(&st->al, hidden[i]->node);
        rec += rec_cost(hidden[i]->klen);
    }
    CHECK_OR(pinned == st->pinned);
    CHECK_OR(units == st->al.used && rec == st->rec_bytes);
    CHECK_OR((uint64_t)st->al.used * ALLOC_UNIT <= st->capacity);
    for (uint32_t i = 1; i < st->ls.heap_len; i++)
        CHECK_OR(st->ls.heap[(i - 1) / 2]->deadline <= st->ls.heap[i]->deadline);
out:
    pthread_mutex_unlock(&st->mu);
    free(hidden);
    return rc;
}
