/*
 * etide.h — the reference engine in front of libtide's connector, driven the way vLLM
 * drives a KV-cache connector. One etide handle is one engine instance: an engine model
 * (all of its simulated ranks), a scheduler-role connector, and one worker-role connector
 * per rank with that rank's paged regions registered.
 *
 * A prompt goes through the vLLM sequence:
 *
 *   hashes      tide_prefix_hashes(): tide's own chain (xxh3-128, 16 bytes a hash, 16 zero
 *               bytes as the first parent, no salt) over hash units of the connector's hash
 *               block size — the engine's block_tokens (block_size x dcp)
 *   lookup      tide_connector_lookup(): tokens the store can supply (0 when the store is
 *               unreachable: a warning, and the prompt is computed)
 *   allocate    the request's attention blocks for the whole prompt, and Mamba slots where
 *               align mode keeps snapshots: the hit boundary, every retention boundary and
 *               the replay boundary floor((n - 1) / block) * block; the block tables go to
 *               tide_connector_update_after_alloc()
 *   load        a step with the load job (tide_connector_build_meta), started on every
 *               rank's worker; blocks whose load failed are recomputed: attention resumes
 *               before the first failed block, a hybrid model at 0 (its one snapshot is at
 *               the hit boundary)
 *   compute     engine_prefill() in steps that end at every retention boundary, the replay
 *               boundary and the prompt's end (align mode: snapshots are stored where a
 *               step ends); after each step its save job goes to the workers, which store
 *               the new pages in the background while the next step computes
 *   finish      tide_connector_request_finished(); the request's blocks are freed once
 *               every rank reported its saves done
 *
 * The connector configuration of each rank is generated from the engine's configuration by
 * etide_config_json(): group 0 full attention (float32, the rank's KV heads), group 1 (with
 * Mamba layers) a MambaSpec in align mode with the rank's conv and SSM state shapes;
 * tensor_parallel_size = tp x dcp with decode_context_parallel_size = dcp and tp_rank = the
 * engine rank, so rank r has DCP rank r % dcp as in vLLM. The model name carries a hash of
 * every dimension and the weight seed: caches of different models never share keys.
 *
 * Threads: one thread uses an etide at a time (the engine's rule); the connectors' own
 * threads move pages while that thread waits or computes. Nothing here prints: warnings
 * come back in etide_result.warning.
 * Errors: negative errno or TIDE_E* codes, with a message in the caller's buffer or
 * etide_errmsg().
 */
#ifndef ENGINE_ETIDE_H
#define ENGINE_ETIDE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"
#include "tide.h"

#define ETIDE_MAX_RANKS 16
/* Default retention interval (tokens): Mamba snapshots are stored every this many tokens,
 * so another prompt sharing a prefix can resume a hybrid model there. */
#define ETIDE_DEFAULT_INTERVAL 512

typedef struct etide etide;

typedef struct etide_options {
    /* Tokens between stored Mamba snapshots (and scheduler steps); rounded up to a multiple
     * of block_tokens; 0 = ETIDE_DEFAULT_INTERVAL. */
    uint32_t interval;
} etide_options;

/* What one prompt did. Bytes and objects are summed over every rank. */
typedef struct etide_result {
    uint32_t prompt_tokens;
    uint32_t hit_tokens;      /* tokens the lookup offered */
    uint32_t resumed_tokens;  /* tokens taken from the store after load errors (<= hit) */
    uint32_t computed_tokens; /* tokens the engine computed */
    uint32_t load_errors;     /* blocks (all ranks) whose load failed */
    uint64_t loaded_objects, loaded_bytes;
    uint64_t saved_objects, saved_bytes, dedup_objects;
    uint64_t save_failed; /* objects whose save failed (store errors or no space) */
    int lookup_failed;    /* the lookup's store query failed: computed from scratch */
    uint64_t lookup_ns, load_ns, compute_ns;
    uint64_t ttft_ns;      /* from the request's arrival to its first token's logits */
    uint64_t save_wait_ns; /* after the first token: waiting for the saves to finish */
    char warning[512];     /* "" or what went wrong with the store (the output is still right) */
} etide_result;

/*
 * The connector configuration (JSON, NUL-terminated, malloc'd into *out; free() it) of one
 * rank of model m. Errors: -EINVAL (rank out of range), -ENOMEM.
 */
int etide_config_json(const engine_model *m, uint32_t rank, const etide_options *o, char **out);

/*
 * Create the connectors of an engine instance over a store the caller opened (borrowed:
 * close it after etide_destroy), and register every rank's regions. opts may be NULL.
 * store NULL (it could not be opened) gives an instance that computes every prompt and
 * says so in each result's warning.
 * Errors: the connector's (TIDE_ECONFIG, TIDE_EUNSUPPORTED, ...) with its message in
 * err[errlen], -EINVAL, -ENOMEM.
 */
int etide_create(engine_model *m, tide_store *store, const etide_options *opts, etide **out,
                 char *err, size_t errlen);
/* Wait for the connectors' jobs, stop them, free everything (not the model or store). */
void etide_destroy(etide *e);
/* The last error message of this handle. */
const char *etide_errmsg(const etide *e);

/*
 * Serve one prompt through the connector: tokens[0..n) (n >= 1), logits of its last token
 * into logits (vocab floats). req_id names the request for the connector (1..200 bytes,
 * unique among this instance's live requests). Returns 0 with *res filled — store
 * failures are warnings in res->warning, never errors: the prompt is then computed — or a
 * negative code when the engine or the connector's bookkeeping fails (e.g. -ENOSPC: the
 * engine's block pool is too small for the prompt).
 */
int etide_prefill(etide *e, const char *req_id, const uint32_t *tokens, uint32_t n, float *logits,
                  etide_result *res);

/* The same prompt computed from scratch without the store (the baseline): logits into
 * logits, the time into *ns. Errors: the engine's. */
int etide_recompute(etide *e, const uint32_t *tokens, uint32_t n, float *logits, uint64_t *ns);

#endif
