/*
 * test_conncfg_corpus.c — replays the connector configuration fuzz corpus
 * (tests/fuzz/corpus/conncfg/, relative to the repository root where `make test` runs)
 * through the properties of tests/fuzz/conncfg_check.h, in every test run and under the
 * sanitizers of `make test SANITIZER=...`. Seeds named example-* are the project's
 * examples/ (each must be accepted, except the one docs/VLLM.md lists as rejected);
 * seeds named edge-* are hostile or malformed documents, each of which must be refused;
 * big-* are large but valid documents; crash-* are inputs that once broke a property and were fixed
 * (regressions).
 */
#include <dirent.h>
#include <errno.h>

#include "fuzz/conncfg_check.h"
#include "harness.h"

#define CONNCFG_CORPUS "tests/fuzz/corpus/conncfg"

static uint8_t *slurp_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0, got;
    uint8_t *b = malloc(cap);
    while (b && (got = fread(b + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            uint8_t *nb = realloc(b, cap *= 2);
            if (!nb) free(b);
            b = nb;
        }
    }
    fclose(f);
    *len = n;
    return b;
}

TEST(conncfg_corpus_replay) {
    DIR *d = opendir(CONNCFG_CORPUS);
    CHECK_MSG(d != NULL, "cannot open %s (run from the repository root)", CONNCFG_CORPUS);
    struct dirent *e;
    int files = 0, examples = 0, edges = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[512];
        snprintf(path, sizeof(path), "%s/%s", CONNCFG_CORPUS, e->d_name);
        size_t len = 0;
        uint8_t *data = slurp_file(path, &len);
        CHECK_MSG(data != NULL, "cannot read %s", path);
        test_context = e->d_name;
        int outcome = 0;
        const char *bad = conncfg_fuzz_one(data, len, &outcome);
        CHECK_MSG(bad == NULL, "%s: %s", e->d_name, bad);
        if (strncmp(e->d_name, "example-", 8) == 0) {
            examples++;
            int want_ok = strstr(e->d_name, "whisper-cross-attention") == NULL;
            CHECK_MSG((outcome == 0) == want_ok, "%s: outcome %d (%s)", e->d_name, outcome,
                      tide_errname(outcome));
        } else if (strncmp(e->d_name, "edge-", 5) == 0) {
            edges++;
            CHECK_MSG(outcome != 0, "%s: a hostile document was accepted", e->d_name);
        }
        free(data);
        files++;
    }
    closedir(d);
    test_context = NULL;
    /* The seeds must be there, or this test would pass on nothing. */
    CHECK_MSG(examples >= 6 && edges >= 20, "%d examples, %d edge cases", examples, edges);
    printf("    %d inputs replayed (%d examples, %d edge cases)\n", files, examples, edges);
}
