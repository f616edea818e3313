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
 * store_check() verifies all of these (for tests).
 *
 * Leases: an expired pin releases its hold, so the space may be reused while a slow
 * reader still copies; an expired reservation frees the space while a slow writer may
 * still fill it (its commit then gets TIDE_ENOTFOUND). Either way a reader can see wrong
 * bytes only as a checksum mismatch, never as a silent success. Deadlines are for dead
 * clients; live ones should use lengths well beyond a copy.
 *
 * SSD tier (tier.c, disk.c): eviction hands a victim with no copy on disk to the tier's
 * writer instead of freeing it (do_make_room then waits for the write when nothing else
 * frees room); a pin that misses memory looks on disk and promotes what it finds
 * (do_promote). Both wait on tier_cv with the lock released, never while holding it.
 *
 * Metadata an object (meta_bytes counts what is allocated, glibc's heap header and
 * rounding included): a 32-byte record plus the key in one heap block (40..55 bytes
 * beyond the key), 10.7..16 bytes of index slots, 24 bytes of allocator node: about 75..95
 * bytes beyond the key (test_store.c measures it).
 *
 * Metadata budget: every record is charged store_meta_cost(klen) (its heap block plus
 * STORE_META_TABLES, the worst case of its index slots and allocator nodes) against
 * meta_budget, from its reservation until it is freed. do_make_room evicts for the budget
 * as it does for pool space, so what the tier's metadata takes is bounded by what the
 * operator configured, whatever the mix of key and value sizes; with nothing evictable
 * the put is refused (TIDE_ENOSPACE) and nothing stored is touched.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/checksum.h"
#include "common/util.h"
#include "store/store.h"
#include "store/store_int.h"

static uint32_t obj_hash(const void *e) {
    return ((const obj *)e)->hash;
}

static int obj_eq(const void *e, const void *k) {
    const obj *o = e;
    const keyref *kr = k;
    return o->klen == kr->len && memcmp(o->key, kr->p, kr->len) == 0;
}

static int check_key(const void *key, size_t klen) {
    if (klen == 0 || !key) return TIDE_EKEYEMPTY;
    if (klen > TIDE_KEY_MAX) return TIDE_EKEYLONG;
    return 0;
}

uint64_t store_meta_cost(size_t klen) {
    return store_rec_cost(klen) + STORE_META_TABLES;
}

/* What the records hold against the budget now. */
static uint64_t do_meta_charged(const store *st) {
    return st->rec_bytes + st->nrecs * STORE_META_TABLES;
}

/* A record of klen bytes of key now exists (store_do_free_obj undoes it). */
static void do_charge(store *st, size_t klen) {
    st->rec_bytes += store_rec_cost(klen);
    st->nrecs++;
}

static obj *do_lookup(store *st, const void *key, size_t klen) {
    keyref kr = {key, klen};
    return htab_find(&st->index, key_hash(key, klen), obj_eq, &kr);
}

/* Remove a LIVE object: gone from the index now, freed now or at its last unpin. */
static void do_remove_live(store *st, obj *o) {
    htab_delete(&st->index, o);
    st->objects--;
    if (o->pins == 0) {
        st->pol.ops->erase(&st->pol, o);
        store_do_free_obj(st, o);
    } else {
        OBJ_SET_STATE(o, OBJ_HIDDEN);
    }
}

/* The object a chain cursor names, if it is still that object, in the policy, and not
 * `self` (the object being inserted: a batch may name the same key twice). The node is
 * looked at only when the allocator has it in use, so its owner is a live record; a LIVE
 * object without pins is in the policy. */
static const obj *do_chain_obj(store *st, const store_chain *c, const obj *self) {
    if (!c || c->node == ALLOC_NIL || c->node >= st->al.nchunks << ALLOC_CHUNK_SHIFT) return NULL;
    if (!(alloc_node_at(&st->al, c->node)->size & ALLOC_USED_BIT)) return NULL;
    const obj *o = alloc_owner(&st->al, c->node);
    if (!o || o == self || o->node != c->node || o->hash != c->hash || OBJ_STATE(o) != OBJ_LIVE ||
        o->pins)
        return NULL;
    return o;
}

/* o becomes evictable as the next key of chain c's batch (c may be NULL). */
static void do_insert(store *st, obj *o, int reused, store_chain *c, int last) {
    policy_hint h = {
        .after = do_chain_obj(st, c, o), .tail = last, .first = !c || c->node == ALLOC_NIL};
    st->pol.ops->insert(&st->pol, o, reused, &h);
    if (c) *c = (store_chain){o->node, o->hash};
}

static void do_release_pin(store *st, obj *o, store_chain *c) {
    if (--o->pins > 0) return;
    st->pinned--;
    if (OBJ_STATE(o) == OBJ_HIDDEN)
        store_do_free_obj(st, o);
    else
        do_insert(st, o, 1, c, 0);
}

static void do_drop_reservation(store *st, obj *o) {
    htab_delete(&st->index, o);
    store_do_free_obj(st, o);
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
    case STORE_POLICY_LRU:
        ops = &policy_lru;
        break;
    case STORE_POLICY_S3FIFO:
        ops = &policy_s3fifo;
        break;
    case STORE_POLICY_CHAIN:
        ops = &policy_chain;
        break;
    case STORE_POLICY_ADAPT:
        ops = &policy_adapt;
        break;
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
    /* The default holds at least one object of the longest key, however small the pool. */
    uint64_t one = store_meta_cost(TIDE_KEY_MAX);
    st->meta_budget = cfg->meta_budget ? cfg->meta_budget : st->capacity / STORE_META_BUDGET_DIV;
    if (!cfg->meta_budget && st->meta_budget < one) st->meta_budget = one;
    if (st->meta_budget < one) {
        snprintf(err, errlen,
                 "metadata budget %llu bytes is below %llu, what one object with a %d-byte key "
                 "costs",
                 (unsigned long long)st->meta_budget, (unsigned long long)one, TIDE_KEY_MAX);
        free(st);
        return TIDE_ECONFIG;
    }
    st->max_value = cfg->max_value && cfg->max_value < st->capacity ? cfg->max_value : st->capacity;
    int rc = pool_open(&st->pool, st->capacity, cfg->hugepages, cfg->prefault, err, errlen);
    if (rc < 0) {
        free(st);
        return rc;
    }
    st->pol.ops = ops;
    st->pol.al = &st->al;
    rc = alloc_init(&st->al, (uint32_t)units);
    if (rc == 0) rc = htab_init(&st->index, 1024, obj_hash);
    if (rc == 0) rc = leases_init(&st->ls);
    if (rc == 0) rc = ops->init(&st->pol);
    if (rc == 0) rc = store_events_init(&st->ev);
    if (rc < 0) {
        snprintf(err, errlen, "out of memory for the store's metadata");
        ops->fini(&st->pol);
        leases_fini(&st->ls);
        htab_fini(&st->index);
        alloc_fini(&st->al);
        pool_close(&st->pool);
        free(st);
        return rc;
    }
    pthread_mutex_init(&st->mu, NULL);
    pthread_cond_init(&st->tier_cv, NULL);
    pthread_cond_init(&st->writer_cv, NULL);
    st->spill_head = st->spill_tail = ALLOC_NIL;
    if (cfg->disk_dir && cfg->disk_dir[0]) {
        rc = tier_start(st, cfg, err, errlen);
        if (rc < 0) {
            store_destroy(st);
            return rc;
        }
    }
    *out = st;
    return 0;
}

void store_destroy(store *st) {
    if (!st) return;
    tier_stop(st);
    /* HIDDEN objects are reachable only through their pins. */
    for (uint32_t i = 0; i < htab_slots(&st->ls.ids); i++) {
        lease *e = htab_slot(&st->ls.ids, i);
        if (e && e->kind == LEASE_PIN && OBJ_STATE(e->o) == OBJ_HIDDEN && --e->o->pins == 0)
            free(e->o);
    }
    for (uint32_t i = 0; i < htab_slots(&st->index); i++)
        free(htab_slot(&st->index, i));
    leases_fini(&st->ls);
    htab_fini(&st->index);
    st->pol.ops->fini(&st->pol);
    alloc_fini(&st->al);
    pool_close(&st->pool);
    pthread_cond_destroy(&st->tier_cv);
    pthread_cond_destroy(&st->writer_cv);
    pthread_mutex_destroy(&st->mu);
    store_events_fini(&st->ev);
    free(st);
}

uint8_t *store_base(store *st) {
    return st->pool.base;
}

uint64_t store_capacity(store *st) {
    return st->capacity;
}

uint64_t store_meta_budget(store *st) {
    return st->meta_budget;
}

uint64_t store_meta_charged(store *st) {
    pthread_mutex_lock(&st->mu);
    uint64_t c = do_meta_charged(st);
    pthread_mutex_unlock(&st->mu);
    return c;
}

int store_fd(store *st) {
    return st->pool.fd;
}

/* Find room for `units` of pool and `meta` bytes of metadata budget, evicting in policy
 * order. The caller holds the lock. */
static int do_make_room(store *st, uint32_t units, uint64_t meta, uint32_t *node) {
    for (;;) {
        uint64_t charged = do_meta_charged(st);
        if (charged + meta <= st->meta_budget) {
            int rc = alloc_get(&st->al, units, node);
            if (rc != TIDE_ENOSPACE) return rc;
            /* Victims being written will free at least this much: wait for them first. */
            if (st->spill_bytes >= (uint64_t)units * ALLOC_UNIT) return STORE_WAIT;
        } else if (st->spill_held * store_meta_cost(1) >= charged + meta - st->meta_budget) {
            return STORE_WAIT; /* the same for metadata: each frees at least this much */
        }
        obj *v = st->pol.ops->victim(&st->pol);
        if (!v) return st->spill_held ? STORE_WAIT : TIDE_ENOSPACE;
        if (st->dk && do_tier_spill(st, v)) continue;
        if (!st->dk || !disk_contains(st->dk, v->key, v->klen)) /* no copy left: a departure */
            store_events_add(&st->ev, TIDE_DEPARTURE_EVICTED, v->key, v->klen);
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
    if (st->pol.ops->prepare) st->pol.ops->prepare(&st->pol, key, klen);
    keyref kr = {key, klen};
    obj *o = NULL;
    for (;;) { /* again after each wait for the disk writer: the key may have come in */
        if (htab_find(&st->index, h, obj_eq, &kr) || (st->dk && disk_contains(st->dk, key, klen))) {
            st->put_dups++;
            rc = STORE_DUP;
            goto out;
        }
        rc = htab_reserve(&st->index, 1);
        if (rc < 0) goto out;
        if (!o && !(o = malloc(offsetof(obj, key) + klen))) {
            rc = -ENOMEM;
            goto out;
        }
        rc = do_make_room(st, units, store_meta_cost(klen), &o->node);
        if (rc != STORE_WAIT) break;
        pthread_cond_wait(&st->tier_cv, &st->mu);
    }
    if (rc < 0) goto out;
    lease *e;
    rc = leases_add(&st->ls, LEASE_RESV, o, deadline_ns, &e);
    if (rc < 0) {
        alloc_put(&st->al, o->node);
        goto out;
    }
    alloc_set_owner(&st->al, o->node, o);
    o->lprev = o->lnext = ALLOC_NIL;
    o->checksum = 0;
    o->hash = h;
    o->pins = 0;
    o->klen = (uint16_t)klen;
    o->state = OBJ_RESERVED;
    o->tail = (uint8_t)((uint64_t)units * ALLOC_UNIT - vlen);
    memcpy(o->key, key, klen);
    htab_insert(&st->index, o);
    do_charge(st, klen);
    *ref = (store_ref){.id = e->id, .offset = alloc_offset(&st->al, o->node), .len = vlen};
    o = NULL;
out:
    pthread_mutex_unlock(&st->mu);
    free(o);
    return rc;
}

static const char *const policy_names[] = {"lru", "s3fifo", "chain", "adapt"};

int store_policy_parse(const char *name) {
    for (int i = 0; i < (int)(sizeof(policy_names) / sizeof(policy_names[0])); i++)
        if (name && strcmp(name, policy_names[i]) == 0) return i;
    return -1;
}

const char *store_policy_name(int which) {
    if (which < 0 || which >= (int)(sizeof(policy_names) / sizeof(policy_names[0]))) return "?";
    return policy_names[which];
}

/* End lease id of this kind and return its object, or NULL when there is no such lease. */
static obj *do_end_lease(store *st, uint64_t id, int kind) {
    lease *e = leases_find(&st->ls, id, kind);
    if (!e) return NULL;
    obj *o = e->o;
    leases_drop(&st->ls, e);
    return o;
}

int store_commit(store *st, uint64_t id, uint64_t checksum) {
    return store_commit_chain(st, id, checksum, NULL, 0);
}

int store_commit_chain(store *st, uint64_t id, uint64_t checksum, store_chain *chain, int last) {
    pthread_mutex_lock(&st->mu);
    obj *o = do_end_lease(st, id, LEASE_RESV);
    if (!o) {
        pthread_mutex_unlock(&st->mu);
        return TIDE_ENOTFOUND;
    }
    o->checksum = checksum;
    OBJ_SET_STATE(o, OBJ_LIVE);
    st->objects++;
    st->puts++;
    do_insert(st, o, 0, chain, last);
    pthread_mutex_unlock(&st->mu);
    return 0;
}

int store_abort(store *st, uint64_t id) {
    pthread_mutex_lock(&st->mu);
    obj *o = do_end_lease(st, id, LEASE_RESV);
    if (!o) {
        pthread_mutex_unlock(&st->mu);
        return TIDE_ENOTFOUND;
    }
    do_drop_reservation(st, o);
    pthread_mutex_unlock(&st->mu);
    return 0;
}

/*
 * Read key back from disk into a new record and make it LIVE. The lock is held on entry and
 * on return, and dropped around the read; meanwhile the record is in the index as
 * RESERVED|OBJ_PROMOTE, so puts of the key are duplicates and pins of it wait on tier_cv.
 * Returns 0 with *out LIVE (in the policy); STORE_WAIT after waiting for the disk writer
 * (look the key up again); TIDE_ENOTFOUND when it is not on disk, does not fit, fails to
 * read or verify (then its disk record is forgotten), or was removed meanwhile; -ENOMEM.
 */
static int do_promote(store *st, const void *key, size_t klen, uint32_t h, obj **out) {
    disk_loc loc;
    if (disk_find(st->dk, key, klen, &loc) != 0) return TIDE_ENOTFOUND;
    obj *o = NULL;
    int rc = TIDE_ENOTFOUND;
    if (loc.vlen == 0 || loc.vlen > st->max_value) goto fail;
    uint32_t units = (uint32_t)alloc_units_for(loc.vlen);
    if ((rc = htab_reserve(&st->index, 1)) < 0) goto fail;
    if (!(o = malloc(offsetof(obj, key) + klen))) {
        rc = -ENOMEM;
        goto fail;
    }
    rc = do_make_room(st, units, store_meta_cost(klen), &o->node);
    if (rc == STORE_WAIT) {
        free(o);
        disk_loc_put(st->dk, &loc);
        pthread_cond_wait(&st->tier_cv, &st->mu);
        return STORE_WAIT;
    }
    if (rc < 0) {
        if (rc == TIDE_ENOSPACE) rc = TIDE_ENOTFOUND;
        goto fail;
    }
    alloc_set_owner(&st->al, o->node, o);
    o->lprev = o->lnext = ALLOC_NIL;
    o->checksum = loc.sum;
    o->hash = h;
    o->pins = 0;
    o->klen = (uint16_t)klen;
    o->state = OBJ_RESERVED | OBJ_PROMOTE;
    o->tail = (uint8_t)((uint64_t)units * ALLOC_UNIT - loc.vlen);
    memcpy(o->key, key, klen);
    htab_insert(&st->index, o);
    do_charge(st, klen);
    st->promoting++;
    uint8_t *dst = st->pool.base + alloc_offset(&st->al, o->node);

    pthread_mutex_unlock(&st->mu);
    rc = disk_read(st->dk, &loc, key, klen, dst);
    pthread_mutex_lock(&st->mu);

    st->promoting--;
    int gone = (o->state & OBJ_GONE) != 0;
    o->state &= (uint8_t) ~(OBJ_PROMOTE | OBJ_GONE);
    if (rc == TIDE_ECHECKSUM) {
        disk_forget(st->dk, &loc, key, klen);
        store_events_add(&st->ev, TIDE_DEPARTURE_DROPPED, key, klen);
        do_tier_wake(st);
    }
    disk_loc_put(st->dk, &loc);
    pthread_cond_broadcast(&st->tier_cv);
    if (rc == 0 && !gone) {
        OBJ_SET_STATE(o, OBJ_LIVE);
        st->objects++;
        st->promotions++;
        do_insert(st, o, 0, NULL, 0);
        *out = o;
        return 0;
    }
    htab_delete(&st->index, o);
    store_do_free_obj(st, o);
    return TIDE_ENOTFOUND;
fail:
    free(o);
    disk_loc_put(st->dk, &loc);
    return rc;
}

int store_pin(store *st, const void *key, size_t klen, uint64_t deadline_ns, store_ref *ref) {
    return store_pin_cap(st, key, klen, deadline_ns, UINT64_MAX, ref);
}

int store_pin_cap(store *st, const void *key, size_t klen, uint64_t deadline_ns, uint64_t cap,
                  store_ref *ref) {
    int rc = check_key(key, klen);
    if (rc < 0) return rc;
    uint32_t h = key_hash(key, klen);
    keyref kr = {key, klen};
    pthread_mutex_lock(&st->mu);
    obj *o;
    for (;;) {
        o = htab_find(&st->index, h, obj_eq, &kr);
        if (o && OBJ_STATE(o) == OBJ_LIVE) break;
        if (o && (o->state & OBJ_PROMOTE)) { /* another reader is bringing it in */
            pthread_cond_wait(&st->tier_cv, &st->mu);
            continue;
        }
        rc = !o && st->dk ? do_promote(st, key, klen, h, &o) : TIDE_ENOTFOUND;
        if (rc == 0) break;
        if (rc == STORE_WAIT) continue;
        if (rc == TIDE_ENOTFOUND) st->misses++;
        goto out;
    }
    if (store_do_obj_len(st, o) > cap) { /* a size-only answer: neither a get nor a miss */
        ref->len = store_do_obj_len(st, o);
        rc = TIDE_EBUFSMALL;
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
    *ref = (store_ref){.id = e->id,
                       .offset = alloc_offset(&st->al, o->node),
                       .len = store_do_obj_len(st, o),
                       .checksum = o->checksum};
out:
    pthread_mutex_unlock(&st->mu);
    return rc;
}

int store_unpin(store *st, uint64_t id) {
    return store_unpin_chain(st, id, NULL);
}

int store_unpin_chain(store *st, uint64_t id, store_chain *chain) {
    pthread_mutex_lock(&st->mu);
    obj *o = do_end_lease(st, id, LEASE_PIN);
    if (!o) {
        pthread_mutex_unlock(&st->mu);
        return TIDE_ENOTFOUND;
    }
    do_release_pin(st, o, chain);
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
        if (OBJ_STATE(o) == OBJ_LIVE) {
            htab_delete(&st->index, o);
            st->objects--;
            OBJ_SET_STATE(o, OBJ_HIDDEN);
            store_events_add(&st->ev, TIDE_DEPARTURE_DROPPED, o->key, o->klen);
        }
    }
    pthread_mutex_unlock(&st->mu);
}

int store_exists(store *st, const void *key, size_t klen) {
    int rc = check_key(key, klen);
    if (rc < 0) return rc;
    pthread_mutex_lock(&st->mu);
    obj *o = do_lookup(st, key, klen);
    rc = o && OBJ_STATE(o) == OBJ_LIVE;
    if (!rc && st->dk && (!o || (o->state & OBJ_PROMOTE))) rc = disk_contains(st->dk, key, klen);
    pthread_mutex_unlock(&st->mu);
    return rc;
}

int store_remove(store *st, const void *key, size_t klen) {
    int rc = check_key(key, klen);
    if (rc < 0) return rc;
    pthread_mutex_lock(&st->mu);
    int removed = 0;
    /* With a disk tier the remove is acknowledged only once its tombstone is durable
     * (do_tier_remove waits for it, the lock released): a copy being written is waited
     * for first, and one that a read promoted meanwhile is removed on the next round. */
    for (;;) {
        obj *o = do_lookup(st, key, klen);
        if (o && OBJ_STATE(o) == OBJ_LIVE && st->dk && do_tier_writing(st, o)) {
            pthread_cond_wait(&st->tier_cv, &st->mu);
            continue;
        }
        if (o && OBJ_STATE(o) == OBJ_LIVE) {
            do_remove_live(st, o);
            removed = 1;
        } else if (o && (o->state & OBJ_PROMOTE)) {
            o->state |= OBJ_GONE; /* the promotion will not commit it */
        }
        if (!st->dk) break;
        rc = do_tier_remove(st, key, klen);
        if (rc == TIDE_ENOTFOUND) break;
        if (rc < 0) goto out;
        removed = 1;
    }
    rc = removed ? 0 : TIDE_ENOTFOUND;
    if (removed) store_events_add(&st->ev, TIDE_DEPARTURE_REMOVED, key, klen);
out:
    pthread_mutex_unlock(&st->mu);
    return rc;
}

int store_clear(store *st) {
    int rc = 0;
    pthread_mutex_lock(&st->mu);
    /* A delete may pull a later entry into slot i (see htab.c): look at slot i again. */
    for (uint32_t i = 0; i < htab_slots(&st->index); i++) {
        obj *o;
        while ((o = htab_slot(&st->index, i)) && OBJ_STATE(o) == OBJ_LIVE)
            do_remove_live(st, o);
        if (o && (o->state & OBJ_PROMOTE)) o->state |= OBJ_GONE;
    }
    /* Returns once the clear record is durable (or no segment is left to clear). */
    if (st->dk) rc = do_tier_clear(st);
    store_events_add(&st->ev, TIDE_DEPARTURE_CLEARED, NULL, 0);
    pthread_mutex_unlock(&st->mu);
    return rc;
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
            do_release_pin(st, o, NULL);
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
                      leases_meta_bytes(&st->ls) + st->pol.ops->meta_bytes(&st->pol) +
                      st->rec_bytes,
        .pinned = st->pinned,
        .reserved = st->ls.nresv,
    };
    if (st->dk) {
        disk_stats(st->dk, out);
        out->disk_promotions = st->promotions;
        out->disk_dropped = st->disk_dropped;
        out->disk_queued_bytes = st->spill_bytes;
    }
    pthread_mutex_unlock(&st->mu);
}

int store_disk_io_parse(const char *name) {
    if (!strcmp(name, "auto")) return DISK_IO_AUTO;
    if (!strcmp(name, "io_uring")) return DISK_IO_URING;
    if (!strcmp(name, "pwritev") || !strcmp(name, "pread")) return DISK_IO_PSYNC;
    return -1;
}

void store_describe_disk(store *st, char *buf, size_t len) {
    if (len) buf[0] = '\0';
    if (st->dk) disk_describe(st->dk, buf, len);
}

void store_count_io(store *st, uint64_t bytes_in, uint64_t bytes_out) {
    pthread_mutex_lock(&st->mu);
    st->bytes_in += bytes_in;
    st->bytes_out += bytes_out;
    pthread_mutex_unlock(&st->mu);
}

static int cmp_ptr(const void *a, const void *b) {
    uintptr_t x = (uintptr_t) * (void *const *)a, y = (uintptr_t) * (void *const *)b;
    return x < y ? -1 : x > y;
}

#define CHECK_OR(cond)                                                                             \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            rc = -__LINE__;                                                                        \
            goto out;                                                                              \
        }                                                                                          \
    } while (0)

int store_check(store *st) {
    obj **hidden = NULL;
    pthread_mutex_lock(&st->mu);
    int rc = alloc_check(&st->al);
    if (rc < 0) goto out;
    uint64_t live = 0, resv = 0, evictable = 0, pinned = 0, units = 0, live_pins = 0;
    uint64_t rec = 0, nrec = 0, promo = 0;
    for (uint32_t i = 0; i < htab_slots(&st->index); i++) {
        obj *o = htab_slot(&st->index, i);
        if (!o) continue;
        CHECK_OR(o->hash == key_hash(o->key, o->klen));
        CHECK_OR(do_lookup(st, o->key, o->klen) == o);
        CHECK_OR(OBJ_STATE(o) == OBJ_LIVE || OBJ_STATE(o) == OBJ_RESERVED);
        CHECK_OR(!(o->state & OBJ_GONE) || (o->state & OBJ_PROMOTE));
        if (OBJ_STATE(o) == OBJ_LIVE) {
            CHECK_OR(!(o->state & OBJ_PROMOTE));
            live++;
            live_pins += o->pins - ((o->state & OBJ_SPILL) != 0);
            if (o->pins)
                pinned++;
            else
                evictable++;
        } else {
            CHECK_OR(!(o->state & OBJ_SPILL));
            if (o->state & OBJ_PROMOTE)
                promo++;
            else
                resv++;
            CHECK_OR(o->pins == 0);
        }
        units += alloc_units(&st->al, o->node);
        rec += store_rec_cost(o->klen);
        nrec++;
    }
    CHECK_OR(live == st->objects && resv == st->ls.nresv && promo == st->promoting);
    CHECK_OR(evictable == st->pol.count + st->pol.count2);
    /* Walk the policy's lists: linked both ways, LIVE and unpinned, counts and (for a
     * policy that keeps them) bytes right, each object on the list the policy names. */
    for (int l = 0; l < 2; l++) {
        uint32_t n = l ? st->pol.head2 : st->pol.head, prev = ALLOC_NIL;
        uint64_t cnt = 0, bytes = 0;
        while (n != ALLOC_NIL) {
            obj *o = alloc_owner(&st->al, n);
            CHECK_OR(o && o->node == n && o->lprev == prev && cnt < evictable);
            CHECK_OR(OBJ_STATE(o) == OBJ_LIVE && o->pins == 0);
            CHECK_OR(st->pol.ops->list_of(o) == l + 1);
            cnt++;
            bytes += alloc_units(&st->al, n);
            prev = n;
            n = o->lnext;
        }
        CHECK_OR(prev == (l ? st->pol.tail2 : st->pol.tail));
        CHECK_OR(cnt == (l ? st->pol.count2 : st->pol.count));
        if (st->pol.ops->keeps_units) CHECK_OR(bytes == (l ? st->pol.bytes2 : st->pol.bytes));
    }
    hidden = malloc((st->ls.npin + st->spill_held + 1) * sizeof(*hidden));
    CHECK_OR(hidden);
    uint64_t nh = 0, pin_leases = 0, resv_leases = 0, live_pin_leases = 0;
    /* Objects held for the disk writer: the queue (linked through lnext/lprev) and the
     * batch being written. Held HIDDEN ones are reachable only from there. */
    uint64_t queued = 0, held = 0, held_bytes = 0;
    uint32_t qn = st->spill_head, qprev = ALLOC_NIL, b = 0;
    for (;;) {
        obj *o;
        if (b < st->nbatch) {
            o = st->batch[b++];
        } else if (qn != ALLOC_NIL) {
            o = alloc_owner(&st->al, qn);
            CHECK_OR(o && o->node == qn && o->lprev == qprev && queued < st->spill_held);
            queued++;
            qprev = qn;
            qn = o->lnext;
        } else {
            break;
        }
        CHECK_OR((o->state & OBJ_SPILL) && o->pins > 0);
        CHECK_OR(OBJ_STATE(o) == OBJ_LIVE || OBJ_STATE(o) == OBJ_HIDDEN);
        held++;
        held_bytes += (uint64_t)alloc_units(&st->al, o->node) * ALLOC_UNIT;
        if (OBJ_STATE(o) == OBJ_HIDDEN) hidden[nh++] = o;
    }
    CHECK_OR(qprev == st->spill_tail && queued == st->spill_queued);
    CHECK_OR(held == st->spill_held && held_bytes == st->spill_bytes);
    for (uint32_t i = 0; i < htab_slots(&st->ls.ids); i++) {
        lease *e = htab_slot(&st->ls.ids, i);
        if (!e) continue;
        CHECK_OR(leases_find(&st->ls, e->id, e->kind) == e);
        CHECK_OR((e->deadline != 0) == (e->heap_pos != ALLOC_NIL));
        if (e->kind == LEASE_RESV) {
            resv_leases++;
            CHECK_OR(OBJ_STATE(e->o) == OBJ_RESERVED);
            continue;
        }
        pin_leases++;
        CHECK_OR(e->o->pins > 0 && OBJ_STATE(e->o) != OBJ_RESERVED);
        if (OBJ_STATE(e->o) == OBJ_HIDDEN)
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
        rec += store_rec_cost(hidden[i]->klen);
        nrec++;
    }
    CHECK_OR(pinned == st->pinned);
    CHECK_OR(units == st->al.used && rec == st->rec_bytes && nrec == st->nrecs);
    CHECK_OR(do_meta_charged(st) <= st->meta_budget);
    CHECK_OR((uint64_t)st->al.used * ALLOC_UNIT <= st->capacity);
    for (uint32_t i = 1; i < st->ls.heap_len; i++)
        CHECK_OR(st->ls.heap[(i - 1) / 2]->deadline <= st->ls.heap[i]->deadline);
out:
    pthread_mutex_unlock(&st->mu);
    free(hidden);
    return rc;
}
