/*
 * store.h — one node's object store: a memfd-backed pool, an index from key to object,
 * byte-budget eviction, pins for readers and two-phase puts for writers.
 *
 * This is the core that the embedded backend (mem://) calls directly and that tided
 * serves over its transports. Bytes are copied by the caller, never under the store's
 * lock: a writer reserves space, fills it, and commits; a reader pins an object, copies
 * it out, and unpins. The lock protects metadata only.
 *
 * Invariants:
 *   - A reserved (uncommitted) object is invisible to get/exists/match; a second reserve of
 *     the same key while the first is in flight returns STORE_DUP (the first writer wins).
 *   - A pinned or reserved object is never evicted and its space is never reused; remove of
 *     a pinned object hides it at once and frees its space when the last pin goes.
 *   - Pins and reservations taken with a deadline are leases: store_expire() releases those
 *     past their deadline, so a dead client cannot hold space forever.
 *   - Checksums are xxh3-64 of the value bytes, given by the writer at commit and checked
 *     by whoever copies the bytes out (store_verify_failed() reports a mismatch). Checksums
 *     and deadlines use src/common/checksum.h and now_ns() from src/common/util.h.
 *   - With an SSD tier (store_config.disk_dir), an object leaving memory by eviction is
 *     first written to disk by the tier's writer thread; a pin of a key that is only on
 *     disk reads it back (verified), promotes it into memory and pins it; exists, reserve
 *     (duplicates), remove and clear see both tiers. A reserve or pin that needs room may
 *     wait for the writer to finish the write of a victim (one batch of disk writes).
 */
#ifndef TIDE_STORE_H
#define TIDE_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "tide.h"

typedef struct store store;

enum store_policy {
    STORE_POLICY_LRU = 0,
    STORE_POLICY_S3FIFO = 1,
    STORE_POLICY_CHAIN = 2,
    STORE_POLICY_ADAPT = 3
};

/* The default policy (chosen by replaying traces, docs/TRACES.md) and its name, for help
 * texts (a unit test keeps the two in step). */
#define STORE_POLICY_DEFAULT STORE_POLICY_ADAPT
#define STORE_POLICY_DEFAULT_NAME "adapt"

/* "lru", "s3fifo", "chain" or "adapt" as enum store_policy, or -1; and back ("?" when unknown). */
int store_policy_parse(const char *name);
const char *store_policy_name(int policy);
/* The names for messages: "lru, s3fifo, chain or adapt". */
#define STORE_POLICY_NAMES "lru, s3fifo, chain or adapt"

/* The 32-bit hash the adapt policy's ghost keeps of an evicted key (adapt.c); the trace
 * simulator (src/trace/sim.c) hashes the keys `tide replay` uses with it, so that its
 * ghost collides exactly where the store's does. */
uint32_t store_ghost_hash(const void *key, size_t klen);

typedef struct store_config {
    uint64_t capacity;  /* pool bytes (rounded up to the allocator's 256-byte unit; at most
                           512 GiB, the reach of its 32-bit unit offsets) */
    uint64_t max_value; /* largest value accepted; 0 = capacity */
    int prefault;       /* touch every pool page at creation (slow start, fast first use) */
    int hugepages;      /* try MFD_HUGETLB first, fall back to normal pages */
    int policy;         /* enum store_policy (0 = LRU; callers take STORE_POLICY_DEFAULT) */
    /* Heap the memory tier may spend on per-object metadata (record, key, index slots and
     * allocator nodes: store_meta_cost() each); 0 = capacity / STORE_META_BUDGET_DIV. A put
     * that would exceed it evicts, as a put that needs pool space does, and is refused
     * with TIDE_ENOSPACE when nothing is evictable. At least store_meta_cost(TIDE_KEY_MAX)
     * (TIDE_ECONFIG below; the default is raised to it for a tiny pool). */
    uint64_t meta_budget;

    /* SSD tier, on when disk_dir is set and not empty (see tier.c and disk.h). */
    const char *disk_dir;
    uint64_t disk_capacity; /* bytes of segment files at most (required with disk_dir) */
    uint64_t disk_segment;  /* segment file size; 0 = chosen from disk_capacity */
    int disk_io;            /* enum disk_io_mode: 0 auto, 1 insist on io_uring, 2 pwritev */
    /* Where the tier reports what a daemon should log (a failing or full disk, and its
     * recovery), with a level numbered as in src/common/log.h. NULL: nobody hears. Called
     * from the tier's writer thread with no store lock held. */
    void (*log)(void *ctx, int level, const char *msg);
    void *log_ctx;
} store_config;

/*
 * A caller's place in one batch of keys that is a prefix chain in batch order (each key's
 * block the parent of the next: what a connector saves or loads for one prompt). The
 * caller starts each batch with STORE_CHAIN_INIT and passes the same cursor to every
 * store_commit_chain() (saves) or store_unpin_chain() (loads) of the batch, in order; the
 * store remembers the last object placed, so a chain-aware policy (chain.c) can keep the
 * batch in chain order. The cursor names its object by allocator node and key hash and is
 * checked before use, so a stale one (the object evicted or removed since) costs only the
 * hint. Policies without chain order ignore it.
 */
typedef struct store_chain {
    uint32_t node;
    uint32_t hash;
} store_chain;
#define STORE_CHAIN_INIT ((store_chain){UINT32_MAX, 0})

/* Result of store_reserve() when the key exists or is being written: nothing to do. */
#define STORE_DUP 1

/* What a pin or reservation refers to. `id` names it in store_unpin/commit/abort. */
typedef struct store_ref {
    uint64_t id;       /* nonzero; unique for the life of the store */
    uint64_t offset;   /* value's byte offset in the pool */
    uint64_t len;      /* value's length */
    uint64_t checksum; /* xxh3-64 of the value (pins only) */
} store_ref;

/*
 * Create a store. On failure returns a negative code and writes a message naming what
 * failed (memfd_create, mmap, size) to err[errlen]: TIDE_ECONFIG (capacity 0 or too large,
 * unknown policy), -errno from the pool's system calls, -ENOMEM.
 */
int store_create(const store_config *cfg, store **out, char *err, size_t errlen);
void store_destroy(store *st);

/* The default metadata budget is the pool's capacity divided by this: with it, objects of
 * one allocation unit (256 bytes) under keys of up to 24 bytes fill the pool before the
 * budget, and the heap stays at most half the pool whatever the keys. */
#define STORE_META_BUDGET_DIV 2
/* What one object of a klen-byte key is charged against the metadata budget: its record
 * and key in one heap block (glibc's header and rounding included) and STORE_META_TABLES. */
uint64_t store_meta_cost(size_t klen);
/* The budget in force, and what is charged against it now. */
uint64_t store_meta_budget(store *st);
uint64_t store_meta_charged(store *st);

/* The pool: base address in this process, its size, and the memfd behind it. */
uint8_t *store_base(store *st);
uint64_t store_capacity(store *st);
int store_fd(store *st);

/*
 * Reserve room for a value of vlen bytes under key. Returns 0 and fills *ref (offset and
 * id) — the caller then writes vlen bytes at store_base(st) + ref->offset and calls
 * store_commit() or store_abort(). Returns STORE_DUP when the key already exists or is
 * being written. Evicts unpinned objects as needed. deadline_ns (CLOCK_MONOTONIC) 0 means
 * no lease expiry. Errors: TIDE_EKEYEMPTY, TIDE_EKEYLONG, TIDE_EVALEMPTY, TIDE_EVALBIG,
 * TIDE_ENOSPACE, -ENOMEM.
 */
int store_reserve(store *st, const void *key, size_t klen, uint64_t vlen, uint64_t deadline_ns,
                  store_ref *ref);
/* Make a reservation visible with the given checksum. Errors: TIDE_ENOTFOUND (unknown or
 * expired reservation id). */
int store_commit(store *st, uint64_t id, uint64_t checksum);
/* The same as one key of a chain batch: chain is the batch's cursor (may be NULL), last is
 * nonzero for the batch's last key (callers set it only for batches of two keys or more:
 * a key put alone is not known to end a chain). */
int store_commit_chain(store *st, uint64_t id, uint64_t checksum, store_chain *chain, int last);
/* Drop a reservation and free its space. Errors: TIDE_ENOTFOUND. */
int store_abort(store *st, uint64_t id);

/*
 * Pin a committed object for reading: fills *ref (offset, len, checksum, id) and marks the
 * object recently used. Counts a get, or a miss on TIDE_ENOTFOUND. Errors: TIDE_ENOTFOUND,
 * key errors, -ENOMEM.
 */
int store_pin(store *st, const void *key, size_t klen, uint64_t deadline_ns, store_ref *ref);
/* store_pin for a reader with cap bytes of room: a value longer than cap is not pinned and
 * returns TIDE_EBUFSMALL with ref->len its length. Such a size-only answer (a caller asking
 * the size with cap 0, say) counts as neither a get nor a miss: the read that follows it
 * counts, so one value read is one get whatever it took to size the buffer. */
int store_pin_cap(store *st, const void *key, size_t klen, uint64_t deadline_ns, uint64_t cap,
                  store_ref *ref);
/* Release a pin. Errors: TIDE_ENOTFOUND (unknown or expired pin id). */
int store_unpin(store *st, uint64_t id);
/* The same as one key of a chain batch of reads (chain may be NULL). */
int store_unpin_chain(store *st, uint64_t id, store_chain *chain);

/* A reader found that the pinned bytes do not match their checksum: count it and remove
 * the object so no later reader sees it (its space is freed at the last unpin). The pin's
 * read then counts as a miss instead of a get. Call before store_unpin(). */
void store_verify_failed(store *st, uint64_t pin_id);

/* 1 if the key is committed, 0 if not, negative on a key error. */
int store_exists(store *st, const void *key, size_t klen);
/* Remove a committed key: 0, or TIDE_ENOTFOUND. With a disk tier, returns once the remove
 * is durable (its tombstone written); a negative code when the disk could not record it
 * (the key is then still there). */
int store_remove(store *st, const void *key, size_t klen);
/* Remove every committed object (pinned ones are hidden now and freed when unpinned). With
 * a disk tier, returns once the clear record is durable: 0, or -errno when it could not be
 * recorded while segment files it speaks of are still on disk (a read-only disk): the
 * objects are gone from this process, but a restart would find them, so the clear is not
 * acknowledged. */
int store_clear(store *st);

/* Release pins and reservations whose deadline is before now_ns. Returns how many. */
int store_expire(store *st, uint64_t now_ns);

/* Departure events from `from` on (events.h; tide_events_read's contract): how many were
 * copied into out[0..max). */
size_t store_events_get(store *st, uint64_t from, tide_event *out, size_t max, uint64_t *next,
                        uint64_t *lost);

/* Fill *out with the store's figures. */
void store_stats(store *st, tide_stats *out);

/* "auto", "io_uring" or "pwritev" as enum disk_io_mode, or -1. */
int store_disk_io_parse(const char *name);

/* One line on the SSD tier (what the start-up scan found, how it does I/O), or "" when the
 * store has none. */
void store_describe_disk(store *st, char *buf, size_t len);

/* Count bytes read out or stored by callers (the store does not see the copies). */
void store_count_io(store *st, uint64_t bytes_in, uint64_t bytes_out);

#endif /* TIDE_STORE_H */
