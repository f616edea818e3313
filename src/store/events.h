/*
 * events.h — the store's feed of departures: a bounded ring of events, each naming a key
 * that left the store (removed, evicted with no copy left, dropped) or saying that every
 * key left (clear), numbered by a sequence that only grows.
 *
 * Readers poll it from a sequence number of their own (store_events_read); the ring keeps
 * the newest STORE_EVENTS_CAP events and forgets older ones, and a reader who fell behind
 * is told how many it missed (`lost`), never left to believe it saw everything.
 *
 * Lock: the ring has its own mutex, a leaf: it is taken under the store's lock and under
 * the disk tier's, and nothing is called while it is held. Keys are copied in (at most
 * TIDE_KEY_MAX bytes each), so the ring never points into store records.
 */
#ifndef TIDE_STORE_EVENTS_H
#define TIDE_STORE_EVENTS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "tide.h"

#define STORE_EVENTS_CAP 8192u /* events kept: 8192 x 272 bytes = 2.1 MiB a store */

typedef struct store_event_slot {
    uint64_t seq;
    uint32_t kind; /* TIDE_DEPARTURE_* */
    uint32_t klen;
    uint8_t key[TIDE_KEY_MAX];
} store_event_slot;

typedef struct store_events {
    pthread_mutex_t mu;
    store_event_slot *slots; /* STORE_EVENTS_CAP of them; slot of seq s is s % CAP */
    uint64_t next;           /* the sequence number the next event gets (first is 1) */
} store_events;

/* Set up an empty ring. Errors: -ENOMEM. */
int store_events_init(store_events *ev);
void store_events_fini(store_events *ev);

/* Append one event (key NULL and klen 0 for TIDE_DEPARTURE_CLEARED); the oldest is forgotten
 * when the ring is full. */
void store_events_add(store_events *ev, uint32_t kind, const void *key, size_t klen);

/*
 * Copy the events numbered from `from` on (at most max of them) into out, oldest first, and
 * return how many. *next is the number to pass next time; *lost counts events numbered
 * from `from` on that the ring no longer holds (the reader fell more than STORE_EVENTS_CAP
 * behind). from 0 means "from now on": nothing is copied, *next is the current end.
 */
size_t store_events_read(store_events *ev, uint64_t from, tide_event *out, size_t max,
                         uint64_t *next, uint64_t *lost);

#endif /* TIDE_STORE_EVENTS_H */
