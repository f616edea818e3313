/*
 * tide_drive.c — the C side of bench/mooncake.sh: the same calls bench/mooncake_drive.py
 * makes through tide.Store, made through libtide directly, so the two can be compared.
 *
 *   tide_drive --url tide://127.0.0.1:P --op get|put|exists --size BYTES --batch N
 *              --threads T --seconds S --max-calls C --keys K --prefix P [--run R]
 *
 * The store holds K working-set keys "P<i>" (i = 0..K-1, stored beforehand by the Python
 * driver). T threads share one handle; each makes calls until S seconds have passed or it
 * has made C / T calls (both bounds always apply):
 *   --batch 1: tide_get (key i mod K into the thread's buffer) or tide_put (a fresh key
 *              "P<R>.<thread>.<n>", from the thread's buffer); exists: tide_exists;
 *   --batch N: tide_get_many / tide_put_many / tide_exists_many of N keys, consecutive
 *              working-set keys (mod K) or N fresh ones, each key its own SIZE-byte slot of
 *              the thread's buffer.
 * Keys are walked in order from a per-thread starting point, as the Python driver does.
 * Before the clock starts each thread makes one untimed tide_exists (so its connection is
 * open, as the long-lived Python client's are).
 * A get whose result is not SIZE bytes, or a put that fails, counts as an error.
 * Prints one JSON line: {"calls", "keys", "bytes", "seconds", "errors", "thread_calls"};
 * seconds is the wall time from releasing the threads to the end of the last call.
 * Puts leave their keys in the store; the Python driver removes them (untimed).
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tide.h"

#define MAX_THREADS 16
#define MAX_BATCH 1024
#define KEY_CAP 96

typedef struct drive_opts {
    const char *url, *op, *prefix;
    uint64_t size, batch, threads, max_calls, keys, run;
    double seconds;
} drive_opts;

typedef struct worker {
    const drive_opts *o;
    tide_store *s;
    unsigned id;
    pthread_t tid;
    uint8_t *buf;
    char (*text)[KEY_CAP];
    tide_key keys[MAX_BATCH];
    tide_iov iov[MAX_BATCH];
    int results[MAX_BATCH];
    size_t vlens[MAX_BATCH];
    uint8_t present[MAX_BATCH];
    uint64_t calls, nkeys, errors;
} worker;

static uint64_t deadline_ns;
/* warmed: every thread has made one untimed call (its connection is up); go: the clock
 * runs. The main thread sets deadline_ns between the two. */
static pthread_barrier_t warmed, go;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Fill key slots 0..n-1 for the call: working-set keys from *next on, or fresh keys. */
static void name_keys(worker *w, size_t n, uint64_t *next, int fresh) {
    const drive_opts *o = w->o;
    for (size_t i = 0; i < n; i++) {
        int len;
        if (fresh)
            len = snprintf(w->text[i], KEY_CAP, "%s%" PRIu64 ".%u.%" PRIu64, o->prefix, o->run,
                           w->id, (*next)++);
        else
            len = snprintf(w->text[i], KEY_CAP, "%s%" PRIu64, o->prefix, (*next)++ % o->keys);
        w->keys[i].data = w->text[i];
        w->keys[i].len = (size_t)len;
    }
}

static void *run(void *arg) {
    worker *w = arg;
    const drive_opts *o = w->o;
    int is_get = strcmp(o->op, "get") == 0, is_put = strcmp(o->op, "put") == 0;
    size_t n = o->batch;
    uint64_t next = is_put ? 0 : (o->keys * w->id) / o->threads;
    for (size_t i = 0; i < n; i++) {
        w->iov[i].base = w->buf + i * o->size;
        w->iov[i].len = o->size;
    }
    uint64_t budget = o->max_calls / o->threads;
    char k0[KEY_CAP];
    int k0len = snprintf(k0, sizeof k0, "%s0", o->prefix);
    (void)tide_exists(w->s, k0, (size_t)k0len);
    pthread_barrier_wait(&warmed);
    pthread_barrier_wait(&go);
    while (w->calls < budget && now_ns() < deadline_ns) {
        name_keys(w, n, &next, is_put);
        int bad = 0;
        if (n == 1) {
            size_t vlen = 0;
            int rc;
            if (is_get) {
                rc = tide_get(w->s, w->keys[0].data, w->keys[0].len, w->buf, o->size, &vlen);
                bad = rc < 0 || vlen != o->size;
            } else if (is_put) {
                rc = tide_put(w->s, w->keys[0].data, w->keys[0].len, w->buf, o->size);
                bad = rc < 0;
            } else {
                rc = tide_exists(w->s, w->keys[0].data, w->keys[0].len);
                bad = rc != 1;
            }
        } else if (is_get) {
            int rc = tide_get_many(w->s, w->keys, n, w->iov, NULL, w->results, w->vlens);
            bad = rc < 0 ? (int)n : (int)n - rc;
            for (size_t i = 0; rc >= 0 && i < n; i++)
                bad += w->results[i] == 0 && w->vlens[i] != o->size;
        } else if (is_put) {
            int rc = tide_put_many(w->s, w->keys, n, w->iov, NULL, w->results);
            bad = rc < 0 ? (int)n : (int)n - rc;
        } else {
            int rc = tide_exists_many(w->s, w->keys, n, w->present);
            bad = rc < 0 ? (int)n : (int)n - rc;
        }
        w->calls++;
        w->nkeys += n;
        w->errors += (uint64_t)bad;
    }
    return NULL;
}

static int arg_u64(const char *v, uint64_t *out) {
    return tide_size_parse(v, out) == 0 ? 0 : -1;
}

int main(int argc, char **argv) {
    drive_opts o = {.url = NULL,
                    .op = "get",
                    .prefix = "k",
                    .size = 65536,
                    .batch = 1,
                    .threads = 1,
                    .max_calls = 1000000,
                    .keys = 1,
                    .seconds = 1};
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *a = argv[i], *v = argv[i + 1];
        int bad = 0;
        if (!strcmp(a, "--url"))
            o.url = v;
        else if (!strcmp(a, "--op"))
            o.op = v;
        else if (!strcmp(a, "--prefix"))
            o.prefix = v;
        else if (!strcmp(a, "--size"))
            bad = arg_u64(v, &o.size);
        else if (!strcmp(a, "--batch"))
            bad = arg_u64(v, &o.batch);
        else if (!strcmp(a, "--threads"))
            bad = arg_u64(v, &o.threads);
        else if (!strcmp(a, "--max-calls"))
            bad = arg_u64(v, &o.max_calls);
        else if (!strcmp(a, "--keys"))
            bad = arg_u64(v, &o.keys);
        else if (!strcmp(a, "--run"))
            bad = arg_u64(v, &o.run);
        else if (!strcmp(a, "--seconds"))
            o.seconds = atof(v);
        else
            bad = 1;
        if (bad) {
            fprintf(stderr, "tide_drive: bad option %s %s\n", a, v);
            return 2;
        }
    }
    if (!o.url || o.batch < 1 || o.batch > MAX_BATCH || o.threads < 1 || o.threads > MAX_THREADS ||
        o.keys < 1 || o.size < 1 || o.seconds <= 0 || o.seconds > 600 ||
        (strcmp(o.op, "get") && strcmp(o.op, "put") && strcmp(o.op, "exists"))) {
        fprintf(stderr, "usage: tide_drive --url URL --op get|put|exists --size B --batch N "
                        "--threads T --seconds S --max-calls C --keys K --prefix P [--run R]\n");
        return 2;
    }
    tide_store *s = NULL;
    int rc = tide_open(o.url, &s);
    if (rc < 0) {
        char shown[1024]; /* no token printed (tide_redact) */
        tide_redact(o.url, shown, sizeof(shown));
        fprintf(stderr, "tide_drive: %s: %s\n", shown, tide_errmsg(NULL));
        return 1;
    }
    worker *ws = calloc(o.threads, sizeof(*ws));
    int ret = 1;
    if (!ws) goto out;
    for (unsigned t = 0; t < o.threads; t++) {
        ws[t].o = &o;
        ws[t].s = s;
        ws[t].id = t;
        ws[t].buf = malloc(o.batch * o.size);
        ws[t].text = malloc(o.batch * KEY_CAP);
        if (!ws[t].buf || !ws[t].text) goto out;
        memset(ws[t].buf, 0x5a + (int)t, o.batch * o.size);
    }
    pthread_barrier_init(&warmed, NULL, (unsigned)o.threads + 1);
    pthread_barrier_init(&go, NULL, (unsigned)o.threads + 1);
    for (unsigned t = 0; t < o.threads; t++)
        if (pthread_create(&ws[t].tid, NULL, run, &ws[t]) != 0) {
            fprintf(stderr, "tide_drive: pthread_create failed\n");
            exit(1); /* threads already started wait on a barrier that cannot fill */
        }
    pthread_barrier_wait(&warmed);
    uint64_t t0 = now_ns();
    deadline_ns = t0 + (uint64_t)(o.seconds * 1e9);
    pthread_barrier_wait(&go);
    uint64_t calls = 0, keys = 0, errors = 0;
    for (unsigned t = 0; t < o.threads; t++) {
        pthread_join(ws[t].tid, NULL);
        calls += ws[t].calls;
        keys += ws[t].nkeys;
        errors += ws[t].errors;
    }
    double secs = (double)(now_ns() - t0) / 1e9;
    printf("{\"calls\": %" PRIu64 ", \"keys\": %" PRIu64 ", \"bytes\": %" PRIu64
           ", \"seconds\": %.6f, \"errors\": %" PRIu64 ", \"thread_calls\": [",
           calls, keys, strcmp(o.op, "exists") ? keys * o.size : 0, secs, errors);
    for (unsigned t = 0; t < o.threads; t++)
        printf("%s%" PRIu64, t ? ", " : "", ws[t].calls);
    printf("]}\n");
    ret = 0;
out:
    for (unsigned t = 0; ws && t < o.threads; t++) {
        free(ws[t].buf);
        free(ws[t].text);
    }
    free(ws);
    tide_close(s);
    return ret;
}
