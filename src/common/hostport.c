/*
 * hostport.c — HOST:PORT parsing and formatting for every address tide reads or prints
 * (see hostport.h). Pure text work except hostport_bind_addr, which fills a sockaddr.
 */
#include "common/hostport.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "tide.h"

/* A host name or IPv4 address may hold letters, digits, '-', '.' and '_' (seen in
 * container and service names), nothing else: no '/', '@', ',', ' ' or brackets. */
static int host_char_ok(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '.' || c == '_';
}

/* An IPv6 address, with an optional zone ("fe80::1%eth0"). */
static int ipv6_ok(const char *s, size_t len) {
    char buf[INET6_ADDRSTRLEN + 1];
    const char *pct = memchr(s, '%', len);
    size_t alen = pct ? (size_t)(pct - s) : len;
    if (alen == 0 || alen >= sizeof(buf)) return 0;
    memcpy(buf, s, alen);
    buf[alen] = '\0';
    struct in6_addr a;
    if (inet_pton(AF_INET6, buf, &a) != 1) return 0;
    if (pct) {
        if (pct + 1 == s + len) return 0; /* "%" with no zone */
        for (const char *z = pct + 1; z < s + len; z++)
            if (!host_char_ok(*z)) return 0;
    }
    return 1;
}

/* Text made only of what an IPv6 address (with a port and a zone) can hold. */
static int v6_chars(const char *s, size_t len) {
    for (size_t i = 0; i < len; i++) {
        if (s[i] == '%') return 1; /* the zone: a name */
        if (!strchr("0123456789abcdefABCDEF:.", s[i]) || s[i] == '\0') return 0;
    }
    return 1;
}

static int port_parse(const char *p, size_t len, int *port) {
    if (len == 0 || len > 5) return -1;
    int v = 0;
    for (size_t i = 0; i < len; i++) {
        if (p[i] < '0' || p[i] > '9') return -1;
        v = v * 10 + (p[i] - '0');
    }
    if (v < 1 || v > 65535) return -1;
    *port = v;
    return 0;
}

int hostport_parse(const char *text, size_t len, int default_port, hostport *out, char *err,
                   size_t errlen) {
    memset(out, 0, sizeof(*out));
    const char *host, *end = text + len, *port = NULL; /* port: after its ':' */
    size_t hlen;
    if (len == 0) {
        snprintf(err, errlen, "empty address (expected HOST:PORT)");
        return TIDE_EURL;
    }
    if (text[0] == '[') {
        const char *close = memchr(text, ']', len);
        if (!close) {
            snprintf(err, errlen, "missing ']' after the IPv6 address");
            return TIDE_EURL;
        }
        host = text + 1;
        hlen = (size_t)(close - host);
        if (!ipv6_ok(host, hlen)) {
            snprintf(err, errlen, "'[%.*s]' does not hold an IPv6 address", (int)hlen, host);
            return TIDE_EURL;
        }
        out->ipv6 = 1;
        if (close + 1 < end) {
            if (close[1] != ':') {
                snprintf(err, errlen, "expected ':PORT' after ']', got '%.*s'",
                         (int)(end - close - 1), close + 1);
                return TIDE_EURL;
            }
            port = close + 2;
        }
    } else {
        const char *colon = memchr(text, ':', len);
        if (memchr(text, ']', len)) {
            snprintf(err, errlen, "']' without '[' (an IPv6 address is written [::1])");
            return TIDE_EURL;
        }
        if (colon && memchr(colon + 1, ':', (size_t)(end - colon - 1)) && v6_chars(text, len)) {
            /* Two colons and nothing else but hex digits, dots and a zone: an IPv6 address,
             * perhaps with a port after it. */
            snprintf(err, errlen,
                     "an IPv6 address must be written in brackets, the port after them "
                     "([::1]:7474)");
            return TIDE_EURL;
        }
        host = text;
        hlen = colon ? (size_t)(colon - text) : len;
        if (colon) port = colon + 1;
        if (hlen == 0) {
            snprintf(err, errlen, "empty host before ':'");
            return TIDE_EURL;
        }
        for (size_t i = 0; i < hlen; i++) {
            if (!host_char_ok(host[i])) {
                unsigned char c = (unsigned char)host[i];
                if (c > ' ' && c < 0x7f)
                    snprintf(err, errlen, "'%c' cannot appear in a host name", c);
                else
                    snprintf(err, errlen, "byte 0x%02x cannot appear in a host name", c);
                return TIDE_EURL;
            }
        }
    }
    if (hlen >= sizeof(out->host)) {
        snprintf(err, errlen, "host longer than %zu bytes", sizeof(out->host) - 1);
        return TIDE_EURL;
    }
    memcpy(out->host, host, hlen);
    out->host[hlen] = '\0';
    if (!port) {
        if (default_port < 1 || default_port > 65535) {
            snprintf(err, errlen, "no port (expected HOST:PORT)");
            return TIDE_EURL;
        }
        out->port = default_port;
        return 0;
    }
    if (port_parse(port, (size_t)(end - port), &out->port) != 0) {
        snprintf(err, errlen, "port '%.*s' is not a number in 1..65535", (int)(end - port), port);
        return TIDE_EURL;
    }
    return 0;
}

char *hostport_format(const char *host, int port, char *buf, size_t cap) {
    int bracket = strchr(host, ':') && host[0] != '[';
    snprintf(buf, cap, "%s%s%s:%d", bracket ? "[" : "", host, bracket ? "]" : "", port);
    return buf;
}

int hostport_bind_addr(const char *text, int port, struct sockaddr_storage *sa, socklen_t *salen,
                       char *canon, size_t canon_cap, char *err, size_t errlen) {
    char a[INET6_ADDRSTRLEN + 1];
    size_t len = strlen(text);
    if (len >= 2 && text[0] == '[' && text[len - 1] == ']') {
        text++;
        len -= 2;
    }
    if (len == 0 || len >= sizeof(a)) {
        snprintf(err, errlen, "expected an IPv4 or IPv6 address, got %s",
                 len ? "too long a text" : "nothing");
        return TIDE_EURL;
    }
    memcpy(a, text, len);
    a[len] = '\0';
    memset(sa, 0, sizeof(*sa));
    struct sockaddr_in *v4 = (struct sockaddr_in *)sa;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)sa;
    if (inet_pton(AF_INET, a, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)port);
        *salen = sizeof(*v4);
    } else if (inet_pton(AF_INET6, a, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)port);
        *salen = sizeof(*v6);
    } else {
        snprintf(err, errlen,
                 "'%s' is not an IPv4 or IPv6 address (a numeric one: 127.0.0.1, 0.0.0.0, "
                 "::1, ::)",
                 a);
        return TIDE_EURL;
    }
    if (canon) snprintf(canon, canon_cap, "%s", a);
    return 0;
}
