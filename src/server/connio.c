/*
 * connio.c — tided's one connection interface (connio.h): what every connection does the
 * same way whatever its protocol. The event handler (connio_event) with its per-wake-up
 * budget, epoll interest, backpressure, counted reads, input growth, the timeouts (idle,
 * write stall, pre-auth), the pause after a failed AUTH, drain and teardown. The protocol
 * files decide when a request is complete; this file moves bytes and keeps the clocks.
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

#define AUTH_PAUSE_NS (250ull * 1000000ull)
#define AUTH_PAUSE_MAX_NS (8ull * 1000000000ull)

int connio_init(connio *io, const connio_ops *ops, server *srv, int epfd, int fd, size_t chunk) {
    *io = (connio){.ops = ops,
                   .srv = srv,
                   .fd = fd,
                   .epfd = epfd,
                   .events = EPOLLIN,
                   .send_fd = -1,
                   .authed = srv->cfg.auth_token[0] == '\0'};
    outq_init(&io->out, srv->st, &srv->m, chunk);
    io->last_progress_ns = io->last_out_ns = now_ns();
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = io};
    return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) != 0 ? -errno : 0;
}

void connio_close(connio *io) {
    preauth_release(io->srv, io->fd, io->authed); /* before its fd is closed: preauth.c */
    close(io->fd);
    outq_free(&io->out);
    io->ops->free(io);
}

int connio_held(const connio *io) {
    return io->close_after_flush || io->out.pending >= CONNIO_OUT_HIGH || io->paused_until_ns;
}

void connio_watch(connio *io) {
    uint32_t want = 0;
    /* A request whose values are arriving is finished even while stopping. */
    if (io->in_body || (!connio_held(io) && !atomic_load(&io->srv->stopping))) want |= EPOLLIN;
    if (outq_busy(&io->out)) want |= EPOLLOUT;
    if (want == io->events) return;
    struct epoll_event ev = {.events = want, .data.ptr = io};
    epoll_ctl(io->epfd, EPOLL_CTL_MOD, io->fd, &ev);
    io->events = want;
}

int connio_flush(connio *io) {
    int had_fd = io->send_fd >= 0;
    size_t max = io->wbudget > 0 ? (size_t)io->wbudget : 0, sent;
    int rc = outq_flush_some(&io->out, io->fd, &io->send_fd, &io->last_out_ns, max, &sent);
    io->wbudget -= (int64_t)sent;
    if (io->last_out_ns > io->last_progress_ns) io->last_progress_ns = io->last_out_ns;
    if (rc < 0 && had_fd && io->send_fd >= 0) {
        /* The descriptor did not go: most often the kernel's budget of descriptors in flight
         * for tided's user is spent (ETOOMANYREFS), by peers that do not read. Said and
         * counted, so that a refused client is never a mystery. */
        atomic_fetch_add(&io->srv->fd_send_failures, 1);
        LOG_LIMITED(LOG_LEVEL_WARN,
                    "cannot pass the pool's descriptor to a unix:// client: %s; closing that "
                    "connection (%llu such failures so far)",
                    strerror(-rc), (unsigned long long)atomic_load(&io->srv->fd_send_failures));
    }
    return rc;
}

int connio_more(const connio *io) {
    return connio_spent(io) && !connio_held(io);
}

int connio_event(connio *io, uint32_t events) {
    io->budget = CONNIO_BUDGET;
    io->wbudget = CONNIO_WBUDGET;
    int rc = 0;
    if (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) io->drained = 0;
    if (!events || (events & (EPOLLIN | EPOLLHUP | EPOLLERR))) rc = io->ops->serve(io);
    if (rc < 0) return rc;
    if ((rc = connio_flush(io)) < 0) return rc;
    /* Sending may have lifted the backpressure on requests already buffered: level-
     * triggered epoll will not report them again, so run them now, within the budget. */
    if (!connio_held(io) && !connio_spent(io) && !io->in_body && io->ops->buffered(io)) {
        if ((rc = io->ops->serve(io)) < 0) return rc;
        if ((rc = connio_flush(io)) < 0) return rc;
    }
    if (io->close_after_flush && !outq_busy(&io->out)) return -ECONNABORTED;
    connio_watch(io);
    return 0;
}

static void connio_count_in(connio *io, size_t n) {
    atomic_fetch_add_explicit(&io->srv->m.bytes_in, (uint64_t)n, memory_order_relaxed);
    io->last_progress_ns = now_ns();
    io->budget -= (int64_t)n;
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
    for (size_t i = 0; i < wl; i++)
        diff |= (unsigned)want[i] ^ (i < got_len ? got[i] : 0u);
    return diff == 0;
}

void connio_auth_failed(connio *io) {
    atomic_fetch_add(&io->srv->m.auth_failures, 1);
    unsigned k = io->auth_failures < 6 ? io->auth_failures : 6;
    uint64_t pause = AUTH_PAUSE_NS << k;
    if (pause > AUTH_PAUSE_MAX_NS) pause = AUTH_PAUSE_MAX_NS;
    io->auth_failures++;
    io->paused_until_ns = now_ns() + pause;
}

int connio_authed(connio *io) {
    if (io->authed) return 0;
    int rc = preauth_promote(io->srv, io->fd);
    if (rc == 0) io->authed = 1;
    return rc;
}

int connio_tick(connio *io, uint64_t now) {
    if (io->paused_until_ns && now >= io->paused_until_ns) {
        io->paused_until_ns = 0;
        connio_watch(io);
        return 1;
    }
    int partial = io->ops->tick(io, now);
    const server_config *cfg = &io->srv->cfg;
    /* Replies not read: cut once nothing has left for write_stall_timeout_s. The clock
     * starts when the queue becomes busy. */
    if (!outq_busy(&io->out)) {
        io->last_out_ns = now;
    } else if (cfg->write_stall_timeout_s &&
               now - io->last_out_ns > (uint64_t)cfg->write_stall_timeout_s * 1000000000ull) {
        LOG_LIMITED(LOG_LEVEL_INFO,
                    "%sclosing a connection whose replies have not been read for %us "
                    "(--write-stall-timeout; %llu bytes queued)",
                    io->ops->who, cfg->write_stall_timeout_s, (unsigned long long)io->out.pending);
        return -ETIMEDOUT;
    }
    /* A partial request, a body arriving, or a peer that has not authenticated: waited for
     * no longer than idle_timeout_s without progress. */
    uint64_t limit = (uint64_t)cfg->idle_timeout_s * 1000000000ull;
    int waiting = io->in_body || partial || !io->authed || outq_busy(&io->out);
    if (!waiting || !limit || now - io->last_progress_ns <= limit) return 0;
    LOG_LIMITED(LOG_LEVEL_INFO, "%sclosing a connection stalled for %us (%s)", io->ops->who,
                cfg->idle_timeout_s,
                outq_busy(&io->out) ? "reply not read"
                : !io->authed       ? "not authenticated"
                                    : io->ops->unfinished);
    return -ETIMEDOUT;
}

int connio_drain(connio *io) {
    /* Requests already read finish (a body keeps arriving); a partial header is
     * abandoned. */
    if (io->in_body) return 0;
    if (outq_busy(&io->out)) {
        io->wbudget = CONNIO_WBUDGET;
        if (connio_flush(io) < 0) return 1;
        connio_watch(io);
        return !outq_busy(&io->out);
    }
    return 1;
}
