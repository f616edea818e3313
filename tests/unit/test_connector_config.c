/*
 * test_connector_config.c — the JSON config model: defaults, every field, unknown keys and
 * wrong types with their paths, bad JSON with line and column, files.
 */
#include <errno.h>

#include "connector/config.h"
#include "connector_testutil.h"
#include "harness.h"
#include "tide.h"

TEST(connector_config_defaults) {
    ccfg c;
    load_ok(doc("", "", "", G_FULL(16)), &c);
    CHECK_STR(c.model, "org/Model-7B");
    CHECK_STR(c.model_name, "Model-7B");
    CHECK_EQ(c.block_size, 16);
    CHECK_STR(c.cache_dtype, "auto");
    CHECK_EQ(c.mamba_cache_mode, CONNECTOR_MAMBA_NONE);
    CHECK_EQ(c.hash_algo, CONNECTOR_HASH_SHA256);
    CHECK_EQ(c.enable_prefix_caching, 1);
    CHECK_EQ(c.retention_interval, 0);
    CHECK_EQ(c.use_replayssm, 0);
    CHECK_EQ(c.tp_size, 1);
    CHECK_EQ(c.pp_size, 1);
    CHECK_EQ(c.pcp_size, 1);
    CHECK_EQ(c.dcp_size, 1);
    CHECK_EQ(c.tp_rank + c.pp_rank + c.pcp_rank + c.dcp_rank, 0);
    CHECK_EQ(c.kv_role, CONNECTOR_ROLE_BOTH);
    CHECK(c.kv_connector == NULL);
    CHECK_EQ(c.load_failure_policy, CONNECTOR_LOAD_FAIL);
    /* kv_connector_extra_config defaults, as VLLM.md lists them. */
    CHECK_EQ(c.extra.load_async, 1);
    CHECK_EQ(c.extra.lookup_async, 0);
    CHECK_EQ(c.extra.enable_lookup, 1);
    CHECK_EQ(c.extra.save_decode_cache, 0);
    CHECK_STR(c.extra.cache_prefix, "");
    CHECK(c.extra.preferred_segment == NULL);
    CHECK_EQ(c.extra.lookup_rpc_port, 0);
    CHECK_EQ(c.ngroups, 1);
    CHECK_EQ(c.groups[0].kind, CONNECTOR_SPEC_FULL);
    CHECK_EQ(c.groups[0].head_size_v, 128);
    CHECK_STR(c.groups[0].dtype.name, "bfloat16");
    CHECK_EQ(c.groups[0].dtype.size, 2);
    /* 8 heads x 16 tokens x (128 + 128) x 2 bytes */
    CHECK_EQ(c.groups[0].page_bytes, 8 * 16 * 256 * 2);
    ccfg_free(&c);
}

TEST(connector_config_every_field) {
    const char *json =
        "{\"model_config\":{\"model\":\"/models/llama-3/\",\"total_num_kv_heads\":8,"
        "\"max_model_len\":4096,\"dtype\":\"bfloat16\"},"
        "\"cache_config\":{\"block_size\":32,\"cache_dtype\":\"fp8_e4m3\","
        "\"mamba_cache_mode\":\"align\",\"prefix_match_unit\":16,\"mamba_block_size\":32,"
        "\"enable_prefix_caching\":true,\"prefix_caching_hash_algo\":\"xxhash\","
        "\"prefix_cache_retention_interval\":64,\"use_replayssm\":false},"
        "\"parallel_config\":{\"tensor_parallel_size\":4,\"pipeline_parallel_size\":2,"
        "\"prefill_context_parallel_size\":1,\"decode_context_parallel_size\":1,"
        "\"data_parallel_size\":2,\"tp_rank\":3,\"pp_rank\":1,\"pcp_rank\":0,"
        "\"data_parallel_rank\":1},"
        "\"kv_transfer_config\":{\"kv_connector\":\"TideStoreConnector\","
        "\"kv_role\":\"kv_consumer\",\"kv_load_failure_policy\":\"recompute\","
        "\"kv_connector_extra_config\":{\"load_async\":false,\"lookup_async\":true,"
        "\"enable_lookup\":false,\"save_decode_cache\":true,\"cache_prefix\":\"tenant-a\","
        "\"preferred_segment\":\"10.0.0.1:1234\",\"lookup_rpc_port\":5555,"
        "\"enable_group_semantics\":\"True\",\"enable_cross_layers_blocks\":false}},"
        "\"kv_cache_config\":{\"num_blocks\":1000,\"prefix_cache_retention_interval\":128,"
        "\"kv_cache_groups\":[{\"layer_names\":[\"l.0\",\"l.2\"],\"is_eagle_group\":false,"
        "\"kv_cache_spec\":{\"type\":\"FullAttentionSpec\",\"block_size\":32,"
        "\"num_kv_heads\":2,\"head_size\":128,\"head_size_v\":64,\"dtype\":\"torch.float16\","
        "\"sliding_window\":null,\"attention_chunk_size\":null,\"page_size_padded\":null}},"
        "{\"layer_names\":[\"l.1\"],\"kv_cache_spec\":{\"type\":\"MambaSpec\",\"block_size\":32,"
        "\"shapes\":[[4,256],[2,16,32]],\"dtypes\":[\"bfloat16\",\"float32\"],"
        "\"mamba_cache_mode\":\"align\",\"mamba_type\":\"mamba2\","
        "\"num_speculative_blocks\":0,\"page_size_padded\":8192}}]}}";
    ccfg c;
    load_ok(json, &c);
    CHECK_STR(c.model_name, "llama-3");
    CHECK_EQ(c.total_num_kv_heads, 8);
    CHECK_EQ(c.max_model_len, 4096);
    CHECK_STR(c.cache_dtype, "fp8_e4m3");
    CHECK_EQ(c.mamba_cache_mode, CONNECTOR_MAMBA_ALIGN);
    CHECK_EQ(c.prefix_match_unit, 16);
    CHECK_EQ(c.hash_algo, CONNECTOR_HASH_XXHASH);
    CHECK_EQ(c.retention_interval, 128); /* kv_cache_config's resolved value wins */
    CHECK_EQ(c.tp_size, 4);
    CHECK_EQ(c.pp_size, 2);
    CHECK_EQ(c.dp_size, 2);
    CHECK_EQ(c.tp_rank, 3);
    CHECK_EQ(c.pp_rank, 1);
    CHECK_EQ(c.dp_rank, 1);
    CHECK_STR(c.kv_connector, "TideStoreConnector");
    CHECK_EQ(c.kv_role, CONNECTOR_ROLE_CONSUMER);
    CHECK_EQ(c.load_failure_policy, CONNECTOR_LOAD_RECOMPUTE);
    CHECK_EQ(c.extra.load_async, 0);
    CHECK_EQ(c.extra.lookup_async, 1);
    CHECK_EQ(c.extra.enable_lookup, 0);
    CHECK_EQ(c.extra.save_decode_cache, 1);
    CHECK_STR(c.extra.cache_prefix, "tenant-a");
    CHECK_STR(c.extra.preferred_segment, "10.0.0.1:1234");
    CHECK_EQ(c.extra.lookup_rpc_port, 5555);
    CHECK_EQ(c.extra.enable_group_semantics, 1);
    CHECK_EQ(c.extra.enable_cross_layers_blocks, 0);
    CHECK_EQ(c.num_blocks, 1000);
    CHECK_EQ(c.ngroups, 2);
    CHECK_EQ(c.groups[0].nlayers, 2);
    CHECK_STR(c.groups[0].layer_names[1], "l.2");
    CHECK_EQ(c.groups[0].head_size_v, 64);
    CHECK_STR(c.groups[0].dtype.name, "float16");
    CHECK_EQ(c.groups[0].page_bytes, 2 * 32 * (128 + 64) * 2);
    const connector_group *m = &c.groups[1];
    CHECK_EQ(m->kind, CONNECTOR_SPEC_MAMBA);
    CHECK_EQ(m->nstates, 2);
    CHECK_EQ(m->ndims[1], 3);
    CHECK_EQ(m->shapes[1][2], 32);
    CHECK_STR(m->dtypes[1].name, "float32");
    CHECK_EQ(m->mamba_mode, CONNECTOR_MAMBA_ALIGN);
    CHECK_STR(m->mamba_type, "mamba2");
    CHECK_EQ(m->page_bytes, 8192); /* padded: 4*256*2 + 2*16*32*4 = 6144 unpadded */
    ccfg_free(&c);
}

TEST(connector_config_unknown_keys_reported_with_path) {
    ccfg c;
    ccfg_errs e;
    const char *json =
        "{\"model_config\":{\"model\":\"m\",\"modle\":1},"
        "\"cache_config\":{\"blok_size\":16},"
        "\"parallel_config\":{\"tensor_paralel_size\":2},"
        "\"kv_transfer_config\":{\"kv_role\":\"kv_both\","
        "\"kv_connector_extra_config\":{\"enable_lokup\":true,\"zzz\":1}},"
        "\"kv_cache_config\":{\"kv_cache_groups\":[" G_FULL(16) "]},"
                                                                "\"speculative_config\":{}}";
    CHECK_EQ(load_errs(json, &c, &e), TIDE_EPARSE);
    CHECK_LINE(&e, "cache_config.blok_size: unknown key (did you mean 'block_size'?)");
    CHECK_LINE(&e, "cache_config.block_size: required key is missing");
    CHECK_LINE(&e, "model_config.modle: unknown key (did you mean 'model'?)");
    CHECK_LINE(&e, "parallel_config.tensor_paralel_size: unknown key (did you mean "
                   "'tensor_parallel_size'?)");
    CHECK_LINE(&e, "kv_transfer_config.kv_connector_extra_config.enable_lokup: unknown key "
                   "(did you mean 'enable_lookup'?)");
    CHECK_LINE(&e, "kv_transfer_config.kv_connector_extra_config.zzz: unknown key");
    CHECK_LINE(&e, "speculative_config: unknown key");
    CHECK_EQ(e.n, 7);
    ccfg_errs_free(&e);
    ccfg_free(&c);
}

TEST(connector_config_spec_keys_depend_on_type) {
    ccfg c;
    ccfg_errs e;
    const char *groups =
        "{\"kv_cache_spec\":{\"type\":\"FullAttentionSpec\",\"block_size\":16,"
        "\"num_kv_heads\":8,\"head_size\":128,\"dtype\":\"bfloat16\",\"shapes\":[[1]]}},"
        "{\"kv_cache_spec\":{\"type\":\"MambaSpec\",\"block_size\":16,\"shapes\":[[1]],"
        "\"dtypes\":[\"float32\"],\"num_kv_heads\":2}},"
        "{\"kv_cache_spec\":{\"type\":\"SlidingWindowSpec\",\"block_size\":16,"
        "\"num_kv_heads\":8,\"head_size\":128,\"dtype\":\"bfloat16\"}},"
        "{\"kv_cache_spec\":{\"type\":\"LinearAttentionSpec\",\"block_size\":16}},"
        "{\"kv_cache_spec\":{\"block_size\":16}, \"layers\":[]}";
    CHECK_EQ(load_errs(doc("", "", "", groups), &c, &e), TIDE_EPARSE);
    CHECK_LINE(&e, "kv_cache_config.kv_cache_groups[0].kv_cache_spec.shapes: unknown key for "
                   "FullAttentionSpec");
    CHECK_LINE(&e, "kv_cache_config.kv_cache_groups[1].kv_cache_spec.num_kv_heads: unknown key "
                   "for MambaSpec");
    CHECK_LINE(&e, "kv_cache_config.kv_cache_groups[2].kv_cache_spec.sliding_window: required "
                   "key is missing");
    CHECK_LINE(&e, "kv_cache_config.kv_cache_groups[3].kv_cache_spec.type: unknown KV-cache spec "
                   "'LinearAttentionSpec': tide knows neither its layout nor how vLLM's rules "
                   "treat it (known: FullAttentionSpec, SlidingWindowSpec, MambaSpec, "
                   "CrossAttentionSpec, MLAAttentionSpec, SlidingWindowMLASpec, "
                   "CircularBufferSpec, HiSparseHotSpec, HiSparseResidentSpec)");
    CHECK_LINE(&e, "kv_cache_config.kv_cache_groups[4].kv_cache_spec.type: required key is "
                   "missing");
    CHECK_LINE(&e, "kv_cache_config.kv_cache_groups[4].layers: unknown key");
    ccfg_errs_free(&e);
    ccfg_free(&c);
}

TEST(connector_config_wrong_types_reported_with_path) {
    ccfg c;
    ccfg_errs e;
    const char *json =
        "{\"model_config\":{\"model\":7},"
        "\"cache_config\":{\"block_size\":\"16\",\"prefix_match_unit\":1.5,"
        "\"enable_prefix_caching\":1,\"mamba_cache_mode\":\"aligned\"},"
        "\"parallel_config\":{\"tensor_parallel_size\":[2]},"
        "\"kv_transfer_config\":{\"kv_role\":\"kv_sender\","
        "\"kv_connector_extra_config\":{\"load_async\":\"yes\",\"cache_prefix\":null,"
        "\"enable_group_semantics\":\"maybe\"}},"
        "\"kv_cache_config\":{\"kv_cache_groups\":{}}}";
    CHECK_EQ(load_errs(json, &c, &e), TIDE_EPARSE);
    CHECK_LINE(&e, "model_config.model: expected a string, got an integer");
    CHECK_LINE(&e, "cache_config.block_size: expected an integer, got a string");
    CHECK_LINE(&e, "cache_config.prefix_match_unit: expected an integer or null, got a "
                   "non-integer number");
    CHECK_LINE(&e, "cache_config.enable_prefix_caching: expected a boolean, got an integer");
    CHECK_LINE(&e, "cache_config.mamba_cache_mode: 'aligned' is not one of 'none', 'align', "
                   "'all'");
    CHECK_LINE(&e, "parallel_config.tensor_parallel_size: expected an integer, got an array");
    CHECK_LINE(&e, "kv_transfer_config.kv_role: 'kv_sender' is not one of 'kv_producer', "
                   "'kv_consumer', 'kv_both'");
    CHECK_LINE(&e, "kv_transfer_config.kv_connector_extra_config.load_async: expected a "
                   "boolean, got a string");
    CHECK_LINE(&e, "kv_transfer_config.kv_connector_extra_config.cache_prefix: expected a "
                   "string, got null");
    CHECK_LINE(&e, "kv_transfer_config.kv_connector_extra_config.enable_group_semantics: "
                   "expected a boolean (or \"true\"/\"false\"), got a string");
    CHECK_LINE(&e, "kv_cache_config.kv_cache_groups: expected an array, got an object");
    CHECK_EQ(e.n, 11);
    ccfg_errs_free(&e);
    ccfg_free(&c);
}

TEST(connector_config_mamba_fields) {
    ccfg c;
    ccfg_errs e;
    const char *groups = "{\"kv_cache_spec\":{\"type\":\"MambaSpec\",\"block_size\":16,"
                         "\"shapes\":[[2,\"x\"],3],\"dtypes\":[\"float7\"]}},"
                         "{\"kv_cache_spec\":{\"type\":\"MambaSpec\",\"block_size\":16,"
                         "\"shapes\":[[2]],\"dtypes\":[\"float32\"],\"mamba_cache_mode\":\"all\"}}";
    CHECK_EQ(load_errs(doc("\"mamba_cache_mode\":\"align\"", "", "", groups), &c, &e), TIDE_EPARSE);
    CHECK_LINE(&e, "kv_cache_config.kv_cache_groups[0].kv_cache_spec.shapes[0][1]: expected an "
                   "integer, got a string");
    CHECK_LINE(&e, "kv_cache_config.kv_cache_groups[0].kv_cache_spec.shapes[1]: expected an "
                   "array of integers, got an integer");
    CHECK_LINE(&e, "kv_cache_config.kv_cache_groups[0].kv_cache_spec.dtypes[0]: unknown dtype "
                   "'float7'");
    CHECK_LINE(&e, "kv_cache_config.kv_cache_groups[0].kv_cache_spec.dtypes: 1 dtypes for 2 "
                   "shapes (one dtype per state shape)");
    CHECK_LINE(&e, "kv_cache_config.kv_cache_groups[1].kv_cache_spec.mamba_cache_mode: 'all' "
                   "differs from cache_config.mamba_cache_mode 'align'");
    ccfg_errs_free(&e);
    ccfg_free(&c);

    /* A MambaSpec without its own mode takes cache_config's. */
    load_ok(doc("\"mamba_cache_mode\":\"all\"", "", "", G_FULL(16) "," G_MAMBA(16)), &c);
    CHECK_EQ(c.groups[1].mamba_mode, CONNECTOR_MAMBA_ALL);
    /* 3*1024*2 + 8*64*64*4 */
    CHECK_EQ(c.groups[1].page_bytes, 3 * 1024 * 2 + 8 * 64 * 64 * 4);
    ccfg_free(&c);
}

TEST(connector_config_missing_sections) {
    ccfg c;
    ccfg_errs e;
    CHECK_EQ(load_errs("{}", &c, &e), TIDE_EPARSE);
    CHECK_LINE(&e, "model_config: required key is missing");
    CHECK_LINE(&e, "cache_config: required key is missing");
    CHECK_LINE(&e, "kv_transfer_config: required key is missing");
    CHECK_LINE(&e, "kv_cache_config: required key is missing");
    CHECK_EQ(e.n, 4);
    ccfg_errs_free(&e);
    ccfg_free(&c);

    CHECK_EQ(load_errs("[1, 2]", &c, &e), TIDE_EPARSE);
    CHECK_LINE(&e, "document: expected an object, got an array");
    ccfg_errs_free(&e);
    ccfg_free(&c);
}

TEST(connector_config_duplicate_key) {
    ccfg c;
    ccfg_errs e;
    CHECK_EQ(load_errs(doc("\"block_size\":32", "", "", G_FULL(16)), &c, &e), TIDE_EPARSE);
    CHECK_LINE(&e, "cache_config.block_size: duplicate key");
    ccfg_errs_free(&e);
    ccfg_free(&c);
}

TEST(connector_config_bad_json_line_column) {
    ccfg c;
    ccfg_errs e;
    const char *bad = "{\n  \"model_config\": {\"model\": \"m\"},\n  \"cache_config\": ]\n}\n";
    CHECK_EQ(load_errs(bad, &c, &e), TIDE_EPARSE);
    CHECK_EQ(e.n, 1);
    CHECK_STR(e.msg[0], "line 3, column 19: invalid JSON: expected a value, got ']'");
    ccfg_errs_free(&e);
    ccfg_free(&c);

    CHECK_EQ(load_errs("{\"a\":\n  [1, 2,", &c, &e), TIDE_EPARSE);
    CHECK_EQ(e.n, 1);
    CHECK_CONTAINS(e.msg[0], "expected a value, got the end of the text");
    CHECK(strncmp(e.msg[0], "line 2, column ", 15) == 0);
    ccfg_errs_free(&e);
    ccfg_free(&c);

    /* The mistakes people make name themselves. */
    CHECK_EQ(load_errs("{\"model_config\": {\"model\": \"m\"},\n}", &c, &e), TIDE_EPARSE);
    CHECK_STR(e.msg[0], "line 2, column 1: invalid JSON: a trailing comma before '}': JSON "
                        "allows none after the last member");
    ccfg_errs_free(&e);
    ccfg_free(&c);

    CHECK_EQ(load_errs("{}\n\n  x", &c, &e), TIDE_EPARSE);
    CHECK_STR(e.msg[0],
              "line 3, column 3: invalid JSON: more after the end of the JSON value: 'x'");
    ccfg_errs_free(&e);
    ccfg_free(&c);

    CHECK_EQ(load_errs("", &c, &e), TIDE_EPARSE);
    CHECK_STR(e.msg[0], "line 1, column 1: invalid JSON: the text is empty: expected a JSON value");
    ccfg_errs_free(&e);
    ccfg_free(&c);

    /* A string that is not terminated on line 1. */
    CHECK_EQ(load_errs("{\"model_config\": {\"model\": \"abc}}", &c, &e), TIDE_EPARSE);
    CHECK(strncmp(e.msg[0], "line 1, column ", 15) == 0);
    ccfg_errs_free(&e);
    ccfg_free(&c);
}

TEST(connector_config_parse_file) {
    ccfg c;
    ccfg_errs e;
    ccfg_errs_init(&e);
    char path[512];
    snprintf(path, sizeof(path), "%s/missing.json", test_tmpdir());
    CHECK_EQ(ccfg_parse_file(path, &c, &e), -ENOENT);
    CHECK_EQ(e.n, 1);
    CHECK_CONTAINS(e.msg[0], "missing.json: No such file or directory");
    ccfg_free(&c);
    ccfg_errs_free(&e);

    snprintf(path, sizeof(path), "%s/ok.json", test_tmpdir());
    FILE *f = fopen(path, "w");
    CHECK(f);
    fputs(doc("", "\"tensor_parallel_size\":2,\"tp_rank\":1", "", G_FULL(16)), f);
    fclose(f);
    ccfg_errs_init(&e);
    CHECK_EQ(ccfg_parse_file(path, &c, &e), 0);
    CHECK_EQ(ccfg_check(&c, &e), 0);
    CHECK_EQ(c.tp_rank, 1);
    CHECK_EQ(e.n, 0);
    ccfg_free(&c);
    ccfg_errs_free(&e);
}
