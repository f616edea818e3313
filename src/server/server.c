/*
 * server.c — tided's lifecycle: listeners, the accept loop, I/O worker threads, the
 * metrics thread, signals and a clean stop.
 *
 * The accept thread never touches a connection after handing it over: it pushes the fd on
 * a worker's queue (round robin) and wakes that worker's eventfd.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "server/announce.h"
#include "server/http.h"
#include "server/resp_conn.h"
#include "server/server_int.h"

#define DRAIN_DEADLINE_NS (5ull * 1000000000ull)

void server_config_defaults(server_config *cfg) {
    memset(cfg, 0, sizeof(*cfg));
    snprintf(cfg->bind, sizeof(cfg->bind), "127.0.0.1");
    cfg->port = SERVER_DEFAULT_PORT;
    cfg->metrics_port = -1;
    cfg->threads = 2;
    cfg->store.capacity = 1ull << 30;
    cfg->store.policy = STORE_POLICY_DEFAULT; /* as mem://: chosen by trace replay (README) */
    cfg->max_conns = 1024;
    cfg->max_keys = 4096;
    cfg->max_frame = 4ull << 30;
    cfg->idle_timeout_s = 60;
    cfg->unix_mode = 0600;
    cfg->unix_lease_ms = 30000;
}

static int listen_on(const char *bind_addr, int port, int *bound_port) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, bind_addr, &a.sin_addr) != 1) {
        LOG_ERROR("cannot listen: '%s' is not an IPv4 address", bind_addr);
        return -EINVAL;
    }
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -errno;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(fd, 512) != 0) {
        int e = errno;
        LOG_ERROR("cannot listen on %s:%d: %s", bind_addr, port, strerror(e));
        close(fd);
        return -e;
    }
    socklen_t len = sizeof(a);
    getsockname(fd, (struct sockaddr *)&a, &len);
    *bound_port = ntohs(a.sin_port);
    return fd;
}

/* ---- metrics thread ------------------------------------------------------------------ */

static char *metrics_body(void *ctx, const char *path, size_t *len, int *status) {
    server *srv = ctx;
    if (strcmp(path, "/health") == 0) {
        *status = 200;
        *len = 3;
        return strdup("ok\n");
    }
    if (strcmp(path, "/metrics") != 0) return NULL;
    tide_stats st;
    store_stats(srv->st, &st);
    size_t need = metrics_render(&srv->m, &st, NULL, 0) + 1;
    char *buf = malloc(need);
    if (!buf) return NULL;
    *len = metrics_render(&srv->m, &st, buf, need);
    *status = 200;
    return buf;
}

static void *metrics_main(void *arg) {
    server *srv = arg;
    for (;;) {
        struct pollfd p[2] = {{srv->metrics_fd, POLLIN, 0}, {srv->metrics_stopfd, POLLIN, 0}};
        if (poll(p, 2, -1) < 0 && errno != EINTR) break;
        if (p[1].revents) break;
        if (!(p[0].revents & POLLIN)) continue;
        int fd = accept4(srv->metrics_fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) continue;
        /* One request at a time, each bounded by socket timeouts, so a stuck scraper
         * delays the next scrape by at most two seconds and never touches the data path. */
        struct timeval tv = {.tv_sec = 2};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
        http_answer(fd, metrics_body, srv);
        close(fd);
    }
    return NULL;
}

/* ---- workers ------------------------------------------------------------------------- */

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
        if (resp ? resp_conn_adopt(w, fd) != 0 : !conn_new(w, fd)) {
            LOG_WARN("worker %d: out of memory for a new connection; closing it", w->index);
            close(fd);
            atomic_fetch_sub(&w->srv->open_conns, 1);
            atomic_fetch_sub(&w->srv->m.conns_open, 1);
        }
    }
    if (more) {
        uint64_t one = 1;
        ssize_t r = write(w->wakefd, &one, sizeof(one));
        (void)r;
    }
}

static void worker_close(worker *w, conn *c) {
    conn_free(c);
    atomic_fetch_sub(&w->srv->open_conns, 1);
    atomic_fetch_sub(&w->srv->m.conns_open, 1);
}

static void *worker_main(void *arg) {
    worker *w = arg;
    server *srv = w->srv;
    struct epoll_event evs[64];
    uint64_t last_tick = now_ns(), drain_start = 0;
    for (;;) {
        int n = epoll_wait(w->epfd, evs, 64, 250);
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
            if (evs[i].data.ptr == &w->resp_epfd) {
                resp_worker_poll(w);
                continue;
            }
            conn *c = evs[i].data.ptr;
            if (conn_on_event(c, evs[i].events) < 0) worker_close(w, c);
        }
        uint64_t now = now_ns();
        if (now - last_tick > 250000000ull) {
            last_tick = now;
            for (conn *c = w->conns, *next; c; c = next) {
                next = conn_next(c);
                if (conn_tick(c, now) < 0) worker_close(w, c);
            }
            resp_worker_tick(w, now);
        }
        if (atomic_load(&srv->stopping)) {
            if (!drain_start) drain_start = now;
            int busy = 0;
            for (conn *c = w->conns, *next; c; c = next) {
                next = conn_next(c);
                if (conn_drain(c))
                    worker_close(w, c);
                else
                    busy = 1;
            }
            busy |= resp_worker_drain(w);
            if (!busy) break;
            if (now - drain_start > DRAIN_DEADLINE_NS) {
                LOG_WARN("worker %d: closing connections still busy after the drain deadline",
                         w->index);
                while (w->conns) worker_close(w, w->conns);
                resp_worker_close_all(w);
                break;
            }
        }
    }
    resp_worker_close_all(w);
    return NULL;
}

static int worker_start(server *srv, worker *w, int index) {
    w->srv = srv;
    w->index = index;
    pthread_mutex_init(&w->qlock, NULL);
    w->epfd = epoll_create1(EPOLL_CLOEXEC);
    w->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (w->epfd < 0 || w->wakefd < 0) return -errno;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, w->wakefd, &ev) != 0) return -errno;
    int rc = resp_worker_init(w);
    if (rc) return rc;
    rc = pthread_create(&w->thread, NULL, worker_main, w);
    return rc ? -rc : 0;
}

static void worker_hand(worker *w, int fd) {
    pthread_mutex_lock(&w->qlock);
    if (w->nincoming == w->capincoming) {
        size_t cap = w->capincoming ? w->capincoming * 2 : 16;
        int *grown = realloc(w->incoming, cap * sizeof(int));
        if (!grown) {
            pthread_mutex_unlock(&w->qlock);
            close(fd);
            atomic_fetch_sub(&w->srv->open_conns, 1);
            atomic_fetch_sub(&w->srv->m.conns_open, 1);
            return;
        }
        w->incoming = grown;
        w->capincoming = cap;
    }
    w->incoming[w->nincoming++] = fd;
    pthread_mutex_unlock(&w->qlock);
    uint64_t one = 1;
    ssize_t r = write(w->wakefd, &one, sizeof(one));
    (void)r;
}

/* ---- accept loop --------------------------------------------------------------------- */

/* Tell a peer refused at --max-conns why (an error frame, TIDE_ELIMIT), then close. The
 * socket is new, so the small frame fits its buffer; what the peer already sent (its
 * HELLO) is read first so that the close is a FIN after the frame rather than a reset
 * that could discard it. */
static void refuse_conn(int fd, int limit) {
    char msg[128];
    int n = snprintf(msg, sizeof(msg), "too many connections: the server's limit is %d "
                     "(--max-conns)", limit);
    uint8_t frame[FRAME_HDR_SIZE + sizeof(msg)];
    size_t flen;
    if (frame_encode_error(frame, sizeof(frame), &flen, FRAME_OP_ERROR, 0, TIDE_ELIMIT, msg,
                           (size_t)n) == 0) {
        ssize_t w = send(fd, frame, flen, MSG_NOSIGNAL | MSG_DONTWAIT);
        (void)w;
    }
    shutdown(fd, SHUT_WR);
    char junk[512];
    for (int i = 0; i < 8 && recv(fd, junk, sizeof(junk), MSG_DONTWAIT) > 0; i++) {}
    close(fd);
}

/* Accept from lfd; `tag` (0 or WORKER_FD_RESP) says which protocol the worker speaks. */
static void accept_all(server *srv, int lfd, int tag, unsigned *next_worker) {
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR) continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                LOG_WARN("accept: %s", strerror(errno));
            return;
        }
        if (atomic_load(&srv->open_conns) >= srv->cfg.max_conns) {
            atomic_fetch_add(&srv->m.conns_rejected, 1);
            LOG_WARN("refusing a connection: %d open, the limit is %d (--max-conns)",
                     atomic_load(&srv->open_conns), srv->cfg.max_conns);
            refuse_conn(fd, srv->cfg.max_conns);
            continue;
        }
        if (lfd == srv->unix_fd && !uds_peer_allowed(srv, fd)) {
            atomic_fetch_add(&srv->m.conns_rejected, 1);
            close(fd);
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        atomic_fetch_add(&srv->open_conns, 1);
        atomic_fetch_add(&srv->m.conns_open, 1);
        atomic_fetch_add(&srv->m.conns_total, 1);
        worker_hand(&srv->workers[*next_worker % (unsigned)srv->cfg.threads], fd | tag);
        (*next_worker)++;
    }
}

/* The store's SSD tier reports through this (from its writer thread). */
static void store_log(void *ctx, int level, const char *msg) {
    (void)ctx;
    LOG_AT(level, "%s", msg);
}

static void log_summary(server *srv) {
    tide_stats st;
    store_stats(srv->st, &st);
    char used[32], cap[32];
    LOG_INFO("summary: %llu objects, %s of %s used, %d connections, %llu gets, %llu misses, "
             "%llu evictions",
             (unsigned long long)st.objects, size_format(st.used_bytes, used, sizeof(used)),
             size_format(st.capacity_bytes, cap, sizeof(cap)), atomic_load(&srv->open_conns),
             (unsigned long long)st.gets, (unsigned long long)st.misses,
             (unsigned long long)st.evictions);
    if (st.disk_capacity_bytes) {
        char dused[32], dcap[32];
        LOG_INFO("summary: disk %llu objects, %s of %s, %llu writes, %llu reads, %llu errors, "
                 "%llu checksum errors, %llu dropped",
                 (unsigned long long)st.disk_objects,
                 size_format(st.disk_used_bytes, dused, sizeof(dused)),
                 size_format(st.disk_capacity_bytes, dcap, sizeof(dcap)),
                 (unsigned long long)st.disk_writes, (unsigned long long)st.disk_reads,
                 (unsigned long long)st.disk_errors, (unsigned long long)st.disk_checksum_errors,
                 (unsigned long long)st.disk_dropped);
    }
}

int server_run(const server_config *cfg) {
    server *srv = calloc(1, sizeof(*srv));
    if (!srv) return -ENOMEM;
    srv->cfg = *cfg;
    srv->listen_fd = srv->metrics_fd = srv->metrics_stopfd = srv->unix_fd = srv->resp_fd = -1;
    int rc = 0, nworkers = 0, sfd = -1, epfd = -1, metrics_started = 0;
    announce *ann = NULL;
    if (srv->cfg.threads < 1) srv->cfg.threads = 1;
    if (srv->cfg.max_value) srv->cfg.store.max_value = srv->cfg.max_value;

    /* Signals arrive through a signalfd in the accept loop, never as handlers. */
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    pthread_sigmask(SIG_BLOCK, &mask, NULL);
    signal(SIGPIPE, SIG_IGN);
    signal(SIGXFSZ, SIG_IGN); /* a file size limit fails the disk tier's write, not tided */
    sfd = signalfd(-1, &mask, SFD_CLOEXEC);

    char err[256], capbuf[32];
    uint64_t t0 = now_ns();
    if (cfg->store.prefault)
        LOG_INFO("pre-faulting the %s pool (first touch of fresh memory is slow; this pays "
                 "it now)", size_format(cfg->store.capacity, capbuf, sizeof(capbuf)));
    srv->cfg.store.log = store_log;
    rc = store_create(&srv->cfg.store, &srv->st, err, sizeof(err));
    if (rc) {
        LOG_ERROR("cannot create the store: %s", err);
        goto out;
    }
    if (cfg->store.disk_dir && cfg->store.disk_dir[0]) {
        char line[1024];
        store_describe_disk(srv->st, line, sizeof(line));
        LOG_INFO("%s", line);
    }
    LOG_INFO("pool: %s in %.1f ms%s", size_format(store_capacity(srv->st), capbuf, sizeof(capbuf)),
             (double)(now_ns() - t0) / 1e6,
             cfg->store.prefault ? ", pre-faulted"
                                 : " (not pre-faulted: first writes to each page pay the "
                                   "first-touch cost; --prefault pays it now)");

    rc = listen_on(cfg->bind, cfg->port, &srv->port);
    if (rc < 0) goto out;
    srv->listen_fd = rc;
    if (cfg->unix_path[0] && (rc = uds_listen(srv)) < 0) goto out;
    /* Default: the port after the native one; with --port 0, any free port too (port+1 of
     * a kernel-chosen port may well be taken, by a client's ephemeral port for one). */
    int mport = cfg->metrics_port >= 0 ? cfg->metrics_port : cfg->port == 0 ? 0 : srv->port + 1;
    if (cfg->metrics_port != 0) {
        rc = listen_on(cfg->bind, mport, &srv->metrics_port);
        if (rc < 0) goto out;
        srv->metrics_fd = rc;
        srv->metrics_stopfd = eventfd(0, EFD_CLOEXEC);
        if ((rc = -pthread_create(&srv->metrics_thread, NULL, metrics_main, srv)) != 0) goto out;
        metrics_started = 1;
    }

    if (cfg->resp_port > 0) {
        rc = listen_on(cfg->bind, cfg->resp_port, &srv->resp_port);
        if (rc < 0) goto out;
        srv->resp_fd = rc;
    }

    srv->workers = calloc((size_t)srv->cfg.threads, sizeof(worker));
    if (!srv->workers) {
        rc = -ENOMEM;
        goto out;
    }
    for (; nworkers < srv->cfg.threads; nworkers++) {
        if ((rc = worker_start(srv, &srv->workers[nworkers], nworkers)) != 0) {
            LOG_ERROR("cannot start I/O worker %d: %s", nworkers, strerror(-rc));
            goto out;
        }
    }
    LOG_INFO("tided listening on %s:%d (metrics %s), %d I/O threads%s", cfg->bind, srv->port,
             srv->metrics_fd >= 0 ? "on" : "off", srv->cfg.threads,
             cfg->auth_token[0] ? ", auth token required" : "");
    if (srv->metrics_fd >= 0) LOG_INFO("metrics at http://%s:%d/metrics", cfg->bind, srv->metrics_port);
    if (cfg->etcd[0] && (rc = announce_start(cfg, srv->port, &ann)) != 0) goto out;
    if (srv->unix_fd >= 0)
        LOG_INFO("same-host clients on unix://%s (mode %04o, %s, leases %u ms)", cfg->unix_path,
                 cfg->unix_mode & 0777, cfg->unix_nallow ? "peer uids checked" : "any peer uid",
                 cfg->unix_lease_ms);
    if (srv->resp_fd >= 0) LOG_INFO("RESP (Redis protocol) on %s:%d", cfg->bind, srv->resp_port);
    if (cfg->ready_file) {
        FILE *f = fopen(cfg->ready_file, "w");
        if (f) {
            fprintf(f, "%d %d\n", srv->port, srv->metrics_fd >= 0 ? srv->metrics_port : 0);
            fclose(f);
        }
    }

    epfd = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = srv->listen_fd};
    epoll_ctl(epfd, EPOLL_CTL_ADD, srv->listen_fd, &ev);
    ev.data.fd = sfd;
    epoll_ctl(epfd, EPOLL_CTL_ADD, sfd, &ev);
    if (srv->unix_fd >= 0) {
        ev.data.fd = srv->unix_fd;
        epoll_ctl(epfd, EPOLL_CTL_ADD, srv->unix_fd, &ev);
    }
    if (srv->resp_fd >= 0) {
        ev.data.fd = srv->resp_fd;
        epoll_ctl(epfd, EPOLL_CTL_ADD, srv->resp_fd, &ev);
    }
    unsigned next_worker = 0;
    uint64_t last_summary = now_ns();
    while (!atomic_load(&srv->stopping)) {
        struct epoll_event e[4];
        int n = epoll_wait(epfd, e, 4, 1000);
        for (int i = 0; i < n; i++) {
            if (e[i].data.fd == sfd) {
                struct signalfd_siginfo si;
                ssize_t r = read(sfd, &si, sizeof(si));
                (void)r;
                LOG_INFO("signal %d: finishing in-flight requests and stopping", si.ssi_signo);
                atomic_store(&srv->stopping, 1);
            } else if (e[i].data.fd == srv->resp_fd) {
                accept_all(srv, srv->resp_fd, WORKER_FD_RESP, &next_worker);
            } else {
                accept_all(srv, e[i].data.fd, 0, &next_worker); /* native: TCP or unix */
            }
        }
        store_expire(srv->st, now_ns());
        if (now_ns() - last_summary > 60ull * 1000000000ull) {
            last_summary = now_ns();
            log_summary(srv);
        }
    }
    close(srv->listen_fd);
    srv->listen_fd = -1;
    uds_close(srv);
    if (srv->resp_fd >= 0) close(srv->resp_fd);
    srv->resp_fd = -1;
    rc = 0;

out:
    announce_stop(ann); /* leave the cluster before draining */
    atomic_store(&srv->stopping, 1);
    for (int i = 0; i < nworkers; i++) {
        uint64_t one = 1;
        ssize_t r = write(srv->workers[i].wakefd, &one, sizeof(one));
        (void)r;
        pthread_join(srv->workers[i].thread, NULL);
    }
    if (srv->workers) {
        for (int i = 0; i < srv->cfg.threads; i++) {
            worker *w = &srv->workers[i];
            for (size_t j = 0; j < w->nincoming; j++) close(w->incoming[j]);
            free(w->incoming);
            if (w->epfd > 0) close(w->epfd);
            if (w->wakefd > 0) close(w->wakefd);
            resp_worker_fini(w);
            pthread_mutex_destroy(&w->qlock);
        }
    }
    if (metrics_started) {
        uint64_t one = 1;
        ssize_t r = write(srv->metrics_stopfd, &one, sizeof(one));
        (void)r;
        pthread_join(srv->metrics_thread, NULL);
    }
    if (srv->st) log_summary(srv);
    if (srv->metrics_fd >= 0) close(srv->metrics_fd);
    if (srv->metrics_stopfd >= 0) close(srv->metrics_stopfd);
    if (srv->listen_fd >= 0) close(srv->listen_fd);
    uds_close(srv);
    if (srv->resp_fd >= 0) close(srv->resp_fd);
    if (epfd >= 0) close(epfd);
    if (sfd >= 0) close(sfd);
    free(srv->workers);
    if (srv->st) store_destroy(srv->st);
    free(srv);
    if (rc == 0) LOG_INFO("tided stopped cleanly");
    return rc;
}
