/*
 * outq.h — a connection's queued output: owned bytes and pinned pool ranges, sent with
 * writev. Used by both protocol state machines of tided (conn.c, resp_conn.c).
 *
 * A queue is a list of segments [head, n). A segment is either bytes the queue owns
 * (freed when they have left) or pool memory under a store pin (unpinned when it has
 * left); a zero-length segment completes without sending anything. A checked segment
 * (outq_push_checked) is pool memory that other processes may write: when it reaches the
 * head of the queue it is copied into a buffer of the queue and the copy is checked
 * against the object's checksum, so the bytes sent are the bytes checked, and the copy is
 * made just before it is sent, while it is in cache. It carries its protocol's framing:
 * bytes sent before and after it when it passes, and bytes sent instead when it fails.
 * `pending` counts the bytes queued and not yet sent (a checked segment as if it passes):
 * the connection's backpressure reads it.
 *
 * Ownership and threads: a queue belongs to one connection, so to one worker thread; no
 * lock is taken here except the store's (store_unpin).
 */
#ifndef TIDE_SERVER_OUTQ_H
#define TIDE_SERVER_OUTQ_H

#include <stddef.h>
#include <stdint.h>

#include "server/metrics.h"
#include "store/store.h"

/* A checked segment's framing: pre + value + post when the value passes its check, fail
 * instead of all three when it does not. */
typedef struct outq_frame {
    uint8_t pre[24], post[8], fail[8];
    uint8_t npre, npost, nfail;
} outq_frame;

typedef struct outq_seg {
    const uint8_t *p;
    size_t len, off;
    size_t cap;      /* room of an appendable chunk made by outq_room (0: not appendable) */
    uint8_t *owned;  /* freed (or kept as the spare chunk) when the segment is done */
    uint64_t pin_id; /* unpinned when the segment is done (0 = none) */
    uint64_t sum;    /* the checksum a checked segment must match */
    int check;       /* 1: a checked segment not yet copied out of the pool (p is the pool's
                        bytes, len counts its framing as if it passes) */
    outq_frame fr;   /* a checked segment's framing */
} outq_seg;

typedef struct outq {
    store *st;     /* where pins are released */
    metrics *m;    /* bytes_out is counted here */
    size_t chunk;  /* the size of the chunks outq_room makes (0: outq_room unused) */
    outq_seg *seg; /* segments [head, n) are still to send */
    size_t n, head, cap;
    uint64_t pending;  /* bytes queued and not yet sent */
    uint8_t *spare;    /* a chunk kept for the next outq_room, or NULL */
    store_chain chain; /* the pins of one reply are released as one chain batch (store.h);
                          an owned segment (the next reply's header) starts a new one */
} outq;

/* An empty queue releasing pins in st and counting bytes sent in m. chunk: the size of
 * the appendable chunks outq_room makes (0 when the caller never uses outq_room). */
void outq_init(outq *q, store *st, metrics *m, size_t chunk);
/* Release every pin still queued and free every owned buffer; the queue is then empty
 * and must be initialised again before use. */
void outq_free(outq *q);

/* 1 while some segment is still to send. */
static inline int outq_busy(const outq *q) {
    return q->head < q->n;
}

/* Queue len bytes at p. owned (may be NULL) is freed and pin_id (0 = none) unpinned once
 * the segment has left; on failure (-ENOMEM) neither is taken: the caller still owns them. */
int outq_push(outq *q, const uint8_t *p, size_t len, uint8_t *owned, uint64_t pin_id);
/* Queue len bytes of pool memory at p under pin_id, framed by fr, to be copied and checked
 * against sum when they are about to be sent (see above); a failed check is reported to
 * the store (store_verify_failed) and fr's fail bytes are sent instead. The pin passes to
 * the queue on success; on failure (-ENOMEM) the caller still holds it. */
int outq_push_checked(outq *q, const uint8_t *p, size_t len, uint64_t pin_id, uint64_t sum,
                      const outq_frame *fr);
/* Queue a malloc'd buffer; ownership passes to the queue, also on failure (freed then).
 * 0 or -ENOMEM. */
int outq_owned(outq *q, uint8_t *buf, size_t len);
/* A reply encoded by fn: called once with a NULL buffer for the size (answering 0 or
 * TIDE_EBUFSMALL), then with a malloc'd buffer of that size, which the queue then owns.
 * 0, fn's error, or -ENOMEM. */
typedef int (*outq_encode_fn)(void *buf, size_t cap, size_t *len, void *arg);
int outq_encoded(outq *q, outq_encode_fn fn, void *arg);
/* Room for n bytes at the end of the output (in the last chunk when it has room, else in
 * a new one); the bytes count once outq_wrote() commits them. NULL when out of memory. */
uint8_t *outq_room(outq *q, size_t n);
/* Commit n bytes written into the room outq_room returned. */
void outq_wrote(outq *q, size_t n);

/* Send what the socket takes now (writev, IOV batches). When *send_fd >= 0 it is passed
 * (SCM_RIGHTS) with the first bytes sent, then set to -1; send_fd may be NULL. Each
 * completed write sets *progress_ns to now. 0 when the queue is empty or the socket is
 * full, -errno on a send error, -ENOMEM when a checked segment cannot be copied. */
int outq_flush(outq *q, int fd, int *send_fd, uint64_t *progress_ns);
/* outq_flush that stops once max bytes have been sent (the queue may then still be busy
 * with the socket writable); *sent (may be NULL) receives how many were. */
int outq_flush_some(outq *q, int fd, int *send_fd, uint64_t *progress_ns, size_t max, size_t *sent);

#endif
