/*
 * server.c — tided's lifecycle: listeners, the accept loop, the metrics thread, signals
 * and a clean stop. The I/O workers and their event loop are worker.c's.
 *
 * The accept thread never touches a connection after handing it over: it pushes the fd on
 * a worker's queue (round robin) and wakes that worker's eventfd.
 *
 * server_run is a list of steps (server_new, server_cluster_check, server_preauth,
 * server_signals, server_store, server_open_listeners, server_start_workers,
 * server_accept_set, server_announce), then server_loop, then server_teardown, the one
 * cleanup path: every fd starts at -1 and every thread has a started flag, so teardown
 * undoes whatever the steps made, whichever failed. Every call that makes or configures an
 * fd has its result checked.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/hostport.h"
#include "common/log.h"
#include "common/util.h"
#include "server/announce.h"
#include "server/http.h"
#include "server/replica.h"
#include "server/server_int.h"
#include "server/ucx_srv.h"

/* Wake whoever polls the eventfd efd. A write to an eventfd fails only when its counter
 * would overflow (EAGAIN), and then the reader has a wake-up pending already: nothing is
 * lost by ignoring the failure. */
static void efd_wake(int efd) {
    uint64_t one = 1;
    ssize_t r = write(efd, &one, sizeof(one));
    (void)r;
}

/* Log "cannot start tided: WHAT: strerror(errno)" and return -errno. */
__attribute__((format(printf, 1, 2))) static int log_errno(const char *fmt, ...) {
    int e = errno ? errno : EIO;
    char what[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    LOG_ERROR("cannot start tided: %s: %s", what, strerror(e));
    return -e;
}

void server_config_defaults(server_config *cfg) {
    memset(cfg, 0, sizeof(*cfg));
    snprintf(cfg->bind, sizeof(cfg->bind), "127.0.0.1");
    cfg->port = SERVER_DEFAULT_PORT;
    cfg->metrics_port = SERVER_METRICS_AUTO;
    cfg->threads = 2;
    cfg->store.capacity = 1ull << 30;
    cfg->store.policy = STORE_POLICY_DEFAULT; /* as mem://: chosen by trace replay (README) */
    cfg->max_conns = 1024;
    cfg->max_preauth_conns = SERVER_DEFAULT_PREAUTH_CONNS;
    cfg->max_keys = 4096;
    cfg->max_frame = 4ull << 30;
    cfg->idle_timeout_s = 60;
    cfg->write_stall_timeout_s = 30;
    cfg->unix_mode = 0600;
    cfg->unix_lease_ms = 30000;
    cfg->ucx_port = -1;
}

/* What a listener is, for messages: "the native port" and the flag that sets it. */
typedef struct listener_kind {
    const char *what, *flag;
} listener_kind;

static const listener_kind L_NATIVE = {"the native tide port", "--port"},
                           L_RESP = {"the RESP (Redis protocol) port", "--resp-port"},
                           L_METRICS = {"the metrics HTTP port", "--metrics-port"};

/* Listen on bind_addr (IPv4 or IPv6, hostport_bind_addr) and port (0: any free one); the
 * port bound in *bound_port. The socket keeps the system's IPV6_V6ONLY default. A failure
 * is logged naming which listener it was, the flag that chose the port and the fix. */
static int listen_on(const char *bind_addr, int port, int *bound_port, const listener_kind *k) {
    struct sockaddr_storage a;
    socklen_t alen;
    char err[160], where[HOSTPORT_HOST_MAX + 8];
    hostport_format(bind_addr, port, where, sizeof(where));
    if (hostport_bind_addr(bind_addr, port, &a, &alen, NULL, 0, err, sizeof(err)) != 0) {
        LOG_ERROR("cannot listen on %s for %s: %s", where, k->what, err);
        return -EINVAL;
    }
    int fd = socket(a.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        int e = errno;
        LOG_ERROR("cannot listen on %s for %s: socket: %s", where, k->what, strerror(e));
        return -e;
    }
    int one = 1;
    const char *call = "setsockopt SO_REUSEADDR";
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        (call = "bind", bind(fd, (struct sockaddr *)&a, alen)) != 0 ||
        (call = "listen", listen(fd, 512)) != 0 ||
        (call = "getsockname", getsockname(fd, (struct sockaddr *)&a, &alen)) != 0) {
        int e = errno;
        const char *fix = "";
        char fixbuf[200];
        if (e == EADDRINUSE) {
            snprintf(fixbuf, sizeof(fixbuf),
                     " (another process, perhaps another tided, listens there: give %s a "
                     "free port%s)",
                     k->flag,
                     k == &L_METRICS  ? ", auto for any free one, or 0 for none"
                     : k == &L_NATIVE ? ", or 0 for any free one"
                                      : "");
            fix = fixbuf;
        } else if (e == EACCES && port > 0 && port < 1024) {
            fix = " (ports below 1024 need root or CAP_NET_BIND_SERVICE)";
        }
        LOG_ERROR("cannot listen on %s for %s (%s %d): %s: %s%s", where, k->what, k->flag, port,
                  call, strerror(e), fix);
        close(fd);
        return -e;
    }
    *bound_port = ntohs(a.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&a)->sin6_port
                                                : ((struct sockaddr_in *)&a)->sin_port);
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
    char *buf = metrics_render(&srv->m, &st, len);
    if (buf) *status = 200;
    return buf;
}

/* 1 when accept() failed for want of a resource (fds, buffers, memory): the listener stays
 * readable, so whoever polls it must wait a little before trying again, or it spins. */
static int accept_starved(int e) {
    return e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM;
}

/* The HTTP server (http.c): many scrapers at once, each bounded by a deadline, so a slow
 * or silent one never keeps /health from answering, and none touches the data path. */
static void *metrics_main(void *arg) {
    server *srv = arg;
    http_server_cfg h = {.listen_fd = srv->metrics_fd,
                         .stop_fd = srv->metrics_stopfd,
                         .body = metrics_body,
                         .ctx = srv,
                         .cut = &srv->m.http_cut};
    int rc = http_serve(&h);
    if (rc < 0) LOG_ERROR("metrics thread: %s; /metrics stops answering", strerror(-rc));
    return NULL;
}

/* ---- accept loop --------------------------------------------------------------------- */

/* Tell a peer refused at --max-conns why (an error frame, TIDE_ELIMIT), then close. The
 * socket is new, so the small frame fits its buffer; what the peer already sent (its
 * HELLO) is read first so that the close is a FIN after the frame rather than a reset
 * that could discard it. */
static void refuse_conn(int fd, int limit) {
    char msg[128];
    int n = snprintf(msg, sizeof(msg),
                     "too many connections: the server's limit is %d "
                     "(--max-conns)",
                     limit);
    uint8_t frame[FRAME_HDR_SIZE + sizeof(msg)];
    size_t flen;
    if (frame_encode_error(frame, sizeof(frame), &flen, FRAME_OP_ERROR, 0, TIDE_ELIMIT, msg,
                           (size_t)n) == 0) {
        ssize_t w = send(fd, frame, flen, MSG_NOSIGNAL | MSG_DONTWAIT);
        (void)w;
    }
    shutdown(fd, SHUT_WR);
    char junk[512];
    for (int i = 0; i < 8 && recv(fd, junk, sizeof(junk), MSG_DONTWAIT) > 0; i++) {
    }
    close(fd);
}

/* Accept from lfd until it has nothing more: 0, or -errno when accept() is starved of a
 * resource (accept_starved: the caller pauses). `tag` (0 or WORKER_FD_RESP) says which
 * protocol the worker speaks.
 * Without a token --max-conns is checked here; with one, a new connection takes a pre-auth
 * slot (the oldest pre-auth connection is cut when none is free) and --max-conns is
 * checked when it authenticates (preauth.c). */
static int accept_all(server *srv, int lfd, int tag, unsigned *next_worker) {
    int token = srv->cfg.auth_token[0] != '\0';
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
            int e = errno;
            if (!accept_starved(e)) {
                LOG_LIMITED(LOG_LEVEL_WARN, "accept: %s", strerror(e));
                return 0;
            }
            /* Starved, it comes back every pause: one warning a second says it (a limit of
             * its own, stricter than LOG_LIMITED's). The accept loop is one thread. */
            static uint64_t warned_ns;
            if (now_ns() - warned_ns > 1000000000ull) {
                warned_ns = now_ns();
                LOG_WARN("accept: %s (%d connections open); pausing 10 ms between tries",
                         strerror(e), atomic_load(&srv->open_conns));
            }
            return -e;
        }
        if (lfd == srv->unix_fd && !uds_peer_allowed(srv, fd)) {
            atomic_fetch_add(&srv->m.conns_rejected, 1);
            close(fd);
            continue;
        }
        if (!token && atomic_load(&srv->open_conns) >= srv->cfg.max_conns) {
            atomic_fetch_add(&srv->m.conns_rejected, 1);
            LOG_LIMITED(LOG_LEVEL_WARN,
                        "refusing a connection: %d open, the limit is %d (--max-conns)",
                        atomic_load(&srv->open_conns), srv->cfg.max_conns);
            refuse_conn(fd, srv->cfg.max_conns);
            continue;
        }
        if (token && preauth_admit(srv, fd))
            LOG_DEBUG("cut the oldest unauthenticated connection: all %d pre-auth slots were "
                      "taken (--max-preauth-conns)",
                      srv->cfg.max_preauth_conns);
        /* A small reply should leave at once, not wait for the peer's ACK (Nagle). A TCP
         * option: a Unix socket has no such delay. Failing costs latency, not correctness,
         * so the connection is kept. */
        int one = 1;
        if (lfd != srv->unix_fd && setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)))
            LOG_LIMITED(LOG_LEVEL_WARN,
                        "setsockopt TCP_NODELAY on a new connection: %s; serving it with Nagle's "
                        "delay",
                        strerror(errno));
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
    uint64_t quiet = log_suppressed_total();
    if (quiet)
        LOG_INFO("summary: %llu log lines left out by the limits on lines peers cause "
                 "(tide_log_lines_suppressed_total)",
                 (unsigned long long)quiet);
}

/* 0 when cfg can serve clients, else TIDE_ECONFIG (or the frame limits' error) with the
 * setting named in err: max_conns below 1, max_frame below SERVER_MIN_MAX_FRAME, ... */
static int server_config_check(const server_config *cfg, char *err, size_t errlen) {
    if (cfg->max_conns < 1) {
        snprintf(err, errlen, "max_conns is %d: at least 1 is needed", cfg->max_conns);
        return TIDE_ECONFIG;
    }
    if (cfg->max_preauth_conns < 1) {
        snprintf(err, errlen, "max_preauth_conns is %d: at least 1 is needed",
                 cfg->max_preauth_conns);
        return TIDE_ECONFIG;
    }
    if (cfg->max_frame < SERVER_MIN_MAX_FRAME) {
        snprintf(err, errlen, "max_frame is %llu bytes: at least %u are needed",
                 (unsigned long long)cfg->max_frame, SERVER_MIN_MAX_FRAME);
        return TIDE_ECONFIG;
    }
    frame_limits lim = {cfg->max_keys, cfg->max_value ? cfg->max_value : 1, cfg->max_frame};
    return frame_limits_check(&lim, err, errlen);
}

/* Signals arrive through a signalfd in the accept loop, never as handlers. SIGTERM and
 * SIGINT are blocked only once the signalfd exists to read them; on failure the mask is
 * left as it was, so the signals keep their default action. */
static int server_signals(server *srv) {
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    srv->sfd = signalfd(-1, &mask, SFD_CLOEXEC);
    if (srv->sfd < 0) return log_errno("signalfd");
    sigaddset(&mask, SIGCONT); /* blocked too, for replica.c's own signalfd (not srv->sfd) */
    int e = pthread_sigmask(SIG_BLOCK, &mask, NULL);
    if (e != 0) {
        errno = e;
        return log_errno("pthread_sigmask");
    }
    signal(SIGPIPE, SIG_IGN);
    signal(SIGXFSZ, SIG_IGN); /* a file size limit fails the disk tier's write, not tided */
    return 0;
}

/* The store: the pool (pre-faulted when asked) and the SSD tier. */
static int server_store(server *srv) {
    const server_config *cfg = &srv->cfg;
    char err[256], capbuf[32];
    uint64_t t0 = now_ns();
    if (cfg->store.prefault)
        LOG_INFO("pre-faulting the %s pool (first touch of fresh memory is slow; this pays "
                 "it now)",
                 size_format(cfg->store.capacity, capbuf, sizeof(capbuf)));
    srv->cfg.store.log = store_log;
    int rc = store_create(&srv->cfg.store, &srv->st, err, sizeof(err));
    if (rc) {
        LOG_ERROR("cannot create the store: %s", err);
        return rc;
    }
    srv->m.meta_budget = store_meta_budget(srv->st); /* before the metrics thread starts */
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
    return 0;
}

/* Every listener (native TCP, Unix socket, metrics with its thread, RESP). The Unix socket
 * comes before any thread starts (uds.c narrows the umask around its bind). */
static int server_open_listeners(server *srv) {
    const server_config *cfg = &srv->cfg;
    int rc = listen_on(cfg->bind, cfg->port, &srv->port, &L_NATIVE);
    if (rc < 0) return rc;
    srv->listen_fd = rc;
    if (cfg->unix_path[0] && (rc = uds_listen(srv)) < 0) return rc;
    if (cfg->resp_port > 0) {
        if ((rc = listen_on(cfg->bind, cfg->resp_port, &srv->resp_port, &L_RESP)) < 0) return rc;
        srv->resp_fd = rc;
    }
    /* Default: any free port (logged, and in the ready file). Any fixed offset from the
     * native port collides with a neighbour's: tideds on 7474 and 7475, say. */
    int mport = cfg->metrics_port == SERVER_METRICS_AUTO ? 0 : cfg->metrics_port;
    if (cfg->metrics_port != 0) {
        if ((rc = listen_on(cfg->bind, mport, &srv->metrics_port, &L_METRICS)) < 0) return rc;
        srv->metrics_fd = rc;
        srv->metrics_stopfd = eventfd(0, EFD_CLOEXEC);
        if (srv->metrics_stopfd < 0) return log_errno("eventfd for the metrics thread");
        if ((rc = pthread_create(&srv->metrics_thread, NULL, metrics_main, srv)) != 0) {
            LOG_ERROR("cannot start tided: the metrics thread: %s", strerror(rc));
            return -rc;
        }
        srv->metrics_started = 1;
    }
    return 0;
}

/* The I/O workers, each with its epoll set, wake-up eventfd and thread (worker_start). */
static int server_start_workers(server *srv) {
    srv->workers = calloc((size_t)srv->cfg.threads, sizeof(worker));
    if (!srv->workers) {
        LOG_ERROR("cannot start tided: out of memory for %d I/O workers", srv->cfg.threads);
        return -ENOMEM;
    }
    srv->nworkers = srv->cfg.threads;
    for (int i = 0; i < srv->nworkers; i++) {
        worker *w = &srv->workers[i];
        w->srv = srv;
        w->index = i;
        w->epfd = w->wakefd = -1;
        w->qlock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER; /* cannot fail, unlike _init */
    }
    for (int i = 0; i < srv->nworkers; i++) {
        int rc = worker_start(&srv->workers[i]);
        if (rc) return rc;
    }
    return 0;
}

/* Announce the node (etcd), say where it listens, write the ready file. */
static int server_announce(server *srv) {
    const server_config *cfg = &srv->cfg;
    char authbuf[96] = "";
    if (cfg->auth_token[0])
        snprintf(authbuf, sizeof(authbuf), ", auth token required (%d pre-auth slots)",
                 cfg->max_preauth_conns);
    char where[HOSTPORT_HOST_MAX + 8];
    LOG_INFO("tided listening on %s (metrics %s), %d I/O threads%s",
             hostport_format(cfg->bind, srv->port, where, sizeof(where)),
             srv->metrics_fd >= 0 ? "on" : "off", cfg->threads, authbuf);
    if (srv->metrics_fd >= 0)
        LOG_INFO("metrics at http://%s/metrics",
                 hostport_format(cfg->bind, srv->metrics_port, where, sizeof(where)));
    if (cfg->etcd[0]) {
        int rc = announce_start(cfg, srv->port, replica_lapsed, srv, &srv->ann);
        if (rc) return rc;
    }
    if (srv->unix_fd >= 0)
        LOG_INFO("same-host clients on unix://%s (mode %04o, %s, leases %u ms)", cfg->unix_path,
                 cfg->unix_mode & 0777, cfg->unix_nallow ? "peer uids checked" : "any peer uid",
                 cfg->unix_lease_ms);
    if (srv->resp_fd >= 0)
        LOG_INFO("RESP (Redis protocol) on %s",
                 hostport_format(cfg->bind, srv->resp_port, where, sizeof(where)));
    if (cfg->ready_file) {
        /* Whoever waits for this file would wait for ever: not writing it fails the start. */
        FILE *f = fopen(cfg->ready_file, "w");
        int ok =
            f && fprintf(f, "%d %d\n", srv->port, srv->metrics_fd >= 0 ? srv->metrics_port : 0) > 0;
        if (f && fclose(f) != 0) ok = 0;
        if (!ok) return log_errno("writing the ready file %s", cfg->ready_file);
    }
    return 0;
}

/* The accept loop's epoll set: the signalfd and every listener. */
static int server_accept_set(server *srv) {
    srv->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (srv->epfd < 0) return log_errno("epoll_create1");
    int fds[] = {srv->sfd, srv->listen_fd, srv->unix_fd, srv->resp_fd};
    for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++) {
        if (fds[i] < 0) continue;
        struct epoll_event ev = {.events = EPOLLIN, .data.fd = fds[i]};
        if (epoll_ctl(srv->epfd, EPOLL_CTL_ADD, fds[i], &ev) != 0)
            return log_errno("epoll_ctl on the accept loop's set");
    }
    return 0;
}

/* Close the listeners that take connections (native TCP, Unix socket, RESP), once: the
 * accept loop calls this when it stops, server_teardown again for a start that failed. */
static void server_close_listeners(server *srv) {
    if (srv->listen_fd >= 0) close(srv->listen_fd);
    srv->listen_fd = -1;
    uds_close(srv);
    if (srv->resp_fd >= 0) close(srv->resp_fd);
    srv->resp_fd = -1;
}

/* Accept and hand out connections until SIGTERM or SIGINT. 0, or -errno when epoll_wait
 * fails (logged). */
static int server_loop(server *srv) {
    unsigned next_worker = 0;
    uint64_t last_summary = now_ns();
    int rc = 0;
    while (!atomic_load(&srv->stopping)) {
        struct epoll_event e[4];
        int n = epoll_wait(srv->epfd, e, 4, 1000);
        if (n < 0 && errno != EINTR) {
            rc = -errno;
            LOG_ERROR("accept loop: epoll_wait: %s; stopping", strerror(errno));
            break;
        }
        int starved = 0;
        for (int i = 0; i < n; i++) {
            if (e[i].data.fd == srv->sfd) {
                struct signalfd_siginfo si;
                if (read(srv->sfd, &si, sizeof(si)) != (ssize_t)sizeof(si)) continue;
                LOG_INFO("signal %d: finishing in-flight requests and stopping", si.ssi_signo);
                atomic_store(&srv->stopping, 1);
            } else if (e[i].data.fd == srv->resp_fd) {
                starved |= accept_all(srv, srv->resp_fd, WORKER_FD_RESP, &next_worker) < 0;
            } else { /* native: TCP or unix */
                starved |= accept_all(srv, e[i].data.fd, 0, &next_worker) < 0;
            }
        }
        if (starved) poll(NULL, 0, 10); /* the listener stays readable: do not spin on it */
        store_expire(srv->st, now_ns());
        if (now_ns() - last_summary > 60ull * 1000000000ull) {
            last_summary = now_ns();
            log_summary(srv);
        }
    }
    server_close_listeners(srv); /* accept nothing more while the workers drain */
    return rc;
}

/* Undo whatever the set-up made, in reverse: leave the cluster, drain and join the
 * workers, stop the metrics thread, close every fd. Safe on a
 * half-made server: every fd starts at -1 and every thread has its started flag. */
static void server_teardown(server *srv) {
    announce_stop(srv->ann); /* leave the cluster before draining */
    atomic_store(&srv->stopping, 1);
    for (int i = 0; i < srv->nworkers; i++)
        worker_stop(&srv->workers[i]);
    for (int i = 0; i < srv->nworkers; i++)
        worker_fini(&srv->workers[i]);
    if (srv->metrics_started) {
        efd_wake(srv->metrics_stopfd);
        pthread_join(srv->metrics_thread, NULL);
    }
    if (srv->st) log_summary(srv);
    if (srv->metrics_fd >= 0) close(srv->metrics_fd);
    if (srv->metrics_stopfd >= 0) close(srv->metrics_stopfd);
    server_close_listeners(srv);
    if (srv->epfd >= 0) close(srv->epfd);
    if (srv->sfd >= 0) close(srv->sfd);
    free(srv->workers);
    ucx_srv_stop(srv); /* before the pool goes */
    replica_stop(srv);
    if (srv->st) store_destroy(srv->st);
    preauth_fini(&srv->pre);
}

/* A server with nothing made yet: every fd -1 and no thread started, so that
 * server_teardown can undo a start that stopped at any step. NULL when out of memory. */
static server *server_new(const server_config *cfg) {
    server *srv = calloc(1, sizeof(*srv));
    if (!srv) return NULL;
    srv->cfg = *cfg;
    srv->listen_fd = srv->metrics_fd = srv->metrics_stopfd = srv->unix_fd = srv->resp_fd = -1;
    srv->sfd = srv->epfd = -1;
    if (srv->cfg.threads < 1) srv->cfg.threads = 1;
    if (srv->cfg.max_value) srv->cfg.store.max_value = srv->cfg.max_value;
    return srv;
}

/* With --etcd: settings that would fail the announcement, found before anything listens
 * (a bind on every address without --advertise must not even listen). */
static int server_cluster_check(server *srv) {
    return srv->cfg.etcd[0] ? announce_check(&srv->cfg) : 0;
}

/* With a token: the pre-auth slots (preauth.c). */
static int server_preauth(server *srv) {
    if (!srv->cfg.auth_token[0] || preauth_init(&srv->pre, srv->cfg.max_preauth_conns) == 0)
        return 0;
    LOG_ERROR("cannot start tided: out of memory for %d pre-auth slots",
              srv->cfg.max_preauth_conns);
    return -ENOMEM;
}

/* Each step makes its part or fails with the reason logged; server_teardown undoes what
 * the steps made, whichever failed. */
int server_run(const server_config *cfg) {
    char err[256];
    int rc = server_config_check(cfg, err, sizeof(err));
    if (rc) {
        LOG_ERROR("cannot start tided: %s", err);
        return rc;
    }
    server *srv = server_new(cfg);
    if (!srv) {
        LOG_ERROR("cannot start tided: out of memory");
        return -ENOMEM;
    }
    if ((rc = server_cluster_check(srv)) == 0 && (rc = server_preauth(srv)) == 0 &&
        (rc = server_signals(srv)) == 0 && (rc = server_store(srv)) == 0 &&
        (rc = replica_start(srv)) == 0 && (rc = server_open_listeners(srv)) == 0 &&
        (rc = ucx_srv_start(srv)) == 0 && (rc = server_start_workers(srv)) == 0 &&
        (rc = server_accept_set(srv)) == 0 && (rc = server_announce(srv)) == 0)
        rc = server_loop(srv);
    server_teardown(srv);
    free(srv);
    if (rc == 0) LOG_INFO("tided stopped cleanly");
    return rc;
}
