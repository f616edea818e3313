/*
 * alloc.c — a TLSF-style offset allocator over the pool. All metadata lives here, out of
 * band: same-host clients write into pool memory, so the pool holds nothing we trust.
 *
 * The unit is 256 bytes. Values are mostly 4 KiB..64 MiB, so a 256-byte unit wastes at
 * most 6% of a 4 KiB value and well under 1% of typical ones, keeps every value 256-byte
 * aligned (good for vector copies and DMA), and lets 32-bit unit offsets address 1 TiB.
 * Tiny values still work: they take one unit.
 *
 * Every block (free or used) is a node: offset, size, its physical neighbours (to merge
 * on free) and free-list links. Nodes live in fixed chunks of 1024 that are never moved,
 * named by 32-bit indices; unused nodes are kept on a spare list.
 *
 * Free blocks sit in size bins: a first level per power of two and 16 second-level bins
 * inside each, with a bitmap per level, so finding a bin that surely fits is two bit scans
 * (good fit: the block found is at most 1/16 larger than a bin's lower bound). A block is
 * split to exactly the units asked for, so internal waste is under one unit per value.
 *
 * Invariants (alloc_check() verifies them): blocks tile [0, total) in physical order
 * starting at node 0; no two free blocks are neighbours (a free merges at once); every
 * free block is on the list of the bin of its size and that bin's bitmap bits are set;
 * used counts the units of used blocks.
 *
 * Fragmentation bound: a request succeeds whenever a free block of at least the rounded-up
 * bin size exists, or a fitting block is among the first ALLOC_SCAN blocks of the request's
 * own bin. Freeing everything always leaves one free block of the whole pool.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "store/store_int.h"
#include "tide.h"

#define ALLOC_USED 0xFFFFFFFEu  /* fprev of a used block */
#define ALLOC_SPARE 0xFFFFFFFDu /* fprev of a node on the spare list */
#define ALLOC_SCAN 64           /* blocks examined in the request's own bin as a last try */
#define CHUNK_NODES (1u << ALLOC_CHUNK_SHIFT)

static inline alloc_node *N(const alloc *a, uint32_t i) {
    return &a->chunks[i >> ALLOC_CHUNK_SHIFT][i & (CHUNK_NODES - 1)];
}

static inline int msb32(uint32_t x) {
    return 31 - __builtin_clz(x);
}

/* The bin holding free blocks of `size` units. */
static void bin_of(uint32_t size, int *fl, int *sl) {
    if (size < ALLOC_SL_COUNT) {
        *fl = 0;
        *sl = (int)size;
    } else {
        int m = msb32(size);
        *fl = m - ALLOC_SL_BITS + 1;
        *sl = (int)((size >> (m - ALLOC_SL_BITS)) ^ ALLOC_SL_COUNT);
    }
}

static int node_new(alloc *a, uint32_t *out) {
    if (a->spare == ALLOC_NIL) {
        if ((uint64_t)(a->nchunks + 1) << ALLOC_CHUNK_SHIFT >= ALLOC_NIL - 2) return -ENOMEM;
        if (a->nchunks == a->chunks_cap) {
            uint32_t cap = a->chunks_cap ? a->chunks_cap * 2 : 8;
            alloc_node **c = realloc(a->chunks, cap * sizeof(*c));
            if (!c) return -ENOMEM;
            a->chunks = c;
            a->chunks_cap = cap;
        }
        alloc_node *chunk = malloc(CHUNK_NODES * sizeof(*chunk));
        if (!chunk) return -ENOMEM;
        uint32_t base = a->nchunks << ALLOC_CHUNK_SHIFT;
        a->chunks[a->nchunks++] = chunk;
        for (uint32_t i = CHUNK_NODES; i-- > 0;) {
            chunk[i].fprev = ALLOC_SPARE;
            chunk[i].fnext = a->spare;
            a->spare = base + i;
        }
    }
    *out = a->spare;
    a->spare = N(a, *out)->fnext;
    return 0;
}

static void node_release(alloc *a, uint32_t i) {
    alloc_node *n = N(a, i);
    n->fprev = ALLOC_SPARE;
    n->fnext = a->spare;
    a->spare = i;
}

static void list_insert(alloc *a, uint32_t i) {
    alloc_node *n = N(a, i);
    int fl, sl;
    bin_of(n->size, &fl, &sl);
    uint32_t h = a->heads[fl][sl];
    n->fprev = ALLOC_NIL;
    n->fnext = h;
    if (h != ALLOC_NIL) N(a, h)->fprev = i;
    a->heads[fl][sl] = i;
    a->fl_bitmap |= 1u << fl;
    a->sl_bitmap[fl] |= 1u << sl;
    a->nfree++;
}

static void list_remove(alloc *a, uint32_t i) {
    alloc_node *n = N(a, i);
    int fl, sl;
    bin_of(n->size, &fl, &sl);
    if (n->fprev != ALLOC_NIL)
        N(a, n->fprev)->fnext = n->fnext;
    else
        a->heads[fl][sl] = n->fnext;
    if (n->fnext != ALLOC_NIL) N(a, n->fnext)->fprev = n->fprev;
    if (a->heads[fl][sl] == ALLOC_NIL) {
        a->sl_bitmap[fl] &= ~(1u << sl);
        if (!a->sl_bitmap[fl]) a->fl_bitmap &= ~(1u << fl);
    }
    n->fprev = ALLOC_USED;
    n->fnext = ALLOC_NIL;
    a->nfree--;
}

int alloc_init(alloc *a, uint32_t units) {
    memset(a, 0, sizeof(*a));
    a->spare = ALLOC_NIL;
    for (int f = 0; f < ALLOC_FL_COUNT; f++)
        for (int s = 0; s < (int)ALLOC_SL_COUNT; s++) a->heads[f][s] = ALLOC_NIL;
    if (units == 0 || units > ALLOC_MAX_UNITS) return -EINVAL;
    uint32_t i;
    int rc = node_new(a, &i);
    if (rc < 0) return rc;
    /* Node 0 is the first block and stays the block at offset 0 for the allocator's life:
     * splits keep the lower half in the old node, merges keep the lower node. */
    *N(a, i) = (alloc_node){.off = 0, .size = units, .prev = ALLOC_NIL, .next = ALLOC_NIL};
    a->total = units;
    list_insert(a, i);
    return 0;
}

void alloc_fini(alloc *a) {
    for (uint32_t c = 0; c < a->nchunks; c++) free(a->chunks[c]);
    free(a->chunks);
    memset(a, 0, sizeof(*a));
}

/* A free block of at least `units`, or ALLOC_NIL: first a bin whose every block fits
 * (good fit), then a short scan of the request's own bin. */
static uint32_t find_block(const alloc *a, uint32_t units) {
    uint64_t r = units;
    if (r >= ALLOC_SL_COUNT) r += (1ull << (msb32(units) - ALLOC_SL_BITS)) - 1;
    if (r <= 0xFFFFFFFFu) {
        int fl, sl;
        bin_of((uint32_t)r, &fl, &sl);
        uint32_t slm = a->sl_bitmap[fl] & (~0u << sl);
        if (!slm) {
            uint32_t flm = fl + 1 < 32 ? a->fl_bitmap & (~0u << (fl + 1)) : 0;
            if (flm) {
                fl = __builtin_ctz(flm);
                slm = a->sl_bitmap[fl];
            }
        }
        if (slm) return a->heads[fl][__builtin_ctz(slm)];
    }
    int fl, sl;
    bin_of(units, &fl, &sl);
    uint32_t i = a->heads[fl][sl];
    for (int k = 0; k < ALLOC_SCAN && i != ALLOC_NIL; k++, i = N(a, i)->fnext)
        if (N(a, i)->size >= units) return i;
    return ALLOC_NIL;
}

int alloc_get(alloc *a, uint32_t units, uint32_t *node) {
    if (units == 0) return -EINVAL;
    uint32_t i = find_block(a, units);
    if (i == ALLOC_NIL) return TIDE_ENOSPACE;
    uint32_t rest = ALLOC_NIL;
    if (N(a, i)->size > units) {
        int rc = node_new(a, &rest); /* before any change, so -ENOMEM leaves all intact */
        if (rc < 0) return rc;
    }
    list_remove(a, i);
    alloc_node *n = N(a, i);
    if (rest != ALLOC_NIL) {
        alloc_node *r = N(a, rest);
        *r = (alloc_node){.off = n->off + units, .size = n->size - units, .prev = i,
                          .next = n->next};
        if (n->next != ALLOC_NIL) N(a, n->next)->prev = rest;
        n->next = rest;
        n->size = units;
        list_insert(a, rest);
    }
    a->used += units;
    a->nused++;
    *node = i;
    return 0;
}

void alloc_put(alloc *a, uint32_t i) {
    alloc_node *n = N(a, i);
    a->used -= n->size;
    a->nused--;
    uint32_t nx = n->next;
    if (nx != ALLOC_NIL && N(a, nx)->fprev != ALLOC_USED) {
        alloc_node *x = N(a, nx);
        list_remove(a, nx);
        n->size += x->size;
        n->next = x->next;
        if (x->next != ALLOC_NIL) N(a, x->next)->prev = i;
        node_release(a, nx);
    }
    uint32_t pv = n->prev;
    if (pv != ALLOC_NIL && N(a, pv)->fprev != ALLOC_USED) {
        alloc_node *p = N(a, pv);
        list_remove(a, pv);
        p->size += n->size;
        p->next = n->next;
        if (n->next != ALLOC_NIL) N(a, n->next)->prev = pv;
        node_release(a, i);
        i = pv;
    }
    list_insert(a, i);
}

uint64_t alloc_offset(const alloc *a, uint32_t i) {
    return (uint64_t)N(a, i)->off << ALLOC_UNIT_SHIFT;
}

uint32_t alloc_units(const alloc *a, uint32_t i) {
    return N(a, i)->size;
}

uint32_t alloc_largest_free(const alloc *a) {
    if (!a->fl_bitmap) return 0;
    int fl = msb32(a->fl_bitmap);
    int sl = msb32(a->sl_bitmap[fl]);
    uint32_t best = 0;
    for (uint32_t i = a->heads[fl][sl]; i != ALLOC_NIL; i = N(a, i)->fnext)
        if (N(a, i)->size > best) best = N(a, i)->size;
    return best;
}

uint64_t alloc_meta_bytes(const alloc *a) {
    return (uint64_t)a->nchunks * CHUNK_NODES * sizeof(alloc_node) +
           (uint64_t)a->chunks_cap * sizeof(alloc_node *);
}

#define FAIL() return -__LINE__

int alloc_check(const alloc *a) {
    uint64_t off = 0, used = 0;
    uint32_t nused = 0, nfree = 0, prev = ALLOC_NIL;
    int prev_free = 0;
    for (uint32_t i = 0; i != ALLOC_NIL; prev = i, i = N(a, i)->next) {
        const alloc_node *n = N(a, i);
        if (n->off != off || n->prev != prev || n->size == 0) FAIL();
        int is_free = n->fprev != ALLOC_USED;
        if (n->fprev == ALLOC_SPARE) FAIL();
        if (is_free && prev_free) FAIL();
        if (is_free)
            nfree++;
        else
            nused++, used += n->size;
        prev_free = is_free;
        off += n->size;
        if (nfree + nused > a->nchunks * CHUNK_NODES) FAIL();
    }
    if (off != a->total || used != a->used || nused != a->nused || nfree != a->nfree) FAIL();
    uint32_t listed = 0;
    for (int f = 0; f < ALLOC_FL_COUNT; f++) {
        for (int s = 0; s < (int)ALLOC_SL_COUNT; s++) {
            uint32_t h = a->heads[f][s];
            int bit = (a->sl_bitmap[f] >> s) & 1;
            if (bit != (h != ALLOC_NIL)) FAIL();
            uint32_t p = ALLOC_NIL;
            for (uint32_t i = h; i != ALLOC_NIL; p = i, i = N(a, i)->fnext) {
                int fl, sl;
                bin_of(N(a, i)->size, &fl, &sl);
                if (fl != f || sl != s || N(a, i)->fprev != p) FAIL();
                if (++listed > nfree) FAIL();
            }
        }
        if (((a->fl_bitmap >> f) & 1) != (a->sl_bitmap[f] != 0)) FAIL();
    }
    if (listed != nfree) FAIL();
    return 0;
}
