/*
 * test_resp_corpus.c — replays the RESP fuzz corpus (tests/fuzz/corpus/resp/, relative to
 * the repository root, where `make test` starts the runner) through the RESP parser.
 *
 * Every file must pass resp_check() (no crash — under the sanitizer build, no memory
 * error — and every property in tests/fuzz/resp_check.h). Files whose names promise an
 * outcome (ok-*, need-*, err-CODE-*; see tests/fuzz/gen_resp_corpus.py) must end that way.
 */
#include <dirent.h>
#include <stdio.h>

#include "fuzz/resp_check.h"
#include "harness.h"
#include "tide.h"

#define CORPUS_DIR "tests/fuzz/corpus/resp"

static uint8_t *slurp(const char *path, size_t *len) {
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

TEST(resp_corpus_replay) {
    DIR *dir = opendir(CORPUS_DIR);
    CHECK_MSG(dir != NULL, "cannot open %s (run from the repository root)", CORPUS_DIR);
    struct dirent *de;
    int files = 0, promised = 0;
    while ((de = readdir(dir)) != NULL) {
        const char *name = de->d_name;
        if (name[0] == '.') continue;
        char path[512];
        snprintf(path, sizeof(path), "%s/%s", CORPUS_DIR, name);
        size_t len = 0;
        uint8_t *data = slurp(path, &len);
        CHECK_MSG(data != NULL, "cannot read %s", path);
        const char *bad = resp_check(data, len);
        CHECK_MSG(bad == NULL, "%s: %s", name, bad);
        char errstr[256] = "";
        int got = outcome(data, len, errstr, sizeof(errstr));
        if (!strncmp(name, "ok-", 3)) {
            CHECK_MSG(got == 0, "%s: want every command parsed, got %d (%s)", name, got, errstr);
            promised++;
        } else if (!strncmp(name, "need-", 5)) {
            CHECK_MSG(got == 1, "%s: want a cut-short command, got %d (%s)", name, got, errstr);
            promised++;
        } else if (!strncmp(name, "err-", 4)) {
            const char *code = name + 4, *dash = strchr(code, '-');
            size_t cl = dash ? (size_t)(dash - code) : strlen(code);
            CHECK_MSG(got < 0 && strlen(tide_errname(got)) == cl &&
                          strncmp(tide_errname(got), code, cl) == 0,
                      "%s: want %.*s, got %d (%s)", name, (int)cl, code, got, errstr);
            CHECK_MSG(errstr[0] != '\0', "%s: error without a message", name);
            promised++;
        }
        free(data);
        files++;
    }
    closedir(dir);
    /* The seeds must be there: an empty or missing corpus would make this test vacuous. */
    CHECK_MSG(promised >= 30, "only %d seed files in %s", promised, CORPUS_DIR);
    CHECK(files >= promised);
}
