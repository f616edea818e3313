/*
 * connio.c — the socket side shared by tided's native and RESP connections (connio.h):
 * epoll interest, backpressure, reads that count, input growth, idle timeout, drain and
 * teardown. The protocol files decide when a request is complete; this file only moves
 * bytes and keeps the connection's clock (last_progress_ns) and counters.
 */
#include "server/connio.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"

int connio_init(connio *io, server *srv, int epfd, int fd, void *tag, size_t chunk) {
    *io = (connio){.srv = srv, .fd = fd, .epfd = epfd, .tag = tag, .events = EPOLLIN};
    outq_init(&io->out, srv->st, &srv->m, chunk);
    io->last_progress_ns = now_ns();
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = tag};
    return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) != 0 ? -errno : 0;
}

void connio_close(connio *io) {
    close(io->fd);
    outq_free(&io->out);
}

int connio_held(const connio *io) {
    return io->close_after_flush || io->out.pending >= CONNIO_OUT_HIGH;
}

void connio_watch(connio *io) {
    uint32_t want = 0;
    /* A request whose values are arriving is finished even while stopping. */
    if (io->in_body || (!connio_held(io) && !atomic_load(&io->srv->stopping))) want |= EPOLLIN;
    if (outq_busy(&io->out)) want |= EPOLLOUT;
    if (want == io->events) return;
    struct epoll_event ev = {.events = want, .data.ptr = io->tag};
    epoll_ctl(io->epfd, EPOLL_CTL_MOD, io->fd, &ev);
    io->events = want;
}

int connio_flush(connio *io, int *send_fd) {
    return outq_flush(&io->out, io->fd, send_fd, &io->last_progress_ns);
}

static void connio_count_in(connio *io, size_t n) {
    atomic_fetch_add_explicit(&io->srv->m.bytes_in, (uint64_t)n, memory_order_relaxed);
    io->last_progress_ns = now_ns();
}

ssize_t connio_recv(connio *io, void *buf, size_t len) {
    for (;;) {
        ssize_t r = recv(io->fd, buf, len, 0);
        if (r < 0) {
            if (errno == EINTR) continue;
            io->drained = errno == EWOULDBLOCK;
            return errno == EWOULDBLOCK ? -EAGAIN : -errno;
        }
        io->drained = (size_t)r < len;
        if (r > 0) connio_count_in(io, (size_t)r);
        return r;
    }
}

ssize_t connio_readv(connio *io, const struct iovec *iov, int n) {
    for (;;) {
        ssize_t r = readv(io->fd, iov, n);
        if (r < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                io->drained = 1;
                return 0;
            }
            return -errno;
        }
        if (r == 0) return -ECONNRESET;
        size_t asked = 0;
        for (int i = 0; i < n; i++)
            asked += iov[i].iov_len;
        io->drained = (size_t)r < asked;
        connio_count_in(io, (size_t)r);
        return r;
    }
}

int connio_grow(uint8_t **buf, size_t *cap, size_t need) {
    if (need <= *cap) return 0;
    size_t c = *cap;
    while (c < need)
        c *= 2;
    uint8_t *grown = realloc(*buf, c);
    if (!grown) return -ENOMEM;
    *buf = grown;
    *cap = c;
    return 0;
}

int connio_token_equal(const char *want, const uint8_t *got, size_t got_len) {
    size_t wl = strlen(want);
    unsigned diff = (unsigned)(wl ^ got_len);
    for (size_t i = 0; i < wl; i++) diff |= (unsigned)want[i] ^ (i < got_len ? got[i] : 0u);
    return diff == 0;
}

int connio_stalled(const connio *io, uint64_t now, int partial, const char *who,
                   const char *unfinished) {
    uint64_t limit = (uint64_t)io->srv->cfg.idle_timeout_s * 1000000000ull;
    int waiting = io->in_body || partial || outq_busy(&io->out);
    if (!waiting || !limit || now - io->last_progress_ns <= limit) return 0;
    LOG_INFO("%sclosing a connection stalled for %us (%s)", who, io->srv->cfg.idle_timeout_s,
             outq_busy(&io->out) ? "reply not read" : unfinished);
    return 1;
}

int connio_drain(connio *io, int *send_fd) {
    /* Requests already read finish (a body keeps arriving); a partial header is
     * abandoned. */
    if (io->in_body) return 0;
    if (outq_busy(&io->out)) {
        if (connio_flush(io, send_fd) < 0) return 1;
        connio_watch(io);
        return !outq_busy(&io->out);
    }
    return 1;
}
