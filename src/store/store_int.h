/*
 * store_int.h — the store module's private pieces, shared by the files of src/store and
 * by its unit tests (nothing outside src/store includes this):
 *
 *   pool.c    the memfd-backed shared mapping
 *   alloc.c   a TLSF-style offset allocator over the pool, metadata out of band
 *   htab.c    an open-addressing table of pointers (the key index and the lease table)
 *   lru.c     the LRU eviction policy (behind policy_ops, so others can be added)
 *   lease.c   pins and reservations: ids, the id table and the deadline heap
 *   store.c   store.h on top of the above, under one mutex
 *
 * Nothing here locks; store.c holds its mutex around every call into these files.
 */
#ifndef TIDE_STORE_INT_H
#define TIDE_STORE_INT_H

#include <stddef.h>
#include <stdint.h>

/* What malloc(n) costs in glibc: the request plus an 8-byte header, rounded up to 16,
 * at least 32. Used so that meta_bytes counts what the heap really spends. */
static inline uint64_t malloc_cost(uint64_t n) {
    uint64_t c = (n + 8 + 15) & ~(uint64_t)15;
    return c < 32 ? 32 : c;
}

/* ---------------------------------------------------------------------------------------
 * Pool (pool.c)
 * ------------------------------------------------------------------------------------- */
typedef struct pool {
    uint8_t *base;
    uint64_t size;     /* bytes requested (the mapping is this rounded up to its page) */
    uint64_t map_size; /* bytes mapped */
    int fd;            /* the memfd, -1 when closed */
    int huge;          /* 1 if backed by hugetlb pages */
} pool;

/* Create a memfd of size bytes, map it shared, optionally on huge pages (falling back to
 * normal pages) and prefaulted. Errors: -errno with the failing call named in err. */
int pool_open(pool *p, uint64_t size, int hugepages, int prefault, char *err, size_t errlen);
void pool_close(pool *p);

/* ---------------------------------------------------------------------------------------
 * Allocator (alloc.c)
 *
 * Offsets and sizes are counted in units of ALLOC_UNIT bytes, in 32 bits: a pool holds at
 * most ALLOC_MAX_UNITS units (1 TiB at 256-byte units). Blocks are named by a node index.
 * ------------------------------------------------------------------------------------- */
#define ALLOC_UNIT 256u
#define ALLOC_UNIT_SHIFT 8
#define ALLOC_MAX_UNITS 0xFFFFFFF0u
#define ALLOC_SL_BITS 4                      /* 16 second-level bins per power of two */
#define ALLOC_SL_COUNT (1u << ALLOC_SL_BITS)
#define ALLOC_FL_COUNT (32 - ALLOC_SL_BITS + 1)
#define ALLOC_NIL 0xFFFFFFFFu
#define ALLOC_CHUNK_SHIFT 10 /* nodes live in chunks of 1024, never moved */

typedef struct alloc_node {
    uint32_t off;   /* units from the pool's start */
    uint32_t size;  /* units */
    uint32_t prev;  /* physical neighbour below, ALLOC_NIL at offset 0 */
    uint32_t next;  /* physical neighbour above, ALLOC_NIL at the end */
    uint32_t fprev; /* free list links; fprev == ALLOC_USED marks a used block */
    uint32_t fnext; /* (also links spare nodes) */
} alloc_node;

typedef struct alloc {
    alloc_node **chunks; /* chunk i holds nodes [i << ALLOC_CHUNK_SHIFT, ...) */
    uint32_t nchunks, chunks_cap;
    uint32_t spare;      /* list of unused nodes through fnext */
    uint32_t total;      /* units managed */
    uint32_t used;       /* units in used blocks */
    uint32_t nused;      /* used blocks */
    uint32_t nfree;      /* free blocks */
    uint32_t fl_bitmap;
    uint32_t sl_bitmap[ALLOC_FL_COUNT];
    uint32_t heads[ALLOC_FL_COUNT][ALLOC_SL_COUNT];
} alloc;

/* Manage `units` units (1..ALLOC_MAX_UNITS) as one free block. Errors: -EINVAL, -ENOMEM. */
int alloc_init(alloc *a, uint32_t units);
void alloc_fini(alloc *a);
/* Take a block of exactly `units` units (>= 1). *node names it. Errors: TIDE_ENOSPACE when
 * no free block fits, -ENOMEM when node storage cannot grow. */
int alloc_get(alloc *a, uint32_t units, uint32_t *node);
/* Give a used block back; it merges with free neighbours. */
void alloc_put(alloc *a, uint32_t node);
/* Byte offset of a used block. */
uint64_t alloc_offset(const alloc *a, uint32_t node);
/* Units of a block. */
uint32_t alloc_units(const alloc *a, uint32_t node);
/* Size of the largest free block, in units. */
uint32_t alloc_largest_free(const alloc *a);
/* Bytes of metadata the allocator holds (node chunks and the chunk table). */
uint64_t alloc_meta_bytes(const alloc *a);
/* Walk every block and list and check every invariant; 0 or a negative line number of the
 * first broken one (for tests). */
int alloc_check(const alloc *a);
/* Units for a value of len bytes. */
static inline uint64_t alloc_units_for(uint64_t len) {
    return (len + ALLOC_UNIT - 1) >> ALLOC_UNIT_SHIFT;
}

/* ---------------------------------------------------------------------------------------
 * Pointer table (htab.c): open addressing, linear probing, deletion by backward shift,
 * at most 3/4 full. Entries are pointers; their 32-bit hash comes from a callback.
 * ------------------------------------------------------------------------------------- */
typedef uint32_t (*htab_hash_fn)(const void *entry);
typedef int (*htab_eq_fn)(const void *entry, const void *key);

typedef struct htab {
    void **slots;
    uint32_t mask; /* slots - 1 (a power of two) */
    uint32_t count;
    htab_hash_fn hash_of;
} htab;

int htab_init(htab *t, uint32_t slots, htab_hash_fn hash_of);
void htab_fini(htab *t);
/* Make room for `more` inserts without growing. Errors: -ENOMEM. */
int htab_reserve(htab *t, uint32_t more);
/* The entry e with hash_of(e) == h and eq(e, key), or NULL. */
void *htab_find(const htab *t, uint32_t h, htab_eq_fn eq, const void *key);
/* Insert an entry (room must have been reserved; the entry must not be present). */
void htab_insert(htab *t, void *entry);
/* Remove an entry that is present (found by pointer). */
void htab_delete(htab *t, void *entry);
/* Slot i's entry or NULL, for walking; see htab.c on walking while deleting. */
static inline void *htab_slot(const htab *t, uint32_t i) {
    return t->slots[i];
}
static inline uint32_t htab_slots(const htab *t) {
    return t->mask + 1;
}
static inline uint64_t htab_meta_bytes(const htab *t) {
    return (uint64_t)htab_slots(t) * sizeof(void *);
}

/* ---------------------------------------------------------------------------------------
 * Object records
 * ------------------------------------------------------------------------------------- */
enum obj_state {
    OBJ_RESERVED = 0, /* in the index (so dups are caught), invisible to readers */
    OBJ_LIVE = 1,     /* committed and in the index */
    OBJ_HIDDEN = 2,   /* removed while pinned: out of the index, freed at the last unpin */
};

/*
 * One object. Allocated with its key inline. The value's exact length is
 * units * ALLOC_UNIT - tail, since the allocator gives exactly alloc_units_for(len) units.
 * `link` is owned by the eviction policy while the object is evictable (LIVE, unpinned).
 */
typedef struct olink {
    struct olink *prev, *next;
} olink;

typedef struct obj {
    olink link; /* policy links; first member, so a link is its object */
    uint64_t checksum;
    uint32_t hash;  /* of the key */
    uint32_t node;  /* allocator block */
    uint32_t pins;  /* pins held by readers */
    uint16_t klen;
    uint8_t state;  /* enum obj_state */
    uint8_t tail;   /* unused bytes at the end of the last unit */
    uint8_t pbits;  /* free for the policy (e.g. S3-FIFO frequency and queue) */
    uint8_t key[];
} obj;

/* ---------------------------------------------------------------------------------------
 * Eviction policy (lru.c; others as more files). A policy holds exactly the evictable
 * objects: committed, in the index, not pinned.
 * ------------------------------------------------------------------------------------- */
typedef struct policy {
    const struct policy_ops *ops;
    olink head; /* sentinels of the policy's lists */
    olink head2;
    uint64_t count, count2;
} policy;

typedef struct policy_ops {
    const char *name;
    void (*init)(policy *p);
    /* o becomes evictable: reused = 0 after commit, 1 when its last pin is released. */
    void (*insert)(policy *p, obj *o, int reused);
    /* o stops being evictable (pinned, removed or evicted). */
    void (*erase)(policy *p, obj *o);
    /* o was read (called at every pin, while o is out of the policy). */
    void (*access)(policy *p, obj *o);
    /* The object to evict next, left in place (the store erases it), or NULL. */
    obj *(*victim)(policy *p);
} policy_ops;

extern const policy_ops policy_lru;

/* ---------------------------------------------------------------------------------------
 * Leases (lease.c): pins and reservations, named by ids unique for the store's life,
 * found by id through a table, and expired through a min-heap of deadlines.
 * ------------------------------------------------------------------------------------- */
enum lease_kind { LEASE_PIN = 1, LEASE_RESV = 2 };

typedef struct lease {
    uint64_t id;
    uint64_t deadline; /* 0 = none (then not in the heap) */
    obj *o;
    uint32_t heap_pos; /* index in the heap, or ALLOC_NIL */
    uint8_t kind;      /* enum lease_kind */
} lease;

typedef struct leases {
    htab ids;
    lease **heap;
    uint32_t heap_len, heap_cap;
    uint64_t next_id;
    uint64_t npin, nresv;
} leases;

int leases_init(leases *l);
/* Free every lease (not the objects). */
void leases_fini(leases *l);
/* Allocate a lease of kind for o with a fresh id, record it. Errors: -ENOMEM. */
int leases_add(leases *l, int kind, obj *o, uint64_t deadline, lease **out);
/* The live lease of this id and kind, or NULL. */
lease *leases_find(leases *l, uint64_t id, int kind);
/* Forget a lease and free it. */
void leases_drop(leases *l, lease *e);
/* The lease with the earliest deadline, or NULL. */
static inline lease *leases_earliest(const leases *l) {
    return l->heap_len ? l->heap[0] : NULL;
}
uint64_t leases_meta_bytes(const leases *l);

/* ---------------------------------------------------------------------------------------
 * store.c extras for tests
 * ------------------------------------------------------------------------------------- */
struct store;
/* Check every invariant of store.c's header comment (and alloc_check()); 0 or the
 * negative line number of the first broken one. Takes the store's lock. */
int store_check(struct store *st);

#endif /* TIDE_STORE_INT_H */
