/*
 * cmd_kv.c — the key-value commands for people and scripts, on any backend URL:
 *   tide put URL KEY [FILE|-]     tide get URL KEY [FILE|-]
 *   tide rm URL KEY...            tide exists URL KEY...        tide stat URL [--json]
 * Exit codes: 0 success, 1 the operation failed (a missing key, say), 2 usage errors (a
 * URL of a store that would not outlive the command, mem:// or an empty one, among them).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli/cli.h"
#include "common/stats_fields.h"
#include "common/util.h"
#include "tide.h"

/* A store these commands may use: one that outlives the command. An empty URL opens
 * mem:// (tide_open's default), and a mem:// store lives in this process: a put into it is
 * gone when the command exits (with disk_dir too: only objects evicted from memory reach
 * the disk), and a get, rm, exists or stat sees a store nobody else ever wrote. So both
 * are refused with the reason, as a usage error (2). */
static int check_lasting(const char *cmd, const char *where) {
    if (!where[0]) {
        fprintf(stderr,
                "tide %s: the store URL is empty (an unset variable?): it would open mem://, a "
                "store inside this command that is gone when it exits. Give a store that "
                "outlives it: tide://HOST:PORT, unix://PATH or etcd://HOST:PORT/CLUSTER\n",
                cmd);
        return 2;
    }
    if (strncasecmp(where, "mem://", 6) == 0) {
        char shown[CLI_URL_MAX];
        fprintf(stderr,
                "tide %s: %s is a store inside this command: %s when it exits. Give a store "
                "that outlives it: tide://HOST:PORT, unix://PATH or etcd://HOST:PORT/CLUSTER "
                "(mem:// is for programs that link libtide, and for tide bench and demo)\n",
                cmd, cli_redact(where, shown, sizeof(shown)),
                strcmp(cmd, "put") == 0 ? "what it stores is gone"
                                        : "it starts empty every time and is gone");
        return 2;
    }
    return 0;
}

/* Open the store a command names: 0, or the exit code (1 cannot open, 2 refused). */
static int open_store(const char *cmd, const char *where, tide_store **s) {
    int rc = check_lasting(cmd, where);
    if (rc) return rc;
    rc = tide_open(where, s);
    char shown[CLI_URL_MAX];
    if (rc)
        fprintf(stderr, "tide %s: cannot open %s: %s\n", cmd,
                cli_redact(where, shown, sizeof(shown)), tide_errmsg(NULL));
    return rc ? 1 : 0;
}

static int want_help(int argc, char **argv, const char *text) {
    for (int i = 1; i < argc; i++) {
        if (cli_is_help(argv[i])) {
            fputs(text, stdout);
            return 1;
        }
    }
    return 0;
}

/* Read a whole file (or stdin for "-") into a malloc'd buffer. NULL, with errno set, when
 * it cannot be opened or read to its end: a read that fails part-way is an error, never a
 * shorter value. */
static uint8_t *slurp(const char *path, size_t *len) {
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    if (!f) return NULL;
    uint8_t *buf = NULL;
    size_t n = 0, cap = 0;
    int e = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? cap * 2 : 1 << 16;
            uint8_t *grown = realloc(buf, cap);
            if (!grown) {
                e = ENOMEM;
                break;
            }
            buf = grown;
        }
        errno = 0;
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0 || ferror(f)) {
            if (ferror(f)) e = errno ? errno : EIO;
            break;
        }
    }
    if (f != stdin) fclose(f);
    if (e) {
        free(buf);
        errno = e;
        return NULL;
    }
    *len = n;
    return buf;
}

int cmd_put(int argc, char **argv) {
    static const char help[] =
        "usage: tide put URL KEY [FILE|-]\n\nStore the bytes of FILE (standard input when FILE "
        "is - or absent) under KEY.\n\nURL is a store that outlives the command: tide://, "
        "unix:// or etcd://. mem:// and an empty URL are refused: such a store is gone when "
        "the command exits.\n";
    if (want_help(argc, argv, help)) return 0;
    if (argc < 3 || argc > 4) return cli_usage_error("put", "expected URL KEY [FILE|-]");
    int orc = check_lasting("put", argv[1]); /* before reading a value only to lose it */
    if (orc) return orc;
    const char *path = argc == 4 ? argv[3] : "-";
    size_t len = 0;
    uint8_t *val = slurp(path, &len);
    if (!val) {
        fprintf(stderr, "tide put: cannot read %s: %s\n", path, strerror(errno));
        return 1;
    }
    tide_store *s;
    if ((orc = open_store("put", argv[1], &s))) {
        free(val);
        return orc;
    }
    int rc = tide_put(s, argv[2], strlen(argv[2]), val, len);
    if (rc) fprintf(stderr, "tide put: %s\n", tide_errmsg(s));
    tide_close(s);
    free(val);
    return rc ? 1 : 0;
}

int cmd_get(int argc, char **argv) {
    static const char help[] = "usage: tide get URL KEY [FILE|-]\n\nWrite the value of KEY to "
                               "FILE (standard output when FILE is - or absent).\n";
    if (want_help(argc, argv, help)) return 0;
    if (argc < 3 || argc > 4) return cli_usage_error("get", "expected URL KEY [FILE|-]");
    tide_store *s;
    int orc = open_store("get", argv[1], &s);
    if (orc) return orc;
    size_t len = 0;
    uint8_t *buf = NULL;
    int rc = tide_get(s, argv[2], strlen(argv[2]), NULL, 0, &len);
    if (rc == TIDE_EBUFSMALL) {
        buf = malloc(len);
        rc = buf ? tide_get(s, argv[2], strlen(argv[2]), buf, len, &len) : -ENOMEM;
    }
    if (rc) {
        fprintf(stderr, "tide get: %s\n", rc == -ENOMEM ? "out of memory" : tide_errmsg(s));
    } else {
        const char *path = argc == 4 ? argv[3] : "-";
        FILE *f = strcmp(path, "-") == 0 ? stdout : fopen(path, "wb");
        if (!f || fwrite(buf, 1, len, f) != len || (f != stdout && fclose(f) != 0)) {
            fprintf(stderr, "tide get: cannot write %s: %s\n", path, strerror(errno));
            rc = 1;
        }
    }
    free(buf);
    tide_close(s);
    return rc ? 1 : 0;
}

int cmd_rm(int argc, char **argv) {
    static const char help[] = "usage: tide rm URL KEY...\n\nRemove keys. Exits 1 if any key "
                               "was not there.\n";
    if (want_help(argc, argv, help)) return 0;
    if (argc < 3) return cli_usage_error("rm", "expected URL KEY...");
    tide_store *s;
    int orc = open_store("rm", argv[1], &s);
    if (orc) return orc;
    int bad = 0;
    for (int i = 2; i < argc; i++) {
        int rc = tide_remove(s, argv[i], strlen(argv[i]));
        if (rc) {
            fprintf(stderr, "tide rm: %s: %s\n", argv[i], tide_strerror(rc));
            bad = 1;
        }
    }
    tide_close(s);
    return bad;
}

int cmd_exists(int argc, char **argv) {
    static const char help[] = "usage: tide exists URL KEY...\n\nPrint 'present' or 'absent' "
                               "for each key. Exits 0 when all are present, else 1.\n";
    if (want_help(argc, argv, help)) return 0;
    if (argc < 3) return cli_usage_error("exists", "expected URL KEY...");
    tide_store *s;
    int orc = open_store("exists", argv[1], &s);
    if (orc) return orc;
    int all = 1;
    for (int i = 2; i < argc; i++) {
        int rc = tide_exists(s, argv[i], strlen(argv[i]));
        if (rc < 0) {
            fprintf(stderr, "tide exists: %s\n", tide_errmsg(s));
            all = 0;
            continue;
        }
        printf("%s\t%s\n", argv[i], rc ? "present" : "absent");
        all &= rc;
    }
    tide_close(s);
    return all ? 0 : 1;
}

int cmd_stat(int argc, char **argv) {
    static const char help[] = "usage: tide stat URL [--json]\n\nPrint the store's figures: "
                               "the same ones tided serves at /metrics.\n";
    if (want_help(argc, argv, help)) return 0;
    int json = argc == 3 && strcmp(argv[2], "--json") == 0;
    if (argc < 2 || argc > 3 || (argc == 3 && !json))
        return cli_usage_error("stat", "expected URL [--json]");
    tide_store *s;
    int orc = open_store("stat", argv[1], &s);
    if (orc) return orc;
    tide_stats st;
    int rc = tide_stats_get(s, &st, sizeof(st));
    if (rc) {
        /* The handle's message says what failed (e.g. no etcd members registered), where
         * the code alone would say "No route to host". */
        fprintf(stderr, "tide stat: %s\n", tide_errmsg(s));
        tide_close(s);
        return 1;
    }
    tide_close(s);
    const struct {
        const char *name;
        uint64_t v;
        int bytes;
    } rows[] = {
        {"capacity_bytes", st.capacity_bytes, 1},
        {"used_bytes", st.used_bytes, 1},
        {"objects", st.objects, 0},
        {"puts", st.puts, 0},
        {"put_dups", st.put_dups, 0},
        {"gets", st.gets, 0},
        {"misses", st.misses, 0},
        {"evictions", st.evictions, 0},
        {"evicted_bytes", st.evicted_bytes, 1},
        {"checksum_errors", st.checksum_errors, 0},
        {"bytes_in", st.bytes_in, 1},
        {"bytes_out", st.bytes_out, 1},
        {"meta_bytes", st.meta_bytes, 1},
        {"pinned", st.pinned, 0},
        {"reserved", st.reserved, 0},
    };
    size_t n = sizeof(rows) / sizeof(rows[0]);
    if (json) printf("{");
    for (size_t i = 0; i < n; i++) {
        if (json) {
            printf("%s\"%s\": %llu", i ? ", " : "", rows[i].name, (unsigned long long)rows[i].v);
        } else {
            char human[32] = "";
            if (rows[i].bytes) size_format(rows[i].v, human, sizeof(human));
            printf("%-16s %20llu  %s\n", rows[i].name, (unsigned long long)rows[i].v, human);
        }
    }
    /* The SSD tier's figures: always in JSON, in text when the store has the tier. */
    for (size_t i = 0; i < stats_disk_nfields && (json || st.disk_capacity_bytes); i++) {
        const stats_field *f = &stats_disk_fields[i];
        uint64_t v = stats_field_get(&st, f);
        if (json) {
            printf(", \"%s\": %llu", f->name, (unsigned long long)v);
        } else {
            char human[32] = "";
            if (f->bytes) size_format(v, human, sizeof(human));
            printf("%-20s %16llu  %s\n", f->name, (unsigned long long)v, human);
        }
    }
    if (json) printf("}\n");
    if (!json) {
        uint64_t lookups = st.gets + st.misses;
        printf("%-16s %19.1f%%\n", "hit_rate",
               lookups ? 100.0 * (double)st.gets / (double)lookups : 0.0);
        if (st.objects)
            printf("%-16s %20.1f\n", "meta_per_object", (double)st.meta_bytes / (double)st.objects);
    }
    return 0;
}
