/*
 * util.c — size strings, URL parsing and the monotonic clock.
 */
#include "util.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "common/suggest.h"
#include "tide.h"

uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static const struct {
    const char *unit;
    uint64_t mult;
} size_units[] = {
    {"", 1},
    {"b", 1},
    {"k", 1000ull},
    {"kb", 1000ull},
    {"m", 1000ull * 1000},
    {"mb", 1000ull * 1000},
    {"g", 1000ull * 1000 * 1000},
    {"gb", 1000ull * 1000 * 1000},
    {"t", 1000ull * 1000 * 1000 * 1000},
    {"tb", 1000ull * 1000 * 1000 * 1000},
    {"kib", 1ull << 10},
    {"mib", 1ull << 20},
    {"gib", 1ull << 30},
    {"tib", 1ull << 40},
};

TIDE_API int tide_size_parse(const char *text, uint64_t *out) {
    if (!text || !out) return TIDE_ESIZE;
    const char *p = text;
    while (*p == ' ')
        p++;
    if (!isdigit((unsigned char)*p)) return TIDE_ESIZE;
    /* Integer part and an optional fraction, parsed by hand so that "1e9" or "0x10" and
     * locale quirks are refused rather than half-accepted. */
    uint64_t whole = 0;
    while (isdigit((unsigned char)*p)) {
        if (whole > (UINT64_MAX - 9) / 10) return TIDE_ESIZE;
        whole = whole * 10 + (uint64_t)(*p++ - '0');
    }
    double frac = 0, scale = 0.1;
    int has_frac = 0;
    if (*p == '.') {
        p++;
        if (!isdigit((unsigned char)*p)) return TIDE_ESIZE;
        while (isdigit((unsigned char)*p)) {
            frac += (*p++ - '0') * scale;
            scale /= 10;
        }
        has_frac = 1;
    }
    while (*p == ' ')
        p++;
    const char *unit = p;
    size_t ulen = strlen(unit);
    while (ulen && unit[ulen - 1] == ' ')
        ulen--;
    for (size_t i = 0; i < sizeof(size_units) / sizeof(size_units[0]); i++) {
        if (strlen(size_units[i].unit) != ulen || strncasecmp(unit, size_units[i].unit, ulen))
            continue;
        uint64_t m = size_units[i].mult;
        if (whole > UINT64_MAX / m) return TIDE_ESIZE;
        uint64_t v = whole * m;
        if (has_frac) {
            double f = frac * (double)m;
            if (m == 1 && f != 0) return TIDE_ESIZE; /* "1.5" bytes */
            v += (uint64_t)llround(f);
        }
        *out = v;
        return 0;
    }
    return TIDE_ESIZE;
}

/* A size a person typed. tide_size_parse() reads bare numbers as bytes and 'k', 'm', 'g',
 * 't' as powers of 1000, which is what a program building a URL wants; a person who writes
 * `--capacity 64` or `64g` may well mean 64 GiB, so those are refused here with the
 * spellings that say it. */
int size_parse_user(const char *text, int bare_ok, uint64_t *out, char *why, size_t len) {
    static const char known[] = "B, KiB, MiB, GiB, TiB (powers of 1024) or KB, MB, GB, TB "
                                "(powers of 1000)";
    const char *p = text ? text : "";
    while (*p == ' ')
        p++;
    const char *unit = p;
    while (isdigit((unsigned char)*unit) || *unit == '.')
        unit++;
    int ndig = (int)(unit - p);
    while (*unit == ' ')
        unit++;
    size_t ulen = strlen(unit);
    while (ulen && unit[ulen - 1] == ' ')
        ulen--;
    if (ndig == 0 || !isdigit((unsigned char)*p)) {
        snprintf(why, len, "'%s' is not a size: expected a number and a unit, like 512MiB or 4GiB",
                 text ? text : "");
        return TIDE_ESIZE;
    }
    if (ulen == 1 && strchr("kmgtKMGT", unit[0])) {
        char u = (char)toupper((unsigned char)unit[0]);
        snprintf(why, len,
                 "'%s' is ambiguous: write %.*s%ciB for powers of 1024 or %.*s%cB for powers "
                 "of 1000",
                 text, ndig, p, u, ndig, p, u);
        return TIDE_ESIZE;
    }
    int zero = strspn(p, "0.") == (size_t)ndig;
    if (ulen == 0 && !bare_ok && !zero) {
        snprintf(why, len, "'%s' has no unit: write %.*sB for bytes, or %.*sMiB, %.*sGiB", text,
                 ndig, p, ndig, p, ndig, p);
        return TIDE_ESIZE;
    }
    if (tide_size_parse(text, out) != 0) {
        int unit_known = 0;
        for (size_t i = 0; i < sizeof(size_units) / sizeof(size_units[0]); i++)
            if (strlen(size_units[i].unit) == ulen && !strncasecmp(unit, size_units[i].unit, ulen))
                unit_known = 1;
        if (!unit_known)
            snprintf(why, len, "'%s': unknown unit '%.*s' (known: %s)", text, (int)ulen, unit,
                     known);
        else
            snprintf(why, len, "'%s' is not a whole number of bytes or is too large", text);
        return TIDE_ESIZE;
    }
    return 0;
}

char *size_format(uint64_t bytes, char *buf, size_t len) {
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%llu B", (unsigned long long)bytes);
    else
        snprintf(buf, len, "%.*f %s", v < 10 ? 2 : 1, v, units[u]);
    return buf;
}

static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    c = tolower(c);
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* Percent-decode [s, s+n) into a new string; NULL on a bad escape or no memory. */
static char *pct_decode(const char *s, size_t n) {
    char *out = malloc(n + 1);
    if (!out) return NULL;
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '%') {
            if (i + 2 >= n) {
                free(out);
                return NULL;
            }
            int h = hexval((unsigned char)s[i + 1]), l = hexval((unsigned char)s[i + 2]);
            if (h < 0 || l < 0) {
                free(out);
                return NULL;
            }
            out[j++] = (char)(h * 16 + l);
            i += 2;
        } else {
            out[j++] = s[i];
        }
    }
    out[j] = '\0';
    return out;
}

void url_free(url *u) {
    free(u->authority);
    free(u->path);
    for (size_t i = 0; i < u->nopts; i++) {
        free(u->opts[i].name);
        free(u->opts[i].value);
    }
    free(u->opts);
    memset(u, 0, sizeof(*u));
}

int url_parse(const char *text, url *u, char *err, size_t errlen) {
    memset(u, 0, sizeof(*u));
    const char *sep = text ? strstr(text, "://") : NULL;
    if (!sep) {
        /* The common slips: a bare HOST:PORT, or one slash short. */
        const char *colon = text ? strchr(text, ':') : NULL;
        char hint[300] = "";
        if (colon && colon[1] == '/' && colon[2] != '/' && colon > text)
            snprintf(hint, sizeof(hint), " (did you mean '%.*s://%s'?)", (int)(colon - text), text,
                     colon + 1 + strspn(colon + 1, "/"));
        else if (colon && colon > text && strspn(colon + 1, "0123456789") > 0 &&
                 colon[1 + strspn(colon + 1, "0123456789")] == '\0')
            snprintf(hint, sizeof(hint), " (did you mean 'tide://%s'?)", text);
        snprintf(err, errlen, "malformed URL '%s': expected scheme://...%s", text ? text : "",
                 hint);
        return TIDE_EURL;
    }
    size_t slen = (size_t)(sep - text);
    if (slen == 0 || slen >= sizeof(u->scheme)) {
        snprintf(err, errlen, "malformed URL '%s': bad scheme", text);
        return TIDE_EURL;
    }
    for (size_t i = 0; i < slen; i++) {
        if (!isalnum((unsigned char)text[i]) && text[i] != '+' && text[i] != '-') {
            snprintf(err, errlen, "malformed URL '%s': bad scheme", text);
            return TIDE_EURL;
        }
        u->scheme[i] = (char)tolower((unsigned char)text[i]);
    }
    const char *p = sep + 3;
    const char *q = strchr(p, '?');
    const char *end = q ? q : p + strlen(p);
    const char *slash = memchr(p, '/', (size_t)(end - p));
    const char *auth_end = slash ? slash : end;
    u->authority = strndup(p, (size_t)(auth_end - p));
    u->path = strndup(auth_end, (size_t)(end - auth_end));
    if (!u->authority || !u->path) goto nomem;
    if (q) {
        const char *o = q + 1;
        while (*o) {
            const char *amp = strchr(o, '&');
            const char *oe = amp ? amp : o + strlen(o);
            if (oe > o) {
                const char *eq = memchr(o, '=', (size_t)(oe - o));
                url_opt *grown = realloc(u->opts, (u->nopts + 1) * sizeof(*u->opts));
                if (!grown) goto nomem;
                u->opts = grown;
                url_opt *op = &u->opts[u->nopts];
                op->used = 0;
                op->name = pct_decode(o, (size_t)((eq ? eq : oe) - o));
                op->value = eq ? pct_decode(eq + 1, (size_t)(oe - eq - 1)) : strdup("");
                u->nopts++;
                if (!op->name || !op->value) {
                    snprintf(err, errlen, "malformed URL '%s': bad %%-escape in option", text);
                    url_free(u);
                    return TIDE_EURL;
                }
                /* Twice is refused, whatever the values: which one was meant is a guess. The
                 * values are not quoted (one may be a token). */
                for (size_t i = 0; i + 1 < u->nopts; i++) {
                    if (strcmp(u->opts[i].name, op->name) == 0) {
                        snprintf(err, errlen, "option '%s' given twice in a %s:// URL", op->name,
                                 u->scheme);
                        url_free(u);
                        return TIDE_EOPTION;
                    }
                }
            }
            o = amp ? amp + 1 : oe;
        }
    }
    return 0;
nomem:
    url_free(u);
    snprintf(err, errlen, "out of memory parsing URL");
    return -ENOMEM;
}

const char *url_get(url *u, const char *name) {
    const char *v = NULL;
    size_t k = 0;
    while (k < u->nasked && strcmp(u->asked[k], name) != 0)
        k++;
    if (k == u->nasked && u->nasked < sizeof(u->asked) / sizeof(u->asked[0]))
        u->asked[u->nasked++] = name;
    for (size_t i = 0; i < u->nopts; i++) {
        if (strcmp(u->opts[i].name, name) == 0) {
            u->opts[i].used = 1;
            v = u->opts[i].value; /* url_parse admits each name once */
        }
    }
    return v;
}

int url_opt_size(url *u, const char *name, uint64_t def, uint64_t *out, char *err, size_t errlen) {
    const char *v = url_get(u, name);
    if (!v) {
        *out = def;
        return 0;
    }
    char why[200];
    if (size_parse_user(v, 1, out, why, sizeof(why)) != 0) {
        snprintf(err, errlen, "option %s=%s: %s", name, v, why);
        return TIDE_ESIZE;
    }
    return 0;
}

int url_opt_bool(url *u, const char *name, int def, int *out, char *err, size_t errlen) {
    const char *v = url_get(u, name);
    if (!v) {
        *out = def;
        return 0;
    }
    static const char *yes[] = {"1", "true", "yes", "on"}, *no[] = {"0", "false", "no", "off"};
    for (int i = 0; i < 4; i++) {
        if (strcasecmp(v, yes[i]) == 0) return *out = 1, 0;
        if (strcasecmp(v, no[i]) == 0) return *out = 0, 0;
    }
    snprintf(err, errlen, "option %s=%s: expected a boolean (1/0, true/false)", name, v);
    return TIDE_EOPTION;
}

int url_opt_uint(url *u, const char *name, uint64_t def, uint64_t *out, char *err, size_t errlen) {
    const char *v = url_get(u, name);
    if (!v) {
        *out = def;
        return 0;
    }
    char *e;
    errno = 0;
    unsigned long long x = strtoull(v, &e, 10);
    if (!*v || *e || errno || v[0] == '-') {
        snprintf(err, errlen, "option %s=%s: expected a non-negative integer", name, v);
        return TIDE_EOPTION;
    }
    *out = x;
    return 0;
}

int url_check_unused(const url *u, char *err, size_t errlen) {
    for (size_t i = 0; i < u->nopts; i++) {
        if (!u->opts[i].used) {
            suggest sg;
            char hint[96];
            suggest_init(&sg, u->opts[i].name);
            for (size_t k = 0; k < u->nasked; k++)
                suggest_offer(&sg, u->asked[k]);
            snprintf(err, errlen, "unknown option '%s' for %s:// URLs%s", u->opts[i].name,
                     u->scheme, suggest_hint(&sg, hint, sizeof(hint)));
            return TIDE_EOPTION;
        }
    }
    return 0;
}
