/*
 * bench_copy.c — what checking the bytes a reader hands out costs: the copy of a get, out
 * of a pool-sized working set into the caller's memory, done the way it was before issue
 * 17 and the way it is now, against a plain memcpy, in one run.
 *
 *   memcpy        value-by-value memcpy (the baseline)
 *   hash, copy    the get's copy before issue 17: each 64 KiB chunk of the source hashed,
 *                 then streamed to the destination (copy_gather does exactly this; it is
 *                 still the put's copy). Unsafe for a get: a write into the pool between
 *                 the hash and the copy reaches the caller under a matching checksum.
 *   copy, hash    the get's copy now (copy_scatter, used by unix:// and mem://): each
 *                 64-byte block loaded once, streamed to the destination and kept in a
 *                 4 KiB L1 buffer that is hashed, so what is hashed is what landed
 *   reply copy    RESP's copy into its reply buffer with a Unix socket on
 *                 (copy_out_hashed: plain stores, the destination hashed in cache),
 *                 into a buffer reused for every value as a reply buffer is
 *
 * The working set is --total bytes (default 256 MiB, many times the last-level cache) of
 * source and as much destination, both pre-faulted; each measurement moves all of it, one
 * value at a time. The methods run in turn, their order rotated from run to run; each
 * figure is the median of --runs runs (default 7). Every copy's checksum is compared with
 * the value's, outside the timing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "common/checksum.h"
#include "tide.h"
#include "common/prng.h"

#define MAX_RUNS 31
#define NSIZES 4
#define NMETH 4

enum { M_MEMCPY, M_HASH_COPY, M_COPY_HASH, M_REPLY };
static const size_t sizes[NSIZES] = {64u << 10, 256u << 10, 1u << 20, 4u << 20};

static uint64_t bench_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint8_t *bench_map(size_t n) {
    void *p =
        mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static double median(double *v, int n) {
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
            double t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return v[n / 2];
}

/* One pass of method m over the working set with values of vlen bytes; GB/s. Each copy's
 * checksum goes to sums[i] (memcpy: none). */
static double pass(int m, uint8_t *src, uint8_t *dst, uint8_t *reply, size_t total, size_t vlen,
                   uint64_t *sums) {
    size_t nv = total / vlen;
    uint64_t t0 = bench_now();
    for (size_t i = 0; i < nv; i++) {
        uint8_t *s = src + i * vlen, *d = dst + i * vlen;
        tide_iov io = {m == M_HASH_COPY ? (void *)s : (void *)d, vlen};
        switch (m) {
        case M_MEMCPY:
            memcpy(d, s, vlen);
            break;
        case M_HASH_COPY:
            sums[i] = copy_gather(d, &io, 1, 1);
            break;
        case M_COPY_HASH:
            sums[i] = copy_scatter(&io, 1, s, vlen, 1);
            break;
        default:
            sums[i] = copy_out_hashed(reply, s, vlen);
            break;
        }
    }
    return (double)(nv * vlen) / (double)(bench_now() - t0);
}

static int usage(void) {
    fprintf(stderr, "usage: bench_copy [--total SIZE] [--runs N]\n");
    return 2;
}

int main(int argc, char **argv) {
    uint64_t total = 256ull << 20;
    int runs = 7;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--total") && i + 1 < argc) {
            if (tide_size_parse(argv[++i], &total) || total < (16ull << 20)) return usage();
        } else if (!strcmp(argv[i], "--runs") && i + 1 < argc) {
            runs = atoi(argv[++i]);
            if (runs < 1 || runs > MAX_RUNS) return usage();
        } else {
            return usage();
        }
    }
    uint8_t *src = bench_map(total), *dst = bench_map(total), *reply = malloc(sizes[NSIZES - 1]);
    uint64_t *want = malloc(total / sizes[0] * sizeof(*want));
    uint64_t *got = malloc(total / sizes[0] * sizeof(*got));
    if (!src || !dst || !reply || !want || !got) {
        fprintf(stderr, "bench_copy: cannot map 2 x %llu bytes\n", (unsigned long long)total);
        return 1;
    }
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < total; i += 8) {
        uint64_t r = prng_next(&x);
        memcpy(src + i, &r, 8);
    }
    printf("Working set %llu MiB of source and of destination, pre-faulted; one thread; GB/s "
           "(1e9 bytes/s), medians of %d runs.\n\n",
           (unsigned long long)(total >> 20), runs);
    printf("| value | memcpy | hash, copy (before) | copy, hash (now) | now / before | now / "
           "memcpy | reply copy (RESP, shared pool) |\n");
    printf("|---|---|---|---|---|---|---|\n");
    int bad = 0;
    for (int z = 0; z < NSIZES; z++) {
        size_t vlen = sizes[z], nv = (size_t)total / vlen;
        for (size_t i = 0; i < nv; i++)
            want[i] = checksum_buf(src + i * vlen, vlen);
        double r[NMETH][MAX_RUNS];
        for (int k = 0; k < runs; k++)
            for (int j = 0; j < NMETH; j++) {
                int m = (j + k) % NMETH;
                r[m][k] = pass(m, src, dst, reply, (size_t)total, vlen, got);
                if (m != M_MEMCPY)
                    for (size_t i = 0; i < nv; i++)
                        bad += got[i] != want[i];
            }
        double g[NMETH];
        for (int m = 0; m < NMETH; m++)
            g[m] = median(r[m], runs);
        printf("| %zu KiB | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n", vlen >> 10, g[M_MEMCPY],
               g[M_HASH_COPY], g[M_COPY_HASH], g[M_COPY_HASH] / g[M_HASH_COPY],
               g[M_COPY_HASH] / g[M_MEMCPY], g[M_REPLY]);
        fflush(stdout);
    }
    if (bad) {
        fprintf(stderr, "bench_copy: %d copies had the wrong checksum\n", bad);
        return 1;
    }
    printf("\nTarget (issue 17): checking what landed costs <= 10%% of the 1 MiB get's copy "
           "(now / before >= 0.90).\n");
    return 0;
}
