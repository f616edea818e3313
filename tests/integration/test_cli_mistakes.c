/*
 * test_cli_mistakes.c — the mistakes users make with the `tide` command, tided's settings
 * and store URLs, each with the message it must get: what was wrong, the value, and the
 * fix (the closest name for a misspelt one, the unit a size lacks, the line and column of
 * a JSON mistake). Then tided's defaults next to each other (several on neighbouring
 * ports start; a port that is taken is named with its flag), and a tide:// client that
 * reaches something other than tided (an HTTP, Redis, TLS or SSH server, or a silent one)
 * and says so at once.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "server_util.h"
#include "tide.h"

/* Run `tide ARGS` (a shell fragment), bounded by `timeout`: its exit status; stdout and
 * stderr in out. */
static int tide_run(const char *args, char *out, size_t cap) {
    char cmd[4096];
    int w = snprintf(cmd, sizeof(cmd), "timeout 5 %s %s 2>&1", test_tide_bin(), args);
    CHECK_MSG(w > 0 && (size_t)w < sizeof(cmd), "command too long: tide %s", args);
    return test_run(cmd, out, cap);
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    CHECK_MSG(f != NULL, "cannot write %s", path);
    fputs(text, f);
    fclose(f);
}

/* Config files the table refers to as %s/NAME. */
static const struct {
    const char *name, *text;
} files[] = {
    {"trailing.json", "{\"port\": 7474,\n \"capacity\": \"1GiB\",\n}\n"},
    {"nocomma.json", "{\"port\": 7474\n \"threads\": 2}\n"},
    {"single.json", "{'port': 7474}\n"},
    {"unquoted.json", "{\"capacity\": 4GiB}\n"},
    {"comment.json", "{\"port\": 7474, // the usual\n \"threads\": 2}\n"},
    {"empty.json", "\n"},
    {"array.json", "[{\"port\": 7474}]\n"},
    {"typo.json", "{\"prot\": 7474}\n"},
    {"dashes.json", "{\"metrics-port\": 9100}\n"},
    {"bare.json", "{\"capacity\": 64}\n"},
    {"null.json", "{\"port\": null}\n"},
    {"open.json", "{\"port\": \"7474}\n"},
    {"True.json", "{\"prefault\": True}\n"},
    {"unclosed.json", "{\"port\": 7474,\n \"threads\": 2\n"},
    {"octal.json", "{\"unix_mode\": 0600}\n"},
    {"list.json", "{\"threads\": [2]}\n"},
    {"policy.json", "{\"policy\": \"lfu\"}\n"},
    {"trace.jsonl", "{\"timestamp\": 0, \"input_length\": 512, \"output_length\": 1, "
                    "\"hash_ids\": [1]}\n"},
};

/* Each row: `tide ARGS` (%s: the test's directory), its exit status, a text its output must
 * hold and one it must not (NULL: none). */
static const struct {
    const char *args;
    int status;
    const char *want, *not_want;
} mistakes[] = {
    /* Subcommands. */
    {"serv", 2, "unknown command 'serv' (did you mean 'serve'?)", NULL},
    {"gte mem:// k", 2, "unknown command 'gte' (did you mean 'get'?)", NULL},
    {"stats mem://", 2, "unknown command 'stats' (did you mean 'stat'?)", NULL},
    {"becnh", 2, "unknown command 'becnh' (did you mean 'bench'?)", NULL},
    {"versoin", 2, "unknown command 'versoin' (did you mean 'version'?)", NULL},
    {"check_config x.json", 2, "(did you mean 'check-config'?)", NULL},
    {"replya", 2, "(did you mean 'replay'?)", NULL},
    {"frobnicate", 2, "unknown command 'frobnicate'", "did you mean"},
    {"--port 7474", 2, "'--port' is an option, and options come after a command", NULL},
    {"mem://?capacity=1GiB", 2, "a URL comes after the command", NULL},
    /* tided's flags. */
    {"serve --capcity 1GiB", 2, "unknown option '--capcity' (did you mean '--capacity'?)", NULL},
    {"serve --metrics_port 9100", 2, "(did you mean '--metrics-port'?)", NULL},
    {"serve --thread 4", 2, "unknown option '--thread' (did you mean '--threads'?)", NULL},
    {"serve --prot 7474", 2, "(did you mean '--port'?)", NULL},
    {"serve -port 7474", 2, "unknown option '-port' (did you mean '--port'?)", NULL},
    {"serve --log-levl debug", 2, "(did you mean '--log-level'?)", NULL},
    {"serve --max-frames=1MiB", 2, "(did you mean '--max-frame'?)", NULL},
    {"serve --zzzzzzzz", 2, "unknown option '--zzzzzzzz'", "did you mean"},
    {"serve --port", 2, "--port needs a value", NULL},
    {"serve --prefault=yes", 2, "--prefault takes no value", NULL},
    {"serve 7474", 2, "unexpected argument '7474'", NULL},
    {"serve --port 70000", 2, "--port (port): expected a TCP port (0..65535), got '70000'", NULL},
    {"serve --threads 0", 2, "--threads (threads): expected 1..256, got '0'", NULL},
    {"serve --metrics-port 99999", 2,
     "--metrics-port (metrics_port): expected a TCP port (1..65535), auto or off (0)", NULL},
    {"serve --policy lfu", 2, "expected lru, s3fifo or chain, got 'lfu' (did you mean 'lru'?)",
     NULL},
    {"serve --log-level verbose", 2, "expected error, warn, info or debug, got 'verbose'", NULL},
    {"serve --log-level dbug", 2, "(did you mean 'debug'?)", NULL},
    {"serve --etcd http://127.0.0.1:2379", 2, "--etcd and --cluster go together", NULL},
    {"serve --disk-dir %s/ssd", 2, "--disk-dir and --disk-capacity go together", NULL},
    {"serve --bind 999.1.1.1", 2, "'999.1.1.1' is not an IPv4 or IPv6 address", NULL},
    /* Sizes: a unit, and not an ambiguous one. */
    {"serve --capacity 64", 2,
     "--capacity (capacity): '64' has no unit: write 64B for bytes, or 64MiB, 64GiB", NULL},
    {"serve --capacity 64g", 2,
     "'64g' is ambiguous: write 64GiB for powers of 1024 or 64GB for powers of 1000", NULL},
    {"serve --capacity 1m", 2, "'1m' is ambiguous: write 1MiB", NULL},
    {"serve --capacity 4gigs", 2, "unknown unit 'gigs' (known: B, KiB, MiB, GiB, TiB", NULL},
    {"serve --capacity lots", 2, "'lots' is not a size: expected a number and a unit", NULL},
    {"serve --capacity -1GiB", 2, "'-1GiB' is not a size", NULL},
    {"serve --max-value 512k", 2, "--max-value (max_value): '512k' is ambiguous", NULL},
    {"serve --capacity 0B", 2, "--capacity (capacity): expected a size above 0, got '0B'", NULL},
    {"serve --max-frame 1KiB", 2, "--max-frame (max_frame): expected 4096 bytes .. 256TiB", NULL},
    {"bench --size 100000", 2, "--size wants a size from 1 byte to 1GiB, like 256KiB: '100000' "
                               "has no unit",
     NULL},
    {"bench --size 4k", 2, "'4k' is ambiguous: write 4KiB", NULL},
    {"analyze %s/trace.jsonl --capacity 1g", 2, "--capacity: '1g' is ambiguous", NULL},
    {"replay %s/trace.jsonl --capacity 5120", 2, "'5120' has no unit: write 5120B", NULL},
    /* Config files. */
    {"serve --config %s/trailing.json", 2,
     "trailing.json:3:1: a trailing comma before '}': JSON allows none", NULL},
    {"serve --config %s/nocomma.json", 2,
     "nocomma.json:2:2: expected ',' or '}' after the value of \"port\", got '\"' (a missing "
     "comma?)",
     NULL},
    {"serve --config %s/single.json", 2, "single.json:1:2: single quotes: JSON keys and strings "
                                         "take double quotes",
     NULL},
    {"serve --config %s/unquoted.json", 2, "unquoted.json:1:15: a number followed by letters: a "
                                           "value such as 4GiB goes in double quotes",
     NULL},
    {"serve --config %s/comment.json", 2, "comment.json:1:16: a comment: JSON has none", NULL},
    {"serve --config %s/empty.json", 2, "empty.json:2:1: the text is empty", NULL},
    {"serve --config %s/array.json", 2,
     "array.json: the file holds a JSON array; settings go in one object", NULL},
    {"serve --config %s/typo.json", 2, "typo.json: unknown setting 'prot' (did you mean 'port'?)",
     NULL},
    {"serve --config %s/dashes.json", 2,
     "unknown setting 'metrics-port' (did you mean 'metrics_port'?)", NULL},
    {"serve --config %s/bare.json", 2, "bare.json: capacity: '64' has no unit", NULL},
    {"serve --config %s/null.json", 2,
     "null.json: port: expected a string, number or boolean, got null", NULL},
    {"serve --config %s/open.json", 2, "open.json:1:16: a string runs past the end of its line",
     NULL},
    {"serve --config %s/True.json", 2, "True.json:1:14: expected a value, got the bare word 'True'",
     NULL},
    {"serve --config %s/unclosed.json", 2,
     "unclosed.json:3:1: the text ends inside an object: a '}' is missing", NULL},
    {"serve --config %s/octal.json", 2, "octal.json:1:16: a number with a leading zero", NULL},
    {"serve --config %s/list.json", 2, "list.json: threads: expected a string, number or "
                                       "boolean, got an array",
     NULL},
    {"serve --config %s/policy.json", 2, "policy.json: policy: expected lru, s3fifo or chain, "
                                         "got 'lfu' (did you mean 'lru'?)",
     NULL},
    {"serve --config %s/none.json", 2, "none.json: No such file or directory", NULL},
    /* Store URLs. */
    {"get 'mem://?capcity=1GiB' k", 1,
     "unknown option 'capcity' for mem:// URLs (did you mean 'capacity'?)", NULL},
    {"get 'mem://?polcy=lru' k", 1, "(did you mean 'policy'?)", NULL},
    {"get 'mem://?capacity=64g' k", 1, "option capacity=64g: '64g' is ambiguous", NULL},
    {"get 'mem://?capacity=lots' k", 1, "option capacity=lots: 'lots' is not a size", NULL},
    {"get 'mem://?capacity=4gigs' k", 1, "unknown unit 'gigs'", NULL},
    {"get 'tide://127.0.0.1:1?timeuot_ms=50' k", 1,
     "unknown option 'timeuot_ms' for tide:// URLs (did you mean 'timeout_ms'?)", NULL},
    {"get 'tide://127.0.0.1:1?conns=2&tokn=s3cret-s3cret' k", 1,
     "unknown option 'tokn' for tide:// URLs (did you mean 'token'?)", NULL},
    {"get 'mem://?zzzzzzzz=1' k", 1, "unknown option 'zzzzzzzz' for mem:// URLs", "did you mean"},
    /* Other commands' flags. */
    {"bench --threds 2", 2, "unknown option '--threds' (did you mean '--threads'?)", NULL},
    {"bench --op scna", 2, "--op wants get, put or mixed (got 'scna')", NULL},
    {"demo --prefix-token 10", 2, "(did you mean '--prefix-tokens'?)", NULL},
    {"check-config --quite x.json", 2, "unknown option '--quite' (did you mean '--quiet'?)", NULL},
    {"analyze %s/trace.jsonl --capactiy 1GiB", 2, "(did you mean '--capacity'?)", NULL},
};

TEST_T(cli_mistakes_each_get_what_value_and_fix, 120) {
    const char *dir = test_tmpdir();
    char path[600];
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, files[i].name);
        write_text(path, files[i].text);
    }
    size_t n = sizeof(mistakes) / sizeof(mistakes[0]);
    CHECK_MSG(n >= 50, "the table holds %zu mistakes; the issue asks for 50 at least", n);
    static char out[16384];
    for (size_t i = 0; i < n; i++) {
        char args[1024];
        snprintf(args, sizeof(args), mistakes[i].args, dir);
        test_context = args;
        int st = tide_run(args, out, sizeof(out));
        CHECK_MSG(st == mistakes[i].status, "tide %s: exit %d, want %d:\n%s", args, st,
                  mistakes[i].status, out);
        CHECK_CONTAINS(out, mistakes[i].want);
        if (mistakes[i].not_want)
            CHECK_MSG(!strstr(out, mistakes[i].not_want), "tide %s: says '%s':\n%s", args,
                      mistakes[i].not_want, out);
        /* A secret typed into a URL is never echoed, even in a mistake. */
        CHECK_MSG(!strstr(out, "s3cret-s3cret"), "tide %s printed the token:\n%s", args, out);
    }
    test_context = NULL;
    printf("    %zu mistakes, each with its message\n", n);
}
