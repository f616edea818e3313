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

/* Print "tide NAME: message" to stderr and return 2 (usage) — for argument errors. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* 1 if argv[i] is -h or --help. */
int cli_is_help(const char *arg);

/*
 * Option parsing shared by the commands (args.c). cli_opt_value() looks at argv[*i] for
 * "--name VALUE" or "--name=VALUE": it returns 1 with *val set (and *i moved past a
 * separate value), 0 when argv[*i] is not that option, and -1 when the value is missing.
 */
int cli_opt_value(int argc, char **argv, int *i, const char *name, const char **val);
/* A decimal integer in [min, max]: 0, or -1 when it does not parse or is out of range. */
int cli_parse_u64(const char *text, uint64_t min, uint64_t max, uint64_t *out);
/* A size as tide_size_parse() reads it ("256KiB"), in [min, max]: 0 or -1. */
int cli_parse_size(const char *text, uint64_t min, uint64_t max, uint64_t *out);
/* A number of seconds, decimals allowed ("0.5"), in [min, max]: 0 or -1. */
int cli_parse_seconds(const char *text, double min, double max, double *out);
/* 1 when stderr is a terminal (progress lines with \r make sense there). */
int cli_stderr_is_tty(void);

/*
 * The block shape shared by `tide replay` and `tide analyze`. cli_block_opt() looks at
 * argv[*i] for --model, --bytes-per-token or --block-tokens: 1 when it took the option
 * (into *b), 0 when argv[*i] is none of them, 2 after printing a usage error.
 * cli_block_finish() checks the combination and fills block_bytes: 0, or 2 after a
 * usage error. Without --model or --bytes-per-token the model is llama-3-8b.
 */
typedef struct cli_block {
    const char *model; /* preset name, or NULL for --bytes-per-token */
    uint64_t bytes_per_token, block_tokens, block_bytes;
    int bpt_given;
} cli_block;
int cli_block_opt(const char *cmd, int argc, char **argv, int *i, cli_block *b);
int cli_block_finish(const char *cmd, cli_block *b);
/* The --model and --bytes-per-token lines of a help text, presets listed. */
void cli_block_help(FILE *f);

#endif
