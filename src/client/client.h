/*
 * client.h — what every backend implements, and the handle that carries it.
 *
 * tide_open() picks a backend by URL scheme from the table in open.c (base.c makes the
 * handle); the public calls in api.c check their arguments and then call the backend
 * through `ops`. Backends see only
 * well-formed arguments: non-NULL arrays, n ≤ TIDE_BATCH_MAX, and for single-key calls a
 * valid key and value. Per-key problems inside a batch (an empty key, say) are reported by
 * the backend in results[], the same way on every backend.
 *
 * Backend functions record a message with client_err() when they fail.
 */
#ifndef TIDE_CLIENT_H
#define TIDE_CLIENT_H

#include "common/errors.h"
#include "common/util.h"
#include "device/device.h"
#include "tide.h"

typedef struct backend_ops {
    const char *scheme;
    /* May be NULL. When set, the backend serves a URL of its scheme only when this returns
     * non-zero; backends are tried in table order. */
    int (*claims)(const url *u);
    /* Parse the backend's URL options (marking them read) and set s->impl. */
    int (*open)(tide_store *s, url *u);
    void (*close)(tide_store *s);
    int (*put_many)(tide_store *s, const tide_key *keys, size_t n, const tide_iov *iov,
                    const size_t *iovcnt, int *results);
    int (*get_many)(tide_store *s, const tide_key *keys, size_t n, const tide_iov *iov,
                    const size_t *iovcnt, int *results, size_t *vlens);
    int (*exists_many)(tide_store *s, const tide_key *keys, size_t n, uint8_t *present);
    int (*remove_many)(tide_store *s, const tide_key *keys, size_t n, int *results);
    /* May be NULL: then match_prefix is answered with exists_many. */
    int (*match_prefix)(tide_store *s, const tide_key *keys, size_t n);
    int (*clear)(tide_store *s);
    int (*stats)(tide_store *s, tide_stats *st);
    /* May be NULL (TIDE_EUNSUPPORTED): tide_events_read, arguments checked, max >= 1. */
    int (*events)(tide_store *s, uint64_t from, tide_event *ev, size_t max, uint64_t *next,
                  uint64_t *lost);
    /* May be NULL (then no pool: device copies are staged through a host buffer, devio.c).
     * The host memory values live in, for registering it with a device once. */
    int (*pool)(tide_store *s, void **base, uint64_t *len);
    /* May be NULL (then staged). put_many / get_many whose scatter lists are in the memory
     * of q's device: the bytes move between it and the pool by q's copies, checksums are
     * computed on the pool's bytes (after a put's copies landed, before a get's start). */
    int (*put_many_dev)(tide_store *s, const tide_key *keys, size_t n, const tide_iov *iov,
                        const size_t *iovcnt, int *results, dev_queue *q);
    int (*get_many_dev)(tide_store *s, const tide_key *keys, size_t n, const tide_iov *iov,
                        const size_t *iovcnt, int *results, size_t *vlens, dev_queue *q);
    /* May be NULL (no UCX path). Whether the handle moves values over UCX (cheap, connects
     * nothing); and client_ucx_cuda's answer for it (may bring its UCX endpoint up). */
    int (*uses_ucx)(tide_store *s);
    int (*ucx_cuda)(tide_store *s, char *why, size_t len);
} backend_ops;

struct tide_store {
    const backend_ops *ops;
    void *impl;
    errbuf err;
};

/* ---- the handle and the helpers every backend calls (base.c) ------------------------- */

/*
 * Parse text, pick the first backend of table[0..n) whose scheme matches and that claims
 * the URL, make a handle with it and open it; every URL option must have been read. 0 and
 * *out, or the code with a message for the calling thread (fn names the caller in it).
 * tide_open() passes every backend; the cluster opens its members with node_backend only.
 */
int client_open(const char *fn, const char *text, const backend_ops *const *table, size_t n,
                tide_store **out);

/* Record a message on the handle and return code. */
int client_err(tide_store *s, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* The check every backend applies to a key: 0, TIDE_EKEYEMPTY or TIDE_EKEYLONG. */
int client_key_check(const tide_key *k);

/* A printable rendering of a key for messages: at most 64 characters, non-printable bytes
 * as \xNN, "..." when cut. Returns buf. */
const char *client_key_repr(const void *key, size_t klen, char *buf, size_t len);

/* ---- device transfers (devio.c) ------------------------------------------------------ */

/* Value bytes a device put or get copies before it waits for them: the copies of one chunk
 * land while the host hashes the previous one. */
#define DEVIO_CHUNK (8u << 20)

/* The store's pool (*base, *len) when its backend has one; TIDE_EUNSUPPORTED otherwise. */
int client_pool(tide_store *s, void **base, uint64_t *len);
/* tide_put_many / tide_get_many for scatter lists in the memory of q's device, with the same
 * checks, results and return values; a key whose copies failed gets TIDE_EDEVICE. Backends
 * with a pool copy straight between it and the device; the others go through a host buffer. */
/* The staged form (devio.c) of the two calls below, for backends whose device calls fall
 * back to it. */
int client_staged_put(tide_store *s, const tide_key *keys, size_t n, const tide_iov *iov,
                      const size_t *iovcnt, int *results, dev_queue *q);
int client_staged_get(tide_store *s, const tide_key *keys, size_t n, const tide_iov *iov,
                      const size_t *iovcnt, int *results, size_t *vlens, dev_queue *q);
/* The checksum of a value in device memory (arg: the dev_queue that reads it back into its
 * staging buffer): a tucx_sum_fn (ucx.h). */
int devio_sum(void *arg, const tide_iov *v, size_t cnt, uint64_t len, uint64_t *sum, char *why,
              size_t wl);
/* 1 when s moves values over UCX (tide://...?transport=ucx, or a cluster of such): buffers
 * used again and again are worth declaring to it (tucx_declare). */
int client_uses_ucx(tide_store *s);
/* For GPU regions: 1 when s is a tide:// node whose UCX moves CUDA memory (values in
 * regions declared as CUDA memory then go straight between the GPU and tided's pool); 0 when
 * it moves values over UCX but not CUDA memory, -1 when it has no UCX path for them; why
 * says which and why. */
int client_ucx_cuda(tide_store *s, char *why, size_t len);
/* Declare [base, base+len) to s's UCX when s moves values over UCX (tucx_declare; cuda: GPU
 * memory): 1 when declared, else 0. */
int client_ucx_declare(tide_store *s, const void *base, size_t len, int cuda);
int client_put_many_dev(tide_store *s, const tide_key *keys, size_t n, const tide_iov *iov,
                        const size_t *iovcnt, int *results, dev_queue *q);
int client_get_many_dev(tide_store *s, const tide_key *keys, size_t n, const tide_iov *iov,
                        const size_t *iovcnt, int *results, size_t *vlens, dev_queue *q);
/*
 * Checksums of a call's values by several threads: one host thread hashing pool memory is
 * slower than a GPU's copy engine fills or drains it. The caller releases values in order
 * (devio_hash_release: values [0, upto) may be hashed now, e.g. their copies landed),
 * helper threads and the caller hash released values, devio_hash_wait(h, k) returns once
 * sum[k] is set (the caller hashes released values itself meanwhile). Helper threads are
 * started only for calls of at least devio_hash_min bytes (at most DEVIO_HASH_THREADS);
 * below that, or when they cannot be started, the caller does all of it. devio_hash_end
 * stops the helpers after the value each is hashing (values released and not yet taken
 * are left alone) and frees h: call it before the values' memory is released. NULL from
 * devio_hash_start: out of memory.
 */
#define DEVIO_HASH_THREADS 3
extern size_t devio_hash_min; /* default 32 MiB; tests lower it */
typedef struct devio_hasher devio_hasher;
devio_hasher *devio_hash_start(const uint8_t *const *ptr, const size_t *len, uint64_t *sum,
                               size_t n);
void devio_hash_release(devio_hasher *h, size_t upto);
void devio_hash_wait(devio_hasher *h, size_t k);
void devio_hash_end(devio_hasher *h);

/* Collect the copies of a scatter list into dst (put), or of len bytes of src across a
 * scatter list (get). */
int devio_gather(dev_queue *q, uint8_t *dst, const tide_iov *iov, size_t cnt);
int devio_scatter(dev_queue *q, const tide_iov *iov, size_t cnt, const uint8_t *src, size_t len);

extern const backend_ops mem_backend;
extern const backend_ops node_backend;
extern const backend_ops cluster_backend;
extern const backend_ops etcd_backend;
extern const backend_ops unix_backend;

/* node.c: the cluster's write failed on this member or went around it; the handle's next
 * call tells the node first (REPLICA with MISSED). Not a node handle: no-op. */
void node_mark_missed(tide_store *s);
/* A cluster member's REPLICA request now (wire_replica_call): MISSED, or a hint operation
 * (HINT, ASK, TOLD) about the member seeded `member`. 0 or an error set on s. */
int node_replica_call(tide_store *s, uint32_t flags, uint64_t member, uint64_t seq,
                      uint64_t out[2]);
/* REPLICA ASK about `member` in two halves (wire_ask_send, wire_ask_recv): send now, read
 * the answer later, after the caller's own call elsewhere. node_ask_send returns NULL only
 * when out of memory or not a node handle (then make the whole call); node_ask_recv always
 * frees what it was given. */
typedef struct node_pending node_pending;
node_pending *node_ask_send(tide_store *s, uint64_t member);
int node_ask_recv(tide_store *s, uint64_t member, node_pending *p, uint64_t out[2]);

#endif
