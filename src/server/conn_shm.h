/*
 * conn_shm.h — the shared-pool requests of a same-host (Unix socket) native connection
 * (RESERVE, COMMIT, PIN, RELEASE) and the leases it holds. conn.c owns one shm_state per
 * connection granted FRAME_FEATURE_SHM; replies go to that connection's output queue.
 */
#ifndef TIDE_SERVER_CONN_SHM_H
#define TIDE_SERVER_CONN_SHM_H

#include "proto/frame.h"
#include "server/outq.h"
#include "server/server_int.h"

typedef struct shm_state shm_state;
/* An empty lease set; NULL when out of memory. */
shm_state *shm_new(void);
/* Release every pin and abort every reservation still held; NULL is ignored. */
void shm_free(store *st, shm_state *s);
/* Serve RESERVE, COMMIT, PIN or RELEASE against srv's store, queueing the reply on out;
 * *status is the metrics outcome. 0 or negative (close the connection). */
int shm_dispatch(server *srv, outq *out, shm_state *s, const frame_msg *m, int *status);

#endif
