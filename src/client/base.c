/*
 * base.c — the store handle itself and what every backend calls on it: making a handle
 * with a backend chosen from a table of them (open.c passes every backend, the cluster its
 * members' one), closing it, its messages, and the key checks and renderings backends
 * share. It names no backend, so every backend may call it and the arrows between the
 * client's files point one way (open.c at the top).
 */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/client.h"
#include "common/suggest.h"

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

int client_open(const char *fn, const char *text, const backend_ops *const *table, size_t n,
                tide_store **out) {
    char msg[ERR_MSG_MAX];
    if (!out) return err_set(NULL, NULL, -EINVAL, "%s: out is NULL", fn);
    *out = NULL;
    if (!text || !*text) text = "mem://";
    url u;
    int rc = url_parse(text, &u, msg, sizeof(msg));
    if (rc) return err_set(NULL, NULL, rc, "%s", msg);
    const backend_ops *ops = NULL;
    for (size_t i = 0; i < n; i++)
        if (!ops && strcmp(table[i]->scheme, u.scheme) == 0 &&
            (!table[i]->claims || table[i]->claims(&u)))
            ops = table[i];
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

int client_uses_ucx(tide_store *s) {
    return s && s->ops->uses_ucx && s->ops->uses_ucx(s);
}

int client_ucx_cuda(tide_store *s, char *why, size_t len) {
    if (s && s->ops->ucx_cuda) return s->ops->ucx_cuda(s, why, len);
    snprintf(why, len, "not a transport=ucx store");
    return -1;
}
