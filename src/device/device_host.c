/*
 * device_host.c — the host kind: "device" memory is ordinary memory and a copy is a
 * memcpy done when it is issued, so every ticket has landed by the time it is returned.
 * Events are points in no stream (always reached); registration pins nothing.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "tide.h"

typedef struct host_queue {
    uint64_t ticket;
} host_queue;

static int host_open(int device, void **impl, char *msg, size_t mlen) {
    if (device != 0) {
        snprintf(msg, mlen, "host memory has one device, 0 (got %d)", device);
        return TIDE_EDEVICE;
    }
    *impl = NULL;
    return 0;
}

static void host_close(void *impl) {
    (void)impl;
}

static int host_check(void *impl, const void *p, uint64_t len, char *msg, size_t mlen) {
    if (!p || (uintptr_t)p + len < (uintptr_t)p) {
        snprintf(msg, mlen, "host memory at %p for %llu bytes is not an address range", p,
                 (unsigned long long)len);
        return TIDE_EDEVICE;
    }
    return 0;
}

static int host_register(void *impl, void *p, uint64_t len, char *msg, size_t mlen) {
    return 0;
}

static void host_unregister(void *impl, void *p) {}

static int host_queue_create(void *impl, void **q, char *msg, size_t mlen) {
    *q = calloc(1, sizeof(host_queue));
    if (*q) return 0;
    snprintf(msg, mlen, "out of memory");
    return -ENOMEM;
}

static void host_queue_destroy(void *impl, void *q) {
    free(q);
}

static int host_event_record(void *impl, uintptr_t stream, void **ev, char *msg, size_t mlen) {
    static int reached;
    *ev = &reached;
    return 0;
}

static void host_event_destroy(void *impl, void *ev) {}

static int host_wait_event(void *impl, void *q, void *ev, char *msg, size_t mlen) {
    return 0;
}

static int host_copy(void *impl, void *q, const dev_copy *c, size_t n, uint64_t *ticket, char *msg,
                     size_t mlen) {
    for (size_t i = 0; i < n; i++)
        memcpy(c[i].dst, c[i].src, c[i].len);
    *ticket = ++((host_queue *)q)->ticket;
    return 0;
}

static int host_wait(void *impl, void *q, uint64_t ticket, char *msg, size_t mlen) {
    return 0;
}

const dev_ops dev_host_ops = {
    .name = "host",
    .open = host_open,
    .close = host_close,
    .check = host_check,
    .host_register = host_register,
    .host_unregister = host_unregister,
    .queue_create = host_queue_create,
    .queue_destroy = host_queue_destroy,
    .event_record = host_event_record,
    .event_destroy = host_event_destroy,
    .queue_wait_event = host_wait_event,
    .copy = host_copy,
    .wait = host_wait,
};
