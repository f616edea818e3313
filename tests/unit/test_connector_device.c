/*
 * test_connector_device.c — the connector over device regions, with the test device kind in
 * the CUDA kind's place (src/device/device_test.c: "device" memory the host cannot touch,
 * copies that land late on other threads, engine streams whose work runs late too).
 *
 * The rules tested: a save copies what the step's forward pass wrote, however late the pass
 * runs on the engine's stream (the event recorded by start_jobs_stream); a load is reported
 * finished only once its bytes are in the pages; a copy failing mid-batch makes load errors
 * of the blocks involved and never leaves wrong bytes claimed or stored; the store's pool is
 * registered once per pool and released by the last connector; bad regions are refused with
 * a message; and the same round trip through a unix:// tided's mapped pool.
 */
#include <errno.h>
#include <signal.h>
#include <time.h>

#include "connector_rig.h"
#include "device/device.h"
#include "server_util.h"

static const size_t HL = RIG_TIDE_HL;

/* A worker rank whose KV pages are in test device memory: per layer one tensor of shape
 * (2, nblocks, page / 2) (K and V planes). */
typedef struct drank {
    tide_connector *w;
    uint8_t *mem[4];
    size_t page;
    int layers;
    int64_t nblocks;
} drank;

static int drank_open(drank *r, const char *json, tide_store *st, int64_t nblocks, int layers) {
    memset(r, 0, sizeof(*r));
    r->w = rig_open(json, st, TIDE_CONNECTOR_WORKER);
    r->layers = layers;
    r->nblocks = nblocks;
    r->page = (size_t)r->w->cfg.groups[0].page_bytes;
    for (int l = 0; l < layers; l++) {
        size_t bytes = r->page * (size_t)nblocks;
        r->mem[l] = dev_test_alloc(0, bytes);
        CHECK(r->mem[l] != NULL);
        int64_t shape[3] = {2, nblocks, (int64_t)r->page / 2};
        int64_t strides[3] = {nblocks * (int64_t)r->page / 2, (int64_t)r->page / 2, 1};
        int rc = tide_connector_register_device_region(r->w, 0, TIDE_MEM_CUDA, 0, r->mem[l], bytes,
                                                       nblocks, 3, shape, strides, 1);
        if (rc) return rc;
    }
    return 0;
}

static uint8_t *dat(drank *r, int l, int p, int64_t b) {
    return r->mem[l] + (size_t)p * (size_t)r->nblocks * (r->page / 2) + (size_t)b * (r->page / 2);
}

/* The "forward pass": write block b's pattern into every plane on the engine stream, late. */
static void forward(drank *r, dev_test_stream *engine, int64_t b, uint64_t seed, unsigned us) {
    uint8_t buf[4096];
    for (int l = 0; l < r->layers; l++)
        for (int p = 0; p < 2; p++) {
            for (size_t i = 0; i < r->page / 2; i++)
                buf[i] = rig_pattern(seed, 0, b, l, p, i);
            dev_test_stream_write(engine, dat(r, l, p, b), buf, r->page / 2, us);
        }
}

/* Block b of r holds the pattern of (seed, block pb). */
static int holds(drank *r, int64_t b, uint64_t seed, int64_t pb) {
    uint8_t buf[4096];
    for (int l = 0; l < r->layers; l++)
        for (int p = 0; p < 2; p++) {
            dev_test_peek(buf, dat(r, l, p, b), r->page / 2);
            for (size_t i = 0; i < r->page / 2; i++)
                if (buf[i] != rig_pattern(seed, 0, pb, l, p, i)) return 0;
        }
    return 1;
}

/* Build a step's metadata and start it on worker w (not waiting). */
static void start(tide_connector *s, tide_connector *w, dev_test_stream *engine) {
    tide_connector_meta *m = NULL;
    CHECK_EQ(tide_connector_build_meta(s, &m), 0);
    CHECK(tide_connector_start_jobs_stream(w, m, TIDE_CONNECTOR_LOAD | TIDE_CONNECTOR_SAVE,
                                           (uint64_t)(uintptr_t)engine) >= 0);
    tide_connector_meta_free(m);
}

#define NB 64 /* blocks per rank */
#define PB 10 /* blocks of the prompt: 160 tokens */

typedef struct pair {
    tide_store *st;
    tide_connector *s;
    drank prod, cons;
    uint8_t *h;
    size_t nh;
    dev_test_stream *engine;
} pair;

static void pair_open(pair *p, const char *url) {
    memset(p, 0, sizeof(*p));
    dev_set_ops(DEV_CUDA, &dev_test_ops);
    CHECK_EQ(tide_open(url, &p->st), 0);
    CHECK_EQ(tide_clear(p->st), 0);
    const char *json = rig_doc(16, "", "", "kv_both", "", R_FULL(16));
    p->s = rig_open(json, p->st, TIDE_CONNECTOR_SCHEDULER);
    CHECK_EQ(drank_open(&p->prod, json, p->st, NB, 2), 0);
    CHECK_EQ(drank_open(&p->cons, json, p->st, NB, 2), 0);
    p->h = rig_prompt_hashes(1, PB * 16 + 5, 16, &p->nh);
    p->engine = dev_test_stream_new();
}

static void pair_close(pair *p) {
    tide_connector_destroy(p->prod.w);
    tide_connector_destroy(p->cons.w);
    tide_connector_destroy(p->s);
    dev_test_stream_free(p->engine);
    free(p->h);
    tide_close(p->st);
}

/* Producer request "p": a forward pass that writes blocks 3.. late on the engine stream,
 * then at once its save, started on that stream. */
static void produce(pair *p, unsigned late_us) {
    int32_t ids[PB + 1];
    for (int i = 0; i <= PB; i++)
        ids[i] = 3 + i;
    size_t cnt = PB + 1;
    int64_t ntok = PB * 16 + 5, n = -1;
    CHECK_EQ(tide_connector_lookup(p->s, "p", ntok, p->h, p->nh, HL, 0, &n), 0);
    CHECK_EQ(tide_connector_update_after_alloc(p->s, "p", ids, &cnt, 1, 0), 0);
    CHECK_EQ(tide_connector_request_step(p->s, "p", ntok, ntok, p->h, p->nh, HL, ids, &cnt, 1, 1),
             0);
    for (int i = 0; i < PB; i++)
        forward(&p->prod, p->engine, 3 + i, 42, i == 0 ? late_us : 0);
    start(p->s, p->prod.w, p->engine);
    CHECK_EQ(tide_connector_wait(p->prod.w), 0);
    CHECK_EQ(tide_connector_request_finished(p->s, "p"), 1);
    start(p->s, p->prod.w, p->engine);
    CHECK_STR(rig_finished(p->prod.w, TIDE_CONNECTOR_SAVE), "p");
}

/* Consumer request "c": look up and arm the load into blocks 30..; returns the hit. */
static int64_t consume_arm(pair *p) {
    int32_t ids[PB + 1];
    for (int i = 0; i <= PB; i++)
        ids[i] = 30 + i;
    size_t cnt = PB + 1;
    int64_t ntok = PB * 16 + 5, n = -1;
    CHECK_EQ(tide_connector_lookup(p->s, "c", ntok, p->h, p->nh, HL, 0, &n), 0);
    CHECK_EQ(tide_connector_update_after_alloc(p->s, "c", ids, &cnt, 1, n), 0);
    CHECK_EQ(tide_connector_request_step(p->s, "c", ntok, ntok, p->h, p->nh, HL, ids, &cnt, 1, 1),
             0);
    return n;
}

static void device_round_trip(const char *url) {
    pair p;
    pair_open(&p, url);
    dev_test_set_copy_delay(100);
    /* The forward pass runs 100 ms late: a save that did not wait for it would store the
     * zeros the pages held before. */
    produce(&p, 100000);
    CHECK_EQ(consume_arm(&p), PB * 16);
    start(p.s, p.cons.w, p.engine);
    CHECK_EQ(tide_connector_wait(p.cons.w), 0);
    CHECK_STR(rig_finished(p.cons.w, TIDE_CONNECTOR_LOAD), "c");
    int32_t errs[16];
    CHECK_EQ(tide_connector_get_load_errors(p.cons.w, errs, 16), 0);
    for (int i = 0; i < PB; i++)
        CHECK_MSG(holds(&p.cons, 30 + i, 42, 3 + i), "block %d", i);
    CHECK(!holds(&p.cons, 30 + PB, 42, 3 + PB)); /* the partial block is computed */
    tide_connector_stats cs;
    CHECK_EQ(tide_connector_get_stats(p.cons.w, &cs, sizeof cs), 0);
    CHECK_EQ(cs.loaded_objects, PB);
    CHECK_EQ(cs.load_get.calls, 1);
    /* The host sees the same bytes through a plain get (checksummed where they landed). */
    dev_test_counts n;
    dev_test_get_counts(&n);
    CHECK_EQ(n.copies, n.copies_registered); /* all of them into or out of the pool */
    CHECK_EQ(n.registrations, 1);            /* two workers on one pool: registered once */
    CHECK_EQ(n.registered_now, 1);
    pair_close(&p);
    dev_test_get_counts(&n);
    CHECK_EQ(n.registered_now, 0); /* the last one out released it */
}

TEST(connector_device_round_trip_mem) {
    device_round_trip("mem://?capacity=16MiB");
}

TEST_T(connector_device_round_trip_unix, 60) {
    char path[300], uurl[320];
    snprintf(path, sizeof(path), "%s/tide.sock", test_tmpdir());
    snprintf(uurl, sizeof(uurl), "unix://%s", path);
    test_server ts;
    server_start_unix(&ts, path, "16MiB", "warn", NULL);
    device_round_trip(uurl);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}

/* get_finished(LOAD) names the request only once every byte of its load is in the pages. */
TEST(connector_device_load_reported_after_its_bytes_land) {
    pair p;
    pair_open(&p, "mem://?capacity=16MiB");
    dev_test_set_copy_delay(100);
    produce(&p, 0);
    CHECK_EQ(consume_arm(&p), PB * 16);
    dev_test_set_copy_delay(3000); /* each copy 3 ms: the load takes well over 100 ms */
    start(p.s, p.cons.w, p.engine);
    struct timespec ts = {0, 200000};
    const char *done = "";
    for (int i = 0; i < 100000 && !done[0]; i++) {
        done = rig_finished(p.cons.w, TIDE_CONNECTOR_LOAD);
        if (!done[0]) nanosleep(&ts, NULL);
    }
    CHECK_STR(done, "c");
    for (int i = 0; i < PB; i++)
        CHECK_MSG(holds(&p.cons, 30 + i, 42, 3 + i), "block %d not there when reported", i);
    CHECK_EQ(tide_connector_wait(p.cons.w), 0);
    pair_close(&p);
}

/* A load into blocks that a forward pass still in flight on the engine's stream writes
 * (the scheduler handed the consumer blocks a preempted or finished request had, and the
 * engine's CPU ran ahead of its GPU): the load's copies wait for that pass, so the loaded
 * bytes are what the pages hold once both are done. Before the fix only saves waited: the
 * load landed first and the late pass overwrote a load already reported good. */
TEST(connector_device_load_waits_for_the_engines_earlier_writes) {
    pair p;
    pair_open(&p, "mem://?capacity=16MiB");
    dev_test_set_copy_delay(100);
    produce(&p, 0);
    CHECK_EQ(consume_arm(&p), PB * 16);
    /* The previous owner's forward pass, queued before the load and landing 100 ms late. */
    for (int i = 0; i < PB; i++)
        forward(&p.cons, p.engine, 30 + i, 7, i == 0 ? 100000 : 0);
    start(p.s, p.cons.w, p.engine);
    CHECK_EQ(tide_connector_wait(p.cons.w), 0);
    CHECK_STR(rig_finished(p.cons.w, TIDE_CONNECTOR_LOAD), "c");
    int32_t errs[16];
    CHECK_EQ(tide_connector_get_load_errors(p.cons.w, errs, 16), 0);
    dev_test_stream_sync(p.engine); /* every write of the engine has landed too */
    for (int i = 0; i < PB; i++)
        CHECK_MSG(holds(&p.cons, 30 + i, 42, 3 + i), "block %d: the late forward pass won", i);
    pair_close(&p);
}

/* A copy failing in the middle of a load: the blocks involved are load errors; every
 * block not reported holds exactly the saved bytes; the connector keeps working. */
TEST(connector_device_failed_load_copies_are_load_errors) {
    pair p;
    pair_open(&p, "mem://?capacity=16MiB");
    dev_test_set_copy_delay(50);
    produce(&p, 0);
    CHECK_EQ(consume_arm(&p), PB * 16);
    dev_test_fail_copy(5);
    start(p.s, p.cons.w, p.engine);
    CHECK_EQ(tide_connector_wait(p.cons.w), 0);
    CHECK_STR(rig_finished(p.cons.w, TIDE_CONNECTOR_LOAD), "c"); /* reported, with errors */
    int32_t errs[64];
    int ne = tide_connector_get_load_errors(p.cons.w, errs, 64);
    CHECK(ne > 0);
    int bad[NB] = {0};
    for (int i = 0; i < ne; i++) {
        CHECK(errs[i] >= 30 && errs[i] < 30 + PB);
        bad[errs[i]] = 1;
    }
    for (int i = 0; i < PB; i++)
        if (!bad[30 + i]) CHECK_MSG(holds(&p.cons, 30 + i, 42, 3 + i), "block %d", i);
    /* The next load on the same connector works (a fresh queue). */
    CHECK_EQ(tide_connector_request_finished(p.s, "c"), 0);
    int32_t ids[PB + 1];
    for (int i = 0; i <= PB; i++)
        ids[i] = 45 + i;
    size_t cnt = PB + 1;
    int64_t ntok = PB * 16 + 5, n = -1;
    CHECK_EQ(tide_connector_lookup(p.s, "c2", ntok, p.h, p.nh, HL, 0, &n), 0);
    CHECK_EQ(n, PB * 16);
    CHECK_EQ(tide_connector_update_after_alloc(p.s, "c2", ids, &cnt, 1, n), 0);
    CHECK_EQ(tide_connector_request_step(p.s, "c2", ntok, ntok, p.h, p.nh, HL, ids, &cnt, 1, 1), 0);
    start(p.s, p.cons.w, p.engine);
    CHECK_EQ(tide_connector_wait(p.cons.w), 0);
    CHECK_EQ(tide_connector_get_load_errors(p.cons.w, errs, 64), 0);
    for (int i = 0; i < PB; i++)
        CHECK_MSG(holds(&p.cons, 45 + i, 42, 3 + i), "block %d", i);
    pair_close(&p);
}

/* A copy failing in the middle of a save stores nothing wrong: whatever a later lookup
 * finds loads bit-exact, and the missing blocks are simply not hits. */
TEST(connector_device_failed_save_stores_nothing_wrong) {
    pair p;
    pair_open(&p, "mem://?capacity=16MiB");
    dev_test_set_copy_delay(50);
    dev_test_fail_copy(4);
    produce(&p, 0);
    tide_stats ss;
    CHECK_EQ(tide_stats_get(p.st, &ss, sizeof(ss)), 0);
    CHECK(ss.objects < PB); /* the failed chunk was not committed */
    dev_test_fail_copy(0);
    int64_t hit = consume_arm(&p);
    start(p.s, p.cons.w, p.engine);
    CHECK_EQ(tide_connector_wait(p.cons.w), 0);
    int32_t errs[64];
    CHECK_EQ(tide_connector_get_load_errors(p.cons.w, errs, 64), 0);
    for (int64_t i = 0; i < hit / 16; i++)
        CHECK_MSG(holds(&p.cons, 30 + i, 42, 3 + i), "block %lld", (long long)i);
    pair_close(&p);
}

TEST(connector_device_bad_regions_are_refused) {
    dev_set_ops(DEV_CUDA, &dev_test_ops);
    tide_store *st = NULL;
    CHECK_EQ(tide_open("mem://?capacity=4MiB", &st), 0);
    const char *json = rig_doc(16, "", "", "kv_both", "", R_FULL(16));
    tide_connector *w = rig_open(json, st, TIDE_CONNECTOR_WORKER);
    size_t page = (size_t)w->cfg.groups[0].page_bytes, bytes = page * 8;
    uint8_t *host = calloc(1, bytes);
    uint8_t *dm = dev_test_alloc(0, bytes);
    /* Host memory named as device memory. */
    CHECK_EQ(tide_connector_register_device_region(w, 0, TIDE_MEM_CUDA, 0, host, bytes, 8, 0, NULL,
                                                   NULL, 0),
             TIDE_EDEVICE);
    CHECK_CONTAINS(tide_connector_errmsg(w), "not memory of test device 0");
    /* A device that does not exist; a kind that does not; host memory on device 1. */
    CHECK_EQ(tide_connector_register_device_region(w, 0, TIDE_MEM_CUDA, 9, dm, bytes, 8, 0, NULL,
                                                   NULL, 0),
             TIDE_EDEVICE);
    CHECK_CONTAINS(tide_connector_errmsg(w), "does not exist");
    CHECK_EQ(tide_connector_register_device_region(w, 0, 5, 0, dm, bytes, 8, 0, NULL, NULL, 0),
             -EINVAL);
    CHECK_EQ(tide_connector_register_device_region(w, 0, TIDE_MEM_HOST, 1, host, bytes, 8, 0, NULL,
                                                   NULL, 0),
             -EINVAL);
    /* A layout error is the same -EINVAL as for host regions. */
    CHECK_EQ(tide_connector_register_device_region(w, 0, TIDE_MEM_CUDA, 0, dm, bytes, 7, 0, NULL,
                                                   NULL, 0),
             -EINVAL);
    /* The first good region decides the memory: a host region after it is refused. */
    CHECK_EQ(tide_connector_register_device_region(w, 0, TIDE_MEM_CUDA, 0, dm, bytes, 8, 0, NULL,
                                                   NULL, 0),
             0);
    CHECK_EQ(tide_connector_register_region(w, 0, host, bytes, 8, 0, NULL, NULL, 0), -EINVAL);
    CHECK_CONTAINS(tide_connector_errmsg(w), "same memory");
    tide_connector_destroy(w);

    /* The real CUDA kind on this machine (no GPU): a clear error at registration only; the
     * connector goes on with host regions. */
    dev_set_ops(DEV_CUDA, NULL);
    w = rig_open(json, st, TIDE_CONNECTOR_WORKER);
    CHECK_EQ(tide_connector_register_device_region(w, 0, TIDE_MEM_CUDA, 0, host, bytes, 8, 0, NULL,
                                                   NULL, 0),
             TIDE_EDEVICE);
    CHECK_CONTAINS(tide_connector_errmsg(w), "cuda");
    CHECK_EQ(tide_connector_register_device_region(w, 0, TIDE_MEM_HOST, 0, host, bytes, 8, 0, NULL,
                                                   NULL, 0),
             0);
    tide_connector_destroy(w);
    free(host);
    tide_close(st);
}
