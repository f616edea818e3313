/*
 * lookup.c — how many prompt tokens the store can supply.
 *
 * A lookup builds every candidate key at once — for each group, each candidate object
 * (attention: each block up to the bound; Mamba: each snapshot at a scheduler-block
 * boundary up to the bound) in each lookup namespace (every TP shard, PCP rank, DCP rank
 * and PP stage that a load will read) — asks the store about all of them in one batched
 * existence query, folds the answers into "present in every namespace", and runs the hit
 * search over that map.
 *
 * The hit search is the hybrid rule: full attention wants its contiguous prefix; a
 * sliding-window group wants only the window's blocks before the boundary; a Mamba group
 * wants its snapshot exactly at the boundary. Each group answers with the longest boundary
 * it can resume at, no further than the current bound; the bound becomes the minimum and
 * the groups are asked again until nobody lowers it. Every answer is a multiple of the
 * scheduler block size, so a fixed point is reached in at most bound / block + 1 rounds.
 * A hit that would cover the whole prompt is searched again below the last token, which
 * must always be computed (its logits sample the first output token).
 *
 * Partial hits (cfg->partial_hits: an align-mode Mamba group whose block is larger than the
 * hash block, as vLLM's partial_hash_hits_enabled): boundaries are multiples of the hash
 * block instead. A full-attention group then also accepts, after its whole blocks, the
 * longest boundary inside the next block whose object is there (only a partial-tail
 * offload stores those, keyed by the boundary's sub-hash), and a Mamba group looks for a
 * snapshot at every hash-block boundary (the partial tail's boundary state among them).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "connector/connector.h"

int64_t connector_window_blocks(const connector_group *g) {
    int64_t w = g->sliding_window, b = g->eff_block_size;
    if (w <= 1) return 0;
    return (w - 1 + b - 1) / b;
}

/* The granularity of hits: the scheduler block, or the hash block with partial hits. */
int64_t connector_hit_unit(const ccfg *cfg) {
    return cfg->partial_hits ? cfg->hash_block_size : cfg->scheduler_block_size;
}

/* The spacing of group g's candidate objects: a Mamba group's snapshots sit at every hit
 * boundary; an attention group has one object per block, and with partial hits one per
 * hash block (the block ends, and the boundaries inside a block that a partial tail may
 * have stored, keyed by their sub-hash). */
static int64_t candidate_unit(const ccfg *cfg, size_t g) {
    const connector_group *gr = &cfg->groups[g];
    if (gr->kind == CONNECTOR_SPEC_MAMBA || cfg->partial_hits) return connector_hit_unit(cfg);
    return gr->eff_block_size;
}

/* Candidate objects of group g for a bound of `bound` tokens. */
static size_t candidates(const ccfg *cfg, size_t g, int64_t bound) {
    return (size_t)(bound / candidate_unit(cfg, g));
}

/* The token position candidate i of group g ends at. */
static int64_t candidate_end(const ccfg *cfg, size_t g, size_t i) {
    return (int64_t)(i + 1) * candidate_unit(cfg, g);
}

/* Is the object of group g ending at token `end` present? */
static int present_end(const ccfg *cfg, const connector_presence *p, size_t g, int64_t end) {
    int64_t u = candidate_unit(cfg, g);
    if (end <= 0 || end % u) return 0;
    size_t i = (size_t)(end / u - 1);
    return i < p->n[g] && p->present[g][i];
}

/* The longest hit boundary <= bound group g resumes at. */
static int64_t group_hit(const ccfg *cfg, const connector_presence *p, size_t g, int64_t bound) {
    const connector_group *gr = &cfg->groups[g];
    int64_t a = connector_hit_unit(cfg), b = gr->eff_block_size;
    if (gr->kind == CONNECTOR_SPEC_MAMBA) {
        /* Right to left: the first boundary with a snapshot exactly there. */
        for (int64_t end = bound; end > 0; end -= a)
            if (present_end(cfg, p, g, end)) return end;
        return 0;
    }
    if (gr->kind == CONNECTOR_SPEC_SLIDING) {
        int64_t need = connector_window_blocks(gr);
        for (int64_t end = bound; end > 0; end -= a) {
            int64_t last = end / b, first = last - need < 0 ? 0 : last - need, i = first;
            while (i < last && present_end(cfg, p, g, (i + 1) * b))
                i++;
            if (i == last) return end;
        }
        return 0;
    }
    /* Full attention (and MLA): the contiguous prefix of whole blocks, cut to the bound. */
    int64_t k = 0;
    while ((k + 1) * b <= bound && present_end(cfg, p, g, (k + 1) * b))
        k++;
    int64_t hit = k * b;
    if (cfg->partial_hits) {
        /* Then the first block that is not there whole: its boundaries inside, longest
         * first, each an object only a partial tail stores (keyed by the sub-hash). */
        int64_t h = cfg->hash_block_size;
        for (int64_t end = k * b + b - h; end > k * b; end -= h)
            if (end <= bound && present_end(cfg, p, g, end)) return end;
        return hit;
    }
    return hit / a * a;
}

int64_t connector_hit_search(const ccfg *cfg, const connector_presence *p, int64_t bound) {
    int64_t a = connector_hit_unit(cfg);
    bound = bound < 0 ? 0 : bound / a * a;
    /* Each round either keeps the bound (done) or lowers it by at least one unit. */
    for (int64_t round = 0; round <= bound / a + 1; round++) {
        int64_t next = bound;
        for (size_t g = 0; g < cfg->ngroups && next > 0; g++) {
            int64_t h = group_hit(cfg, p, g, next);
            if (h < next) next = h;
        }
        if (next == bound) break;
        bound = next;
    }
    return bound;
}

int64_t connector_lookup_bound(const ccfg *cfg, int64_t num_tokens, size_t nhashes) {
    int64_t a = connector_hit_unit(cfg);
    int64_t covered = (int64_t)nhashes * cfg->hash_block_size;
    int64_t n = num_tokens < covered ? num_tokens : covered;
    return n <= 0 ? 0 : n / a * a;
}

int connector_own_key(const tide_connector *c, int group, const uint8_t *hash, size_t hash_len,
                      char *buf) {
    connector_ns ns = connector_own_ns(&c->cfg, (size_t)group);
    return connector_key(&c->cfg, (size_t)group, &ns, hash, hash_len, buf, TIDE_KEY_MAX + 1);
}

/* Every lookup key, one allocation: keys[] point into text. */
typedef struct keyset {
    tide_key *keys;
    char *text;
    size_t n;
    size_t nns[CONNECTOR_MAX_GROUPS];
} keyset;

static void keyset_free(keyset *k) {
    free(k->keys);
    free(k->text);
}

static int build_keys(tide_connector *c, int64_t bound, const uint8_t *hashes, size_t hash_len,
                      keyset *ks) {
    const ccfg *cfg = &c->cfg;
    memset(ks, 0, sizeof(*ks));
    size_t total = 0, bytes = 0;
    connector_ns *ns[CONNECTOR_MAX_GROUPS] = {0};
    int rc = 0;
    for (size_t g = 0; g < cfg->ngroups; g++) {
        size_t nns = connector_lookup_namespaces(cfg, g, NULL, 0);
        ns[g] = calloc(nns ? nns : 1, sizeof(connector_ns));
        if (!ns[g]) {
            rc = connector_err(c, -ENOMEM, "lookup: out of memory");
            goto out;
        }
        connector_lookup_namespaces(cfg, g, ns[g], nns);
        ks->nns[g] = nns;
        size_t cand = candidates(cfg, g, bound);
        total += cand * nns;
        bytes += cand * nns * (TIDE_KEY_MAX + 1);
    }
    ks->keys = calloc(total ? total : 1, sizeof(tide_key));
    ks->text = malloc(bytes ? bytes : 1);
    if (!ks->keys || !ks->text) {
        rc = connector_err(c, -ENOMEM, "lookup: out of memory for %zu keys", total);
        goto out;
    }
    char *at = ks->text;
    for (size_t g = 0; g < cfg->ngroups; g++) {
        size_t cand = candidates(cfg, g, bound);
        for (size_t i = 0; i < cand; i++) {
            int64_t end = candidate_end(cfg, g, i);
            const uint8_t *h = hashes + (size_t)(end / cfg->hash_block_size - 1) * hash_len;
            for (size_t s = 0; s < ks->nns[g]; s++) {
                int len = connector_key(cfg, g, &ns[g][s], h, hash_len, at, TIDE_KEY_MAX + 1);
                if (len < 0) {
                    rc = connector_err(c, len, "lookup: group %zu: key longer than %d bytes", g,
                                       TIDE_KEY_MAX);
                    goto out;
                }
                ks->keys[ks->n].data = at;
                ks->keys[ks->n].len = (size_t)len;
                ks->n++;
                at += len;
            }
        }
    }
out:
    for (size_t g = 0; g < cfg->ngroups; g++)
        free(ns[g]);
    if (rc) keyset_free(ks);
    return rc;
}

int connector_hit_tokens(tide_connector *c, int64_t num_tokens, const uint8_t *hashes,
                         size_t nhashes, size_t hash_len, int64_t *hit) {
    const ccfg *cfg = &c->cfg;
    *hit = 0;
    if (connector_capacity_only(cfg) || !cfg->extra.enable_lookup) return 0;
    int64_t bound = connector_lookup_bound(cfg, num_tokens, nhashes);
    if (bound <= 0) return 0;
    keyset ks;
    int rc = build_keys(c, bound, hashes, hash_len, &ks);
    if (rc) return rc;
    uint8_t *present = calloc(ks.n ? ks.n : 1, 1);
    connector_presence p;
    memset(&p, 0, sizeof(p));
    if (!present) {
        rc = connector_err(c, -ENOMEM, "lookup: out of memory");
        goto out;
    }
    /* One batched existence query (cut only at the store's batch limit). */
    uint64_t t0 = now_ns();
    for (size_t off = 0; off < ks.n; off += TIDE_BATCH_MAX) {
        size_t n = ks.n - off < TIDE_BATCH_MAX ? ks.n - off : TIDE_BATCH_MAX;
        int r = tide_exists_many(c->store, ks.keys + off, n, present + off);
        if (r < 0) {
            connector_count_op(c, &c->stats.lookup_exists, ks.n, 0, ks.n, 1, now_ns() - t0);
            rc = connector_err(c, r, "lookup: existence query of %zu keys failed: %s", ks.n,
                               tide_errmsg(c->store));
            goto out;
        }
    }
    connector_count_op(c, &c->stats.lookup_exists, ks.n, 0, 0, 0, now_ns() - t0);
    /* Fold namespaces: a candidate is present only when every namespace has it. */
    size_t k = 0;
    for (size_t g = 0; g < cfg->ngroups; g++) {
        size_t cand = candidates(cfg, g, bound);
        p.n[g] = cand;
        p.present[g] = calloc(cand ? cand : 1, 1);
        if (!p.present[g]) {
            rc = connector_err(c, -ENOMEM, "lookup: out of memory");
            goto out;
        }
        for (size_t i = 0; i < cand; i++) {
            int all = 1;
            for (size_t s = 0; s < ks.nns[g]; s++, k++)
                all &= present[k] != 0;
            p.present[g][i] = (uint8_t)all;
        }
    }
    int64_t h = connector_hit_search(cfg, &p, bound);
    if (h >= num_tokens) h = connector_hit_search(cfg, &p, num_tokens - 1);
    *hit = h;
    pthread_mutex_lock(&c->stats_lock);
    c->stats.lookups++;
    c->stats.lookup_hit_tokens += (uint64_t)h;
    pthread_mutex_unlock(&c->stats_lock);
out:
    for (size_t g = 0; g < cfg->ngroups; g++)
        free(p.present[g]);
    free(present);
    keyset_free(&ks);
    return rc;
}
