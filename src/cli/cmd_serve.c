/*
 * cmd_serve.c — `tide serve`: run tided, the store node, in the foreground.
 *
 * Settings come from defaults, then a JSON config file (--config), then command-line
 * flags, each later source overriding the earlier. Every key of the config file has a flag
 * of the same name with '-' for '_'; an unknown key or a value of the wrong type stops the
 * start with a message naming it.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "common/hostport.h"
#include "common/log.h"
#include "proto/frame.h"
#include "server/server.h"
#include "tide.h"

static const char serve_help[] =
    "usage: tide serve [OPTIONS]\n"
    "\n"
    "Run tided, a tide store node, in the foreground until SIGTERM or SIGINT.\n"
    "\n"
    "  --port P              native protocol port (default 7474; 0 = any free port)\n"
    "  --bind ADDR           IPv4 or IPv6 address to listen on (default 127.0.0.1; ::1,\n"
    "                        [::1]; :: takes IPv4 too unless net.ipv6.bindv6only is 1)\n"
    "  --metrics-port P      HTTP port for /metrics and /health (default port+1, or any free\n"
    "                        port with --port 0; 0 = off)\n"
    "  --resp-port P         also speak RESP2 (Redis protocol) on port P (default 0 = off)\n"
    "  --capacity SIZE       memory pool size, e.g. 4GiB (default 1GiB)\n"
    "  --threads N           I/O worker threads (default 2)\n"
    "  --policy NAME         eviction policy: chain (the default), lru or s3fifo\n"
    "  --prefault            touch the whole pool at start (slower start, no first-touch cost)\n"
    "  --hugepages           back the pool with hugepages when the system has them reserved\n"
    "  --auth-token-file F   require clients to present the token in file F\n"
    "  --max-conns N         connections beyond N are refused (default 1024; at least 1); with\n"
    "                        a token, authenticated ones only\n"
    "  --max-preauth-conns N with a token: connections that have not authenticated yet (default\n"
    "                        64); when all N are taken the oldest is cut for a new one, so\n"
    "                        they never take a slot of --max-conns\n"
    "  --max-keys N          keys in one request (default 4096)\n"
    "  --max-frame SIZE      bytes in one request, values included (default 4GiB; at least\n"
    "                        4KiB)\n"
    "  --max-value SIZE      largest value (default: the pool size; at least 1)\n"
    "  --idle-timeout S      close connections stalled mid-request for S seconds (default 60;\n"
    "                        0 = never)\n"
    "  --log-level L         error, warn, info (default) or debug\n"
    "  --ready-file F        write \"PORT METRICS_PORT\" to F once listening (for scripts)\n"
    "  --etcd URLS           register in etcd (http://host:2379[,...]) so that clients of\n"
    "                        etcd://host:2379/NAME find this node; needs --cluster\n"
    "  --cluster NAME        the cluster to join (letters, digits, '-', '_', '.')\n"
    "  --advertise HOST:PORT the address clients should use (default BIND:PORT, an IPv6\n"
    "                        one as [::1]:PORT; needed when binding 0.0.0.0 or ::)\n"
    "  --etcd-ttl S          lease TTL: a node that stops renewing drops out within S seconds\n"
    "                        (default 5; renewed every S/3)\n"
    "  --unix PATH           also listen on a Unix socket for same-host clients (unix://PATH),\n"
    "                        which map the whole pool read-write: see docs/UNIX.md\n"
    "  --unix-mode MODE      the socket file's permissions, octal (default 0600)\n"
    "  --unix-allow-uid LIST only these peer uids (comma-separated) may connect to it\n"
    "  --unix-lease-ms MS    lease on its pins and reservations (default 30000)\n"
    "  --disk-dir DIR        SSD tier: evicted objects spill to segment files in DIR, gets\n"
    "                        read them back, a restart finds them again (needs --disk-capacity;\n"
    "                        DIR must be a writable directory, made 0700 if missing; segment\n"
    "                        files are 0600)\n"
    "  --disk-capacity SIZE  SSD tier: bytes of segment files at most; the oldest segment\n"
    "                        goes first when full\n"
    "  --disk-segment SIZE   SSD tier: segment file size (default capacity/8, 1..64 MiB)\n"
    "  --disk-io MODE        SSD tier writes: auto (io_uring if the kernel allows, else\n"
    "                        pwritev), io_uring, or pwritev\n"
    "  --config FILE         JSON object with the same settings, e.g. {\"port\": 7474,\n"
    "                        \"capacity\": \"4GiB\", \"threads\": 2}; flags override it\n";

/* One setting: its name (as in the config file; the flag is --name with '-' for '_'). */
typedef enum { T_INT, T_SIZE, T_STR, T_BOOL } setting_type;

/* The Unix socket's settings (docs/UNIX.md). */
static int serve_unix_setting(server_config *cfg, const char *name, const char *val, long long iv,
                              char *err, size_t errlen) {
    char *end;
    if (!strcmp(name, "unix")) {
        if (!*val || strlen(val) >= sizeof(cfg->unix_path)) {
            snprintf(err, errlen, "unix: the socket path must be 1..%zu bytes",
                     sizeof(cfg->unix_path) - 1);
            return -1;
        }
        snprintf(cfg->unix_path, sizeof(cfg->unix_path), "%s", val);
    } else if (!strcmp(name, "unix_mode")) {
        unsigned long m = strtoul(val, &end, 8);
        if (!*val || *end || m > 0777) {
            snprintf(err, errlen,
                     "unix_mode: expected octal permission bits such as 0600 or "
                     "0660, got '%s'",
                     val);
            return -1;
        }
        cfg->unix_mode = (unsigned)m;
    } else if (!strcmp(name, "unix_allow_uid")) {
        cfg->unix_nallow = 0;
        for (const char *p = val; *p;) {
            unsigned long uid = strtoul(p, &end, 10);
            int max = (int)(sizeof(cfg->unix_allow_uid) / sizeof(cfg->unix_allow_uid[0]));
            if (end == p || (*end && *end != ',') || uid > UINT32_MAX - 1 ||
                cfg->unix_nallow == max) {
                snprintf(err, errlen,
                         "unix_allow_uid: expected up to %d numeric uids separated "
                         "by commas, got '%s'",
                         max, val);
                return -1;
            }
            cfg->unix_allow_uid[cfg->unix_nallow++] = (uint32_t)uid;
            p = *end ? end + 1 : end;
        }
        if (cfg->unix_nallow == 0) {
            snprintf(err, errlen, "unix_allow_uid: expected at least one uid");
            return -1;
        }
    } else if (!strcmp(name, "unix_lease_ms")) {
        if (iv < 1) {
            snprintf(err, errlen, "unix_lease_ms: must be at least 1");
            return -1;
        }
        cfg->unix_lease_ms = (uint32_t)iv;
    }
    return 0;
}

static int set_value(server_config *cfg, const char *name, const char *val, char *tokfile,
                     size_t toklen, char *err, size_t errlen) {
    static const struct {
        const char *name;
        setting_type type;
    } table[] = {
        {"port", T_INT},       {"bind", T_STR},           {"metrics_port", T_INT},
        {"capacity", T_SIZE},  {"threads", T_INT},        {"policy", T_STR},
        {"prefault", T_BOOL},  {"hugepages", T_BOOL},     {"auth_token_file", T_STR},
        {"max_conns", T_INT},  {"max_keys", T_INT},       {"max_frame", T_SIZE},
        {"max_value", T_SIZE}, {"idle_timeout", T_INT},   {"log_level", T_STR},
        {"ready_file", T_STR}, {"etcd", T_STR},           {"cluster", T_STR},
        {"advertise", T_STR},  {"etcd_ttl", T_INT},       {"unix", T_STR},
        {"unix_mode", T_STR},  {"unix_allow_uid", T_STR}, {"unix_lease_ms", T_INT},
        {"disk_dir", T_STR},   {"disk_capacity", T_SIZE}, {"disk_segment", T_SIZE},
        {"disk_io", T_STR},    {"resp_port", T_INT},      {"max_preauth_conns", T_INT},
    };
    int found = -1;
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
        if (strcmp(table[i].name, name) == 0) found = (int)i;
    if (found < 0) {
        snprintf(err, errlen, "unknown setting '%s'", name);
        return -1;
    }
    long long iv = 0;
    uint64_t sv = 0;
    if (table[found].type == T_INT) {
        char *end;
        errno = 0;
        iv = strtoll(val, &end, 10);
        if (!*val || *end || errno || iv < 0 || iv > 1000000000) {
            snprintf(err, errlen, "%s: expected a non-negative integer, got '%s'", name, val);
            return -1;
        }
    } else if (table[found].type == T_SIZE) {
        if (tide_size_parse(val, &sv) != 0) {
            snprintf(err, errlen, "%s: '%s' is not a size (examples: 4096, 512MB, 4GiB)", name,
                     val);
            return -1;
        }
    }
    if (!strcmp(name, "port") || !strcmp(name, "metrics_port") || !strcmp(name, "resp_port")) {
        if (iv > 65535) {
            snprintf(err, errlen, "%s: %lld is not a TCP port", name, iv);
            return -1;
        }
        *(!strcmp(name, "port") ? &cfg->port
          : !strcmp(name, "metrics_port") ? &cfg->metrics_port : &cfg->resp_port) = (int)iv;
    } else if (!strcmp(name, "bind")) {
        struct sockaddr_storage sa;
        socklen_t salen;
        char why[200];
        if (hostport_bind_addr(val, 0, &sa, &salen, cfg->bind, sizeof(cfg->bind), why,
                               sizeof(why)) != 0) {
            snprintf(err, errlen, "bind: %s", why);
            return -1;
        }
    } else if (!strcmp(name, "capacity")) {
        if (sv == 0) {
            snprintf(err, errlen, "capacity: must be above 0");
            return -1;
        }
        cfg->store.capacity = sv;
    } else if (!strcmp(name, "threads")) {
        if (iv < 1 || iv > 256) {
            snprintf(err, errlen, "threads: expected 1..256, got %lld", iv);
            return -1;
        }
        cfg->threads = (int)iv;
    } else if (!strcmp(name, "policy")) {
        int pol = store_policy_parse(val);
        if (pol < 0) {
            snprintf(err, errlen, "policy: expected " STORE_POLICY_NAMES ", got '%s'", val);
            return -1;
        }
        cfg->store.policy = pol;
    } else if (!strcmp(name, "prefault") || !strcmp(name, "hugepages")) {
        int b = !strcmp(val, "true") || !strcmp(val, "1");
        if (!b && strcmp(val, "false") && strcmp(val, "0")) {
            snprintf(err, errlen, "%s: expected true or false, got '%s'", name, val);
            return -1;
        }
        *(!strcmp(name, "prefault") ? &cfg->store.prefault : &cfg->store.hugepages) = b;
    } else if (!strcmp(name, "auth_token_file")) {
        snprintf(tokfile, toklen, "%s", val);
    } else if (!strcmp(name, "max_conns")) {
        if (iv < 1) {
            snprintf(err, errlen, "max_conns: must be at least 1 (0 would refuse every client)");
            return -1;
        }
        cfg->max_conns = (int)iv;
    } else if (!strcmp(name, "max_preauth_conns")) {
        if (iv < 1 || iv > 65536) {
            snprintf(err, errlen, "max_preauth_conns: expected 1..65536, got %lld", iv);
            return -1;
        }
        cfg->max_preauth_conns = (int)iv;
    } else if (!strcmp(name, "max_keys")) {
        if (iv < 1 || iv > TIDE_BATCH_MAX) {
            snprintf(err, errlen, "max_keys: expected 1..%d, got %lld", TIDE_BATCH_MAX, iv);
            return -1;
        }
        cfg->max_keys = (uint32_t)iv;
    } else if (!strcmp(name, "max_frame")) {
        if (sv < SERVER_MIN_MAX_FRAME || sv > FRAME_MAX_FRAME_CAP) {
            snprintf(err, errlen,
                     "max_frame: expected %u bytes .. 256TiB, got '%s' (a request must hold a "
                     "HELLO and a %d-byte key)",
                     SERVER_MIN_MAX_FRAME, val, TIDE_KEY_MAX);
            return -1;
        }
        cfg->max_frame = sv;
    } else if (!strcmp(name, "max_value")) {
        if (sv == 0) {
            snprintf(err, errlen,
                     "max_value: must be at least 1 byte (leave it out for the pool's size)");
            return -1;
        }
        cfg->max_value = sv;
    } else if (!strcmp(name, "idle_timeout")) {
        cfg->idle_timeout_s = (uint32_t)iv;
    } else if (!strcmp(name, "log_level")) {
        if (log_set_level(val) < 0) {
            snprintf(err, errlen, "log_level: expected error, warn, info or debug, got '%s'", val);
            return -1;
        }
    } else if (!strcmp(name, "ready_file")) {
        cfg->ready_file = strdup(val);
    } else if (!strcmp(name, "etcd")) {
        if (!*val || strlen(val) >= sizeof(cfg->etcd)) {
            snprintf(err, errlen, "etcd: expected http://HOST:PORT[,...], got '%s'", val);
            return -1;
        }
        snprintf(cfg->etcd, sizeof(cfg->etcd), "%s", val);
    } else if (!strcmp(name, "cluster")) {
        size_t n = strspn(val, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.");
        if (!*val || val[n] || n >= sizeof(cfg->cluster)) {
            snprintf(err, errlen,
                     "cluster: expected 1..%zu letters, digits, '-', '_' or '.', "
                     "got '%s'",
                     sizeof(cfg->cluster) - 1, val);
            return -1;
        }
        snprintf(cfg->cluster, sizeof(cfg->cluster), "%s", val);
    } else if (!strcmp(name, "advertise")) {
        hostport hp;
        char why[200] = "too long";
        if (strlen(val) >= sizeof(cfg->advertise) ||
            hostport_parse(val, strlen(val), 0, &hp, why, sizeof(why)) != 0) {
            snprintf(err, errlen, "advertise: expected HOST:PORT, got '%s': %s", val, why);
            return -1;
        }
        snprintf(cfg->advertise, sizeof(cfg->advertise), "%s", val);
    } else if (!strcmp(name, "etcd_ttl")) {
        if (iv < 2 || iv > 3600) {
            snprintf(err, errlen, "etcd_ttl: expected 2..3600 seconds, got %lld", iv);
            return -1;
        }
        cfg->etcd_ttl_s = (int)iv;
    } else if (!strncmp(name, "unix", 4)) {
        return serve_unix_setting(cfg, name, val, iv, err, errlen);
    } else if (!strcmp(name, "disk_dir")) {
        static char disk_dir[512]; /* one serve per process; nothing to free on any exit */
        if (strlen(val) >= sizeof(disk_dir)) {
            snprintf(err, errlen, "disk_dir: longer than %zu bytes", sizeof(disk_dir) - 1);
            return -1;
        }
        snprintf(disk_dir, sizeof(disk_dir), "%s", val);
        cfg->store.disk_dir = disk_dir;
    } else if (!strcmp(name, "disk_capacity") || !strcmp(name, "disk_segment")) {
        *(!strcmp(name, "disk_capacity") ? &cfg->store.disk_capacity : &cfg->store.disk_segment) =
            sv;
    } else if (!strcmp(name, "disk_io")) {
        if ((cfg->store.disk_io = store_disk_io_parse(val)) < 0) {
            snprintf(err, errlen, "disk_io: expected auto, io_uring or pwritev, got '%s'", val);
            return -1;
        }
    }
    return 0;
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

static int load_config(server_config *cfg, const char *path, char *tokfile, size_t toklen,
                       char *err, size_t errlen) {
    char *text = read_file(path, err, errlen);
    if (!text) return -1;
    cJSON *root = cJSON_Parse(text);
    if (!root || !cJSON_IsObject(root)) {
        const char *at = cJSON_GetErrorPtr();
        int line = 1, col = 1;
        for (const char *p = text; at && p < at && *p; p++) {
            if (*p == '\n')
                line++, col = 1;
            else
                col++;
        }
        snprintf(err, errlen, "%s:%d:%d: not a JSON object", path, line, col);
        cJSON_Delete(root);
        free(text);
        return -1;
    }
    int rc = 0;
    for (cJSON *it = root->child; it && rc == 0; it = it->next) {
        char val[512], sub[400];
        if (cJSON_IsString(it))
            snprintf(val, sizeof(val), "%s", it->valuestring);
        else if (cJSON_IsBool(it))
            snprintf(val, sizeof(val), "%s", cJSON_IsTrue(it) ? "true" : "false");
        else if (cJSON_IsNumber(it) && it->valuedouble == (double)(long long)it->valuedouble)
            snprintf(val, sizeof(val), "%lld", (long long)it->valuedouble);
        else {
            snprintf(err, errlen, "%s: %s: expected a string, number or boolean", path, it->string);
            rc = -1;
            break;
        }
        if (set_value(cfg, it->string, val, tokfile, toklen, sub, sizeof(sub)) != 0) {
            snprintf(err, errlen, "%s: %s", path, sub);
            rc = -1;
        }
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
    return 0;
}

int cmd_serve(int argc, char **argv) {
    server_config cfg;
    server_config_defaults(&cfg);
    char err[512], tokfile[512] = "";
    /* The config file goes first, wherever it is on the line, so flags override it. */
    for (int i = 1; i < argc; i++) {
        if (cli_is_help(argv[i])) {
            fputs(serve_help, stdout);
            return 0;
        }
        if (strcmp(argv[i], "--config") == 0) {
            if (i + 1 >= argc) return cli_usage_error("serve", "--config needs a FILE");
            if (load_config(&cfg, argv[i + 1], tokfile, sizeof(tokfile), err, sizeof(err))) {
                fprintf(stderr, "tide serve: %s\n", err);
                return 2;
            }
        }
    }
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--config") == 0) {
            i++;
            continue;
        }
        if (strncmp(argv[i], "--", 2) != 0)
            return cli_usage_error("serve", "unexpected argument '%s'", argv[i]);
        char name[64];
        snprintf(name, sizeof(name), "%s", argv[i] + 2);
        for (char *p = name; *p; p++)
            if (*p == '-') *p = '_';
        const char *val;
        if (!strcmp(name, "prefault") || !strcmp(name, "hugepages"))
            val = "true";
        else if (i + 1 < argc)
            val = argv[++i];
        else
            return cli_usage_error("serve", "%s needs a value", argv[i]);
        if (set_value(&cfg, name, val, tokfile, sizeof(tokfile), err, sizeof(err)) != 0)
            return cli_usage_error("serve", "%s", err);
    }
    if (tokfile[0] && load_token(&cfg, tokfile, err, sizeof(err)) != 0) {
        fprintf(stderr, "tide serve: %s\n", err);
        return 2;
    }
    int rc;
    if (!cfg.etcd[0] != !cfg.cluster[0])
        rc = cli_usage_error("serve", "--etcd and --cluster go together");
    else if ((cfg.store.disk_dir && cfg.store.disk_dir[0]) != (cfg.store.disk_capacity > 0))
        rc = cli_usage_error("serve", "--disk-dir and --disk-capacity go together");
    else
        rc = server_run(&cfg) == 0 ? 0 : 1;
    free((void *)cfg.ready_file);
    return rc;
}
