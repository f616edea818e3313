/*
 * outq.c — a connection's queued output: owned bytes and pinned pool ranges, sent with
 * writev (see outq.h). The segment array is reused: a push that finds it full first moves
 * the unsent segments to the front, and grows it only when that frees nothing; a queue
 * sent to the end restarts at slot 0. A checked segment is copied out of the pool and
 * checked only once it is at the head, so at most one such copy exists per queue.
 */
#include "server/outq.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "common/checksum.h"
#include "common/log.h"
#include "common/util.h"
#include "tide.h"

#define OUTQ_IOV_BATCH 64

void outq_init(outq *q, store *st, metrics *m, size_t chunk) {
    *q = (outq){.st = st, .m = m, .chunk = chunk, .chain = STORE_CHAIN_INIT};
}

void outq_free(outq *q) {
    for (size_t i = q->head; i < q->n; i++) {
        if (q->seg[i].pin_id) store_unpin(q->st, q->seg[i].pin_id);
        free(q->seg[i].owned);
    }
    free(q->seg);
    free(q->spare);
    q->seg = NULL;
    q->spare = NULL;
    q->n = q->head = q->cap = 0;
    q->pending = 0;
}

static int outq_add(outq *q, outq_seg s) {
    if (q->n == q->cap) {
        if (q->head > 0) { /* reuse the space of segments already sent */
            memmove(q->seg, q->seg + q->head, (q->n - q->head) * sizeof(outq_seg));
            q->n -= q->head;
            q->head = 0;
        }
        if (q->n == q->cap) {
            size_t cap = q->cap ? q->cap * 2 : 16;
            outq_seg *grown = realloc(q->seg, cap * sizeof(outq_seg));
            if (!grown) return -ENOMEM;
            q->seg = grown;
            q->cap = cap;
        }
    }
    q->seg[q->n++] = s;
    q->pending += s.len;
    return 0;
}

int outq_push(outq *q, const uint8_t *p, size_t len, uint8_t *owned, uint64_t pin_id) {
    return outq_add(q, (outq_seg){.p = p, .len = len, .owned = owned, .pin_id = pin_id});
}

int outq_push_checked(outq *q, const uint8_t *p, size_t len, uint64_t pin_id, uint64_t sum,
                      const outq_frame *fr) {
    return outq_add(q, (outq_seg){.p = p,
                                  .len = fr->npre + len + fr->npost,
                                  .pin_id = pin_id,
                                  .sum = sum,
                                  .check = 1,
                                  .fr = *fr});
}

/* The checked segment at the head is about to be sent: copy it out of the pool with its
 * framing, check the copy, and make the segment that owned copy — or the fail bytes when
 * the check fails. Its pin is released either way: the bytes are ours now. */
static int outq_take_checked(outq *q, outq_seg *s) {
    const outq_frame *fr = &s->fr;
    size_t vlen = s->len - fr->npre - fr->npost;
    uint8_t *b = malloc(s->len);
    if (!b) return -ENOMEM;
    memcpy(b, fr->pre, fr->npre);
    if (copy_out_hashed(b + fr->npre, s->p, vlen) == s->sum) {
        memcpy(b + fr->npre + vlen, fr->post, fr->npost);
    } else {
        LOG_WARN("a value of %zu bytes failed its checksum as it was about to be sent; "
                 "removed, answered as a miss",
                 vlen);
        store_verify_failed(q->st, s->pin_id);
        memcpy(b, fr->fail, fr->nfail);
        q->pending -= s->len - fr->nfail;
        s->len = fr->nfail;
    }
    store_unpin(q->st, s->pin_id);
    s->pin_id = 0;
    s->p = s->owned = b;
    s->check = 0;
    return 0;
}

int outq_owned(outq *q, uint8_t *buf, size_t len) {
    int rc = outq_push(q, buf, len, buf, 0);
    if (rc) free(buf);
    return rc;
}

uint8_t *outq_room(outq *q, size_t n) {
    if (q->n > q->head) {
        outq_seg *t = &q->seg[q->n - 1];
        if (t->owned && t->cap - t->len >= n) return t->owned + t->len;
    }
    size_t cap = n > q->chunk ? n : q->chunk;
    uint8_t *b;
    if (cap == q->chunk && q->spare) {
        b = q->spare;
        q->spare = NULL;
    } else if (!(b = malloc(cap))) {
        return NULL;
    }
    if (outq_add(q, (outq_seg){.p = b, .cap = cap, .owned = b}) != 0) {
        free(b);
        return NULL;
    }
    return b;
}

void outq_wrote(outq *q, size_t n) {
    q->seg[q->n - 1].len += n;
    q->pending += n;
}

/* A segment has left: release its pin, and free its buffer or keep it as the spare chunk. */
static void outq_done(outq *q, outq_seg *s) {
    if (s->pin_id)
        store_unpin_chain(q->st, s->pin_id, &q->chain);
    else
        q->chain = STORE_CHAIN_INIT;
    if (s->owned && q->chunk && s->cap == q->chunk && !q->spare)
        q->spare = s->owned;
    else
        free(s->owned);
}

/* writev() that also passes `fd` (SCM_RIGHTS) with the first byte sent. */
static ssize_t outq_send_fd(int sock, const struct iovec *iov, int n, int fd) {
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int))];
    } ctl;
    memset(&ctl, 0, sizeof(ctl));
    struct msghdr mh = {.msg_iov = (struct iovec *)iov,
                        .msg_iovlen = (size_t)n,
                        .msg_control = ctl.buf,
                        .msg_controllen = sizeof(ctl.buf)};
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof(int));
    return sendmsg(sock, &mh, MSG_NOSIGNAL);
}

int outq_encoded(outq *q, outq_encode_fn fn, void *arg) {
    size_t len = 0;
    int rc = fn(NULL, 0, &len, arg);
    if (rc != TIDE_EBUFSMALL && rc != 0) return rc;
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf) return -ENOMEM;
    if ((rc = fn(buf, len, &len, arg)) != 0) {
        free(buf);
        return rc;
    }
    return outq_owned(q, buf, len);
}

int outq_flush(outq *q, int fd, int *send_fd, uint64_t *progress_ns) {
    return outq_flush_some(q, fd, send_fd, progress_ns, SIZE_MAX, NULL);
}

int outq_flush_some(outq *q, int fd, int *send_fd, uint64_t *progress_ns, size_t max,
                    size_t *sent) {
    size_t done = 0;
    if (sent) *sent = 0;
    while (q->head < q->n) {
        if (done >= max) return 0; /* the rest goes on the next wake-up (EPOLLOUT) */
        struct iovec iov[OUTQ_IOV_BATCH];
        int n = 0;
        if (q->seg[q->head].check) {
            int rc = outq_take_checked(q, &q->seg[q->head]);
            if (rc) return rc;
        }
        /* A batch stops before a checked segment: it is copied when it is at the head,
         * so that the queue holds at most one such copy at a time. */
        size_t room = max - done; /* a batch never takes more than the bound leaves */
        for (size_t i = q->head; i < q->n && n < OUTQ_IOV_BATCH && !q->seg[i].check && room;
             i++, n++) {
            iov[n].iov_base = (void *)(q->seg[i].p + q->seg[i].off);
            iov[n].iov_len = q->seg[i].len - q->seg[i].off;
            if (iov[n].iov_len > room) iov[n].iov_len = room;
            room -= iov[n].iov_len;
        }
        ssize_t w =
            send_fd && *send_fd >= 0 ? outq_send_fd(fd, iov, n, *send_fd) : writev(fd, iov, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
            return -errno;
        }
        atomic_fetch_add_explicit(&q->m->bytes_out, (uint64_t)w, memory_order_relaxed);
        if (w > 0 && send_fd) *send_fd = -1; /* the fd went with these bytes */
        q->pending -= (uint64_t)w;
        done += (size_t)w;
        if (sent) *sent = done;
        *progress_ns = now_ns();
        /* Complete the segments the bytes covered; zero-length ones (an empty key section)
         * complete without bytes. */
        size_t left = (size_t)w;
        while (q->head < q->n) {
            outq_seg *s = &q->seg[q->head];
            size_t take = s->len - s->off < left ? s->len - s->off : left;
            s->off += take;
            left -= take;
            if (s->off < s->len) break;
            outq_done(q, s);
            q->head++;
        }
    }
    q->head = q->n = 0;
    return 0;
}
