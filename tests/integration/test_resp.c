/*
 * test_resp.c — tided's RESP port started for real: every command over a raw socket,
 * redis-cli round trips of binary values, redis-benchmark, keys crossing between RESP and
 * the native protocol, malformed RESP, pipelining and AUTH.
 *
 * The redis-cli and redis-benchmark tests need Debian's redis-tools (`make deps`).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "server_util.h"
#include "tide.h"

typedef struct resp_server {
    test_server ts;
    int port; /* the RESP port */
} resp_server;

/* A free port below the kernel's ephemeral range (32768 and up by default), so that the
 * native listener's --port 0, bound first, can never take it. */
static int resp_free_port(void) {
    static unsigned seed;
    if (!seed) seed = (unsigned)getpid() * 2654435761u;
    for (int i = 0; i < 200; i++) {
        seed = seed * 1103515245u + 12345u;
        int port = 20000 + (int)((seed >> 8) % 12000);
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET,
                                .sin_port = htons((uint16_t)port),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        int ok = fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
        if (fd >= 0) close(fd);
        if (ok) return port;
    }
    test_fail(__FILE__, __LINE__, "no free port in 20000..31999");
}

static void resp_start(resp_server *rs, const char *const *extra) {
    char port[16];
    rs->port = resp_free_port();
    snprintf(port, sizeof(port), "%d", rs->port);
    /* Metrics off: this test needs none. */
    const char *args[32] = {"--resp-port", port,   "--capacity",     "256MiB",
                            "--log-level", "warn", "--metrics-port", "0"};
    int n = 8;
    for (int i = 0; extra && extra[i] && n < 31; i++)
        args[n++] = extra[i];
    args[n] = NULL;
    server_start(&rs->ts, args);
}

static void send_all(int fd, const void *p, size_t n) {
    const uint8_t *b = p;
    while (n) {
        ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
        CHECK_MSG(w > 0, "send: %s", strerror(errno));
        b += w;
        n -= (size_t)w;
    }
}

static void send_str(int fd, const char *s) {
    send_all(fd, s, strlen(s));
}

/* Length of the complete reply at buf[0..n), or 0 while it is incomplete. */
static size_t reply_len(const char *buf, size_t n) {
    const char *nl = memchr(buf, '\n', n);
    if (!nl) return 0;
    size_t line = (size_t)(nl - buf) + 1;
    long long v = atoll(buf + 1);
    switch (buf[0]) {
    case '$':
        if (v < 0) return line;
        return n >= line + (size_t)v + 2 ? line + (size_t)v + 2 : 0;
    case '*':
    case '%': { /* an array, or a RESP3 map (twice as many elements) */
        size_t off = line;
        for (long long i = 0; i < (buf[0] == '%' ? 2 * v : v); i++) {
            size_t l = reply_len(buf + off, n - off);
            if (!l) return 0;
            off += l;
        }
        return off;
    }
    default:
        return line;
    }
}

/* Read one whole reply (malloc'd, NUL-terminated; *len its length). NULL when the server
 * closed the connection first. */
static char *read_reply(int fd, size_t *len) {
    static __thread char *pend;
    static __thread size_t npend;
    size_t cap = 1 << 16, have = 0;
    char *buf = malloc(cap + 1);
    for (;;) {
        size_t l = have ? reply_len(buf, have) : 0;
        if (l) {
            /* Keep the bytes of later replies for the next call. */
            free(pend);
            npend = have - l;
            pend = npend ? malloc(npend) : NULL;
            if (npend) memcpy(pend, buf + l, npend);
            buf[l] = '\0';
            *len = l;
            return buf;
        }
        if (npend) {
            if (npend > cap) buf = realloc(buf, (cap = npend) + 1);
            memcpy(buf, pend, npend);
            have = npend;
            free(pend);
            pend = NULL;
            npend = 0;
            continue;
        }
        if (have == cap) {
            cap *= 2;
            buf = realloc(buf, cap + 1);
        }
        ssize_t r = recv(fd, buf + have, cap - have, 0);
        if (r <= 0) {
            free(buf);
            return NULL;
        }
        have += (size_t)r;
    }
}

/* Send a command and check that the reply is exactly `want`. */
static void expect(int fd, const char *cmd, const char *want) {
    send_str(fd, cmd);
    size_t len;
    char *r = read_reply(fd, &len);
    test_context = cmd;
    CHECK_MSG(r != NULL, "no reply to %s", cmd);
    CHECK_STR(r, want);
    free(r);
    test_context = NULL;
}

/* Send a command and check that the reply contains `part`. */
static void expect_has(int fd, const char *cmd, const char *part) {
    send_str(fd, cmd);
    size_t len;
    char *r = read_reply(fd, &len);
    test_context = cmd;
    CHECK_MSG(r != NULL, "no reply to %s", cmd);
    CHECK_CONTAINS(r, part);
    free(r);
    test_context = NULL;
}

/* A RESP array command from NULL-terminated arguments. */
static char *cmd_of(const char *const *args) {
    size_t cap = 64;
    for (int i = 0; args[i]; i++)
        cap += strlen(args[i]) + 32;
    char *b = malloc(cap);
    int n = 0, argc = 0;
    while (args[argc])
        argc++;
    n += snprintf(b + n, cap - (size_t)n, "*%d\r\n", argc);
    for (int i = 0; i < argc; i++)
        n += snprintf(b + n, cap - (size_t)n, "$%zu\r\n%s\r\n", strlen(args[i]), args[i]);
    return b;
}

TEST_T(resp_commands, 60) {
    resp_server rs;
    resp_start(&rs, NULL);
    int fd = server_connect(rs.port, 10);
    expect(fd, "*1\r\n$4\r\nPING\r\n", "+PONG\r\n");
    expect(fd, "PING hello\r\n", "$5\r\nhello\r\n"); /* inline form */
    send_all(fd, "*2\r\n$4\r\nECHO\r\n$3\r\na\0b\r\n", 23);
    size_t len;
    char *r = read_reply(fd, &len);
    CHECK(r && len == 9 && memcmp(r, "$3\r\na\0b\r\n", 9) == 0);
    free(r);
    expect(fd, "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nhello\r\n", "+OK\r\n");
    expect(fd, "*2\r\n$3\r\nget\r\n$1\r\nk\r\n", "$5\r\nhello\r\n");
    expect(fd, "*2\r\n$3\r\nGET\r\n$7\r\nmissing\r\n", "$-1\r\n");
    /* SET replaces; SETNX and SET NX keep the first value; SET XX needs the key. */
    expect(fd, "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$6\r\nsecond\r\n", "+OK\r\n");
    expect(fd, "GET k\r\n", "$6\r\nsecond\r\n");
    expect(fd, "SETNX k third\r\n", ":0\r\n");
    expect(fd, "SETNX k2 first\r\n", ":1\r\n");
    expect(fd, "SET k2 other NX\r\n", "$-1\r\n");
    expect(fd, "GET k2\r\n", "$5\r\nfirst\r\n");
    expect(fd, "SET k3 v XX\r\n", "$-1\r\n");
    expect(fd, "SET k2 replaced XX\r\n", "+OK\r\n");
    expect(fd, "GET k2\r\n", "$8\r\nreplaced\r\n");
    expect_has(fd, "SET k v EX 10\r\n", "-ERR tide does not expire keys");
    expect(fd, "SET k v NX XX\r\n", "-ERR syntax error\r\n");
    expect_has(fd, "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n", "-ERR empty value");
    expect(fd, "GET k\r\n", "$6\r\nsecond\r\n"); /* a refused SET changes nothing */
    char longset[400] = "SET ";
    memset(longset + 4, 'k', 300);
    strcpy(longset + 304, " v\r\n");
    expect_has(fd, longset, "-ERR key of 300 bytes: tide keys are 1..256 bytes");
    /* MSET / MGET / EXISTS / DEL with many keys. */
    expect(fd, "MSET a 1 b 22 c 333\r\n", "+OK\r\n");
    expect(fd, "MSET a 1 b\r\n", "-ERR wrong number of arguments for 'mset' command\r\n");
    expect(fd, "MGET a nope c b\r\n", "*4\r\n$1\r\n1\r\n$-1\r\n$3\r\n333\r\n$2\r\n22\r\n");
    expect(fd, "EXISTS a b c nope a\r\n", ":4\r\n");
    const char *many[66] = {"DEL"};
    char names[64][8];
    for (int i = 0; i < 64; i++) {
        snprintf(names[i], sizeof(names[i]), "m%d", i);
        many[i + 1] = names[i];
        if (i % 2 == 0) {
            char set[600]; /* room for any names[i], so the compiler sees no truncation */
            snprintf(set, sizeof(set), "SET %s x\r\n", names[i]);
            expect(fd, set, "+OK\r\n");
        }
    }
    many[0] = "EXISTS";
    char *c = cmd_of(many);
    expect(fd, c, ":32\r\n");
    free(c);
    many[0] = "DEL";
    c = cmd_of(many);
    expect(fd, c, ":32\r\n");
    free(c);
    expect(fd, "DEL a b nope\r\n", ":2\r\n");
    expect(fd, "EXISTS a b c\r\n", ":1\r\n");
    /* DBSIZE, INFO, FLUSHALL, SELECT. */
    expect(fd, "DBSIZE\r\n", ":3\r\n"); /* k, k2, c */
    send_str(fd, "INFO\r\n");
    char *info = read_reply(fd, &len);
    for (const char *s = "# Server\0# Clients\0# Memory\0# Stats\0# Keyspace\0db0:keys=3,\0"
                         "connected_clients:1\0maxmemory:268435456\0tide_version:\0";
         *s; s += strlen(s) + 1)
        CHECK_CONTAINS(info, s);
    free(info);
    send_str(fd, "INFO keyspace\r\n");
    info = read_reply(fd, &len);
    CHECK_CONTAINS(info, "# Keyspace\r\ndb0:keys=3,");
    CHECK(strstr(info, "# Server") == NULL);
    free(info);
    expect(fd, "FLUSHALL\r\n", "+OK\r\n");
    expect(fd, "DBSIZE\r\n", ":0\r\n");
    expect(fd, "SELECT 0\r\n", "+OK\r\n");
    expect_has(fd, "SELECT 1\r\n", "-ERR DB index is out of range");
    /* COMMAND, CLIENT, CONFIG. */
    expect(fd, "COMMAND COUNT\r\n", ":20\r\n");
    expect(fd, "COMMAND DOCS\r\n", "*0\r\n");
    expect(fd, "COMMAND INFO get nope\r\n",
           "*2\r\n*6\r\n$3\r\nget\r\n:2\r\n*2\r\n+readonly\r\n+fast\r\n:1\r\n:1\r\n:1\r\n*-1\r\n");
    expect(fd, "CLIENT SETNAME worker-1\r\n", "+OK\r\n");
    expect(fd, "CLIENT GETNAME\r\n", "$8\r\nworker-1\r\n");
    expect_has(fd, "CLIENT SETNAME \"a b\"\r\n", "-ERR");
    expect(fd, "CONFIG GET appendonly\r\n", "*2\r\n$10\r\nappendonly\r\n$2\r\nno\r\n");
    /* Errors keep the connection. */
    expect(fd, "FOO bar baz\r\n",
           "-ERR unknown command 'FOO', with args beginning with: 'bar' 'baz' \r\n");
    expect(fd, "GET\r\n", "-ERR wrong number of arguments for 'get' command\r\n");
    expect(fd, "PING\r\n", "+PONG\r\n");
    expect(fd, "QUIT\r\n", "+OK\r\n");
    char ch;
    CHECK_EQ(recv(fd, &ch, 1, 0), 0); /* closed */
    close(fd);
    CHECK_EQ(server_stop(&rs.ts, SIGTERM), 0);
}

/* A value of n pseudo-random bytes (CR, LF and NUL among them). */
static uint8_t *random_value(size_t n, unsigned seed) {
    uint8_t *v = malloc(n);
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x = x * 1103515245u + 12345u;
        v[i] = (uint8_t)(x >> 16);
    }
    if (n > 4) memcpy(v, "\r\n\0$", 4);
    return v;
}

/* Send SET key value (value of n bytes) and check +OK. */
static void resp_set(int fd, const char *key, const uint8_t *v, size_t n) {
    char head[128];
    int hl = snprintf(head, sizeof(head), "*3\r\n$3\r\nSET\r\n$%zu\r\n%s\r\n$%zu\r\n", strlen(key),
                      key, n);
    send_all(fd, head, (size_t)hl);
    send_all(fd, v, n);
    expect(fd, "\r\n", "+OK\r\n");
}

/* GET key over RESP and check it holds v (n bytes). */
static void resp_get_check(int fd, const char *key, const uint8_t *v, size_t n) {
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "*2\r\n$3\r\nGET\r\n$%zu\r\n%s\r\n", strlen(key), key);
    send_str(fd, cmd);
    size_t len;
    char *r = read_reply(fd, &len);
    CHECK(r != NULL);
    char head[32];
    int hl = snprintf(head, sizeof(head), "$%zu\r\n", n);
    CHECK_EQ(len, (size_t)hl + n + 2);
    CHECK(memcmp(r, head, (size_t)hl) == 0);
    CHECK_MSG(memcmp(r + hl, v, n) == 0, "GET %s: the bytes differ", key);
    free(r);
}

TEST_T(resp_native_interop, 60) {
    resp_server rs;
    resp_start(&rs, NULL);
    int fd = server_connect(rs.port, 10);
    tide_store *s;
    CHECK_MSG(tide_open(rs.ts.url, &s) == 0, "%s", tide_errmsg(NULL));
    static const size_t sizes[] = {1, 100, 20000, 262144, 1 << 20, (3 << 20) + 7};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        size_t n = sizes[i];
        uint8_t *v = random_value(n, (unsigned)i), *got = malloc(n);
        char k1[32], k2[32];
        snprintf(k1, sizeof(k1), "resp-%zu", n);
        snprintf(k2, sizeof(k2), "native-%zu", n);
        /* Written through RESP, read natively: same key, same bytes. */
        resp_set(fd, k1, v, n);
        size_t glen = 0;
        CHECK_EQ(tide_get(s, k1, strlen(k1), got, n, &glen), 0);
        CHECK_EQ(glen, n);
        CHECK(memcmp(got, v, n) == 0);
        /* Written natively, read through RESP. */
        CHECK_EQ(tide_put(s, k2, strlen(k2), v, n), 0);
        resp_get_check(fd, k2, v, n);
        free(v);
        free(got);
    }
    /* DEL through RESP is seen natively; a native remove is seen through RESP. */
    expect(fd, "DEL resp-1 native-100\r\n", ":2\r\n");
    CHECK_EQ(tide_exists(s, "resp-1", 6), 0);
    CHECK_EQ(tide_remove(s, "resp-100", 8), 0);
    expect(fd, "EXISTS resp-100 native-1\r\n", ":1\r\n");
    tide_close(s);
    close(fd);
    CHECK_EQ(server_stop(&rs.ts, SIGTERM), 0);
}

TEST_T(resp_pipelined, 60) {
    resp_server rs;
    resp_start(&rs, NULL);
    int fd = server_connect(rs.port, 10);
    /* A streamed SET, a GET of it and small commands in one write: replies in order. */
    size_t n = 1 << 20;
    uint8_t *v = random_value(n, 7);
    size_t cap = n + 4096, off = 0;
    char *buf = malloc(cap);
    off += (size_t)snprintf(buf, cap, "*3\r\n$3\r\nSET\r\n$3\r\nbig\r\n$%zu\r\n", n);
    memcpy(buf + off, v, n);
    off += n;
    off +=
        (size_t)snprintf(buf + off, cap - off, "\r\nPING\r\n*2\r\n$6\r\nEXISTS\r\n$3\r\nbig\r\n");
    for (int i = 0; i < 20; i++)
        off += (size_t)snprintf(buf + off, cap - off, "*2\r\n$4\r\nECHO\r\n$2\r\n%02d\r\n", i);
    send_all(fd, buf, off);
    size_t len;
    char *r = read_reply(fd, &len);
    CHECK_STR(r, "+OK\r\n");
    free(r);
    r = read_reply(fd, &len);
    CHECK_STR(r, "+PONG\r\n");
    free(r);
    r = read_reply(fd, &len);
    CHECK_STR(r, ":1\r\n");
    free(r);
    for (int i = 0; i < 20; i++) {
        char want[16];
        snprintf(want, sizeof(want), "$2\r\n%02d\r\n", i);
        r = read_reply(fd, &len);
        CHECK_STR(r, want);
        free(r);
    }
    resp_get_check(fd, "big", v, n);
    /* Ten GETs of the big value in one write. */
    off = 0;
    for (int i = 0; i < 10; i++)
        off += (size_t)snprintf(buf + off, cap - off, "GET big\r\n");
    send_all(fd, buf, off);
    for (int i = 0; i < 10; i++) {
        r = read_reply(fd, &len);
        CHECK(r && len == n + 12 && memcmp(r, "$1048576\r\n", 10) == 0);
        CHECK(memcmp(r + 10, v, n) == 0);
        free(r);
    }
    free(buf);
    free(v);
    close(fd);
    CHECK_EQ(server_stop(&rs.ts, SIGTERM), 0);
}

/* After a protocol error: "-ERR Protocol error: <what>", then the connection closes. */
static void expect_proto_error(int port, const void *bytes, size_t n, const char *what) {
    int fd = server_connect(port, 10);
    send_all(fd, bytes, n);
    size_t len;
    char *r = read_reply(fd, &len);
    test_context = what;
    CHECK_MSG(r != NULL, "no error reply for %s", what);
    CHECK_CONTAINS(r, "-ERR Protocol error: ");
    CHECK_CONTAINS(r, what);
    free(r);
    /* Closed: an end of stream, or a reset when our bytes were left unread. */
    char ch;
    ssize_t got = recv(fd, &ch, 1, 0);
    CHECK_MSG(got == 0 || (got < 0 && errno == ECONNRESET), "recv %zd (%s)", got, strerror(errno));
    test_context = NULL;
    close(fd);
}

TEST_T(resp_malformed_input, 60) {
    resp_server rs;
    resp_start(&rs, NULL);
    int other = server_connect(rs.port, 10); /* keeps being served throughout */
    expect(other, "SET alive yes\r\n", "+OK\r\n");
    static const struct {
        const char *in;
        const char *what;
    } cases[] = {
        {"*-5\r\n", "invalid multibulk length -5"},
        {"*2\r\n$3\r\nGET\r\n$-3\r\n", "invalid bulk length -3"},
        {"*2\r\n$3\r\nGET\r\n$99999999999999\r\n", "over the limit of 268435456"},
        {"*1\r\n$4\r\nPINGPONG\r\n", "not followed by"},
        {"*x\r\n", "not a digit"},
        {"*2\r\n$3\r\nGET\r\n$abc\r\n", "not a digit"},
        {"*1\r\n:4\r\n", "expected '$'"},
        {"*99999999\r\n", "arguments, over the limit"},
        {"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$65536\r\n", "not followed by"}, /* below */
    };
    for (size_t i = 0; i + 1 < sizeof(cases) / sizeof(cases[0]); i++)
        expect_proto_error(rs.port, cases[i].in, strlen(cases[i].in), cases[i].what);
    /* A streamed value whose "\r\n" is wrong: the reservation is dropped, not committed. */
    size_t n = 65536;
    char *buf = malloc(n + 64);
    size_t hl = strlen(cases[8].in);
    memcpy(buf, cases[8].in, hl);
    memset(buf + hl, 'v', n);
    memcpy(buf + hl + n, "XY", 2);
    expect_proto_error(rs.port, buf, hl + n + 2, cases[8].what);
    /* An inline line with no end, longer than the inline limit. */
    free(buf);
    n = 70000;
    buf = malloc(n);
    memset(buf, 'A', n);
    expect_proto_error(rs.port, buf, n, "inline command longer than");
    free(buf);
    /* Cut short, then gone: a command and a streamed value half sent. */
    int fd = server_connect(rs.port, 10);
    send_str(fd, "*2\r\n$3\r\nGET\r\n$5\r\nab");
    close(fd);
    fd = server_connect(rs.port, 10);
    send_str(fd, "*3\r\n$3\r\nSET\r\n$4\r\nhalf\r\n$100000\r\n");
    buf = calloc(1, 50000);
    send_all(fd, buf, 50000);
    free(buf);
    close(fd);
    expect(other, "EXISTS half k\r\n", ":0\r\n");
    expect(other, "GET alive\r\n", "$3\r\nyes\r\n");
    /* The half-sent SET's connection is closed by its worker when it reads the end of the
     * stream, which may come after this connection's commands (another thread, or a later
     * epoll round): ask again, a bounded number of times, until it has been. */
    size_t len;
    char *info = NULL;
    for (int tries = 0; tries < 500; tries++) {
        free(info);
        send_str(other, "INFO memory\r\n");
        info = read_reply(other, &len);
        if (strstr(info, "tide_reserved_objects:0\r\n") &&
            strstr(info, "tide_pinned_objects:0\r\n"))
            break;
        usleep(10000);
    }
    CHECK_CONTAINS(info, "tide_reserved_objects:0\r\n");
    CHECK_CONTAINS(info, "tide_pinned_objects:0\r\n");
    free(info);
    /* Natives are served too. */
    tide_store *s;
    CHECK_EQ(tide_open(rs.ts.url, &s), 0);
    CHECK_EQ(tide_exists(s, "alive", 5), 1);
    tide_close(s);
    close(other);
    CHECK_EQ(server_stop(&rs.ts, SIGTERM), 0);
}

/* A tided whose token (in a file in the test's directory) is "s3cret-token". */
static void resp_start_with_token(resp_server *rs) {
    char tokfile[300];
    snprintf(tokfile, sizeof(tokfile), "%s/token", test_tmpdir());
    FILE *f = fopen(tokfile, "w");
    CHECK(f != NULL);
    fputs("s3cret-token\n", f);
    fclose(f);
    const char *const args[] = {"--auth-token-file", tokfile, NULL};
    resp_start(rs, args);
}

TEST_T(resp_auth, 60) {
    resp_server rs;
    resp_start_with_token(&rs);
    int fd = server_connect(rs.port, 10);
    expect(fd, "PING\r\n", "-NOAUTH Authentication required.\r\n");
    expect(fd, "SET k v\r\n", "-NOAUTH Authentication required.\r\n");
    expect(fd, "AUTH wrong\r\n",
           "-WRONGPASS invalid username-password pair or user is disabled.\r\n");
    expect(fd, "AUTH s3cret-token-and-more\r\n",
           "-WRONGPASS invalid username-password pair or user is disabled.\r\n");
    expect(fd, "AUTH someone s3cret-token\r\n",
           "-WRONGPASS invalid username-password pair or user is disabled.\r\n");
    expect(fd, "GET k\r\n", "-NOAUTH Authentication required.\r\n");
    expect(fd, "AUTH s3cret-token\r\n", "+OK\r\n");
    expect(fd, "SET k v\r\n", "+OK\r\n");
    close(fd);
    fd = server_connect(rs.port, 10);
    expect(fd, "AUTH default s3cret-token\r\n", "+OK\r\n");
    expect(fd, "GET k\r\n", "$1\r\nv\r\n");
    close(fd);
    /* The same token opens the native port. */
    char url[128];
    snprintf(url, sizeof(url), "%s?token=s3cret-token", rs.ts.url);
    tide_store *s;
    CHECK_EQ(tide_open(url, &s), 0);
    CHECK_EQ(tide_exists(s, "k", 1), 1);
    tide_close(s);
    CHECK_EQ(server_stop(&rs.ts, SIGTERM), 0);
}

/* HELLO: RESP3 for the connection (redis-py 8 sends HELLO 3 first): nulls become "_",
 * CONFIG GET and HELLO answer maps; HELLO 2 goes back; HELLO authenticates and names. */
TEST_T(resp_hello_resp3, 60) {
    resp_server rs;
    resp_start_with_token(&rs);
    int fd = server_connect(rs.port, 10);
    expect_has(fd, "HELLO 3\r\n", "-NOAUTH HELLO must be called with the client already");
    expect(fd, "HELLO 3 AUTH default wrong\r\n",
           "-WRONGPASS invalid username-password pair or user is disabled.\r\n");
    expect(fd, "HELLO 4\r\n", "-NOPROTO sorry, this protocol version is not supported\r\n");
    expect_has(fd, "HELLO 3 BOGUS\r\n", "-ERR Syntax error in HELLO option 'BOGUS'");
    expect_has(fd, "HELLO 3 AUTH default s3cret-token SETNAME lmc\r\n",
               "%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n");
    expect_has(fd, "HELLO\r\n", "$5\r\nproto\r\n:3\r\n"); /* no version: as it is */
    expect(fd, "CLIENT GETNAME\r\n", "$3\r\nlmc\r\n");
    expect(fd, "SET k v\r\n", "+OK\r\n");
    expect(fd, "GET missing\r\n", "_\r\n");
    expect(fd, "MGET k missing\r\n", "*2\r\n$1\r\nv\r\n_\r\n");
    expect(fd, "SET k other NX\r\n", "_\r\n");
    expect(fd, "SET nokey v XX\r\n", "_\r\n");
    expect(fd, "CONFIG GET appendonly\r\n", "%1\r\n$10\r\nappendonly\r\n$2\r\nno\r\n");
    expect(fd, "COMMAND INFO nosuch\r\n", "*1\r\n_\r\n");
    expect_has(fd, "HELLO 2\r\n", "*14\r\n$6\r\nserver\r\n");
    expect(fd, "GET missing\r\n", "$-1\r\n");
    expect(fd, "CONFIG GET appendonly\r\n", "*2\r\n$10\r\nappendonly\r\n$2\r\nno\r\n");
    close(fd);
    fd = server_connect(rs.port, 10);
    expect(fd, "CLIENT GETNAME\r\n", "-NOAUTH Authentication required.\r\n");
    expect(fd, "AUTH s3cret-token\r\n", "+OK\r\n");
    expect(fd, "CLIENT GETNAME\r\n", "$-1\r\n"); /* a new connection speaks RESP2 */
    expect_has(fd, "HELLO 3 SETNAME bad\x01name\r\n", "-ERR Client names cannot contain");
    close(fd);
    CHECK_EQ(server_stop(&rs.ts, SIGTERM), 0);
}

/* ---- Redis's own tools ----------------------------------------------------------------- */

static int have_tool(const char *name) {
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "command -v %s >/dev/null 2>&1", name);
    return system(cmd) == 0;
}

/* Run a shell command; return its stdout (malloc'd) and exit status. */
static char *run(const char *cmd, int *status) {
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL);
    size_t cap = 1 << 16, have = 0;
    char *out = malloc(cap + 1);
    size_t r;
    while ((r = fread(out + have, 1, cap - have, p)) > 0) {
        have += r;
        if (have == cap) out = realloc(out, (cap *= 2) + 1);
    }
    out[have] = '\0';
    *status = pclose(p);
    return out;
}

TEST_T(resp_redis_cli, 60) {
    CHECK_MSG(have_tool("redis-cli"), "redis-cli is missing: install redis-tools (make deps)");
    resp_server rs;
    resp_start(&rs, NULL);
    const char *dir = test_tmpdir();
    char cmd[1024];
    int st;
    /* A binary value of 300 KiB through -x (stdin) and back with --raw. */
    size_t n = 300 * 1024;
    uint8_t *v = random_value(n, 99);
    char in[300], out[300];
    snprintf(in, sizeof(in), "%s/value.bin", dir);
    snprintf(out, sizeof(out), "%s/got.bin", dir);
    FILE *f = fopen(in, "wb");
    CHECK(fwrite(v, 1, n, f) == n);
    fclose(f);
    snprintf(cmd, sizeof(cmd), "redis-cli -p %d -x SET bin < %s", rs.port, in);
    char *o = run(cmd, &st);
    CHECK_EQ(st, 0);
    CHECK_STR(o, "OK\n");
    free(o);
    /* --raw prints the bytes and a newline. */
    snprintf(cmd, sizeof(cmd), "redis-cli -p %d --raw GET bin > %s", rs.port, out);
    CHECK_EQ(system(cmd), 0);
    size_t glen = 0;
    f = fopen(out, "rb");
    uint8_t *got = malloc(n + 16);
    glen = fread(got, 1, n + 16, f);
    fclose(f);
    CHECK_EQ(glen, n + 1);
    CHECK(memcmp(got, v, n) == 0);
    free(got);
    /* The same bytes read natively. */
    tide_store *s;
    CHECK_EQ(tide_open(rs.ts.url, &s), 0);
    got = malloc(n);
    CHECK_EQ(tide_get(s, "bin", 3, got, n, &glen), 0);
    CHECK(glen == n && memcmp(got, v, n) == 0);
    free(got);
    /* --no-raw quotes a small binary value. */
    CHECK_EQ(tide_put(s, "small", 5, "a\0\r\n\xff", 5), 0);
    snprintf(cmd, sizeof(cmd), "redis-cli -p %d --no-raw GET small", rs.port);
    o = run(cmd, &st);
    CHECK_STR(o, "\"a\\x00\\r\\n\\xff\"\n");
    free(o);
    tide_close(s);
    /* Many keys (output to a pipe is raw: a nil is an empty line). */
    snprintf(cmd, sizeof(cmd),
             "redis-cli -p %d MSET a 1 b 2 c 3 >/dev/null && "
             "redis-cli -p %d EXISTS a b c d bin small && redis-cli -p %d DEL a b d && "
             "redis-cli -p %d MGET a c bin2 && redis-cli -p %d DBSIZE",
             rs.port, rs.port, rs.port, rs.port, rs.port);
    o = run(cmd, &st);
    CHECK_EQ(st, 0);
    CHECK_STR(o, "5\n2\n\n3\n\n3\n");
    free(o);
    snprintf(cmd, sizeof(cmd), "redis-cli -p %d INFO stats", rs.port);
    o = run(cmd, &st);
    CHECK_CONTAINS(o, "keyspace_hits:");
    free(o);
    free(v);
    CHECK_EQ(server_stop(&rs.ts, SIGTERM), 0);
}

TEST_T(resp_redis_benchmark, 180) {
    CHECK_MSG(have_tool("redis-benchmark"),
              "redis-benchmark is missing: install redis-tools (make deps)");
    resp_server rs;
    resp_start(&rs, NULL);
    char cmd[512];
    int st;
    snprintf(cmd, sizeof(cmd),
             "redis-benchmark -p %d -t set,get -d 262144 -n 2000 -q 2>&1 | tr '\\r' '\\n'",
             rs.port);
    char *o = run(cmd, &st);
    CHECK_MSG(st == 0, "redis-benchmark failed:\n%s", o);
    CHECK_CONTAINS(o, "SET: ");
    CHECK_CONTAINS(o, "GET: ");
    CHECK_MSG(!strstr(o, "ERR") && !strstr(o, "rror"), "errors:\n%s", o);
    free(o);
    /* Every GET found the 256 KiB value SET stored. */
    int fd = server_connect(rs.port, 10);
    send_str(fd, "INFO stats\r\n");
    size_t len;
    char *info = read_reply(fd, &len);
    CHECK_CONTAINS(info, "keyspace_misses:0\r\n");
    CHECK_CONTAINS(info, "tide_value_bytes_out:524288000\r\n"); /* 2000 x 256 KiB */
    free(info);
    close(fd);
    CHECK_EQ(server_stop(&rs.ts, SIGTERM), 0);
}
