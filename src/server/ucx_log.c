/*
 * ucx_log.c — UCX's own log lines taken into tided's log through UCX's log handler
 * (ucx_log.h): mapped to tide's levels, checked against --log-level before anything is
 * formatted, and limited by one limit (common/log.h) shared by every thread that logs for
 * UCX (tided's UCX thread, UCX's async thread, the main thread at start and stop).
 *
 * Invariants. The handler returns UCS_LOG_FUNC_RC_STOP for every line, so UCX's default
 * handler (stdout, or UCX_LOG_FILE) prints none of them. It takes no lock, so it cannot
 * deadlock whatever UCX holds when it logs. Lines that tide's level hides are neither
 * written nor counted; lines that the limit refuses cost a few atomic operations each.
 *
 * What does not pass through here: UCX's fatal paths (an assertion, a signal caught with
 * UCX_HANDLE_ERRORS) write to stderr themselves and end the process, once; and the lines
 * UCX logs before ucx_log_start (none that a peer causes: the port is not open yet).
 */
#include "server/ucx_log.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "client/ucx_dl.h"
#include "common/log.h"
#include "common/util.h"

void ucx_log_clean(char *s) {
    size_t end = 0;
    for (size_t i = 0; s[i]; i++) {
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) s[i] = ' ';
        if (s[i] != ' ') end = i + 1;
    }
    s[end] = '\0';
}

#ifdef TIDE_HAVE_UCX
int ucx_log_level(int ucs_level) {
    switch (ucs_level) {
    case UCS_LOG_LEVEL_FATAL:
    case UCS_LOG_LEVEL_ERROR:
        return LOG_LEVEL_ERROR;
    case UCS_LOG_LEVEL_WARN:
        return LOG_LEVEL_WARN;
    case UCS_LOG_LEVEL_DIAG:
    case UCS_LOG_LEVEL_INFO:
        return LOG_LEVEL_INFO;
    default: /* debug, the trace levels, and UCX's "print" (UCX_LOG_PRINT_ENABLE) */
        return LOG_LEVEL_DEBUG;
    }
}

static log_limit limit;
/* The server whose metrics count drops; NULL outside ucx_log_start .. ucx_log_stop.
 * Release/acquire: a handler that sees the pointer sees the metrics it points at. */
static _Atomic(metrics *) sink;
static pthread_once_t pushed = PTHREAD_ONCE_INIT;

/* The line saying that n lines were dropped, if n; the caller holds a token (or it is the
 * last). At warning level, or error when that is all tided prints (then every dropped line
 * was an error). */
static void say_dropped(uint64_t n) {
    if (!n) return;
    LOG_AT(log_level < LOG_LEVEL_WARN ? LOG_LEVEL_ERROR : LOG_LEVEL_WARN,
           "UCX: %llu lines of UCX's log suppressed (more than %d at once or %d a second: "
           "tide_ucx_log_lines_suppressed_total)",
           (unsigned long long)n, LOG_LIMIT_BURST, LOG_LIMIT_PER_S);
}

static ucs_log_func_rc_t on_ucx_log(const char *file, unsigned line, const char *function,
                                    ucs_log_level_t level, const ucs_log_component_config_t *comp,
                                    const char *fmt, va_list ap) {
    (void)function, (void)comp;
    int lvl = ucx_log_level((int)level);
    if (lvl > log_level) return UCS_LOG_FUNC_RC_STOP;
    if (!log_limit_take(&limit, now_ns())) {
        metrics *m = atomic_load_explicit(&sink, memory_order_acquire);
        if (m) atomic_fetch_add_explicit(&m->ucx_log_suppressed, 1, memory_order_relaxed);
        return UCS_LOG_FUNC_RC_STOP;
    }
    char msg[512];
    if (vsnprintf(msg, sizeof(msg), fmt, ap) < 0) msg[0] = '\0';
    ucx_log_clean(msg);
    const char *base = strrchr(file, '/');
    say_dropped(log_limit_dropped(&limit));
    LOG_AT(lvl, "UCX %s:%u: %s", base ? base + 1 : file, line, msg);
    return UCS_LOG_FUNC_RC_STOP;
}

static void push(void) {
    ucs_log_push_handler(on_ucx_log);
}

void ucx_log_start(metrics *m) {
    atomic_store_explicit(&sink, m, memory_order_release);
    pthread_once(&pushed, push);
}

void ucx_log_tick(void) {
    say_dropped(log_limit_report(&limit, now_ns()));
}

void ucx_log_stop(void) {
    atomic_store_explicit(&sink, NULL, memory_order_release);
    say_dropped(log_limit_dropped(&limit));
}
#endif
