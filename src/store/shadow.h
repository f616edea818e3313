/*
 * shadow.h — adapt's miniature simulations (shadow.c): a few small caches that run adapt's
 * rules on a hash sample of the keys, each with another share of the pool for protected,
 * and pick the share whose miniature hits most. The one piece of code both the store's
 * adapt policy (adapt.c) and the trace simulator (src/trace/sim.c) call, with the same
 * events in the same order, so the two choose the same share at the same reference.
 */
#ifndef TIDE_STORE_SHADOW_H
#define TIDE_STORE_SHADOW_H

#include <stdint.h>

#define SHADOW_K 5       /* miniature caches, one per candidate share */
#define SHADOW_MAX 2048u /* entries a miniature holds at most (its capacity) */
#define SHADOW_SHARE_DEN 64u
#define SHADOW_START 1u /* the candidate used until the first choice: 1/2 */

typedef struct shadow_ent {
    uint32_t h;                 /* the key's hash */
    uint16_t prev, next, bnext; /* list links; the next entry of its hash bucket */
    uint8_t list, uses;         /* 0 free, 1 probation, 2 protected; reads not spent */
} shadow_ent;

typedef struct shadow_mini {
    shadow_ent *e;    /* SHADOW_MAX entries */
    uint16_t *bucket; /* 2 * SHADOW_MAX heads of hash chains */
    uint32_t *ghost;  /* SHADOW_GHOST entries: tag << 16 | eviction number (16 bits) */
    uint16_t head[3], tail[3], freelist;
    uint16_t cur;          /* the entry the batch placed last, or NIL */
    uint32_t cur_batch;    /* the batch it was placed in (cur counts only in the same one) */
    uint32_t streak_batch; /* the batch the streak is of */
    uint32_t streak;       /* 1 while every reference of that batch so far was a hit */
    uint32_t count[3];
    uint32_t share;     /* protected's share, in SHADOW_SHARE_DEN parts */
    uint32_t evictions; /* mod 2^16 is what the ghost keeps */
    uint64_t hits;      /* prefix hits since the last choice */
} shadow_mini;

typedef struct shadow {
    shadow_mini m[SHADOW_K];
    uint64_t score[SHADOW_K]; /* hits, halved at each choice */
    uint64_t nmax;            /* the live cache's most objects held, as last told */
    uint32_t cap;             /* each miniature's capacity now */
    uint32_t thresh;          /* a key is sampled when its mixed hash is below (0: all) */
    uint32_t left;            /* sampled references until the next choice */
    uint32_t pick;            /* the chosen candidate */
    uint32_t batch;           /* batches begun (the miniatures' cursors name theirs) */
    uint64_t choices;         /* how many choices were made */
    uint64_t moves;           /* how many of them changed the share */
} shadow;

/* Allocate the miniatures (a fixed size, shadow_bytes()). Errors: -ENOMEM. */
int shadow_init(shadow *s);
void shadow_fini(shadow *s);

/* One reference to a key of hash h, as the live cache saw it: read (a hit being released)
 * or written (a new object); first: the batch's first reference; tail: the last key of a
 * saved batch of two or more; nmax: the most objects the live cache has held. Returns the
 * share protected should have now, in SHADOW_SHARE_DEN parts. O(1) amortised. */
uint32_t shadow_ref(shadow *s, uint32_t h, int read, int first, int tail, uint64_t nmax);

/* The share in use (in SHADOW_SHARE_DEN parts). */
uint32_t shadow_share(const shadow *s);

/* Heap bytes the miniatures hold (fixed). */
uint64_t shadow_bytes(void);

#endif
