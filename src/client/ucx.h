/*
 * ucx.h — the UCX data path of a tide:// handle (`?transport=ucx`, ucx.c, docs/UCX.md):
 * values move by UCX RMA between the caller's memory and tided's registered pool, under
 * the leases of the handle's tide:// connections (wire.h).
 */
#ifndef TIDE_CLIENT_UCX_H
#define TIDE_CLIENT_UCX_H

#include "client/wire.h"

/* Ask every connection of w for FRAME_FEATURE_UCX (call before the first connection);
 * w->owner and w->on_hello become the UCX path's. 0 or -ENOMEM (message on s). */
int tucx_attach(tide_store *s, wire *w);
/* 1 when w's puts and gets go over UCX now: tided granted it and an endpoint is up (made
 * here on first use). 0: use TCP (tided without UCX, or UCX could not connect: warned
 * once, tried again after a pause). */
int tucx_usable(tide_store *s, wire *w);
int tucx_put_many(tide_store *s, wire *w, const tide_key *keys, size_t n, const tide_iov *iov,
                  const size_t *iovcnt, int *results);
int tucx_get_many(tide_store *s, wire *w, const tide_key *keys, size_t n, const tide_iov *iov,
                  const size_t *iovcnt, int *results, size_t *vlens);
/* Registration cache figures, for tests: ucp_mem_map calls on declared buffers, transfers
 * that found their registration cached, registrations dropped (evicted or unregistered),
 * uses left to UCX because every slot held a registration the same call had handed out. */
void tucx_reg_counts(uint64_t *maps, uint64_t *hits, uint64_t *unmaps, uint64_t *full);
/* After wire_destroy: the endpoint, worker and context go. */
void tucx_detach(wire *w);

#endif
