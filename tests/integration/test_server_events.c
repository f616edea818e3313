/*
 * test_server_events.c — the departure feed through tided (EVENTS, 0x0f): over tide:// and
 * unix://, a remove, evictions and a clear reach a client as numbered events; a client that
 * asks for more events than one reply holds reads on from `next`; a reply too short for its
 * entries, or with a key on a clear, is refused by the decoder; /metrics counts EVENTS
 * requests as op="events".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "proto/frame.h"
#include "server_util.h"
#include "tide.h"

static tide_event evs[8192];

static void exercise(const char *url) {
    tide_store *s = NULL;
    CHECK_MSG(tide_open(url, &s) == 0, "tide_open(%s): %s", url, tide_errmsg(NULL));
    uint64_t next = 0, lost = 9;
    CHECK_EQ(tide_events_read(s, 0, evs, 16, &next, &lost), 0);
    CHECK_EQ(lost, 0);
    uint64_t start = next;
    static uint8_t val[65536];
    char k[32];
    for (int i = 0; i < 200; i++) { /* 12.5 MiB through an 8 MiB pool: evictions */
        snprintf(k, sizeof(k), "e%d", i);
        CHECK_EQ(tide_put(s, k, strlen(k), val, sizeof(val)), 0);
    }
    CHECK_EQ(tide_remove(s, "e199", 4), 0);
    CHECK_EQ(tide_clear(s), 0);
    size_t n = 0;
    uint64_t from = start;
    for (int round = 0; round < 100; round++) { /* a few events a reply: read on from next */
        int got = tide_events_read(s, from, evs + n, 7, &next, &lost);
        CHECK_MSG(got >= 0, "%d %s", got, tide_errmsg(s));
        CHECK_EQ(lost, 0);
        if (got == 0) break;
        n += (size_t)got;
        from = next;
    }
    CHECK(n >= 3);
    for (size_t j = 0; j < n; j++)
        CHECK_EQ(evs[j].seq, start + j);
    CHECK_EQ(evs[n - 1].kind, TIDE_DEPARTURE_CLEARED);
    CHECK_EQ(evs[n - 2].kind, TIDE_DEPARTURE_REMOVED);
    CHECK(evs[n - 2].klen == 4 && memcmp(evs[n - 2].key, "e199", 4) == 0);
    for (size_t j = 0; j + 2 < n; j++) {
        CHECK_EQ(evs[j].kind, TIDE_DEPARTURE_EVICTED);
        CHECK(evs[j].klen >= 2 && evs[j].key[0] == 'e');
    }
    tide_close(s);
}

TEST(server_events_tcp_and_unix) {
    char path[300];
    snprintf(path, sizeof(path), "%s/ev.sock", test_tmpdir());
    test_server ts;
    char mport[16];
    snprintf(mport, sizeof(mport), "%d", test_free_port());
    const char *const extra[] = {"--metrics-port", mport, NULL};
    server_start_unix(&ts, path, "8MiB", "error", extra);
    exercise(ts.url);
    char url[400];
    snprintf(url, sizeof(url), "unix://%s", path);
    exercise(url);
    /* Each round read the feed with at least 2 EVENTS requests (the first read, then reads
     * on from next): /metrics counts them under their own label. */
    char cmd[200], out[65536];
    snprintf(cmd, sizeof(cmd),
             "timeout 10 curl -sf http://127.0.0.1:%d/metrics | grep "
             "'^tide_requests_total{op=\"events\",status=\"ok\"}'",
             atoi(mport));
    CHECK_EQ(test_run(cmd, out, sizeof(out)), 0);
    const char *sp = strrchr(out, ' ');
    CHECK_MSG(sp && atoi(sp + 1) >= 4, "EVENTS requests in /metrics: %s", out);
    CHECK_EQ(server_stop(&ts, 15), 0);
}

TEST(server_events_codec) {
    tide_event ev[2] = {{.seq = 5, .kind = TIDE_DEPARTURE_EVICTED, .klen = 3, .key = "abc"},
                        {.seq = 6, .kind = TIDE_DEPARTURE_CLEARED, .klen = 0}};
    uint8_t buf[1024];
    size_t len;
    CHECK_EQ(frame_encode_events_reply(buf, sizeof(buf), &len, 9, 7, 2, ev, 2), 0);
    frame_decoder d;
    frame_decoder_init(&d, NULL);
    frame_msg m;
    CHECK_EQ(frame_decode(&d, buf, len, &m), (ssize_t)len);
    CHECK_EQ(m.ev_next, 7);
    CHECK_EQ(m.ev_lost, 2);
    frame_iter it;
    frame_entry e;
    frame_iter_init(&it, &m);
    CHECK(frame_iter_next(&it, &e) && e.seq == 5 && e.kind == TIDE_DEPARTURE_EVICTED &&
          e.key.len == 3 && memcmp(e.key.data, "abc", 3) == 0);
    CHECK(frame_iter_next(&it, &e) && e.seq == 6 && e.kind == TIDE_DEPARTURE_CLEARED &&
          e.key.len == 0);
    CHECK(!frame_iter_next(&it, &e));
    /* A clear with a key, and an evicted key without one, are not canonical. */
    ev[1].klen = 1;
    CHECK_EQ(frame_encode_events_reply(buf, sizeof(buf), &len, 9, 7, 2, ev, 2), TIDE_EPROTO);
    ev[1].klen = 0;
    CHECK_EQ(frame_encode_events_reply(buf, sizeof(buf), &len, 9, 7, 2, ev, 2), 0);
    buf[FRAME_HDR_SIZE + 16 + 8] = TIDE_DEPARTURE_CLEARED; /* first entry: kind 4 with a key */
    frame_decoder_reset(&d);
    CHECK_EQ(frame_decode(&d, buf, len, &m), TIDE_EPROTO);
    CHECK_CONTAINS(d.errstr, "EVENTS_REPLY");
    /* A request for 0 events. */
    CHECK_EQ(frame_encode_events(buf, sizeof(buf), &len, 1, 0, 0), TIDE_EPROTO);
    CHECK_EQ(frame_encode_events(buf, sizeof(buf), &len, 1, 0, 5), 0);
    buf[FRAME_HDR_SIZE + 8] = 0;
    frame_decoder_reset(&d);
    CHECK_EQ(frame_decode(&d, buf, len, &m), TIDE_EPROTO);
}
