/*
 * util.h — small helpers shared by every module: size strings, URLs, clocks.
 */
#ifndef TIDE_UTIL_H
#define TIDE_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* Format a byte count for people: "1.5 GiB", "512 KiB", "17 B". Returns buf. */
char *size_format(uint64_t bytes, char *buf, size_t len);

/* A size a person typed (a flag, a config file, a URL option): as tide_size_parse(), but
 * the one-letter units k, m, g, t are refused as ambiguous (KiB or KB?), and so is a bare
 * number other than 0 unless bare_ok (then it is bytes). 0, or TIDE_ESIZE with why filled:
 * what was wrong with the text and how to write it. */
int size_parse_user(const char *text, int bare_ok, uint64_t *out, char *why, size_t len);

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t now_ns(void);

/* A parsed URL: scheme://authority/path?name=value&name=value
 * Option values are percent-decoded. Each option remembers whether it was read, so that
 * url_check_unused() can name an option no backend understood. */
typedef struct url_opt {
    char *name;
    char *value;
    int used;
} url_opt;

typedef struct url {
    char scheme[16];
    char *authority; /* may be "" */
    char *path;      /* may be ""; starts with '/' when present */
    url_opt *opts;
    size_t nopts;
    /* The option names a backend asked for (borrowed: url_get's callers pass literals), so
     * that an unknown option can be told the closest known one. */
    const char *asked[48];
    size_t nasked;
} url;

/* Parse text. Errors: TIDE_EURL (message in err), TIDE_EOPTION when an option is given twice
 * (after %-decoding its name; the message names it). */
int url_parse(const char *text, url *u, char *err, size_t errlen);
void url_free(url *u);
/* The value of an option, marking it read; NULL if absent. name must outlive u (a literal):
 * it is remembered as a known option. */
const char *url_get(url *u, const char *name);
/* Read a size option (default when absent). Errors: TIDE_ESIZE with a message. */
int url_opt_size(url *u, const char *name, uint64_t def, uint64_t *out, char *err, size_t errlen);
/* Read a boolean option: 1/0/true/false/yes/no/on/off. Errors: TIDE_EOPTION. */
int url_opt_bool(url *u, const char *name, int def, int *out, char *err, size_t errlen);
/* Read an unsigned integer option. Errors: TIDE_EOPTION. */
int url_opt_uint(url *u, const char *name, uint64_t def, uint64_t *out, char *err, size_t errlen);
/* TIDE_EOPTION naming the first option nobody read and the closest known one, or 0. */
int url_check_unused(const url *u, char *err, size_t errlen);

#endif
