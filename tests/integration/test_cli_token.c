/*
 * test_cli_token.c — no token tide was given is ever printed or written. Each CLI command
 * (put, get, exists, rm, stat, bench, replay, demo) runs against a tided that requires a
 * token, with the token in the URL or in $TIDE_AUTH_TOKEN, on paths that fail (nobody at
 * the port, a wrong token, an unknown option, an unknown scheme, user:password@) and that
 * succeed; stdout, stderr, the reports written and tided's own log are searched for it.
 * Where a URL is printed, its token must show as "***".
 */
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "server_util.h"

#define TOKEN "tok-Zq81vX4rPm2sLk9w"
#define WRONG "bad-Hh72cN0aQe5tUy3j"
#define OUT_CAP (256 * 1024)

static char out[OUT_CAP];

static const char *write_file(const char *name, const char *text) {
    static char path[512];
    snprintf(path, sizeof(path), "%s/%s", test_tmpdir(), name);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    CHECK(fputs(text, f) >= 0);
    CHECK(fclose(f) == 0);
    return path;
}

static void slurp(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, cap - 1, f) : 0;
    buf[n] = '\0';
    if (f) fclose(f);
}

/* text with the test's secrets replaced by their names, for failure messages (which must
 * not print them either: the test's output is a log too). */
static const char *named(const char *text) {
    static char buf[OUT_CAP];
    static const char *const secrets[][2] = {
        {TOKEN, "<TOKEN>"}, {WRONG, "<WRONG>"}, {"pw-Secret77", "<PASSWORD>"}};
    size_t n = 0;
    while (*text && n + 16 < sizeof(buf)) {
        size_t i = 0;
        for (; i < 3; i++)
            if (strncmp(text, secrets[i][0], strlen(secrets[i][0])) == 0) break;
        if (i < 3) {
            n += (size_t)snprintf(buf + n, sizeof(buf) - n, "%s", secrets[i][1]);
            text += strlen(secrets[i][0]);
        } else {
            buf[n++] = *text++;
        }
    }
    buf[n] = '\0';
    return buf;
}

/* No secret anywhere in text. */
static void check_clean(const char *what, const char *text) {
    if (strstr(text, TOKEN) || strstr(text, WRONG) || strstr(text, "pw-Secret77")) {
        char w[2048];
        snprintf(w, sizeof(w), "%s", named(what));
        test_fail(__FILE__, __LINE__, "%s printed a secret:\n%s", w, named(text));
    }
}

/* Run a shell command (stdout and stderr together); its output must hold no secret and,
 * when `shown` is set, must contain it (the URL printed with its token masked). Returns
 * the exit status. */
static int run_clean(const char *shown, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int run_clean(const char *shown, const char *fmt, ...) {
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    char full[2300];
    snprintf(full, sizeof(full), "cd %s && timeout 60 %s 2>&1", test_tmpdir(), cmd);
    int st = test_run(full, out, sizeof(out));
    check_clean(cmd, out);
    if (shown && !strstr(out, shown)) {
        char w[2048];
        snprintf(w, sizeof(w), "%s", named(cmd));
        test_fail(__FILE__, __LINE__, "%s: no \"%s\" in:\n%s", w, shown, named(out));
    }
    return st;
}

TEST_T(cli_token_never_printed, 120) {
    const char *tokfile = write_file("token", TOKEN "\n");
    test_server ts;
    const char *const args[] = {"--auth-token-file", tokfile, "--log-level", "debug", NULL};
    server_start(&ts, args);
    const char *tide = test_tide_bin();
    char good[256], dead[256], wrong[256];
    snprintf(good, sizeof(good), "%s?token=" TOKEN, ts.url);
    snprintf(wrong, sizeof(wrong), "%s?timeout_ms=2000&token=" WRONG, ts.url);
    snprintf(dead, sizeof(dead), "tide://127.0.0.1:%d?timeout_ms=300&token=" TOKEN,
             test_free_port());
    write_file("value", "hello");

    /* Paths that fail, each printing the URL with its token masked. */
    CHECK_EQ(run_clean("token=***", "%s get '%s' k", tide, dead), 1);
    CHECK_EQ(run_clean("token=***", "%s get '%s' k", tide, wrong), 1);
    CHECK_EQ(run_clean("token=***", "%s put '%s&bogus=1' k value", tide, good), 1);
    CHECK_EQ(run_clean("token=***", "%s exists 'nosuch://h?token=" TOKEN "' k", tide), 1);
    CHECK_EQ(run_clean("user:***@", "%s stat 'nosuch://user:pw-Secret77@h/x' ", tide), 1);
    CHECK_EQ(run_clean("token=***", "%s rm '%s' k", tide, dead), 1);
    CHECK_EQ(run_clean("token=***", "%s bench --url '%s' --seconds 0.1", tide, dead), 1);
    CHECK_EQ(run_clean("token=***", "env TIDE_AUTH_TOKEN=" TOKEN " %s get '%s' k", tide, wrong), 1);
    /* The token from the environment only: not in the URL, never printed either. */
    CHECK_EQ(run_clean(NULL, "env TIDE_AUTH_TOKEN=" WRONG " %s get '%s' k", tide, ts.url), 1);
    CHECK_EQ(
        run_clean(NULL, "env TIDE_AUTH_TOKEN=" TOKEN " %s get '%s?x=" TOKEN "' k", tide, ts.url),
        1);

    /* Paths that succeed (a missing key is a failure of the get, not of the store). */
    CHECK_EQ(run_clean(NULL, "%s put '%s' k value", tide, good), 0);
    CHECK_EQ(run_clean(NULL, "%s get '%s' k", tide, good), 0);
    CHECK_EQ(run_clean(NULL, "%s get '%s' missing", tide, good), 1);
    CHECK_EQ(run_clean(NULL, "env TIDE_AUTH_TOKEN=" TOKEN " %s exists '%s' k", tide, ts.url), 0);
    CHECK_EQ(run_clean(NULL, "%s stat '%s' --json", tide, good), 0);
    CHECK_EQ(run_clean(NULL, "%s rm '%s' k", tide, good), 0);

    /* Reports: bench and replay print the URL and write it in their JSON. */
    CHECK_EQ(run_clean("token=***",
                       "%s bench --url '%s' --seconds 0.1 --keys 4 --size 4KiB --json > "
                       "bench.json; cat bench.json",
                       tide, good),
             0);
    const char *trace = write_file(
        "t.jsonl",
        "{\"timestamp\": 0, \"input_length\": 32, \"output_length\": 1, \"hash_ids\": [1, 2]}\n"
        "{\"timestamp\": 0, \"input_length\": 32, \"output_length\": 1, \"hash_ids\": [1, 2]}\n");
    CHECK_EQ(run_clean("token=***",
                       "%s replay %s --block-tokens 16 --bytes-per-token 16 --url '%s'", tide,
                       trace, good),
             0);
    CHECK_EQ(run_clean("token=***",
                       "%s replay %s --block-tokens 16 --bytes-per-token 16 --url '%s' --json",
                       tide, trace, good),
             0);
    CHECK_EQ(run_clean("token=***",
                       "%s replay %s --block-tokens 16 --bytes-per-token 16 --url '%s'", tide,
                       trace, dead),
             1);
    /* demo: the synthetic one against the tided, and one that cannot open its store. */
    CHECK_EQ(run_clean("token=***",
                       "%s demo --synthetic --url '%s' --docs 2 --questions 1 --prefix-tokens "
                       "64 --system-tokens 32 --bytes-per-token 256",
                       tide, dead),
             1);
    run_clean(NULL,
              "%s demo --synthetic --url '%s' --docs 2 --questions 1 --prefix-tokens 64 "
              "--system-tokens 32 --bytes-per-token 256",
              tide, good);
    CHECK_CONTAINS(out, "PASS");
    /* demo's engines: each warns that it cannot open the store, and goes on without it. */
    CHECK_EQ(run_clean("token=***",
                       "%s demo --url '%s' --prefix-tokens 128 --question-tokens 8 --questions 1",
                       tide, dead),
             0);
    CHECK_CONTAINS(out, "cannot open");
    run_clean(NULL, "%s demo --url '%s' --prefix-tokens 128 --question-tokens 8 --questions 1",
              tide, good);
    CHECK_CONTAINS(out, "token=***");
    CHECK_CONTAINS(out, "PASS");

    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
    /* tided's own log, at debug level, after all of the above. */
    slurp(ts.log, out, sizeof(out));
    check_clean("tided's log", out);
}
