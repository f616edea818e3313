/*
 * cli.h — the `tide` command: one function per subcommand, and the helpers they share.
 *
 * A subcommand is `int cmd_NAME(int argc, char **argv)` with argv[0] the subcommand's
 * name; it returns the process exit code (0 ok, 1 failure, 2 usage error).
 */
#ifndef TIDE_CLI_H
#define TIDE_CLI_H

#include <stdint.h>

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
int cmd_check_config(int argc, char **argv);

/* Print "tide NAME: message" to stderr and return 2 (usage) — for argument errors. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* 1 if argv[i] is -h or --help. */
int cli_is_help(const char *arg);

#endif
