/*
 * device_cuda.c — the CUDA kind: copies between GPU memory and host memory on streams of
 * tide's own, through the CUDA runtime loaded at dev_open() with dlopen and looked up by
 * name. libtide links nothing of CUDA (`ldd libtide.so` names no CUDA library); where no
 * runtime can be loaded, opening a CUDA device fails with TIDE_EDEVICE and a message, and
 * nothing else changes.
 *
 * The runtime tried, in order: $TIDE_CUDART (a path), libcudart.so.13, libcudart.so.12,
 * libcudart.so, then the same names in the toolkit's lib64 directory seen at build time. A
 * process that already loaded one (PyTorch does) gets that one back from dlopen, so tide
 * and the engine share a runtime and a context.
 *
 * Declarations: with the toolkit's headers (TIDE_HAVE_CUDA_H, set by the Makefile when
 * $(CUDA_HOME)/include/cuda_runtime_api.h exists) the types come from cuda_runtime_api.h
 * and every function-pointer type below is checked against the real prototype at compile
 * time. Without them the file declares the few types it needs itself (their layout is the
 * runtime's ABI, stable since CUDA 11), so it builds everywhere.
 *
 * Queues are non-blocking streams (they never wait for, nor hold up, the legacy default
 * stream). A flush issues its runs with cudaMemcpyBatchAsync (runtime 12.8 and later; its
 * prototype lost an argument in 13.0, so the version picks the call) or, without it or with
 * TIDE_CUDA_BATCH=0, one cudaMemcpyAsync per run; then it records an event from a ring of
 * DEV_CUDA_RING: ticket t is the event t % RING. Re-recording a ring slot that nobody waited
 * for only makes a later wait on it wait for more, which is safe.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "tide.h"

#ifdef TIDE_HAVE_CUDA_H
#include <cuda_runtime_api.h>
#else
/* The runtime's ABI, as cuda_runtime_api.h / driver_types.h declare it. */
typedef int cudaError_t;
typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
enum cudaMemoryType {
    cudaMemoryTypeUnregistered = 0,
    cudaMemoryTypeHost = 1,
    cudaMemoryTypeDevice = 2,
    cudaMemoryTypeManaged = 3
};
struct cudaPointerAttributes {
    enum cudaMemoryType type;
    int device;
    void *devicePointer;
    void *hostPointer;
};
enum cudaMemcpyKind { cudaMemcpyDefault = 4 };
enum cudaMemcpySrcAccessOrder { cudaMemcpySrcAccessOrderStream = 1 };
enum cudaMemLocationType { cudaMemLocationTypeInvalid = 0 };
struct cudaMemLocation {
    enum cudaMemLocationType type;
    int id;
};
struct cudaMemcpyAttributes {
    enum cudaMemcpySrcAccessOrder srcAccessOrder;
    struct cudaMemLocation srcLocHint;
    struct cudaMemLocation dstLocHint;
    unsigned int flags;
};
#define cudaSuccess 0
#define cudaErrorHostMemoryAlreadyRegistered 712
#define cudaHostRegisterPortable 0x01
#define cudaStreamNonBlocking 0x01
#define cudaEventDisableTiming 0x02
#endif

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
} cuda_scope;

static cudaError_t scope_enter(const cuda_rt *rt, cuda_scope *s) {
    s->set = 0;
    cudaError_t e = rt->get_device(&s->prev);
    if (e != cudaSuccess) s->prev = -1;
    if (s->prev == rt->device) return cudaSuccess;
    e = rt->set_device(rt->device);
    s->set = e == cudaSuccess;
    return e;
}

static void scope_leave(const cuda_rt *rt, const cuda_scope *s) {
    if (s->set && s->prev >= 0) rt->set_device(s->prev);
}

static void *load_runtime(char *msg, size_t mlen) {
    const char *names[] = {"libcudart.so.13",
                           "libcudart.so.12",
                           "libcudart.so",
                           TIDE_CUDA_LIBDIR "/libcudart.so.13",
                           TIDE_CUDA_LIBDIR "/libcudart.so.12",
                           TIDE_CUDA_LIBDIR "/libcudart.so"};
    const char *env = getenv("TIDE_CUDART");
    if (env && *env) {
        void *h = dlopen(env, RTLD_NOW | RTLD_LOCAL);
        if (h) return h;
        snprintf(msg, mlen, "no CUDA runtime: TIDE_CUDART=%s does not load: %s", env, dlerror());
        return NULL;
    }
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (h) return h;
    }
    snprintf(msg, mlen,
             "no CUDA runtime: none of libcudart.so.13, libcudart.so.12, libcudart.so loads "
             "(also tried in " TIDE_CUDA_LIBDIR "); install the CUDA runtime or set "
             "TIDE_CUDART to the library's path");
    return NULL;
}

#define SYM(field, name)                                                                           \
    do {                                                                                           \
        *(void **)&rt->field = dlsym(rt->lib, name);                                               \
        if (!rt->field) {                                                                          \
            snprintf(msg, mlen, "the CUDA runtime has no %s (too old a runtime?)", name);          \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

static int cuda_open(int device, void **impl, char *msg, size_t mlen) {
    cuda_rt *rt = calloc(1, sizeof(*rt));
    if (!rt) {
        snprintf(msg, mlen, "out of memory");
        return -ENOMEM;
    }
    rt->device = device;
    if (!(rt->lib = load_runtime(msg, mlen))) goto fail;
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
        cuda_fail(rt, e, "cudaGetDeviceCount (no GPU or no driver?)", msg, mlen);
        goto fail;
    }
    if (device >= count) {
        snprintf(msg, mlen, "cuda device %d does not exist (this machine has %d)", device, count);
        goto fail;
    }
    *impl = rt;
    return 0;
fail:
    if (rt->lib) dlclose(rt->lib);
    free(rt);
    return TIDE_EDEVICE;
}

static void cuda_close(void *impl) {
    cuda_rt *rt = impl;
    /* The runtime stays loaded: a library may not be unloaded under a process (PyTorch)
     * that still uses it, and dlclose of one it loaded first only drops a reference. */
    dlclose(rt->lib);
    free(rt);
}

static int cuda_check(void *impl, const void *p, uint64_t len, char *msg, size_t mlen) {
    cuda_rt *rt = impl;
    const void *ends[2] = {p, (const uint8_t *)p + (len ? len - 1 : 0)};
    for (int i = 0; i < 2; i++) {
        struct cudaPointerAttributes a;
        memset(&a, 0, sizeof(a));
        cudaError_t e = rt->pointer_attrs(&a, ends[i]);
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
        e = rt->event_create(&q->ring[i], cudaEventDisableTiming);
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
    if (n > 1 && (rt->batch13 || rt->batch12)) {
        rc = cuda_batch(rt, q, c, n, msg, mlen);
        /* A batch the runtime refuses: fall back to one copy per run, for good. Should part
         * of it have been queued, issuing those runs again copies the same bytes to the
         * same places, which changes nothing. */
        if (rc == TIDE_EDEVICE) {
            rt->batch13 = NULL;
            rt->batch12 = NULL;
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
};
