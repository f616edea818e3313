/*
 * cmd_replay.c — `tide replay`: a Mooncake-format trace played against a real store.
 *
 * Each request of the trace (trace.h) becomes what a serving engine with a KV-cache store
 * does for a prompt:
 *
 *   1. lookup: tide_match_prefix() over the request's block keys, "trace/<hash_id>";
 *   2. load:   one tide_get_many() of the matched blocks into buffers (more than one when
 *              the blocks exceed --batch-bytes), each block checked against the bytes it
 *              must hold; the usable prefix ends at the first block that does not load;
 *   3. save:   one tide_put_many() (same batching) of the rest of its blocks. A block the
 *              store already holds is a duplicate put that changes nothing.
 *
 * Every block is block_tokens x bytes_per_token bytes, and its bytes are a function of its
 * hash id: 64-bit words seed + i * golden, seed = prng_mix(hash id), so any wrong,
 * stale or misplaced byte is caught (all bytes by default; --verify sample checks the
 * first and last 64 bytes and a 4 KiB window of each). A wrong byte fails the run.
 *
 * With --speed X requests are issued at X times the trace's pace (timestamps are
 * milliseconds); 0, the default, issues them back to back. One request is in flight at a
 * time, so the protocol is exactly the one tide analyze simulates (sim.c), and against
 * mem://?policy=lru or policy=chain the hit counts equal its figures for that policy.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "cli/cli.h"
#include "common/histo.h"
#include "common/prng.h"
#include "common/util.h"
#include "tide.h"
#include "trace/trace.h"

#define KEY_MAX 32 /* "trace/" and up to 16 digits (ids are below 2^53) */

enum verify_mode { VERIFY_ALL = 0, VERIFY_SAMPLE = 1, VERIFY_NONE = 2 };
/* Whether a URL's query has the option `name` (as a whole name: "disk_capacity" is not
 * "capacity"). */
static int url_has_option(const char *u, const char *name) {
    const char *q = u ? strchr(u, '?') : NULL;
    size_t n = strlen(name);
    while (q) {
        q++;
        if (strncmp(q, name, n) == 0 && (q[n] == '=' || q[n] == '&' || q[n] == '\0')) return 1;
        q = strchr(q, '&');
    }
    return 0;
}

static const char *const verify_names[] = {"all", "sample", "none", NULL};

typedef struct replay_opts {
    const char *path, *url;
    cli_block blk;
    uint64_t capacity, limit, batch_bytes;
    double speed;
    int capacity_given, verify, json, quiet;
} replay_opts;

typedef struct replay_totals {
    uint64_t requests, blocks, hit_blocks, matched_blocks, tokens, hit_tokens;
    uint64_t load_calls, save_calls, loaded_bytes, saved_blocks, saved_bytes;
    uint64_t verified_bytes, wrong_blocks, load_failures;
    histo lookup, load, save;
} replay_totals;

static void usage(FILE *f) {
    fprintf(f,
            "usage: tide replay TRACE.jsonl [OPTIONS]\n"
            "\n"
            "Replays a Mooncake-format trace (JSON lines: timestamp in ms, input_length,\n"
            "output_length, hash_ids of block-tokens-token prefix blocks) against a store. Per\n"
            "request: a prefix lookup (tide_match_prefix), a load of the matched blocks (one\n"
            "tide_get_many, checked byte for byte), a save of the others (one tide_put_many).\n"
            "Blocks are real objects of block-tokens x bytes-per-token bytes.\n"
            "Prints hit rates (blocks and tokens), bytes loaded and saved, and lookup, load and\n"
            "save latency per request (p50/p90/p99/max).\n"
            "\n"
            "Options:\n"
            "  --url URL            store (default mem://); for mem:// --capacity is added\n"
            "  --capacity SIZE      the mem:// store's size (default 1GiB); not for other URLs\n");
    cli_block_help(f);
    fprintf(f,
            "  --speed X            replay at X times the trace's pace (default 0: back to back)\n"
            "  --limit N            only the first N requests\n"
            "  --verify MODE        all (default), sample or none: how much of each loaded block\n"
            "                       is compared with what it must hold\n"
            "  --batch-bytes SIZE   most bytes of blocks in one get/put call (default 256MiB)\n"
            "  --json               one JSON object on stdout\n"
            "  --quiet              no progress bar (it is drawn only on a terminal anyway)\n"
            "\n"
            "Hit rates depend on the capacity in blocks, not on the block's size: to study a\n"
            "policy over a whole trace, a small --bytes-per-token with the same number of\n"
            "blocks gives the same hits in a fraction of the time (64 MiB llama-3-8b blocks\n"
            "move terabytes over the synthetic trace; use --limit with real sizes).\n"
            "\n"
            "Exit status: 0 PASS, 1 FAIL (a wrong byte or a store error), 2 bad arguments or a\n"
            "bad trace (the message names the line).\n");
}

static int parse_args(int argc, char **argv, replay_opts *o) {
    const char *cmd = "replay";
    cli_flag flags[8 + CLI_BLOCK_NFLAGS] = {
        {.name = "--json", .type = CLI_FLAG_SWITCH, .dst = &o->json},
        {.name = "--quiet", .type = CLI_FLAG_SWITCH, .dst = &o->quiet},
        {.name = "--url", .type = CLI_FLAG_STRING, .dst = &o->url},
        {.name = "--capacity",
         .type = CLI_FLAG_SIZE,
         .dst = &o->capacity,
         .min = 1,
         .max = UINT64_MAX,
         .want = "a size like 16GiB",
         .given = &o->capacity_given},
        {.name = "--batch-bytes",
         .type = CLI_FLAG_SIZE,
         .dst = &o->batch_bytes,
         .min = 1,
         .max = 1ull << 40,
         .want = "a size like 256MiB"},
        {.name = "--speed",
         .type = CLI_FLAG_SECONDS,
         .dst = &o->speed,
         .dmin = 0,
         .dmax = 1e6,
         .want = "a factor from 0 to 1e6"},
        {.name = "--limit",
         .type = CLI_FLAG_U64,
         .dst = &o->limit,
         .min = 1,
         .max = UINT64_MAX,
         .want = "a number from 1"},
        {.name = "--verify",
         .type = CLI_FLAG_CHOICE,
         .dst = &o->verify,
         .choices = verify_names,
         .want = "all, sample or none"},
    };
    cli_block_flags(&o->blk, flags + 8);
    const cli_spec spec = {cmd,   flags,    sizeof(flags) / sizeof(flags[0]),
                           usage, &o->path, "one trace at a time"};
    int rc = cli_flags_parse(&spec, argc, argv);
    if (rc) return rc;
    if (!o->path) return cli_usage_error(cmd, "which trace? (tide replay TRACE.jsonl ...)");
    if (cli_block_finish(cmd, &o->blk)) return 2;
    int is_mem = !o->url || strncmp(o->url, "mem://", 6) == 0;
    if (o->capacity_given && !is_mem)
        return cli_usage_error(cmd, "--capacity sizes the embedded mem:// store; a remote store's "
                                    "size is set where it runs");
    if (o->capacity_given && url_has_option(o->url, "capacity"))
        return cli_usage_error(cmd, "capacity given twice: in --url and with --capacity");
    if (is_mem && !url_has_option(o->url, "capacity") && o->blk.block_bytes > o->capacity)
        return cli_usage_error(cmd, "--capacity %" PRIu64 " holds no block of %" PRIu64 " bytes",
                               o->capacity, o->blk.block_bytes);
    return 0;
}

/* Fill a block's value: word i is seed + i * PRNG_GOLDEN, little-endian; a tail shorter than a
 * word takes the low bytes of its word. The loop is a running sum, which compilers
 * vectorize, so filling costs about what a copy does. */
static void block_fill(uint64_t seed, uint8_t *p, size_t n) {
    size_t words = n / 8;
    uint64_t w = seed;
    for (size_t i = 0; i < words; i++, w += PRNG_GOLDEN)
        memcpy(p + i * 8, &w, 8);
    for (size_t i = words * 8; i < n; i++)
        p[i] = (uint8_t)(w >> (8 * (i % 8)));
}

/* Compare bytes [off, off + len) of a value with what they must be: 1 if right. */
static int block_range_ok(uint64_t seed, const uint8_t *p, size_t off, size_t len) {
    size_t i = off, end = off + len;
    for (; i < end && i % 8; i++)
        if (p[i] != (uint8_t)((seed + (i / 8) * PRNG_GOLDEN) >> (8 * (i % 8)))) return 0;
    uint64_t w = seed + (i / 8) * PRNG_GOLDEN, got;
    for (; i + 8 <= end; i += 8, w += PRNG_GOLDEN) {
        memcpy(&got, p + i, 8);
        if (got != w) return 0;
    }
    for (; i < end; i++)
        if (p[i] != (uint8_t)(w >> (8 * (i % 8)))) return 0;
    return 1;
}

static int block_ok(uint64_t seed, const uint8_t *p, size_t n, int mode, uint64_t *checked) {
    if (mode == VERIFY_ALL) {
        *checked += n;
        return block_range_ok(seed, p, 0, n);
    }
    size_t edge = n < 64 ? n : 64, win = n < 4096 ? n : 4096;
    size_t at = (size_t)(prng_mix(seed) % (n - win + 1));
    *checked += 2 * edge + win;
    return block_range_ok(seed, p, 0, edge) && block_range_ok(seed, p, n - edge, edge) &&
           block_range_ok(seed, p, at, win);
}

/* Per-request work space, sized for the longest request and one batch. */
typedef struct work {
    char *keytext;  /* KEY_MAX bytes a block */
    tide_key *keys; /* a request's keys */
    uint64_t *seed; /* a request's block seeds */
    uint8_t *buf;   /* batch blocks of block_bytes */
    tide_iov *iov;
    int *results;
    size_t *vlens;
    size_t batch; /* blocks per call */
} work;

static void sleep_until(uint64_t deadline_ns) {
    struct timespec ts = {.tv_sec = (time_t)(deadline_ns / 1000000000ull),
                          .tv_nsec = (long)(deadline_ns % 1000000000ull)};
    /* Interrupted sleeps resume toward the same absolute deadline; 1000 tries bound it. */
    for (int i = 0; i < 1000 && clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR;
         i++) {
    }
}

/* Load the matched blocks [0, hit) in batches. Returns the usable prefix (blocks that
 * loaded and verified, stopping at the first that did not), or -1 on a failed call. */
static long load_prefix(tide_store *s, const replay_opts *o, work *w, size_t hit, replay_totals *t,
                        int *wrong) {
    size_t bb = (size_t)o->blk.block_bytes, good = 0;
    uint64_t ns = 0;
    for (size_t first = 0; first < hit; first += w->batch) {
        size_t n = hit - first < w->batch ? hit - first : w->batch;
        for (size_t i = 0; i < n; i++) {
            /* Poison each block's ends so a get that writes nothing cannot pass. */
            uint8_t *b = w->buf + i * bb;
            b[0] = (uint8_t)~b[0];
            b[bb - 1] = (uint8_t)~b[bb - 1];
        }
        uint64_t t0 = now_ns();
        int rc = tide_get_many(s, w->keys + first, n, w->iov, NULL, w->results, w->vlens);
        ns += now_ns() - t0;
        t->load_calls++;
        if (rc < 0) {
            fprintf(stderr, "tide replay: request %" PRIu64 ": get_many failed: %s\n", t->requests,
                    tide_errmsg(s));
            return -1;
        }
        size_t ok = 0;
        while (ok < n && w->results[ok] == 0 && w->vlens[ok] == bb)
            ok++;
        for (size_t i = 0; i < ok; i++) {
            if (o->verify != VERIFY_NONE &&
                !block_ok(w->seed[first + i], w->buf + i * bb, bb, o->verify, &t->verified_bytes)) {
                if (!t->wrong_blocks)
                    fprintf(stderr,
                            "tide replay: WRONG BYTES in request %" PRIu64 " block %zu (%.*s)\n",
                            t->requests, first + i, (int)w->keys[first + i].len,
                            (const char *)w->keys[first + i].data);
                t->wrong_blocks++;
                *wrong = 1;
                ok = i;
                break;
            }
        }
        t->loaded_bytes += ok * bb;
        good += ok;
        if (ok < n) {
            /* Gone since the lookup (another client evicted it) or refused: count it,
             * and recompute from here as an engine would. */
            if (!*wrong && w->results[ok] != 0 && w->results[ok] != TIDE_ENOTFOUND) {
                fprintf(stderr, "tide replay: request %" PRIu64 " block %zu: %s\n", t->requests,
                        first + ok, tide_strerror(w->results[ok]));
                return -1;
            }
            if (!*wrong) t->load_failures++;
            break;
        }
    }
    histo_add(&t->load, ns);
    return (long)good;
}

/* Save blocks [from, n) of the request in batches. 0, or -1 when a put fails. */
static int save_rest(tide_store *s, const replay_opts *o, work *w, size_t from, size_t nblk,
                     replay_totals *t) {
    size_t bb = (size_t)o->blk.block_bytes;
    uint64_t ns = 0;
    for (size_t first = from; first < nblk; first += w->batch) {
        size_t n = nblk - first < w->batch ? nblk - first : w->batch;
        for (size_t i = 0; i < n; i++)
            block_fill(w->seed[first + i], w->buf + i * bb, bb);
        uint64_t t0 = now_ns();
        int rc = tide_put_many(s, w->keys + first, n, w->iov, NULL, w->results);
        ns += now_ns() - t0;
        t->save_calls++;
        if (rc < 0) {
            fprintf(stderr, "tide replay: request %" PRIu64 ": put_many failed: %s\n", t->requests,
                    tide_errmsg(s));
            return -1;
        }
        for (size_t i = 0; i < n; i++)
            if (w->results[i] != 0) {
                fprintf(stderr, "tide replay: request %" PRIu64 " saving block %zu: %s\n",
                        t->requests, first + i, tide_strerror(w->results[i]));
                return -1;
            }
        t->saved_blocks += n;
        t->saved_bytes += n * bb;
    }
    histo_add(&t->save, ns);
    return 0;
}

static int replay_one(tide_store *s, const replay_opts *o, const trace *tr, const trace_req *rq,
                      work *w, replay_totals *t, int *wrong) {
    size_t n = rq->nblocks;
    for (size_t i = 0; i < n; i++) {
        uint64_t id = tr->hash_ids[rq->first + i];
        char *k = w->keytext + i * KEY_MAX;
        int len = snprintf(k, KEY_MAX, "trace/%" PRIu64, id);
        w->keys[i] = (tide_key){k, (size_t)len};
        w->seed[i] = prng_mix(id);
    }
    uint64_t t0 = now_ns();
    int hit = tide_match_prefix(s, w->keys, n);
    histo_add(&t->lookup, now_ns() - t0);
    if (hit < 0) {
        fprintf(stderr, "tide replay: request %" PRIu64 ": match_prefix failed: %s\n", t->requests,
                tide_errmsg(s));
        return -1;
    }
    long good = 0;
    if (hit > 0) {
        good = load_prefix(s, o, w, (size_t)hit, t, wrong);
        if (good < 0) return -1;
    }
    if ((size_t)good < n && save_rest(s, o, w, (size_t)good, n, t)) return -1;
    t->requests++;
    t->blocks += n;
    t->matched_blocks += (uint64_t)hit;
    t->hit_blocks += (uint64_t)good;
    t->tokens += rq->input_len;
    for (long i = 0; i < good; i++)
        t->hit_tokens += trace_block_tokens(tr, rq, (uint32_t)i);
    return 0;
}

static void progress(const replay_totals *t, size_t total, double el) {
    int width = 30, done = total ? (int)((uint64_t)width * t->requests / total) : width;
    char bar[64];
    for (int i = 0; i < width; i++)
        bar[i] = i < done ? '#' : '.';
    bar[width] = '\0';
    fprintf(stderr, "\r[%s] %" PRIu64 "/%zu requests, block hits %.1f%%, %.1f s   ", bar,
            t->requests, total, t->blocks ? 100.0 * (double)t->hit_blocks / (double)t->blocks : 0.0,
            el);
}

static double us(const histo *h, double q) {
    return (double)histo_quantile(h, q) / 1e3;
}

static cJSON *histo_json(const histo *h) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "count", (double)h->count);
    cJSON_AddNumberToObject(j, "p50_us", us(h, 0.5));
    cJSON_AddNumberToObject(j, "p90_us", us(h, 0.9));
    cJSON_AddNumberToObject(j, "p99_us", us(h, 0.99));
    cJSON_AddNumberToObject(j, "max_us", h->count ? (double)h->max / 1e3 : 0.0);
    return j;
}

static void histo_line(const char *name, const histo *h, const char *what) {
    printf("%-9s p50 %.1f us, p90 %.1f us, p99 %.1f us, max %.1f us (%" PRIu64 " %s)\n", name,
           us(h, 0.5), us(h, 0.9), us(h, 0.99), h->count ? (double)h->max / 1e3 : 0.0, h->count,
           what);
}

static double pct(uint64_t part, uint64_t whole) {
    return whole ? 100.0 * (double)part / (double)whole : 0.0;
}

static int report(const replay_opts *o, const char *store_url, const trace *tr,
                  const replay_totals *t, const tide_stats *st0, const tide_stats *st1,
                  int have_stats, double wall, int ok) {
    if (o->json) {
        cJSON *doc = cJSON_CreateObject();
        cJSON_AddStringToObject(doc, "trace", o->path);
        char shown[CLI_URL_MAX];
        cJSON_AddStringToObject(doc, "url", cli_redact(store_url, shown, sizeof(shown)));
        if (o->blk.model) cJSON_AddStringToObject(doc, "model", o->blk.model);
        cJSON_AddNumberToObject(doc, "bytes_per_token", (double)o->blk.bytes_per_token);
        cJSON_AddNumberToObject(doc, "block_tokens", (double)o->blk.block_tokens);
        cJSON_AddNumberToObject(doc, "block_bytes", (double)o->blk.block_bytes);
        cJSON_AddNumberToObject(doc, "speed", o->speed);
        cJSON_AddNumberToObject(doc, "requests", (double)t->requests);
        cJSON_AddNumberToObject(doc, "blocks", (double)t->blocks);
        cJSON_AddNumberToObject(doc, "distinct_blocks", (double)tr->ndistinct);
        cJSON_AddNumberToObject(doc, "matched_blocks", (double)t->matched_blocks);
        cJSON_AddNumberToObject(doc, "hit_blocks", (double)t->hit_blocks);
        cJSON_AddNumberToObject(doc, "block_hit_rate", pct(t->hit_blocks, t->blocks) / 100);
        cJSON_AddNumberToObject(doc, "tokens", (double)t->tokens);
        cJSON_AddNumberToObject(doc, "hit_tokens", (double)t->hit_tokens);
        cJSON_AddNumberToObject(doc, "token_hit_rate", pct(t->hit_tokens, t->tokens) / 100);
        cJSON_AddNumberToObject(doc, "loaded_bytes", (double)t->loaded_bytes);
        cJSON_AddNumberToObject(doc, "saved_blocks", (double)t->saved_blocks);
        cJSON_AddNumberToObject(doc, "saved_bytes", (double)t->saved_bytes);
        cJSON_AddNumberToObject(doc, "load_calls", (double)t->load_calls);
        cJSON_AddNumberToObject(doc, "save_calls", (double)t->save_calls);
        cJSON_AddStringToObject(doc, "verify", verify_names[o->verify]);
        cJSON_AddNumberToObject(doc, "verified_bytes", (double)t->verified_bytes);
        cJSON_AddNumberToObject(doc, "wrong_blocks", (double)t->wrong_blocks);
        cJSON_AddNumberToObject(doc, "load_failures", (double)t->load_failures);
        cJSON_AddItemToObject(doc, "lookup", histo_json(&t->lookup));
        cJSON_AddItemToObject(doc, "load", histo_json(&t->load));
        cJSON_AddItemToObject(doc, "save", histo_json(&t->save));
        if (have_stats) {
            cJSON *s = cJSON_AddObjectToObject(doc, "store");
            cJSON_AddNumberToObject(s, "capacity_bytes", (double)st1->capacity_bytes);
            cJSON_AddNumberToObject(s, "objects", (double)st1->objects);
            cJSON_AddNumberToObject(s, "puts", (double)(st1->puts - st0->puts));
            cJSON_AddNumberToObject(s, "put_dups", (double)(st1->put_dups - st0->put_dups));
            cJSON_AddNumberToObject(s, "evictions", (double)(st1->evictions - st0->evictions));
        }
        cJSON_AddNumberToObject(doc, "seconds", wall);
        cJSON_AddBoolToObject(doc, "pass", ok);
        char *s = cJSON_PrintUnformatted(doc);
        cJSON_Delete(doc);
        if (!s) return -1;
        printf("%s\n", s);
        free(s);
        return 0;
    }
    char a[32], b[32], c[32];
    char shown[CLI_URL_MAX];
    printf("tide replay: %s against %s\n", o->path, cli_redact(store_url, shown, sizeof(shown)));
    printf("blocks    %" PRIu64 " tokens x %" PRIu64 " B = %s (%s), %" PRIu64
           " requests, %.2f s (%.1f requests/s)%s\n",
           o->blk.block_tokens, o->blk.bytes_per_token,
           size_format(o->blk.block_bytes, a, sizeof(a)),
           o->blk.model ? o->blk.model : "--bytes-per-token", t->requests, wall,
           wall > 0 ? (double)t->requests / wall : 0.0, o->speed > 0 ? "" : ", back to back");
    printf("hit rate  blocks %.2f%% (%" PRIu64 " of %" PRIu64 "; %zu distinct, so at most "
           "%.2f%%), tokens %.2f%% (%" PRIu64 " of %" PRIu64 ")\n",
           pct(t->hit_blocks, t->blocks), t->hit_blocks, t->blocks, tr->ndistinct,
           pct(t->blocks - tr->ndistinct, t->blocks), pct(t->hit_tokens, t->tokens), t->hit_tokens,
           t->tokens);
    printf("moved     loaded %s (%" PRIu64 " get calls), saved %s (%" PRIu64 " blocks, %" PRIu64
           " put calls)\n",
           size_format(t->loaded_bytes, a, sizeof(a)), t->load_calls,
           size_format(t->saved_bytes, b, sizeof(b)), t->saved_blocks, t->save_calls);
    histo_line("lookup", &t->lookup, "requests, tide_match_prefix");
    histo_line("load", &t->load, "requests with hits, tide_get_many");
    histo_line("save", &t->save, "requests with misses, tide_put_many");
    printf("verified  %s (%s), %" PRIu64 " wrong blocks, %" PRIu64 " blocks gone after lookup\n",
           size_format(t->verified_bytes, c, sizeof(c)), verify_names[o->verify], t->wrong_blocks,
           t->load_failures);
    if (have_stats)
        printf("store     %" PRIu64 " objects, %" PRIu64 " new puts, %" PRIu64
               " duplicate puts, %" PRIu64 " evictions, capacity %s\n",
               st1->objects, st1->puts - st0->puts, st1->put_dups - st0->put_dups,
               st1->evictions - st0->evictions, size_format(st1->capacity_bytes, a, sizeof(a)));
    printf("%s\n", ok ? "PASS" : "FAIL");
    return 0;
}

int cmd_replay(int argc, char **argv) {
    replay_opts o = {.capacity = 1ull << 30, .batch_bytes = 256ull << 20};
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc == 1 ? 0 : rc;

    trace tr;
    char err[512];
    rc = trace_load(o.path, o.blk.block_tokens, o.limit, &tr, err, sizeof(err));
    if (rc) {
        fprintf(stderr, "tide replay: %s%s%s\n", rc == TIDE_EPARSE ? o.path : "",
                rc == TIDE_EPARSE ? ": " : "", err);
        return rc == -ENOMEM ? 1 : 2;
    }

    /* The store: --url as given, with --capacity added to a mem:// URL. */
    char store_url[1024];
    const char *base = o.url ? o.url : "mem://";
    int is_mem = strncmp(base, "mem://", 6) == 0;
    if (is_mem && !url_has_option(base, "capacity"))
        snprintf(store_url, sizeof(store_url), "%s%scapacity=%" PRIu64, base,
                 strchr(base, '?') ? "&" : "?", o.capacity);
    else
        snprintf(store_url, sizeof(store_url), "%s", base);

    int exit_code = 1, wrong = 0;
    tide_store *s = NULL;
    work w = {0};
    replay_totals *t = calloc(1, sizeof(*t));
    size_t maxb = 1;
    for (size_t q = 0; q < tr.nreqs; q++)
        if (tr.reqs[q].nblocks > maxb) maxb = tr.reqs[q].nblocks;
    size_t bb = (size_t)o.blk.block_bytes;
    w.batch = (size_t)(o.batch_bytes / bb);
    if (w.batch == 0) w.batch = 1;
    if (w.batch > maxb) w.batch = maxb;
    if (w.batch > TIDE_BATCH_MAX) w.batch = TIDE_BATCH_MAX;
    w.keytext = malloc(maxb * KEY_MAX);
    w.keys = calloc(maxb, sizeof(*w.keys));
    w.seed = calloc(maxb, sizeof(*w.seed));
    w.buf = malloc(w.batch * bb);
    w.iov = calloc(w.batch, sizeof(*w.iov));
    w.results = calloc(w.batch, sizeof(*w.results));
    w.vlens = calloc(w.batch, sizeof(*w.vlens));
    if (!t || !w.keytext || !w.keys || !w.seed || !w.buf || !w.iov || !w.results || !w.vlens) {
        fprintf(stderr, "tide replay: out of memory (buffers for %zu blocks of %zu bytes)\n",
                w.batch, bb);
        goto out;
    }
    /* Touch the buffers now so that first-touch faults do not land in the first calls. */
    memset(w.buf, 0, w.batch * bb);
    for (size_t i = 0; i < w.batch; i++)
        w.iov[i] = (tide_iov){w.buf + i * bb, bb};
    histo_init(&t->lookup);
    histo_init(&t->load);
    histo_init(&t->save);

    rc = tide_open(store_url, &s);
    if (rc) {
        char shown[CLI_URL_MAX];
        fprintf(stderr, "tide replay: cannot open %s: %s\n",
                cli_redact(store_url, shown, sizeof(shown)), tide_errmsg(NULL));
        goto out;
    }
    tide_stats st0 = {0}, st1 = {0};
    int have_stats = tide_stats_get(s, &st0, sizeof(st0)) == 0;

    int show = !o.quiet && !o.json && cli_stderr_is_tty();
    uint64_t start = now_ns(), last_draw = 0;
    uint64_t ts0 = tr.nreqs ? tr.reqs[0].ts_ms : 0;
    int failed = 0;
    for (size_t q = 0; q < tr.nreqs && !failed; q++) {
        const trace_req *rq = &tr.reqs[q];
        if (o.speed > 0 && rq->ts_ms > ts0)
            sleep_until(start + (uint64_t)((double)(rq->ts_ms - ts0) * 1e6 / o.speed));
        failed = replay_one(s, &o, &tr, rq, &w, t, &wrong) != 0;
        uint64_t now = now_ns();
        if (show && now - last_draw > 100000000ull) {
            progress(t, tr.nreqs, (double)(now - start) / 1e9);
            last_draw = now;
        }
    }
    double wall = (double)(now_ns() - start) / 1e9;
    if (show) {
        progress(t, tr.nreqs, wall);
        fprintf(stderr, "\n");
    }
    if (have_stats) have_stats = tide_stats_get(s, &st1, sizeof(st1)) == 0;
    int ok = !failed && !wrong;
    if (report(&o, store_url, &tr, t, &st0, &st1, have_stats, wall, ok) < 0) {
        fprintf(stderr, "tide replay: out of memory\n");
        ok = 0;
    }
    exit_code = ok ? 0 : 1;
out:
    tide_close(s);
    free(w.keytext);
    free(w.keys);
    free(w.seed);
    free(w.buf);
    free(w.iov);
    free(w.results);
    free(w.vlens);
    free(t);
    trace_free(&tr);
    return exit_code;
}
