/*
 * fault.c — fault.h: the countdown behind the allocation wrappers.
 *
 * `countdown` > 0 while armed. Each wrapped allocation takes one from it; the one that
 * takes the last (sees 1) fails. The load before the decrement keeps the unarmed path to
 * a single relaxed load; a decrement racing past zero in other threads only makes the
 * count negative, which reads as unarmed.
 */
#include "common/fault.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static atomic_long countdown;
static atomic_int fired;

void fault_arm(long n) {
    atomic_store(&fired, 0);
    atomic_store(&countdown, n > 0 ? n : 0);
}

int fault_fired(void) {
    return atomic_load(&fired);
}

/* 1 when this allocation is the one to fail. */
static int fault_now(void) {
    if (atomic_load_explicit(&countdown, memory_order_relaxed) <= 0) return 0;
    if (atomic_fetch_sub(&countdown, 1) != 1) return 0;
    atomic_store(&fired, 1);
    errno = ENOMEM;
    return 1;
}

void *fault_malloc(size_t n) {
    return fault_now() ? NULL : malloc(n);
}

void *fault_calloc(size_t n, size_t size) {
    return fault_now() ? NULL : calloc(n, size);
}

void *fault_realloc(void *p, size_t n) {
    return fault_now() ? NULL : realloc(p, n);
}

char *fault_strdup(const char *s) {
    return fault_now() ? NULL : strdup(s);
}
