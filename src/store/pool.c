/*
 * pool.c — the store's memory: one memfd mapped MAP_SHARED, so that tided can hand the
 * fd to same-host clients (SCM_RIGHTS) and both sides see the same bytes.
 *
 * Invariants: while open, fd is the memfd, base maps map_size bytes of it (size rounded
 * up to the page size in use) and nothing else in the process maps it. The pool holds no
 * metadata: every byte of it may be written by clients.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "store/store_int.h"

#ifndef MFD_HUGETLB
#define MFD_HUGETLB 0x0004U
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define HUGE_PAGE (2ull << 20)

static uint64_t round_up(uint64_t v, uint64_t to) {
    return (v + to - 1) / to * to;
}

/* One attempt with the given memfd flags; -errno with err filled on failure. */
static int try_map(pool *p, uint64_t size, unsigned flags, uint64_t page, char *err,
                   size_t errlen) {
    int fd = memfd_create("tide-pool", MFD_CLOEXEC | flags);
    if (fd < 0) {
        int e = errno;
        snprintf(err, errlen, "memfd_create(%s): %s", (flags & MFD_HUGETLB) ? "MFD_HUGETLB" : "",
                 strerror(e));
        return -e;
    }
    uint64_t map_size = round_up(size, page);
    if (ftruncate(fd, (off_t)map_size) < 0) {
        int e = errno;
        snprintf(err, errlen, "ftruncate(memfd, %llu): %s", (unsigned long long)map_size,
                 strerror(e));
        close(fd);
        return -e;
    }
    void *base = mmap(NULL, map_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        int e = errno;
        snprintf(err, errlen, "mmap(%llu bytes, MAP_SHARED%s): %s", (unsigned long long)map_size,
                 (flags & MFD_HUGETLB) ? ", hugetlb" : "", strerror(e));
        close(fd);
        return -e;
    }
    p->base = base;
    p->size = size;
    p->map_size = map_size;
    p->fd = fd;
    p->huge = (flags & MFD_HUGETLB) != 0;
    return 0;
}

/* Touch every page so first use does not pay for page faults. MADV_POPULATE_WRITE does it
 * in the kernel in one call (Linux 5.14+); otherwise write one byte per page. */
static int prefault(pool *p, char *err, size_t errlen) {
    if (madvise(p->base, p->map_size, MADV_POPULATE_WRITE) == 0) return 0;
    int e = errno;
    if (e != EINVAL && e != ENOSYS) {
        snprintf(err, errlen, "madvise(MADV_POPULATE_WRITE, %llu bytes): %s",
                 (unsigned long long)p->map_size, strerror(e));
        return -e;
    }
    long pg = sysconf(_SC_PAGESIZE);
    uint64_t step = p->huge ? HUGE_PAGE : (uint64_t)(pg > 0 ? pg : 4096);
    for (uint64_t off = 0; off < p->map_size; off += step) ((volatile uint8_t *)p->base)[off] = 0;
    return 0;
}

int pool_open(pool *p, uint64_t size, int hugepages, int prefault_pages, char *err,
              size_t errlen) {
    memset(p, 0, sizeof(*p));
    p->fd = -1;
    if (size == 0) {
        snprintf(err, errlen, "pool size is 0");
        return -EINVAL;
    }
    int rc = -EINVAL;
    if (hugepages) rc = try_map(p, size, MFD_HUGETLB, HUGE_PAGE, err, errlen);
    if (rc < 0) {
        long pg = sysconf(_SC_PAGESIZE);
        rc = try_map(p, size, 0, (uint64_t)(pg > 0 ? pg : 4096), err, errlen);
        if (rc < 0) return rc;
    }
    if (prefault_pages) {
        rc = prefault(p, err, errlen);
        if (rc < 0) {
            pool_close(p);
            return rc;
        }
    }
    return 0;
}

void pool_close(pool *p) {
    if (p->base) munmap(p->base, p->map_size);
    if (p->fd >= 0) close(p->fd);
    p->base = NULL;
    p->fd = -1;
}
