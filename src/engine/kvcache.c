/*
 * kvcache.c — the paged memory a connector registers: the region allocator, the block
 * stacks (a free stack per group; block ids are shared by all ranks), and the accessors
 * that describe regions and gather/scatter one block page. engine.h documents the layout.
 *
 * Regions are anonymous mappings: zeroed, page-aligned, and only backed by memory where
 * touched, so a large block stack costs nothing until used.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "internal.h"

void *engine_region_alloc(size_t bytes) {
    if (bytes == 0) bytes = 1;
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

void engine_region_free(void *p, size_t bytes) {
    if (p) munmap(p, bytes ? bytes : 1);
}

/* Ids are handed out lowest first (the stack holds them in descending order). */
int engine_stack_init(block_stack *p, uint32_t total) {
    p->free_ids = malloc((size_t)total * sizeof(int32_t));
    if (!p->free_ids) return -ENOMEM;
    p->total = total;
    p->nfree = total;
    for (uint32_t i = 0; i < total; i++)
        p->free_ids[i] = (int32_t)(total - 1 - i);
    return 0;
}

void engine_stack_fini(block_stack *p) {
    free(p->free_ids);
    memset(p, 0, sizeof(*p));
}

int32_t engine_stack_take(block_stack *p) {
    if (p->nfree == 0) return -ENOSPC;
    return p->free_ids[--p->nfree];
}

void engine_stack_put(block_stack *p, int32_t id) {
    p->free_ids[p->nfree++] = id;
}

static int group_ok(const engine_model *m, int group, uint32_t rank) {
    if (rank >= m->ranks) return 0;
    if (group == ENGINE_GROUP_ATTN) return 1;
    return group == ENGINE_GROUP_MAMBA && m->n_mamba > 0;
}

uint32_t engine_blocks_total(const engine_model *m, int group) {
    return group_ok(m, group, 0) ? m->stacks[group].total : 0;
}

uint32_t engine_blocks_free(const engine_model *m, int group) {
    return group_ok(m, group, 0) ? m->stacks[group].nfree : 0;
}

uint32_t engine_num_regions(const engine_model *m, int group, uint32_t rank) {
    if (!group_ok(m, group, rank)) return 0;
    return group == ENGINE_GROUP_ATTN ? m->n_attn : 1;
}

int engine_region_get(const engine_model *m, int group, uint32_t rank, uint32_t idx,
                      engine_region *out) {
    if (idx >= engine_num_regions(m, group, rank)) return -EINVAL;
    if (group == ENGINE_GROUP_ATTN) {
        *out = (engine_region){
            .base = m->kv[rank][idx],
            .nbytes = m->kv_region_floats * sizeof(float),
            .num_blocks = m->cfg.num_blocks,
            .num_segments = 2,
            .segment_stride = (size_t)m->cfg.num_blocks * m->kv_block_floats * sizeof(float),
            .block_len = m->kv_block_floats * sizeof(float),
        };
    } else {
        size_t len = m->slot_floats * sizeof(float);
        *out = (engine_region){
            .base = m->mamba[rank],
            .nbytes = (size_t)m->cfg.mamba_slots * len,
            .num_blocks = m->cfg.mamba_slots,
            .num_segments = 1,
            .segment_stride = (size_t)m->cfg.mamba_slots * len,
            .block_len = len,
        };
    }
    return 0;
}

size_t engine_page_bytes(const engine_model *m, int group, uint32_t rank) {
    size_t total = 0;
    engine_region rg;
    for (uint32_t i = 0; i < engine_num_regions(m, group, rank); i++) {
        engine_region_get(m, group, rank, i, &rg);
        total += rg.num_segments * rg.block_len;
    }
    return total;
}

/* Walk every (region, segment) piece of one block in order; copy out of or into buf. */
static int page_copy(const engine_model *m, int group, uint32_t rank, uint32_t block, uint8_t *buf,
                     int to_region) {
    if (!group_ok(m, group, rank) || block >= m->stacks[group].total) return -EINVAL;
    engine_region rg;
    for (uint32_t i = 0; i < engine_num_regions(m, group, rank); i++) {
        engine_region_get(m, group, rank, i, &rg);
        for (uint32_t s = 0; s < rg.num_segments; s++) {
            uint8_t *p = (uint8_t *)rg.base + s * rg.segment_stride + block * rg.block_len;
            if (to_region)
                memcpy(p, buf, rg.block_len);
            else
                memcpy(buf, p, rg.block_len);
            buf += rg.block_len;
        }
    }
    return 0;
}

int engine_page_read(const engine_model *m, int group, uint32_t rank, uint32_t block, void *dst) {
    return page_copy(m, group, rank, block, dst, 0);
}

int engine_page_write(engine_model *m, int group, uint32_t rank, uint32_t block, const void *src) {
    return page_copy(m, group, rank, block, (uint8_t *)(uintptr_t)src, 1);
}
