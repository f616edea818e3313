/*
 * shadow.c — adapt's miniature simulations (SHARDS-style spatial sampling, Waldspurger et
 * al., FAST 2015 and ATC 2017): SHADOW_K small caches run adapt's rules on the references of
 * a hash sample of the keys, each with its own share of the pool for protected
 * (shares[] below), and every window of sampled references (the miniature's capacity, at
 * least WINDOW_MIN) the live policy takes the share of the miniature that scored most. Why: the
 * best share depends on the workload (docs/TRACES.md): close to all of the pool where
 * reuse is by popularity (coding, chat: S3-FIFO's territory), about half where it is by
 * recency (tool use, Mooncake's traces: chain's); no fixed share wins everywhere.
 *
 * What a miniature simulates (adapt.c's rules, on the sampled keys only): probation and
 * protected lists; a reference to a key the miniature holds is a hit and a use (at most 3,
 * spent as second rounds when protected overflows its share), which moves the key to
 * protected behind the batch's previous sampled key, or into probation behind it when that
 * one is there; a key it does not hold is admitted (evicting probation's tail, else
 * protected's, when full), into protected when the miniature's ghost remembers it (evicted
 * within the last two cachefuls of evictions), else into probation behind the batch's
 * previous key, or at probation's eviction end for a saved batch's last key. A hit is
 * counted as the live cache counts one, as part of a prefix: only while every sampled
 * reference of its batch so far was a hit in that miniature (counting every held block
 * instead made the choice flap between shares and lost 2% on Mooncake's synthetic trace
 * at 1024 blocks). The references a miniature sees are the live cache's: its reads (hits)
 * and its new objects (misses), in order; a save of a key the live cache already holds is
 * not told. Scores fade by a quarter at each choice (halving flapped more; an eighth
 * reacted too slowly on the coding shape), and a tie keeps the share in use.
 *
 * Sampling: while the live cache has held at most SHADOW_MAX objects every key is
 * sampled and each miniature holds as many as the live cache (an exact simulation of the
 * shares on the same references); beyond, a key is sampled when its mixed hash falls
 * below SHADOW_MAX / nmax of the hash space and each miniature holds SHADOW_MAX (the
 * capacity scaled by the rate). Keys sampled before the rate fell stay until evicted.
 *
 * Memory: fixed, SHADOW_K * (SHADOW_MAX * (12 + 2 * 2) + SHADOW_GHOST * 4) bytes = 320 KiB,
 * allocated once (shadow_bytes()); nothing per live object. Work: per reference one hash
 * multiply and compare; per sampled reference O(1) amortised in each miniature (a bucket
 * walk of about one entry, list moves, a trim loop that ends as adapt.c's does).
 * Invariants: each list's count matches its entries; a held entry is in its hash bucket;
 * count[1] + count[2] <= cap.
 */
#include "store/shadow.h"

#include <errno.h>
#include <stdlib.h>

#define NIL 0xFFFFu
#define NBUCKET (2u * SHADOW_MAX)
#define SHADOW_GHOST (4u * SHADOW_MAX) /* ghost slots, direct-mapped */
#define USES_MAX 3u
#define WINDOW_MIN 128u /* sampled references between choices, at least */

/* Protected's share in each miniature, in SHADOW_SHARE_DEN parts: 3/8, 1/2 (the start),
 * 3/4, 29/32, 63/64. */
static const uint32_t shares[SHADOW_K] = {24, 32, 48, 58, 63};

_Static_assert(SHADOW_MAX < NIL, "entry indexes fit 16 bits");
_Static_assert(SHADOW_START < SHADOW_K, "the starting candidate exists");

static uint32_t bucket_of(uint32_t h) {
    return (h ^ (h >> 13)) & (NBUCKET - 1);
}

static uint32_t ghost_slot(uint32_t h) {
    return h & (SHADOW_GHOST - 1);
}

static uint32_t ghost_tag(uint32_t h) {
    return (h >> 16) | 1;
}

/* ---- one miniature -------------------------------------------------------------------- */

static int mini_init(shadow_mini *m, uint32_t share) {
    m->e = malloc(SHADOW_MAX * sizeof(*m->e));
    m->bucket = malloc(NBUCKET * sizeof(*m->bucket));
    m->ghost = calloc(SHADOW_GHOST, sizeof(*m->ghost));
    if (!m->e || !m->bucket || !m->ghost) return -ENOMEM;
    for (uint32_t i = 0; i < NBUCKET; i++)
        m->bucket[i] = NIL;
    for (uint32_t i = 0; i < SHADOW_MAX; i++)
        m->e[i] = (shadow_ent){.bnext = (uint16_t)(i + 1 < SHADOW_MAX ? i + 1 : NIL)};
    m->freelist = 0;
    for (int l = 0; l < 3; l++) {
        m->head[l] = m->tail[l] = NIL;
        m->count[l] = 0;
    }
    m->cur = NIL;
    m->cur_batch = 0;
    m->share = share;
    m->evictions = 0;
    m->hits = 0;
    return 0;
}

static void mini_fini(shadow_mini *m) {
    free(m->e);
    free(m->bucket);
    free(m->ghost);
    m->e = NULL;
    m->bucket = NULL;
    m->ghost = NULL;
}

static uint16_t lookup(const shadow_mini *m, uint32_t h) {
    uint16_t i = m->bucket[bucket_of(h)];
    while (i != NIL && m->e[i].h != h)
        i = m->e[i].bnext;
    return i;
}

static void unlink_ent(shadow_mini *m, uint16_t i) {
    shadow_ent *x = &m->e[i];
    if (x->prev != NIL)
        m->e[x->prev].next = x->next;
    else
        m->head[x->list] = x->next;
    if (x->next != NIL)
        m->e[x->next].prev = x->prev;
    else
        m->tail[x->list] = x->prev;
    m->count[x->list]--;
    x->list = 0;
}

/* i goes on list l right behind a, or at the head when a is NIL. */
static void link_after(shadow_mini *m, int l, uint16_t a, uint16_t i) {
    shadow_ent *x = &m->e[i];
    x->list = (uint8_t)l;
    x->prev = a;
    x->next = a == NIL ? m->head[l] : m->e[a].next;
    if (a == NIL)
        m->head[l] = i;
    else
        m->e[a].next = i;
    if (x->next != NIL)
        m->e[x->next].prev = i;
    else
        m->tail[l] = i;
    m->count[l]++;
}

/* Chain placement: behind the batch's previous key when it is on list l, else at the
 * head; i becomes the batch's cursor. */
static void place(shadow_mini *m, int l, uint16_t i, uint32_t batch) {
    int behind = m->cur != NIL && m->cur_batch == batch && m->e[m->cur].list == l;
    link_after(m, l, behind ? m->cur : NIL, i);
    m->cur = i;
    m->cur_batch = batch;
}

static void trim(shadow_mini *m, uint32_t cap) {
    uint32_t limit = (uint32_t)((uint64_t)cap * m->share / SHADOW_SHARE_DEN);
    while (m->count[2] > limit) {
        uint16_t v = m->tail[2];
        unlink_ent(m, v);
        if (m->e[v].uses) {
            m->e[v].uses--;
            link_after(m, 2, NIL, v);
        } else {
            link_after(m, 1, NIL, v);
        }
    }
}

static void evict(shadow_mini *m) {
    uint16_t v = m->count[1] ? m->tail[1] : m->tail[2];
    shadow_ent *x = &m->e[v];
    unlink_ent(m, v);
    uint16_t *pp = &m->bucket[bucket_of(x->h)];
    while (*pp != v)
        pp = &m->e[*pp].bnext;
    *pp = x->bnext;
    m->ghost[ghost_slot(x->h)] = ghost_tag(x->h) << 16 | (m->evictions & 0xFFFF);
    m->evictions++;
    x->bnext = m->freelist;
    m->freelist = v;
    if (m->cur == v) m->cur = NIL;
}

/* 1 (and the entry forgotten) when the ghost remembers h within two cachefuls. */
static int ghost_take(shadow_mini *m, uint32_t h, uint32_t cap) {
    uint32_t *g = &m->ghost[ghost_slot(h)];
    if (*g >> 16 != ghost_tag(h) || ((m->evictions - *g) & 0xFFFF) >= 2 * cap) return 0;
    *g = 0;
    return 1;
}

static void mini_ref(shadow_mini *m, uint32_t h, int tail, uint32_t cap, uint32_t batch) {
    uint16_t i = lookup(m, h);
    if (m->streak_batch != batch) { /* a batch begins: its prefix is whole so far */
        m->streak_batch = batch;
        m->streak = 1;
    }
    if (i == NIL) m->streak = 0;
    if (i != NIL) {
        m->hits += m->streak;
        if (m->e[i].uses < USES_MAX) m->e[i].uses++;
        unlink_ent(m, i);
        if (m->cur != NIL && m->cur_batch == batch && m->e[m->cur].list == 1) {
            place(m, 1, i, batch); /* the batch's previous key went back to probation */
            return;
        }
        place(m, 2, i, batch);
        trim(m, cap);
        return;
    }
    while (m->count[1] + m->count[2] >= cap)
        evict(m);
    i = m->freelist;
    shadow_ent *x = &m->e[i];
    m->freelist = x->bnext;
    x->h = h;
    x->uses = 0;
    uint32_t b = bucket_of(h);
    x->bnext = m->bucket[b];
    m->bucket[b] = i;
    if (ghost_take(m, h, cap)) {
        place(m, 2, i, batch);
        trim(m, cap);
    } else if (tail) {
        link_after(m, 1, m->tail[1], i);
    } else {
        place(m, 1, i, batch);
    }
}

/* ---- the choice ----------------------------------------------------------------------- */

int shadow_init(shadow *s) {
    for (int k = 0; k < SHADOW_K; k++)
        s->m[k] = (shadow_mini){0};
    for (int k = 0; k < SHADOW_K; k++) {
        if (mini_init(&s->m[k], shares[k]) < 0) {
            shadow_fini(s);
            return -ENOMEM;
        }
        s->score[k] = 0;
    }
    s->cap = 1;
    s->nmax = 0;
    s->thresh = 0;
    s->left = WINDOW_MIN;
    s->pick = SHADOW_START;
    s->batch = 1;
    s->choices = 0;
    s->moves = 0;
    return 0;
}

void shadow_fini(shadow *s) {
    for (int k = 0; k < SHADOW_K; k++)
        mini_fini(&s->m[k]);
}

uint64_t shadow_bytes(void) {
    return (uint64_t)SHADOW_K * (SHADOW_MAX * sizeof(shadow_ent) + NBUCKET * sizeof(uint16_t) +
                                 SHADOW_GHOST * sizeof(uint32_t));
}

uint32_t shadow_share(const shadow *s) {
    return shares[s->pick];
}

static void choose(shadow *s) {
    uint32_t best = s->pick;
    for (uint32_t k = 0; k < SHADOW_K; k++) {
        s->score[k] = s->score[k] - s->score[k] / 4 + s->m[k].hits;
        s->m[k].hits = 0;
    }
    for (uint32_t k = 0; k < SHADOW_K; k++)
        if (s->score[k] > s->score[best]) best = k;
    s->moves += best != s->pick;
    s->pick = best;
    s->choices++;
    s->left = s->cap > WINDOW_MIN ? s->cap : WINDOW_MIN;
}

uint32_t shadow_ref(shadow *s, uint32_t h, int read, int first, int tail, uint64_t nmax) {
    (void)read; /* a miniature's hit or miss is its own; how the live cache saw it is not */
    if (first) s->batch++;
    if (nmax != s->nmax) { /* the rate and the capacity follow the most objects held */
        s->nmax = nmax;
        s->cap = nmax > SHADOW_MAX ? SHADOW_MAX : nmax ? (uint32_t)nmax : 1;
        s->thresh = nmax > SHADOW_MAX ? (uint32_t)(((uint64_t)SHADOW_MAX << 32) / nmax) : 0;
    }
    if (s->thresh && h * 0x9E3779B1u >= s->thresh) return shares[s->pick];
    for (int k = 0; k < SHADOW_K; k++)
        mini_ref(&s->m[k], h, tail && !read, s->cap, s->batch);
    if (--s->left == 0) choose(s);
    return shares[s->pick];
}
