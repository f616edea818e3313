/*
 * test_suggest.c — the helpers behind tide's error messages: the closest name to a
 * misspelt one (common/suggest.c), sizes a person typed (size_parse_user in
 * common/util.c) and why a text is not JSON (common/json_diag.c).
 */
#include <string.h>

#include "common/json_diag.h"
#include "common/suggest.h"
#include "common/util.h"
#include "harness.h"
#include "tide.h"

static const char *closest(const char *word, const char *const *cands) {
    suggest sg;
    suggest_init(&sg, word);
    for (size_t i = 0; cands[i]; i++)
        suggest_offer(&sg, cands[i]);
    return suggest_best(&sg);
}

TEST(suggest_closest_name) {
    CHECK_EQ(suggest_distance("kitten", "sitting", 5), 3);
    CHECK_EQ(suggest_distance("capcity", "capacity", 3), 1);
    CHECK_EQ(suggest_distance("teh", "the", 3), 1); /* a swap counts one */
    CHECK_EQ(suggest_distance("metrics_port", "metrics-port", 3), 0);
    CHECK_EQ(suggest_distance("abcdefgh", "zzzzzzzz", 2), 3); /* stops past the limit */
    static const char *const flags[] = {"port", "bind", "capacity", "threads", "policy", NULL};
    CHECK_STR(closest("capcity", flags), "capacity");
    CHECK_STR(closest("PORT", flags), "port");
    CHECK_STR(closest("thread", flags), "threads");
    CHECK_STR(closest("polcy", flags), "policy");
    CHECK(closest("frobnicate", flags) == NULL);
    CHECK(closest("x", flags) == NULL); /* a one-letter word is no evidence */
    static const char *const tiny[] = {"a", "b", NULL};
    CHECK(closest("c", tiny) == NULL);
    char hint[64];
    suggest sg;
    suggest_init(&sg, "gte");
    suggest_offer(&sg, "get");
    CHECK_STR(suggest_hint(&sg, hint, sizeof(hint)), " (did you mean 'get'?)");
    suggest_init(&sg, "zzz");
    suggest_offer(&sg, "get");
    CHECK_STR(suggest_hint(&sg, hint, sizeof(hint)), "");
}

TEST(suggest_sizes_a_person_typed) {
    uint64_t v = 0;
    char why[200];
    CHECK_EQ(size_parse_user("4GiB", 0, &v, why, sizeof(why)), 0);
    CHECK_EQ(v, 4ull << 30);
    CHECK_EQ(size_parse_user("512MB", 0, &v, why, sizeof(why)), 0);
    CHECK_EQ(v, 512000000ull);
    CHECK_EQ(size_parse_user("0", 0, &v, why, sizeof(why)), 0);
    CHECK_EQ(v, 0);
    CHECK_EQ(size_parse_user("100B", 0, &v, why, sizeof(why)), 0);
    CHECK_EQ(v, 100);
    CHECK_EQ(size_parse_user("64", 0, &v, why, sizeof(why)), TIDE_ESIZE);
    CHECK_STR(why, "'64' has no unit: write 64B for bytes, or 64MiB, 64GiB");
    CHECK_EQ(size_parse_user("64", 1, &v, why, sizeof(why)), 0); /* a URL built by a program */
    CHECK_EQ(v, 64);
    CHECK_EQ(size_parse_user("2g", 1, &v, why, sizeof(why)), TIDE_ESIZE);
    CHECK_STR(why, "'2g' is ambiguous: write 2GiB for powers of 1024 or 2GB for powers of 1000");
    CHECK_EQ(size_parse_user("1.5T", 0, &v, why, sizeof(why)), TIDE_ESIZE);
    CHECK_CONTAINS(why, "write 1.5TiB");
    CHECK_EQ(size_parse_user("3 parsecs", 0, &v, why, sizeof(why)), TIDE_ESIZE);
    CHECK_CONTAINS(why, "unknown unit 'parsecs'");
    CHECK_EQ(size_parse_user("", 0, &v, why, sizeof(why)), TIDE_ESIZE);
    CHECK_CONTAINS(why, "is not a size");
    CHECK_EQ(size_parse_user("1.5", 1, &v, why, sizeof(why)), TIDE_ESIZE);
    CHECK_CONTAINS(why, "not a whole number of bytes");
    /* The library's own parser is unchanged: programs keep their bare byte counts. */
    CHECK_EQ(tide_size_parse("64", &v), 0);
    CHECK_EQ(v, 64);
}

static const char *diag(const char *text, int *line, int *col) {
    static char what[300];
    if (json_diagnose(text, strlen(text), line, col, what, sizeof(what)) == 0) return NULL;
    return what;
}

TEST(suggest_json_mistakes_named) {
    int l, c;
    CHECK(diag("{\"a\": [1, 2.5e3, -0, \"x\\u00e9\", true, null], \"b\": {}}", &l, &c) == NULL);
    CHECK(diag("  7  ", &l, &c) == NULL);
    static const struct {
        const char *text;
        int line, col;
        const char *what;
    } cases[] = {
        {"{\"a\": 1,\n}", 2, 1, "a trailing comma before '}'"},
        {"[1, 2,]", 1, 7, "a trailing comma before ']'"},
        {"{\"a\": 1 \"b\": 2}", 1, 9,
         "expected ',' or '}' after the value of \"a\", got '\"' (a "
         "missing comma?)"},
        {"{\"a\" 1}", 1, 6, "expected ':' after the key \"a\", got '1'"},
        {"{'a': 1}", 1, 2, "single quotes"},
        {"{a: 1}", 1, 2, "expected a key in double quotes, got 'a'"},
        {"{\"a\": 4GiB}", 1, 8, "a value such as 4GiB goes in double quotes"},
        {"{\"a\": 007}", 1, 8, "a number with a leading zero"},
        {"{\"a\": TRUE}", 1, 7, "the bare word 'TRUE'"},
        {"{\"a\": \"x\\q\"}", 1, 10, "unknown escape '\\q'"},
        {"{\"a\": \"\\u12\"}", 1, 12, "\\u takes four hex digits"},
        {"{\"a\": \"x", 1, 7, "a string that never ends"},
        {"{\"a\": 1", 1, 8, "the text ends inside an object"},
        {"[1, 2", 1, 6, "the text ends inside an array"},
        {"{} {}", 1, 4, "more after the end of the JSON value: '{'"},
        {"# comment", 1, 1, "expected a value, got '#'"},
        {"{\"a\": 1, /* c */}", 1, 10, "a comment: JSON has none"},
        {"", 1, 1, "the text is empty"},
        {"{\"a\": -}", 1, 8, "expected a digit after '-'"},
        {"{\"a\": 1.}", 1, 9, "expected a digit after the decimal point"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        test_context = cases[i].text;
        const char *what = diag(cases[i].text, &l, &c);
        CHECK_MSG(what != NULL, "accepted: %s", cases[i].text);
        CHECK_CONTAINS(what, cases[i].what);
        CHECK_MSG(l == cases[i].line && c == cases[i].col, "at %d:%d, want %d:%d (%s)", l, c,
                  cases[i].line, cases[i].col, what);
    }
    test_context = NULL;
    /* Nesting is bounded, not followed into the stack. */
    static char deep[2000];
    memset(deep, '[', sizeof(deep) - 1);
    CHECK_CONTAINS(diag(deep, &l, &c), "nested deeper than 256 levels");
}
