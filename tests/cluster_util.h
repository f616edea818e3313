/*
 * cluster_util.h — helpers for tests that run several tided nodes (and etcd) on loopback.
 */
#ifndef TIDE_CLUSTER_UTIL_H
#define TIDE_CLUSTER_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "server_util.h"

/* Start n nodes (64 MiB each, quiet). When ports is not NULL each node gets a fixed free
 * port, written there, so that it can be restarted on it. extra: more arguments or NULL. */
void cluster_start_nodes_with(test_server *ts, int n, int *ports, const char *const *extra);
void cluster_start_nodes(test_server *ts, int n, int *ports);
/* Start one node on port (0: any) with extra arguments (or NULL). */
void cluster_start_node(test_server *ts, int port, const char *const *extra);
/* Start a node again on its port after it was stopped. */
void cluster_restart_node(test_server *ts, int port);
/* "tide://127.0.0.1:P1,...,127.0.0.1:Pn?opts". */
void cluster_url(char *buf, size_t cap, const test_server *ts, int n, const char *opts);
/* Key i's name into key[cap] and its value (100..3999 bytes, derived from i) into v[4096];
 * returns the value length. */
size_t cluster_value(char *key, size_t cap, uint8_t *v, int i);

/* The longest a cluster call may take while one member is silent (hung or cut off), for a
 * cluster URL with timeout_ms=T. What the client promises: each call to a member ends T
 * after it started (node.c), a get asks one member at a time and a put replaces a member
 * whose call failed, and only one member is silent, so a call waits out at most one
 * timeout and then makes one answered call (about a millisecond on loopback). The margin,
 * 4T/5, is for scheduling on a loaded 2-core machine under a sanitizer; it stays below T,
 * so a call that waits two timeouts (a doubled timeout, a retry after a timeout) fails. */
#define CLUSTER_SILENT_CALL_BOUND_MS(t_ms) ((t_ms) + (t_ms)*4 / 5)

/* etcd, started on free loopback ports with its data in the test's directory. */
typedef struct test_etcd {
    int pid;
    int client_port, peer_port;
    char endpoint[64]; /* "127.0.0.1:PORT" (or "[::1]:PORT": etcd_start_at) */
    char log[256];
} test_etcd;
void etcd_start(test_etcd *e);
/* The same on a client port chosen beforehand (0: pick one). */
void etcd_start_on(test_etcd *e, int client_port);
/* The same on host ("127.0.0.1", or "[::1]" in brackets) for its client and peer URLs. */
void etcd_start_at(test_etcd *e, const char *host, int client_port);
void etcd_kill(test_etcd *e);

#endif
