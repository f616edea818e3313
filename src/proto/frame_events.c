/*
 * frame_events.c — the encoders of EVENTS and its reply (frame.h's layout): the store's
 * departure feed over the native protocol. The decoder's side is in frame_decode.c.
 */
#include <errno.h>

#include "frame.h"

static uint8_t *events_header(void *buf, unsigned op, uint64_t req_id, size_t count,
                              size_t keys_len) {
    uint8_t *p = buf;
    memset(p, 0, FRAME_HDR_SIZE);
    le_wr32(p, FRAME_MAGIC);
    p[4] = FRAME_VERSION;
    p[5] = (uint8_t)op;
    le_wr64(p + 8, req_id);
    le_wr32(p + 16, (uint32_t)count);
    le_wr32(p + 24, (uint32_t)keys_len);
    le_wr64(p + 32, keys_len);
    return p + FRAME_HDR_SIZE;
}

int frame_encode_events(void *buf, size_t cap, size_t *len, uint64_t req_id, uint64_t from,
                        uint32_t max) {
    if (max < 1) return TIDE_EPROTO;
    *len = FRAME_HDR_SIZE + FRAME_EVENTS_KEYS;
    if (!buf || cap < *len) return TIDE_EBUFSMALL;
    uint8_t *p = events_header(buf, FRAME_OP_EVENTS, req_id, 0, FRAME_EVENTS_KEYS);
    le_wr64(p, from);
    le_wr32(p + 8, max);
    le_wr32(p + 12, 0);
    return 0;
}

int frame_encode_events_reply(void *buf, size_t cap, size_t *len, uint64_t req_id, uint64_t next,
                              uint64_t lost, const tide_event *ev, size_t n) {
    if (n > TIDE_BATCH_MAX) return TIDE_ELIMIT;
    if (n && !ev) return -EINVAL;
    size_t keysec = FRAME_EVENTS_KEYS;
    for (size_t i = 0; i < n; i++) {
        if (ev[i].kind < TIDE_DEPARTURE_REMOVED || ev[i].kind > TIDE_DEPARTURE_CLEARED ||
            ev[i].klen > TIDE_KEY_MAX ||
            (ev[i].klen == 0) != (ev[i].kind == TIDE_DEPARTURE_CLEARED))
            return TIDE_EPROTO;
        keysec += FRAME_EVENT_ENTRY_MIN + ev[i].klen;
    }
    *len = FRAME_HDR_SIZE + keysec;
    if (!buf || cap < *len) return TIDE_EBUFSMALL;
    uint8_t *p = events_header(buf, FRAME_OP_EVENTS | FRAME_OP_REPLY, req_id, n, keysec);
    le_wr64(p, next);
    le_wr64(p + 8, lost);
    p += FRAME_EVENTS_KEYS;
    for (size_t i = 0; i < n; i++) {
        le_wr64(p, ev[i].seq);
        p[8] = (uint8_t)ev[i].kind;
        le_wr16(p + 9, (uint16_t)ev[i].klen);
        memcpy(p + FRAME_EVENT_ENTRY_MIN, ev[i].key, ev[i].klen);
        p += FRAME_EVENT_ENTRY_MIN + ev[i].klen;
    }
    return 0;
}
