/*
 * test_connector_cli.c — `tide check-config`, run as a real process: the two verdict lines,
 * fixes, exit codes (0 supported by tide, 1 not, 2 unreadable or unparsable), and every
 * file in examples/ getting the verdicts the table in docs/VLLM.md claims.
 */
#include <limits.h>
#include <sys/wait.h>
#include <unistd.h>

#include "connector/config.h"
#include "connector_testutil.h"
#include "harness.h"
#include "tide.h"

static char out_text[65536], err_text[65536];

static void slurp(const char *path, char *buf, size_t cap) {
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f) return;
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = '\0';
    fclose(f);
}

/* The reference's verdict line under the seed's rules (--vllm 0.28), which most tests here
 * use, and under the default (the newest release's). */
#define SEED "vLLM 0.28 MooncakeStoreConnector (rules of vLLM <= 0.28): "
#define NEWEST "vLLM 0.33 MooncakeStoreConnector (rules of vLLM 0.30 to 0.33): "

/* Run `tide check-config ARGS`; returns the exit status, output in out_text/err_text. */
static int run_check(const char *args) {
    char cmd[4096], out[512], err[512];
    snprintf(out, sizeof(out), "%s/out.txt", test_tmpdir());
    snprintf(err, sizeof(err), "%s/err.txt", test_tmpdir());
    snprintf(cmd, sizeof(cmd), "'%s' check-config %s >'%s' 2>'%s'", test_tide_bin(), args, out,
             err);
    int st = system(cmd);
    slurp(out, out_text, sizeof(out_text));
    slurp(err, err_text, sizeof(err_text));
    CHECK_MSG(st != -1 && WIFEXITED(st), "could not run: %s", cmd);
    return WEXITSTATUS(st);
}

static const char *write_tmp(const char *name, const char *text) {
    static char path[512];
    snprintf(path, sizeof(path), "%s/%s", test_tmpdir(), name);
    FILE *f = fopen(path, "w");
    CHECK(f);
    fputs(text, f);
    fclose(f);
    return path;
}

/* The examples directory: the tests run from the repository root; fall back to the
 * build directory's parent(s) otherwise. */
static const char *examples_dir(void) {
    static char dir[PATH_MAX];
    if (access("examples/llama-dense.json", R_OK) == 0) return "examples";
    const char *b = test_build_dir();
    for (int up = 1; up <= 2 && b; up++) {
        snprintf(dir, sizeof(dir), "%s%s/examples", b, up == 1 ? "/.." : "/../..");
        char probe[PATH_MAX + 32];
        snprintf(probe, sizeof(probe), "%s/llama-dense.json", dir);
        if (access(probe, R_OK) == 0) return dir;
    }
    test_fail(__FILE__, __LINE__, "examples/ not found");
}

TEST(connector_cli_help_and_usage) {
    CHECK_EQ(run_check("--help"), 0);
    CHECK_CONTAINS(out_text, "usage: tide check-config");
    CHECK_CONTAINS(out_text, "Exit status");
    CHECK_EQ(run_check(""), 2);
    CHECK_CONTAINS(err_text, "FILE.json is required");
    CHECK_EQ(run_check("--bogus x.json"), 2);
    CHECK_CONTAINS(err_text, "unknown option '--bogus'");
}

TEST(connector_cli_unreadable_and_unparsable) {
    char args[1024];
    snprintf(args, sizeof(args), "'%s/nope.json'", test_tmpdir());
    CHECK_EQ(run_check(args), 2);
    CHECK_CONTAINS(err_text, "nope.json: No such file or directory");

    const char *p = write_tmp("bad.json", "{\n  \"model_config\": {\"model\": \"m\"},\n"
                                          "  \"cache_config\": {\"block_size\": 16,}\n}\n");
    snprintf(args, sizeof(args), "--vllm 0.28 '%s'", p);
    CHECK_EQ(run_check(args), 2);
    CHECK_CONTAINS(err_text, "bad.json: line 3, column ");
    CHECK_CONTAINS(err_text, "invalid JSON");
    CHECK_STR(out_text, "");

    p = write_tmp("typo.json", doc("\"blok_size\":16", "", "", G_FULL(16)));
    snprintf(args, sizeof(args), "--vllm 0.28 '%s'", p);
    CHECK_EQ(run_check(args), 2);
    CHECK_CONTAINS(err_text, "typo.json: cache_config.blok_size: unknown key (did you mean "
                             "'block_size'?)");
}

TEST(connector_cli_invalid_values_exit_1) {
    const char *p = write_tmp("replay.json", doc("\"use_replayssm\":true", "", "", G_FULL(16)));
    char args[1024];
    snprintf(args, sizeof(args), "--vllm 0.28 '%s'", p);
    CHECK_EQ(run_check(args), 1);
    CHECK_CONTAINS(out_text,
                   SEED "rejected: the configuration is "
                        "invalid\ntide TideStoreConnector: rejected: the configuration is "
                        "invalid\n");
    CHECK_CONTAINS(out_text, "--use-replayssm is incompatible with KV connectors (P/D "
                             "disaggregation, KV cache offload)");
}

TEST(connector_cli_verdict_lines_and_fixes) {
    const char *p = write_tmp("hybrid.json",
                              doc("\"mamba_cache_mode\":\"align\"",
                                  "\"tensor_parallel_size\":2,\"decode_context_parallel_size\":2",
                                  "", G_FULL(16) "," G_MAMBA(64)));
    char args[1024];
    snprintf(args, sizeof(args), "--vllm 0.28 '%s'", p);
    CHECK_EQ(run_check(args), 0);
    CHECK(
        strncmp(out_text,
                SEED "rejected: MooncakeStoreConnector does not "
                     "support: group 1: MambaSpec with block_size=64 != cache_config.block_size=16 "
                     "(mamba_cache_mode != 'align'); PCP/DCP > 1 (pcp=1, dcp=2) with hybrid "
                     "attention\ntide TideStoreConnector: accepted\n",
                strlen(SEED "rejected: MooncakeStoreConnector does not "
                            "support: group 1: MambaSpec with block_size=64 != "
                            "cache_config.block_size=16 (mamba_cache_mode != 'align'); PCP/DCP > 1 "
                            "(pcp=1, dcp=2) with hybrid attention\ntide TideStoreConnector: "
                            "accepted\n")) == 0);
    CHECK(strstr(out_text, "set cache_config.mamba_cache_mode to \"align\"") == NULL);
    CHECK_CONTAINS(out_text, "make the MambaSpec block_size (64) match cache_config.block_size "
                             "(16)");
    CHECK_CONTAINS(out_text, "disable context parallelism");
    CHECK_CONTAINS(out_text, "or use tide (kv_connector \"TideStoreConnector\"), which supports "
                             "hybrid models with decode context parallelism");

    /* Mode 'none': the reference accepts (equal block sizes), tide does not. */
    p = write_tmp("none.json", doc("", "", "", G_FULL(16) "," G_MAMBA(16)));
    snprintf(args, sizeof(args), "--vllm 0.28 '%s'", p);
    CHECK_EQ(run_check(args), 1);
    CHECK(strncmp(out_text,
                  SEED "accepted\ntide TideStoreConnector: "
                       "rejected: TideStoreConnector does not support: group 1: MambaSpec "
                       "with mamba_cache_mode='none'",
                  120) == 0);
    CHECK_CONTAINS(out_text, "set cache_config.mamba_cache_mode to \"align\" (recommended)");

    /* --quiet prints only the two verdict lines. */
    snprintf(args, sizeof(args), "--vllm 0.28 --quiet '%s'", p);
    CHECK_EQ(run_check(args), 1);
    int lines = 0;
    for (const char *s = out_text; *s; s++)
        lines += *s == '\n';
    CHECK_EQ(lines, 2);
}

/* The example: a Mamba group outside align mode whose block the hash block size (the
 * LCM, 64) makes the 16-token attention block miss. vLLM would stop at the connector's
 * message; the reference's verdict comes first, then tide's problem and its fixes. */
TEST(connector_cli_reference_verdict_before_derived_problems) {
    const char *p = write_tmp(
        "mamba-all.json", doc("\"mamba_cache_mode\":\"all\"", "", "", G_FULL(16) "," G_MAMBA(64)));
    char args[1024];
    snprintf(args, sizeof(args), "--vllm 0.28 '%s'", p);
    CHECK_EQ(run_check(args), 1);
    CHECK_STR(out_text, SEED
              "rejected: MooncakeStoreConnector does not support: "
              "group 1: MambaSpec with block_size=64 != cache_config.block_size=16 "
              "(mamba_cache_mode != 'align')\n"
              "tide TideStoreConnector: rejected: the configuration is invalid\n"
              "\n"
              "fixes:\n"
              "  MooncakeStoreConnector: group 1: MambaSpec with block_size=64 != "
              "cache_config.block_size=16 (mamba_cache_mode != 'align')\n"
              "    - set cache_config.mamba_cache_mode to \"align\" so that Mamba blocks take the "
              "attention block size\n"
              "    - make the MambaSpec block_size (64) match cache_config.block_size (16)\n"
              "    - or use tide (kv_connector \"TideStoreConnector\"), which supports Mamba "
              "groups in align mode whatever their block size\n"
              "\n"
              "problems:\n"
              "  kv_cache_config.kv_cache_groups[0].kv_cache_spec.block_size: block_size (16) "
              "must be a multiple of hash_block_size (64)\n"
              "  to fix:\n"
              "    - set cache_config.mamba_cache_mode to \"align\": outside align mode vLLM "
              "hashes in scheduler blocks (64 tokens, the least common multiple of the group "
              "block sizes); in align mode the hash block size is their greatest common divisor "
              "(16)\n"
              "    - or make every group's block size a multiple of 64\n");
    CHECK_STR(err_text, "");

    snprintf(args, sizeof(args), "--vllm 0.28 --quiet '%s'", p);
    CHECK_EQ(run_check(args), 1);
    CHECK_STR(out_text, SEED "rejected: MooncakeStoreConnector does not support: "
                             "group 1: MambaSpec with block_size=64 != cache_config.block_size=16 "
                             "(mamba_cache_mode != 'align')\n"
                             "tide TideStoreConnector: rejected: the configuration is invalid\n");
}

/* Every reference rule with every derived check that can fire with it (connector_testutil.h):
 * the reference's verdict is the first line, tide's problems follow with fixes. */
TEST(connector_cli_reference_verdict_with_every_derived_problem) {
    static char want[4096];
    for (size_t i = 0; i < N_DERIVED_CASES; i++) {
        const derived_case *t = &derived_cases[i];
        const char *p = write_tmp("derived.json", doc(t->cache, t->parallel, "", t->groups));
        char args[1024];
        snprintf(args, sizeof(args), "--vllm 0.28 '%s'", p);
        CHECK_MSG(run_check(args) == 1, "%s: exit status", t->name);
        snprintf(want, sizeof(want),
                 SEED "%s%s\n"
                      "tide TideStoreConnector: rejected: the configuration is invalid\n",
                 t->ref[0] ? "rejected: " : "accepted", t->ref);
        CHECK_MSG(strncmp(out_text, want, strlen(want)) == 0, "%s: output starts\n%s", t->name,
                  out_text);
        snprintf(want, sizeof(want), "\nproblems:\n");
        const char *probs = strstr(out_text, want);
        CHECK_MSG(probs != NULL, "%s: no problems section", t->name);
        snprintf(want, sizeof(want), "\n  %s\n", t->problem);
        CHECK_MSG(strstr(probs, want), "%s: no problem \"%s\"", t->name, t->problem);
        if (t->problem2) {
            snprintf(want, sizeof(want), "\n  %s\n", t->problem2);
            CHECK_MSG(strstr(probs, want), "%s: no problem \"%s\"", t->name, t->problem2);
        }
        CHECK_MSG(strstr(probs, "\n  to fix:\n    - "), "%s: no fixes for tide's problems",
                  t->name);
    }

    /* Capacity-only: the reference skips its rules, and says so first. */
    const char *p =
        write_tmp("capacity.json",
                  "{\"model_config\":{\"model\":\"m\"},"
                  "\"cache_config\":{\"block_size\":16,\"mamba_cache_mode\":\"all\"},"
                  "\"kv_transfer_config\":{\"kv_role\":\"kv_consumer\","
                  "\"kv_connector_extra_config\":{\"enable_lookup\":false}},"
                  "\"kv_cache_config\":{\"kv_cache_groups\":[" G_CROSS(16) "," G_MAMBA(64) "]}}");
    char args[1024];
    snprintf(args, sizeof(args), "--vllm 0.28 '%s'", p);
    CHECK_EQ(run_check(args), 1);
    CHECK(strncmp(out_text, SEED "accepted (capacity-only",
                  strlen(SEED "accepted (capacity-only")) == 0);
    CHECK_CONTAINS(out_text, "\ntide TideStoreConnector: rejected: the configuration is invalid\n");
    CHECK_CONTAINS(out_text, "\n  " HASH_LINE(0, 16, 64) "\n");
}

/* The table of examples in docs/VLLM.md: file, the reference's verdict under each rule set
 * (vLLM <= 0.28, 0.29, 0.30 to 0.33), tide's verdict. */
static const struct {
    const char *file;
    int ref_ok[3], tide_ok;
} example_table[] = {
    {"llama-dense.json", {1, 1, 1}, 1},
    {"gemma-sliding-window.json", {1, 1, 1}, 1},
    {"qwen3-next-hybrid-align.json", {1, 1, 1}, 1},
    {"deepseek-mla-tp8.json", {1, 1, 1}, 1},
    {"whisper-cross-attention.json", {0, 0, 0}, 0},
    /* Mamba block 128 vs cache block 32 (align mode), DCP 2: 0.29 drops the DCP item but keeps
     * the block-size one; 0.30 judges Mamba by mode. */
    {"falcon-h1-dcp-reference-rejects.json", {0, 0, 1}, 1},
};

TEST(connector_examples_get_their_verdicts) {
    static const char *const versions[3] = {"0.28", "0.29", "0.33"};
    static const char *const spans[3] = {"vLLM <= 0.28", "vLLM 0.29", "vLLM 0.30 to 0.33"};
    const char *dir = examples_dir();
    for (size_t i = 0; i < sizeof(example_table) / sizeof(example_table[0]); i++) {
        char path[PATH_MAX + 64];
        snprintf(path, sizeof(path), "%s/%s", dir, example_table[i].file);
        ccfg c;
        ccfg_errs e;
        ccfg_errs_init(&e);
        int rc = ccfg_parse_file(path, &c, &e);
        if (rc == 0) rc = ccfg_check(&c, &e);
        CHECK_MSG(rc == 0, "%s: %s", example_table[i].file, e.n ? e.msg[0] : "?");
        connector_verdict v;
        for (int r = 0; r < 3; r++)
            CHECK_MSG((connector_validate_reference(&c, (connector_rules)r, &v) == 0) ==
                          example_table[i].ref_ok[r],
                      "%s: reference verdict (%s)", example_table[i].file, spans[r]);
        CHECK_MSG((connector_validate(&c, CONNECTOR_IMPL_REFERENCE, &v) == 0) ==
                      example_table[i].ref_ok[2],
                  "%s: reference verdict (default)", example_table[i].file);
        CHECK_MSG((connector_validate(&c, CONNECTOR_IMPL_TIDE, &v) == 0) ==
                      example_table[i].tide_ok,
                  "%s: tide verdict", example_table[i].file);
        ccfg_free(&c);
        ccfg_errs_free(&e);

        for (int r = 0; r < 3; r++) {
            char args[PATH_MAX + 80], want[160];
            snprintf(args, sizeof(args), "--vllm %s '%s'", versions[r], path);
            CHECK_EQ(run_check(args), example_table[i].tide_ok ? 0 : 1);
            snprintf(want, sizeof(want), "vLLM %s MooncakeStoreConnector (rules of %s): %s",
                     versions[r], spans[r], example_table[i].ref_ok[r] ? "accepted" : "rejected");
            CHECK_MSG(strncmp(out_text, want, strlen(want)) == 0, "%s: %s", args, out_text);
        }
    }
}

/* The README's --kv-transfer-config (kv_connector_module_path, url, reconnect_s) is a
 * configuration tide's connector takes, so check-config takes it too: both read one key
 * table. Every key of that table is accepted with a value of its type. */
TEST(connector_cli_accepts_every_key_the_connector_accepts) {
    const char *p = write_tmp(
        "readme.json", doc("", "",
                           "\"kv_connector\":\"TideStoreConnector\",\"kv_connector_module_path\":"
                           "\"tide.vllm\",\"kv_load_failure_policy\":\"recompute\","
                           "\"kv_connector_extra_config\":{\"url\":\"unix:///run/tide/tide.sock\","
                           "\"reconnect_s\":5,\"kv_events\":true}",
                           G_FULL(16)));
    char args[1024];
    snprintf(args, sizeof(args), "'%s'", p);
    CHECK_EQ(run_check(args), 0);
    CHECK_STR(err_text, "");
    CHECK(strncmp(out_text, NEWEST "accepted\n", strlen(NEWEST "accepted\n")) == 0);

    static const char *const sample[] = {"true", "\"true\"", "\"s\"", "null", "7", "null",
                                         "2.5",  "null",     NULL,    NULL,   NULL};
    size_t nt, nx;
    const ccfg_key *tk = ccfg_transfer_keys(&nt), *xk = ccfg_extra_keys(&nx);
    char inner[4096], body[8192];
    size_t len = 0;
    for (size_t i = 0; i < nx; i++) {
        const char *val = xk[i].type == CCFG_KEY_ENUM ? "\"x\"" : sample[xk[i].type];
        if (!val) continue;
        if (strcmp(xk[i].name, "lookup_rpc_port") == 0) val = "0";
        len += (size_t)snprintf(inner + len, sizeof(inner) - len, "%s\"%s\":%s", len ? "," : "",
                                xk[i].name, val);
    }
    len = (size_t)snprintf(body, sizeof(body), "\"kv_connector_extra_config\":{%s}", inner);
    for (size_t i = 0; i < nt; i++) {
        const char *val = sample[tk[i].type];
        if (!val || strcmp(tk[i].name, "kv_role") == 0) continue; /* kv_role: doc() sets it */
        len += (size_t)snprintf(body + len, sizeof(body) - len, ",\"%s\":%s", tk[i].name, val);
    }
    p = write_tmp("every-key.json", doc("", "", body, G_FULL(16)));
    snprintf(args, sizeof(args), "'%s'", p);
    CHECK_MSG(run_check(args) == 0, "%s\n%s", body, err_text);
    CHECK(nt >= 9 && nx >= 12);

    /* A typo is refused with the key's path and a suggestion; a wrong type with the type. */
    p = write_tmp("typo.json", doc("", "",
                                   "\"kv_connector_extra_config\":{\"reconect_s\":5,"
                                   "\"url\":7}",
                                   G_FULL(16)));
    snprintf(args, sizeof(args), "'%s'", p);
    CHECK_EQ(run_check(args), 2);
    CHECK_CONTAINS(err_text, "kv_transfer_config.kv_connector_extra_config.reconect_s: unknown "
                             "key (did you mean 'reconnect_s'?)");
    CHECK_CONTAINS(err_text, "kv_transfer_config.kv_connector_extra_config.url: expected a "
                             "string, got an integer");
}

/* --vllm: the label names the release and its rule set; an unknown or malformed release is a
 * usage error naming it (and, for a newer one, the newest tide knows). */
TEST(connector_cli_vllm_option) {
    const char *p = write_tmp("plain.json", doc("", "", "", G_FULL(16)));
    char args[1024];
    snprintf(args, sizeof(args), "--quiet '%s'", p);
    CHECK_EQ(run_check(args), 0);
    CHECK(strncmp(out_text, NEWEST "accepted\n", strlen(NEWEST "accepted\n")) == 0);
    snprintf(args, sizeof(args), "--quiet --vllm=0.29.1 '%s'", p);
    CHECK_EQ(run_check(args), 0);
    CHECK_CONTAINS(out_text, "vLLM 0.29 MooncakeStoreConnector (rules of vLLM 0.29): accepted\n");
    snprintf(args, sizeof(args), "--vllm 0.34 '%s'", p);
    CHECK_EQ(run_check(args), 2);
    CHECK_CONTAINS(err_text, "vLLM 0.34 is newer than the releases whose MooncakeStoreConnector "
                             "rules tide knows (up to vLLM 0.33)");
    snprintf(args, sizeof(args), "--vllm latest '%s'", p);
    CHECK_EQ(run_check(args), 2);
    CHECK_CONTAINS(err_text, "'latest' is not a vLLM version");
    CHECK_EQ(run_check("--vllm"), 2);
    CHECK_CONTAINS(err_text, "--vllm needs a VERSION");
}
