/*
 * ucx_log.h — UCX's own log lines in tided's log, rate-limited (ucx_log.c, docs/UCX.md).
 *
 * UCX logs what it meets on the wire: a message for which tided installs no handler (18
 * lines with a backtrace each time, e.g. a peer's emulated RMA), a UCP message of no tide
 * kind (one line), a wire-up it cannot parse (a few). A peer that never showed the token
 * can send such messages without end, and UCX printed every line to tided's stdout. tided
 * takes them through UCX's log handler instead: at tide's levels, in tide's format, through
 * one limit (log.h: LOG_LIMIT_BURST at once, two whole reports of an unhandled message, and
 * then LOG_LIMIT_PER_S a second); the rest are counted (tide_ucx_log_lines_suppressed_total
 * as well as tide_log_lines_suppressed_total) and one line later says how many (written
 * with the next line let through, or alone from tided's UCX thread: at most one per line
 * let through, so tided's log takes at most twice the limit's lines).
 */
#ifndef TIDE_SERVER_UCX_LOG_H
#define TIDE_SERVER_UCX_LOG_H

#include "server/metrics.h"

/* Make s one log line: each control character (UCX's lines hold newlines, e.g. a hex dump
 * of the message's payload) becomes a space, and trailing spaces go. */
void ucx_log_clean(char *s);

/* tide's level (LOG_LEVEL_*) for a UCX level (ucs_log_level_t): fatal and error are
 * errors, warn a warning, diag and info info, debug and the trace levels debug. */
int ucx_log_level(int ucs_level);

/* Route UCX's log into tided's (the handler is pushed once per process, after UCX was
 * loaded and before any UCX context exists, and stays: UCX may log until it unloads) and
 * count what is dropped in m until ucx_log_stop. */
void ucx_log_start(metrics *m);

/* From tided's UCX thread, at each wake-up: when lines were dropped and a token is free,
 * the line saying how many. */
void ucx_log_tick(void);

/* After every UCX context of this server is gone (no UCX thread logs for it any more): the
 * last count of dropped lines, if any, and m no longer counted into. Lines UCX logs later
 * are still limited. */
void ucx_log_stop(void);

#endif
