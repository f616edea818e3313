/*
 * http.h — the smallest HTTP/1.x server tided needs: GET /metrics (Prometheus text) and
 * GET /health, on the metrics thread. One request per connection, many connections at
 * once: every connection has a whole-request deadline (accept to last byte written) and
 * their number is bounded, the oldest cut first, so slow, silent or oversized clients
 * cannot keep /health from being answered.
 */
#ifndef TIDE_HTTP_H
#define TIDE_HTTP_H

#include <stdatomic.h>
#include <stddef.h>

/* Produce the body for a path: return a malloc'd buffer (the responder frees it) and set
 * *len and *status (200 or 404). NULL: not found. */
typedef char *(*http_body_fn)(void *ctx, const char *path, size_t *len, int *status);

/* Largest request (request line and headers) read; a larger one is answered 431. */
#define HTTP_REQ_MAX 8192
/* Defaults of http_server_cfg: connections open at once, and a request's deadline. */
#define HTTP_MAX_CONNS 64
#define HTTP_DEADLINE_MS 2000

typedef struct http_server_cfg {
    int listen_fd;             /* a listening TCP socket (blocking or not) */
    int stop_fd;               /* http_serve returns once this is readable */
    http_body_fn body;         /* answers a path */
    void *ctx;                 /* passed to body */
    int max_conns;             /* connections open at once; 0: HTTP_MAX_CONNS */
    int deadline_ms;           /* accept to the reply's last byte; 0: HTTP_DEADLINE_MS */
    atomic_uint_fast64_t *cut; /* when set, counts connections closed unanswered (the
                                  deadline passed, or cut to make room) */
} http_server_cfg;

/* Serve requests on cfg->listen_fd until cfg->stop_fd is readable: returns 0 then, or a
 * negative errno when poll itself fails. Every connection is nonblocking and polled with
 * the others; one is closed unanswered when its deadline passes, or when max_conns are
 * open and it is the oldest of them as another arrives. Accept failing for want of fds or
 * memory pauses accepting for 100 ms (the open connections keep being served). */
int http_serve(const http_server_cfg *cfg);

/* Parse "GET /path HTTP/1.x": copy the path to path[cap]. 0, or -1 when malformed or not
 * a GET. Pure; exposed for tests. */
int http_parse_request_line(const char *req, size_t len, char *path, size_t cap);

#endif
