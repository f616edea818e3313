/*
 * test_device.c — the device-copy layer (src/device) and the store's device puts and gets
 * (src/client/devio.c, mem.c, unixshm.c): the host kind, the CUDA kind where no CUDA runs
 * (a clear error, and a libtide that links nothing of CUDA), the test kind's own rules
 * (copies land late, in order, after the events they wait for; failures are reported and
 * stick), and values moved between "device" memory and mem://, unix:// and tide:// stores —
 * through the registered pool where there is one, staged where there is none — with
 * checksums over the host bytes and failed copies never stored or claimed.
 */
#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/client.h"
#include "common/checksum.h"
#include "device/cuda_abi.h" /* without TIDE_HAVE_CUDA_H: the header-less declarations */
#include "device/device.h"
#include "harness.h"
#include "server_util.h"
#include "store/store.h"
#include "tide.h"

static char msg[512];

static dev *open_kind(int kind, const dev_ops *ops) {
    dev_set_ops(kind, ops);
    dev *d = NULL;
    int rc = dev_open(kind, 0, &d, msg, sizeof(msg));
    if (rc) test_fail(__FILE__, __LINE__, "dev_open: %d %s", rc, msg);
    return d;
}

static void fill(uint8_t *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(i * 131 + seed * 7 + (i >> 8));
}

TEST(device_host_kind_copies_and_merges_runs) {
    dev *d = open_kind(DEV_HOST, NULL);
    dev_queue *q = NULL;
    CHECK_EQ(dev_queue_open(d, &q, msg, sizeof(msg)), 0);
    uint8_t src[4096], dst[4096] = {0};
    fill(src, sizeof(src), 1);
    /* Four adjacent pieces make one run; a gap starts another. */
    for (int i = 0; i < 4; i++)
        CHECK_EQ(dev_queue_add(q, dst + i * 512, src + i * 512, 512), 0);
    CHECK_EQ(dev_queue_add(q, dst + 3000, src + 3000, 1000), 0);
    CHECK_EQ(q->nruns, 2);
    uint64_t t = 0;
    CHECK_EQ(dev_queue_flush(q, &t, msg, sizeof(msg)), 0);
    CHECK_EQ(q->issued_runs, 2);
    CHECK_EQ(q->copies, 5);
    CHECK_EQ(dev_queue_wait(q, t, msg, sizeof(msg)), 0);
    CHECK(memcmp(dst, src, 2048) == 0);
    CHECK(memcmp(dst + 3000, src + 3000, 1000) == 0);
    CHECK_EQ(dst[2500], 0);
    /* Nothing collected: the same ticket back. */
    uint64_t t2 = 99;
    CHECK_EQ(dev_queue_flush(q, &t2, msg, sizeof(msg)), 0);
    CHECK_EQ(t2, t);
    dev_event *e = NULL;
    CHECK_EQ(dev_event_record(d, 0, &e, msg, sizeof(msg)), 0);
    CHECK_EQ(dev_queue_wait_event(q, e, msg, sizeof(msg)), 0);
    dev_event_free(e);
    dev_queue_close(q);
    dev_close(d);
    /* Kinds and devices that do not exist. */
    CHECK_EQ(dev_open(7, 0, &d, msg, sizeof(msg)), -EINVAL);
    CHECK_CONTAINS(msg, "neither host");
    CHECK_EQ(dev_open(DEV_HOST, 1, &d, msg, sizeof(msg)), TIDE_EDEVICE);
    CHECK_EQ(dev_open(DEV_HOST, -1, &d, msg, sizeof(msg)), -EINVAL);
    CHECK(d == NULL);
}

/* No GPU here: the CUDA kind fails to open with a message that says why, whether or not a
 * runtime library can be loaded (without one, "no CUDA runtime"; with one but no driver or
 * GPU, what the runtime answered). */
TEST(device_cuda_without_a_gpu_is_a_clear_error) {
    dev *d = NULL;
    setenv("TIDE_CUDART", "/nonexistent/libcudart.so.13", 1);
    CHECK_EQ(dev_open(DEV_CUDA, 0, &d, msg, sizeof(msg)), TIDE_EDEVICE);
    CHECK_CONTAINS(msg, "no CUDA runtime");
    CHECK_CONTAINS(msg, "/nonexistent/libcudart.so.13");
    unsetenv("TIDE_CUDART");
    int rc = dev_open(DEV_CUDA, 0, &d, msg, sizeof(msg));
    if (rc == 0) { /* a machine with a GPU after all: say what runs (scripts/gpu-check.sh) */
        char desc[512];
        dev_describe(d, desc, sizeof(desc));
        fprintf(stderr, "%s\n", desc);
        dev_close(d);
        return;
    }
    CHECK_EQ(rc, TIDE_EDEVICE);
    CHECK(strlen(msg) > 10);
    CHECK(d == NULL);
}

/* A build without the CUDA headers declares cudaPointerAttributes itself: it must be as
 * large as CUDA 13's (88 bytes: the four fields, then long reserved[8]), which a 13
 * runtime fills whole; it was 12.x's 24 bytes, so the runtime wrote past it on the stack.
 * The room device_cuda.c hands over covers it whatever the headers said. */
TEST(device_cuda_abi_fallback_has_cuda13s_pointer_attributes) {
    struct cudaPointerAttributes a;
    CHECK(sizeof(a) >= 88);
    CHECK_EQ(offsetof(struct cudaPointerAttributes, type), 0);
    CHECK_EQ(offsetof(struct cudaPointerAttributes, device), 4);
    CHECK_EQ(offsetof(struct cudaPointerAttributes, devicePointer), 8);
    CHECK_EQ(offsetof(struct cudaPointerAttributes, hostPointer), 16);
    CHECK(CUDA_ATTR_ROOM >= sizeof(a));
    CHECK_EQ(cudaEventBlockingSync, 0x01);
}

/* libtide.so names no CUDA library: the runtime is only ever dlopen'ed. */
TEST(device_libtide_links_no_cuda) {
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "ldd %s/libtide.so 2>&1", test_build_dir());
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL);
    char line[512];
    int lines = 0;
    while (fgets(line, sizeof(line), p)) {
        lines++;
        CHECK_MSG(!strstr(line, "cuda") && !strstr(line, "libnv"), "libtide links %s", line);
    }
    pclose(p);
    CHECK(lines > 2); /* ldd did list the libraries */
}

TEST(device_test_kind_copies_land_later_in_order) {
    dev *d = open_kind(DEV_CUDA, &dev_test_ops);
    uint8_t *dm = dev_test_alloc(0, 1 << 16);
    CHECK(dm != NULL);
    CHECK_EQ(dev_check(d, dm, 1 << 16, msg, sizeof(msg)), 0);
    uint8_t host[1 << 16];
    CHECK_EQ(dev_check(d, host, sizeof(host), msg, sizeof(msg)), TIDE_EDEVICE);
    CHECK_CONTAINS(msg, "not memory of test device 0");
    CHECK_EQ(dev_check(d, dm, 1 << 20, msg, sizeof(msg)), TIDE_EDEVICE); /* past the allocation */
    dev_queue *q = NULL;
    CHECK_EQ(dev_queue_open(d, &q, msg, sizeof(msg)), 0);
    uint8_t a[4096], b[4096], back[4096];
    fill(a, sizeof(a), 2);
    fill(b, sizeof(b), 3);
    dev_test_set_copy_delay(50000);
    uint64_t t1, t2;
    /* Each copy waits behind a gate on an engine stream, so that what the device memory
     * holds between them can be looked at however slowly this thread runs (a loaded
     * machine, ASan). */
    dev_test_stream *gs = dev_test_stream_new();
    CHECK(gs != NULL);
    dev_test_gate *gate1 = dev_test_stream_gate(gs);
    dev_event *e1 = NULL, *e2 = NULL;
    CHECK_EQ(dev_event_record(d, (uintptr_t)gs, &e1, msg, sizeof(msg)), 0);
    dev_test_gate *gate2 = dev_test_stream_gate(gs);
    CHECK_EQ(dev_event_record(d, (uintptr_t)gs, &e2, msg, sizeof(msg)), 0);
    CHECK_EQ(dev_queue_wait_event(q, e1, msg, sizeof(msg)), 0);
    CHECK_EQ(dev_queue_add(q, dm, a, sizeof(a)), 0);
    CHECK_EQ(dev_queue_flush(q, &t1, msg, sizeof(msg)), 0);
    CHECK_EQ(dev_queue_wait_event(q, e2, msg, sizeof(msg)), 0);
    CHECK_EQ(dev_queue_add(q, dm, b, sizeof(b)), 0); /* the same place: order matters */
    CHECK_EQ(dev_queue_flush(q, &t2, msg, sizeof(msg)), 0);
    CHECK(t2 > t1);
    dev_test_peek(back, dm, sizeof(back));
    CHECK_EQ(back[1], 0); /* issued is not landed */
    dev_test_gate_open(gate1);
    CHECK_EQ(dev_queue_wait(q, t1, msg, sizeof(msg)), 0);
    dev_test_peek(back, dm, sizeof(back));
    CHECK(memcmp(back, a, sizeof(a)) == 0);
    dev_test_gate_open(gate2);
    CHECK_EQ(dev_queue_wait(q, t2, msg, sizeof(msg)), 0);
    dev_event_free(e1);
    dev_event_free(e2);
    dev_test_stream_free(gs);
    dev_test_peek(back, dm, sizeof(back));
    CHECK(memcmp(back, b, sizeof(b)) == 0);
    /* Device to host. */
    dev_test_set_copy_delay(1000);
    memset(host, 0, sizeof(host));
    CHECK_EQ(dev_queue_add(q, host, dm, 4096), 0);
    CHECK_EQ(dev_queue_flush(q, &t1, msg, sizeof(msg)), 0);
    CHECK_EQ(dev_queue_wait(q, t1, msg, sizeof(msg)), 0);
    CHECK(memcmp(host, b, 4096) == 0);
    dev_test_counts n;
    dev_test_get_counts(&n);
    CHECK_EQ(n.copies, 3);
    CHECK_EQ(n.copies_registered, 0);
    dev_queue_close(q);
    dev_close(d);
}

/* A queue waits for an event of an engine stream: the bytes the "forward pass" writes are
 * those it copies, however late the pass runs. */
TEST(device_test_kind_queue_waits_for_the_event) {
    dev *d = open_kind(DEV_CUDA, &dev_test_ops);
    uint8_t *dm = dev_test_alloc(0, 8192);
    dev_test_stream *engine = dev_test_stream_new();
    uint8_t kv[8192], host[8192] = {0};
    fill(kv, sizeof(kv), 4);
    dev_test_stream_write(engine, dm, kv, sizeof(kv), 100000); /* 100 ms of "forward pass" */
    dev_event *e = NULL;
    CHECK_EQ(dev_event_record(d, (uintptr_t)engine, &e, msg, sizeof(msg)), 0);
    dev_queue *q = NULL;
    CHECK_EQ(dev_queue_open(d, &q, msg, sizeof(msg)), 0);
    dev_test_set_copy_delay(0);
    CHECK_EQ(dev_queue_wait_event(q, e, msg, sizeof(msg)), 0);
    dev_event_free(e); /* the queue holds its own reference */
    uint64_t t;
    CHECK_EQ(dev_queue_add(q, host, dm, sizeof(host)), 0);
    CHECK_EQ(dev_queue_flush(q, &t, msg, sizeof(msg)), 0);
    CHECK_EQ(dev_queue_wait(q, t, msg, sizeof(msg)), 0);
    CHECK(memcmp(host, kv, sizeof(kv)) == 0);
    /* The default stream (0) works the same. */
    CHECK_EQ(dev_event_record(d, 0, &e, msg, sizeof(msg)), 0);
    CHECK_EQ(dev_queue_wait_event(q, e, msg, sizeof(msg)), 0);
    dev_event_free(e);
    CHECK_EQ(dev_queue_flush(q, &t, msg, sizeof(msg)), 0);
    CHECK_EQ(dev_queue_wait(q, t, msg, sizeof(msg)), 0);
    dev_queue_close(q);
    dev_test_stream_free(engine);
    dev_close(d);
}

TEST(device_test_kind_failures_are_reported_and_stick) {
    dev *d = open_kind(DEV_CUDA, &dev_test_ops);
    uint8_t *dm = dev_test_alloc(0, 3 * 4096);
    dev_queue *q = NULL;
    CHECK_EQ(dev_queue_open(d, &q, msg, sizeof(msg)), 0);
    uint8_t src[3 * 4096], back[4096];
    fill(src, sizeof(src), 5);
    dev_test_set_copy_delay(100);
    dev_test_fail_copy(2);
    uint64_t t[3];
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(dev_queue_add(q, dm + i * 4096, src + i * 4096, 4096), 0);
        CHECK_EQ(dev_queue_flush(q, &t[i], msg, sizeof(msg)), 0);
    }
    CHECK_EQ(dev_queue_wait(q, t[0], msg, sizeof(msg)), 0);
    CHECK_EQ(dev_queue_wait(q, t[1], msg, sizeof(msg)), TIDE_EDEVICE);
    CHECK_CONTAINS(msg, "failed");
    dev_test_peek(back, dm + 4096, 4096);
    CHECK(memcmp(back, src + 4096, 4096) != 0); /* garbage where it failed */
    /* Later tickets fail too, and so does anything issued after. */
    CHECK_EQ(dev_queue_wait(q, t[2], msg, sizeof(msg)), TIDE_EDEVICE);
    CHECK_EQ(dev_queue_add(q, dm, src, 16), 0);
    uint64_t t4;
    CHECK_EQ(dev_queue_flush(q, &t4, msg, sizeof(msg)), TIDE_EDEVICE);
    dev_queue_close(q);
    /* Host to host is not a device copy: it fails. */
    CHECK_EQ(dev_queue_open(d, &q, msg, sizeof(msg)), 0);
    uint8_t h1[64], h2[64];
    CHECK_EQ(dev_queue_add(q, h1, h2, 64), 0);
    CHECK_EQ(dev_queue_flush(q, &t4, msg, sizeof(msg)), 0);
    CHECK_EQ(dev_queue_wait(q, t4, msg, sizeof(msg)), TIDE_EDEVICE);
    dev_queue_close(q);
    dev_close(d);
}

/* ---- device puts and gets through stores ---------------------------------------------- */

#define NOBJ 12
#define SEG 3000 /* bytes of each of an object's 3 segments */

/* NOBJ objects of 3 segments each in device memory: object i's segments 0 and 1 adjacent
 * (one run), its segment 2 elsewhere. */
typedef struct dev_objs {
    uint8_t *base;
    tide_key keys[NOBJ];
    char text[NOBJ][32];
    tide_iov iov[NOBJ * 3];
    size_t cnt[NOBJ];
    uint8_t want[NOBJ][3 * SEG];
} dev_objs;

static void objs_init(dev_objs *o, unsigned seed, int poke) {
    o->base = dev_test_alloc(0, 3 * NOBJ * SEG);
    CHECK(o->base != NULL);
    for (int i = 0; i < NOBJ; i++) {
        snprintf(o->text[i], sizeof(o->text[i]), "obj-%u-%d", seed, i);
        o->keys[i] = (tide_key){o->text[i], strlen(o->text[i])};
        o->cnt[i] = 3;
        fill(o->want[i], sizeof(o->want[i]), seed * 100 + (unsigned)i);
        for (int s = 0; s < 3; s++) {
            size_t slot = s < 2 ? (size_t)i * 2 + (size_t)s : 2 * NOBJ + (size_t)i;
            uint8_t *p = o->base + slot * SEG;
            o->iov[i * 3 + s] = (tide_iov){p, SEG};
            if (poke) dev_test_poke(p, o->want[i] + s * SEG, SEG);
        }
    }
}

static int objs_hold(const dev_objs *o, int i, const uint8_t *want) {
    uint8_t got[SEG];
    for (int s = 0; s < 3; s++) {
        dev_test_peek(got, o->iov[i * 3 + s].base, SEG);
        if (memcmp(got, want + s * SEG, SEG)) return 0;
    }
    return 1;
}

/* Put NOBJ objects from device memory, read them back on the host, get them into other
 * device memory; then failures: a copy failing mid-put stores nothing wrong, one failing
 * mid-get claims nothing. pool: whether the backend has a pool (copies straight into it). */
static void device_store_cycle(const char *store_url, int pool) {
    tide_store *st = NULL;
    CHECK_EQ(tide_open(store_url, &st), 0);
    CHECK_EQ(tide_clear(st), 0);
    dev *d = open_kind(DEV_CUDA, &dev_test_ops);
    void *pb = NULL;
    uint64_t plen = 0;
    CHECK_EQ(client_pool(st, &pb, &plen) == 0, pool);
    if (pool) CHECK_EQ(dev_host_register(d, pb, plen, msg, sizeof(msg)), 0);
    dev_queue *q = NULL;
    CHECK_EQ(dev_queue_open(d, &q, msg, sizeof(msg)), 0);
    dev_test_set_copy_delay(50);
    static dev_objs src, dst;
    objs_init(&src, 1, 1);
    objs_init(&dst, 1, 0);
    int res[NOBJ];
    size_t lens[NOBJ];
    CHECK_EQ(client_put_many_dev(st, src.keys, NOBJ, src.iov, src.cnt, res, q), NOBJ);
    dev_test_counts n;
    dev_test_get_counts(&n);
    if (pool) {
        CHECK_EQ(n.copies, n.copies_registered); /* every copy went to the registered pool */
        CHECK(n.copies < NOBJ * 3);              /* adjacent segments merged into runs */
    }
    /* The host sees exactly the device's bytes, checksummed (a plain verified get). */
    uint8_t buf[3 * SEG];
    for (int i = 0; i < NOBJ; i++) {
        size_t len = 0;
        CHECK_EQ(tide_get(st, src.keys[i].data, src.keys[i].len, buf, sizeof(buf), &len), 0);
        CHECK_EQ(len, 3 * SEG);
        CHECK_MSG(memcmp(buf, src.want[i], len) == 0, "object %d", i);
    }
    CHECK_EQ(client_get_many_dev(st, src.keys, NOBJ, dst.iov, dst.cnt, res, lens, q), NOBJ);
    for (int i = 0; i < NOBJ; i++) {
        CHECK_EQ(lens[i], 3 * SEG);
        CHECK_MSG(objs_hold(&dst, i, src.want[i]), "object %d", i);
    }
    /* A second put of the same keys copies nothing new and succeeds. */
    CHECK_EQ(client_put_many_dev(st, src.keys, NOBJ, src.iov, src.cnt, res, q), NOBJ);

    /* A copy failing mid-put: the keys it touched are TIDE_EDEVICE and absent; the others
     * hold their exact bytes. */
    static dev_objs o2;
    objs_init(&o2, 2, 1);
    dev_test_fail_copy(3);
    int rc = client_put_many_dev(st, o2.keys, NOBJ, o2.iov, o2.cnt, res, q);
    CHECK(rc >= 0 || rc == TIDE_EDEVICE);
    int failed = 0;
    for (int i = 0; i < NOBJ; i++) {
        size_t len = 0;
        int g = tide_get(st, o2.keys[i].data, o2.keys[i].len, buf, sizeof(buf), &len);
        if (rc < 0 || res[i] != 0) {
            failed++;
            CHECK_EQ(g, TIDE_ENOTFOUND);
        } else {
            CHECK_EQ(g, 0);
            CHECK(memcmp(buf, o2.want[i], 3 * SEG) == 0);
        }
    }
    CHECK(failed > 0);
    dev_queue_close(q); /* failed: a fresh one */
    CHECK_EQ(dev_queue_open(d, &q, msg, sizeof(msg)), 0);

    /* A copy failing mid-get: its keys are not claimed; the claimed ones are exact. */
    static dev_objs d2;
    objs_init(&d2, 3, 0);
    dev_test_fail_copy(2);
    rc = client_get_many_dev(st, src.keys, NOBJ, d2.iov, d2.cnt, res, lens, q);
    CHECK(rc >= 0 || rc == TIDE_EDEVICE);
    failed = 0;
    for (int i = 0; i < NOBJ; i++) {
        if (rc < 0 || res[i] != 0)
            failed++;
        else
            CHECK_MSG(objs_hold(&d2, i, src.want[i]), "object %d claimed with wrong bytes", i);
    }
    CHECK(failed > 0);
    dev_queue_close(q);
    if (pool) dev_host_unregister(d, pb);
    dev_close(d);
    tide_close(st);
}

TEST(device_mem_store_copies_through_the_pool) {
    device_store_cycle("mem://?capacity=8MiB", 1);
}

TEST(device_mem_store_damaged_value_never_reaches_the_device) {
    tide_store *st = NULL;
    CHECK_EQ(tide_open("mem://?capacity=4MiB", &st), 0);
    dev *d = open_kind(DEV_CUDA, &dev_test_ops);
    dev_queue *q = NULL;
    CHECK_EQ(dev_queue_open(d, &q, msg, sizeof(msg)), 0);
    static dev_objs o;
    objs_init(&o, 4, 0);
    uint8_t val[3 * SEG];
    fill(val, sizeof(val), 9);
    CHECK_EQ(tide_put(st, "k", 1, val, sizeof(val)), 0);
    /* Damage the stored bytes in the pool. */
    void *pb;
    uint64_t plen;
    CHECK_EQ(client_pool(st, &pb, &plen), 0);
    uint8_t *p = memmem(pb, plen, val, 64);
    CHECK(p != NULL);
    p[100] ^= 1;
    tide_key k = {"k", 1};
    int res;
    size_t len;
    CHECK_EQ(client_get_many_dev(st, &k, 1, o.iov, o.cnt, &res, &len, q), 0);
    CHECK_EQ(res, TIDE_ENOTFOUND);
    CHECK_EQ(len, 0);
    dev_test_counts n;
    dev_test_get_counts(&n);
    CHECK_EQ(n.copies, 0);                /* nothing was copied to the device */
    CHECK_EQ(tide_exists(st, "k", 1), 0); /* and the damaged object is gone */
    dev_queue_close(q);
    dev_close(d);
    tide_close(st);
}

TEST_T(device_tide_store_is_staged, 60) {
    test_server ts;
    server_start(&ts, NULL);
    device_store_cycle(ts.url, 0);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}

TEST_T(device_unix_store_copies_through_the_mapped_pool, 60) {
    char path[300], uurl[320];
    snprintf(path, sizeof(path), "%s/tide.sock", test_tmpdir());
    snprintf(uurl, sizeof(uurl), "unix://%s", path);
    test_server ts;
    server_start_unix(&ts, path, "16MiB", "warn", NULL);
    device_store_cycle(uurl, 1);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}

/* Checksums on several threads: every value's sum is the one checksum_buf gives, whether
 * it was hashed by a helper or by the caller, released in pieces or all at once; ending
 * with values released and never waited for is fine. */
TEST(device_hashing_on_several_threads) {
    enum { N = 64, LEN = 65536 + 17 };
    uint8_t *buf = malloc((size_t)N * LEN);
    const uint8_t *ptr[N];
    size_t len[N];
    uint64_t sum[N];
    for (int i = 0; i < N; i++) {
        fill(buf + (size_t)i * LEN, LEN, (unsigned)i);
        ptr[i] = buf + (size_t)i * LEN;
        len[i] = LEN - (size_t)i;
    }
    devio_hash_min = 1;
    devio_hasher *h = devio_hash_start(ptr, len, sum, N);
    CHECK(h != NULL);
    for (int i = 0; i < N; i++) {
        if (i % 5 == 0) devio_hash_release(h, (size_t)i + 5);
        devio_hash_wait(h, (size_t)i);
        CHECK_MSG(sum[i] == checksum_buf(ptr[i], len[i]), "value %d", i);
    }
    devio_hash_end(h);
    memset(sum, 0, sizeof(sum));
    h = devio_hash_start(ptr, len, sum, N);
    devio_hash_release(h, N / 2);
    devio_hash_wait(h, 3);
    CHECK(sum[3] == checksum_buf(ptr[3], len[3]));
    devio_hash_end(h); /* the rest abandoned */
    /* Small calls start no helper and still give every sum. */
    devio_hash_min = 1u << 30;
    h = devio_hash_start(ptr, len, sum, 3);
    devio_hash_release(h, 3);
    for (int i = 0; i < 3; i++) {
        devio_hash_wait(h, (size_t)i);
        CHECK(sum[i] == checksum_buf(ptr[i], len[i]));
    }
    devio_hash_end(h);
    free(buf);
}

TEST(device_mem_store_hashes_on_several_threads) {
    devio_hash_min = 1;
    device_store_cycle("mem://?capacity=8MiB", 1);
}

TEST_T(device_unix_store_hashes_on_several_threads, 60) {
    char path[300], uurl[320];
    snprintf(path, sizeof(path), "%s/tide.sock", test_tmpdir());
    snprintf(uurl, sizeof(uurl), "unix://%s", path);
    const char *args[] = {"--capacity", "16MiB",          "--log-level", "warn", "--unix",
                          path,         "--metrics-port", "0",           NULL};
    test_server ts;
    server_start(&ts, args);
    devio_hash_min = 1;
    device_store_cycle(uurl, 1);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}
