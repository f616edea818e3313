/*
 * test_cli_bench_demo.c — `tide bench` and `tide demo` run as a user runs them: the real
 * binary ($TIDE_BIN) with small sizes, checked by exit status and output. No test here
 * asserts a speed; only that the commands work, check what they read, and refuse bad
 * arguments with a usage error (exit 2).
 */
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "harness.h"

#define OUT_CAP (256 * 1024)

typedef struct run_result {
    int status; /* exit code, or 128 + signal */
    char out[OUT_CAP];
    char err[OUT_CAP];
} run_result;

static void slurp(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, cap - 1, f) : 0;
    buf[n] = '\0';
    if (f) fclose(f);
}

/* Run `PROG ARGS...` (NULL-terminated) with stdout and stderr captured. */
static run_result *run_cmd(const char *prog, const char *first, ...) {
    static run_result r;
    const char *argv[64];
    int argc = 0;
    argv[argc++] = prog;
    va_list ap;
    va_start(ap, first);
    for (const char *a = first; a && argc < 63; a = va_arg(ap, const char *))
        argv[argc++] = a;
    va_end(ap);
    argv[argc] = NULL;

    char outp[512], errp[512];
    snprintf(outp, sizeof(outp), "%s/stdout", test_tmpdir());
    snprintf(errp, sizeof(errp), "%s/stderr", test_tmpdir());
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        int o = open(outp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int e = open(errp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (o < 0 || e < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0) _exit(127);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    int st = 0;
    CHECK(waitpid(pid, &st, 0) == pid);
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    slurp(outp, r.out, sizeof(r.out));
    slurp(errp, r.err, sizeof(r.err));
    return &r;
}

/* Run `tide ARGS...`. */
#define run_tide(...) run_cmd(test_tide_bin(), __VA_ARGS__)

#define CHECK_RUN(r, code)                                                                         \
    CHECK_MSG((r)->status == (code), "exit %d, want %d\nstdout:\n%s\nstderr:\n%s", (r)->status,    \
              (code), (r)->out, (r)->err)

TEST(cli_bench_help) {
    run_result *r = run_tide("bench", "--help", NULL);
    CHECK_RUN(r, 0);
    CHECK_CONTAINS(r->out, "usage: tide bench");
    CHECK_CONTAINS(r->out, "--threads");
    r = run_tide("--help", NULL);
    CHECK_RUN(r, 0);
    CHECK_CONTAINS(r->out, "bench");
    CHECK_CONTAINS(r->out, "demo");
}

TEST(cli_bench_bad_args) {
    const char *bad[][2] = {
        {"--size", "0"},       {"--size", "lots"},  {"--size", "2GiB"}, {"--threads", "0"},
        {"--threads", "x"},    {"--seconds", "-1"}, {"--seconds", "0"}, {"--batch", "0"},
        {"--batch", "70000"},  {"--op", "scan"},    {"--keys", "0"},    {"--keys", "1e3"},
        {"--frobnicate", "1"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        run_result *r = run_tide("bench", bad[i][0], bad[i][1], NULL);
        CHECK_RUN(r, 2);
        CHECK_CONTAINS(r->err, "tide bench: ");
    }
    run_result *r = run_tide("bench", "--size", NULL); /* a missing value */
    CHECK_RUN(r, 2);
    CHECK_CONTAINS(r->err, "--size");
    r = run_tide("bench", "--batch", "65536", "--size", "1MiB", NULL); /* 64 GiB of buffers */
    CHECK_RUN(r, 2);
    CHECK_CONTAINS(r->err, "1GiB");
}

TEST(cli_bench_bad_url) {
    run_result *r = run_tide("bench", "--url", "nosuch://x", "--seconds", "0.1", NULL);
    CHECK_RUN(r, 1);
    CHECK_CONTAINS(r->err, "cannot open");
    r = run_tide("bench", "--url", "mem://?capacity=lots", "--seconds", "0.1", NULL);
    CHECK_RUN(r, 1);
    CHECK_CONTAINS(r->err, "capacity");
}

TEST(cli_bench_get) {
    run_result *r =
        run_tide("bench", "--url", "mem://?capacity=32MiB", "--size", "64KiB", "--keys", "64",
                 "--seconds", "0.2", "--threads", "2", "--batch", "3", "--verify-all", NULL);
    CHECK_RUN(r, 0);
    CHECK_CONTAINS(r->out, "fill ");
    CHECK_CONTAINS(r->out, "ops/s");
    CHECK_CONTAINS(r->out, "GB/s");
    CHECK_CONTAINS(r->out, "p999");
    CHECK_CONTAINS(r->out, " 0 wrong, 0 misses, 0 errors");
    CHECK_CONTAINS(r->out, "metadata bytes an object");
    CHECK_CONTAINS(r->out, "PASS");
}

/* Mixed gets and puts with --json: one object a machine can read, with both phases. */
TEST(cli_bench_mixed_json) {
    run_result *r = run_tide("bench", "--url", "mem://?capacity=16MiB", "--size=100000B",
                             "--keys=40", "--seconds=0.3", "--op=mixed", "--json", NULL);
    CHECK_RUN(r, 0);
    cJSON *j = cJSON_Parse(r->out);
    CHECK_MSG(j != NULL, "not JSON: %s", r->out);
    CHECK(cJSON_IsTrue(cJSON_GetObjectItem(j, "ok")));
    CHECK_EQ(cJSON_GetObjectItem(j, "size")->valuedouble, 100000);
    CHECK_EQ(cJSON_GetObjectItem(j, "wrong")->valuedouble, 0);
    CHECK_EQ(cJSON_GetObjectItem(j, "errors")->valuedouble, 0);
    CHECK(cJSON_GetObjectItem(j, "verified")->valuedouble > 0);
    cJSON *res = cJSON_GetObjectItem(j, "results");
    CHECK_EQ(cJSON_GetArraySize(res), 2);
    for (int i = 0; i < 2; i++) {
        cJSON *o = cJSON_GetArrayItem(res, i);
        CHECK_STR(cJSON_GetObjectItem(o, "op")->valuestring, i == 0 ? "get" : "put");
        CHECK(cJSON_GetObjectItem(o, "ops")->valuedouble > 0);
        double p50 = cJSON_GetObjectItem(o, "p50_us")->valuedouble;
        double p99 = cJSON_GetObjectItem(o, "p99_us")->valuedouble;
        double p999 = cJSON_GetObjectItem(o, "p999_us")->valuedouble;
        double mx = cJSON_GetObjectItem(o, "max_us")->valuedouble;
        CHECK(p50 > 0 && p50 <= p99 && p99 <= p999 && p999 <= mx);
    }
    cJSON_Delete(j);
}

/* Puts of fresh keys into a store that must evict to take them: still no error. */
TEST(cli_bench_put_evicting) {
    run_result *r = run_tide("bench", "--url", "mem://?capacity=4MiB", "--size", "256KiB", "--keys",
                             "8", "--seconds", "0.2", "--op", "put", "--batch", "2", NULL);
    CHECK_RUN(r, 0);
    CHECK_CONTAINS(r->out, "put ");
    CHECK_CONTAINS(r->out, "PASS");
}

TEST(cli_demo_help_and_bad_args) {
    run_result *r = run_tide("demo", "--synthetic", "--help", NULL);
    CHECK_RUN(r, 0);
    CHECK_CONTAINS(r->out, "usage: tide demo");
    CHECK_CONTAINS(r->out, "--bytes-per-token");
    const char *bad[][2] = {
        {"--docs", "0"},
        {"--questions", "abc"},
        {"--block-tokens", "0"},
        {"--prefix-tokens", "-5"},
        {"--bytes-per-token", "0"},
        {"--layers", "3"},
        {"--seed", "x1"},
        {"--what", "1"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        r = run_tide("demo", "--synthetic", bad[i][0], bad[i][1], NULL);
        CHECK_RUN(r, 2);
        CHECK_CONTAINS(r->err, "tide demo: ");
    }
    /* A block too big: 4096 tokens x 1 MiB. */
    r = run_tide("demo", "--synthetic", "--block-tokens", "4096", "--bytes-per-token", "1048576",
                 NULL);
    CHECK_RUN(r, 2);
    CHECK_CONTAINS(r->err, "64MiB");
}

/* The normal path: everything matched as predicted, every byte right, and the repeated
 * questions at the end load their whole prompt. */
TEST(cli_demo_pass) {
    run_result *r = run_tide("demo", "--synthetic", "--docs", "3", "--questions", "2",
                             "--prefix-tokens", "300", "--system-tokens", "40", "--bytes-per-token",
                             "1024", "--block-tokens", "8", "--layers", "2", NULL);
    CHECK_RUN(r, 0);
    CHECK_CONTAINS(r->out, "req   8 doc 2 q 0:"); /* 3 docs x (2 + 1 repeat) requests */
    CHECK_CONTAINS(r->out, "hit rate");
    CHECK_CONTAINS(r->out, "0 wrong blocks, 0 load errors, 0 unexpected prefix matches");
    CHECK(strstr(r->out, "UNEXPECTED") == NULL);
    CHECK_CONTAINS(r->out, "\nPASS\n");
    /* The first request of all finds nothing; the second shares the system prompt's 5
     * blocks (40 tokens / 8). */
    CHECK_CONTAINS(r->out, "req   0 doc 0 q 0:");
    CHECK_CONTAINS(r->out, "| match    0 |");
    const char *second = strstr(r->out, "req   1 doc 1 q 0:");
    CHECK(second != NULL);
    CHECK(strncmp(strstr(second, "| match"), "| match    5 |", 14) == 0);
}

/* A store too small for the run evicts; the demo must still never see a wrong byte. */
TEST(cli_demo_evicting_store) {
    run_result *r = run_tide("demo", "--synthetic", "--url", "mem://?capacity=1MiB", "--docs", "3",
                             "--questions", "2", "--prefix-tokens", "512", "--bytes-per-token",
                             "512", "--quiet", NULL);
    CHECK_RUN(r, 0);
    CHECK(strstr(r->out, "req ") == NULL); /* --quiet */
    CHECK_CONTAINS(r->out, "PASS");
    CHECK(strstr(r->out, " 0 evictions") == NULL);
}

/* The test hook stores one block with a flipped byte: the demo must catch it and fail. */
TEST(cli_demo_detects_corruption) {
    run_result *r =
        run_tide("demo", "--synthetic", "--docs", "2", "--questions", "1", "--prefix-tokens", "64",
                 "--system-tokens", "32", "--bytes-per-token", "256", "--inject-corruption", NULL);
    CHECK_RUN(r, 1);
    CHECK_CONTAINS(r->out, "FAIL");
    CHECK_CONTAINS(r->out, "WRONG BYTES");
    CHECK_CONTAINS(r->err, "WRONG BYTES: request 1 block 0");
}

/* ---- `tide demo`: the reference engine through the connector ---------------------------- */

TEST(cli_demo_engine_help_and_bad_args) {
    run_result *r = run_tide("demo", "--help", NULL);
    CHECK_RUN(r, 0);
    CHECK_CONTAINS(r->out, "usage: tide demo");
    CHECK_CONTAINS(r->out, "--prefix-tokens");
    CHECK_CONTAINS(r->out, "--synthetic");
    const char *bad[][2] = {
        {"--model", "mlp"},       {"--tp", "0"}, {"--dcp", "x"},
        {"--prefix-tokens", "0"}, {"--tp", "3"}, /* 4 query heads do not split over 3 ranks: the
                                                    engine says so */
        {"--what", "1"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        r = run_tide("demo", bad[i][0], bad[i][1], NULL);
        CHECK_RUN(r, 2);
        CHECK_CONTAINS(r->err, "tide demo: ");
    }
}

/* The default: a tided of the demo's own, reached over unix://, engines A and B in two
 * processes. B's prompts take the whole document from the store, and every prompt's logits
 * equal the recompute. */
TEST_T(cli_demo_engine_tided, 180) {
    run_result *r = run_tide("demo", "--prefix-tokens", "256", "--question-tokens", "16",
                             "--questions", "1", "--interval", "64", NULL);
    CHECK_RUN(r, 0);
    CHECK_CONTAINS(r->out, "store: unix:///tmp/tide-demo-");
    CHECK_CONTAINS(r->out, "a tided started for this demo (pid ");
    CHECK_CONTAINS(r->out, "engine A (pid ");
    CHECK_CONTAINS(r->out, "engine B (pid ");
    CHECK_CONTAINS(r->out, "engine B: 1 prompt, 256 of 272 prompt tokens from the store");
    CHECK_CONTAINS(r->out, "bit for bit: 2 of 2 prompts");
    CHECK(strstr(r->out, "DIFFERENT") == NULL);
    CHECK_CONTAINS(r->out, "\nPASS\n");
    CHECK_STR(r->err, "");
    /* The demo stopped its tided: the pid is gone (reaped, so not even a zombie). */
    int pid = atoi(strstr(r->out, "a tided started for this demo (pid ") + 35);
    CHECK(pid > 0);
    CHECK(kill(pid, 0) != 0);
}

/* mem://: two engine instances in one process; attention-only with TP 2 x DCP 2. */
TEST_T(cli_demo_engine_mem_tp_dcp, 180) {
    run_result *r =
        run_tide("demo", "--url", "mem://", "--model", "attention", "--tp", "2", "--dcp", "2",
                 "--prefix-tokens", "192", "--question-tokens", "8", "--questions", "1", NULL);
    CHECK_RUN(r, 0);
    CHECK_CONTAINS(r->out, "TP 2 x DCP 2");
    CHECK_CONTAINS(r->out, "two engine instances in this process");
    CHECK_CONTAINS(r->out, "engine B: 1 prompt, 192 of 200 prompt tokens from the store");
    CHECK_CONTAINS(r->out, "\nPASS\n");
}

/* A store nobody serves: the engines cannot open it, warn, compute every prompt, and the
 * demo still passes (the logits are right; only the reuse is lost). A store that dies while
 * the engines use it is tested with the engine glue (test_etide.c). */
TEST_T(cli_demo_engine_store_down, 180) {
    char url[64];
    snprintf(url, sizeof(url), "tide://127.0.0.1:%d", test_free_port());
    run_result *r = run_tide("demo", "--url", url, "--prefix-tokens", "128", "--question-tokens",
                             "8", "--questions", "1", NULL);
    CHECK_RUN(r, 0);
    CHECK_CONTAINS(r->err, "tide demo: warning: engine A: cannot open tide://127.0.0.1:");
    CHECK_CONTAINS(r->err, "running without a store");
    CHECK_CONTAINS(r->err,
                   "tide demo: warning: engine B B-q1: no store: computed the whole prompt");
    CHECK_CONTAINS(r->out, "engine B: 1 prompt, 0 of 136 prompt tokens from the store");
    CHECK_CONTAINS(r->out, "bit for bit: 2 of 2 prompts");
    CHECK_CONTAINS(r->out, "\nPASS\n");
}

/* bench/ttft with tiny sizes: it runs over mem://, unix:// and tide://, starts and stops its
 * tided, and finds the logits after every load equal to the recompute. (No figure is
 * checked: it is a benchmark.) */
TEST_T(bench_ttft_smoke, 180) {
    char prog[512];
    snprintf(prog, sizeof(prog), "%s/bench/ttft", test_build_dir());
    run_result *r =
        run_cmd(prog, "--sizes", "64,128", "--question-tokens", "8", "--reps", "1", NULL);
    CHECK_RUN(r, 0);
    CHECK_CONTAINS(r->out, "| 64 | mem:// |");
    CHECK_CONTAINS(r->out, "| 64 | unix:// (tided, shared pool) |");
    CHECK_CONTAINS(r->out, "| 128 | tide:// (tided, loopback TCP) |");
    CHECK(strstr(r->out, "DIFFERENT") == NULL);
    CHECK(strstr(r->out, "failed") == NULL);
    r = run_cmd(prog, "--sizes", "0", NULL);
    CHECK_RUN(r, 2);
    CHECK_CONTAINS(r->err, "usage:");
}
