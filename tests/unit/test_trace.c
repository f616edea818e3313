/*
 * test_trace.c — the trace loader and the cache simulator on hand-made traces whose
 * answers are known: the textbook reference string where Belady, LRU and FIFO differ, a
 * small S3-FIFO case worked by hand, ARC, reuse-count admission and the chain policy on
 * cases worked by hand, prefix hits with a partial last block, the infinite cache against
 * 1 - compulsory / references, and every kind of bad line.
 */
#include <errno.h>

#include "common/prng.h"
#include "harness.h"
#include "tide.h"
#include "trace/trace.h"

/* A trace of one-block requests (block_tokens 1) from a string of single-letter ids. */
static void single_blocks(const char *seq, trace *t) {
    static char text[64 * 1024];
    size_t n = 0;
    for (const char *p = seq; *p; p++) {
        if (*p == ' ') continue;
        n += (size_t)snprintf(text + n, sizeof(text) - n,
                              "{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, "
                              "\"hash_ids\": [%d]}\n",
                              (unsigned char)*p);
        CHECK(n < sizeof(text));
    }
    char err[256];
    int rc = trace_load_text(text, 1, 0, t, err, sizeof(err));
    CHECK_MSG(rc == 0, "trace_load_text: %d %s", rc, err);
}

static uint64_t hits(const trace *t, int policy, uint64_t cap) {
    sim_result r;
    CHECK_EQ(sim_run(t, policy, cap, &r), 0);
    CHECK_EQ(r.blocks, t->nrefs);
    CHECK_EQ(r.hit_blocks + r.inserts, r.blocks); /* one-block requests: no duplicates */
    return r.hit_blocks;
}

/* Silberschatz's reference string, 3 frames: OPT 9 faults, LRU 12 (FIFO 15). */
TEST(trace_sim_textbook_belady_vs_lru) {
    trace t;
    /* 7 0 1 2 0 3 0 4 2 3 0 3 2 1 2 0 1 7 0 1 */
    single_blocks("70120304230321201701", &t);
    CHECK_EQ(t.nrefs, 20);
    CHECK_EQ(t.ndistinct, 6);
    CHECK_EQ(hits(&t, SIM_BELADY, 3), 20 - 9);
    CHECK_EQ(hits(&t, SIM_LRU, 3), 20 - 12);
    CHECK_EQ(hits(&t, SIM_INFINITE, 0), 20 - 6);
    /* With room for everything every policy reaches the infinite cache. */
    for (int p = SIM_BELADY; p < SIM_NPOLICIES; p++)
        CHECK_EQ(hits(&t, p, 6), 20 - 6);
    trace_free(&t);
}

/*
 * A B A C B A C with 2 blocks. LRU: only the second A hits (1). Belady: A, B and C hit
 * (evicting A then B, whose next uses are farthest): 3. S3-FIFO (S target 0, so S is
 * emptied first): A moves to M on C's arrival and B goes to the ghost; B comes back into M
 * and C goes to the ghost; A hits; C comes back into M, A is given another round and B
 * leaves. Hits: A twice = 2. Infinite: 7 - 3 = 4.
 */
TEST(trace_sim_small_s3fifo_by_hand) {
    trace t;
    single_blocks("ABACBAC", &t);
    CHECK_EQ(hits(&t, SIM_LRU, 2), 1);
    CHECK_EQ(hits(&t, SIM_BELADY, 2), 3);
    CHECK_EQ(hits(&t, SIM_S3FIFO, 2), 2);
    CHECK_EQ(hits(&t, SIM_INFINITE, 0), 4);
    trace_free(&t);
}

/*
 * ARC on A B A C B A C with c = 2: A's second use hits (T1 -> T2); C evicts B from T1
 * into B1; B's return grows p to 1 and evicts A from T2 into B2; A's return shrinks p to 0
 * and evicts C into B1; C's return evicts B. One hit, where LRU also gets one.
 */
TEST(trace_sim_small_arc_by_hand) {
    trace t;
    single_blocks("ABACBAC", &t);
    CHECK_EQ(hits(&t, SIM_ARC, 2), 1);
    trace_free(&t);
}

/*
 * Reuse-count admission with 2 blocks on A B C A B C A: A and B fill the cache; C finds it
 * full and unseen, so it is refused (into the ghost); A and B hit; C's second put is
 * admitted and evicts A (the LRU tail, into the ghost); A comes back the same way. LRU
 * hits nothing here.
 */
TEST(trace_sim_admission_by_hand) {
    trace t;
    single_blocks("ABCABCA", &t);
    sim_result r;
    CHECK_EQ(sim_run(&t, SIM_ADMIT, 2, &r), 0);
    CHECK_EQ(r.hit_blocks, 2);
    CHECK_EQ(r.refused, 1);
    CHECK_EQ(r.inserts, 4);
    CHECK_EQ(hits(&t, SIM_LRU, 2), 0);
    trace_free(&t);
}

/*
 * The chain policy with 4 blocks (protected holds 4 * 2 / 5 = 1) on five prompts:
 *   [1 2 3]  written in order, 3 (the batch's last) at probation's eviction end
 *   [4 5]    4 at the head; 5 evicts 3 and waits at the end
 *   [1 2 6]  1 and 2 hit: 1 to protected, 2 behind it and back to probation (over the
 *            limit) at the head; 6, a batch of one (not known to end a chain), goes to
 *            the head and evicts 5                                              (2 hits)
 *   [1 2 3]  1 and 2 hit again the same way; 3 evicts 4                         (2 hits)
 *   [4 5]    a miss: 4 evicts 6, 5 evicts 2 and waits at the end
 * 4 hits of 13, 5 evictions. LRU evicts each prompt's first block first and hits only
 * [1 2] once (2).
 */
TEST(trace_sim_chain_by_hand) {
    trace t;
    char err[256];
    const char *text =
        "{\"timestamp\": 0, \"input_length\": 3, \"output_length\": 1, \"hash_ids\": [1, 2, 3]}\n"
        "{\"timestamp\": 1, \"input_length\": 2, \"output_length\": 1, \"hash_ids\": [4, 5]}\n"
        "{\"timestamp\": 2, \"input_length\": 3, \"output_length\": 1, \"hash_ids\": [1, 2, 6]}\n"
        "{\"timestamp\": 3, \"input_length\": 3, \"output_length\": 1, \"hash_ids\": [1, 2, 3]}\n"
        "{\"timestamp\": 4, \"input_length\": 2, \"output_length\": 1, \"hash_ids\": [4, 5]}\n";
    CHECK_EQ(trace_load_text(text, 1, 0, &t, err, sizeof(err)), 0);
    sim_result r;
    CHECK_EQ(sim_run(&t, SIM_CHAIN, 4, &r), 0);
    CHECK_EQ(r.blocks, 13);
    CHECK_EQ(r.hit_blocks, 4);
    CHECK_EQ(r.evictions, 5);
    CHECK_EQ(sim_run(&t, SIM_LRU, 4, &r), 0);
    CHECK_EQ(r.hit_blocks, 2);
    trace_free(&t);
}

/* A scan of one-time blocks between reuses of a hot set: S3-FIFO keeps the hot set. */
TEST(trace_sim_scan_resistance) {
    static char seq[4096];
    size_t n = 0;
    /* hot set "abcd" used twice, then 40 one-time blocks, then the hot set, repeatedly */
    for (int round = 0; round < 8; round++) {
        for (int k = 0; k < 2; k++)
            for (char c = 'a'; c <= 'd'; c++)
                seq[n++] = c;
        for (int i = 0; i < 40; i++)
            seq[n++] = (char)(0x80 + (round * 40 + i) % 120); /* ids 128..247 */
    }
    seq[n] = '\0';
    trace t;
    single_blocks(seq, &t);
    uint64_t lru = hits(&t, SIM_LRU, 20), s3 = hits(&t, SIM_S3FIFO, 20);
    uint64_t opt = hits(&t, SIM_BELADY, 20);
    CHECK_MSG(s3 > lru, "s3fifo %llu, lru %llu", (unsigned long long)s3, (unsigned long long)lru);
    CHECK(opt >= s3);
    trace_free(&t);
}

/* Prefix hits: only the leading held blocks count; tokens follow the partial last block. */
TEST(trace_sim_prefix_and_tokens) {
    const char *text =
        "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [1, 2, 3]}\n"
        "\n"
        "{\"timestamp\": 5, \"input_length\": 9, \"output_length\": 1, \"hash_ids\": [1, 2, 5]}\n"
        "{\"timestamp\": 9, \"input_length\": 12, \"output_length\": 2, \"hash_ids\": [7, 2, 3]}\n"
        "{\"timestamp\": 9, \"input_length\": 4, \"output_length\": 2, \"hash_ids\": [1]}";
    trace t;
    char err[256];
    CHECK_EQ(trace_load_text(text, 4, 0, &t, err, sizeof(err)), 0);
    CHECK_EQ(t.nreqs, 4);
    CHECK_EQ(t.nrefs, 10);
    CHECK_EQ(t.ndistinct, 5);
    CHECK_EQ(t.tokens, 35);
    CHECK_EQ(trace_block_tokens(&t, &t.reqs[0], 2), 2);
    CHECK_EQ(t.reqs[1].ts_ms, 5);
    sim_result r;
    CHECK_EQ(sim_run(&t, SIM_INFINITE, 0, &r), 0);
    /* req 2 hits 1,2 (8 tokens); req 3 starts with 7: no hit, 2 and 3 are duplicates;
     * req 4 hits 1 (4 tokens). */
    CHECK_EQ(r.hit_blocks, 3);
    CHECK_EQ(r.hit_tokens, 12);
    CHECK_EQ(r.inserts, 5);
    CHECK_EQ(r.blocks, 10);
    CHECK_EQ(r.tokens, 35);
    /* One block of room: every block is written over before it is asked for again. */
    CHECK_EQ(sim_run(&t, SIM_LRU, 1, &r), 0);
    CHECK_EQ(r.hit_blocks, 0);
    CHECK_EQ(sim_run(&t, SIM_LRU, 3, &r), 0);
    CHECK_EQ(r.hit_blocks, 2); /* req 2: 1, 2 (then 5 evicts 3); req 4: 1 was evicted by 7 */
    trace_free(&t);
    /* --limit */
    CHECK_EQ(trace_load_text(text, 4, 2, &t, err, sizeof(err)), 0);
    CHECK_EQ(t.nreqs, 2);
    trace_free(&t);
}

/*
 * Random prefix trees: each request picks one of 12 documents (a chain of 1..6 blocks
 * whose ids depend only on the document and position) and a private suffix. The trace is
 * prefix-closed, so the infinite cache misses exactly once per distinct block, and the
 * finite policies sit between nothing and it.
 */
TEST(trace_sim_infinite_is_compulsory) {
    static char text[1 << 20];
    size_t n = 0;
    uint64_t x = 88172645463325252ull, next_private = 1000;
    for (int q = 0; q < 400; q++) {
        int doc = (int)(prng_next(&x) % 12), depth = 1 + (int)(prng_next(&x) % 6);
        int priv = (int)(prng_next(&x) % 3);
        n += (size_t)snprintf(text + n, sizeof(text) - n,
                              "{\"timestamp\": %d, \"input_length\": %d, \"output_length\": 1, "
                              "\"hash_ids\": [",
                              q, (depth + priv) * 16 - 3);
        for (int i = 0; i < depth + priv; i++)
            n += (size_t)snprintf(text + n, sizeof(text) - n, "%s%llu", i ? ", " : "",
                                  i < depth ? (unsigned long long)(doc * 10 + i)
                                            : (unsigned long long)next_private++);
        n += (size_t)snprintf(text + n, sizeof(text) - n, "]}\n");
        CHECK(n < sizeof(text));
    }
    trace t;
    char err[256];
    CHECK_EQ(trace_load_text(text, 16, 0, &t, err, sizeof(err)), 0);
    sim_result inf, r;
    CHECK_EQ(sim_run(&t, SIM_INFINITE, 0, &inf), 0);
    CHECK_EQ(inf.hit_blocks, t.nrefs - t.ndistinct);
    CHECK_EQ(inf.compulsory, t.ndistinct);
    CHECK_EQ(inf.evictions, 0);
    for (uint64_t cap = 1; cap <= 256; cap *= 4) {
        for (int p = SIM_BELADY; p < SIM_NPOLICIES; p++) {
            CHECK_EQ(sim_run(&t, p, cap, &r), 0);
            CHECK(r.hit_blocks <= inf.hit_blocks);
            CHECK(r.hit_tokens <= inf.hit_tokens);
            CHECK_EQ(r.inserts - r.evictions <= cap, 1);
        }
    }
    CHECK_EQ(sim_run(&t, SIM_LRU, t.ndistinct, &r), 0);
    CHECK_EQ(r.hit_blocks, inf.hit_blocks);
    CHECK_EQ(r.evictions, 0);
    trace_free(&t);
}

TEST(trace_sim_bad_arguments) {
    trace t;
    single_blocks("AB", &t);
    sim_result r;
    CHECK_EQ(sim_run(&t, SIM_LRU, 0, &r), -EINVAL);
    CHECK_EQ(sim_run(&t, 99, 4, &r), -EINVAL);
    CHECK_STR(sim_policy_name(SIM_S3FIFO), "s3fifo");
    CHECK_STR(sim_policy_name(SIM_CHAIN), "chain");
    CHECK_STR(sim_policy_name(SIM_CHAINARC), "chainarc");
    CHECK_STR(sim_policy_name(-1), "unknown");
    trace_free(&t);
}

TEST(trace_load_bad_lines) {
    static const struct {
        const char *text, *want;
    } cases[] = {
        {"{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [1]}\n"
         "{\"timestamp\": 1, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [1}\n",
         "line 2: malformed JSON"},
        {"not json", "line 1: malformed JSON near column 1"},
        {"{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [1]} x",
         "line 1: malformed JSON"},
        {"[1, 2]", "line 1: expected a JSON object"},
        {"{\"input_length\": 1, \"output_length\": 1, \"hash_ids\": [1]}",
         "line 1: missing field \"timestamp\""},
        {"{\"timestamp\": 0, \"output_length\": 1, \"hash_ids\": [1]}",
         "missing field \"input_length\""},
        {"{\"timestamp\": 0, \"input_length\": 1, \"hash_ids\": [1]}",
         "missing field \"output_length\""},
        {"{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1}",
         "missing field \"hash_ids\""},
        {"{\"timestamp\": 0, \"input_length\": -5, \"output_length\": 1, \"hash_ids\": []}",
         "field \"input_length\" is negative (-5)"},
        {"{\"timestamp\": -1, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [1]}",
         "field \"timestamp\" is negative"},
        {"{\"timestamp\": 0, \"input_length\": 1, \"output_length\": -2, \"hash_ids\": [1]}",
         "field \"output_length\" is negative"},
        {"{\"timestamp\": 0, \"input_length\": 1.5, \"output_length\": 1, \"hash_ids\": [1]}",
         "field \"input_length\" is not an integer"},
        {"{\"timestamp\": \"0\", \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [1]}",
         "field \"timestamp\" is not a number"},
        {"{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": 1}",
         "field \"hash_ids\" is not an array"},
        {"{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [-1]}",
         "hash_ids[0] is not an integer"},
        {"{\"timestamp\": 0, \"input_length\": 2, \"output_length\": 1, \"hash_ids\": [1, \"x\"]}",
         "hash_ids[1] is not an integer"},
        {"{\"timestamp\": 0, \"input_length\": 3, \"output_length\": 1, \"hash_ids\": [1]}",
         "1 hash ids for input_length 3: blocks of 1 tokens need 3"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        test_context = cases[i].text;
        trace t;
        char err[256];
        CHECK_EQ(trace_load_text(cases[i].text, 1, 0, &t, err, sizeof(err)), TIDE_EPARSE);
        CHECK_CONTAINS(err, cases[i].want);
        CHECK(t.reqs == NULL && t.nreqs == 0);
    }
    test_context = NULL;
    trace t;
    char err[256];
    CHECK_EQ(trace_load("/nonexistent/trace.jsonl", 512, 0, &t, err, sizeof(err)), -ENOENT);
    CHECK_CONTAINS(err, "cannot open /nonexistent/trace.jsonl");
    CHECK_EQ(trace_load_text("", 0, 0, &t, err, sizeof(err)), -EINVAL);
}

TEST(trace_models) {
    uint64_t b = 0;
    CHECK_EQ(trace_model_find("llama-3-8b", &b), 0);
    CHECK_EQ(b, 2 * 32 * 8 * 128 * 2);
    CHECK_EQ(trace_model_find("llama-3-70b", &b), 0);
    CHECK_EQ(b, 2 * 80 * 8 * 128 * 2);
    CHECK_EQ(trace_model_find("deepseek-v3", &b), 0);
    CHECK_EQ(b, 61 * (512 + 64) * 2);
    CHECK_EQ(trace_model_find("gpt-5", &b), -1);
    CHECK(trace_model_count() >= 4);
    CHECK(trace_model_at(trace_model_count()) == NULL);
}
