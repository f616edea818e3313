/*
 * test_server_ucx_log.c — UCX's own log lines in tided (src/server/ucx_log.c): a UCX line
 * made one log line, and UCX's levels mapped to tide's (the limit they go through is
 * common/log.c's: test_common_log.c).
 */
#include <string.h>

#include "common/log.h"
#include "harness.h"
#include "server/ucx_log.h"

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
