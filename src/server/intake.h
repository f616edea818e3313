/*
 * intake.h — the PUT / SET intake that both of tided's protocols use: value bytes go from
 * the socket straight into the store's reservations (readv into pool memory, no staging
 * copy), each piece hashed as soon as it has landed, while it is still in cache. Values
 * that will not be stored (a duplicate key, no space) are read into a scratch buffer and
 * dropped. When the pool is shared with other processes (a Unix socket), `staged` intake
 * reads a reserved value through the scratch buffer instead and hashes the copy on its way
 * into the pool, so that the checksum is of the client's bytes, whatever another process
 * writes into the reservation meanwhile.
 *
 * The caller (conn.c for a native PUT, resp_conn.c for a RESP SET) decodes the request,
 * reserves, lists the values (intake_start), hands over the value bytes it has buffered
 * already (intake_feed), then calls intake_read on each wake-up until it answers 1; it
 * then compares each value's hash with what the client announced, commits or aborts, and
 * answers. A protocol may ask for a few bytes that must follow the values (RESP's "\r\n"):
 * they are taken into `trail` for the caller to check.
 *
 * Reads: a read that took less than it asked marks the socket drained (connio.h); intake
 * then sets SO_RCVLOWAT to what is still to come (at most 4 MiB), so that epoll wakes the
 * connection once when it is in, not at each arrival. intake_tick counts bytes queued
 * meanwhile as progress. Each read counts against the connection's budget (connio.h), and
 * intake_read returns 0 when it is spent.
 *
 * Ownership and threads: an intake belongs to one connection, so to one worker thread; the
 * value list is the caller's; nothing here takes a lock except the store's.
 */
#ifndef TIDE_SERVER_INTAKE_H
#define TIDE_SERVER_INTAKE_H

#include <stddef.h>
#include <stdint.h>

#include "common/checksum.h"
#include "server/connio.h"
#include "store/store.h"

/* One value being received. */
typedef struct intake_val {
    uint64_t res_id; /* the store's reservation; 0: the bytes are read and dropped */
    uint64_t offset; /* pool offset of the reservation */
    uint64_t vlen;   /* >= 1 */
    uint64_t got;    /* checksum of the bytes received, once all of them are in */
} intake_val;

typedef struct intake {
    store *st;
    intake_val *vals; /* the caller's */
    uint32_t n, cur;  /* the values; the one being filled */
    uint64_t cur_off; /* bytes of vals[cur] received */
    uint64_t left;    /* value bytes not yet received */
    int staged;       /* read reserved values through scratch (see above) */
    uint8_t trail[2]; /* the bytes that follow the values */
    unsigned ntrail, trail_got;
    int lowat;          /* SO_RCVLOWAT set above 1 (intake_read) */
    int lowat_queued;   /* bytes queued in the socket at the last tick, while lowat */
    checksum_state *cs; /* hash of vals[cur]'s bytes so far */
    uint8_t *scratch;
    size_t scratch_cap;
} intake;

/* Begin receiving n values (vals, the caller's, with res_id, offset and vlen set), then
 * ntrail (0..2) trailing bytes. The buffers are kept from an earlier intake on the same
 * struct (zero it before the first). 0 or -ENOMEM. */
int intake_start(intake *in, store *st, intake_val *vals, uint32_t n, unsigned ntrail, int staged);
/* Take the bytes at p (n of them, already read from the socket) as the next value and
 * trailing bytes. Returns how many were taken (less than n when the rest follows them). */
size_t intake_feed(intake *in, const uint8_t *p, size_t n);
/* 1 when every value byte and trailing byte is in. */
static inline int intake_done(const intake *in) {
    return in->cur == in->n && in->trail_got == in->ntrail;
}
/* Read value and trailing bytes into place. With the last of them the read also takes up
 * to tail_room bytes of what follows into tail (*tail_got: how many), so that a short read
 * says the socket is empty. 1 when intake_done, 0 when the socket has nothing more now or
 * the budget is spent, negative on error or end of stream. */
int intake_read(intake *in, connio *io, uint8_t *tail, size_t tail_room, size_t *tail_got);
/* Periodic: bytes that arrived while SO_RCVLOWAT hides them count as progress. */
void intake_tick(intake *in, connio *io, uint64_t now);
/* Abort the reservations still held (res_id != 0) and set their res_id to 0. */
void intake_abort(intake *in);
/* Free the buffers. */
void intake_free(intake *in);

#endif
