/*
 * test_memory_meta.c — tided's heap is bounded by its metadata budget, not by the number
 * of objects: a 64 MiB pool filled with 1-byte values under 256-byte keys (the most
 * metadata a pool can hold) must not grow tided's anonymous memory by more than the
 * default budget (capacity/2) and a little slack, and the newest objects must all be
 * there (eviction, in LRU order here, is what makes room).
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"
#include "server_util.h"
#include "tide.h"

/* The body of GET /metrics. */
static const char *metrics_text(int port) {
    static char buf[1 << 18];
    int fd = server_connect(port, 5);
    static const char req[] = "GET /metrics HTTP/1.1\r\n\r\n";
    CHECK_EQ(send(fd, req, sizeof(req) - 1, MSG_NOSIGNAL), (ssize_t)sizeof(req) - 1);
    size_t have = 0;
    for (ssize_t r;
         have < sizeof(buf) - 1 && (r = recv(fd, buf + have, sizeof(buf) - 1 - have, 0)) > 0;)
        have += (size_t)r;
    buf[have] = '\0';
    close(fd);
    return buf;
}

enum { KLEN = 256, BATCH = 512, NPUTS = 300 * 1024 };

static void key_of(char *k, int i) {
    memset(k, 'm', KLEN);
    snprintf(k, KLEN, "meta/%08d/", i);
    k[strlen(k)] = 'm'; /* the NUL snprintf left becomes key bytes again */
}

TEST_T(memory_metadata_within_budget_for_tiny_objects, 120) {
    const long budget_kib = 32 * 1024, slack_kib = 4 * 1024;
    test_server ts;
    const char *const args[] = {"--capacity",  "64MiB", "--policy", "lru",
                                "--log-level", "warn",  NULL};
    server_start(&ts, args);
    tide_store *s;
    CHECK_EQ(tide_open(ts.url, &s), 0);
    CHECK_EQ(tide_put(s, "warm", 4, "x", 1), 0); /* the connection's buffers, before the start */
    long start = server_status_kib(ts.pid, "RssAnon");
    CHECK(start > 0);
    static char keys[BATCH][KLEN];
    tide_key tk[BATCH];
    tide_iov iov[BATCH];
    int res[BATCH];
    for (int i = 0; i < NPUTS; i += BATCH) {
        for (int j = 0; j < BATCH; j++) {
            key_of(keys[j], i + j);
            tk[j] = (tide_key){keys[j], KLEN};
            iov[j] = (tide_iov){"v", 1};
        }
        CHECK_MSG(tide_put_many(s, tk, BATCH, iov, NULL, res) >= 0, "%s", tide_errmsg(s));
        for (int j = 0; j < BATCH; j++)
            CHECK_MSG(res[j] == 0, "put %d: %s", i + j, tide_strerror(res[j]));
    }
    long end = server_status_kib(ts.pid, "RssAnon");
    tide_stats st;
    CHECK_EQ(tide_stats_get(s, &st, sizeof(st)), 0);
    /* The newest objects are all there: what made room was eviction of the oldest. */
    char k[KLEN];
    for (int i = NPUTS - 1000; i < NPUTS; i++) {
        key_of(k, i);
        CHECK_MSG(tide_exists(s, k, KLEN) == 1, "newest key %d is gone", i);
    }
    long grew = end - start;
    printf("    %d puts of 1-byte values under %d-byte keys into a 64 MiB pool: %llu objects "
           "kept, %llu evicted; heap +%ld KiB (%.0f bytes an object), meta_bytes %llu KiB; "
           "budget %ld KiB%s\n",
           NPUTS, KLEN, (unsigned long long)st.objects, (unsigned long long)st.evictions, grew,
           st.objects ? (double)grew * 1024 / (double)st.objects : 0.0,
           (unsigned long long)st.meta_bytes / 1024, budget_kib,
           SAN_BUILD ? "; sanitizer build: heap bound not applied" : "");
    CHECK(st.evictions > 0);
    CHECK_MSG(st.meta_bytes <= (uint64_t)(budget_kib + slack_kib) * 1024,
              "meta_bytes %llu over the budget", (unsigned long long)st.meta_bytes);
    if (!SAN_BUILD)
        CHECK_MSG(grew <= budget_kib + slack_kib, "tided's heap grew %ld KiB (budget %ld KiB)",
                  grew, budget_kib);
    CHECK_CONTAINS(metrics_text(ts.metrics_port), "\ntide_metadata_budget_bytes 33554432\n");
    tide_close(s);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}
