/*
 * ucx_srv.h — tided's UCX data path (ucx_srv.c, docs/UCX.md): the pool registered with
 * UCX, a UCP listener, one progress thread.
 */
#ifndef TIDE_SERVER_UCX_SRV_H
#define TIDE_SERVER_UCX_SRV_H

#include "server/server_int.h"

/* With cfg.ucx_port >= 0: start the UCX data path. A failure is logged and leaves it off
 * (srv->ucx set but not started: ucx_srv_port says 0); tide:// serves on. 0, or -ENOMEM. */
int ucx_srv_start(server *srv);
/* The UCX listener's port, or 0 when the data path is off. */
int ucx_srv_port(const server *srv);
/* Stop the thread, close every endpoint, unregister the pool. Safe when never started. */
void ucx_srv_stop(server *srv);

#endif
