/*
 * redact.c — masking secrets (tokens, passwords) in any text tide prints or writes. One
 * pass over the text; the rules are in redact.h. Not a parser: a secret is recognised by
 * its shape wherever it appears (a URL alone, or a URL inside a message).
 */
#include "common/redact.h"
#include "common/suggest.h"

#include "tide.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define SECRET_MIN 8
#define SECRETS_MAX 4

static char *secrets[SECRETS_MAX];

int redact_add_secret(const char *secret) {
    if (!secret || strlen(secret) < SECRET_MIN) return 0;
    for (int i = 0; i < SECRETS_MAX; i++) {
        if (secrets[i] && strcmp(secrets[i], secret) == 0) return 0;
        if (!secrets[i]) return (secrets[i] = strdup(secret)) ? 0 : -1;
    }
    return -1;
}

/* Appending to out[cap], counting what would be needed beyond it. */
typedef struct sink {
    char *out;
    size_t cap, len;
} sink;

static void put(sink *s, const char *p, size_t n) {
    if (s->len + 1 < s->cap) {
        size_t room = s->cap - 1 - s->len;
        memcpy(s->out + s->len, p, n < room ? n : room);
    }
    s->len += n;
}

/* A character that ends a secret value inside a URL or a message around it. */
static int ends_value(char c) {
    return c == '\0' || c == '&' || c == '#' || c == ' ' || c == '\t' || c == '\n' || c == '\r' ||
           c == '\'' || c == '"' || c == '`' || c == '<' || c == '>';
}

/* The option name ending just before '=' at text[eq]: starts after '?' or '&'. Returns 1
 * when it names a secret. */
static int secret_option(const char *text, size_t eq) {
    size_t b = eq;
    while (b > 0 && text[b - 1] != '?' && text[b - 1] != '&' && !ends_value(text[b - 1]))
        b--;
    if (b == 0 || (text[b - 1] != '?' && text[b - 1] != '&')) return 0;
    static const char *const suffixes[] = {"token", "password", "secret"};
    for (size_t i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
        size_t sl = strlen(suffixes[i]);
        if (eq - b >= sl && strncasecmp(text + eq - sl, suffixes[i], sl) == 0) return 1;
        /* A misspelt one ("tokn", "passwrod") is unknown to every backend, which names it
         * in its error with the value beside it: its value is masked too. */
        int limit = sl <= 5 ? 1 : 2;
        for (size_t tl = sl - 1; tl <= sl + 1 && tl <= eq - b; tl++) {
            char tail[16];
            snprintf(tail, sizeof(tail), "%.*s", (int)tl, text + eq - tl);
            if (suggest_distance(tail, suffixes[i], limit) <= limit) return 1;
        }
    }
    return 0;
}

/* At text[i] == ':' right after "://": the end of user information's password (the '@'),
 * or 0 when this authority has none. */
static size_t userinfo_password_end(const char *text, size_t colon) {
    for (size_t j = colon + 1; !ends_value(text[j]); j++) {
        if (text[j] == '@') return j;
        if (text[j] == '/' || text[j] == '?') return 0;
    }
    return 0;
}

/* Length of a registered (or $TIDE_AUTH_TOKEN) secret starting at p, or 0. */
static size_t literal_secret_at(const char *p, const char *env) {
    if (env && strncmp(p, env, strlen(env)) == 0) return strlen(env);
    for (int i = 0; i < SECRETS_MAX && secrets[i]; i++)
        if (strncmp(p, secrets[i], strlen(secrets[i])) == 0) return strlen(secrets[i]);
    return 0;
}

size_t redact_text(const char *text, char *out, size_t cap) {
    if (!text) text = "";
    const char *env = getenv("TIDE_AUTH_TOKEN");
    if (env && strlen(env) < SECRET_MIN) env = NULL;
    sink s = {out, cap, 0};
    size_t i = 0, auth = (size_t)-1; /* where the current URL's authority starts */
    while (text[i]) {
        size_t lit = literal_secret_at(text + i, env);
        if (lit) {
            put(&s, REDACT_MASK, sizeof(REDACT_MASK) - 1);
            i += lit;
            continue;
        }
        char c = text[i];
        if (c == ':' && text[i + 1] == '/' && text[i + 2] == '/') {
            put(&s, "://", 3);
            i += 3;
            auth = i;
            continue;
        }
        if (c == ':' && auth != (size_t)-1) {
            /* The first ':' of an authority with an '@' after it: user:PASSWORD@. */
            size_t at = userinfo_password_end(text, i);
            auth = (size_t)-1;
            if (at) {
                put(&s, ":" REDACT_MASK, sizeof(REDACT_MASK));
                i = at;
                continue;
            }
        }
        if (c == '/' || c == '?' || ends_value(c)) auth = (size_t)-1;
        put(&s, &text[i], 1);
        i++;
        if (c == '=' && secret_option(text, i - 1)) {
            size_t j = i;
            while (!ends_value(text[j]))
                j++;
            if (j > i) put(&s, REDACT_MASK, sizeof(REDACT_MASK) - 1);
            i = j;
        }
    }
    if (cap) out[s.len < cap ? s.len : cap - 1] = '\0';
    return s.len;
}

void redact_inplace(char *buf, size_t cap) {
    if (!buf || !cap) return;
    char small[1024];
    char *tmp = cap <= sizeof(small) ? small : malloc(cap);
    if (!tmp) {
        /* Cannot make the masked copy: print nothing of it rather than a secret. */
        buf[0] = '\0';
        return;
    }
    redact_text(buf, tmp, cap);
    memcpy(buf, tmp, cap);
    if (tmp != small) free(tmp);
}

TIDE_API size_t tide_redact(const char *text, char *out, size_t cap) {
    return redact_text(text, out, cap);
}
