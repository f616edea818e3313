/*
 * server_int.h — tided's internal pieces shared by server.c (lifecycle, accept), worker.c
 * (the I/O workers' event loop) and the connection files. A connection of either protocol
 * is a connio (connio.h: the one connection interface, with its table of operations);
 * conn.c is the native protocol, resp_conn.c RESP, outq.h the output queue.
 *
 * Ownership: a connection belongs to exactly one worker and is touched only by that
 * worker's thread. The worker's `incoming` queue is the one place two threads meet
 * (accept thread pushes, worker pops), guarded by `qlock`.
 */
#ifndef TIDE_SERVER_INT_H
#define TIDE_SERVER_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "proto/frame.h"

#include "server/metrics.h"
#include "server/server.h"
#include "store/store.h"

typedef struct server server;
typedef struct connio connio;
typedef struct ucx_srv ucx_srv;

typedef struct worker {
    server *srv;
    int index;
    pthread_t thread;
    int epfd;
    int wakefd; /* eventfd: new connections queued, or stop */
    pthread_mutex_t qlock;
    int *incoming; /* accepted fds waiting to be adopted (under qlock) */
    size_t nincoming, capincoming;
    connio *conns; /* this worker's connections, both protocols (doubly linked) */
    connio *ready; /* connections whose budget ran out with work left (connio.h) */
    int started;   /* its thread runs (server_teardown joins it) */
} worker;

/* Marks an fd in `incoming` as a RESP connection. fds stay below 2^30 (the kernel's
 * fs.nr_open cannot go higher), so the bit is free. */
#define WORKER_FD_RESP (1 << 30)

/* preauth.c: the pre-auth slots of a server with a token (see there). */
typedef struct preauth {
    pthread_mutex_t mu; /* guards slots and counts; preauth.c's do_preauth_x() expect it held */
    struct preauth_slot {
        int fd;
        uint64_t seq; /* admission order: the lowest is the oldest */
    } * slots;
    int cap, n;
    uint64_t seq;
    int ready; /* initialised (preauth_fini does nothing otherwise) */
} preauth;

struct server {
    server_config cfg;
    store *st;
    metrics m;
    int listen_fd, metrics_fd;
    int port, metrics_port;
    int resp_fd, resp_port; /* the RESP listener (-1 when off) and its port */
    worker *workers;
    int nworkers; /* workers allocated (their fds -1 until made) */
    int sfd;      /* signalfd for SIGTERM and SIGINT, -1 until made */
    int epfd;     /* the accept loop's epoll set, -1 until made */
    int metrics_started;
    struct announce *ann; /* etcd registration (announce.c), NULL when none */
    struct replica *rep;  /* replica.c: dropping what may be stale; NULL until made */
    atomic_int stopping;
    atomic_int open_conns;                 /* every connection open, authenticated or not */
    atomic_int authed_conns;               /* with a token: those past HELLO/AUTH (<= max_conns) */
    atomic_uint_fast64_t fd_send_failures; /* the pool's descriptor could not be passed */
    preauth pre;                           /* with a token: those not yet authenticated */
    pthread_t metrics_thread;
    int metrics_stopfd;
    int unix_fd;                 /* Unix socket listener, -1 when none (uds.c) */
    uint64_t unix_dev, unix_ino; /* the socket file made at start: only it is unlinked */
    ucx_srv *ucx;                /* the UCX data path (ucx_srv.c); NULL when off */
};

/* 1 when other processes may write the pool: tided listens on a Unix socket, whose
 * clients map the pool read-write (docs/UNIX.md, trust model). Fixed for the server's life. */
static inline int server_pool_shared(const server *srv) {
    return srv->cfg.unix_path[0] != '\0' || srv->cfg.ucx_port >= 0;
}

/* worker.c: the I/O workers, one event loop each. */
/* Make worker w's epoll set and wake-up eventfd and start its thread (fds made are closed
 * by worker_fini, also on failure). 0 or -errno (logged). */
int worker_start(worker *w);
/* Wake the worker to stop and join its thread (nothing when it never started). */
void worker_stop(worker *w);
/* Close what worker_start made, and the connections still queued for it (after its thread
 * has ended). */
void worker_fini(worker *w);
/* Accept thread: queue fd (| WORKER_FD_RESP for the RESP port) for w and wake it. */
void worker_hand(worker *w, int fd);

/* conn.c: a native protocol connection on fd, watched in w's epoll set. NULL when out of
 * memory or epoll refuses it (fd is not closed). */
connio *conn_new(worker *w, int fd);
/* resp_conn.c: the same for a RESP connection. */
connio *resp_conn_new(worker *w, int fd);
/* events_op.c: answer an EVENTS request (the store's departure feed): the reply is queued on
 * out. 0, or negative (-ENOMEM). */
typedef struct outq outq;
int events_op(server *srv, outq *out, const frame_msg *m);

/* preauth.c: connection budgets on a server with a token. */
int preauth_init(preauth *p, int cap);
void preauth_fini(preauth *p);
/* Accept thread: count a new connection in, cutting the oldest pre-auth one first when
 * every slot is taken. Returns 1 when one was cut. */
int preauth_admit(server *srv, int fd);
/* Worker: the connection on fd passed HELLO/AUTH. 0: it now holds an authenticated slot;
 * TIDE_ELIMIT: max_conns are open (logged, counted); -ECONNABORTED: it was cut meanwhile.
 * Always 0 on a server without a token. */
int preauth_promote(server *srv, int fd);
/* Worker: the connection on fd closes (before its fd is closed): give back its slot,
 * authenticated (authed) or pre-auth. Nothing on a server without a token. */
void preauth_release(server *srv, int fd, int authed);

/* uds.c: the Unix socket listener. */
/* Create, bind (mode cfg.unix_mode) and listen; sets srv->unix_fd. Negative on failure
 * (logged, naming the path and the errno). */
int uds_listen(server *srv);
/* 1 when the connected peer may use the socket (--unix-allow-uid), else 0, after telling
 * the peer why in an error frame and logging it. */
int uds_peer_allowed(server *srv, int fd);
/* Close the listener and remove the socket file if it is still the one made at start. */
void uds_close(server *srv);

#endif
