/*
 * store_int.h — the store module's private pieces, shared by the files of src/store and
 * by its unit tests (nothing outside src/store includes this):
 *
 *   pool.c    the memfd-backed shared mapping
 *   alloc.c   a TLSF-style offset allocator over the pool, metadata out of band
 *   htab.c    an open-addressing table of pointers (the key index and the lease table)
 *   lru.c     the LRU eviction policy (behind policy_ops)
 *   s3fifo.c  the S3-FIFO eviction policy (the same interface)
 *   chain.c   chain-aware segmented LRU for prefix chains (the same interface; the default)
 *   adapt.c   chain.c with a ghost of evicted keys that readmits them as proven reuse
 *   shadow.c  adapt's miniature simulations that choose protected's share (shadow.h)
 *   plist.c   the intrusive lists the three policies keep through the records
 *   lease.c   pins and reservations: ids, the id table and the deadline heap
 *   store.c   store.h on top of the above, under one mutex
 *   tier.c    the SSD tier's side of the store: spill writer thread, promotion from disk
 *   disk.c    the SSD tier's segment files and their index (disk.h, its own lock)
 *   disk_io.c how disk.c issues its writes: io_uring, or pwritev when the kernel refuses
 *   disk_key.c the SSD tier's secret (DIR/tide.secret) and the keyed checksum disk.c uses
 *
 * Nothing here locks except disk.c; store.c holds its mutex around every call into the
 * other files.
 */
#ifndef TIDE_STORE_INT_H
#define TIDE_STORE_INT_H

#include <liburing.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/uio.h>

#include "common/checksum.h"
#include "store/disk.h"
#include "store/events.h"
#include "store/store.h"

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
 * Offsets and sizes are counted in units of ALLOC_UNIT bytes, in 32 bits with the top bit
 * of a size marking a used block: a pool holds at most ALLOC_MAX_UNITS units (512 GiB at
 * 256-byte units). Blocks are named by a node index.
 * ------------------------------------------------------------------------------------- */
#define ALLOC_UNIT 256u
#define ALLOC_UNIT_SHIFT 8
#define ALLOC_MAX_UNITS 0x7FFFFFFFu
#define ALLOC_SL_BITS 4 /* 16 second-level bins per power of two */
#define ALLOC_SL_COUNT (1u << ALLOC_SL_BITS)
#define ALLOC_FL_COUNT (31 - ALLOC_SL_BITS + 1)
#define ALLOC_NIL 0xFFFFFFFFu
#define ALLOC_CHUNK_SHIFT 8 /* nodes live in chunks of 256, never moved */
#define ALLOC_USED_BIT 0x80000000u

typedef struct alloc_node {
    uint32_t off;  /* units from the pool's start */
    uint32_t size; /* units, | ALLOC_USED_BIT for a used block */
    uint32_t prev; /* physical neighbour below, ALLOC_NIL at offset 0 */
    uint32_t next; /* physical neighbour above, ALLOC_NIL at the end */
    union {
        struct {
            uint32_t fprev, fnext; /* free blocks: bin list links; spare nodes: fnext */
        } f;
        void *owner; /* used blocks: whatever the allocator's user set */
    } u;
} alloc_node;

typedef struct alloc {
    alloc_node **chunks; /* chunk i holds nodes [i << ALLOC_CHUNK_SHIFT, ...) */
    uint32_t nchunks, chunks_cap;
    uint32_t spare; /* list of unused nodes through fnext */
    uint32_t total; /* units managed */
    uint32_t used;  /* units in used blocks */
    uint32_t nused; /* used blocks */
    uint32_t nfree; /* free blocks */
    uint32_t fl_bitmap;
    uint32_t sl_bitmap[ALLOC_FL_COUNT];
    uint32_t heads[ALLOC_FL_COUNT][ALLOC_SL_COUNT];
} alloc;

static inline alloc_node *alloc_node_at(const alloc *a, uint32_t i) {
    return &a->chunks[i >> ALLOC_CHUNK_SHIFT][i & ((1u << ALLOC_CHUNK_SHIFT) - 1)];
}

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
static inline uint32_t alloc_units(const alloc *a, uint32_t node) {
    return alloc_node_at(a, node)->size & ~ALLOC_USED_BIT;
}
/* The owner pointer of a used block (NULL until set). */
static inline void *alloc_owner(const alloc *a, uint32_t node) {
    return alloc_node_at(a, node)->u.owner;
}
static inline void alloc_set_owner(alloc *a, uint32_t node, void *owner) {
    alloc_node_at(a, node)->u.owner = owner;
}
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
 * at most 3/4 full, grown by half. Entries are pointers; their 32-bit hash comes from a
 * callback.
 * ------------------------------------------------------------------------------------- */
typedef uint32_t (*htab_hash_fn)(const void *entry);
typedef int (*htab_eq_fn)(const void *entry, const void *key);

typedef struct htab {
    void **slots;
    uint32_t n; /* slots */
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
    return t->n;
}
static inline uint64_t htab_meta_bytes(const htab *t) {
    return (uint64_t)htab_slots(t) * sizeof(void *);
}

/* A key as the tables look it up (the key argument of an htab_eq_fn), and the one hash of
 * a key that both key indexes (store.c's objects, disk.c's records) are built on. */
typedef struct keyref {
    const void *p;
    size_t len;
} keyref;

static inline uint32_t key_hash(const void *key, size_t klen) {
    uint64_t h = checksum_buf(key, klen);
    return (uint32_t)(h ^ (h >> 32));
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
 * One object: 32 bytes and its key, in one heap block. The value's exact length is
 * units * ALLOC_UNIT - tail, since the allocator gives exactly alloc_units_for(len) units.
 * The allocator's node for the value points back here (alloc_owner), so the policy links
 * name neighbours by their 32-bit node index instead of a pointer.
 */
typedef struct obj {
    uint64_t checksum;
    uint32_t hash;         /* of the key */
    uint32_t node;         /* allocator block of the value */
    uint32_t pins;         /* pins held by readers */
    uint32_t lprev, lnext; /* policy links (neighbours' nodes), owned by the policy */
    uint16_t klen;
    uint8_t state; /* enum obj_state in the low 2 bits; the policy may use the upper 6 */
    uint8_t tail;  /* unused bytes at the end of the last unit */
    uint8_t key[];
} obj;

_Static_assert(sizeof(obj) == 32, "an object record is 32 bytes before its key");

#define OBJ_STATE(o) ((o)->state & 3)
#define OBJ_SET_STATE(o, s) ((o)->state = (uint8_t)(((o)->state & ~3) | (s)))

/* ---------------------------------------------------------------------------------------
 * Eviction policy (lru.c, s3fifo.c, chain.c). A policy holds exactly the evictable
 * objects: committed, in the index, not pinned.
 * ------------------------------------------------------------------------------------- */

/* Where a caller's batch says an insert belongs (store.h, store_chain): `after` is the
 * object of the same batch inserted just before (LIVE and in the policy, or NULL); `tail`
 * is set for the batch's last key. Policies that do not use chain order ignore it. */
typedef struct policy_hint {
    const obj *after;
    int tail;
    int first; /* the batch's first insert (no cursor yet): adapt's miniatures need it */
} policy_hint;

typedef struct policy {
    const struct policy_ops *ops;
    const alloc *al;        /* maps a link (a node index) to its object */
    uint32_t head, tail;    /* a list, ALLOC_NIL when empty */
    uint32_t head2, tail2;  /* a second list for policies that need one */
    uint64_t count, count2; /* objects on each list */
    uint64_t bytes, bytes2; /* allocator units on each list */
    uint32_t *ghost;        /* S3-FIFO, adapt: key hashes of recent evictions */
    uint32_t ghost_mask;
    uint64_t ghost_nmax;   /* adapt: the most objects held at once */
    uint64_t ghost_left;   /* adapt: evictions left in the ghost's epoch */
    uint32_t ghost_epoch;  /* adapt: the ghost's epoch */
    struct shadow *shadow; /* adapt: the miniature simulations that choose its share */
} policy;

typedef struct policy_ops {
    const char *name;
    /* Set up for a pool of al->total units. Errors: -ENOMEM. */
    int (*init)(policy *p);
    void (*fini)(policy *p);
    /* o becomes evictable: reused = 0 after commit, 1 when its last pin is released; h is
     * the caller's chain hint or NULL. */
    void (*insert)(policy *p, obj *o, int reused, const policy_hint *h);
    /* o stops being evictable (pinned, removed or evicted). */
    void (*erase)(policy *p, obj *o);
    /* o was read (called at every pin, while o is out of the policy). */
    void (*access)(policy *p, obj *o);
    /* The object to evict next, left in place (the store erases it), or NULL. May reorder
     * the policy's lists on the way. */
    obj *(*victim)(policy *p);
    /* Heap bytes the policy holds beyond the records. */
    uint64_t (*meta_bytes)(const policy *p);
    /* For store_check(): the list (1 or 2) an evictable object must be on, and whether the
     * policy keeps bytes/bytes2 (allocator units per list). */
    int (*list_of)(const obj *o);
    int keeps_units;
    /* Optional (NULL: none): a put of key is starting (called under the store's lock before
     * the index lookup), so the policy may prefetch what its insert will touch. No effect
     * on what the policy decides. */
    void (*prepare)(policy *p, const void *key, size_t klen);
} policy_ops;

/* One of a policy's two lists (plist.c): second = 0 names head/tail, 1 head2/tail2. */
typedef struct plist {
    uint32_t *head, *tail;
    uint64_t *count, *bytes;
} plist;
plist plist_of(policy *p, int second);
/* The record a link names. */
static inline obj *plist_obj(const policy *p, uint32_t node) {
    return alloc_owner(p->al, node);
}
/* Link o right behind `after`, which must be on q; at q's head when after is NULL. */
void plist_insert_after(const policy *p, plist q, obj *o, const obj *after);
/* Unlink o from q, the list it is on. */
void plist_remove(const policy *p, plist q, obj *o);

extern const policy_ops policy_lru;
extern const policy_ops policy_s3fifo;
extern const policy_ops policy_chain;
extern const policy_ops policy_adapt;
/* chain.c's placement, which adapt.c builds on (adapt = chain + a ghost of evictions). */
int chain_init(policy *p);
/* o joins protected after `after` (or at its head); protected's least recent objects over
 * its share of the pool go back to probation's head. */
void chain_protect(policy *p, obj *o, const obj *after);
/* The two halves of chain_protect: o joins protected after `after` (or at its head); then
 * while protected's units exceed limit its least recent object leaves its tail, for
 * probation's head, or for protected's head when second_chance (if not NULL) returns 1 for
 * it (second_chance must spend something, so the loop ends: adapt.c spends a use). */
void chain_link_prot(policy *p, obj *o, const obj *after);
void chain_trim(policy *p, uint64_t limit, int (*second_chance)(obj *));
void chain_insert(policy *p, obj *o, int reused, const policy_hint *h);
void chain_erase(policy *p, obj *o);
void chain_access(policy *p, obj *o);
obj *chain_victim(policy *p);
int chain_list_of(const obj *o);

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
 * Disk writes (disk_io.c): one batch of positioned vector writes, issued through io_uring
 * when the kernel allows it (probed at init), else pwritev in a loop. Not thread-safe: the
 * tier's single writer thread is the only caller. Reads do not come through here: a disk
 * hit is one synchronous preadv on the requesting thread (disk.c).
 * ------------------------------------------------------------------------------------- */
#define DISK_IO_DEPTH 64 /* ring entries: writes in flight at once */

typedef struct disk_op {
    int fd;
    uint64_t off;
    struct iovec *iov; /* must stay valid until disk_io_write returns */
    int iovcnt;
    int64_t res; /* out: bytes written (all of them) or -errno */
} disk_op;

typedef struct disk_io {
    int uring; /* 1: the ring below is up */
    struct io_uring ring;
} disk_io;

/* Set up: mode DISK_IO_AUTO tries io_uring then falls back, DISK_IO_URING insists,
 * DISK_IO_PSYNC never tries. Errors: TIDE_ECONFIG when io_uring is insisted on and refused
 * (the reason in err). */
int disk_io_init(disk_io *io, int mode, char *err, size_t errlen);
void disk_io_fini(disk_io *io);
/* Perform every op (all bytes, short writes continued) and wait for all. */
void disk_io_write(disk_io *io, disk_op *ops, size_t n);
/* pwritev until every byte is written or an error: bytes written or -errno. */
int64_t disk_pwritev_all(int fd, struct iovec *iov, int iovcnt, uint64_t off);

/* ---------------------------------------------------------------------------------------
 * The disk tier's secret and keyed checksum (disk_key.c), for disk.c.
 * ------------------------------------------------------------------------------------- */
typedef struct disk_key {
    struct evp_mac_st *mac;      /* OpenSSL's EVP_MAC (HMAC) */
    struct evp_mac_ctx_st *base; /* keyed with the secret; only ever copied */
    uint64_t id;                 /* names the secret in segment headers */
} disk_key;

/* Load DIR/tide.secret (made 0600 at first use) and key the checksum with it. Errors, with
 * a message naming the file: TIDE_ECONFIG for a secret with group or other permission
 * bits, another owner or the wrong size, or no HMAC in OpenSSL; -errno (ELOOP for a link);
 * -ENOMEM. */
int disk_key_open(disk_key *k, const char *dir, char *err, size_t errlen);
void disk_key_close(disk_key *k);
/* HMAC-SHA256 of parts[0..n) laid end to end, its first 64 bits (little-endian) in *out.
 * Any thread. 0, or -ENOMEM. */
int disk_key_mac(const disk_key *k, const struct iovec *parts, int n, uint64_t *out);

/* ---------------------------------------------------------------------------------------
 * The store itself (store.c), with the SSD tier's state (tier.c)
 * ------------------------------------------------------------------------------------- */

/* Flag bits of obj.state used by the tier (S3-FIFO uses bits 2..4, chain bit 2, adapt
 * bits 2..4, the state
 * bits 0..1). */
#define OBJ_SPILL 0x80   /* held for the disk writer (queued or being written); one of pins */
#define OBJ_PROMOTE 0x40 /* RESERVED by a read-back from disk (no lease): readers wait */
#define OBJ_GONE 0x20    /* removed while being promoted: the promotion must not commit */

/* Heap an object costs beyond its record, charged against the metadata budget with it:
 * index slots (the table is at most 3/4 and, once grown, at least 1/2 full: at most 2
 * slots of 8 bytes an object at the peak) and allocator nodes (24 bytes for the value's
 * block and 24 for a free block beside it: free blocks never touch, so there are at most
 * one more of them than used blocks). Neither table shrinks, but neither outgrows what
 * the peak number of objects, which the budget bounds, needs. */
#define STORE_META_TABLES 64

/* Internal result of do_make_room(): room is being made by the disk writer; wait on
 * tier_cv and try again. */
#define STORE_WAIT 2

#define TIER_BATCH 64                 /* objects in one batch of the disk writer */
#define TIER_BATCH_BYTES (8ull << 20) /* bytes in one batch (a larger object goes alone) */

struct store {
    /*
     * Lock rules: `mu` guards every field below except the immutable ones (pool, capacity,
     * max_value, pol.ops, dk, log) and the writer's thread handle. Public functions validate
     * arguments and hash the key before taking it, then hold it until they return, except
     * where they wait on a condition variable (which releases it) or read a promoted value
     * from disk (they drop it around the read and hold a RESERVED|OBJ_PROMOTE record
     * meanwhile). Nothing in src/store calls out while holding it; the only lock taken
     * under it is the disk tier's (store.mu -> disk.mu, never the reverse). Value bytes are
     * never touched under it: callers copy while holding a pin or a reservation, and the
     * disk writer writes while it holds an object (OBJ_SPILL), which is what keeps the space
     * from being reused. Names say who takes it (memcached's rule): do_x() runs with `mu`
     * held by its caller and never takes or drops it (do_lookup, do_make_room, and
     * tier.c's do_tier_spill); x() takes it itself. store_do_x() is the same rule for a
     * helper other store files call.
     */
    pthread_mutex_t mu;
    pool pool;
    uint64_t capacity; /* bytes the allocator manages */
    uint64_t max_value;
    alloc al;
    htab index; /* key -> obj (RESERVED or LIVE) */
    policy pol;
    leases ls;
    uint64_t objects;   /* LIVE objects */
    uint64_t pinned;    /* objects with pins > 0 (LIVE or HIDDEN), held ones included */
    uint64_t rec_bytes; /* heap cost of every record */
    uint64_t puts, put_dups, gets, misses, evictions, evicted_bytes, checksum_errors;
    uint64_t bytes_in, bytes_out;

    /* The metadata budget (store.c): records allocated (RESERVED, LIVE, HIDDEN), each
     * charged store_meta_cost() of its key, and what they may take together. */
    uint64_t nrecs;
    uint64_t meta_budget;

    /* SSD tier (tier.c); dk is NULL when the store has none. */
    disk *dk;
    uint64_t disk_capacity;
    pthread_cond_t tier_cv;   /* broadcast when held objects are released or a promotion ends */
    pthread_cond_t writer_cv; /* wakes the writer: objects queued, tombstones pending, stop */
    pthread_t writer;
    int writer_running, writer_stop;
    uint32_t spill_head, spill_tail; /* held objects not yet taken, linked by lnext/lprev */
    uint64_t spill_queued;           /* objects on that queue */
    uint64_t spill_held;             /* objects held: queued or in the writer's batch */
    uint64_t spill_bytes;            /* their allocator bytes */
    obj *batch[TIER_BATCH];          /* the writer's batch being written */
    uint32_t nbatch;
    uint64_t promoting; /* RESERVED|OBJ_PROMOTE records in the index */
    uint64_t promotions, disk_dropped;
    uint64_t disk_backoff_until; /* now_ns() before which evictions skip the disk (it failed) */
    void (*log)(void *ctx, int level, const char *msg);
    void *log_ctx;
    store_events ev; /* departures (events.c): its own leaf lock */
};

/* Records, shared by store.c and tier.c: inline here so that tier.c needs nothing of
 * store.c (store.c calls tier.c, never the other way). */

/* What a record of klen bytes of key costs against the metadata budget. */
static inline uint64_t store_rec_cost(size_t klen) {
    return malloc_cost(offsetof(obj, key) + klen);
}
/* The length of an object's value (the lock held). */
static inline uint64_t store_do_obj_len(const struct store *st, const obj *o) {
    return (uint64_t)alloc_units(&st->al, o->node) * ALLOC_UNIT - o->tail;
}
/* Give an object's space and record back (the lock held); it must be out of the index, the
 * policy and the spill queue. */
static inline void store_do_free_obj(struct store *st, obj *o) {
    alloc_put(&st->al, o->node);
    st->rec_bytes -= store_rec_cost(o->klen);
    st->nrecs--;
    free(o);
}

/* tier.c: open the disk and start the writer thread (store_create calls it when the
 * config names a disk directory). Errors as disk_open(), or -errno from pthread_create. */
int tier_start(struct store *st, const store_config *cfg, char *err, size_t errlen);
/* Stop and join the writer (releasing what it had not written) and close the disk. */
void tier_stop(struct store *st);
/* Victim v (LIVE, unpinned, in the policy) is about to be evicted: 1 if the tier took it
 * (queued for the writer, now held), 0 if it may be dropped at once (a copy is on disk,
 * or the disk cannot take it now). */
int do_tier_spill(struct store *st, obj *v);
/* Tombstones were queued: make sure the writer runs. */
void do_tier_wake(struct store *st);
/* 1 if o is in the batch the writer is writing now (its record is about to exist). */
int do_tier_writing(const struct store *st, const obj *o);
/* Remove a key from the disk and wait (the lock released meanwhile) until the tombstone is
 * durable: 0, TIDE_ENOTFOUND, or the negative code with which it was refused. */
int do_tier_remove(struct store *st, const void *key, size_t klen);
/* Clear the disk and wait until the clear record is durable: 0 or a negative code. */
int do_tier_clear(struct store *st);

/* ---------------------------------------------------------------------------------------
 * store.c extras for tests
 * ------------------------------------------------------------------------------------- */
struct store;
/* Check every invariant of store.c's header comment (and alloc_check()); 0 or the
 * negative line number of the first broken one. Takes the store's lock. */
int store_check(struct store *st);

#endif /* TIDE_STORE_INT_H */
