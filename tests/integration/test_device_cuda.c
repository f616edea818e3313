/*
 * test_device_cuda.c — the CUDA kind (src/device/device_cuda.c) itself, against a stand-in
 * runtime (tests/device/fake_cudart.c, built here with cc as libcudart.so.12 / .so.13):
 * which runtime it picks (one the process already loaded; one whose driver is new enough),
 * that a job thread waiting for copies sleeps instead of spinning, that a thread which
 * never set a device is not left with a context on GPU 0, that a refused batched copy
 * turns batching off visibly and for every thread, and that pointer checks give the
 * runtime room for CUDA 13's attributes.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "device/device.h"
#include "harness.h"
#include "tide.h"

/* tests/device/fake_cudart.c, from the working directory or the build tree's parent. */
static const char *fake_source(void) {
    static char path[1024];
    const char *rel = "tests/device/fake_cudart.c";
    char base[900];
    snprintf(base, sizeof(base), "%s", test_build_dir());
    if (access(rel, R_OK) == 0) return rel;
    for (int up = 0; up < 3; up++) {
        char *slash = strrchr(base, '/');
        if (!slash) break;
        *slash = '\0';
        snprintf(path, sizeof(path), "%s/%s", base, rel);
        if (access(path, R_OK) == 0) return path;
    }
    test_fail(__FILE__, __LINE__, "cannot find %s (run from the source tree)", rel);
    return NULL;
}

/* Build the stand-in runtime of `version` (12080, 13000) as dir/libcudart.so.MAJOR. */
static void build_fake(const char *dir, int version, char *out, size_t cap) {
    int major = version / 1000;
    snprintf(out, cap, "%s/libcudart.so.%d", dir, major);
    char cmd[4096], log[4096];
    snprintf(cmd, sizeof(cmd),
             "timeout 120 cc -shared -fPIC -O1 -DFAKE_VERSION=%d -Wl,-soname,libcudart.so.%d "
             "-o %s %s -pthread 2>&1",
             version, major, out, fake_source());
    int rc = test_run(cmd, log, sizeof(log));
    CHECK_MSG(rc == 0, "building the stand-in runtime failed (%d): %s", rc, log);
}

/* A symbol of the stand-in loaded from path (it must be loaded already). */
static void *fake_sym(const char *path, const char *name) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    CHECK(h != NULL);
    void *s = dlsym(h, name);
    CHECK(s != NULL);
    return s;
}

static void use_real_kind(void) {
    dev_set_ops(DEV_CUDA, NULL);
    unsetenv("TIDE_CUDART");
    unsetenv("FAKE_CUDART_DRIVER");
}

/* PyTorch loaded the 12 runtime first: tide shares it, although a 13 is installed and
 * comes first in the list. Before the fix the first name that loaded won (13). */
TEST(device_cuda_prefers_the_runtime_the_process_loaded) {
    use_real_kind();
    char r12[1024], r13[1024];
    build_fake(test_tmpdir(), 12080, r12, sizeof r12);
    build_fake(test_tmpdir(), 13000, r13, sizeof r13);
    CHECK(dlopen(r12, RTLD_NOW | RTLD_LOCAL) != NULL); /* the engine's */
    const char *names[] = {r13, r12};
    dev_cuda_set_candidates(names, 2);
    dev *d = NULL;
    char msg[512], desc[512];
    CHECK_EQ(dev_open(DEV_CUDA, 0, &d, msg, sizeof msg), 0);
    dev_describe(d, desc, sizeof desc);
    CHECK_CONTAINS(desc, "runtime 12.8");
    CHECK_CONTAINS(desc, "already loaded by the process");
    CHECK_CONTAINS(desc, r12);
    dev_close(d);
    dev_cuda_set_candidates(NULL, 0);
}

/* Nothing loaded; the 13 runtime says the driver is too old for it: the 12 one is used.
 * Before the fix opening failed on the first runtime's error. When no runtime runs, the
 * error names the first one's reason. */
TEST(device_cuda_runtime_too_new_for_the_driver_gives_way) {
    use_real_kind();
    char r12[1024], r13[1024];
    build_fake(test_tmpdir(), 12080, r12, sizeof r12);
    build_fake(test_tmpdir(), 13000, r13, sizeof r13);
    const char *names[] = {r13, r12};
    dev_cuda_set_candidates(names, 2);
    setenv("FAKE_CUDART_DRIVER", "12090", 1);
    dev *d = NULL;
    char msg[512], desc[512];
    CHECK_EQ(dev_open(DEV_CUDA, 0, &d, msg, sizeof msg), 0);
    dev_describe(d, desc, sizeof desc);
    CHECK_CONTAINS(desc, "runtime 12.8");
    CHECK_CONTAINS(desc, "loaded by tide");
    dev_close(d);
    setenv("FAKE_CUDART_DRIVER", "11080", 1);
    CHECK_EQ(dev_open(DEV_CUDA, 0, &d, msg, sizeof msg), TIDE_EDEVICE);
    CHECK_CONTAINS(msg, "no usable CUDA runtime");
    CHECK_CONTAINS(msg, "driver version is insufficient");
    dev_cuda_set_candidates(NULL, 0);
    unsetenv("FAKE_CUDART_DRIVER");
}

static uint64_t ns_of(clockid_t clk) {
    struct timespec ts;
    clock_gettime(clk, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A job thread waiting for its copies (here 4 runs of 50 ms each on the device) sleeps: its
 * CPU time stays a small part of the wait. Before the fix the ring's events had no
 * cudaEventBlockingSync and the wait spun for all of it. Also: the pointer check hands the
 * runtime room for CUDA 13's 88-byte attributes, and names what is not device memory. */
TEST(device_cuda_waiting_for_copies_does_not_spin) {
    use_real_kind();
    char r13[1024];
    build_fake(test_tmpdir(), 13000, r13, sizeof r13);
    setenv("TIDE_CUDART", r13, 1);
    setenv("FAKE_CUDART_COPY_US", "50000", 1);
    dev *d = NULL;
    char msg[512];
    CHECK_EQ(dev_open(DEV_CUDA, 0, &d, msg, sizeof msg), 0);
    void *(*alloc)(int, size_t) = (void *(*)(int, size_t))fake_sym(r13, "fake_alloc");
    uint64_t (*spin)(void) = (uint64_t(*)(void))fake_sym(r13, "fake_spin_ns");
    uint8_t *dm = alloc(0, 1 << 16), *host = malloc(1 << 16);
    CHECK(dm && host);
    CHECK_EQ(dev_check(d, dm, 1 << 16, msg, sizeof msg), 0);
    CHECK_EQ(dev_check(d, host, 64, msg, sizeof msg), TIDE_EDEVICE);
    CHECK_CONTAINS(msg, "is not memory of cuda device 0");
    memset(dm, 0x5a, 1 << 16);
    CHECK_EQ(dev_host_register(d, host, 1 << 16, msg, sizeof msg), 0);
    dev_queue *q = NULL;
    CHECK_EQ(dev_queue_open(d, &q, msg, sizeof msg), 0);
    for (int i = 0; i < 4; i++) /* four runs (every other 4 KiB) */
        CHECK_EQ(dev_queue_add(q, host + i * 8192, dm + i * 8192, 4096), 0);
    uint64_t t = 0;
    CHECK_EQ(dev_queue_flush(q, &t, msg, sizeof msg), 0);
    uint64_t w0 = ns_of(CLOCK_MONOTONIC), c0 = ns_of(CLOCK_THREAD_CPUTIME_ID);
    CHECK_EQ(dev_queue_wait(q, t, msg, sizeof msg), 0);
    uint64_t wall = ns_of(CLOCK_MONOTONIC) - w0, cpu = ns_of(CLOCK_THREAD_CPUTIME_ID) - c0;
    fprintf(stderr, "waiting %.1f ms for copies took %.1f ms of CPU (%.1f ms spinning)\n",
            wall / 1e6, cpu / 1e6, spin() / 1e6);
    CHECK(wall >= 150000000u); /* the copies' 200 ms were waited for */
    CHECK_EQ(spin(), 0);
    CHECK_MSG(cpu < wall / 4, "the wait burned %.1f ms of CPU in %.1f ms", cpu / 1e6, wall / 1e6);
    CHECK_EQ(host[0], 0x5a);
    CHECK_EQ(host[3 * 8192 + 4095], 0x5a);
    dev_queue_close(q);
    dev_host_unregister(d, host);
    dev_close(d);
    free(host);
    unsetenv("FAKE_CUDART_COPY_US");
    unsetenv("TIDE_CUDART");
}

typedef struct ctx_probe {
    dev *d;
    const char *lib;
    int rc_event, rc_reg, ctx_after;
    void *buf;
} ctx_probe;

static void *fresh_thread(void *arg) {
    ctx_probe *p = arg;
    char msg[512];
    dev_event *e = NULL;
    p->rc_event = dev_event_record(p->d, 0, &e, msg, sizeof msg);
    dev_event_free(e);
    p->rc_reg = dev_host_register(p->d, p->buf, 4096, msg, sizeof msg);
    if (p->rc_reg == 0) dev_host_unregister(p->d, p->buf);
    int (*get)(void **) = (int (*)(void **))fake_sym(p->lib, "cuCtxGetCurrent");
    void *ctx = (void *)1;
    get(&ctx);
    p->ctx_after = ctx != NULL;
    return NULL;
}

/* A thread that never set a device (vLLM's, a Python thread) records the engine's event
 * and pins memory for device 1: afterwards it has no context, and none was made on GPU 0.
 * Before the fix "putting its device back" set device 0 and made a context there. */
TEST(device_cuda_leaves_no_context_on_gpu0) {
    use_real_kind();
    char r13[1024];
    build_fake(test_tmpdir(), 13000, r13, sizeof r13);
    setenv("TIDE_CUDART", r13, 1);
    dev *d = NULL;
    char msg[512];
    CHECK_EQ(dev_open(DEV_CUDA, 1, &d, msg, sizeof msg), 0);
    int (*contexts)(int) = (int (*)(int))fake_sym(r13, "fake_contexts");
    ctx_probe p = {.d = d, .lib = r13, .buf = malloc(4096)};
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, fresh_thread, &p), 0);
    pthread_join(th, NULL);
    CHECK_EQ(p.rc_event, 0);
    CHECK_EQ(p.rc_reg, 0);
    CHECK_EQ(contexts(0), 0);
    CHECK(contexts(1) > 0);
    CHECK_EQ(p.ctx_after, 0);
    free(p.buf);
    dev_close(d);
    unsetenv("TIDE_CUDART");
}

typedef struct batch_job {
    dev *d;
    uint8_t *dm, *host;
    int rc;
} batch_job;

static void *batch_thread(void *arg) {
    batch_job *b = arg;
    char msg[512];
    dev_queue *q = NULL;
    b->rc = dev_queue_open(b->d, &q, msg, sizeof msg);
    for (int round = 0; round < 20 && b->rc == 0; round++) {
        for (int i = 0; i < 8; i++)
            dev_queue_add(q, b->host + i * 512, b->dm + i * 1024, 256);
        uint64_t t = 0;
        b->rc = dev_queue_flush(q, &t, msg, sizeof msg);
        if (b->rc == 0) b->rc = dev_queue_wait(q, t, msg, sizeof msg);
    }
    dev_queue_close(q);
    return NULL;
}

/* The runtime refuses batched copies: every thread's copies still land (one per run), and
 * the device says batching is off and why. */
TEST(device_cuda_refused_batch_falls_back_visibly) {
    use_real_kind();
    char r13[1024];
    build_fake(test_tmpdir(), 13000, r13, sizeof r13);
    setenv("TIDE_CUDART", r13, 1);
    setenv("FAKE_CUDART_NO_BATCH", "1", 1);
    dev *d = NULL;
    char msg[512], desc[512];
    CHECK_EQ(dev_open(DEV_CUDA, 0, &d, msg, sizeof msg), 0);
    dev_describe(d, desc, sizeof desc);
    CHECK_CONTAINS(desc, "cudaMemcpyBatchAsync");
    void *(*alloc)(int, size_t) = (void *(*)(int, size_t))fake_sym(r13, "fake_alloc");
    batch_job jobs[2];
    pthread_t th[2];
    for (int k = 0; k < 2; k++) {
        jobs[k] = (batch_job){.d = d, .dm = alloc(0, 8192), .host = calloc(1, 8192)};
        memset(jobs[k].dm, 0x30 + k, 8192);
        CHECK_EQ(pthread_create(&th[k], NULL, batch_thread, &jobs[k]), 0);
    }
    for (int k = 0; k < 2; k++) {
        pthread_join(th[k], NULL);
        CHECK_EQ(jobs[k].rc, 0);
        for (int i = 0; i < 8; i++)
            CHECK_EQ(jobs[k].host[i * 512 + 255], 0x30 + k);
        free(jobs[k].host);
    }
    dev_describe(d, desc, sizeof desc);
    CHECK_CONTAINS(desc, "one cudaMemcpyAsync per run");
    CHECK_CONTAINS(desc, "batched copies off: cuda device 0: cudaMemcpyBatchAsync");
    dev_close(d);
    unsetenv("FAKE_CUDART_NO_BATCH");
    unsetenv("TIDE_CUDART");
}
