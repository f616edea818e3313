/*
 * log.h — levelled logging for the daemon and the CLI (the library itself never logs).
 *
 * LOG_x() checks the level before it formats, so a disabled level costs one compare.
 * Lines go to stderr as "2026-11-30T14:41:55.123Z I message".
 */
#ifndef TIDE_LOG_H
#define TIDE_LOG_H

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

#endif
