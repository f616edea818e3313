/*
 * test_promises.c — behaviours docs/ARCHITECTURE.md promises that no other test would miss if
 * the line keeping them were deleted: tided's SIGTERM finishes a PUT whose value is still
 * arriving, and a tide:// call that fails on a kept connection before any reply byte is
 * retried once on a fresh connection. Each test was checked against the one-line break it
 * guards (tests/README.md).
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "proto/frame.h"
#include "server_util.h"
#include "tide.h"

static void sleep_ms(long ms) {
    struct timespec d = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&d, NULL);
}

static void send_all(int fd, const void *p, size_t n) {
    CHECK_EQ(send(fd, p, n, MSG_NOSIGNAL), (ssize_t)n);
}

/* SIGTERM while a PUT's value is half sent: tided stops accepting, but the request it has
 * begun to read is finished and answered (the drain), and tided then exits 0. The value is
 * acknowledged only because it was stored. */
TEST_T(server_sigterm_finishes_a_put_whose_value_is_arriving, 30) {
    test_server ts;
    const char *const args[] = {"--log-level", "warn", NULL};
    server_start(&ts, args);
    size_t vlen = 1 << 20;
    uint8_t *val = malloc(vlen);
    CHECK(val != NULL);
    for (size_t i = 0; i < vlen; i++)
        val[i] = (uint8_t)(i * 13 + 1);
    int fd = server_put_half_sent(ts.port, "draining", val, vlen);
    sleep_ms(200); /* tided has read the head and is inside the body */
    CHECK_EQ(kill(ts.pid, SIGTERM), 0);
    sleep_ms(300); /* it has seen the signal: no new connection, this one drains */
    send_all(fd, val + vlen / 2, vlen - vlen / 2);
    uint8_t reply[FRAME_HDR_SIZE + 64];
    size_t got = 0;
    while (got < FRAME_HDR_SIZE + 4) {
        ssize_t r = recv(fd, reply + got, sizeof(reply) - got, 0);
        CHECK_MSG(r > 0,
                  "tided closed the connection (%s) instead of finishing the PUT it had "
                  "begun to read",
                  r < 0 ? strerror(errno) : "EOF");
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
    int st = server_stop(&ts, 0); /* already stopping: wait for it */
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "tided's exit status %d", st);
    free(val);
}

/* A tide:// handle holds a kept connection to a tided that is then restarted on the same
 * port: the next call fails on the old connection before any reply byte, and is retried
 * once on a fresh one, so the caller sees success, served by the new tided. */
TEST_T(node_client_retries_once_on_a_fresh_connection, 60) {
    test_server a, b;
    const char *const args[] = {"--log-level", "warn", NULL};
    server_start(&a, args);
    char url[128], port[16];
    snprintf(url, sizeof(url), "%s", a.url);
    snprintf(port, sizeof(port), "%d", a.port);
    tide_store *s;
    CHECK_MSG(tide_open(url, &s) == 0, "%s", tide_errmsg(NULL));
    CHECK_EQ(tide_put(s, "before", 6, "v1", 2), 0); /* a connection is now kept */
    CHECK_EQ(server_stop(&a, SIGTERM), 0);
    const char *const again[] = {"--log-level", "warn", "--port", port, NULL};
    server_start(&b, again);
    CHECK_EQ(b.port, a.port);
    for (int i = 0; i < 3; i++) {
        char key[16];
        snprintf(key, sizeof(key), "after%d", i);
        int rc = tide_put(s, key, strlen(key), "v2", 2);
        CHECK_MSG(rc == 0, "put %d after the restart: %s (%s)", i, tide_strerror(rc),
                  tide_errmsg(s));
    }
    uint8_t buf[8];
    size_t len = 0;
    CHECK_EQ(tide_get(s, "after0", 6, buf, sizeof(buf), &len), 0);
    CHECK_EQ(tide_get(s, "before", 6, buf, sizeof(buf), &len), TIDE_ENOTFOUND);
    tide_close(s);
    CHECK_EQ(server_stop(&b, SIGTERM), 0);
}
