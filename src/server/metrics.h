/*
 * metrics.h — tided's counters and latency histograms, and their Prometheus rendering.
 *
 * Every field is a relaxed atomic: I/O threads bump them without locks, and a reader of
 * /metrics sees each figure exactly, though not all figures from the same instant.
 */
#ifndef TIDE_METRICS_H
#define TIDE_METRICS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "tide.h"

enum metrics_op {
    MOP_PUT,
    MOP_GET,
    MOP_EXISTS,
    MOP_REMOVE,
    MOP_MATCH,
    MOP_STAT,
    MOP_PING,
    MOP_CLEAR,
    MOP_HELLO,
    MOP_RESERVE, /* shared-pool requests (Unix socket) */
    MOP_COMMIT,
    MOP_PIN,
    MOP_RELEASE,
    MOP_REPLICA, /* a cluster client's REPLICA check on each connection it opens */
    MOP_EVENTS,  /* reads of the store's departure feed (EVENTS) */
    MOP_OTHER,   /* an opcode with no label of its own: never counted as another op */
    MOP_COUNT
};
/* A request's outcome. A request of several keys takes its worst key's, in this order:
 * ok < too_small < miss < error. too_small: a get (or pin) whose buffer was too small for
 * the value, answered with the value's size only (how a caller asks a size); the read
 * that follows counts on its own. */
enum metrics_status { MST_OK, MST_TOO_SMALL, MST_MISS, MST_ERROR, MST_COUNT };

/* The outcome of one key of a read (a get or a pin): 0, TIDE_EBUFSMALL, TIDE_ENOTFOUND, or
 * anything else (an error). */
static inline int metrics_read_status(int rc) {
    return rc == 0                ? MST_OK
           : rc == TIDE_EBUFSMALL ? MST_TOO_SMALL
           : rc == TIDE_ENOTFOUND ? MST_MISS
                                  : MST_ERROR;
}
/* The worse of two outcomes. */
static inline int metrics_worse(int a, int b) {
    return a > b ? a : b;
}

/* Latency bucket upper bounds in microseconds; the last bucket is +Inf. */
#define METRICS_NBUCKETS 20

typedef struct metrics_hist {
    atomic_uint_fast64_t count[METRICS_NBUCKETS + 1];
    atomic_uint_fast64_t sum_ns;
} metrics_hist;

typedef struct metrics {
    atomic_uint_fast64_t ops[MOP_COUNT][MST_COUNT]; /* requests by opcode and outcome */
    atomic_uint_fast64_t keys[MOP_COUNT];           /* keys carried by those requests */
    metrics_hist latency[MOP_COUNT];
    atomic_uint_fast64_t bytes_in, bytes_out; /* bytes read from and written to sockets */
    atomic_uint_fast64_t conns_total, conns_open, conns_rejected;
    atomic_uint_fast64_t conns_preauth;     /* open and not authenticated yet (with a token) */
    atomic_uint_fast64_t conns_preauth_cut; /* cut as the oldest pre-auth one when all were taken */
    atomic_uint_fast64_t proto_errors, auth_failures;
    atomic_uint_fast64_t http_cut; /* HTTP connections closed unanswered (deadline, or room) */
    atomic_uint_fast64_t ucx_cut;  /* UCX endpoints closed for leaving too many answers */
    atomic_uint_fast64_t ucx_log_suppressed; /* UCX's own log lines over its limit (ucx_log.h) */
    uint64_t meta_budget; /* the store's metadata budget: set once, before any reader starts */
} metrics;

/* Count one request: its outcome, how many keys it carried and how long it took. */
void metrics_op_done(metrics *m, int op, int status, uint64_t keys, uint64_t latency_ns);

/* Render everything, with the store's figures, as Prometheus text (format 0.0.4), in one
 * pass while the counters keep moving: a NUL-terminated buffer the caller frees, its
 * length in *len; NULL when out of memory. */
char *metrics_render(const metrics *m, const tide_stats *st, size_t *len);

#endif
