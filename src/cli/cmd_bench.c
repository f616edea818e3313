/*
 * cmd_bench.c — `tide bench`: load generator and latency meter for any backend URL.
 *
 * Two phases. The fill phase stores a working set of --keys values of --size bytes each
 * (threads split it). The timed phase then runs --threads threads for --seconds, each
 * issuing calls of --batch keys: gets of random working-set keys, puts of fresh keys, or
 * a random half-and-half mix (--no-fill skips the fill when an earlier run stored the same
 * working set, so that only the timed phase loads the store). Every call is timed with
 * CLOCK_MONOTONIC and recorded in a per-thread log-linear histogram (bounded memory, ~3%
 * resolution) that is merged at the end for p50/p99/p999.
 *
 * Value bytes are derived from the key so that reads can be checked: a value is a fixed
 * pseudo-random template of --size bytes with a 16-byte stamp at offset 0 and every 4 KiB
 * after it, the stamp being le64(xxh3-64 of the key) || le64(offset). Stamping a put costs
 * 16 bytes of writes per 4 KiB, so the generator stays out of the measurement. Every get
 * has its length and stamps checked (a value of another key, or from another offset, is
 * caught); every 16th get per thread (every get with --verify-all) is compared byte for
 * byte. Checks run outside the timed call. Any wrong byte makes the command fail.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <xxhash.h>

#include "cli/cli.h"
#include "common/endian.h"
#include "common/histo.h"
#include "common/prng.h"
#include "common/util.h"
#include "tide.h"

#define STAMP_EVERY 4096
#define STAMP_BYTES 16
#define KEY_CAP 80
#define FULL_CHECK_EVERY 16
/* Keys the timed put phase reads back afterwards, per thread. */
#define PUT_READBACK 16
/* A thread's buffers (batch x size) may not exceed this. */
#define THREAD_BUF_MAX (1ull << 30)

enum { OP_GET = 0, OP_PUT = 1, OP_MIXED = 2 };
static const char *const op_names[] = {"get", "put", "mixed", NULL};
/* --batch's message spells the limit out. */
_Static_assert(TIDE_BATCH_MAX == 65536, "update --batch's message");

typedef struct bench_opts {
    const char *url;
    uint64_t size;
    uint64_t threads;
    double seconds;
    uint64_t batch;
    int op;
    uint64_t keys;
    int json;
    int verify_all;
    int quiet;
    int no_fill;
} bench_opts;

typedef struct bench_shared {
    const bench_opts *o;
    tide_store *s;
    uint8_t *tmpl; /* the template every value starts from, o->size bytes */
    uint64_t run_id;
    uint64_t deadline_ns;
    atomic_int stop;
} bench_shared;

typedef struct bench_thread {
    bench_shared *sh;
    unsigned id;
    pthread_t tid;
    uint8_t *putbuf; /* batch slots of size bytes holding template + stamps (fill, puts) */
    uint8_t *getbuf; /* batch slots that gets write into (may alias putbuf, see alloc) */
    int joined;
    char *keytext;
    tide_key *keys;
    tide_iov *iov;
    int *results;
    size_t *vlens;
    uint64_t rng;
    uint64_t fill_lo, fill_hi; /* working-set keys this thread stores in the fill phase */
    uint64_t put_seq;          /* fresh put keys issued so far */
    uint64_t get_calls;
    /* Progress, read by the main thread while the thread runs. */
    atomic_uint_fast64_t live_ops, live_bytes;
    /* Results, read after join. */
    histo hist[2];             /* [0] gets, [1] puts: latency of one call */
    uint64_t ops[2], bytes[2]; /* operations that succeeded (a get: a value read), their bytes */
    uint64_t tried[2];         /* operations attempted: ops plus the misses and failures */
    uint64_t misses, errors, wrong, checked, checked_full;
    char first_error[256];
} bench_thread;

/* Write the key's stamps into a value buffer that already holds the template. */
static void stamp_value(uint8_t *v, size_t size, const void *key, size_t klen) {
    uint64_t kh = XXH3_64bits(key, klen);
    for (size_t off = 0; off < size; off += STAMP_EVERY) {
        uint8_t st[STAMP_BYTES];
        le_wr64(st, kh);
        le_wr64(st + 8, off);
        size_t n = size - off < STAMP_BYTES ? size - off : STAMP_BYTES;
        memcpy(v + off, st, n);
    }
}

/* Check a value read back: its stamps always, every other byte when `full`. Returns the
 * offset of the first wrong byte, or -1 when the value is right. */
static long check_value(const uint8_t *v, const uint8_t *tmpl, size_t size, const void *key,
                        size_t klen, int full) {
    uint64_t kh = XXH3_64bits(key, klen);
    for (size_t off = 0; off < size; off += STAMP_EVERY) {
        uint8_t st[STAMP_BYTES];
        le_wr64(st, kh);
        le_wr64(st + 8, off);
        size_t n = size - off < STAMP_BYTES ? size - off : STAMP_BYTES;
        if (memcmp(v + off, st, n) != 0) return (long)off;
        if (full) {
            size_t end = size - off < STAMP_EVERY ? size : off + STAMP_EVERY;
            if (off + n < end && memcmp(v + off + n, tmpl + off + n, end - off - n) != 0) {
                for (size_t i = off + n; i < end; i++)
                    if (v[i] != tmpl[i]) return (long)i;
            }
        }
    }
    return -1;
}

static void ws_key(const bench_opts *o, uint64_t i, char *out) {
    snprintf(out, KEY_CAP, "bench/%" PRIu64 "/%" PRIu64, o->size, i);
}

static void note_error(bench_thread *w, int rc, const char *what) {
    w->errors++;
    if (!w->first_error[0])
        snprintf(w->first_error, sizeof(w->first_error), "%s: %s (%s)", what, tide_strerror(rc),
                 tide_errmsg(w->sh->s));
}

/* Point slot j's key and iov at its buffers. */
static void slot_bind(bench_thread *w, uint8_t *buf, size_t j, size_t keylen) {
    w->keys[j].data = w->keytext + j * KEY_CAP;
    w->keys[j].len = keylen;
    w->iov[j].base = buf + j * w->sh->o->size;
    w->iov[j].len = w->sh->o->size;
}

static void fill_phase(bench_thread *w) {
    const bench_opts *o = w->sh->o;
    for (uint64_t k = w->fill_lo; k < w->fill_hi; k += o->batch) {
        size_t n = w->fill_hi - k < o->batch ? (size_t)(w->fill_hi - k) : (size_t)o->batch;
        for (size_t j = 0; j < n; j++) {
            char *kt = w->keytext + j * KEY_CAP;
            ws_key(o, k + j, kt);
            slot_bind(w, w->putbuf, j, strlen(kt));
            stamp_value(w->iov[j].base, o->size, kt, w->keys[j].len);
        }
        int rc = tide_put_many(w->sh->s, w->keys, n, w->iov, NULL, w->results);
        if (rc < 0) {
            note_error(w, rc, "fill put");
            return;
        }
        for (size_t j = 0; j < n; j++) {
            if (w->results[j] == 0)
                w->bytes[1] += o->size;
            else
                note_error(w, w->results[j], "fill put");
        }
        atomic_store_explicit(&w->live_ops, k + n - w->fill_lo, memory_order_relaxed);
        if (w->errors) return;
    }
}

static void *fill_main(void *arg) {
    fill_phase(arg);
    return NULL;
}

/* One timed call of batch keys; returns 0, or -1 when the thread should stop. */
static int timed_call(bench_thread *w, int is_put) {
    const bench_opts *o = w->sh->o;
    bench_shared *sh = w->sh;
    size_t n = (size_t)o->batch;
    for (size_t j = 0; j < n; j++) {
        char *kt = w->keytext + j * KEY_CAP;
        if (is_put)
            snprintf(kt, KEY_CAP, "bench/%" PRIu64 "/p%" PRIx64 ".%u.%" PRIu64, o->size, sh->run_id,
                     w->id, w->put_seq++);
        else
            ws_key(o, prng_next(&w->rng) % o->keys, kt);
        slot_bind(w, is_put ? w->putbuf : w->getbuf, j, strlen(kt));
        if (is_put) stamp_value(w->iov[j].base, o->size, kt, w->keys[j].len);
    }
    uint64_t t0 = now_ns();
    int rc = is_put ? tide_put_many(sh->s, w->keys, n, w->iov, NULL, w->results)
                    : tide_get_many(sh->s, w->keys, n, w->iov, NULL, w->results, w->vlens);
    uint64_t t1 = now_ns();
    histo_add(&w->hist[is_put], t1 - t0);
    w->tried[is_put] += n;
    if (rc < 0) {
        note_error(w, rc, is_put ? "put" : "get");
        return -1;
    }
    uint64_t good = 0;
    int full = !is_put && (o->verify_all || w->get_calls++ % FULL_CHECK_EVERY == 0);
    for (size_t j = 0; j < n; j++) {
        int r = w->results[j];
        if (r == TIDE_ENOTFOUND && !is_put) {
            w->misses++;
            continue;
        }
        if (r != 0) {
            note_error(w, r, is_put ? "put" : "get");
            continue;
        }
        good++;
        if (is_put) continue;
        long bad = w->vlens[j] != o->size ? 0
                                          : check_value(w->iov[j].base, sh->tmpl, o->size,
                                                        w->keys[j].data, w->keys[j].len, full);
        w->checked++;
        w->checked_full += full;
        if (bad >= 0) {
            if (!w->wrong)
                snprintf(w->first_error, sizeof(w->first_error),
                         "wrong value for key %.*s: length %zu, first bad byte at %ld",
                         (int)w->keys[j].len, (const char *)w->keys[j].data, w->vlens[j], bad);
            w->wrong++;
        }
    }
    w->ops[is_put] += good; /* misses and failures are not throughput */
    w->bytes[is_put] += good * o->size;
    atomic_store_explicit(&w->live_ops, w->ops[0] + w->ops[1], memory_order_relaxed);
    atomic_store_explicit(&w->live_bytes, w->bytes[0] + w->bytes[1], memory_order_relaxed);
    return t1 >= sh->deadline_ns ? -1 : 0;
}

/* After the timed phase, read back the last puts of a thread (outside any timing). */
static void readback_puts(bench_thread *w) {
    const bench_opts *o = w->sh->o;
    uint64_t from = w->put_seq > PUT_READBACK ? w->put_seq - PUT_READBACK : 0;
    for (uint64_t q = from; q < w->put_seq; q++) {
        char kt[KEY_CAP];
        snprintf(kt, KEY_CAP, "bench/%" PRIu64 "/p%" PRIx64 ".%u.%" PRIu64, o->size, w->sh->run_id,
                 w->id, q);
        size_t vlen = 0;
        int rc = tide_get(w->sh->s, kt, strlen(kt), w->getbuf, o->size, &vlen);
        if (rc == TIDE_ENOTFOUND) continue; /* evicted to make room: not an error */
        if (rc) {
            note_error(w, rc, "read back");
            continue;
        }
        w->checked++;
        w->checked_full++;
        long bad =
            vlen != o->size ? 0 : check_value(w->getbuf, w->sh->tmpl, o->size, kt, strlen(kt), 1);
        if (bad >= 0) {
            if (!w->wrong)
                snprintf(w->first_error, sizeof(w->first_error),
                         "wrong value read back for key %s: first bad byte at %ld", kt, bad);
            w->wrong++;
        }
    }
}

static void *timed_main(void *arg) {
    bench_thread *w = arg;
    const bench_opts *o = w->sh->o;
    /* The loop ends at the deadline (checked after every call) or when the main thread
     * says stop; a call that fails as a whole also ends it. */
    while (!atomic_load_explicit(&w->sh->stop, memory_order_relaxed)) {
        int is_put = o->op == OP_PUT || (o->op == OP_MIXED && (prng_next(&w->rng) >> 11) & 1);
        if (timed_call(w, is_put) < 0) break;
    }
    if (o->op != OP_GET) readback_puts(w);
    return NULL;
}

static void usage(FILE *f) {
    fprintf(f, "usage: tide bench [OPTIONS]\n"
               "\n"
               "Fills a working set of values, then drives the store with gets, puts or both for\n"
               "a fixed time and prints ops/s, GB/s (10^9 bytes) and the latency of one call\n"
               "(p50/p99/p999). Values are derived from their keys and checked when read back.\n"
               "\n"
               "Options:\n"
               "  --url URL        store to measure (default mem://; add ?prefault=1 to measure\n"
               "                   an embedded pool that is already mapped)\n"
               "  --size SIZE      value size, e.g. 64KiB, 1MiB (default 256KiB)\n"
               "  --threads N      worker threads (default 1)\n"
               "  --seconds S      length of the timed phase, decimals allowed (default 5)\n"
               "  --batch K        keys per call (default 1)\n"
               "  --op OP          get, put (fresh keys) or mixed (half each) (default get)\n"
               "  --keys N         working-set keys (default: 256 MiB worth, at most 65536)\n"
               "  --verify-all     compare every value read byte for byte (default: every 16th\n"
               "                   in full, the key stamps of all)\n"
               "  --no-fill        skip the fill phase: the working set is already stored (by\n"
               "                   an earlier run with the same --size and --keys), so only\n"
               "                   the timed phase touches the store (for measuring a server's\n"
               "                   CPU time from outside)\n"
               "  --json           print the results as one JSON object on stdout\n"
               "  --quiet          no progress line\n"
               "\n"
               "Only operations that succeeded count in ops/s and GB/s (a get: a value read);\n"
               "misses and failures are counted apart.\n"
               "\n"
               "Exit status: 0 when no call failed, every value read was right and most\n"
               "operations succeeded (a run that mostly missed measured misses: FAIL), 1 when\n"
               "not, 2 for bad arguments.\n");
}

static int parse_args(int argc, char **argv, bench_opts *o) {
    const char *cmd = "bench";
    int keys_given = 0;
    const cli_flag flags[] = {
        {.name = "--json", .type = CLI_FLAG_SWITCH, .dst = &o->json},
        {.name = "--verify-all", .type = CLI_FLAG_SWITCH, .dst = &o->verify_all},
        {.name = "--quiet", .type = CLI_FLAG_SWITCH, .dst = &o->quiet},
        {.name = "--no-fill", .type = CLI_FLAG_SWITCH, .dst = &o->no_fill},
        {.name = "--url", .type = CLI_FLAG_STRING, .dst = &o->url},
        {.name = "--size",
         .type = CLI_FLAG_SIZE,
         .dst = &o->size,
         .min = 1,
         .max = 1ull << 30,
         .want = "a size from 1 byte to 1GiB, like 256KiB"},
        {.name = "--threads",
         .type = CLI_FLAG_U64,
         .dst = &o->threads,
         .min = 1,
         .max = 256,
         .want = "a number from 1 to 256"},
        {.name = "--seconds",
         .type = CLI_FLAG_SECONDS,
         .dst = &o->seconds,
         .dmin = 0.01,
         .dmax = 86400,
         .want = "a duration from 0.01 to 86400"},
        {.name = "--batch",
         .type = CLI_FLAG_U64,
         .dst = &o->batch,
         .min = 1,
         .max = TIDE_BATCH_MAX,
         .want = "a number from 1 to 65536"},
        {.name = "--keys",
         .type = CLI_FLAG_U64,
         .dst = &o->keys,
         .min = 1,
         .max = 100000000,
         .want = "a number from 1 to 100000000",
         .given = &keys_given},
        {.name = "--op",
         .type = CLI_FLAG_CHOICE,
         .dst = &o->op,
         .choices = op_names,
         .want = "get, put or mixed"},
    };
    const cli_spec spec = {cmd, flags, sizeof(flags) / sizeof(flags[0]), usage, NULL, NULL};
    int rc = cli_flags_parse(&spec, argc, argv);
    if (rc) return rc;
    /* `--url "$URL"` with URL unset would measure mem:// instead of the store meant. */
    if (!o->url[0])
        return cli_usage_error(cmd, "--url is empty (an unset variable?): give the store to "
                                    "measure, or leave --url out for mem://");
    uint64_t per_thread = o->batch * o->size * (o->op == OP_MIXED ? 2 : 1);
    if (per_thread > THREAD_BUF_MAX)
        return cli_usage_error(cmd,
                               "--batch x --size needs %" PRIu64 " bytes of buffers a "
                               "thread; at most 1GiB",
                               per_thread);
    if (!keys_given) {
        uint64_t k = (256ull << 20) / o->size;
        o->keys = k < 1 ? 1 : k > 65536 ? 65536 : k;
    }
    return 0;
}

static void bench_thread_free(bench_thread *w) {
    if (w->getbuf != w->putbuf) free(w->getbuf);
    free(w->putbuf);
    free(w->keytext);
    free(w->keys);
    free(w->iov);
    free(w->results);
    free(w->vlens);
}

static int bench_thread_alloc(bench_thread *w, bench_shared *sh, unsigned id) {
    const bench_opts *o = sh->o;
    memset(w, 0, sizeof(*w));
    w->sh = sh;
    w->id = id;
    w->rng = 0x9E3779B97F4A7C15ull * (id + 1) ^ sh->run_id;
    if (!w->rng) w->rng = 1;
    histo_init(&w->hist[0]);
    histo_init(&w->hist[1]);
    size_t b = (size_t)o->batch;
    /* Put slots hold the template and only their stamps change, so a put never has to
     * regenerate a value. Gets overwrite their slots, so a mixed run gets its own get
     * slots; a pure get run reads into the (then unused) put slots after the fill. */
    w->putbuf = malloc(b * o->size);
    w->getbuf = o->op == OP_MIXED ? malloc(b * o->size) : w->putbuf;
    if (w->putbuf)
        for (size_t j = 0; j < b; j++)
            memcpy(w->putbuf + j * o->size, sh->tmpl, o->size);
    w->keytext = malloc(b * KEY_CAP);
    w->keys = calloc(b, sizeof(*w->keys));
    w->iov = calloc(b, sizeof(*w->iov));
    w->results = calloc(b, sizeof(*w->results));
    w->vlens = calloc(b, sizeof(*w->vlens));
    if (!w->putbuf || !w->getbuf || !w->keytext || !w->keys || !w->iov || !w->results || !w->vlens)
        return -1;
    return 0;
}

/* Run fn on every thread and wait; while they run, draw a progress line every second. */
static int run_threads(bench_thread *ws, size_t n, void *(*fn)(void *), const bench_opts *o,
                       const char *phase, uint64_t total_ops, uint64_t start_ns) {
    size_t started = 0;
    for (; started < n; started++)
        if (pthread_create(&ws[started].tid, NULL, fn, &ws[started]) != 0) break;
    if (started < n) {
        atomic_store(&ws[0].sh->stop, 1);
        for (size_t i = 0; i < started; i++)
            pthread_join(ws[i].tid, NULL);
        return -1;
    }
    int progress = !o->quiet && !o->json && cli_stderr_is_tty();
    uint64_t last = now_ns();
    /* The threads stop on their own (timed phase: at the deadline, fill: when their keys
     * are stored); this loop only watches and ends when all have been joined. */
    for (size_t i = 0; i < n; i++)
        ws[i].joined = 0;
    for (;;) {
        size_t alive = 0;
        for (size_t i = 0; i < n; i++) {
            if (!ws[i].joined && pthread_tryjoin_np(ws[i].tid, NULL) == 0) ws[i].joined = 1;
            alive += !ws[i].joined;
        }
        if (!alive) break;
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
        uint64_t t = now_ns();
        if (!progress || t - last < 1000000000ull) continue;
        last = t;
        uint64_t ops = 0, bytes = 0;
        for (size_t i = 0; i < n; i++) {
            ops += atomic_load_explicit(&ws[i].live_ops, memory_order_relaxed);
            bytes += atomic_load_explicit(&ws[i].live_bytes, memory_order_relaxed);
        }
        double el = (double)(t - start_ns) / 1e9;
        if (total_ops)
            fprintf(stderr, "\r%s: %" PRIu64 "/%" PRIu64 " values, %.1f s   ", phase, ops,
                    total_ops, el);
        else
            fprintf(stderr, "\r%s: %.1f s, %.0f ops/s, %.2f GB/s   ", phase, el, (double)ops / el,
                    (double)bytes / el / 1e9);
    }
    if (progress && (now_ns() - start_ns) >= 1000000000ull) fprintf(stderr, "\r%60s\r", "");
    return 0;
}

/* Print one phase's result line, or add it to the JSON array. */
static void report_op(const bench_opts *o, const char *name, const histo *h, uint64_t ops,
                      uint64_t tried, uint64_t bytes, double secs, cJSON *arr) {
    double p50 = (double)histo_quantile(h, 0.50) / 1e3, p99 = (double)histo_quantile(h, 0.99) / 1e3,
           p999 = (double)histo_quantile(h, 0.999) / 1e3, mx = (double)h->max / 1e3;
    if (h->count == 0) mx = 0;
    if (arr) {
        cJSON *r = cJSON_CreateObject();
        cJSON_AddStringToObject(r, "op", name);
        cJSON_AddNumberToObject(r, "ops", (double)ops);
        cJSON_AddNumberToObject(r, "attempted", (double)tried);
        cJSON_AddNumberToObject(r, "calls", (double)h->count);
        cJSON_AddNumberToObject(r, "bytes", (double)bytes);
        cJSON_AddNumberToObject(r, "ops_per_s", (double)ops / secs);
        cJSON_AddNumberToObject(r, "gb_per_s", (double)bytes / secs / 1e9);
        cJSON_AddNumberToObject(r, "p50_us", p50);
        cJSON_AddNumberToObject(r, "p99_us", p99);
        cJSON_AddNumberToObject(r, "p999_us", p999);
        cJSON_AddNumberToObject(r, "max_us", mx);
        cJSON_AddItemToArray(arr, r);
        return;
    }
    printf("%-5s %10" PRIu64 " ops  %11.0f ops/s  %7.2f GB/s   latency per call of %" PRIu64
           ": p50 %.1f us  p99 %.1f us  p999 %.1f us  max %.1f us\n",
           name, ops, (double)ops / secs, (double)bytes / secs / 1e9, o->batch, p50, p99, p999, mx);
    if (tried != ops)
        printf("      %10" PRIu64 " of %" PRIu64 " attempted did not succeed (misses, errors): "
               "not counted above\n",
               tried - ops, tried);
}

int cmd_bench(int argc, char **argv) {
    bench_opts o = {
        .url = "mem://", .size = 256 * 1024, .threads = 1, .seconds = 5, .batch = 1, .op = OP_GET};
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc == 1 ? 0 : rc;

    int exit_code = 1;
    bench_shared sh = {.o = &o};
    bench_thread *ws = NULL;
    cJSON *doc = NULL;
    sh.run_id = now_ns() ^ ((uint64_t)getpid() << 32);
    atomic_init(&sh.stop, 0);
    char shown[CLI_URL_MAX]; /* the URL as printed and reported: no token */
    cli_redact(o.url, shown, sizeof(shown));
    rc = tide_open(o.url, &sh.s);
    if (rc) {
        fprintf(stderr, "tide bench: cannot open %s: %s\n", shown, tide_errmsg(NULL));
        return 1;
    }
    sh.tmpl = malloc(o.size);
    ws = calloc(o.threads, sizeof(*ws));
    if (!sh.tmpl || !ws) goto oom;
    uint64_t seed = 0x2545F4914F6CDD1Dull;
    for (size_t i = 0; i < o.size; i++)
        sh.tmpl[i] = (uint8_t)(prng_next(&seed) >> 24);
    for (unsigned t = 0; t < o.threads; t++) {
        if (bench_thread_alloc(&ws[t], &sh, t)) goto oom; /* `out` frees every bench_thread */
        ws[t].fill_lo = o.keys * t / o.threads;
        ws[t].fill_hi = o.keys * (t + 1) / o.threads;
    }

    tide_stats st0;
    int have_stats = tide_stats_get(sh.s, &st0, sizeof(st0)) == 0;
    char vsz[32], wsz[32];
    if (!o.json)
        printf("tide bench: %s, %s, %s values, %" PRIu64 " thread%s, batch %" PRIu64 ", %" PRIu64
               " keys (%s), %.2f s\n",
               shown, op_names[o.op], size_format(o.size, vsz, sizeof(vsz)), o.threads,
               o.threads == 1 ? "" : "s", o.batch, o.keys,
               size_format(o.keys * o.size, wsz, sizeof(wsz)), o.seconds);
    if (have_stats && st0.capacity_bytes && o.keys * o.size > st0.capacity_bytes)
        fprintf(stderr,
                "tide bench: warning: the working set (%" PRIu64 " bytes) is larger "
                "than the store (%" PRIu64 " bytes): gets will miss\n",
                o.keys * o.size, st0.capacity_bytes);

    /* Fill (unless told the working set is already there). */
    sh.deadline_ns = UINT64_MAX;
    uint64_t f0 = now_ns();
    if (!o.no_fill && run_threads(ws, o.threads, fill_main, &o, "fill", o.keys, f0))
        goto thread_fail;
    double fill_s = (double)(now_ns() - f0) / 1e9;
    uint64_t fill_bytes = 0, errors = 0;
    for (unsigned t = 0; t < o.threads; t++) {
        fill_bytes += ws[t].bytes[1];
        errors += ws[t].errors;
        ws[t].bytes[1] = 0;
    }
    if (errors) {
        for (unsigned t = 0; t < o.threads; t++)
            if (ws[t].first_error[0]) {
                fprintf(stderr, "tide bench: fill failed: %s\n", ws[t].first_error);
                break;
            }
        goto out;
    }
    if (!o.json && !o.no_fill)
        printf("fill  %10" PRIu64 " puts %6.2f s  %7.2f GB/s   (first use of the store's "
               "memory unless it was prefaulted)\n",
               o.keys, fill_s, (double)fill_bytes / fill_s / 1e9);

    /* Timed phase. */
    uint64_t t0 = now_ns();
    sh.deadline_ns = t0 + (uint64_t)(o.seconds * 1e9);
    if (run_threads(ws, o.threads, timed_main, &o, o.op == OP_PUT ? "put" : op_names[o.op], 0, t0))
        goto thread_fail;
    double secs = (double)(now_ns() - t0) / 1e9;

    histo h[2];
    histo_init(&h[0]);
    histo_init(&h[1]);
    uint64_t ops[2] = {0, 0}, tried[2] = {0, 0}, bytes[2] = {0, 0}, misses = 0, wrong = 0,
             checked = 0, full = 0;
    const char *first_error = NULL;
    for (unsigned t = 0; t < o.threads; t++) {
        bench_thread *w = &ws[t];
        for (int k = 0; k < 2; k++) {
            histo_merge(&h[k], &w->hist[k]);
            ops[k] += w->ops[k];
            tried[k] += w->tried[k];
            bytes[k] += w->bytes[k];
        }
        misses += w->misses;
        wrong += w->wrong;
        errors += w->errors;
        checked += w->checked;
        full += w->checked_full;
        if (!first_error && w->first_error[0]) first_error = w->first_error;
    }
    /* A run whose measured operations mostly did not succeed measured something else (a
     * store too small for the working set answers misses fast): it fails. */
    uint64_t tried_all = tried[0] + tried[1], ops_all = ops[0] + ops[1];
    int mostly_failed = tried_all && 2 * ops_all < tried_all;
    int ok = wrong == 0 && errors == 0 && !mostly_failed;
    cJSON *arr = NULL;
    if (o.json) {
        doc = cJSON_CreateObject();
        cJSON_AddStringToObject(doc, "url", shown);
        cJSON_AddStringToObject(doc, "op", op_names[o.op]);
        cJSON_AddNumberToObject(doc, "size", (double)o.size);
        cJSON_AddNumberToObject(doc, "threads", (double)o.threads);
        cJSON_AddNumberToObject(doc, "batch", (double)o.batch);
        cJSON_AddNumberToObject(doc, "keys", (double)o.keys);
        cJSON_AddNumberToObject(doc, "seconds", secs);
        cJSON *fill = cJSON_AddObjectToObject(doc, "fill");
        cJSON_AddNumberToObject(fill, "bytes", (double)fill_bytes);
        cJSON_AddNumberToObject(fill, "seconds", fill_s);
        cJSON_AddNumberToObject(fill, "gb_per_s",
                                o.no_fill ? 0 : (double)fill_bytes / fill_s / 1e9);
        arr = cJSON_AddArrayToObject(doc, "results");
    }
    if (o.op != OP_PUT) report_op(&o, "get", &h[0], ops[0], tried[0], bytes[0], secs, arr);
    if (o.op != OP_GET) report_op(&o, "put", &h[1], ops[1], tried[1], bytes[1], secs, arr);
    tide_stats st1;
    int have_meta = tide_stats_get(sh.s, &st1, sizeof(st1)) == 0 && st1.objects;
    if (o.json) {
        cJSON_AddNumberToObject(doc, "verified", (double)checked);
        cJSON_AddNumberToObject(doc, "verified_full", (double)full);
        cJSON_AddNumberToObject(doc, "wrong", (double)wrong);
        cJSON_AddNumberToObject(doc, "misses", (double)misses);
        cJSON_AddNumberToObject(doc, "errors", (double)errors);
        if (have_meta) {
            cJSON_AddNumberToObject(doc, "objects", (double)st1.objects);
            cJSON_AddNumberToObject(doc, "meta_bytes_per_object",
                                    (double)st1.meta_bytes / (double)st1.objects);
        }
        if (first_error) cJSON_AddStringToObject(doc, "first_error", first_error);
        cJSON_AddBoolToObject(doc, "ok", ok);
        char *text = cJSON_PrintUnformatted(doc);
        if (!text) goto oom;
        printf("%s\n", text);
        free(text);
    } else {
        printf("check %10" PRIu64 " values read back (%" PRIu64 " byte for byte), %" PRIu64
               " wrong, %" PRIu64 " misses, %" PRIu64 " errors\n",
               checked, full, wrong, misses, errors);
        if (have_meta)
            printf("store %10" PRIu64 " objects, %.1f metadata bytes an object\n", st1.objects,
                   (double)st1.meta_bytes / (double)st1.objects);
    }
    if (first_error) fprintf(stderr, "tide bench: %s\n", first_error);
    if (mostly_failed)
        fprintf(stderr,
                "tide bench: %" PRIu64 " of %" PRIu64 " operations did not succeed (%" PRIu64
                " misses, %" PRIu64 " errors): the figures above measure misses, not the store%s\n",
                tried_all - ops_all, tried_all, misses, errors,
                have_stats && st0.capacity_bytes && o.keys * o.size > st0.capacity_bytes
                    ? "; the working set is larger than the store: use fewer --keys or a "
                      "larger store"
                    : "");
    else if (misses)
        fprintf(stderr, "tide bench: warning: %" PRIu64 " gets missed (evicted or removed)\n",
                misses);
    if (!o.json) printf("%s\n", ok ? "PASS" : "FAIL");
    exit_code = ok ? 0 : 1;
    goto out;

thread_fail:
    fprintf(stderr, "tide bench: cannot start threads: %s\n", strerror(errno));
    goto out;
oom:
    fprintf(stderr, "tide bench: out of memory\n");
out:
    if (ws)
        for (unsigned t = 0; t < o.threads; t++)
            bench_thread_free(&ws[t]);
    free(ws);
    free(sh.tmpl);
    cJSON_Delete(doc);
    tide_close(sh.s);
    return exit_code;
}
