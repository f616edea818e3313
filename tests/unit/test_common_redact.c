/*
 * test_common_redact.c — the one redaction (common/redact.c, tide_redact): URL options
 * that hold secrets, user:password@, tokens from the environment and registered ones,
 * URLs inside messages, cut-to-fit output; and that library error messages and log lines
 * pass through it.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/errors.h"
#include "common/log.h"
#include "common/redact.h"
#include "harness.h"
#include "tide.h"

TEST(common_redact_cases) {
    unsetenv("TIDE_AUTH_TOKEN");
    static const char *const cases[][2] = {
        {"tide://h:1?token=abc", "tide://h:1?token=***"},
        {"tide://h:1?conns=2&token=abc&timeout_ms=5", "tide://h:1?conns=2&token=***&timeout_ms=5"},
        {"tide://h:1?TOKEN=abc", "tide://h:1?TOKEN=***"},
        {"unix:///run/t.sock?auth_token=x%20y#frag", "unix:///run/t.sock?auth_token=***#frag"},
        {"etcd://u:pw@e1:2379/c?password=p&secret=s",
         "etcd://u:***@e1:2379/c?password=***&secret=***"},
        {"cannot open 'tide://a:1,b:2?replicas=2&token=zz': refused",
         "cannot open 'tide://a:1,b:2?replicas=2&token=***': refused"},
        {"x tide://h:1?token=a y tide://g:2?token=b z",
         "x tide://h:1?token=*** y tide://g:2?token=*** z"},
        /* Misspelt secret options: unknown to every backend, named in its error beside the
         * value. */
        {"tide://h:1?tokn=abc&conns=2", "tide://h:1?tokn=***&conns=2"},
        {"tide://h:1?toekn=abc", "tide://h:1?toekn=***"},
        {"etcd://e:1/c?passwrod=p&scret=s", "etcd://e:1/c?passwrod=***&scret=***"},
        {"tide://h:1?auth_tokens=abc", "tide://h:1?auth_tokens=***"},
        /* Not secrets: ports, IPv6, a key named token outside a query, empty values, names
         * that only share letters with one. */
        {"tide://h:1?timeout_ms=5&poll_ms=2&replicas=2&verify=1&policy=lru",
         "tide://h:1?timeout_ms=5&poll_ms=2&replicas=2&verify=1&policy=lru"},
        {"tide://[::1]:7474?conns=2", "tide://[::1]:7474?conns=2"},
        {"tide://h:1?token=", "tide://h:1?token="},
        {"key token=abc", "key token=abc"},
        {"tide://h:7474/path@x", "tide://h:7474/path@x"},
        {"no url here: a:b@c", "no url here: a:b@c"},
        {"", ""},
    };
    char out[256];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        test_context = cases[i][0];
        size_t n = redact_text(cases[i][0], out, sizeof(out));
        CHECK_STR(out, cases[i][1]);
        CHECK_EQ(n, strlen(cases[i][1]));
        CHECK_EQ(tide_redact(cases[i][0], out, sizeof(out)), strlen(cases[i][1]));
        CHECK_STR(out, cases[i][1]);
    }
    test_context = NULL;
    /* Cut to fit, NUL-terminated, the length needed returned; never a partial secret. */
    CHECK_EQ(redact_text("tide://h:1?token=abcdefgh", out, 12), strlen("tide://h:1?token=***"));
    CHECK_STR(out, "tide://h:1?");
    CHECK_EQ(redact_text("tide://h:1?token=abcdefgh", out, 19), strlen("tide://h:1?token=***"));
    CHECK_STR(out, "tide://h:1?token=*");
    CHECK_EQ(redact_text(NULL, out, sizeof(out)), 0);
    CHECK_STR(out, "");
}

TEST(common_redact_literal_secrets) {
    char out[256];
    setenv("TIDE_AUTH_TOKEN", "env-Secret-9x2", 1);
    redact_text("HELLO refused for env-Secret-9x2 (env-Secret-9x2)", out, sizeof(out));
    CHECK_STR(out, "HELLO refused for *** (***)");
    /* Shorter than 8 bytes: a common word would be masked everywhere, so it is not. */
    setenv("TIDE_AUTH_TOKEN", "wrong", 1);
    redact_text("a wrong token", out, sizeof(out));
    CHECK_STR(out, "a wrong token");
    unsetenv("TIDE_AUTH_TOKEN");
    CHECK_EQ(redact_add_secret("file-Secret-31"), 0);
    redact_text("token file-Secret-31 loaded", out, sizeof(out));
    CHECK_STR(out, "token *** loaded");
}

/* Every library message passes through it: an error naming a URL shows no token. */
TEST(common_redact_error_messages_and_logs) {
    unsetenv("TIDE_AUTH_TOKEN");
    tide_store *s = NULL;
    CHECK(tide_open("nosuch://u:pw-77@h?token=tok-123456", &s) != 0);
    const char *m = tide_errmsg(NULL);
    CHECK_CONTAINS(m, "nosuch://u:***@h?token=***");
    CHECK(!strstr(m, "tok-123456") && !strstr(m, "pw-77"));
    CHECK(tide_open("mem://?capacity=1MiB&token=tok-123456", &s) != 0); /* unknown option */
    CHECK(!strstr(tide_errmsg(NULL), "tok-123456"));
    /* A log line: written to stderr, here a pipe. */
    int p[2];
    CHECK_EQ(pipe(p), 0);
    int saved = dup(2);
    CHECK(dup2(p[1], 2) == 2);
    log_write(LOG_LEVEL_ERROR, "cannot reach %s", "tide://h:1?token=tok-123456");
    dup2(saved, 2);
    close(saved);
    close(p[1]);
    char line[512] = {0};
    CHECK(read(p[0], line, sizeof(line) - 1) > 0);
    close(p[0]);
    CHECK_CONTAINS(line, "cannot reach tide://h:1?token=***\n");
}
