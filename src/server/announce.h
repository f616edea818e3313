/*
 * announce.h — a node's membership in etcd: tided registers its advertised address under
 * /tide/CLUSTER/members/HOST:PORT, attached to a lease that a thread keeps alive.
 */
#ifndef TIDE_ANNOUNCE_H
#define TIDE_ANNOUNCE_H

#include "server/server.h"

typedef struct announce announce;

/* Settings that cannot work, found before anything listens: no --cluster, a bind on every
 * address (0.0.0.0, ::) without --advertise, an etcd endpoint list that does not parse.
 * 0, or -EINVAL / TIDE_EURL (logged). announce_start checks them again. */
int announce_check(const server_config *cfg);

/*
 * Register (one try, logged) and start the keepalive thread. A node whose first try fails
 * keeps serving and keeps trying. Errors: -EINVAL for settings that cannot work (logged),
 * -ENOMEM, or a thread that cannot start. on_lapse (may be NULL) is called from the thread
 * when etcd says the lease expired: clients dropped the node meanwhile.
 */
int announce_start(const server_config *cfg, int port, void (*on_lapse)(void *), void *lapse_arg,
                   announce **out);

/* Leave: revoke the lease, so clients drop the node at their next read, and stop the
 * thread. NULL is ignored. */
void announce_stop(announce *a);

#endif
