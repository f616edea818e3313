/*
 * etcd.h — the few etcd v3 calls tide needs, spoken through etcd's JSON gateway over HTTP
 * (libcurl): leases, a put under a lease, and reading a key prefix.
 *
 * Endpoints are "http://host:port" (or plain "host:port"; an IPv6 host in brackets,
 * "[::1]:2379"; without a port, ETCD_DEFAULT_PORT), several separated by commas; a call
 * tries them in turn, starting with the one that answered last. A malformed endpoint fails
 * etcd_open with TIDE_EURL, the message naming it and what is wrong. A client handle is
 * safe to use from several threads (calls are serialised on one connection).
 *
 * Errors: negative codes — -ECONNREFUSED, -ETIMEDOUT, -EHOSTUNREACH or -EIO when no
 * endpoint answered, TIDE_ESERVER when etcd answered with an error, TIDE_EPARSE when its
 * answer does not parse, -ENOMEM. The message, in err, names the endpoint and the errno.
 */
#ifndef TIDE_ETCD_H
#define TIDE_ETCD_H

#include <stddef.h>
#include <stdint.h>

/* etcd's client port, for an endpoint given without one. */
#define ETCD_DEFAULT_PORT 2379

typedef struct etcd_client etcd_client;

int etcd_open(const char *endpoints, int timeout_ms, etcd_client **out, char *err, size_t errlen);
void etcd_close(etcd_client *e);

/* Grant a lease of ttl_s seconds; its id in *id. */
int etcd_lease_grant(etcd_client *e, int ttl_s, int64_t *id, char *err, size_t errlen);
/* Renew a lease once. *ttl receives the seconds left, 0 when the lease has expired. */
int etcd_lease_keepalive(etcd_client *e, int64_t id, int64_t *ttl, char *err, size_t errlen);
int etcd_lease_revoke(etcd_client *e, int64_t id, char *err, size_t errlen);
/* Put key = val, attached to lease (0: none). */
int etcd_put(etcd_client *e, const char *key, const char *val, int64_t lease, char *err,
             size_t errlen);

/* Called once per key found; return non-zero to stop (that value is returned). */
typedef int (*etcd_kv_fn)(void *arg, const char *key, size_t klen, const char *val, size_t vlen);
/* Read every key that starts with prefix (in key order). */
int etcd_range_prefix(etcd_client *e, const char *prefix, etcd_kv_fn fn, void *arg, char *err,
                      size_t errlen);

#endif
