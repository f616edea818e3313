/*
 * test_common_log.c — the limit on log lines peers can cause (src/common/log.c, LOG_LIMITED):
 * the token bucket (a burst, then one line per interval, never more under racing threads),
 * the count of what it left out, and the line that says so.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "harness.h"

#define SEC 1000000000ull
#define STEP (SEC / LOG_LIMIT_PER_S)

/* A full limit lets LOG_LIMIT_BURST lines through at once, then none until an interval has
 * passed, then one per interval; after a quiet spell it is full again, never fuller. What
 * it refuses is counted, here and in the process's total. */
TEST(log_limit_burst_then_rate) {
    log_limit l = {0};
    uint64_t t = 1000 * SEC, total0 = log_suppressed_total();
    int n = 0;
    for (int i = 0; i < 10 * LOG_LIMIT_BURST; i++)
        n += log_limit_take(&l, t);
    CHECK_EQ(n, LOG_LIMIT_BURST);
    CHECK_EQ(log_limit_dropped(&l), (uint64_t)(9 * LOG_LIMIT_BURST));
    CHECK_EQ(log_limit_dropped(&l), 0u); /* counted once */
    CHECK_EQ(log_suppressed_total() - total0, (uint64_t)(9 * LOG_LIMIT_BURST));
    CHECK_EQ(log_limit_take(&l, t + STEP - 1), 0);
    CHECK_EQ(log_limit_take(&l, t + STEP), 1);
    CHECK_EQ(log_limit_take(&l, t + STEP), 0);
    /* 10 s of lines offered every millisecond: one per interval goes. */
    n = 0;
    for (uint64_t at = t + STEP + 1000000; at <= t + STEP + 10 * SEC; at += 1000000)
        n += log_limit_take(&l, at);
    CHECK_EQ(n, 10 * LOG_LIMIT_PER_S);
    /* An hour later: one burst again, not an hour's worth. */
    n = 0;
    for (int i = 0; i < 10 * LOG_LIMIT_BURST; i++)
        n += log_limit_take(&l, t + 3600 * SEC);
    CHECK_EQ(n, LOG_LIMIT_BURST);
}

/* A timer's report: nothing while nothing was dropped, and it takes no token then; once
 * lines were dropped, the count when a token is free, and a refused report counts nothing. */
TEST(log_limit_report_only_when_dropped) {
    log_limit l = {0};
    uint64_t t = 7 * SEC;
    CHECK_EQ(log_limit_report(&l, t), 0u);
    int n = 0;
    for (int i = 0; i < LOG_LIMIT_BURST + 5; i++)
        n += log_limit_take(&l, t);
    CHECK_EQ(n, LOG_LIMIT_BURST);
    uint64_t total = log_suppressed_total();
    CHECK_EQ(log_limit_report(&l, t), 0u); /* no token yet */
    CHECK_EQ(log_suppressed_total(), total);
    CHECK_EQ(log_limit_report(&l, t + STEP), 5u);
    CHECK_EQ(log_limit_report(&l, t + 2 * STEP), 0u); /* said already */
}

typedef struct racer {
    log_limit *l;
    uint64_t at;
    int got;
} racer;

static void *race(void *arg) {
    racer *r = arg;
    for (int i = 0; i < 10000; i++)
        r->got += log_limit_take(r->l, r->at);
    return NULL;
}

/* Four threads at one instant share one burst: each token goes to one caller, and every
 * refusal is counted. */
TEST(log_limit_threads_share_one_burst) {
    log_limit l = {0};
    racer r[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        r[i] = (racer){&l, 50 * SEC, 0};
        CHECK_EQ(pthread_create(&th[i], NULL, race, &r[i]), 0);
    }
    int n = 0;
    for (int i = 0; i < 4; i++) {
        CHECK_EQ(pthread_join(th[i], NULL), 0);
        n += r[i].got;
    }
    CHECK_EQ(n, LOG_LIMIT_BURST);
    CHECK_EQ(log_limit_dropped(&l), (uint64_t)(40000 - LOG_LIMIT_BURST));
}

/* LOG_LIMITED at one call site, 1,000 times at once: the burst is written, the rest are
 * not; the next line let through (after an interval) is preceded by one saying how many
 * like it were left out. Lines go to stderr: captured in a file here. */
TEST(log_limited_writes_a_burst_then_says_what_it_left_out) {
    char path[512];
    snprintf(path, sizeof(path), "%s/log", test_tmpdir());
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600), saved = dup(2);
    CHECK(fd >= 0 && saved >= 0);
    int level = log_level;
    log_level = LOG_LEVEL_INFO;
    dup2(fd, 2);
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < 1000; i++)
            LOG_LIMITED(LOG_LEVEL_WARN, "refusing connection %d", i);
        if (!round) usleep(STEP / 1000 + 20000);
    }
    dup2(saved, 2);
    close(saved);
    log_level = level;
    char buf[1 << 14];
    ssize_t got = pread(fd, buf, sizeof(buf) - 1, 0);
    close(fd);
    CHECK(got > 0);
    buf[got] = '\0';
    int lines = 0;
    for (char *p = buf; (p = strchr(p, '\n')); p++)
        lines++;
    /* The burst, then after the pause one token (or two on a slow machine): the "left out"
     * line and the line it precedes. */
    CHECK_MSG(lines >= LOG_LIMIT_BURST + 2 && lines <= LOG_LIMIT_BURST + 4, "%d lines:\n%s", lines,
              buf);
    CHECK_MSG(strstr(buf, "(960 lines like the next left out: more than 40 at once or 4 a "
                          "second; tide_log_lines_suppressed_total)") != NULL,
              "%s", buf);
    CHECK(strstr(buf, "refusing connection 39\n") != NULL);
    CHECK(strstr(buf, "refusing connection 40\n") == NULL);
}
