/*
 * demo_synthetic.c — `tide demo --synthetic`: a prefix-caching run with synthetic KV blocks,
 * end to end, through the store API alone (no engine, no connector). `tide demo` without
 * --synthetic runs the reference engine through the connector instead (cmd_demo.c).
 *
 * It plays the part of an inference engine with a paged KV cache in front of a tide store.
 * Prompts are a shared system prompt, then one of --docs documents, then a question
 * (--questions per document, then each document's first question asked again). Tokens are
 * generated deterministically from --seed. For every prompt the demo
 *
 *   1. hashes its full blocks with tide_prefix_hashes() (XXH3, chained) into keys
 *      "demo@<32 hex digits>";
 *   2. asks tide_match_prefix() for the longest stored prefix, and loads those blocks —
 *      all but the one holding the last token when the whole prompt hit, since an engine
 *      always computes at least one token — with one tide_get_many() straight into its
 *      paged KV cache: each block is a scatter list of --layers pieces, one per layer
 *      tensor, at a page the request's block table picked;
 *   3. checks every loaded byte against what the block must hold;
 *   4. "computes" the blocks that missed (writes their bytes into fresh pages) and saves
 *      the full ones with one tide_put_many() from the same scatter lists.
 *
 * A block's bytes are a function of its key: 64-bit words prng_mix(xxh3-64(key) + i) for
 * word index i, laid out across the layer pieces in order. So a wrong, stale or misplaced
 * block is caught by the byte check, whichever request wrote it.
 *
 * The demo also keeps its own set of the keys it saved. While the store has evicted
 * nothing, the matched prefix must be exactly the one that set predicts; a store that
 * loses or invents blocks fails the run. Any wrong byte fails it too (exit 1).
 *
 * --inject-corruption is a test hook: the first request saves its first block with one
 * byte flipped, as a faulty writer would, so the next request that loads it must FAIL.
 */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "cli/cli.h"
#include "common/prng.h"
#include "common/util.h"
#include "tide.h"

#define VOCAB 128256u /* token ids are drawn below this, like Llama 3's vocabulary */
#define KEY_PREFIX "demo@"
#define KEY_LEN (sizeof(KEY_PREFIX) - 1 + 32)

typedef struct demo_opts {
    const char *url;
    uint64_t docs, questions, prefix_tokens, system_tokens, block_tokens, bytes_per_token;
    uint64_t layers, seed;
    int quiet, inject;
} demo_opts;

/* The set of block hashes the demo has saved: open addressing over 16-byte hashes. */
typedef struct key_set {
    uint8_t *slots; /* cap x 16 bytes; an all-zero slot is empty */
    size_t cap, n;
} key_set;

typedef struct demo_totals {
    uint64_t requests, tokens, blocks, matched_blocks, loaded_blocks, loaded_tokens;
    uint64_t load_bytes, load_ns, saved_blocks, save_bytes, save_ns;
    uint64_t wrong_blocks, load_errors, unexpected, verified_bytes;
} demo_totals;

/* Deterministic token streams: stream (a, b, c) under the seed gives token i. */
static void gen_tokens(uint32_t *out, size_t n, uint64_t seed, uint64_t a, uint64_t b, uint64_t c) {
    uint64_t base = prng_mix(prng_mix(prng_mix(seed ^ a) ^ b) ^ c);
    for (size_t i = 0; i < n; i++)
        out[i] = (uint32_t)(prng_mix(base + i) % VOCAB);
}

/* The byte at value offset `off` of the block whose key hash is kh. */
static uint8_t block_byte(uint64_t kh, uint64_t off) {
    return (uint8_t)(prng_mix(kh + off / 8) >> (8 * (off % 8)));
}

/* Write or check n bytes of a block's value starting at value offset off. Whole words go
 * eight bytes at a time; a piece that starts or ends inside a word goes byte by byte. */
static void block_fill(uint64_t kh, uint64_t off, uint8_t *p, size_t n) {
    size_t i = 0;
    for (; i < n && (off + i) % 8; i++)
        p[i] = block_byte(kh, off + i);
    for (; i + 8 <= n; i += 8) {
        uint64_t w = prng_mix(kh + (off + i) / 8);
        memcpy(p + i, &w, 8); /* little-endian hosts: byte j of w is byte off+i+j */
    }
    for (; i < n; i++)
        p[i] = block_byte(kh, off + i);
}

/* Offset within the piece of the first wrong byte, or -1. */
static long block_check(uint64_t kh, uint64_t off, const uint8_t *p, size_t n) {
    size_t i = 0;
    for (; i < n && (off + i) % 8; i++)
        if (p[i] != block_byte(kh, off + i)) return (long)i;
    for (; i + 8 <= n; i += 8) {
        uint64_t w = prng_mix(kh + (off + i) / 8), got;
        memcpy(&got, p + i, 8);
        if (got != w) break;
    }
    for (; i < n; i++)
        if (p[i] != block_byte(kh, off + i)) return (long)i;
    return -1;
}

static int set_init(key_set *s, size_t max_keys) {
    s->cap = 16;
    while (s->cap < max_keys * 2)
        s->cap *= 2;
    s->n = 0;
    s->slots = calloc(s->cap, TIDE_HASH_BYTES);
    return s->slots ? 0 : -1;
}

static uint8_t *set_slot(const key_set *s, const uint8_t *h) {
    static const uint8_t zero[TIDE_HASH_BYTES];
    uint64_t x;
    memcpy(&x, h, 8);
    /* The table is at most half full (set_init), so the probe ends within cap steps. */
    for (size_t i = 0, at = x & (s->cap - 1); i < s->cap; i++, at = (at + 1) & (s->cap - 1)) {
        uint8_t *slot = s->slots + at * TIDE_HASH_BYTES;
        if (memcmp(slot, h, TIDE_HASH_BYTES) == 0 || memcmp(slot, zero, TIDE_HASH_BYTES) == 0)
            return slot;
    }
    return NULL;
}

static int set_has(const key_set *s, const uint8_t *h) {
    uint8_t *slot = set_slot(s, h);
    return slot && memcmp(slot, h, TIDE_HASH_BYTES) == 0;
}

static void set_add(key_set *s, const uint8_t *h) {
    uint8_t *slot = set_slot(s, h);
    if (!slot || memcmp(slot, h, TIDE_HASH_BYTES) == 0) return;
    memcpy(slot, h, TIDE_HASH_BYTES);
    s->n++;
}

static void usage(FILE *f) {
    fprintf(f, "usage: tide demo --synthetic [OPTIONS]\n"
               "\n"
               "Prefix caching end to end with synthetic KV blocks: prompts made of a shared\n"
               "system prompt, a document and a question are hashed into chained block keys;\n"
               "each prompt loads its longest stored prefix from the store into a paged KV cache\n"
               "(one batch get into scatter lists), checks every byte, and saves the blocks it\n"
               "had to compute (one batch put). Prints a line per request and a summary: hit\n"
               "rates, bytes moved, GB/s (10^9 bytes), PASS or FAIL.\n"
               "\n"
               "Options:\n"
               "  --url URL             store (default mem://)\n"
               "  --docs N              documents (default 4)\n"
               "  --questions N         questions per document (default 4); each document's\n"
               "                        first question is asked once more at the end\n"
               "  --prefix-tokens N     tokens in each document (default 2048)\n"
               "  --system-tokens N     tokens in the system prompt every prompt starts with\n"
               "                        (default 256; 0 for none)\n"
               "  --block-tokens N      tokens per KV block (default 16)\n"
               "  --bytes-per-token N   KV bytes per token over all layers (default 32768, as\n"
               "                        Llama-3.2-1B: 16 layers x 8 KV heads x 64 x K,V x fp16)\n"
               "  --layers N            layer tensors a block is scattered over (default 4)\n"
               "  --seed N              token seed (default 1)\n"
               "  --quiet               only the summary\n"
               "  --inject-corruption   test hook: save one block with a flipped byte (must FAIL)\n"
               "\n"
               "Exit status: 0 PASS, 1 FAIL (a wrong byte, a store error, or a prefix the store\n"
               "lost or invented while nothing was evicted), 2 bad arguments.\n");
}

static int parse_args(int argc, char **argv, demo_opts *o) {
    static const struct {
        const char *name;
        size_t field;
        uint64_t min, max;
    } nums[] = {
        {"--docs", offsetof(demo_opts, docs), 1, 1000},
        {"--questions", offsetof(demo_opts, questions), 1, 1000},
        {"--prefix-tokens", offsetof(demo_opts, prefix_tokens), 1, 1000000},
        {"--system-tokens", offsetof(demo_opts, system_tokens), 0, 1000000},
        {"--block-tokens", offsetof(demo_opts, block_tokens), 1, 4096},
        {"--bytes-per-token", offsetof(demo_opts, bytes_per_token), 1, 16u << 20},
        {"--layers", offsetof(demo_opts, layers), 1, 1024},
        {"--seed", offsetof(demo_opts, seed), 0, UINT64_MAX},
    };
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int m = 0;
        if (cli_is_help(argv[i])) {
            usage(stdout);
            return 1;
        }
        if (strcmp(argv[i], "--quiet") == 0) {
            o->quiet = 1;
            continue;
        }
        if (strcmp(argv[i], "--inject-corruption") == 0) {
            o->inject = 1;
            continue;
        }
        if ((m = cli_opt_value(argc, argv, &i, "--url", &v))) {
            if (m < 0) return cli_usage_error("demo", "--url needs a value");
            o->url = v;
            continue;
        }
        size_t k = 0;
        for (; k < sizeof(nums) / sizeof(nums[0]); k++)
            if ((m = cli_opt_value(argc, argv, &i, nums[k].name, &v))) break;
        if (k == sizeof(nums) / sizeof(nums[0]))
            return cli_usage_error("demo", "unknown argument '%s'", argv[i]);
        uint64_t *field = (uint64_t *)((char *)o + nums[k].field);
        if (m < 0 || cli_parse_u64(v, nums[k].min, nums[k].max, field))
            return cli_usage_error("demo",
                                   "%s wants a number from %" PRIu64 " to %" PRIu64 " (got '%s')",
                                   nums[k].name, nums[k].min, nums[k].max, m < 0 ? "" : v);
    }
    uint64_t block_bytes = o->block_tokens * o->bytes_per_token;
    if (block_bytes > (64u << 20))
        return cli_usage_error("demo",
                               "a block of --block-tokens x --bytes-per-token is %" PRIu64
                               " bytes; at most 64MiB",
                               block_bytes);
    if (block_bytes % o->layers)
        return cli_usage_error("demo",
                               "a block (%" PRIu64 " bytes) does not split into "
                               "--layers %" PRIu64 " equal pieces",
                               block_bytes, o->layers);
    if (o->system_tokens + o->prefix_tokens > 2000000)
        return cli_usage_error("demo", "--system-tokens + --prefix-tokens is at most 2000000");
    return 0;
}

/* The engine side: a paged KV cache of `layers` tensors, `npages` pages each. */
typedef struct kv_cache {
    uint8_t **layer; /* layer[l] holds npages pages of piece bytes */
    size_t npages, piece;
    size_t *table; /* block table of the current request: block i -> page */
} kv_cache;

static uint8_t *page_piece(const kv_cache *kv, size_t l, size_t block) {
    return kv->layer[l] + kv->table[block] * kv->piece;
}

/* A fresh block table: a random permutation of the pages, so that a request's blocks sit
 * at scattered pages as they do in an engine that has been running a while. */
static void kv_shuffle(kv_cache *kv, uint64_t *rng) {
    for (size_t i = 0; i < kv->npages; i++)
        kv->table[i] = i;
    for (size_t i = kv->npages - 1; i > 0; i--) {
        *rng = prng_mix(*rng);
        size_t j = (size_t)(*rng % (i + 1));
        size_t t = kv->table[i];
        kv->table[i] = kv->table[j];
        kv->table[j] = t;
    }
}

typedef struct request {
    uint64_t doc, question;
    uint32_t *tokens;
    size_t ntokens;
} request;

/* The per-request work buffers, sized for the longest prompt. */
typedef struct work {
    uint8_t *hashes;
    char *keytext;
    tide_key *keys;
    uint64_t *khash; /* xxh3-64 of each key: the seed of its bytes */
    tide_iov *iov;
    size_t *iovcnt; /* layers, for every key */
    int *results;
    size_t *vlens;
} work;

static void set_iov(const demo_opts *o, const kv_cache *kv, work *w, size_t first, size_t n) {
    for (size_t i = 0; i < n; i++)
        for (size_t l = 0; l < o->layers; l++) {
            w->iov[i * o->layers + l].base = page_piece(kv, l, first + i);
            w->iov[i * o->layers + l].len = kv->piece;
        }
}

/* Serve one prompt. Returns 0, or -1 on a store error that ends the run. */
static int serve(tide_store *s, const demo_opts *o, kv_cache *kv, work *w, key_set *saved,
                 const request *rq, int check, demo_totals *t, uint64_t *rng) {
    size_t bt = (size_t)o->block_tokens, L = (size_t)o->layers;
    uint64_t block_bytes = o->block_tokens * o->bytes_per_token;
    int nb = tide_prefix_hashes(TIDE_HASH_XXH3, rq->tokens, rq->ntokens, bt, NULL, 0, w->hashes,
                                kv->npages);
    if (nb < 0) {
        fprintf(stderr, "tide demo: hashing failed: %s\n", tide_strerror(nb));
        return -1;
    }
    for (int i = 0; i < nb; i++) {
        char *k = w->keytext + (size_t)i * KEY_LEN;
        char hex[33];
        tide_hash_hex(w->hashes + (size_t)i * TIDE_HASH_BYTES, hex);
        memcpy(k, KEY_PREFIX, sizeof(KEY_PREFIX) - 1);
        memcpy(k + sizeof(KEY_PREFIX) - 1, hex, 32);
        w->keys[i].data = k;
        w->keys[i].len = KEY_LEN;
        w->khash[i] = XXH3_64bits(k, KEY_LEN);
    }

    /* 1. Longest stored prefix, and what the demo's own record says it should be. */
    int hit = tide_match_prefix(s, w->keys, (size_t)nb);
    if (hit < 0) {
        fprintf(stderr, "tide demo: match_prefix failed: %s\n", tide_errmsg(s));
        return -1;
    }
    int expect = 0;
    while (expect < nb && set_has(saved, w->hashes + (size_t)expect * TIDE_HASH_BYTES))
        expect++;
    /* check: 2 = the match must equal the record, 1 = it may be shorter (the store has
     * evicted), 0 = anything goes (the store held objects before the run started). */
    int mismatch = check == 2 ? hit != expect : check == 1 ? hit > expect : 0;
    if (mismatch) t->unexpected++;
    /* Leave the last token to compute: a fully cached prompt still needs its logits. */
    size_t load = (size_t)hit;
    if (load * bt >= rq->ntokens) load = (rq->ntokens - 1) / bt;

    /* 2. Load the hit blocks into pages from a fresh block table, in one call. */
    kv_shuffle(kv, rng);
    uint64_t ns = 0, loaded = 0, wrong = 0, failed = 0;
    if (load) {
        set_iov(o, kv, w, 0, load);
        for (size_t i = 0; i < load; i++) {
            /* Poison the pages so that bytes a get did not write cannot pass the check. */
            for (size_t l = 0; l < L; l++)
                memset(page_piece(kv, l, i), 0xEE, kv->piece);
        }
        uint64_t t0 = now_ns();
        int rc = tide_get_many(s, w->keys, load, w->iov, w->iovcnt, w->results, w->vlens);
        ns = now_ns() - t0;
        if (rc < 0) {
            fprintf(stderr, "tide demo: get_many failed: %s\n", tide_errmsg(s));
            return -1;
        }
        /* 3. Check every byte of every block that arrived. A block that did not arrive
         * (evicted since the match) is a load error: the engine recomputes from there. */
        for (size_t i = 0; i < load; i++) {
            if (w->results[i] != 0 || w->vlens[i] != block_bytes) {
                if (w->results[i] == 0 || w->results[i] == TIDE_ENOTFOUND) {
                    failed++;
                } else {
                    fprintf(stderr, "tide demo: block %zu: %s\n", i, tide_strerror(w->results[i]));
                    return -1;
                }
                continue;
            }
            loaded += block_bytes;
            for (size_t l = 0; l < L; l++) {
                long bad = block_check(w->khash[i], l * kv->piece, page_piece(kv, l, i), kv->piece);
                if (bad >= 0) {
                    if (!wrong)
                        fprintf(stderr,
                                "tide demo: WRONG BYTES: request %" PRIu64
                                " block %zu (%.*s), layer %zu, byte %ld\n",
                                t->requests, i, (int)KEY_LEN, (const char *)w->keys[i].data, l,
                                bad);
                    wrong++;
                    break;
                }
            }
        }
        t->verified_bytes += loaded;
    }
    /* A block that matched but did not load is only excusable when the store evicts. */
    if (failed && check == 2) t->unexpected++;
    /* The usable prefix ends at the first block that failed to load. */
    size_t good = 0;
    while (good < load && w->results[good] == 0 && w->vlens[good] == block_bytes)
        good++;

    /* 4. Compute the rest (full blocks only are saved) and save what the store lacks. */
    size_t first_save = (size_t)hit > good ? (size_t)hit : good;
    size_t nsave = (size_t)nb > first_save ? (size_t)nb - first_save : 0;
    /* Blocks good..hit were computed but are already stored; only [first_save, nb) go. */
    uint64_t save_ns = 0;
    if (nsave) {
        for (size_t i = first_save; i < (size_t)nb; i++)
            for (size_t l = 0; l < L; l++)
                block_fill(w->khash[i], l * kv->piece, page_piece(kv, l, i), kv->piece);
        if (o->inject && t->requests == 0 && first_save == 0)
            page_piece(kv, L / 2, 0)[kv->piece / 3] ^= 0x01; /* the test hook's faulty write */
        set_iov(o, kv, w, first_save, nsave);
        uint64_t t0 = now_ns();
        int rc = tide_put_many(s, w->keys + first_save, nsave, w->iov, w->iovcnt, w->results);
        save_ns = now_ns() - t0;
        if (rc < 0) {
            fprintf(stderr, "tide demo: put_many failed: %s\n", tide_errmsg(s));
            return -1;
        }
        for (size_t i = 0; i < nsave; i++) {
            if (w->results[i] != 0) {
                fprintf(stderr, "tide demo: saving block %zu: %s (%s)\n", first_save + i,
                        tide_strerror(w->results[i]), tide_errmsg(s));
                return -1;
            }
        }
    }
    for (int i = 0; i < nb; i++)
        set_add(saved, w->hashes + (size_t)i * TIDE_HASH_BYTES);

    t->tokens += rq->ntokens;
    t->blocks += (uint64_t)nb;
    t->matched_blocks += (uint64_t)hit;
    t->loaded_blocks += good;
    t->loaded_tokens += good * bt;
    t->load_bytes += loaded;
    t->load_ns += ns;
    t->saved_blocks += nsave;
    t->save_bytes += nsave * block_bytes;
    t->save_ns += save_ns;
    t->wrong_blocks += wrong;
    t->load_errors += failed;
    if (!o->quiet) {
        char sz[32], ld[64] = "";
        if (loaded)
            snprintf(ld, sizeof(ld), ": %s in %.2f ms, %.2f GB/s",
                     size_format(loaded, sz, sizeof(sz)), (double)ns / 1e6,
                     (double)loaded / (double)ns);
        printf("req %3" PRIu64 " doc %" PRIu64 " q %" PRIu64 ": %5zu tokens, %4d blocks | match %4d"
               " | load %4zu (%5.1f%% of tokens)%s | save %4zu%s%s\n",
               t->requests, rq->doc, rq->question, rq->ntokens, nb, hit, good,
               100.0 * (double)(good * bt) / (double)rq->ntokens, ld, nsave,
               mismatch ? "  UNEXPECTED MATCH" : "",
               wrong    ? "  WRONG BYTES"
               : failed ? "  (load errors: recomputed)"
                        : "");
        if (mismatch) printf("    the blocks this run saved give a match of %d\n", expect);
    }
    t->requests++;
    return 0;
}

int cmd_demo_synthetic(int argc, char **argv) {
    demo_opts o = {.url = "mem://",
                   .docs = 4,
                   .questions = 4,
                   .prefix_tokens = 2048,
                   .system_tokens = 256,
                   .block_tokens = 16,
                   .bytes_per_token = 32768,
                   .layers = 4,
                   .seed = 1};
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc == 1 ? 0 : rc;

    int exit_code = 1;
    tide_store *s = NULL;
    kv_cache kv = {0};
    work w = {0};
    key_set saved = {0};
    request rq = {0};
    demo_totals t = {0};
    const size_t qmax = 255, qmin = 48; /* question lengths in tokens */
    size_t maxtok = (size_t)(o.system_tokens + o.prefix_tokens) + qmax;
    size_t maxblocks = maxtok / o.block_tokens;
    size_t L = (size_t)o.layers;
    uint64_t block_bytes = o.block_tokens * o.bytes_per_token;
    uint64_t nreq = o.docs * (o.questions + 1);

    char shown[CLI_URL_MAX]; /* the URL as printed: no token */
    cli_redact(o.url, shown, sizeof(shown));
    rc = tide_open(o.url, &s);
    if (rc) {
        fprintf(stderr, "tide demo: cannot open %s: %s\n", shown, tide_errmsg(NULL));
        return 1;
    }
    /* The prefix check needs to know everything the store holds: a fresh store. */
    tide_stats st0, st1;
    int fresh = tide_stats_get(s, &st0, sizeof(st0)) == 0 && st0.objects == 0 && st0.evictions == 0;

    kv.npages = maxblocks ? maxblocks : 1;
    kv.piece = (size_t)(block_bytes / L);
    kv.layer = calloc(L, sizeof(*kv.layer));
    kv.table = calloc(kv.npages, sizeof(*kv.table));
    rq.tokens = malloc(maxtok * sizeof(uint32_t));
    w.hashes = malloc(kv.npages * TIDE_HASH_BYTES);
    w.keytext = malloc(kv.npages * KEY_LEN);
    w.keys = calloc(kv.npages, sizeof(*w.keys));
    w.khash = calloc(kv.npages, sizeof(*w.khash));
    w.iov = calloc(kv.npages * L, sizeof(*w.iov));
    w.iovcnt = calloc(kv.npages, sizeof(*w.iovcnt));
    w.results = calloc(kv.npages, sizeof(*w.results));
    w.vlens = calloc(kv.npages, sizeof(*w.vlens));
    if (!kv.layer || !kv.table || !rq.tokens || !w.hashes || !w.keytext || !w.keys || !w.khash ||
        !w.iov || !w.iovcnt || !w.results || !w.vlens || set_init(&saved, (size_t)nreq * kv.npages))
        goto oom;
    for (size_t i = 0; i < kv.npages; i++)
        w.iovcnt[i] = L;
    /* The engine's KV cache is resident memory: touch it now, not during the first load. */
    for (size_t l = 0; l < L; l++) {
        kv.layer[l] = malloc(kv.npages * kv.piece);
        if (!kv.layer[l]) goto oom;
        memset(kv.layer[l], 0, kv.npages * kv.piece);
    }
    char sz1[32], sz2[32];
    printf("tide demo: %s, %" PRIu64 " docs x %" PRIu64 " questions (+1 repeat each), "
           "system %" PRIu64 " + document %" PRIu64
           " + question %zu..%zu tokens, blocks of %" PRIu64 " tokens x %" PRIu64
           " B = %s in %" PRIu64 " pieces, KV cache %s\n",
           shown, o.docs, o.questions, o.system_tokens, o.prefix_tokens, qmin, qmax, o.block_tokens,
           o.bytes_per_token, size_format(block_bytes, sz1, sizeof(sz1)), o.layers,
           size_format(kv.npages * block_bytes, sz2, sizeof(sz2)));

    uint64_t rng = prng_mix(o.seed ^ 0xD1B54A32D192ED03ull);
    uint64_t t0 = now_ns();
    /* Round r asks question r of every document; the last round repeats question 0. */
    for (uint64_t r = 0; r <= o.questions; r++) {
        for (uint64_t d = 0; d < o.docs; d++) {
            uint64_t q = r < o.questions ? r : 0;
            size_t qlen = qmin + (size_t)(prng_mix(o.seed ^ (d << 20) ^ q) % (qmax - qmin + 1));
            size_t n = 0;
            gen_tokens(rq.tokens, (size_t)o.system_tokens, o.seed, 'S', 0, 0);
            n += (size_t)o.system_tokens;
            gen_tokens(rq.tokens + n, (size_t)o.prefix_tokens, o.seed, 'D', d, 0);
            n += (size_t)o.prefix_tokens;
            gen_tokens(rq.tokens + n, qlen, o.seed, 'Q', d, q);
            n += qlen;
            rq.ntokens = n;
            rq.doc = d;
            rq.question = q;
            tide_stats cur;
            int check = 0;
            if (fresh && tide_stats_get(s, &cur, sizeof(cur)) == 0) check = cur.evictions ? 1 : 2;
            if (serve(s, &o, &kv, &w, &saved, &rq, check, &t, &rng)) goto out;
        }
    }
    double wall = (double)(now_ns() - t0) / 1e9;

    int have_stats = tide_stats_get(s, &st1, sizeof(st1)) == 0;
    char a[32], b[32], c[32];
    printf("\nrequests %" PRIu64 " in %.2f s, prompt tokens %" PRIu64 ", full blocks %" PRIu64 "\n",
           t.requests, wall, t.tokens, t.blocks);
    printf("hit rate  tokens %.1f%% (%" PRIu64 " loaded of %" PRIu64 "), blocks %.1f%% (%" PRIu64
           " matched of %" PRIu64 ", %" PRIu64 " loaded)\n",
           t.tokens ? 100.0 * (double)t.loaded_tokens / (double)t.tokens : 0.0, t.loaded_tokens,
           t.tokens, t.blocks ? 100.0 * (double)t.matched_blocks / (double)t.blocks : 0.0,
           t.matched_blocks, t.blocks, t.loaded_blocks);
    printf("loaded    %s in %.1f ms: %.2f GB/s (tide_get_many into %" PRIu64
           " scatter pieces a block)\n",
           size_format(t.load_bytes, a, sizeof(a)), (double)t.load_ns / 1e6,
           t.load_ns ? (double)t.load_bytes / (double)t.load_ns : 0.0, o.layers);
    printf("saved     %s in %.1f ms: %.2f GB/s (%" PRIu64 " blocks, tide_put_many)\n",
           size_format(t.save_bytes, b, sizeof(b)), (double)t.save_ns / 1e6,
           t.save_ns ? (double)t.save_bytes / (double)t.save_ns : 0.0, t.saved_blocks);
    printf("verified  %s byte for byte: %" PRIu64 " wrong blocks, %" PRIu64 " load errors, %" PRIu64
           " unexpected prefix matches\n",
           size_format(t.verified_bytes, c, sizeof(c)), t.wrong_blocks, t.load_errors,
           t.unexpected);
    if (have_stats)
        printf("store     %" PRIu64 " objects, %s used, %" PRIu64 " evictions, %.1f metadata "
               "bytes an object\n",
               st1.objects, size_format(st1.used_bytes, a, sizeof(a)), st1.evictions,
               st1.objects ? (double)st1.meta_bytes / (double)st1.objects : 0.0);
    int ok = t.wrong_blocks == 0 && t.unexpected == 0;
    printf("%s\n", ok ? "PASS" : "FAIL");
    exit_code = ok ? 0 : 1;
    goto out;
oom:
    fprintf(stderr, "tide demo: out of memory\n");
out:
    if (kv.layer)
        for (size_t l = 0; l < L; l++)
            free(kv.layer[l]);
    free(kv.layer);
    free(kv.table);
    free(rq.tokens);
    free(w.hashes);
    free(w.keytext);
    free(w.keys);
    free(w.khash);
    free(w.iov);
    free(w.iovcnt);
    free(w.results);
    free(w.vlens);
    free(saved.slots);
    tide_close(s);
    return exit_code;
}
