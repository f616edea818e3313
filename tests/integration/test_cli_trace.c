/*
 * test_cli_trace.c — `tide replay` and `tide analyze` run as a user runs them ($TIDE_BIN).
 *
 * The central check: replaying a trace against mem://?policy=lru or policy=chain of N
 * blocks gives exactly the hit counts, puts and evictions of the simulator's policy of the
 * same name with N blocks (blocks of 256 bytes, the store's allocation unit, so its byte
 * budget is exactly N blocks). Also: the default policy is adapt; S3-FIFO through the
 * store stays within the infinite cache's bound and reaches it when everything fits, a
 * wrong byte served by a real tided fails the run, and bad traces and bad arguments give
 * clear messages and exit 2. No test here asserts a speed.
 */
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "common/prng.h"
#include "harness.h"
#include "server_util.h"
#include "tide.h"
#include "trace/trace.h"

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

/* Run `tide ARGS...` from an argv array (NULL-terminated) with its output captured. */
static run_result *run_argv(const char *const *args) {
    static run_result r;
    const char *argv[64];
    int argc = 0;
    argv[argc++] = test_tide_bin();
    for (int i = 0; args[i] && argc < 63; i++)
        argv[argc++] = args[i];
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

#define CHECK_RUN(r, code)                                                                         \
    CHECK_MSG((r)->status == (code), "exit %d, want %d\nstdout:\n%s\nstderr:\n%s", (r)->status,    \
              (code), (r)->out, (r)->err)

/* Write text to a file in the test's directory; returns its path (static storage). */
static const char *write_file(const char *name, const char *text) {
    static char path[4][512];
    static int next;
    char *p = path[next++ % 4];
    snprintf(p, sizeof(path[0]), "%s/%s", test_tmpdir(), name);
    FILE *f = fopen(p, "w");
    CHECK(f != NULL);
    CHECK(fputs(text, f) >= 0);
    CHECK(fclose(f) == 0);
    return p;
}

/* A prefix-tree trace: 16 documents, chains of 1..8 shared blocks and 0..3 private ones,
 * blocks of 16 tokens, the last one partial. Deterministic. */
static const char *tree_trace(int nreq) {
    static char text[1 << 20];
    size_t n = 0;
    uint64_t x = 0x9E3779B97F4A7C15ull, next_private = 100000;
    for (int q = 0; q < nreq; q++) {
        uint64_t r = prng_next(&x);
        int doc = (int)(r % 16), depth = 1 + (int)((r >> 8) % 8), priv = (int)((r >> 16) % 4);
        n += (size_t)snprintf(text + n, sizeof(text) - n,
                              "{\"timestamp\": %d, \"input_length\": %d, \"output_length\": 7, "
                              "\"hash_ids\": [",
                              q * 3, (depth + priv) * 16 - 5);
        for (int i = 0; i < depth + priv; i++)
            n += (size_t)snprintf(text + n, sizeof(text) - n, "%s%llu", i ? ", " : "",
                                  i < depth ? (unsigned long long)(doc * 100 + i)
                                            : (unsigned long long)next_private++);
        n += (size_t)snprintf(text + n, sizeof(text) - n, "]}\n");
        CHECK(n < sizeof(text));
    }
    return write_file("tree.jsonl", text);
}

static cJSON *run_json(const char *const *args) {
    run_result *r = run_argv(args);
    CHECK_RUN(r, 0);
    cJSON *j = cJSON_Parse(r->out);
    CHECK_MSG(j != NULL, "not JSON: %s", r->out);
    return j;
}

static double num(const cJSON *j, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, name);
    CHECK_MSG(cJSON_IsNumber(v), "no number \"%s\"", name);
    return v->valuedouble;
}

/* Replay the tree trace against mem://?policy=POLICY at each capacity and check every
 * figure against the simulator's policy sim, block for block. */
static void replay_matches(const char *policy, int sim) {
    const char *path = tree_trace(400);
    trace t;
    char err[256];
    CHECK_EQ(trace_load(path, 16, 0, &t, err, sizeof(err)), 0);
    const uint64_t caps[] = {1, 3, 8, 20, 50, 120, 100000};
    char url[64], ctx[96];
    snprintf(url, sizeof(url), "mem://?policy=%s", policy);
    for (size_t k = 0; k < sizeof(caps) / sizeof(caps[0]); k++) {
        sim_result r;
        CHECK_EQ(sim_run(&t, sim, caps[k], &r), 0);
        char cap[32];
        snprintf(cap, sizeof(cap), "%lluB", (unsigned long long)caps[k] * 256);
        snprintf(ctx, sizeof(ctx), "%s, %s bytes", policy, cap);
        test_context = ctx;
        const char *args[] = {
            "replay",     path, "--block-tokens", "16", "--bytes-per-token", "16", "--url", url,
            "--capacity", cap,  "--json",         NULL};
        cJSON *j = run_json(args);
        CHECK_EQ(num(j, "hit_blocks"), r.hit_blocks);
        CHECK_EQ(num(j, "hit_tokens"), r.hit_tokens);
        CHECK_EQ(num(j, "blocks"), r.blocks);
        CHECK_EQ(num(j, "tokens"), r.tokens);
        CHECK_EQ(num(j, "wrong_blocks"), 0);
        CHECK_EQ(num(j, "loaded_bytes"), r.hit_blocks * 256);
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(j, "store");
        CHECK(st != NULL);
        CHECK_EQ(num(st, "puts"), r.inserts);
        CHECK_EQ(num(st, "evictions"), r.evictions);
        CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "pass")));
        cJSON_Delete(j);
    }
    test_context = NULL;
    trace_free(&t);
}

/* The adapt policy through the store is the simulator's adapt, block for block: its ghost
 * hashes the same keys with the same function, so it collides, forgets and readmits where
 * the store's does. On this trace adapt differs from chain at some capacity (blocks come
 * back after eviction), so the check is not chain's in disguise. */
TEST_T(cli_replay_adapt_matches_simulation, 120) {
    replay_matches("adapt", SIM_ADAPT);
    const char *path = tree_trace(400);
    trace t;
    char err[256];
    CHECK_EQ(trace_load(path, 16, 0, &t, err, sizeof(err)), 0);
    int differ = 0;
    for (uint64_t cap = 3; cap <= 120; cap += 13) {
        sim_result a, c;
        CHECK_EQ(sim_run(&t, SIM_ADAPT, cap, &a), 0);
        CHECK_EQ(sim_run(&t, SIM_CHAIN, cap, &c), 0);
        differ += a.hit_blocks != c.hit_blocks;
    }
    CHECK(differ > 0);
    trace_free(&t);
}

/* The chain policy through the store is the simulator's chain, block for block: the store
 * sees only batch order (mem.c's chain cursors), as the simulator assumes. The policies
 * differ on this trace, so the check is not LRU's in disguise. */
TEST_T(cli_replay_chain_matches_simulation, 120) {
    replay_matches("chain", SIM_CHAIN);
    const char *path = tree_trace(400);
    trace t;
    char err[256];
    CHECK_EQ(trace_load(path, 16, 0, &t, err, sizeof(err)), 0);
    sim_result lru, chain;
    CHECK_EQ(sim_run(&t, SIM_LRU, 20, &lru), 0);
    CHECK_EQ(sim_run(&t, SIM_CHAIN, 20, &chain), 0);
    CHECK(lru.hit_blocks != chain.hit_blocks);
    trace_free(&t);
}

/* The default (no policy= in the URL) is adapt: the replay's hits are adapt's simulated ones,
 * which differ from chain's on this trace (checked, so the test tells the two apart). */
TEST_T(cli_replay_default_policy_is_adapt, 60) {
    const char *path = tree_trace(400);
    trace t;
    char err[256];
    CHECK_EQ(trace_load(path, 16, 0, &t, err, sizeof(err)), 0);
    sim_result r, c;
    CHECK_EQ(sim_run(&t, SIM_ADAPT, 20, &r), 0);
    CHECK_EQ(sim_run(&t, SIM_CHAIN, 20, &c), 0);
    CHECK(r.hit_blocks != c.hit_blocks);
    const char *args[] = {"replay", path,         "--block-tokens", "16",     "--bytes-per-token",
                          "16",     "--capacity", "5120B",          "--json", NULL};
    cJSON *j = run_json(args);
    CHECK_EQ(num(j, "hit_blocks"), r.hit_blocks);
    cJSON_Delete(j);
    trace_free(&t);
}

TEST_T(cli_replay_lru_matches_simulation, 120) {
    replay_matches("lru", SIM_LRU);
    const char *path = tree_trace(400);
    trace t;
    char err[256];
    CHECK_EQ(trace_load(path, 16, 0, &t, err, sizeof(err)), 0);
    sim_result inf;
    CHECK_EQ(sim_run(&t, SIM_INFINITE, 0, &inf), 0);
    /* The store's S3-FIFO keeps a hashed ghost (src/store/s3fifo.c), so it is not expected
     * to match the simulator block for block; it must stay within the infinite cache and
     * reach it when everything fits. */
    const char *caps3[] = {"2560B", "12800B", "25600000B"};
    for (size_t k = 0; k < 3; k++) {
        const char *args[] = {
            "replay", path,    "--block-tokens",       "16",         "--bytes-per-token",
            "16",     "--url", "mem://?policy=s3fifo", "--capacity", caps3[k],
            "--json", NULL};
        cJSON *j = run_json(args);
        CHECK(num(j, "hit_blocks") <= inf.hit_blocks);
        if (k == 2) CHECK_EQ(num(j, "hit_blocks"), inf.hit_blocks);
        cJSON_Delete(j);
    }
    trace_free(&t);
}

/* The analyser through the CLI on the textbook string (one-block requests). */
TEST(cli_analyze_textbook) {
    const char *seq = "70120304230321201701";
    char text[4096];
    size_t n = 0;
    for (const char *p = seq; *p; p++)
        n += (size_t)snprintf(text + n, sizeof(text) - n,
                              "{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, "
                              "\"hash_ids\": [%c]}\n",
                              *p);
    const char *path = write_file("textbook.jsonl", text);
    const char *args[] = {"analyze", path,         "--block-tokens", "1",      "--bytes-per-token",
                          "1",       "--capacity", "3B,6B",          "--json", NULL};
    cJSON *j = run_json(args);
    CHECK_EQ(num(j, "blocks"), 20);
    CHECK_EQ(num(j, "distinct_blocks"), 6);
    const cJSON *res = cJSON_GetObjectItemCaseSensitive(j, "results");
    CHECK_EQ(cJSON_GetArraySize(res), 2);
    const cJSON *three = cJSON_GetArrayItem(res, 0);
    CHECK_EQ(num(three, "capacity_blocks"), 3);
    CHECK_EQ(num(cJSON_GetObjectItemCaseSensitive(three, "belady"), "hit_blocks"), 11);
    CHECK_EQ(num(cJSON_GetObjectItemCaseSensitive(three, "lru"), "hit_blocks"), 8);
    CHECK_EQ(num(cJSON_GetObjectItemCaseSensitive(three, "infinite"), "hit_blocks"), 14);
    /* How far from Belady: LRU's 8 hits of Belady's 11. */
    CHECK(fabs(num(cJSON_GetObjectItemCaseSensitive(three, "lru"), "of_belady") - 8.0 / 11.0) <
          1e-9);
    for (int p = 0; p < SIM_NPOLICIES; p++)
        CHECK_MSG(cJSON_GetObjectItemCaseSensitive(three, sim_policy_name(p)) != NULL,
                  "no \"%s\" in the JSON", sim_policy_name(p));
    cJSON_Delete(j);
    /* The table for people names every policy. */
    const char *args2[] = {
        "analyze", path, "--block-tokens", "1", "--model", "llama-3-8b", "--blocks", "3", NULL};
    run_result *r = run_argv(args2);
    CHECK_RUN(r, 0);
    CHECK_CONTAINS(r->out, "belady");
    CHECK_CONTAINS(r->out, "s3fifo");
    CHECK_CONTAINS(r->out, "chainarc");
    CHECK_CONTAINS(r->out, "token hit rate");
    CHECK_CONTAINS(r->out, "fraction of Belady's");
}

/* --speed paces requests by their timestamps; the output is the same as back to back. */
TEST(cli_replay_speed_and_text) {
    const char *path = write_file(
        "paced.jsonl",
        "{\"timestamp\": 0, \"input_length\": 40, \"output_length\": 1, \"hash_ids\": [1, 2, 3]}\n"
        "{\"timestamp\": 30, \"input_length\": 33, \"output_length\": 1, \"hash_ids\": [1, 2, 9]}\n"
        "{\"timestamp\": 60, \"input_length\": 16, \"output_length\": 1, \"hash_ids\": [1]}\n");
    const char *args[] = {
        "replay", path,       "--block-tokens", "16", "--bytes-per-token", "100", "--speed",
        "10",     "--verify", "sample",         NULL};
    run_result *r = run_argv(args);
    CHECK_RUN(r, 0);
    CHECK_CONTAINS(r->out, "hit rate  blocks 42.86% (3 of 7");
    CHECK_CONTAINS(r->out, "tokens 53.93% (48 of 89)");
    CHECK_CONTAINS(r->out, "lookup");
    CHECK_CONTAINS(r->out, "PASS");
    CHECK(strstr(r->err, "[") == NULL); /* no progress bar when stderr is not a terminal */
}

/* A tided serving a wrong value under a trace key: the replay must catch it and FAIL. */
TEST_T(cli_replay_wrong_bytes_fail, 60) {
    test_server ts;
    const char *const extra[] = {"--log-level", "warn", NULL};
    server_start(&ts, extra);
    tide_store *s;
    CHECK_EQ(tide_open(ts.url, &s), 0);
    uint8_t junk[256];
    memset(junk, 0x5A, sizeof(junk));
    CHECK_EQ(tide_put(s, "trace/2", 7, junk, sizeof(junk)), 0);
    tide_close(s);
    const char *path = write_file(
        "wrong.jsonl",
        "{\"timestamp\": 0, \"input_length\": 32, \"output_length\": 1, \"hash_ids\": [1, 2]}\n"
        "{\"timestamp\": 0, \"input_length\": 32, \"output_length\": 1, \"hash_ids\": [1, 2]}\n");
    const char *args[] = {"replay", path,    "--block-tokens", "16", "--bytes-per-token",
                          "16",     "--url", ts.url,           NULL};
    run_result *r = run_argv(args);
    CHECK_RUN(r, 1);
    CHECK_CONTAINS(r->err, "WRONG BYTES");
    CHECK_CONTAINS(r->err, "trace/2");
    CHECK_CONTAINS(r->out, "FAIL");
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}

TEST(cli_replay_bad_input) {
    const char *good = write_file(
        "good.jsonl",
        "{\"timestamp\": 0, \"input_length\": 512, \"output_length\": 1, \"hash_ids\": [1]}\n");
    const char *bad_json = write_file(
        "bad1.jsonl",
        "{\"timestamp\": 0, \"input_length\": 512, \"output_length\": 1, \"hash_ids\": [1]}\n"
        "\n"
        "{\"timestamp\": 1, \"input_length\": 512, \"output_length\": 1, \"hash_ids\": [1,}\n");
    const char *missing =
        write_file("bad2.jsonl", "{\"timestamp\": 0, \"output_length\": 1, \"hash_ids\": [1]}\n");
    const char *negative = write_file(
        "bad3.jsonl",
        "{\"timestamp\": 0, \"input_length\": -512, \"output_length\": 1, \"hash_ids\": [1]}\n");
    static const struct {
        const char *args[12];
        const char *want;
    } cases[] = {
        {{"replay", NULL}, "which trace?"},
        {{"replay", "/nonexistent.jsonl", NULL}, "cannot open /nonexistent.jsonl"},
        {{"replay", "BAD1", NULL}, "line 3: malformed JSON"},
        {{"replay", "BAD2", NULL}, "line 1: missing field \"input_length\""},
        {{"replay", "BAD3", NULL}, "line 1: field \"input_length\" is negative"},
        {{"analyze", "BAD1", "--capacity", "1GiB", NULL}, "line 3: malformed JSON"},
        {{"analyze", "BAD3", "--capacity", "1GiB", NULL}, "is negative"},
        {{"replay", "GOOD", "--model", "gpt-9", NULL}, "unknown model 'gpt-9'"},
        {{"analyze", "GOOD", "--model", "gpt-9", "--capacity", "1GiB", NULL}, "unknown model"},
        {{"replay", "GOOD", "--model", "llama-3-8b", "--bytes-per-token", "2", NULL}, "not both"},
        {{"replay", "GOOD", "--capacity", "12XB", NULL}, "--capacity wants a size"},
        {{"replay", "GOOD", "--capacity", "1MiB", NULL}, "holds no block of 67108864 bytes"},
        {{"replay", "GOOD", "--url", "tcp://127.0.0.1:1", "--capacity", "1GiB", NULL},
         "sizes the embedded mem:// store"},
        {{"replay", "GOOD", "--url", "mem://?capacity=1GiB", "--capacity", "1GiB", NULL},
         "capacity given twice"},
        {{"replay", "GOOD", "--bytes-per-token", "0", NULL}, "--bytes-per-token wants"},
        {{"replay", "GOOD", "--block-tokens", "x", NULL}, "--block-tokens wants"},
        {{"replay", "GOOD", "--speed", "-1", NULL}, "--speed wants"},
        {{"replay", "GOOD", "--verify", "most", NULL}, "--verify wants"},
        {{"replay", "GOOD", "--limit", "0", NULL}, "--limit wants"},
        {{"replay", "GOOD", "--frobnicate", NULL}, "unknown option"},
        {{"replay", "GOOD", "GOOD", NULL}, "one trace at a time"},
        {{"replay", "GOOD", "--block-tokens", "256", NULL}, "is --block-tokens right?"},
        {{"analyze", "GOOD", NULL}, "--capacity SIZE[,SIZE...] is required"},
        {{"analyze", "GOOD", "--capacity", "1GiB,,x", NULL}, "'x' is not a size"},
        {{"analyze", "GOOD", "--capacity", "1MiB", NULL}, "holds no block"},
        {{"analyze", "GOOD", "--blocks", "0", NULL}, "'0' is not a block count"},
        {{"analyze", "GOOD", "--capacity", "1GiB", "--blocks", "4", NULL}, "once"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *args[12];
        size_t n = 0;
        for (; cases[i].args[n]; n++) {
            const char *a = cases[i].args[n];
            args[n] = !strcmp(a, "GOOD")   ? good
                      : !strcmp(a, "BAD1") ? bad_json
                      : !strcmp(a, "BAD2") ? missing
                      : !strcmp(a, "BAD3") ? negative
                                           : a;
        }
        args[n] = NULL;
        test_context = cases[i].want;
        run_result *r = run_argv(args);
        CHECK_RUN(r, 2);
        CHECK_CONTAINS(r->err, cases[i].want);
    }
    test_context = NULL;
    const char *help[] = {"replay", "--help", NULL};
    run_result *r = run_argv(help);
    CHECK_RUN(r, 0);
    CHECK_CONTAINS(r->out, "usage: tide replay");
    CHECK_CONTAINS(r->out, "deepseek-v3");
}

/* Options of mem:// that merely end in "capacity" (the SSD tier's) are not --capacity:
 * replay through a small memory tier with disk behind it. */
TEST(cli_replay_with_ssd_tier_options) {
    const char *path = write_file(
        "tier.jsonl",
        "{\"timestamp\": 0, \"input_length\": 40, \"output_length\": 1, \"hash_ids\": [1, 2, 3]}\n"
        "{\"timestamp\": 1, \"input_length\": 33, \"output_length\": 1, \"hash_ids\": [1, 2, "
        "9]}\n");
    char url[600];
    snprintf(url, sizeof(url), "mem://?disk_dir=%s/disk&disk_capacity=8MiB", test_tmpdir());
    const char *args[] = {
        "replay", path,         "--block-tokens", "16", "--bytes-per-token", "100", "--url",
        url,      "--capacity", "1MiB",           NULL};
    run_result *r = run_argv(args);
    CHECK_RUN(r, 0);
    CHECK_CONTAINS(r->out, "hit rate  blocks 33.33% (2 of 6");
    CHECK_CONTAINS(r->out, "capacity 1.00 MiB");
    CHECK_CONTAINS(r->out, "PASS");
}

/* `tide analyze --help` names every policy it simulates, and says which is the store's
 * default (its list had left adapt out). */
TEST_T(cli_analyze_help_names_every_policy, 30) {
    char cmd[512];
    static char out[8192];
    snprintf(cmd, sizeof(cmd), "%s analyze --help 2>&1", test_tide_bin());
    CHECK_EQ(test_run(cmd, out, sizeof(out)), 0);
    for (int p = SIM_LRU; p < SIM_NPOLICIES; p++) /* infinite and Belady come before */
        CHECK_MSG(strstr(out, sim_policy_name(p)), "analyze --help does not name %s",
                  sim_policy_name(p));
    CHECK_CONTAINS(out, "adapt (the\nstore's default");
}
