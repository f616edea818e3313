/*
 * test_memory_meta.c — tided's heap is bounded by its metadata budget, not by the number
 * of objects: a 64 MiB pool filled with 1-byte values under 256-byte keys (the most
 * metadata a pool can hold) must not grow tided's anonymous memory by more than the
 * default budget (capacity/2) and a little slack, and the newest objects must all be
 * there (eviction is what makes room). Under LRU the budget is the whole bound; under the
 * default policy, adapt, its ghost of recent evictions (64 to 128 bytes per object held:
 * 16 to 32 four-byte entries) and its miniature simulations (a fixed 320 KiB) come on top,
 * as docs/TIDED.md says.
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

/* Fill a 64 MiB tided (policy: NULL for the default) and check its heap grew by at most the
 * budget, plus per_obj bytes per object held and fixed_kib, plus slack. */
static void tiny_objects(const char *policy, long per_obj, long fixed_kib) {
    const long budget_kib = 32 * 1024, slack_kib = 4 * 1024;
    test_server ts;
    const char *const with[] = {"--capacity",  "64MiB", "--policy", policy,
                                "--log-level", "warn",  NULL};
    const char *const dflt[] = {"--capacity", "64MiB", "--log-level", "warn", NULL};
    server_start(&ts, policy ? with : dflt);
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
    /* Under LRU the newest objects are all there: what made room was eviction of the
     * oldest. (adapt, like chain, evicts a saved batch from its last key, so the newest keys
     * of each batch are its first victims: the last batch's first key is the check there.) */
    char k[KLEN];
    for (int i = NPUTS - (policy ? 1000 : BATCH); i < NPUTS - (policy ? 0 : BATCH - 1); i++) {
        key_of(k, i);
        CHECK_MSG(tide_exists(s, k, KLEN) == 1, "newest key %d is gone", i);
    }
    long grew = end - start;
    long bound_kib = budget_kib + fixed_kib + (long)((uint64_t)per_obj * st.objects / 1024);
    printf("    policy %s: %d puts of 1-byte values under %d-byte keys into a 64 MiB pool: %llu "
           "objects kept, %llu evicted; heap +%ld KiB (%.0f bytes an object), meta_bytes %llu "
           "KiB; budget %ld KiB, bound %ld KiB%s\n",
           policy ? policy : "default", NPUTS, KLEN, (unsigned long long)st.objects,
           (unsigned long long)st.evictions, grew,
           st.objects ? (double)grew * 1024 / (double)st.objects : 0.0,
           (unsigned long long)st.meta_bytes / 1024, budget_kib, bound_kib,
           SAN_BUILD ? "; sanitizer build: heap bound not applied" : "");
    CHECK(st.evictions > 0);
    CHECK_MSG(st.meta_bytes <= (uint64_t)(bound_kib + slack_kib) * 1024,
              "meta_bytes %llu over the budget", (unsigned long long)st.meta_bytes);
    if (!SAN_BUILD)
        CHECK_MSG(grew <= bound_kib + slack_kib, "tided's heap grew %ld KiB (bound %ld KiB)", grew,
                  bound_kib);
    CHECK_CONTAINS(metrics_text(ts.metrics_port), "\ntide_metadata_budget_bytes 33554432\n");
    tide_close(s);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}

TEST_T(memory_metadata_within_budget_for_tiny_objects, 120) {
    tiny_objects("lru", 0, 0);
}

/* The default policy's ghost (at most 32 entries of 4 bytes per object held) and miniatures
 * (320 KiB) on top of the budget. */
TEST_T(memory_metadata_within_budget_for_tiny_objects_default_policy, 120) {
    tiny_objects(NULL, 128, 320);
}
