/*
 * resp_conn.h — tided's RESP port: connections that speak RESP2 (src/proto/resp.h) to the
 * same store as the native port, so Redis clients and tools work against tided unchanged.
 *
 * RESP connections are served by the same I/O workers as native ones. Each worker keeps
 * them in an epoll set of their own (resp_epfd), nested in the worker's main set: the
 * worker calls resp_worker_poll() when that set is ready. Everything here runs on the
 * worker's thread and touches only that worker's RESP connections.
 */
#ifndef TIDE_RESP_CONN_H
#define TIDE_RESP_CONN_H

#include <stdint.h>

#include "server/server_int.h"

/* Create w->resp_epfd and add it to w->epfd. 0 or -errno. */
int resp_worker_init(worker *w);
/* Close w->resp_epfd (after the worker thread has ended). */
void resp_worker_fini(worker *w);
/* Take a new RESP connection on fd. 0, or -ENOMEM / -errno (the caller closes fd). */
int resp_conn_adopt(worker *w, int fd);
/* Run the RESP connections that are ready; close those that fail or finish. */
void resp_worker_poll(worker *w);
/* Close connections stalled past the idle timeout. */
void resp_worker_tick(worker *w, uint64_t now);
/* While stopping: flush what is queued, close what is done. Returns 1 while some are busy. */
int resp_worker_drain(worker *w);
/* Close every RESP connection of w at once. */
void resp_worker_close_all(worker *w);

#endif
