/*
 * htab.c — an open-addressing table of pointers: the key index (entries are obj records)
 * and the lease table (entries are leases) both use it.
 *
 * Linear probing from hash & mask; a slot is one pointer, so the table costs 8 bytes a
 * slot and 10.7..21.3 bytes an entry (it is kept between 3/8 and 3/4 full once grown).
 * Deletion shifts the following entries of the run back instead of leaving tombstones, so
 * lookups never slow down with churn and a miss stops at the first empty slot.
 *
 * Invariants: slots is a power of two; count <= 3/4 of slots (htab_reserve() keeps it);
 * every entry e sits in the run that starts at its home slot hash_of(e) & mask, with no
 * empty slot between its home and its position.
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

int htab_init(htab *t, uint32_t slots, htab_hash_fn hash_of) {
    uint32_t n = 16;
    while (n < slots && n < (1u << 31)) n <<= 1;
    t->slots = calloc(n, sizeof(void *));
    if (!t->slots) return -ENOMEM;
    t->mask = n - 1;
    t->count = 0;
    t->hash_of = hash_of;
    return 0;
}

void htab_fini(htab *t) {
    free(t->slots);
    t->slots = NULL;
    t->mask = 0;
    t->count = 0;
}

static void place(void **slots, uint32_t mask, uint32_t h, void *e) {
    uint32_t i = h & mask;
    while (slots[i]) i = (i + 1) & mask;
    slots[i] = e;
}

int htab_reserve(htab *t, uint32_t more) {
    uint64_t need = (uint64_t)t->count + more;
    uint64_t n = (uint64_t)t->mask + 1;
    if (need * 4 <= n * 3) return 0;
    while (need * 4 > n * 3) n <<= 1;
    if (n > (1ull << 31)) return -ENOMEM;
    void **s = calloc(n, sizeof(void *));
    if (!s) return -ENOMEM;
    for (uint32_t i = 0; i <= t->mask; i++)
        if (t->slots[i]) place(s, (uint32_t)n - 1, t->hash_of(t->slots[i]), t->slots[i]);
    free(t->slots);
    t->slots = s;
    t->mask = (uint32_t)n - 1;
    return 0;
}

void *htab_find(const htab *t, uint32_t h, htab_eq_fn eq, const void *key) {
    for (uint32_t i = h & t->mask;; i = (i + 1) & t->mask) {
        void *e = t->slots[i];
        if (!e) return NULL;
        if (t->hash_of(e) == h && eq(e, key)) return e;
    }
}

void htab_insert(htab *t, void *e) {
    place(t->slots, t->mask, t->hash_of(e), e);
    t->count++;
}

void htab_delete(htab *t, void *e) {
    uint32_t i = t->hash_of(e) & t->mask;
    while (t->slots[i] != e) i = (i + 1) & t->mask;
    /* Backward shift: pull later entries of the run into the hole unless their home lies
     * cyclically in (hole, j], where they must stay. */
    for (uint32_t j = i;;) {
        j = (j + 1) & t->mask;
        void *x = t->slots[j];
        if (!x) break;
        uint32_t home = t->hash_of(x) & t->mask;
        int stays = (i <= j) ? (home > i && home <= j) : (home > i || home <= j);
        if (!stays) {
            t->slots[i] = x;
            i = j;
        }
    }
    t->slots[i] = NULL;
    t->count--;
}
