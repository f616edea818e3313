/*
 * log.c — the log sink for the daemon and the CLI: one line per call, written with a
 * single write so lines from several threads do not interleave.
 */
#include "log.h"

#include "common/redact.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

int log_level = LOG_LEVEL_INFO;

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

void log_write(int level, const char *fmt, ...) {
    static const char tag[] = "EWID";
    char line[1024];
    struct timeval tv;
    struct tm tm;
    gettimeofday(&tv, NULL);
    gmtime_r(&tv.tv_sec, &tm);
    int n = (int)strftime(line, sizeof(line), "%Y-%m-%dT%H:%M:%S", &tm);
    n += snprintf(line + n, sizeof(line) - (size_t)n, ".%03dZ %c ", (int)(tv.tv_usec / 1000),
                  tag[level & 3]);
    va_list ap;
    va_start(ap, fmt);
    if (vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap) < 0) line[n] = '\0';
    va_end(ap);
    redact_inplace(line + n, sizeof(line) - (size_t)n - 1); /* no token is ever logged */
    n += (int)strlen(line + n);
    if (n > (int)sizeof(line) - 2) n = (int)sizeof(line) - 2;
    line[n++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, (size_t)n);
    (void)w;
}
