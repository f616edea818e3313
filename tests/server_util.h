/*
 * server_util.h — start and stop real tided processes for tests.
 */
#ifndef TIDE_SERVER_UTIL_H
#define TIDE_SERVER_UTIL_H

#include <stdint.h>
#include <sys/types.h>

typedef struct test_server {
    pid_t pid;
    int port, metrics_port;
    char url[64];
    char log[256]; /* its stderr and stdout, kept in the test's temporary directory */
} test_server;

/* Start `tide serve --port 0 --ready-file ... EXTRA...` (EXTRA: NULL-terminated list of
 * further arguments) and wait until it listens. Fails the test when it does not. */
void server_start(test_server *ts, const char *const *extra);
/* server_start with a Unix socket at path: `--capacity CAPACITY --log-level LEVEL --unix PATH
 * --metrics-port 0 EXTRA...` (no metrics listener). */
void server_start_unix(test_server *ts, const char *path, const char *capacity,
                       const char *log_level, const char *const *extra);
/* Run `tide serve --port 0 --metrics-port 0 ARGS` (a shell fragment; bounded: 5 s): its exit
 * status and, in out, what it printed. A refused start exits at once; a start that should
 * have been refused runs until the timeout (status 124). */
int server_serve_status(const char *args, char *out, size_t cap);
/* Send sig and wait for the exit; returns the wait status. */
int server_stop(test_server *ts, int sig);
/* Stop pid with SIGSTOP and wait (at most 10 s, else the test fails) until every one of its
 * threads is stopped: kill() returns before they are, and on a loaded machine a tided's
 * worker can answer requests sent after kill() returned. */
void server_sigstop(pid_t pid);
/* A figure of /proc/PID/status in KiB ("VmRSS", "RssAnon"); -1 when unreadable. */
long server_status_kib(pid_t pid, const char *field);
/* 1 in an ASan or TSan build: a process's memory then includes shadow memory (and ASan's
 * quarantine), so memory bounds are printed but applied to the plain build only. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SAN_BUILD 1
#else
#define SAN_BUILD 0
#endif
/* Connect a blocking TCP socket to 127.0.0.1:port (receive timeout secs). */
int server_connect(int port, int timeout_s);
/* Connect to the tided on port and send a PUT of val[0, vlen) under key whose value stops
 * half way (the head and vlen / 2 bytes): tided is then inside the request's body. The
 * connection (the caller sends the rest, or closes it). */
int server_put_half_sent(int port, const char *key, uint8_t *val, size_t vlen);
/* A figure from the /metrics of the tided whose metrics port is metrics_port: the first
 * sample of `name` (a line `name value`), or -1 when there is none. */
long long server_metric(int metrics_port, const char *name);
/* The latest tided cuts a connection whose timeout of t_s seconds has run out: one silent
 * on a partial request or before it authenticated (--idle-timeout), or one whose replies
 * have not moved (--write-stall-timeout). It has run out after more than t_s without
 * progress, and a worker sees it at its next tick (every 250 ms, after an epoll_wait of up
 * to 250 ms, worker.c): by t_s + 0.5 s. The bound is 1.9 t_s (t_s >= 1): the rest of it
 * is for scheduling on a loaded 2-core machine under a sanitizer, and it stays below 2 t_s,
 * so a doubled timeout (cut at 2 t_s at the earliest) fails it. */
#define SERVER_CUT_BOUND_MS(t_s) ((t_s)*1900.0)

#endif
