/*
 * test_server_http.c — tided's HTTP port (/health, /metrics) under hostile clients: slow
 * ones (a byte every 1.5 s), silent ones, more of them than there are HTTP slots, huge
 * headers and scrapers that never read their reply. /health must keep answering within a
 * second, and every attacker must be cut by the whole-request deadline.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "server_util.h"

static const char *const quiet[] = {"--capacity", "64MiB", "--log-level", "error", NULL};

static double ms_since(const struct timespec *t0) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) * 1e3 + (double)(t.tv_nsec - t0->tv_nsec) / 1e6;
}

/* GET path; the whole reply (head and body) in buf, NUL-terminated; its time in ms. */
static double http_fetch(int port, const char *path, char *buf, size_t cap) {
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int fd = server_connect(port, 5);
    char req[128];
    int n = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path);
    CHECK_EQ(send(fd, req, (size_t)n, MSG_NOSIGNAL), n);
    size_t have = 0;
    for (ssize_t r; have < cap - 1 && (r = recv(fd, buf + have, cap - 1 - have, 0)) > 0;)
        have += (size_t)r;
    buf[have] = '\0';
    close(fd);
    return ms_since(&t0);
}

/* A connection that sends nothing yet; -1 when connect fails. */
static int dial(int port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* 1 when tided has closed fd (recv sees the end, or a reset), without waiting. */
static int closed_by_peer(int fd) {
    char b[4096];
    for (;;) {
        ssize_t r = recv(fd, b, sizeof(b), MSG_DONTWAIT);
        if (r > 0) continue; /* a reply (431 for the huge header): read on to the end */
        return r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
    }
}

static long long metric(int port, const char *name) {
    static char buf[1 << 18];
    http_fetch(port, "/metrics", buf, sizeof(buf));
    char pat[128];
    snprintf(pat, sizeof(pat), "\n%s ", name);
    const char *p = strstr(buf, pat);
    return p ? atoll(p + strlen(pat)) : -1;
}

enum { NSLOW = 8, NSILENT = 100, NHUGE = 4, NDEAF = 4 };

TEST_T(server_http_health_answers_under_slow_and_silent_clients, 60) {
    test_server ts;
    server_start(&ts, quiet);
    int slow[NSLOW], silent[NSILENT], huge[NHUGE], deaf[NDEAF];
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    /* Slow: a request line begun, then one byte every 1.5 s. */
    for (int i = 0; i < NSLOW; i++) {
        CHECK((slow[i] = dial(ts.metrics_port)) >= 0);
        CHECK_EQ(send(slow[i], "G", 1, MSG_NOSIGNAL), 1);
    }
    /* Silent: connected, nothing sent; more of them than tided has HTTP slots (64). */
    for (int i = 0; i < NSILENT; i++)
        CHECK((silent[i] = dial(ts.metrics_port)) >= 0);
    /* Huge: 7 KiB of one header line that never ends, then more on every tick. */
    static char junk[7168];
    memset(junk, 'a', sizeof(junk));
    for (int i = 0; i < NHUGE; i++) {
        CHECK((huge[i] = dial(ts.metrics_port)) >= 0);
        static const char head[] = "GET /health HTTP/1.1\r\nX-Junk: ";
        CHECK_EQ(send(huge[i], head, sizeof(head) - 1, MSG_NOSIGNAL), (ssize_t)sizeof(head) - 1);
        CHECK_EQ(send(huge[i], junk, sizeof(junk), MSG_NOSIGNAL), (ssize_t)sizeof(junk));
    }
    /* Deaf: ask for /metrics with the smallest receive buffer and never read. */
    for (int i = 0; i < NDEAF; i++) {
        int one = 1;
        CHECK((deaf[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) >= 0);
        setsockopt(deaf[i], SOL_SOCKET, SO_RCVBUF, &one, sizeof(one));
        struct sockaddr_in a = {.sin_family = AF_INET,
                                .sin_port = htons((uint16_t)ts.metrics_port),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        CHECK_EQ(connect(deaf[i], (struct sockaddr *)&a, sizeof(a)), 0);
        static const char req[] = "GET /metrics HTTP/1.1\r\n\r\n";
        CHECK_EQ(send(deaf[i], req, sizeof(req) - 1, MSG_NOSIGNAL), (ssize_t)sizeof(req) - 1);
    }
    /* For 5 s (past the 2 s deadline, with three slow bytes each): /health every 250 ms,
     * each answered within a second. */
    double worst = 0, next_byte = 1500;
    int asked = 0;
    char buf[4096];
    while (ms_since(&t0) < 5000) {
        if (ms_since(&t0) >= next_byte) {
            for (int i = 0; i < NSLOW; i++)
                send(slow[i], "E", 1, MSG_NOSIGNAL); /* fails once tided has cut it */
            for (int i = 0; i < NHUGE; i++)
                send(huge[i], junk, 512, MSG_NOSIGNAL | MSG_DONTWAIT);
            next_byte += 1500;
        }
        double ms = http_fetch(ts.metrics_port, "/health", buf, sizeof(buf));
        CHECK_MSG(strstr(buf, "200 OK") && strstr(buf, "\r\n\r\nok\n"),
                  "/health after %.0f ms: \"%s\"", ms_since(&t0), buf);
        if (ms > worst) worst = ms;
        asked++;
        usleep(250 * 1000);
    }
    printf("    /health: %d asked, the slowest answered in %.1f ms\n", asked, worst);
    CHECK_MSG(worst < 1000, "/health took %.0f ms under slow clients (bound 1000)", worst);
    CHECK(asked >= 5);
    /* Every attacker was cut by the deadline (2 s) or to make room, long before now. */
    int open_slow = 0, open_silent = 0, open_huge = 0;
    for (int i = 0; i < NSLOW; i++)
        open_slow += !closed_by_peer(slow[i]);
    for (int i = 0; i < NSILENT; i++)
        open_silent += !closed_by_peer(silent[i]);
    for (int i = 0; i < NHUGE; i++)
        open_huge += !closed_by_peer(huge[i]);
    CHECK_MSG(open_slow + open_silent + open_huge == 0,
              "still open after 5 s: %d slow, %d silent, %d huge", open_slow, open_silent,
              open_huge);
    long long cut = metric(ts.metrics_port, "tide_http_connections_cut_total");
    CHECK_MSG(cut >= NSLOW + NSILENT, "tide_http_connections_cut_total %lld", cut);
    for (int i = 0; i < NSLOW; i++)
        close(slow[i]);
    for (int i = 0; i < NSILENT; i++)
        close(silent[i]);
    for (int i = 0; i < NHUGE; i++)
        close(huge[i]);
    for (int i = 0; i < NDEAF; i++)
        close(deaf[i]);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}

/* A request larger than 8 KiB is refused with 431; one sent in pieces, or by a client that
 * shuts its side after the request line, is answered. */
TEST(server_http_request_edges) {
    test_server ts;
    server_start(&ts, quiet);
    char buf[4096];
    int fd = server_connect(ts.metrics_port, 5);
    static char big[12000];
    int n = snprintf(big, sizeof(big), "GET /health HTTP/1.1\r\nX: ");
    memset(big + n, 'b', sizeof(big) - (size_t)n);
    send(fd, big, sizeof(big), MSG_NOSIGNAL);
    ssize_t r = recv(fd, buf, sizeof(buf) - 1, 0);
    CHECK(r > 0);
    buf[r] = '\0';
    CHECK_CONTAINS(buf, "431 Request Header Fields Too Large");
    close(fd);

    fd = server_connect(ts.metrics_port, 5);
    const char *pieces[] = {"GET /hea", "lth HTTP/1.1\r\nHo", "st: x\r\n", "\r\n"};
    for (size_t i = 0; i < 4; i++) {
        CHECK_EQ(send(fd, pieces[i], strlen(pieces[i]), MSG_NOSIGNAL), (ssize_t)strlen(pieces[i]));
        usleep(50 * 1000);
    }
    size_t have = 0;
    while (have < sizeof(buf) - 1 && (r = recv(fd, buf + have, sizeof(buf) - 1 - have, 0)) > 0)
        have += (size_t)r;
    buf[have] = '\0';
    CHECK_CONTAINS(buf, "200 OK");
    close(fd);

    fd = server_connect(ts.metrics_port, 5);
    static const char line[] = "GET /health HTTP/1.0\r\n";
    CHECK_EQ(send(fd, line, sizeof(line) - 1, MSG_NOSIGNAL), (ssize_t)sizeof(line) - 1);
    shutdown(fd, SHUT_WR);
    have = 0;
    while (have < sizeof(buf) - 1 && (r = recv(fd, buf + have, sizeof(buf) - 1 - have, 0)) > 0)
        have += (size_t)r;
    buf[have] = '\0';
    CHECK_CONTAINS(buf, "200 OK");
    close(fd);

    http_fetch(ts.metrics_port, "/nothing", buf, sizeof(buf));
    CHECK_CONTAINS(buf, "404 Not Found");
    http_fetch(ts.metrics_port, "/../etc", buf, sizeof(buf));
    CHECK_CONTAINS(buf, "404 Not Found");
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}
