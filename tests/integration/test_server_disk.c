/*
 * test_server_disk.c — tided with an SSD tier, for real: SIGKILL at random points while it
 * spills and every write it reported before the kill served after the restart (never a
 * wrong byte), the tier's figures in /metrics and `tide stat`, a disk that refuses writes
 * (RLIMIT_FSIZE) with the node serving from memory, and the flags.
 */
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "server_util.h"
#include "tide.h"

#define VLEN (64 * 1024)

static void key_of(char *buf, size_t len, int round, int i) {
    snprintf(buf, len, "r%d/k%05d", round, i);
}

static void fill(uint8_t *v, int round, int i) {
    for (size_t j = 0; j < VLEN; j++)
        v[j] = (uint8_t)(round * 77 + i * 131 + j * 7 + (j >> 10));
}

/* 1: the value is there with every byte right; 0: a miss. Anything else fails. */
static int get_ok(tide_store *s, int round, int i) {
    static uint8_t want[VLEN], got[VLEN];
    char k[32];
    key_of(k, sizeof(k), round, i);
    size_t vlen = 0;
    int rc = tide_get(s, k, strlen(k), got, sizeof(got), &vlen);
    if (rc == TIDE_ENOTFOUND) return 0;
    CHECK_MSG(rc == 0, "get %s: %s", k, tide_strerror(rc));
    fill(want, round, i);
    CHECK_MSG(vlen == VLEN && memcmp(want, got, VLEN) == 0, "%s: wrong bytes", k);
    return 1;
}

static tide_stats stat_of(tide_store *s) {
    tide_stats st;
    CHECK_EQ(tide_stats_get(s, &st, sizeof(st)), 0);
    return st;
}

static const char *disk_dir(void) {
    static char dir[300];
    snprintf(dir, sizeof(dir), "%s/ssd", test_tmpdir());
    return dir;
}

static void start_disk(test_server *ts, const char *cap, const char *disk_cap, const char *seg,
                       const char *level) {
    static char mport[16];
    snprintf(mport, sizeof(mport), "%d", test_free_port());
    const char *const args[] = {"--capacity",
                                cap,
                                "--disk-dir",
                                disk_dir(),
                                "--disk-capacity",
                                disk_cap,
                                "--disk-segment",
                                seg,
                                "--log-level",
                                level,
                                "--metrics-port",
                                mport,
                                NULL};
    server_start(ts, args);
}

static char *slurp(const char *path) {
    static char buf[65536];
    FILE *f = fopen(path, "r");
    CHECK(f);
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

#define ROUNDS 6
#define PER_ROUND 160

/*
 * Each round: restart tided on the same directory, check every earlier round (the writes
 * it had reported before its kill must all be served; nothing may come back wrong), then
 * put a round of objects through a 2 MiB pool — so they spill — polling the count of
 * completed disk writes, and SIGKILL it at a random put (after a random pause of up to
 * 2 ms, to land inside the writer's work). With LRU and no reads in a round, objects are
 * evicted and written in put order, so "W writes completed" means keys 0..W-1 of the round.
 * Promoted objects keep their records, so reading earlier rounds writes nothing.
 */
TEST_T(server_disk_sigkill_while_spilling_loses_no_reported_write, 180) {
    unsigned seed = (unsigned)time(NULL);
    char ctx[64];
    snprintf(ctx, sizeof(ctx), "seed %u", seed);
    test_context = ctx;
    int confirmed[ROUNDS] = {0}, put_count[ROUNDS] = {0};
    uint64_t confirmed_total = 0;
    static uint8_t val[VLEN];
    for (int r = 0; r <= ROUNDS; r++) {
        test_server ts;
        start_disk(&ts, "2MiB", "256MiB", "4MiB", "warn");
        tide_store *s;
        CHECK_MSG(tide_open(ts.url, &s) == 0, "%s", tide_errmsg(NULL));
        tide_stats st = stat_of(s);
        CHECK_MSG(st.disk_objects >= confirmed_total, "round %d: %llu on disk, %llu reported", r,
                  (unsigned long long)st.disk_objects, (unsigned long long)confirmed_total);
        for (int k = 0; k < r; k++) {
            for (int i = 0; i < put_count[k]; i++) {
                int ok = get_ok(s, k, i);
                CHECK_MSG(ok || i >= confirmed[k], "round %d key %d was reported written, lost", k,
                          i);
            }
        }
        st = stat_of(s);
        CHECK_EQ(st.disk_writes, 0);
        CHECK_EQ(st.disk_checksum_errors, 0);
        if (r == ROUNDS) {
            tide_close(s);
            CHECK_EQ(server_stop(&ts, SIGTERM), 0);
            break;
        }
        int kill_at = 40 + (int)(rand_r(&seed) % (PER_ROUND - 40));
        for (int i = 0; i <= kill_at; i++) {
            char k[32];
            key_of(k, sizeof(k), r, i);
            fill(val, r, i);
            CHECK_EQ(tide_put(s, k, strlen(k), val, VLEN), 0);
            put_count[r] = i + 1;
            if (i % 4 == 3) {
                st = stat_of(s);
                CHECK_EQ(st.disk_dropped, 0);
                CHECK_EQ(st.disk_errors, 0);
                confirmed[r] = (int)st.disk_writes;
            }
        }
        struct timespec pause = {0, (long)(rand_r(&seed) % 2000) * 1000};
        nanosleep(&pause, NULL);
        server_stop(&ts, SIGKILL);
        tide_close(s);
        CHECK(confirmed[r] > 0);
        confirmed_total += (uint64_t)confirmed[r];
        if (getenv("TIDE_TEST_VERBOSE"))
            fprintf(stderr, "round %d: %d put, %d reported written, killed\n", r, put_count[r],
                    confirmed[r]);
    }
    test_context = NULL;
}

TEST_T(server_disk_figures_in_metrics_and_stat, 60) {
    test_server ts;
    start_disk(&ts, "1MiB", "64MiB", "4MiB", "info");
    tide_store *s;
    CHECK_EQ(tide_open(ts.url, &s), 0);
    static uint8_t val[VLEN];
    for (int i = 0; i < 40; i++) {
        char k[32];
        key_of(k, sizeof(k), 0, i);
        fill(val, 0, i);
        CHECK_EQ(tide_put(s, k, strlen(k), val, VLEN), 0);
    }
    for (int i = 0; i < 40; i++)
        CHECK_EQ(get_ok(s, 0, i), 1);
    tide_stats st = stat_of(s);
    CHECK_EQ(st.disk_capacity_bytes, 64ull << 20);
    CHECK(st.disk_writes >= 24 && st.disk_promotions >= 24 && st.disk_objects >= 24);
    CHECK_EQ(st.misses, 0);
    tide_close(s);

    char cmd[512];
    snprintf(cmd, sizeof(cmd), "%s stat %s", test_tide_bin(), ts.url);
    FILE *p = popen(cmd, "r");
    static char out[8192];
    size_t n = fread(out, 1, sizeof(out) - 1, p);
    out[n] = '\0';
    CHECK_EQ(pclose(p), 0);
    CHECK_CONTAINS(out, "disk_promotions");
    CHECK_CONTAINS(out, "disk_capacity_bytes");
    CHECK_CONTAINS(out, "64.0 MiB");
    snprintf(cmd, sizeof(cmd), "%s stat %s --json", test_tide_bin(), ts.url);
    p = popen(cmd, "r");
    n = fread(out, 1, sizeof(out) - 1, p);
    out[n] = '\0';
    CHECK_EQ(pclose(p), 0);
    CHECK_CONTAINS(out, "\"disk_capacity_bytes\": 67108864");
    CHECK_CONTAINS(out, "\"disk_checksum_errors\": 0");

    int fd = server_connect(ts.metrics_port, 5);
    const char req[] = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
    CHECK_EQ(send(fd, req, sizeof(req) - 1, MSG_NOSIGNAL), (ssize_t)(sizeof(req) - 1));
    static char body[1 << 17];
    size_t have = 0;
    for (ssize_t r; (r = recv(fd, body + have, sizeof(body) - 1 - have, 0)) > 0;)
        have += (size_t)r;
    body[have] = '\0';
    close(fd);
    CHECK_CONTAINS(body, "# TYPE tide_disk_writes_total counter\n");
    CHECK_CONTAINS(body, "tide_disk_capacity_bytes 67108864\n");
    CHECK_CONTAINS(body, "tide_disk_checksum_errors_total 0\n");
    CHECK_CONTAINS(body, "tide_disk_promotions_total ");
    CHECK_CONTAINS(body, "tide_disk_errors_total 0\n");
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
    const char *log = slurp(ts.log);
    CHECK_CONTAINS(log, "disk tier at ");
    CHECK_CONTAINS(log, "writes through io_uring");
    CHECK_CONTAINS(log, "summary: disk ");
}

TEST_T(server_disk_refusing_writes_keeps_serving_from_memory, 60) {
    /* Files stop growing at 1 MiB (inherited by tided): its segment writes fail with EFBIG
     * the way a full disk fails with ENOSPC. */
    struct rlimit rl;
    CHECK_EQ(getrlimit(RLIMIT_FSIZE, &rl), 0);
    rl.rlim_cur = 1 << 20;
    CHECK_EQ(setrlimit(RLIMIT_FSIZE, &rl), 0);
    test_server ts;
    start_disk(&ts, "1MiB", "64MiB", "8MiB", "warn");
    tide_store *s;
    CHECK_EQ(tide_open(ts.url, &s), 0);
    static uint8_t val[VLEN];
    for (int i = 0; i < 64; i++) {
        char k[32];
        key_of(k, sizeof(k), 0, i);
        fill(val, 0, i);
        CHECK_EQ(tide_put(s, k, strlen(k), val, VLEN), 0);
        CHECK_EQ(get_ok(s, 0, i), 1);
    }
    tide_stats st = stat_of(s);
    CHECK(st.disk_errors > 0 && st.disk_dropped > 0);
    CHECK_EQ(st.objects, 16);
    tide_close(s);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
    const char *log = slurp(ts.log);
    CHECK_CONTAINS(log, "File too large");
    CHECK_CONTAINS(log, disk_dir());
    CHECK_CONTAINS(log, "keeps serving from memory");
}

TEST(server_disk_flags) {
    char cmd[700];
    snprintf(cmd, sizeof(cmd), "%s serve --disk-dir %s 2>/dev/null", test_tide_bin(), disk_dir());
    int st = system(cmd);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 2);
    snprintf(cmd, sizeof(cmd), "%s serve --disk-capacity 1GiB 2>/dev/null", test_tide_bin());
    st = system(cmd);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 2);
    snprintf(cmd, sizeof(cmd),
             "%s serve --disk-dir %s --disk-capacity 1GiB --disk-io aio 2>/dev/null",
             test_tide_bin(), disk_dir());
    st = system(cmd);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 2);
    snprintf(cmd, sizeof(cmd),
             "%s serve --port 0 --metrics-port 0 --disk-dir /proc/no/such --disk-capacity 1GiB "
             "2>&1",
             test_tide_bin());
    FILE *p = popen(cmd, "r");
    char out[1024] = {0};
    CHECK(fread(out, 1, sizeof(out) - 1, p) > 0);
    st = pclose(p);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1);
    CHECK_CONTAINS(out, "/proc/no/such");
    /* Not a directory, and not writable: refused at start, saying which (bounded by
     * `timeout`: a tided that started anyway would run on). */
    static const struct {
        const char *dir, *words;
    } bad[] = {{"/etc/passwd", "is not a directory"}, {"/sys", "is not writable"}};
    for (size_t i = 0; i < 2; i++) {
        snprintf(cmd, sizeof(cmd),
                 "timeout 5 %s serve --port 0 --metrics-port 0 --disk-dir %s "
                 "--disk-capacity 1GiB 2>&1",
                 test_tide_bin(), bad[i].dir);
        p = popen(cmd, "r");
        memset(out, 0, sizeof(out));
        CHECK(fread(out, 1, sizeof(out) - 1, p) > 0);
        st = pclose(p);
        CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 1, "%s: status %d: %s", bad[i].dir, st, out);
        CHECK_CONTAINS(out, bad[i].words);
    }
}
