/*
 * tide.h — the one public header of libtide, a KV-cache store for LLM serving.
 *
 * A store handle (tide_store) is opened from a URL that picks the backend:
 *
 *   mem://[?capacity=1GiB&verify=1&prefault=0]   embedded in-process store (the default)
 *   mem://?capacity=256MiB&disk_dir=/ssd/tide&disk_capacity=100GiB
 *                                   the same with an SSD tier: evicted objects spill to
 *                                   disk, a get reads them back, they survive a restart
 *
 * Conventions that hold for every call below:
 *   - Return values: 0 (or a count) on success, a negative number on failure. A negative
 *     errno (-ENOMEM, -ETIMEDOUT, ...) passes through unchanged; tide's own codes are the
 *     TIDE_E* values below. tide_strerror() and tide_errname() name either kind.
 *   - Every failing call on a handle leaves a detailed message that tide_errmsg(handle)
 *     returns on the same thread until that thread's next failing call on that handle.
 *     tide_errmsg(NULL) returns the calling thread's last message from any call, which is
 *     how a failed tide_open() explains itself.
 *   - Keys are byte strings of 1..TIDE_KEY_MAX bytes. Values are immutable byte strings of
 *     at least one byte. A put of a key that already exists succeeds and changes nothing
 *     (first writer wins: keys are content addresses).
 *   - Buffers belong to the caller; the library never keeps a pointer past the call.
 *   - A handle may be used by many threads at once.
 *   - The library never prints; it reports through return values and messages.
 */
#ifndef TIDE_H
#define TIDE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define TIDE_API __attribute__((visibility("default")))
#else
#define TIDE_API
#endif

#define TIDE_VERSION_MAJOR 0
#define TIDE_VERSION_MINOR 1
#define TIDE_VERSION_PATCH 0

/* Longest key, in bytes. */
#define TIDE_KEY_MAX 256

/* ---------------------------------------------------------------------------------------
 * Error codes. 0 is success; negative errno values pass through; tide's own codes follow.
 * The table in src/common/errors.c is the single source of their names and texts.
 * ------------------------------------------------------------------------------------- */
#define TIDE_OK 0
#define TIDE_ERRBASE 1000
#define TIDE_ENOTFOUND (-1001)    /* the key is not in the store */
#define TIDE_EKEYEMPTY (-1002)    /* a key of zero bytes */
#define TIDE_EKEYLONG (-1003)     /* a key longer than TIDE_KEY_MAX */
#define TIDE_EVALEMPTY (-1004)    /* a value of zero bytes */
#define TIDE_EVALBIG (-1005)      /* a value larger than the store's limit or capacity */
#define TIDE_EBUFSMALL (-1006)    /* the caller's buffer is smaller than the value */
#define TIDE_ESCHEME (-1007)      /* a URL whose scheme no backend serves */
#define TIDE_EOPTION (-1008)      /* a URL option that is unknown or has a bad value */
#define TIDE_ESIZE (-1009)        /* a size string that does not parse ("1GiB", "512MB") */
#define TIDE_ENOSPACE (-1010)     /* no room even after evicting everything evictable */
#define TIDE_ECHECKSUM (-1011)    /* stored bytes failed their checksum (reported as a miss) */
#define TIDE_EURL (-1012)         /* a malformed URL */
#define TIDE_EPROTO (-1013)       /* a peer broke the wire protocol */
#define TIDE_EAUTH (-1014)        /* authentication failed */
#define TIDE_ECONFIG (-1015)      /* a configuration that is invalid */
#define TIDE_EUNSUPPORTED (-1016) /* a combination or operation that is not supported */
#define TIDE_EBUSY (-1017)        /* the key is being written by someone else */
#define TIDE_ELIMIT (-1018)       /* a batch, frame or connection limit was exceeded */
#define TIDE_ECLOSED (-1019)      /* the handle or connection is closed */
#define TIDE_ESERVER (-1020)      /* a server reported an internal failure */
#define TIDE_EPARSE (-1021)       /* a document (JSON, trace) does not parse */
#define TIDE_ERRLAST (-1021)

/* Name of an error code, e.g. "TIDE_ENOTFOUND" or "ENOMEM". Never NULL. */
TIDE_API const char *tide_errname(int err);
/* One-line description of an error code. Never NULL. */
TIDE_API const char *tide_strerror(int err);

/* Library version as "MAJOR.MINOR.PATCH". */
TIDE_API const char *tide_version(void);

/* ---------------------------------------------------------------------------------------
 * Stores
 * ------------------------------------------------------------------------------------- */
typedef struct tide_store tide_store;

/* A key: `len` bytes at `data`. */
typedef struct tide_key {
    const void *data;
    size_t len;
} tide_key;

/* One piece of a scatter-gather list. */
typedef struct tide_iov {
    void *base;
    size_t len;
} tide_iov;

/*
 * Open a store. `url` NULL or "" means "mem://". On success *out is a handle that
 * tide_close() frees. Errors: TIDE_ESCHEME, TIDE_EURL, TIDE_EOPTION, TIDE_ESIZE,
 * -ENOMEM, and whatever the backend reports when it cannot start (with the reason in
 * tide_errmsg(NULL)).
 */
TIDE_API int tide_open(const char *url, tide_store **out);

/* Close a store and free everything it holds. NULL is ignored. */
TIDE_API void tide_close(tide_store *s);

/* The last detailed error message for this handle on this thread (see above). */
TIDE_API const char *tide_errmsg(const tide_store *s);

/*
 * Store one value. Errors: TIDE_EKEYEMPTY, TIDE_EKEYLONG, TIDE_EVALEMPTY, TIDE_EVALBIG,
 * TIDE_ENOSPACE, transport errors. Storing an existing key returns 0 and keeps the
 * first value.
 */
TIDE_API int tide_put(tide_store *s, const void *key, size_t klen, const void *val, size_t vlen);

/*
 * Read a value into buf[0..cap). On success *vlen is the value's length. If the buffer is
 * too small the call returns TIDE_EBUFSMALL and sets *vlen to the size needed (pass
 * cap 0 to ask the size). Errors: TIDE_ENOTFOUND (also after a checksum failure, which
 * counts in the stats), key errors, transport errors.
 */
TIDE_API int tide_get(tide_store *s, const void *key, size_t klen, void *buf, size_t cap,
                      size_t *vlen);

/* 1 if the key is present, 0 if not, negative on error. */
TIDE_API int tide_exists(tide_store *s, const void *key, size_t klen);

/* Remove a key. 0 if it was removed, TIDE_ENOTFOUND if absent. */
TIDE_API int tide_remove(tide_store *s, const void *key, size_t klen);

/*
 * Batch and scatter-gather forms. One call, n keys, a result per key.
 *
 * Values are given as scatter lists: key i owns iovcnt[i] consecutive entries of `iov`
 * (key 0 the first iovcnt[0], key 1 the next iovcnt[1], ...). When iovcnt is NULL every
 * key owns exactly one entry. A value is the concatenation of its entries; for a get the
 * value is written across the entries in order and must fit in their total length.
 *
 * results[i] receives key i's own result (0 or a negative code, as the single-key call
 * would return it). For tide_get_many, vlens[i] (if vlens is not NULL) receives the value
 * length, or the size needed when results[i] is TIDE_EBUFSMALL.
 *
 * Return: the number of keys that succeeded (0..n), or a negative code when the call as a
 * whole failed (then results[] is unspecified). n may be 0. At most TIDE_BATCH_MAX keys.
 */
#define TIDE_BATCH_MAX 65536
TIDE_API int tide_put_many(tide_store *s, const tide_key *keys, size_t n, const tide_iov *iov,
                           const size_t *iovcnt, int *results);
TIDE_API int tide_get_many(tide_store *s, const tide_key *keys, size_t n, const tide_iov *iov,
                           const size_t *iovcnt, int *results, size_t *vlens);
/* present[i] = 1 if key i exists, else 0. Returns how many exist, or a negative code. */
TIDE_API int tide_exists_many(tide_store *s, const tide_key *keys, size_t n, uint8_t *present);
/* results[i] = 0 (removed) or TIDE_ENOTFOUND. Returns how many were removed. */
TIDE_API int tide_remove_many(tide_store *s, const tide_key *keys, size_t n, int *results);

/*
 * The number of leading keys (keys[0], keys[1], ...) that are all present: the length of
 * the longest stored prefix of a chain of block keys. Negative on error.
 */
TIDE_API int tide_match_prefix(tide_store *s, const tide_key *keys, size_t n);

/* Remove every object. */
TIDE_API int tide_clear(tide_store *s);

/* Figures a store reports about itself. Counters are totals since the store started. */
typedef struct tide_stats {
    uint64_t capacity_bytes;  /* pool size */
    uint64_t used_bytes;      /* bytes held by objects and reservations (allocator units) */
    uint64_t objects;         /* committed objects */
    uint64_t puts;            /* put operations that stored a new object */
    uint64_t put_dups;        /* puts of a key that already existed */
    uint64_t gets;            /* get operations that returned a value */
    uint64_t misses;          /* get operations that found nothing */
    uint64_t evictions;       /* objects evicted to make room */
    uint64_t evicted_bytes;   /* bytes those objects held */
    uint64_t checksum_errors; /* reads whose checksum failed */
    uint64_t bytes_in;        /* value bytes stored */
    uint64_t bytes_out;       /* value bytes read */
    uint64_t meta_bytes;      /* memory spent on metadata (index, records, allocator) */
    uint64_t pinned;          /* objects pinned by readers (or held for the disk writer) now */
    uint64_t reserved;        /* puts reserved but not yet committed right now */
    /* The SSD tier (all 0 when the store has none). Added after the fields above, which
     * keep their offsets. */
    uint64_t disk_capacity_bytes;  /* segment file bytes allowed */
    uint64_t disk_used_bytes;      /* bytes in segment files */
    uint64_t disk_objects;         /* objects with a record on disk */
    uint64_t disk_segments;        /* segment files */
    uint64_t disk_writes;          /* objects written to disk (spilled from memory) */
    uint64_t disk_write_bytes;     /* value bytes of those writes */
    uint64_t disk_reads;           /* objects read back from disk and verified */
    uint64_t disk_read_bytes;      /* value bytes of those reads */
    uint64_t disk_promotions;      /* disk reads promoted into memory to serve a get */
    uint64_t disk_errors;          /* failed disk writes and reads (I/O errors, disk full) */
    uint64_t disk_checksum_errors; /* read-backs that failed verification (served as misses) */
    uint64_t disk_dropped;         /* objects evicted from memory that could not be written */
    uint64_t disk_evictions;       /* objects dropped from disk with their segment */
    uint64_t disk_torn_records;    /* damaged or torn records skipped when the files were scanned */
    uint64_t disk_queued_bytes;    /* evicted bytes held in memory until the writer writes them */
} tide_stats;

/* Fill *st with the store's figures. */
TIDE_API int tide_stats_get(tide_store *s, tide_stats *st);

/* ---------------------------------------------------------------------------------------
 * Utilities
 * ------------------------------------------------------------------------------------- */

/*
 * Parse a size: a decimal number with an optional unit — B, K/KB, M/MB, G/GB, T/TB
 * (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024), case-insensitive, optional
 * space before the unit. "4096", "512MB", "1GiB", "1.5GiB". Errors: TIDE_ESIZE.
 */
TIDE_API int tide_size_parse(const char *text, uint64_t *out);

/* ---------------------------------------------------------------------------------------
 * Prefix hashing: chained 128-bit block hashes over token ids.
 *
 * For block i (tokens t[0..n) of that block), with parent P (16 bytes; for the first block
 * P is 16 zero bytes) and optional extra-key bytes E (a cache salt, a LoRA name,
 * multimodal hashes — whatever must separate otherwise equal tokens):
 *
 *   input = P[16] || le32(n) || le32(t[0]) || ... || le32(t[n-1]) || le32(|E|) || E
 *
 *   TIDE_HASH_XXH3:   h = XXH3_128bits(input), written as le64(low64) || le64(high64)
 *   TIDE_HASH_SHA256: h = the first 16 bytes of SHA-256(input)
 *
 * Test vectors are in tests/unit/test_hash.c.
 * ------------------------------------------------------------------------------------- */
#define TIDE_HASH_BYTES 16
typedef enum tide_hash_algo { TIDE_HASH_XXH3 = 0, TIDE_HASH_SHA256 = 1 } tide_hash_algo;

/*
 * Hash one block given its parent (NULL for the first block, the same as 16 zero bytes).
 * ntokens may be 0. Errors: -EINVAL for an unknown algo, a NULL out, NULL tokens with
 * ntokens > 0, NULL extra with extra_len > 0, or a length that does not fit in 32 bits;
 * -ENOMEM when OpenSSL cannot allocate its digest context.
 */
TIDE_API int tide_block_hash(tide_hash_algo algo, const uint8_t *parent, const uint32_t *tokens,
                             size_t ntokens, const void *extra, size_t extra_len,
                             uint8_t out[TIDE_HASH_BYTES]);

/*
 * Hash the full blocks of a token sequence: floor(ntokens / block_tokens) hashes written to
 * out (16 bytes each). `extra` applies to the first block only (a cache salt); pass NULL
 * for none. At most max_hashes are written (the first ones of the chain; out may be NULL
 * when max_hashes is 0); a partial trailing block is not hashed. Returns the number of
 * hashes written, or a negative code: -EINVAL for block_tokens 0 and the argument errors
 * of tide_block_hash(), -EOVERFLOW when the count would not fit in an int.
 */
TIDE_API int tide_prefix_hashes(tide_hash_algo algo, const uint32_t *tokens, size_t ntokens,
                                size_t block_tokens, const void *extra, size_t extra_len,
                                uint8_t *out, size_t max_hashes);

/* Write the 32 lowercase hex digits of a hash and a NUL to out[33]. */
TIDE_API void tide_hash_hex(const uint8_t h[TIDE_HASH_BYTES], char out[33]);

#ifdef __cplusplus
}
#endif
#endif /* TIDE_H */
