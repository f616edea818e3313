/*
 * test_counters.c — the counters tide shows are the operations that were done. One scripted
 * sequence (puts, a duplicate, a batch put, hits, a size query before a read, misses, a
 * batch get, removes, exists, an error) runs through each path — tide://, unix://, a
 * cluster of two tided, RESP (redis-cli) — against fresh tided processes, and every figure
 * is checked against what the sequence did: `tide stat` (text and --json), /metrics (store
 * figures and requests by op and outcome), RESP INFO. /metrics must pass `promtool check
 * metrics`, and a Prometheus server started here scrapes tided and answers a query on
 * tide's counters with the sequence's figure (both need Debian's prometheus: make deps).
 *
 * The sequence and its figures (one store):
 *   put k1 (100 B), k2 (5000 B), k3 (300 B); put k1 again (a duplicate: kept, not stored)
 *   put_many b1 (200), b2 (400), b3 (600)                 puts 6, put_dups 1, in 6600 B
 *   get k1                                                 hit
 *   get k2 asking its size first (cap 0), then reading it  one hit (the size answer is no get)
 *   get none1                                              miss
 *   get_many b1, b2, none2                                 2 hits, 1 miss
 *   remove k3 (removed), remove k3 (absent), get k3        miss
 *   exists k1, exists none1
 *   put big (2 MiB, over --max-value 1MiB)                 an error
 * hits 4, misses 3, objects 5, value bytes out 100 + 5000 + 200 + 400 = 5700.
 */
#include <signal.h>
#include <stdarg.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cluster_util.h"
#include "harness.h"
#include "server_util.h"
#include "tide.h"

#define OUT_CAP (256 * 1024)
#define BIG (2u << 20)

/* The store figures every path must show for one copy of the sequence. */
enum { E_PUTS = 6, E_DUPS = 1, E_HITS = 4, E_MISSES = 3, E_OBJECTS = 5 };
#define E_BYTES_IN 6600
#define E_BYTES_OUT 5700

static int have_tool(const char *name) {
    char cmd[128], out[256];
    snprintf(cmd, sizeof(cmd), "command -v %s", name);
    return test_run(cmd, out, sizeof(out)) == 0;
}

/* The value of the line "NAME VALUE" (NAME exact, labels included) in Prometheus text;
 * -1 when there is no such line. */
static long long prom_value(const char *text, const char *name) {
    size_t n = strlen(name);
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        if (strncmp(p, name, n) == 0 && p[n] == ' ') return atoll(p + n + 1);
    }
    return -1;
}

/* The value after "NAME" and then sep (one char, or any run of spaces when sep is ' ') at
 * the start of a line; -1 when absent. For `tide stat` (NAME VALUE) and INFO (NAME:VALUE). */
static long long line_value(const char *text, const char *name, char sep) {
    size_t n = strlen(name);
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        if (strncmp(p, name, n) != 0 || p[n] != sep) continue;
        return atoll(p + n + 1);
    }
    return -1;
}

static char *fetch(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *fetch(const char *fmt, ...) {
    static char bufs[4][OUT_CAP];
    static int next;
    char *out = bufs[next++ % 4];
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    int st = test_run(cmd, out, OUT_CAP);
    CHECK_MSG(st == 0, "`%s` exited %d:\n%s", cmd, st, out);
    return out;
}

static char *metrics_of(const test_server *ts) {
    return fetch("timeout 10 curl -sf http://127.0.0.1:%d/metrics", ts->metrics_port);
}

/* Request counters: tide_requests_total{op="OP",status="ST"}. */
static long long req(const char *metrics, const char *op, const char *st) {
    char name[128];
    snprintf(name, sizeof(name), "tide_requests_total{op=\"%s\",status=\"%s\"}", op, st);
    return prom_value(metrics, name);
}

#define CHECK_FIG(what, got, want)                                                                 \
    CHECK_MSG((long long)(got) == (long long)(want), "%s: %lld, the sequence says %lld", (what),   \
              (long long)(got), (long long)(want))

/* The store figures (times copies: a cluster stores each key on every member) in `tide
 * stat URL` (text and --json) and in each server's /metrics and INFO, summed. */
static void check_store_figures(const char *url, test_server *ts, const int *resp_ports, int n,
                                int copies) {
    const char *text = fetch("timeout 20 %s stat '%s'", test_tide_bin(), url);
    CHECK_FIG("tide stat puts", line_value(text, "puts", ' '), E_PUTS * copies);
    CHECK_FIG("tide stat put_dups", line_value(text, "put_dups", ' '), E_DUPS * copies);
    CHECK_FIG("tide stat gets", line_value(text, "gets", ' '), E_HITS);
    CHECK_FIG("tide stat misses", line_value(text, "misses", ' '), E_MISSES);
    CHECK_FIG("tide stat objects", line_value(text, "objects", ' '), E_OBJECTS * copies);
    CHECK_FIG("tide stat bytes_in", line_value(text, "bytes_in", ' '), E_BYTES_IN * copies);
    CHECK_FIG("tide stat bytes_out", line_value(text, "bytes_out", ' '), E_BYTES_OUT);
    /* 4 hits of 7 lookups. */
    CHECK_MSG(strstr(text, "57.1%") != NULL, "tide stat: hit_rate is not 57.1%%:\n%s", text);
    const char *js = fetch("timeout 20 %s stat '%s' --json", test_tide_bin(), url);
    char want[160];
    snprintf(want, sizeof(want), "\"gets\": %d, \"misses\": %d", E_HITS, E_MISSES);
    CHECK_CONTAINS(js, want);

    long long hits = 0, misses = 0, puts = 0, dups = 0, in = 0, out = 0;
    long long ihits = 0, imisses = 0, iputs = 0, idups = 0;
    for (int i = 0; i < n; i++) {
        const char *m = metrics_of(&ts[i]);
        hits += prom_value(m, "tide_store_hits_total");
        misses += prom_value(m, "tide_store_misses_total");
        puts += prom_value(m, "tide_store_puts_total");
        dups += prom_value(m, "tide_store_put_duplicates_total");
        in += prom_value(m, "tide_store_bytes_in_total");
        out += prom_value(m, "tide_store_bytes_out_total");
        const char *info = fetch("timeout 10 redis-cli -p %d INFO stats", resp_ports[i]);
        ihits += line_value(info, "keyspace_hits", ':');
        imisses += line_value(info, "keyspace_misses", ':');
        iputs += line_value(info, "tide_puts", ':');
        idups += line_value(info, "tide_put_dups", ':');
    }
    CHECK_FIG("/metrics tide_store_hits_total", hits, E_HITS);
    CHECK_FIG("/metrics tide_store_misses_total", misses, E_MISSES);
    CHECK_FIG("/metrics tide_store_puts_total", puts, E_PUTS * copies);
    CHECK_FIG("/metrics tide_store_put_duplicates_total", dups, E_DUPS * copies);
    CHECK_FIG("/metrics tide_store_bytes_in_total", in, E_BYTES_IN * copies);
    CHECK_FIG("/metrics tide_store_bytes_out_total", out, E_BYTES_OUT);
    CHECK_FIG("INFO keyspace_hits", ihits, E_HITS);
    CHECK_FIG("INFO keyspace_misses", imisses, E_MISSES);
    CHECK_FIG("INFO tide_puts", iputs, E_PUTS * copies);
    CHECK_FIG("INFO tide_put_dups", idups, E_DUPS * copies);
}

static void fill(uint8_t *v, size_t n, int seed) {
    for (size_t i = 0; i < n; i++)
        v[i] = (uint8_t)(i * 31 + (size_t)seed);
}

/* The sequence through libtide on url. big_fails: the oversized put must fail. */
static void run_sequence(const char *url) {
    tide_store *s;
    CHECK_MSG(tide_open(url, &s) == 0, "open %s: %s", url, tide_errmsg(NULL));
    static uint8_t v[3][5000], b[3][600], big[BIG];
    const size_t klen[3] = {100, 5000, 300}, blen[3] = {200, 400, 600};
    for (int i = 0; i < 3; i++) {
        fill(v[i], klen[i], i);
        fill(b[i], blen[i], 10 + i);
    }
    CHECK_EQ(tide_put(s, "k1", 2, v[0], klen[0]), 0);
    CHECK_EQ(tide_put(s, "k2", 2, v[1], klen[1]), 0);
    CHECK_EQ(tide_put(s, "k3", 2, v[2], klen[2]), 0);
    CHECK_EQ(tide_put(s, "k1", 2, v[1], 50), 0); /* a duplicate: the first value stays */
    tide_key bk[3] = {{"b1", 2}, {"b2", 2}, {"b3", 2}};
    tide_iov bi[3] = {{b[0], blen[0]}, {b[1], blen[1]}, {b[2], blen[2]}};
    int res[3];
    CHECK_EQ(tide_put_many(s, bk, 3, bi, NULL, res), 3);

    static uint8_t buf[5000];
    size_t len = 0;
    CHECK_EQ(tide_get(s, "k1", 2, buf, 100, &len), 0);
    CHECK(len == 100 && memcmp(buf, v[0], 100) == 0);
    CHECK_EQ(tide_get(s, "k2", 2, NULL, 0, &len), TIDE_EBUFSMALL); /* its size */
    CHECK_EQ(len, 5000);
    CHECK_EQ(tide_get(s, "k2", 2, buf, len, &len), 0);
    CHECK(memcmp(buf, v[1], 5000) == 0);
    CHECK_EQ(tide_get(s, "none1", 5, buf, sizeof(buf), &len), TIDE_ENOTFOUND);
    static uint8_t g[3][600];
    tide_key gk[3] = {{"b1", 2}, {"b2", 2}, {"none2", 5}};
    tide_iov gi[3] = {{g[0], 600}, {g[1], 600}, {g[2], 600}};
    size_t gl[3];
    CHECK_EQ(tide_get_many(s, gk, 3, gi, NULL, res, gl), 2);
    CHECK(res[0] == 0 && res[1] == 0 && res[2] == TIDE_ENOTFOUND);
    CHECK_EQ(tide_remove(s, "k3", 2), 0);
    CHECK_EQ(tide_remove(s, "k3", 2), TIDE_ENOTFOUND);
    CHECK_EQ(tide_get(s, "k3", 2, buf, sizeof(buf), &len), TIDE_ENOTFOUND);
    CHECK_EQ(tide_exists(s, "k1", 2), 1);
    CHECK_EQ(tide_exists(s, "none1", 5), 0);
    CHECK(tide_put(s, "big", 3, big, BIG) != 0);
    tide_close(s);
}

/* A tided for the counters: a RESP port (for INFO) and --max-value 1MiB (for the error). */
static void start_node(test_server *ts, int *resp_port, const char *unix_path) {
    static char port[4][16];
    static int k;
    char *p = port[k++ % 4];
    *resp_port = test_free_port();
    snprintf(p, 16, "%d", *resp_port);
    /* With --port 0, metrics are on a free port too (written in the ready file). */
    const char *extra[] = {
        "--capacity", "64MiB", "--max-value", "1MiB", "--resp-port", p, unix_path ? "--unix" : NULL,
        unix_path,    NULL};
    server_start(ts, extra);
}

/* The request counters of the sequence over tide:// (one server). */
static void check_native_requests(const char *m) {
    CHECK_FIG("get ok", req(m, "get", "ok"), 2);               /* k1, k2's read */
    CHECK_FIG("get too_small", req(m, "get", "too_small"), 1); /* k2's size */
    CHECK_FIG("get miss", req(m, "get", "miss"), 3);           /* none1, the batch, k3 */
    CHECK_FIG("get error", req(m, "get", "error"), 0);
    CHECK_FIG("get keys", prom_value(m, "tide_request_keys_total{op=\"get\"}"), 8);
    CHECK_FIG("put ok", req(m, "put", "ok"), 5); /* k1, k2, k3, k1 again, the batch */
    CHECK_FIG("put error", req(m, "put", "error"), 1);
    /* The refused put is counted with no keys: its key section was never read. */
    CHECK_FIG("put keys", prom_value(m, "tide_request_keys_total{op=\"put\"}"), 7);
    CHECK_FIG("remove ok", req(m, "remove", "ok"), 1);
    CHECK_FIG("remove miss", req(m, "remove", "miss"), 1);
    CHECK_FIG("exists ok", req(m, "exists", "ok"), 1);
    CHECK_FIG("exists miss", req(m, "exists", "miss"), 1);
}

TEST_T(counters_native, 120) {
    CHECK_MSG(have_tool("redis-cli"), "redis-cli is missing: install redis-tools (make deps)");
    test_server ts;
    int rp;
    start_node(&ts, &rp, NULL);
    run_sequence(ts.url);
    const char *m = metrics_of(&ts);
    check_native_requests(m);
    CHECK_FIG("protocol errors", prom_value(m, "tide_protocol_errors_total"), 1);
    check_store_figures(ts.url, &ts, &rp, 1, 1);
    server_stop(&ts, SIGTERM);
}

TEST_T(counters_unix, 120) {
    CHECK_MSG(have_tool("redis-cli"), "redis-cli is missing: install redis-tools (make deps)");
    test_server ts;
    int rp;
    char path[256], url[300];
    snprintf(path, sizeof(path), "%s/tided.sock", test_tmpdir());
    snprintf(url, sizeof(url), "unix://%s", path);
    start_node(&ts, &rp, path);
    run_sequence(url);
    /* Reads are PINs on the shared pool, each pinned value given back by one RELEASE. */
    const char *m = metrics_of(&ts);
    CHECK_FIG("pin ok", req(m, "pin", "ok"), 2);
    CHECK_FIG("pin too_small", req(m, "pin", "too_small"), 1);
    CHECK_FIG("pin miss", req(m, "pin", "miss"), 3);
    CHECK_FIG("pin keys", prom_value(m, "tide_request_keys_total{op=\"pin\"}"), 8);
    CHECK_FIG("get (none: reads are pins)", req(m, "get", "ok") + req(m, "get", "miss"), 0);
    CHECK_FIG("remove ok", req(m, "remove", "ok"), 1);
    CHECK_FIG("remove miss", req(m, "remove", "miss"), 1);
    CHECK_FIG("exists ok", req(m, "exists", "ok"), 1);
    CHECK_FIG("exists miss", req(m, "exists", "miss"), 1);
    CHECK_FIG("reserve error", req(m, "reserve", "error"), 1);
    check_store_figures(url, &ts, &rp, 1, 1);
    server_stop(&ts, SIGTERM);
}

TEST_T(counters_cluster, 120) {
    CHECK_MSG(have_tool("redis-cli"), "redis-cli is missing: install redis-tools (make deps)");
    test_server ts[2];
    int rp[2];
    start_node(&ts[0], &rp[0], NULL);
    start_node(&ts[1], &rp[1], NULL);
    char url[256];
    /* read_check=0: the read check adds a REPLICA question beside each read (counted as
     * replica requests too), so with it on replica requests outnumber connections; the
     * figures below count one REPLICA per connection. */
    cluster_url(url, sizeof(url), ts, 2, "replicas=2&read_check=0");
    run_sequence(url);
    /* Every key on both members; each key read at one member (a miss asks the other with
     * EXISTS, which is not a read). Summed over the members: the native path's 8 keys read
     * and its one size query; the batch get may be split between the members (by where
     * its keys rank first), so its hits and its miss are one request or two. */
    const char *m0 = metrics_of(&ts[0]);
    long long ok = req(m0, "get", "ok"), small = req(m0, "get", "too_small"),
              miss = req(m0, "get", "miss"), err = req(m0, "get", "error"),
              keys = prom_value(m0, "tide_request_keys_total{op=\"get\"}");
    const char *m1 = metrics_of(&ts[1]);
    ok += req(m1, "get", "ok"), small += req(m1, "get", "too_small"),
        miss += req(m1, "get", "miss"), err += req(m1, "get", "error"),
        keys += prom_value(m1, "tide_request_keys_total{op=\"get\"}");
    CHECK_FIG("get keys, both members", keys, 8);
    CHECK_FIG("get too_small, both members", small, 1);
    CHECK_FIG("get error, both members", err, 0);
    CHECK_MSG(ok >= 2 && ok <= 3 && miss >= 3 && miss <= 4 && ok + miss >= 5 && ok + miss <= 7,
              "get requests on both members: %lld ok, %lld miss; the sequence says 2 ok and 3 "
              "misses with the batch in one request, one more of either or both when split",
              ok, miss);
    /* The client's REPLICA check on each connection is counted as itself, not as a HELLO. */
    CHECK_MSG(req(m0, "replica", "ok") > 0 && req(m0, "replica", "ok") <= req(m0, "hello", "ok"),
              "replica requests: %lld, hellos: %lld", req(m0, "replica", "ok"),
              req(m0, "hello", "ok"));
    check_store_figures(url, ts, rp, 2, 2);
    server_stop(&ts[0], SIGTERM);
    server_stop(&ts[1], SIGTERM);
}

/* The sequence in RESP, by redis-cli: SETNX is the duplicate, MSET the batch, DEL the
 * remove, SET ... EX the error (tide does not expire keys). */
TEST_T(counters_resp, 120) {
    CHECK_MSG(have_tool("redis-cli"), "redis-cli is missing: install redis-tools (make deps)");
    test_server ts;
    int rp;
    start_node(&ts, &rp, NULL);
    char cmd[16384];
    int n = snprintf(cmd, sizeof(cmd), "r() { timeout 10 redis-cli -p %d \"$@\"; }; ", rp);
    n += snprintf(cmd + n, sizeof(cmd) - (size_t)n,
                  "v() { head -c $1 /dev/zero | tr '\\0' x; }; "
                  "r SET k1 \"$(v 100)\"; r SET k2 \"$(v 5000)\"; r SET k3 \"$(v 300)\"; "
                  "r SETNX k1 \"$(v 50)\"; r MSET b1 \"$(v 200)\" b2 \"$(v 400)\" b3 \"$(v 600)\"; "
                  "r GET k1 >/dev/null; r GET k2 >/dev/null; "
                  "r GET none1; r MGET b1 b2 none2 >/dev/null; r DEL k3; r DEL k3; r GET k3; "
                  "r EXISTS k1; r EXISTS none1; r SET big x EX 10");
    char out[OUT_CAP];
    test_run(cmd, out, sizeof(out));
    CHECK_CONTAINS(out, "ERR tide does not expire keys");
    const char *m = metrics_of(&ts);
    CHECK_FIG("get ok", req(m, "get", "ok"), 2);
    CHECK_FIG("get miss", req(m, "get", "miss"), 3);
    CHECK_FIG("get keys", prom_value(m, "tide_request_keys_total{op=\"get\"}"), 7);
    CHECK_FIG("put ok", req(m, "put", "ok"), 5);
    CHECK_FIG("put error", req(m, "put", "error"), 1);
    CHECK_FIG("remove ok", req(m, "remove", "ok"), 1);
    CHECK_FIG("remove miss", req(m, "remove", "miss"), 1);
    CHECK_FIG("exists ok", req(m, "exists", "ok"), 1);
    CHECK_FIG("exists miss", req(m, "exists", "miss"), 1);
    check_store_figures(ts.url, &ts, &rp, 1, 1);
    server_stop(&ts, SIGTERM);
}

/* The CLI's own read: `tide get` of a present key and of an absent one is one hit and one
 * miss, whatever it asked to size its buffer. */
TEST_T(counters_cli_get, 60) {
    CHECK_MSG(have_tool("redis-cli"), "redis-cli is missing: install redis-tools (make deps)");
    test_server ts;
    int rp;
    start_node(&ts, &rp, NULL);
    const char *bin = test_tide_bin();
    fetch("printf hello | timeout 10 %s put %s k -", bin, ts.url);
    const char *got = fetch("timeout 10 %s get %s k", bin, ts.url);
    CHECK_STR(got, "hello");
    char out[4096], cmd[512];
    snprintf(cmd, sizeof(cmd), "timeout 10 %s get %s nothere 2>&1", bin, ts.url);
    CHECK_EQ(test_run(cmd, out, sizeof(out)), 1);
    const char *text = fetch("timeout 10 %s stat %s", bin, ts.url);
    CHECK_FIG("gets", line_value(text, "gets", ' '), 1);
    CHECK_FIG("misses", line_value(text, "misses", ' '), 1);
    CHECK_MSG(strstr(text, "50.0%") != NULL, "hit_rate is not 50.0%%:\n%s", text);
    const char *m = metrics_of(&ts);
    CHECK_FIG("get ok", req(m, "get", "ok"), 1);
    CHECK_FIG("get miss", req(m, "get", "miss"), 1);
    CHECK_FIG("tide_store_hits_total", prom_value(m, "tide_store_hits_total"), 1);
    CHECK_FIG("tide_store_misses_total", prom_value(m, "tide_store_misses_total"), 1);
    const char *info = fetch("timeout 10 redis-cli -p %d INFO stats", rp);
    CHECK_FIG("keyspace_hits", line_value(info, "keyspace_hits", ':'), 1);
    CHECK_FIG("keyspace_misses", line_value(info, "keyspace_misses", ':'), 1);
    server_stop(&ts, SIGTERM);
}

/* /metrics is valid Prometheus text (promtool), and a real Prometheus server scrapes tided
 * and answers a query on tide's counters with the sequence's figure. */
TEST_T(counters_prometheus, 120) {
    if (!have_tool("promtool") || !have_tool("prometheus"))
        TEST_SKIP("promtool and prometheus are missing: install Debian's prometheus (make deps)");
    CHECK_MSG(have_tool("redis-cli"), "redis-cli is missing: install redis-tools (make deps)");
    test_server ts;
    int rp;
    start_node(&ts, &rp, NULL);
    run_sequence(ts.url);
    const char *lint = fetch("timeout 10 curl -sf http://127.0.0.1:%d/metrics | timeout 20 "
                             "promtool check metrics 2>&1; echo \"promtool: $?\"",
                             ts.metrics_port);
    CHECK_MSG(strstr(lint, "promtool: 0") != NULL, "promtool check metrics:\n%s", lint);

    const char *dir = test_tmpdir();
    int pport = test_free_port();
    char cfg[512];
    snprintf(cfg, sizeof(cfg), "%s/prometheus.yml", dir);
    FILE *f = fopen(cfg, "w");
    CHECK(f != NULL);
    fprintf(f,
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
            "scrape_configs:\n  - job_name: tided\n    static_configs:\n"
            "      - targets: ['127.0.0.1:%d']\n",
            ts.metrics_port);
    fclose(f);
    char listen[64], cfgarg[600], data[600], log[600];
    snprintf(listen, sizeof(listen), "--web.listen-address=127.0.0.1:%d", pport);
    snprintf(cfgarg, sizeof(cfgarg), "--config.file=%s", cfg);
    snprintf(data, sizeof(data), "--storage.tsdb.path=%s/prom-data", dir);
    snprintf(log, sizeof(log), "%s/prometheus.log", dir);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        FILE *lf = freopen(log, "w", stderr);
        (void)lf;
        execlp("prometheus", "prometheus", cfgarg, data, listen, "--storage.tsdb.retention.time=1h",
               (char *)NULL);
        _exit(127);
    }
    /* Bounded: up to 60 s for the server to start, scrape and answer. */
    char q[512], q2[512], out[OUT_CAP];
    snprintf(q, sizeof(q),
             "timeout 5 curl -sf 'http://127.0.0.1:%d/api/v1/query?query="
             "tide_store_hits_total%%7Bjob%%3D%%22tided%%22%%7D'",
             pport);
    /* And a request counter by its labels: the one size query of the sequence. */
    snprintf(q2, sizeof(q2),
             "timeout 5 curl -sf 'http://127.0.0.1:%d/api/v1/query?query="
             "tide_requests_total%%7Bop%%3D%%22get%%22%%2Cstatus%%3D%%22too_small%%22%%7D'",
             pport);
    int found = 0;
    char want[64];
    snprintf(want, sizeof(want), "\"%d\"]", E_HITS); /* "value":[TIME,"4"] */
    for (int i = 0; i < 120 && !found; i++) {
        if (test_run(q, out, sizeof(out)) == 0 && strstr(out, "\"status\":\"success\"") &&
            strstr(out, want))
            found = 1;
        else
            usleep(500 * 1000);
    }
    if (found) {
        found = test_run(q2, out, sizeof(out)) == 0 && strstr(out, "\"too_small\"") &&
                strstr(out, "\"1\"]");
        if (!found) snprintf(want, sizeof(want), "(get too_small 1)");
    }
    kill(pid, SIGTERM);
    int st;
    waitpid(pid, &st, 0);
    if (!found) {
        char cmd[700], lg[OUT_CAP];
        snprintf(cmd, sizeof(cmd), "tail -20 %s", log);
        test_run(cmd, lg, sizeof(lg));
        test_fail(__FILE__, __LINE__,
                  "Prometheus never answered %s; last answer:\n%s\nits log:\n%s", want, out, lg);
    }
    server_stop(&ts, SIGTERM);
}
