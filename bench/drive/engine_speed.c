/*
 * engine_speed.c — measure the reference engine's prefill speed on one core, and the
 * compute part of a TTFT after a prefix hit (pages copied in memory, no store).
 *
 *   make && build/bench/drive/engine_speed [hybrid|attention] [tokens]
 *
 * (`make` builds it with the engine's objects, as bench/ttft is built, so a change to the
 * engine that breaks it breaks the build.)
 *
 * Wall and CPU time are both printed: on a shared machine the CPU time is the steadier.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/engine.h"

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    engine_preset preset = ENGINE_PRESET_HYBRID;
    if (argc > 1 && engine_preset_parse(argv[1], &preset)) {
        fprintf(stderr, "usage: %s [hybrid|attention] [tokens]\n", argv[0]);
        return 2;
    }
    uint32_t n = argc > 2 ? (uint32_t)strtoul(argv[2], NULL, 10) : 8192;
    engine_config cfg;
    engine_config_init(&cfg, preset);
    while ((uint64_t)cfg.num_blocks * cfg.block_size < 2ull * n + 64)
        cfg.num_blocks *= 2;
    engine_model *m;
    char err[256];
    int rc = engine_create(&cfg, &m, err, sizeof(err));
    if (rc) {
        fprintf(stderr, "engine_create: %d %s\n", rc, err);
        return 1;
    }
    uint32_t *tok = malloc((size_t)n * sizeof(uint32_t));
    float *logits = malloc((size_t)cfg.vocab * sizeof(float));
    for (uint32_t i = 0; i < n; i++)
        tok[i] = (uint32_t)((i * 2654435761u) % cfg.vocab);

    engine_req *a, *b;
    engine_req_new(m, &a);
    double c0 = cpu_s();
    uint64_t t0 = engine_now_ns();
    rc = engine_prefill(a, tok, n, logits);
    double wall = (double)(engine_now_ns() - t0) / 1e9, cpu = cpu_s() - c0;
    if (rc) {
        fprintf(stderr, "prefill: %d\n", rc);
        return 1;
    }
    printf("model %s (%s): d_model %u, heads %u/%u x %u, d_ff %u, d_inner %u, d_state %u\n",
           argv[1] ? argv[1] : "hybrid", engine_layout(m), cfg.d_model, cfg.n_q_heads,
           cfg.n_kv_heads, cfg.head_dim, cfg.d_ff, cfg.d_inner, cfg.d_state);
    printf("prefill %u tokens: %.3f s wall, %.3f s cpu, %.0f tokens/s (cpu)\n", n, wall, cpu,
           n / cpu);

    /* A hit: copy the pages of the aligned prefix and its snapshot, compute the rest. */
    uint32_t bt = engine_block_tokens(m), P = (n - 1) / bt * bt, na, nb;
    engine_req_new(m, &b);
    engine_req_reserve(b, P);
    const int32_t *ba = engine_req_blocks(a, &na), *bb = engine_req_blocks(b, &nb);
    size_t pb = engine_page_bytes(m, ENGINE_GROUP_ATTN, 0), moved = 0;
    char *page = malloc(pb > 1 << 20 ? pb : 1 << 20);
    for (uint32_t i = 0; i < P / bt; i++) {
        engine_page_read(m, ENGINE_GROUP_ATTN, 0, (uint32_t)ba[i], page);
        engine_page_write(m, ENGINE_GROUP_ATTN, 0, (uint32_t)bb[i], page);
        moved += pb;
    }
    if (engine_num_groups(m) == 2 && P) {
        int sa = engine_req_mamba_slot(a, P / bt - 1, 0),
            sb = engine_req_mamba_slot(b, P / bt - 1, 1);
        engine_page_read(m, ENGINE_GROUP_MAMBA, 0, (uint32_t)sa, page);
        engine_page_write(m, ENGINE_GROUP_MAMBA, 0, (uint32_t)sb, page);
        moved += engine_page_bytes(m, ENGINE_GROUP_MAMBA, 0);
    }
    float *l2 = malloc((size_t)cfg.vocab * sizeof(float));
    engine_req_resume(b, P);
    t0 = engine_now_ns();
    rc = engine_prefill(b, tok, n, l2);
    double hit = (double)(engine_now_ns() - t0) / 1e9;
    printf("after a hit of %u tokens (%zu bytes of pages): %u tokens computed in %.4f s; "
           "logits %s\n",
           P, moved, n - P, hit,
           !rc && !memcmp(logits, l2, cfg.vocab * sizeof(float)) ? "bit-identical" : "DIFFER");
    engine_req_free(a);
    engine_req_free(b);
    engine_destroy(m);
    return 0;
}
