/*
 * json_diag.c — a strict JSON (RFC 8259) recognizer that stops at the first mistake and
 * names it (json_diag.h). It builds nothing; recursion is bounded by JD_DEPTH_MAX.
 */
#include "common/json_diag.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define JD_DEPTH_MAX 256

typedef struct jd {
    const char *s;
    size_t len, pos;
    char *what;
    size_t cap;
    int failed;
} jd;

static int jd_fail(jd *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int jd_fail(jd *d, const char *fmt, ...) {
    if (d->failed) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->what, d->cap, fmt, ap);
    va_end(ap);
    d->failed = 1;
    return -1;
}

static void jd_ws(jd *d) {
    while (d->pos < d->len && strchr(" \t\r\n", d->s[d->pos]) && d->s[d->pos])
        d->pos++;
}

static int jd_at_end(const jd *d) {
    return d->pos >= d->len || d->s[d->pos] == '\0';
}

/* What stands at the current position, for "got ..." in a message. */
static const char *jd_got(const jd *d, char *buf, size_t cap) {
    if (jd_at_end(d)) return "the end of the text";
    unsigned char c = (unsigned char)d->s[d->pos];
    if (c >= 0x20 && c < 0x7f)
        snprintf(buf, cap, "'%c'", c);
    else
        snprintf(buf, cap, "byte 0x%02x", c);
    return buf;
}

static int jd_value(jd *d, int depth);

static int jd_string(jd *d) {
    size_t start = d->pos++;
    while (!jd_at_end(d)) {
        unsigned char c = (unsigned char)d->s[d->pos];
        if (c == '"') {
            d->pos++;
            return 0;
        }
        if (c < 0x20)
            return jd_fail(d,
                           c == '\n' ? "a string runs past the end of its line (a missing "
                                       "closing '\"'?)"
                                     : "a control character (0x%02x) inside a string: write "
                                       "it escaped",
                           c);
        if (c == '\\') {
            d->pos++;
            if (jd_at_end(d)) break;
            char e = d->s[d->pos];
            if (e == 'u') {
                for (int k = 1; k <= 4; k++)
                    if (d->pos + k >= d->len ||
                        !strchr("0123456789abcdefABCDEF", d->s[d->pos + k]) || !d->s[d->pos + k]) {
                        d->pos += (size_t)k;
                        return jd_fail(d, "\\u takes four hex digits");
                    }
                d->pos += 4;
            } else if (!strchr("\"\\/bfnrt", e) || !e) {
                return jd_fail(d,
                               "unknown escape '\\%c' in a string (known: \\\" \\\\ \\/ \\b "
                               "\\f \\n \\r \\t \\uXXXX)",
                               e);
            }
        }
        d->pos++;
    }
    d->pos = start;
    return jd_fail(d, "a string that never ends: the closing '\"' is missing");
}

static int jd_digits(jd *d) {
    size_t n = 0;
    while (!jd_at_end(d) && d->s[d->pos] >= '0' && d->s[d->pos] <= '9')
        d->pos++, n++;
    return n ? 0 : -1;
}

static int jd_number(jd *d) {
    if (d->s[d->pos] == '-') d->pos++;
    if (!jd_at_end(d) && d->s[d->pos] == '0') {
        d->pos++;
        if (!jd_at_end(d) && d->s[d->pos] >= '0' && d->s[d->pos] <= '9')
            return jd_fail(d, "a number with a leading zero: JSON has no octal, write it without "
                              "the 0 (or as a string)");
    } else if (jd_digits(d)) {
        return jd_fail(d, "expected a digit after '-'");
    }
    if (!jd_at_end(d) && d->s[d->pos] == '.') {
        d->pos++;
        if (jd_digits(d)) return jd_fail(d, "expected a digit after the decimal point");
    }
    if (!jd_at_end(d) && (d->s[d->pos] == 'e' || d->s[d->pos] == 'E')) {
        d->pos++;
        if (!jd_at_end(d) && (d->s[d->pos] == '+' || d->s[d->pos] == '-')) d->pos++;
        if (jd_digits(d)) return jd_fail(d, "expected a digit in the exponent");
    }
    /* "4GiB" unquoted: say to quote it. */
    if (!jd_at_end(d) && ((d->s[d->pos] >= 'a' && d->s[d->pos] <= 'z') ||
                          (d->s[d->pos] >= 'A' && d->s[d->pos] <= 'Z')))
        return jd_fail(d, "a number followed by letters: a value such as 4GiB goes in double "
                          "quotes (\"4GiB\")");
    return 0;
}

static int jd_word(jd *d) {
    static const char *const words[] = {"true", "false", "null"};
    for (size_t i = 0; i < 3; i++) {
        size_t n = strlen(words[i]);
        if (d->len - d->pos >= n && memcmp(d->s + d->pos, words[i], n) == 0) {
            d->pos += n;
            return 0;
        }
    }
    size_t n = 0;
    while (d->pos + n < d->len && n < 20 &&
           ((d->s[d->pos + n] >= 'a' && d->s[d->pos + n] <= 'z') ||
            (d->s[d->pos + n] >= 'A' && d->s[d->pos + n] <= 'Z')))
        n++;
    return jd_fail(d,
                   "expected a value, got the bare word '%.*s': text goes in double quotes, and "
                   "the only bare words are true, false and null (lower case)",
                   (int)n, d->s + d->pos);
}

static int jd_object(jd *d, int depth) {
    d->pos++; /* '{' */
    jd_ws(d);
    if (!jd_at_end(d) && d->s[d->pos] == '}') {
        d->pos++;
        return 0;
    }
    char got[24];
    for (int first = 1;; first = 0) {
        jd_ws(d);
        if (jd_at_end(d)) return jd_fail(d, "the text ends inside an object: a '}' is missing");
        char c = d->s[d->pos];
        if (c == '}' && !first)
            return jd_fail(d, "a trailing comma before '}': JSON allows none after the last "
                              "member");
        if (c == '\'') return jd_fail(d, "single quotes: JSON keys and strings take double quotes");
        if (c == '/') return jd_fail(d, "a comment: JSON has none");
        if (c != '"')
            return jd_fail(d, "expected a key in double quotes, got %s",
                           jd_got(d, got, sizeof(got)));
        size_t key = d->pos;
        if (jd_string(d)) return -1;
        size_t keylen = d->pos - key;
        jd_ws(d);
        if (jd_at_end(d) || d->s[d->pos] != ':')
            return jd_fail(d, "expected ':' after the key %.*s, got %s",
                           (int)(keylen > 40 ? 40 : keylen), d->s + key,
                           jd_got(d, got, sizeof(got)));
        d->pos++;
        if (jd_value(d, depth + 1)) return -1;
        jd_ws(d);
        if (jd_at_end(d)) return jd_fail(d, "the text ends inside an object: a '}' is missing");
        c = d->s[d->pos];
        if (c == '}') {
            d->pos++;
            return 0;
        }
        if (c != ',')
            return jd_fail(d, "expected ',' or '}' after the value of %.*s, got %s%s",
                           (int)(keylen > 40 ? 40 : keylen), d->s + key,
                           jd_got(d, got, sizeof(got)), c == '"' ? " (a missing comma?)" : "");
        d->pos++;
    }
}

static int jd_array(jd *d, int depth) {
    d->pos++; /* '[' */
    jd_ws(d);
    if (!jd_at_end(d) && d->s[d->pos] == ']') {
        d->pos++;
        return 0;
    }
    char got[24];
    for (int first = 1;; first = 0) {
        jd_ws(d);
        if (!first && !jd_at_end(d) && d->s[d->pos] == ']')
            return jd_fail(d, "a trailing comma before ']': JSON allows none after the last "
                              "element");
        if (jd_value(d, depth + 1)) return -1;
        jd_ws(d);
        if (jd_at_end(d)) return jd_fail(d, "the text ends inside an array: a ']' is missing");
        if (d->s[d->pos] == ']') {
            d->pos++;
            return 0;
        }
        if (d->s[d->pos] != ',')
            return jd_fail(d, "expected ',' or ']' in an array, got %s",
                           jd_got(d, got, sizeof(got)));
        d->pos++;
    }
}

static int jd_value(jd *d, int depth) {
    if (depth > JD_DEPTH_MAX) return jd_fail(d, "nested deeper than %d levels", JD_DEPTH_MAX);
    jd_ws(d);
    char got[24];
    if (jd_at_end(d)) return jd_fail(d, "expected a value, got the end of the text");
    char c = d->s[d->pos];
    switch (c) {
    case '{':
        return jd_object(d, depth);
    case '[':
        return jd_array(d, depth);
    case '"':
        return jd_string(d);
    case '\'':
        return jd_fail(d, "single quotes: JSON strings take double quotes");
    case '/':
        return jd_fail(d, "a comment: JSON has none");
    default:
        if (c == '-' || (c >= '0' && c <= '9')) return jd_number(d);
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return jd_word(d);
        return jd_fail(d, "expected a value, got %s", jd_got(d, got, sizeof(got)));
    }
}

int json_diagnose(const char *text, size_t len, int *line, int *col, char *what, size_t cap) {
    jd d = {text, len, 0, what, cap, 0};
    if (cap) what[0] = '\0';
    char got[24];
    jd_ws(&d);
    if (jd_at_end(&d)) {
        jd_fail(&d, "the text is empty: expected a JSON value");
    } else if (jd_value(&d, 0) == 0) {
        jd_ws(&d);
        if (d.pos < d.len)
            jd_fail(&d, "more after the end of the JSON value: %s", jd_got(&d, got, sizeof(got)));
    }
    if (!d.failed) return 0;
    *line = 1;
    *col = 1;
    for (size_t i = 0; i < d.pos && i < len; i++) {
        if (text[i] == '\n')
            ++*line, *col = 1;
        else
            ++*col;
    }
    return -1;
}
