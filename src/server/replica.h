/*
 * replica.h — tided's side of cluster replication safety: a node that may have missed
 * writes the other replicas took (it was stopped, starved, restarted, or a cluster client
 * skipped it) drops its contents before it serves a cluster client again, so that a stale
 * copy is never read after an acknowledged remove or newer put (docs/CLUSTER.md,
 * "Replicas that missed writes").
 */
#ifndef TIDE_SERVER_REPLICA_H
#define TIDE_SERVER_REPLICA_H

#include <stdint.h>

#include "proto/frame.h"

typedef struct server server;
typedef struct replica replica;

/* Start the state and its heartbeat thread, after the store (the node starts in doubt when
 * its SSD tier restored objects: they predate it). 0, or -errno with the reason logged. */
int replica_start(server *srv);
/* Stop the thread and free the state; a server without one is a no-op. */
void replica_stop(server *srv);
/*
 * Before each request of a native connection: settle any doubt (a stall past the cluster
 * clients' shortest timeout) and refuse a connection opened before the node last dropped its
 * contents, whose buffered requests may be writes that were since superseded. *conn_gen is
 * the connection's generation (0 until its first request). 0, or -ECONNRESET to close it.
 */
int replica_gate(server *srv, uint64_t *conn_gen);
/* announce.c's hook (arg: the server): the etcd lease expired, so clients dropped this node
 * from their views and wrote around it. Doubt, settled before the next request. */
void replica_lapsed(void *srv);
/* Serve REPLICA: the connection's client is a cluster client (turns replica mode on), with
 * its timeout and whether it skipped this node. Fills what the reply carries: reply[0] the
 * request id, reply[1] the fences, reply[2] the generation (also *conn_gen). The caller
 * sends it with frame_encode_replica_reply. */
void replica_op(server *srv, const frame_msg *m, uint64_t *conn_gen, uint64_t reply[3]);

/* Serve a REPLICA hint operation (HINT, ASK or TOLD about m->replica.member): reply[0] the
 * request id, reply[1] the hints held for that member, reply[2] how many it was told of.
 * 0, or TIDE_ELIMIT when a HINT finds the table full of unresolved members. */
int replica_hint_op(server *srv, const frame_msg *m, uint64_t reply[3]);

#endif
