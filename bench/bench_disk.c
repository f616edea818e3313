/*
 * bench_disk.c — the SSD tier: read-back GB/s against a plain sequential read of the same
 * segment files in the same run, and the hit rate a small memory tier gets with and
 * without the disk behind it.
 *
 * Read-back. A store of --mem bytes (default 64 MiB) with a disk tier takes --total bytes
 * (default 384 MiB) of --value-byte values (default 1 MiB), so all but the last --mem of
 * them spill to segment files; those last ones are removed so that a read-back promotes
 * into a pool that only holds promoted objects (whose eviction writes nothing: their
 * records stay). Then, alternating, medians of --runs runs:
 *
 *   seq read    read() of every segment file front to back in 1 MiB calls: the baseline,
 *               what the files cost to read at all
 *   read-back   tide_get of every spilled key into a mapped buffer: a preadv of the record
 *               into the pool, the record's checksum checked, promotion, the copy out to
 *               the caller (checksummed again: mem:// verifies every get)
 *
 * each once "cold" — after fdatasync and posix_fadvise(DONTNEED) on every segment file, so
 * the bytes come from the device, as far as the kernel honours the advice (the cold
 * seq-read figure shows whether it did) — and once "warm" (the files in the page cache).
 *
 * Hit rate. The same seeded stream of --requests gets over --keys keys of --value-byte
 * values (Zipf-like popularity, s = 0.9, as prefix blocks of popular prompts), each miss
 * followed by a put of the value (a KV cache fills on a miss), through a --small-mem pool
 * alone and then with a disk tier of --disk bytes behind it.
 *
 * The directory (--dir, default a new one under $TMPDIR or /var/tmp) is removed at the end.
 */
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "tide.h"
#include "common/prng.h"

#define MAX_RUNS 9

typedef struct opts {
    uint64_t mem, total, value, small_mem, disk;
    int runs, keys, requests;
    char dir[512];
} opts;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void die(const char *what, int rc) {
    fprintf(stderr, "bench_disk: %s: %s (%s)\n", what, tide_strerror(rc), tide_errmsg(NULL));
    exit(1);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return v[n / 2];
}

static void key_of(char *buf, size_t len, int i) {
    snprintf(buf, len, "bench-disk/%08d", i);
}

static void fill(uint8_t *v, uint64_t n, int i) {
    uint64_t x = (uint64_t)i * 0x9E3779B97F4A7C15ull + 1;
    for (uint64_t j = 0; j + 8 <= n; j += 8) {
        uint64_t r = prng_next(&x);
        memcpy(v + j, &r, 8);
    }
}

/* Every segment file of dir: apply fn to each open fd, return the bytes they hold. */
static uint64_t for_each_segment(const char *dir, void (*fn)(int fd, void *arg), void *arg) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    uint64_t total = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l < 5 || strcmp(de->d_name + l - 4, ".seg") != 0) continue;
        char path[1024];
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        int fd = open(path, O_RDONLY);
        if (fd < 0) continue;
        total += (uint64_t)lseek(fd, 0, SEEK_END);
        lseek(fd, 0, SEEK_SET);
        fn(fd, arg);
        close(fd);
    }
    closedir(d);
    return total;
}

static void drop_cache_fd(int fd, void *arg) {
    (void)arg;
    fdatasync(fd);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
}

static void seq_read_fd(int fd, void *arg) {
    uint8_t *buf = arg;
    while (read(fd, buf, 1 << 20) > 0) {
    }
}

static void wait_writer(tide_store *s) {
    for (int i = 0; i < 60000; i++) { /* up to 60 s */
        tide_stats st;
        tide_stats_get(s, &st, sizeof(st));
        if (st.disk_queued_bytes == 0) return;
        struct timespec d = {0, 1000000};
        nanosleep(&d, NULL);
    }
    fprintf(stderr, "bench_disk: the disk writer did not settle\n");
    exit(1);
}

static void readback(const opts *o) {
    char url[1024];
    snprintf(url, sizeof(url), "mem://?capacity=%llu&disk_dir=%s/rb&disk_capacity=%llu",
             (unsigned long long)o->mem, o->dir, (unsigned long long)(o->total * 2));
    tide_store *s;
    int rc = tide_open(url, &s);
    if (rc) die("tide_open", rc);
    uint8_t *val = malloc(o->value);
    uint8_t *dst = mmap(NULL, o->value, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    uint8_t *buf = malloc(1 << 20);
    if (!val || dst == MAP_FAILED || !buf) die("out of memory", -12);
    memset(dst, 0, o->value);
    int n = (int)(o->total / o->value);
    uint64_t t0 = now_ns();
    for (int i = 0; i < n; i++) {
        char k[64];
        key_of(k, sizeof(k), i);
        fill(val, o->value, i);
        if ((rc = tide_put(s, k, strlen(k), val, o->value))) die("tide_put", rc);
    }
    wait_writer(s);
    double spill_s = (double)(now_ns() - t0) / 1e9;
    tide_stats st;
    tide_stats_get(s, &st, sizeof(st));
    int on_disk = (int)st.disk_objects;
    /* The ones still only in memory go, so read-back promotions evict only promoted ones. */
    for (int i = on_disk; i < n; i++) {
        char k[64];
        key_of(k, sizeof(k), i);
        tide_remove(s, k, strlen(k));
    }
    char dir[600];
    snprintf(dir, sizeof(dir), "%s/rb", o->dir);
    double f[4][MAX_RUNS]; /* seq cold, read-back cold, seq warm, read-back warm */
    uint64_t file_bytes = 0, read_bytes = (uint64_t)on_disk * o->value;
    for (int r = 0; r < o->runs; r++) {
        for (int m = 0; m < 4; m++) {
            int cold = m < 2, seq = m % 2 == 0;
            if (cold) for_each_segment(dir, drop_cache_fd, NULL);
            uint64_t t = now_ns();
            if (seq) {
                file_bytes = for_each_segment(dir, seq_read_fd, buf);
            } else {
                for (int i = 0; i < on_disk; i++) {
                    char k[64];
                    key_of(k, sizeof(k), i);
                    size_t vlen;
                    if ((rc = tide_get(s, k, strlen(k), dst, o->value, &vlen))) die("tide_get", rc);
                }
            }
            double secs = (double)(now_ns() - t) / 1e9;
            f[m][r] = (double)(seq ? file_bytes : read_bytes) / secs / 1e9;
            if (!seq) { /* outside the timing: the last value read is the one put */
                char k[64];
                key_of(k, sizeof(k), on_disk - 1);
                fill(val, o->value, on_disk - 1);
                if (memcmp(val, dst, o->value) != 0) {
                    fprintf(stderr, "bench_disk: read-back returned wrong bytes\n");
                    exit(1);
                }
            }
        }
    }
    tide_stats_get(s, &st, sizeof(st));
    double m[4];
    for (int i = 0; i < 4; i++)
        m[i] = median(f[i], o->runs);
    printf("SSD tier read-back: mem://?capacity=%llu MiB with a disk tier; %d values of %llu "
           "KiB spilled (%.0f MiB of segment files, written in %.2f s including the puts), "
           "medians of %d runs; GB/s = 10^9 bytes/s; cold = after fdatasync + "
           "posix_fadvise(DONTNEED) on each file, warm = page cache\n\n",
           (unsigned long long)(o->mem >> 20), on_disk, (unsigned long long)(o->value >> 10),
           (double)file_bytes / 1048576.0, spill_s, o->runs);
    printf("| | seq read GB/s | read-back GB/s | read-back / seq read |\n|---|---|---|---|\n");
    printf("| cold | %.2f | %.2f | %.2f |\n", m[0], m[1], m[1] / m[0]);
    printf("| warm | %.2f | %.2f | %.2f |\n\n", m[2], m[3], m[3] / m[2]);
    printf("disk reads %llu, promotions %llu, checksum errors %llu, writes %llu\n\n",
           (unsigned long long)st.disk_reads, (unsigned long long)st.disk_promotions,
           (unsigned long long)st.disk_checksum_errors, (unsigned long long)st.disk_writes);
    tide_close(s);
    munmap(dst, o->value);
    free(val);
    free(buf);
}

/* Zipf-like ranks: CDF over keys with weight 1/(rank+1)^0.9. */
static int *request_stream(const opts *o) {
    double *cdf = malloc(sizeof(double) * (size_t)o->keys);
    int *req = malloc(sizeof(int) * (size_t)o->requests);
    double sum = 0;
    for (int i = 0; i < o->keys; i++)
        cdf[i] = (sum += 1.0 / pow(i + 1, 0.9));
    uint64_t x = 88172645463325252ull;
    for (int r = 0; r < o->requests; r++) {
        double u = (double)(prng_next(&x) >> 11) / 9007199254740992.0 * sum;
        int lo = 0, hi = o->keys - 1;
        while (lo < hi) {
            int mid = (lo + hi) / 2;
            if (cdf[mid] < u)
                lo = mid + 1;
            else
                hi = mid;
        }
        /* Scatter ranks over key ids so popularity does not follow put order. */
        req[r] = (int)(((uint64_t)lo * 2654435761u) % (uint64_t)o->keys);
    }
    free(cdf);
    return req;
}

static void hit_rate(const opts *o) {
    int *req = request_stream(o);
    uint8_t *val = malloc(o->value), *dst = malloc(o->value);
    double rate[2], secs[2];
    tide_stats st[2];
    for (int with_disk = 0; with_disk < 2; with_disk++) {
        char url[1024];
        if (with_disk)
            snprintf(url, sizeof(url), "mem://?capacity=%llu&disk_dir=%s/hr&disk_capacity=%llu",
                     (unsigned long long)o->small_mem, o->dir, (unsigned long long)o->disk);
        else
            snprintf(url, sizeof(url), "mem://?capacity=%llu", (unsigned long long)o->small_mem);
        tide_store *s;
        int rc = tide_open(url, &s);
        if (rc) die("tide_open", rc);
        uint64_t hits = 0, t = now_ns();
        for (int r = 0; r < o->requests; r++) {
            char k[64];
            key_of(k, sizeof(k), req[r]);
            size_t vlen;
            rc = tide_get(s, k, strlen(k), dst, o->value, &vlen);
            if (rc == 0) {
                hits++;
                continue;
            }
            if (rc != TIDE_ENOTFOUND) die("tide_get", rc);
            fill(val, o->value, req[r]);
            if ((rc = tide_put(s, k, strlen(k), val, o->value))) die("tide_put", rc);
        }
        secs[with_disk] = (double)(now_ns() - t) / 1e9;
        rate[with_disk] = (double)hits / o->requests;
        tide_stats_get(s, &st[with_disk], sizeof(st[with_disk]));
        tide_close(s);
    }
    printf("Hit rate: %d gets over %d keys of %llu KiB (%.0f MiB in all), Zipf-like s=0.9, a "
           "put after each miss; the same request stream both times\n\n",
           o->requests, o->keys, (unsigned long long)(o->value >> 10),
           (double)o->keys * (double)o->value / 1048576.0);
    printf("| store | hit rate | served from disk | requests/s |\n|---|---|---|---|\n");
    printf("| memory %llu MiB | %.3f | - | %.0f |\n", (unsigned long long)(o->small_mem >> 20),
           rate[0], o->requests / secs[0]);
    printf("| memory %llu MiB + disk %llu MiB | %.3f | %.3f | %.0f |\n\n",
           (unsigned long long)(o->small_mem >> 20), (unsigned long long)(o->disk >> 20), rate[1],
           (double)st[1].disk_promotions / o->requests, o->requests / secs[1]);
    free(req);
    free(val);
    free(dst);
}

int main(int argc, char **argv) {
    opts o = {.mem = 64ull << 20,
              .total = 384ull << 20,
              .value = 1 << 20,
              .small_mem = 32ull << 20,
              .disk = 512ull << 20,
              .runs = 3,
              .keys = 1024,
              .requests = 8000};
    const char *dir = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        uint64_t v = 0;
        if (!strcmp(argv[i], "--dir")) {
            dir = argv[i + 1];
            continue;
        }
        if (tide_size_parse(argv[i + 1], &v) != 0) {
            fprintf(stderr, "bench_disk: %s: not a size or count: %s\n", argv[i], argv[i + 1]);
            return 2;
        }
        if (!strcmp(argv[i], "--mem"))
            o.mem = v;
        else if (!strcmp(argv[i], "--total"))
            o.total = v;
        else if (!strcmp(argv[i], "--value-bytes"))
            o.value = v;
        else if (!strcmp(argv[i], "--small-mem"))
            o.small_mem = v;
        else if (!strcmp(argv[i], "--disk"))
            o.disk = v;
        else if (!strcmp(argv[i], "--runs"))
            o.runs = v < 1 ? 1 : v > MAX_RUNS ? MAX_RUNS : (int)v;
        else if (!strcmp(argv[i], "--keys"))
            o.keys = (int)v;
        else if (!strcmp(argv[i], "--requests"))
            o.requests = (int)v;
        else {
            fprintf(stderr, "bench_disk: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (dir) {
        snprintf(o.dir, sizeof(o.dir), "%s", dir);
    } else {
        const char *t = getenv("TMPDIR");
        snprintf(o.dir, sizeof(o.dir), "%s/tide-bench-disk-XXXXXX", t ? t : "/var/tmp");
        if (!mkdtemp(o.dir)) {
            perror("bench_disk: mkdtemp");
            return 1;
        }
    }
    readback(&o);
    hit_rate(&o);
    char cmd[1100];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s/rb' '%s/hr'", o.dir, o.dir);
    if (system(cmd) != 0) fprintf(stderr, "bench_disk: could not remove %s\n", o.dir);
    if (!dir) rmdir(o.dir);
    return 0;
}
