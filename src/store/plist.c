/*
 * plist.c — the intrusive lists every eviction policy keeps through the records (lru.c,
 * s3fifo.c, chain.c). A policy has two lists (policy.head/tail and head2/tail2, store_int.h);
 * links are allocator node indices (obj.lprev/lnext), turned back into records through the
 * allocator's owner pointers. Each list counts its objects and their allocator units.
 *
 * Invariants: a list's count and bytes match the objects linked on it; an unlinked
 * object's links are ALLOC_NIL. The caller holds the store's lock (every policy call does).
 */
#include "store/store_int.h"

plist plist_of(policy *p, int second) {
    if (second) return (plist){&p->head2, &p->tail2, &p->count2, &p->bytes2};
    return (plist){&p->head, &p->tail, &p->count, &p->bytes};
}

void plist_insert_after(const policy *p, plist q, obj *o, const obj *after) {
    if (after) {
        o->lprev = after->node;
        o->lnext = after->lnext;
        if (after->lnext != ALLOC_NIL)
            plist_obj(p, after->lnext)->lprev = o->node;
        else
            *q.tail = o->node;
        plist_obj(p, after->node)->lnext = o->node;
    } else {
        o->lprev = ALLOC_NIL;
        o->lnext = *q.head;
        if (*q.head != ALLOC_NIL)
            plist_obj(p, *q.head)->lprev = o->node;
        else
            *q.tail = o->node;
        *q.head = o->node;
    }
    (*q.count)++;
    *q.bytes += alloc_units(p->al, o->node);
}

void plist_remove(const policy *p, plist q, obj *o) {
    if (o->lprev != ALLOC_NIL)
        plist_obj(p, o->lprev)->lnext = o->lnext;
    else
        *q.head = o->lnext;
    if (o->lnext != ALLOC_NIL)
        plist_obj(p, o->lnext)->lprev = o->lprev;
    else
        *q.tail = o->lprev;
    o->lprev = o->lnext = ALLOC_NIL;
    (*q.count)--;
    *q.bytes -= alloc_units(p->al, o->node);
}
