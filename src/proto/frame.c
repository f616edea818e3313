/*
 * frame.c — what the frame codec's files share: opcode names and the receive limits.
 */
#include "frame.h"

#include <stdio.h>

static const char *const request_names[] = {
    [FRAME_OP_HELLO] = "HELLO",     [FRAME_OP_PUT] = "PUT",
    [FRAME_OP_GET] = "GET",         [FRAME_OP_EXISTS] = "EXISTS",
    [FRAME_OP_REMOVE] = "REMOVE",   [FRAME_OP_MATCH_PREFIX] = "MATCH_PREFIX",
    [FRAME_OP_STAT] = "STAT",       [FRAME_OP_PING] = "PING",
    [FRAME_OP_CLEAR] = "CLEAR",     [FRAME_OP_RESERVE] = "RESERVE",
    [FRAME_OP_COMMIT] = "COMMIT",   [FRAME_OP_PIN] = "PIN",
    [FRAME_OP_RELEASE] = "RELEASE", [FRAME_OP_REPLICA] = "REPLICA",
    [FRAME_OP_EVENTS] = "EVENTS",
};
static const char *const reply_names[] = {
    [FRAME_OP_HELLO] = "HELLO_REPLY",     [FRAME_OP_PUT] = "PUT_REPLY",
    [FRAME_OP_GET] = "GET_REPLY",         [FRAME_OP_EXISTS] = "EXISTS_REPLY",
    [FRAME_OP_REMOVE] = "REMOVE_REPLY",   [FRAME_OP_MATCH_PREFIX] = "MATCH_PREFIX_REPLY",
    [FRAME_OP_STAT] = "STAT_REPLY",       [FRAME_OP_PING] = "PING_REPLY",
    [FRAME_OP_CLEAR] = "CLEAR_REPLY",     [FRAME_OP_RESERVE] = "RESERVE_REPLY",
    [FRAME_OP_COMMIT] = "COMMIT_REPLY",   [FRAME_OP_PIN] = "PIN_REPLY",
    [FRAME_OP_RELEASE] = "RELEASE_REPLY", [FRAME_OP_REPLICA] = "REPLICA_REPLY",
    [FRAME_OP_EVENTS] = "EVENTS_REPLY",
};

int frame_op_valid(unsigned op) {
    if (op == FRAME_OP_ERROR) return 1;
    unsigned base = op & ~(unsigned)FRAME_OP_REPLY;
    return op <= 0xff && base >= FRAME_OP_HELLO && base <= FRAME_OP_EVENTS;
}

const char *frame_op_name(unsigned op) {
    if (!frame_op_valid(op)) return "?";
    if (op == FRAME_OP_ERROR) return "ERROR";
    if (op & FRAME_OP_REPLY) return reply_names[op & ~(unsigned)FRAME_OP_REPLY];
    return request_names[op];
}

void frame_limits_default(frame_limits *lim) {
    lim->max_keys = FRAME_DEFAULT_MAX_KEYS;
    lim->max_value = FRAME_DEFAULT_MAX_VALUE;
    lim->max_frame = FRAME_DEFAULT_MAX_FRAME;
}

int frame_limits_check(const frame_limits *lim, char *errstr, size_t errlen) {
    const char *what = NULL;
    unsigned long long v = 0;
    if (lim->max_keys < 1 || lim->max_keys > TIDE_BATCH_MAX) {
        what = "max_keys must be 1..65536";
        v = lim->max_keys;
    } else if (lim->max_value < 1) {
        what = "max_value must be at least 1";
        v = lim->max_value;
    } else if (lim->max_frame < FRAME_HDR_SIZE || lim->max_frame > FRAME_MAX_FRAME_CAP) {
        what = "max_frame must be 40..2^48";
        v = lim->max_frame;
    }
    if (!what) return 0;
    if (errstr && errlen) snprintf(errstr, errlen, "frame limits: %s, got %llu", what, v);
    return TIDE_ECONFIG;
}
