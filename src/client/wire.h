/*
 * wire.h — a connection to a tided: framed exchanges with deadlines, a set of idle
 * connections to reuse, HELLO, retries.
 *
 * Shared by the two backends that speak the native protocol to one tided: node.c (tide://,
 * TCP, values on the wire) and unixshm.c (unix://, values through the shared pool). A
 * backend's s->impl points at a `wire`, or at a struct whose first member is one, so the
 * request paths that are the same on both (EXISTS, REMOVE, MATCH_PREFIX, CLEAR, STAT) are
 * backend_ops entries here.
 *
 * Connections: up to `nconns`, opened on demand, each used by one call at a time; one that
 * failed in any way is closed rather than reused (after an error the stream's framing is
 * unknown). Every wait on a socket polls against the call's deadline. Messages name the
 * server (`addr`) and the errno.
 */
#ifndef TIDE_CLIENT_WIRE_H
#define TIDE_CLIENT_WIRE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "client/client.h"
#include "common/checksum.h"
#include "proto/frame.h"

typedef struct wire_sock {
    int fd;
    int busy;
    int fresh;          /* opened by the call that holds it */
    int unread;         /* replies to requests sent without waiting, read before the next reply */
    unsigned unread_op; /* the opcode of those requests */
    uint64_t next_req;
    uint8_t *buf; /* reply head buffer */
    size_t buf_cap;
    frame_decoder dec;
    checksum_state *cs; /* with wire.checksums: for the backend's use while it holds this */
    /* Nothing to read now, as far as we know (a request was just sent, or the last read took
     * less than it asked): the next read polls first instead of trying a recvmsg that would
     * only say EAGAIN. */
    int drained;
    int replica; /* its HELLO granted FRAME_FEATURE_REPLICA (wire.replica) */
    int hints;   /* its HELLO granted FRAME_FEATURE_HINTS too */
} wire_sock;

typedef struct wire_call wire_call;

typedef struct wire {
    char addr[300]; /* "tide://host:port" or "unix:///path", for messages */
    struct sockaddr_storage sa;
    socklen_t salen;
    uint64_t timeout_ns;
    char token[FRAME_TOKEN_MAX + 1];
    /* Set by the backend before wire_init: */
    uint64_t features; /* HELLO feature bits asked for */
    int retry;         /* retry once on a stale kept connection (see wire_run) */
    int heads_only;    /* replies never carry value bytes; fds may come with them (AF_UNIX) */
    int checksums;     /* give every connection a checksum_state */
    /* May be NULL. Called after a successful HELLO with its reply and the fd that came with
     * it (-1 if none), which it takes ownership of. */
    int (*on_hello)(wire_call *k, const frame_msg *m, int fd);
    void *owner; /* the backend's impl, for on_hello */
    /* A cluster member (node.c, replica=1): every new connection sends REPLICA after HELLO,
     * and `missed` (set when the cluster skipped this node) goes with the next REPLICA,
     * sent before the next request (docs/CLUSTER.md, "Replicas that missed writes"). */
    int replica;
    atomic_int missed;
    atomic_int hints; /* the last HELLO granted FRAME_FEATURE_HINTS */
    int nconns;
    wire_sock *conns;
    pthread_mutex_t lock; /* guards conns[].busy, max_keys, max_frame */
    pthread_cond_t idle;
    uint32_t max_keys; /* the server's limits, from HELLO (0 until the first) */
    uint64_t max_frame;
} wire;

/* A call in progress: its deadline and the connection it holds. */
struct wire_call {
    tide_store *s;
    wire *w;
    wire_sock *c;
    uint64_t deadline;
    int got_reply_bytes;
    size_t head_hint; /* the byte length of the head of the reply expected next, when the
                         request knows it (0: unknown); see wire_recv_head */
};

#define WIRE_DEFAULT_TIMEOUT_MS 5000

/* The URL options every tided backend takes, marked read: timeout_ms (default 5000), conns
 * (default_conns, 1..1024), token (else $TIDE_AUTH_TOKEN; *token may be NULL, and points
 * into u or the environment). `name` ("tide://", "unix:///run/tide.sock") starts messages. */
int wire_url_opts(tide_store *s, url *u, const char *name, uint64_t default_conns,
                  uint64_t *timeout_ms, uint64_t *conns, const char **token);

/* Allocate nconns connections (w's other fields as the backend set them). 0 or -ENOMEM with
 * a message. wire_destroy is safe after any wire_init, failed or not. */
int wire_init(tide_store *s, wire *w, int nconns, uint64_t timeout_ms, const char *token);
void wire_destroy(wire *w);

wire_call wire_begin(tide_store *s, wire *w);
/* Take a connection for k (opening one, or waiting for one). On failure k->c may still be
 * set: give it back broken. */
int wire_take(wire_call *k);
/* Give the connection back; a broken one is closed. No-op without one. */
void wire_give(wire_call *k, int broken);
/* A cluster member: tell the node it was skipped (sent with the next REPLICA). */
void wire_mark_missed(wire *w);
/* A cluster member: one REPLICA request now. flags FRAME_REPLICA_MISSED: the node drops
 * its contents before answering (0 once it did); FRAME_REPLICA_HINT, _ASK or _TOLD: a hint
 * operation about `member` (seq: TOLD's hint number), its two counters in out[0..2).
 * TIDE_EUNSUPPORTED when the node does not hold hints. */
int wire_replica_call(tide_store *s, wire *w, uint32_t flags, uint64_t member, uint64_t seq,
                      uint64_t out[2]);
/* A hint question in two halves, so that the caller's own call to another node runs while
 * it travels: wire_ask_send sends REPLICA ASK about `member` on a connection it keeps in *p
 * (or sends nothing: the node must first be told MISSED, holds no hints, no connection
 * to it can be spared without waiting, or the send failed), and wire_ask_recv reads the answer into
 * out[0..2) and gives the connection back; without a request in flight, or when the connection
 * proved dead before any reply byte, it makes the whole call (wire_replica_call) instead. */
typedef struct wire_pending {
    wire_call k;
    uint64_t req_id;
    int active; /* a request was sent and its reply is owed */
    int rc;     /* no connection could be had: the answer */
} wire_pending;
void wire_ask_send(tide_store *s, wire *w, uint64_t member, wire_pending *p);
int wire_ask_recv(tide_store *s, wire *w, uint64_t member, wire_pending *p, uint64_t out[2]);
/* Open one connection now (HELLO included) and keep it among the idle ones, so that a wrong
 * address or token fails tide_open rather than the first call. */
int wire_connect_now(tide_store *s, wire *w);

/* Socket I/O against k's deadline; iov arrays are consumed. wire_recv hands a file
 * descriptor that came with the bytes to *fd when fd is not NULL and *fd is -1, and closes
 * any other. Negative errno on failure (no message: see wire_io_fail). */
int wire_wait(wire_call *k, short events);
/* After a send or receive that failed with errno: 0 to try again (interrupted, or the
 * socket is ready for events now), or the error. */
int wire_io_again(wire_call *k, short events);
int wire_send(wire_call *k, struct iovec *iov, int cnt);
int wire_recv(wire_call *k, struct iovec *iov, int cnt, int *fd);
/* One recvmsg of at most `asked` bytes (mh's iovecs) from k's connection, polling against
 * the deadline while there is nothing to read: >0 the bytes read, 0 at end of stream, or a
 * negative errno. Keeps the connection's `drained` mark. */
ssize_t wire_recvmsg(wire_call *k, struct msghdr *mh, int flags, size_t asked);
/* Read one reply's header and key section into the connection's buffer; value bytes stay
 * in the socket. *m lives until the connection's next read. With k->head_hint (taken and
 * cleared here) the first read asks for that many bytes at once, header and key section
 * in one recvmsg; a reply whose head is shorter (an error reply) is never followed by
 * anything, so nothing beyond the reply is read either way. */
int wire_recv_head(wire_call *k, frame_msg *m, int *fd);
/* Name an I/O failure once, with the server and the errno; a tide code passes through. */
int wire_io_fail(wire_call *k, const char *what, int rc);

/* Send head (its req_id is filled in) and vals, read the reply's head into *m and check it
 * answers this request without an error status. `what` ("GET of 12 keys") is for messages. */
int wire_exchange(wire_call *k, uint8_t *head, size_t head_len, const struct iovec *vals, int nvals,
                  const char *what, frame_msg *m);
/* wire_exchange of a request about n keys without values ("PIN of 12 keys", named from its
 * op) whose reply must answer for all n, else TIDE_EPROTO. */
int wire_exchange_n(wire_call *k, uint8_t *head, size_t head_len, size_t n, frame_msg *m);

/* Send head (its req_id filled in) without waiting for the reply, which the next exchange
 * on this connection reads and drops; every request sent this way until then must have the
 * same opcode. A connection that cannot send is closed (the call still holds it). */
void wire_send_nowait(wire_call *k, uint8_t *head, size_t head_len);

/* One request: the encoded head, value iovecs to send after it, and a function that reads
 * and interprets the reply (a tide code it returns needs no message of its own). */
typedef struct wire_request {
    const char *what;
    uint8_t *head;
    size_t head_len;
    const struct iovec *vals;
    int nvals;
    int (*on_reply)(wire_call *k, const frame_msg *m, void *arg);
    void *arg;
    size_t reply_head; /* the reply's head length when the request knows it (0: unknown) */
    int hints;         /* a REPLICA hint operation: only on a connection granted hints */
} wire_request;

/* Take a connection, exchange, give it back. With w->retry, a call that failed on a pooled
 * connection before any reply byte arrived is retried once on a fresh one (the server may
 * have closed an idle socket; every tide operation is idempotent). */
int wire_run(tide_store *s, wire *w, wire_request *x);

/* How many keys (keys[0..left)) go in one frame: the server's key limit, and key sections of
 * at most half its frame limit, counting per_key more bytes a key. keys may be NULL: then
 * only the key limit (and per_key) count. */
size_t wire_chunk(wire *w, const tide_key *keys, size_t left, size_t per_key);
/* The server's frame limit (the default until HELLO). */
uint64_t wire_max_frame(wire *w);

/* One chunk of a batch (wire_batch), on k's connection: keys fk[0..n), key j's value
 * scattered over fv[j][0..fcnt[j]) of sizes[j] bytes (a put's value length, a get's room).
 * Sets res[j] to key j's outcome and, for a get, lens[j] to its value's length. Returns 0,
 * or a negative error that ends the batch (the connection is then closed). */
typedef int (*wire_batch_chunk)(wire_call *k, const tide_key *fk, const tide_iov *const *fv,
                                const size_t *fcnt, const uint64_t *sizes, size_t n, int *res,
                                size_t *lens, void *arg);
/* A PUT (is_put) or GET batch of the transports that move values outside the frames (ucx.c,
 * unixshm.c): bad keys, and a put's empty values, are answered here without a request; the
 * rest go in chunks of what one frame holds (wire_chunk), each on a connection taken from
 * w's pool and handed to chunk with arg, and each key's outcome goes back to its place in
 * results (and, for a get, its length to vlens, when not NULL). Returns the keys stored or
 * found, or the error that ended the batch. */
int wire_batch(tide_store *s, wire *w, int is_put, const tide_key *keys, size_t n,
               const tide_iov *iov, const size_t *iovcnt, int *results, size_t *vlens,
               wire_batch_chunk chunk, void *arg);

/* Encode into a malloc'd buffer: the size query, then the frame. Sets rc to 0 and out to
 * the buffer, or rc to the failure (with a message on s) and out to NULL. */
#define WIRE_ENCODE(s, rc, out, outlen, expr_null, expr_buf)                                       \
    do {                                                                                           \
        size_t *len = &(outlen);                                                                   \
        uint8_t *buf = NULL;                                                                       \
        size_t cap = 0;                                                                            \
        int erc = (expr_null);                                                                     \
        if (erc == TIDE_EBUFSMALL) {                                                               \
            cap = *len;                                                                            \
            buf = malloc(cap);                                                                     \
            erc = buf ? (expr_buf) : -ENOMEM;                                                      \
        }                                                                                          \
        if (erc) {                                                                                 \
            free(buf);                                                                             \
            buf = NULL;                                                                            \
            erc = client_err(s, erc, "cannot encode request: %s", tide_strerror(erc));             \
        }                                                                                          \
        (rc) = erc;                                                                                \
        (out) = buf;                                                                               \
    } while (0)

/* backend_ops entries for the requests that are the same on every tided backend. */
int wire_exists_many(tide_store *s, const tide_key *keys, size_t n, uint8_t *present);
int wire_remove_many(tide_store *s, const tide_key *keys, size_t n, int *results);
int wire_match_prefix(tide_store *s, const tide_key *keys, size_t n);
int wire_clear(tide_store *s);
int wire_stats(tide_store *s, tide_stats *st);
int wire_events(tide_store *s, uint64_t from, tide_event *ev, size_t max, uint64_t *next,
                uint64_t *lost);

#endif
