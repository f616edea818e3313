/*
 * errors.h — detailed error messages kept per handle and per thread.
 *
 * A failing call records a message with err_set(); tide_errmsg() reads it back. The
 * message is kept twice: in a thread-local slot tagged with the owning handle (so a thread
 * reads its own last message even while other threads fail on the same handle) and in the
 * handle's errbuf (so another thread can still see the most recent one).
 */
#ifndef TIDE_ERRORS_H
#define TIDE_ERRORS_H

#include <pthread.h>
#include <stdarg.h>

#define ERR_MSG_MAX 512

typedef struct errbuf {
    pthread_mutex_t lock;
    char msg[ERR_MSG_MAX];
} errbuf;

void errbuf_init(errbuf *e);
void errbuf_destroy(errbuf *e);

/* Record a message for `owner` (may be NULL) and return `code` unchanged, so that a call
 * can `return err_set(...)`. `eb` is the owner's errbuf or NULL. */
int err_set(const void *owner, errbuf *eb, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
int err_vset(const void *owner, errbuf *eb, int code, const char *fmt, va_list ap);

/* The message for `owner` as tide_errmsg() defines it. */
const char *err_get(const void *owner, errbuf *eb);

#endif
