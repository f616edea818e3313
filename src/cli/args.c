/*
 * args.c — what every `tide` subcommand shares: usage errors, redaction of what is
 * printed, the one flag parser (cli_flags_parse, driven by each command's table of flags)
 * and the strict number parsers under it. It calls no command and nothing in main.c, so
 * the CLI's calls all point one way: main.c -> cmd_*.c -> args.c.
 *
 * Every number a user types is parsed strictly: the whole string must be consumed, and a
 * value outside the command's range is an error rather than silently clamped.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/redact.h"
#include "common/suggest.h"
#include "common/util.h"
#include "tide.h"
#include "trace/trace.h"

int cli_is_help(const char *arg) {
    return strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0;
}

int cli_usage_error(const char *cmd, const char *fmt, ...) {
    char msg[1024], shown[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "tide %s: %s\n(see 'tide %s --help')\n", cmd,
            cli_redact(msg, shown, sizeof(shown)), cmd);
    return 2;
}

const char *cli_redact(const char *text, char *buf, size_t cap) {
    redact_text(text, buf, cap);
    return buf;
}

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
    char why[200];
    return cli_parse_size_why(text, min, max, out, why, sizeof(why));
}

int cli_parse_size_why(const char *text, uint64_t min, uint64_t max, uint64_t *out, char *why,
                       size_t len) {
    uint64_t v;
    if (size_parse_user(text, 0, &v, why, len) != 0) return -1;
    if (v < min || v > max) {
        snprintf(why, len, "out of range");
        return -1;
    }
    *out = v;
    return 0;
}

/* A number of seconds, decimals allowed ("0.5"), in [min, max]: 0 or -1. */
static int cli_parse_seconds(const char *text, double min, double max, double *out) {
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

static const cli_flag *flag_find(const cli_spec *spec, const char *arg, const char **eq) {
    for (size_t k = 0; k < spec->nflags; k++) {
        size_t n = strlen(spec->flags[k].name);
        if (strncmp(arg, spec->flags[k].name, n) != 0) continue;
        if (arg[n] == '\0' || arg[n] == '=') {
            *eq = arg[n] == '=' ? arg + n + 1 : NULL;
            return &spec->flags[k];
        }
    }
    return NULL;
}

/* Apply one flag's value: 0, or 2 after a usage error. */
static int flag_apply(const cli_spec *spec, const cli_flag *f, const char *v) {
    int bad = 0;
    switch (f->type) {
    case CLI_FLAG_SWITCH:
        if (f->call) return f->call(f->ctx, spec->cmd, f->name, NULL);
        *(int *)f->dst = 1;
        break;
    case CLI_FLAG_STRING:
        *(const char **)f->dst = v;
        break;
    case CLI_FLAG_U64:
        bad = cli_parse_u64(v, f->min, f->max, f->dst);
        break;
    case CLI_FLAG_SIZE: {
        char why[200];
        if (cli_parse_size_why(v, f->min, f->max, f->dst, why, sizeof(why)) == 0) break;
        if (strcmp(why, "out of range") == 0) {
            bad = 1;
            break;
        }
        return cli_usage_error(spec->cmd, "%s wants %s: %s", f->name, f->want, why);
    }
    case CLI_FLAG_SECONDS:
        bad = cli_parse_seconds(v, f->dmin, f->dmax, f->dst);
        break;
    case CLI_FLAG_CHOICE: {
        int k = 0;
        while (f->choices[k] && strcmp(v, f->choices[k]) != 0)
            k++;
        if (f->choices[k])
            *(int *)f->dst = k;
        else
            bad = 1;
        break;
    }
    case CLI_FLAG_CALL:
        return f->call(f->ctx, spec->cmd, f->name, v);
    }
    if (bad && f->type == CLI_FLAG_CHOICE) {
        suggest sg;
        char hint[96];
        suggest_init(&sg, v);
        for (int k = 0; f->choices[k]; k++)
            suggest_offer(&sg, f->choices[k]);
        return cli_usage_error(spec->cmd, "%s wants %s (got '%s')%s", f->name, f->want, v,
                               suggest_hint(&sg, hint, sizeof(hint)));
    }
    if (bad) return cli_usage_error(spec->cmd, "%s wants %s (got '%s')", f->name, f->want, v);
    return 0;
}

int cli_unknown_option_in(const char *cmd, const char *arg, const char *const *names, size_t n) {
    /* Compared without the value ("--capcity=1GiB") and without the dashes, so that
     * "-capacity" and "capacity" find "--capacity" too. */
    char word[64];
    size_t wl = strcspn(arg, "=");
    const char *w = arg;
    while (*w == '-' && wl > 0)
        w++, wl--;
    snprintf(word, sizeof(word), "%.*s", (int)wl, w);
    suggest sg;
    suggest_init(&sg, word);
    for (size_t k = 0; k < n; k++)
        suggest_offer(&sg, names[k] + strspn(names[k], "-"));
    const char *best = suggest_best(&sg);
    if (!best) return cli_usage_error(cmd, "unknown option '%s'", arg);
    return cli_usage_error(cmd, "unknown option '%s' (did you mean '--%s'?)", arg, best);
}

static int cli_unknown_option(const cli_spec *spec, const char *arg) {
    const char *names[128];
    size_t n = 0;
    for (size_t k = 0; k < spec->nflags && n < sizeof(names) / sizeof(names[0]); k++)
        names[n++] = spec->flags[k].name;
    return cli_unknown_option_in(spec->cmd, arg, names, n);
}

int cli_flags_parse(const cli_spec *spec, int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (cli_is_help(a)) {
            spec->help(stdout);
            return 1;
        }
        if (a[0] != '-' || !a[1]) {
            if (!spec->arg) return cli_usage_error(spec->cmd, "unexpected argument '%s'", a);
            if (*spec->arg) return cli_usage_error(spec->cmd, "%s (got '%s')", spec->arg_again, a);
            *spec->arg = a;
            continue;
        }
        const char *v;
        const cli_flag *f = flag_find(spec, a, &v);
        if (!f) return cli_unknown_option(spec, a);
        if (f->type == CLI_FLAG_SWITCH && v)
            return cli_usage_error(spec->cmd, "%s takes no value (got '%s')", f->name, a);
        if (f->type != CLI_FLAG_SWITCH && !v) {
            if (i + 1 >= argc) return cli_usage_error(spec->cmd, "%s needs a value", f->name);
            v = argv[++i];
        }
        if (f->given) *f->given = 1;
        int rc = flag_apply(spec, f, v);
        if (rc) return rc;
    }
    return 0;
}

static int block_model(void *ctx, const char *cmd, const char *name, const char *v) {
    cli_block *b = ctx;
    if (b->bpt_given) return cli_usage_error(cmd, "give --model or --bytes-per-token, not both");
    if (trace_model_find(v, &b->bytes_per_token))
        return cli_usage_error(cmd, "unknown model '%s' (known: see --help)", v);
    b->model = v;
    b->bpt_given = 1;
    return 0;
}

static int block_bpt(void *ctx, const char *cmd, const char *name, const char *v) {
    cli_block *b = ctx;
    if (b->bpt_given) return cli_usage_error(cmd, "give --model or --bytes-per-token, not both");
    if (cli_parse_u64(v, 1, 1ull << 30, &b->bytes_per_token))
        return cli_usage_error(cmd, "%s wants a number from 1 to %llu (got '%s')", name, 1ull << 30,
                               v);
    b->model = NULL;
    b->bpt_given = 1;
    return 0;
}

void cli_block_flags(cli_block *b, cli_flag *out) {
    out[0] = (cli_flag){.name = "--model", .type = CLI_FLAG_CALL, .call = block_model, .ctx = b};
    out[1] =
        (cli_flag){.name = "--bytes-per-token", .type = CLI_FLAG_CALL, .call = block_bpt, .ctx = b};
    out[2] = (cli_flag){.name = "--block-tokens",
                        .type = CLI_FLAG_U64,
                        .dst = &b->block_tokens,
                        .min = 1,
                        .max = 1u << 20,
                        .want = "a number from 1 to 1048576"};
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
