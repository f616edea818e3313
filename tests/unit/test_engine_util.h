/*
 * test_engine_util.h — helpers shared by the engine tests: tiny configurations, prompts,
 * full prefills, and the "store round trip" that copies a request's first P tokens of KV
 * pages and its Mamba snapshot into a second model's fresh blocks and resumes there.
 * Every helper fails the running test on an unexpected error.
 */
#ifndef TEST_ENGINE_UTIL_H
#define TEST_ENGINE_UTIL_H

#include <stdint.h>

#include "engine/engine.h"

/* A tiny model: odd sizes so every kernel runs its tail paths; block_size 4, 64 blocks. */
void eng_small(engine_config *c, engine_preset p);
engine_model *eng_model(const engine_config *c);
/* n pseudo-random tokens below vocab (malloc'd). */
uint32_t *eng_tokens(uint32_t n, uint32_t vocab, uint32_t seed);
/* Logits (malloc'd) of the last token of a fresh prefill of eng_tokens(n, vocab, 1) or tok. */
float *eng_full_logits(const engine_config *c, uint32_t n);
float *eng_full_logits_tok(const engine_config *c, const uint32_t *tok, uint32_t n);

/* A model with one request that prefilled tok[0..n) (snapshots at every boundary). */
typedef struct eng_run {
    engine_model *m;
    engine_req *r;
    uint32_t *tok;
    uint32_t n;
    float *logits;
} eng_run;
void eng_prefill_run(eng_run *a, const engine_config *c, uint32_t n);
void eng_run_free(eng_run *a);

typedef struct eng_resumed {
    engine_model *m;
    engine_req *r;
} eng_resumed;
/* Called after the copy and before the resume: may damage what was copied. */
typedef void (*eng_tamper_fn)(engine_model *m, engine_req *r, void *arg);
/* A second model from c (whose blocks are offset by a few taken by another request), a
 * copy of a's pages for positions [0, P) on every rank and of a's snapshot at P, then
 * resume at P and prefill a->tok up to n. Returns the logits (malloc'd); keep, if given,
 * receives the model and request, otherwise they are freed. */
float *eng_resumed_logits(eng_run *a, const engine_config *c, uint32_t P, uint32_t n,
                          eng_resumed *keep);
float *eng_resumed_logits_t(eng_run *a, const engine_config *c, uint32_t P, uint32_t n,
                            eng_tamper_fn fn, void *arg, eng_resumed *keep);

#endif
