/*
 * http.c — tided's HTTP server for GET /metrics and GET /health, run on the metrics
 * thread. Every connection is nonblocking and polled with the others, so a slow or silent
 * client holds only its own slot. Invariants: a connection is open at most deadline_ms
 * (accept to the last byte of its reply) and at most max_conns are open; when another
 * arrives with all slots taken, the oldest is cut for it. A request (request line and
 * headers) is read up to HTTP_REQ_MAX bytes; a larger one gets 431, a malformed one 400
 * (at once when its first byte cannot begin a method: a tide client on the wrong port
 * hears so), and the connection closes after every reply.
 */
#include "server/http.h"

#include "common/log.h"

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

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

/* One connection: reading its request (out == NULL), then writing its reply. */
typedef struct hconn {
    int fd; /* -1: a free slot */
    uint64_t deadline_ms;
    size_t len; /* request bytes read */
    char *out;  /* the whole reply, head and body */
    size_t outlen, outoff;
    char req[HTTP_REQ_MAX];
} hconn;

static uint64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void hconn_close(const http_server_cfg *cfg, hconn *c, int answered) {
    if (!answered && cfg->cut) atomic_fetch_add_explicit(cfg->cut, 1, memory_order_relaxed);
    close(c->fd);
    free(c->out);
    c->fd = -1;
    c->out = NULL;
    c->len = c->outlen = c->outoff = 0;
}

static const char *reason(int status) {
    switch (status) {
    case 200:
        return "OK";
    case 404:
        return "Not Found";
    case 431:
        return "Request Header Fields Too Large";
    default:
        return "Bad Request";
    }
}

/* Make c's reply: head and body in one buffer. -1 when out of memory. */
static int set_reply(hconn *c, int status, const char *ctype, const char *body, size_t len) {
    char head[256];
    int h = snprintf(head, sizeof(head),
                     "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n",
                     status, reason(status), ctype, len);
    c->out = malloc((size_t)h + len);
    if (!c->out) return -1;
    memcpy(c->out, head, (size_t)h);
    memcpy(c->out + h, body, len);
    c->outlen = (size_t)h + len;
    c->outoff = 0;
    return 0;
}

/* The request in c->req is complete (or as large as it may be): decide the reply. */
static int answer(const http_server_cfg *cfg, hconn *c, int complete) {
    static const char plain[] = "text/plain";
    if (!complete) {
        static const char msg[] = "request too large: tided reads at most 8 KiB of headers\n";
        return set_reply(c, 431, plain, msg, sizeof(msg) - 1);
    }
    if (c->len >= 4 && memcmp(c->req, "TIDE", 4) == 0) {
        static const char msg[] = "this is tided's metrics HTTP port (GET /metrics, GET /health); "
                                  "tide clients connect to tided's native port (--port)\n";
        return set_reply(c, 400, plain, msg, sizeof(msg) - 1);
    }
    char path[256];
    char *eol = memchr(c->req, '\n', c->len);
    if (!eol || http_parse_request_line(c->req, (size_t)(eol - c->req), path, sizeof(path))) {
        static const char msg[] = "bad request: tided answers GET /metrics and GET /health\n";
        return set_reply(c, 400, plain, msg, sizeof(msg) - 1);
    }
    size_t blen = 0;
    int status = 404;
    char *b = cfg->body(cfg->ctx, path, &blen, &status);
    if (!b) {
        static const char msg[] = "not found: try /metrics or /health\n";
        return set_reply(c, 404, plain, msg, sizeof(msg) - 1);
    }
    int rc = set_reply(c, status, "text/plain; version=0.0.4; charset=utf-8", b, blen);
    free(b);
    return rc;
}

/* Write what the socket takes; close c once the reply is all out or the peer is gone. */
static void hconn_write(const http_server_cfg *cfg, hconn *c) {
    while (c->outoff < c->outlen) {
        ssize_t w =
            send(c->fd, c->out + c->outoff, c->outlen - c->outoff, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        if (w < 0) {
            hconn_close(cfg, c, 1); /* the peer left: nothing more to do for it */
            return;
        }
        c->outoff += (size_t)w;
    }
    hconn_close(cfg, c, 1);
}

/* 1 when the headers end in req[0..len): a blank line. Only the bytes from `from` on
 * (less three, for an end split across reads) are new. */
static int headers_end(const char *req, size_t len, size_t from) {
    size_t s = from > 3 ? from - 3 : 0;
    return memmem(req + s, len - s, "\r\n\r\n", 4) || memmem(req + s, len - s, "\n\n", 2);
}

/* 1 while req[0..len) can still begin a request line: a method of capitals (at most 16)
 * then a space. */
static int method_so_far(const char *req, size_t len) {
    for (size_t i = 0; i < len; i++) {
        if (req[i] == ' ') return i > 0;
        if (req[i] < 'A' || req[i] > 'Z' || i >= 16) return 0;
    }
    return 1;
}

/* Read what has arrived; once the request is whole (or too large, or the peer shut its
 * side after a request line), make the reply and start writing it. */
static void hconn_read(const http_server_cfg *cfg, hconn *c) {
    for (;;) {
        size_t room = sizeof(c->req) - c->len;
        if (room == 0) break;
        ssize_t r = recv(c->fd, c->req + c->len, room, MSG_DONTWAIT);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        if (r < 0 || (r == 0 && !memchr(c->req, '\n', c->len))) {
            hconn_close(cfg, c, 0);
            return;
        }
        if (r == 0) break; /* half-closed after a request line: answer what came */
        size_t from = c->len;
        c->len += (size_t)r;
        if (headers_end(c->req, c->len, from)) break;
        /* A request begins with a method in capitals: anything else (a tide client's HELLO
         * on the wrong port, say) is answered now, so the peer learns at once what it
         * reached instead of waiting out a deadline on both sides. */
        if (!method_so_far(c->req, c->len)) break;
    }
    int complete = c->len < sizeof(c->req) || headers_end(c->req, c->len, 0);
    if (answer(cfg, c, complete) != 0) {
        hconn_close(cfg, c, 0);
        return;
    }
    hconn_write(cfg, c);
}

/* A slot for a new connection: a free one, or the oldest cut for it. */
static hconn *take_slot(const http_server_cfg *cfg, hconn *conns, int n) {
    hconn *oldest = NULL;
    for (int i = 0; i < n; i++) {
        if (conns[i].fd < 0) return &conns[i];
        if (!oldest || conns[i].deadline_ms < oldest->deadline_ms) oldest = &conns[i];
    }
    hconn_close(cfg, oldest, 0);
    return oldest;
}

/* 1 when accept() failed for want of a resource (fds, buffers, memory): the listener stays
 * readable, so accepting must pause a little, or the loop spins. */
static int accept_starved(int e) {
    return e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM;
}

int http_serve(const http_server_cfg *cfg_in) {
    http_server_cfg cfg = *cfg_in;
    if (cfg.max_conns <= 0) cfg.max_conns = HTTP_MAX_CONNS;
    if (cfg.deadline_ms <= 0) cfg.deadline_ms = HTTP_DEADLINE_MS;
    int n = cfg.max_conns, rc = 0;
    hconn *conns = calloc((size_t)n, sizeof(*conns));
    struct pollfd *p = calloc((size_t)n + 2, sizeof(*p));
    int *at = calloc((size_t)n, sizeof(*at)); /* pollfd index -> connection */
    if (!conns || !p || !at) {
        rc = -ENOMEM;
        goto out;
    }
    for (int i = 0; i < n; i++)
        conns[i].fd = -1;
    uint64_t paused_until = 0; /* accepting paused (fds or memory ran out) until then */
    for (;;) {
        uint64_t now = now_ms();
        int np = 0, timeout = -1;
        p[np++] = (struct pollfd){cfg.stop_fd, POLLIN, 0};
        int listening = now >= paused_until;
        if (listening)
            p[np++] = (struct pollfd){cfg.listen_fd, POLLIN, 0};
        else
            timeout = (int)(paused_until - now);
        int first = np;
        for (int i = 0; i < n; i++) {
            hconn *c = &conns[i];
            if (c->fd < 0) continue;
            if (c->deadline_ms <= now) {
                hconn_close(&cfg, c, 0);
                continue;
            }
            int left = (int)(c->deadline_ms - now);
            if (timeout < 0 || left < timeout) timeout = left;
            at[np - first] = i;
            p[np++] = (struct pollfd){c->fd, c->out ? POLLOUT : POLLIN, 0};
        }
        if (poll(p, (nfds_t)np, timeout) < 0) {
            if (errno == EINTR) continue;
            rc = -errno;
            goto out;
        }
        if (p[0].revents) break;
        /* Connections first: one answered now frees its slot before new ones need it. */
        for (int k = first; k < np; k++) {
            hconn *c = &conns[at[k - first]];
            if (!p[k].revents || c->fd != p[k].fd) continue;
            if (c->out)
                hconn_write(&cfg, c);
            else
                hconn_read(&cfg, c);
        }
        if (!listening || !(p[1].revents & POLLIN)) continue;
        /* At most half the slots per wake-up, so a connection accepted in one wake-up
         * outlives at least the next, whatever the rate of arrivals. */
        for (int k = 0; k < (n + 1) / 2; k++) {
            int fd = accept4(cfg.listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
            if (fd < 0) {
                if (accept_starved(errno)) {
                    LOG_LIMITED(LOG_LEVEL_WARN, "metrics: accept: %s; pausing 100 ms",
                                strerror(errno));
                    paused_until = now_ms() + 100;
                }
                break;
            }
            hconn *c = take_slot(&cfg, conns, n);
            c->fd = fd;
            c->deadline_ms = now_ms() + (uint64_t)cfg.deadline_ms;
            hconn_read(&cfg, c); /* a request already here is answered at once */
        }
    }
out:
    for (int i = 0; conns && i < n; i++)
        if (conns[i].fd >= 0) hconn_close(&cfg, &conns[i], 1);
    free(conns);
    free(p);
    free(at);
    return rc;
}
