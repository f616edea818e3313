/*
 * test_connector_keys.c — key strings exactly, layout fingerprints (stable, and different
 * whenever the bytes of a page could differ), the TP shard in the key, and the lookup
 * namespaces of every parallel layout.
 */
#include <inttypes.h>
#include <xxhash.h>

#include "connector/config.h"
#include "connector/keys.h"
#include "connector_testutil.h"
#include "harness.h"
#include "tide.h"

static const uint8_t HASH16[16] = {0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07,
                                   0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0xff};

TEST(connector_layout_string_and_fingerprint) {
    ccfg c;
    load_ok(doc("", "\"tensor_parallel_size\":2,\"tp_rank\":1", "", G_FULL(16)), &c);
    char s[1024];
    int n = connector_layout_string(&c, 0, s, sizeof(s));
    CHECK_STR(s, "tide-layout-v1|model=Model-7B|spec=FullAttentionSpec|block_size=16"
                 "|dtype=bfloat16|cache_dtype=auto|kv_heads=8|head_size=128|head_size_v=128"
                 "|page_bytes=65536|tp_shards=2|pp=1|pcp=1|dcp=1|layers=");
    CHECK_EQ(n, (int)strlen(s));
    char want[17];
    snprintf(want, sizeof(want), "%016" PRIx64, (uint64_t)XXH3_64bits(s, strlen(s)));
    CHECK_STR(c.groups[0].fingerprint, want);
    /* Pinned: a fingerprint that changes orphans every stored cache. */
    CHECK_STR(c.groups[0].fingerprint, "57ffea488d9b3f13");
    ccfg_free(&c);

    load_ok(doc("\"mamba_cache_mode\":\"align\"", "", "", G_FULL(16) "," G_MAMBA(16)), &c);
    connector_layout_string(&c, 1, s, sizeof(s));
    CHECK_STR(s, "tide-layout-v1|model=Model-7B|spec=MambaSpec|block_size=16"
                 "|states=bfloat16(3,1024);float32(8,64,64)|page_bytes=137216|tp_shards=1|pp=1"
                 "|pcp=1|dcp=1|layers=");
    ccfg_free(&c);
}

TEST(connector_key_exact) {
    ccfg c;
    load_ok(doc("",
                "\"tensor_parallel_size\":2,\"tp_rank\":1,\"pipeline_parallel_size\":2,"
                "\"pp_rank\":1",
                "\"kv_connector_extra_config\":{\"cache_prefix\":\"tenant\"}", G_FULL(16)),
            &c);
    char key[TIDE_KEY_MAX + 1], want[512];
    connector_ns ns = connector_own_ns(&c, 0);
    int n = connector_key(&c, 0, &ns, HASH16, 16, key, sizeof(key));
    snprintf(want, sizeof(want),
             "tenant@Model-7B@fp:%s@tp_rank:1@pcp0@dcp0@pp_rank:1@group:0@"
             "000102030405060708090a0b0c0d0eff",
             c.groups[0].fingerprint);
    CHECK_STR(key, want);
    CHECK_EQ(n, (int)strlen(want));
    char prefix[TIDE_KEY_MAX + 1];
    CHECK_EQ(connector_key_prefix(&c, 0, &ns, prefix, sizeof(prefix)), (int)strlen(want) - 33);
    CHECK(strncmp(want, prefix, strlen(prefix)) == 0);
    /* Buffers too small and keys too long. */
    CHECK_EQ(connector_key(&c, 0, &ns, HASH16, 16, key, 20), TIDE_EBUFSMALL);
    uint8_t big[128] = {0};
    CHECK_EQ(connector_key(&c, 0, &ns, big, sizeof(big), key, sizeof(key)), TIDE_EKEYLONG);
    ccfg_free(&c);

    /* No prefix: the key starts with the model's last path component. */
    load_ok(doc("", "", "", G_FULL(16)), &c);
    ns = connector_own_ns(&c, 0);
    connector_key(&c, 0, &ns, HASH16, 2, key, sizeof(key));
    snprintf(want, sizeof(want), "Model-7B@fp:%s@tp_rank:0@pcp0@dcp0@pp_rank:0@group:0@0001",
             c.groups[0].fingerprint);
    CHECK_STR(key, want);
    CHECK_EQ(connector_hash_bytes(&c), 32);
    CHECK_EQ(connector_key_max_len(&c), strlen(want) - 4 + 64);
    ccfg_free(&c);
}

TEST(connector_key_uses_tp_shard) {
    ccfg c;
    char key[TIDE_KEY_MAX + 1], want[512];
    /* TP 8 over 2 KV heads: factor 4, rank 5 holds shard 1. */
    const char *json = "{\"model_config\":{\"model\":\"a/b/Llama\",\"total_num_kv_heads\":2},"
                       "\"cache_config\":{\"block_size\":16},"
                       "\"parallel_config\":{\"tensor_parallel_size\":8,\"tp_rank\":5},"
                       "\"kv_transfer_config\":{\"kv_role\":\"kv_both\"},"
                       "\"kv_cache_config\":{\"kv_cache_groups\":[" G_FULL(16) "," G_MLA(16) "]}}";
    load_ok(json, &c);
    connector_ns ns = connector_own_ns(&c, 0);
    CHECK_EQ(ns.tp, 1);
    connector_key(&c, 0, &ns, HASH16, 1, key, sizeof(key));
    snprintf(want, sizeof(want), "Llama@fp:%s@tp_rank:1@pcp0@dcp0@pp_rank:0@group:0@00",
             c.groups[0].fingerprint);
    CHECK_STR(key, want);
    /* MLA: every rank writes shard 0. */
    ns = connector_own_ns(&c, 1);
    connector_key(&c, 1, &ns, HASH16, 1, key, sizeof(key));
    snprintf(want, sizeof(want), "Llama@fp:%s@tp_rank:0@pcp0@dcp0@pp_rank:0@group:1@00",
             c.groups[1].fingerprint);
    CHECK_STR(key, want);
    ccfg_free(&c);

    /* DCP: the key carries the DCP rank, tp_rank % dcp. */
    load_ok(doc("", "\"tensor_parallel_size\":4,\"decode_context_parallel_size\":2,\"tp_rank\":3",
                "", G_FULL(16)),
            &c);
    ns = connector_own_ns(&c, 0);
    connector_key(&c, 0, &ns, HASH16, 1, key, sizeof(key));
    snprintf(want, sizeof(want), "Model-7B@fp:%s@tp_rank:3@pcp0@dcp1@pp_rank:0@group:0@00",
             c.groups[0].fingerprint);
    CHECK_STR(key, want);
    ccfg_free(&c);
}

static void fp_of(const char *json, size_t g, char out[17]) {
    ccfg c;
    load_ok(json, &c);
    memcpy(out, c.groups[g].fingerprint, 17);
    ccfg_free(&c);
}

TEST(connector_fingerprint_separates_layouts) {
    char base[17], other[17];
    fp_of(doc("", "", "", G_FULL(16)), 0, base);
    /* Same document: same fingerprint. */
    fp_of(doc("", "", "", G_FULL(16)), 0, other);
    CHECK_STR(base, other);
    /* The KV cache dtype. */
    fp_of(doc("\"cache_dtype\":\"fp8\"", "", "", G_FULL(16)), 0, other);
    CHECK(strcmp(base, other) != 0);
    /* The element type of the spec. */
    const char *f16 = "{\"kv_cache_spec\":{\"type\":\"FullAttentionSpec\",\"block_size\":16,"
                      "\"num_kv_heads\":8,\"head_size\":128,\"dtype\":\"float16\"}}";
    fp_of(doc("", "", "", f16), 0, other);
    CHECK(strcmp(base, other) != 0);
    /* The block size. */
    fp_of(doc("", "", "", G_FULL(32)), 0, other);
    CHECK(strcmp(base, other) != 0);
    /* The model. */
    char json[16384];
    snprintf(json, sizeof(json), "%s", doc("", "", "", G_FULL(16)));
    char *m = strstr(json, "Model-7B");
    m[6] = '8';
    fp_of(json, 0, other);
    CHECK(strcmp(base, other) != 0);
    /* The pipeline layout (which layers a stage holds). */
    fp_of(doc("", "\"pipeline_parallel_size\":2", "", G_FULL(16)), 0, other);
    CHECK(strcmp(base, other) != 0);
    /* The spec class, with the same geometry. */
    fp_of(doc("", "", "", G_SLIDING(16, 4096)), 0, other);
    CHECK(strcmp(base, other) != 0);
}

TEST(connector_fingerprint_shared_when_bytes_are_equal) {
    /* TP 8 over 2 KV heads and TP 2 over 2 KV heads: rank shard 1 holds head 1 in both, so
     * the keys (and fingerprints) must agree and the caches are shared. */
    const char *g1 = "{\"kv_cache_spec\":{\"type\":\"FullAttentionSpec\",\"block_size\":16,"
                     "\"num_kv_heads\":1,\"head_size\":128,\"dtype\":\"bfloat16\"}}";
    char a[4096], b[4096];
    snprintf(a, sizeof(a),
             "{\"model_config\":{\"model\":\"m\",\"total_num_kv_heads\":2},"
             "\"cache_config\":{\"block_size\":16},\"parallel_config\":{\"tensor_parallel_size\":8,"
             "\"tp_rank\":7},\"kv_transfer_config\":{\"kv_role\":\"kv_both\"},"
             "\"kv_cache_config\":{\"kv_cache_groups\":[%s]}}",
             g1);
    snprintf(b, sizeof(b),
             "{\"model_config\":{\"model\":\"m\",\"total_num_kv_heads\":2},"
             "\"cache_config\":{\"block_size\":16},\"parallel_config\":{\"tensor_parallel_size\":2,"
             "\"tp_rank\":1},\"kv_transfer_config\":{\"kv_role\":\"kv_both\"},"
             "\"kv_cache_config\":{\"kv_cache_groups\":[%s]}}",
             g1);
    ccfg ca, cb;
    load_ok(a, &ca);
    load_ok(b, &cb);
    char ka[TIDE_KEY_MAX + 1], kb[TIDE_KEY_MAX + 1];
    connector_ns na = connector_own_ns(&ca, 0), nb = connector_own_ns(&cb, 0);
    connector_key(&ca, 0, &na, HASH16, 16, ka, sizeof(ka));
    connector_key(&cb, 0, &nb, HASH16, 16, kb, sizeof(kb));
    CHECK_STR(ka, kb);
    ccfg_free(&ca);
    ccfg_free(&cb);
}

static size_t namespaces(const char *json, size_t g, connector_ns *out, size_t cap) {
    ccfg c;
    load_ok(json, &c);
    size_t n = connector_lookup_namespaces(&c, g, out, cap);
    ccfg_free(&c);
    return n;
}

#define NS_IS(ns, t, p, d, r)                                                                      \
    CHECK_MSG((ns).tp == (t) && (ns).pcp == (p) && (ns).dcp == (d) && (ns).pp == (r),              \
              "namespace (%" PRId64 ",%" PRId64 ",%" PRId64 ",%" PRId64 ") != (%d,%d,%d,%d)",      \
              (ns).tp, (ns).pcp, (ns).dcp, (ns).pp, t, p, d, r)

TEST(connector_lookup_namespaces) {
    connector_ns ns[64];
    /* One rank: one namespace. */
    CHECK_EQ(namespaces(doc("", "", "", G_FULL(16)), 0, ns, 64), 1);
    NS_IS(ns[0], 0, 0, 0, 0);

    /* TP 4 over 2 KV heads (factor 2) and PP 2: 2 shards x 2 stages. */
    char json[4096];
    snprintf(json, sizeof(json),
             "{\"model_config\":{\"model\":\"m\",\"total_num_kv_heads\":2},"
             "\"cache_config\":{\"block_size\":16},\"parallel_config\":{\"tensor_parallel_size\":4,"
             "\"pipeline_parallel_size\":2},\"kv_transfer_config\":{\"kv_role\":\"kv_both\"},"
             "\"kv_cache_config\":{\"kv_cache_groups\":[%s,%s,%s]}}",
             G_FULL(16), G_MLA(16), G_MAMBA(16));
    CHECK_EQ(namespaces(json, 0, ns, 64), 4);
    NS_IS(ns[0], 0, 0, 0, 0);
    NS_IS(ns[1], 0, 0, 0, 1);
    NS_IS(ns[2], 1, 0, 0, 0);
    NS_IS(ns[3], 1, 0, 0, 1);
    /* MLA: one shard per stage. */
    CHECK_EQ(namespaces(json, 1, ns, 64), 2);
    NS_IS(ns[0], 0, 0, 0, 0);
    NS_IS(ns[1], 0, 0, 0, 1);
    /* Mamba: every TP rank. */
    CHECK_EQ(namespaces(json, 2, ns, 64), 8);
    NS_IS(ns[7], 3, 0, 0, 1);

    /* DCP 2 within TP 4, PCP 2: every TP rank, with its DCP rank, per PCP rank. */
    const char *par = "\"tensor_parallel_size\":4,\"decode_context_parallel_size\":2,"
                      "\"prefill_context_parallel_size\":2";
    CHECK_EQ(namespaces(doc("", par, "", G_MLA(16)), 0, ns, 64), 8);
    NS_IS(ns[0], 0, 0, 0, 0);
    NS_IS(ns[1], 1, 0, 1, 0);
    NS_IS(ns[2], 2, 0, 0, 0);
    NS_IS(ns[3], 3, 0, 1, 0);
    NS_IS(ns[4], 0, 1, 0, 0);
    NS_IS(ns[7], 3, 1, 1, 0);

    /* A short output array still reports the full count and writes only what fits. */
    memset(ns, 0x7f, sizeof(ns));
    CHECK_EQ(namespaces(doc("", par, "", G_MLA(16)), 0, ns, 2), 8);
    NS_IS(ns[1], 1, 0, 1, 0);
    CHECK_EQ(ns[2].tp, 0x7f7f7f7f7f7f7f7fll);
}
