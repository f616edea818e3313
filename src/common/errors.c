/*
 * errors.c — the table of tide's error codes (names and texts) and the per-handle,
 * per-thread detailed messages. This table is the only place codes are described.
 */
#include "errors.h"

#include "common/redact.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "tide.h"

static const struct {
    int code;
    const char *name;
    const char *text;
} error_table[] = {
    {TIDE_OK, "TIDE_OK", "success"},
    {TIDE_ENOTFOUND, "TIDE_ENOTFOUND", "key not found"},
    {TIDE_EKEYEMPTY, "TIDE_EKEYEMPTY", "empty key"},
    {TIDE_EKEYLONG, "TIDE_EKEYLONG", "key longer than 256 bytes"},
    {TIDE_EVALEMPTY, "TIDE_EVALEMPTY", "empty value"},
    {TIDE_EVALBIG, "TIDE_EVALBIG", "value larger than the store accepts"},
    {TIDE_EBUFSMALL, "TIDE_EBUFSMALL", "buffer too small for the value"},
    {TIDE_ESCHEME, "TIDE_ESCHEME", "unknown URL scheme"},
    {TIDE_EOPTION, "TIDE_EOPTION", "unknown or invalid URL option"},
    {TIDE_ESIZE, "TIDE_ESIZE", "size does not parse"},
    {TIDE_ENOSPACE, "TIDE_ENOSPACE", "no space left in the store (pool or metadata budget)"},
    {TIDE_ECHECKSUM, "TIDE_ECHECKSUM", "stored bytes failed their checksum"},
    {TIDE_EURL, "TIDE_EURL", "malformed URL"},
    {TIDE_EPROTO, "TIDE_EPROTO", "protocol error"},
    {TIDE_EAUTH, "TIDE_EAUTH", "authentication failed"},
    {TIDE_ECONFIG, "TIDE_ECONFIG", "invalid configuration"},
    {TIDE_EUNSUPPORTED, "TIDE_EUNSUPPORTED", "not supported"},
    {TIDE_EBUSY, "TIDE_EBUSY", "key is being written"},
    {TIDE_ELIMIT, "TIDE_ELIMIT", "limit exceeded"},
    {TIDE_ECLOSED, "TIDE_ECLOSED", "closed"},
    {TIDE_ESERVER, "TIDE_ESERVER", "server error"},
    {TIDE_EPARSE, "TIDE_EPARSE", "document does not parse"},
    {TIDE_EPARTIALTAIL, "TIDE_EPARTIALTAIL", "partial-tail offloads name different boundaries"},
    {TIDE_EDEVICE, "TIDE_EDEVICE", "device memory error"},
};

static int table_index(int err) {
    for (size_t i = 0; i < sizeof(error_table) / sizeof(error_table[0]); i++)
        if (error_table[i].code == err) return (int)i;
    return -1;
}

/* errno names for the values a store call can pass through. */
static const char *errno_name(int e) {
    switch (e) {
    case ENOMEM: return "ENOMEM";
    case EINVAL: return "EINVAL";
    case ENOENT: return "ENOENT";
    case EIO: return "EIO";
    case EAGAIN: return "EAGAIN";
    case EINTR: return "EINTR";
    case EPIPE: return "EPIPE";
    case ETIMEDOUT: return "ETIMEDOUT";
    case ECONNREFUSED: return "ECONNREFUSED";
    case ECONNRESET: return "ECONNRESET";
    case EHOSTUNREACH: return "EHOSTUNREACH";
    case ENETUNREACH: return "ENETUNREACH";
    case EADDRINUSE: return "EADDRINUSE";
    case EACCES: return "EACCES";
    case EPERM: return "EPERM";
    case ENOSPC: return "ENOSPC";
    case EMFILE: return "EMFILE";
    case ENFILE: return "ENFILE";
    case EBADF: return "EBADF";
    case ENOTCONN: return "ENOTCONN";
    case ENOSYS: return "ENOSYS";
    default: return NULL;
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
