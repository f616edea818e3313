/*
 * adapt.c — chain.c's chain-ordered segmented LRU, plus a ghost of recently evicted keys
 * that readmits a key straight into the protected list when it is saved again: the second
 * save of an evicted block is reuse shown, the same evidence as a read (the admission rule
 * of S3-FIFO and ARC, where a ghost hit enters the main or frequency list).
 *
 * Why: chain.c learns reuse only from reads, so a block that was evicted before its first
 * reuse comes back into probation like a new one and leaves again; on workloads where
 * most reuse is farther away than the cache reaches (conversation turns, tool calls), a
 * frequency-aware policy (S3-FIFO) beats it by keeping those blocks once they return.
 * With the ghost, a returning block joins protected, in chain order behind the batch's
 * previous block there (so a returning prefix comes back whole, parent before child), and
 * chain order keeps every other rule of chain.c (whose placement it calls): probation takes
 * new blocks behind their parent, a saved batch's last block at the eviction end; reads move
 * blocks to protected; victims come from probation's tail, else protected's.
 *
 * Two more differences from chain, both for workloads whose reuse is by popularity (the
 * shared tool schemas and repository contexts of agent and coding traces, where S3-FIFO's
 * frequency beats chain's recency by up to 40% at small capacities): each read counts a
 * use (at most USES_MAX, bits 3..4 of the record's state), and when protected overflows
 * its tail goes back to protected's head, spending one use, while it has uses left, and to
 * probation's head only when it has none (S3-FIFO's main queue, CLOCK's second chance; the
 * loop ends because each round spends a use, at most USES_MAX per read: amortised O(1));
 * and protected's share of the pool is chosen online (shadow.c): miniature simulations of
 * these rules on a hash sample of the keys, one per candidate share (3/8, 1/2, 3/4, 29/32,
 * 63/64), see every reference first, and protected takes the share of the one that hit
 * most lately. No fixed share wins everywhere (docs/TRACES.md): popularity (coding, chat)
 * wants nearly all of the pool protected, recency (tool use, Mooncake's traces) about half.
 * A share that falls leaves protected over its limit until the next insert into it trims
 * it (amortised O(1) again: an object leaves protected at most once for each entry or use).
 * ARC-style steering of the share by ghost hits (evicted unread: grow probation; evicted
 * after a read: grow protected, in ARC's ratio steps) was tried and lost on every trace.
 *
 * The ghost keeps, for each recent eviction, 32 bits: a 16-bit tag of the key's hash h
 * (store_ghost_hash; h >> 16 with its low bit set, so 0 means empty) and the 16-bit epoch
 * of the eviction. Entries live in sets of GHOST_WAYS, set (h & (sets - 1)); an eviction
 * takes an empty way or the oldest. An epoch is nmax / EPOCH_DIV evictions (nmax: the most
 * objects the policy has held at once) and an entry counts for GHOST_EPOCHS epochs, about
 * two cachefuls of evictions: a save of a key whose tag is in its set within that window
 * is a ghost hit, which clears the entry. The table is a power of two of at least
 * GHOST_MIN entries and GHOST_PER_OBJ per object of nmax, cleared when it grows (which
 * happens only while the pool first fills, before there is much to forget).
 * Metadata: 4 bytes an entry, 16 to 32 entries per object the pool has held at once,
 * so 64 to 128 bytes per object (test_store_adapt checks the bound), plus bits 2..4 of a
 * record's state (on protected, uses); no links beyond the record's own; plus the
 * miniatures, a fixed 320 KiB whatever the pool holds (shadow.c). (Fewer entries per object
 * keep fewer of the older evictions, whose return is the best sign of reuse; 8 per object loses
 * 2.4% of hits on Mooncake's synthetic trace at 1024 blocks, docs/TRACES.md.)
 *
 * src/trace/sim.c simulates exactly these rules (SIM_ADAPT), hashing the keys that
 * `tide replay` writes with the same function, so its ghost collides where this one does,
 * and calls the same shadow.c with the same references, so its share moves where this one
 * does; the tests replay traces through the store and check the two agree block for block.
 *
 * Work: O(1) per insert, erase, read and victim (GHOST_WAYS probes, the insert's set
 * prefetched when the put starts: adapt_prepare; a hash of the key and one multiply for the
 * miniatures' sample, whose own work is O(1) amortised per sampled key); the ghost's growth is
 * O(entries) once per doubling, amortised O(1) per insert. Invariants: as chain.c's (each
 * list's count and units match its objects, an object is on the list its bit names,
 * protected's units at most its limit after every insert into it); the ghost has at least
 * GHOST_PER_OBJ entries per object of nmax.
 */
#include <errno.h>
#include <stdlib.h>
#include <xxhash.h>

#include "store/shadow.h"
#include "store/store_int.h"

#define GHOST_MIN 1024u   /* entries */
#define GHOST_PER_OBJ 16u /* entries per object held, at least */
#define GHOST_WAYS 4u     /* entries per set */
#define GHOST_MAX (1u << 31)
#define EPOCH_DIV 16u    /* an epoch is nmax / EPOCH_DIV evictions */
#define GHOST_EPOCHS 32u /* an entry counts for this many epochs */
#define USES_SHIFT 3u    /* bits 3..4 of a record's state: reads not yet spent, 0..3 */
#define USES_MASK (3u << USES_SHIFT)
#define USES_MAX 3u

uint32_t store_ghost_hash(const void *key, size_t klen) {
    return (uint32_t)XXH3_64bits(key, klen);
}

static uint32_t ghost_hash(const obj *o) {
    return store_ghost_hash(o->key, o->klen);
}

static int adapt_init(policy *p) {
    chain_init(p);
    p->ghost_nmax = 0;
    p->ghost_left = 1;
    p->ghost_epoch = 0;
    p->ghost = calloc(GHOST_MIN, sizeof(uint32_t));
    p->shadow = malloc(sizeof(*p->shadow));
    if (!p->ghost || !p->shadow || shadow_init(p->shadow) < 0) {
        free(p->ghost);
        free(p->shadow);
        p->ghost = NULL;
        p->shadow = NULL;
        return -ENOMEM;
    }
    p->ghost_mask = GHOST_MIN - 1;
    return 0;
}

static void adapt_fini(policy *p) {
    free(p->ghost);
    p->ghost = NULL;
    if (p->shadow) shadow_fini(p->shadow);
    free(p->shadow);
    p->shadow = NULL;
}

static uint64_t adapt_meta_bytes(const policy *p) {
    return ((uint64_t)p->ghost_mask + 1) * sizeof(uint32_t) + sizeof(shadow) + shadow_bytes();
}

/* The set of hash h: GHOST_WAYS entries. */
static uint32_t *ghost_set(const policy *p, uint32_t h) {
    uint32_t sets = (p->ghost_mask + 1) / GHOST_WAYS;
    return &p->ghost[(h & (sets - 1)) * GHOST_WAYS];
}

static uint32_t ghost_tag(uint32_t h) {
    return (h >> 16) | 1;
}

/* Epochs since entry e was written. */
static uint32_t ghost_age(const policy *p, uint32_t e) {
    return (p->ghost_epoch - e) & 0xFFFF;
}

/* The policy is about to hold n objects: keep at least GHOST_PER_OBJ entries per object of
 * the most it has held. When memory is short the ghost stays as it is: the policy still
 * works, with a shorter memory. */
static void ghost_fit(policy *p, uint64_t n) {
    if (n > p->ghost_nmax) p->ghost_nmax = n;
    uint64_t slots = (uint64_t)p->ghost_mask + 1, want = slots;
    while (want < GHOST_MAX && n * GHOST_PER_OBJ > want)
        want *= 2;
    if (want == slots) return;
    uint32_t *g = calloc(want, sizeof(uint32_t));
    if (!g) return;
    free(p->ghost);
    p->ghost = g;
    p->ghost_mask = (uint32_t)(want - 1);
}

/* A put of key is starting: its insert will probe the key's ghost set, a cache miss on a
 * large pool; start the load now so it overlaps the index lookup and the eviction. */
static void adapt_prepare(policy *p, const void *key, size_t klen) {
    __builtin_prefetch(ghost_set(p, store_ghost_hash(key, klen)), 1);
}

/* Remember an evicted key, then count the eviction towards the epoch. */
static void ghost_add(policy *p, uint32_t h) {
    uint32_t *set = ghost_set(p, h), *w = &set[0];
    for (unsigned i = 0; i < GHOST_WAYS; i++) { /* an empty way, else the oldest */
        if (!set[i]) {
            w = &set[i];
            break;
        }
        if (ghost_age(p, set[i]) > ghost_age(p, *w)) w = &set[i];
    }
    *w = ghost_tag(h) << 16 | (p->ghost_epoch & 0xFFFF);
    if (--p->ghost_left == 0) {
        p->ghost_epoch++;
        p->ghost_left = p->ghost_nmax / EPOCH_DIV ? p->ghost_nmax / EPOCH_DIV : 1;
    }
}

/* 1 (and the entry forgotten) if the ghost remembers h within its window. */
static int ghost_take(policy *p, uint32_t h) {
    uint32_t *set = ghost_set(p, h);
    for (unsigned i = 0; i < GHOST_WAYS; i++)
        if (set[i] >> 16 == ghost_tag(h) && ghost_age(p, set[i]) < GHOST_EPOCHS) {
            set[i] = 0;
            return 1;
        }
    return 0;
}

static unsigned uses(const obj *o) {
    return (o->state & USES_MASK) >> USES_SHIFT;
}

static void set_uses(obj *o, unsigned n) {
    o->state = (uint8_t)((o->state & ~USES_MASK) | (n << USES_SHIFT));
}

/* Protected's tail gets another round at its head while it has uses to spend (one each
 * round): the frequency half of the policy (S3-FIFO's main queue, CLOCK's second chance). */
static int spend_use(obj *o) {
    unsigned n = uses(o);
    if (!n) return 0;
    set_uses(o, n - 1);
    return 1;
}

/* Protected's share of the pool is the one the miniatures chose (shadow.c). */
static void adapt_protect(policy *p, obj *o, const obj *after) {
    chain_link_prot(p, o, after);
    chain_trim(p, (uint64_t)p->al->total * shadow_share(p->shadow) / SHADOW_SHARE_DEN, spend_use);
}

/* chain's placement, except that a key the ghost remembers (evicted, then saved again: its
 * reuse is shown) goes straight into protected; a read counts a use (at most USES_MAX) and
 * goes to protected, whose share the miniatures choose and whose overflow spends uses
 * before it goes to probation. */
static void adapt_insert(policy *p, obj *o, int reused, const policy_hint *h) {
    const obj *after = h ? h->after : NULL;
    uint32_t gh = ghost_hash(o);
    if (!reused) ghost_fit(p, p->count + p->count2 + 1);
    /* The miniatures see every reference first, so a choice they make now applies to it. */
    shadow_ref(p->shadow, gh, reused, !h || h->first, h && h->tail, p->ghost_nmax);
    if (!reused) {
        set_uses(o, 0);
        if (ghost_take(p, gh)) {
            adapt_protect(p, o, after);
            return;
        }
        chain_insert(p, o, 0, h);
        return;
    }
    if (uses(o) < USES_MAX) set_uses(o, uses(o) + 1);
    if (after && chain_list_of(after) == 1) {
        /* The batch's previous read went back to probation: this deeper block follows it
         * (chain_insert's rule for a read whose predecessor was demoted). */
        chain_insert(p, o, 1, h);
        return;
    }
    adapt_protect(p, o, after);
}

/* The store evicts every victim this returns (store.c, do_make_room), so the victim's key
 * enters the ghost here. */
static obj *adapt_victim(policy *p) {
    obj *v = chain_victim(p);
    if (v) ghost_add(p, ghost_hash(v));
    return v;
}

const policy_ops policy_adapt = {
    .name = "adapt",
    .init = adapt_init,
    .fini = adapt_fini,
    .insert = adapt_insert,
    .erase = chain_erase,
    .access = chain_access,
    .victim = adapt_victim,
    .meta_bytes = adapt_meta_bytes,
    .list_of = chain_list_of,
    .keeps_units = 1,
    .prepare = adapt_prepare,
};
