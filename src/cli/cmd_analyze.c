/*
 * cmd_analyze.c — `tide analyze`: a trace's hit rates under an infinite cache, Belady's
 * optimum and every simulated policy (LRU, S3-FIFO, ARC, reuse-count admission, chain,
 * chain-ordered ARC), for one or more capacities, by simulation (src/trace/sim.c), and
 * how far each policy is from Belady.
 *
 * Blocks are all block_tokens x bytes_per_token bytes, so a capacity in bytes is a number
 * of blocks, floor(capacity / block bytes), and the simulation counts blocks. The figures
 * are those of the protocol `tide replay` runs (trace.h): a hit is a block of a request's
 * longest cached prefix. `tide replay` against mem://?policy=lru or policy=chain at the
 * same number of blocks gives exactly those figures (tests/integration/test_cli_trace.c).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli/cli.h"
#include "common/util.h"
#include "tide.h"
#include "trace/trace.h"

#define MAX_CAPS 64

typedef struct analyze_opts {
    const char *path;
    cli_block blk;
    uint64_t caps[MAX_CAPS]; /* in blocks */
    uint64_t cap_bytes[MAX_CAPS];
    size_t ncaps;
    uint64_t limit;
    int json;
} analyze_opts;

static void usage(FILE *f) {
    fprintf(f, "usage: tide analyze TRACE.jsonl --capacity SIZE[,SIZE...] [OPTIONS]\n"
               "\n"
               "Simulates a Mooncake-format trace (JSON lines: timestamp, input_length,\n"
               "output_length, hash_ids) through caches of the given capacities and prints the\n"
               "hit rate (blocks and tokens) of an infinite cache, of Belady's optimum (evict the\n"
               "block used again farthest in the future) and of the policies: lru, s3fifo, arc,\n"
               "admit (LRU storing a block only on its second put when full), chain\n"
               "(chain-ordered segmented LRU), chainarc (ARC in chain order) and adapt (the\n"
               "store's default: chain plus a ghost of evictions, its share chosen online), then\n"
               "each policy's block hits as a fraction of Belady's. A hit is a block of a\n"
               "request's longest cached prefix, as in `tide replay`; every block is\n"
               "block-tokens x bytes-per-token bytes, so a capacity holds a whole number of them.\n"
               "\n"
               "Options:\n"
               "  --capacity LIST      capacities in bytes, comma-separated (1GiB,16GiB,...)\n"
               "  --blocks LIST        capacities in blocks instead, comma-separated\n");
    cli_block_help(f);
    fprintf(f, "  --limit N            only the first N requests\n"
               "  --json               one JSON object on stdout\n"
               "\n"
               "Exit status: 0 done, 1 out of memory, 2 bad arguments or a bad trace (the\n"
               "message names the line).\n");
}

/* Parse a comma-separated list of sizes (in_blocks = 0) or block counts into o->caps. */
static int parse_caps(analyze_opts *o, const char *list, int in_blocks) {
    if (o->ncaps) return cli_usage_error("analyze", "give --capacity or --blocks once");
    char buf[1024];
    if (strlen(list) >= sizeof(buf))
        return cli_usage_error("analyze", "capacity list longer than %zu bytes", sizeof(buf) - 1);
    strcpy(buf, list);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (o->ncaps == MAX_CAPS)
            return cli_usage_error("analyze", "at most %d capacities", MAX_CAPS);
        uint64_t v;
        char why[200];
        if (in_blocks && cli_parse_u64(tok, 1, UINT32_MAX, &v))
            return cli_usage_error("analyze", "--blocks: '%s' is not a block count from 1", tok);
        if (!in_blocks && cli_parse_size_why(tok, 1, UINT64_MAX, &v, why, sizeof(why)))
            return cli_usage_error("analyze", "--capacity: %s",
                                   strcmp(why, "out of range") ? why
                                                               : "a size above 0, like 16GiB");
        o->cap_bytes[o->ncaps] = in_blocks ? 0 : v;
        o->caps[o->ncaps++] = in_blocks ? v : 0;
    }
    if (!o->ncaps) return cli_usage_error("analyze", "empty capacity list");
    return 0;
}

/* --capacity and --blocks: one of them, once. */
typedef struct caps_arg {
    const char *list;
    int in_blocks;
} caps_arg;

static int caps_flag(void *ctx, const char *cmd, const char *name, const char *v) {
    caps_arg *c = ctx;
    if (c->list) return cli_usage_error(cmd, "give --capacity or --blocks once");
    c->list = v;
    c->in_blocks = !strcmp(name, "--blocks");
    return 0;
}

static int parse_args(int argc, char **argv, analyze_opts *o) {
    caps_arg ca = {0};
    cli_flag flags[4 + CLI_BLOCK_NFLAGS] = {
        {.name = "--json", .type = CLI_FLAG_SWITCH, .dst = &o->json},
        {.name = "--capacity", .type = CLI_FLAG_CALL, .call = caps_flag, .ctx = &ca},
        {.name = "--blocks", .type = CLI_FLAG_CALL, .call = caps_flag, .ctx = &ca},
        {.name = "--limit",
         .type = CLI_FLAG_U64,
         .dst = &o->limit,
         .min = 1,
         .max = UINT64_MAX,
         .want = "a number from 1"},
    };
    cli_block_flags(&o->blk, flags + 4);
    const cli_spec spec = {"analyze", flags,    sizeof(flags) / sizeof(flags[0]),
                           usage,     &o->path, "one trace at a time"};
    int rc = cli_flags_parse(&spec, argc, argv);
    if (rc) return rc;
    const char *caps = ca.list;
    int caps_blocks = ca.in_blocks;
    if (!o->path) return cli_usage_error("analyze", "which trace? (tide analyze TRACE.jsonl ...)");
    if (!caps) return cli_usage_error("analyze", "--capacity SIZE[,SIZE...] is required");
    if (cli_block_finish("analyze", &o->blk)) return 2;
    if ((rc = parse_caps(o, caps, caps_blocks)) != 0) return rc;
    for (size_t k = 0; k < o->ncaps; k++) {
        if (caps_blocks) {
            o->cap_bytes[k] = o->caps[k] * o->blk.block_bytes;
            continue;
        }
        o->caps[k] = o->cap_bytes[k] / o->blk.block_bytes;
        if (o->caps[k] == 0)
            return cli_usage_error("analyze",
                                   "capacity %" PRIu64 " bytes holds no block of %" PRIu64 " bytes",
                                   o->cap_bytes[k], o->blk.block_bytes);
    }
    return 0;
}

static double rate(uint64_t part, uint64_t whole) {
    return whole ? (double)part / (double)whole : 0.0;
}

static cJSON *result_json(const sim_result *r, const sim_result *belady) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "block_hit_rate", rate(r->hit_blocks, r->blocks));
    cJSON_AddNumberToObject(j, "token_hit_rate", rate(r->hit_tokens, r->tokens));
    cJSON_AddNumberToObject(j, "hit_blocks", (double)r->hit_blocks);
    cJSON_AddNumberToObject(j, "hit_tokens", (double)r->hit_tokens);
    cJSON_AddNumberToObject(j, "inserts", (double)r->inserts);
    cJSON_AddNumberToObject(j, "refused", (double)r->refused);
    cJSON_AddNumberToObject(j, "evictions", (double)r->evictions);
    if (r->share > 0) { /* adapt: where its miniatures left protected's share */
        cJSON_AddNumberToObject(j, "protected_share", r->share);
        cJSON_AddNumberToObject(j, "share_moves", (double)r->share_moves);
    }
    /* Block hits as a fraction of Belady's at the same capacity (above 1 only for the
     * infinite cache once Belady runs out of room). */
    cJSON_AddNumberToObject(j, "of_belady", rate(r->hit_blocks, belady->hit_blocks));
    return j;
}

int cmd_analyze(int argc, char **argv) {
    analyze_opts o = {0};
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc == 1 ? 0 : rc;

    trace t;
    char err[512];
    uint64_t t0 = now_ns();
    rc = trace_load(o.path, o.blk.block_tokens, o.limit, &t, err, sizeof(err));
    if (rc) {
        fprintf(stderr, "tide analyze: %s%s%s\n", rc == TIDE_EPARSE ? o.path : "",
                rc == TIDE_EPARSE ? ": " : "", err);
        return rc == -ENOMEM ? 1 : 2;
    }
    uint64_t t1 = now_ns();

    sim_result(*res)[SIM_NPOLICIES] = calloc(o.ncaps, sizeof(*res));
    if (!res) goto oom;
    sim_result inf;
    if (sim_run(&t, SIM_INFINITE, 0, &inf)) goto oom;
    for (size_t k = 0; k < o.ncaps; k++) {
        res[k][SIM_INFINITE] = inf;
        for (int p = SIM_BELADY; p < SIM_NPOLICIES; p++)
            if (sim_run(&t, p, o.caps[k], &res[k][p])) goto oom;
    }
    double secs = (double)(now_ns() - t1) / 1e9;

    if (o.json) {
        cJSON *doc = cJSON_CreateObject();
        cJSON_AddStringToObject(doc, "trace", o.path);
        cJSON_AddNumberToObject(doc, "requests", (double)t.nreqs);
        cJSON_AddNumberToObject(doc, "blocks", (double)t.nrefs);
        cJSON_AddNumberToObject(doc, "distinct_blocks", (double)t.ndistinct);
        cJSON_AddNumberToObject(doc, "tokens", (double)t.tokens);
        cJSON_AddNumberToObject(doc, "block_tokens", (double)o.blk.block_tokens);
        cJSON_AddNumberToObject(doc, "bytes_per_token", (double)o.blk.bytes_per_token);
        cJSON_AddNumberToObject(doc, "block_bytes", (double)o.blk.block_bytes);
        if (o.blk.model) cJSON_AddStringToObject(doc, "model", o.blk.model);
        cJSON *arr = cJSON_AddArrayToObject(doc, "results");
        for (size_t k = 0; k < o.ncaps; k++) {
            cJSON *c = cJSON_CreateObject();
            cJSON_AddNumberToObject(c, "capacity_bytes", (double)o.cap_bytes[k]);
            cJSON_AddNumberToObject(c, "capacity_blocks", (double)o.caps[k]);
            for (int p = 0; p < SIM_NPOLICIES; p++)
                cJSON_AddItemToObject(c, sim_policy_name(p),
                                      result_json(&res[k][p], &res[k][SIM_BELADY]));
            cJSON_AddItemToArray(arr, c);
        }
        char *s = cJSON_PrintUnformatted(doc);
        cJSON_Delete(doc);
        if (!s) goto oom;
        printf("%s\n", s);
        free(s);
    } else {
        char bb[32];
        printf("tide analyze: %s: %zu requests, %zu block references (%zu distinct), %" PRIu64
               " tokens\nblocks of %" PRIu64 " tokens x %" PRIu64 " B = %s (%s); loaded in %.2f s, "
               "simulated in %.2f s\n",
               o.path, t.nreqs, t.nrefs, t.ndistinct, t.tokens, o.blk.block_tokens,
               o.blk.bytes_per_token, size_format(o.blk.block_bytes, bb, sizeof(bb)),
               o.blk.model ? o.blk.model : "--bytes-per-token", (double)(t1 - t0) / 1e9, secs);
        static const char *const what[] = {"block hit rate", "token hit rate",
                                           "block hits as a fraction of Belady's"};
        for (int tab = 0; tab < 3; tab++) {
            printf("\n%s\n%-12s %10s", what[tab], "capacity", "blocks");
            for (int p = 0; p < SIM_NPOLICIES; p++)
                printf(" %9s", sim_policy_name(p));
            printf("\n");
            for (size_t k = 0; k < o.ncaps; k++) {
                char cs[32];
                printf("%-12s %10" PRIu64, size_format(o.cap_bytes[k], cs, sizeof(cs)), o.caps[k]);
                for (int p = 0; p < SIM_NPOLICIES; p++) {
                    const sim_result *r = &res[k][p];
                    if (tab == 2)
                        printf(" %9.3f", rate(r->hit_blocks, res[k][SIM_BELADY].hit_blocks));
                    else
                        printf(" %8.2f%%", 100.0 * (tab ? rate(r->hit_tokens, r->tokens)
                                                        : rate(r->hit_blocks, r->blocks)));
                }
                printf("\n");
            }
        }
    }
    free(res);
    trace_free(&t);
    return 0;
oom:
    fprintf(stderr, "tide analyze: out of memory\n");
    free(res);
    trace_free(&t);
    return 1;
}
