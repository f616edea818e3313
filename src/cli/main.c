/*
 * main.c — entry point of the `tide` command: finds the subcommand and runs it.
 * Each subcommand lives in its own cmd_*.c file and is listed in the table below. main.c
 * calls the commands and the shared helpers of args.c; nothing calls back into it.
 */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "common/suggest.h"
#include "tide.h"

static const cli_command commands[] = {
    {"serve", cmd_serve, "run tided, a store node, in the foreground"},
    {"put", cmd_put, "store a file's bytes under a key"},
    {"get", cmd_get, "write a key's value to a file or standard output"},
    {"rm", cmd_rm, "remove keys"},
    {"exists", cmd_exists, "say which keys are present"},
    {"stat", cmd_stat, "print a store's figures"},
    {"version", cmd_version, "print the version of tide and libtide"},
    {"bench", cmd_bench, "measure a store: ops/s, GB/s and latency percentiles"},
    {"demo", cmd_demo,
     "the main job: an engine reusing prefixes through tide, checked bit for bit"},
    {"replay", cmd_replay,
     "replay a Mooncake-format trace against a store: hit rates, bytes, latency"},
    {"analyze", cmd_analyze, "a trace's hit rates under infinite, Belady, LRU and S3-FIFO caches"},
    {"check-config", cmd_check_config, "check a connector config against vLLM's and tide's rules"},
};
#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

#if defined(__SANITIZE_ADDRESS__)
/* In an ASan build (make check's asan stage), LeakSanitizer leaves alone what UCX's own
 * libraries allocated and never freed: UCX 1.22 keeps the state of a transfer whose peer
 * died mid-way past its worker's destruction (docs/UCX.md); tide's own allocations are
 * still checked. */
const char *__lsan_default_suppressions(void);
__attribute__((visibility("default"))) const char *__lsan_default_suppressions(void) {
    return "leak:libucs.so\nleak:libucp.so\nleak:libuct.so\n";
}
#endif

int cmd_version(int argc, char **argv) {
    if (argc > 1 && cli_is_help(argv[1])) {
        printf("usage: tide version\n\nPrints the version of the tide command and of libtide.\n");
        return 0;
    }
    printf("tide %s\n", tide_version());
    return 0;
}

static void usage(FILE *f) {
    fprintf(f, "usage: tide COMMAND [OPTIONS]\n\ntide is a KV-cache store for LLM serving.\n\n"
               "Commands:\n");
    for (size_t i = 0; i < NCOMMANDS; i++)
        fprintf(f, "  %-14s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\nRun 'tide COMMAND --help' for a command's options.\n");
}

/* An unknown first word: the closest command, or where an option given first belongs. */
static int unknown_command(const char *word) {
    char shown[CLI_URL_MAX], hint[96];
    cli_redact(word, shown, sizeof(shown));
    if (word[0] == '-') {
        fprintf(stderr,
                "tide: '%s' is an option, and options come after a command: "
                "tide COMMAND [OPTIONS] (for the daemon, tide serve %s)\n",
                shown, shown);
        usage(stderr);
        return 2;
    }
    suggest sg;
    suggest_init(&sg, word);
    for (size_t i = 0; i < NCOMMANDS; i++)
        suggest_offer(&sg, commands[i].name);
    suggest_offer(&sg, "help");
    if (!suggest_best(&sg) && strstr(word, "://"))
        snprintf(hint, sizeof(hint), " (a URL comes after the command: tide get URL KEY)");
    else
        suggest_hint(&sg, hint, sizeof(hint));
    fprintf(stderr, "tide: unknown command '%s'%s\n", shown, hint);
    usage(stderr);
    return 2;
}

int main(int argc, char **argv) {
    /* Called as `tided` (build/tided is a link to build/tide): the daemon, same code path
     * as `tide serve`. */
    const char *base = strrchr(argv[0], '/');
    if (strcmp(base ? base + 1 : argv[0], "tided") == 0) return cmd_serve(argc, argv);
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (cli_is_help(argv[1]) || strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0) return cmd_version(1, argv + 1);
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (strcmp(argv[1], commands[i].name) == 0) return commands[i].run(argc - 1, argv + 1);
    return unknown_command(argv[1]);
}
