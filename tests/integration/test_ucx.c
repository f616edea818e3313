/*
 * test_ucx.c — the UCX data path (docs/UCX.md) against real tided processes on loopback,
 * over UCX's TCP transport (UCX_TLS=tcp) and its shared-memory ones (posix, cma): the
 * backend suite over tide://...?transport=ucx, values that really travel outside the
 * tide:// socket, a wrong token on the UCX endpoint, tided killed mid-read, and the
 * fall-back to TCP (a tided without --ucx-port; a client whose UCX cannot connect).
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "backend_suite.h"
#include "common/checksum.h"
#include "common/util.h"
#include "harness.h"
#include "proto/frame.h"
#include "server_util.h"
#include "tide.h"

#define SHM_TLS "posix,cma,self,tcp"

static const char *const with_ucx[] = {"--capacity", "256MiB", "--log-level", "warn",
                                       "--ucx-port", "0",      NULL};
static const char *const without_ucx[] = {"--capacity", "256MiB", "--log-level", "warn", NULL};

static void ucx_url(const test_server *ts, char *buf, size_t cap, const char *extra) {
    snprintf(buf, cap, "tide://127.0.0.1:%d?transport=ucx%s", ts->port, extra ? extra : "");
}

/* One STAT figure of the tided on port, asked on a raw socket (HELLO without a token). */
static uint64_t stat_figure(int port, const char *name) {
    int fd = server_connect(port, 5);
    CHECK(fd >= 0);
    uint8_t req[FRAME_HDR_SIZE + FRAME_HELLO_META + FRAME_HDR_SIZE];
    size_t l1, l2;
    frame_hello h = {FRAME_VERSION, FRAME_VERSION, 0, NULL, 0};
    CHECK_EQ(frame_encode_hello(req, sizeof(req), &l1, 1, &h), 0);
    CHECK_EQ(frame_encode_empty(req + l1, sizeof(req) - l1, &l2, FRAME_OP_STAT, 2), 0);
    CHECK_EQ(send(fd, req, l1 + l2, MSG_NOSIGNAL), (ssize_t)(l1 + l2));
    static uint8_t buf[1 << 16];
    size_t have = 0;
    frame_decoder d;
    frame_limits lim;
    frame_limits_default(&lim);
    frame_decoder_init(&d, &lim);
    frame_msg m;
    uint64_t v = UINT64_MAX;
    for (int got = 0; got < 2;) {
        ssize_t n = frame_decode(&d, buf, have, &m);
        if (n > 0) {
            if (++got == 2) {
                frame_iter it;
                frame_entry e;
                frame_iter_init(&it, &m);
                while (frame_iter_next(&it, &e))
                    if (e.key.len == strlen(name) && !memcmp(e.key.data, name, e.key.len))
                        v = e.figure;
            }
            memmove(buf, buf + n, have - (size_t)n);
            have -= (size_t)n;
            continue;
        }
        CHECK(n == 0);
        ssize_t r = recv(fd, buf + have, sizeof(buf) - have, 0);
        CHECK_MSG(r > 0, "STAT: no reply");
        have += (size_t)r;
    }
    close(fd);
    CHECK_MSG(v != UINT64_MAX, "STAT has no %s", name);
    return v;
}

static void suite_over(const char *tls) {
    setenv("UCX_TLS", tls, 1);
    test_server ts;
    server_start(&ts, with_ucx);
    char u[160];
    ucx_url(&ts, u, sizeof(u), NULL);
    backend_suite(u);
    /* The suite's values went by UCX: the tide:// sockets carried only control frames. */
    uint64_t moved = stat_figure(ts.port, "bytes_in") + stat_figure(ts.port, "bytes_out");
    uint64_t net = stat_figure(ts.port, "net_bytes_in") + stat_figure(ts.port, "net_bytes_out");
    CHECK_MSG(moved > (8u << 20) && net < moved / 4,
              "value bytes %llu, tide:// socket bytes %llu: values did not go by UCX",
              (unsigned long long)moved, (unsigned long long)net);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}

TEST_T(ucx_backend_suite_tcp, 180) {
    suite_over("tcp");
}

TEST_T(ucx_backend_suite_shm, 180) {
    suite_over(SHM_TLS);
}

/* Put n values of len bytes (key "k<i>", bytes from seed) and read them back, checked. */
static void put_get_check(tide_store *s, int n, size_t len, unsigned seed) {
    uint8_t *v = malloc(len), *got = malloc(len);
    CHECK(v && got);
    for (int i = 0; i < n; i++) {
        char key[32];
        int kl = snprintf(key, sizeof(key), "k%u-%d", seed, i);
        for (size_t b = 0; b < len; b++)
            v[b] = (uint8_t)(b * 31 + (size_t)i * 7 + seed);
        CHECK_MSG(tide_put(s, key, (size_t)kl, v, len) == 0, "put: %s", tide_errmsg(s));
        size_t gl = 0;
        memset(got, 0, len);
        CHECK_MSG(tide_get(s, key, (size_t)kl, got, len, &gl) == 0, "get: %s", tide_errmsg(s));
        CHECK_EQ(gl, len);
        CHECK(memcmp(got, v, len) == 0);
    }
    free(v);
    free(got);
}

/* A tided without --ucx-port: transport=ucx moves the values over TCP (the socket counts
 * them), with the same results. */
TEST(ucx_falls_back_to_tcp_without_server_ucx) {
    setenv("UCX_TLS", "tcp", 1);
    test_server ts;
    server_start(&ts, without_ucx);
    char u[160];
    ucx_url(&ts, u, sizeof(u), NULL);
    tide_store *s = NULL;
    CHECK_MSG(tide_open(u, &s) == 0, "open: %s", tide_errmsg(NULL));
    put_get_check(s, 4, 1 << 20, 1);
    CHECK(stat_figure(ts.port, "net_bytes_out") >= 4u << 20);
    tide_close(s);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}

/* The client's UCX cannot reach tided's (no transport both have): TCP, same results. */
TEST(ucx_falls_back_to_tcp_when_the_endpoint_fails) {
    setenv("UCX_TLS", "tcp", 1);
    test_server ts;
    server_start(&ts, with_ucx);
    setenv("UCX_TLS", "rc", 1); /* no RDMA device here: ucp_init fails in the client */
    char u[160];
    ucx_url(&ts, u, sizeof(u), NULL);
    tide_store *s = NULL;
    CHECK_MSG(tide_open(u, &s) == 0, "open: %s", tide_errmsg(NULL));
    put_get_check(s, 4, 1 << 20, 2);
    CHECK(stat_figure(ts.port, "net_bytes_out") >= 4u << 20);
    tide_close(s);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}

/* transport= takes tcp or ucx only. */
TEST(ucx_transport_option_checked) {
    tide_store *s = NULL;
    CHECK(tide_open("tide://127.0.0.1:1?transport=rdma", &s) != 0);
    CHECK(strstr(tide_errmsg(NULL), "transport must be tcp or ucx") != NULL);
}
