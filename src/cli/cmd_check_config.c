/*
 * cmd_check_config.c — `tide check-config [--vllm VERSION] FILE.json`: would vLLM's
 * MooncakeStoreConnector (of that vLLM release, the newest tide knows by default) take this
 * deployment, would tide's connector, and what to change when not.
 *
 * Output (stdout): two verdict lines, the reference's first, labelled with the vLLM release
 * and the rule set applied (the reference's rules changed in 0.29 and 0.30); then the fixes for
 * each item either connector rejects; then tide's own problems with their fixes, or, when there are
 * none, what tide derives (block sizes, per-group replication factors and key prefixes).
 * vLLM builds its connector before its KV-cache manager checks block sizes, so the
 * reference's line is the connector's own verdict whenever the configuration gets that far
 * (ccfg.reached_connector), even if tide's block-size checks then fail. Problems that
 * stop the file from being read or parsed go to stderr. Exit: 0 tide supports it, 1 it does
 * not (or the values are invalid), 2 the file cannot be read or parsed, or a usage error.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "connector/config.h"
#include "connector/keys.h"
#include "tide.h"

static void help(void) {
    printf("usage: tide check-config [--quiet] [--vllm VERSION] FILE.json\n"
           "\n"
           "Reads a connector configuration (the JSON schema of docs/CONNECTOR_CONFIG.md:\n"
           "model_config, cache_config, parallel_config, kv_transfer_config, kv_cache_config)\n"
           "and prints two verdicts, each on its own line, the reference's first:\n"
           "  - whether vLLM's built-in MooncakeStoreConnector of vLLM VERSION accepts it:\n"
           "    \"accepted\", or \"rejected: \" and that vLLM's own message, byte for byte.\n"
           "    The line names the release and the rule set applied: vLLM <= 0.28, vLLM 0.29,\n"
           "    or vLLM 0.30 to 0.33 (the reference's rules changed twice). vLLM builds the\n"
           "    connector before its KV-cache manager checks block sizes, so this is the\n"
           "    connector's verdict even when those checks fail; only a problem vLLM meets\n"
           "    before building the connector makes it \"rejected: the configuration is\n"
           "    invalid\";\n"
           "  - whether tide's TideStoreConnector accepts it (\"rejected: the configuration is\n"
           "    invalid\" when any check fails),\n"
           "then, for every unsupported item, the fixes that apply; then tide's own problems\n"
           "with their fixes, or, when there are none, the block sizes, replication factors\n"
           "and key prefixes tide derives.\n"
           "\n"
           "Options:\n"
           "  -q, --quiet       print only the two verdict lines\n"
           "  --vllm VERSION    the vLLM release whose rules the reference line applies\n"
           "                    (MAJOR.MINOR[.PATCH], up to %s; default %s)\n"
           "\n"
           "Exit status (tide's verdict; the reference's never changes it):\n"
           "  0  tide's connector supports the configuration\n"
           "  1  it does not, or a value is invalid (the problems are listed on stdout)\n"
           "  2  the file cannot be read or parsed (errors on stderr name the line and column,\n"
           "     or the JSON path of an unknown or mistyped key), or a usage error (an\n"
           "     unknown vLLM version among them)\n",
           CONNECTOR_VLLM_NEWEST, CONNECTOR_VLLM_NEWEST);
}

/* Does verdict v hold an item of this kind about this group? */
static int has_item(const connector_verdict *v, connector_item_kind kind, int group) {
    for (size_t i = 0; i < v->nitems; i++)
        if (v->items[i].kind == kind && v->items[i].group == group) return 1;
    return 0;
}

static void fix(const char *text) {
    printf("    - %s\n", text);
}

/* The fixes that apply to one item; `tide` is tide's verdict, to tell whether switching
 * to tide is one of them. */
static void print_fixes(const ccfg *c, const connector_item *it, connector_impl impl,
                        const connector_verdict *tide) {
    char buf[512];
    printf("  %s: %s\n", connector_impl_name(impl), it->text);
    switch (it->kind) {
    case CONNECTOR_ITEM_CROSS_ATTENTION:
        fix("cross-attention KV is computed from the encoder input, which a prefix hit on "
            "the decoder prompt would skip: run this encoder-decoder model without a KV-cache "
            "store connector, or with one that handles encoder-decoder models");
        fix("tide rejects CrossAttentionSpec groups too, so switching connector does not help");
        break;
    case CONNECTOR_ITEM_MAMBA_BLOCK_SIZE:
        if (it->group >= 0 && c->groups[it->group].mamba_mode != CONNECTOR_MAMBA_ALIGN)
            fix("set cache_config.mamba_cache_mode to \"align\" so that Mamba blocks take the "
                "attention block size");
        snprintf(buf, sizeof(buf),
                 "make the MambaSpec block_size (%" PRId64
                 ") match cache_config.block_size (%" PRId64 ")",
                 it->a, it->b);
        fix(buf);
        if (!has_item(tide, CONNECTOR_ITEM_MAMBA_MODE_NONE, it->group))
            fix("or use tide (kv_connector \"TideStoreConnector\"), which supports Mamba groups "
                "in align mode whatever their block size");
        break;
    case CONNECTOR_ITEM_HYBRID_CP:
        fix("disable context parallelism: set parallel_config.prefill_context_parallel_size "
            "and decode_context_parallel_size to 1");
        if (!has_item(tide, CONNECTOR_ITEM_HYBRID_PCP, -1) && c->pcp_size == 1)
            fix("or use tide (kv_connector \"TideStoreConnector\"), which supports hybrid "
                "models with decode context parallelism (DCP > 1)");
        else
            fix("or use another connector (e.g. LMCache or NIXL) if context parallelism with "
                "a hybrid model is a hard requirement");
        break;
    case CONNECTOR_ITEM_MAMBA_MODE_NONE:
        fix("set cache_config.mamba_cache_mode to \"align\" (recommended) or \"all\", so "
            "that vLLM keeps Mamba state snapshots at block ends (this needs prefix caching)");
        break;
    case CONNECTOR_ITEM_HYBRID_PCP:
        fix("set parallel_config.prefill_context_parallel_size to 1 (decode context "
            "parallelism is supported)");
        fix("or use another connector (e.g. LMCache or NIXL) if prefill context parallelism "
            "with a hybrid model is a hard requirement");
        break;
    case CONNECTOR_ITEM_MAMBA_MODE:
        fix("set cache_config.mamba_cache_mode to \"align\" (vLLM then keeps a Mamba state "
            "snapshot at every block end a step reaches)");
        if (it->group >= 0 && c->groups[it->group].mamba_mode == CONNECTOR_MAMBA_ALL &&
            !has_item(tide, CONNECTOR_ITEM_MAMBA_MODE_NONE, it->group))
            fix("or use tide (kv_connector \"TideStoreConnector\"), which supports Mamba groups "
                "in 'all' mode too");
        break;
    case CONNECTOR_ITEM_NO_CACHEABLE_GROUP:
        fix("no KV-cache group of this model is prefix-cacheable (every group is kept out of "
            "transfer, or is a CircularBufferSpec, HiSparse or bounded-replay group): a KV-cache "
            "store has nothing to keep; run without a store connector");
        break;
    case CONNECTOR_ITEM_NOT_TRANSFERRED:
        fix("tide keys, saves and looks up every group at one prefix boundary, which a group "
            "outside vLLM's prefix caching or transfer does not have: run this model without a "
            "store connector, or with vLLM's own MooncakeStoreConnector (vLLM >= 0.30 skips such "
            "groups)");
        break;
    case CONNECTOR_ITEM_KEY_TOO_LONG:
        fix("shorten kv_connector_extra_config.cache_prefix, or serve the model under a "
            "shorter name (the key uses the last path component of model_config.model)");
        break;
    }
}

static int64_t gcd64(int64_t a, int64_t b) {
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* Fixes for the problems vLLM's KV-cache manager would stop at once the connector is built
 * (ccfg_check sets the derived block sizes it could compute). */
static void print_problem_fixes(const ccfg *c) {
    char buf[512];
    int any = 0;
#define FIX(...)                                                                                   \
    do {                                                                                           \
        if (!any++) printf("  to fix:\n");                                                         \
        snprintf(buf, sizeof(buf), __VA_ARGS__);                                                   \
        fix(buf);                                                                                  \
    } while (0)
    if (c->scheduler_block_size <= 0) {
        FIX("give the groups block sizes with a smaller least common multiple (vLLM's "
            "scheduler block size; tide's limit is 2^48 tokens)");
        return;
    }
    int64_t gcd = 0;
    int misfit = 0, unaligned = 0;
    for (size_t i = 0; i < c->ngroups; i++) {
        const connector_group *g = &c->groups[i];
        gcd = gcd64(gcd, g->eff_block_size);
        misfit |= g->eff_block_size % c->hash_block_size != 0;
        unaligned |= g->kind == CONNECTOR_SPEC_MAMBA && g->mamba_mode != CONNECTOR_MAMBA_ALIGN;
    }
    if (misfit && unaligned) {
        if (c->prefix_match_unit > 0)
            FIX("set cache_config.mamba_cache_mode to \"align\": outside align mode vLLM hashes "
                "in scheduler blocks (%" PRId64 " tokens, the least common multiple of the group "
                "block sizes); in align mode the hash block size is "
                "cache_config.prefix_match_unit (%" PRId64 ")",
                c->scheduler_block_size, c->prefix_match_unit);
        else
            FIX("set cache_config.mamba_cache_mode to \"align\": outside align mode vLLM hashes "
                "in scheduler blocks (%" PRId64 " tokens, the least common multiple of the group "
                "block sizes); in align mode the hash block size is their greatest common "
                "divisor (%" PRId64 ")",
                c->scheduler_block_size, gcd);
        FIX("or make every group's block size a multiple of %" PRId64, c->hash_block_size);
    } else if (misfit) {
        FIX("set cache_config.prefix_match_unit to a divisor of every group's block size "
            "(their greatest common divisor is %" PRId64 "), or to null",
            gcd);
        FIX("or make every group's block size a multiple of %" PRId64, c->hash_block_size);
    }
    if (c->retention_interval > 0 && c->retention_interval % c->scheduler_block_size)
        FIX("set prefix_cache_retention_interval to a multiple of the scheduler block size "
            "(%" PRId64 "), to 0 (only the replay boundary) or to null (every block)",
            c->scheduler_block_size);
#undef FIX
}

static void print_verdict(const connector_verdict *v, const char *label) {
    if (v->capacity_only)
        printf("%s: accepted (capacity-only: kv_consumer with enable_lookup and "
               "save_decode_cache false; the rank only lends memory, validation is skipped)\n",
               label);
    else if (v->nitems)
        printf("%s: rejected: %s\n", label, v->message);
    else
        printf("%s: accepted\n", label);
}

static void print_derived(const ccfg *c) {
    printf("\nderived:\n");
    printf("  scheduler block size %" PRId64 ", hash block size %" PRId64 "\n",
           c->scheduler_block_size, c->hash_block_size);
    for (size_t g = 0; g < c->ngroups; g++) {
        const connector_group *gr = &c->groups[g];
        connector_ns ns = connector_own_ns(c, g);
        char prefix[TIDE_KEY_MAX + 1];
        int r = connector_key_prefix(c, g, &ns, prefix, sizeof(prefix));
        size_t nns = connector_lookup_namespaces(c, g, NULL, 0);
        printf("  group %zu: %s, block %" PRId64 " tokens, page %" PRId64
               " bytes/layer, TP replication factor %d, %zu lookup namespace%s\n",
               g, ccfg_spec_name(gr->kind), gr->block_size, gr->page_bytes, gr->tp_factor, nns,
               nns == 1 ? "" : "s");
        if (r >= 0) printf("    key prefix: %s@<hash>\n", prefix);
    }
}

int cmd_check_config(int argc, char **argv) {
    const char *path = NULL, *version = CONNECTOR_VLLM_NEWEST;
    int quiet = 0;
    for (int i = 1; i < argc; i++) {
        if (cli_is_help(argv[i])) {
            help();
            return 0;
        }
        if (strcmp(argv[i], "-q") == 0 || strcmp(argv[i], "--quiet") == 0)
            quiet = 1;
        else if (strcmp(argv[i], "--vllm") == 0 && i + 1 < argc)
            version = argv[++i];
        else if (strncmp(argv[i], "--vllm=", 7) == 0)
            version = argv[i] + 7;
        else if (strcmp(argv[i], "--vllm") == 0)
            return cli_usage_error("check-config", "--vllm needs a VERSION (e.g. %s)",
                                   CONNECTOR_VLLM_NEWEST);
        else if (argv[i][0] == '-' && argv[i][1])
            return cli_unknown_option_in("check-config", argv[i],
                                         (const char *const[]){"--quiet", "--help"}, 2);
        else if (path)
            return cli_usage_error("check-config", "one FILE.json only");
        else
            path = argv[i];
    }
    connector_vllm vllm;
    char verr[256];
    if (connector_vllm_parse(version, &vllm, verr, sizeof(verr)) < 0)
        return cli_usage_error("check-config", "--vllm: %s", verr);
    if (!path) return cli_usage_error("check-config", "FILE.json is required");

    ccfg cfg;
    ccfg_errs errs;
    ccfg_errs_init(&errs);
    int rc = ccfg_parse_file(path, &cfg, &errs);
    if (rc != 0) {
        if (rc == -ENOMEM && errs.n == 0) fprintf(stderr, "tide check-config: out of memory\n");
        for (size_t i = 0; i < errs.n; i++) {
            /* Lines from a failed read already start with the path. */
            if (strncmp(errs.msg[i], path, strlen(path)) == 0)
                fprintf(stderr, "tide check-config: %s\n", errs.msg[i]);
            else
                fprintf(stderr, "tide check-config: %s: %s\n", path, errs.msg[i]);
        }
        ccfg_free(&cfg);
        ccfg_errs_free(&errs);
        return 2;
    }

    char ref_label[128];
    snprintf(ref_label, sizeof(ref_label), "vLLM %s MooncakeStoreConnector (rules of %s)",
             vllm.name, connector_rules_span(vllm.rules));
    const char *tide_label = "tide TideStoreConnector";
    int crc = ccfg_check(&cfg, &errs);
    /* The reference's verdict whenever vLLM would build its connector; tide's only for a
     * configuration every check passed (TIDE_ECONFIG otherwise, with no items). */
    connector_verdict ref, tide;
    int rrc = connector_validate_reference(&cfg, vllm.rules, &ref);
    int trc = connector_validate(&cfg, CONNECTOR_IMPL_TIDE, &tide);
    if (rrc == TIDE_ECONFIG)
        printf("%s: rejected: the configuration is invalid\n", ref_label);
    else
        print_verdict(&ref, ref_label);
    if (trc == TIDE_ECONFIG)
        printf("%s: rejected: the configuration is invalid\n", tide_label);
    else
        print_verdict(&tide, tide_label);
    if (!quiet) {
        if (ref.nitems || tide.nitems) {
            printf("\nfixes:\n");
            for (size_t i = 0; i < ref.nitems; i++)
                print_fixes(&cfg, &ref.items[i], CONNECTOR_IMPL_REFERENCE, &tide);
            for (size_t i = 0; i < tide.nitems; i++) {
                const connector_item *it = &tide.items[i];
                /* Items both connectors reject with the same words were covered above. */
                if (it->kind == CONNECTOR_ITEM_CROSS_ATTENTION &&
                    has_item(&ref, CONNECTOR_ITEM_CROSS_ATTENTION, it->group))
                    continue;
                print_fixes(&cfg, it, CONNECTOR_IMPL_TIDE, &tide);
            }
        }
        if (crc != 0) {
            printf("\nproblems:\n");
            for (size_t i = 0; i < errs.n; i++)
                printf("  %s\n", errs.msg[i]);
            if (cfg.reached_connector) print_problem_fixes(&cfg);
        } else {
            print_derived(&cfg);
        }
    }
    ccfg_free(&cfg);
    ccfg_errs_free(&errs);
    if (crc == -ENOMEM) {
        fprintf(stderr, "tide check-config: out of memory\n");
        return 2;
    }
    return trc == 0 ? 0 : 1;
}
