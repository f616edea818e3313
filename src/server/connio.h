/*
 * connio.h — the socket side that tided's two kinds of connection share: the native
 * protocol (conn.c) and RESP (resp_conn.c). Each embeds a connio and keeps only its
 * protocol: what its bytes mean, when a request is complete, what it answers.
 *
 * Here: the epoll interest (read while not held back, write while output is queued),
 * backpressure (reading stops while CONNIO_OUT_HIGH bytes of reply are queued), the output
 * queue (outq.h), reads that count bytes_in and progress, input buffer growth, the idle
 * timeout, the drain at stop, and the teardown of the socket and its queue.
 *
 * Ownership and threads: a connio belongs to its connection, so to one worker thread;
 * nothing here takes a lock except the store's (when a pin is released).
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

typedef struct connio {
    server *srv;
    int fd;
    int epfd;        /* the epoll set that watches fd */
    void *tag;       /* epoll's data.ptr for fd: the connection that embeds this */
    uint32_t events; /* what epoll watches now */
    int in_body;     /* a request's value bytes are arriving: read on, even while stopping */
    int drained;     /* the last read took less than it asked for: the socket had nothing more
                        then, so reading again before epoll reports it would only return
                        EAGAIN (cleared when epoll reports the socket readable) */
    int close_after_flush;
    uint64_t last_progress_ns; /* when bytes last moved either way */
    outq out;                  /* replies queued */
} connio;

/* Start a connection on fd: watched for reading in epfd with tag as its data, output
 * chunks of `chunk` bytes (see outq_init). 0 or -errno (fd is not closed). */
int connio_init(connio *io, server *srv, int epfd, int fd, void *tag, size_t chunk);
/* Close the socket and free the queue, releasing the pins still queued. */
void connio_close(connio *io);

/* 1 when no new request is to run now: the connection closes once its replies are out, or
 * CONNIO_OUT_HIGH bytes of them are queued (backpressure until the peer reads). */
int connio_held(const connio *io);
/* Bring the epoll interest up to date with the connection's state. */
void connio_watch(connio *io);
/* Send what is queued (outq_flush; send_fd may be NULL). 0 or -errno. */
int connio_flush(connio *io, int *send_fd);

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

/* 1 when the connection has waited past the idle timeout: a partial request
 * (`partial`, or a body arriving) or queued output that has not moved. Logs why, with
 * `who` ("" or "RESP: ") and `unfinished` ("request not finished", ...). */
int connio_stalled(const connio *io, uint64_t now, int partial, const char *who,
                   const char *unfinished);
/* While stopping: send what is queued. 1 when the connection may close now (nothing left
 * to send, or sending failed), 0 while a body is arriving or output is still queued. */
int connio_drain(connio *io, int *send_fd);

#endif
