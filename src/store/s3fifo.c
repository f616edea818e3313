/*
 * s3fifo.c — S3-FIFO eviction (Yang et al., SOSP 2023): a small FIFO S (about 10% of the
 * pool's bytes) where new objects start, a main FIFO M, and a ghost list of the keys
 * recently evicted from S. Objects read at least once while in S move to M; the rest
 * leave quickly, so a scan of one-time objects cannot flush the reused ones. M evicts in
 * FIFO order, giving objects read since their last pass another round (freq - 1).
 *
 * Mapping onto the store's policy interface (store_int.h): the policy holds only
 * evictable objects, so a pinned object leaves its queue and comes back at the head of
 * the same queue when its last pin goes (it was just read, so this only delays its
 * eviction, as the reads would have). Each pin counts as a read (freq saturates at 3).
 *
 * State kept in each record's upper `state` bits: bit 2 = in M, bits 3..4 = freq.
 * The ghost is a direct-mapped table of key hashes (a newer eviction overwrites an older
 * one in its slot), sized to the pool: an approximation of the paper's FIFO ghost that
 * needs no links and no per-entry allocation.
 *
 * Invariants: list 1 (head/tail) is S, list 2 (head2/tail2) is M; count/bytes of each list
 * match its objects; an object is on the list its M bit names.
 */
#include <errno.h>
#include <stdlib.h>

#include "store/store_int.h"

#define IN_MAIN 0x04u
#define FREQ_SHIFT 3
#define FREQ_MASK (3u << FREQ_SHIFT)

static inline unsigned freq(const obj *o) {
    return (o->state & FREQ_MASK) >> FREQ_SHIFT;
}

static inline void set_freq(obj *o, unsigned f) {
    o->state = (uint8_t)((o->state & ~FREQ_MASK) | (f << FREQ_SHIFT));
}

static plist list_of(policy *p, const obj *o) {
    return plist_of(p, (o->state & IN_MAIN) != 0);
}

static void push_head(policy *p, obj *o) {
    plist_insert_after(p, list_of(p, o), o, NULL);
}

static void unlink_obj(policy *p, obj *o) {
    plist_remove(p, list_of(p, o), o);
}

static int s3_init(policy *p) {
    p->head = p->tail = p->head2 = p->tail2 = ALLOC_NIL;
    p->count = p->count2 = p->bytes = p->bytes2 = 0;
    /* One ghost slot per 16 KiB of pool (64 units), 1 Ki .. 1 Mi slots. */
    uint64_t want = p->al->total / 64, n = 1024;
    while (n < want && n < (1u << 20))
        n <<= 1;
    p->ghost = calloc(n, sizeof(uint32_t));
    if (!p->ghost) return -ENOMEM;
    p->ghost_mask = (uint32_t)n - 1;
    return 0;
}

static void s3_fini(policy *p) {
    free(p->ghost);
    p->ghost = NULL;
}

/* Ghost entries store hash | 1 so that 0 means empty. */
static int ghost_take(policy *p, uint32_t h) {
    uint32_t *g = &p->ghost[h & p->ghost_mask];
    if (*g != (h | 1)) return 0;
    *g = 0;
    return 1;
}

static void s3_insert(policy *p, obj *o, int reused, const policy_hint *h) {
    (void)h;
    if (!reused) {
        o->state = (uint8_t)(o->state & 3);
        if (ghost_take(p, o->hash)) o->state |= IN_MAIN;
    }
    push_head(p, o);
}

static void s3_erase(policy *p, obj *o) {
    unlink_obj(p, o);
}

static void s3_access(policy *p, obj *o) {
    (void)p;
    if (freq(o) < 3) set_freq(o, freq(o) + 1);
}

static obj *s3_victim(policy *p) {
    uint64_t small_target = p->al->total / 10;
    /* Each pass either returns or moves an object S -> M (at most |S| times) or spends
     * one unit of an M object's freq (at most 3 |M| times), so this ends. */
    for (;;) {
        if (p->count == 0 && p->count2 == 0) return NULL;
        if (p->count2 == 0 || (p->count > 0 && p->bytes >= small_target)) {
            obj *o = plist_obj(p, p->tail);
            if (freq(o) >= 1) {
                unlink_obj(p, o);
                o->state |= IN_MAIN;
                set_freq(o, 0);
                push_head(p, o);
                continue;
            }
            p->ghost[o->hash & p->ghost_mask] = o->hash | 1;
            return o;
        }
        obj *o = plist_obj(p, p->tail2);
        if (freq(o) >= 1) {
            unlink_obj(p, o);
            set_freq(o, freq(o) - 1);
            push_head(p, o);
            continue;
        }
        return o;
    }
}

static uint64_t s3_meta_bytes(const policy *p) {
    return ((uint64_t)p->ghost_mask + 1) * sizeof(uint32_t);
}

static int s3_list_of(const obj *o) {
    return (o->state & IN_MAIN) ? 2 : 1;
}

const policy_ops policy_s3fifo = {
    .name = "s3fifo",
    .init = s3_init,
    .fini = s3_fini,
    .insert = s3_insert,
    .erase = s3_erase,
    .access = s3_access,
    .victim = s3_victim,
    .meta_bytes = s3_meta_bytes,
    .list_of = s3_list_of,
    .keeps_units = 1,
};
