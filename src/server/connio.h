/*
 * connio.h — tided's one connection interface. A connection of either protocol, native
 * (conn.c) or RESP (resp_conn.c), embeds a connio as its first member and gives it a small
 * table of operations (connio_ops); the worker's event loop (worker.c) knows connections
 * only through this header: it hands a connio its epoll events, runs the ones with work
 * left, ticks them, drains them at stop and closes them. Each protocol keeps only what its
 * bytes mean, when a request is complete and what it answers.
 *
 * Here: the epoll interest (read while not held back, write while output is queued),
 * backpressure (reading stops while CONNIO_OUT_HIGH bytes of reply are queued), the output
 * queue (outq.h), reads that count bytes_in and progress, input buffer growth, the
 * timeouts (idle, write stall, pre-auth), the pause after a failed authentication, the
 * drain at stop, and the teardown of the socket and its queue.
 *
 * Fairness. One wake-up of one connection does a bounded amount of work: it may read
 * CONNIO_BUDGET bytes, each request it runs counting CONNIO_REQ_COST of them. A protocol's
 * serve() stops when the budget is spent (connio_spent); the worker then runs the
 * connection again after its other connections have had their turn (the ready list). It
 * may send CONNIO_WBUDGET bytes of replies; the rest waits for the next EPOLLOUT, which
 * level-triggered epoll reports on the next pass. So no connection delays another by more
 * than one budget's worth of work per pass. A connection
 * whose replies are not being read stops being read (backpressure) and is cut once its
 * output has not moved for --write-stall-timeout seconds.
 *
 * Ownership and threads: a connio belongs to its connection, so to one worker thread;
 * nothing here takes a lock except the store's (when a pin is released) and the pre-auth
 * budget's (preauth.c).
 */
#ifndef TIDE_SERVER_CONNIO_H
#define TIDE_SERVER_CONNIO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "server/outq.h"
#include "server/server_int.h"

#define CONNIO_OUT_HIGH (64ull << 20) /* stop reading requests while this much is queued */
#define CONNIO_BUDGET (4 << 20)       /* bytes one wake-up may read */
#define CONNIO_REQ_COST (64 << 10)    /* what one request counts against the budget */
#define CONNIO_WBUDGET (16 << 20)     /* reply bytes one wake-up may send */
/* Before authentication a connection may buffer this much input: a native HELLO or a
 * RESP AUTH with the longest token fits. */
#define CONNIO_PREAUTH_IN 512

typedef struct connio connio;

/* What a protocol gives the event loop. */
typedef struct connio_ops {
    const char *who; /* prefix of this protocol's log lines: "" or "RESP: " */
    /* Run requests: read, parse, answer, until the connection is held back (connio_held),
     * its socket has nothing more, or this wake-up's budget is spent (connio_spent). 0, or
     * negative to close the connection now. */
    int (*serve)(connio *io);
    /* 1 when bytes of a request not yet run sit in the input buffer. */
    int (*buffered)(const connio *io);
    /* Periodic housekeeping; returns 1 when a partial request is buffered. */
    int (*tick)(connio *io, uint64_t now);
    /* Free the protocol's state (the socket is closed already): abort its reservations,
     * release its leases. */
    void (*free)(connio *io);
    /* What a stalled partial request is called in the log ("request not finished"). */
    const char *unfinished;
} connio_ops;

struct connio {
    const connio_ops *ops;
    server *srv;
    int fd;
    int epfd;            /* the worker's epoll set, which watches fd with this connio as data */
    uint32_t events;     /* what epoll watches now */
    connio *prev, *next; /* the worker's connections (worker.c) */
    connio *next_ready;  /* the worker's ready list: work left when its budget ran out */
    int ready;           /* on that list */
    int64_t budget;      /* bytes this wake-up may still read (CONNIO_BUDGET at its start) */
    int64_t wbudget;     /* bytes this wake-up may still send (CONNIO_WBUDGET at its start) */
    int authed;          /* past HELLO / AUTH (always, on a server without a token) */
    int in_body;         /* a request's value bytes are arriving: read on, even while stopping */
    int drained;         /* the last read took less than it asked for: the socket had nothing more
                            then, so reading again before epoll reports it would only return
                            EAGAIN (cleared when epoll reports the socket readable) */
    int close_after_flush;
    int send_fd; /* a descriptor to pass (SCM_RIGHTS) with the next bytes sent; -1: none */
    uint64_t paused_until_ns;  /* reading is paused until then (a failed AUTH); 0: not */
    unsigned auth_failures;    /* failed authentications on this connection */
    uint64_t last_progress_ns; /* when bytes last moved either way */
    uint64_t last_out_ns;      /* when reply bytes last left (or the queue became busy) */
    outq out;                  /* replies queued */
};

/* Start a connection of protocol ops on fd: watched for reading in epfd, output chunks of
 * `chunk` bytes (see outq_init). 0 or -errno (fd is not closed). */
int connio_init(connio *io, const connio_ops *ops, server *srv, int epfd, int fd, size_t chunk);
/* Give back the connection's pre-auth or authenticated slot, close the socket, free the
 * queue (releasing the pins still queued), then the protocol's state (ops->free). */
void connio_close(connio *io);

/* Handle epoll's events (0: run again from the ready list). 0 to keep the connection,
 * negative to close it. */
int connio_event(connio *io, uint32_t events);
/* 1 when the connection has work left that epoll will not report (its budget ran out):
 * the worker runs it again after the others. */
int connio_more(const connio *io);
/* Periodic check: end a pause, apply the timeouts. 1 when a pause ended (run it again),
 * 0, or -ETIMEDOUT to close. */
int connio_tick(connio *io, uint64_t now);

/* 1 when no new request is to run now: the connection closes once its replies are out,
 * CONNIO_OUT_HIGH bytes of them are queued (backpressure until the peer reads), or it is
 * paused. */
int connio_held(const connio *io);
/* 1 when this wake-up's budget is spent. */
static inline int connio_spent(const connio *io) {
    return io->budget <= 0;
}
/* Count one request run against the budget. */
static inline void connio_charge(connio *io) {
    io->budget -= CONNIO_REQ_COST;
}
/* Bring the epoll interest up to date with the connection's state. */
void connio_watch(connio *io);
/* Send what is queued, with io->send_fd when one is set. 0 or -errno. */
int connio_flush(connio *io);

/* recv into buf, counting the bytes. >0 bytes read, 0 at end of stream, -EAGAIN when
 * nothing is there now, -errno on error. Sets io->drained when fewer than len bytes came. */
ssize_t connio_recv(connio *io, void *buf, size_t len);
/* readv, counting the bytes. >0 bytes read, 0 when nothing is there now, -ECONNRESET at
 * end of stream, -errno on error. Sets io->drained when fewer bytes came than iov holds. */
ssize_t connio_readv(connio *io, const struct iovec *iov, int n);
/* Grow *buf (capacity *cap, doubled as needed) to hold at least need bytes. 0 or -ENOMEM
 * (the buffer is then unchanged). */
int connio_grow(uint8_t **buf, size_t *cap, size_t need);

/* 1 when got (got_len bytes) is the token want, compared in constant time so that the
 * time a wrong token takes says nothing about it. */
int connio_token_equal(const char *want, const uint8_t *got, size_t got_len);
/* A failed authentication on a connection that stays open (RESP AUTH): count it and pause
 * reading for 250 ms, doubled with each further failure up to 8 s, so that one connection
 * can try a few tokens a second at most. */
void connio_auth_failed(connio *io);
/* The connection passed HELLO / AUTH: out of its pre-auth slot into an authenticated one
 * (preauth_promote). 0, TIDE_ELIMIT (max_conns are open) or -ECONNABORTED (cut meanwhile). */
int connio_authed(connio *io);

/* While stopping: send what is queued. 1 when the connection may close now (nothing left
 * to send, or sending failed), 0 while a body is arriving or output is still queued. */
int connio_drain(connio *io);

#endif
