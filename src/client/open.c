/*
 * open.c — tide_open(): the table of backends by URL scheme, tried in order (base.c makes
 * the handle). The only file that names every backend.
 */
#include "client/client.h"

static const backend_ops *const backends[] = {
    &mem_backend,  &cluster_backend, /* tide:// with several members or cluster options */
    &node_backend, &etcd_backend,    &unix_backend,
};

TIDE_API int tide_open(const char *text, tide_store **out) {
    return client_open("tide_open", text, backends, sizeof(backends) / sizeof(backends[0]), out);
}
