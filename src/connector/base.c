/*
 * base.c — what every connector file calls on a handle: recording a message, counting an
 * operation into the figures, and the argument checks the public calls share. It calls
 * nothing else of the connector, so every other file may depend on it and the arrows
 * between the connector's files all point one way (handle.c at the top).
 */
#include <errno.h>
#include <stdarg.h>
#include <string.h>

#include "connector/connector.h"

int connector_err(tide_connector *c, int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    err_vset(c, c ? &c->err : NULL, code, fmt, ap);
    va_end(ap);
    return code;
}

void connector_count_op(tide_connector *c, tide_connector_op_stats *op, uint64_t keys,
                        uint64_t bytes, uint64_t failed, int whole_error, uint64_t ns) {
    pthread_mutex_lock(&c->stats_lock);
    op->calls++;
    op->keys += keys;
    op->bytes += bytes;
    op->failed_keys += failed;
    op->errors += whole_error ? 1 : 0;
    op->ns += ns;
    pthread_mutex_unlock(&c->stats_lock);
}

int connector_check_id(tide_connector *c, const char *fn, const char *req_id) {
    if (!req_id || !req_id[0]) return connector_err(c, -EINVAL, "%s: empty request id", fn);
    if (strlen(req_id) > CONNECTOR_REQ_ID_MAX)
        return connector_err(c, -EINVAL, "%s: request id longer than %d bytes", fn,
                             CONNECTOR_REQ_ID_MAX);
    return 0;
}

int connector_check_hashes(tide_connector *c, const char *fn, const uint8_t *hashes, size_t nhashes,
                           size_t hash_len) {
    if (nhashes == 0) return 0;
    if (!hashes)
        return connector_err(c, -EINVAL, "%s: hashes is NULL with %zu hashes", fn, nhashes);
    if (hash_len == 0 || hash_len > CONNECTOR_HASH_MAX)
        return connector_err(c, -EINVAL, "%s: hash_len %zu is not 1..%d", fn, hash_len,
                             CONNECTOR_HASH_MAX);
    if (nhashes > (size_t)1 << 24)
        return connector_err(c, -EINVAL, "%s: %zu hashes is more than a prompt can have", fn,
                             nhashes);
    return 0;
}
