/*
 * test_connector_tenant.c — namespace isolation through the public connector API: two
 * connectors on one store with different cache_prefix values (tenants) never see each
 * other's blocks. Tenant A saves a prompt through a real scheduler + worker; tenant B (and
 * a connector with no prefix) looks the same prompt up and finds nothing, then saves its
 * own copy under its own keys, and each tenant loads only what it saved.
 */
#include "connector_rig.h"

static const size_t HL = 16;

static uint8_t *tenant_hashes(size_t n, size_t *nh) {
    uint32_t tok[128];
    for (size_t i = 0; i < n && i < 128; i++)
        tok[i] = 7000 + (uint32_t)i;
    uint8_t *h = malloc((n / 16 + 1) * HL);
    int k = tide_prefix_hashes(TIDE_HASH_XXH3, tok, n, 16, NULL, 0, h, n / 16 + 1);
    CHECK(k >= 0);
    *nh = (size_t)k;
    return h;
}

/* Build the step's metadata and run it on the worker. */
static void tenant_step(tide_connector *s, rig_rank *r) {
    tide_connector_meta *m = NULL;
    CHECK_EQ(tide_connector_build_meta(s, &m), 0);
    CHECK(tide_connector_start_jobs(r->w, m, TIDE_CONNECTOR_LOAD | TIDE_CONNECTOR_SAVE) >= 0);
    CHECK_EQ(tide_connector_wait(r->w), 0);
    tide_connector_meta_free(m);
}

/* Save the 64-token prompt (4 blocks) from rank r, filled with pattern seed. */
static void tenant_save(tide_connector *s, rig_rank *r, const char *req, const uint8_t *h,
                        size_t nh, uint64_t seed) {
    int32_t ids[4] = {0, 1, 2, 3};
    size_t cnt = 4;
    for (int b = 0; b < 4; b++)
        rig_fill(r, 0, b, seed);
    int64_t n = -1;
    CHECK_EQ(tide_connector_lookup(s, req, 64, h, nh, HL, 0, &n), 0);
    CHECK_EQ(tide_connector_update_after_alloc(s, req, ids, &cnt, 1, 0), 0);
    CHECK_EQ(tide_connector_request_step(s, req, 64, 64, h, nh, HL, ids, &cnt, 1, 1), 0);
    tenant_step(s, r);
    tide_connector_request_finished(s, req);
    tenant_step(s, r);
}

static const char *tenant_doc(const char *prefix) {
    static char extra[128];
    if (prefix)
        snprintf(extra, sizeof(extra), "\"cache_prefix\":\"%s\"", prefix);
    else
        extra[0] = '\0';
    return rig_doc(16, "", "", "kv_both", extra, R_FULL(16));
}

TEST(connector_tenants_are_isolated) {
    tide_store *st = NULL;
    CHECK_EQ(tide_open("mem://?capacity=16MiB", &st), 0);
    size_t nh;
    uint8_t *h = tenant_hashes(65, &nh);
    CHECK_EQ(nh, 4);

    /* Each connector copies the document at create, so the static buffer may be reused. */
    tide_connector *sa = rig_open(tenant_doc("tenant-a"), st, TIDE_CONNECTOR_SCHEDULER);
    tide_connector *sb = rig_open(tenant_doc("tenant-b"), st, TIDE_CONNECTOR_SCHEDULER);
    tide_connector *sn = rig_open(tenant_doc(NULL), st, TIDE_CONNECTOR_SCHEDULER);
    rig_rank ra, rb;
    rig_rank_open(&ra, tenant_doc("tenant-a"), st, 8, 2);
    rig_rank_open(&rb, tenant_doc("tenant-b"), st, 8, 2);

    tenant_save(sa, &ra, "a1", h, nh, 11);
    tide_stats s1;
    CHECK_EQ(tide_stats_get(st, &s1, sizeof(s1)), 0);
    CHECK_EQ(s1.objects, 4);
    /* Tenant A finds its prompt; tenant B and the prefix-less connector find nothing. */
    CHECK_EQ(rig_hit(sa, 65, h, nh, HL), 64);
    CHECK_EQ(rig_hit(sb, 65, h, nh, HL), 0);
    CHECK_EQ(rig_hit(sn, 65, h, nh, HL), 0);

    /* Tenant B saves the same prompt with other bytes: new keys, not a dedup against A. */
    tenant_save(sb, &rb, "b1", h, nh, 22);
    tide_stats s2;
    CHECK_EQ(tide_stats_get(st, &s2, sizeof(s2)), 0);
    CHECK_EQ(s2.objects, 8);
    CHECK_EQ(rig_hit(sb, 65, h, nh, HL), 64);

    /* Each tenant loads its own bytes into blocks 4..7 of its rank. */
    rig_rank *ranks[2] = {&ra, &rb};
    tide_connector *scheds[2] = {sa, sb};
    uint64_t seeds[2] = {11, 22};
    for (int t = 0; t < 2; t++) {
        int32_t ids[4] = {4, 5, 6, 7};
        size_t cnt = 4;
        int64_t n = -1;
        CHECK_EQ(tide_connector_lookup(scheds[t], "load", 65, h, nh, HL, 0, &n), 0);
        CHECK_EQ(n, 64);
        CHECK_EQ(tide_connector_update_after_alloc(scheds[t], "load", ids, &cnt, 1, 64), 0);
        CHECK_EQ(tide_connector_request_step(scheds[t], "load", 65, 65, h, nh, HL, ids, &cnt, 1, 1),
                 0);
        tenant_step(scheds[t], ranks[t]);
        for (int b = 0; b < 4; b++) {
            /* Block 4+b holds what block b held when this tenant saved it. */
            CHECK_MSG(rig_same(ranks[t], b, ranks[t], 4 + b, 0), "tenant %d block %d", t, b);
            CHECK(rig_pattern(seeds[t], 0, b, 0, 0, 0) == rig_at(ranks[t], 0, 0, 0, 4 + b)[0]);
        }
    }
    free(h);
    rig_rank_close(&ra);
    rig_rank_close(&rb);
    tide_connector_destroy(sa);
    tide_connector_destroy(sb);
    tide_connector_destroy(sn);
    tide_close(st);
}
