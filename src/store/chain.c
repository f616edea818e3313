/*
 * chain.c — chain-aware eviction for prefix caches: a segmented LRU that keeps the blocks
 * of a prefix chain in chain order, so a chain is evicted from its tail and its head stays.
 *
 * What only a prefix cache knows: the keys a connector saves (or loads) in one batch are
 * consecutive blocks of one prompt, each the parent of the next, and the last block of a
 * saved prompt is its own, unshared tail (a question, a partial block), rarely reused.
 * Keys stay opaque; the chain order reaches the policy as a hint per insert (store.h's
 * store_chain, carried through a batch by the caller):
 *
 *   - after: the object inserted just before in the same batch. The new one goes right
 *     behind it in the same list, not at the list's head, so within a batch the first
 *     block is the most recent and the last the least: a chain leaves from its tail, and a
 *     block's parent outlives it. A block whose parent is gone can never be part of a hit
 *     (a hit is a prefix), so this order evicts such blocks first instead of stranding a
 *     whole chain behind its evicted head, which is what LRU does (it evicts a chain's
 *     first block first, because it was touched first).
 *   - tail: the batch's last key, when the batch has two keys or more (a key put alone is
 *     not known to end a chain). A new object so marked goes to the eviction end of
 *     probation: it is evicted next unless read before.
 *
 * Reuse shown protects a chain: list 1 (head/tail) is probation, where new objects start;
 * list 2 (head2/tail2) is protected, where an object goes when a read of it ends (its last
 * pin released), in chain order again (a batch of reads is a prefix hit). Protected holds
 * at most PROTECT_NUM/PROTECT_DEN of the pool's units; its least recent objects are moved
 * to probation's head when it is over, and once a batch's read has been moved so, the
 * batch's later (deeper) reads follow it to probation instead of pushing out its head.
 * Victims come from probation's tail, or from protected's when probation is empty. Every
 * operation is O(1), the overflow loop amortised (an object leaves protected at most once
 * for each time it entered): no scan, no ghost.
 *
 * Measured on Mooncake's synthetic trace (README, "Trace replay"): this is the default.
 * src/trace/sim.c simulates exactly these rules (SIM_CHAIN); the tests replay traces
 * through the store and check the two agree block for block.
 *
 * State: bit 2 of a record's state = on the protected list. Invariants: each list's
 * count and units match its objects; an object is on the list its bit names; protected's
 * units are at most the limit after every insert.
 */
#include "store/store_int.h"

#define IN_PROT 0x04u
#define PROTECT_NUM 2u /* protected holds at most 2/5 of the pool */
#define PROTECT_DEN 5u

static int on_prot(const obj *o) {
    return (o->state & IN_PROT) != 0;
}

/* Link o into the list its bit names: after `after` when that is on the same list, else at
 * the head; or at the tail when at_tail. */
static void link_obj(policy *p, obj *o, const obj *after, int at_tail) {
    plist q = plist_of(p, on_prot(o));
    if (at_tail && *q.tail != ALLOC_NIL) after = plist_obj(p, *q.tail);
    if (after && on_prot(after) != on_prot(o)) after = NULL;
    plist_insert_after(p, q, o, after);
}

static void unlink_obj(policy *p, obj *o) {
    plist_remove(p, plist_of(p, on_prot(o)), o);
}

int chain_init(policy *p) {
    p->head = p->tail = p->head2 = p->tail2 = ALLOC_NIL;
    p->count = p->count2 = p->bytes = p->bytes2 = 0;
    return 0;
}

static void chain_fini(policy *p) {
    (void)p;
}

static uint64_t chain_meta_bytes(const policy *p) {
    (void)p;
    return 0;
}

void chain_link_prot(policy *p, obj *o, const obj *after) {
    o->state |= IN_PROT;
    link_obj(p, o, after, 0);
}

void chain_trim(policy *p, uint64_t limit, int (*second_chance)(obj *)) {
    while (p->bytes2 > limit) {
        obj *v = plist_obj(p, p->tail2);
        unlink_obj(p, v);
        if (!second_chance || !second_chance(v)) v->state = (uint8_t)(v->state & ~IN_PROT);
        link_obj(p, v, NULL, 0);
    }
}

void chain_protect(policy *p, obj *o, const obj *after) {
    chain_link_prot(p, o, after);
    chain_trim(p, (uint64_t)p->al->total * PROTECT_NUM / PROTECT_DEN, NULL);
}

void chain_insert(policy *p, obj *o, int reused, const policy_hint *h) {
    const obj *after = h ? h->after : NULL;
    if (!reused) {
        o->state = (uint8_t)(o->state & ~IN_PROT);
        link_obj(p, o, after, h && h->tail);
        return;
    }
    if (after && !on_prot(after)) {
        /* The batch's previous read was moved back to probation (protected overflowed):
         * this deeper block follows it there, so the batch's head keeps its place. */
        o->state = (uint8_t)(o->state & ~IN_PROT);
        link_obj(p, o, after, 0);
        return;
    }
    chain_protect(p, o, after);
}

void chain_erase(policy *p, obj *o) {
    unlink_obj(p, o);
}

void chain_access(policy *p, obj *o) {
    (void)p;
    (void)o;
}

obj *chain_victim(policy *p) {
    if (p->tail != ALLOC_NIL) return plist_obj(p, p->tail);
    return p->tail2 == ALLOC_NIL ? NULL : plist_obj(p, p->tail2);
}

int chain_list_of(const obj *o) {
    return on_prot(o) ? 2 : 1;
}

const policy_ops policy_chain = {
    .name = "chain",
    .init = chain_init,
    .fini = chain_fini,
    .insert = chain_insert,
    .erase = chain_erase,
    .access = chain_access,
    .victim = chain_victim,
    .meta_bytes = chain_meta_bytes,
    .list_of = chain_list_of,
    .keeps_units = 1,
};
