/*
 * test_proto_corpus.c — replays the fuzz corpus (tests/fuzz/corpus/frame/, relative to the
 * repository root, where `make test` starts the runner) through the frame decoder.
 *
 * Every file must pass frame_check() (no crash — under the sanitizer build, no memory
 * error — and every property in tests/fuzz/frame_check.h). Files whose names promise an
 * outcome (ok-*, need-*, err-CODE-*; see tests/fuzz/gen_frame_corpus.c) must end that way.
 */
#include <dirent.h>
#include <stdio.h>

#include "fuzz/frame_check.h"
#include "harness.h"
#include "tide.h"

#define CORPUS_DIR "tests/fuzz/corpus/frame"

static uint8_t *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    uint8_t *b = malloc(cap);
    size_t got;
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

static void check_expected(const char *name, const uint8_t *data, size_t len) {
    char errstr[256] = "";
    int got = outcome(data, len, errstr, sizeof(errstr));
    if (strncmp(name, "ok-", 3) == 0) {
        CHECK_MSG(got == 0, "%s: want every frame decoded, got %d (%s)", name, got, errstr);
    } else if (strncmp(name, "need-", 5) == 0) {
        CHECK_MSG(got == 1, "%s: want a cut-short frame, got %d (%s)", name, got, errstr);
    } else if (strncmp(name, "err-", 4) == 0) {
        const char *code = name + 4;
        const char *dash = strchr(code, '-');
        size_t cl = dash ? (size_t)(dash - code) : strlen(code);
        CHECK_MSG(got < 0 && strlen(tide_errname(got)) == cl &&
                      strncmp(tide_errname(got), code, cl) == 0,
                  "%s: want %.*s, got %d %s (%s)", name, (int)cl, code, got,
                  got < 0 ? tide_errname(got) : "", errstr);
        CHECK_MSG(errstr[0] != '\0', "%s: error without a message", name);
    }
}

TEST(proto_corpus_replay) {
    DIR *dir = opendir(CORPUS_DIR);
    CHECK_MSG(dir != NULL, "cannot open %s (run from the repository root)", CORPUS_DIR);
    struct dirent *de;
    int files = 0, promised = 0;
    while ((de = readdir(dir)) != NULL) {
        if (de->d_name[0] == '.') continue;
        char path[512];
        snprintf(path, sizeof(path), "%s/%s", CORPUS_DIR, de->d_name);
        size_t len = 0;
        uint8_t *data = read_file(path, &len);
        CHECK_MSG(data != NULL, "cannot read %s", path);
        const char *bad = frame_check(data, len);
        CHECK_MSG(bad == NULL, "%s: %s", de->d_name, bad);
        check_expected(de->d_name, data, len);
        if (!strncmp(de->d_name, "ok-", 3) || !strncmp(de->d_name, "need-", 5) ||
            !strncmp(de->d_name, "err-", 4))
            promised++;
        free(data);
        files++;
    }
    closedir(dir);
    /* The seeds must be there: an empty or missing corpus would make this test vacuous. */
    CHECK_MSG(promised >= 50, "only %d seed files in %s", promised, CORPUS_DIR);
    CHECK(files >= promised);
}
