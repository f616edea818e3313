/*
 * events_op.c — tided's answer to EVENTS: the store's departure feed (events.h) read for a
 * client, so a vLLM connector on another host can announce the blocks tided lost.
 *
 * A reply carries at most FRAME_EVENTS_MAX events (about 1 MiB of keys): a client that fell
 * further behind reads again from the `next` it was given. Nothing here blocks.
 */
#include <errno.h>
#include <stdlib.h>

#include "server/outq.h"
#include "server/server_int.h"

struct events_reply {
    uint64_t req_id, next, lost;
    const tide_event *ev;
    size_t n;
};

static int enc_events(void *buf, size_t cap, size_t *len, void *arg) {
    const struct events_reply *r = arg;
    return frame_encode_events_reply(buf, cap, len, r->req_id, r->next, r->lost, r->ev, r->n);
}

int events_op(server *srv, outq *out, const frame_msg *m) {
    size_t max = m->ev_max < FRAME_EVENTS_MAX ? m->ev_max : FRAME_EVENTS_MAX;
    tide_event *ev = malloc(max * sizeof(*ev));
    if (!ev) return -ENOMEM;
    struct events_reply r = {.req_id = m->h.req_id, .ev = ev};
    r.n = store_events_get(srv->st, m->ev_from, ev, max, &r.next, &r.lost);
    int rc = outq_encoded(out, enc_events, &r);
    free(ev);
    return rc;
}
