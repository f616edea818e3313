/*
 * resp.h — the RESP2 request codec (Redis serialization protocol, version 2) that tided's
 * optional RESP port speaks, so redis-cli, redis-benchmark and RESP clients work unchanged.
 *
 * The parser is pure: it is given bytes, it never reads a socket, allocates or prints, and
 * every argument it returns points into the caller's buffer. It is stateless between
 * commands (the caller keeps the unparsed bytes and calls again), except for a sticky error.
 *
 * Requests come in two forms:
 *   array   *<n>\r\n then n bulk strings $<len>\r\n<len bytes>\r\n   (what clients send)
 *   inline  a line of arguments split at spaces and tabs, ended by \n or \r\n  (telnet);
 *           no quoting: an argument is the bytes between separators
 *
 * Limits are checked as soon as the bytes that show them are present, before the caller
 * has to wait for (or make room for) what they announce: n against max_args, each len
 * against max_bulk, the bytes of all arguments against max_cmd, an inline line against
 * max_inline, and a number line against 20 digits. *0\r\n is an empty command (skipped);
 * a negative count or length is an error.
 *
 * Streaming. A large last argument (a SET's value) need not pass through the caller's
 * buffer: with `stream` set, when the last bulk of an array is at least stream_min bytes
 * and its bytes are not all present, the parser stops after that bulk's header and says so
 * (cmd->pending); the caller reads the len bytes and the "\r\n" after them itself, e.g.
 * straight into the store's pool.
 *
 * Replies are written with the small encoders at the end.
 */
#ifndef TIDE_RESP_H
#define TIDE_RESP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct resp_limits {
    uint64_t max_bulk;   /* longest bulk string (tided: the store's largest value) */
    uint32_t max_args;   /* arguments in one command */
    uint32_t max_inline; /* longest inline command line, its \n included */
    uint64_t max_cmd;    /* bytes of all buffered arguments of one command (a streamed
                            last argument is not counted: max_bulk bounds it) */
} resp_limits;

#define RESP_DEFAULT_MAX_BULK (512ull << 20)
#define RESP_DEFAULT_MAX_ARGS 16384u
#define RESP_DEFAULT_MAX_INLINE (64u << 10)
#define RESP_DEFAULT_MAX_CMD (1ull << 30)
#define RESP_NUM_DIGITS 20 /* longest number line: '-' and 19 digits */
#define RESP_NUM_MAX 24    /* room for "<type><int64>\r\n" */

void resp_limits_default(resp_limits *lim);

/* One argument: len bytes at p (p is NULL for a pending streamed argument). */
typedef struct resp_arg {
    const uint8_t *p;
    size_t len;
} resp_arg;

/* A parsed command: argv[0..argc) in the caller's array of cap entries. */
typedef struct resp_cmd {
    resp_arg *argv;
    uint32_t cap;
    uint32_t argc;
    int pending; /* 1: argv[argc-1] is streamed; its bytes and "\r\n" follow the consumed
                    bytes and are the caller's to read */
} resp_cmd;

typedef struct resp_parser {
    resp_limits lim;
    uint64_t stream_min; /* smallest last argument that may be streamed (0 = 1 byte) */
    size_t need;         /* after a return of 0: at least this many more bytes are needed */
    uint32_t need_args;  /* after a return of 0: the command has this many arguments, more
                            than cmd->cap; make room and call again (need is then 0) */
    int err;             /* 0, or the sticky error */
    char errstr[160];    /* the message for err, for people (and for "-ERR Protocol error") */
} resp_parser;

/* Start a parser with lim (NULL = defaults); every limit must be at least 1. Returns 0, or
 * TIDE_ECONFIG with the reason in p->errstr. */
int resp_parser_init(resp_parser *p, const resp_limits *lim, uint64_t stream_min);

/*
 * Parse the command at the start of buf[0..len).
 *   > 0  that many bytes held one command (cmd->argc may be 0 for an empty one); drop them
 *        and call again for the next. With cmd->pending, the streamed argument's bytes
 *        come after them (see above).
 *   0    more is needed: p->need more bytes (at least), or room for p->need_args arguments.
 *   < 0  the bytes break the protocol: TIDE_EPROTO (malformed) or TIDE_ELIMIT (over a
 *        limit), with p->errstr; sticky (every later call returns it).
 * stream: allow a pending last argument (see the top of this file).
 */
ssize_t resp_parse(resp_parser *p, const uint8_t *buf, size_t len, resp_cmd *cmd, int stream);

/* Encoders. Each returns the number of bytes written. */

/* "<type><n>\r\n" for type ':' (integer), '$' (bulk length), '*' (array length); buf holds
 * at least RESP_NUM_MAX bytes. */
size_t resp_enc_num(uint8_t *buf, char type, int64_t n);

/* "<type><s>\r\n" for type '+' (status) or '-' (error), s being n bytes with CR and LF
 * written as spaces so the line cannot end early; buf holds at least n + 3 bytes. */
size_t resp_enc_line(uint8_t *buf, char type, const char *s, size_t n);

/* Case-insensitive comparison of an argument with a NUL-terminated ASCII word. */
int resp_arg_is(const resp_arg *a, const char *word);

/* Parse an argument as a decimal int64 (optional '-', digits only). 0, or TIDE_EPROTO. */
int resp_arg_int(const resp_arg *a, int64_t *out);

#endif
