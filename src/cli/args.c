/*
 * args.c — option parsing helpers shared by the `tide` subcommands.
 *
 * Every number a user types is parsed strictly: the whole string must be consumed, and a
 * value outside the command's range is an error rather than silently clamped.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "tide.h"

int cli_opt_value(int argc, char **argv, int *i, const char *name, const char **val) {
    const char *a = argv[*i];
    size_t n = strlen(name);
    if (strncmp(a, name, n) != 0) return 0;
    if (a[n] == '=') {
        *val = a + n + 1;
        return 1;
    }
    if (a[n] != '\0') return 0;
    if (*i + 1 >= argc) return -1;
    *val = argv[++*i];
    return 1;
}

int cli_parse_u64(const char *text, uint64_t min, uint64_t max, uint64_t *out) {
    if (!text || !isdigit((unsigned char)text[0])) return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno || *end || v < min || v > max) return -1;
    *out = v;
    return 0;
}

int cli_parse_size(const char *text, uint64_t min, uint64_t max, uint64_t *out) {
    uint64_t v;
    if (tide_size_parse(text, &v) != 0 || v < min || v > max) return -1;
    *out = v;
    return 0;
}

int cli_parse_seconds(const char *text, double min, double max, double *out) {
    if (!text || !(isdigit((unsigned char)text[0]) || text[0] == '.')) return -1;
    errno = 0;
    char *end;
    double v = strtod(text, &end);
    if (errno || *end || !isfinite(v) || v < min || v > max) return -1;
    *out = v;
    return 0;
}

int cli_stderr_is_tty(void) {
    return isatty(STDERR_FILENO);
}
