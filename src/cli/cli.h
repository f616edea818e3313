/*
 * cli.h — the `tide` command: one function per subcommand, and the helpers they share.
 *
 * A subcommand is `int cmd_NAME(int argc, char **argv)` with argv[0] the subcommand's
 * name; it returns the process exit code (0 ok, 1 failure, 2 usage error).
 */
#ifndef TIDE_CLI_H
#define TIDE_CLI_H

#include <stdint.h>
#include <stdio.h>

typedef struct cli_command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary; /* one line for `tide --help` */
} cli_command;

int cmd_version(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_put(int argc, char **argv);
int cmd_get(int argc, char **argv);
int cmd_rm(int argc, char **argv);
int cmd_exists(int argc, char **argv);
int cmd_stat(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_demo(int argc, char **argv);
int cmd_demo_synthetic(int argc, char **argv); /* tide demo --synthetic */
int cmd_check_config(int argc, char **argv);
int cmd_replay(int argc, char **argv);
int cmd_analyze(int argc, char **argv);

/* The helpers below live in args.c, which calls nothing else of the CLI: main.c and every
 * cmd_*.c call into it, never the other way.
 *
 * Print "tide NAME: message" to stderr and return 2 (usage) — for argument errors. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* text (a store URL, say) with its secrets masked (common/redact.h), in buf[cap]: what the
 * CLI prints or writes in place of any URL. Returns buf. */
const char *cli_redact(const char *text, char *buf, size_t cap);
#define CLI_URL_MAX 1024
/* 1 if argv[i] is -h or --help. */
int cli_is_help(const char *arg);

/*
 * Option helpers for the commands with a few flags (args.c). cli_opt_value() looks at argv[*i] for
 * "--name VALUE" or "--name=VALUE": it returns 1 with *val set (and *i moved past a
 * separate value), 0 when argv[*i] is not that option, and -1 when the value is missing.
 */
int cli_opt_value(int argc, char **argv, int *i, const char *name, const char **val);
/* A decimal integer in [min, max]: 0, or -1 when it does not parse or is out of range. */
int cli_parse_u64(const char *text, uint64_t min, uint64_t max, uint64_t *out);
/* A size with its unit ("256KiB"; a bare number other than 0 and the ambiguous k, m, g, t
 * are refused: size_parse_user), in [min, max]: 0 or -1. The _why form says what was wrong
 * in why ("out of range" when it parsed). */
int cli_parse_size(const char *text, uint64_t min, uint64_t max, uint64_t *out);
int cli_parse_size_why(const char *text, uint64_t min, uint64_t max, uint64_t *out, char *why,
                       size_t len);
/* A usage error for an unknown option arg of cmd, with the closest of names (each "--x")
 * suggested when one is close: returns 2. */
int cli_unknown_option_in(const char *cmd, const char *arg, const char *const *names, size_t n);
/* 1 when stderr is a terminal (progress lines with \r make sense there). */
int cli_stderr_is_tty(void);

/*
 * One flag parser for the commands that take many options (serve, bench, replay, analyze).
 * A command lists its flags in a table; cli_flags_parse() walks argv once, taking
 * "--name VALUE" and "--name=VALUE", and every mistake gets one message naming the flag:
 *   unknown option '--frobnicate'
 *   --size needs a value
 *   --size wants a size from 1 byte to 1GiB, like 256KiB (got 'lots')
 */
typedef enum {
    CLI_FLAG_SWITCH,  /* no value: *(int *)dst = 1, or call(..., NULL) when call is set */
    CLI_FLAG_STRING,  /* *(const char **)dst = the value (borrowed from argv) */
    CLI_FLAG_U64,     /* *(uint64_t *)dst: a decimal integer in [min, max] */
    CLI_FLAG_SIZE,    /* *(uint64_t *)dst: a size ("256KiB") in [min, max] */
    CLI_FLAG_SECONDS, /* *(double *)dst: a number, decimals allowed, in [dmin, dmax] */
    CLI_FLAG_CHOICE,  /* *(int *)dst: the index of the value in choices */
    CLI_FLAG_CALL,    /* call(ctx, cmd, name, value) decides */
} cli_flag_type;

typedef struct cli_flag {
    const char *name; /* "--size" */
    cli_flag_type type;
    void *dst;
    uint64_t min, max;          /* CLI_FLAG_U64, CLI_FLAG_SIZE */
    double dmin, dmax;          /* CLI_FLAG_SECONDS */
    const char *const *choices; /* CLI_FLAG_CHOICE: NULL-terminated */
    const char *want;           /* a bad value is told "NAME wants WANT (got 'VALUE')" */
    /* CLI_FLAG_CALL (and a SWITCH with call set): returns 0, or 2 after printing a usage
     * error that names the flag. */
    int (*call)(void *ctx, const char *cmd, const char *name, const char *value);
    void *ctx;
    int *given; /* when not NULL, set to 1 once the flag is seen */
} cli_flag;

typedef struct cli_spec {
    const char *cmd; /* for messages: "tide CMD: ..." */
    const cli_flag *flags;
    size_t nflags;
    void (*help)(FILE *f); /* -h or --help prints this to stdout */
    /* The one positional argument (a trace file), or NULL when the command takes none;
     * a second one is refused with arg_again. */
    const char **arg;
    const char *arg_again;
} cli_spec;

/* Parse argv[1..argc) against spec: 0 when done, 1 after printing the help (exit 0), 2
 * after a usage error (exit 2). Flags apply in the order given; a repeated flag's last
 * value wins unless its call says otherwise. */
int cli_flags_parse(const cli_spec *spec, int argc, char **argv);

/*
 * The block shape shared by `tide replay` and `tide analyze`. cli_block_flags() fills
 * out[0..CLI_BLOCK_NFLAGS) with the --model, --bytes-per-token and --block-tokens flags,
 * which write into *b. cli_block_finish() checks the combination and fills block_bytes: 0,
 * or 2 after a usage error. Without --model or --bytes-per-token the model is llama-3-8b.
 */
typedef struct cli_block {
    const char *model; /* preset name, or NULL for --bytes-per-token */
    uint64_t bytes_per_token, block_tokens, block_bytes;
    int bpt_given;
} cli_block;
#define CLI_BLOCK_NFLAGS 3
void cli_block_flags(cli_block *b, cli_flag *out);
int cli_block_finish(const char *cmd, cli_block *b);
/* The --model and --bytes-per-token lines of a help text, presets listed. */
void cli_block_help(FILE *f);

#endif
