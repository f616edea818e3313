/*
 * test_proto_corpus.c — replays the fuzz corpus (tests/fuzz/corpus/frame/, relative to the
 * repository root, where `make test` starts the runner) through the frame decoder.
 *
 * Every file must pass frame_check() (no crash — under the sanitizer build, no memory
 * error — and every property in tests/fuzz/frame_check.h). Files whose names promise an
 * outcome (ok-*, need-*, err-CODE-*; see tests/fuzz/gen_frame_corpus.c) must end that way.
 */
#include <stdio.h>

#include "corpus_util.h"
#include "fuzz/frame_check.h"
#include "harness.h"
#include "tide.h"

#define CORPUS_DIR "tests/fuzz/corpus/frame"

/* Decode every frame of data; return 0 when all decoded and nothing is left, 1 when the
 * last one is cut short, or the error code. */
static int outcome(const uint8_t *data, size_t len, char *errstr, size_t errlen) {
    frame_decoder d;
    frame_msg m;
    frame_decoder_init(&d, NULL);
    size_t off = 0;
    while (off < len) {
        ssize_t r = frame_decode(&d, data + off, len - off, &m);
        if (r == 0) return 1;
        if (r < 0) {
            snprintf(errstr, errlen, "%s", d.errstr);
            return (int)r;
        }
        off += (size_t)r;
    }
    return 0;
}

typedef struct {
    int promised;
} replay;

static void replay_one(const char *name, const uint8_t *data, size_t len, void *arg) {
    replay *r = arg;
    const char *bad = frame_check(data, len);
    CHECK_MSG(bad == NULL, "%s: %s", name, bad);
    char errstr[256] = "";
    int got = outcome(data, len, errstr, sizeof(errstr));
    r->promised += corpus_check_promise(name, got, errstr, "frame");
}

TEST(proto_corpus_replay) {
    replay r = {0};
    int files = corpus_each(CORPUS_DIR, replay_one, &r);
    /* The seeds must be there: an empty or missing corpus would make this test vacuous. */
    CHECK_MSG(r.promised >= 50, "only %d seed files in %s", r.promised, CORPUS_DIR);
    CHECK(files >= r.promised);
}
