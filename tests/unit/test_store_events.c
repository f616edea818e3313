/*
 * test_store_events.c — the store's departure feed (tide_events_read over mem://): removes,
 * evictions with no copy left, clears, the SSD tier's segment evictions, and a reader who
 * fell behind the ring or comes back after a restart being told so instead of nothing.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "harness.h"
#include "store/events.h"
#include "tide.h"

#define MAXEV 20000
static tide_event evs[MAXEV];

static tide_store *open_url(const char *url) {
    tide_store *s = NULL;
    CHECK_MSG(tide_open(url, &s) == 0, "tide_open(%s): %s", url, tide_errmsg(NULL));
    return s;
}

/* Every event from `from` on (at most MAXEV); *next as tide_events_read. */
static size_t read_all(tide_store *s, uint64_t from, uint64_t *next, uint64_t *lost) {
    size_t n = 0;
    *lost = 0;
    for (int round = 0; round < 64 && n < MAXEV; round++) {
        uint64_t l = 0;
        int got = tide_events_read(s, from, evs + n, MAXEV - n, next, &l);
        CHECK_MSG(got >= 0, "tide_events_read: %d %s", got, tide_errmsg(s));
        *lost += l;
        n += (size_t)got;
        from = *next;
        if (got == 0) break;
    }
    return n;
}

static int key_is(const tide_event *e, const char *k) {
    return e->klen == strlen(k) && memcmp(e->key, k, e->klen) == 0;
}

TEST(store_events_remove_evict_clear) {
    tide_store *s = open_url("mem://?capacity=64KiB");
    uint64_t next = 99, lost = 99;
    CHECK_EQ(tide_events_read(s, 0, evs, 10, &next, &lost), 0); /* from now on */
    CHECK_EQ(next, 1);
    CHECK_EQ(lost, 0);
    static uint8_t val[8192];
    char k[32];
    for (int i = 0; i < 4; i++) {
        snprintf(k, sizeof(k), "k%d", i);
        CHECK_EQ(tide_put(s, k, strlen(k), val, sizeof(val)), 0);
    }
    CHECK_EQ(tide_events_read(s, next, evs, 10, &next, &lost), 0); /* stores are no departures */
    CHECK_EQ(tide_remove(s, "k1", 2), 0);
    CHECK_EQ(tide_remove(s, "k1", 2), TIDE_ENOTFOUND); /* nothing left: no second event */
    CHECK_EQ(tide_events_read(s, next, evs, 10, &next, &lost), 1);
    CHECK_EQ(evs[0].seq, 1);
    CHECK_EQ(evs[0].kind, TIDE_DEPARTURE_REMOVED);
    CHECK(key_is(&evs[0], "k1"));
    CHECK_EQ(next, 2);

    /* Fill well past capacity: every key that is gone was announced, none that stayed. */
    for (int i = 4; i < 40; i++) {
        snprintf(k, sizeof(k), "k%d", i);
        CHECK_EQ(tide_put(s, k, strlen(k), val, sizeof(val)), 0);
    }
    size_t n = read_all(s, next, &next, &lost);
    CHECK_EQ(lost, 0);
    CHECK(n > 0);
    for (int i = 0; i < 40; i++) {
        if (i == 1) continue;
        snprintf(k, sizeof(k), "k%d", i);
        int announced = 0;
        for (size_t j = 0; j < n; j++)
            if (key_is(&evs[j], k)) {
                CHECK_EQ(evs[j].kind, TIDE_DEPARTURE_EVICTED);
                announced++;
            }
        CHECK_MSG(announced == !tide_exists(s, k, strlen(k)), "%s: announced %d times, exists %d",
                  k, announced, tide_exists(s, k, strlen(k)));
    }
    for (size_t j = 1; j < n; j++)
        CHECK_EQ(evs[j].seq, evs[j - 1].seq + 1);

    CHECK_EQ(tide_clear(s), 0);
    CHECK_EQ(tide_events_read(s, next, evs, 10, &next, &lost), 1);
    CHECK_EQ(evs[0].kind, TIDE_DEPARTURE_CLEARED);
    CHECK_EQ(evs[0].klen, 0);
    tide_close(s);
}

TEST(store_events_overflow_and_restart_are_reported) {
    tide_store *s = open_url("mem://?capacity=1MiB");
    const int extra = 10;
    char k[32];
    for (int i = 0; i < (int)STORE_EVENTS_CAP + extra; i++) {
        snprintf(k, sizeof(k), "o%d", i);
        CHECK_EQ(tide_put(s, k, strlen(k), "v", 1), 0);
        CHECK_EQ(tide_remove(s, k, strlen(k)), 0);
    }
    uint64_t next, lost;
    int got = tide_events_read(s, 1, evs, MAXEV, &next, &lost);
    CHECK_EQ(got, (int)STORE_EVENTS_CAP);
    CHECK_EQ(lost, (uint64_t)extra); /* the first ten fell out of the ring: said so */
    CHECK_EQ(evs[0].seq, (uint64_t)extra + 1);
    CHECK(key_is(&evs[0], "o10"));
    CHECK_EQ(next, STORE_EVENTS_CAP + extra + 1);
    /* A number this store never gave (a reader of a store that restarted). */
    got = tide_events_read(s, next + 100, evs, 4, &next, &lost);
    CHECK_EQ(lost, 1);
    CHECK_EQ(got, 4);
    /* Bad arguments. */
    CHECK_EQ(tide_events_read(s, 1, NULL, 4, &next, &lost), -EINVAL);
    CHECK_EQ(tide_events_read(s, 1, evs, 4, NULL, &lost), -EINVAL);
    tide_close(s);
}

/* The SSD tier: an eviction from memory that leaves a copy on disk is no departure; a
 * segment dropped for room announces each key it held. */
TEST(store_events_disk_tier) {
    char url[700];
    snprintf(url, sizeof(url), "mem://?capacity=256KiB&disk_dir=%s/evdisk&disk_capacity=1MiB",
             test_tmpdir());
    tide_store *s = open_url(url);
    static uint8_t val[16384];
    char k[32];
    const int nkeys = 160; /* 2.5 MiB through a 256 KiB pool and a 1 MiB disk */
    for (int i = 0; i < nkeys; i++) {
        snprintf(k, sizeof(k), "d%d", i);
        memset(val, i, sizeof(val));
        CHECK_EQ(tide_put(s, k, strlen(k), val, sizeof(val)), 0);
    }
    tide_stats st;
    for (int i = 0; i < 500; i++) { /* the writer finishes its queue (bounded: 5 s) */
        CHECK_EQ(tide_stats_get(s, &st, sizeof(st)), 0);
        if (st.disk_queued_bytes == 0) break;
        nanosleep(&(struct timespec){0, 10000000}, NULL);
    }
    CHECK_EQ(st.disk_queued_bytes, 0);
    CHECK(st.disk_evictions > 0);
    uint64_t next, lost;
    size_t n = read_all(s, 1, &next, &lost);
    CHECK_EQ(lost, 0);
    int gone = 0;
    for (int i = 0; i < nkeys; i++) {
        snprintf(k, sizeof(k), "d%d", i);
        int announced = 0;
        for (size_t j = 0; j < n; j++)
            if (key_is(&evs[j], k)) announced++;
        int present = tide_exists(s, k, strlen(k));
        gone += !present;
        CHECK_MSG(announced == !present, "%s: announced %d times, present %d", k, announced,
                  present);
    }
    CHECK(gone > 0);
    tide_close(s);
}
