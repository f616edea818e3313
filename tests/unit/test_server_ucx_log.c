/*
 * test_server_ucx_log.c — the limit on UCX's own log lines in tided (src/server/ucx_log.c):
 * the token bucket (a burst, then one line per interval, never more under racing threads),
 * a UCX line made one log line, and UCX's levels mapped to tide's.
 */
#include <pthread.h>
#include <string.h>

#include "common/log.h"
#include "harness.h"
#include "server/ucx_log.h"

#define SEC 1000000000ull
#define STEP (SEC / UCX_LOG_PER_S)

/* A full bucket lets UCX_LOG_BURST lines through at once, then none until an interval has
 * passed, then one per interval; after a quiet spell it is full again, never fuller. */
TEST(ucx_log_bucket_burst_then_rate) {
    ucx_log_bucket b = {0};
    uint64_t t = 1000 * SEC;
    int n = 0;
    for (int i = 0; i < 10 * UCX_LOG_BURST; i++)
        n += ucx_log_take(&b, t);
    CHECK_EQ(n, UCX_LOG_BURST);
    CHECK_EQ(ucx_log_take(&b, t + STEP - 1), 0);
    CHECK_EQ(ucx_log_take(&b, t + STEP), 1);
    CHECK_EQ(ucx_log_take(&b, t + STEP), 0);
    /* 10 s of lines offered every millisecond: one per interval goes. */
    n = 0;
    for (uint64_t at = t + STEP + 1000000; at <= t + STEP + 10 * SEC; at += 1000000)
        n += ucx_log_take(&b, at);
    CHECK_EQ(n, 10 * UCX_LOG_PER_S);
    /* An hour later: one burst again, not an hour's worth. */
    n = 0;
    for (int i = 0; i < 10 * UCX_LOG_BURST; i++)
        n += ucx_log_take(&b, t + 3600 * SEC);
    CHECK_EQ(n, UCX_LOG_BURST);
}

typedef struct racer {
    ucx_log_bucket *b;
    uint64_t at;
    int got;
} racer;

static void *race(void *arg) {
    racer *r = arg;
    for (int i = 0; i < 10000; i++)
        r->got += ucx_log_take(r->b, r->at);
    return NULL;
}

/* Four threads at one instant share one burst: each token goes to one caller. */
TEST(ucx_log_bucket_threads_share_one_burst) {
    ucx_log_bucket b = {0};
    racer r[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        r[i] = (racer){&b, 50 * SEC, 0};
        CHECK_EQ(pthread_create(&th[i], NULL, race, &r[i]), 0);
    }
    int n = 0;
    for (int i = 0; i < 4; i++) {
        CHECK_EQ(pthread_join(th[i], NULL), 0);
        n += r[i].got;
    }
    CHECK_EQ(n, UCX_LOG_BURST);
}

/* UCX's multi-line messages (the payload's hex dump) and the newline ending its backtrace
 * banner become one line; control characters cannot start a forged log line. */
TEST(ucx_log_line_cleaned) {
    char a[] = "payload 64 of 84 bytes:\n00001000:00000000\n00000000:00000000\n";
    ucx_log_clean(a);
    CHECK(strcmp(a, "payload 64 of 84 bytes: 00001000:00000000 00000000:00000000") == 0);
    char b[] = "==== backtrace (tid:  1234) ====\n";
    ucx_log_clean(b);
    CHECK(strcmp(b, "==== backtrace (tid:  1234) ====") == 0);
    char c[] = "x\r2026-01-01T00:00:00.000Z E forged\x1b[0m\t";
    ucx_log_clean(c);
    CHECK(strcmp(c, "x 2026-01-01T00:00:00.000Z E forged [0m") == 0);
    char d[] = "\n\n";
    ucx_log_clean(d);
    CHECK_EQ(d[0], '\0');
}

#ifdef TIDE_HAVE_UCX
#include <ucs/config/types.h>

/* Errors and warnings stay visible; diag and info at info; debug and trace at debug only. */
TEST(ucx_log_levels_mapped) {
    CHECK_EQ(ucx_log_level(UCS_LOG_LEVEL_FATAL), LOG_LEVEL_ERROR);
    CHECK_EQ(ucx_log_level(UCS_LOG_LEVEL_ERROR), LOG_LEVEL_ERROR);
    CHECK_EQ(ucx_log_level(UCS_LOG_LEVEL_WARN), LOG_LEVEL_WARN);
    CHECK_EQ(ucx_log_level(UCS_LOG_LEVEL_DIAG), LOG_LEVEL_INFO);
    CHECK_EQ(ucx_log_level(UCS_LOG_LEVEL_INFO), LOG_LEVEL_INFO);
    CHECK_EQ(ucx_log_level(UCS_LOG_LEVEL_DEBUG), LOG_LEVEL_DEBUG);
    CHECK_EQ(ucx_log_level(UCS_LOG_LEVEL_TRACE_POLL), LOG_LEVEL_DEBUG);
    CHECK_EQ(ucx_log_level(UCS_LOG_LEVEL_PRINT), LOG_LEVEL_DEBUG);
}
#endif
