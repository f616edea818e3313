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
    {"serve --policy lfu", 2,
     "expected lru, s3fifo, chain or adapt, got 'lfu' (did you mean 'lru'?)", NULL},
    {"serve --policy adpat", 2, "got 'adpat' (did you mean 'adapt'?)", NULL},
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
    {"bench --size 100000", 2,
     "--size wants a size from 1 byte to 1GiB, like 256KiB: '100000' "
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
    {"serve --config %s/single.json", 2,
     "single.json:1:2: single quotes: JSON keys and strings "
     "take double quotes",
     NULL},
    {"serve --config %s/unquoted.json", 2,
     "unquoted.json:1:15: a number followed by letters: a "
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
    {"serve --config %s/list.json", 2,
     "list.json: threads: expected a string, number or "
     "boolean, got an array",
     NULL},
    {"serve --config %s/policy.json", 2,
     "policy.json: policy: expected lru, s3fifo, chain or adapt, "
     "got 'lfu' (did you mean 'lru'?)",
     NULL},
    {"serve --config %s/none.json", 2, "none.json: No such file or directory", NULL},
    /* Store URLs. */
    {"bench --url 'mem://?capcity=1GiB'", 1,
     "unknown option 'capcity' for mem:// URLs (did you mean 'capacity'?)", NULL},
    {"bench --url 'mem://?polcy=lru'", 1, "(did you mean 'policy'?)", NULL},
    {"bench --url 'mem://?capacity=64g'", 1, "option capacity=64g: '64g' is ambiguous", NULL},
    {"bench --url 'mem://?capacity=lots'", 1, "option capacity=lots: 'lots' is not a size", NULL},
    {"bench --url 'mem://?capacity=4gigs'", 1, "unknown unit 'gigs'", NULL},
    {"get 'tide://127.0.0.1:1?timeuot_ms=50' k", 1,
     "unknown option 'timeuot_ms' for tide:// URLs (did you mean 'timeout_ms'?)", NULL},
    {"get 'tide://127.0.0.1:1?conns=2&tokn=s3cret-s3cret' k", 1,
     "unknown option 'tokn' for tide:// URLs (did you mean 'token'?)", NULL},
    {"bench --url 'mem://?zzzzzzzz=1'", 1, "unknown option 'zzzzzzzz' for mem:// URLs",
     "did you mean"},
    {"get 127.0.0.1:7474 k", 1,
     "malformed URL '127.0.0.1:7474': expected scheme://... (did you mean "
     "'tide://127.0.0.1:7474'?)",
     NULL},
    {"get tide:/127.0.0.1:7474 k", 1, "(did you mean 'tide://127.0.0.1:7474'?)", NULL},
    {"get tdie://127.0.0.1:7474 k", 1, "unknown URL scheme 'tdie://'", NULL},
    {"get tdie://127.0.0.1:7474 k", 1, "did you mean 'tide://'?", NULL},
    {"get tcp://127.0.0.1:7474 k", 1, "a tided's native port is tide://HOST:PORT", NULL},
    {"get tide://127.0.0.1 k", 1,
     "no port (expected HOST:PORT) (tided listens on 7474 by "
     "default)",
     NULL},
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

/* ---- defaults that coexist -------------------------------------------------------------- */

/* 1 when 127.0.0.1:port can be bound now. */
static int port_free(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int ok = fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
    if (fd >= 0) close(fd);
    return ok;
}

/* GET /health on 127.0.0.1:port: 1 when it answers 200. */
static int health_ok(int port) {
    int fd = server_connect(port, 5);
    if (fd < 0) return 0;
    static const char req[] = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    char buf[512] = "";
    ssize_t n = send(fd, req, sizeof(req) - 1, MSG_NOSIGNAL) == (ssize_t)sizeof(req) - 1
                    ? recv(fd, buf, sizeof(buf) - 1, MSG_WAITALL)
                    : -1;
    close(fd);
    return n > 0 && strncmp(buf, "HTTP/1.1 200", 12) == 0;
}

/* Three tideds with default flags on ports P, P+1, P+2 all start (the metrics port was
 * port + 1: the second could not start), and each serves /health on a port of its own. */
TEST_T(cli_defaults_neighbouring_tideds_start, 60) {
    int base = 0;
    for (int tries = 0; tries < 50 && !base; tries++) {
        int p = test_free_port();
        if (p < 65000 && port_free(p + 1) && port_free(p + 2)) base = p;
    }
    CHECK_MSG(base, "no three neighbouring free ports");
    test_server ts[3];
    char ports[3][16];
    for (int i = 0; i < 3; i++) {
        snprintf(ports[i], sizeof(ports[i]), "%d", base + i);
        const char *const args[] = {"--port",      ports[i], "--capacity", "16MiB",
                                    "--log-level", "info",   NULL};
        server_start(&ts[i], args);
        CHECK_EQ(ts[i].port, base + i);
    }
    for (int i = 0; i < 3; i++) {
        CHECK_MSG(ts[i].metrics_port > 0, "tided %d has no metrics port", i);
        for (int j = 0; j < 3; j++) {
            CHECK(ts[i].metrics_port != base + j);
            CHECK(j == i || ts[i].metrics_port != ts[j].metrics_port);
        }
        CHECK_MSG(health_ok(ts[i].metrics_port), "tided %d: /health on %d", i, ts[i].metrics_port);
        char cmd[600], out[4096], want[96];
        snprintf(cmd, sizeof(cmd), "cat %s", ts[i].log);
        test_run(cmd, out, sizeof(out));
        snprintf(want, sizeof(want), "metrics at http://127.0.0.1:%d/metrics", ts[i].metrics_port);
        CHECK_CONTAINS(out, want);
    }
    for (int i = 0; i < 3; i++)
        CHECK_EQ(server_stop(&ts[i], SIGTERM), 0);
}

/* A port that is taken: the message says which listener, its flag and value, and the fix. */
TEST(cli_defaults_taken_port_named) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 && listen(fd, 1) == 0 &&
          getsockname(fd, (struct sockaddr *)&a, &len) == 0);
    int taken = ntohs(a.sin_port);
    char args[200], out[4096], want[300];
    snprintf(args, sizeof(args), "--capacity 16MiB --metrics-port %d", taken);
    CHECK_EQ(server_serve_status(args, out, sizeof(out)), 1);
    snprintf(want, sizeof(want),
             "cannot listen on 127.0.0.1:%d for the metrics HTTP port (--metrics-port %d): bind: "
             "Address already in use (another process, perhaps another tided, listens there: "
             "give --metrics-port a free port, auto for any free one, or 0 for none)",
             taken, taken);
    CHECK_CONTAINS(out, want);
    snprintf(args, sizeof(args), "--capacity 16MiB --port %d", taken);
    CHECK_EQ(server_serve_status(args, out, sizeof(out)), 1);
    snprintf(want, sizeof(want),
             "for the native tide port (--port %d): bind: Address already in use (another "
             "process, perhaps another tided, listens there: give --port a free port, or 0 for "
             "any free one)",
             taken);
    CHECK_CONTAINS(out, want);
    snprintf(args, sizeof(args), "--capacity 16MiB --resp-port %d", taken);
    CHECK_EQ(server_serve_status(args, out, sizeof(out)), 1);
    CHECK_CONTAINS(out, "for the RESP (Redis protocol) port (--resp-port");
    close(fd);
}

/* ---- clients that reach something other than tided ------------------------------------ */

/* A peer that answers the first bytes it reads with `reply` (len bytes; silent when NULL),
 * or greets with it on accept (banner), for up to 4 connections. */
typedef struct fake_peer {
    int fd, port;
    const char *reply;
    size_t len;
    int banner;
    pthread_t th;
} fake_peer;

static void *fake_peer_main(void *arg) {
    fake_peer *f = arg;
    for (int n = 0; n < 4; n++) {
        struct pollfd p = {f->fd, POLLIN, 0};
        if (poll(&p, 1, 8000) <= 0) break;
        int c = accept(f->fd, NULL, NULL);
        if (c < 0) break;
        if (f->banner && f->reply) send(c, f->reply, f->len, MSG_NOSIGNAL);
        char buf[1024];
        struct pollfd q = {c, POLLIN, 0};
        if (poll(&q, 1, 3000) > 0 && recv(c, buf, sizeof(buf), 0) > 0 && f->reply && !f->banner)
            send(c, f->reply, f->len, MSG_NOSIGNAL);
        /* Silent or done: hold the connection until the client leaves (3 s at most). */
        for (int k = 0; k < 30 && poll(&q, 1, 100) >= 0; k++)
            if ((q.revents & POLLIN) && recv(c, buf, sizeof(buf), MSG_DONTWAIT) == 0) break;
        close(c);
    }
    return NULL;
}

static void fake_peer_start(fake_peer *f, const char *reply, size_t len, int banner) {
    *f = (fake_peer){.reply = reply, .len = len, .banner = banner};
    f->fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    CHECK(f->fd >= 0 && bind(f->fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
          listen(f->fd, 4) == 0 && getsockname(f->fd, (struct sockaddr *)&a, &alen) == 0);
    f->port = ntohs(a.sin_port);
    CHECK_EQ(pthread_create(&f->th, NULL, fake_peer_main, f), 0);
}

static void fake_peer_stop(fake_peer *f) {
    shutdown(f->fd, SHUT_RDWR);
    pthread_join(f->th, NULL);
    close(f->fd);
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* `tide stat` against tided's metrics port and against servers of other kinds: each is
 * named at once (it was "HELLO timed out" after the whole 5 s timeout). */
TEST_T(cli_client_names_a_non_tide_peer, 90) {
    test_server ts;
    const char *const args[] = {"--capacity", "16MiB", NULL};
    server_start(&ts, args);
    static const char tls[] = {0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x32};
    static const char junk[] = {0x00, 0x01, 0x02, 0x03, 'h', 'i'};
    static const struct {
        const char *reply;
        size_t len;
        int banner;
        const char *url_opts, *want;
        double within_s, at_least_s;
    } peers[] = {
        {NULL, 0, 0, "",
         "an HTTP server answered ('HTTP/1.1 400 Bad Request'), not tided: is "
         "this tided's metrics port (--metrics-port)?",
         2.5, 0},
        {"-ERR unknown command 'TIDE'\r\n", 28, 0, "",
         "a Redis (RESP) server answered ('-ERR unknown command 'TIDE''), not tided's native "
         "protocol",
         2.5, 0},
        {tls, sizeof(tls), 0, "", "a TLS server answered (a TLS alert record), not tided", 2.5, 0},
        {"SSH-2.0-OpenSSH_9.2\r\n", 21, 1, "", "an SSH server answered ('SSH-2.0-OpenSSH_9.2')",
         2.5, 0},
        {junk, sizeof(junk), 0, "",
         "the peer is not tided: it answered HELLO with bytes 00 01 02 03 68 69 ('....hi')", 2.5,
         0},
        /* A silent peer: the CLI waits out its timeout (1 s), once, then exits. The bound is
         * that timeout plus 0.6 s for starting and ending the process on a loaded machine
         * under a sanitizer (it takes well under 0.1 s unloaded): a doubled timeout, or a
         * HELLO tried again with a fresh deadline, takes 2 s and fails. */
        {NULL, 0, 0, "?timeout_ms=1000",
         "HELLO timed out after 1000 ms: the peer accepted the connection and sent nothing back",
         1.6, 1.0},
    };
    static char out[8192];
    for (size_t i = 0; i < sizeof(peers) / sizeof(peers[0]); i++) {
        fake_peer f = {.fd = -1};
        int port = ts.metrics_port;
        if (i > 0) {
            fake_peer_start(&f, peers[i].reply, peers[i].len, peers[i].banner);
            port = f.port;
        }
        char cmd[300];
        snprintf(cmd, sizeof(cmd), "stat 'tide://127.0.0.1:%d%s'", port, peers[i].url_opts);
        test_context = peers[i].want;
        double t0 = now_s();
        int st = tide_run(cmd, out, sizeof(out));
        double took = now_s() - t0;
        if (f.fd >= 0) fake_peer_stop(&f);
        CHECK_MSG(st == 1, "tide %s: exit %d:\n%s", cmd, st, out);
        CHECK_CONTAINS(out, peers[i].want);
        CHECK_MSG(took < peers[i].within_s, "tide %s took %.2f s:\n%s", cmd, took, out);
        CHECK_MSG(took >= peers[i].at_least_s,
                  "tide %s ended after %.2f s, before its timeout:\n%s", cmd, took, out);
    }
    test_context = NULL;
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}
