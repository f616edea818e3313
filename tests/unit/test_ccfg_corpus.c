/*
 * test_ccfg_corpus.c — replays the connector configuration fuzz corpus
 * (tests/fuzz/corpus/ccfg/, relative to the repository root where `make test` runs)
 * through the properties of tests/fuzz/ccfg_check.h, in every test run and under the
 * sanitizers of `make test SANITIZER=...`. Seeds named example-* are the project's
 * examples/ (each must be accepted, except the one docs/VLLM.md lists as rejected);
 * seeds named edge-* are hostile or malformed documents, each of which must be refused;
 * big-* are large but valid documents; crash-* are inputs that once broke a property and were fixed
 * (regressions).
 */
#include <errno.h>

#include "corpus_util.h"
#include "fuzz/ccfg_check.h"
#include "harness.h"

#define CCFG_CORPUS "tests/fuzz/corpus/ccfg"

typedef struct {
    int examples, edges;
} replay;

static void replay_one(const char *name, const uint8_t *data, size_t len, void *arg) {
    replay *r = arg;
    test_context = name;
    int outcome = 0;
    const char *bad = ccfg_fuzz_one(data, len, &outcome);
    CHECK_MSG(bad == NULL, "%s: %s", name, bad);
    if (strncmp(name, "example-", 8) == 0) {
        r->examples++;
        int want_ok = strstr(name, "whisper-cross-attention") == NULL;
        CHECK_MSG((outcome == 0) == want_ok, "%s: outcome %d (%s)", name, outcome,
                  tide_errname(outcome));
    } else if (strncmp(name, "edge-", 5) == 0) {
        r->edges++;
        CHECK_MSG(outcome != 0, "%s: a hostile document was accepted", name);
    }
    test_context = NULL;
}

TEST(ccfg_corpus_replay) {
    replay r = {0};
    int files = corpus_each(CCFG_CORPUS, replay_one, &r);
    /* The seeds must be there, or this test would pass on nothing. */
    CHECK_MSG(r.examples >= 6 && r.edges >= 20, "%d examples, %d edge cases", r.examples, r.edges);
    printf("    %d inputs replayed (%d examples, %d edge cases)\n", files, r.examples, r.edges);
}
