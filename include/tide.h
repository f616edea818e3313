/*
 * tide.h — the one public header of libtide, a KV-cache store for LLM serving.
 *
 * A store handle (tide_store) is opened from a URL that picks the backend:
 *
 *   mem://[?capacity=1GiB&verify=1&prefault=0]   embedded in-process store (the default)
 *   tide://HOST:PORT[?timeout_ms=5000&conns=8&token=T]   one tided over TCP
 *   tide://H1:P1,H2:P2,...?replicas=R            a cluster of tided nodes (static list)
 *   etcd://HOST:2379/CLUSTER?replicas=R          a cluster whose members come from etcd
 *   unix:///path/to/tide.sock[?verify=1]          same-host tided, sharing its pool (docs/UNIX.md)
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
 *
 * TIDE_ERRNO_MAP is the one list of tide's codes: XX(NAME, value, text) for each, in
 * order, where TIDE_NAME is the constant, value its number (stable: a new code goes at the
 * end with the next number) and text what tide_strerror() returns; the comment above each
 * says what it means. The TIDE_E* constants below, tide_errname() and tide_strerror()
 * (src/common/errors.c) all expand this list, and the Python binding's copy
 * (python/tide/errors.py) is checked against it by tests/python/test_binding.py.
 * ------------------------------------------------------------------------------------- */
#define TIDE_ERRNO_MAP(XX)                                                                         \
    /* the key is not in the store */                                                              \
    XX(ENOTFOUND, -1001, "key not found")                                                          \
    /* a key of zero bytes */                                                                      \
    XX(EKEYEMPTY, -1002, "empty key")                                                              \
    /* a key longer than TIDE_KEY_MAX */                                                           \
    XX(EKEYLONG, -1003, "key longer than 256 bytes")                                               \
    /* a value of zero bytes */                                                                    \
    XX(EVALEMPTY, -1004, "empty value")                                                            \
    /* a value larger than the store's limit or capacity */                                        \
    XX(EVALBIG, -1005, "value larger than the store accepts")                                      \
    /* the caller's buffer is smaller than the value */                                            \
    XX(EBUFSMALL, -1006, "buffer too small for the value")                                         \
    /* a URL whose scheme no backend serves */                                                     \
    XX(ESCHEME, -1007, "unknown URL scheme")                                                       \
    /* a URL option that is unknown or has a bad value */                                          \
    XX(EOPTION, -1008, "unknown or invalid URL option")                                            \
    /* a size string that does not parse ("1GiB", "512MB") */                                      \
    XX(ESIZE, -1009, "size does not parse")                                                        \
    /* no room even after evicting everything evictable */                                         \
    XX(ENOSPACE, -1010, "no space left in the store (pool or metadata budget)")                    \
    /* stored bytes failed their checksum (reported as a miss) */                                  \
    XX(ECHECKSUM, -1011, "stored bytes failed their checksum")                                     \
    /* a malformed URL */                                                                          \
    XX(EURL, -1012, "malformed URL")                                                               \
    /* a peer broke the wire protocol */                                                           \
    XX(EPROTO, -1013, "protocol error")                                                            \
    /* authentication failed */                                                                    \
    XX(EAUTH, -1014, "authentication failed")                                                      \
    /* a configuration that is invalid */                                                          \
    XX(ECONFIG, -1015, "invalid configuration")                                                    \
    /* a combination or operation that is not supported */                                         \
    XX(EUNSUPPORTED, -1016, "not supported")                                                       \
    /* the key is being written by someone else */                                                 \
    XX(EBUSY, -1017, "key is being written")                                                       \
    /* a batch, frame or connection limit was exceeded */                                          \
    XX(ELIMIT, -1018, "limit exceeded")                                                            \
    /* the handle or connection is closed */                                                       \
    XX(ECLOSED, -1019, "closed")                                                                   \
    /* a server reported an internal failure */                                                    \
    XX(ESERVER, -1020, "server error")                                                             \
    /* a document (JSON, trace) does not parse */                                                  \
    XX(EPARSE, -1021, "document does not parse")                                                   \
    /* partial-tail offloads of one request name two boundaries */                                 \
    XX(EPARTIALTAIL, -1022, "partial-tail offloads name different boundaries")                     \
    /* device memory: no runtime, not device memory, a copy failed */                              \
    XX(EDEVICE, -1023, "device memory error")

#define TIDE_OK 0
#define TIDE_ERRBASE 1000
enum {
#define TIDE__ERRCODE(name, value, text) TIDE_##name = (value),
    TIDE_ERRNO_MAP(TIDE__ERRCODE)
#undef TIDE__ERRCODE
};
/* The last tide code: they run from -(TIDE_ERRBASE + 1) down to TIDE_ERRLAST, no gap. */
#define TIDE__ERRONE(name, value, text) +1
#define TIDE_ERRLAST (-TIDE_ERRBASE - (0 TIDE_ERRNO_MAP(TIDE__ERRONE)))

/* Name of an error code, e.g. "TIDE_ENOTFOUND" or "ENOMEM". Never NULL. */
TIDE_API const char *tide_errname(int err);
/* One-line description of an error code. Never NULL. */
TIDE_API const char *tide_strerror(int err);

/* Copy text to out[cap] with every secret in it masked as "***": the value of a URL option
 * whose name ends in "token", "password" or "secret", the password of scheme://user:PW@,
 * and the token in $TIDE_AUTH_TOKEN (8 bytes or more) wherever it appears. Every URL and message
 * tide prints or writes passes through this; use it for URLs your program prints. Returns the
 * length the whole result needs (as snprintf does); out is NUL-terminated and cut to fit when cap >
 * 0. text NULL reads as "". */
TIDE_API size_t tide_redact(const char *text, char *out, size_t cap);

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
/*
 * Buffers used again and again with transport=ucx (docs/UCX.md, "Registered buffers"):
 * tide_buffer_register declares [base, base+len) so that each UCX context registers it
 * once (ucp_mem_map, on the first transfer that touches it) and every later transfer from
 * or into it passes that registration instead of UCX registering per transfer. At most
 * TIDE_BUFFER_MAX ranges are declared at once; each context keeps at most 16 of them
 * registered and unregisters the least recently used beyond that (it is registered again
 * when used again), never one the same call is using (ranges beyond 16 in one call are
 * left to UCX). The contract: call tide_buffer_unregister with the same range before
 * the memory is freed or unmapped, and not while a call moves bytes from or into it;
 * after it no registration of the range is left. Buffers never declared are registered by
 * UCX itself. Other transports ignore declarations. Errors: -EINVAL (NULL base or len
 * 0), TIDE_ELIMIT (TIDE_BUFFER_MAX ranges declared), TIDE_ENOTFOUND (unregister of a range
 * not declared), TIDE_EBUSY (register of a range overlapping a declared one).
 */
#define TIDE_BUFFER_MAX 1024
TIDE_API int tide_buffer_register(const void *base, size_t len);
TIDE_API int tide_buffer_unregister(const void *base, size_t len);

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

/* Remove every object. 0, or a negative error: with an SSD tier that cannot record the
 * clear (a disk gone read-only), the objects are gone from the running store but a restart
 * could bring them back, so the clear is refused (docs/SSD.md). */
TIDE_API int tide_clear(tide_store *s);

/*
 * Departure events: a store numbers every key that leaves it (removed, evicted with no
 * copy left on its SSD tier, dropped after a failed checksum or disk write) and every
 * clear, and keeps the newest events in a bounded ring, so that whoever announces what the
 * store holds (the vLLM connector's KV events, for routers) can announce what it lost too.
 */
#define TIDE_DEPARTURE_REMOVED 1 /* removed by a caller (tide_remove_many) */
/* evicted for room, or dropped from the SSD tier's oldest segment */
#define TIDE_DEPARTURE_EVICTED 2
#define TIDE_DEPARTURE_DROPPED 3 /* dropped: failed its checksum, or its disk write failed */
#define TIDE_DEPARTURE_CLEARED 4 /* every key left (tide_clear); klen 0 */

typedef struct tide_event {
    uint64_t seq;  /* 1, 2, 3, ... in the order the store saw them */
    uint32_t kind; /* TIDE_DEPARTURE_* */
    uint32_t klen; /* bytes of key (0 for TIDE_DEPARTURE_CLEARED) */
    uint8_t key[TIDE_KEY_MAX];
} tide_event;

/*
 * Read up to max departure events numbered `from` on into ev[0..max), oldest first, and
 * return how many (0..max). *next receives the number to pass next time. *lost receives
 * how many events numbered from `from` on the store no longer holds (the caller fell behind
 * its ring of a few thousand events, or the store restarted: then 1 at least): those
 * departures are unknown, so a caller that mirrors the store's contents must treat
 * everything as gone. from 0 starts at the current end: no events, *next set.
 * mem://, unix:// and tide:// (one server) support it. Errors: -EINVAL for a NULL pointer,
 * TIDE_EUNSUPPORTED for a backend without the feed (a cluster, an older tided), the
 * backend's I/O errors.
 */
TIDE_API int tide_events_read(tide_store *s, uint64_t from, tide_event *ev, size_t max,
                              uint64_t *next, uint64_t *lost);

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

/* The most a caller may claim as its size of any struct the library fills (a program
 * built against a newer header with more fields): tide_stats_get, tide_cluster_info_get,
 * tide_connector_get_info, tide_connector_get_stats. */
#define TIDE_STRUCT_SIZE_MAX 4096
/* The size of the first tide_stats (its fields up to `reserved`). */
#define TIDE_STATS_SIZE_V1 120
#define TIDE_STATS_SIZE_MAX TIDE_STRUCT_SIZE_MAX

/*
 * Fill st[0..size) with the store's figures. Pass size = sizeof(tide_stats) as the
 * caller's header has it (sizeof *st): that is what makes the struct safe to grow. The
 * library writes only the fields that fit in size, so a program built against an older
 * header gets its own fields and nothing past its struct; fields the library does not know
 * (a caller built against a newer header) read 0. New fields are only ever added at the
 * end. On failure the fields that fit are 0 or partial.
 *
 * For a cluster the figures are the sums over the members that answered, and each
 * replica counts: a key stored with R copies adds R to objects and puts, and R times its
 * size to bytes_in and used_bytes.
 *
 * Errors: -EINVAL for a NULL argument, or a size that is not a multiple of 8 from
 * TIDE_STATS_SIZE_V1 to TIDE_STATS_SIZE_MAX (the message names it); the backend's errors.
 */
TIDE_API int tide_stats_get(tide_store *s, tide_stats *st, size_t size);

/* ---------------------------------------------------------------------------------------
 * Clusters: tide://H1:P1,H2:P2,...?replicas=R and etcd://E:2379/CLUSTER?replicas=R.
 *
 * A key lives on the R members ranked highest for it by rendezvous hashing over the live
 * members. A put stores R copies and succeeds for a key when at least one copy was stored;
 * how many were stored is counted below. A get tries the key's members in rank order,
 * failing over on an error or a timeout, and after a miss also asks the next-ranked ones
 * (keys written before a join stay reachable). A member that fails is skipped for a
 * back-off period, then tried again. See README.md, "Clusters", for the URL options.
 * ------------------------------------------------------------------------------------- */

/* What a cluster handle has seen since it was opened (this handle only). */
typedef struct tide_cluster_info {
    uint32_t members;      /* members in the current view */
    uint32_t members_down; /* of which backing off after a failure right now */
    uint32_t replicas;     /* R: copies a put writes */
    uint32_t reserved0;
    uint64_t view_changes;   /* membership changes seen (etcd) */
    uint64_t copies_written; /* copies stored by puts */
    uint64_t puts_degraded;  /* keys stored with fewer than R copies (but at least one) */
    uint64_t puts_failed;    /* keys of which no copy could be stored */
    uint64_t read_failovers; /* reads answered by a later member after an earlier one failed */
    uint64_t read_fallbacks; /* reads found on a later member after the first one missed */
    uint64_t node_errors;    /* calls to a member that failed (it is then backed off) */
    uint64_t etcd_errors;    /* membership reads from etcd that failed (the view stays) */
} tide_cluster_info;

#define TIDE_CLUSTER_INFO_SIZE_V1 80 /* the size of the first tide_cluster_info */
/* Fill info[0..size); pass size = sizeof *info (as tide_stats_get: only the fields that fit
 * are written, fields this library does not know read 0). Errors: TIDE_EUNSUPPORTED when s
 * is not a cluster handle; -EINVAL for a NULL argument or a size that is not a multiple of
 * 8 from TIDE_CLUSTER_INFO_SIZE_V1 to TIDE_STRUCT_SIZE_MAX. */
TIDE_API int tide_cluster_info_get(tide_store *s, tide_cluster_info *info, size_t size);

/*
 * The current members as text, one "HOST:PORT up|down" line each, NUL-terminated, into
 * buf[0..cap). Returns the number of members, TIDE_EBUFSMALL when buf is too small,
 * TIDE_EUNSUPPORTED when s is not a cluster handle, -EINVAL.
 */
TIDE_API int tide_cluster_members(tide_store *s, char *buf, size_t cap);

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

/* ---------------------------------------------------------------------------------------
 * Connector: vLLM's KV-cache connector semantics (what to look up, save and load), for the
 * Python vLLM module (through ctypes) and tide's reference engine. docs/CONNECTOR.md
 * explains the job lifecycle, the threads and the lookup algorithm.
 *
 * One handle serves one engine rank in one role:
 *   TIDE_CONNECTOR_SCHEDULER  lookups, per-request state, per-step metadata
 *   TIDE_CONNECTOR_WORKER     paged regions, background saves and loads, completions
 * (lookups work in either role: they need only the configuration and the store).
 *
 * Conventions (besides the store's): request ids are NUL-terminated strings of 1..255
 * bytes. Block hashes are passed as one byte array of nhashes * hash_len bytes: hash i
 * covers the first (i + 1) * hash_block_size tokens (vLLM's request.block_hashes, or
 * tide_prefix_hashes() over the hash block size). Block ids are int32; a negative id means
 * "no block" (pass vLLM's null block as -1). Lists of block ids per KV-cache group are
 * flattened: group 0's ids, then group 1's, ..., with counts[g] ids for group g.
 * A failing call returns a negative code and leaves a message for
 * tide_connector_errmsg(handle) (tide_connector_errmsg(NULL) after a failed create).
 * ------------------------------------------------------------------------------------- */
typedef struct tide_connector tide_connector;
typedef struct tide_connector_meta tide_connector_meta;

#define TIDE_CONNECTOR_SCHEDULER 0
#define TIDE_CONNECTOR_WORKER 1

/* Job kinds (also bit flags for tide_connector_start_jobs). */
#define TIDE_CONNECTOR_LOAD 1
#define TIDE_CONNECTOR_SAVE 2

/*
 * Create a connector from a configuration document (docs/CONNECTOR_CONFIG.md; JSON text,
 * NUL-terminated) and a store URL (NULL or "" = mem://). The configuration is parsed,
 * checked and validated with tide's rules; an unsupported one fails with
 * TIDE_EUNSUPPORTED and the message "TideStoreConnector does not support: ...".
 * A worker starts its background threads here. Errors: TIDE_EPARSE, TIDE_ECONFIG (every
 * problem, joined by "; "), TIDE_EUNSUPPORTED, -EINVAL (bad role), -ENOMEM, and
 * tide_open()'s errors.
 */
TIDE_API int tide_connector_create(const char *config_json, const char *store_url, int role,
                                   tide_connector **out);
/* The same with the configuration read from a file. Errors also: a negative errno. */
TIDE_API int tide_connector_create_file(const char *config_path, const char *store_url, int role,
                                        tide_connector **out);
/* The same over a store the caller opened; the connector borrows it, and the caller closes
 * it after tide_connector_destroy(). */
TIDE_API int tide_connector_create_with_store(const char *config_json, tide_store *store, int role,
                                              tide_connector **out);
/* Wait for every queued job, stop the threads, free everything. NULL is ignored. */
TIDE_API void tide_connector_destroy(tide_connector *c);
/* The last detailed message of this handle on this thread (see tide_errmsg). */
TIDE_API const char *tide_connector_errmsg(const tide_connector *c);

/* What the configuration resolved to. */
typedef struct tide_connector_info {
    int role;                     /* TIDE_CONNECTOR_SCHEDULER or _WORKER */
    int ngroups;                  /* KV-cache groups */
    int64_t scheduler_block_size; /* hits and saves are aligned to it */
    int64_t hash_block_size;      /* tokens per block hash */
    int hash_bytes;               /* bytes of one hash of the configured algorithm */
    int load_async;               /* loads complete asynchronously (extra config) */
    int capacity_only;            /* the rank only lends memory: lookups say 0, no saves */
    int saves;                    /* this role saves (producer, kv_both, save_decode_cache) */
    int partial_hits; /* hits and loads at hash_block_size granularity; partial tails saved */
} tide_connector_info;
#define TIDE_CONNECTOR_INFO_SIZE_V1 48 /* the size of the first tide_connector_info */
/* Fill out[0..size); pass size = sizeof *out (as tide_stats_get). Errors: -EINVAL for a
 * NULL argument or a size that is not a multiple of 8 from TIDE_CONNECTOR_INFO_SIZE_V1 to
 * TIDE_STRUCT_SIZE_MAX. */
TIDE_API int tide_connector_get_info(tide_connector *c, tide_connector_info *out, size_t size);

/* ---- scheduler side ---------------------------------------------------------------- */

/*
 * The longest prefix of a prompt of num_tokens tokens that the store can supply, in
 * tokens: present for every group in every lookup namespace, aligned to the scheduler
 * block size, never the whole prompt (the last token is always computed). Pure: no
 * request state is kept. One batched existence query per call. hash_len is 1..64.
 * Errors: -EINVAL, TIDE_EKEYLONG, -ENOMEM, the store's errors.
 */
TIDE_API int tide_connector_hit_tokens(tide_connector *c, int64_t num_tokens, const uint8_t *hashes,
                                       size_t nhashes, size_t hash_len, int64_t *hit_tokens);
/*
 * vLLM's get_num_new_matched_tokens: *num_new = tokens beyond num_computed that can be
 * loaded (0 if none). When > 0 the request gets a load spec that
 * tide_connector_update_after_alloc() arms. Errors as tide_connector_hit_tokens().
 */
TIDE_API int tide_connector_lookup(tide_connector *c, const char *req_id, int64_t num_tokens,
                                   const uint8_t *hashes, size_t nhashes, size_t hash_len,
                                   int64_t num_computed, int64_t *num_new);
/*
 * vLLM's update_state_after_alloc: the request's block table (every group, flattened as
 * described above; it replaces what was known) and the external tokens granted. A load is
 * planned only when num_external_tokens equals the tokens the lookup offered.
 * Errors: -EINVAL (ngroups differs from the configuration, or a mismatch), -ENOMEM.
 */
TIDE_API int tide_connector_update_after_alloc(tide_connector *c, const char *req_id,
                                               const int32_t *block_ids, const size_t *counts,
                                               size_t ngroups, int64_t num_external_tokens);
/*
 * One scheduled step of a request: after this step's forward pass the request will have
 * computed_tokens tokens of KV; prompt_tokens is its prompt (prefill) length; hashes are
 * its current block hashes; new_block_ids (flattened, counts per group) are appended to
 * its block table — or replace it when is_new is 1 (a new or resumed request).
 * Errors: -EINVAL, -ENOMEM.
 */
TIDE_API int tide_connector_request_step(tide_connector *c, const char *req_id,
                                         int64_t prompt_tokens, int64_t computed_tokens,
                                         const uint8_t *hashes, size_t nhashes, size_t hash_len,
                                         const int32_t *new_block_ids, const size_t *counts,
                                         size_t ngroups, int is_new);
/*
 * Partial-tail offload (hybrid models, Mamba in align mode, when the configuration has
 * partial hits — tide_connector_info.partial_hits): the request's prompt ends inside a
 * block, and the engine copied the Mamba state at the boundary (its last prompt hash
 * boundary, boundary tokens) into a private block. n entries, one per Mamba group:
 * groups[i] (a group index), block_ids[i] (the private block; negative: none) and
 * boundaries[i] (tokens). The next metadata saves, keyed by the boundary's sub-hash, that
 * state and each attention group's blocks up to the boundary (the last one partial), so a
 * later lookup can hit at the boundary. Keep the private blocks unchanged until the
 * request is reported saved. May come before or after tide_connector_request_finished of
 * the request's last step (then it returns 1 and the request is planned once more).
 * Returns how many entries were accepted: 0 when the role does not save, the
 * configuration has no partial hits, the request is unknown, or the boundary is past its
 * prompt. Errors: TIDE_EPARTIALTAIL with the message "Partial-tail offloads for one
 * request must share a boundary" when the entries (or an earlier call's pending entries
 * for the request) name different boundaries; -EINVAL.
 */
TIDE_API int tide_connector_request_partial_tail(tide_connector *c, const char *req_id,
                                                 const int32_t *groups, const int32_t *block_ids,
                                                 const int64_t *boundaries, size_t n);
/* The request was preempted: its block table, load spec and save progress are dropped. */
TIDE_API int tide_connector_request_preempted(tide_connector *c, const char *req_id);
/*
 * The request finished. Returns 1 when its blocks must stay allocated until the workers
 * report it saved (tide_connector_get_finished(TIDE_CONNECTOR_SAVE) on every rank), 0
 * when they can be freed now, or a negative code.
 */
TIDE_API int tide_connector_request_finished(tide_connector *c, const char *req_id);
/*
 * The jobs of this step: a load for each request whose load was armed, a save for each
 * request with new blocks to store, and the requests finished since the last call. The
 * caller frees *out with tide_connector_meta_free(). Errors: -ENOMEM.
 */
TIDE_API int tide_connector_build_meta(tide_connector *c, tide_connector_meta **out);
/* Drop every request's state; on a worker wait for the queued jobs first. With
 * clear_store 1 the store is emptied too (vLLM's reset_cache). */
TIDE_API int tide_connector_reset(tide_connector *c, int clear_store);

/* ---- metadata: read it, or move it between processes -------------------------------- */

typedef struct tide_connector_job {
    int kind;             /* TIDE_CONNECTOR_LOAD or TIDE_CONNECTOR_SAVE */
    const char *req_id;   /* lives as long as the metadata */
    int64_t start_tokens; /* first token of the range this job covers */
    int64_t end_tokens;   /* end of that range (a load: the hit length) */
    size_t nblocks;       /* objects to move */
} tide_connector_job;

typedef struct tide_connector_block {
    int group;           /* KV-cache group */
    int32_t block_id;    /* the block (page) in the group's registered regions */
    int64_t end_token;   /* the object covers tokens up to this position */
    const uint8_t *hash; /* its block hash (hash_len bytes; lives as long as the metadata) */
    size_t hash_len;
} tide_connector_block;

TIDE_API size_t tide_connector_meta_num_jobs(const tide_connector_meta *m);
/* Errors: -EINVAL (index out of range). */
TIDE_API int tide_connector_meta_job(const tide_connector_meta *m, size_t i,
                                     tide_connector_job *out);
TIDE_API int tide_connector_meta_block(const tide_connector_meta *m, size_t job, size_t k,
                                       tide_connector_block *out);
/* Requests finished (and kept alive for their saves) since the previous metadata. */
TIDE_API size_t tide_connector_meta_num_finished(const tide_connector_meta *m);
TIDE_API const char *tide_connector_meta_finished(const tide_connector_meta *m, size_t i);
/* Serialize into buf[0..cap); *len = the size (also on TIDE_EBUFSMALL; cap 0 asks it). */
TIDE_API int tide_connector_meta_serialize(const tide_connector_meta *m, void *buf, size_t cap,
                                           size_t *len);
/* Rebuild metadata from bytes. Errors: TIDE_EPARSE (malformed, with the offset), -ENOMEM. */
TIDE_API int tide_connector_meta_parse(const void *buf, size_t len, tide_connector_meta **out);
TIDE_API void tide_connector_meta_free(tide_connector_meta *m);

/* ---- worker side ------------------------------------------------------------------- */

/*
 * Register one paged KV tensor (one layer's cache, or one Mamba state tensor) of a group.
 * base..base+nbytes holds num_blocks pages of nbytes / num_blocks bytes. With ndim > 0,
 * shape[] and strides[] (in elements of elem_size bytes, as torch and numpy report them)
 * describe the tensor: leading dimensions whose stride spans more than a page are outer
 * dimensions (e.g. K and V planes of shape (2, num_blocks, ...)); each outer index is a
 * segment whose block b is at its base + b * (page / segments), and the next dimension must
 * have num_blocks entries. With ndim 0 the tensor is one segment of whole pages. An object
 * is block b's bytes in every segment of every region of its group, in registration order
 * (every rank must register in the same order). Errors: -EINVAL (with what is wrong).
 */
TIDE_API int tide_connector_register_region(tide_connector *c, int group, void *base,
                                            uint64_t nbytes, int64_t num_blocks, size_t ndim,
                                            const int64_t *shape, const int64_t *strides,
                                            size_t elem_size);
/* Memory kinds of a region (tide_connector_register_device_region). */
#define TIDE_MEM_HOST 0 /* host memory, read and written by the CPU */
#define TIDE_MEM_CUDA 1 /* memory of a CUDA device, moved by its copy engine */

/*
 * Register one paged KV tensor as tide_connector_register_region does (same layout rules,
 * same -EINVAL errors), in memory of the given kind: TIDE_MEM_HOST (device must be 0; the
 * same as tide_connector_register_region) or TIDE_MEM_CUDA with the CUDA device ordinal
 * (torch's tensor.device.index); base is the device pointer (tensor.data_ptr()). Every
 * region of a connector is on the same memory. The first CUDA region loads the CUDA
 * runtime (dlopen of libcudart, docs/CONNECTOR.md "GPU memory"; libtide links nothing of
 * CUDA) and registers the store's pool with it once as pinned host memory (the mem://
 * pool, or the pool a unix:// handle mapped from tided; other backends are staged through
 * host buffers). Then saves and loads move the bytes with the device's copy engine, on
 * streams of tide's own: see tide_connector_start_jobs_stream. The region's memory must
 * stay allocated until the connector is destroyed.
 * Errors: -EINVAL (the layout; a kind that is neither; a host device other than 0; memory
 * other than that of the connector's earlier regions), TIDE_EDEVICE (no CUDA runtime can
 * be loaded; no such device; [base, base + nbytes) is not that device's memory; the pool
 * cannot be registered), -ENOMEM.
 */
TIDE_API int tide_connector_register_device_region(tide_connector *c, int group, int kind,
                                                   int device, void *base, uint64_t nbytes,
                                                   int64_t num_blocks, size_t ndim,
                                                   const int64_t *shape, const int64_t *strides,
                                                   size_t elem_size);
/*
 * Queue the jobs of one step's metadata whose kind is in `kinds` (a mask of
 * TIDE_CONNECTOR_LOAD and TIDE_CONNECTOR_SAVE) on the background threads, and record the
 * metadata's finished requests. Saves read the pages when they run: call it after the
 * step's forward pass has written them, and keep a save's blocks unchanged until the
 * request is reported saved. Loads write the pages of blocks the scheduler allocated for
 * them. Returns the number of jobs queued. Errors: -EINVAL (a scheduler handle).
 */
TIDE_API int tide_connector_start_jobs(tide_connector *c, const tide_connector_meta *m, int kinds);
/*
 * tide_connector_start_jobs for a connector whose regions are device memory: `stream` is
 * the engine's stream (a cudaStream_t as an integer, torch's
 * torch.cuda.current_stream().cuda_stream; 0 = the legacy default stream). One event is
 * recorded on it now, after the step's forward pass was queued there, and the step's saves
 * and loads copy only after the device reached it (the CPU does not wait): a save reads
 * what the pass wrote, a load lands after any pass still in flight that writes the same
 * pages (blocks just handed over from another request). Loads return from their
 * job only once their bytes are in the pages, so get_finished(LOAD) names a request whose
 * blocks are ready; a copy that fails makes its blocks load errors. With host regions (or
 * none yet) stream is ignored. tide_connector_start_jobs is this call with stream 0.
 * Errors: those of tide_connector_start_jobs; TIDE_EDEVICE (the event could not be
 * recorded: nothing was queued).
 */
TIDE_API int tide_connector_start_jobs_stream(tide_connector *c, const tide_connector_meta *m,
                                              int kinds, uint64_t stream);
/*
 * Request ids whose loads completed (kind TIDE_CONNECTOR_LOAD) or which finished and whose
 * saves all completed (TIDE_CONNECTOR_SAVE), each reported once: written to buf as
 * NUL-terminated strings one after another, as many as fit in cap bytes (the rest stay
 * for the next call). Returns how many were written.
 */
TIDE_API int tide_connector_get_finished(tide_connector *c, int kind, char *buf, size_t cap);
/* Block ids whose load failed since the last call (as many as fit; the rest stay).
 * A failed block's bytes must not be used: recompute it. Returns the count. */
TIDE_API int tide_connector_get_load_errors(tide_connector *c, int32_t *block_ids, size_t cap);
/* Block until every queued job has run. */
TIDE_API int tide_connector_wait(tide_connector *c);

/* Figures, by operation as the reference names them (lookup_exists, save_exists,
 * save_put, load_get), plus the connector's own counters. Totals since creation. */
typedef struct tide_connector_op_stats {
    uint64_t calls, keys, bytes, failed_keys, errors; /* errors: calls that failed whole */
    uint64_t ns;                                      /* time spent in the calls */
} tide_connector_op_stats;
typedef struct tide_connector_stats {
    tide_connector_op_stats lookup_exists, save_exists, save_put, load_get;
    uint64_t lookups, lookup_hit_tokens;
    uint64_t save_jobs, saved_objects, dedup_skipped, striped_skipped;
    uint64_t pressure_skipped_jobs, pressure_events;
    int pressure_active;
    uint64_t load_jobs, loaded_objects, load_errors;
} tide_connector_stats;
#define TIDE_CONNECTOR_STATS_SIZE_V1 288 /* the size of the first tide_connector_stats */
/* Fill out[0..size); pass size = sizeof *out (as tide_stats_get). Errors: -EINVAL for a
 * NULL argument or a size that is not a multiple of 8 from TIDE_CONNECTOR_STATS_SIZE_V1 to
 * TIDE_STRUCT_SIZE_MAX. */
TIDE_API int tide_connector_get_stats(tide_connector *c, tide_connector_stats *out, size_t size);

#ifdef __cplusplus
}
#endif
#endif /* TIDE_H */
