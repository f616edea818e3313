/*
 * server_int.h — tided's internal pieces shared by server.c (lifecycle, accept, workers)
 * and conn.c (one connection's protocol state machine). The socket side that native and
 * RESP connections share has its own headers: connio.h, and outq.h for the output queue.
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

typedef struct conn conn;
typedef struct server server;

typedef struct worker {
    server *srv;
    int index;
    pthread_t thread;
    int epfd;
    int wakefd; /* eventfd: new connections queued, or stop */
    pthread_mutex_t qlock;
    int *incoming; /* accepted fds waiting to be adopted (under qlock) */
    size_t nincoming, capincoming;
    conn *conns; /* this worker's connections (doubly linked) */
    int started; /* its thread runs (server_teardown joins it) */
    int resp_epfd;                /* RESP connections' epoll set, nested in epfd */
    struct resp_conn *resp_conns; /* this worker's RESP connections (resp_conn.c) */
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
    atomic_int stopping;
    atomic_int open_conns;   /* every connection open, authenticated or not */
    atomic_int authed_conns; /* with a token: those past HELLO/AUTH (<= max_conns) */
    preauth pre;             /* with a token: those not yet authenticated */
    pthread_t metrics_thread;
    int metrics_stopfd;
    int unix_fd;                 /* Unix socket listener, -1 when none (uds.c) */
    uint64_t unix_dev, unix_ino; /* the socket file made at start: only it is unlinked */
};

/* 1 when other processes may write the pool: tided listens on a Unix socket, whose
 * clients map the pool read-write (docs/UNIX.md, trust model). Fixed for the server's life. */
static inline int server_pool_shared(const server *srv) {
    return srv->cfg.unix_path[0] != '\0';
}

/* conn.c */
conn *conn_new(worker *w, int fd);
/* Handle readiness; returns 0 to keep the connection, negative to close it. */
int conn_on_event(conn *c, uint32_t events);
/* Periodic check: close when the peer has stalled past the idle timeout. */
int conn_tick(conn *c, uint64_t now);
/* Stop reading new requests; returns 1 when nothing is left to send. */
int conn_drain(conn *c);
void conn_free(conn *c);
conn *conn_next(conn *c);
/* For conn_shm.c: the connection's server, and a reply encoded by fn (called once with a
 * NULL buffer for the size, then with a buffer the output queue will own). */
typedef int (*conn_encode_fn)(void *buf, size_t cap, size_t *len, void *arg);
server *conn_server(conn *c);
int conn_reply(conn *c, conn_encode_fn fn, void *arg);

/* events_op.c: answer an EVENTS request (the store's departure feed). */
int events_op(conn *c, const frame_msg *m);

/* conn_shm.c: the shared-pool requests of a same-host connection and the leases it holds. */
typedef struct shm_state shm_state;
shm_state *shm_new(void);
/* Release every pin and abort every reservation still held; NULL is ignored. */
void shm_free(store *st, shm_state *s);
/* Serve RESERVE, COMMIT, PIN or RELEASE; *status is the metrics outcome. */
int shm_dispatch(conn *c, shm_state *s, const frame_msg *m, int *status);
/* writev() that also passes `fd` (SCM_RIGHTS) with the first byte sent. */
ssize_t shm_send_fd(int sock, const struct iovec *iov, int n, int fd);

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
