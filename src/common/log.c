/*
 * log.c — the log sink for the daemon and the CLI: one line per call, written with a
 * single write so lines from several threads do not interleave; and the limits on lines
 * peers can cause (log.h, LOG_LIMITED).
 */
#include "log.h"

#include "common/redact.h"
#include "common/util.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

int log_level = LOG_LEVEL_INFO;
static atomic_uint_fast64_t suppressed;

#define LOG_LIMIT_INTERVAL_NS (1000000000ull / LOG_LIMIT_PER_S)

int log_set_level(const char *name) {
    static const char *names[] = {"error", "warn", "info", "debug"};
    for (int i = 0; i < 4; i++) {
        if (strcmp(name, names[i]) == 0) {
            log_level = i;
            return i;
        }
    }
    return -1;
}

/* A token at now, if one is free. Relaxed: the decision rests on this one word alone, and
 * the compare-exchange gives each token to one caller; nothing else is published by it. */
static int token(log_limit *l, uint64_t now) {
    uint64_t t = atomic_load_explicit(&l->tat, memory_order_relaxed);
    for (;;) {
        uint64_t base = t > now ? t : now;
        if (base - now > (LOG_LIMIT_BURST - 1) * LOG_LIMIT_INTERVAL_NS) return 0;
        if (atomic_compare_exchange_weak_explicit(&l->tat, &t, base + LOG_LIMIT_INTERVAL_NS,
                                                  memory_order_relaxed, memory_order_relaxed))
            return 1;
    }
}

int log_limit_take(log_limit *l, uint64_t now) {
    if (token(l, now)) return 1;
    atomic_fetch_add_explicit(&l->dropped, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&suppressed, 1, memory_order_relaxed);
    return 0;
}

uint64_t log_limit_report(log_limit *l, uint64_t now) {
    if (!atomic_load_explicit(&l->dropped, memory_order_relaxed) || !token(l, now)) return 0;
    return log_limit_dropped(l);
}

uint64_t log_limit_dropped(log_limit *l) {
    return atomic_exchange_explicit(&l->dropped, 0, memory_order_relaxed);
}

uint64_t log_suppressed_total(void) {
    return atomic_load_explicit(&suppressed, memory_order_relaxed);
}

static void log_vwrite(int level, const char *fmt, va_list ap);

void log_write_limited(log_limit *l, int level, const char *fmt, ...) {
    if (!log_limit_take(l, now_ns())) return;
    uint64_t n = log_limit_dropped(l);
    if (n)
        log_write(level,
                  "(%llu lines like the next left out: more than %d at once or %d a "
                  "second; tide_log_lines_suppressed_total)",
                  (unsigned long long)n, LOG_LIMIT_BURST, LOG_LIMIT_PER_S);
    va_list ap;
    va_start(ap, fmt);
    log_vwrite(level, fmt, ap);
    va_end(ap);
}

void log_write(int level, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    log_vwrite(level, fmt, ap);
    va_end(ap);
}

static void log_vwrite(int level, const char *fmt, va_list ap) {
    static const char tag[] = "EWID";
    char line[1024];
    struct timeval tv;
    struct tm tm;
    gettimeofday(&tv, NULL);
    gmtime_r(&tv.tv_sec, &tm);
    int n = (int)strftime(line, sizeof(line), "%Y-%m-%dT%H:%M:%S", &tm);
    n += snprintf(line + n, sizeof(line) - (size_t)n, ".%03dZ %c ", (int)(tv.tv_usec / 1000),
                  tag[level & 3]);
    if (vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap) < 0) line[n] = '\0';
    redact_inplace(line + n, sizeof(line) - (size_t)n - 1); /* no token is ever logged */
    n += (int)strlen(line + n);
    if (n > (int)sizeof(line) - 2) n = (int)sizeof(line) - 2;
    line[n++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, (size_t)n);
    (void)w;
}
