/*
 * disk_io.c — how the SSD tier's writer issues a batch of record writes: through an
 * io_uring of DISK_IO_DEPTH entries when the kernel allows it, else pwritev one by one.
 *
 * The probe at init creates the ring and asks whether IORING_OP_WRITEV is supported; a
 * kernel built without io_uring, a sysctl that disables it (io_uring_disabled) or a seccomp
 * filter all make io_uring_queue_init fail, and the tier then uses pwritev. Either way a
 * batch returns only when every write has completed, so the caller may index the records.
 * A short write (possible near a file size limit or a full disk) is continued with pwritev
 * until it either completes or fails with the kernel's error.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "store/store_int.h"

int64_t disk_pwritev_all(int fd, struct iovec *iov, int iovcnt, uint64_t off) {
    int64_t done = 0;
    struct iovec local[8];
    if (iovcnt > 8) return -EINVAL;
    memcpy(local, iov, (size_t)iovcnt * sizeof(*iov));
    struct iovec *v = local;
    int cnt = iovcnt;
    while (cnt > 0) {
        ssize_t w = pwritev(fd, v, cnt, (off_t)(off + (uint64_t)done));
        if (w < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        if (w == 0) return -EIO;
        done += w;
        size_t left = (size_t)w;
        while (cnt > 0 && left >= v->iov_len) {
            left -= v->iov_len;
            v++;
            cnt--;
        }
        if (cnt > 0) {
            v->iov_base = (uint8_t *)v->iov_base + left;
            v->iov_len -= left;
        }
    }
    return done;
}

static int64_t iov_bytes(const struct iovec *iov, int cnt) {
    int64_t n = 0;
    for (int i = 0; i < cnt; i++)
        n += (int64_t)iov[i].iov_len;
    return n;
}

int disk_io_init(disk_io *io, int mode, char *err, size_t errlen) {
    memset(io, 0, sizeof(*io));
    if (mode == DISK_IO_PSYNC) return 0;
    int rc = io_uring_queue_init(DISK_IO_DEPTH, &io->ring, 0);
    const char *why = NULL;
    if (rc < 0) {
        why = strerror(-rc);
    } else {
        struct io_uring_probe *p = io_uring_get_probe_ring(&io->ring);
        int ok = p && io_uring_opcode_supported(p, IORING_OP_WRITEV);
        if (p) io_uring_free_probe(p);
        if (ok) {
            io->uring = 1;
            return 0;
        }
        why = "the kernel's io_uring lacks IORING_OP_WRITEV";
        io_uring_queue_exit(&io->ring);
    }
    if (mode == DISK_IO_URING) {
        snprintf(err, errlen, "io_uring was asked for and is not available: %s", why);
        return TIDE_ECONFIG;
    }
    return 0;
}

void disk_io_fini(disk_io *io) {
    if (io->uring) io_uring_queue_exit(&io->ring);
    io->uring = 0;
}

/* Finish op after the ring reported `res` for it: a short write is continued. */
static void finish_op(disk_op *op, int res) {
    int64_t want = iov_bytes(op->iov, op->iovcnt);
    if (res < 0 || res >= want) {
        op->res = res < 0 ? res : want;
        return;
    }
    /* Skip what was written, then continue synchronously (rare: near a size limit). */
    struct iovec rest[8];
    int cnt = 0;
    int64_t skip = res;
    for (int i = 0; i < op->iovcnt && cnt < 8; i++) {
        if (skip >= (int64_t)op->iov[i].iov_len) {
            skip -= (int64_t)op->iov[i].iov_len;
            continue;
        }
        rest[cnt].iov_base = (uint8_t *)op->iov[i].iov_base + skip;
        rest[cnt].iov_len = op->iov[i].iov_len - (size_t)skip;
        skip = 0;
        cnt++;
    }
    int64_t w = disk_pwritev_all(op->fd, rest, cnt, op->off + (uint64_t)res);
    op->res = w < 0 ? w : want;
}

void disk_io_write(disk_io *io, disk_op *ops, size_t n) {
    if (!io->uring) {
        for (size_t i = 0; i < n; i++) {
            int64_t w = disk_pwritev_all(ops[i].fd, ops[i].iov, ops[i].iovcnt, ops[i].off);
            ops[i].res = w;
        }
        return;
    }
    size_t next = 0;
    while (next < n) {
        size_t chunk = n - next < DISK_IO_DEPTH ? n - next : DISK_IO_DEPTH, queued = 0;
        for (; queued < chunk; queued++) {
            struct io_uring_sqe *sqe = io_uring_get_sqe(&io->ring);
            if (!sqe) break;
            disk_op *op = &ops[next + queued];
            io_uring_prep_writev(sqe, op->fd, op->iov, (unsigned)op->iovcnt, op->off);
            io_uring_sqe_set_data(sqe, op);
        }
        int sub = io_uring_submit(&io->ring);
        size_t submitted = sub < 0 ? 0 : (size_t)sub;
        /* Whatever the ring did not take is written directly. */
        for (size_t i = submitted; i < queued; i++) {
            disk_op *op = &ops[next + i];
            op->res = disk_pwritev_all(op->fd, op->iov, op->iovcnt, op->off);
        }
        for (size_t got = 0; got < submitted;) {
            struct io_uring_cqe *cqe;
            int rc = io_uring_wait_cqe(&io->ring, &cqe);
            if (rc == -EINTR) continue;
            if (rc < 0) { /* the ring broke: nothing sane is left but to stop using it */
                for (size_t i = 0; i < submitted; i++)
                    ops[next + i].res = rc;
                io_uring_queue_exit(&io->ring);
                io->uring = 0;
                return;
            }
            disk_op *op = io_uring_cqe_get_data(cqe);
            int res = cqe->res;
            io_uring_cqe_seen(&io->ring, cqe);
            finish_op(op, res);
            got++;
        }
        next += queued ? queued : chunk;
        if (queued == 0) { /* no SQE at all: write the chunk directly */
            for (size_t i = next - chunk; i < next; i++)
                ops[i].res = disk_pwritev_all(ops[i].fd, ops[i].iov, ops[i].iovcnt, ops[i].off);
        }
    }
}
