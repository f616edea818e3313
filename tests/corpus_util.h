/*
 * corpus_util.h — replaying a fuzz corpus in the test suite (test_proto_corpus.c,
 * test_resp_corpus.c, test_ccfg_corpus.c): read every seed of a directory, and check
 * the outcome a seed's name promises.
 */
#ifndef TIDE_TESTS_CORPUS_UTIL_H
#define TIDE_TESTS_CORPUS_UTIL_H

#include <stddef.h>
#include <stdint.h>

typedef void (*corpus_fn)(const char *name, const uint8_t *data, size_t len, void *arg);

/* Call fn for every file of dir (relative to the repository root, where `make test` runs;
 * hidden files skipped) with its bytes. Returns how many files; fails the test when dir
 * cannot be opened or a file cannot be read. */
int corpus_each(const char *dir, corpus_fn fn, void *arg);

/* A seed named ok-* promises that a decoder run over the whole file ends with 0 (every
 * UNIT decoded, nothing left), need-* with 1 (the last UNIT cut short), err-CODE-* with the
 * error whose tide_errname() is CODE and a message in errstr. Fails the test when got
 * breaks the promise; returns 1 when the name made one, 0 when not. */
int corpus_check_promise(const char *name, int got, const char *errstr, const char *unit);

#endif
