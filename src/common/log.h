/*
 * log.h — levelled logging for the daemon and the CLI (the library itself never logs).
 *
 * LOG_x() checks the level before it formats, so a disabled level costs one compare.
 * Lines go to stderr as "2026-11-30T14:41:55.123Z I message".
 */
#ifndef TIDE_LOG_H
#define TIDE_LOG_H

#include <stdatomic.h>
#include <stdint.h>

enum log_level { LOG_LEVEL_ERROR = 0, LOG_LEVEL_WARN, LOG_LEVEL_INFO, LOG_LEVEL_DEBUG };

extern int log_level;

/* Set the level from a name ("error", "warn", "info", "debug"); -1 if unknown. */
int log_set_level(const char *name);
void log_write(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define LOG_AT(lvl, ...)                                                                           \
    do {                                                                                           \
        if ((lvl) <= log_level) log_write((lvl), __VA_ARGS__);                                     \
    } while (0)
#define LOG_ERROR(...) LOG_AT(LOG_LEVEL_ERROR, __VA_ARGS__)
#define LOG_WARN(...) LOG_AT(LOG_LEVEL_WARN, __VA_ARGS__)
#define LOG_INFO(...) LOG_AT(LOG_LEVEL_INFO, __VA_ARGS__)
#define LOG_DEBUG(...) LOG_AT(LOG_LEVEL_DEBUG, __VA_ARGS__)

/*
 * Lines a peer can cause without end — one per connection refused, per client cut, per
 * message UCX has no handler for — go through a limit, so that nobody grows the daemon's
 * log faster than LOG_LIMIT_BURST lines at once and then LOG_LIMIT_PER_S a second per
 * limit. A limit is a token bucket kept in one word (GCRA: tat is the time at which it is
 * full again), any thread, no lock; zeroed, it starts full. Lines over it are dropped and
 * counted (log_suppressed_total(), tided's tide_log_lines_suppressed_total), and the next
 * line let through is preceded by one saying how many like it were left out.
 */
#define LOG_LIMIT_BURST 40 /* lines at once */
#define LOG_LIMIT_PER_S 4  /* and then a line every 250 ms */

typedef struct log_limit {
    _Atomic uint64_t tat;
    atomic_uint_fast64_t dropped; /* since a line last said how many */
} log_limit;

/* 1 when a line may be written at now_ns (its token taken); 0 when it is to be dropped
 * (then counted in l and in log_suppressed_total()). */
int log_limit_take(log_limit *l, uint64_t now_ns);
/* The lines dropped since the last call (the count starts again from 0). */
uint64_t log_limit_dropped(log_limit *l);
/* For a timer: when lines were dropped and a token is free at now_ns, takes it and returns
 * log_limit_dropped(l) for a line saying so; else 0 (and nothing counted). */
uint64_t log_limit_report(log_limit *l, uint64_t now_ns);
/* Every line any limit dropped since the process started. */
uint64_t log_suppressed_total(void);
void log_write_limited(log_limit *l, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* LOG_AT through a limit of this call site's own. */
#define LOG_LIMITED(lvl, ...)                                                                      \
    do {                                                                                           \
        static log_limit lim_;                                                                     \
        if ((lvl) <= log_level) log_write_limited(&lim_, (lvl), __VA_ARGS__);                      \
    } while (0)

#endif
