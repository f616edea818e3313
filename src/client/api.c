/*
 * api.c — the public store API: argument checks, the scheme table, and dispatch to the
 * backend. Single-key calls are batch calls of one key, so every backend implements only
 * the batch forms and behaves the same either way.
 */
#include <ctype.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/suggest.h"
#include "client/client.h"
#include "common/abi.h"

static const backend_ops *const backends[] = {
    &mem_backend,  &cluster_backend, /* tide:// with several members or cluster options */
    &node_backend, &etcd_backend,    &unix_backend,
};

int client_err(tide_store *s, int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    err_vset(s, s ? &s->err : NULL, code, fmt, ap);
    va_end(ap);
    return code;
}

int client_key_check(const tide_key *k) {
    if (k->len == 0 || !k->data) return TIDE_EKEYEMPTY;
    if (k->len > TIDE_KEY_MAX) return TIDE_EKEYLONG;
    return 0;
}

const char *client_key_repr(const void *key, size_t klen, char *buf, size_t len) {
    const unsigned char *k = key;
    size_t j = 0;
    for (size_t i = 0; i < klen && j + 8 < len && j < 64; i++) {
        if (isprint(k[i]) && k[i] != '\\')
            buf[j++] = (char)k[i];
        else
            j += (size_t)snprintf(buf + j, len - j, "\\x%02x", k[i]);
        if (i + 1 < klen && (j + 8 >= len || j >= 64)) {
            j += (size_t)snprintf(buf + j, len - j, "...");
            break;
        }
    }
    buf[j < len ? j : len - 1] = '\0';
    return buf;
}

TIDE_API const char *tide_errmsg(const tide_store *s) {
    return err_get(s, s ? (errbuf *)&s->err : NULL);
}

TIDE_API int tide_open(const char *text, tide_store **out) {
    char msg[ERR_MSG_MAX];
    if (!out) return err_set(NULL, NULL, -EINVAL, "tide_open: out is NULL");
    *out = NULL;
    if (!text || !*text) text = "mem://";
    url u;
    int rc = url_parse(text, &u, msg, sizeof(msg));
    if (rc) return err_set(NULL, NULL, rc, "%s", msg);
    const backend_ops *ops = NULL;
    for (size_t i = 0; i < sizeof(backends) / sizeof(backends[0]); i++)
        if (!ops && strcmp(backends[i]->scheme, u.scheme) == 0 &&
            (!backends[i]->claims || backends[i]->claims(&u)))
            ops = backends[i];
    if (!ops) {
        static const char *const known[] = {"mem", "tide", "etcd", "unix"};
        suggest sg;
        char hint[96] = "";
        suggest_init(&sg, u.scheme);
        for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
            suggest_offer(&sg, known[i]);
        if (suggest_best(&sg))
            snprintf(hint, sizeof(hint), "; did you mean '%s://'?", suggest_best(&sg));
        else if (!strcmp(u.scheme, "tcp") || !strcmp(u.scheme, "http") ||
                 !strcmp(u.scheme, "redis"))
            snprintf(hint, sizeof(hint), "; a tided's native port is tide://HOST:PORT");
        rc = err_set(NULL, NULL, TIDE_ESCHEME,
                     "unknown URL scheme '%s://' in '%s' (known: mem://, tide://, etcd://, "
                     "unix://%s)",
                     u.scheme, text, hint);
        url_free(&u);
        return rc;
    }
    tide_store *s = calloc(1, sizeof(*s));
    if (!s) {
        url_free(&u);
        return err_set(NULL, NULL, -ENOMEM, "out of memory opening '%s'", text);
    }
    errbuf_init(&s->err);
    s->ops = ops;
    rc = ops->open(s, &u);
    if (rc == 0 && (rc = url_check_unused(&u, msg, sizeof(msg))) != 0) {
        ops->close(s);
        err_set(s, &s->err, rc, "%s", msg);
    }
    url_free(&u);
    if (rc) {
        /* The backend left its message on s; carry it to the no-handle slot. */
        snprintf(msg, sizeof(msg), "%s", err_get(s, &s->err));
        err_set(NULL, NULL, rc, "%s", msg);
        errbuf_destroy(&s->err);
        free(s);
        return rc;
    }
    *out = s;
    return 0;
}

TIDE_API void tide_close(tide_store *s) {
    if (!s) return;
    s->ops->close(s);
    errbuf_destroy(&s->err);
    free(s);
}

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
