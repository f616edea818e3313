/*
 * cluster_place.c — the placement of one batch: each key's candidate members, best first,
 * ranked by rendezvous hashing (cluster_rank) over the view's live members, and the walk
 * along those ranks that skips members marked down.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "client/cluster.h"

void cluster_plan_free(cplan *p) {
    free(p->cand);
    free(p->nc);
}

int cluster_plan_make(tide_store *s, cluster *c, cview *v, const tide_key *keys, size_t n,
                      size_t want, cplan *p) {
    memset(p, 0, sizeof(*p));
    p->v = v;
    p->now = now_ns();
    if (v->n == 0) return cluster_no_members(s, c, "request");
    uint64_t *seeds = malloc(v->n * sizeof(*seeds));
    uint32_t *live = malloc(v->n * sizeof(*live));
    if (!seeds || !live) {
        free(seeds), free(live);
        return client_err(s, -ENOMEM, "out of memory");
    }
    size_t nl = 0;
    for (size_t i = 0; i < v->n; i++)
        if (!member_is_down(v->m[i], p->now)) live[nl++] = (uint32_t)i;
    if (nl == 0) {
        p->ignore_down = 1;
        for (size_t i = 0; i < v->n; i++)
            live[nl++] = (uint32_t)i;
    }
    for (size_t i = 0; i < nl; i++)
        seeds[i] = v->m[live[i]]->seed;
    p->depth = want < nl ? want : nl;
    if (p->depth > CLUSTER_MAX_DEPTH) p->depth = CLUSTER_MAX_DEPTH;
    p->cand = malloc((n ? n : 1) * p->depth * sizeof(*p->cand));
    p->nc = calloc(n ? n : 1, 1);
    if (!p->cand || !p->nc) {
        free(seeds), free(live);
        cluster_plan_free(p);
        return client_err(s, -ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        if (client_key_check(&keys[i]) != 0) continue;
        uint32_t *o = p->cand + i * p->depth;
        cluster_rank(seeds, nl, keys[i].data, keys[i].len, o, p->depth);
        for (size_t r = 0; r < p->depth; r++)
            o[r] = live[o[r]];
        p->nc[i] = (uint8_t)p->depth;
    }
    free(seeds), free(live);
    return 0;
}

cmember *cluster_plan_member(const cplan *p, size_t key, size_t rank) {
    return p->v->m[p->cand[key * p->depth + rank]];
}

/* The first usable rank of key at or after `from` (in `mask` when mask is not ~0), or -1. */
int cluster_plan_next(const cplan *p, size_t key, size_t from, uint32_t mask) {
    for (size_t r = from; r < p->nc[key]; r++) {
        if (!(mask & (1u << r))) continue;
        if (!p->ignore_down && member_is_down(cluster_plan_member(p, key, r), now_ns())) continue;
        return (int)r;
    }
    return -1;
}
