/*
 * test_ipv6.c — tided on IPv6 loopback (::1), for real: the backend suite over
 * tide://[::1]:PORT, /metrics over [::1], the system's IPV6_V6ONLY default kept (an
 * IPv4-mapped bind), a two-node cluster listed as [::1]:P1,[::1]:P2 with a failover, RESP
 * over ::1 (raw and with redis-cli -h ::1), etcd on [::1] with a node announcing
 * [::1]:PORT, and the serve flags that take an address refusing malformed IPv6 clearly,
 * before anything listens. Nothing binds beyond loopback.
 *
 * Every test first checks that ::1 can be bound here; when it cannot (no IPv6 on lo) it
 * skips (TEST_SKIP), naming what is missing.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "backend_suite.h"
#include "cluster_util.h"
#include "common/etcd.h"
#include "harness.h"
#include "tide.h"

/* 1 when [::1] can be bound; else the test skips (TEST_SKIP), saying why. */
static int have_ipv6_loopback(void) {
    int fd = socket(AF_INET6, SOCK_STREAM, 0);
    struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_addr = in6addr_loopback};
    int ok = fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
    int e = errno;
    if (fd >= 0) close(fd);
    if (!ok)
        TEST_SKIP("no IPv6 on loopback here (binding [::1]: %s; see `ip -6 addr show lo`)",
                  strerror(e));
    return ok;
}

/* Start tided on --bind ::1 (extra: more arguments or NULL); ts->url becomes
 * tide://[::1]:PORT. */
static void start_v6(test_server *ts, const char *const *extra) {
    const char *argv[40] = {"--bind", "::1", "--capacity", "256MiB", "--log-level", "info"};
    int n = 6;
    for (int i = 0; extra && extra[i] && n < 39; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    server_start(ts, argv);
    snprintf(ts->url, sizeof(ts->url), "tide://[::1]:%d", ts->port);
}

/* A connected TCP socket to [::1]:port, or -errno. */
static int connect_v6(int port) {
    int fd = socket(AF_INET6, SOCK_STREAM, 0);
    if (fd < 0) return -errno;
    struct sockaddr_in6 a = {
        .sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port), .sin6_addr = in6addr_loopback};
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    struct timeval tv = {.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

/* Send req on fd and read until the peer closes or n bytes came: the text, NUL-ended. */
static void exchange(int fd, const char *req, char *out, size_t cap) {
    CHECK(send(fd, req, strlen(req), MSG_NOSIGNAL) == (ssize_t)strlen(req));
    size_t have = 0;
    ssize_t r;
    while (have + 1 < cap && (r = recv(fd, out + have, cap - 1 - have, 0)) > 0) {
        have += (size_t)r;
        out[have] = '\0';
        if (strstr(out, "\r\n") && out[0] == '+') break; /* a RESP simple string */
    }
    out[have] = '\0';
}

static int file_has(const char *path, const char *needle) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    buf[n] = '\0';
    fclose(f);
    return strstr(buf, needle) != NULL;
}

TEST_T(ipv6_tided_bind_v6_loopback_serves_tide_url, 120) {
    if (!have_ipv6_loopback()) return;
    test_server ts;
    start_v6(&ts, NULL);
    /* The whole backend suite over tide://[::1]:PORT. */
    backend_suite(ts.url);
    /* It says where it listens as a URL host would be written. */
    char want[64];
    snprintf(want, sizeof(want), "tided listening on [::1]:%d", ts.port);
    CHECK_MSG(file_has(ts.log, want), "the log does not say '%s': see %s", want, ts.log);
    snprintf(want, sizeof(want), "metrics at http://[::1]:%d/metrics", ts.metrics_port);
    CHECK(file_has(ts.log, want));
    /* Bound to ::1 only: nothing on 127.0.0.1 at that port. */
    char v4[64];
    snprintf(v4, sizeof(v4), "tide://127.0.0.1:%d?timeout_ms=1000", ts.port);
    tide_store *s = NULL;
    CHECK(tide_open(v4, &s) < 0);
    CHECK(s == NULL);
    /* /health over [::1]. */
    int fd = connect_v6(ts.metrics_port);
    CHECK_MSG(fd >= 0, "connect to [::1]:%d: %s", ts.metrics_port, strerror(-fd));
    char out[512];
    exchange(fd, "GET /health HTTP/1.0\r\n\r\n", out, sizeof(out));
    close(fd);
    CHECK_CONTAINS(out, "200 OK");
    CHECK_CONTAINS(out, "ok\n");
    /* `tide put` and `tide get` from the command line. */
    char cmd[600];
    snprintf(cmd, sizeof(cmd),
             "echo hello6 > %s/v && %s put '%s' cli6 %s/v && %s get '%s' cli6 | grep -qx hello6",
             test_tmpdir(), test_tide_bin(), ts.url, test_tmpdir(), test_tide_bin(), ts.url);
    CHECK_EQ(system(cmd), 0);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}

/* tided's IPv6 sockets keep the system's IPV6_V6ONLY default (net.ipv6.bindv6only), which
 * decides whether `--bind ::` takes IPv4 clients too. Shown without listening beyond
 * loopback: an IPv4-mapped address (::ffff:127.0.0.1) can be bound only where V6ONLY is
 * off (Debian's default, 0), and then IPv4 clients of 127.0.0.1 reach it. */
TEST(ipv6_sockets_keep_the_system_v6only_default) {
    if (!have_ipv6_loopback()) return;
    int v6only = -1;
    FILE *f = fopen("/proc/sys/net/ipv6/bindv6only", "r");
    if (f) {
        if (fscanf(f, "%d", &v6only) != 1) v6only = -1;
        fclose(f);
    }
    printf("    net.ipv6.bindv6only = %d\n", v6only);
    if (v6only != 0) {
        char out[2048];
        int st = server_serve_status("--bind ::ffff:127.0.0.1", out, sizeof(out));
        if (v6only == 1) {
            CHECK_MSG(st == 1, "exit %d with V6ONLY on: %s", st, out);
            CHECK_CONTAINS(out, "cannot listen on [::ffff:127.0.0.1]");
        }
        return;
    }
    test_server ts;
    const char *const args[] = {
        "--bind", "::ffff:127.0.0.1", "--metrics-port", "0", "--log-level", "info", NULL};
    server_start(&ts, args);
    char want[80];
    snprintf(want, sizeof(want), "listening on [::ffff:127.0.0.1]:%d", ts.port);
    CHECK(file_has(ts.log, want));
    char u4[64], um[80], u6[80];
    snprintf(u4, sizeof(u4), "tide://127.0.0.1:%d", ts.port);
    snprintf(um, sizeof(um), "tide://[::ffff:127.0.0.1]:%d", ts.port);
    snprintf(u6, sizeof(u6), "tide://[::1]:%d?timeout_ms=1000", ts.port);
    tide_store *s4 = NULL, *sm = NULL, *s6 = NULL;
    CHECK_MSG(tide_open(u4, &s4) == 0, "an IPv4 client: %s", tide_errmsg(NULL));
    CHECK_EQ(tide_put(s4, "mapped", 6, "x", 1), 0);
    CHECK_MSG(tide_open(um, &sm) == 0, "%s", tide_errmsg(NULL));
    CHECK_EQ(tide_exists(sm, "mapped", 6), 1);
    CHECK(tide_open(u6, &s6) < 0); /* ::1 is another address */
    tide_close(sm);
    tide_close(s4);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}

/* Two nodes on ::1, listed as tide://[::1]:P1,[::1]:P2: replicas on both, and reads that
 * fail over when one stops. */
TEST_T(ipv6_cluster_of_two_nodes, 120) {
    if (!have_ipv6_loopback()) return;
    test_server ts[2];
    const char *const quiet[] = {"--metrics-port", "0", "--log-level", "warn", NULL};
    for (int i = 0; i < 2; i++)
        start_v6(&ts[i], quiet);
    char url[256];
    snprintf(url, sizeof(url), "tide://[::1]:%d,[::1]:%d?replicas=2&timeout_ms=2000", ts[0].port,
             ts[1].port);
    tide_store *s = NULL;
    CHECK_MSG(tide_open(url, &s) == 0, "%s", tide_errmsg(NULL));
    char list[512] = "";
    tide_cluster_members(s, list, sizeof(list));
    char want[64];
    snprintf(want, sizeof(want), "[::1]:%d", ts[1].port);
    CHECK_CONTAINS(list, want);
    enum { N = 200 };
    static uint8_t v[4096], got[4096];
    char key[32];
    for (int i = 0; i < N; i++) {
        size_t len = cluster_value(key, sizeof(key), v, i);
        CHECK_EQ(tide_put(s, key, strlen(key), v, len), 0);
    }
    /* Every key on both nodes: each holds N objects. */
    for (int i = 0; i < 2; i++) {
        tide_store *n = NULL;
        CHECK_EQ(tide_open(ts[i].url, &n), 0);
        tide_stats st;
        CHECK_EQ(tide_stats_get(n, &st, sizeof st), 0);
        CHECK_EQ(st.objects, N);
        tide_close(n);
    }
    CHECK_EQ(server_stop(&ts[0], SIGKILL) != 0, 1);
    for (int i = 0; i < N; i++) {
        size_t len = cluster_value(key, sizeof(key), v, i);
        size_t glen = 0;
        CHECK_MSG(tide_get(s, key, strlen(key), got, sizeof(got), &glen) == 0, "%s: %s", key,
                  tide_errmsg(s));
        CHECK(glen == len && memcmp(got, v, len) == 0);
    }
    tide_close(s);
    CHECK_EQ(server_stop(&ts[1], SIGTERM), 0);
}

/* A free port below the ephemeral range on [::1] and 127.0.0.1 both (as test_resp.c). */
static int resp_port_v6(void) {
    for (int i = 0; i < 200; i++) {
        int port = 20000 + (int)(((unsigned)getpid() * 2654435761u + (unsigned)i * 7919u) % 12000u);
        int fd = socket(AF_INET6, SOCK_STREAM, 0);
        struct sockaddr_in6 a = {.sin6_family = AF_INET6,
                                 .sin6_port = htons((uint16_t)port),
                                 .sin6_addr = in6addr_loopback};
        int ok = fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
        if (fd >= 0) close(fd);
        if (ok) return port;
    }
    test_fail(__FILE__, __LINE__, "no free port in 20000..31999 on [::1]");
}

TEST_T(ipv6_resp_over_v6_loopback, 60) {
    if (!have_ipv6_loopback()) return;
    int rport = resp_port_v6();
    char rp[16];
    snprintf(rp, sizeof(rp), "%d", rport);
    test_server ts;
    const char *const extra[] = {"--resp-port", rp, "--metrics-port", "0", NULL};
    start_v6(&ts, extra);
    char want[64];
    snprintf(want, sizeof(want), "RESP (Redis protocol) on [::1]:%d", rport);
    CHECK(file_has(ts.log, want));
    int fd = connect_v6(rport);
    CHECK_MSG(fd >= 0, "connect to [::1]:%d: %s", rport, strerror(-fd));
    char out[256];
    exchange(fd, "PING\r\n", out, sizeof(out));
    CHECK_STR(out, "+PONG\r\n");
    exchange(fd, "*3\r\n$3\r\nSET\r\n$3\r\nsix\r\n$8\r\nover ::1\r\n", out, sizeof(out));
    CHECK_STR(out, "+OK\r\n");
    close(fd);
    /* What RESP stored is a key of the native protocol over [::1] too. */
    tide_store *s;
    CHECK_EQ(tide_open(ts.url, &s), 0);
    char v[32];
    size_t vl = 0;
    CHECK_EQ(tide_get(s, "six", 3, v, sizeof(v), &vl), 0);
    CHECK(vl == 8 && memcmp(v, "over ::1", 8) == 0);
    tide_close(s);
    if (system("command -v redis-cli >/dev/null 2>&1") == 0) {
        char cmd[300];
        snprintf(cmd, sizeof(cmd), "redis-cli -h ::1 -p %d GET six | grep -qx 'over ::1'", rport);
        CHECK_EQ(system(cmd), 0);
    } else {
        printf("    redis-cli is missing (redis-tools): the raw-socket half ran alone\n");
    }
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}

/* Count the keys under a prefix, remembering the last one. */
typedef struct seen {
    int n;
    char last[300];
} seen;
static int seen_kv(void *arg, const char *key, size_t klen, const char *val, size_t vlen) {
    seen *s = arg;
    s->n++;
    snprintf(s->last, sizeof(s->last), "%.*s", (int)klen, key);
    return 0;
}

/* etcd listening on [::1]; a node on ::1 announces [::1]:PORT (no --advertise needed) and a
 * client of etcd://[::1]:EP/NAME finds and uses it. */
TEST_T(ipv6_etcd_membership, 120) {
    if (!have_ipv6_loopback()) return;
    if (system("command -v etcd >/dev/null 2>&1") != 0) {
        TEST_SKIP("etcd is missing (etcd-server; make deps)");
    }
    test_etcd e;
    etcd_start_at(&e, "[::1]", 0);
    char ep[96];
    snprintf(ep, sizeof(ep), "http://%s", e.endpoint);
    test_server ts;
    const char *const extra[] = {"--etcd", ep,           "--cluster", "six", "--metrics-port",
                                 "0",      "--etcd-ttl", "3",         NULL};
    start_v6(&ts, extra);
    /* The member key holds the bracketed address. */
    etcd_client *c;
    char err[512];
    CHECK_MSG(etcd_open(e.endpoint, 2000, &c, err, sizeof(err)) == 0, "%s", err);
    seen sn = {0, ""};
    char want[128];
    snprintf(want, sizeof(want), "/tide/six/members/[::1]:%d", ts.port);
    for (int i = 0; i < 100 && sn.n == 0; i++) {
        CHECK_MSG(etcd_range_prefix(c, "/tide/six/members/", seen_kv, &sn, err, sizeof(err)) == 0,
                  "%s", err);
        if (!sn.n) {
            struct timespec d = {0, 50000000};
            nanosleep(&d, NULL);
        }
    }
    etcd_close(c);
    CHECK_MSG(sn.n == 1, "%d members registered; see %s", sn.n, ts.log);
    CHECK_STR(sn.last, want);
    char url[160];
    snprintf(url, sizeof(url), "etcd://%s/six?timeout_ms=2000", e.endpoint);
    tide_store *s = NULL;
    CHECK_MSG(tide_open(url, &s) == 0, "%s: %s", url, tide_errmsg(NULL));
    CHECK_EQ(tide_put(s, "k6", 2, "v", 1), 0);
    CHECK_EQ(tide_exists(s, "k6", 2), 1);
    tide_close(s);
    tide_store *n = NULL;
    CHECK_EQ(tide_open(ts.url, &n), 0);
    CHECK_EQ(tide_exists(n, "k6", 2), 1); /* it went to the node on [::1] */
    tide_close(n);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
    etcd_kill(&e);
}

TEST(ipv6_serve_flags_refuse_malformed_addresses) {
    static const struct {
        const char *args, *words;
        int status;
    } cases[] = {
        {"--bind localhost", "--bind (bind): 'localhost' is not an IPv4 or IPv6 address", 2},
        {"--bind '[::1]:7474'", "--bind (bind): '[::1]:7474' is not an IPv4 or IPv6 address", 2},
        {"--bind '[::1'", "--bind (bind): '[::1' is not", 2},
        {"--advertise ::1:7474",
         "--advertise (advertise): expected HOST:PORT, got '::1:7474': an IPv6", 2},
        {"--advertise '[::1]'", "--advertise (advertise): expected HOST:PORT, got '[::1]': no port",
         2},
        {"--advertise '[::1:7474'", "missing ']'", 2},
        /* On every address, the address to announce must be given. */
        {"--bind :: --etcd 'http://[::1]:1' --cluster c1", "--advertise", 1},
        {"--bind 127.0.0.1 --etcd '::1:2379' --cluster c1", "brackets", 1},
        {"--bind 127.0.0.1 --etcd 'http://[::1' --cluster c1", "missing ']'", 1},
    };
    char out[2048];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        test_context = cases[i].args;
        int st = server_serve_status(cases[i].args, out, sizeof(out));
        CHECK_MSG(st == cases[i].status, "exit status %d (%d expected), output: %s", st,
                  cases[i].status, out);
        CHECK_CONTAINS(out, cases[i].words);
        /* Refused before anything listens (`--bind ::` must not even open a socket). */
        CHECK_MSG(!strstr(out, "tided listening"), "it listened first: %s", out);
    }
    test_context = NULL;
    /* --bind [::1] (brackets) is ::1. */
    if (!have_ipv6_loopback()) return;
    test_server ts;
    const char *const args[] = {"--bind", "[::1]", "--metrics-port", "0", "--log-level",
                                "info",   NULL};
    server_start(&ts, args);
    char want[64];
    snprintf(want, sizeof(want), "listening on [::1]:%d", ts.port);
    CHECK(file_has(ts.log, want));
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}
