/*
 * disk.h — the SSD tier's segment store: objects kept in append-only segment files under
 * one directory, with an in-memory index from key to record that is rebuilt from the files
 * when the directory is opened. store.c (through tier.c) is its only user.
 *
 * Files: DIR/tide.secret (32 random bytes, mode 0600, made at first use) and
 * DIR/<seq as 16 hex digits>.seg, seq growing. A segment (format 2) starts with a 64-byte
 * header (magic "TIDESEG1", version 2, seq, time, a random 16-byte nonce, the id of the
 * secret, an HMAC of the header), then records at 8-byte aligned offsets:
 *
 *   record header, 32 bytes, little-endian:
 *     u32 magic 'TREC'   u8 kind (1 object, 2 tombstone, 3 clear)   u8 0   u16 klen
 *     u64 vlen           u64 vsum (xxh3-64 of the value: the store's checksum)
 *     u64 hsum (HMAC-SHA256, keyed by the secret, of the segment's nonce, seq, the
 *              record's offset, the 24 bytes above and the key; its first 8 bytes)
 *   key (klen bytes), value (vlen bytes), zeros to the next multiple of 8
 *
 * A tombstone (vlen 0) records a remove, a clear record (klen 0) a tide_clear; both are
 * applied in file order when the index is rebuilt. Nobody without the secret can make
 * bytes that pass for a record, and a record is valid only in its file at its offset.
 *
 * Guarantees: a record is in the index (disk_contains, disk_find) only after its write has
 * completed, so after a crash every indexed record is found again by the scan; records
 * written in the same call whose completion was never reported may or may not be. Values
 * are verified against vsum on every read (disk_read); the scan checks headers only. The
 * scan walks each segment from its first record by the lengths of verified headers and
 * never searches for objects: the first record that fails to verify ends its segment (it
 * and the rest are cut off and counted), so a damaged record is dropped and nothing inside
 * a value is ever read as a record. Only tombstones and clear records in the cut-off tail
 * are looked for, accepted where their keyed checksum holds at their offset, and applied,
 * so that damage never undoes a remove. Segments of format 1 or written under another secret are
 * deleted unread (counted in disk_describe). A remove or clear that reached disk_remove/disk_clear
 * with a ticket is acknowledged only once its record is durable (disk_ticket) — or once
 * what it removes has left the disk with its segment; never dropped. Eviction drops whole
 * segments, oldest first, when a write would take the files past the capacity or the
 * index past its budget.
 *
 * Threads: every function may be called from any thread, except disk_write(), which one
 * thread at a time calls (the tier's writer). Lock order: a caller may hold the store's
 * lock when calling in; the disk's own lock is taken inside and nothing is called out
 * while holding it.
 */
#ifndef TIDE_DISK_H
#define TIDE_DISK_H

#include <stddef.h>
#include <stdint.h>

#include "tide.h"

typedef struct disk disk;
typedef struct disk_seg disk_seg;

enum disk_io_mode { DISK_IO_AUTO = 0, DISK_IO_URING = 1, DISK_IO_PSYNC = 2 };

typedef struct disk_config {
    const char *dir;             /* created if missing */
    uint64_t capacity;           /* bytes of segment files at most */
    uint64_t segment_size;       /* 0 = capacity/8 clamped to 1..64 MiB, at least capacity/256 */
    int io;                      /* enum disk_io_mode: how writes are issued */
    uint64_t index_budget;       /* heap bytes for the index; 0 = disk_index_budget()'s default */
    struct store_events *events; /* where keys evicted with their segment are announced */
} disk_config;

/* The index's default budget: capacity / DISK_INDEX_SHARE, at least DISK_INDEX_MIN. An
 * object's entry costs about 72 bytes plus its key (docs/SSD.md); at the default, objects
 * of 1 KiB and more fill the capacity before the index fills its budget. */
#define DISK_INDEX_SHARE 8
#define DISK_INDEX_MIN (1ull << 20)
uint64_t disk_index_budget(const disk_config *cfg);

/* Where a record is. Holds a reference on its segment (the file stays open even if the
 * segment is evicted meanwhile) until disk_loc_put(). */
typedef struct disk_loc {
    disk_seg *seg;
    uint64_t off;  /* the record's offset in its file */
    uint64_t vlen; /* value length */
    uint64_t sum;  /* value checksum */
} disk_loc;

/* One object for disk_write(). The key and value must stay valid and unchanged for the
 * call. `result` is filled: 0 written and indexed, or a negative code. */
typedef struct disk_item {
    const uint8_t *key;
    const uint8_t *val;
    uint64_t vlen, sum;
    uint16_t klen;
    int result;
} disk_item;

/*
 * Open (creating if needed) the directory and its secret, scan every segment and build the
 * index. A damaged record ends its segment's scan (cut off), files whose header is not a
 * segment's are renamed to *.bad (with records after it, every older segment is dropped:
 * its removes are unknown), segments of format 1 or of another secret are deleted.
 * Errors (with a message naming the path and errno): -errno from mkdir, opendir, open,
 * read, ftruncate, unlink; TIDE_ECONFIG for a zero capacity, a forced io_uring the kernel
 * refuses, or a secret file with group or other permission bits, another owner or the
 * wrong size; -ENOMEM.
 */
int disk_open(const disk_config *cfg, disk **out, char *err, size_t errlen);
/* Close every file and free the index. */
void disk_close(disk *d);
/* One line on what the open found and how writes are issued, for the daemon's log. */
void disk_describe(disk *d, char *buf, size_t len);

/* 1 if the key has a record, else 0. */
int disk_contains(disk *d, const void *key, size_t klen);
/* Find a key's record: 0 and *loc (referenced), or TIDE_ENOTFOUND. */
int disk_find(disk *d, const void *key, size_t klen, disk_loc *loc);
/* Release a location's reference. */
void disk_loc_put(disk *d, disk_loc *loc);
/*
 * Read the record at loc: its value goes to dst (loc->vlen bytes). The header, the key and
 * the value's checksum are all verified. No lock is held during the read. Returns 0;
 * TIDE_ECHECKSUM when anything fails to verify or the file is shorter than the record
 * (counted as a disk checksum error); -errno when the read fails (counted as an error).
 */
int disk_read(disk *d, const disk_loc *loc, const void *key, size_t klen, void *dst);
/* Forget a record that failed disk_read(): its index entry goes (if it still names that
 * record) and a tombstone is queued so a restart does not bring it back. */
void disk_forget(disk *d, const disk_loc *loc, const void *key, size_t klen);

/*
 * Remove a key: 0 (a tombstone is queued for the writer), TIDE_ENOTFOUND, or -ENOMEM. With
 * a ticket, the key's record stays in the index until the tombstone is durable; the caller
 * must then wait (disk_ticket) before acknowledging the remove. Without (NULL), the entry
 * goes at once and the tombstone is best effort (for records a later clear record covers).
 */
int disk_remove(disk *d, const void *key, size_t klen, uint64_t *ticket);
/* Forget every record and delete the sealed segments; a clear record is queued under a
 * ticket to wait for. 0, or -ENOMEM (nothing queued; the segments are gone all the same). */
int disk_clear(disk *d, uint64_t *ticket);
/* A ticket's state: 1 still queued or being written, 0 durable, or the negative code with
 * which it was refused (-errno). Once it returned 0 or below, the ticket is spent. */
int disk_ticket(disk *d, uint64_t ticket);
/* Tombstones and clear records waiting for disk_write(). */
int disk_pending(disk *d);

/*
 * Append records for items[0..n) (and first any queued tombstones), wait for the writes to
 * complete, then index the written objects. One caller at a time. On a failed write the
 * segment is cut back to its last good record and the affected items get the error; the
 * first failure's message (naming the file and errno) goes to err. Returns the number of
 * items that failed.
 */
size_t disk_write(disk *d, disk_item *items, size_t n, char *err, size_t errlen);

/* Heap bytes the index takes now (entries, hash table, segments). */
uint64_t disk_index_bytes(disk *d);

/* Fill the disk_* fields of *out. */
void disk_stats(disk *d, tide_stats *out);

/* Size of a record with a klen-byte key and a vlen-byte value. */
uint64_t disk_record_size(uint64_t klen, uint64_t vlen);

#endif /* TIDE_DISK_H */
