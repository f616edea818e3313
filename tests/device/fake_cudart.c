/*
 * fake_cudart.c — a stand-in CUDA runtime for tests of src/device/device_cuda.c on machines
 * without a GPU. tests/integration/test_device_cuda.c builds it with cc into
 * libcudart.so.<major> (-DFAKE_VERSION=12080 or 13000) and points the CUDA kind at it. It
 * models what the tests need of the real one, on a timeline rather than a GPU:
 *
 * - a thread has no current device until it sets one; a call that needs a context on such
 *   a thread initialises device 0 (as the runtime does), and cudaSetDevice initialises the
 *   device it names (CUDA 12 and later): fake_contexts(d) counts the contexts made;
 *   cuCtxGetCurrent / cuCtxSetCurrent (the driver's) read and set the thread's context;
 * - "device memory" is what fake_alloc returned; cudaPointerGetAttributes writes a whole
 *   88-byte struct (CUDA 13's), as the real one writes its own;
 * - a copy happens at once but its stream stays busy FAKE_CUDART_COPY_US after it; an
 *   event is reached when its stream's earlier work is; cudaEventSynchronize waits for it
 *   asleep when the event was made with cudaEventBlockingSync, else spinning (the real
 *   default), and fake_spin_ns() adds up the time spent spinning;
 * - FAKE_CUDART_DRIVER (a version) below FAKE_VERSION: every call answers
 *   cudaErrorInsufficientDriver; FAKE_CUDART_NO_BATCH=1: cudaMemcpyBatchAsync refuses;
 *   FAKE_CUDART_FLIP=1: a copy out of device memory flips the first byte it writes (a copy
 *   that damages data, for tests that must catch it).
 *
 * scripts/gpu-check.sh's stand-in run (STANDIN=1, for machines without a GPU) uses it too:
 * scripts/gpu_check.py calls fake_declare() on host tensors, which makes them "device
 * memory" as if cudaMalloc had returned them, and drives the real script through it.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef FAKE_VERSION
#define FAKE_VERSION 13000
#endif
#define FAKE_DEVICES 2
#define ATTR_BYTES 88
#define FAKE_ALLOCS 4096

typedef struct fake_stream {
    int device;
    uint64_t busy_until;
} fake_stream;

typedef struct fake_event {
    unsigned flags;
    uint64_t at;
} fake_event;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static __thread int cur = -1; /* the thread's device; -1: none */
static __thread int last_err;
static int contexts[FAKE_DEVICES];
static uint64_t spin_ns;
static fake_stream legacy[FAKE_DEVICES];
static struct {
    uint8_t *p;
    size_t n;
    int device;
} allocs[FAKE_ALLOCS];
static int nallocs;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int too_old(void) {
    const char *d = getenv("FAKE_CUDART_DRIVER");
    return d && atoi(d) < FAKE_VERSION;
}

static int err(int e) {
    last_err = e;
    return e;
}

static void make_context(int d) {
    pthread_mutex_lock(&mu);
    contexts[d]++;
    pthread_mutex_unlock(&mu);
}

/* A call that needs the thread's context: device 0's when it has none. */
static int ensure(void) {
    if (too_old()) return err(35);
    if (cur < 0) {
        cur = 0;
        make_context(0);
    }
    return 0;
}

static uint64_t copy_ns(void) {
    const char *s = getenv("FAKE_CUDART_COPY_US");
    return s ? (uint64_t)atoll(s) * 1000u : 0;
}

/* ---- what the tests read ---------------------------------------------------------------- */

int fake_contexts(int d) {
    pthread_mutex_lock(&mu);
    int n = d >= 0 && d < FAKE_DEVICES ? contexts[d] : -1;
    pthread_mutex_unlock(&mu);
    return n;
}

uint64_t fake_spin_ns(void) {
    pthread_mutex_lock(&mu);
    uint64_t n = spin_ns;
    pthread_mutex_unlock(&mu);
    return n;
}

/* Count [p, p + n) as device memory of `device` from now on; -1 when the table is full. */
int fake_declare(void *p, size_t n, int device) {
    pthread_mutex_lock(&mu);
    int rc = -1;
    if (nallocs < FAKE_ALLOCS) {
        allocs[nallocs].p = p;
        allocs[nallocs].n = n;
        allocs[nallocs++].device = device;
        rc = 0;
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

void *fake_alloc(int device, size_t n) {
    void *p = calloc(1, n);
    if (p && fake_declare(p, n, device) != 0) {
        free(p);
        p = NULL;
    }
    return p;
}

/* ---- the runtime ------------------------------------------------------------------------ */

int cudaGetDeviceCount(int *n) {
    if (too_old()) return err(35);
    *n = FAKE_DEVICES;
    return 0;
}

int cudaSetDevice(int d) {
    if (too_old()) return err(35);
    if (d < 0 || d >= FAKE_DEVICES) return err(101);
    cur = d;
    make_context(d);
    return 0;
}

int cudaGetDevice(int *d) {
    if (too_old()) return err(35);
    *d = cur < 0 ? 0 : cur; /* as the runtime: device 0 for a thread that set none */
    return 0;
}

int cuCtxGetCurrent(void **ctx) {
    *ctx = cur < 0 ? NULL : (void *)(intptr_t)(cur + 1);
    return 0;
}

int cuCtxSetCurrent(void *ctx) {
    cur = ctx ? (int)(intptr_t)ctx - 1 : -1;
    return 0;
}

int cudaRuntimeGetVersion(int *v) {
    *v = FAKE_VERSION;
    return 0;
}

const char *cudaGetErrorString(int e) {
    return e == 35 ? "CUDA driver version is insufficient for CUDA runtime version"
                   : "fake runtime error";
}

int cudaGetLastError(void) {
    int e = last_err;
    last_err = 0;
    return e;
}

/* The device whose memory p is, or -1 for host memory. */
static int device_of(const void *p) {
    int d = -1;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < nallocs; i++)
        if ((const uint8_t *)p >= allocs[i].p && (const uint8_t *)p < allocs[i].p + allocs[i].n)
            d = allocs[i].device;
    pthread_mutex_unlock(&mu);
    return d;
}

int cudaPointerGetAttributes(void *attrs, const void *p) {
    if (too_old()) return err(35);
    memset(attrs, 0, ATTR_BYTES); /* the whole of CUDA 13's struct */
    int *a = attrs, d = device_of(p);
    if (d >= 0) {
        a[0] = 2; /* cudaMemoryTypeDevice */
        a[1] = d;
    }
    return 0;
}

int cudaHostRegister(void *p, size_t n, unsigned flags) {
    (void)p, (void)n, (void)flags;
    return ensure() ? last_err : 0;
}

int cudaHostUnregister(void *p) {
    (void)p;
    return 0;
}

int cudaStreamCreateWithFlags(void **s, unsigned flags) {
    (void)flags;
    if (ensure()) return last_err;
    fake_stream *st = calloc(1, sizeof(*st));
    if (!st) return err(2);
    st->device = cur;
    *s = st;
    return 0;
}

int cudaStreamDestroy(void *s) {
    free(s);
    return 0;
}

static fake_stream *stream_of(void *s) {
    return s ? s : &legacy[cur < 0 ? 0 : cur];
}

static void sleep_until(uint64_t t) {
    uint64_t n = now_ns();
    if (n >= t) return;
    struct timespec ts = {(time_t)((t - n) / 1000000000u), (long)((t - n) % 1000000000u)};
    nanosleep(&ts, NULL);
}

int cudaStreamSynchronize(void *s) {
    pthread_mutex_lock(&mu);
    uint64_t t = stream_of(s)->busy_until;
    pthread_mutex_unlock(&mu);
    sleep_until(t);
    return 0;
}

int cudaStreamWaitEvent(void *s, void *e, unsigned flags) {
    (void)flags;
    pthread_mutex_lock(&mu);
    fake_stream *st = stream_of(s);
    fake_event *ev = e;
    if (ev->at > st->busy_until) st->busy_until = ev->at;
    pthread_mutex_unlock(&mu);
    return 0;
}

int cudaEventCreateWithFlags(void **e, unsigned flags) {
    if (ensure()) return last_err;
    fake_event *ev = calloc(1, sizeof(*ev));
    if (!ev) return err(2);
    ev->flags = flags;
    *e = ev;
    return 0;
}

int cudaEventDestroy(void *e) {
    free(e);
    return 0;
}

int cudaEventRecord(void *e, void *s) {
    if (ensure()) return last_err;
    pthread_mutex_lock(&mu);
    ((fake_event *)e)->at = stream_of(s)->busy_until;
    pthread_mutex_unlock(&mu);
    return 0;
}

int cudaEventSynchronize(void *e) {
    fake_event *ev = e;
    pthread_mutex_lock(&mu);
    uint64_t t = ev->at;
    pthread_mutex_unlock(&mu);
    if (ev->flags & 0x01) { /* cudaEventBlockingSync */
        sleep_until(t);
        return 0;
    }
    uint64_t t0 = now_ns(), n = t0;
    while (n < t) {
        n = now_ns();
    }
    pthread_mutex_lock(&mu);
    spin_ns += n - t0;
    pthread_mutex_unlock(&mu);
    return 0;
}

static void copy_on(fake_stream *st, void *dst, const void *src, size_t n) {
    memcpy(dst, src, n);
    const char *flip = getenv("FAKE_CUDART_FLIP");
    if (n && flip && strcmp(flip, "1") == 0 && device_of(src) >= 0 && device_of(dst) < 0)
        ((uint8_t *)dst)[0] ^= 0xff;
    pthread_mutex_lock(&mu);
    uint64_t t = now_ns();
    st->busy_until = (st->busy_until > t ? st->busy_until : t) + copy_ns();
    pthread_mutex_unlock(&mu);
}

int cudaMemcpyAsync(void *dst, const void *src, size_t n, int kind, void *s) {
    (void)kind;
    if (ensure()) return last_err;
    copy_on(stream_of(s), dst, src, n);
    return 0;
}

#if FAKE_VERSION >= 13000
int cudaMemcpyBatchAsync(void *const *dsts, const void *const *srcs, const size_t *sizes, size_t n,
                         void *attrs, size_t *idx, size_t nattrs, void *s) {
    (void)attrs, (void)idx, (void)nattrs;
#else
int cudaMemcpyBatchAsync(void **dsts, void **srcs, size_t *sizes, size_t n, void *attrs,
                         size_t *idx, size_t nattrs, size_t *fail_idx, void *s) {
    (void)attrs, (void)idx, (void)nattrs, (void)fail_idx;
#endif
    if (ensure()) return last_err;
    const char *nb = getenv("FAKE_CUDART_NO_BATCH");
    if (nb && strcmp(nb, "1") == 0) return err(1); /* cudaErrorInvalidValue */
    for (size_t i = 0; i < n; i++)
        copy_on(stream_of(s), dsts[i], srcs[i], sizes[i]);
    return 0;
}
