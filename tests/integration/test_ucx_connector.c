/*
 * test_ucx_connector.c — the vLLM connector over tide://...?transport=ucx against a real
 * tided on loopback (UCX_TLS=tcp, UCX_NET_DEVICES=lo): the connector declares its regions
 * to UCX once (each UCX context registers each region once and every save and load reuses
 * that registration; destroy drops them), and device regions (the test device kind in the
 * CUDA kind's place) over a UCX without CUDA memory take the staged path, say so with the
 * reason, and move through the job threads' staging buffers, registered once each; and a
 * cluster of two nodes registers each region at most once per node.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "server_util.h"
#include "tide.h"

#ifdef TIDE_HAVE_UCX
#include "client/ucx.h"
#include "cluster_util.h"
#include "connector/connector.h"
#include "device/device.h"
#include "unit/connector_rig.h"
#include "ucx_util.h"

/* The transports of the same-host endpoint's tests (UCX 1.22: posix, cma). */
#define SHM_TLS "posix,cma,self,tcp"

static void ucx_env(const char *tls) {
    ucx_test_env(tls);
    /* Values of 32 KiB pieces go by rendezvous both ways (the receive side then uses the
     * registration too), whatever UCX's own threshold for TCP is. */
    setenv("UCX_RNDV_THRESH", "8192", 1);
}

/* One group, two layers, 8 KV heads of 128 in float16, 16 tokens a block: 64 KiB pages,
 * each a K and a V plane of 32 KiB (a value is 4 pieces: 2 layers x 2 planes). */
#define GROUP                                                                                      \
    "{\"kv_cache_spec\":{\"type\":\"FullAttentionSpec\",\"block_size\":16,\"num_kv_heads\":8,"     \
    "\"head_size\":128,\"dtype\":\"float16\"},\"layer_names\":[\"a0\",\"a1\"]}"
#define LAYERS 2
#define NBLOCKS 32
#define ROUNDS 4
#define HL RIG_TIDE_HL

/* A worker rank: per layer one tensor (2, NBLOCKS, page / 2), in host or test-device memory. */
typedef struct urank {
    tide_connector *w;
    uint8_t *mem[LAYERS];
    int dev;
    size_t page;
} urank;

static void urank_open(urank *r, const char *json, tide_store *st, int on_dev) {
    memset(r, 0, sizeof(*r));
    r->w = rig_open(json, st, TIDE_CONNECTOR_WORKER);
    r->dev = on_dev;
    r->page = (size_t)r->w->cfg.groups[0].page_bytes;
    CHECK_EQ(r->page, 65536);
    for (int l = 0; l < LAYERS; l++) {
        size_t bytes = r->page * NBLOCKS;
        r->mem[l] = on_dev ? dev_test_alloc(0, bytes) : calloc(1, bytes);
        CHECK(r->mem[l] != NULL);
        int64_t shape[3] = {2, NBLOCKS, (int64_t)r->page / 2};
        int64_t strides[3] = {NBLOCKS * (int64_t)r->page / 2, (int64_t)r->page / 2, 1};
        int rc = on_dev
                     ? tide_connector_register_device_region(r->w, 0, TIDE_MEM_CUDA, 0, r->mem[l],
                                                             bytes, NBLOCKS, 3, shape, strides, 1)
                     : tide_connector_register_region(r->w, 0, r->mem[l], bytes, NBLOCKS, 3, shape,
                                                      strides, 1);
        CHECK_MSG(rc == 0, "register: %s", tide_connector_errmsg(r->w));
    }
}

static void urank_close(urank *r) {
    tide_connector_destroy(r->w);
    if (!r->dev)
        for (int l = 0; l < LAYERS; l++)
            free(r->mem[l]);
}

static uint8_t *plane(urank *r, int l, int p, int64_t b) {
    return r->mem[l] + (size_t)p * NBLOCKS * (r->page / 2) + (size_t)b * (r->page / 2);
}

static void pattern(uint8_t *buf, size_t n, uint64_t seed, int64_t k, int l, int p) {
    for (size_t i = 0; i < n; i++)
        buf[i] = (uint8_t)(i * 31 + (size_t)k * 7 + (size_t)l * 13 + (size_t)p * 5 + seed * 101);
}

/* Block b of r gets the pattern of (seed, k). */
static void fill(urank *r, int64_t b, uint64_t seed, int64_t k) {
    static uint8_t buf[32768];
    for (int l = 0; l < LAYERS; l++)
        for (int p = 0; p < 2; p++) {
            pattern(buf, r->page / 2, seed, k, l, p);
            if (r->dev)
                dev_test_poke(plane(r, l, p, b), buf, r->page / 2);
            else
                memcpy(plane(r, l, p, b), buf, r->page / 2);
        }
}

/* Block b of r holds the pattern of (seed, k). */
static int holds(urank *r, int64_t b, uint64_t seed, int64_t k) {
    static uint8_t want[32768], got[32768];
    for (int l = 0; l < LAYERS; l++)
        for (int p = 0; p < 2; p++) {
            pattern(want, r->page / 2, seed, k, l, p);
            if (r->dev)
                dev_test_peek(got, plane(r, l, p, b), r->page / 2);
            else
                memcpy(got, plane(r, l, p, b), r->page / 2);
            if (memcmp(want, got, r->page / 2)) return 0;
        }
    return 1;
}

/* One scheduler step started on worker r (stream 0) and waited for. */
static void step(tide_connector *s, urank *r) {
    tide_connector_meta *m = NULL;
    CHECK_EQ(tide_connector_build_meta(s, &m), 0);
    CHECK(tide_connector_start_jobs(r->w, m, TIDE_CONNECTOR_LOAD | TIDE_CONNECTOR_SAVE) >= 0);
    CHECK_EQ(tide_connector_wait(r->w), 0);
    tide_connector_meta_free(m);
}

/* Round k: rank prod computes a 100-token prompt of its own in blocks 3..9 and saves it;
 * rank cons loads it into blocks 20..26; the 6 full blocks must come back exact. */
static void save_and_load(tide_connector *s, urank *prod, urank *cons, int k, uint64_t *load_hits) {
    char pid[16], cid[16];
    snprintf(pid, sizeof(pid), "p%d", k);
    snprintf(cid, sizeof(cid), "c%d", k);
    size_t nh;
    uint8_t *h = rig_prompt_hashes((uint32_t)(k + 1), 100, 16, &nh);
    int32_t pb[7] = {3, 4, 5, 6, 7, 8, 9}, cb[7] = {20, 21, 22, 23, 24, 25, 26};
    size_t cnt = 7;
    for (int i = 0; i < 7; i++)
        fill(prod, pb[i], (uint64_t)k + 1, i);
    int64_t n = -1;
    CHECK_EQ(tide_connector_lookup(s, pid, 100, h, nh, HL, 0, &n), 0);
    CHECK_EQ(n, 0);
    CHECK_EQ(tide_connector_update_after_alloc(s, pid, pb, &cnt, 1, 0), 0);
    CHECK_EQ(tide_connector_request_step(s, pid, 100, 100, h, nh, HL, pb, &cnt, 1, 1), 0);
    step(s, prod);
    CHECK_EQ(tide_connector_request_finished(s, pid), 1);
    step(s, prod);
    CHECK_STR(rig_finished(prod->w, TIDE_CONNECTOR_SAVE), pid);

    CHECK_EQ(tide_connector_lookup(s, cid, 100, h, nh, HL, 0, &n), 0);
    CHECK_EQ(n, 96);
    CHECK_EQ(tide_connector_update_after_alloc(s, cid, cb, &cnt, 1, 96), 0);
    CHECK_EQ(tide_connector_request_step(s, cid, 100, 100, h, nh, HL, cb, &cnt, 1, 1), 0);
    uint64_t m0, h0, u0, f0, m1, h1, u1, f1;
    tucx_reg_counts(&m0, &h0, &u0, &f0);
    step(s, cons);
    tucx_reg_counts(&m1, &h1, &u1, &f1);
    *load_hits += h1 - h0;
    CHECK_STR(rig_finished(cons->w, TIDE_CONNECTOR_LOAD), cid);
    int32_t errs[8];
    CHECK_EQ(tide_connector_get_load_errors(cons->w, errs, 8), 0);
    for (int i = 0; i < 6; i++)
        CHECK_MSG(holds(cons, cb[i], (uint64_t)k + 1, i), "round %d: block %d came back wrong", k,
                  i);
    tide_connector_stats cs;
    CHECK_EQ(tide_connector_get_stats(cons->w, &cs, sizeof cs), 0);
    CHECK_EQ(cs.load_errors, 0);
    CHECK_EQ(tide_connector_request_finished(s, cid), 0);
    free(h);
}

typedef struct rig {
    test_server ts;
    tide_store *st;
    tide_connector *s;
    urank prod, cons;
} rig;

/* The connectors (a scheduler, two worker ranks) on the store at u. */
static void rig_on(rig *g, const char *u, int on_dev) {
    CHECK_MSG(tide_open(u, &g->st) == 0, "open: %s", tide_errmsg(NULL));
    const char *json = rig_doc(16, "", "", "kv_both", "", GROUP);
    g->s = rig_open(json, g->st, TIDE_CONNECTOR_SCHEDULER);
    urank_open(&g->prod, json, g->st, on_dev);
    urank_open(&g->cons, json, g->st, on_dev);
}

static void rig_up(rig *g, int on_dev, const char *tls) {
    ucx_env(tls);
    if (on_dev) dev_set_ops(DEV_CUDA, &dev_test_ops);
    server_start(&g->ts, ucx_test_with_ucx);
    char u[160];
    snprintf(u, sizeof(u), "tide://127.0.0.1:%d?transport=ucx", g->ts.port);
    rig_on(g, u, on_dev);
}

static void rig_down(rig *g) {
    tide_connector_destroy(g->s);
    tide_close(g->st);
    CHECK_EQ(server_stop(&g->ts, SIGTERM), 0);
}

/* w declared its LAYERS regions to UCX; then ROUNDS saves and loads: how many loads found
 * their region's registration. */
static uint64_t declared_then_rounds(rig *g, tide_connector *w) {
    size_t regions = 0;
    int path = -1;
    char why[ERR_MSG_MAX];
    connector_ucx_figures(w, &regions, &path, why, sizeof(why));
    CHECK_EQ(regions, LAYERS);
    uint64_t load_hits = 0;
    for (int k = 0; k < ROUNDS; k++)
        save_and_load(g->s, &g->prod, &g->cons, k, &load_hits);
    return load_hits;
}

/* Host regions: 4 regions (2 ranks x 2 layers) registered with UCX once each, for
 * ROUNDS saves and loads of 6 values in 4 pieces; every save and every load used those
 * registrations; none dropped until the connectors go, then all four. The values go by
 * RMA on the same-host endpoint (UCX 1.22), where every piece carries its region's
 * registration: active messages send a value in several pieces as one UCX iov that UCX
 * registers itself. */
TEST_T(ucx_connector_registers_regions_once, 120) {
    ucx_test_with_new_ucx(SHM_TLS);
    rig g;
    uint64_t m0, h0, u0, f0;
    tucx_reg_counts(&m0, &h0, &u0, &f0);
    rig_up(&g, 0, SHM_TLS);
    uint64_t load_hits = declared_then_rounds(&g, g.prod.w);
    uint64_t m1, h1, u1, f1;
    tucx_reg_counts(&m1, &h1, &u1, &f1);
    CHECK_MSG(m1 - m0 == 2 * LAYERS && u1 == u0,
              "%d saves and %d loads of %d values: %llu registrations (want %d, one per region), "
              "%llu dropped",
              ROUNDS, ROUNDS, 6, (unsigned long long)(m1 - m0), 2 * LAYERS,
              (unsigned long long)(u1 - u0));
    /* Each piece of each value saved found its region's registration; loads too. */
    CHECK_MSG(h1 - h0 >= (uint64_t)ROUNDS * 6 * 2 * LAYERS && load_hits >= ROUNDS * 6,
              "registrations reused %llu times (%llu by loads)", (unsigned long long)(h1 - h0),
              (unsigned long long)load_hits);
    const uint8_t *base = g.prod.mem[0];
    size_t bytes = g.prod.page * NBLOCKS;
    urank_close(&g.cons);
    urank_close(&g.prod);
    uint64_t m2, h2, u2, f2;
    tucx_reg_counts(&m2, &h2, &u2, &f2);
    CHECK_MSG(u2 - u1 == 2 * LAYERS, "destroy dropped %llu of the %d registrations",
              (unsigned long long)(u2 - u1), 2 * LAYERS);
    CHECK_EQ(tide_buffer_unregister(base, bytes), TIDE_ENOTFOUND); /* undeclared */
    rig_down(&g);
}

/* The same over a cluster of two nodes with replicas=2: every save writes both nodes, so
 * each node's UCX context registers the producer's 2 regions once; loads read one node
 * per value, so the consumer's regions are registered by one or both; at most one
 * registration per region per node, none dropped until destroy, then all. */
TEST_T(ucx_connector_cluster_registers_regions_once_per_node, 180) {
    ucx_test_with_new_ucx(SHM_TLS); /* the same-host endpoint's RMA, as above */
    ucx_env(SHM_TLS);
    const char *const extra[] = {"--ucx-port", "0", NULL};
    test_server ts[2];
    cluster_start_nodes_with(ts, 2, NULL, extra);
    char u[512];
    cluster_url(u, sizeof(u), ts, 2, "replicas=2&transport=ucx");
    uint64_t m0, h0, u0, f0;
    tucx_reg_counts(&m0, &h0, &u0, &f0);
    rig g;
    rig_on(&g, u, 0);
    uint64_t load_hits = declared_then_rounds(&g, g.cons.w);
    uint64_t m1, h1, u1, f1;
    tucx_reg_counts(&m1, &h1, &u1, &f1);
    CHECK_MSG(m1 - m0 >= 2 * LAYERS + LAYERS && m1 - m0 <= 2 * 2 * LAYERS && u1 == u0,
              "%d rounds over 2 nodes: %llu registrations of %d regions (want 1 or 2 per "
              "region), %llu dropped",
              ROUNDS, (unsigned long long)(m1 - m0), 2 * LAYERS, (unsigned long long)(u1 - u0));
    CHECK_MSG(load_hits >= ROUNDS * 6, "loads reused registrations %llu times",
              (unsigned long long)load_hits);
    urank_close(&g.cons);
    urank_close(&g.prod);
    tide_connector_destroy(g.s);
    tide_close(g.st);
    uint64_t m2, h2, u2, f2;
    tucx_reg_counts(&m2, &h2, &u2, &f2);
    CHECK_MSG(u2 - u0 == m2 - m0, "%llu registrations, %llu dropped after destroy",
              (unsigned long long)(m2 - m0), (unsigned long long)(u2 - u0));
    for (int i = 0; i < 2; i++)
        CHECK_EQ(server_stop(&ts[i], SIGTERM), 0);
}

/* Device regions over Debian's UCX (no CUDA memory): the staged path, named with its
 * reason; the values move through the job threads' staging buffers, each registered once
 * (at most one per job thread of each worker) and reused; the GPU regions are declared
 * but never registered (this UCX cannot); the bytes are exact; destroy drops everything. */
TEST_T(ucx_connector_gpu_regions_staged_without_cuda_ucx, 120) {
    rig g;
    uint64_t m0, h0, u0, f0;
    tucx_reg_counts(&m0, &h0, &u0, &f0);
    uint64_t direct0 = tucx_dev_values();
    rig_up(&g, 1, "tcp");
    dev_test_set_copy_delay(50);
    uint64_t load_hits = 0;
    for (int k = 0; k < ROUNDS; k++)
        save_and_load(g.s, &g.prod, &g.cons, k, &load_hits);
    size_t regions = 0;
    int path = -1;
    char why[ERR_MSG_MAX];
    connector_ucx_figures(g.prod.w, &regions, &path, why, sizeof(why));
    CHECK_EQ(regions, LAYERS);
    CHECK_MSG(path == CONNECTOR_GPU_STAGED, "path %d (%s)", path, why);
    CHECK_MSG(strstr(why, "CUDA memory not supported by this UCX (memory types: host") &&
                  strstr(why, "staged through the pinned pool"),
              "reason: '%s'", why);
    connector_ucx_figures(g.cons.w, &regions, &path, why, sizeof(why));
    CHECK_EQ(path, CONNECTOR_GPU_STAGED);
    CHECK_EQ(tucx_dev_values(), direct0); /* nothing went straight */
    uint64_t m1, h1, u1, f1;
    tucx_reg_counts(&m1, &h1, &u1, &f1);
    CHECK_MSG(m1 - m0 >= 1 && m1 - m0 <= 2 * CONNECTOR_THREADS && u1 == u0,
              "%d rounds: %llu registrations (staging buffers: 1 to %d), %llu dropped", ROUNDS,
              (unsigned long long)(m1 - m0), 2 * CONNECTOR_THREADS, (unsigned long long)(u1 - u0));
    /* Every value put and got went through a registered staging buffer: the first use of
     * each buffer registered it, every later one found it. */
    CHECK_MSG(h1 - h0 + (m1 - m0) >= (uint64_t)ROUNDS * 6 * 2 && load_hits >= (ROUNDS - 1) * 6,
              "staging registrations reused %llu times (%llu by loads)",
              (unsigned long long)(h1 - h0), (unsigned long long)load_hits);
    urank_close(&g.cons);
    urank_close(&g.prod);
    uint64_t m2, h2, u2, f2;
    tucx_reg_counts(&m2, &h2, &u2, &f2);
    CHECK_MSG(u2 - u0 == m2 - m0, "%llu registrations, %llu dropped after destroy",
              (unsigned long long)(m2 - m0), (unsigned long long)(u2 - u0));
    rig_down(&g);
}

#else
TEST(ucx_connector_built_without_ucx_headers) {
    TEST_SKIP("built without UCX's headers (libucx-dev)");
}
#endif
