/*
 * lru.c — least-recently-used eviction: one intrusive doubly-linked ring through the
 * records, most recent next to the sentinel's `next`, least recent at its `prev`.
 *
 * The policy holds only evictable objects (store_int.h): an object leaves the ring when it
 * is pinned and comes back at the recent end when its last pin goes, so "recently used"
 * means "recently finished being read" and the victim is always at the tail, O(1).
 */
#include <stddef.h>

#include "store/store_int.h"

static void lru_init(policy *p) {
    p->head.prev = p->head.next = &p->head;
    p->count = 0;
}

static void lru_insert(policy *p, obj *o, int reused) {
    (void)reused;
    olink *l = &o->link;
    l->next = p->head.next;
    l->prev = &p->head;
    p->head.next->prev = l;
    p->head.next = l;
    p->count++;
}

static void lru_erase(policy *p, obj *o) {
    olink *l = &o->link;
    l->prev->next = l->next;
    l->next->prev = l->prev;
    l->prev = l->next = NULL;
    p->count--;
}

static void lru_access(policy *p, obj *o) {
    (void)p;
    (void)o;
}

static obj *lru_victim(policy *p) {
    if (p->head.prev == &p->head) return NULL;
    return (obj *)((char *)p->head.prev - offsetof(obj, link));
}

const policy_ops policy_lru = {
    .name = "lru",
    .init = lru_init,
    .insert = lru_insert,
    .erase = lru_erase,
    .access = lru_access,
    .victim = lru_victim,
};
