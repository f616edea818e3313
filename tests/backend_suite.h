/*
 * backend_suite.h — the behaviour every backend must show, run against a URL.
 * mem:// runs it in tests/unit/test_backend.c; every other backend runs the same suite
 * against a real server.
 */
#ifndef TIDE_BACKEND_SUITE_H
#define TIDE_BACKEND_SUITE_H

/* Run every case against a fresh store opened from url (cleared between cases). The
 * store must hold at least 64 MiB. Fails the current test on the first broken case. */
void backend_suite(const char *url);
/* The same against a store that keeps `copies` copies of every key (a cluster with
 * replicas=copies and at least that many members): its summed figures count each copy. */
void backend_suite_copies(const char *url, int copies);

#endif
