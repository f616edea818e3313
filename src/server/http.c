/*
 * http.c — answering GET requests for /metrics and /health. Requests are read up to a
 * fixed size (8 KiB); anything larger or malformed gets 400 and the connection closes.
 */
#include "server/http.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define HTTP_REQ_MAX 8192

int http_parse_request_line(const char *req, size_t len, char *path, size_t cap) {
    if (len < 14 || memcmp(req, "GET ", 4) != 0) return -1;
    const char *p = req + 4, *end = req + len;
    const char *sp = memchr(p, ' ', (size_t)(end - p));
    if (!sp || sp == p || *p != '/') return -1;
    size_t plen = (size_t)(sp - p);
    if (plen >= cap) return -1;
    if ((size_t)(end - sp) < 9 || memcmp(sp + 1, "HTTP/1.", 7) != 0) return -1;
    memcpy(path, p, plen);
    path[plen] = '\0';
    char *q = strchr(path, '?'); /* query strings are ignored */
    if (q) *q = '\0';
    return 0;
}

static int write_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int respond(int fd, int status, const char *ctype, const char *body, size_t len) {
    char head[256];
    const char *reason = status == 200 ? "OK" : status == 404 ? "Not Found" : "Bad Request";
    int h = snprintf(head, sizeof(head),
                     "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n",
                     status, reason, ctype, len);
    int rc = write_all(fd, head, (size_t)h);
    return rc ? rc : write_all(fd, body, len);
}

int http_answer(int fd, http_body_fn body, void *ctx) {
    char req[HTTP_REQ_MAX];
    size_t len = 0;
    /* Read until the end of the headers; only the request line matters. */
    while (len < sizeof(req) - 1) {
        ssize_t r = recv(fd, req + len, sizeof(req) - 1 - len, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return r == 0 ? -ECONNRESET : -errno;
        len += (size_t)r;
        req[len] = '\0';
        if (strstr(req, "\r\n\r\n") || strstr(req, "\n\n")) break;
    }
    char path[256];
    char *eol = memchr(req, '\n', len);
    if (!eol || http_parse_request_line(req, (size_t)(eol - req), path, sizeof(path)) != 0) {
        static const char msg[] = "bad request: tided answers GET /metrics and GET /health\n";
        return respond(fd, 400, "text/plain", msg, sizeof(msg) - 1);
    }
    size_t blen = 0;
    int status = 404;
    char *b = body(ctx, path, &blen, &status);
    if (!b) {
        static const char msg[] = "not found: try /metrics or /health\n";
        return respond(fd, 404, "text/plain", msg, sizeof(msg) - 1);
    }
    int rc = respond(fd, status, "text/plain; version=0.0.4; charset=utf-8", b, blen);
    free(b);
    return rc;
}
