/*
 * harness.h — the test harness: TEST(name) { ... } registers a test; CHECK(cond) and
 * friends fail it with the file and line. Every test runs in its own forked process with a
 * time limit, so a crash or a hang fails that test and the run goes on. The runner prints
 * one line per test (PASS, FAIL or SKIP) and ends with "N passed, N failed, N skipped".
 *
 * Run a subset: tide-tests store_ unit/test_disk.c integration/   (each argument is a name
 * substring, a test file or a directory; see tests/README.md). A selection that matches
 * nothing exits 2. With TIDE_TESTS_NO_SKIP=1 a skipped test fails the run.
 */
#ifndef TIDE_HARNESS_H
#define TIDE_HARNESS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void (*test_fn)(void);
/* Printed with a failure when set: which case of a table-driven test was running. */
extern const char *test_context;
void test_register(const char *name, test_fn fn, const char *file, int timeout_s);
void test_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn));

/* TEST(name): a test with the default 60 s limit; TEST_T(name, seconds) sets its own. */
#define TEST_T(name, secs)                                                                         \
    static void test_##name(void);                                                                 \
    __attribute__((constructor)) static void test_reg_##name(void) {                               \
        test_register(#name, test_##name, __FILE__, (secs));                                       \
    }                                                                                              \
    static void test_##name(void)
#define TEST(name) TEST_T(name, 60)

/* TEST_SKIP("no IPv6 on loopback: %s", why): the test cannot run here; it ends at once and
 * counts as skipped, not passed. Say what is missing and what installs it. */
#define TEST_EXIT_SKIP 77
void test_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
#define TEST_SKIP(...) test_skip(__VA_ARGS__)

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) test_fail(__FILE__, __LINE__, "CHECK(%s)", #cond);                            \
    } while (0)
#define CHECK_MSG(cond, ...)                                                                       \
    do {                                                                                           \
        if (!(cond)) test_fail(__FILE__, __LINE__, __VA_ARGS__);                                   \
    } while (0)
#define CHECK_EQ(a, b)                                                                             \
    do {                                                                                           \
        long long _a = (long long)(a), _b = (long long)(b);                                        \
        if (_a != _b) test_fail(__FILE__, __LINE__, "%s == %s: %lld != %lld", #a, #b, _a, _b);     \
    } while (0)
#define CHECK_STR(a, b)                                                                            \
    do {                                                                                           \
        const char *_a = (a), *_b = (b);                                                           \
        if (!_a || !_b || strcmp(_a, _b))                                                          \
            test_fail(__FILE__, __LINE__, "%s == %s: \"%s\" != \"%s\"", #a, #b,                    \
                      _a ? _a : "(null)", _b ? _b : "(null)");                                     \
    } while (0)
/* The haystack contains the needle. */
#define CHECK_CONTAINS(hay, needle)                                                                \
    do {                                                                                           \
        const char *_h = (hay), *_n = (needle);                                                    \
        if (!_h || !strstr(_h, _n))                                                                \
            test_fail(__FILE__, __LINE__, "\"%s\" does not contain \"%s\"", _h ? _h : "(null)",    \
                      _n);                                                                         \
    } while (0)

/* Helpers for tests that start real processes. */
/* A free TCP port on 127.0.0.1 (bound and released; good enough for tests). */
int test_free_port(void);
/* Path of build/tide (from $TIDE_BIN) and of the build directory ($TIDE_BUILD). */
const char *test_tide_bin(void);
const char *test_build_dir(void);
/* A fresh temporary directory, removed by the harness when the test ends. */
const char *test_tmpdir(void);
/* Run the shell command cmd (bound it with `timeout` yourself) and put what it printed on
 * stdout (and stderr, when cmd says 2>&1) in out[0..cap), NUL-terminated. Returns its exit
 * status, or 128 + the signal that killed it. */
int test_run(const char *cmd, char *out, size_t cap);
/* Milliseconds on the monotonic clock, for timing a call against a bound. */
double test_now_ms(void);

#endif
