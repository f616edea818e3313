/*
 * tier.c — the store's side of the SSD tier: the writer thread that spills evicted objects
 * to disk (disk.c), and starting and stopping it.
 *
 * Life of a spilled object. Eviction (do_make_room in store.c, lock held) picks a victim
 * from the policy. If its key already has a record on disk (it was promoted from there and
 * objects never change), it is dropped at once. Otherwise do_tier_spill() takes it out of
 * the policy and *holds* it: OBJ_SPILL is set and one pin is counted for the hold, so its
 * pool space cannot be reused, and it goes on the spill queue. It stays in the index and
 * readable meanwhile. The writer takes a batch off the queue (lock held), writes the
 * values straight from pool memory to the segment file (lock released: no copy, and the
 * hold is what keeps those bytes in place), then with the lock again, for each object:
 * the disk index has it now (disk_write indexed it), so it leaves the memory index
 * (evicted) and its space is freed when its last pin goes, the hold being one. A reserve
 * or promotion that needed the room waits on tier_cv until a batch is done (store.c).
 *
 * Objects removed or cleared while held become HIDDEN as usual. A remove of an object in
 * the batch being written waits for the batch (do_tier_writing), then removes the record
 * like any on disk: do_tier_remove queues a tombstone and waits until the writer has made
 * it durable (or refused it), so a remove is acknowledged only once a restart cannot undo
 * it; a clear waits for its clear record the same way. An object that a clear hid while
 * its record was being written gets a tombstone without a waiter (the clear record comes
 * after its record in the file anyway). A write
 * that fails (disk full, I/O error) drops the object from memory all the same — the node
 * must keep serving from memory — counts it in disk_dropped and logs once per failure
 * spell; for a second after a failure evictions skip the disk instead of queueing behind
 * it, then the disk is tried again.
 *
 * Threads and locks: one writer thread per store. It holds the store's lock except while
 * disk_write() runs and while it logs; st->log is called with no lock held. As in
 * store.c, do_x() runs with the store's lock held by its caller (do_tier_spill under
 * eviction, do_pop and do_take_batch in the writer); a function without the prefix is
 * never called with it held.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "store/store_int.h"

#define TIER_BACKOFF_NS 1000000000ull

static uint64_t held_bytes(const store *st, const obj *o) {
    return (uint64_t)alloc_units(&st->al, o->node) * ALLOC_UNIT;
}

int do_tier_spill(store *st, obj *v) {
    uint64_t len = store_do_obj_len(st, v);
    if (disk_contains(st->dk, v->key, v->klen)) return 0;
    if (disk_record_size(v->klen, len) + 64 > st->disk_capacity ||
        now_ns() < st->disk_backoff_until) {
        st->disk_dropped++;
        return 0;
    }
    st->pol.ops->erase(&st->pol, v);
    v->state |= OBJ_SPILL;
    v->pins++;
    st->pinned++;
    st->spill_held++;
    st->spill_bytes += held_bytes(st, v);
    v->lnext = ALLOC_NIL;
    v->lprev = st->spill_tail;
    if (st->spill_tail != ALLOC_NIL)
        ((obj *)alloc_owner(&st->al, st->spill_tail))->lnext = v->node;
    else
        st->spill_head = v->node;
    st->spill_tail = v->node;
    st->spill_queued++;
    pthread_cond_signal(&st->writer_cv);
    return 1;
}

void do_tier_wake(store *st) {
    if (st->dk) pthread_cond_signal(&st->writer_cv);
}

/* The hold on o ends: off it comes, and the object with it when the hold was its last pin. */
static void do_release(store *st, obj *o) {
    o->state &= (uint8_t)~OBJ_SPILL;
    st->spill_held--;
    st->spill_bytes -= held_bytes(st, o);
    if (--o->pins == 0) {
        st->pinned--;
        if (OBJ_STATE(o) == OBJ_HIDDEN) {
            store_do_free_obj(st, o);
        } else { /* only when the writer stops with objects still queued: keep them */
            o->lprev = o->lnext = ALLOC_NIL;
            st->pol.ops->insert(&st->pol, o, 1, NULL);
        }
    }
}

static obj *do_pop(store *st) {
    if (st->spill_head == ALLOC_NIL) return NULL;
    obj *o = alloc_owner(&st->al, st->spill_head);
    st->spill_head = o->lnext;
    if (st->spill_head == ALLOC_NIL)
        st->spill_tail = ALLOC_NIL;
    else
        ((obj *)alloc_owner(&st->al, st->spill_head))->lprev = ALLOC_NIL;
    o->lprev = o->lnext = ALLOC_NIL;
    st->spill_queued--;
    return o;
}

/* Take the next batch off the queue into st->batch and describe it in items. */
static size_t do_take_batch(store *st, disk_item *items) {
    size_t n = 0;
    uint64_t bytes = 0;
    while (n < TIER_BATCH && st->spill_head != ALLOC_NIL) {
        obj *o = alloc_owner(&st->al, st->spill_head);
        uint64_t len = store_do_obj_len(st, o);
        if (n > 0 && bytes + len > TIER_BATCH_BYTES) break;
        do_pop(st);
        if (OBJ_STATE(o) != OBJ_LIVE) { /* removed before it was written: nothing to do */
            do_release(st, o);
            continue;
        }
        st->batch[n] = o;
        items[n] = (disk_item){.key = o->key,
                               .klen = o->klen,
                               .val = st->pool.base + alloc_offset(&st->al, o->node),
                               .vlen = len,
                               .sum = o->checksum};
        bytes += len;
        n++;
    }
    st->nbatch = (uint32_t)n;
    return n;
}

/* A batch member's write is over (result 0: written and indexed on disk). */
static void do_spill_done(store *st, obj *o, int result) {
    /* Written though removed meanwhile: only a clear does that (a remove waits for the
     * batch, do_tier_writing), and the clear record follows this one in the file. */
    if (result == 0 && OBJ_STATE(o) != OBJ_LIVE) disk_remove(st->dk, o->key, o->klen, NULL);
    if (result != 0) st->disk_dropped++;
    if (result != 0 && OBJ_STATE(o) == OBJ_LIVE)
        store_events_add(&st->ev, TIDE_DEPARTURE_DROPPED, o->key, o->klen);
    if (OBJ_STATE(o) == OBJ_LIVE) { /* evicted now: from here on the disk serves it */
        htab_delete(&st->index, o);
        st->objects--;
        st->evictions++;
        st->evicted_bytes += held_bytes(st, o);
        OBJ_SET_STATE(o, OBJ_HIDDEN);
    }
    do_release(st, o);
}

static void tier_log(store *st, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void tier_log(store *st, int level, const char *fmt, ...) {
    if (!st->log) return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    st->log(st->log_ctx, level, msg);
}

int do_tier_writing(const store *st, const obj *o) {
    if (!(o->state & OBJ_SPILL)) return 0;
    for (uint32_t i = 0; i < st->nbatch; i++)
        if (st->batch[i] == o) return 1;
    return 0;
}

/* Wait (the store's lock released meanwhile) until the writer has resolved a ticket. */
static int do_tier_wait(store *st, uint64_t ticket) {
    pthread_cond_signal(&st->writer_cv);
    int rc;
    while ((rc = disk_ticket(st->dk, ticket)) > 0)
        pthread_cond_wait(&st->tier_cv, &st->mu);
    return rc;
}

int do_tier_remove(store *st, const void *key, size_t klen) {
    uint64_t ticket = 0;
    int rc = disk_remove(st->dk, key, klen, &ticket);
    if (rc != 0) return rc;
    return do_tier_wait(st, ticket);
}

int do_tier_clear(store *st) {
    uint64_t ticket = 0;
    int rc = disk_clear(st->dk, &ticket);
    if (rc != 0) return rc;
    return do_tier_wait(st, ticket);
}

static void *tier_writer(void *arg) {
    store *st = arg;
    disk_item items[TIER_BATCH];
    char err[512];
    uint64_t failed_batches = 0, dropped_at_spell = 0;
    pthread_mutex_lock(&st->mu);
    while (!st->writer_stop) {
        if (st->spill_head == ALLOC_NIL && !disk_pending(st->dk)) {
            pthread_cond_wait(&st->writer_cv, &st->mu);
            continue;
        }
        size_t n = do_take_batch(st, items);
        pthread_mutex_unlock(&st->mu);

        disk_write(st->dk, items, n, err, sizeof(err));
        int bad = err[0] != '\0';
        /* What a spell of failures cost is read off disk_dropped, which also counts the
         * objects evictions dropped without queueing them while the disk was backed off. */
        pthread_mutex_lock(&st->mu);
        uint64_t dropped_now = st->disk_dropped;
        for (size_t i = 0; i < n; i++)
            dropped_now += items[i].result != 0;
        pthread_mutex_unlock(&st->mu);
        if (bad && failed_batches++ == 0) {
            dropped_at_spell = dropped_now;
            for (size_t i = 0; i < n; i++)
                dropped_at_spell -= items[i].result != 0;
            tier_log(st, LOG_LEVEL_ERROR,
                     "disk tier: %s; evicted objects are dropped instead of spilled until a "
                     "disk write succeeds again (the node keeps serving from memory)",
                     err);
        }
        if (!bad && failed_batches) {
            tier_log(st, LOG_LEVEL_INFO,
                     "disk tier: writes succeed again after %llu failed batches (%llu objects "
                     "dropped from memory unwritten)",
                     (unsigned long long)failed_batches,
                     (unsigned long long)(dropped_now - dropped_at_spell));
            failed_batches = 0;
        }

        pthread_mutex_lock(&st->mu);
        if (bad) st->disk_backoff_until = now_ns() + TIER_BACKOFF_NS;
        for (size_t i = 0; i < n; i++)
            do_spill_done(st, st->batch[i], items[i].result);
        st->nbatch = 0;
        pthread_cond_broadcast(&st->tier_cv);
    }
    /* Stopping: what is still queued stays in memory (it is about to be freed anyway);
     * tombstones and clear records still pending are written, so removes stay removed. */
    obj *o;
    while ((o = do_pop(st)))
        do_release(st, o);
    pthread_cond_broadcast(&st->tier_cv);
    int pending = disk_pending(st->dk);
    pthread_mutex_unlock(&st->mu);
    if (pending) {
        disk_write(st->dk, NULL, 0, err, sizeof(err));
        if (err[0]) tier_log(st, LOG_LEVEL_ERROR, "disk tier: %s", err);
    }
    return NULL;
}

int tier_start(store *st, const store_config *cfg, char *err, size_t errlen) {
    disk_config dc = {.dir = cfg->disk_dir,
                      .capacity = cfg->disk_capacity,
                      .segment_size = cfg->disk_segment,
                      .io = cfg->disk_io};
    st->log = cfg->log;
    st->log_ctx = cfg->log_ctx;
    dc.events = &st->ev;
    int rc = disk_open(&dc, &st->dk, err, errlen);
    if (rc < 0) return rc;
    st->disk_capacity = cfg->disk_capacity;
    rc = pthread_create(&st->writer, NULL, tier_writer, st);
    if (rc != 0) {
        snprintf(err, errlen, "cannot start the disk writer thread: %s", strerror(rc));
        disk_close(st->dk);
        st->dk = NULL;
        return -rc;
    }
    st->writer_running = 1;
    return 0;
}

void tier_stop(store *st) {
    if (st->writer_running) {
        pthread_mutex_lock(&st->mu);
        st->writer_stop = 1;
        pthread_cond_signal(&st->writer_cv);
        pthread_mutex_unlock(&st->mu);
        pthread_join(st->writer, NULL);
        st->writer_running = 0;
    }
    disk_close(st->dk);
    st->dk = NULL;
}
