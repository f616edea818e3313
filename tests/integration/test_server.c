/*
 * test_server.c — tided started for real: the backend suite over tide://, malformed input,
 * limits, auth, metrics, SIGTERM and SIGKILL with restart, settings refused at start, and
 * starts that run out of file descriptors, accept starved of fds; `tide put` with input
 * that fails.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "backend_suite.h"
#include "common/checksum.h"
#include "harness.h"
#include "proto/frame.h"
#include "server_util.h"
#include "tide.h"

static const char *const quiet[] = {"--capacity", "256MiB", "--log-level", "warn", NULL};

TEST_T(server_backend_suite, 120) {
    test_server ts;
    server_start(&ts, quiet);
    backend_suite(ts.url);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}

/* Read one whole frame from a raw socket (blocking with a timeout). Returns its length,
 * 0 when the peer closed, -1 on timeout or error. */
static ssize_t read_frame(int fd, uint8_t *buf, size_t cap, frame_msg *m) {
    frame_decoder d;
    frame_limits lim;
    frame_limits_default(&lim);
    frame_decoder_init(&d, &lim);
    size_t have = 0;
    for (;;) {
        ssize_t n = frame_decode(&d, buf, have, m);
        if (n != 0) return n;
        if (have == cap) return -1;
        ssize_t r = recv(fd, buf + have, cap - have, 0);
        if (r <= 0) return r == 0 ? 0 : -1;
        have += (size_t)r;
    }
}

/* After a bad frame: an error reply with `status`, then the connection closes. */
static void expect_error_then_close(int fd, int32_t status) {
    uint8_t buf[4096];
    frame_msg m;
    ssize_t n = read_frame(fd, buf, sizeof(buf), &m);
    CHECK_MSG(n > 0, "no error reply (read_frame %zd)", n);
    CHECK_EQ(m.h.status, status);
    CHECK(m.errmsg_len > 0);
    char c;
    CHECK_EQ(recv(fd, &c, 1, 0), 0); /* closed */
}

static void send_bytes(int fd, const void *p, size_t n) {
    CHECK_EQ(send(fd, p, n, MSG_NOSIGNAL), (ssize_t)n);
}

/* Another client keeps being served. */
static void check_served(const char *url) {
    tide_store *s;
    CHECK_MSG(tide_open(url, &s) == 0, "%s", tide_errmsg(NULL));
    CHECK_EQ(tide_put(s, "alive", 5, "yes", 3), 0);
    CHECK_EQ(tide_exists(s, "alive", 5), 1);
    tide_close(s);
}

TEST(server_bad_input) {
    test_server ts;
    server_start(&ts, quiet);
    uint8_t frame[512];
    size_t len;

    /* Wrong magic. */
    int fd = server_connect(ts.port, 5);
    memset(frame, 'x', FRAME_HDR_SIZE);
    send_bytes(fd, frame, FRAME_HDR_SIZE);
    expect_error_then_close(fd, TIDE_EPROTO);
    close(fd);
    check_served(ts.url);

    /* A key count that lies: EXISTS says 5 keys, carries 1. */
    tide_key k = {"key", 3};
    CHECK_EQ(frame_encode_keys(frame, sizeof(frame), &len, FRAME_OP_EXISTS, 7, &k, 1), 0);
    le_wr32(frame + 16, 5);
    fd = server_connect(ts.port, 5);
    send_bytes(fd, frame, len);
    expect_error_then_close(fd, TIDE_EPROTO);
    close(fd);

    /* More keys than the limit, announced in the header alone. */
    CHECK_EQ(frame_encode_keys(frame, sizeof(frame), &len, FRAME_OP_EXISTS, 8, &k, 1), 0);
    le_wr32(frame + 16, 1000000);
    fd = server_connect(ts.port, 5);
    send_bytes(fd, frame, FRAME_HDR_SIZE);
    expect_error_then_close(fd, TIDE_ELIMIT);
    close(fd);

    /* A body length past the frame limit. */
    CHECK_EQ(frame_encode_keys(frame, sizeof(frame), &len, FRAME_OP_EXISTS, 9, &k, 1), 0);
    le_wr64(frame + 32, 1ull << 50);
    fd = server_connect(ts.port, 5);
    send_bytes(fd, frame, FRAME_HDR_SIZE);
    expect_error_then_close(fd, TIDE_ELIMIT);
    close(fd);

    /* A key longer than 256 bytes (the length field patched after encoding). */
    CHECK_EQ(frame_encode_keys(frame, sizeof(frame), &len, FRAME_OP_EXISTS, 10, &k, 1), 0);
    le_wr16(frame + FRAME_HDR_SIZE, 300);
    fd = server_connect(ts.port, 5);
    send_bytes(fd, frame, len);
    expect_error_then_close(fd, TIDE_EKEYLONG);
    close(fd);

    /* A truncated frame, then the client goes away. */
    fd = server_connect(ts.port, 5);
    send_bytes(fd, frame, len - 2);
    close(fd);
    check_served(ts.url);

    /* A reply opcode sent as a request. */
    CHECK_EQ(frame_encode_empty(frame, sizeof(frame), &len, FRAME_OP_PING | FRAME_OP_REPLY, 11), 0);
    fd = server_connect(ts.port, 5);
    send_bytes(fd, frame, len);
    expect_error_then_close(fd, TIDE_EPROTO);
    close(fd);

    check_served(ts.url);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}

TEST(server_slow_client_is_cut_off) {
    test_server ts;
    const char *const args[] = {"--idle-timeout", "1", "--log-level", "warn", NULL};
    server_start(&ts, args);
    uint8_t frame[64];
    size_t len;
    CHECK_EQ(frame_encode_empty(frame, sizeof(frame), &len, FRAME_OP_PING, 1), 0);
    int fd = server_connect(ts.port, 10);
    /* One byte a second: the server must give up on it while serving others. */
    time_t start = time(NULL);
    int closed = 0;
    for (size_t i = 0; i < len && !closed; i++) {
        if (send(fd, frame + i, 1, MSG_NOSIGNAL) != 1) closed = 1;
        check_served(ts.url);
        struct timespec d = {1, 100000000};
        nanosleep(&d, NULL);
        char c;
        if (recv(fd, &c, 1, MSG_DONTWAIT) == 0) closed = 1;
    }
    CHECK_MSG(closed, "a one-byte-a-second client was never cut off");
    CHECK(time(NULL) - start < 10);
    close(fd);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}

/* A PUT whose value comes in pieces, the whole taking longer than the idle timeout but each
 * piece well within it: the server waits for the rest of a body without waking at each
 * piece (SO_RCVLOWAT), and must still see that bytes are coming. */
TEST_T(server_steady_slow_put_is_not_cut_off, 30) {
    test_server ts;
    const char *const args[] = {"--idle-timeout", "1", "--log-level", "warn", NULL};
    server_start(&ts, args);
    size_t vlen = 4 << 20, pieces = 8;
    uint8_t *val = malloc(vlen);
    for (size_t i = 0; i < vlen; i++)
        val[i] = (uint8_t)(i * 7 + 3);
    tide_key k = {"steady", 6};
    tide_iov v = {val, vlen};
    uint8_t head[256];
    size_t hlen;
    CHECK_EQ(frame_encode_put(head, sizeof(head), &hlen, 5, &k, 1, &v, NULL, NULL, NULL), 0);
    int fd = server_connect(ts.port, 10);
    send_bytes(fd, head, hlen);
    for (size_t p = 0; p < pieces; p++) {
        send_bytes(fd, val + p * (vlen / pieces), vlen / pieces);
        struct timespec d = {0, 300000000}; /* 8 x 0.3 s: 2.4 s in all, > the 1 s timeout */
        if (p + 1 < pieces) nanosleep(&d, NULL);
    }
    uint8_t reply[FRAME_HDR_SIZE + 4];
    size_t got = 0;
    while (got < sizeof(reply)) {
        ssize_t r = recv(fd, reply + got, sizeof(reply) - got, 0);
        CHECK_MSG(r > 0, "the connection was closed before the PUT was answered");
        got += (size_t)r;
    }
    frame_decoder d;
    frame_decoder_init(&d, NULL);
    frame_msg m;
    CHECK_EQ(frame_decode(&d, reply, got, &m), (ssize_t)got);
    CHECK_EQ(m.h.status, 0);
    frame_iter it;
    frame_entry e;
    frame_iter_init(&it, &m);
    CHECK(frame_iter_next(&it, &e));
    CHECK_EQ(e.status, 0);
    close(fd);
    tide_store *s;
    CHECK_EQ(tide_open(ts.url, &s), 0);
    uint8_t *back = malloc(vlen);
    size_t blen = 0;
    CHECK_EQ(tide_get(s, "steady", 6, back, vlen, &blen), 0);
    CHECK_EQ(blen, vlen);
    CHECK(memcmp(back, val, vlen) == 0);
    tide_close(s);
    free(back);
    free(val);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}

TEST(server_pipelined_requests) {
    test_server ts;
    server_start(&ts, quiet);
    /* Ten PINGs in one write: ten replies, in order. */
    uint8_t frames[10 * FRAME_HDR_SIZE];
    size_t len;
    for (int i = 0; i < 10; i++)
        CHECK_EQ(frame_encode_empty(frames + i * FRAME_HDR_SIZE, FRAME_HDR_SIZE, &len,
                                    FRAME_OP_PING, 100 + (uint64_t)i),
                 0);
    int fd = server_connect(ts.port, 5);
    send_bytes(fd, frames, sizeof(frames));
    uint8_t buf[10 * FRAME_HDR_SIZE];
    size_t got = 0;
    while (got < sizeof(buf)) {
        ssize_t r = recv(fd, buf + got, sizeof(buf) - got, 0);
        CHECK(r > 0);
        got += (size_t)r;
    }
    for (int i = 0; i < 10; i++) {
        frame_decoder d;
        frame_decoder_init(&d, NULL);
        frame_msg m;
        CHECK_EQ(frame_decode(&d, buf + i * FRAME_HDR_SIZE, FRAME_HDR_SIZE, &m), FRAME_HDR_SIZE);
        CHECK_EQ(m.h.opcode, FRAME_OP_PING | FRAME_OP_REPLY);
        CHECK_EQ(m.h.req_id, 100 + (uint64_t)i);
    }
    close(fd);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}

/* A PUT of three values sent in small pieces, the middle one's checksum wrong: that one is
 * refused with TIDE_ECHECKSUM and never stored; the others are stored whole. */
TEST(server_put_checksum_checked_across_pieces) {
    test_server ts;
    server_start(&ts, quiet);
    enum { VLEN = 300 * 1024 + 3 };
    uint8_t *vals = malloc(3 * (size_t)VLEN);
    CHECK(vals);
    for (size_t i = 0; i < 3 * (size_t)VLEN; i++)
        vals[i] = (uint8_t)(i * 13 + (i >> 10));
    tide_key keys[3] = {{"pc0", 3}, {"pc1", 3}, {"pc2", 3}};
    tide_iov iov[3] = {{vals, VLEN}, {vals + VLEN, VLEN}, {vals + 2 * (size_t)VLEN, VLEN}};
    uint64_t sums[3] = {checksum_buf(vals, VLEN), checksum_buf(vals, VLEN),
                        checksum_buf(vals + 2 * (size_t)VLEN, VLEN)};
    uint8_t head[512];
    size_t len;
    CHECK_EQ(frame_encode_put(head, sizeof(head), &len, 5, keys, 3, iov, NULL, sums, NULL), 0);
    int fd = server_connect(ts.port, 5);
    send_bytes(fd, head, len);
    for (size_t off = 0; off < 3 * (size_t)VLEN; off += 7000) {
        size_t n = 3 * (size_t)VLEN - off < 7000 ? 3 * (size_t)VLEN - off : 7000;
        send_bytes(fd, vals + off, n);
    }
    uint8_t buf[512];
    frame_msg m;
    CHECK(read_frame(fd, buf, sizeof(buf), &m) > 0);
    CHECK_EQ(m.h.opcode, FRAME_OP_PUT | FRAME_OP_REPLY);
    CHECK_EQ(m.h.count, 3);
    frame_iter it;
    frame_entry e;
    frame_iter_init(&it, &m);
    int32_t want[3] = {0, TIDE_ECHECKSUM, 0};
    for (int i = 0; frame_iter_next(&it, &e); i++)
        CHECK_EQ(e.status, want[i]);
    close(fd);

    tide_store *s;
    CHECK_EQ(tide_open(ts.url, &s), 0);
    uint8_t *got = malloc(VLEN);
    size_t vlen = 0;
    CHECK_EQ(tide_get(s, "pc0", 3, got, VLEN, &vlen), 0);
    CHECK(vlen == VLEN && memcmp(got, vals, VLEN) == 0);
    CHECK_EQ(tide_exists(s, "pc1", 3), 0);
    CHECK_EQ(tide_get(s, "pc2", 3, got, VLEN, &vlen), 0);
    CHECK(vlen == VLEN && memcmp(got, vals + 2 * (size_t)VLEN, VLEN) == 0);
    tide_close(s);
    free(got);
    free(vals);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}

TEST(server_auth_token) {
    char tokfile[300];
    snprintf(tokfile, sizeof(tokfile), "%s/token", test_tmpdir());
    FILE *f = fopen(tokfile, "w");
    fputs("s3cret-token\n", f);
    fclose(f);
    test_server ts;
    const char *const args[] = {"--auth-token-file", tokfile, "--log-level", "error", NULL};
    server_start(&ts, args);
    tide_store *s = NULL;
    unsetenv("TIDE_AUTH_TOKEN");
    CHECK_EQ(tide_open(ts.url, &s), TIDE_EAUTH);
    CHECK_CONTAINS(tide_errmsg(NULL), "requires a token");
    char u[128];
    snprintf(u, sizeof(u), "%s?token=wrong", ts.url);
    CHECK_EQ(tide_open(u, &s), TIDE_EAUTH);
    CHECK_CONTAINS(tide_errmsg(NULL), "wrong token");
    snprintf(u, sizeof(u), "%s?token=s3cret-token", ts.url);
    CHECK_MSG(tide_open(u, &s) == 0, "%s", tide_errmsg(NULL));
    CHECK_EQ(tide_put(s, "k", 1, "v", 1), 0);
    tide_close(s);
    setenv("TIDE_AUTH_TOKEN", "s3cret-token", 1);
    CHECK_MSG(tide_open(ts.url, &s) == 0, "%s", tide_errmsg(NULL));
    CHECK_EQ(tide_exists(s, "k", 1), 1);
    tide_close(s);
    unsetenv("TIDE_AUTH_TOKEN");
    /* A raw request without HELLO is refused. */
    uint8_t frame[64];
    size_t len;
    CHECK_EQ(frame_encode_empty(frame, sizeof(frame), &len, FRAME_OP_STAT, 1), 0);
    int fd = server_connect(ts.port, 5);
    send_bytes(fd, frame, len);
    expect_error_then_close(fd, TIDE_EAUTH);
    close(fd);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}

/* GET path over HTTP: the body, or NULL. */
static char *http_get(int port, const char *path) {
    int fd = server_connect(port, 5);
    char req[256];
    int n = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path);
    send_bytes(fd, req, (size_t)n);
    size_t cap = 1 << 20, have = 0;
    char *buf = malloc(cap);
    for (;;) {
        ssize_t r = recv(fd, buf + have, cap - 1 - have, 0);
        if (r <= 0) break;
        have += (size_t)r;
    }
    buf[have] = '\0';
    close(fd);
    return buf;
}

TEST(server_metrics_endpoint) {
    test_server ts;
    server_start(&ts, quiet);
    CHECK(ts.metrics_port > 0);
    tide_store *s;
    CHECK_EQ(tide_open(ts.url, &s), 0);
    for (int i = 0; i < 7; i++) {
        char k[8];
        snprintf(k, sizeof(k), "m%d", i);
        CHECK_EQ(tide_put(s, k, strlen(k), "value", 5), 0);
    }
    char b[8];
    size_t len;
    CHECK_EQ(tide_get(s, "nope", 4, b, sizeof(b), &len), TIDE_ENOTFOUND);
    tide_close(s);
    char *body = http_get(ts.metrics_port, "/metrics");
    CHECK_CONTAINS(body, "HTTP/1.1 200 OK");
    CHECK_CONTAINS(body, "tide_requests_total{op=\"put\",status=\"ok\"} 7\n");
    CHECK_CONTAINS(body, "tide_requests_total{op=\"get\",status=\"miss\"} 1\n");
    CHECK_CONTAINS(body, "tide_objects 7\n");
    CHECK_CONTAINS(body, "tide_request_duration_seconds_bucket{op=\"put\",le=\"+Inf\"} 7\n");
    CHECK_CONTAINS(body, "tide_capacity_bytes 268435456\n");
    free(body);
    body = http_get(ts.metrics_port, "/health");
    CHECK_CONTAINS(body, "200 OK");
    free(body);
    body = http_get(ts.metrics_port, "/nothing");
    CHECK_CONTAINS(body, "404 Not Found");
    free(body);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}

TEST(server_connection_limit) {
    test_server ts;
    const char *const args[] = {"--max-conns", "2", "--log-level", "error", NULL};
    server_start(&ts, args);
    tide_store *a, *b, *c = NULL;
    CHECK_EQ(tide_open(ts.url, &a), 0);
    CHECK_EQ(tide_open(ts.url, &b), 0);
    int rc = tide_open(ts.url, &c);
    CHECK_MSG(rc < 0, "a third connection was accepted past --max-conns 2");
    CHECK_CONTAINS(tide_errmsg(NULL), ts.url);
    tide_close(a);
    /* The server notices the close asynchronously; a new client gets in soon after. */
    for (int i = 0; i < 100 && rc != 0; i++) {
        struct timespec d = {0, 20000000};
        nanosleep(&d, NULL);
        rc = tide_open(ts.url, &c);
    }
    CHECK_EQ(rc, 0);
    tide_close(b);
    tide_close(c);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}

TEST_T(server_kill_and_restart, 60) {
    test_server ts;
    server_start(&ts, quiet);
    tide_store *s;
    CHECK_EQ(tide_open(ts.url, &s), 0);
    CHECK_EQ(tide_put(s, "before", 6, "x", 1), 0);
    int port = ts.port;
    server_stop(&ts, SIGKILL);
    /* Down: calls fail with a message naming the server. */
    CHECK(tide_put(s, "during", 6, "x", 1) < 0);
    CHECK_CONTAINS(tide_errmsg(s), ts.url);
    /* Back on the same port: the same handle reconnects. The pool was memory: empty. */
    char portbuf[16];
    snprintf(portbuf, sizeof(portbuf), "%d", port);
    /* No metrics listener: this test needs none. */
    const char *const args[] = {"--port", portbuf, "--metrics-port", "0", "--log-level",
                                "warn",   NULL};
    server_start(&ts, args);
    CHECK_EQ(ts.port, port);
    CHECK_EQ(tide_exists(s, "before", 6), 0);
    CHECK_EQ(tide_put(s, "after", 5, "y", 1), 0);
    CHECK_EQ(tide_exists(s, "after", 5), 1);
    tide_close(s);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}

TEST(server_sigterm_is_clean) {
    test_server ts;
    const char *const args[] = {"--log-level", "info", NULL};
    server_start(&ts, args);
    tide_store *s;
    CHECK_EQ(tide_open(ts.url, &s), 0);
    CHECK_EQ(tide_put(s, "k", 1, "v", 1), 0);
    int st = server_stop(&ts, SIGTERM);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    FILE *f = fopen(ts.log, "r");
    char log[8192] = {0};
    CHECK(f && fread(log, 1, sizeof(log) - 1, f) > 0);
    fclose(f);
    CHECK_CONTAINS(log, "stopped cleanly");
    tide_close(s);
}

TEST(server_bad_flags) {
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "%s serve --capacity lots 2>/dev/null", test_tide_bin());
    int st = system(cmd);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 2);
    snprintf(cmd, sizeof(cmd), "%s serve --frobnicate 1 2>/dev/null", test_tide_bin());
    st = system(cmd);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 2);
    char conf[300];
    snprintf(conf, sizeof(conf), "%s/bad.json", test_tide_bin()[0] ? test_tmpdir() : ".");
    FILE *f = fopen(conf, "w");
    fputs("{\"port\": 1, \"capacty\": \"1GiB\"}", f);
    fclose(f);
    snprintf(cmd, sizeof(cmd), "%s serve --config %s 2>&1", test_tide_bin(), conf);
    FILE *p = popen(cmd, "r");
    char out[512] = {0};
    CHECK(fread(out, 1, sizeof(out) - 1, p) > 0);
    st = pclose(p);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 2);
    CHECK_CONTAINS(out, "capacty");
    /* An unknown policy is refused with the names of those there are. */
    snprintf(cmd, sizeof(cmd), "%s serve --policy fifo 2>&1", test_tide_bin());
    p = popen(cmd, "r");
    memset(out, 0, sizeof(out));
    CHECK(fread(out, 1, sizeof(out) - 1, p) > 0);
    st = pclose(p);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 2);
    CHECK_CONTAINS(out, "lru, s3fifo, chain or adapt");
}

TEST(server_tided_name_runs_the_daemon) {
    /* build/tided is the same program as `tide serve`. */
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "%s/tided --help | grep -q 'Run tided'", test_build_dir());
    CHECK_EQ(system(cmd), 0);
    snprintf(cmd, sizeof(cmd), "%s/tided --port notaport 2>/dev/null", test_build_dir());
    int st = system(cmd);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 2);
}

/* Numeric settings that would start a tided that serves nobody are refused at start, each
 * with a message naming the setting — as flags and in a --config file alike. */
TEST(server_useless_numeric_settings_refused) {
    static const struct {
        const char *args, *words;
    } cases[] = {
        {"--max-frame 1", "max_frame"},
        {"--max-frame 4095", "max_frame"},
        {"--max-frame 300TiB", "max_frame"},
        {"--max-conns 0", "max_conns"},
        {"--max-keys 0", "max_keys"},
        {"--max-value 0", "max_value"},
        {"--max-preauth-conns 0", "max_preauth_conns"},
        {"--threads 0", "threads"},
        {"--capacity 0", "capacity"},
        {"--unix-lease-ms 0", "unix_lease_ms"},
        {"--etcd-ttl 0", "etcd_ttl"},
        {"--port 70000", "port"},
        {"--max-conns -1", "max_conns"},
    };
    char out[2048];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        test_context = cases[i].args;
        int st = server_serve_status(cases[i].args, out, sizeof(out));
        CHECK_MSG(st == 2, "%s: exit status %d (2 expected), output: %s", cases[i].args, st, out);
        CHECK_CONTAINS(out, cases[i].words);
    }
    /* The same through a config file. */
    char conf[300], args[400];
    snprintf(conf, sizeof(conf), "%s/zero.json", test_tmpdir());
    FILE *f = fopen(conf, "w");
    CHECK(f != NULL);
    fputs("{\"max_frame\": 1, \"max_conns\": 0}", f);
    fclose(f);
    snprintf(args, sizeof(args), "--config %s", conf);
    test_context = args;
    int st = server_serve_status(args, out, sizeof(out));
    CHECK_MSG(st == 2, "config file: exit status %d, output: %s", st, out);
    CHECK_CONTAINS(out, "max_frame");
    /* The smallest accepted values still serve. */
    test_context = "smallest limits";
    test_server ts;
    const char *const small[] = {"--max-frame", "4KiB",        "--max-conns", "1", "--max-value",
                                 "1B",          "--log-level", "error",       NULL};
    server_start(&ts, small);
    tide_store *s;
    CHECK_MSG(tide_open(ts.url, &s) == 0, "%s", tide_errmsg(NULL));
    CHECK_EQ(tide_put(s, "k", 1, "v", 1), 0);
    CHECK_EQ(tide_exists(s, "k", 1), 1);
    tide_close(s);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}

/* With too few file descriptors every fd tided makes at start (store memfd, sockets,
 * signalfd, eventfds, epoll sets) fails in turn: at each limit tided either refuses to
 * start with a message naming the call, or starts and then stops cleanly on SIGTERM —
 * never a tided that runs without reading its signals or accepting. */
TEST_T(server_start_with_few_fds_fails_clearly_or_serves, 120) {
    char ready[300], log[300];
    snprintf(ready, sizeof(ready), "%s/ready-fds", test_tmpdir());
    snprintf(log, sizeof(log), "%s/fds.log", test_tmpdir());
    int refused = 0, served = 0;
    for (int lim = 4; lim <= 24; lim++) {
        char ctx[64];
        snprintf(ctx, sizeof(ctx), "ulimit -n %d", lim);
        test_context = ctx;
        unlink(ready);
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
            if (fd >= 0) dup2(fd, 2);
            if (fd > 2) close(fd);
            struct rlimit rl = {(rlim_t)lim, (rlim_t)lim};
            setrlimit(RLIMIT_NOFILE, &rl);
            execl(test_tide_bin(), test_tide_bin(), "serve", "--port", "0", "--threads", "2",
                  "--capacity", "16MiB", "--log-level", "warn", "--ready-file", ready,
                  (char *)NULL);
            _exit(127);
        }
        int st = -1, done = 0, up = 0;
        for (int t = 0; t < 500 && !done && !up; t++) { /* up to 5 s */
            done = waitpid(pid, &st, WNOHANG) == pid;
            up = access(ready, F_OK) == 0;
            struct timespec d = {0, 10000000};
            if (!done && !up) nanosleep(&d, NULL);
        }
        CHECK_MSG(done || up, "tided neither started nor exited within 5 s");
        if (!done) {
            kill(pid, SIGTERM);
            for (int t = 0; t < 500 && !done; t++) {
                done = waitpid(pid, &st, WNOHANG) == pid;
                struct timespec d = {0, 10000000};
                if (!done) nanosleep(&d, NULL);
            }
            if (!done) {
                kill(pid, SIGKILL);
                waitpid(pid, &st, 0);
                test_fail(__FILE__, __LINE__, "%s: tided started but did not stop on SIGTERM", ctx);
            }
        }
        char text[4096] = {0};
        FILE *f = fopen(log, "r");
        if (f) {
            size_t n = fread(text, 1, sizeof(text) - 1, f);
            text[n] = '\0';
            fclose(f);
        }
        CHECK_MSG(WIFEXITED(st), "%s: tided died of signal %d; log: %s", ctx,
                  WIFSIGNALED(st) ? WTERMSIG(st) : 0, text);
        if (WEXITSTATUS(st) == 0) {
            CHECK_MSG(up, "%s: exit 0 without having started; log: %s", ctx, text);
            served++;
        } else {
            CHECK_MSG(WEXITSTATUS(st) == 1, "%s: exit status %d; log: %s", ctx, WEXITSTATUS(st),
                      text);
            CHECK_MSG(strstr(text, "cannot") && strstr(text, "Too many open files"),
                      "%s: refused without naming the failure; log: %s", ctx, text);
            refused++;
        }
    }
    printf("    fd limits 4..24: %d refused with a clear error, %d started and stopped cleanly\n",
           refused, served);
    CHECK(refused > 0 && served > 0);
}

/* `tide put` whose input fails part-way (a pty whose other end closed: the reader gets the
 * bytes written, then EIO) stores nothing and says why, rather than storing what it got. */
TEST(cli_put_stores_nothing_when_its_input_fails) {
    test_server ts;
    server_start(&ts, quiet);
    int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    CHECK(master >= 0);
    CHECK_EQ(grantpt(master), 0);
    CHECK_EQ(unlockpt(master), 0);
    int slave = open(ptsname(master), O_RDWR | O_NOCTTY | O_CLOEXEC);
    CHECK(slave >= 0);
    struct termios tio;
    CHECK_EQ(tcgetattr(slave, &tio), 0);
    cfmakeraw(&tio);
    CHECK_EQ(tcsetattr(slave, TCSANOW, &tio), 0);
    static char part[3000];
    memset(part, 'p', sizeof(part));
    CHECK_EQ(write(slave, part, sizeof(part)), (ssize_t)sizeof(part));
    close(slave); /* the reader now gets the 3000 bytes, then EIO */
    char errpath[300];
    snprintf(errpath, sizeof(errpath), "%s/put.err", test_tmpdir());
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        dup2(master, 0);
        int e = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (e >= 0) dup2(e, 2);
        execl(test_tide_bin(), test_tide_bin(), "put", ts.url, "partial", "-", (char *)NULL);
        _exit(127);
    }
    close(master);
    int st;
    CHECK_EQ(waitpid(pid, &st, 0), pid);
    char err[1024] = {0};
    FILE *f = fopen(errpath, "r");
    CHECK(f != NULL);
    CHECK(fread(err, 1, sizeof(err) - 1, f) > 0);
    fclose(f);
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 1, "tide put: status %d, stderr: %s", st, err);
    CHECK_CONTAINS(err, "cannot read -");
    CHECK_CONTAINS(err, strerror(EIO));
    tide_store *s;
    CHECK_EQ(tide_open(ts.url, &s), 0);
    CHECK_EQ(tide_exists(s, "partial", 7), 0);
    tide_close(s);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}

/* utime + stime of process pid, in clock ticks (/proc/PID/stat fields 14 and 15). */
static long proc_cpu_ticks(pid_t pid) {
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the command name may hold spaces */
    CHECK(p != NULL);
    long ut = 0, st = 0;
    /* after ")": state(3) ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
     * utime(14) stime(15) */
    CHECK(sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %ld %ld", &ut, &st) == 2);
    return ut + st;
}

/* Connections beyond tided's fd limit wait in the listen backlog: accept() fails with
 * EMFILE while the listener stays readable. tided pauses between tries rather than spinning
 * on it (a core's worth of CPU), says so once a second rather than once a try, and accepts
 * again as soon as fds are free. */
TEST_T(server_accept_out_of_fds_pauses_not_spins, 60) {
    struct rlimit old, low;
    CHECK(getrlimit(RLIMIT_NOFILE, &old) == 0);
    low = old;
    low.rlim_cur = 40;
    CHECK(setrlimit(RLIMIT_NOFILE, &low) == 0); /* tided inherits it */
    test_server ts;
    const char *const args[] = {"--metrics-port", "0",           "--threads", "1", "--capacity",
                                "16MiB",          "--log-level", "warn",      NULL};
    server_start(&ts, args);
    CHECK(setrlimit(RLIMIT_NOFILE, &old) == 0);
    int fds[60];
    for (int i = 0; i < 60; i++)
        fds[i] = server_connect(ts.port, 5);
    struct timespec d = {0, 300000000};
    nanosleep(&d, NULL); /* tided takes what it can, then starves */
    long t0 = proc_cpu_ticks(ts.pid);
    struct timespec d2 = {1, 0};
    nanosleep(&d2, NULL);
    long used = proc_cpu_ticks(ts.pid) - t0;
    long hz = sysconf(_SC_CLK_TCK);
    printf("    starved accept: tided used %ld of %ld ticks in 1 s\n", used, hz);
    CHECK_MSG(used < hz / 4, "tided used %ld of %ld CPU ticks in a second while starved of fds",
              used, hz);
    char text[16384] = {0};
    FILE *f = fopen(ts.log, "r");
    CHECK(f != NULL);
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    text[n] = '\0';
    fclose(f);
    CHECK_CONTAINS(text, "Too many open files");
    int lines = 0;
    for (const char *p = text; (p = strstr(p, "pausing 10 ms")) != NULL; p++)
        lines++;
    CHECK_MSG(lines >= 1 && lines <= 3, "%d starvation warnings in about 1.3 s", lines);
    /* Free the fds: a new client is served. */
    for (int i = 0; i < 60; i++)
        close(fds[i]);
    tide_store *s;
    CHECK_MSG(tide_open(ts.url, &s) == 0, "%s", tide_errmsg(NULL));
    CHECK_EQ(tide_put(s, "k", 1, "v", 1), 0);
    CHECK_EQ(tide_exists(s, "k", 1), 1);
    tide_close(s);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}
