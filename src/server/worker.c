/*
 * worker.c — tided's I/O workers: one thread and one epoll set each, the one event loop of
 * every connection it owns, native and RESP alike. The loop knows connections only
 * through connio.h: it hands each its events, runs the ones whose budget ran out with
 * work left (the ready list) once the others have had their turn, ticks them every
 * 250 ms (timeouts, the end of a pause), drains them at stop, and closes them.
 *
 * Fairness: a wake-up of one connection does a bounded amount of work (connio.h), so one
 * pass of the loop costs at most one budget per connection, and a connection that has
 * more to do waits for the next pass rather than delaying the others. While the ready list
 * is not empty epoll is polled without waiting.
 *
 * Threads: everything here runs on the worker's thread except worker_hand (accept thread),
 * which meets the worker only in `incoming`, under `qlock`.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "server/connio.h"
#include "server/server_int.h"

#define DRAIN_DEADLINE_NS (5ull * 1000000000ull)
#define TICK_NS 250000000ull

/* Wake the worker. A write to an eventfd fails only when its counter would overflow
 * (EAGAIN), and then a wake-up is pending already: nothing is lost by ignoring it. */
static void worker_wake(worker *w) {
    uint64_t one = 1;
    ssize_t r = write(w->wakefd, &one, sizeof(one));
    (void)r;
}

static void worker_link(worker *w, connio *io) {
    io->prev = NULL;
    io->next = w->conns;
    if (w->conns) w->conns->prev = io;
    w->conns = io;
}

/* Put io on the ready list (once). */
static void worker_ready(worker *w, connio *io) {
    if (io->ready) return;
    io->ready = 1;
    io->next_ready = w->ready;
    w->ready = io;
}

static void worker_close(worker *w, connio *io) {
    if (io->prev)
        io->prev->next = io->next;
    else
        w->conns = io->next;
    if (io->next) io->next->prev = io->prev;
    if (io->ready) {
        for (connio **p = &w->ready; *p; p = &(*p)->next_ready) {
            if (*p == io) {
                *p = io->next_ready;
                break;
            }
        }
    }
    server *srv = w->srv;
    connio_close(io);
    atomic_fetch_sub(&srv->open_conns, 1);
    atomic_fetch_sub(&srv->m.conns_open, 1);
}

static void worker_adopt(worker *w) {
    pthread_mutex_lock(&w->qlock);
    size_t n = w->nincoming;
    int fds[64];
    if (n == 0) { /* a wake-up to stop, not a connection */
        pthread_mutex_unlock(&w->qlock);
        return;
    }
    if (n > 64) n = 64;
    memcpy(fds, w->incoming, n * sizeof(int));
    memmove(w->incoming, w->incoming + n, (w->nincoming - n) * sizeof(int));
    w->nincoming -= n;
    int more = w->nincoming > 0;
    pthread_mutex_unlock(&w->qlock);
    for (size_t i = 0; i < n; i++) {
        int resp = (fds[i] & WORKER_FD_RESP) != 0, fd = fds[i] & ~WORKER_FD_RESP;
        connio *io = resp ? resp_conn_new(w, fd) : conn_new(w, fd);
        if (io) {
            worker_link(w, io);
            continue;
        }
        LOG_LIMITED(LOG_LEVEL_WARN, "worker %d: out of memory for a new connection; closing it",
                    w->index);
        preauth_release(w->srv, fd, 0);
        close(fd);
        atomic_fetch_sub(&w->srv->open_conns, 1);
        atomic_fetch_sub(&w->srv->m.conns_open, 1);
    }
    if (more) worker_wake(w);
}

/* One turn of io: its events (0 when it comes from the ready list). */
static void worker_run(worker *w, connio *io, uint32_t events) {
    if (connio_event(io, events) < 0)
        worker_close(w, io);
    else if (connio_more(io))
        worker_ready(w, io);
}

/* While stopping: 1 while some connection still has a body arriving or output queued. */
static int worker_drain(worker *w, uint64_t now, uint64_t drain_start) {
    int busy = 0;
    for (connio *io = w->conns, *next; io; io = next) {
        next = io->next;
        if (connio_drain(io))
            worker_close(w, io);
        else
            busy = 1;
    }
    if (busy && now - drain_start > DRAIN_DEADLINE_NS) {
        LOG_WARN("worker %d: closing connections still busy after the drain deadline", w->index);
        while (w->conns)
            worker_close(w, w->conns);
        busy = 0;
    }
    return busy;
}

static void *worker_main(void *arg) {
    worker *w = arg;
    server *srv = w->srv;
    struct epoll_event evs[64];
    uint64_t last_tick = now_ns(), drain_start = 0;
    for (;;) {
        int n = epoll_wait(w->epfd, evs, 64, w->ready ? 0 : 250);
        if (n < 0 && errno != EINTR) {
            LOG_ERROR("worker %d: epoll_wait: %s", w->index, strerror(errno));
            break;
        }
        for (int i = 0; i < n; i++) {
            if (evs[i].data.ptr == NULL) {
                uint64_t v;
                ssize_t r = read(w->wakefd, &v, sizeof(v));
                (void)r;
                worker_adopt(w);
                continue;
            }
            worker_run(w, evs[i].data.ptr, evs[i].events);
        }
        /* The connections whose budget ran out with work left: one more turn each, after
         * every connection that epoll reported has had its own. Those that run out again
         * go on a new list, for the next pass. */
        connio *r = w->ready;
        w->ready = NULL;
        while (r) {
            connio *next = r->next_ready;
            r->ready = 0;
            worker_run(w, r, 0);
            r = next;
        }
        uint64_t now = now_ns();
        if (now - last_tick > TICK_NS) {
            last_tick = now;
            for (connio *io = w->conns, *next; io; io = next) {
                next = io->next;
                int rc = connio_tick(io, now);
                if (rc < 0)
                    worker_close(w, io);
                else if (rc > 0) /* a pause ended: its buffered requests wait for no epoll */
                    worker_ready(w, io);
            }
        }
        if (atomic_load(&srv->stopping)) {
            if (!drain_start) drain_start = now;
            if (!worker_drain(w, now, drain_start)) break;
        }
    }
    while (w->conns)
        worker_close(w, w->conns);
    return NULL;
}

int worker_start(worker *w) {
    const char *what = "epoll_create1";
    w->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (w->epfd < 0) goto fail;
    what = "eventfd";
    w->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (w->wakefd < 0) goto fail;
    what = "epoll_ctl";
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, w->wakefd, &ev) != 0) goto fail;
    what = "pthread_create";
    int rc = pthread_create(&w->thread, NULL, worker_main, w);
    if (rc != 0) {
        errno = rc;
        goto fail;
    }
    w->started = 1;
    return 0;
fail:;
    int e = errno ? errno : EIO;
    LOG_ERROR("cannot start tided: worker %d: %s: %s", w->index, what, strerror(e));
    return -e;
}

void worker_stop(worker *w) {
    if (!w->started) return;
    worker_wake(w);
    pthread_join(w->thread, NULL);
    w->started = 0;
}

void worker_fini(worker *w) {
    for (size_t j = 0; j < w->nincoming; j++) {
        preauth_release(w->srv, w->incoming[j] & ~WORKER_FD_RESP, 0);
        close(w->incoming[j] & ~WORKER_FD_RESP);
    }
    free(w->incoming);
    w->incoming = NULL;
    w->nincoming = 0;
    if (w->epfd >= 0) close(w->epfd);
    if (w->wakefd >= 0) close(w->wakefd);
    w->epfd = w->wakefd = -1;
    pthread_mutex_destroy(&w->qlock);
}

void worker_hand(worker *w, int fd) {
    pthread_mutex_lock(&w->qlock);
    if (w->nincoming == w->capincoming) {
        size_t cap = w->capincoming ? w->capincoming * 2 : 16;
        int *grown = realloc(w->incoming, cap * sizeof(int));
        if (!grown) {
            pthread_mutex_unlock(&w->qlock);
            preauth_release(w->srv, fd & ~WORKER_FD_RESP, 0);
            close(fd & ~WORKER_FD_RESP);
            atomic_fetch_sub(&w->srv->open_conns, 1);
            atomic_fetch_sub(&w->srv->m.conns_open, 1);
            return;
        }
        w->incoming = grown;
        w->capincoming = cap;
    }
    w->incoming[w->nincoming++] = fd;
    pthread_mutex_unlock(&w->qlock);
    worker_wake(w);
}
