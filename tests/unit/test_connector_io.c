/*
 * test_connector_io.c — the whole job lifecycle: a producer rank saves a prompt's blocks,
 * a consumer rank looks them up and loads them into other block ids, bit-exact — through
 * mem:// and through a real tided over tide:// — with hybrid Mamba snapshots by the
 * retention rule, sliding windows, per-block load errors (a block removed or replaced
 * between lookup and load), deduplication, striping across replicated TP ranks, pressure
 * mode on out-of-space, region layouts, the metadata's byte form, and completions that
 * survive out-of-memory failures (common/fault.h).
 *
 * Cases following vLLM's tests/v1/kv_connector/unit/test_mooncake_store_*.py are marked
 * "vLLM:" with the test they follow.
 */
#include <errno.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/fault.h"
#include "connector_rig.h"
#include "proto/frame.h"
#include "server_util.h"

static const size_t HL = RIG_TIDE_HL;

/* One step through a scheduler: build the metadata, pass it through its byte form (as it
 * travels to worker processes) and start it on each worker. Returns the metadata. */
static tide_connector_meta *step(tide_connector *s, rig_rank **ranks, int nranks) {
    tide_connector_meta *m = NULL;
    CHECK_EQ(tide_connector_build_meta(s, &m), 0);
    size_t len = 0;
    CHECK_EQ(tide_connector_meta_serialize(m, NULL, 0, &len), TIDE_EBUFSMALL);
    uint8_t *buf = malloc(len);
    CHECK_EQ(tide_connector_meta_serialize(m, buf, len, &len), 0);
    tide_connector_meta *m2 = NULL;
    CHECK_EQ(tide_connector_meta_parse(buf, len, &m2), 0);
    CHECK_EQ(tide_connector_meta_num_jobs(m2), tide_connector_meta_num_jobs(m));
    free(buf);
    for (int i = 0; i < nranks; i++) {
        CHECK(tide_connector_start_jobs(ranks[i]->w, m2,
                                        TIDE_CONNECTOR_LOAD | TIDE_CONNECTOR_SAVE) >= 0);
        CHECK_EQ(tide_connector_wait(ranks[i]->w), 0);
    }
    tide_connector_meta_free(m2);
    return m;
}

static size_t job_blocks(tide_connector_meta *m, size_t j, int kind) {
    tide_connector_job job;
    CHECK_EQ(tide_connector_meta_job(m, j, &job), 0);
    CHECK_EQ(job.kind, kind);
    return job.nblocks;
}

/* Save a 100-token prompt from one rank, load it into another: bit-exact. */
static void round_trip(const char *url) {
    tide_store *st = NULL;
    CHECK_EQ(tide_open(url, &st), 0);
    CHECK_EQ(tide_clear(st), 0);
    const char *json = rig_doc(16, "", "", "kv_both", "", R_FULL(16));
    tide_connector *s = rig_open(json, st, TIDE_CONNECTOR_SCHEDULER);
    rig_rank prod, cons;
    rig_rank_open(&prod, json, st, 32, 2);
    rig_rank_open(&cons, json, st, 32, 2);
    rig_rank *rp = &prod, *rc = &cons;
    size_t nh;
    uint8_t *h = rig_prompt_hashes(1, 100, 16, &nh);
    CHECK_EQ(nh, 6);

    /* Producer: request "p" computes its 100-token prompt in blocks 3..9. */
    int32_t pblocks[7] = {3, 4, 5, 6, 7, 8, 9};
    size_t cnt = 7;
    for (int b = 3; b < 10; b++)
        rig_fill(rp, 0, b, 42);
    int64_t n = -1;
    CHECK_EQ(tide_connector_lookup(s, "p", 100, h, nh, HL, 0, &n), 0);
    CHECK_EQ(n, 0);
    CHECK_EQ(tide_connector_update_after_alloc(s, "p", pblocks, &cnt, 1, 0), 0);
    CHECK_EQ(tide_connector_request_step(s, "p", 100, 100, h, nh, HL, pblocks, &cnt, 1, 1), 0);
    tide_connector_meta *m = step(s, &rp, 1);
    CHECK_EQ(tide_connector_meta_num_jobs(m), 1);
    CHECK_EQ(job_blocks(m, 0, TIDE_CONNECTOR_SAVE), 6); /* 96 of 100 tokens: 6 full blocks */
    tide_connector_meta_free(m);
    tide_stats ss;
    CHECK_EQ(tide_stats_get(st, &ss, sizeof(ss)), 0);
    CHECK_EQ(ss.objects, 6);
    /* Finished with saves issued: its blocks stay until the worker reports it saved. */
    CHECK_EQ(tide_connector_request_finished(s, "p"), 1);
    m = step(s, &rp, 1);
    CHECK_EQ(tide_connector_meta_num_finished(m), 1);
    CHECK_STR(tide_connector_meta_finished(m, 0), "p");
    tide_connector_meta_free(m);
    CHECK_STR(rig_finished(prod.w, TIDE_CONNECTOR_SAVE), "p");
    CHECK_STR(rig_finished(prod.w, TIDE_CONNECTOR_SAVE), "");

    /* Consumer: request "c" with the same prompt; blocks 20..26. */
    CHECK_EQ(tide_connector_lookup(s, "c", 100, h, nh, HL, 0, &n), 0);
    CHECK_EQ(n, 96);
    int32_t cblocks[7] = {20, 21, 22, 23, 24, 25, 26};
    CHECK_EQ(tide_connector_update_after_alloc(s, "c", cblocks, &cnt, 1, 96), 0);
    CHECK_EQ(tide_connector_request_step(s, "c", 100, 100, h, nh, HL, cblocks, &cnt, 1, 1), 0);
    m = step(s, &rc, 1);
    CHECK_EQ(tide_connector_meta_num_jobs(m), 1); /* a load, and no save in the same step */
    CHECK_EQ(job_blocks(m, 0, TIDE_CONNECTOR_LOAD), 6);
    tide_connector_block blk;
    CHECK_EQ(tide_connector_meta_block(m, 0, 5, &blk), 0);
    CHECK_EQ(blk.block_id, 25);
    CHECK_EQ(blk.end_token, 96);
    CHECK(memcmp(blk.hash, h + 5 * HL, HL) == 0);
    tide_connector_meta_free(m);
    CHECK_STR(rig_finished(cons.w, TIDE_CONNECTOR_LOAD), "c");
    int32_t errs[8];
    CHECK_EQ(tide_connector_get_load_errors(cons.w, errs, 8), 0);
    for (int i = 0; i < 6; i++)
        CHECK_MSG(rig_same(rp, 3 + i, rc, 20 + i, 0), "block %d differs", i);
    CHECK(rig_zero(rc, 26, 0)); /* the partial last block is computed, not loaded */
    tide_connector_stats cs;
    tide_connector_get_stats(cons.w, &cs, sizeof cs);
    CHECK_EQ(cs.load_get.calls, 1); /* one batched get for the whole load */
    CHECK_EQ(cs.loaded_objects, 6);
    CHECK_EQ(cs.load_get.bytes, 6 * 2 * 256);
    /* The next step of "c" saves nothing new: what it loaded is in the store already. */
    CHECK_EQ(tide_connector_request_step(s, "c", 100, 101, h, nh, HL, NULL, (size_t[]){0}, 1, 0),
             0);
    m = step(s, &rc, 1);
    CHECK_EQ(tide_connector_meta_num_jobs(m), 0);
    tide_connector_meta_free(m);
    CHECK_EQ(tide_connector_request_finished(s, "c"), 0);

    free(h);
    rig_rank_close(&prod);
    rig_rank_close(&cons);
    tide_connector_destroy(s);
    tide_close(st);
}

TEST(connector_round_trip_mem) {
    round_trip("mem://?capacity=16MiB");
}

TEST_T(connector_round_trip_tided, 60) {
    test_server ts;
    server_start(&ts, NULL);
    round_trip(ts.url);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}

/* vLLM: test_mooncake_store_worker dedup — a second save of stored blocks puts nothing. */
TEST(connector_save_dedup_and_chunked_prefill) {
    tide_store *st = NULL;
    CHECK_EQ(tide_open("mem://?capacity=16MiB", &st), 0);
    const char *json = rig_doc(16, "", "", "kv_producer", "", R_FULL(16));
    tide_connector *s = rig_open(json, st, TIDE_CONNECTOR_SCHEDULER);
    rig_rank r;
    rig_rank_open(&r, json, st, 16, 2);
    rig_rank *rr = &r;
    size_t nh;
    uint8_t *h = rig_prompt_hashes(2, 64, 16, &nh);
    int32_t ids[4] = {0, 1, 2, 3};
    for (int b = 0; b < 4; b++)
        rig_fill(rr, 0, b, 7);
    /* Chunked prefill: 40 tokens, then 64. The first save covers 32 (two blocks). */
    size_t two = 2, none = 0;
    CHECK_EQ(tide_connector_request_step(s, "a", 64, 40, h, nh, HL, ids, (size_t[]){3}, 1, 1), 0);
    tide_connector_meta *m = step(s, &rr, 1);
    CHECK_EQ(job_blocks(m, 0, TIDE_CONNECTOR_SAVE), 2);
    tide_connector_meta_free(m);
    CHECK_EQ(tide_connector_request_step(s, "a", 64, 64, h, nh, HL, ids + 3, (size_t[]){1}, 1, 0),
             0);
    m = step(s, &rr, 1);
    CHECK_EQ(job_blocks(m, 0, TIDE_CONNECTOR_SAVE), 2); /* blocks 2, 3 */
    tide_connector_job job;
    tide_connector_meta_job(m, 0, &job);
    CHECK_EQ(job.start_tokens, 32);
    CHECK_EQ(job.end_tokens, 64);
    tide_connector_meta_free(m);
    tide_stats a, b;
    CHECK_EQ(tide_stats_get(st, &a, sizeof(a)), 0);
    CHECK_EQ(a.objects, 4);
    /* The same prompt again under another request: every block exists -> no put. */
    CHECK_EQ(tide_connector_request_step(s, "b", 64, 64, h, nh, HL, ids, (size_t[]){4}, 1, 1), 0);
    m = step(s, &rr, 1);
    CHECK_EQ(job_blocks(m, 0, TIDE_CONNECTOR_SAVE), 4);
    tide_connector_meta_free(m);
    CHECK_EQ(tide_stats_get(st, &b, sizeof(b)), 0);
    CHECK_EQ(b.objects, 4);
    CHECK_EQ(b.puts, a.puts);
    CHECK_EQ(b.put_dups, a.put_dups); /* not even a duplicate put reached the store */
    tide_connector_stats cs;
    tide_connector_get_stats(r.w, &cs, sizeof cs);
    CHECK_EQ(cs.dedup_skipped, 4);
    CHECK_EQ(cs.saved_objects, 4);
    CHECK_EQ(cs.save_exists.calls, 3);
    CHECK_EQ(cs.save_put.calls, 2); /* the third save had nothing to put */
    (void)two;
    (void)none;
    /* A consumer role saves nothing. */
    tide_connector *sc =
        rig_open(rig_doc(16, "", "", "kv_consumer", "", R_FULL(16)), st, TIDE_CONNECTOR_SCHEDULER);
    CHECK_EQ(tide_connector_request_step(sc, "c", 64, 64, h, nh, HL, ids, (size_t[]){4}, 1, 1), 0);
    CHECK_EQ(tide_connector_build_meta(sc, &m), 0);
    CHECK_EQ(tide_connector_meta_num_jobs(m), 0);
    tide_connector_meta_free(m);
    tide_connector_destroy(sc);
    free(h);
    rig_rank_close(&r);
    tide_connector_destroy(s);
    tide_close(st);
}

/* Decode-produced KV: without save_decode_cache a save stops at the prompt (the reference
 * skips decode steps); with it, the blocks decode completes are saved too. */
TEST(connector_decode_saves_only_with_save_decode_cache) {
    tide_store *st = NULL;
    CHECK_EQ(tide_open("mem://?capacity=16MiB", &st), 0);
    size_t nh;
    uint8_t *h = rig_prompt_hashes(3, 64, 16, &nh); /* a 40-token prompt, then 24 decoded */
    int32_t ids[4] = {0, 1, 2, 3};
    for (int with = 0; with < 2; with++) {
        const char *extra = with ? "\"save_decode_cache\":true" : "";
        const char *json = rig_doc(16, "", "", "kv_both", extra, R_FULL(16));
        tide_connector *s = rig_open(json, st, TIDE_CONNECTOR_SCHEDULER);
        /* Prefill of 40 tokens (hashes cover 32): blocks 0, 1. */
        CHECK_EQ(tide_connector_request_step(s, "d", 40, 40, h, 2, HL, ids, (size_t[]){3}, 1, 1),
                 0);
        tide_connector_meta *m = NULL;
        CHECK_EQ(tide_connector_build_meta(s, &m), 0);
        CHECK_EQ(tide_connector_meta_num_jobs(m), 1);
        CHECK_EQ(job_blocks(m, 0, TIDE_CONNECTOR_SAVE), 2);
        tide_connector_meta_free(m);
        /* Decode to 64 tokens: the hashes now cover blocks 2 and 3. */
        CHECK_EQ(
            tide_connector_request_step(s, "d", 40, 64, h, 4, HL, ids + 3, (size_t[]){1}, 1, 0), 0);
        CHECK_EQ(tide_connector_build_meta(s, &m), 0);
        CHECK_EQ(tide_connector_meta_num_jobs(m), (size_t)with);
        if (with) {
            CHECK_EQ(job_blocks(m, 0, TIDE_CONNECTOR_SAVE), 2);
            tide_connector_job job;
            tide_connector_meta_job(m, 0, &job);
            CHECK_EQ(job.start_tokens, 32);
            CHECK_EQ(job.end_tokens, 64);
        }
        tide_connector_meta_free(m);
        tide_connector_destroy(s);
    }
    free(h);
    tide_close(st);
}

/* Remove one block and replace another with wrong-sized bytes between lookup and load:
 * both are reported, the others load exactly. */
TEST(connector_load_errors_per_block) {
    tide_store *st = NULL;
    CHECK_EQ(tide_open("mem://?capacity=16MiB", &st), 0);
    const char *json = rig_doc(16, "", "", "kv_both", "", R_FULL(16));
    tide_connector *s = rig_open(json, st, TIDE_CONNECTOR_SCHEDULER);
    rig_rank p, c;
    rig_rank_open(&p, json, st, 16, 2);
    rig_rank_open(&c, json, st, 16, 2);
    rig_rank *rp = &p, *rc = &c;
    size_t nh;
    uint8_t *h = rig_prompt_hashes(3, 80, 16, &nh);
    int32_t ids[5] = {0, 1, 2, 3, 4}, cids[5] = {10, 11, 12, 13, 14};
    size_t five = 5;
    for (int b = 0; b < 5; b++)
        rig_fill(rp, 0, b, 9);
    CHECK_EQ(tide_connector_request_step(s, "p", 80, 80, h, nh, HL, ids, &five, 1, 1), 0);
    tide_connector_meta_free(step(s, &rp, 1));
    int64_t n;
    CHECK_EQ(tide_connector_lookup(s, "c", 81, h, nh, HL, 0, &n), 0);
    CHECK_EQ(n, 80);
    /* Between lookup and load: block 1 disappears, block 3 is replaced by 10 bytes. */
    char key[TIDE_KEY_MAX + 1];
    int len = connector_own_key(c.w, 0, h + 1 * HL, HL, key);
    CHECK_EQ(tide_remove(st, key, (size_t)len), 0);
    len = connector_own_key(c.w, 0, h + 3 * HL, HL, key);
    CHECK_EQ(tide_remove(st, key, (size_t)len), 0);
    CHECK_EQ(tide_put(st, key, (size_t)len, "0123456789", 10), 0);
    CHECK_EQ(tide_connector_update_after_alloc(s, "c", cids, &five, 1, 80), 0);
    CHECK_EQ(tide_connector_request_step(s, "c", 81, 81, h, nh, HL, cids, &five, 1, 1), 0);
    tide_connector_meta_free(step(s, &rc, 1));
    CHECK_STR(rig_finished(c.w, TIDE_CONNECTOR_LOAD), "c");
    int32_t errs[8];
    int ne = tide_connector_get_load_errors(c.w, errs, 8);
    CHECK_EQ(ne, 2);
    CHECK((errs[0] == 11 && errs[1] == 13) || (errs[0] == 13 && errs[1] == 11));
    CHECK_EQ(tide_connector_get_load_errors(c.w, errs, 8), 0); /* reported once */
    CHECK(rig_same(rp, 0, rc, 10, 0));
    CHECK(rig_same(rp, 2, rc, 12, 0));
    CHECK(rig_same(rp, 4, rc, 14, 0));
    CHECK(!rig_same(rp, 1, rc, 11, 0));
    tide_connector_stats cs;
    tide_connector_get_stats(c.w, &cs, sizeof cs);
    CHECK_EQ(cs.load_errors, 2);
    CHECK_EQ(cs.load_get.failed_keys, 2);
    free(h);
    rig_rank_close(&p);
    rig_rank_close(&c);
    tide_connector_destroy(s);
    tide_close(st);
}

/* Hybrid: attention blocks of 16, Mamba blocks of 32 (align). A 100-token prompt computed
 * in steps that end on 32, 64 and 100: the default retention keeps only the snapshot at the
 * replay boundary floor(99 / 32) * 32 = 96 — which no step ended on here — so the producer
 * ends a step there, as align mode does. Loading it back restores attention and state. */
TEST(connector_hybrid_mamba_round_trip) {
    tide_store *st = NULL;
    CHECK_EQ(tide_open("mem://?capacity=16MiB", &st), 0);
    const char *json = rig_doc(16, "\"mamba_cache_mode\":\"align\"", "", "kv_both", "",
                               R_FULL(16) "," R_MAMBA(32));
    tide_connector *s = rig_open(json, st, TIDE_CONNECTOR_SCHEDULER);
    CHECK_EQ(s->cfg.scheduler_block_size, 32);
    CHECK_EQ(s->cfg.hash_block_size, 16);
    rig_rank p, c;
    rig_rank_open(&p, json, st, 16, 1);
    rig_rank_open(&c, json, st, 16, 1);
    rig_rank *rp = &p, *rc = &c;
    size_t nh;
    uint8_t *h = rig_prompt_hashes(4, 100, 16, &nh);
    /* Attention blocks 0..6, Mamba slots 0..3 (slot i holds the state at (i + 1) * 32). */
    int32_t ids[11] = {0, 1, 2, 3, 4, 5, 6, /* mamba */ 0, 1, 2, 3};
    size_t counts[2] = {7, 4};
    for (int b = 0; b < 7; b++)
        rig_fill(rp, 0, b, 11);
    for (int b = 0; b < 4; b++)
        rig_fill(rp, 1, b, 12);
    int64_t ends[] = {32, 64, 96, 100};
    for (int i = 0; i < 4; i++) {
        CHECK_EQ(
            tide_connector_request_step(s, "p", 100, ends[i], h, nh, HL, ids, counts, 2, i == 0),
            0);
        counts[0] = counts[1] = 0; /* no new blocks after the first step */
        tide_connector_meta *m = step(s, &rp, 1);
        size_t want_mamba = ends[i] == 96 ? 1 : 0;
        size_t got_mamba = 0;
        for (size_t j = 0; j < tide_connector_meta_num_jobs(m); j++) {
            tide_connector_job job;
            tide_connector_meta_job(m, j, &job);
            for (size_t k = 0; k < job.nblocks; k++) {
                tide_connector_block blk;
                tide_connector_meta_block(m, j, k, &blk);
                if (blk.group == 1) {
                    got_mamba++;
                    CHECK_EQ(blk.block_id, 2); /* slot of the state at 96 */
                    CHECK_EQ(blk.end_token, 96);
                }
            }
        }
        CHECK_EQ(got_mamba, want_mamba);
        tide_connector_meta_free(m);
    }
    tide_stats ss;
    tide_stats_get(st, &ss, sizeof(ss));
    CHECK_EQ(ss.objects, 6 + 1); /* six attention blocks, one snapshot */
    /* vLLM: test_mooncake_store_hma_e2e — the consumer resumes at the replay boundary. */
    int64_t n;
    CHECK_EQ(tide_connector_lookup(s, "c", 100, h, nh, HL, 0, &n), 0);
    CHECK_EQ(n, 96);
    int32_t cids[11] = {8, 9, 10, 11, 12, 13, 14, /* mamba */ 8, 9, 10, 11};
    size_t cc[2] = {7, 4};
    CHECK_EQ(tide_connector_update_after_alloc(s, "c", cids, cc, 2, 96), 0);
    CHECK_EQ(tide_connector_request_step(s, "c", 100, 100, h, nh, HL, cids, cc, 2, 1), 0);
    tide_connector_meta_free(step(s, &rc, 1));
    int32_t errs[4];
    CHECK_EQ(tide_connector_get_load_errors(c.w, errs, 4), 0);
    for (int b = 0; b < 6; b++)
        CHECK(rig_same(rp, b, rc, 8 + b, 0));
    CHECK(rig_same(rp, 2, rc, 10, 1)); /* the state at 96 in the consumer's slot */
    CHECK(rig_zero(rc, 8, 1) && rig_zero(rc, 9, 1) && rig_zero(rc, 11, 1));
    free(h);
    rig_rank_close(&p);
    rig_rank_close(&c);
    tide_connector_destroy(s);
    tide_close(st);
}

/* Sliding window saves only the window before the replay boundary; retention 64 also keeps
 * the windows before 64 and 128. */
TEST(connector_sliding_window_saves_only_windows) {
    tide_store *st = NULL;
    CHECK_EQ(tide_open("mem://?capacity=16MiB", &st), 0);
    for (int interval = 0; interval <= 64; interval += 64) {
        char cache[64];
        snprintf(cache, sizeof(cache), "\"prefix_cache_retention_interval\":%d", interval);
        const char *json = rig_doc(16, cache, "", "kv_producer", "", R_FULL(16) "," R_SWA(16, 33));
        tide_connector *s = rig_open(json, st, TIDE_CONNECTOR_SCHEDULER);
        size_t nh;
        uint8_t *h = rig_prompt_hashes(5, 170, 16, &nh);
        int32_t ids[22];
        for (int i = 0; i < 11; i++)
            ids[i] = ids[11 + i] = i;
        size_t counts[2] = {11, 11};
        CHECK_EQ(tide_connector_request_step(s, "w", 170, 170, h, nh, HL, ids, counts, 2, 1), 0);
        tide_connector_meta *m = NULL;
        CHECK_EQ(tide_connector_build_meta(s, &m), 0);
        uint8_t want[11] = {0}, got[11] = {0};
        /* Replay boundary floor(169/16)*16 = 160: blocks 8, 9. */
        want[8] = want[9] = 1;
        if (interval) want[2] = want[3] = want[6] = want[7] = 1;
        size_t nfull = 0;
        for (size_t k = 0; k < m->jobs[0].nblocks; k++) {
            tide_connector_block blk;
            tide_connector_meta_block(m, 0, k, &blk);
            if (blk.group == 1)
                got[blk.block_id] = 1;
            else
                nfull++;
        }
        CHECK_EQ(nfull, 10);
        CHECK(memcmp(want, got, sizeof(want)) == 0);
        tide_connector_meta_free(m);
        free(h);
        tide_connector_destroy(s);
    }
    tide_close(st);
}

/* TP 4 over 2 KV heads: ranks 0/1 and 2/3 hold identical bytes (factor 2). Each pair
 * splits its puts; together they store every block once; the consumer rank loads all. */
TEST(connector_save_striping_across_replicas) {
    tide_store *st = NULL;
    CHECK_EQ(tide_open("mem://?capacity=16MiB", &st), 0);
    const char *groups = R_FULL(16);
    char par[128];
    rig_rank r[2];
    rig_rank *rr[2] = {&r[0], &r[1]};
    tide_connector *s = NULL;
    for (int t = 0; t < 2; t++) {
        snprintf(par, sizeof(par), "\"tensor_parallel_size\":16,\"tp_rank\":%d", t);
        const char *json = rig_doc(16, "", par, "kv_both", "", groups);
        if (t == 0) s = rig_open(json, st, TIDE_CONNECTOR_SCHEDULER);
        rig_rank_open(&r[t], json, st, 8, 1);
        for (int b = 0; b < 6; b++)
            rig_fill(&r[t], 0, b, 5); /* identical bytes on both */
    }
    CHECK_EQ(s->cfg.groups[0].tp_factor, 2);
    size_t nh, six = 6;
    uint8_t *h = rig_prompt_hashes(6, 96, 16, &nh);
    int32_t ids[6] = {0, 1, 2, 3, 4, 5};
    CHECK_EQ(tide_connector_request_step(s, "s", 96, 96, h, nh, HL, ids, &six, 1, 1), 0);
    tide_connector_meta_free(step(s, rr, 2));
    tide_connector_stats a, b;
    tide_connector_get_stats(r[0].w, &a, sizeof a);
    tide_connector_get_stats(r[1].w, &b, sizeof b);
    CHECK_EQ(a.saved_objects, 3);
    CHECK_EQ(b.saved_objects, 3);
    CHECK_EQ(a.striped_skipped, 3);
    tide_stats ss;
    tide_stats_get(st, &ss, sizeof(ss));
    CHECK_EQ(ss.objects, 6);
    CHECK_EQ(ss.put_dups, 0);
    free(h);
    rig_rank_close(&r[0]);
    rig_rank_close(&r[1]);
    tide_connector_destroy(s);
    tide_close(st);
}

/* Hold most of a tided pool in an uncommitted reservation (a PUT whose value bytes never
 * come), so that the connector's puts find no space. Returns the socket. */
static int hog_pool(const test_server *ts, uint64_t bytes) {
    int fd = server_connect(ts->port, 5);
    CHECK(fd >= 0);
    uint8_t buf[4096];
    size_t len;
    frame_hello hello = {FRAME_VERSION, FRAME_VERSION, 0, NULL, 0};
    CHECK_EQ(frame_encode_hello(buf, sizeof(buf), &len, 1, &hello), 0);
    CHECK_EQ(send(fd, buf, len, 0), (ssize_t)len);
    CHECK(recv(fd, buf, sizeof(buf), 0) > 0);
    uint8_t *val = calloc(1, bytes);
    tide_key k = {"hog", 3};
    tide_iov v = {val, bytes};
    uint64_t data = 0;
    CHECK_EQ(frame_encode_put(buf, sizeof(buf), &len, 2, &k, 1, &v, NULL, NULL, &data), 0);
    CHECK_EQ(send(fd, buf, len, 0), (ssize_t)len);
    free(val);
    return fd;
}

/* vLLM: test_mooncake_store_worker pressure — out of space marks the request and skips its
 * saves until a save succeeds again. */
TEST_T(connector_pressure_mode, 60) {
    test_server ts;
    const char *args[] = {"--capacity", "1MiB", NULL};
    server_start(&ts, args);
    tide_store *st = NULL;
    CHECK_EQ(tide_open(ts.url, &st), 0);
    const char *json = rig_doc(16, "", "", "kv_producer", "", R_FULL(16));
    tide_connector *s = rig_open(json, st, TIDE_CONNECTOR_SCHEDULER);
    rig_rank r;
    rig_rank_open(&r, json, st, 16, 2);
    rig_rank *rr = &r;
    tide_stats ps;
    CHECK_EQ(tide_stats_get(st, &ps, sizeof(ps)), 0);
    int hog = hog_pool(&ts, ps.capacity_bytes - 256);
    /* Wait (bounded) until the server holds the reservation. */
    for (int i = 0; i < 2000; i++) {
        CHECK_EQ(tide_stats_get(st, &ps, sizeof(ps)), 0);
        if (ps.reserved) break;
        usleep(5000);
    }
    CHECK_EQ(ps.reserved, 1);
    size_t nh, four = 4;
    uint8_t *h = rig_prompt_hashes(7, 64, 16, &nh);
    uint8_t *h2 = rig_prompt_hashes(8, 64, 16, &nh);
    int32_t ids[4] = {0, 1, 2, 3};
    CHECK_EQ(tide_connector_request_step(s, "a", 128, 32, h, nh, HL, ids, &four, 1, 1), 0);
    tide_connector_meta_free(step(s, &rr, 1));
    tide_connector_stats cs;
    tide_connector_get_stats(r.w, &cs, sizeof cs);
    CHECK_EQ(cs.pressure_active, 1);
    CHECK_EQ(cs.pressure_events, 1);
    CHECK_EQ(cs.saved_objects, 0);
    /* The next save of "a" is skipped without touching the store. */
    uint64_t puts = cs.save_put.calls;
    CHECK_EQ(tide_connector_request_step(s, "a", 128, 64, h, nh, HL, NULL, (size_t[]){0}, 1, 0), 0);
    tide_connector_meta_free(step(s, &rr, 1));
    tide_connector_get_stats(r.w, &cs, sizeof cs);
    CHECK_EQ(cs.pressure_skipped_jobs, 1);
    CHECK_EQ(cs.save_put.calls, puts);
    /* Space comes back (the hog disconnects; its reservation is dropped). Another request's
     * save succeeds and clears the pressure. */
    close(hog);
    for (int i = 0; i < 2000; i++) {
        CHECK_EQ(tide_stats_get(st, &ps, sizeof(ps)), 0);
        if (!ps.reserved) break;
        usleep(5000);
    }
    CHECK_EQ(ps.reserved, 0);
    CHECK_EQ(tide_connector_request_step(s, "b", 64, 64, h2, nh, HL, ids, &four, 1, 1), 0);
    tide_connector_meta_free(step(s, &rr, 1));
    tide_connector_get_stats(r.w, &cs, sizeof cs);
    CHECK_EQ(cs.pressure_active, 0);
    CHECK_EQ(cs.saved_objects, 4);
    free(h);
    free(h2);
    rig_rank_close(&r);
    tide_connector_destroy(s);
    tide_close(st);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}

/* vLLM: test_mooncake_store_worker register_kv_caches — K/V planes as outer dimensions. */
TEST(connector_region_layouts) {
    tide_store *st = NULL;
    CHECK_EQ(tide_open("mem://?capacity=16MiB", &st), 0);
    const char *json = rig_doc(16, "", "", "kv_both", "", R_FULL(16));
    tide_connector *w = rig_open(json, st, TIDE_CONNECTOR_WORKER);
    static uint8_t mem[8 * 256];
    /* (2, 8, 16, 1, 4) float16: two planes -> two segments of 128 bytes. */
    int64_t shape[5] = {2, 8, 16, 1, 4}, strides[5] = {8 * 64, 64, 4, 4, 1};
    CHECK_EQ(tide_connector_register_region(w, 0, mem, sizeof(mem), 8, 5, shape, strides, 2), 0);
    CHECK_EQ(w->regions[0].nseg, 2);
    CHECK_EQ(w->regions[0].seg_len, 128);
    CHECK(w->regions[0].seg_base[1] == mem + 8 * 128);
    /* (8, 2, 16, 1, 4): block-major, one segment of whole pages. */
    int64_t shape2[5] = {8, 2, 16, 1, 4}, strides2[5] = {128, 64, 4, 4, 1};
    CHECK_EQ(tide_connector_register_region(w, 0, mem, sizeof(mem), 8, 5, shape2, strides2, 2), 0);
    CHECK_EQ(w->regions[1].nseg, 1);
    CHECK_EQ(w->regions[1].seg_len, 256);
    CHECK_EQ(w->obj_bytes[0], 512);
    /* No shape: one segment. */
    CHECK_EQ(tide_connector_register_region(w, 0, mem, sizeof(mem), 8, 0, NULL, NULL, 0), 0);
    CHECK_EQ(w->regions[2].seg_len, 256);
    /* Errors. */
    CHECK_EQ(tide_connector_register_region(w, 1, mem, sizeof(mem), 8, 0, NULL, NULL, 0), -EINVAL);
    CHECK_CONTAINS(tide_connector_errmsg(w), "group 1 does not exist");
    CHECK_EQ(tide_connector_register_region(w, 0, mem, 1001, 8, 0, NULL, NULL, 0), -EINVAL);
    int64_t bad[5] = {2, 7, 16, 1, 4};
    CHECK_EQ(tide_connector_register_region(w, 0, mem, sizeof(mem), 8, 5, bad, strides, 2),
             -EINVAL);
    CHECK_CONTAINS(tide_connector_errmsg(w), "block dimension should have 8 entries");
    tide_connector_destroy(w);
    /* A scheduler has no regions. */
    tide_connector *s = rig_open(json, st, TIDE_CONNECTOR_SCHEDULER);
    CHECK_EQ(tide_connector_register_region(s, 0, mem, sizeof(mem), 8, 0, NULL, NULL, 0), -EINVAL);
    tide_connector_destroy(s);
    tide_close(st);
}

TEST(connector_meta_bytes_malformed) {
    tide_connector_meta *m = NULL;
    CHECK_EQ(tide_connector_meta_parse("XXXX00000000", 12, &m), TIDE_EPARSE);
    uint8_t empty[12] = {'T', 'C', 'M', '1', 0, 0, 0, 0, 0, 0, 0, 0};
    CHECK_EQ(tide_connector_meta_parse(empty, sizeof(empty), &m), 0);
    CHECK_EQ(tide_connector_meta_num_jobs(m), 0);
    tide_connector_meta_free(m);
    /* A job count the bytes cannot hold. */
    uint8_t lie[12] = {'T', 'C', 'M', '1', 0xff, 0xff, 0, 0, 0, 0, 0, 0};
    CHECK_EQ(tide_connector_meta_parse(lie, sizeof(lie), &m), TIDE_EPARSE);
    /* Every truncation of a real one fails cleanly. */
    tide_connector_meta *real = calloc(1, sizeof(*real));
    connector_mjob *j = connector_step_add_job(real, TIDE_CONNECTOR_SAVE, "req-1", 0, 32, 16);
    uint8_t hash[16] = {1, 2, 3};
    CHECK_EQ(connector_step_add_block(j, 0, 5, 16, hash), 0);
    CHECK_EQ(connector_step_add_block(j, 0, 6, 32, hash), 0);
    size_t len;
    uint8_t buf[256];
    CHECK_EQ(tide_connector_meta_serialize(real, buf, sizeof(buf), &len), 0);
    for (size_t cut = 0; cut < len; cut++)
        CHECK_EQ(tide_connector_meta_parse(buf, cut, &m), TIDE_EPARSE);
    CHECK_EQ(tide_connector_meta_parse(buf, len, &m), 0);
    tide_connector_block blk;
    CHECK_EQ(tide_connector_meta_block(m, 0, 1, &blk), 0);
    CHECK_EQ(blk.block_id, 6);
    CHECK_EQ(blk.hash[2], 3);
    CHECK_EQ(tide_connector_meta_block(m, 0, 2, &blk), -EINVAL);
    tide_connector_meta_free(m);
    tide_connector_meta_free(real);
}

/* Hybrid under DCP 2 (the reference rejects it; tide takes it): each TP rank saves its own
 * attention slice and Mamba shard under its own namespace; a lookup needs both ranks'
 * objects; each consumer rank loads exactly its own rank's bytes. */
TEST(connector_hybrid_dcp_round_trip) {
    tide_store *st = NULL;
    CHECK_EQ(tide_open("mem://?capacity=16MiB", &st), 0);
    char json[2][8192];
    for (int t = 0; t < 2; t++) {
        char par[128];
        snprintf(par, sizeof(par),
                 "\"tensor_parallel_size\":2,\"decode_context_parallel_size\":2,\"tp_rank\":%d", t);
        snprintf(json[t], sizeof(json[t]), "%s",
                 rig_doc(16, "\"mamba_cache_mode\":\"align\"", par, "kv_both", "",
                         R_FULL(16) "," R_MAMBA(32)));
    }
    tide_connector *s = rig_open(json[0], st, TIDE_CONNECTOR_SCHEDULER);
    CHECK_EQ(s->cfg.scheduler_block_size, 32);
    CHECK_EQ(s->cfg.hash_block_size, 32);
    rig_rank p[2], c[2];
    for (int t = 0; t < 2; t++) {
        rig_rank_open(&p[t], json[t], st, 8, 1);
        rig_rank_open(&c[t], json[t], st, 8, 1);
        for (int b = 0; b < 4; b++) {
            rig_fill(&p[t], 0, b, 100 + (uint64_t)t); /* each rank holds other bytes */
            rig_fill(&p[t], 1, b, 200 + (uint64_t)t);
        }
    }
    size_t nh;
    uint8_t *h = rig_prompt_hashes(9, 100, 32, &nh);
    CHECK_EQ(nh, 3);
    int32_t ids[8] = {0, 1, 2, 3, /* mamba */ 0, 1, 2, 3};
    size_t counts[2] = {4, 4};
    CHECK_EQ(tide_connector_request_step(s, "p", 100, 96, h, nh, HL, ids, counts, 2, 1), 0);
    rig_rank *r0 = &p[0];
    tide_connector_meta *m = step(s, &r0, 1); /* rank 0 only, for now */
    CHECK_EQ(job_blocks(m, 0, TIDE_CONNECTOR_SAVE), 3 + 1);
    int64_t hit = -1;
    CHECK_EQ(tide_connector_hit_tokens(s, 100, h, nh, HL, &hit), 0);
    CHECK_EQ(hit, 0); /* rank 1's slices are missing */
    CHECK(tide_connector_start_jobs(p[1].w, m, TIDE_CONNECTOR_SAVE) == 1);
    CHECK_EQ(tide_connector_wait(p[1].w), 0);
    tide_connector_meta_free(m);
    CHECK_EQ(tide_connector_hit_tokens(s, 100, h, nh, HL, &hit), 0);
    CHECK_EQ(hit, 96);
    tide_stats ss;
    tide_stats_get(st, &ss, sizeof(ss));
    CHECK_EQ(ss.objects, 2 * (3 + 1));

    int64_t n;
    CHECK_EQ(tide_connector_lookup(s, "c", 100, h, nh, HL, 0, &n), 0);
    CHECK_EQ(n, 96);
    int32_t cids[8] = {4, 5, 6, 7, /* mamba */ 4, 5, 6, 7};
    CHECK_EQ(tide_connector_update_after_alloc(s, "c", cids, counts, 2, 96), 0);
    CHECK_EQ(tide_connector_request_step(s, "c", 100, 100, h, nh, HL, cids, counts, 2, 1), 0);
    rig_rank *cr[2] = {&c[0], &c[1]};
    tide_connector_meta_free(step(s, cr, 2));
    for (int t = 0; t < 2; t++) {
        int32_t errs[4];
        CHECK_EQ(tide_connector_get_load_errors(c[t].w, errs, 4), 0);
        for (int b = 0; b < 3; b++)
            CHECK_MSG(rig_same(&p[t], b, &c[t], 4 + b, 0), "rank %d block %d", t, b);
        CHECK(rig_same(&p[t], 2, &c[t], 6, 1)); /* the state at 96 */
        CHECK(!rig_same(&p[1 - t], 0, &c[t], 4, 0));
    }
    free(h);
    for (int t = 0; t < 2; t++) {
        rig_rank_close(&p[t]);
        rig_rank_close(&c[t]);
    }
    tide_connector_destroy(s);
    tide_close(st);
}

/* Mamba mode 'all' keeps a snapshot at every block end: with a null retention interval
 * every scheduler-block boundary of the save is stored, not only step ends. */
TEST(connector_mamba_all_mode_dense_retention) {
    tide_store *st = NULL;
    CHECK_EQ(tide_open("mem://?capacity=16MiB", &st), 0);
    tide_connector *s = rig_open(rig_doc(16,
                                         "\"mamba_cache_mode\":\"all\","
                                         "\"prefix_cache_retention_interval\":null",
                                         "", "kv_producer", "", R_FULL(16) "," R_MAMBA(16)),
                                 st, TIDE_CONNECTOR_SCHEDULER);
    size_t nh;
    uint8_t *h = rig_prompt_hashes(10, 70, 16, &nh);
    int32_t ids[10] = {0, 1, 2, 3, 4, 0, 1, 2, 3, 4};
    size_t counts[2] = {5, 5};
    CHECK_EQ(tide_connector_request_step(s, "a", 70, 70, h, nh, HL, ids, counts, 2, 1), 0);
    tide_connector_meta *m = NULL;
    CHECK_EQ(tide_connector_build_meta(s, &m), 0);
    size_t mamba = 0;
    for (size_t k = 0; k < m->jobs[0].nblocks; k++)
        if (m->jobs[0].blocks[k].group == 1) {
            CHECK_EQ(m->jobs[0].blocks[k].end_token, (int64_t)(mamba + 1) * 16);
            CHECK_EQ(m->jobs[0].blocks[k].block_id, (int32_t)mamba);
            mamba++;
        }
    CHECK_EQ(mamba, 4); /* 16, 32, 48, 64 */
    tide_connector_meta_free(m);
    free(h);
    tide_connector_destroy(s);
    tide_close(st);
}

/*
 * vLLM: the partial-tail offload (worker _maybe_offload_partial_tail). Attention blocks of
 * 32, Mamba blocks of 64 in align mode, hashes every 16 tokens: partial hits. A 90-token
 * prompt's last hash boundary is 80, inside a block: the engine copied the state at 80
 * into private block 7; the offload stores it and attention block 2 (tokens 64..80), both
 * under the sub-hash of 80. A consumer whose prompt extends the producer's then resumes at
 * 80 instead of 64, bit-exact.
 */
TEST(connector_partial_tail_round_trip) {
    tide_store *st = NULL;
    CHECK_EQ(tide_open("mem://?capacity=16MiB", &st), 0);
    const char *json = rig_doc(32, "\"mamba_cache_mode\":\"align\",\"prefix_match_unit\":16", "",
                               "kv_both", "", R_FULL(32) "," R_MAMBA(64));
    tide_connector *s = rig_open(json, st, TIDE_CONNECTOR_SCHEDULER);
    tide_connector_info info;
    CHECK_EQ(tide_connector_get_info(s, &info, sizeof info), 0);
    CHECK_EQ(info.hash_block_size, 16);
    CHECK_EQ(info.scheduler_block_size, 64);
    CHECK_EQ(info.partial_hits, 1);
    rig_rank p, c;
    rig_rank_open(&p, json, st, 16, 1);
    rig_rank_open(&c, json, st, 16, 1);
    rig_rank *rp = &p, *rc = &c;
    size_t nh, nh2;
    uint8_t *h = rig_prompt_hashes(5, 90, 16, &nh);
    uint8_t *h2 = rig_prompt_hashes(5, 120, 16, &nh2); /* the consumer's: the same 90, then more */
    CHECK_EQ(nh, 5);
    CHECK_EQ(memcmp(h, h2, nh * HL), 0);
    /* Attention blocks 0..2, Mamba slots 0..1; the private block 7 holds the state at 80. */
    int32_t ids[5] = {0, 1, 2, /* mamba */ 0, 1};
    size_t counts[2] = {3, 2};
    for (int b = 0; b < 3; b++)
        rig_fill(rp, 0, b, 21);
    rig_fill(rp, 1, 0, 22);
    rig_fill(rp, 1, 1, 23);
    rig_fill(rp, 1, 7, 24);
    /* Prefill to the replay boundary 64, then to the end. */
    CHECK_EQ(tide_connector_request_step(s, "p", 90, 64, h, nh, HL, ids, counts, 2, 1), 0);
    tide_connector_meta *m = step(s, &rp, 1);
    CHECK_EQ(tide_connector_meta_num_jobs(m), 1);
    CHECK_EQ(job_blocks(m, 0, TIDE_CONNECTOR_SAVE), 3); /* attention 0, 1; state at 64 */
    tide_connector_meta_free(m);
    counts[0] = counts[1] = 0;
    CHECK_EQ(tide_connector_request_step(s, "p", 90, 90, h, nh, HL, ids, counts, 2, 0), 0);
    m = step(s, &rp, 1);
    CHECK_EQ(tide_connector_meta_num_jobs(m), 0); /* nothing new below 64 */
    tide_connector_meta_free(m);
    int64_t n = -1;
    CHECK_EQ(tide_connector_lookup(s, "before", 120, h2, nh2, HL, 0, &n), 0);
    CHECK_EQ(n, 64); /* without the tail: the last snapshot */

    /* The tail, handed over as the engine does: (group, private block, boundary). */
    int32_t g1[1] = {1}, b7[1] = {7};
    int64_t q80[1] = {80};
    CHECK_EQ(tide_connector_request_partial_tail(s, "p", g1, b7, q80, 1), 1);
    m = step(s, &rp, 1);
    CHECK_EQ(tide_connector_meta_num_jobs(m), 1);
    tide_connector_job job;
    CHECK_EQ(tide_connector_meta_job(m, 0, &job), 0);
    CHECK_EQ(job.kind, TIDE_CONNECTOR_SAVE);
    CHECK_EQ(job.end_tokens, 80);
    CHECK_EQ(job.nblocks, 2);
    for (size_t k = 0; k < job.nblocks; k++) {
        tide_connector_block blk;
        CHECK_EQ(tide_connector_meta_block(m, 0, k, &blk), 0);
        CHECK_EQ(blk.end_token, 80);
        CHECK_EQ(blk.block_id, blk.group == 0 ? 2 : 7);
    }
    tide_connector_meta_free(m);
    CHECK_EQ(tide_connector_request_finished(s, "p"), 1);
    tide_stats ss;
    tide_stats_get(st, &ss, sizeof(ss));
    CHECK_EQ(ss.objects, 3 + 2);

    /* The consumer resumes at the boundary inside the block. */
    CHECK_EQ(tide_connector_lookup(s, "c", 120, h2, nh2, HL, 0, &n), 0);
    CHECK_EQ(n, 80);
    int32_t cids[6] = {8, 9, 10, 11, /* mamba */ 8, 9};
    size_t cc[2] = {4, 2};
    CHECK_EQ(tide_connector_update_after_alloc(s, "c", cids, cc, 2, 80), 0);
    CHECK_EQ(tide_connector_request_step(s, "c", 120, 120, h2, nh2, HL, cids, cc, 2, 1), 0);
    m = step(s, &rc, 1);
    CHECK_EQ(tide_connector_meta_job(m, 0, &job), 0);
    CHECK_EQ(job.kind, TIDE_CONNECTOR_LOAD);
    CHECK_EQ(job.end_tokens, 80);
    CHECK_EQ(job.nblocks, 4); /* attention 0, 1, 2 (its first 16 tokens); the state at 80 */
    tide_connector_meta_free(m);
    int32_t errs[4];
    CHECK_EQ(tide_connector_get_load_errors(c.w, errs, 4), 0);
    for (int b = 0; b < 3; b++)
        CHECK(rig_same(rp, b, rc, 8 + b, 0));
    CHECK(rig_same(rp, 7, rc, 9, 1)); /* the boundary state, in the slot holding 80 */
    CHECK(rig_zero(rc, 8, 1) && rig_zero(rc, 11, 0));
    free(h);
    free(h2);
    rig_rank_close(&p);
    rig_rank_close(&c);
    tide_connector_destroy(s);
    tide_close(st);
}

/* vLLM: the single-boundary rule, its words; and a tail registered after the request's
 * finish is still saved (register_finished_partial_tail). */
TEST(connector_partial_tail_one_boundary) {
    static const char msg[] = "Partial-tail offloads for one request must share a boundary";
    tide_store *st = NULL;
    CHECK_EQ(tide_open("mem://?capacity=16MiB", &st), 0);
    const char *json = rig_doc(16, "\"mamba_cache_mode\":\"align\"", "", "kv_producer", "",
                               R_FULL(16) "," R_MAMBA(32) "," R_MAMBA(32));
    tide_connector *s = rig_open(json, st, TIDE_CONNECTOR_SCHEDULER);
    CHECK_EQ(s->cfg.partial_hits, 1);
    size_t nh;
    uint8_t *h = rig_prompt_hashes(6, 50, 16, &nh);
    int32_t ids[6] = {0, 1, 2, 3, 0, 0};
    size_t counts[3] = {4, 1, 1};
    CHECK_EQ(tide_connector_request_step(s, "p", 50, 50, h, nh, HL, ids, counts, 3, 1), 0);
    tide_connector_meta *m = NULL;
    CHECK_EQ(tide_connector_build_meta(s, &m), 0);
    tide_connector_meta_free(m);
    int32_t groups[2] = {1, 2}, blocks[2] = {5, 6};
    int64_t two[2] = {48, 32};
    CHECK_EQ(tide_connector_request_partial_tail(s, "p", groups, blocks, two, 2),
             TIDE_EPARTIALTAIL);
    CHECK_STR(tide_connector_errmsg(s), msg);
    CHECK_STR(tide_errname(TIDE_EPARTIALTAIL), "TIDE_EPARTIALTAIL");
    /* One boundary for both groups: accepted; a later call naming another is refused. */
    int64_t same[2] = {48, 48};
    CHECK_EQ(tide_connector_request_partial_tail(s, "p", groups, blocks, same, 2), 2);
    int64_t other[1] = {32};
    CHECK_EQ(tide_connector_request_partial_tail(s, "p", groups, blocks, other, 1),
             TIDE_EPARTIALTAIL);
    CHECK_STR(tide_connector_errmsg(s), msg);
    /* Past the prompt, an attention group, a null block: nothing is taken. */
    int64_t past[1] = {64};
    CHECK_EQ(tide_connector_request_partial_tail(s, "q", groups, blocks, past, 1), 0);
    int32_t attn[1] = {0}, null_blk[1] = {-1};
    CHECK_EQ(tide_connector_request_partial_tail(s, "p", attn, blocks, same, 1), 0);
    CHECK_EQ(tide_connector_request_partial_tail(s, "p", groups, null_blk, same, 1), 0);
    CHECK_EQ(tide_connector_request_partial_tail(s, "p", (int32_t[]){9}, blocks, same, 1), -EINVAL);
    /* Finished before the next metadata: kept for it, then reported. */
    CHECK_EQ(tide_connector_request_finished(s, "p"), 1);
    CHECK_EQ(tide_connector_build_meta(s, &m), 0);
    CHECK_EQ(tide_connector_meta_num_jobs(m), 1);
    /* The attention block 32..48 (saves stopped at 32) and the two states at 48. */
    CHECK_EQ(m->jobs[0].nblocks, 3);
    for (size_t k = 0; k < 3; k++) {
        int grp = m->jobs[0].blocks[k].group;
        CHECK_EQ(m->jobs[0].blocks[k].end_token, 48);
        CHECK_EQ(m->jobs[0].blocks[k].block_id, grp == 0 ? 2 : grp == 1 ? 5 : 6);
        CHECK_EQ(memcmp(m->jobs[0].blocks[k].hash, h + 2 * HL, HL), 0);
    }
    CHECK_EQ(tide_connector_meta_num_finished(m), 1);
    tide_connector_meta_free(m);
    CHECK_EQ(tide_connector_build_meta(s, &m), 0);
    CHECK_EQ(tide_connector_meta_num_jobs(m), 0);
    tide_connector_meta_free(m);
    CHECK_EQ(s->nreqs, 0);
    free(h);
    tide_connector_destroy(s);
    tide_close(st);
}

/* Without partial hits — one group; Mamba outside align mode; a sliding-window group; a
 * consumer — a partial tail is not taken and lookups keep scheduler-block boundaries. */
TEST(connector_partial_tail_only_hybrid_align) {
    struct {
        const char *cache, *role, *groups;
        int ngroups;
    } cases[] = {
        {"", "kv_both", R_FULL(16), 1},
        {"\"mamba_cache_mode\":\"all\"", "kv_both", R_FULL(16) "," R_MAMBA(16), 2},
        {"\"mamba_cache_mode\":\"align\"", "kv_both", R_FULL(16) "," R_SWA(16, 32) "," R_MAMBA(32),
         3},
        {"\"mamba_cache_mode\":\"align\"", "kv_consumer", R_FULL(16) "," R_MAMBA(32), 2},
    };
    for (size_t t = 0; t < sizeof(cases) / sizeof(cases[0]); t++) {
        tide_store *st = NULL;
        CHECK_EQ(tide_open("mem://?capacity=16MiB", &st), 0);
        tide_connector *s =
            rig_open(rig_doc(16, cases[t].cache, "", cases[t].role, "", cases[t].groups), st,
                     TIDE_CONNECTOR_SCHEDULER);
        CHECK_EQ(s->cfg.partial_hits, t == 3 ? 1 : 0);
        size_t nh;
        uint8_t *h = rig_prompt_hashes(7, 50, 16, &nh);
        int32_t ids[12] = {0};
        size_t counts[3] = {0, 0, 0};
        CHECK_EQ(tide_connector_request_step(s, "p", 50, 50, h, nh, HL, ids, counts,
                                             (size_t)cases[t].ngroups, 1),
                 0);
        int32_t g[1] = {cases[t].ngroups - 1}, b[1] = {5};
        int64_t q[1] = {48};
        CHECK_EQ(tide_connector_request_partial_tail(s, "p", g, b, q, 1), 0);
        int64_t two[2] = {48, 32};
        int32_t gg[2] = {0, 0}, bb[2] = {1, 2};
        /* The rule holds whatever the configuration. */
        CHECK_EQ(tide_connector_request_partial_tail(s, "p", gg, bb, two, 2), TIDE_EPARTIALTAIL);
        tide_connector_meta *m = NULL;
        CHECK_EQ(tide_connector_build_meta(s, &m), 0);
        CHECK_EQ(tide_connector_meta_num_jobs(m), 0);
        tide_connector_meta_free(m);
        /* A lookup stays on scheduler-block boundaries: every object up to 48 present. */
        rig_store_prefix(st, s, h, HL, 48, -1, 7u);
        int64_t a = s->cfg.scheduler_block_size;
        CHECK_EQ(rig_hit(s, 50, h, nh, HL), t == 3 ? 32 : 48 / a * a);
        free(h);
        tide_connector_destroy(s);
        tide_close(st);
    }
}

/* A finished job's report can never be lost to an out-of-memory failure: the n-th
 * allocation of the worker's own code (common/fault.h) fails, for n = 1, 2, ... until no
 * allocation is left to fail. Each step either starts (and then its load and its finished
 * request are reported, every block loaded or listed as a load error) or is refused with
 * -ENOMEM having changed nothing, and succeeds when started again. */
TEST_T(connector_completions_survive_out_of_memory, 120) {
    tide_store *st = NULL;
    CHECK_EQ(tide_open("mem://?capacity=16MiB", &st), 0);
    const char *json = rig_doc(16, "", "", "kv_both", "", R_FULL(16));
    tide_connector *s = rig_open(json, st, TIDE_CONNECTOR_SCHEDULER);
    rig_rank p, c;
    rig_rank_open(&p, json, st, 16, 2);
    rig_rank_open(&c, json, st, 16, 2);
    rig_rank *rp = &p, *rc = &c;
    int n, refused = 0;
    for (n = 1; n <= 400; n++) {
        char pid[32], cid[32], qid[32];
        snprintf(pid, sizeof(pid), "p%d", n);
        snprintf(cid, sizeof(cid), "c%d", n);
        snprintf(qid, sizeof(qid), "q%d", n);
        size_t nh, nq, five = 5;
        uint8_t *h = rig_prompt_hashes((uint32_t)n, 80, 16, &nh);
        uint8_t *hq = rig_prompt_hashes((uint32_t)(5000 + n), 80, 16, &nq);
        int32_t ids[5] = {0, 1, 2, 3, 4}, cids[5] = {10, 11, 12, 13, 14};
        /* Without faults: the producer saves the prompt the consumer will load. */
        for (int b = 0; b < 5; b++) {
            rig_fill(rp, 0, b, (uint64_t)n);
            rig_fill(rc, 0, 10 + b, 777);
        }
        CHECK_EQ(tide_connector_request_step(s, pid, 80, 80, h, nh, HL, ids, &five, 1, 1), 0);
        tide_connector_meta_free(step(s, &rp, 1));
        int64_t hit;
        CHECK_EQ(tide_connector_lookup(s, cid, 81, h, nh, HL, 0, &hit), 0);
        CHECK_EQ(hit, 80);
        CHECK_EQ(tide_connector_update_after_alloc(s, cid, cids, &five, 1, 80), 0);
        CHECK_EQ(tide_connector_request_step(s, cid, 81, 81, h, nh, HL, cids, &five, 1, 1), 0);
        tide_connector_meta *ml = NULL, *ms = NULL, *mf = NULL;
        CHECK_EQ(tide_connector_build_meta(s, &ml), 0); /* c's load */
        CHECK_EQ(tide_connector_request_step(s, qid, 80, 80, hq, nq, HL, ids, &five, 1, 1), 0);
        CHECK_EQ(tide_connector_build_meta(s, &ms), 0); /* q's save */
        CHECK_EQ(tide_connector_request_finished(s, qid), 1);
        CHECK_EQ(tide_connector_build_meta(s, &mf), 0); /* q finished */

        /* With the n-th allocation failing. */
        fault_arm(n);
        int r1 = tide_connector_start_jobs(c.w, ml, TIDE_CONNECTOR_LOAD | TIDE_CONNECTOR_SAVE);
        int r2 = tide_connector_start_jobs(p.w, ms, TIDE_CONNECTOR_LOAD | TIDE_CONNECTOR_SAVE);
        int r3 =
            r2 < 0 ? -ENOMEM
                   : tide_connector_start_jobs(p.w, mf, TIDE_CONNECTOR_LOAD | TIDE_CONNECTOR_SAVE);
        CHECK_EQ(tide_connector_wait(c.w), 0);
        CHECK_EQ(tide_connector_wait(p.w), 0);
        int fired = fault_fired();
        fault_arm(0);
        char ctx[64];
        snprintf(ctx, sizeof(ctx), "allocation %d fails (%d %d %d)", n, r1, r2, r3);
        test_context = ctx;
        CHECK(r1 >= 0 || r1 == -ENOMEM);
        CHECK(r2 >= 0 || r2 == -ENOMEM);
        CHECK(r3 >= 0 || r3 == -ENOMEM);
        refused += (r1 < 0) + (r2 < 0) + (r3 < 0);
        /* A refused start changed nothing: the caller starts it again. */
        if (r1 < 0) CHECK(tide_connector_start_jobs(c.w, ml, TIDE_CONNECTOR_LOAD) >= 0);
        if (r2 < 0) CHECK(tide_connector_start_jobs(p.w, ms, TIDE_CONNECTOR_SAVE) >= 0);
        if (r3 < 0) CHECK(tide_connector_start_jobs(p.w, mf, TIDE_CONNECTOR_SAVE) >= 0);
        CHECK_EQ(tide_connector_wait(c.w), 0);
        CHECK_EQ(tide_connector_wait(p.w), 0);
        CHECK_STR(rig_finished(c.w, TIDE_CONNECTOR_LOAD), cid);
        CHECK_STR(rig_finished(p.w, TIDE_CONNECTOR_SAVE), qid);
        CHECK_STR(rig_finished(p.w, TIDE_CONNECTOR_SAVE), "");
        /* Every block is either loaded right or reported as a load error. */
        int32_t errs[16];
        int ne = tide_connector_get_load_errors(c.w, errs, 16);
        CHECK(ne >= 0 && ne <= 5);
        for (int b = 0; b < 5; b++) {
            int listed = 0;
            for (int e = 0; e < ne; e++)
                listed |= errs[e] == 10 + b;
            CHECK_MSG(listed || rig_same(rp, b, rc, 10 + b, 0),
                      "block %d neither loaded nor reported", 10 + b);
        }
        CHECK(tide_connector_request_finished(s, cid) >= 0);
        CHECK(tide_connector_request_finished(s, pid) >= 0);
        tide_connector_meta_free(ml);
        tide_connector_meta_free(ms);
        tide_connector_meta_free(mf);
        tide_connector_meta_free(step(s, &rp, 1)); /* anything the scheduler still sends */
        rig_finished(p.w, TIDE_CONNECTOR_SAVE);
        rig_finished(c.w, TIDE_CONNECTOR_LOAD);
        free(h);
        free(hq);
        if (!fired) break; /* the path makes fewer than n allocations: all were failed */
    }
    test_context = NULL;
    printf("    %d allocations failed in turn: %d starts refused with -ENOMEM (and started "
           "again), no completion lost\n",
           n - 1, refused);
    CHECK_MSG(n <= 400, "more than 400 allocations on the path?");
    CHECK(n > 5);
    rig_rank_close(&p);
    rig_rank_close(&c);
    tide_connector_destroy(s);
    tide_close(st);
}
