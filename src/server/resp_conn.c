/*
 * resp_conn.c — one RESP2 connection of tided: reading, parsing, streaming a SET's value,
 * the connection's place in the event loop (its connio_ops). The commands it runs are
 * resp_cmd.c's. Owned by one worker thread, like conn.c.
 *
 * Receiving. Commands are parsed from `in` (src/proto/resp.h). A SET whose value is large
 * and not yet buffered is streamed by the intake native PUTs use (intake.c): the value
 * bytes are read straight into the store's reservation, hashed piece by piece as they land,
 * and committed when the last byte and the "\r\n" after it are in; with a Unix socket
 * (other processes map the pool) the intake is staged, so that the checksum is of the
 * client's bytes. Smaller values are parsed whole and stored by resp_cmd.c. Before AUTH
 * (a server with a token) a command must fit CONNIO_PREAUTH_IN bytes, a failed AUTH
 * pauses the connection (connio_auth_failed), and the idle timeout applies.
 *
 * Sending is resp_cmd.c's (replies queued as segments, outq.c). As in conn.c, reading
 * stops while CONNIO_OUT_HIGH bytes of reply are queued; the socket side (epoll interest,
 * counted reads, the clocks, drain, teardown) is connio.c's.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "server/resp_conn.h"

#define IN_INITIAL (16 * 1024)
#define IN_KEEP (1u << 20)     /* an idle input buffer larger than this is given back */
#define CHUNK (16 * 1024)      /* owned reply chunks */
#define STREAM_MIN (16 * 1024) /* SET values from this size are read straight into the pool */
#define ARGV_INITIAL 16

static atomic_uint_fast64_t next_client_id = 1;

/* ---- lifecycle ----------------------------------------------------------------------- */

static const connio_ops resp_ops;

connio *resp_conn_new(worker *w, int fd) {
    server *srv = w->srv;
    resp_cmd_started();
    resp_conn *c = calloc(1, sizeof(*c));
    if (!c) return NULL;
    c->srv = srv;
    c->in_cap = IN_INITIAL;
    c->in = malloc(c->in_cap);
    c->argv_cap = ARGV_INITIAL;
    c->argv = malloc(ARGV_INITIAL * sizeof(resp_arg));
    /* Limits: a bulk as large as the largest value, enough arguments for an MSET of
     * max_keys pairs, and a buffered command no larger than a native frame. */
    uint64_t max_value = store_capacity(srv->st);
    if (srv->cfg.max_value && srv->cfg.max_value < max_value) max_value = srv->cfg.max_value;
    resp_limits lim = {max_value, 2 * srv->cfg.max_keys + 1, RESP_DEFAULT_MAX_INLINE,
                       srv->cfg.max_frame ? srv->cfg.max_frame : RESP_DEFAULT_MAX_CMD};
    if (!c->in || !c->argv) goto fail;
    if (resp_parser_init(&c->parser, &lim, STREAM_MIN) != 0) goto fail;
    c->id = atomic_fetch_add(&next_client_id, 1);
    /* Replies go in CHUNK-sized owned chunks; large values go by pin. */
    if (connio_init(&c->io, &resp_ops, srv, w->epfd, fd, CHUNK) != 0) goto fail;
    return &c->io;
fail:
    free(c->in);
    free(c->argv);
    free(c);
    return NULL;
}

/* connio_ops.free: the socket is closed already (connio_close). */
static void resp_free(connio *io) {
    resp_conn *c = (resp_conn *)io;
    if (c->io.in_body) intake_abort(&c->body);
    intake_free(&c->body);
    free(c->in);
    free(c->argv);
    free(c);
}

/* A SET (argv: SET key value) or SETNX whose value is still arriving: reserve, take the
 * bytes already buffered, and read the rest in body_read(). With the pool shared, other
 * processes may write the reservation while the bytes land in it, so the intake is staged
 * (intake.h): the checksum is then of the client's bytes. 0 or -ENOMEM. */
static int body_begin(resp_conn *c, const resp_cmd *cmd) {
    int setnx = resp_arg_is(&cmd->argv[0], "SETNX");
    c->body_start_ns = now_ns();
    c->vlen = cmd->argv[2].len;
    resp_set_plan(c, &cmd->argv[1], c->vlen, setnx, 0, setnx);
    c->val = (intake_val){.res_id = c->res_id, .offset = c->res_off, .vlen = c->vlen};
    int rc = intake_start(&c->body, c->srv->st, &c->val, 1, 2, server_pool_shared(c->srv));
    if (rc) {
        if (c->res_id) store_abort(c->srv->st, c->res_id);
        c->res_id = 0;
        return rc;
    }
    c->io.in_body = 1;
    /* The parser stopped at the value's header: the buffered bytes are the value's, its
     * "\r\n", and maybe commands after them. */
    c->in_off += intake_feed(&c->body, c->in + c->in_off, c->in_len - c->in_off);
    if (c->in_off == c->in_len) c->in_off = c->in_len = 0;
    return 0;
}

/* Read value bytes into place; the bytes after the value's "\r\n" (the next commands)
 * land in `in`. 1 when the value is complete, 0 when the socket has nothing more now or
 * the budget is spent, negative on error or EOF. */
static int body_read(resp_conn *c) {
    if (intake_done(&c->body)) return 1;
    size_t got;
    int rc = intake_read(&c->body, &c->io, c->in + c->in_len, c->in_cap - c->in_len, &got);
    c->in_len += got;
    return rc;
}

static int proto_error(resp_conn *c, const char *msg) {
    atomic_fetch_add(&c->srv->m.proto_errors, 1);
    LOG_DEBUG("RESP: closing a connection after a protocol error: %s", msg);
    c->io.close_after_flush = 1;
    return resp_out_err(c, "ERR Protocol error: %s", msg);
}

static int body_finish(resp_conn *c) {
    c->io.in_body = 0;
    int rc, ok = 0;
    c->res_id = c->val.res_id;
    c->val.res_id = 0;
    if (c->body.trail[0] != '\r' || c->body.trail[1] != '\n') {
        if (c->res_id) store_abort(c->srv->st, c->res_id);
        c->res_id = 0;
        rc = proto_error(c, "a bulk string not followed by \\r\\n");
    } else if (c->res_id) {
        ok = 1;
        rc = resp_set_commit(c, c->val.got);
    } else {
        ok = c->drop_reply != SR_ERR;
        rc = resp_set_reply(c, c->drop_reply);
    }
    metrics_op_done(&c->srv->m, MOP_PUT, ok ? MST_OK : MST_ERROR, 1, now_ns() - c->body_start_ns);
    return rc;
}

/* ---- the request loop ---------------------------------------------------------------- */

/* Parse and run the command at the head of `in`. 1: progress; 0: more bytes are needed
 * (c->want set); negative: close now. */
static int parse_one(resp_conn *c) {
    resp_cmd cmd = {c->argv, c->argv_cap, 0, 0};
    const uint8_t *b = c->in + c->in_off;
    size_t avail = c->in_len - c->in_off;
    ssize_t n = resp_parse(&c->parser, b, avail, &cmd, 1);
    /* Only SET key value and SETNX key value stream their value. */
    if (n > 0 && cmd.pending &&
        !(c->io.authed && cmd.argc == 3 &&
          (resp_arg_is(&cmd.argv[0], "SET") || resp_arg_is(&cmd.argv[0], "SETNX"))))
        n = resp_parse(&c->parser, b, avail, &cmd, 0);
    if (n < 0) {
        int rc = proto_error(c, c->parser.errstr);
        return rc < 0 ? rc : 1;
    }
    if (n == 0) {
        if (c->parser.need_args) { /* at most max_args: the parser checked */
            resp_arg *grown = realloc(c->argv, c->parser.need_args * sizeof(resp_arg));
            if (!grown) return -ENOMEM;
            c->argv = grown;
            c->argv_cap = c->parser.need_args;
            return 1;
        }
        c->want = avail + c->parser.need;
        return 0;
    }
    c->want = 0;
    c->in_off += (size_t)n;
    connio_charge(&c->io);
    if (cmd.pending) return body_begin(c, &cmd) < 0 ? -ENOMEM : 1;
    if (cmd.argc == 0) return 1;
    int rc = resp_dispatch(c, &cmd);
    return rc < 0 ? rc : 1;
}

/* Read more bytes into `in`, making room for c->want unparsed bytes. 1: bytes came; 0:
 * none now; negative: error. EOF closes the connection once the replies are out. */
static int read_more(resp_conn *c) {
    size_t avail = c->in_len - c->in_off;
    if (avail == 0 && c->in_cap > IN_KEEP) { /* give a big buffer back once idle */
        uint8_t *small = malloc(IN_INITIAL);
        if (small) {
            free(c->in);
            c->in = small;
            c->in_cap = IN_INITIAL;
        }
        c->in_off = c->in_len = 0;
    }
    if (c->io.drained) return 0; /* the socket was empty: epoll says when more came */
    size_t room = c->want > avail + 4096 ? c->want : avail + 4096;
    size_t ask = (size_t)-1;
    if (!c->io.authed) {
        /* Before AUTH a command must fit CONNIO_PREAUTH_IN bytes, as a native HELLO must:
         * a peer without the token cannot make tided buffer more than that. */
        if (c->want > CONNIO_PREAUTH_IN || avail >= CONNIO_PREAUTH_IN) {
            int rc = proto_error(c, "a command of more than 512 bytes before AUTH");
            return rc < 0 ? rc : 0;
        }
        ask = CONNIO_PREAUTH_IN - avail;
    }
    if (c->in_off + room > c->in_cap) {
        if (c->in_off) {
            memmove(c->in, c->in + c->in_off, avail);
            c->in_off = 0;
            c->in_len = avail;
        }
        if (connio_grow(&c->in, &c->in_cap, room) != 0) return -ENOMEM;
    }
    if (ask > c->in_cap - c->in_len) ask = c->in_cap - c->in_len;
    ssize_t r = connio_recv(&c->io, c->in + c->in_len, ask);
    if (r < 0) return r == -EAGAIN ? 0 : (int)r;
    if (r == 0) { /* the peer is done sending: answer what it sent, then close */
        c->io.close_after_flush = 1;
        return 0;
    }
    c->in_len += (size_t)r;
    return 1;
}

/* connio_ops.serve: run the commands in `in`, reading more as needed, within the wake-up's
 * budget. 0, or negative to close now. */
static int resp_serve(connio *io) {
    resp_conn *c = (resp_conn *)io;
    while (!connio_held(&c->io) && !connio_spent(&c->io)) {
        int rc;
        if (c->io.in_body) {
            if ((rc = body_read(c)) <= 0) return rc;
            if ((rc = body_finish(c)) != 0) return rc;
            continue;
        }
        if (atomic_load(&c->srv->stopping)) return 0;
        size_t avail = c->in_len - c->in_off;
        if (avail > 0 && avail >= c->want) {
            if ((rc = parse_one(c)) < 0) return rc;
            if (rc > 0) continue;
        }
        if ((rc = read_more(c)) <= 0) return rc;
    }
    return 0;
}

/* connio_ops.buffered: a whole command may be waiting in `in`. */
static int resp_buffered(const connio *io) {
    const resp_conn *c = (const resp_conn *)io;
    size_t avail = c->in_len - c->in_off;
    return avail > 0 && avail >= c->want;
}

/* connio_ops.tick: 1 when a partial command is buffered. */
static int resp_tick(connio *io, uint64_t now) {
    const resp_conn *c = (const resp_conn *)io;
    return c->in_len > c->in_off;
}

static const connio_ops resp_ops = {
    .who = "RESP: ",
    .serve = resp_serve,
    .buffered = resp_buffered,
    .tick = resp_tick,
    .free = resp_free,
    .unfinished = "command not finished",
};
