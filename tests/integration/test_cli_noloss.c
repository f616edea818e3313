/*
 * test_cli_noloss.c — the CLI never loses work while saying it succeeded. The key-value
 * commands refuse a store that is gone when the command exits (mem://, with or without a
 * disk tier, and an empty URL: an unset variable), saying why, before reading anything;
 * `tide bench` against a store too small for its working set does not print PASS, and
 * counts only the operations that succeeded as throughput.
 */
#include <stdarg.h>

#include <cjson/cJSON.h>

#include "harness.h"

#define OUT_CAP (64 * 1024)

/* Run a shell command line; its exit status, what it printed (2>&1) in out. */
static int sh(char *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int sh(char *out, const char *fmt, ...) {
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    return test_run(cmd, out, OUT_CAP);
}

TEST(cli_refuses_vanishing_store) {
    static char out[OUT_CAP];
    const char *bin = test_tide_bin(), *dir = test_tmpdir();
    char mark[600];
    snprintf(mark, sizeof(mark), "%s/read", dir);
    const char *urls[] = {"", "mem://", "MEM://?capacity=1MiB",
                          "mem://?disk_dir=/tmp/x&disk_capacity=64MiB"};
    for (size_t i = 0; i < sizeof(urls) / sizeof(urls[0]); i++) {
        test_context = urls[i];
        /* put: refused before its value is read: what was piped in is still there after. */
        int st = sh(out, "printf v | (timeout 10 %s put '%s' k - 2>&1; echo \"exit $?\"; cat > %s)",
                    bin, urls[i], mark);
        CHECK_MSG(strstr(out, "exit 2") != NULL, "put '%s' did not exit 2:\n%s", urls[i], out);
        CHECK_EQ(st, 0);
        CHECK_CONTAINS(out, "tide put: ");
        CHECK_CONTAINS(out, urls[i][0] ? "is a store inside this command" : "URL is empty");
        CHECK_CONTAINS(out, "gone when it exits");
        CHECK_CONTAINS(out, "tide://HOST:PORT");
        char got[16] = "";
        FILE *f = fopen(mark, "r");
        CHECK(f != NULL);
        CHECK(fgets(got, sizeof(got), f) != NULL); /* the value was left unread */
        fclose(f);
        CHECK_STR(got, "v");
        const char *cmds[] = {"get '%s' k", "rm '%s' k", "exists '%s' k", "stat '%s'"};
        for (size_t c = 0; c < sizeof(cmds) / sizeof(cmds[0]); c++) {
            char args[300];
            snprintf(args, sizeof(args), cmds[c], urls[i]);
            CHECK_MSG(sh(out, "timeout 10 %s %s 2>&1", bin, args) == 2, "%s: not refused:\n%s",
                      args, out);
            CHECK_CONTAINS(out, "gone when it exits");
        }
    }
    test_context = NULL;
}

TEST(cli_bench_refuses_empty_url) {
    static char out[OUT_CAP];
    CHECK_EQ(sh(out, "timeout 10 %s bench --url '' --seconds 0.1 2>&1", test_tide_bin()), 2);
    CHECK_CONTAINS(out, "--url is empty");
}

/* 16 MiB of working set in a 4 MiB store: three quarters of the gets miss. The run fails,
 * says why, and its ops are the hits only. */
TEST_T(cli_bench_mostly_missed_fails, 60) {
    static char out[OUT_CAP];
    const char *bin = test_tide_bin();
    int st = sh(out,
                "timeout 30 %s bench --url 'mem://?capacity=4MiB' --size 256KiB --keys 64 "
                "--seconds 0.3 2>&1",
                bin);
    CHECK_MSG(st == 1, "exit %d, want 1:\n%s", st, out);
    CHECK_MSG(strstr(out, "\nPASS") == NULL, "PASS printed:\n%s", out);
    CHECK_CONTAINS(out, "\nFAIL\n");
    CHECK_CONTAINS(out, "operations did not succeed");
    CHECK_CONTAINS(out, "the working set is larger than the store");
    CHECK_CONTAINS(out, "attempted did not succeed (misses, errors): not counted above");

    st = sh(out,
            "timeout 30 %s bench --url 'mem://?capacity=4MiB' --size 256KiB --keys 64 "
            "--seconds 0.3 --json 2>/dev/null",
            bin);
    CHECK_EQ(st, 1);
    cJSON *j = cJSON_Parse(out);
    CHECK_MSG(j != NULL, "not JSON: %s", out);
    CHECK(cJSON_IsFalse(cJSON_GetObjectItem(j, "ok")));
    cJSON *r = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "results"), 0);
    CHECK_MSG(cJSON_GetObjectItem(r, "attempted") != NULL, "no attempted in: %s", out);
    double ops = cJSON_GetObjectItem(r, "ops")->valuedouble;
    double tried = cJSON_GetObjectItem(r, "attempted")->valuedouble;
    double misses = cJSON_GetObjectItem(j, "misses")->valuedouble;
    double bytes = cJSON_GetObjectItem(r, "bytes")->valuedouble;
    /* ops are the values read; the misses are apart and add up to what was attempted. */
    CHECK_MSG(ops + misses == tried && 2 * ops < tried, "ops %.0f, misses %.0f, attempted %.0f",
              ops, misses, tried);
    CHECK_EQ(bytes, ops * 256 * 1024);
    cJSON_Delete(j);
}

/* A store that holds the working set: PASS, and every attempted get is an op. */
TEST_T(cli_bench_fitting_passes, 60) {
    static char out[OUT_CAP];
    int st = sh(out,
                "timeout 30 %s bench --url 'mem://?capacity=64MiB' --size 256KiB --keys 64 "
                "--seconds 0.2 --json",
                test_tide_bin());
    CHECK_MSG(st == 0, "exit %d:\n%s", st, out);
    cJSON *j = cJSON_Parse(out);
    CHECK_MSG(j != NULL, "not JSON: %s", out);
    CHECK(cJSON_IsTrue(cJSON_GetObjectItem(j, "ok")));
    cJSON *r = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "results"), 0);
    cJSON *ops = cJSON_GetObjectItem(r, "ops"), *tried = cJSON_GetObjectItem(r, "attempted");
    CHECK_MSG(ops && tried, "no ops or attempted in: %s", out);
    CHECK(ops->valuedouble > 0);
    CHECK_EQ(ops->valuedouble, tried->valuedouble);
    cJSON_Delete(j);
}
