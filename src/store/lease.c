/*
 * lease.c — pins and reservations as leases: each has an id, found through a table (so
 * a server can release what a connection held, and a stale id finds nothing), and, when
 * it has a deadline, a place in a binary min-heap of deadlines so that expiry looks only
 * at leases that are due: O(log n) to add or drop, O(1) to see the earliest.
 *
 * A heap rather than per-lease-length FIFO lists because lease lengths are the caller's
 * choice and need not be monotone.
 *
 * Invariants: ids come from one counter starting at 1 and are never reused, so a stale id
 * can only miss. A lease is in the heap iff its deadline is nonzero, and then
 * heap[heap_pos] == the lease; every parent's deadline <= its children's.
 */
#include <errno.h>
#include <stdlib.h>

#include "common/idhash.h"
#include "store/store_int.h"

static uint32_t lease_hash(const void *e) {
    return idhash32(((const lease *)e)->id);
}

static int lease_eq(const void *e, const void *key) {
    return ((const lease *)e)->id == *(const uint64_t *)key;
}

int leases_init(leases *l) {
    l->heap = NULL;
    l->heap_len = l->heap_cap = 0;
    l->next_id = 1;
    l->npin = l->nresv = 0;
    return htab_init(&l->ids, 64, lease_hash);
}

void leases_fini(leases *l) {
    for (uint32_t i = 0; i < htab_slots(&l->ids); i++)
        free(htab_slot(&l->ids, i));
    htab_fini(&l->ids);
    free(l->heap);
    l->heap = NULL;
    l->heap_len = l->heap_cap = 0;
}

static void heap_set(leases *l, uint32_t pos, lease *e) {
    l->heap[pos] = e;
    e->heap_pos = pos;
}

static void sift_up(leases *l, uint32_t pos) {
    lease *e = l->heap[pos];
    while (pos > 0) {
        uint32_t parent = (pos - 1) / 2;
        if (l->heap[parent]->deadline <= e->deadline) break;
        heap_set(l, pos, l->heap[parent]);
        pos = parent;
    }
    heap_set(l, pos, e);
}

static void sift_down(leases *l, uint32_t pos) {
    lease *e = l->heap[pos];
    for (;;) {
        uint32_t c = 2 * pos + 1;
        if (c >= l->heap_len) break;
        if (c + 1 < l->heap_len && l->heap[c + 1]->deadline < l->heap[c]->deadline) c++;
        if (e->deadline <= l->heap[c]->deadline) break;
        heap_set(l, pos, l->heap[c]);
        pos = c;
    }
    heap_set(l, pos, e);
}

int leases_add(leases *l, int kind, obj *o, uint64_t deadline, lease **out) {
    int rc = htab_reserve(&l->ids, 1);
    if (rc < 0) return rc;
    if (deadline && l->heap_len == l->heap_cap) {
        uint32_t cap = l->heap_cap ? l->heap_cap * 2 : 64;
        lease **h = realloc(l->heap, (size_t)cap * sizeof(*h));
        if (!h) return -ENOMEM;
        l->heap = h;
        l->heap_cap = cap;
    }
    lease *e = malloc(sizeof(*e));
    if (!e) return -ENOMEM;
    *e = (lease){.id = l->next_id++,
                 .deadline = deadline,
                 .o = o,
                 .heap_pos = ALLOC_NIL,
                 .kind = (uint8_t)kind};
    htab_insert(&l->ids, e);
    if (deadline) {
        l->heap[l->heap_len] = e;
        e->heap_pos = l->heap_len++;
        sift_up(l, e->heap_pos);
    }
    if (kind == LEASE_PIN)
        l->npin++;
    else
        l->nresv++;
    *out = e;
    return 0;
}

lease *leases_find(leases *l, uint64_t id, int kind) {
    lease *e = htab_find(&l->ids, idhash32(id), lease_eq, &id);
    return e && e->kind == kind ? e : NULL;
}

void leases_drop(leases *l, lease *e) {
    htab_delete(&l->ids, e);
    if (e->heap_pos != ALLOC_NIL) {
        uint32_t pos = e->heap_pos;
        lease *last = l->heap[--l->heap_len];
        if (last != e) {
            heap_set(l, pos, last);
            sift_down(l, pos);
            sift_up(l, last->heap_pos);
        }
    }
    if (e->kind == LEASE_PIN)
        l->npin--;
    else
        l->nresv--;
    free(e);
}

uint64_t leases_meta_bytes(const leases *l) {
    return htab_meta_bytes(&l->ids) + (uint64_t)l->heap_cap * sizeof(lease *) +
           (l->npin + l->nresv) * malloc_cost(sizeof(lease));
}
