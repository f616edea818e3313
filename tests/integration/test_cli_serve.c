/*
 * test_cli_serve.c — the settings of `tide serve` and the one flag parser of serve, bench,
 * replay and analyze, run as a user runs them ($TIDE_BIN).
 *
 * A setting given twice (as a flag, or as a key a config file repeats) ends with its last
 * value and frees the first: a sanitizer build (make SANITIZER=address) fails
 * cli_serve_repeated_settings_last_wins when a string leaks, because the leak checker
 * makes tided exit non-zero. Every mistake on a command line gets one message naming the
 * flag.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "server_util.h"
#include "tide.h"

static const char *tmp_path(const char *name) {
    static char bufs[16][512];
    static int next;
    char *b = bufs[next++ % 16];
    snprintf(b, 512, "%s/%s", test_tmpdir(), name);
    return b;
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    CHECK_MSG(f != NULL, "cannot write %s", path);
    fputs(text, f);
    fclose(f);
}

static int exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* Run `tide ARGS` (a shell fragment), bounded by `timeout`; its exit status and, in out,
 * its stdout and stderr. */
static int tide_run(const char *args, char *out, size_t cap) {
    char cmd[2048];
    int w = snprintf(cmd, sizeof(cmd), "timeout 10 %s %s 2>&1", test_tide_bin(), args);
    CHECK_MSG(w > 0 && (size_t)w < sizeof(cmd), "command too long: tide %s", args);
    return test_run(cmd, out, cap);
}

TEST(cli_serve_repeated_settings_last_wins) {
    const char *never_a = tmp_path("never-ready-a"), *never_b = tmp_path("never-ready-b");
    const char *cfg_disk_a = tmp_path("cfg-disk-a"), *cfg_disk_b = tmp_path("cfg-disk-b");
    const char *disk_a = tmp_path("disk-a"), *disk_b = tmp_path("disk-b");
    const char *sock_a = tmp_path("serve-a.sock"), *sock_b = tmp_path("serve-b.sock");
    const char *tok_a = tmp_path("token-a"), *tok_b = tmp_path("token-b");
    write_text(tok_a, "first-token\n");
    write_text(tok_b, "second-token\n");
    /* The file repeats string keys (the ready file, the SSD tier's directory, the token
     * file) and a number; the flags then repeat them again and override the file. */
    char conf_text[4096];
    snprintf(conf_text, sizeof(conf_text),
             "{\"ready_file\": \"%s\", \"ready_file\": \"%s\",\n"
             " \"disk_dir\": \"%s\", \"disk_dir\": \"%s\",\n"
             " \"auth_token_file\": \"%s\", \"auth_token_file\": \"%s\",\n"
             " \"disk_capacity\": \"4MiB\", \"disk_capacity\": \"8MiB\",\n"
             " \"unix\": \"%s\", \"unix\": \"%s\"}\n",
             never_a, never_b, cfg_disk_a, cfg_disk_b, tok_a, tok_b, sock_a, sock_b);
    const char *conf = tmp_path("repeat.json");
    write_text(conf, conf_text);
    const char *const args[] = {"--log-level",
                                "error",
                                "--config",
                                conf,
                                "--disk-dir",
                                disk_a,
                                "--disk-dir",
                                disk_b,
                                "--auth-token-file",
                                tok_b,
                                "--auth-token-file",
                                tok_a,
                                "--unix",
                                sock_a,
                                NULL};
    test_server ts;
    server_start(&ts, args); /* its own --ready-file flag beats the file's two */
    CHECK(!exists(never_a));
    CHECK(!exists(never_b));
    CHECK(exists(disk_b));
    CHECK(!exists(disk_a));
    CHECK(!exists(cfg_disk_a));
    CHECK(!exists(cfg_disk_b));
    CHECK(exists(sock_a)); /* the flag's socket, not the file's last */
    CHECK(!exists(sock_b));
    /* The last --auth-token-file holds the token that counts. */
    char url[256];
    tide_store *s = NULL;
    snprintf(url, sizeof(url), "%s?token=first-token", ts.url);
    CHECK_MSG(tide_open(url, &s) == 0, "%s", tide_errmsg(NULL));
    CHECK_EQ(tide_put(s, "k", 1, "v", 1), 0);
    tide_close(s);
    snprintf(url, sizeof(url), "%s?token=second-token", ts.url);
    s = NULL;
    int rc = tide_open(url, &s);
    if (rc == 0) {
        rc = tide_put(s, "k2", 2, "v", 1);
        tide_close(s);
    }
    CHECK(rc != 0);
    /* A clean stop: under a sanitizer, a leaked first value would make this non-zero. */
    int st = server_stop(&ts, SIGTERM);
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "tide serve exit status %d", st);
}

/* A repeated number in a config file: the last one is checked and used. */
TEST(cli_serve_config_repeated_key_checked) {
    const char *conf = tmp_path("repeat-bad.json");
    write_text(conf, "{\"max_conns\": 4, \"max_conns\": 0}");
    char out[4096], args[600];
    snprintf(args, sizeof(args), "serve --port 0 --metrics-port 0 --config %s", conf);
    CHECK_EQ(tide_run(args, out, sizeof(out)), 2);
    CHECK_CONTAINS(out, "repeat-bad.json: max_conns: expected at least 1");
    CHECK_CONTAINS(out, "got '0'");
    /* The flag overrides the file wherever it stands on the line, and is checked too. */
    snprintf(args, sizeof(args), "serve --max-conns 0 --port 0 --metrics-port 0 --config %s",
             tmp_path("nonexistent.json"));
    CHECK_EQ(tide_run(args, out, sizeof(out)), 2);
    CHECK_CONTAINS(out, "nonexistent.json");
}

/* One parser, one wording: every command names the flag that was wrong. */
TEST(cli_flags_one_message_per_mistake) {
    const char *trace = tmp_path("one.jsonl");
    write_text(trace,
               "{\"timestamp\": 0, \"input_length\": 512, \"output_length\": 1, \"hash_ids\": "
               "[1]}\n");
    char tr[600];
    snprintf(tr, sizeof(tr), "%s", trace);
    static const struct {
        const char *fmt; /* %s: the trace */
        const char *want;
    } cases[] = {
        {"serve --frobnicate 1", "tide serve: unknown option '--frobnicate'"},
        {"serve --port", "tide serve: --port needs a value"},
        {"serve --threads x", "tide serve: --threads (threads): expected a non-negative"},
        {"serve --threads 0", "tide serve: --threads (threads): expected 1..256, got '0'"},
        {"serve --port 70000", "--port (port): expected a TCP port (0..65535), got '70000'"},
        {"serve --capacity lots", "--capacity (capacity): 'lots' is not a size"},
        {"serve --prefault=yes", "tide serve: --prefault takes no value"},
        {"serve stray", "tide serve: unexpected argument 'stray'"},
        {"serve --bind 1234567890123456789012345678901234567890123456789012345678901234567890",
         "--bind (bind): expected an IPv4 or IPv6 address, got too long a text"},
        {"serve --unix-mode 999", "--unix-mode (unix_mode): expected octal"},
        {"bench --frobnicate", "tide bench: unknown option '--frobnicate'"},
        {"bench --threads", "tide bench: --threads needs a value"},
        {"bench --threads x", "tide bench: --threads wants a number from 1 to 256 (got 'x')"},
        {"bench --seconds=0", "tide bench: --seconds wants a duration"},
        {"bench --op scan", "tide bench: --op wants get, put or mixed (got 'scan')"},
        {"bench stray", "tide bench: unexpected argument 'stray'"},
        {"replay %s --frobnicate", "tide replay: unknown option '--frobnicate'"},
        {"replay %s --limit", "tide replay: --limit needs a value"},
        {"replay %s --limit x", "tide replay: --limit wants a number from 1 (got 'x')"},
        {"replay %s --block-tokens 0", "tide replay: --block-tokens wants a number from 1"},
        {"replay %s --model", "tide replay: --model needs a value"},
        {"analyze %s --frobnicate", "tide analyze: unknown option '--frobnicate'"},
        {"analyze %s --capacity", "tide analyze: --capacity needs a value"},
        {"analyze %s --capacity 1GiB --limit 0", "tide analyze: --limit wants a number"},
        {"analyze %s --capacity 1GiB --bytes-per-token x", "--bytes-per-token wants a number"},
    };
    char out[8192];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char args[1024];
        snprintf(args, sizeof(args), cases[i].fmt, tr);
        test_context = args;
        int st = tide_run(args, out, sizeof(out));
        CHECK_MSG(st == 2, "%s: exit status %d (2 expected): %s", args, st, out);
        CHECK_CONTAINS(out, cases[i].want);
    }
    test_context = NULL;
    /* --name=VALUE works as --name VALUE does, and a switch sets its flag. */
    snprintf(out, sizeof(out), "analyze %s --capacity=1GiB --limit=1 --json", tr);
    char res[8192];
    CHECK_EQ(tide_run(out, res, sizeof(res)), 0);
    CHECK_CONTAINS(res, "\"block_hit_rate\"");
}
