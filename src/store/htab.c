/*
 * htab.c — an open-addressing table of pointers: the key index (entries are obj records)
 * and the lease table (entries are leases) both use it.
 *
 * Linear probing from the home slot (hash * n) >> 32, which spreads a 32-bit hash over any
 * table size, so the table grows by half (not double) when 3/4 full: a slot is one pointer
 * and an entry costs 10.7..16 bytes of slots once the table has grown. Deletion shifts the
 * following entries of the run back instead of leaving tombstones, so lookups never slow
 * down with churn and a miss stops at the first empty slot.
 *
 * Invariants: count <= 3/4 of n (htab_reserve() keeps it); every entry e sits in the run
 * that starts at its home slot, with no empty slot between its home and its position
 * (runs wrap from the last slot to slot 0).
 *
 * Walking while deleting: htab_delete(e) at slot i may move a later entry into slot i (or,
 * at the wrap-around, one from the table's start to its end), so a walk that deletes
 * must look at slot i again before moving on. It may then see an entry twice, never miss
 * one.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "store/store_int.h"

static inline uint32_t home(uint32_t h, uint32_t n) {
    return (uint32_t)(((uint64_t)h * n) >> 32);
}

static inline uint32_t step(uint32_t i, uint32_t n) {
    return i + 1 == n ? 0 : i + 1;
}

int htab_init(htab *t, uint32_t slots, htab_hash_fn hash_of) {
    uint32_t n = slots < 16 ? 16 : slots;
    t->slots = calloc(n, sizeof(void *));
    if (!t->slots) return -ENOMEM;
    t->n = n;
    t->count = 0;
    t->hash_of = hash_of;
    return 0;
}

void htab_fini(htab *t) {
    free(t->slots);
    t->slots = NULL;
    t->n = 0;
    t->count = 0;
}

static void place(void **slots, uint32_t n, uint32_t h, void *e) {
    uint32_t i = home(h, n);
    while (slots[i])
        i = step(i, n);
    slots[i] = e;
}

int htab_reserve(htab *t, uint32_t more) {
    uint64_t need = (uint64_t)t->count + more;
    uint64_t n = t->n;
    if (need * 4 <= n * 3) return 0;
    while (need * 4 > n * 3)
        n += n / 2;
    if (n > 0xFFFFFFF0u) return -ENOMEM;
    void **s = calloc(n, sizeof(void *));
    if (!s) return -ENOMEM;
    for (uint32_t i = 0; i < t->n; i++)
        if (t->slots[i]) place(s, (uint32_t)n, t->hash_of(t->slots[i]), t->slots[i]);
    free(t->slots);
    t->slots = s;
    t->n = (uint32_t)n;
    return 0;
}

void *htab_find(const htab *t, uint32_t h, htab_eq_fn eq, const void *key) {
    for (uint32_t i = home(h, t->n);; i = step(i, t->n)) {
        void *e = t->slots[i];
        if (!e) return NULL;
        if (t->hash_of(e) == h && eq(e, key)) return e;
    }
}

void htab_insert(htab *t, void *e) {
    place(t->slots, t->n, t->hash_of(e), e);
    t->count++;
}

void htab_delete(htab *t, void *e) {
    uint32_t i = home(t->hash_of(e), t->n);
    while (t->slots[i] != e)
        i = step(i, t->n);
    /* Backward shift: pull later entries of the run into the hole unless their home lies
     * cyclically in (hole, j], where they must stay. */
    for (uint32_t j = i;;) {
        j = step(j, t->n);
        void *x = t->slots[j];
        if (!x) break;
        uint32_t hm = home(t->hash_of(x), t->n);
        int stays = (i <= j) ? (hm > i && hm <= j) : (hm > i || hm <= j);
        if (!stays) {
            t->slots[i] = x;
            i = j;
        }
    }
    t->slots[i] = NULL;
    t->count--;
}
