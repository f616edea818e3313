/*
 * sim.c — an offline cache simulator for traces (trace.h): the hit rates of an infinite
 * cache, of Belady's optimum, of LRU and of S3-FIFO for a cache of N equal-size blocks.
 *
 * Every policy runs the protocol of trace.h (the one `tide replay` runs against a store),
 * so the LRU figures here are exactly what an LRU store of N blocks reports:
 *   - a request's hit count is the length of the longest held prefix of its blocks;
 *   - the hit blocks are then used in order;
 *   - the remaining blocks are written in order; one already held is not touched.
 *
 * Per-block state lives in arrays indexed by the trace's dense block ids. Policies:
 *
 *   infinite  nothing is evicted; misses are the compulsory ones (first references).
 *   belady    on a full cache, evict the held block whose next reference is farthest in
 *             the future (never again counts as farthest). Next references are computed
 *             up front; the held blocks sit in a max-heap on them. The block being
 *             written is always admitted (demand paging, like the store, which stores every
 *             put): Belady's MIN is the optimum among policies that do so.
 *   lru       one list, used blocks to the head, the tail evicted.
 *   s3fifo    a small FIFO S (a tenth of the blocks), a main FIFO M and a ghost G of ids
 *             recently evicted from S (as many as M holds). New blocks enter S, or M when
 *             G remembers them; a use raises a block's frequency (at most 3) and moves
 *             nothing. Evicting: from S while it holds its tenth (or M is empty): the tail
 *             goes to M if it was used since it came in, else out (into G); otherwise
 *             from M: the tail goes back to M's head with frequency - 1 if it is above 0,
 *             else out. These are the rules of src/store/s3fifo.c, with an exact FIFO ghost
 *             where the store keeps a hashed approximation, and FIFO order kept on a use
 *             where the store (which takes a block off its queue while a reader pins it)
 *             puts the block back at its queue's head.
 *   arc       ARC: T1 (blocks used once since they came in) and T2 (used again), with
 *             exact ghost lists B1 and B2 of blocks evicted from each; a write of a block
 *             in B1 grows T1's target p, one in B2 shrinks it (the paper's rules, in
 *             blocks, with integer steps).
 *   admit     LRU with reuse-count admission (as vLLM's offloading filters blocks by how
 *             often they were seen): while the cache is full, a block is stored only if
 *             the exact ghost of the last `capacity` blocks refused or evicted holds it;
 *             otherwise the write is refused and the block enters the ghost.
 *   chain     src/store/chain.c: probation (list 1) and protected (list 2, at most 2/5 of
 *             the blocks). Writes go to probation right behind the previous write of the
 *             same batch (at the head for a batch's first), the last block of a batch of
 *             two or more to probation's eviction end; a use moves a block to protected, behind the
 *             previous use of the batch, and protected's overflow goes to probation's head;
 *             once a batch's use has gone back so, its later uses follow it into probation.
 *             Victims: probation's tail, else protected's.
 *   chainarc  ARC with chain's placement: a batch's blocks follow each other in T1 or T2,
 *             the last block of a write batch at T1's eviction end.
 *   adapt     src/store/adapt.c: chain's placement, reads counted and spent as second
 *             rounds in protected, a hashed ghost of evictions whose keys enter protected
 *             when saved again (below), and protected's share chosen by the miniature
 *             simulations of src/store/shadow.c, the store's own code, fed the same
 *             references in the same order.
 *
 * The chain-aware rules keep a cursor, the block the batch placed last: it is used only
 * while that block is still on the list being placed into, as the store checks it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/shadow.h"
#include "store/store.h"
#include "trace/trace.h"

#define NIL UINT32_MAX
#define NEVER SIZE_MAX /* next reference of a block that is not referenced again */

static const char *const names[SIM_NPOLICIES] = {"infinite", "belady", "lru",      "s3fifo", "arc",
                                                 "admit",    "chain",  "chainarc", "adapt"};

const char *sim_policy_name(int policy) {
    return policy >= 0 && policy < SIM_NPOLICIES ? names[policy] : "unknown";
}

typedef struct list {
    uint32_t head, tail;
    uint64_t count;
} list;

typedef struct sim {
    const trace *t;
    int policy;
    uint64_t cap;
    uint64_t held;
    uint8_t *where; /* per block: 0 = not held, 1 = held (S, T1, probation), 2 = in M (T2,
                       protected); 3 and 4 = not held, in ARC's ghost B1 or B2 */
    /* lru, s3fifo, arc, admit, chain, chainarc */
    uint32_t *prev, *next;
    list q[5];      /* [1] = the LRU list, S, T1 or probation, [2] = M, T2 or protected, [3] = B1,
                       [4] = B2 */
    uint32_t cur;   /* chain cursor: the block this batch placed last, or NIL */
    uint64_t arc_p; /* ARC's target size of T1 */
    uint64_t prot_max;
    uint8_t *freq;
    uint64_t s_target;
    uint64_t *ghost_seq; /* 0, or the ghost insertion number of the block's eviction */
    uint64_t ghost_next, ghost_cap;
    /* belady */
    size_t *next_ref; /* per reference: the position of the same block's next reference */
    size_t *key;      /* per block: the next reference of a held block */
    uint32_t *heap, *hpos;
    size_t hlen;
    uint64_t evictions, refused;
    /* adapt */
    uint32_t *ghash; /* per block: store_ghost_hash of its replay key */
    uint32_t *gtab;  /* the ghost's entries */
    uint64_t gslots, nmax, epoch_left;
    uint32_t epoch;
    shadow *sh; /* the miniatures that choose protected's share (adapt.c's, the same code) */
    int first;  /* the next reference is its batch's first */
} sim;

static inline int held(const sim *s, uint32_t b) {
    return s->where[b] == 1 || s->where[b] == 2;
}

/* ---- lists ---------------------------------------------------------------------------- */

static void push_head(sim *s, int qi, uint32_t b) {
    list *q = &s->q[qi];
    s->prev[b] = NIL;
    s->next[b] = q->head;
    if (q->head != NIL)
        s->prev[q->head] = b;
    else
        q->tail = b;
    q->head = b;
    q->count++;
    s->where[b] = (uint8_t)qi;
}

/* b goes right behind a (on list qi). */
static void insert_after(sim *s, int qi, uint32_t a, uint32_t b) {
    list *q = &s->q[qi];
    s->prev[b] = a;
    s->next[b] = s->next[a];
    if (s->next[a] != NIL)
        s->prev[s->next[a]] = b;
    else
        q->tail = b;
    s->next[a] = b;
    q->count++;
    s->where[b] = (uint8_t)qi;
}

static void push_tail(sim *s, int qi, uint32_t b) {
    if (s->q[qi].tail == NIL)
        push_head(s, qi, b);
    else
        insert_after(s, qi, s->q[qi].tail, b);
}

/* Chain placement: behind the batch's previous block when it is still on list qi, else at
 * the head; b becomes the cursor. */
static void place(sim *s, int qi, uint32_t b) {
    if (s->cur != NIL && s->where[s->cur] == qi)
        insert_after(s, qi, s->cur, b);
    else
        push_head(s, qi, b);
    s->cur = b;
}

static void unlink_block(sim *s, uint32_t b) {
    list *q = &s->q[s->where[b]];
    if (s->prev[b] != NIL)
        s->next[s->prev[b]] = s->next[b];
    else
        q->head = s->next[b];
    if (s->next[b] != NIL)
        s->prev[s->next[b]] = s->prev[b];
    else
        q->tail = s->prev[b];
    q->count--;
    s->where[b] = 0;
}

/* ---- the Belady heap: a max-heap of held blocks on key[] ------------------------------ */

static void heap_swap(sim *s, size_t i, size_t j) {
    uint32_t a = s->heap[i], b = s->heap[j];
    s->heap[i] = b;
    s->heap[j] = a;
    s->hpos[b] = (uint32_t)i;
    s->hpos[a] = (uint32_t)j;
}

static void heap_up(sim *s, size_t i) {
    while (i > 0 && s->key[s->heap[(i - 1) / 2]] < s->key[s->heap[i]]) {
        heap_swap(s, i, (i - 1) / 2);
        i = (i - 1) / 2;
    }
}

static void heap_down(sim *s, size_t i) {
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < s->hlen && s->key[s->heap[l]] > s->key[s->heap[m]]) m = l;
        if (r < s->hlen && s->key[s->heap[r]] > s->key[s->heap[m]]) m = r;
        if (m == i) return;
        heap_swap(s, i, m);
        i = m;
    }
}

static void heap_push(sim *s, uint32_t b) {
    s->heap[s->hlen] = b;
    s->hpos[b] = (uint32_t)s->hlen;
    s->hlen++;
    heap_up(s, s->hlen - 1);
}

static uint32_t heap_pop(sim *s) {
    uint32_t top = s->heap[0];
    s->hlen--;
    if (s->hlen) {
        s->heap[0] = s->heap[s->hlen];
        s->hpos[s->heap[0]] = 0;
        heap_down(s, 0);
    }
    return top;
}

/* ---- policies ------------------------------------------------------------------------- */

static int ghost_has(const sim *s, uint32_t b) {
    return s->ghost_seq[b] && s->ghost_next - s->ghost_seq[b] < s->ghost_cap;
}

/* S3-FIFO: evict one block (the loop is bounded: each pass moves a block S -> M, at most
 * |S| times, or spends one unit of an M block's frequency, at most 3 |M| times). */
static void s3_evict(sim *s) {
    for (;;) {
        list *S = &s->q[1], *M = &s->q[2];
        if (S->count == 0 && M->count == 0) return;
        if (M->count == 0 || (S->count > 0 && S->count >= s->s_target)) {
            uint32_t b = S->tail;
            unlink_block(s, b);
            if (s->freq[b] >= 1) {
                s->freq[b] = 0;
                push_head(s, 2, b);
                continue;
            }
            s->ghost_seq[b] = ++s->ghost_next;
        } else {
            uint32_t b = M->tail;
            unlink_block(s, b);
            if (s->freq[b] >= 1) {
                s->freq[b]--;
                push_head(s, 2, b);
                continue;
            }
        }
        s->held--;
        s->evictions++;
        return;
    }
}

/* ARC's REPLACE: evict from T1 into B1 or from T2 into B2. */
static void arc_replace(sim *s, int in_b2) {
    list *T1 = &s->q[1];
    uint32_t b;
    int ghost;
    if (T1->count > 0 && (T1->count > s->arc_p || (in_b2 && T1->count == s->arc_p))) {
        b = T1->tail;
        ghost = 3;
    } else {
        b = s->q[2].tail;
        ghost = 4;
    }
    unlink_block(s, b);
    push_head(s, ghost, b);
    s->held--;
    s->evictions++;
}

static uint64_t max1(uint64_t a, uint64_t b) {
    uint64_t d = b ? a / b : a;
    return d ? d : 1;
}

/* ARC on a write of b (not held); chain placement when `chain`. */
static void arc_insert(sim *s, uint32_t b, int chain, int last) {
    uint64_t c = s->cap;
    list *T1 = &s->q[1], *T2 = &s->q[2], *B1 = &s->q[3], *B2 = &s->q[4];
    if (s->where[b] == 3 || s->where[b] == 4) {
        if (s->where[b] == 3) {
            uint64_t d = max1(B2->count, B1->count);
            s->arc_p = s->arc_p + d < c ? s->arc_p + d : c;
        } else {
            uint64_t d = max1(B1->count, B2->count);
            s->arc_p = s->arc_p > d ? s->arc_p - d : 0;
        }
        int in_b2 = s->where[b] == 4;
        unlink_block(s, b);
        if (s->held >= c) arc_replace(s, in_b2);
        if (chain)
            place(s, 2, b);
        else
            push_head(s, 2, b);
        return;
    }
    uint64_t total = T1->count + T2->count + B1->count + B2->count;
    if (T1->count + B1->count >= c) {
        if (T1->count < c) {
            unlink_block(s, B1->tail);
            if (s->held >= c) arc_replace(s, 0);
        } else {
            unlink_block(s, T1->tail);
            s->held--;
            s->evictions++;
        }
    } else if (total >= c) {
        if (total >= 2 * c) unlink_block(s, B2->tail);
        if (s->held >= c) arc_replace(s, 0);
    }
    if (chain && last)
        push_tail(s, 1, b);
    else if (chain)
        place(s, 1, b);
    else
        push_head(s, 1, b);
}

/* chain: a use moves b to protected, whose overflow goes back to probation's head. */
static void chain_use(sim *s, uint32_t b) {
    unlink_block(s, b);
    if (s->cur != NIL && s->where[s->cur] == 1) { /* the batch's previous use went back */
        place(s, 1, b);
        return;
    }
    place(s, 2, b);
    while (s->q[2].count > s->prot_max) {
        uint32_t v = s->q[2].tail;
        unlink_block(s, v);
        push_head(s, 1, v);
    }
}

/* adapt (src/store/adapt.c): chain's rules with protected's share from shadow.c, reads
 * counted (at most 3 uses a block) and spent as second rounds in protected, and a ghost of
 * evicted keys whose save again enters protected. The ghost is adapt.c's, slot for slot: sets of
 * ADAPT_WAYS 32-bit entries (a 16-bit tag of the key's hash, with its low bit set, and the 16-bit
 * epoch of the eviction), ADAPT_GHOST_PER_OBJ entries or more per block held (a power of two, at
 * least ADAPT_GHOST_MIN, cleared when it grows); an epoch is the most blocks held /
 * ADAPT_EPOCH_DIV evictions, and an entry counts for ADAPT_EPOCHS epochs. */
#define ADAPT_GHOST_MIN 1024u
#define ADAPT_GHOST_PER_OBJ 16u
#define ADAPT_WAYS 4u
#define ADAPT_EPOCH_DIV 16u
#define ADAPT_EPOCHS 32u

#define ADAPT_USES_MAX 3u

/* Protected's overflow: its tail goes back to protected's head while it has uses to spend
 * (one a round), else to probation's head. */
static void adapt_trim(sim *s) {
    while (s->q[2].count > s->prot_max) {
        uint32_t v = s->q[2].tail;
        unlink_block(s, v);
        if (s->freq[v]) {
            s->freq[v]--;
            push_head(s, 2, v);
        } else {
            push_head(s, 1, v);
        }
    }
}

/* Every reference goes to the miniatures first (as adapt.c's insert does), which set
 * protected's share for it and after. */
static void adapt_steer(sim *s, uint32_t b, int read, int last) {
    uint32_t share = shadow_ref(s->sh, s->ghash[b], read, s->first, last, s->nmax);
    s->first = 0;
    s->prot_max = s->cap * share / SHADOW_SHARE_DEN;
}

/* A read: one more use (at most ADAPT_USES_MAX), then chain's move to protected. */
static void adapt_use(sim *s, uint32_t b) {
    adapt_steer(s, b, 1, 0);
    if (s->freq[b] < ADAPT_USES_MAX) s->freq[b]++;
    unlink_block(s, b);
    if (s->cur != NIL && s->where[s->cur] == 1) { /* the batch's previous use went back */
        place(s, 1, b);
        return;
    }
    place(s, 2, b);
    adapt_trim(s);
}

static uint32_t *adapt_set(const sim *s, uint32_t h) {
    return &s->gtab[(h & (s->gslots / ADAPT_WAYS - 1)) * ADAPT_WAYS];
}

static uint32_t adapt_age(const sim *s, uint32_t e) {
    return (s->epoch - e) & 0xFFFF;
}

static void adapt_fit(sim *s, uint64_t n) {
    if (n > s->nmax) s->nmax = n;
    uint64_t want = s->gslots;
    while (want < (1u << 31) && n * ADAPT_GHOST_PER_OBJ > want)
        want *= 2;
    if (want == s->gslots) return;
    uint32_t *t = calloc(want, sizeof(*t));
    if (!t) return;
    free(s->gtab);
    s->gtab = t;
    s->gslots = want;
}

static void adapt_evict(sim *s) {
    uint32_t v = s->q[1].count ? s->q[1].tail : s->q[2].tail;
    s->freq[v] = 0;
    unlink_block(s, v);
    s->held--;
    s->evictions++;
    uint32_t h = s->ghash[v], *set = adapt_set(s, h), *w = &set[0];
    for (unsigned i = 0; i < ADAPT_WAYS; i++) { /* an empty way, else the oldest */
        if (!set[i]) {
            w = &set[i];
            break;
        }
        if (adapt_age(s, set[i]) > adapt_age(s, *w)) w = &set[i];
    }
    *w = ((h >> 16) | 1) << 16 | (s->epoch & 0xFFFF);
    if (--s->epoch_left == 0) {
        s->epoch++;
        s->epoch_left = s->nmax / ADAPT_EPOCH_DIV ? s->nmax / ADAPT_EPOCH_DIV : 1;
    }
}

static void adapt_insert(sim *s, uint32_t b, int last) {
    if (s->held >= s->cap) adapt_evict(s);
    adapt_fit(s, s->held + 1);
    adapt_steer(s, b, 0, last);
    uint32_t h = s->ghash[b], *set = adapt_set(s, h);
    for (unsigned i = 0; i < ADAPT_WAYS; i++)
        if (set[i] >> 16 == ((h >> 16) | 1) && adapt_age(s, set[i]) < ADAPT_EPOCHS) {
            set[i] = 0; /* evicted and saved again: reuse shown */
            place(s, 2, b);
            adapt_trim(s);
            return;
        }
    if (last)
        push_tail(s, 1, b);
    else
        place(s, 1, b);
}

/* A use of held block b at reference position k. */
static void use(sim *s, uint32_t b, size_t k) {
    switch (s->policy) {
    case SIM_BELADY:
        s->key[b] = s->next_ref[k];
        heap_down(s, s->hpos[b]);
        heap_up(s, s->hpos[b]);
        break;
    case SIM_LRU:
        unlink_block(s, b);
        push_head(s, 1, b);
        break;
    case SIM_S3FIFO:
        if (s->freq[b] < 3) s->freq[b]++;
        break;
    case SIM_ARC:
        unlink_block(s, b);
        push_head(s, 2, b);
        break;
    case SIM_CHAINARC:
        unlink_block(s, b);
        place(s, 2, b);
        break;
    case SIM_CHAIN:
        chain_use(s, b);
        break;
    case SIM_ADAPT:
        adapt_use(s, b);
        break;
    case SIM_ADMIT:
        unlink_block(s, b);
        push_head(s, 1, b);
        break;
    default:
        break;
    }
}

/* A write of block b at reference position k (b is not held); last: the write batch's
 * last block. Returns 1 when b is now held, 0 when the policy refused it. */
static int insert(sim *s, uint32_t b, size_t k, int last) {
    switch (s->policy) {
    case SIM_BELADY:
        if (s->held >= s->cap) {
            s->where[heap_pop(s)] = 0;
            s->held--;
            s->evictions++;
        }
        s->key[b] = s->next_ref[k];
        heap_push(s, b);
        s->where[b] = 1;
        break;
    case SIM_LRU:
        if (s->held >= s->cap) {
            unlink_block(s, s->q[1].tail);
            s->held--;
            s->evictions++;
        }
        push_head(s, 1, b);
        break;
    case SIM_S3FIFO:
        while (s->held >= s->cap) {
            uint64_t before = s->held;
            s3_evict(s);
            if (s->held == before) break; /* nothing evictable: cannot happen while held */
        }
        s->freq[b] = 0;
        if (ghost_has(s, b)) {
            s->ghost_seq[b] = 0;
            push_head(s, 2, b);
        } else {
            push_head(s, 1, b);
        }
        break;
    case SIM_ARC:
    case SIM_CHAINARC:
        arc_insert(s, b, s->policy == SIM_CHAINARC, last);
        break;
    case SIM_ADMIT:
        if (s->held >= s->cap) {
            if (!ghost_has(s, b)) {
                s->ghost_seq[b] = ++s->ghost_next;
                s->refused++;
                return 0;
            }
            uint32_t v = s->q[1].tail;
            unlink_block(s, v);
            s->ghost_seq[v] = ++s->ghost_next;
            s->held--;
            s->evictions++;
        }
        s->ghost_seq[b] = 0;
        push_head(s, 1, b);
        break;
    case SIM_CHAIN:
        if (s->held >= s->cap) {
            uint32_t v = s->q[1].count ? s->q[1].tail : s->q[2].tail;
            unlink_block(s, v);
            s->held--;
            s->evictions++;
        }
        if (last)
            push_tail(s, 1, b);
        else
            place(s, 1, b);
        break;
    case SIM_ADAPT:
        adapt_insert(s, b, last);
        break;
    default:
        s->where[b] = 1;
        break;
    }
    s->held++;
    return 1;
}

static void sim_free(sim *s) {
    free(s->where);
    free(s->prev);
    free(s->next);
    free(s->freq);
    free(s->ghost_seq);
    free(s->next_ref);
    free(s->key);
    free(s->heap);
    free(s->hpos);
    free(s->gtab);
    free(s->ghash);
    if (s->sh) shadow_fini(s->sh);
    free(s->sh);
}

static int sim_init(sim *s, const trace *t, int policy, uint64_t cap) {
    memset(s, 0, sizeof(*s));
    s->t = t;
    s->policy = policy;
    s->cap = cap;
    size_t nb = t->ndistinct ? t->ndistinct : 1;
    s->where = calloc(nb, 1);
    if (!s->where) return -ENOMEM;
    for (int i = 0; i < 5; i++)
        s->q[i] = (list){NIL, NIL, 0};
    s->cur = NIL;
    s->prot_max = cap * 2 / 5; /* chain.c's PROTECT_NUM / PROTECT_DEN */
    if (policy != SIM_INFINITE && policy != SIM_BELADY) {
        s->prev = malloc(nb * sizeof(*s->prev));
        s->next = malloc(nb * sizeof(*s->next));
        if (!s->prev || !s->next) return -ENOMEM;
    }
    if (policy == SIM_S3FIFO) {
        s->freq = calloc(nb, 1);
        s->ghost_seq = calloc(nb, sizeof(*s->ghost_seq));
        if (!s->freq || !s->ghost_seq) return -ENOMEM;
        s->s_target = cap / 10;
        s->ghost_cap = cap - s->s_target ? cap - s->s_target : 1;
    }
    if (policy == SIM_ADMIT) {
        s->ghost_seq = calloc(nb, sizeof(*s->ghost_seq));
        if (!s->ghost_seq) return -ENOMEM;
        s->ghost_cap = cap;
    }
    if (policy == SIM_ADAPT) {
        s->gslots = ADAPT_GHOST_MIN;
        s->epoch_left = 1;
        s->gtab = calloc(s->gslots, sizeof(*s->gtab));
        s->ghash = malloc(nb * sizeof(*s->ghash));
        s->freq = calloc(nb, 1);
        s->sh = calloc(1, sizeof(*s->sh));
        if (!s->gtab || !s->ghash || !s->freq || !s->sh) return -ENOMEM;
        if (shadow_init(s->sh) < 0) {
            free(s->sh);
            s->sh = NULL;
            return -ENOMEM;
        }
        s->prot_max = cap * shadow_share(s->sh) / SHADOW_SHARE_DEN;
        for (size_t k = 0; k < t->nrefs; k++) {
            char key[32];
            int len = snprintf(key, sizeof(key), TRACE_KEY_FMT, t->hash_ids[k]);
            s->ghash[t->ids[k]] = store_ghost_hash(key, (size_t)len);
        }
    }
    if (policy == SIM_BELADY) {
        size_t nr = t->nrefs ? t->nrefs : 1;
        s->next_ref = malloc(nr * sizeof(*s->next_ref));
        s->key = malloc(nb * sizeof(*s->key));
        s->heap = malloc(nb * sizeof(*s->heap));
        s->hpos = malloc(nb * sizeof(*s->hpos));
        if (!s->next_ref || !s->key || !s->heap || !s->hpos) return -ENOMEM;
        /* Walk backwards keeping each block's latest-seen (that is, next) position. */
        for (size_t b = 0; b < nb; b++)
            s->key[b] = NEVER;
        for (size_t k = t->nrefs; k-- > 0;) {
            uint32_t b = t->ids[k];
            s->next_ref[k] = s->key[b];
            s->key[b] = k;
        }
    }
    return 0;
}

int sim_run(const trace *t, int policy, uint64_t capacity, sim_result *out) {
    if (policy < 0 || policy >= SIM_NPOLICIES) return -EINVAL;
    if (policy != SIM_INFINITE && capacity == 0) return -EINVAL;
    if (policy == SIM_INFINITE) capacity = UINT64_MAX;
    sim s;
    int rc = sim_init(&s, t, policy, capacity);
    if (rc) {
        sim_free(&s);
        return rc;
    }
    sim_result r = {.requests = t->nreqs, .tokens = t->tokens, .compulsory = t->ndistinct};
    for (size_t q = 0; q < t->nreqs; q++) {
        const trace_req *rq = &t->reqs[q];
        const uint32_t *ids = t->ids + rq->first;
        uint32_t hit = 0;
        while (hit < rq->nblocks && held(&s, ids[hit]))
            hit++;
        s.cur = NIL; /* the batch of reads */
        s.first = 1;
        for (uint32_t i = 0; i < hit; i++) {
            use(&s, ids[i], rq->first + i);
            r.hit_tokens += trace_block_tokens(t, rq, i);
        }
        s.cur = NIL; /* the batch of writes */
        s.first = 1;
        for (uint32_t i = hit; i < rq->nblocks; i++) {
            uint32_t b = ids[i];
            if (held(&s, b)) {
                /* Held but past the prefix: the write is a duplicate and no use, but the
                 * reference is spent, so Belady's view of its next use moves on. */
                if (policy == SIM_BELADY) use(&s, b, rq->first + i);
                continue;
            }
            /* The write batch is blocks [hit, nblocks); its last block is marked as the
             * chain's tail when the batch has two or more (as mem.c marks it). */
            int last = rq->nblocks - hit > 1 && i + 1 == rq->nblocks;
            if (insert(&s, b, rq->first + i, last))
                r.inserts++;
            else
                r.refused++;
        }
        r.blocks += rq->nblocks;
        r.hit_blocks += hit;
    }
    r.evictions = s.evictions;
    if (s.sh) {
        r.share = (double)shadow_share(s.sh) / SHADOW_SHARE_DEN;
        r.share_moves = s.sh->moves;
    }
    sim_free(&s);
    *out = r;
    return 0;
}
