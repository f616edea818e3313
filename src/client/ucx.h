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
/* Values moved on same-host endpoints (docs/UCX.md), for tests. */
uint64_t tucx_same_host_values(void);
/* UCX endpoints to tided this process made (each the HELLO and WELCOME done), for tests. */
uint64_t tucx_endpoints_made(void);
/* A kept declaration (the connector's regions, docs/UCX.md): like tide_buffer_register, but
 * each UCX context registers it once, at its first use, and keeps the registration until
 * tide_buffer_unregister (never dropped to make room). cuda: GPU memory, registered as CUDA
 * memory and only by a context whose UCX moves CUDA memory. 0, -EINVAL, TIDE_EBUSY (overlaps
 * a declared range), TIDE_ELIMIT (TIDE_BUFFER_MAX declared). */
int tucx_declare(const void *base, size_t len, int cuda);
/* 1 when [p, p+l) lies in a range declared as CUDA memory. */
int tucx_declared_cuda(const void *p, size_t l);

/* Whether w's UCX moves CUDA memory (brings its endpoint up first): 1 (why: the memory types
 * it reports), 0 (why: "CUDA memory not supported by this UCX (memory types: ...)"), -1 (no
 * UCX path at all: why says so). */
int tucx_cuda_support(tide_store *s, wire *w, char *why, size_t len);
/* 1 when w's UCX moves CUDA memory and every piece of iov lies in a range declared as CUDA
 * memory: such values may go to tucx_*_many_dev, straight between the GPU and the pool. */
int tucx_dev_direct(wire *w, const tide_iov *iov, const size_t *iovcnt, size_t n);
/* The checksum of a value in memory the CPU cannot read (device pages), where it lies: 0 and
 * *sum, or a tide code with why. */
typedef int (*tucx_sum_fn)(void *arg, const tide_iov *v, size_t cnt, uint64_t len, uint64_t *sum,
                           char *why, size_t wl);
/* tucx_put_many / tucx_get_many of values in device memory: UCX moves the bytes between the
 * pages and tided's pool; sum(arg, ...) takes each value's checksum (a put's, for COMMIT; a
 * get's, where it landed). */
int tucx_put_many_dev(tide_store *s, wire *w, const tide_key *keys, size_t n, const tide_iov *iov,
                      const size_t *iovcnt, int *results, tucx_sum_fn sum, void *arg);
int tucx_get_many_dev(tide_store *s, wire *w, const tide_key *keys, size_t n, const tide_iov *iov,
                      const size_t *iovcnt, int *results, size_t *vlens, tucx_sum_fn sum,
                      void *arg);
/* Values moved by tucx_*_many_dev since the process started (tests, figures). */
uint64_t tucx_dev_values(void);

/* After wire_destroy: the endpoint, worker and context go. */
void tucx_detach(wire *w);

#endif
