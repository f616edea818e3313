/*
 * resp_conn.h — tided's RESP port, internal to its two files: resp_conn.c (the connection:
 * reading, parsing, streaming a SET's value, its connio_ops) and resp_cmd.c (the commands
 * and the replies they queue). server_int.h declares resp_conn_new, the one entry the
 * worker's event loop needs. Everything here runs on the connection's worker thread.
 */
#ifndef TIDE_SERVER_RESP_CONN_H
#define TIDE_SERVER_RESP_CONN_H

#include <stdint.h>

#include "proto/resp.h"
#include "server/connio.h"
#include "server/intake.h"
#include "server/server_int.h"

typedef struct resp_conn resp_conn;

/* What a SET answers: when its value was stored (ok) and when it was not (drop). */
enum set_reply { SR_OK, SR_ONE, SR_ZERO, SR_NIL, SR_ERR };

struct resp_conn {
    connio io; /* first: the connection interface (connio.h) */
    server *srv;
    resp_parser parser;
    resp_arg *argv;
    uint32_t argv_cap;
    uint8_t *in;
    size_t in_off, in_len, in_cap; /* unparsed bytes: in[in_off, in_len) */
    size_t want;                   /* parse again once this many bytes are unparsed */
    uint64_t id;
    char name[64];
    int resp3; /* HELLO 3 chose RESP3: nulls are "_", CONFIG GET and HELLO answer maps */

    /* The SET being run: resp_set_plan's reservation (0: the bytes are dropped) and its
     * answers. */
    uint64_t res_id, res_off, vlen;
    int ok_reply, drop_reply;
    char err[160]; /* the error line of SR_ERR */
    /* A SET whose value is streaming in (io.in_body): its value and "\r\n" (intake.c). */
    intake_val val;
    intake body;
    uint64_t body_start_ns;
};

/* resp_cmd.c: run one parsed command (never an empty one). 0, or negative to close. */
int resp_dispatch(resp_conn *c, const resp_cmd *cmd);
/* resp_cmd.c: note when the RESP port began serving (INFO's uptime); the first call wins. */
void resp_cmd_started(void);

/* Replies, appended to the output queue. 0 or -ENOMEM. */
int resp_out_bytes(resp_conn *c, const void *p, size_t n);
#define RESP_OUT_LIT(c, s) resp_out_bytes((c), (s), sizeof(s) - 1)
int resp_out_num(resp_conn *c, char type, int64_t v);
int resp_out_bulk(resp_conn *c, const void *p, size_t n);
int resp_out_bulk_str(resp_conn *c, const char *s);
int resp_out_line(resp_conn *c, char type, const char *s);
/* A null (a missing key, no name): "$-1" in RESP2, "_" in RESP3 (HELLO 3). */
int resp_out_nil(resp_conn *c);
/* The header of a map of n pairs: "*2n" in RESP2, "%n" in RESP3. */
int resp_out_map(resp_conn *c, int64_t n);
__attribute__((format(printf, 2, 3))) int resp_out_err(resp_conn *c, const char *fmt, ...);

/* SET's rules (resp_cmd.c). resp_set_plan decides what a SET of key (vlen bytes) does:
 * reserve room (c->res_id set) or drop the value and answer c->drop_reply; nx: only when
 * absent, xx: only when present, setnx: answer as SETNX. resp_set_reply queues the answer
 * `kind` (enum set_reply); resp_set_commit commits c->res_id with checksum sum and
 * answers. */
void resp_set_plan(resp_conn *c, const resp_arg *key, uint64_t vlen, int nx, int xx, int setnx);
int resp_set_reply(resp_conn *c, int kind);
int resp_set_commit(resp_conn *c, uint64_t sum);

#endif
