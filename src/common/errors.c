/*
 * errors.c — tide_errname() and tide_strerror() over the table that TIDE_ERRNO_MAP
 * (include/tide.h, the only place codes are described) expands to, and the per-handle,
 * per-thread detailed messages.
 */
#include "errors.h"

#include "common/redact.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "tide.h"

/* Every code of TIDE_ERRNO_MAP (include/tide.h), with its name and text; index i holds
 * code -(TIDE_ERRBASE + i) (TIDE_OK at 0), which the assertions below hold the list to. */
/* One row a line, as the list reads. */
/* clang-format off */
static const struct {
    int code;
    const char *name;
    const char *text;
} error_table[] = {
    {TIDE_OK, "TIDE_OK", "success"}, /* not in the list: not an error */
#define ERR_ROW(name, value, text) {TIDE_##name, "TIDE_" #name, text},
    TIDE_ERRNO_MAP(ERR_ROW)
#undef ERR_ROW
};
/* clang-format on */

/* The list runs -1001, -1002, ... in order with no gap or repeat: a code's position in it
 * (counted from TIDE_ERRBASE + 1) is its number. */
enum {
    ERR_POS_BASE = TIDE_ERRBASE,
#define ERR_POS(name, value, text) ERR_POS_##name,
    TIDE_ERRNO_MAP(ERR_POS)
#undef ERR_POS
};
#define ERR_IN_ORDER(name, value, text)                                                            \
    _Static_assert(TIDE_##name == -ERR_POS_##name,                                                 \
                   "TIDE_" #name " is out of order in TIDE_ERRNO_MAP");
TIDE_ERRNO_MAP(ERR_IN_ORDER)
#undef ERR_IN_ORDER
_Static_assert(sizeof(error_table) / sizeof(error_table[0]) ==
                   (size_t)(-TIDE_ERRLAST - TIDE_ERRBASE + 1),
               "TIDE_ERRLAST is not the last code");

static int table_index(int err) {
    if (err == TIDE_OK) return 0;
    if (err < -TIDE_ERRBASE && err >= TIDE_ERRLAST) return -err - TIDE_ERRBASE;
    return -1;
}

/* errno names for the values a store call can pass through. */
static const char *errno_name(int e) {
    switch (e) {
    case ENOMEM:
        return "ENOMEM";
    case EINVAL:
        return "EINVAL";
    case ENOENT:
        return "ENOENT";
    case EIO:
        return "EIO";
    case EAGAIN:
        return "EAGAIN";
    case EINTR:
        return "EINTR";
    case EPIPE:
        return "EPIPE";
    case ETIMEDOUT:
        return "ETIMEDOUT";
    case ECONNREFUSED:
        return "ECONNREFUSED";
    case ECONNRESET:
        return "ECONNRESET";
    case EHOSTUNREACH:
        return "EHOSTUNREACH";
    case ENETUNREACH:
        return "ENETUNREACH";
    case EADDRINUSE:
        return "EADDRINUSE";
    case EACCES:
        return "EACCES";
    case EPERM:
        return "EPERM";
    case ENOSPC:
        return "ENOSPC";
    case EMFILE:
        return "EMFILE";
    case ENFILE:
        return "ENFILE";
    case EBADF:
        return "EBADF";
    case ENOTCONN:
        return "ENOTCONN";
    case ENOSYS:
        return "ENOSYS";
    default:
        return NULL;
    }
}

TIDE_API const char *tide_errname(int err) {
    int i = table_index(err);
    if (i >= 0) return error_table[i].name;
    if (err < 0) {
        const char *n = errno_name(-err);
        if (n) return n;
        return "ERRNO";
    }
    return "UNKNOWN";
}

TIDE_API const char *tide_strerror(int err) {
    int i = table_index(err);
    if (i >= 0) return error_table[i].text;
    if (err < 0 && err > -TIDE_ERRBASE) return strerror(-err);
    return "unknown error";
}

static __thread struct {
    const void *owner;
    char msg[ERR_MSG_MAX];
} tls_err;

void errbuf_init(errbuf *e) {
    pthread_mutex_init(&e->lock, NULL);
    e->msg[0] = '\0';
}

void errbuf_destroy(errbuf *e) {
    pthread_mutex_destroy(&e->lock);
}

int err_vset(const void *owner, errbuf *eb, int code, const char *fmt, va_list ap) {
    /* Format into a local buffer first: an argument may be a message this thread holds
     * (tide_errmsg() of a store under a connector, say), which lives in tls_err.msg. */
    char raw[ERR_MSG_MAX], msg[ERR_MSG_MAX];
    vsnprintf(raw, sizeof(raw), fmt, ap);
    redact_text(raw, msg, sizeof(msg)); /* a URL in a message never shows its token */
    memcpy(tls_err.msg, msg, sizeof(msg));
    tls_err.owner = owner;
    if (eb) {
        pthread_mutex_lock(&eb->lock);
        memcpy(eb->msg, tls_err.msg, sizeof(eb->msg));
        pthread_mutex_unlock(&eb->lock);
    }
    return code;
}

int err_set(const void *owner, errbuf *eb, int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    err_vset(owner, eb, code, fmt, ap);
    va_end(ap);
    return code;
}

const char *err_get(const void *owner, errbuf *eb) {
    if (owner == NULL || tls_err.owner == owner) return tls_err.msg;
    if (!eb) return "";
    /* Another thread failed last on this handle: copy its message into our slot so the
     * pointer we return stays valid while that thread keeps writing. */
    pthread_mutex_lock(&eb->lock);
    memcpy(tls_err.msg, eb->msg, sizeof(tls_err.msg));
    pthread_mutex_unlock(&eb->lock);
    tls_err.owner = owner;
    return tls_err.msg;
}
