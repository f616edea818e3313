/*
 * hostport.h — the one parser and formatter of network addresses in tide: HOST:PORT in
 * URLs (tide://, cluster lists, etcd://, etcd endpoints), --advertise, member addresses
 * read from etcd, and the bare address tided binds (--bind).
 *
 * HOST is a host name, an IPv4 address, or an IPv6 address in brackets: "[::1]:7474".
 * A bare IPv6 address with a port is ambiguous (which colon is the port's?) and refused
 * with a message saying to bracket it. Formatting puts the brackets back, so every
 * "host:port" tide prints can be pasted into a URL.
 *
 * Messages in err say what was wrong without repeating the text; the caller names the
 * text and where it came from.
 */
#ifndef TIDE_HOSTPORT_H
#define TIDE_HOSTPORT_H

#include <stddef.h>
#include <sys/socket.h>

/* Host text, brackets removed, with its NUL. */
#define HOSTPORT_HOST_MAX 256

typedef struct hostport {
    char host[HOSTPORT_HOST_MAX]; /* "::1", "127.0.0.1", "node-1.example": no brackets */
    int port;                     /* 1..65535 */
    int ipv6;                     /* the host was a bracketed IPv6 address */
} hostport;

/*
 * Parse HOST[:PORT] from the len bytes at text (no NUL needed). Without a port the result
 * takes default_port when it is 1..65535; with default_port 0 a port is required.
 * Errors: TIDE_EURL with err saying what was wrong: an empty host, a bare IPv6 address, a
 * missing or stray bracket, brackets around something that is not an IPv6 address, a
 * character a host name cannot hold, no port, a port that is not a number in 1..65535.
 */
int hostport_parse(const char *text, size_t len, int default_port, hostport *out, char *err,
                   size_t errlen);

/* "HOST:PORT" into buf, with brackets when host is an IPv6 address (holds ':') and has none
 * yet. Returns buf; the text is cut at cap - 1 bytes. */
char *hostport_format(const char *host, int port, char *buf, size_t cap);

/*
 * The numeric address to listen on, without a port: an IPv4 address ("127.0.0.1",
 * "0.0.0.0") or an IPv6 one, bare or bracketed ("::1", "[::1]", "::"). Fills *sa (and
 * *salen) for that address and port. The socket made from it keeps the system's
 * IPV6_V6ONLY default (net.ipv6.bindv6only; 0 on Debian: "::" takes IPv4 clients too).
 * When canon is not NULL it receives the address without brackets (canon_cap bytes).
 * Errors: TIDE_EURL with err saying what was wrong (a host name, an address that does not
 * parse).
 */
int hostport_bind_addr(const char *text, int port, struct sockaddr_storage *sa, socklen_t *salen,
                       char *canon, size_t canon_cap, char *err, size_t errlen);

#endif
