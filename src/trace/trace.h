/*
 * trace.h — request traces in Mooncake's format, and an offline cache simulator for them.
 *
 * A trace is JSON Lines, one request a line:
 *
 *   {"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, ...]}
 *
 * timestamp is the arrival time in milliseconds, input_length the prompt's tokens, and
 * hash_ids name the prompt's blocks of block_tokens tokens (512 in Mooncake's traces), the
 * last one possibly partial: equal ids mean equal prefixes up to and including that block.
 *
 * trace.c loads a trace into flat arrays and gives every distinct hash id a dense index,
 * so that the simulator (sim.c) can keep its state in plain arrays. sim.c plays a trace
 * through a cache of a fixed number of equal-size blocks under one policy, with the same
 * protocol as `tide replay` uses against a real store:
 *
 *   for each request: hit = the longest prefix of its blocks that the cache holds;
 *                     read the hit blocks in order (a "use");
 *                     write the others in order: a block already held is left alone (a
 *                     store keeps the first copy and does not count a duplicate put as a
 *                     use), a missing one is inserted, evicting as the policy says.
 *
 * Nothing here prints; errors come back as codes with a message in the caller's buffer.
 */
#ifndef TIDE_TRACE_H
#define TIDE_TRACE_H

#include <inttypes.h>
#include <stddef.h>
#include <stdint.h>

/* One request: its blocks are trace.ids[first .. first + nblocks). */
typedef struct trace_req {
    uint64_t ts_ms;
    uint64_t input_len;
    uint64_t output_len;
    size_t first;
    uint32_t nblocks;
} trace_req;

typedef struct trace {
    trace_req *reqs;
    size_t nreqs;
    uint64_t *hash_ids; /* every request's hash ids, concatenated (nrefs of them) */
    uint32_t *ids;      /* the same, as dense indices 0..ndistinct-1 in order of first use */
    size_t nrefs;
    size_t ndistinct;
    uint64_t tokens;       /* sum of input_len */
    uint64_t block_tokens; /* what the loader checked input_len against */
} trace;

/* The store key `tide replay` gives a block of hash id H (PRIu64 from inttypes.h). */
#define TRACE_KEY_FMT "trace/%" PRIu64

/* Longest line the loader accepts, and the most blocks one request may name. */
#define TRACE_LINE_MAX (16u << 20)
#define TRACE_REQ_BLOCKS_MAX 1000000u

/*
 * Load a trace from path (at most `limit` requests; 0 = all). Blank lines are skipped.
 * Every request must have the four fields with non-negative integer values (hash ids below
 * 2^53, where JSON numbers stop being exact), and exactly ceil(input_length / block_tokens)
 * hash ids. Returns 0, or: -errno when the file cannot be read; TIDE_EPARSE with
 * "line N: ..." in err for a line that does not parse or breaks a rule; -ENOMEM. On
 * failure *t is left empty (trace_free() on it is harmless).
 */
int trace_load(const char *path, uint64_t block_tokens, uint64_t limit, trace *t, char *err,
               size_t errlen);

/* Parse a trace from a string of JSON lines (same rules; for tests and in-memory use). */
int trace_load_text(const char *text, uint64_t block_tokens, uint64_t limit, trace *t, char *err,
                    size_t errlen);

void trace_free(trace *t);

/* Tokens in block i (0-based) of request r: block_tokens, less for a partial last block. */
uint64_t trace_block_tokens(const trace *t, const trace_req *r, uint32_t i);

/*
 * Model presets: KV-cache bytes per token, from each model's published shape (trace.c
 * says how each figure is computed). trace_model_find() returns 0 and sets *bytes, or
 * -1 for an unknown name. trace_model_count()/trace_model_at() list them for help texts.
 */
typedef struct trace_model {
    const char *name;
    uint64_t bytes_per_token;
    const char *shape; /* a few words: "32 layers x 8 KV heads x 128 x K,V x bf16" */
} trace_model;

int trace_model_find(const char *name, uint64_t *bytes_per_token);
size_t trace_model_count(void);
const trace_model *trace_model_at(size_t i);

/* ---------------------------------------------------------------------------------------
 * Simulation (sim.c)
 * ------------------------------------------------------------------------------------- */
enum sim_policy {
    SIM_INFINITE = 0, /* never evicts: only compulsory misses */
    SIM_BELADY = 1,   /* evict the block whose next use is farthest in the future */
    SIM_LRU = 2,      /* evict the least recently used block */
    SIM_S3FIFO = 3,   /* S3-FIFO (Yang et al., SOSP 2023), counted in blocks, exact ghost */
    SIM_ARC = 4,      /* ARC (Megiddo and Modha, FAST 2003), exact ghosts */
    SIM_ADMIT = 5,    /* LRU with reuse-count admission: a full cache stores a block only on
                         its second put (an exact ghost of the last `capacity` blocks seen) */
    SIM_CHAIN = 6,    /* src/store/chain.c: chain-ordered segmented LRU (batch hints) */
    SIM_CHAINARC = 7, /* ARC with the same chain hints: chain order in T1/T2, tails last */
    SIM_ADAPT = 8,    /* src/store/adapt.c: chain order, ghost admission, adaptive protected */
    SIM_NPOLICIES = 9
};

/* The name of a policy ("infinite", "belady", "lru", "s3fifo", "arc", "admit", "chain",
 * "chainarc"). */
const char *sim_policy_name(int policy);

typedef struct sim_result {
    uint64_t requests;
    uint64_t blocks;     /* block references: the sum of every request's hash ids */
    uint64_t hit_blocks; /* blocks in matched prefixes */
    uint64_t tokens;     /* prompt tokens */
    uint64_t hit_tokens; /* tokens in matched prefixes */
    uint64_t inserts;    /* blocks written (misses that were not already held) */
    uint64_t refused;    /* writes a policy declined to store (SIM_ADMIT only) */
    uint64_t evictions;  /* blocks evicted */
    uint64_t compulsory; /* distinct blocks: the misses no cache avoids */
    /* SIM_ADAPT only (0 otherwise): protected's share of the cache at the end, and how many
     * times the miniature simulations moved it (src/store/shadow.c) */
    double share;
    uint64_t share_moves;
} sim_result;

/*
 * The chain-aware policies see what a store sees from `tide replay`: per request, one batch
 * of reads (the hit prefix, in order) and one batch of writes (the rest, in order, the last
 * one marked as the chain's tail), nothing more about the keys. They match the store's
 * policy of the same name when the replay sends each request in one batch.
 *
 * Play trace t through a cache of `capacity` blocks (ignored for SIM_INFINITE; at least 1
 * otherwise) under `policy`. Returns 0, -EINVAL for a bad policy or a capacity of 0, or
 * -ENOMEM.
 */
int sim_run(const trace *t, int policy, uint64_t capacity, sim_result *out);

#endif /* TIDE_TRACE_H */
