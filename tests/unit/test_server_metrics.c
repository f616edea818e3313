/*
 * test_server_metrics.c — tided's Prometheus text (src/server/metrics.c) is rendered in one
 * pass into a buffer that grows with it, while the I/O workers keep counting: the length it
 * returns is the text's, the text is whole, and counters that grow while it renders (the
 * case that once made /metrics send bytes past its buffer, found by ASan under a
 * connection flood) change nothing of that.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "server/metrics.h"
#include "tide.h"

static void check_text(const char *text, size_t len) {
    CHECK(text != NULL);
    CHECK_EQ(strlen(text), len);
    CHECK(len > 0 && text[len - 1] == '\n');
    CHECK_CONTAINS(text, "# TYPE tide_requests_total counter\n");
    CHECK_CONTAINS(text, "tide_store_bytes_out_total ");
}

TEST(metrics_render_grows_past_its_first_buffer) {
    static metrics m;
    memset(&m, 0, sizeof(m));
    tide_stats st;
    memset(&st, 0, sizeof(st));
    size_t len0 = 0;
    char *small = metrics_render(&m, &st, &len0);
    check_text(small, len0);
    /* Every counter at its widest: the text grows by many digits a line. */
    for (int op = 0; op < MOP_COUNT; op++) {
        for (int s = 0; s < MST_COUNT; s++)
            atomic_store(&m.ops[op][s], UINT64_MAX / 3);
        atomic_store(&m.keys[op], UINT64_MAX / 3);
        for (int b = 0; b <= METRICS_NBUCKETS; b++)
            atomic_store(&m.latency[op].count[b], UINT64_MAX / 1000);
    }
    st.bytes_out = UINT64_MAX;
    size_t len1 = 0;
    char *big = metrics_render(&m, &st, &len1);
    check_text(big, len1);
    CHECK(len1 > len0 + 1000);
    CHECK(len1 > 16384); /* past the first buffer */
    CHECK_CONTAINS(big, "tide_store_bytes_out_total 18446744073709551615\n");
    free(small);
    free(big);
}

static atomic_int stop;

static void *count_away(void *arg) {
    metrics *m = arg;
    uint64_t step = 1;
    while (!atomic_load(&stop)) {
        for (int op = 0; op < MOP_COUNT; op++)
            metrics_op_done(m, op, MST_OK, step, step * 1000);
        step = step * 3 + 1; /* ever more digits, then wrapping */
    }
    return NULL;
}

TEST(metrics_render_while_counters_move) {
    static metrics m;
    memset(&m, 0, sizeof(m));
    tide_stats st;
    memset(&st, 0, sizeof(st));
    pthread_t t;
    atomic_store(&stop, 0);
    CHECK_EQ(pthread_create(&t, NULL, count_away, &m), 0);
    for (int i = 0; i < 2000; i++) {
        size_t len = 0;
        char *text = metrics_render(&m, &st, &len);
        check_text(text, len);
        free(text);
    }
    atomic_store(&stop, 1);
    pthread_join(t, NULL);
}
