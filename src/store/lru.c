/*
 * lru.c — least-recently-used eviction: one intrusive doubly-linked list through the
 * records (plist.c), most recent at head, least recent at tail.
 *
 * The policy holds only evictable objects (store_int.h): an object leaves the list when it
 * is pinned and comes back at the head when its last pin goes, so "recently used" means
 * "recently finished being read" and the victim is always the tail, O(1).
 */
#include "store/store_int.h"

static int lru_init(policy *p) {
    p->head = p->tail = p->head2 = p->tail2 = ALLOC_NIL; /* the second list stays empty */
    p->count = p->count2 = p->bytes = p->bytes2 = 0;
    return 0;
}

static void lru_fini(policy *p) {
    (void)p;
}

static uint64_t lru_meta_bytes(const policy *p) {
    (void)p;
    return 0;
}

static void lru_insert(policy *p, obj *o, int reused, const policy_hint *h) {
    (void)reused;
    (void)h;
    plist_insert_after(p, plist_of(p, 0), o, NULL);
}

static void lru_erase(policy *p, obj *o) {
    plist_remove(p, plist_of(p, 0), o);
}

static void lru_access(policy *p, obj *o) {
    (void)p;
    (void)o;
}

static obj *lru_victim(policy *p) {
    return p->tail == ALLOC_NIL ? NULL : plist_obj(p, p->tail);
}

static int lru_list_of(const obj *o) {
    (void)o;
    return 1;
}

const policy_ops policy_lru = {
    .name = "lru",
    .init = lru_init,
    .fini = lru_fini,
    .insert = lru_insert,
    .erase = lru_erase,
    .access = lru_access,
    .victim = lru_victim,
    .meta_bytes = lru_meta_bytes,
    .list_of = lru_list_of,
};
