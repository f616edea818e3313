/*
 * fault.h — allocation failures on demand, so that out-of-memory paths can be tested (the
 * idea of SQLite's malloc.c). The wrappers are malloc and friends until a test arms a
 * countdown: after fault_arm(n), the n-th allocation made through them fails (NULL, errno
 * ENOMEM) — that one only, in whichever thread makes it. A module calls these where its
 * out-of-memory paths are worth proving (connector/worker.c); everything else calls the
 * C library directly. Unarmed, a wrapper costs one relaxed atomic load.
 */
#ifndef TIDE_FAULT_H
#define TIDE_FAULT_H

#include <stddef.h>

/* Fail the n-th allocation from now (n >= 1); 0 disarms. Clears fault_fired(). */
void fault_arm(long n);
/* 1 once the armed failure has happened. */
int fault_fired(void);

void *fault_malloc(size_t n);
void *fault_calloc(size_t n, size_t size);
void *fault_realloc(void *p, size_t n);
char *fault_strdup(const char *s);

#endif
