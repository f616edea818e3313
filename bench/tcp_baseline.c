/*
 * tcp_baseline.c — the raw loopback TCP figure tided is compared with: a server process
 * answers each small request with SIZE bytes from memory it already holds (what a GET of
 * a SIZE value is, minus any store), over CONNS connections, each with one request in
 * flight. Prints GB/s of response bytes and the server's CPU seconds per GB.
 *
 *   tcp_baseline --size 1MiB --conns 2 --seconds 3 [--json]
 *
 * The server is a forked process (not a thread), so the figure includes the same
 * cross-process wake-ups a real client and server pay.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tide.h"

static uint64_t size = 1 << 20;
static int conns = 2;
static double seconds = 3;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int full_io(int fd, void *p, size_t n, int is_send) {
    uint8_t *b = p;
    while (n) {
        ssize_t r = is_send ? send(fd, b, n, MSG_NOSIGNAL) : recv(fd, b, n, 0);
        if (r <= 0) {
            if (r < 0 && errno == EINTR) continue;
            return -1;
        }
        b += r;
        n -= (size_t)r;
    }
    return 0;
}

/* Server side: per connection, read an 8-byte request, send `size` bytes. */
static void *serve_conn(void *arg) {
    int fd = (int)(intptr_t)arg;
    uint8_t *buf = malloc(size);
    memset(buf, 0x5a, size);
    uint64_t req;
    while (full_io(fd, &req, sizeof(req), 0) == 0)
        if (full_io(fd, buf, size, 1) != 0) break;
    free(buf);
    close(fd);
    return NULL;
}

static void server_main(int lfd) {
    pthread_t th[64];
    int n = 0;
    for (; n < conns && n < 64; n++) {
        int fd = accept(lfd, NULL, NULL);
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        pthread_create(&th[n], NULL, serve_conn, (void *)(intptr_t)fd);
    }
    for (int i = 0; i < n; i++)
        pthread_join(th[i], NULL);
    /* Report CPU time through the exit path: the parent reads it from wait4's rusage. */
    _exit(0);
}

struct client_arg {
    int port;
    uint64_t bytes;
    double stop;
};

static void *client_main(void *p) {
    struct client_arg *a = p;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)a->port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        perror("connect");
        return NULL;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    uint8_t *buf = malloc(size);
    uint64_t req = 1;
    while (now_s() < a->stop) {
        if (full_io(fd, &req, sizeof(req), 1) || full_io(fd, buf, size, 0)) break;
        a->bytes += size;
    }
    free(buf);
    close(fd);
    return NULL;
}

int main(int argc, char **argv) {
    int json = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--size") && i + 1 < argc) {
            if (tide_size_parse(argv[++i], &size) || size == 0) {
                fprintf(stderr, "tcp_baseline: bad --size\n");
                return 2;
            }
        } else if (!strcmp(argv[i], "--conns") && i + 1 < argc) {
            conns = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--seconds") && i + 1 < argc) {
            seconds = atof(argv[++i]);
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else {
            fprintf(stderr,
                    "usage: tcp_baseline [--size SIZE] [--conns N] [--seconds S] [--json]\n");
            return 2;
        }
    }
    if (conns < 1 || conns > 64 || seconds <= 0) {
        fprintf(stderr, "tcp_baseline: --conns 1..64, --seconds > 0\n");
        return 2;
    }
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sa);
    if (bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) || listen(lfd, 64) ||
        getsockname(lfd, (struct sockaddr *)&sa, &len)) {
        perror("listen");
        return 1;
    }
    pid_t pid = fork();
    if (pid == 0) server_main(lfd);
    close(lfd);
    struct client_arg args[64];
    pthread_t th[64];
    double t0 = now_s();
    for (int i = 0; i < conns; i++) {
        args[i] = (struct client_arg){ntohs(sa.sin_port), 0, t0 + seconds};
        pthread_create(&th[i], NULL, client_main, &args[i]);
    }
    uint64_t total = 0;
    for (int i = 0; i < conns; i++) {
        pthread_join(th[i], NULL);
        total += args[i].bytes;
    }
    double el = now_s() - t0;
    int st;
    struct rusage ru;
    wait4(pid, &st, 0, &ru);
    double cpu = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
                 (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
    double gbs = (double)total / el / 1e9;
    double cpu_per_gb = total ? cpu / ((double)total / 1e9) : 0;
    if (json)
        printf("{\"size\": %llu, \"conns\": %d, \"gbps\": %.3f, \"server_cpu_s_per_gb\": %.4f}\n",
               (unsigned long long)size, conns, gbs, cpu_per_gb);
    else
        printf("raw loopback TCP: %llu-byte responses, %d connections: %.2f GB/s, server CPU "
               "%.3f s/GB\n",
               (unsigned long long)size, conns, gbs, cpu_per_gb);
    return 0;
}
