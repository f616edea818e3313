/*
 * intake.c — the PUT / SET intake of both protocols (intake.h): value bytes from the
 * socket into the store's reservations, hashed piece by piece as they land.
 */
#include "server/intake.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>

#define IOV_BATCH 64 /* iovecs per readv of value bytes */
/* Value bytes taken from the socket per readv: small enough that hashing them right after
 * reads them from L2. */
#define BODY_PIECE (256 * 1024)
#define SCRATCH_SIZE (64 * 1024)  /* where dropped values go */
#define STAGING_SIZE (256 * 1024) /* ... and, staged, the values that are stored */
#define LOWAT_MAX (4 << 20)

int intake_start(intake *in, store *st, intake_val *vals, uint32_t n, unsigned ntrail, int staged) {
    size_t want = staged ? STAGING_SIZE : SCRATCH_SIZE;
    if (!in->cs && !(in->cs = checksum_new())) return -ENOMEM;
    if (in->scratch_cap < want) {
        free(in->scratch);
        in->scratch_cap = 0;
        if (!(in->scratch = malloc(want))) return -ENOMEM;
        in->scratch_cap = want;
    }
    in->st = st;
    in->vals = vals;
    in->n = n;
    in->cur = 0;
    in->cur_off = 0;
    in->left = 0;
    for (uint32_t i = 0; i < n; i++)
        in->left += vals[i].vlen;
    in->staged = staged;
    in->ntrail = ntrail;
    in->trail_got = 0;
    checksum_reset(in->cs);
    return 0;
}

static uint8_t *intake_dst(const intake *in, const intake_val *v, uint64_t off) {
    return store_base(in->st) + v->offset + off;
}

/* n bytes of vals[cur] are complete at its place; when the value is finished keep its
 * hash and move to the next. */
static void intake_step(intake *in, uint64_t n) {
    intake_val *v = &in->vals[in->cur];
    in->cur_off += n;
    in->left -= n;
    if (in->cur_off < v->vlen) return;
    if (v->res_id) v->got = checksum_digest(in->cs);
    checksum_reset(in->cs);
    in->cur++;
    in->cur_off = 0;
}

size_t intake_feed(intake *in, const uint8_t *p, size_t n) {
    size_t used = 0;
    while (used < n && in->cur < in->n) {
        intake_val *v = &in->vals[in->cur];
        uint64_t rest = v->vlen - in->cur_off;
        size_t take = n - used < rest ? n - used : (size_t)rest;
        /* The source is this connection's own buffer: hashing it while copying hashes the
         * client's bytes, staged or not. */
        if (v->res_id) checksum_update_copy(in->cs, intake_dst(in, v, in->cur_off), p + used, take);
        used += take;
        intake_step(in, take);
    }
    while (used < n && in->cur == in->n && in->trail_got < in->ntrail)
        in->trail[in->trail_got++] = p[used++];
    return used;
}

/* Where the next value bytes go: pool memory of a reservation, or scratch. Fills up to
 * IOV_BATCH iovecs covering at most BODY_PIECE bytes; staged, a reserved value's piece
 * goes alone into scratch. Returns the count, and in *cover the bytes they hold. */
static int intake_iov(intake *in, struct iovec *iov, size_t *cover) {
    int n = 0;
    uint64_t off = in->cur_off;
    size_t room = BODY_PIECE;
    *cover = 0;
    for (uint32_t i = in->cur; i < in->n && n < IOV_BATCH && room; i++, off = 0) {
        intake_val *v = &in->vals[i];
        uint64_t rest = v->vlen - off;
        while (rest && n < IOV_BATCH && room) {
            size_t take = rest < room ? (size_t)rest : room;
            if (v->res_id && !in->staged) {
                iov[n].iov_base = intake_dst(in, v, off);
            } else {
                if (take > in->scratch_cap) take = in->scratch_cap;
                iov[n].iov_base = in->scratch;
                if (v->res_id) { /* staged: the piece is copied out of scratch alone */
                    iov[n++].iov_len = take;
                    *cover += take;
                    return n;
                }
            }
            iov[n++].iov_len = take;
            *cover += take;
            rest -= take;
            off += take;
            room -= take;
        }
    }
    return n;
}

/* Account n value bytes read through the iovecs of intake_iov: hash those of a
 * reservation where they landed (staged: copy them from scratch into place, hashing). */
static void intake_advance(intake *in, uint64_t n) {
    while (n && in->cur < in->n) {
        intake_val *v = &in->vals[in->cur];
        uint64_t rest = v->vlen - in->cur_off;
        uint64_t take = n < rest ? n : rest;
        if (v->res_id && in->staged)
            checksum_update_copy(in->cs, intake_dst(in, v, in->cur_off), in->scratch, (size_t)take);
        else if (v->res_id)
            checksum_update(in->cs, intake_dst(in, v, in->cur_off), (size_t)take);
        n -= take;
        intake_step(in, take);
    }
}

/* The values are not all in and the socket is empty: have epoll wake the connection only
 * once the rest (up to LOWAT_MAX) has arrived. Never more than is still to come, so that a
 * peer that sends nothing after it is still woken. */
static void intake_wait(intake *in, connio *io) {
    uint64_t rest = in->left + (in->ntrail - in->trail_got);
    int want = rest > LOWAT_MAX ? LOWAT_MAX : (int)rest;
    if (want > 1 && want != in->lowat &&
        setsockopt(io->fd, SOL_SOCKET, SO_RCVLOWAT, &want, sizeof(want)) == 0) {
        in->lowat = want;
        in->lowat_queued = 0;
    }
}

static void intake_wait_end(intake *in, connio *io) {
    int one = 1;
    if (in->lowat && setsockopt(io->fd, SOL_SOCKET, SO_RCVLOWAT, &one, sizeof(one)) == 0)
        in->lowat = 0;
}

int intake_read(intake *in, connio *io, uint8_t *tail, size_t tail_room, size_t *tail_got) {
    *tail_got = 0;
    while (!intake_done(in)) {
        if (io->drained) { /* epoll says when more has come */
            intake_wait(in, io);
            return 0;
        }
        if (connio_spent(io)) return 0; /* the worker runs it again after the others */
        struct iovec iov[IOV_BATCH + 2];
        size_t cover;
        int n = intake_iov(in, iov, &cover);
        size_t trail_ask = 0;
        if (cover == in->left) { /* the last value bytes: the trailer and the tail follow */
            trail_ask = in->ntrail - in->trail_got;
            if (trail_ask) iov[n++] = (struct iovec){in->trail + in->trail_got, trail_ask};
            if (tail_room) iov[n++] = (struct iovec){tail, tail_room};
        }
        ssize_t r = connio_readv(io, iov, n);
        if (r <= 0) return (int)r;
        size_t got = (size_t)r, body = got < cover ? got : cover;
        intake_advance(in, body);
        got -= body;
        size_t tr = got < trail_ask ? got : trail_ask;
        in->trail_got += (unsigned)tr;
        *tail_got = got - tr;
    }
    intake_wait_end(in, io);
    return 1;
}

void intake_tick(intake *in, connio *io, uint64_t now) {
    int queued;
    if (in->lowat && ioctl(io->fd, FIONREAD, &queued) == 0 && queued != in->lowat_queued) {
        in->lowat_queued = queued;
        io->last_progress_ns = now;
    }
}

void intake_abort(intake *in) {
    for (uint32_t i = 0; i < in->n; i++) {
        if (in->vals && in->vals[i].res_id) store_abort(in->st, in->vals[i].res_id);
        if (in->vals) in->vals[i].res_id = 0;
    }
    in->n = in->cur = 0;
    in->vals = NULL;
}

void intake_free(intake *in) {
    checksum_free(in->cs);
    free(in->scratch);
    in->cs = NULL;
    in->scratch = NULL;
    in->scratch_cap = 0;
}
