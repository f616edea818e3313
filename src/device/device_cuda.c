/*
 * device_cuda.c — the CUDA kind: copies between GPU memory and host memory on streams of
 * tide's own, through the CUDA runtime loaded at dev_open() with dlopen and looked up by
 * name. libtide links nothing of CUDA (`ldd libtide.so` names no CUDA library); where no
 * runtime can be loaded, opening a CUDA device fails with TIDE_EDEVICE and a message, and
 * nothing else changes.
 *
 * The runtime: $TIDE_CUDART (a path) when set; else a runtime this process already loaded
 * (PyTorch loads its own: tide must share it, its context and its streams, whatever other
 * runtime is installed), looked up with RTLD_NOLOAD among libcudart.so.13, .so.12, .so and
 * the same names in the toolkit's lib64 directory seen at build time; else the first of
 * those that loads and whose driver is new enough (a runtime that answers "driver too
 * old", as a 13 runtime does on a 12.x driver, gives way to the next). A runtime once
 * called is never unloaded (it registers exit handlers, and its context outlives tide's
 * use of it); dev_describe() names the one in use.
 *
 * A thread's current device: calls made on a caller's thread (recording the engine's
 * event, pinning the pool) set our device for the call and put the caller's back after. A
 * thread that had no context at all (it never set a device) is given none back: restoring
 * "device 0" there would create a context on GPU 0 (cudaSetDevice initialises one since
 * CUDA 12), so the driver's cuCtxGetCurrent / cuCtxSetCurrent save and restore the
 * thread's context instead, where the driver library is loaded.
 *
 * Declarations: with the toolkit's headers (TIDE_HAVE_CUDA_H, set by the Makefile when
 * $(CUDA_HOME)/include/cuda_runtime_api.h exists) the types come from cuda_runtime_api.h
 * and every function-pointer type below is checked against the real prototype at compile
 * time. Without them cuda_abi.h declares the few types needed (the runtime's ABI, with
 * CUDA 13's larger cudaPointerAttributes), so it builds everywhere.
 *
 * Queues are non-blocking streams (they never wait for, nor hold up, the legacy default
 * stream). A flush issues its runs with cudaMemcpyBatchAsync (runtime 12.8 and later; its
 * prototype lost an argument in 13.0, so the version picks the call) or, without it or with
 * TIDE_CUDA_BATCH=0, one cudaMemcpyAsync per run; then it records an event from a ring of
 * DEV_CUDA_RING: ticket t is the event t % RING. Re-recording a ring slot that nobody waited
 * for only makes a later wait on it wait for more, which is safe. Ring events are made with
 * cudaEventBlockingSync: a job thread waiting for its copies (or, through them, for the
 * engine's forward pass) sleeps in the driver instead of spinning on a core the engine's
 * scheduler needs. When the runtime refuses a batch, the batched call is turned off for
 * the device (once, for every thread, with the reason kept for dev_describe) and the runs
 * go one cudaMemcpyAsync each.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "tide.h"

#ifdef TIDE_HAVE_CUDA_H
#include <cuda_runtime_api.h>
#endif
#include "device/cuda_abi.h"

#ifndef TIDE_CUDA_LIBDIR
#define TIDE_CUDA_LIBDIR "/usr/local/cuda/lib64"
#endif

#define DEV_CUDA_RING 64

typedef cudaError_t (*fn_get_count)(int *);
typedef cudaError_t (*fn_set_device)(int);
typedef cudaError_t (*fn_get_device)(int *);
typedef cudaError_t (*fn_runtime_version)(int *);
typedef const char *(*fn_error_string)(cudaError_t);
typedef cudaError_t (*fn_get_last_error)(void);
typedef cudaError_t (*fn_pointer_attrs)(struct cudaPointerAttributes *, const void *);
typedef cudaError_t (*fn_host_register)(void *, size_t, unsigned int);
typedef cudaError_t (*fn_host_unregister)(void *);
typedef cudaError_t (*fn_stream_create)(cudaStream_t *, unsigned int);
typedef cudaError_t (*fn_stream_destroy)(cudaStream_t);
typedef cudaError_t (*fn_stream_sync)(cudaStream_t);
typedef cudaError_t (*fn_stream_wait_event)(cudaStream_t, cudaEvent_t, unsigned int);
typedef cudaError_t (*fn_event_create)(cudaEvent_t *, unsigned int);
typedef cudaError_t (*fn_event_destroy)(cudaEvent_t);
typedef cudaError_t (*fn_event_record)(cudaEvent_t, cudaStream_t);
typedef cudaError_t (*fn_event_sync)(cudaEvent_t);
typedef cudaError_t (*fn_memcpy_async)(void *, const void *, size_t, enum cudaMemcpyKind,
                                       cudaStream_t);
typedef cudaError_t (*fn_batch13)(void *const *, const void *const *, const size_t *, size_t,
                                  struct cudaMemcpyAttributes *, size_t *, size_t, cudaStream_t);
typedef cudaError_t (*fn_batch12)(void **, void **, size_t *, size_t, struct cudaMemcpyAttributes *,
                                  size_t *, size_t, size_t *, cudaStream_t);
/* The driver's (libcuda) context calls: CUresult (an int) and CUcontext (a pointer). */
typedef int (*fn_ctx_get)(void **);
typedef int (*fn_ctx_set)(void *);

#ifdef TIDE_HAVE_CUDA_H
/* Each type above is the real prototype's. */
#define SAME(fn, type) _Static_assert(__builtin_types_compatible_p(__typeof__(&fn), type), #fn)
SAME(cudaGetDeviceCount, fn_get_count);
SAME(cudaSetDevice, fn_set_device);
SAME(cudaGetDevice, fn_get_device);
SAME(cudaRuntimeGetVersion, fn_runtime_version);
SAME(cudaGetErrorString, fn_error_string);
SAME(cudaGetLastError, fn_get_last_error);
SAME(cudaPointerGetAttributes, fn_pointer_attrs);
SAME(cudaHostRegister, fn_host_register);
SAME(cudaHostUnregister, fn_host_unregister);
SAME(cudaStreamCreateWithFlags, fn_stream_create);
SAME(cudaStreamDestroy, fn_stream_destroy);
SAME(cudaStreamSynchronize, fn_stream_sync);
SAME(cudaStreamWaitEvent, fn_stream_wait_event);
SAME(cudaEventCreateWithFlags, fn_event_create);
SAME(cudaEventDestroy, fn_event_destroy);
SAME(cudaEventRecord, fn_event_record);
SAME(cudaEventSynchronize, fn_event_sync);
SAME(cudaMemcpyAsync, fn_memcpy_async);
#if CUDART_VERSION >= 13000
SAME(cudaMemcpyBatchAsync, fn_batch13);
#elif CUDART_VERSION >= 12080
SAME(cudaMemcpyBatchAsync, fn_batch12);
#endif
#endif

typedef struct cuda_rt {
    void *lib;
    int device, version;
    int preloaded;      /* found loaded already (RTLD_NOLOAD) */
    char libname[256];  /* the candidate it was found or loaded as */
    fn_ctx_get ctx_get; /* the driver's, where found: NULL otherwise */
    fn_ctx_set ctx_set;
    int batch_off; /* batched copies refused once: off for good (atomic) */
    pthread_mutex_t why_lock;
    char batch_why[160]; /* why (under why_lock) */
    fn_get_count get_count;
    fn_set_device set_device;
    fn_get_device get_device;
    fn_runtime_version runtime_version;
    fn_error_string error_string;
    fn_get_last_error get_last_error;
    fn_pointer_attrs pointer_attrs;
    fn_host_register host_register;
    fn_host_unregister host_unregister;
    fn_stream_create stream_create;
    fn_stream_destroy stream_destroy;
    fn_stream_sync stream_sync;
    fn_stream_wait_event stream_wait_event;
    fn_event_create event_create;
    fn_event_destroy event_destroy;
    fn_event_record event_record;
    fn_event_sync event_sync;
    fn_memcpy_async memcpy_async;
    fn_batch13 batch13; /* at most one of the two batch calls is set */
    fn_batch12 batch12;
} cuda_rt;

typedef struct cuda_queue {
    cudaStream_t stream;
    cudaEvent_t ring[DEV_CUDA_RING];
    uint64_t ticket, done; /* last issued; last known landed */
    /* Scratch for the batch call. */
    void **dsts;
    const void **srcs;
    size_t *sizes, cap;
} cuda_queue;

static int cuda_fail(const cuda_rt *rt, cudaError_t e, const char *what, char *msg, size_t mlen) {
    snprintf(msg, mlen, "cuda device %d: %s: %s (error %d)", rt->device, what,
             rt->error_string ? rt->error_string(e) : "?", (int)e);
    if (rt->get_last_error) rt->get_last_error(); /* clear a non-sticky error */
    return TIDE_EDEVICE;
}

/* Run with the thread's current device set to ours, and put the caller's back after. */
typedef struct cuda_scope {
    int prev, set;
    int have_ctx; /* the driver told us the thread's context: ctx (NULL: it had none) */
    void *ctx;
} cuda_scope;

static cudaError_t scope_enter(const cuda_rt *rt, cuda_scope *s) {
    s->set = 0;
    s->have_ctx = 0;
    s->ctx = NULL;
    if (rt->ctx_get && rt->ctx_set && rt->ctx_get(&s->ctx) == 0) s->have_ctx = 1;
    cudaError_t e = rt->get_device(&s->prev);
    if (e != cudaSuccess) s->prev = -1;
    /* A thread with no context reports device 0 without being on it: set ours. */
    if (s->prev == rt->device && !(s->have_ctx && !s->ctx)) return cudaSuccess;
    e = rt->set_device(rt->device);
    s->set = e == cudaSuccess;
    return e;
}

static void scope_leave(const cuda_rt *rt, const cuda_scope *s) {
    if (!s->set) return;
    if (s->have_ctx)
        rt->ctx_set(s->ctx); /* back to its context, or to none */
    else if (s->prev >= 0)
        rt->set_device(s->prev);
}

static const char *const default_names[] = {"libcudart.so.13",
                                            "libcudart.so.12",
                                            "libcudart.so",
                                            TIDE_CUDA_LIBDIR "/libcudart.so.13",
                                            TIDE_CUDA_LIBDIR "/libcudart.so.12",
                                            TIDE_CUDA_LIBDIR "/libcudart.so"};
static const char *const *cand_names = default_names;
static size_t ncand = sizeof(default_names) / sizeof(default_names[0]);

void dev_cuda_set_candidates(const char *const *names, size_t n) {
    cand_names = names && n ? names : default_names;
    ncand = names && n ? n : sizeof(default_names) / sizeof(default_names[0]);
}

/* Errors of a runtime newer than the driver: the next candidate may do. */
static int driver_too_old(cudaError_t e) {
    return e == 35 /* cudaErrorInsufficientDriver */ ||
           e == 803 /* cudaErrorSystemDriverMismatch */ ||
           e == 804 /* cudaErrorCompatNotSupportedOnDevice */;
}

#define SYM(field, name)                                                                           \
    do {                                                                                           \
        *(void **)&rt->field = dlsym(rt->lib, name);                                               \
        if (!rt->field) {                                                                          \
            snprintf(msg, mlen, "the CUDA runtime has no %s (too old a runtime?)", name);          \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

/* Bind rt to the runtime in rt->lib and ask it for the device count: 0; TIDE_EDEVICE with
 * a message; *too_old set when the runtime says the driver is too old for it. */
static int bind_runtime(cuda_rt *rt, int *too_old, char *msg, size_t mlen) {
    *too_old = 0;
    SYM(get_count, "cudaGetDeviceCount");
    SYM(set_device, "cudaSetDevice");
    SYM(get_device, "cudaGetDevice");
    SYM(runtime_version, "cudaRuntimeGetVersion");
    SYM(error_string, "cudaGetErrorString");
    SYM(get_last_error, "cudaGetLastError");
    SYM(pointer_attrs, "cudaPointerGetAttributes");
    SYM(host_register, "cudaHostRegister");
    SYM(host_unregister, "cudaHostUnregister");
    SYM(stream_create, "cudaStreamCreateWithFlags");
    SYM(stream_destroy, "cudaStreamDestroy");
    SYM(stream_sync, "cudaStreamSynchronize");
    SYM(stream_wait_event, "cudaStreamWaitEvent");
    SYM(event_create, "cudaEventCreateWithFlags");
    SYM(event_destroy, "cudaEventDestroy");
    SYM(event_record, "cudaEventRecord");
    SYM(event_sync, "cudaEventSynchronize");
    SYM(memcpy_async, "cudaMemcpyAsync");
    if (rt->runtime_version(&rt->version) != cudaSuccess) rt->version = 0;
    rt->batch13 = NULL;
    rt->batch12 = NULL;
    const char *batch = getenv("TIDE_CUDA_BATCH");
    if (!batch || strcmp(batch, "0") != 0) {
        void *b = dlsym(rt->lib, "cudaMemcpyBatchAsync");
        if (b && rt->version >= 13000)
            *(void **)&rt->batch13 = b;
        else if (b && rt->version >= 12080)
            *(void **)&rt->batch12 = b;
    }
    int count = 0;
    cudaError_t e = rt->get_count(&count);
    if (e != cudaSuccess) {
        *too_old = driver_too_old(e);
        cuda_fail(rt, e, "cudaGetDeviceCount (no GPU or no driver?)", msg, mlen);
        return TIDE_EDEVICE;
    }
    if (rt->device >= count) {
        snprintf(msg, mlen, "cuda device %d does not exist (this machine has %d)", rt->device,
                 count);
        return TIDE_EDEVICE;
    }
    /* The driver's context calls: from the runtime's handle (a stand-in may carry them),
     * else from libcuda, which a working runtime has loaded. */
    *(void **)&rt->ctx_get = dlsym(rt->lib, "cuCtxGetCurrent");
    *(void **)&rt->ctx_set = dlsym(rt->lib, "cuCtxSetCurrent");
    if (!rt->ctx_get || !rt->ctx_set) {
        void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
        *(void **)&rt->ctx_get = drv ? dlsym(drv, "cuCtxGetCurrent") : NULL;
        *(void **)&rt->ctx_set = drv ? dlsym(drv, "cuCtxSetCurrent") : NULL;
    }
    return 0;
fail:
    return TIDE_EDEVICE;
}

static int cuda_open(int device, void **impl, char *msg, size_t mlen) {
    cuda_rt *rt = calloc(1, sizeof(*rt));
    if (!rt) {
        snprintf(msg, mlen, "out of memory");
        return -ENOMEM;
    }
    pthread_mutex_init(&rt->why_lock, NULL);
    rt->device = device;
    const char *env = getenv("TIDE_CUDART");
    int too_old = 0, rc = TIDE_EDEVICE;
    char first[512] = "";
    if (env && *env) {
        if (!(rt->lib = dlopen(env, RTLD_NOW | RTLD_LOCAL))) {
            snprintf(msg, mlen, "no CUDA runtime: TIDE_CUDART=%s does not load: %s", env,
                     dlerror());
            goto fail;
        }
        snprintf(rt->libname, sizeof(rt->libname), "%s", env);
        if (bind_runtime(rt, &too_old, msg, mlen) != 0) goto fail;
        *impl = rt;
        return 0;
    }
    /* One already in the process first, then the first that loads and runs here. The
     * handles of candidates that failed stay open: a runtime, once called, is not unloaded. */
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < ncand; i++) {
            void *h = dlopen(cand_names[i], RTLD_NOW | RTLD_LOCAL | (pass ? 0 : RTLD_NOLOAD));
            if (!h || h == rt->lib) continue;
            rt->lib = h;
            rt->preloaded = !pass;
            snprintf(rt->libname, sizeof(rt->libname), "%s", cand_names[i]);
            rc = bind_runtime(rt, &too_old, msg, mlen);
            if (rc == 0) {
                *impl = rt;
                return 0;
            }
            if (!first[0]) snprintf(first, sizeof(first), "%s: %s", cand_names[i], msg);
            if (!too_old) goto fail; /* a real failure (no GPU, no such device): say so */
        }
    }
    if (first[0])
        snprintf(msg, mlen, "no usable CUDA runtime: %s (and no other runtime tried runs here)",
                 first);
    else
        snprintf(msg, mlen,
                 "no CUDA runtime: none of libcudart.so.13, libcudart.so.12, libcudart.so loads "
                 "(also tried in " TIDE_CUDA_LIBDIR "); install the CUDA runtime or set "
                 "TIDE_CUDART to the library's path");
fail:
    pthread_mutex_destroy(&rt->why_lock);
    free(rt);
    return TIDE_EDEVICE;
}

static void cuda_close(void *impl) {
    cuda_rt *rt = impl;
    /* The runtime stays loaded (no dlclose): it registered exit handlers when first
     * called, and the engine (PyTorch) may share it. */
    pthread_mutex_destroy(&rt->why_lock);
    free(rt);
}

static void cuda_describe(void *impl, char *buf, size_t len) {
    cuda_rt *rt = impl;
    pthread_mutex_lock(&rt->why_lock);
    snprintf(buf, len, "cuda device %d: runtime %d.%d (%s, %s); copies: %s%s%s", rt->device,
             rt->version / 1000, rt->version % 1000 / 10, rt->libname,
             rt->preloaded ? "already loaded by the process" : "loaded by tide",
             __atomic_load_n(&rt->batch_off, __ATOMIC_ACQUIRE) || (!rt->batch13 && !rt->batch12)
                 ? "one cudaMemcpyAsync per run"
                 : "cudaMemcpyBatchAsync",
             rt->batch_why[0] ? "; batched copies off: " : "", rt->batch_why);
    pthread_mutex_unlock(&rt->why_lock);
}

static int cuda_check(void *impl, const void *p, uint64_t len, char *msg, size_t mlen) {
    cuda_rt *rt = impl;
    const void *ends[2] = {p, (const uint8_t *)p + (len ? len - 1 : 0)};
    for (int i = 0; i < 2; i++) {
        /* Room for the runtime's struct, however much newer than our headers it is. */
        union {
            struct cudaPointerAttributes attrs;
            unsigned char room[CUDA_ATTR_ROOM];
        } u;
        _Static_assert(sizeof(struct cudaPointerAttributes) <= CUDA_ATTR_ROOM, "room");
        memset(&u, 0, sizeof(u));
        cudaError_t e = rt->pointer_attrs(&u.attrs, ends[i]);
        const struct cudaPointerAttributes a = u.attrs;
        if (e != cudaSuccess) return cuda_fail(rt, e, "cudaPointerGetAttributes", msg, mlen);
        if ((a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged) ||
            a.device != rt->device) {
            snprintf(msg, mlen,
                     "%p (%s of a %llu-byte region) is not memory of cuda device %d "
                     "(memory type %d, device %d)",
                     ends[i], i ? "last byte" : "start", (unsigned long long)len, rt->device,
                     (int)a.type, a.device);
            return TIDE_EDEVICE;
        }
    }
    return 0;
}

static int cuda_host_register(void *impl, void *p, uint64_t len, char *msg, size_t mlen) {
    cuda_rt *rt = impl;
    cuda_scope sc;
    cudaError_t e = scope_enter(rt, &sc);
    if (e == cudaSuccess) e = rt->host_register(p, (size_t)len, cudaHostRegisterPortable);
    scope_leave(rt, &sc);
    if (e == cudaErrorHostMemoryAlreadyRegistered) {
        rt->get_last_error();
        return 1;
    }
    if (e != cudaSuccess) return cuda_fail(rt, e, "cudaHostRegister of the pool", msg, mlen);
    return 0;
}

static void cuda_host_unregister(void *impl, void *p) {
    cuda_rt *rt = impl;
    if (rt->host_unregister(p) != cudaSuccess) rt->get_last_error();
}

static void cuda_queue_destroy(void *impl, void *qv) {
    cuda_rt *rt = impl;
    cuda_queue *q = qv;
    if (!q) return;
    if (q->stream) {
        /* Nothing may still be copying into memory the caller is about to reuse. */
        if (q->ticket) rt->event_sync(q->ring[q->ticket % DEV_CUDA_RING]);
        rt->stream_destroy(q->stream);
    }
    for (int i = 0; i < DEV_CUDA_RING; i++)
        if (q->ring[i]) rt->event_destroy(q->ring[i]);
    free(q->dsts);
    free(q->srcs);
    free(q->sizes);
    free(q);
    rt->get_last_error();
}

/* Called by the thread that will use the queue: the device becomes its current device. */
static int cuda_queue_create(void *impl, void **out, char *msg, size_t mlen) {
    cuda_rt *rt = impl;
    cuda_queue *q = calloc(1, sizeof(*q));
    if (!q) {
        snprintf(msg, mlen, "out of memory");
        return -ENOMEM;
    }
    cudaError_t e = rt->set_device(rt->device);
    if (e != cudaSuccess) {
        free(q);
        return cuda_fail(rt, e, "cudaSetDevice", msg, mlen);
    }
    e = rt->stream_create(&q->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        free(q);
        return cuda_fail(rt, e, "cudaStreamCreateWithFlags", msg, mlen);
    }
    for (int i = 0; i < DEV_CUDA_RING; i++) {
        e = rt->event_create(&q->ring[i], cudaEventBlockingSync | cudaEventDisableTiming);
        if (e != cudaSuccess) {
            int rc = cuda_fail(rt, e, "cudaEventCreateWithFlags", msg, mlen);
            cuda_queue_destroy(rt, q);
            return rc;
        }
    }
    *out = q;
    return 0;
}

static int cuda_event_record(void *impl, uintptr_t stream, void **ev, char *msg, size_t mlen) {
    cuda_rt *rt = impl;
    cudaEvent_t e = NULL;
    cuda_scope sc;
    cudaError_t err = scope_enter(rt, &sc);
    if (err == cudaSuccess) err = rt->event_create(&e, cudaEventDisableTiming);
    if (err == cudaSuccess) {
        err = rt->event_record(e, (cudaStream_t)stream);
        if (err != cudaSuccess) rt->event_destroy(e);
    }
    scope_leave(rt, &sc);
    if (err != cudaSuccess)
        return cuda_fail(rt, err, "recording an event on the engine's stream", msg, mlen);
    *ev = e;
    return 0;
}

static void cuda_event_destroy(void *impl, void *ev) {
    cuda_rt *rt = impl;
    rt->event_destroy((cudaEvent_t)ev);
}

static int cuda_wait_event(void *impl, void *qv, void *ev, char *msg, size_t mlen) {
    cuda_rt *rt = impl;
    cuda_queue *q = qv;
    cudaError_t e = rt->stream_wait_event(q->stream, (cudaEvent_t)ev, 0);
    if (e != cudaSuccess) return cuda_fail(rt, e, "cudaStreamWaitEvent", msg, mlen);
    return 0;
}

static int cuda_batch(cuda_rt *rt, cuda_queue *q, const dev_copy *c, size_t n, char *msg,
                      size_t mlen) {
    if (n > q->cap) {
        size_t cap = n < 256 ? 256 : n;
        void **d = realloc(q->dsts, cap * sizeof(*d));
        if (d) q->dsts = d;
        const void **s = realloc(q->srcs, cap * sizeof(*s));
        if (s) q->srcs = s;
        size_t *z = realloc(q->sizes, cap * sizeof(*z));
        if (z) q->sizes = z;
        if (!d || !s || !z) {
            snprintf(msg, mlen, "out of memory");
            return -ENOMEM;
        }
        q->cap = cap;
    }
    for (size_t i = 0; i < n; i++) {
        q->dsts[i] = c[i].dst;
        q->srcs[i] = c[i].src;
        q->sizes[i] = c[i].len;
    }
    struct cudaMemcpyAttributes attr;
    memset(&attr, 0, sizeof(attr));
    attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    size_t idx = 0, fail_idx = 0;
    cudaError_t e = rt->batch13
                        ? rt->batch13(q->dsts, q->srcs, q->sizes, n, &attr, &idx, 1, q->stream)
                        : rt->batch12(q->dsts, (void **)q->srcs, q->sizes, n, &attr, &idx, 1,
                                      &fail_idx, q->stream);
    if (e == cudaSuccess) return 0;
    return cuda_fail(rt, e, "cudaMemcpyBatchAsync", msg, mlen);
}

static int cuda_copy(void *impl, void *qv, const dev_copy *c, size_t n, uint64_t *ticket, char *msg,
                     size_t mlen) {
    cuda_rt *rt = impl;
    cuda_queue *q = qv;
    int rc = 0;
    if (n > 1 && (rt->batch13 || rt->batch12) &&
        !__atomic_load_n(&rt->batch_off, __ATOMIC_ACQUIRE)) {
        rc = cuda_batch(rt, q, c, n, msg, mlen);
        /* A batch the runtime refuses: fall back to one copy per run, for good, on every
         * thread (the pointers stay; the flag is read atomically), the reason kept for
         * dev_describe. Should part of it have been queued, issuing those runs again copies
         * the same bytes to the same places, which changes nothing. */
        if (rc == TIDE_EDEVICE) {
            if (!__atomic_exchange_n(&rt->batch_off, 1, __ATOMIC_ACQ_REL)) {
                pthread_mutex_lock(&rt->why_lock);
                snprintf(rt->batch_why, sizeof(rt->batch_why), "%s", msg);
                pthread_mutex_unlock(&rt->why_lock);
            }
            rc = 0;
        } else if (rc) {
            return rc;
        } else {
            goto record;
        }
    }
    for (size_t i = 0; i < n; i++) {
        cudaError_t e =
            rt->memcpy_async(c[i].dst, c[i].src, c[i].len, cudaMemcpyDefault, q->stream);
        if (e != cudaSuccess) {
            /* The runs before it are queued: let them finish before the caller frees or
             * reuses what they touch. */
            rc = cuda_fail(rt, e, "cudaMemcpyAsync", msg, mlen);
            rt->stream_sync(q->stream);
            rt->get_last_error();
            return rc;
        }
    }
record:;
    uint64_t t = q->ticket + 1;
    cudaError_t e = rt->event_record(q->ring[t % DEV_CUDA_RING], q->stream);
    if (e != cudaSuccess) {
        rc = cuda_fail(rt, e, "cudaEventRecord", msg, mlen);
        rt->stream_sync(q->stream);
        rt->get_last_error();
        return rc;
    }
    q->ticket = t;
    *ticket = t;
    return rc;
}

static int cuda_wait(void *impl, void *qv, uint64_t ticket, char *msg, size_t mlen) {
    cuda_rt *rt = impl;
    cuda_queue *q = qv;
    if (ticket == 0 || ticket <= q->done) return 0;
    if (ticket > q->ticket) ticket = q->ticket;
    cudaError_t e = rt->event_sync(q->ring[ticket % DEV_CUDA_RING]);
    if (e != cudaSuccess) return cuda_fail(rt, e, "a copy on tide's stream", msg, mlen);
    q->done = ticket;
    return 0;
}

const dev_ops dev_cuda_ops = {
    .name = "cuda",
    .open = cuda_open,
    .close = cuda_close,
    .check = cuda_check,
    .host_register = cuda_host_register,
    .host_unregister = cuda_host_unregister,
    .queue_create = cuda_queue_create,
    .queue_destroy = cuda_queue_destroy,
    .event_record = cuda_event_record,
    .event_destroy = cuda_event_destroy,
    .queue_wait_event = cuda_wait_event,
    .copy = cuda_copy,
    .wait = cuda_wait,
    .describe = cuda_describe,
};
