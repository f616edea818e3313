/*
 * args.c — option parsing helpers shared by the `tide` subcommands.
 *
 * Every number a user types is parsed strictly: the whole string must be consumed, and a
 * value outside the command's range is an error rather than silently clamped.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "tide.h"
#include "trace/trace.h"

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

int cli_block_opt(const char *cmd, int argc, char **argv, int *i, cli_block *b) {
    const char *v = NULL;
    int m;
    if ((m = cli_opt_value(argc, argv, i, "--model", &v))) {
        if (m < 0) return cli_usage_error(cmd, "--model needs a value");
        if (b->bpt_given)
            return cli_usage_error(cmd, "give --model or --bytes-per-token, not both");
        if (trace_model_find(v, &b->bytes_per_token))
            return cli_usage_error(cmd, "unknown model '%s' (known: see --help)", v);
        b->model = v;
        b->bpt_given = 1;
        return 1;
    }
    if ((m = cli_opt_value(argc, argv, i, "--bytes-per-token", &v))) {
        if (b->bpt_given)
            return cli_usage_error(cmd, "give --model or --bytes-per-token, not both");
        if (m < 0 || cli_parse_u64(v, 1, 1ull << 30, &b->bytes_per_token))
            return cli_usage_error(cmd,
                                   "--bytes-per-token wants a number from 1 to %llu (got '%s')",
                                   1ull << 30, m < 0 ? "" : v);
        b->model = NULL;
        b->bpt_given = 1;
        return 1;
    }
    if ((m = cli_opt_value(argc, argv, i, "--block-tokens", &v))) {
        if (m < 0 || cli_parse_u64(v, 1, 1u << 20, &b->block_tokens))
            return cli_usage_error(cmd, "--block-tokens wants a number from 1 to %u (got '%s')",
                                   1u << 20, m < 0 ? "" : v);
        return 1;
    }
    return 0;
}

int cli_block_finish(const char *cmd, cli_block *b) {
    if (!b->bpt_given) {
        b->model = "llama-3-8b";
        trace_model_find(b->model, &b->bytes_per_token);
    }
    if (!b->block_tokens) b->block_tokens = 512;
    b->block_bytes = b->bytes_per_token * b->block_tokens;
    if (b->block_bytes > (1ull << 32))
        return cli_usage_error(cmd,
                               "a block of --block-tokens x bytes per token is %llu bytes; "
                               "at most 4GiB",
                               (unsigned long long)b->block_bytes);
    return 0;
}

void cli_block_help(FILE *f) {
    fprintf(f,
            "  --model NAME         bytes per token from a model preset (default llama-3-8b):\n");
    for (size_t i = 0; i < trace_model_count(); i++) {
        const trace_model *m = trace_model_at(i);
        fprintf(f, "                         %-15s %7llu B  (%s)\n", m->name,
                (unsigned long long)m->bytes_per_token, m->shape);
    }
    fprintf(f,
            "  --bytes-per-token N  KV bytes per token over all layers, instead of --model\n"
            "  --block-tokens N     tokens per hash id in the trace (default 512, Mooncake's)\n");
}
