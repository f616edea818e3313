/*
 * test_faults.c — clients that die mid-put, and tided's memory under load, with real
 * processes:
 *   - tide://: a raw client sends a PUT head and half its value, is SIGKILLed: the key is
 *     never visible, the reservation and its pool space are given back;
 *   - cluster: a client process putting through a 3-node R=2 cluster is SIGKILLed
 *     mid-stream: every acknowledged key reads back right, the one in flight is either
 *     whole or absent, and no node keeps a reservation;
 *   (unix:// is covered by unix_kill_mid_put; mem:// lives inside the process that dies,
 *   so nothing outlives it to be seen half-written)
 *   - RSS: tided's resident memory stays within its pool plus a bounded overhead under a
 *     4x overfill through several connections (the overhead is printed);
 *   - a slow reader that pipelines GETs and never reads neither grows tided's memory nor
 *     keeps its connection past the idle timeout, and its pins are released;
 *   - idle connections give back the input buffer a large key section grew.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cluster_util.h"
#include "common/prng.h"
#include "harness.h"
#include "proto/frame.h"
#include "tide.h"

static void pause_ms(unsigned ms) {
    struct timespec d = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&d, NULL);
}

/* Wait (bounded) until the server reports no reservation. */
static void wait_no_reservation(tide_store *s, const char *who) {
    tide_stats st = {0};
    for (int i = 0; i < 250; i++) { /* up to 5 s */
        CHECK_EQ(tide_stats_get(s, &st, sizeof(st)), 0);
        if (st.reserved == 0) return;
        pause_ms(20);
    }
    test_fail(__FILE__, __LINE__, "%s still holds %llu reservations", who,
              (unsigned long long)st.reserved);
}

TEST_T(faults_tcp_client_killed_mid_put, 60) {
    test_server ts;
    const char *const args[] = {"--capacity", "64MiB", "--log-level", "warn", NULL};
    server_start(&ts, args);
    tide_store *s;
    CHECK_EQ(tide_open(ts.url, &s), 0);
    tide_stats base;
    CHECK_EQ(tide_stats_get(s, &base, sizeof(base)), 0);

    size_t vlen = 1 << 20;
    uint8_t *val = malloc(vlen);
    for (size_t i = 0; i < vlen; i++)
        val[i] = (uint8_t)(i * 31 + 7);
    int sync[2];
    CHECK_EQ(pipe(sync), 0);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = server_connect(ts.port, 5);
        uint8_t head[512];
        size_t hlen;
        tide_key k = {"half", 4};
        tide_iov v = {val, vlen};
        if (frame_encode_put(head, sizeof(head), &hlen, 1, &k, 1, &v, NULL, NULL, NULL)) _exit(2);
        if (send(fd, head, hlen, MSG_NOSIGNAL) != (ssize_t)hlen) _exit(3);
        if (send(fd, val, vlen / 2, MSG_NOSIGNAL) != (ssize_t)(vlen / 2)) _exit(4);
        if (write(sync[1], "x", 1) != 1) _exit(5);
        pause();
        _exit(0);
    }
    close(sync[1]);
    char c;
    CHECK_EQ(read(sync[0], &c, 1), 1);
    /* The server holds the reservation while the value arrives. */
    tide_stats st = {0};
    for (int i = 0; i < 250 && st.reserved == 0; i++) {
        CHECK_EQ(tide_stats_get(s, &st, sizeof(st)), 0);
        if (!st.reserved) pause_ms(20);
    }
    CHECK_MSG(st.reserved == 1, "no reservation while the value was arriving");
    CHECK_EQ(tide_exists(s, "half", 4), 0); /* not visible mid-put */
    CHECK_EQ(kill(pid, SIGKILL), 0);
    waitpid(pid, NULL, 0);
    wait_no_reservation(s, "tided");
    CHECK_EQ(tide_exists(s, "half", 4), 0);
    CHECK_EQ(tide_stats_get(s, &st, sizeof(st)), 0);
    CHECK_EQ(st.used_bytes, base.used_bytes); /* the space came back */
    CHECK_EQ(st.objects, base.objects);
    /* The key can be stored whole afterwards and reads back right. */
    CHECK_EQ(tide_put(s, "half", 4, val, vlen), 0);
    uint8_t *out = malloc(vlen);
    size_t got;
    CHECK_EQ(tide_get(s, "half", 4, out, vlen, &got), 0);
    CHECK(got == vlen && memcmp(out, val, vlen) == 0);
    free(out);
    free(val);
    close(sync[0]);
    tide_close(s);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}

/* Value of cluster mid-put key i: 256 KiB derived from i. */
static void midput_value(uint8_t *v, size_t len, int i) {
    uint64_t x = 0x51ed2705u + (uint64_t)i * 0x9e3779b97f4a7c15ull;
    for (size_t j = 0; j < len; j++) {
        v[j] = (uint8_t)prng_next(&x);
    }
}

TEST_T(faults_cluster_client_killed_mid_put, 60) {
    test_server ts[3];
    cluster_start_nodes(ts, 3, NULL);
    char url[512];
    cluster_url(url, sizeof(url), ts, 3, "replicas=2&timeout_ms=2000");
    const size_t vlen = 256 << 10;
    int acks[2];
    CHECK_EQ(pipe(acks), 0);
    pid_t pid = fork();
    if (pid == 0) {
        tide_store *w;
        if (tide_open(url, &w) != 0) _exit(2);
        uint8_t *v = malloc(vlen);
        for (int i = 0; i < 100000; i++) {
            char key[32];
            snprintf(key, sizeof(key), "mp-%d", i);
            midput_value(v, vlen, i);
            if (tide_put(w, key, strlen(key), v, vlen) != 0) _exit(3);
            if (write(acks[1], &i, sizeof(i)) != sizeof(i)) _exit(4);
        }
        _exit(0);
    }
    close(acks[1]);
    int last = -1, i;
    for (int n = 0; n < 20 && read(acks[0], &i, sizeof(i)) == sizeof(i); n++)
        last = i;
    CHECK_MSG(last >= 0, "the writer acknowledged nothing");
    pause_ms(37); /* land somewhere inside a later put */
    CHECK_EQ(kill(pid, SIGKILL), 0);
    waitpid(pid, NULL, 0);
    while (read(acks[0], &i, sizeof(i)) == sizeof(i))
        last = i; /* acks sent before death */
    close(acks[0]);

    tide_store *s;
    CHECK_EQ(tide_open(url, &s), 0);
    uint8_t *want = malloc(vlen), *got = malloc(vlen);
    int partial_absent = 0, partial_whole = 0;
    for (int k = 0; k <= last + 4; k++) {
        char key[32];
        snprintf(key, sizeof(key), "mp-%d", k);
        size_t len = 0;
        int rc = tide_get(s, key, strlen(key), got, vlen, &len);
        if (k <= last) {
            CHECK_MSG(rc == 0, "acknowledged %s unreadable: %s", key, tide_errname(rc));
        } else if (rc == TIDE_ENOTFOUND) {
            partial_absent++;
            continue;
        } else {
            CHECK_MSG(rc == 0, "%s: %s", key, tide_errname(rc));
            partial_whole++;
        }
        midput_value(want, vlen, k);
        CHECK_MSG(len == vlen && memcmp(got, want, vlen) == 0, "%s: wrong bytes", key);
    }
    printf("    %d puts acknowledged before the kill; after it: %d whole, %d absent\n", last + 1,
           partial_whole, partial_absent);
    for (int n = 0; n < 3; n++) {
        tide_store *node;
        CHECK_EQ(tide_open(ts[n].url, &node), 0);
        wait_no_reservation(node, ts[n].url);
        tide_close(node);
    }
    free(want);
    free(got);
    tide_close(s);
    for (int n = 0; n < 3; n++)
        CHECK_EQ(server_stop(&ts[n], SIGTERM), 0);
}

/* ---- memory -------------------------------------------------------------------------- */

typedef struct overfill {
    const char *url;
    int id, nkeys;
    size_t vlen;
    int failed;
    atomic_int done;
} overfill;

static void *overfill_main(void *arg) {
    overfill *o = arg;
    tide_store *s;
    if (tide_open(o->url, &s) != 0) {
        o->failed = -1;
        atomic_store(&o->done, 1);
        return NULL;
    }
    uint8_t *v = malloc(o->vlen);
    memset(v, o->id, o->vlen);
    for (int i = 0; i < o->nkeys; i++) {
        char key[32];
        snprintf(key, sizeof(key), "of-%d-%d", o->id, i);
        v[0] = (uint8_t)i;
        if (tide_put(s, key, strlen(key), v, o->vlen) != 0) o->failed++;
    }
    free(v);
    tide_close(s);
    atomic_store(&o->done, 1);
    return NULL;
}

TEST_T(memory_rss_within_pool_plus_overhead_under_overfill, 120) {
    const long cap_kib = 64 * 1024, bound_kib = 48 * 1024;
    test_server ts;
    const char *const args[] = {"--capacity",  "64MiB", "--threads", "2",
                                "--log-level", "warn",  NULL};
    server_start(&ts, args);
    long start = server_status_kib(ts.pid, "VmRSS");
    CHECK(start > 0);
    /* 4 connections x 64 values of 1 MiB = 256 MiB: four times the pool. */
    overfill o[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        o[i] = (overfill){ts.url, i, 64, 1 << 20, 0, 0};
        pthread_create(&th[i], NULL, overfill_main, &o[i]);
    }
    long peak = start;
    for (int t = 0; t < 6000; t++) { /* sample while it runs (bounded: 60 s) */
        long r = server_status_kib(ts.pid, "VmRSS");
        if (r > peak) peak = r;
        int done = 1;
        for (int i = 0; i < 4; i++)
            done &= atomic_load(&o[i].done);
        if (done) break;
        pause_ms(10);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK_EQ(o[i].failed, 0);
    }
    tide_store *s;
    CHECK_EQ(tide_open(ts.url, &s), 0);
    tide_stats st;
    CHECK_EQ(tide_stats_get(s, &st, sizeof(st)), 0);
    CHECK(st.evictions > 0);
    CHECK(st.used_bytes <= st.capacity_bytes);
    long end = server_status_kib(ts.pid, "VmRSS");
    if (end > peak) peak = end;
    long overhead = peak - cap_kib;
    printf("    RSS: %ld KiB at start, peak %ld KiB for a %ld KiB pool after 256 MiB of puts "
           "(%llu evictions, %llu objects): overhead %+ld KiB (bound %ld KiB)%s\n",
           start, peak, cap_kib, (unsigned long long)st.evictions, (unsigned long long)st.objects,
           overhead, bound_kib,
           SAN_BUILD ? "; sanitizer build: shadow memory included, bound not applied" : "");
    if (!SAN_BUILD)
        CHECK_MSG(overhead <= bound_kib, "tided RSS %ld KiB: %ld KiB over its pool", peak,
                  overhead);
    tide_close(s);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}

TEST_T(memory_slow_reader_is_bounded_and_cut, 60) {
    test_server ts;
    const char *const args[] = {"--capacity", "64MiB", "--idle-timeout", "2", "--log-level",
                                "error",      NULL};
    server_start(&ts, args);
    tide_store *s;
    CHECK_EQ(tide_open(ts.url, &s), 0);
    size_t vlen = 1 << 20;
    uint8_t *v = calloc(1, vlen);
    CHECK_EQ(tide_put(s, "big", 3, v, vlen), 0);
    free(v);
    long before = server_status_kib(ts.pid, "VmRSS");

    /* Pipeline GETs of the 1 MiB value and never read a byte of the replies. */
    int fd = server_connect(ts.port, 5);
    int small = 4096;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
    fcntl(fd, F_SETFL, O_NONBLOCK);
    uint8_t f[128];
    size_t len;
    tide_key k = {"big", 3};
    uint64_t capv = UINT64_MAX;
    CHECK_EQ(frame_encode_get(f, sizeof(f), &len, 1, &k, &capv, 1), 0);
    long sent = 0;
    int blocked_ms = 0;
    double blocked_at = 0; /* when the sends last stopped: tided had stopped reading by then */
    for (int i = 0; i < 1000000 && blocked_ms < 1000; i++) {
        ssize_t w = send(fd, f, len, MSG_NOSIGNAL);
        if (w == (ssize_t)len) {
            sent++;
            blocked_ms = 0;
        } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (blocked_ms == 0) blocked_at = test_now_ms();
            pause_ms(10);
            blocked_ms += 10;
        } else {
            blocked_at = test_now_ms(); /* the buffers are full now, or it was cut */
            break;                      /* a partial frame or an error: stop here */
        }
    }
    long during = server_status_kib(ts.pid, "VmRSS");
    tide_stats st;
    CHECK_EQ(tide_stats_get(s, &st, sizeof(st)), 0);
    printf("    slow reader: %ld GETs of 1 MiB pipelined (%ld MiB of replies asked for); "
           "tided RSS %ld -> %ld KiB; %llu pins held\n",
           sent, sent, before, during, (unsigned long long)st.pinned);
    CHECK_MSG(sent > 64, "the server stopped reading too early (%ld GETs)", sent);
    /* Replies are queued as references to pool memory, up to 64 MiB: RSS does not follow
     * the replies asked for. */
    if (!SAN_BUILD) CHECK_MSG(during - before < 16 * 1024, "RSS grew by %ld KiB", during - before);
    /* The connection is cut at the idle timeout (2 s) and its pins are released: within
     * SERVER_CUT_BOUND_MS of the sends blocking, since tided's last progress on it came
     * before that. */
    int cut = 0;
    for (int i = 0; i < 400 && !cut; i++) { /* bounded: 8 s */
        struct pollfd p = {fd, POLLRDHUP, 0};
        CHECK(poll(&p, 1, 20) >= 0); /* the close shows without reading the replies */
        CHECK_EQ(tide_stats_get(s, &st, sizeof(st)), 0);
        cut = (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) && st.pinned == 0;
    }
    double cut_ms = test_now_ms() - blocked_at;
    CHECK_MSG(cut, "the slow reader was not cut (%llu pins held)", (unsigned long long)st.pinned);
    printf("    slow reader cut %.0f ms after its sends blocked (idle timeout 2 s)\n", cut_ms);
    CHECK_MSG(cut_ms <= SERVER_CUT_BOUND_MS(2),
              "the slow reader was cut %.0f ms after its sends blocked (idle timeout 2 s, bound "
              "%.0f ms)",
              cut_ms, SERVER_CUT_BOUND_MS(2));
    close(fd);
    tide_close(s);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}

/* Connections that sent a maximal key section (4096 keys of 256 bytes, ~1 MiB) and then
 * sit idle give that input buffer back: tided's RSS returns near where it started. */
TEST_T(memory_idle_connections_give_back_their_buffers, 60) {
    test_server ts;
    const char *const args[] = {"--capacity", "16MiB", "--log-level", "error", NULL};
    server_start(&ts, args);
    enum { NCONN = 40, NKEYS = 4096 };
    static char names[NKEYS][256];
    static tide_key keys[NKEYS];
    for (int i = 0; i < NKEYS; i++) {
        memset(names[i], 'a' + i % 26, sizeof(names[i]));
        snprintf(names[i], 16, "%d", i);
        names[i][strlen(names[i])] = '-';
        keys[i] = (tide_key){names[i], sizeof(names[i])};
    }
    size_t cap = FRAME_HDR_SIZE + (size_t)NKEYS * 258, len;
    uint8_t *frame = malloc(cap);
    CHECK_EQ(frame_encode_keys(frame, cap, &len, FRAME_OP_EXISTS, 1, keys, NKEYS), 0);
    long start = server_status_kib(ts.pid, "VmRSS");
    int fds[NCONN];
    uint8_t reply[FRAME_HDR_SIZE + NKEYS];
    for (int c = 0; c < NCONN; c++) {
        fds[c] = server_connect(ts.port, 5);
        CHECK_EQ(send(fds[c], frame, len, MSG_NOSIGNAL), (ssize_t)len);
        size_t got = 0;
        while (got < sizeof(reply)) { /* the reply: a header and one byte a key */
            ssize_t r = recv(fds[c], reply + got, sizeof(reply) - got, 0);
            CHECK(r > 0);
            got += (size_t)r;
        }
    }
    long peak = server_status_kib(ts.pid, "VmRSS"), now = peak;
    for (int i = 0; i < 150 && now - start > 16 * 1024; i++) { /* bounded: 3 s */
        pause_ms(20);
        now = server_status_kib(ts.pid, "VmRSS");
    }
    printf("    %d idle connections after a 1 MiB key section each: RSS %ld -> %ld KiB, then "
           "%ld KiB once idle\n",
           NCONN, start, peak, now);
    if (!SAN_BUILD)
        CHECK_MSG(now - start <= 16 * 1024, "idle connections still hold %ld KiB", now - start);
    for (int c = 0; c < NCONN; c++)
        close(fds[c]);
    free(frame);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}
