/*
 * test_hostport.c — the one HOST:PORT parser and formatter (src/common/hostport.c): IPv6 in
 * brackets, IPv4, host names, default ports, every malformed form with its message; the
 * bind-address parser; and each URL form that goes through it (tide://, cluster lists,
 * etcd:// and etcd endpoints) refusing bad addresses with TIDE_EURL before any network.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <unistd.h>

#include "common/etcd.h"
#include "common/hostport.h"
#include "harness.h"
#include "tide.h"

TEST(url_hostport_parse_accepts) {
    static const struct {
        const char *text;
        int def;
        const char *host;
        int port, ipv6;
    } ok[] = {
        {"[::1]:7474", 0, "::1", 7474, 1},
        {"[::1]", 7474, "::1", 7474, 1},
        {"[::]:1", 0, "::", 1, 1},
        {"[fe80::1%lo]:80", 0, "fe80::1%lo", 80, 1},
        {"[2001:db8::42]:65535", 0, "2001:db8::42", 65535, 1},
        {"[::ffff:127.0.0.1]:9", 0, "::ffff:127.0.0.1", 9, 1},
        {"127.0.0.1:7474", 0, "127.0.0.1", 7474, 0},
        {"127.0.0.1", 2379, "127.0.0.1", 2379, 0},
        {"localhost:1", 0, "localhost", 1, 0},
        {"node-1.example_x:007", 0, "node-1.example_x", 7, 0},
        {"h", 5, "h", 5, 0},
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        test_context = ok[i].text;
        hostport hp;
        char err[200] = "";
        int rc = hostport_parse(ok[i].text, strlen(ok[i].text), ok[i].def, &hp, err, sizeof(err));
        CHECK_MSG(rc == 0, "'%s' refused: %s", ok[i].text, err);
        CHECK_STR(hp.host, ok[i].host);
        CHECK_EQ(hp.port, ok[i].port);
        CHECK_EQ(hp.ipv6, ok[i].ipv6);
    }
    /* Only len bytes are read: the text needs no NUL after the address. */
    hostport hp;
    char err[200];
    CHECK_EQ(hostport_parse("[::1]:7474,[::1]:7475", 10, 0, &hp, err, sizeof(err)), 0);
    CHECK_STR(hp.host, "::1");
    CHECK_EQ(hp.port, 7474);
}

TEST(url_hostport_parse_refuses_with_the_reason) {
    static const struct {
        const char *text;
        int def;
        const char *words;
    } bad[] = {
        {"::1", 7474, "brackets"},   /* bare IPv6, even where a port may be left out */
        {"::1:7474", 0, "brackets"}, /* which colon is the port's? */
        {"2001:db8::1", 0, "brackets"},
        {"[::1", 0, "missing ']'"},
        {"[::1:7474", 0, "missing ']'"},
        {"::1]:7474", 0, "']' without '['"},
        {"h]:1", 0, "']' without '['"},
        {"[::1]7474", 0, "expected ':PORT' after ']'"},
        {"[::1]x:1", 0, "expected ':PORT' after ']'"},
        {"[127.0.0.1]:1", 0, "does not hold an IPv6 address"},
        {"[host]:1", 0, "does not hold an IPv6 address"},
        {"[]:1", 0, "does not hold an IPv6 address"},
        {"[fe80::1%]:1", 0, "does not hold an IPv6 address"},
        {"[::1]", 0, "no port"},
        {"127.0.0.1", 0, "no port"},
        {"", 7474, "empty address"},
        {":7474", 0, "empty host"},
        {"h:", 0, "port '' is not a number in 1..65535"},
        {"h:0", 0, "port '0' is not a number in 1..65535"},
        {"h:65536", 0, "port '65536' is not a number in 1..65535"},
        {"h:123456", 0, "is not a number"},
        {"h:-1", 0, "is not a number"},
        {"h:+80", 0, "is not a number"},
        {"h:80x", 0, "is not a number"},
        {"[::1]:", 0, "is not a number"},
        {"[::1]:99999", 0, "is not a number"},
        {"user@h:1", 0, "'@' cannot appear in a host name"},
        {"h/x:1", 0, "'/' cannot appear"},
        {"a b:1", 0, "byte 0x20 cannot appear"},
        {"a\tb:1", 0, "byte 0x09 cannot appear"},
        {"h1:1,h2:2", 0, "port '1,h2:2' is not a number"}, /* not taken for IPv6 */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        test_context = bad[i].text;
        hostport hp;
        char err[200] = "";
        int rc =
            hostport_parse(bad[i].text, strlen(bad[i].text), bad[i].def, &hp, err, sizeof(err));
        CHECK_MSG(rc == TIDE_EURL, "'%s' accepted (rc %d)", bad[i].text, rc);
        CHECK_CONTAINS(err, bad[i].words);
    }
    /* A host longer than the limit. */
    char longhost[400];
    memset(longhost, 'a', 300);
    memcpy(longhost + 300, ":1", 3);
    hostport hp;
    char err[200];
    CHECK_EQ(hostport_parse(longhost, strlen(longhost), 0, &hp, err, sizeof(err)), TIDE_EURL);
    CHECK_CONTAINS(err, "host longer than");
}

TEST(url_hostport_format_brackets_ipv6) {
    char buf[64];
    CHECK_STR(hostport_format("::1", 7474, buf, sizeof(buf)), "[::1]:7474");
    CHECK_STR(hostport_format("::", 1, buf, sizeof(buf)), "[::]:1");
    CHECK_STR(hostport_format("[::1]", 2, buf, sizeof(buf)), "[::1]:2"); /* not twice */
    CHECK_STR(hostport_format("127.0.0.1", 7474, buf, sizeof(buf)), "127.0.0.1:7474");
    CHECK_STR(hostport_format("node-1", 80, buf, sizeof(buf)), "node-1:80");
    CHECK_STR(hostport_format("2001:db8::1", 80, buf, 8), "[2001:d"); /* cut, terminated */
    /* What it prints parses back to the same host and port. */
    hostport hp;
    char err[200];
    hostport_format("2001:db8::42", 65535, buf, sizeof(buf));
    CHECK_EQ(hostport_parse(buf, strlen(buf), 0, &hp, err, sizeof(err)), 0);
    CHECK_STR(hp.host, "2001:db8::42");
    CHECK_EQ(hp.port, 65535);
}

TEST(url_hostport_bind_addr) {
    struct sockaddr_storage sa;
    socklen_t len;
    char canon[64], err[200];
    CHECK_EQ(hostport_bind_addr("::1", 7474, &sa, &len, canon, sizeof(canon), err, sizeof(err)), 0);
    CHECK_EQ(sa.ss_family, AF_INET6);
    CHECK_EQ(len, sizeof(struct sockaddr_in6));
    CHECK_EQ(ntohs(((struct sockaddr_in6 *)&sa)->sin6_port), 7474);
    CHECK(IN6_IS_ADDR_LOOPBACK(&((struct sockaddr_in6 *)&sa)->sin6_addr));
    CHECK_STR(canon, "::1");
    CHECK_EQ(hostport_bind_addr("[::1]", 1, &sa, &len, canon, sizeof(canon), err, sizeof(err)), 0);
    CHECK_STR(canon, "::1"); /* brackets dropped: printed once, by hostport_format */
    CHECK_EQ(hostport_bind_addr("::", 0, &sa, &len, canon, sizeof(canon), err, sizeof(err)), 0);
    CHECK(IN6_IS_ADDR_UNSPECIFIED(&((struct sockaddr_in6 *)&sa)->sin6_addr));
    CHECK_EQ(hostport_bind_addr("127.0.0.1", 9, &sa, &len, NULL, 0, err, sizeof(err)), 0);
    CHECK_EQ(sa.ss_family, AF_INET);
    CHECK_EQ(len, sizeof(struct sockaddr_in));
    CHECK_EQ(ntohs(((struct sockaddr_in *)&sa)->sin_port), 9);
    CHECK_EQ(((struct sockaddr_in *)&sa)->sin_addr.s_addr, htonl(INADDR_LOOPBACK));
    const char *bad[] = {"localhost", "[::1]:80", "127.0.0.1:80", "", "[]", "1.2.3", "[::1", "::g"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        test_context = bad[i];
        CHECK_EQ(hostport_bind_addr(bad[i], 1, &sa, &len, NULL, 0, err, sizeof(err)), TIDE_EURL);
        CHECK_CONTAINS(err, "IPv4 or IPv6 address");
    }
}

/* Every URL form that carries an address refuses a malformed one before the network. */
TEST(url_ipv6_forms_refused_clearly) {
    static const struct {
        const char *url, *words;
    } bad[] = {
        {"tide://::1:7474", "brackets"},
        {"tide://[::1:7474", "missing ']'"},
        {"tide://[::1]", "no port"},
        {"tide://[::1]:0", "port '0'"},
        {"tide://[localhost]:1", "does not hold an IPv6 address"},
        {"tide://[::1]:1,::1:2?replicas=2", "member 2 '::1:2' is not HOST:PORT: an IPv6"},
        {"tide://[::1]:1,[::1]?replicas=2", "member 2 '[::1]' is not HOST:PORT: no port"},
        {"etcd://::1:2379/c1", "brackets"},
        {"etcd://[::1:2379/c1", "missing ']'"},
        {"etcd://[::1]:2379,[x]:1/c1", "'[x]:1'"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        test_context = bad[i].url;
        tide_store *s = NULL;
        CHECK_EQ(tide_open(bad[i].url, &s), TIDE_EURL);
        CHECK(s == NULL);
        CHECK_CONTAINS(tide_errmsg(NULL), bad[i].words);
    }
}

/* etcd endpoints: [::1] with or without a port (then 2379), bare IPv6 refused. The
 * endpoint an answer-less call names shows how it was read. */
TEST(url_etcd_endpoints_take_ipv6) {
    etcd_client *e = NULL;
    char err[512];
    static const struct {
        const char *eps, *words;
    } bad[] = {
        {"::1:2379", "endpoint '::1:2379': an IPv6 address must be written in brackets"},
        {"http://[::1", "endpoint 'http://[::1': missing ']'"},
        {"https://[::1]:2379", "only http://HOST:PORT"},
        {"http://[::1]:2379/v3", "only http://HOST:PORT"},
        {"http://[::1]:0", "port '0'"},
        {"127.0.0.1:1,,[::1]:2", "empty entry"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        test_context = bad[i].eps;
        CHECK_EQ(etcd_open(bad[i].eps, 100, &e, err, sizeof(err)), TIDE_EURL);
        CHECK(e == NULL);
        CHECK_CONTAINS(err, bad[i].words);
    }
    test_context = NULL;
    /* A port that nobody listens on (bound, not listening), in both forms. */
    int fd = socket(AF_INET6, SOCK_STREAM, 0);
    struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_addr = in6addr_loopback};
    socklen_t alen = sizeof(a);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &alen) != 0) {
        int bind_errno = errno;
        if (fd >= 0) close(fd);
        TEST_SKIP("no IPv6 on loopback (cannot bind [::1]): %s", strerror(bind_errno));
    }
    char eps[64], want[64];
    snprintf(eps, sizeof(eps), "127.0.0.1:1,http://[::1]:%d/", ntohs(a.sin6_port));
    snprintf(want, sizeof(want), "etcd http://[::1]:%d: POST", ntohs(a.sin6_port));
    CHECK_MSG(etcd_open(eps, 500, &e, err, sizeof(err)) == 0, "%s", err);
    int64_t id;
    CHECK(etcd_lease_grant(e, 5, &id, err, sizeof(err)) < 0);
    CHECK_CONTAINS(err, want); /* the last endpoint tried is named */
    etcd_close(e);
    close(fd);
    /* Without a port: etcd's 2379. */
    CHECK_EQ(etcd_open("[::1]", 500, &e, err, sizeof(err)), 0);
    if (etcd_lease_grant(e, 5, &id, err, sizeof(err)) < 0)
        CHECK_CONTAINS(err, "etcd http://[::1]:2379: POST");
    else
        etcd_lease_revoke(e, id, err, sizeof(err)); /* an etcd runs on [::1]:2379 here */
    etcd_close(e);
}
