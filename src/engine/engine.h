/*
 * engine.h — the reference inference engine: a small hybrid attention + Mamba language
 * model with a paged KV cache, Mamba state snapshots at block boundaries (vLLM's align
 * mode), chunked prefill, greedy decoding and simulated TP/DCP ranks.
 *
 * It exists to prove tide end to end: a request can start "as if" its first P tokens were
 * computed (KV blocks and a Mamba snapshot filled from outside, e.g. loaded from the
 * store), and its logits are then bit-identical to a full recompute.
 *
 * Bit-exactness: every value is computed per token with a reduction order that depends
 * only on the model's dimensions and the token's position, never on how the prompt was
 * cut into chunks or where it was resumed. All ranks' memory is real, but the arithmetic
 * runs once in this process in one global order, so TP and DCP give the same logits as
 * one rank (a real TP all-reduce or a DCP log-sum-exp merge would not; we do not model it).
 * The promise holds between processes running the same build on the same machine (the
 * exp is our own, but weights, RoPE angles and softplus use libm, and the compiler's code
 * must be the same); it is not a promise across builds or machines.
 *
 * Memory the connector registers — per rank r (0 <= r < tp * dcp; tp_rank = r / dcp,
 * dcp_rank = r % dcp) and per KV-cache group:
 *
 *   Group 0, ENGINE_GROUP_ATTN (full attention): one region per attention layer, in layer
 *   order, each a float32 array shaped
 *       (2, num_blocks, block_size, kv_heads_per_rank, head_dim)
 *   i.e. a K plane then a V plane. That is two segments per region (K, V); a block's bytes
 *   in one segment are block_len = block_size * kv_heads_per_rank * head_dim * 4 at
 *   segment_base + block * block_len. Rank r holds the KV heads of its TP shard and, of a
 *   logical block of block_tokens = block_size * dcp positions, the positions t with
 *   t % dcp == dcp_rank (slot (t % block_tokens) / dcp). With tp > num_kv_heads each KV
 *   head is replicated on tp / num_kv_heads ranks (kv_heads_per_rank = 1).
 *
 *   Group 1, ENGINE_GROUP_MAMBA (present when the model has Mamba layers): one region,
 *   shaped (mamba_slots, slot_floats) float32 — one segment. A slot is one snapshot of
 *   the rank's share of every Mamba layer's state, in layer order, each layer as
 *       conv state [d_conv - 1][channels_per_rank]   (oldest input first)
 *       ssm state  [channels_per_rank][d_state]
 *   where rank r holds channels [tp_rank * d_inner / tp, (tp_rank + 1) * d_inner / tp).
 *   DCP ranks of one TP shard hold identical copies (vLLM rejects Mamba with DCP; the
 *   engine allows it). A request's Mamba table maps logical
 *   block i to the slot holding the state after its first (i + 1) * block_tokens tokens.
 *
 *   One stored object = one block of one group on one rank = that block's bytes in every
 *   segment of every region of the group, in region order then segment order:
 *   engine_page_bytes() long; engine_page_read()/engine_page_write() gather and scatter it.
 *
 * Block ids are shared by all ranks: block b of group g is the same logical block on
 * every rank, each rank holding its own part of it.
 *
 * Threads: a model and its requests are used by one thread at a time (the model owns the
 * scratch memory of the forward pass). Nothing here prints.
 * Errors: negative errno values (-EINVAL, -ENOMEM, -ENOSPC, -ENOENT).
 */
#ifndef ENGINE_H
#define ENGINE_H

#include <stddef.h>
#include <stdint.h>

typedef enum engine_preset {
    ENGINE_PRESET_HYBRID = 0,    /* Mamba and attention layers interleaved: "MAMA..." */
    ENGINE_PRESET_ATTENTION = 1, /* attention layers only */
} engine_preset;

enum { ENGINE_GROUP_ATTN = 0, ENGINE_GROUP_MAMBA = 1, ENGINE_MAX_GROUPS = 2 };

typedef struct engine_config {
    engine_preset preset;
    /* Optional: one letter per layer, 'A' attention or 'M' Mamba (at least one 'A');
     * overrides preset and n_layers. Not kept: copied at engine_create(). */
    const char *layout;
    uint32_t n_layers;
    uint32_t vocab;
    uint32_t d_model;
    uint32_t n_q_heads, n_kv_heads, head_dim;   /* attention: grouped-query heads */
    uint32_t d_ff;                              /* SwiGLU hidden size (attention layers) */
    uint32_t d_inner, d_state, d_conv, dt_rank; /* Mamba mixer */
    float rope_theta;
    uint64_t seed;        /* weights are a pure function of the seed and the dimensions */
    uint32_t block_size;  /* tokens per KV page on one rank */
    uint32_t num_blocks;  /* pages in each attention region (all ranks) */
    uint32_t mamba_slots; /* snapshot slots in the Mamba region; 0 = num_blocks */
    uint32_t chunk_size;  /* prefill chunk, tokens */
    uint32_t tp, dcp;     /* simulated ranks */
} engine_config;

typedef struct engine_model engine_model;
typedef struct engine_req engine_req;

/* A registered memory region: num_segments segments of num_blocks blocks each. Block b of
 * segment s starts at base + s * segment_stride + b * block_len. */
typedef struct engine_region {
    void *base;
    size_t nbytes;
    uint32_t num_blocks;
    uint32_t num_segments;
    size_t segment_stride;
    size_t block_len;
} engine_region;

/* ---- model ---------------------------------------------------------------------------- */

/* Fill cfg with the defaults of a preset: 4 layers ("MAMA" or "AAAA"), d_model 256,
 * 4 query / 2 KV heads of 16, SwiGLU 512, Mamba d_inner 256, d_state 16, d_conv 4,
 * vocab 4096, block_size 16, 4096 blocks, chunks of 512. An 8k-token prefill takes about
 * 4 s (hybrid) or 6 s (attention) of one core here; bench/drive/engine_speed.c measures it. */
void engine_config_init(engine_config *cfg, engine_preset preset);
/* "hybrid" / "attention" -> preset; -EINVAL for anything else. */
int engine_preset_parse(const char *name, engine_preset *out);

/* Build a model: validate cfg, generate weights, allocate the regions. On failure returns
 * -EINVAL (with a message in err, if given) or -ENOMEM. Free with engine_destroy(). */
int engine_create(const engine_config *cfg, engine_model **out, char *err, size_t errlen);
void engine_destroy(engine_model *m);

/* The model's effective configuration (defaults resolved, layout expanded). */
const engine_config *engine_config_of(const engine_model *m);
/* 'A'/'M' per layer, NUL-terminated. */
const char *engine_layout(const engine_model *m);
uint32_t engine_vocab(const engine_model *m);
/* Tokens per logical block: block_size * dcp. Hash units and resume points use it. */
uint32_t engine_block_tokens(const engine_model *m);
/* Ranks: tp * dcp. */
uint32_t engine_num_ranks(const engine_model *m);
/* 1 with attention only, 2 with Mamba layers. */
uint32_t engine_num_groups(const engine_model *m);
/* Blocks (group 0) or slots (group 1) in the block stack, and how many are free now. */
uint32_t engine_blocks_total(const engine_model *m, int group);
uint32_t engine_blocks_free(const engine_model *m, int group);

/* ---- registered memory ---------------------------------------------------------------- */

/* Regions of a group on a rank (0 for an absent group or bad rank). */
uint32_t engine_num_regions(const engine_model *m, int group, uint32_t rank);
/* Describe region idx of a group on a rank; -EINVAL when out of range. The memory lives
 * until engine_destroy(). */
int engine_region_get(const engine_model *m, int group, uint32_t rank, uint32_t idx,
                      engine_region *out);
/* Bytes of one block of a group on one rank (= one stored object); 0 if absent. */
size_t engine_page_bytes(const engine_model *m, int group, uint32_t rank);
/* Gather block `block` of a group on a rank into dst (engine_page_bytes long), or scatter
 * src into it. -EINVAL for a bad group, rank or block. */
int engine_page_read(const engine_model *m, int group, uint32_t rank, uint32_t block, void *dst);
int engine_page_write(engine_model *m, int group, uint32_t rank, uint32_t block, const void *src);

/* ---- requests ------------------------------------------------------------------------- */

int engine_req_new(engine_model *m, engine_req **out);
/* Release the request's blocks and slots. */
void engine_req_free(engine_req *r);
/* Tokens computed so far (the next position to compute). */
uint32_t engine_req_pos(const engine_req *r);
/* Snapshot the Mamba state at every `every`-th block boundary (block index i with
 * (i + 1) % every == 0); 0 disables. Default 1 (every boundary). */
void engine_req_set_snapshot_every(engine_req *r, uint32_t every);

/* The request's attention block table: *n entries, entry i = the block holding positions
 * [i * block_tokens, (i + 1) * block_tokens). Valid until the next call that changes it. */
const int32_t *engine_req_blocks(const engine_req *r, uint32_t *n);
/* Make the block table cover the first ntokens positions, allocating blocks from the block stack.
 * -ENOSPC when the block stack runs dry (blocks already taken stay with the request). */
int engine_req_reserve(engine_req *r, uint32_t ntokens);
/* The request's Mamba table: *n entries, entry i = slot of the snapshot at the end of
 * block i, or -1. */
const int32_t *engine_req_mamba_slots(const engine_req *r, uint32_t *n);
/* Slot for the snapshot at the end of logical block `block`: returns it (>= 0), allocating
 * one when `create` and none is assigned; -ENOENT when none and !create; -ENOSPC when the
 * block stack is dry; -EINVAL without Mamba layers. */
int engine_req_mamba_slot(engine_req *r, uint32_t block, int create);

/* Put the request at position pos as if tokens [0, pos) were computed: their KV must be
 * in the request's blocks (e.g. loaded from the store) and, for a model with Mamba layers,
 * the snapshot at pos in the slot of block pos / block_tokens - 1. pos must be a multiple
 * of block_tokens (0 = start afresh). The running Mamba state is restored from the
 * snapshot (for every DCP rank the copy of dcp_rank 0 is read). -EINVAL on a bad pos,
 * -ENOENT when a block or the snapshot is missing. */
int engine_req_resume(engine_req *r, uint32_t pos);

/* ---- compute -------------------------------------------------------------------------- */

/* Prefill: tokens[0..n) is the whole prompt; positions [pos, n) are computed in chunks of
 * chunk_size, writing KV into the request's blocks (allocated as needed) and Mamba
 * snapshots at block boundaries. logits (vocab floats, may be NULL) receives the last
 * token's logits. -EINVAL if pos >= n or a token is >= vocab; -ENOSPC when blocks or
 * slots run out (checked before anything is computed; blocks and slots already taken stay
 * with the request). */
int engine_prefill(engine_req *r, const uint32_t *tokens, uint32_t n, float *logits);
/* One decode step: compute `token` at position pos and its logits (may be NULL). */
int engine_decode(engine_req *r, uint32_t token, float *logits);
/* Greedy choice: index of the largest logit, the lowest index on ties. */
uint32_t engine_argmax(const float *logits, uint32_t vocab);
/* Prefill the prompt, then decode greedily, writing n_out generated tokens to out. The
 * first generated token comes from the prompt's logits. */
int engine_generate(engine_req *r, const uint32_t *prompt, uint32_t n, uint32_t *out,
                    uint32_t n_out);

/* ---- timing --------------------------------------------------------------------------- */

/* Monotonic clock in nanoseconds. */
uint64_t engine_now_ns(void);
/* What the request's compute calls did: tokens computed and nanoseconds spent. */
typedef struct engine_req_stats {
    uint64_t tokens_computed;
    uint64_t compute_ns;
    uint64_t last_call_ns; /* the latest prefill/decode call: its TTFT when it was a prefill */
} engine_req_stats;
void engine_req_stats_get(const engine_req *r, engine_req_stats *out);

#endif
