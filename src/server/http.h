/*
 * http.h — the smallest HTTP/1.x responder tided needs: GET /metrics (Prometheus text)
 * and GET /health, served one connection at a time on the metrics thread.
 */
#ifndef TIDE_HTTP_H
#define TIDE_HTTP_H

#include <stddef.h>

/* Produce the body for a path: return a malloc'd buffer (the responder frees it) and set
 * *len and *status (200 or 404). */
typedef char *(*http_body_fn)(void *ctx, const char *path, size_t *len, int *status);

/* Read one request from fd (a blocking socket with timeouts set), answer it, and return 0;
 * or a negative errno when the peer sent nothing usable. Does not close fd. */
int http_answer(int fd, http_body_fn body, void *ctx);

/* Parse "GET /path HTTP/1.x": copy the path to path[cap]. 0, or -1 when malformed or not
 * a GET. Pure; exposed for tests. */
int http_parse_request_line(const char *req, size_t len, char *path, size_t cap);

#endif
