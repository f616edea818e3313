/*
 * events.c — the store's ring of departure events (events.h): what a KV-aware router needs
 * to stop sending requests to prefixes the store no longer holds.
 *
 * Invariant: the ring holds exactly the events numbered max(1, next - CAP) .. next - 1,
 * event s in slot s % CAP. A read from below that window reports the gap as `lost`.
 */
#include "store/events.h"

#include "store/store_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int store_events_init(store_events *ev) {
    memset(ev, 0, sizeof(*ev));
    ev->slots = calloc(STORE_EVENTS_CAP, sizeof(*ev->slots));
    if (!ev->slots) return -ENOMEM;
    ev->next = 1;
    pthread_mutex_init(&ev->mu, NULL);
    return 0;
}

void store_events_fini(store_events *ev) {
    if (!ev->slots) return;
    pthread_mutex_destroy(&ev->mu);
    free(ev->slots);
    ev->slots = NULL;
}

void store_events_add(store_events *ev, uint32_t kind, const void *key, size_t klen) {
    if (!ev || !ev->slots) return;
    if (klen > TIDE_KEY_MAX) klen = TIDE_KEY_MAX; /* the store never holds longer keys */
    pthread_mutex_lock(&ev->mu);
    store_event_slot *s = &ev->slots[ev->next % STORE_EVENTS_CAP];
    s->seq = ev->next++;
    s->kind = kind;
    s->klen = (uint32_t)klen;
    if (klen) memcpy(s->key, key, klen);
    pthread_mutex_unlock(&ev->mu);
}

size_t store_events_read(store_events *ev, uint64_t from, tide_event *out, size_t max,
                         uint64_t *next, uint64_t *lost) {
    size_t n = 0;
    *lost = 0;
    pthread_mutex_lock(&ev->mu);
    uint64_t oldest = ev->next > STORE_EVENTS_CAP ? ev->next - STORE_EVENTS_CAP : 1;
    if (from == 0) from = ev->next; /* "from now on" */
    if (from > ev->next) {          /* a number this ring never gave: the store restarted */
        *lost = 1;
        from = oldest;
    } else if (from < oldest) {
        *lost = oldest - from;
        from = oldest;
    }
    for (; from < ev->next && n < max; from++, n++) {
        const store_event_slot *s = &ev->slots[from % STORE_EVENTS_CAP];
        out[n].seq = s->seq;
        out[n].kind = s->kind;
        out[n].klen = s->klen;
        memcpy(out[n].key, s->key, s->klen);
    }
    *next = from;
    pthread_mutex_unlock(&ev->mu);
    return n;
}

size_t store_events_get(store *st, uint64_t from, tide_event *out, size_t max, uint64_t *next,
                        uint64_t *lost) {
    return store_events_read(&st->ev, from, out, max, next, lost);
}
