/*
 * server.h — tided: one store served over TCP (native protocol) with an HTTP /metrics port,
 * and optionally over a Unix socket to same-host clients that share its pool.
 *
 * An optional RESP port serves the same store to Redis clients (see resp_conn.h).
 *
 * Threads: the main thread accepts connections and handles signals; it hands each new
 * connection to one of `threads` I/O workers in turn. A worker owns its connections
 * outright (no locks on connection state); the only shared state is the store (its own
 * lock) and the metrics (atomics). A metrics thread answers HTTP on its own port.
 *
 * Shutdown: SIGTERM or SIGINT stops accepting, lets every worker finish the requests it
 * has read (replies flushed, with a deadline), then closes everything and returns.
 */
#ifndef TIDE_SERVER_H
#define TIDE_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "store/store.h"

#define SERVER_DEFAULT_PORT 7474
/* The metrics port by default: any free port, logged and written to the ready file. A
 * fixed offset from --port (it was port + 1) makes tideds on neighbouring ports collide. */
#define SERVER_METRICS_AUTO (-1)
/* The smallest --max-frame: a request must hold a HELLO with the longest token and a key
 * of TIDE_KEY_MAX bytes with a value. */
#define SERVER_MIN_MAX_FRAME 4096u
/* Pre-auth slots by default (--max-preauth-conns): room for a burst of clients connecting
 * at once, small next to --max-conns. */
#define SERVER_DEFAULT_PREAUTH_CONNS 64

typedef struct server_config {
    char bind[64];         /* numeric IPv4 or IPv6 address to listen on, no brackets
                              (hostport_bind_addr); default 127.0.0.1 */
    int port;              /* native protocol port; 0 = pick a free one */
    int metrics_port;      /* HTTP port for /metrics; 0 = off, SERVER_METRICS_AUTO = any free one */
    int resp_port;         /* RESP2 port for Redis clients (resp_conn.c); 0 = off */
    int threads;           /* I/O worker threads */
    store_config store;    /* pool size and policy */
    char auth_token[256];  /* required from clients when not empty */
    int max_conns;         /* connections beyond this are refused (with a token: those
                              past HELLO; see max_preauth_conns) */
    int max_preauth_conns; /* with a token: connections not authenticated yet; when all
                              are taken the oldest is cut for a new one (preauth.c) */
    uint32_t max_keys;     /* keys in one frame */
    uint64_t max_frame;    /* bytes in one frame, values included */
    uint64_t max_value;    /* largest value; 0 = the pool's limit */
    uint32_t idle_timeout_s;        /* close a connection whose partial request (or, before auth,
                                       whose HELLO / AUTH) has not moved for this long */
    uint32_t write_stall_timeout_s; /* close a connection whose queued replies have not
                                       moved for this long (a peer that does not read) */
    const char *ready_file;         /* when set, write "port metrics_port\n" here once listening */
    /* Cluster membership (announce.c): registered in etcd when etcd is not empty. */
    char etcd[256];      /* etcd endpoints, "http://host:2379[,...]" (etcd.h) */
    char cluster[64];    /* cluster name: keys go under /tide/NAME/members/ */
    char advertise[256]; /* HOST:PORT that clients should use ([::1]:PORT for IPv6);
                            default bind:port */
    int etcd_ttl_s;      /* lease TTL in seconds (default 5), renewed every TTL/3 */
    /* Same-host clients (uds.c, conn_shm.c, docs/UNIX.md). */
    char unix_path[108];         /* Unix socket to listen on as well; "" = none */
    unsigned unix_mode;          /* the socket file's permission bits (default 0600) */
    uint32_t unix_allow_uid[16]; /* when unix_nallow > 0, only these peer uids may connect */
    int unix_nallow;
    uint32_t unix_lease_ms; /* lease on pins and reservations taken over the socket (and by
                               UCX clients' tide:// connections) */
    int ucx_port;           /* UCX data path (ucx_srv.c, docs/UCX.md): -1 off, 0 any port */
} server_config;

/* Defaults for everything (port SERVER_DEFAULT_PORT, 1 GiB pool, 2 threads...). */
void server_config_defaults(server_config *cfg);

/*
 * Run until SIGTERM/SIGINT. Logs through src/common/log.h. Returns 0 after a clean stop,
 * or a negative code when it could not start (with the reason logged).
 */
int server_run(const server_config *cfg);

#endif
