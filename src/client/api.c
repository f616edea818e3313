/*
 * api.c — the public store API on an open handle: argument checks and dispatch to the
 * backend. Single-key calls are batch calls of one key, so every backend implements only
 * the batch forms and behaves the same either way. Opening (the scheme table) is open.c;
 * the handle itself and the helpers every backend calls are base.c.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/client.h"
#include "common/abi.h"

/* Checks shared by every batch call. */
static int batch_check(tide_store *s, const char *fn, const tide_key *keys, size_t n,
                       const void *out) {
    if (!s) return err_set(NULL, NULL, -EINVAL, "%s: store is NULL", fn);
    if (n > TIDE_BATCH_MAX)
        return client_err(s, TIDE_ELIMIT, "%s: %zu keys in one call, the limit is %d", fn, n,
                          TIDE_BATCH_MAX);
    if (n && (!keys || !out)) return client_err(s, -EINVAL, "%s: NULL array", fn);
    return 0;
}

/* After a batch whose keys failed one by one, leave a message naming the first. */
static int batch_note(tide_store *s, const char *fn, const tide_key *keys, size_t n,
                      const int *results, int rc) {
    if (rc < 0) return rc;
    for (size_t i = 0; i < n; i++) {
        if (results[i] != 0) {
            char kb[80];
            client_key_repr(keys[i].data, keys[i].len, kb, sizeof(kb));
            client_err(s, results[i], "%s: key %zu '%s': %s", fn, i, kb, tide_strerror(results[i]));
            break;
        }
    }
    return rc;
}

TIDE_API int tide_put_many(tide_store *s, const tide_key *keys, size_t n, const tide_iov *iov,
                           const size_t *iovcnt, int *results) {
    int rc = batch_check(s, "tide_put_many", keys, n, results);
    if (rc) return rc;
    if (n && !iov) return client_err(s, -EINVAL, "tide_put_many: iov is NULL");
    if (n == 0) return 0;
    rc = s->ops->put_many(s, keys, n, iov, iovcnt, results);
    return batch_note(s, "tide_put_many", keys, n, results, rc);
}

TIDE_API int tide_get_many(tide_store *s, const tide_key *keys, size_t n, const tide_iov *iov,
                           const size_t *iovcnt, int *results, size_t *vlens) {
    int rc = batch_check(s, "tide_get_many", keys, n, results);
    if (rc) return rc;
    if (n && !iov) return client_err(s, -EINVAL, "tide_get_many: iov is NULL");
    if (n == 0) return 0;
    rc = s->ops->get_many(s, keys, n, iov, iovcnt, results, vlens);
    return batch_note(s, "tide_get_many", keys, n, results, rc);
}

TIDE_API int tide_exists_many(tide_store *s, const tide_key *keys, size_t n, uint8_t *present) {
    int rc = batch_check(s, "tide_exists_many", keys, n, present);
    if (rc) return rc;
    if (n == 0) return 0;
    return s->ops->exists_many(s, keys, n, present);
}

TIDE_API int tide_remove_many(tide_store *s, const tide_key *keys, size_t n, int *results) {
    int rc = batch_check(s, "tide_remove_many", keys, n, results);
    if (rc) return rc;
    if (n == 0) return 0;
    return s->ops->remove_many(s, keys, n, results);
}

TIDE_API int tide_match_prefix(tide_store *s, const tide_key *keys, size_t n) {
    int rc = batch_check(s, "tide_match_prefix", keys, n, keys);
    if (rc) return rc;
    if (n == 0) return 0;
    if (s->ops->match_prefix) return s->ops->match_prefix(s, keys, n);
    uint8_t *present = malloc(n);
    if (!present) return client_err(s, -ENOMEM, "tide_match_prefix: out of memory");
    rc = s->ops->exists_many(s, keys, n, present);
    if (rc >= 0) {
        size_t i = 0;
        while (i < n && present[i])
            i++;
        rc = (int)i;
    }
    free(present);
    return rc;
}

TIDE_API int tide_clear(tide_store *s) {
    if (!s) return err_set(NULL, NULL, -EINVAL, "tide_clear: store is NULL");
    return s->ops->clear(s);
}

TIDE_API int tide_events_read(tide_store *s, uint64_t from, tide_event *ev, size_t max,
                              uint64_t *next, uint64_t *lost) {
    if (!s || !next || !lost || (max && !ev))
        return err_set(s, s ? &s->err : NULL, -EINVAL, "tide_events_read: NULL argument");
    *next = from;
    *lost = 0;
    if (!s->ops->events)
        return client_err(s, TIDE_EUNSUPPORTED,
                          "tide_events_read: %s:// stores have no departure feed (mem://, unix:// "
                          "and tide:// to one tided do)",
                          s->ops->scheme);
    if (max > TIDE_BATCH_MAX) max = TIDE_BATCH_MAX;
    return s->ops->events(s, from, ev, max, next, lost);
}

_Static_assert(offsetof(tide_stats, reserved) + 8 == TIDE_STATS_SIZE_V1, "the first fields moved");
_Static_assert(sizeof(tide_stats) % 8 == 0 && sizeof(tide_stats) <= TIDE_STATS_SIZE_MAX,
               "tide_stats grows by whole uint64 fields");

/* The backend always fills a whole tide_stats of this library's size; the caller gets the
 * part its size holds, and zeros past the part this library knows. */
TIDE_API int tide_stats_get(tide_store *s, tide_stats *st, size_t size) {
    if (!s || !st) return err_set(s, s ? &s->err : NULL, -EINVAL, "tide_stats_get: NULL argument");
    if (!abi_size_ok(size, TIDE_STATS_SIZE_V1, TIDE_STATS_SIZE_MAX))
        return client_err(s, -EINVAL,
                          "tide_stats_get: size %zu is not a tide_stats size (pass sizeof "
                          "(tide_stats): a multiple of 8 from %d to %d; this library's is %zu)",
                          size, TIDE_STATS_SIZE_V1, TIDE_STATS_SIZE_MAX, sizeof(tide_stats));
    tide_stats full;
    memset(&full, 0, sizeof(full));
    int rc = s->ops->stats(s, &full);
    abi_fill(st, size, &full, sizeof(full));
    return rc;
}

/* Single-key calls: check the key (and value) here so the message can be exact. */
static int single_key(tide_store *s, const char *fn, const void *key, size_t klen) {
    if (!s) return err_set(NULL, NULL, -EINVAL, "%s: store is NULL", fn);
    tide_key k = {key, klen};
    int rc = client_key_check(&k);
    if (rc == TIDE_EKEYEMPTY) return client_err(s, rc, "%s: empty key", fn);
    if (rc == TIDE_EKEYLONG)
        return client_err(s, rc, "%s: key of %zu bytes is longer than the limit of %d bytes", fn,
                          klen, TIDE_KEY_MAX);
    return 0;
}

TIDE_API int tide_put(tide_store *s, const void *key, size_t klen, const void *val, size_t vlen) {
    int rc = single_key(s, "tide_put", key, klen);
    if (rc) return rc;
    if (vlen == 0 || !val) return client_err(s, TIDE_EVALEMPTY, "tide_put: empty value");
    tide_key k = {key, klen};
    tide_iov v = {(void *)val, vlen};
    int res = 0;
    rc = s->ops->put_many(s, &k, 1, &v, NULL, &res);
    if (rc < 0) return rc;
    if (res) {
        char kb[80];
        client_err(s, res, "tide_put: key '%s', value of %zu bytes: %s",
                   client_key_repr(key, klen, kb, sizeof(kb)), vlen, tide_strerror(res));
    }
    return res;
}

TIDE_API int tide_get(tide_store *s, const void *key, size_t klen, void *buf, size_t cap,
                      size_t *vlen) {
    int rc = single_key(s, "tide_get", key, klen);
    if (rc) return rc;
    if (cap && !buf) return client_err(s, -EINVAL, "tide_get: buf is NULL with cap %zu", cap);
    tide_key k = {key, klen};
    tide_iov v = {buf, cap};
    int res = 0;
    size_t len = 0;
    rc = s->ops->get_many(s, &k, 1, &v, NULL, &res, &len);
    if (rc < 0) return rc;
    if (vlen) *vlen = len;
    if (res == TIDE_EBUFSMALL)
        return client_err(s, res,
                          "tide_get: buffer too small: the value is %zu bytes, the "
                          "buffer holds %zu",
                          len, cap);
    if (res == TIDE_ENOTFOUND) {
        char kb[80];
        return client_err(s, res, "tide_get: key '%s' not found",
                          client_key_repr(key, klen, kb, sizeof(kb)));
    }
    return res;
}

TIDE_API int tide_exists(tide_store *s, const void *key, size_t klen) {
    int rc = single_key(s, "tide_exists", key, klen);
    if (rc) return rc;
    tide_key k = {key, klen};
    uint8_t p = 0;
    rc = s->ops->exists_many(s, &k, 1, &p);
    return rc < 0 ? rc : p;
}

TIDE_API int tide_remove(tide_store *s, const void *key, size_t klen) {
    int rc = single_key(s, "tide_remove", key, klen);
    if (rc) return rc;
    tide_key k = {key, klen};
    int res = 0;
    rc = s->ops->remove_many(s, &k, 1, &res);
    return rc < 0 ? rc : res;
}
