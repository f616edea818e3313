/*
 * test_hostile.c — tided against hostile clients, on real processes: clients that pipeline
 * requests and never read the replies while a partial request sits in their input (both
 * ports), RESP peers without the token that stream a bulk or stay silent, AUTH guessing,
 * and a unix:// peer that asks for the pool's descriptor over and over without reading.
 * In each case well-behaved clients keep being served and the hostile one is bounded: cut
 * by a timeout, refused, or slowed down. Counts, never timings, decide (bounds on time
 * only guard against a hang).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "proto/frame.h"
#include "server_util.h"
#include "tide.h"

#define MiB (1ull << 20)

/* Send what the socket takes of p[0, n) within ms milliseconds, never blocking longer.
 * Returns the bytes sent (the peer may stop reading, or close). */
static size_t send_some(int fd, const void *p, size_t n, int ms) {
    int fl = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, fl | O_NONBLOCK);
    size_t sent = 0;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (sent < n) {
        ssize_t w = send(fd, (const uint8_t *)p + sent, n - sent, MSG_NOSIGNAL);
        if (w > 0) {
            sent += (size_t)w;
            continue;
        }
        if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) break;
        clock_gettime(CLOCK_MONOTONIC, &t);
        if ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 > ms) break;
        usleep(1000);
    }
    fcntl(fd, F_SETFL, fl);
    return sent;
}

/* 1 when a native PING on a new connection is answered within 2 s. */
static int native_served(int port) {
    int fd = server_connect(port, 2);
    uint8_t f[FRAME_HDR_SIZE], buf[256];
    size_t len;
    CHECK_EQ(frame_encode_empty(f, sizeof(f), &len, FRAME_OP_PING, 7), 0);
    int ok = 0;
    if (send(fd, f, len, MSG_NOSIGNAL) == (ssize_t)len) {
        size_t have = 0;
        ssize_t r;
        while (have < FRAME_HDR_SIZE && (r = recv(fd, buf + have, sizeof(buf) - have, 0)) > 0)
            have += (size_t)r;
        ok = have >= FRAME_HDR_SIZE && le_rd32(buf) == FRAME_MAGIC;
    }
    close(fd);
    return ok;
}

/* 1 when a RESP PING on a new connection is answered +PONG within 2 s. */
static int resp_served(int port) {
    int fd = server_connect(port, 2);
    char buf[64] = {0};
    int ok = 0;
    if (send(fd, "PING\r\n", 6, MSG_NOSIGNAL) == 6) {
        size_t have = 0;
        ssize_t r;
        while (have < 7 && (r = recv(fd, buf + have, sizeof(buf) - 1 - have, 0)) > 0)
            have += (size_t)r;
        ok = strncmp(buf, "+PONG\r\n", 7) == 0;
    }
    close(fd);
    return ok;
}

/* A native client that pipelines `n` GETs of key and then the first half of one more GET,
 * and never reads. The replies (n values) stay under the server's 64 MiB output bound, so
 * the connection is not held back by it: only its own blocked socket stops its output. */
static int hostile_native(int port, const char *key, int n) {
    int fd = server_connect(port, 5);
    tide_key k = {key, strlen(key)};
    uint8_t one[FRAME_HDR_SIZE + 512];
    size_t len;
    CHECK_EQ(frame_encode_get(one, sizeof(one), &len, 1, &k, NULL, 1), 0);
    size_t total = len * (size_t)n + len / 2;
    uint8_t *all = malloc(total);
    CHECK(all != NULL);
    for (int i = 0; i < n; i++)
        memcpy(all + len * (size_t)i, one, len);
    memcpy(all + len * (size_t)n, one, len / 2);
    CHECK_EQ(send_some(fd, all, total, 2000), total);
    free(all);
    return fd;
}

/* The same on the RESP port: n GETs, then half a GET. */
static int hostile_resp(int port, const char *key, int n) {
    int fd = server_connect(port, 5);
    char one[300];
    int len = snprintf(one, sizeof(one), "*2\r\n$3\r\nGET\r\n$%zu\r\n%s\r\n", strlen(key), key);
    size_t total = (size_t)len * (size_t)n + (size_t)len / 2;
    char *all = malloc(total);
    CHECK(all != NULL);
    for (int i = 0; i < n; i++)
        memcpy(all + (size_t)len * (size_t)i, one, (size_t)len);
    memcpy(all + (size_t)len * (size_t)n, one, (size_t)len / 2);
    CHECK_EQ(send_some(fd, all, total, 2000), total);
    free(all);
    return fd;
}

/* A tided with a RESP port and two I/O workers holding "big" (1 MiB), the value the
 * non-readers ask for; write_stall ("2") or NULL for the default write-stall timeout.
 * Returns its RESP port. */
static int hostile_server(test_server *ts, const char *write_stall) {
    int rport = test_free_port();
    char rp[16];
    snprintf(rp, sizeof(rp), "%d", rport);
    const char *args[] = {"--resp-port", rp,     "--threads", "2",  "--capacity", "256MiB",
                          "--log-level", "warn", NULL,        NULL, NULL};
    if (write_stall) {
        args[8] = "--write-stall-timeout";
        args[9] = write_stall;
    }
    server_start(ts, args);
    tide_store *s;
    CHECK_EQ(tide_open(ts->url, &s), 0);
    static uint8_t big[1 << 20];
    memset(big, 'v', sizeof(big));
    CHECK_EQ(tide_put(s, "big", 3, big, sizeof(big)), 0);
    tide_close(s);
    return rport;
}

/* Two non-reading pipelining clients with a partial request on each port, spread over
 * both I/O workers: every new client on either port is still served, and the hostile
 * ones are cut once their replies have not moved for --write-stall-timeout. On the old
 * loop the worker owning such a connection spun on it: 0 of 6 new clients served. */
TEST_T(security_hostile_nonreaders_leave_others_served, 90) {
    test_server ts;
    int rport = hostile_server(&ts, "2");
    int hostile[4];
    double t0 = test_now_ms(); /* their replies start to queue after this */
    hostile[0] = hostile_native(ts.port, "big", 24);
    hostile[1] = hostile_native(ts.port, "big", 24);
    hostile[2] = hostile_resp(rport, "big", 24);
    hostile[3] = hostile_resp(rport, "big", 24);
    usleep(300 * 1000);
    int served = 0;
    for (int i = 0; i < 3; i++) {
        served += native_served(ts.port);
        served += resp_served(rport);
    }
    CHECK_MSG(served == 6, "%d of 6 well-behaved clients served beside 4 non-reading ones", served);
    /* The hostile ones are cut by the write-stall timeout (2 s), well before --idle-timeout
     * (60 s): only they are open, so the count falls to 0, within SERVER_CUT_BOUND_MS of
     * their start (their replies stopped moving after it) and not before 2 s. */
    long long open = -1;
    for (int i = 0; i < 200; i++) {
        if ((open = server_metric(ts.metrics_port, "tide_connections_open")) == 0) break;
        usleep(50 * 1000);
    }
    double ms = test_now_ms() - t0;
    CHECK_MSG(open == 0, "%lld connections still open %.0f ms after their replies stalled", open,
              ms);
    CHECK_MSG(ms >= 2000 && ms <= SERVER_CUT_BOUND_MS(2) + 50,
              "the non-readers were cut %.0f ms after they started (write-stall timeout 2 s, "
              "bound %.0f ms + 50 ms between looks)",
              ms, SERVER_CUT_BOUND_MS(2));
    for (int i = 0; i < 4; i++)
        close(hostile[i]);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}

/* A process's CPU time (user + system, all its threads) in seconds, from /proc; -1 when
 * unreadable. */
static double hostile_proc_cpu_s(pid_t pid) {
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* after the command name, which may hold spaces */
    unsigned long long ut, st;
    if (!p || sscanf(p + 2, "%*c %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %llu %llu", &ut, &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* How many of the n sockets fd[] hold at least 64 KiB of replies their client has not
 * read. */
static int hostile_blocked(const int *fd, int n) {
    int blocked = 0;
    for (int i = 0; i < n; i++) {
        int q = 0;
        if (ioctl(fd[i], FIONREAD, &q) == 0 && q >= 64 * 1024) blocked++;
    }
    return blocked;
}

/* A thread that spins until told to stop: what one busy thread gets of the machine over a
 * window, measured beside tided in the same window. */
typedef struct {
    atomic_int stop;
    double cpu_s; /* its CPU time when it stopped */
} hostile_spinner;

static void *hostile_spin(void *arg) {
    hostile_spinner *sp = arg;
    volatile unsigned long x = 0;
    while (!atomic_load_explicit(&sp->stop, memory_order_relaxed))
        x++;
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    sp->cpu_s = (double)t.tv_sec + (double)t.tv_nsec / 1e9;
    return NULL;
}

/* Eight non-reading pipelining clients with a partial request (4 native, 4 RESP, over both
 * I/O workers) whose replies fill their sockets: once their output is blocked they cost
 * tided no CPU. Over a window in which a spinning thread of this test gets at least 0.5
 * CPU-seconds (however loaded the machine, up to 20 s), tided must use under a tenth of
 * what that thread got; a loop that re-ran such a connection, re-armed it, or polled it
 * would use about as much as the spinner. A ratio against a baseline measured in the same
 * window, never a timing. */
TEST_T(security_hostile_blocked_nonreaders_cost_no_cpu, 90) {
    test_server ts;
    int rport = hostile_server(&ts, NULL);
    int hostile[8];
    for (int i = 0; i < 4; i++) {
        hostile[i] = hostile_native(ts.port, "big", 24);
        hostile[4 + i] = hostile_resp(rport, "big", 24);
    }
    /* Wait (at most 10 s) until every hostile socket holds replies it has not read: tided
     * ran its GETs and filled it. Checked after the window, so that a loop stuck on the
     * first ones fails on the CPU it burns. */
    int blocked = 0;
    for (int t = 0; t < 100 && (blocked = hostile_blocked(hostile, 8)) < 8; t++)
        usleep(100 * 1000);
    usleep(300 * 1000); /* tided has sent what the sockets take */
    hostile_spinner sp = {.stop = 0, .cpu_s = 0};
    pthread_t th;
    double t0 = hostile_proc_cpu_s(ts.pid);
    CHECK_MSG(t0 >= 0, "cannot read /proc/%d/stat", (int)ts.pid);
    CHECK_EQ(pthread_create(&th, NULL, hostile_spin, &sp), 0);
    /* The window: until the spinner has had 0.5 CPU-seconds, at most 20 s. Its own CPU is
     * read from the process's figure less tided's, so the loop needs no second clock:
     * this process does nothing else meanwhile. */
    double self0 = hostile_proc_cpu_s(getpid());
    for (int t = 0; t < 200 && hostile_proc_cpu_s(getpid()) - self0 < 0.5; t++)
        usleep(100 * 1000);
    double t1 = hostile_proc_cpu_s(ts.pid);
    atomic_store(&sp.stop, 1);
    CHECK_EQ(pthread_join(th, NULL), 0);
    double tided_s = t1 - t0;
    fprintf(stderr,
            "tided used %.2f CPU-s beside 8 blocked non-reading connections while a "
            "spinning thread got %.2f\n",
            tided_s, sp.cpu_s);
    CHECK_MSG(sp.cpu_s >= 0.3, "the spinning thread got only %.2f CPU-s in 20 s", sp.cpu_s);
    CHECK_MSG(tided_s * 10 < sp.cpu_s,
              "tided used %.2f CPU-s while its only connections were 8 non-reading ones with "
              "their output blocked (a spinning thread got %.2f in the same window)",
              tided_s, sp.cpu_s);
    /* The figure is of eight open connections with their output blocked: none was cut,
     * each has replies waiting in its socket. */
    CHECK_MSG(hostile_blocked(hostile, 8) == 8, "%d of 8 hostile sockets hold unread replies",
              hostile_blocked(hostile, 8));
    CHECK_EQ(server_metric(ts.metrics_port, "tide_connections_open"), 8);
    for (int i = 0; i < 8; i++)
        close(hostile[i]);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}

static const char *hostile_token_file(void) {
    static char path[300];
    snprintf(path, sizeof(path), "%s/token", test_tmpdir());
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    fputs("t0k-hostile\n", f);
    fclose(f);
    return path;
}

/* Start a tided with the token and a RESP port; its port in *rport. */
static void start_token_resp(test_server *ts, int *rport, const char *idle) {
    *rport = test_free_port();
    static char rp[16];
    snprintf(rp, sizeof(rp), "%d", *rport);
    const char *const args[] = {"--auth-token-file",
                                hostile_token_file(),
                                "--resp-port",
                                rp,
                                "--idle-timeout",
                                idle,
                                "--log-level",
                                "error",
                                NULL};
    server_start(ts, args);
}

/* 1 when the server closes fd within 5 s (end of stream or reset), whatever it sent. */
static int closed_by_server(int fd) {
    struct timeval tv = {.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char buf[4096];
    for (int i = 0; i < 1000; i++) {
        ssize_t r = recv(fd, buf, sizeof(buf), 0);
        if (r == 0 || (r < 0 && errno == ECONNRESET)) return 1;
        if (r < 0) return 0; /* the timeout: still open */
    }
    return 0;
}

/* Before AUTH, a RESP peer may buffer no more than a native peer before HELLO (512
 * bytes): four peers streaming a 64 MiB bulk are cut, and tided's memory does not grow by
 * what they sent (the old port buffered each bulk in full). */
TEST_T(security_resp_preauth_bulk_not_buffered, 60) {
    test_server ts;
    int rport;
    start_token_resp(&ts, &rport, "60");
    long before = server_status_kib(ts.pid, "VmRSS");
    CHECK(before >= 0);
    static const char head[] = "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$67108864\r\n";
    size_t n = 24 * MiB;
    uint8_t *junk = malloc(n);
    CHECK(junk != NULL);
    memset(junk, 'x', n);
    int fds[4];
    size_t sent = 0;
    for (int i = 0; i < 4; i++) {
        fds[i] = server_connect(rport, 5);
        CHECK_EQ(send(fds[i], head, sizeof(head) - 1, MSG_NOSIGNAL), (ssize_t)(sizeof(head) - 1));
        sent += send_some(fds[i], junk, n, 1500);
    }
    free(junk);
    long now_kib = server_status_kib(ts.pid, "VmRSS");
    CHECK(now_kib >= 0);
    long grown = now_kib - before;
    for (int i = 0; i < 4; i++) {
        CHECK_MSG(closed_by_server(fds[i]), "RESP peer %d not cut before AUTH", i);
        close(fds[i]);
    }
    CHECK_MSG(grown < 16 * 1024,
              "tided grew by %ld KiB while 4 peers without the token sent "
              "%zu bytes of bulk",
              grown, sent);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}

/* A RESP peer that never authenticates is cut at --idle-timeout, like a native one. */
TEST_T(security_resp_silent_preauth_peer_is_cut, 60) {
    test_server ts;
    int rport;
    start_token_resp(&ts, &rport, "1");
    /* Cut after the idle timeout (1 s), within SERVER_CUT_BOUND_MS, not before. */
    double t0 = test_now_ms();
    int fd = server_connect(rport, 5);
    CHECK_MSG(closed_by_server(fd), "a silent RESP peer without the token still open after "
                                    "5 s (--idle-timeout 1)");
    double ms = test_now_ms() - t0;
    CHECK_MSG(ms >= 1000 && ms <= SERVER_CUT_BOUND_MS(1),
              "a silent RESP peer without the token was cut after %.0f ms (idle timeout 1 s, "
              "bound %.0f ms)",
              ms, SERVER_CUT_BOUND_MS(1));
    close(fd);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}

/* Wrong AUTHs pipelined on one connection are answered a few a second at most (each
 * failure pauses the connection longer), not as fast as they come. The right token still
 * works on a fresh connection meanwhile. */
TEST_T(security_resp_auth_guessing_is_slowed, 60) {
    test_server ts;
    int rport;
    start_token_resp(&ts, &rport, "60");
    int fd = server_connect(rport, 1);
    char guesses[1000 * 12];
    size_t n = 0;
    for (int i = 0; i < 1000; i++)
        n += (size_t)snprintf(guesses + n, sizeof(guesses) - n, "AUTH g%04d\r\n", i);
    CHECK_EQ(send_some(fd, guesses, n, 2000), n);
    /* Count the answers that come within 2 s. */
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    static char buf[1 << 17];
    size_t have = 0;
    for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &t);
        if (t.tv_sec - t0.tv_sec >= 2) break;
        ssize_t r = recv(fd, buf + have, sizeof(buf) - 1 - have, MSG_DONTWAIT);
        if (r > 0) have += (size_t)r;
        if (r == 0 || have == sizeof(buf) - 1) break;
        if (r < 0) usleep(10 * 1000);
    }
    buf[have] = '\0';
    int answered = 0;
    for (const char *p = buf; (p = strstr(p, "-WRONGPASS")); p++)
        answered++;
    CHECK_MSG(answered >= 1 && answered <= 10,
              "%d of 1000 wrong AUTHs answered within 2 s on one connection", answered);
    int ok = server_connect(rport, 5);
    static const char auth[] = "AUTH t0k-hostile\r\nPING\r\n";
    CHECK_EQ(send(ok, auth, sizeof(auth) - 1, MSG_NOSIGNAL), (ssize_t)(sizeof(auth) - 1));
    char got[32] = {0};
    size_t g = 0;
    for (ssize_t r; g < 12 && (r = recv(ok, got + g, sizeof(got) - 1 - g, 0)) > 0;)
        g += (size_t)r;
    CHECK_STR(got, "+OK\r\n+PONG\r\n");
    close(ok);
    close(fd);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}

/* A unix:// peer that pipelines HELLOs asking for the pool and never reads the replies
 * cannot spend the kernel's budget of descriptors in flight for tided's user (bounded by
 * tided's RLIMIT_NOFILE, set low here so that a few hundred HELLOs would do it): the
 * descriptor goes once per connection, so new unix:// clients keep opening the pool. */
TEST_T(unix_hello_descriptor_flood_locks_nobody_out, 60) {
    char path[300], url[320];
    snprintf(path, sizeof(path), "%s/tide.sock", test_tmpdir());
    snprintf(url, sizeof(url), "unix://%s", path);
    struct rlimit old, low;
    CHECK_EQ(getrlimit(RLIMIT_NOFILE, &old), 0);
    low = old;
    low.rlim_cur = 256; /* tided inherits it */
    CHECK_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
    /* Root is exempt from that budget (CAP_SYS_RESOURCE, CAP_SYS_ADMIN): as root, tided
     * runs without those two capabilities, through setpriv. */
    char real[512], wrapper[320];
    snprintf(real, sizeof(real), "%s", test_tide_bin());
    int wrapped = geteuid() == 0 && access("/usr/bin/setpriv", X_OK) == 0;
    if (wrapped) {
        snprintf(wrapper, sizeof(wrapper), "%s/tide-nocaps", test_tmpdir());
        FILE *w = fopen(wrapper, "w");
        CHECK(w != NULL);
        fprintf(w,
                "#!/bin/sh\nexec /usr/bin/setpriv --bounding-set -sys_resource,-sys_admin "
                "'%s' \"$@\"\n",
                real);
        fclose(w);
        CHECK_EQ(chmod(wrapper, 0700), 0);
        setenv("TIDE_BIN", wrapper, 1);
    }
    test_server ts;
    server_start_unix(&ts, path, "64MiB", "warn", NULL);
    if (wrapped) setenv("TIDE_BIN", real, 1);
    CHECK_EQ(setrlimit(RLIMIT_NOFILE, &old), 0);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof(a.sun_path), "%.100s", path);
    CHECK_EQ(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    frame_hello h = {1, 1, FRAME_FEATURE_SHM, NULL, 0};
    uint8_t one[256];
    size_t len;
    CHECK_EQ(frame_encode_hello(one, sizeof(one), &len, 1, &h), 0);
    /* One at a time: replies flushed together carry one descriptor between them. */
    for (int i = 0; i < 400; i++) {
        send_some(fd, one, len, 100);
        usleep(500);
    }
    usleep(300 * 1000);
    int opened = 0;
    for (int i = 0; i < 3; i++) {
        tide_store *s;
        if (tide_open(url, &s) != 0) continue;
        opened += tide_put(s, "k", 1, "v", 1) >= 0 && tide_exists(s, "k", 1) == 1;
        tide_close(s);
    }
    CHECK_MSG(opened == 3, "%d of 3 unix:// clients opened the pool beside a HELLO flood", opened);
    close(fd);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}

/* A peer that needs no token to be refused cannot grow tided's log without end: past
 * --max-conns every refused connection was one log line (30,000 connections in 3 s: 2.6 MB
 * of log, 30,002 lines). Now the line goes through a limit (common/log.h: 40 at once, then
 * 4 a second): the log stays small, the left-out lines are counted in
 * tide_log_lines_suppressed_total and said by the next line let through, and a client that
 * gets a slot is served. Bounded: 20,000 connections or 5 s. */
TEST_T(security_refused_connection_flood_leaves_the_log_small, 60) {
    test_server ts;
    const char *const args[] = {"--max-conns", "4", "--capacity", "64MiB", NULL};
    server_start(&ts, args);
    tide_store *s[4];
    for (int i = 0; i < 4; i++) { /* the slots, held by clients that showed HELLO */
        CHECK_EQ(tide_open(ts.url, &s[i]), 0);
        CHECK_EQ(tide_put(s[i], "k", 1, "v", 1), 0);
    }
    double t0 = test_now_ms();
    int n = 0;
    for (; n < 20000 && test_now_ms() - t0 < 5000; n++)
        close(server_connect(ts.port, 1)); /* it fails the test when it cannot connect */
    usleep(400 * 1000); /* a token again: the next refusal says how many were left out */
    close(server_connect(ts.port, 1));
    long long left_out = -1;
    for (int i = 0; i < 50 && left_out <= 0; i++) {
        usleep(100 * 1000);
        left_out = server_metric(ts.metrics_port, "tide_log_lines_suppressed_total");
    }
    struct stat sb;
    CHECK(stat(ts.log, &sb) == 0);
    fprintf(stderr,
            "  %d connections refused in %.1f s: tided's log %lld bytes, %lld lines "
            "left out\n",
            n, (test_now_ms() - t0) / 1000, (long long)sb.st_size, left_out);
    CHECK_MSG(n > 1000, "only %d connections in 5 s", n);
    /* The burst (40) and one line per 250 ms over the seconds of the flood, ~90 bytes each. */
    CHECK_MSG(sb.st_size < 16 * 1024, "tided's log (%s) grew to %lld bytes", ts.log,
              (long long)sb.st_size);
    CHECK_MSG(left_out > n / 2, "tide_log_lines_suppressed_total %lld of %d refusals", left_out, n);
    char cmd[600], out[256];
    snprintf(cmd, sizeof(cmd), "grep -c 'lines like the next left out' '%s'", ts.log);
    CHECK_MSG(test_run(cmd, out, sizeof(out)) == 0, "%s does not say what it left out", ts.log);
    /* A slot given back is a slot a client gets. */
    tide_close(s[0]);
    tide_store *late = NULL;
    int rc = -1;
    for (int i = 0; i < 50 && rc != 0; i++) {
        rc = tide_open(ts.url, &late);
        if (rc == 0) rc = tide_put(late, "late", 4, "v", 1);
        if (rc != 0) {
            if (late) tide_close(late);
            late = NULL;
            usleep(100 * 1000);
        }
    }
    CHECK_EQ(rc, 0);
    tide_close(late);
    for (int i = 1; i < 4; i++)
        tide_close(s[i]);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
    /* And the summary at stop says the total. */
    snprintf(cmd, sizeof(cmd), "grep -c 'summary: [0-9]* log lines left out' '%s'", ts.log);
    CHECK_MSG(test_run(cmd, out, sizeof(out)) == 0, "%s has no summary of what it left out",
              ts.log);
}
