/*
 * test_resp_corpus.c — replays the RESP fuzz corpus (tests/fuzz/corpus/resp/, relative to
 * the repository root, where `make test` starts the runner) through the RESP parser.
 *
 * Every file must pass resp_check() (no crash — under the sanitizer build, no memory
 * error — and every property in tests/fuzz/resp_check.h). Files whose names promise an
 * outcome (ok-*, need-*, err-CODE-*; see tests/fuzz/gen_resp_corpus.py) must end that way.
 */
#include <stdio.h>

#include "corpus_util.h"
#include "fuzz/resp_check.h"
#include "harness.h"
#include "tide.h"

#define CORPUS_DIR "tests/fuzz/corpus/resp"

/* Parse every command of data with resp_check's limits: 0 when all parsed and nothing is
 * left, 1 when the last is cut short, or the error code. */
static int outcome(const uint8_t *data, size_t len, char *errstr, size_t errlen) {
    resp_limits lim;
    rc_limits(&lim);
    resp_parser p;
    resp_parser_init(&p, &lim, 0);
    resp_arg argv[RC_MAX_ARGS];
    size_t off = 0;
    while (off < len) {
        resp_cmd cmd = {argv, RC_MAX_ARGS, 0, 0};
        ssize_t r = resp_parse(&p, data + off, len - off, &cmd, 0);
        if (r == 0) return 1;
        if (r < 0) {
            snprintf(errstr, errlen, "%s", p.errstr);
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
    const char *bad = resp_check(data, len);
    CHECK_MSG(bad == NULL, "%s: %s", name, bad);
    char errstr[256] = "";
    int got = outcome(data, len, errstr, sizeof(errstr));
    r->promised += corpus_check_promise(name, got, errstr, "command");
}

TEST(resp_corpus_replay) {
    replay r = {0};
    int files = corpus_each(CORPUS_DIR, replay_one, &r);
    /* The seeds must be there: an empty or missing corpus would make this test vacuous. */
    CHECK_MSG(r.promised >= 30, "only %d seed files in %s", r.promised, CORPUS_DIR);
    CHECK(files >= r.promised);
}
