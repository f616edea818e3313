/*
 * test_security.c — tided's security and limits, tested against real processes: loopback
 * bind by default, nothing sizable read or kept for a peer before its token is checked
 * (requests refused on their header, HELLO bounded, unauthenticated peers cut at the idle
 * timeout), the token through TIDE_AUTH_TOKEN for the CLI, and per-request limits (keys
 * per batch, key length, value size) each answered with a clear error while the server
 * keeps serving; a flood of peers without the token never locks token holders out (they
 * have their own pre-auth budget, oldest cut first). Complements test_server.c (bad
 * frames, auth via the library, max conns).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "proto/frame.h"
#include "server_util.h"
#include "tide.h"

/* Read one whole frame (blocking, the socket's timeout). Its length, 0 on close, -1 else. */
static ssize_t sec_read_frame(int fd, uint8_t *buf, size_t cap, frame_msg *m) {
    frame_decoder d;
    frame_decoder_init(&d, NULL);
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

/* An error reply with `status` whose message contains `words`, then the close. */
static void sec_expect_error(int fd, int32_t status, const char *words) {
    uint8_t buf[4096];
    frame_msg m;
    ssize_t n = sec_read_frame(fd, buf, sizeof(buf), &m);
    CHECK_MSG(n > 0, "no error reply within the timeout (read_frame %zd)", n);
    CHECK_EQ(m.h.status, status);
    char msg[FRAME_ERRMSG_MAX + 1];
    snprintf(msg, sizeof(msg), "%.*s", (int)m.errmsg_len, m.errmsg);
    CHECK_CONTAINS(msg, words);
    char c;
    CHECK_EQ(recv(fd, &c, 1, 0), 0);
}

static void sec_send(int fd, const void *p, size_t n) {
    CHECK_EQ(send(fd, p, n, MSG_NOSIGNAL), (ssize_t)n);
}

static void sec_served(const char *url) {
    tide_store *s;
    CHECK_MSG(tide_open(url, &s) == 0, "%s", tide_errmsg(NULL));
    CHECK_EQ(tide_put(s, "alive", 5, "yes", 3), 0);
    CHECK_EQ(tide_exists(s, "alive", 5), 1);
    tide_close(s);
}

static const char *sec_token_file(void) {
    static char path[300];
    snprintf(path, sizeof(path), "%s/token", test_tmpdir());
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    fputs("t0k-sec\n", f);
    fclose(f);
    return path;
}

/* The local address of the socket listening on `port`, from /proc/net/tcp, as the kernel
 * prints it (hex, network order): "0100007F" is 127.0.0.1. "" when not found. */
static void listening_addr(int port, char *out, size_t cap) {
    out[0] = '\0';
    FILE *f = fopen("/proc/net/tcp", "r");
    CHECK(f != NULL);
    char line[512];
    while (fgets(line, sizeof(line), f)) {
        char local[64];
        unsigned st;
        if (sscanf(line, " %*d: %63s %*s %x", local, &st) != 2 || st != 0x0A) continue;
        char *colon = strchr(local, ':');
        if (!colon || (int)strtol(colon + 1, NULL, 16) != port) continue;
        *colon = '\0';
        snprintf(out, cap, "%.31s", local);
    }
    fclose(f);
}

TEST(security_loopback_bind_by_default) {
    test_server ts;
    const char *const args[] = {"--log-level", "warn", NULL}; /* no --bind */
    server_start(&ts, args);
    char addr[64];
    listening_addr(ts.port, addr, sizeof(addr));
    CHECK_STR(addr, "0100007F");
    listening_addr(ts.metrics_port, addr, sizeof(addr));
    CHECK_STR(addr, "0100007F");
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}

/* Before HELLO, a request is refused on its 40-byte header: the server does not wait for
 * (or buffer) the megabyte of keys it announces. */
TEST(security_request_before_hello_refused_on_its_header) {
    test_server ts;
    const char *const args[] = {"--auth-token-file", sec_token_file(), "--log-level", "error",
                                NULL};
    server_start(&ts, args);
    uint8_t hdr[FRAME_HDR_SIZE];
    tide_key k = {"k", 1};
    size_t len;
    uint8_t frame[128];
    CHECK_EQ(frame_encode_keys(frame, sizeof(frame), &len, FRAME_OP_EXISTS, 5, &k, 1), 0);
    memcpy(hdr, frame, FRAME_HDR_SIZE);
    le_wr32(hdr + 16, 4096);                 /* count */
    le_wr32(hdr + 24, 4096 * 258);           /* keys_len: 4096 keys of 256 bytes */
    le_wr64(hdr + 32, (uint64_t)4096 * 258); /* body_len */
    int fd = server_connect(ts.port, 5);
    sec_send(fd, hdr, sizeof(hdr));
    sec_expect_error(fd, TIDE_EAUTH, "authentication required");
    close(fd);
    /* A PUT head too, with its values never sent. */
    tide_iov v = {"value", 5};
    CHECK_EQ(frame_encode_put(frame, sizeof(frame), &len, 6, &k, 1, &v, NULL, NULL, NULL), 0);
    fd = server_connect(ts.port, 5);
    sec_send(fd, frame, FRAME_HDR_SIZE);
    sec_expect_error(fd, TIDE_EAUTH, "authentication required");
    close(fd);
    /* A HELLO whose token is longer than any token may be is refused on its header. */
    frame_hello h = {FRAME_VERSION, FRAME_VERSION, 0, (const uint8_t *)"x", 1};
    CHECK_EQ(frame_encode_hello(frame, sizeof(frame), &len, 7, &h), 0);
    le_wr32(frame + 24, FRAME_HELLO_KEYS + 4000);
    le_wr64(frame + 32, FRAME_HELLO_KEYS + 4000);
    fd = server_connect(ts.port, 5);
    sec_send(fd, frame, FRAME_HDR_SIZE);
    uint8_t buf[4096];
    frame_msg m;
    CHECK(sec_read_frame(fd, buf, sizeof(buf), &m) > 0);
    CHECK(m.h.status == TIDE_EPROTO || m.h.status == TIDE_ELIMIT);
    close(fd);
    char url[128];
    snprintf(url, sizeof(url), "%s?token=t0k-sec", ts.url);
    sec_served(url);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}

/* A peer that connects and never says HELLO is cut at the idle timeout, so silent
 * connections cannot hold the connection slots of a server with a token. */
TEST(security_silent_unauthenticated_peer_is_cut) {
    test_server ts;
    const char *const args[] = {
        "--auth-token-file", sec_token_file(), "--idle-timeout", "1", "--log-level", "error", NULL};
    server_start(&ts, args);
    /* Cut after the idle timeout (1 s), within SERVER_CUT_BOUND_MS, not before. */
    double t0 = test_now_ms();
    int fd = server_connect(ts.port, 6); /* the socket's wait: well past the bound */
    char c;
    ssize_t r = recv(fd, &c, 1, 0);
    double ms = test_now_ms() - t0;
    CHECK_MSG(r == 0, "a silent unauthenticated peer was not cut (recv %zd, errno %d)", r, errno);
    CHECK_MSG(ms >= 1000 && ms <= SERVER_CUT_BOUND_MS(1),
              "a silent unauthenticated peer was cut after %.0f ms (idle timeout 1 s, bound "
              "%.0f ms)",
              ms, SERVER_CUT_BOUND_MS(1));
    close(fd);
    /* An authenticated idle client is left alone: it has nothing pending. */
    char url[128];
    snprintf(url, sizeof(url), "%s?token=t0k-sec", ts.url);
    tide_store *s;
    CHECK_EQ(tide_open(url, &s), 0);
    struct timespec d = {2, 500000000};
    nanosleep(&d, NULL);
    tide_stats st;
    CHECK_EQ(tide_stats_get(s, &st, sizeof(st)), 0);
    tide_close(s);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}

/* The CLI takes the token from TIDE_AUTH_TOKEN (and from ?token=). */
TEST(security_cli_token_from_environment) {
    test_server ts;
    const char *const args[] = {"--auth-token-file", sec_token_file(), "--log-level", "error",
                                NULL};
    server_start(&ts, args);
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "echo hello | env -u TIDE_AUTH_TOKEN %s put %s k - 2>/dev/null",
             test_tide_bin(), ts.url);
    int st = system(cmd);
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 1, "put without a token: status %d", st);
    snprintf(cmd, sizeof(cmd), "echo hello | TIDE_AUTH_TOKEN=t0k-sec %s put %s k -",
             test_tide_bin(), ts.url);
    CHECK_EQ(system(cmd), 0);
    snprintf(cmd, sizeof(cmd), "env -u TIDE_AUTH_TOKEN %s get '%s?token=t0k-sec' k -",
             test_tide_bin(), ts.url);
    FILE *p = popen(cmd, "r");
    char out[64] = {0};
    CHECK(fread(out, 1, sizeof(out) - 1, p) > 0);
    CHECK_EQ(pclose(p), 0);
    CHECK_STR(out, "hello\n");
    snprintf(cmd, sizeof(cmd), "TIDE_AUTH_TOKEN=wrong %s exists %s k 2>&1", test_tide_bin(),
             ts.url);
    p = popen(cmd, "r");
    char err[512] = {0};
    CHECK(fread(err, 1, sizeof(err) - 1, p) > 0);
    st = pclose(p);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) != 0);
    CHECK_CONTAINS(err, "wrong token");
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}

/* ---- limits -------------------------------------------------------------------------- */

TEST(limits_keys_per_batch_key_and_value_sizes) {
    test_server ts;
    const char *const args[] = {"--max-keys", "8",           "--max-value", "4KiB", "--capacity",
                                "64MiB",      "--log-level", "error",       NULL};
    server_start(&ts, args);
    uint8_t frame[8192];
    size_t len;

    /* Nine keys through a raw frame, the whole frame sent: an error reply, then the close. */
    tide_key keys[9];
    char names[9][8];
    for (int i = 0; i < 9; i++) {
        snprintf(names[i], sizeof(names[i]), "k%d", i);
        keys[i] = (tide_key){names[i], strlen(names[i])};
    }
    CHECK_EQ(frame_encode_keys(frame, sizeof(frame), &len, FRAME_OP_EXISTS, 1, keys, 9), 0);
    int fd = server_connect(ts.port, 5);
    sec_send(fd, frame, len);
    sec_expect_error(fd, TIDE_ELIMIT, "max_keys=8");
    close(fd);
    sec_served(ts.url);

    /* The library cuts a larger batch to the server's limit by itself. */
    tide_store *s;
    CHECK_EQ(tide_open(ts.url, &s), 0);
    uint8_t present[9];
    CHECK_EQ(tide_exists_many(s, keys, 9, present), 0);

    /* A key of 257 bytes: refused by the library before it is sent. */
    char longkey[300];
    memset(longkey, 'k', sizeof(longkey));
    CHECK_EQ(tide_put(s, longkey, 257, "v", 1), TIDE_EKEYLONG);
    CHECK_EQ(tide_put(s, longkey, 256, "v", 1), 0);

    /* A value over --max-value: a clear error through the library, the handle still good. */
    static uint8_t big[8192];
    memset(big, 7, sizeof(big));
    CHECK_EQ(tide_put(s, "big", 3, big, 4097), TIDE_EVALBIG);
    CHECK_CONTAINS(tide_errmsg(s), "4096");
    CHECK_EQ(tide_put(s, "big", 3, big, 4096), 0);
    CHECK_EQ(tide_exists(s, "big", 3), 1);

    /* A value far larger than the socket buffers: tided refuses it on its head and closes
     * while the client is still sending (EPIPE or ECONNRESET there); the error reported is
     * still tided's reason, every time. */
    size_t huge_len = 16u << 20;
    uint8_t *huge = calloc(1, huge_len);
    CHECK(huge != NULL);
    for (int i = 0; i < 8; i++) {
        CHECK_EQ(tide_put(s, "huge", 4, huge, huge_len), TIDE_EVALBIG);
        CHECK_CONTAINS(tide_errmsg(s), "max_value=4096");
    }
    free(huge);
    CHECK_EQ(tide_exists(s, "big", 3), 1);

    /* The same over a raw frame (a client that ignores the HELLO limits): refused on the key
     * section, before any value byte is read. */
    tide_key bk = {"big2", 4};
    tide_iov bv = {big, 4097};
    CHECK_EQ(frame_encode_put(frame, sizeof(frame), &len, 2, &bk, 1, &bv, NULL, NULL, NULL), 0);
    fd = server_connect(ts.port, 5);
    sec_send(fd, frame, len);
    sec_expect_error(fd, TIDE_EVALBIG, "max_value=4096");
    close(fd);
    CHECK_EQ(tide_exists(s, "big2", 4), 0);

    /* And a key over 256 bytes in a raw frame (the length field patched). */
    tide_key k = {"key", 3};
    CHECK_EQ(frame_encode_keys(frame, sizeof(frame), &len, FRAME_OP_REMOVE, 3, &k, 1), 0);
    le_wr16(frame + FRAME_HDR_SIZE, 1000);
    fd = server_connect(ts.port, 5);
    sec_send(fd, frame, len);
    uint8_t buf[4096];
    frame_msg m;
    CHECK(sec_read_frame(fd, buf, sizeof(buf), &m) > 0);
    CHECK(m.h.status < 0);
    close(fd);

    tide_stats st;
    CHECK_EQ(tide_stats_get(s, &st, sizeof(st)), 0);
    CHECK_EQ(st.reserved, 0);
    tide_close(s);
    sec_served(ts.url);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}

/* Past --max-conns a client is told why (TIDE_ELIMIT, naming the flag), not just reset;
 * the connections already open keep working. */
TEST(limits_max_conns_is_a_clear_error) {
    test_server ts;
    const char *const args[] = {"--max-conns", "1", "--log-level", "error", NULL};
    server_start(&ts, args);
    tide_store *a, *b = NULL;
    CHECK_EQ(tide_open(ts.url, &a), 0);
    for (int i = 0; i < 20; i++) { /* every refusal says the same, whatever the timing */
        int rc = tide_open(ts.url, &b);
        CHECK_MSG(rc == TIDE_ELIMIT, "attempt %d: %d (%s)", i, rc, tide_errmsg(NULL));
        CHECK_CONTAINS(tide_errmsg(NULL), "--max-conns");
    }
    CHECK_EQ(tide_put(a, "k", 1, "v", 1), 0);
    CHECK_EQ(tide_exists(a, "k", 1), 1);
    tide_close(a);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}

/* ---- pre-auth flood ------------------------------------------------------------------ */

/* Connect to 127.0.0.1:port without waiting for anything; -1 when connect fails. */
static int sec_dial(int port) {
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

static double sec_ms(const struct timespec *a, const struct timespec *b) {
    return (double)(b->tv_sec - a->tv_sec) * 1e3 + (double)(b->tv_nsec - a->tv_nsec) / 1e6;
}

/* One token holder's session: open, put, read back, close. 0 or the failing call's code. */
static int sec_token_session(const char *url, int i) {
    tide_store *s;
    int rc = tide_open(url, &s);
    if (rc) return rc;
    char key[32], val[32], got[32];
    snprintf(key, sizeof(key), "holder-%d", i);
    int vn = snprintf(val, sizeof(val), "value-%d", i);
    size_t len = 0;
    if ((rc = tide_put(s, key, strlen(key), val, (size_t)vn)) == 0 &&
        (rc = tide_get(s, key, strlen(key), got, sizeof(got), &len)) == 0 &&
        (len != (size_t)vn || memcmp(got, val, len) != 0))
        rc = TIDE_ECHECKSUM; /* wrong bytes: cannot happen, but would fail the test */
    tide_close(s);
    return rc;
}

/* Peers without the token cannot lock token holders out. tided runs with --max-conns 16 and
 * 16 pre-auth slots; first 300 silent connections are held open (more than both limits
 * together), then a flooder process reconnects as fast as it can for 3 s, keeping 64
 * connections open and replacing each one cut. Throughout, token holders open sessions and
 * are served, the 8 authenticated connections opened before the flood keep working, a 17th
 * authenticated one is refused naming --max-conns, and no more than 16 unauthenticated
 * connections are ever open. */
TEST_T(security_preauth_flood_never_locks_out_token_holders, 60) {
    test_server ts;
    const char *const args[] = {"--auth-token-file",
                                sec_token_file(),
                                "--max-conns",
                                "16",
                                "--max-preauth-conns",
                                "16",
                                "--idle-timeout",
                                "30",
                                "--threads",
                                "2",
                                "--log-level",
                                "error",
                                NULL};
    server_start(&ts, args);
    char url[128];
    snprintf(url, sizeof(url), "%s?token=t0k-sec&timeout_ms=5000", ts.url);

    /* Eight token holders stay connected through everything (the other 8 slots are for the
     * sessions below: a closed session's slot is free once tided has seen the close). */
    tide_store *held[8];
    for (int i = 0; i < 8; i++) {
        CHECK_MSG(tide_open(url, &held[i]) == 0, "holder %d: %s", i, tide_errmsg(NULL));
        CHECK_EQ(tide_put(held[i], "held", 4, "h", 1), 0);
    }

    /* 300 silent connections, held. */
    enum { NSILENT = 300 };
    static int silent[NSILENT];
    for (int i = 0; i < NSILENT; i++) {
        silent[i] = sec_dial(ts.port);
        CHECK_MSG(silent[i] >= 0, "connect %d: %s", i, strerror(errno));
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < 20; i++) {
        int rc = sec_token_session(url, i);
        CHECK_MSG(rc == 0, "session %d after %d silent connections: %s (%s)", i, NSILENT,
                  tide_errname(rc), tide_errmsg(NULL));
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double held_ms = sec_ms(&t0, &t1) / 20;
    long long pre = server_metric(ts.metrics_port, "tide_connections_preauth");
    CHECK_MSG(pre >= 0 && pre <= 16, "%lld unauthenticated connections open (budget 16)", pre);
    long long cut_held = server_metric(ts.metrics_port, "tide_connections_preauth_cut_total");
    CHECK_MSG(cut_held >= NSILENT - 16, "only %lld cut", cut_held);

    /* The reconnecting flood, from another process, bounded to 3 s. */
    int pfd[2];
    CHECK_EQ(pipe(pfd), 0);
    pid_t flooder = fork();
    CHECK(flooder >= 0);
    if (flooder == 0) {
        close(pfd[0]);
        int ring[64];
        for (int i = 0; i < 64; i++)
            ring[i] = -1;
        long made = 0;
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        do {
            int k = (int)(made % 64);
            if (ring[k] >= 0) close(ring[k]);
            ring[k] = sec_dial(ts.port);
            made += ring[k] >= 0;
            clock_gettime(CLOCK_MONOTONIC, &b);
        } while (sec_ms(&a, &b) < 3000);
        ssize_t w = write(pfd[1], &made, sizeof(made));
        (void)w;
        _exit(0);
    }
    close(pfd[1]);
    int sessions = 0, failed = 0, st = 0;
    double worst = 0;
    while (waitpid(flooder, &st, WNOHANG) == 0) {
        clock_gettime(CLOCK_MONOTONIC, &t0);
        int rc = sec_token_session(url, 100 + sessions);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if (sec_ms(&t0, &t1) > worst) worst = sec_ms(&t0, &t1);
        sessions++;
        if (rc) {
            failed++;
            printf("    session %d during the flood: %s (%s)\n", sessions, tide_errname(rc),
                   tide_errmsg(NULL));
        }
        pre = server_metric(ts.metrics_port, "tide_connections_preauth");
        CHECK_MSG(pre <= 16, "%lld unauthenticated connections open (budget 16)", pre);
    }
    long made = 0;
    CHECK_EQ(read(pfd[0], &made, sizeof(made)), (ssize_t)sizeof(made));
    close(pfd[0]);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    long long cut = server_metric(ts.metrics_port, "tide_connections_preauth_cut_total");

    /* The held token holders still work; 8 more fill --max-conns (once tided has seen the
     * sessions' closes), and one more is refused with the limit named. */
    for (int i = 0; i < 8; i++)
        CHECK_EQ(tide_exists(held[i], "held", 4), 1);
    struct timespec settle = {0, 300000000};
    nanosleep(&settle, NULL);
    tide_store *more[8], *extra = NULL;
    for (int i = 0; i < 8; i++)
        CHECK_MSG(tide_open(url, &more[i]) == 0, "authenticated connection %d: %s", 9 + i,
                  tide_errmsg(NULL));
    int rc = tide_open(url, &extra);
    CHECK_MSG(rc == TIDE_ELIMIT, "17th authenticated connection: %d (%s)", rc, tide_errmsg(NULL));
    CHECK_CONTAINS(tide_errmsg(NULL), "--max-conns");
    /* No token: refused as ever. */
    CHECK_EQ(tide_open(ts.url, &extra), TIDE_EAUTH);
    for (int i = 0; i < 8; i++)
        tide_close(more[i]);
    for (int i = 0; i < 8; i++)
        tide_close(held[i]);
    for (int i = 0; i < NSILENT; i++)
        close(silent[i]);
    printf("    %d silent connections held: 20 sessions served (%.1f ms each), %lld cut; "
           "flood of %ld connections in 3 s: %d of %d sessions served (slowest %.1f ms), "
           "%lld cut in all; pre-auth connections never above 16\n",
           NSILENT, held_ms, cut_held, made, sessions - failed, sessions, worst, cut);
    CHECK_MSG(failed == 0, "%d of %d token-holder sessions failed during the flood", failed,
              sessions);
    CHECK(sessions >= 5);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}

/* The RESP port shares the budget: silent RESP connections are cut oldest first too, and a
 * Redis client with the token (AUTH) is served past them; so is a native token holder. */
TEST(security_preauth_budget_covers_the_resp_port) {
    int rport = test_free_port();
    char rp[16];
    snprintf(rp, sizeof(rp), "%d", rport);
    test_server ts;
    const char *const args[] = {"--auth-token-file",
                                sec_token_file(),
                                "--resp-port",
                                rp,
                                "--max-conns",
                                "4",
                                "--max-preauth-conns",
                                "4",
                                "--log-level",
                                "error",
                                NULL};
    server_start(&ts, args);
    int silent[40];
    for (int i = 0; i < 40; i++) {
        silent[i] = sec_dial(i % 2 ? rport : ts.port);
        CHECK(silent[i] >= 0);
    }
    int fd = server_connect(rport, 5);
    static const char auth[] = "*2\r\n$4\r\nAUTH\r\n$7\r\nt0k-sec\r\n*1\r\n$4\r\nPING\r\n";
    sec_send(fd, auth, sizeof(auth) - 1);
    char got[64] = {0};
    size_t have = 0;
    while (have < 12) {
        ssize_t r = recv(fd, got + have, sizeof(got) - 1 - have, 0);
        CHECK_MSG(r > 0, "RESP client cut after %zu bytes: '%s'", have, got);
        have += (size_t)r;
    }
    CHECK_STR(got, "+OK\r\n+PONG\r\n");
    char url[128];
    snprintf(url, sizeof(url), "%s?token=t0k-sec", ts.url);
    CHECK_EQ(sec_token_session(url, 1), 0);
    CHECK(server_metric(ts.metrics_port, "tide_connections_preauth") <= 4);
    CHECK(server_metric(ts.metrics_port, "tide_connections_preauth_cut_total") >= 36);
    close(fd);
    for (int i = 0; i < 40; i++)
        close(silent[i]);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}
