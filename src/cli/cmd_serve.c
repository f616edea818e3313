/*
 * cmd_serve.c — `tide serve`: run tided, the store node, in the foreground.
 *
 * Settings come from defaults, then a JSON config file (--config), then command-line
 * flags, each later source overriding the earlier. One table (settings[]) says for every
 * setting its name, type, range, where it goes and its --help text; the flags (through the
 * shared parser, args.c), the config file and --help are all read from it. Every key of the
 * config file has a flag of the same name with '-' for '_'; an unknown key or a value of
 * the wrong type stops the start with a message naming it. A setting given twice keeps its
 * last value, and a string's earlier copy is freed.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "common/hostport.h"
#include "common/json_diag.h"
#include "common/log.h"
#include "common/redact.h"
#include "common/suggest.h"
#include "common/util.h"
#include "proto/frame.h"
#include "server/server.h"
#include "tide.h"

/* ---- the settings ------------------------------------------------------------------- */

/* What a setting parses its value as, and where it keeps it. */
typedef enum {
    T_INT,  /* a non-negative integer (at most 1e9) in [min, max]: a 4-byte int field */
    T_SIZE, /* a size ("4GiB") in [min, max]: a uint64_t field */
    T_BOOL, /* true/false (1/0); as a flag it takes no value: an int field */
    T_STR,  /* text copied into a char array field of `width` bytes */
    T_PATH, /* text kept in a malloc'd string (char * field): a repeat frees the old one */
    T_SET,  /* text handed to the setting's own parser */
} setting_type;

/* Everything the settings write: the server's configuration and the strings it borrows. */
typedef struct serve_state {
    server_config cfg;
    char *ready_file, *disk_dir, *token_file; /* owned; cfg points at the first two */
} serve_state;

/* One setting: its name as in the config file (the flag is --name with '-' for '_'), how
 * it parses, where it goes, and its --help entry. A bad value is told
 * "NAME: expected RANGE, got 'VALUE'" (RANGE is "MIN..MAX" unless range says it). */
typedef struct setting {
    const char *name;
    setting_type type;
    size_t off, width; /* the field in serve_state */
    uint64_t min, max; /* T_INT, T_SIZE */
    const char *range;
    /* T_SET: parse val into st; 0, or -1 with why (without the setting's name) filled. */
    int (*set)(serve_state *st, const char *val, char *why, size_t len);
    const char *arg;  /* the flag's value in --help ("P"), or NULL */
    const char *help; /* --help text; '\n' starts an indented continuation line */
} setting;

#define FIELD(f) offsetof(serve_state, f), sizeof(((serve_state *)0)->f)
#define INT_MAX_SETTING 1000000000ull

static int set_policy(serve_state *st, const char *val, char *why, size_t len) {
    int pol = store_policy_parse(val);
    if (pol < 0) {
        suggest sg;
        char hint[96];
        suggest_init(&sg, val);
        suggest_offer(&sg, "lru");
        suggest_offer(&sg, "s3fifo");
        suggest_offer(&sg, "chain");
        suggest_offer(&sg, "adapt");
        snprintf(why, len, "expected " STORE_POLICY_NAMES ", got '%s'%s", val,
                 suggest_hint(&sg, hint, sizeof(hint)));
        return -1;
    }
    st->cfg.store.policy = pol;
    return 0;
}

/* --metrics-port: a port, "auto" (any free one, the default) or 0/"off". */
static int set_metrics_port(serve_state *st, const char *val, char *why, size_t len) {
    if (!strcmp(val, "auto")) {
        st->cfg.metrics_port = SERVER_METRICS_AUTO;
        return 0;
    }
    if (!strcmp(val, "off")) {
        st->cfg.metrics_port = 0;
        return 0;
    }
    char *end;
    errno = 0;
    unsigned long p = strtoul(val, &end, 10);
    if (!*val || *end || errno || p > 65535 || val[0] == '-' || val[0] == '+') {
        snprintf(why, len, "expected a TCP port (1..65535), auto or off (0), got '%s'", val);
        return -1;
    }
    st->cfg.metrics_port = (int)p;
    return 0;
}

static int set_log_level(serve_state *st, const char *val, char *why, size_t len) {
    if (log_set_level(val) < 0) {
        suggest sg;
        char hint[96];
        suggest_init(&sg, val);
        suggest_offer(&sg, "error");
        suggest_offer(&sg, "warn");
        suggest_offer(&sg, "info");
        suggest_offer(&sg, "debug");
        snprintf(why, len, "expected error, warn, info or debug, got '%s'%s", val,
                 suggest_hint(&sg, hint, sizeof(hint)));
        return -1;
    }
    return 0;
}

static int set_etcd(serve_state *st, const char *val, char *why, size_t len) {
    if (!*val || strlen(val) >= sizeof(st->cfg.etcd)) {
        snprintf(why, len, "expected http://HOST:PORT[,...], got '%s'", val);
        return -1;
    }
    snprintf(st->cfg.etcd, sizeof(st->cfg.etcd), "%s", val);
    return 0;
}

static int set_cluster(serve_state *st, const char *val, char *why, size_t len) {
    server_config *cfg = &st->cfg;
    size_t n = strspn(val, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.");
    if (!*val || val[n] || n >= sizeof(cfg->cluster)) {
        snprintf(why, len, "expected 1..%zu letters, digits, '-', '_' or '.', got '%s'",
                 sizeof(cfg->cluster) - 1, val);
        return -1;
    }
    snprintf(cfg->cluster, sizeof(cfg->cluster), "%s", val);
    return 0;
}

static int set_bind(serve_state *st, const char *val, char *why, size_t len) {
    struct sockaddr_storage sa;
    socklen_t salen;
    return hostport_bind_addr(val, 0, &sa, &salen, st->cfg.bind, sizeof(st->cfg.bind), why, len)
               ? -1
               : 0;
}

static int set_advertise(serve_state *st, const char *val, char *why, size_t len) {
    server_config *cfg = &st->cfg;
    hostport hp;
    char reason[200] = "too long";
    if (strlen(val) >= sizeof(cfg->advertise) ||
        hostport_parse(val, strlen(val), 0, &hp, reason, sizeof(reason)) != 0) {
        snprintf(why, len, "expected HOST:PORT, got '%s': %s", val, reason);
        return -1;
    }
    snprintf(cfg->advertise, sizeof(cfg->advertise), "%s", val);
    return 0;
}

/* The Unix socket's settings (docs/UNIX.md). */
static int set_unix_path(serve_state *st, const char *val, char *why, size_t len) {
    server_config *cfg = &st->cfg;
    if (!*val || strlen(val) >= sizeof(cfg->unix_path)) {
        snprintf(why, len, "the socket path must be 1..%zu bytes", sizeof(cfg->unix_path) - 1);
        return -1;
    }
    snprintf(cfg->unix_path, sizeof(cfg->unix_path), "%s", val);
    return 0;
}

static int set_unix_mode(serve_state *st, const char *val, char *why, size_t len) {
    char *end;
    unsigned long m = strtoul(val, &end, 8);
    if (!*val || *end || m > 0777) {
        snprintf(why, len, "expected octal permission bits such as 0600 or 0660, got '%s'", val);
        return -1;
    }
    st->cfg.unix_mode = (unsigned)m;
    return 0;
}

static int set_unix_allow_uid(serve_state *st, const char *val, char *why, size_t len) {
    server_config *cfg = &st->cfg;
    int max = (int)(sizeof(cfg->unix_allow_uid) / sizeof(cfg->unix_allow_uid[0]));
    cfg->unix_nallow = 0; /* a repeat replaces the list */
    for (const char *p = val; *p;) {
        char *end;
        unsigned long uid = strtoul(p, &end, 10);
        if (end == p || (*end && *end != ',') || uid > UINT32_MAX - 1 || cfg->unix_nallow == max) {
            snprintf(why, len, "expected up to %d numeric uids separated by commas, got '%s'", max,
                     val);
            return -1;
        }
        cfg->unix_allow_uid[cfg->unix_nallow++] = (uint32_t)uid;
        p = *end ? end + 1 : end;
    }
    if (cfg->unix_nallow == 0) {
        snprintf(why, len, "expected at least one uid");
        return -1;
    }
    return 0;
}

static int set_disk_io(serve_state *st, const char *val, char *why, size_t len) {
    if ((st->cfg.store.disk_io = store_disk_io_parse(val)) < 0) {
        snprintf(why, len, "expected auto, io_uring or pwritev, got '%s'", val);
        return -1;
    }
    return 0;
}

/* max_frame's range, spelled out. */
_Static_assert(SERVER_MIN_MAX_FRAME == 4096 && TIDE_KEY_MAX == 256 &&
                   FRAME_MAX_FRAME_CAP == (1ull << 48),
               "update max_frame's range text");

/* Every setting, in --help order. */
static const setting settings[] = {
    {"port", T_INT, FIELD(cfg.port), 0, 65535, "a TCP port (0..65535)", NULL, "P",
     "native protocol port (default 7474; 0 = any free port)"},
    {"bind", T_SET, 0, 0, 0, 0, NULL, set_bind, "ADDR",
     "IPv4 or IPv6 address to listen on (default 127.0.0.1; ::1,\n"
     "[::1]; :: takes IPv4 too unless net.ipv6.bindv6only is 1)"},
    {"metrics_port", T_SET, 0, 0, 0, 0, NULL, set_metrics_port, "P",
     "HTTP port for /metrics and /health (default auto: any free\n"
     "port, logged and written to --ready-file, so neighbouring\n"
     "tideds never collide; give one for a fixed scrape target;\n"
     "0 or off = no HTTP listener)"},
    {"resp_port", T_INT, FIELD(cfg.resp_port), 0, 65535, "a TCP port (0..65535)", NULL, "P",
     "also speak RESP2 (Redis protocol) on port P (default 0 = off)"},
    {"capacity", T_SIZE, FIELD(cfg.store.capacity), 1, UINT64_MAX, "a size above 0", NULL, "SIZE",
     "memory pool size, e.g. 4GiB (default 1GiB)"},
    {"meta_budget", T_SIZE, FIELD(cfg.store.meta_budget), 1, UINT64_MAX, "a size above 0", NULL,
     "SIZE",
     "heap for the pool's per-object metadata (default capacity/2):\n"
     "puts evict to stay within it, as they do for pool space"},
    {"threads", T_INT, FIELD(cfg.threads), 1, 256, NULL, NULL, "N",
     "I/O worker threads (default 2)"},
    {"policy", T_SET, 0, 0, 0, 0, NULL, set_policy, "NAME",
     "eviction policy: " STORE_POLICY_NAMES " (default " STORE_POLICY_DEFAULT_NAME ")"},
    {"prefault", T_BOOL, FIELD(cfg.store.prefault), 0, 0, NULL, NULL, NULL,
     "touch the whole pool at start (slower start, no first-touch cost)"},
    {"hugepages", T_BOOL, FIELD(cfg.store.hugepages), 0, 0, NULL, NULL, NULL,
     "back the pool with hugepages when the system has them reserved"},
    {"auth_token_file", T_PATH, FIELD(token_file), 0, 0, NULL, NULL, "F",
     "require clients to present the token in file F"},
    {"max_conns", T_INT, FIELD(cfg.max_conns), 1, INT_MAX_SETTING,
     "at least 1 (0 would refuse every client)", NULL, "N",
     "connections beyond N are refused (default 1024; at least 1); with\n"
     "a token, authenticated ones only"},
    {"max_preauth_conns", T_INT, FIELD(cfg.max_preauth_conns), 1, 65536, NULL, NULL, "N",
     "with a token: connections that have not authenticated yet (default\n"
     "64); when all N are taken the oldest is cut for a new one, so\n"
     "they never take a slot of --max-conns"},
    {"max_keys", T_INT, FIELD(cfg.max_keys), 1, TIDE_BATCH_MAX, NULL, NULL, "N",
     "keys in one request (default 4096)"},
    {"max_frame", T_SIZE, FIELD(cfg.max_frame), SERVER_MIN_MAX_FRAME, FRAME_MAX_FRAME_CAP,
     "4096 bytes .. 256TiB (a request must hold a HELLO and a 256-byte key)", NULL, "SIZE",
     "bytes in one request, values included (default 4GiB; at least\n"
     "4KiB)"},
    {"max_value", T_SIZE, FIELD(cfg.max_value), 1, UINT64_MAX,
     "at least 1 byte (leave it out for the pool's size)", NULL, "SIZE",
     "largest value (default: the pool size; at least 1)"},
    {"idle_timeout", T_INT, FIELD(cfg.idle_timeout_s), 0, INT_MAX_SETTING, NULL, NULL, "S",
     "close connections stalled mid-request for S seconds (default 60;\n"
     "0 = never)"},
    {"write_stall_timeout", T_INT, FIELD(cfg.write_stall_timeout_s), 0, INT_MAX_SETTING, NULL, NULL,
     "S",
     "close connections whose replies have not been read for S seconds\n"
     "(default 30; 0 = never)"},
    {"log_level", T_SET, 0, 0, 0, 0, NULL, set_log_level, "L",
     "error, warn, info (default) or debug"},
    {"ready_file", T_PATH, FIELD(ready_file), 0, 0, NULL, NULL, "F",
     "write \"PORT METRICS_PORT\" to F once listening (for scripts)"},
    {"etcd", T_SET, 0, 0, 0, 0, NULL, set_etcd, "URLS",
     "register in etcd (http://host:2379[,...]) so that clients of\n"
     "etcd://host:2379/NAME find this node; needs --cluster"},
    {"cluster", T_SET, 0, 0, 0, 0, NULL, set_cluster, "NAME",
     "the cluster to join (letters, digits, '-', '_', '.')"},
    {"advertise", T_SET, 0, 0, 0, 0, NULL, set_advertise, "HOST:PORT",
     "the address clients should use (default BIND:PORT, an IPv6\n"
     "one as [::1]:PORT; needed when binding 0.0.0.0 or ::)"},
    {"etcd_ttl", T_INT, FIELD(cfg.etcd_ttl_s), 2, 3600, "2..3600 seconds", NULL, "S",
     "lease TTL: a node that stops renewing drops out within S seconds\n"
     "(default 5; renewed every S/3)"},
    {"unix", T_SET, 0, 0, 0, 0, NULL, set_unix_path, "PATH",
     "also listen on a Unix socket for same-host clients (unix://PATH),\n"
     "which map the whole pool read-write: see docs/UNIX.md"},
    {"unix_mode", T_SET, 0, 0, 0, 0, NULL, set_unix_mode, "MODE",
     "the socket file's permissions, octal (default 0600)"},
    {"unix_allow_uid", T_SET, 0, 0, 0, 0, NULL, set_unix_allow_uid, "LIST",
     "only these peer uids (comma-separated) may connect to it"},
    {"unix_lease_ms", T_INT, FIELD(cfg.unix_lease_ms), 1, INT_MAX_SETTING, "at least 1", NULL, "MS",
     "lease on its pins and reservations (default 30000)"},
    {"ucx_port", T_INT, FIELD(cfg.ucx_port), 0, 65535, "a TCP port (0..65535)", NULL, "P",
     "also serve values over UCX (active messages, zero-copy out of and\n"
     "into the pool; RMA only for clients on this host) with its\n"
     "listener on port P (0 = any free port); see docs/UCX.md"},
    {"disk_dir", T_PATH, FIELD(disk_dir), 0, 0, NULL, NULL, "DIR",
     "SSD tier: evicted objects spill to segment files in DIR, gets\n"
     "read them back, a restart finds them again (needs --disk-capacity;\n"
     "DIR must be a writable directory, made 0700 if missing; segment\n"
     "files are 0600)"},
    {"disk_capacity", T_SIZE, FIELD(cfg.store.disk_capacity), 0, UINT64_MAX, NULL, NULL, "SIZE",
     "SSD tier: bytes of segment files at most; the oldest segment\n"
     "goes first when full"},
    {"disk_segment", T_SIZE, FIELD(cfg.store.disk_segment), 0, UINT64_MAX, NULL, NULL, "SIZE",
     "SSD tier: segment file size (default capacity/8, 1..64 MiB)"},
    {"disk_io", T_SET, 0, 0, 0, 0, NULL, set_disk_io, "MODE",
     "SSD tier writes: auto (io_uring if the kernel allows, else\n"
     "pwritev), io_uring, or pwritev"},
};
#define NSETTINGS (sizeof(settings) / sizeof(settings[0]))

static const setting *setting_find(const char *name) {
    for (size_t i = 0; i < NSETTINGS; i++)
        if (!strcmp(settings[i].name, name)) return &settings[i];
    return NULL;
}

/* Set s from val; 0, or -1 with "LABEL: why" in err (LABEL names the flag or the file's
 * key). */
static int setting_apply(serve_state *st, const setting *s, const char *label, const char *val,
                         char *err, size_t errlen) {
    char why[400] = "";
    char *field = (char *)st + s->off;
    int bad = 0;
    switch (s->type) {
    case T_INT: {
        char *end;
        errno = 0;
        long long iv = strtoll(val, &end, 10);
        if (!*val || *end || errno || iv < 0 || (uint64_t)iv > INT_MAX_SETTING) {
            snprintf(why, sizeof(why), "expected a non-negative integer, got '%s'", val);
            break;
        }
        if ((uint64_t)iv < s->min || (uint64_t)iv > s->max) {
            bad = 1;
            break;
        }
        /* int and uint32_t fields alike: the value fits both. */
        _Static_assert(sizeof(int) == sizeof(uint32_t), "4-byte int fields");
        int v = (int)iv;
        memcpy(field, &v, sizeof(v));
        break;
    }
    case T_SIZE: {
        uint64_t sv;
        if (size_parse_user(val, 0, &sv, why, sizeof(why)) != 0) break;
        if (sv < s->min || sv > s->max) {
            bad = 1;
            break;
        }
        memcpy(field, &sv, sizeof(sv));
        break;
    }
    case T_BOOL: {
        int b = !strcmp(val, "true") || !strcmp(val, "1");
        if (!b && strcmp(val, "false") && strcmp(val, "0")) {
            snprintf(why, sizeof(why), "expected true or false, got '%s'", val);
            break;
        }
        memcpy(field, &b, sizeof(b));
        break;
    }
    case T_STR:
        if (strlen(val) >= s->width)
            snprintf(why, sizeof(why), "longer than %zu bytes", s->width - 1);
        else
            memcpy(field, val, strlen(val) + 1);
        break;
    case T_PATH: {
        char *copy = strdup(val), **slot = (char **)field;
        if (!copy) {
            snprintf(why, sizeof(why), "out of memory");
            break;
        }
        free(*slot);
        *slot = copy;
        break;
    }
    case T_SET:
        if (s->set(st, val, why, sizeof(why)) != 0 && !why[0])
            snprintf(why, sizeof(why), "bad value '%s'", val);
        break;
    }
    if (bad) {
        char range[64];
        if (!s->range)
            snprintf(range, sizeof(range), "%llu..%llu", (unsigned long long)s->min,
                     (unsigned long long)s->max);
        snprintf(why, sizeof(why), "expected %s, got '%s'", s->range ? s->range : range, val);
    }
    if (!why[0]) return 0;
    snprintf(err, errlen, "%s: %s", label, why);
    return -1;
}

/* --help, from the table. */
static void serve_help(FILE *f) {
    fputs("usage: tide serve [OPTIONS]\n"
          "\n"
          "Run tided, a tide store node, in the foreground until SIGTERM or SIGINT.\n"
          "\n",
          f);
    for (size_t i = 0; i < NSETTINGS; i++) {
        const setting *s = &settings[i];
        char flag[64];
        int n = snprintf(flag, sizeof(flag), "--%s%s%s", s->name, s->arg ? " " : "",
                         s->arg ? s->arg : "");
        for (int k = 2; k < n && flag[k] != ' '; k++)
            if (flag[k] == '_') flag[k] = '-';
        fprintf(f, "  %-21s ", flag);
        for (const char *p = s->help; *p;) {
            const char *nl = strchr(p, '\n');
            int len = nl ? (int)(nl - p) : (int)strlen(p);
            fprintf(f, "%.*s\n", len, p);
            if (!nl) break;
            p = nl + 1;
            fprintf(f, "%24s", "");
        }
    }
    fputs("  --config FILE         JSON object with the same settings, e.g. {\"port\": 7474,\n"
          "                        \"capacity\": \"4GiB\", \"threads\": 2}; flags override it\n",
          f);
}

static char *read_file(const char *path, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 > cap) {
            cap = cap ? cap * 2 : 8192;
            char *grown = realloc(buf, cap);
            if (!grown) break;
            buf = grown;
        }
        size_t r = fread(buf + len, 1, cap - len - 1, f);
        len += r;
        if (r == 0) break;
    }
    fclose(f);
    if (buf) buf[len] = '\0';
    return buf;
}

/* The closest setting's name to an unknown one, as a hint (" (did you mean 'x'?)"). */
static const char *setting_hint(const char *name, char *buf, size_t cap) {
    suggest sg;
    suggest_init(&sg, name);
    for (size_t i = 0; i < NSETTINGS; i++)
        suggest_offer(&sg, settings[i].name);
    return suggest_hint(&sg, buf, cap);
}

static int load_config(serve_state *st, const char *path, char *err, size_t errlen) {
    char *text = read_file(path, err, errlen);
    if (!text) return -1;
    /* The strict grammar first: cJSON takes some texts JSON refuses (0600 as 600). */
    char what[300] = "";
    int line = 1, col = 1;
    if (json_diagnose(text, strlen(text), &line, &col, what, sizeof(what)) != 0) {
        snprintf(err, errlen, "%s:%d:%d: %s", path, line, col, what);
        free(text);
        return -1;
    }
    cJSON *root = cJSON_Parse(text);
    if (!root || !cJSON_IsObject(root)) {
        if (root)
            snprintf(what, sizeof(what),
                     "the file holds a JSON %s; settings go in one object, like "
                     "{\"port\": 7474, \"capacity\": \"4GiB\"}",
                     cJSON_IsArray(root)    ? "array"
                     : cJSON_IsString(root) ? "string"
                                            : "value");
        else
            snprintf(what, sizeof(what), "not read by cJSON (nested too deep?)");
        snprintf(err, errlen, "%s: %s", path, what);
        cJSON_Delete(root);
        free(text);
        return -1;
    }
    int rc = 0;
    /* Every member in file order, so a key given twice ends with its last value. */
    for (cJSON *it = root->child; it && rc == 0; it = it->next) {
        char val[512], label[300], hint[96];
        snprintf(label, sizeof(label), "%s: %s", path, it->string);
        const setting *s = setting_find(it->string);
        if (!s) {
            snprintf(err, errlen, "%s: unknown setting '%s'%s", path, it->string,
                     setting_hint(it->string, hint, sizeof(hint)));
            rc = -1;
        } else if (cJSON_IsString(it)) {
            snprintf(val, sizeof(val), "%s", it->valuestring);
        } else if (cJSON_IsBool(it)) {
            snprintf(val, sizeof(val), "%s", cJSON_IsTrue(it) ? "true" : "false");
        } else if (cJSON_IsNumber(it) && it->valuedouble == (double)(long long)it->valuedouble) {
            snprintf(val, sizeof(val), "%lld", (long long)it->valuedouble);
        } else {
            snprintf(err, errlen, "%s: expected a string, number or boolean, got %s", label,
                     cJSON_IsNull(it)     ? "null"
                     : cJSON_IsArray(it)  ? "an array"
                     : cJSON_IsObject(it) ? "an object"
                                          : "a number with a fraction");
            rc = -1;
        }
        if (rc == 0) rc = setting_apply(st, s, label, val, err, errlen);
    }
    cJSON_Delete(root);
    free(text);
    return rc;
}

static int load_token(server_config *cfg, const char *path, char *err, size_t errlen) {
    char *t = read_file(path, err, errlen);
    if (!t) return -1;
    size_t n = strlen(t);
    while (n && (t[n - 1] == '\n' || t[n - 1] == '\r' || t[n - 1] == ' '))
        t[--n] = '\0';
    if (n == 0 || n >= sizeof(cfg->auth_token)) {
        snprintf(err, errlen, "auth token file %s: the token must be 1..%zu bytes", path,
                 sizeof(cfg->auth_token) - 1);
        free(t);
        return -1;
    }
    memcpy(cfg->auth_token, t, n + 1);
    free(t);
    redact_add_secret(cfg->auth_token); /* masked in every log line from here on */
    return 0;
}

/* ---- the command line ----------------------------------------------------------------- */

/* Flags are collected first and applied after every --config file, so they override the
 * files wherever they stand on the line. */
typedef struct serve_args {
    const char **configs; /* --config FILE, in order */
    size_t nconfigs;
    struct {
        const setting *s;
        const char *flag, *val;
    } * flags; /* the other flags, in order */
    size_t nflags;
} serve_args;

static int take_config(void *ctx, const char *cmd, const char *name, const char *val) {
    serve_args *a = ctx;
    a->configs[a->nconfigs++] = val;
    return 0;
}

/* One of these per setting: the flag's cli_flag.ctx points at it. */
typedef struct serve_flag_ctx {
    serve_args *a;
    const setting *s;
} serve_flag_ctx;

static int take_setting(void *ctx, const char *cmd, const char *name, const char *val) {
    serve_flag_ctx *x = ctx;
    serve_args *a = x->a;
    a->flags[a->nflags].s = x->s;
    a->flags[a->nflags].flag = name;
    a->flags[a->nflags].val = val ? val : "true"; /* a T_BOOL switch */
    a->nflags++;
    return 0;
}

static void serve_state_free(serve_state *st) {
    free(st->ready_file);
    free(st->disk_dir);
    free(st->token_file);
}

int cmd_serve(int argc, char **argv) {
    serve_state st = {0};
    server_config *cfg = &st.cfg;
    server_config_defaults(cfg);

    /* Each flag's name: "--" and the setting's with '-' for '_'. */
    static char names[NSETTINGS][40];
    serve_flag_ctx ctx[NSETTINGS];
    cli_flag flags[NSETTINGS + 1];
    serve_args a = {0};
    int rc = 2;
    a.configs = calloc((size_t)argc, sizeof(*a.configs));
    a.flags = calloc((size_t)argc, sizeof(*a.flags));
    if (!a.configs || !a.flags) {
        fprintf(stderr, "tide serve: out of memory\n");
        goto out;
    }
    for (size_t i = 0; i < NSETTINGS; i++) {
        snprintf(names[i], sizeof(names[i]), "--%s", settings[i].name);
        for (char *p = names[i]; *p; p++)
            if (*p == '_') *p = '-';
        ctx[i] = (serve_flag_ctx){&a, &settings[i]};
        flags[i] = (cli_flag){.name = names[i],
                              .type = settings[i].type == T_BOOL ? CLI_FLAG_SWITCH : CLI_FLAG_CALL,
                              .call = take_setting,
                              .ctx = &ctx[i]};
    }
    flags[NSETTINGS] =
        (cli_flag){.name = "--config", .type = CLI_FLAG_CALL, .call = take_config, .ctx = &a};
    const cli_spec spec = {"serve", flags, NSETTINGS + 1, serve_help, NULL, NULL};
    int prc = cli_flags_parse(&spec, argc, argv);
    if (prc) {
        rc = prc == 1 ? 0 : 2;
        goto out;
    }
    char err[600];
    for (size_t i = 0; i < a.nconfigs; i++) {
        if (load_config(&st, a.configs[i], err, sizeof(err)) != 0) {
            fprintf(stderr, "tide serve: %s\n", err);
            goto out;
        }
    }
    for (size_t i = 0; i < a.nflags; i++) {
        /* The message names the flag, and the setting as a config file spells it. */
        char label[100];
        snprintf(label, sizeof(label), "%s (%s)", a.flags[i].flag, a.flags[i].s->name);
        if (setting_apply(&st, a.flags[i].s, label, a.flags[i].val, err, sizeof(err)) != 0) {
            cli_usage_error("serve", "%s", err);
            goto out;
        }
    }
    cfg->ready_file = st.ready_file;
    cfg->store.disk_dir = st.disk_dir;
    if (st.token_file && load_token(cfg, st.token_file, err, sizeof(err)) != 0) {
        fprintf(stderr, "tide serve: %s\n", err);
        goto out;
    }
    if (!cfg->etcd[0] != !cfg->cluster[0])
        rc = cli_usage_error("serve", "--etcd and --cluster go together");
    else if ((cfg->store.disk_dir && cfg->store.disk_dir[0]) != (cfg->store.disk_capacity > 0))
        rc = cli_usage_error("serve", "--disk-dir and --disk-capacity go together");
    else
        rc = server_run(cfg) == 0 ? 0 : 1;
out:
    free(a.configs);
    free(a.flags);
    serve_state_free(&st);
    return rc;
}
