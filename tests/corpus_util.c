/*
 * corpus_util.c — see corpus_util.h.
 */
#include "corpus_util.h"

#include <dirent.h>

#include "harness.h"
#include "tide.h"

static uint8_t *read_whole(const char *path, size_t *len) {
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

int corpus_each(const char *dir, corpus_fn fn, void *arg) {
    DIR *d = opendir(dir);
    CHECK_MSG(d != NULL, "cannot open %s (run from the repository root)", dir);
    struct dirent *e;
    int files = 0;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char path[512];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        size_t len = 0;
        uint8_t *data = read_whole(path, &len);
        CHECK_MSG(data != NULL, "cannot read %s", path);
        fn(e->d_name, data, len, arg);
        free(data);
        files++;
    }
    closedir(d);
    return files;
}

int corpus_check_promise(const char *name, int got, const char *errstr, const char *unit) {
    if (strncmp(name, "ok-", 3) == 0) {
        CHECK_MSG(got == 0, "%s: want every %s decoded, got %d (%s)", name, unit, got, errstr);
        return 1;
    }
    if (strncmp(name, "need-", 5) == 0) {
        CHECK_MSG(got == 1, "%s: want a cut-short %s, got %d (%s)", name, unit, got, errstr);
        return 1;
    }
    if (strncmp(name, "err-", 4) == 0) {
        const char *code = name + 4, *dash = strchr(code, '-');
        size_t cl = dash ? (size_t)(dash - code) : strlen(code);
        CHECK_MSG(got < 0 && strlen(tide_errname(got)) == cl &&
                      strncmp(tide_errname(got), code, cl) == 0,
                  "%s: want %.*s, got %d %s (%s)", name, (int)cl, code, got,
                  got < 0 ? tide_errname(got) : "", errstr);
        CHECK_MSG(errstr[0] != '\0', "%s: error without a message", name);
        return 1;
    }
    return 0;
}
