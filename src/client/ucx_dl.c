/*
 * ucx_dl.c — UCX's libucp and libucs opened with dlopen on first use (ucx_dl.h): the
 * library names of UCX's ABI (libucp.so.0, libucs.so.0), each symbol looked up once; the
 * table is filled under a pthread_once and never changes after.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/ucx_dl.h"
#include "proto/ucx_msg.h"

#ifdef TIDE_HAVE_UCX
struct ucx_dl_fns ucx_dl;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int loaded = -1;
static char why[256];

static int sym(void *lib, const char *libname, const char *name, void *slot) {
    void *p = dlsym(lib, name);
    if (!p) {
        snprintf(why, sizeof(why), "UCX: %s has no %s (UCX older than 1.12?)", libname, name);
        return -1;
    }
    memcpy(slot, &p, sizeof(p));
    return 0;
}

/* lib (libucs, libucp) from TIDE_UCX_LIBDIR when set (a UCX of one's choice, e.g. a
 * CUDA-enabled one: PyPI's libucx-cu12 keeps its libraries in site-packages/libucx/lib, some
 * without the .so.0 name), else by the loader's search (LD_LIBRARY_PATH, the system's). */
static void *open_lib(const char *lib) {
    const char *dir = getenv("TIDE_UCX_LIBDIR");
    if (!dir || !*dir) {
        char name[64];
        snprintf(name, sizeof(name), "%s.so.0", lib);
        return dlopen(name, RTLD_NOW | RTLD_GLOBAL);
    }
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s.so.0", dir, lib);
    void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
        snprintf(path, sizeof(path), "%s/%s.so", dir, lib);
        h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    }
    return h;
}

static void load(void) {
    void *ucs = open_lib("libucs");
    void *ucp = ucs ? open_lib("libucp") : NULL;
    if (!ucp) {
        const char *dir = getenv("TIDE_UCX_LIBDIR");
        snprintf(why, sizeof(why), "UCX not found: %s (%s)", dlerror(),
                 dir && *dir ? "TIDE_UCX_LIBDIR names a directory without libucs/libucp"
                             : "install UCX: Debian's libucx0, or set TIDE_UCX_LIBDIR");
        return;
    }
    struct {
        void *lib;
        const char *libname, *name;
        void *slot;
    } t[] = {
#define P(f) {ucp, "libucp.so.0", "ucp_" #f, &ucx_dl.f}
        P(config_read),
        P(config_release),
        P(config_modify),
        P(init_version),
        P(cleanup),
        P(context_query),
        P(worker_create),
        P(worker_destroy),
        P(worker_progress),
        P(worker_arm),
        P(worker_get_efd),
        P(worker_get_address),
        P(worker_release_address),
        P(worker_set_am_recv_handler),
        P(mem_map),
        P(mem_unmap),
        P(rkey_pack),
        P(rkey_buffer_release),
        P(ep_rkey_unpack),
        P(rkey_destroy),
        P(listener_create),
        P(listener_destroy),
        P(listener_query),
        P(listener_reject),
        P(ep_create),
        P(ep_close_nbx),
        P(ep_flush_nbx),
        P(ep_print_info),
        P(am_send_nbx),
        P(am_recv_data_nbx),
        P(am_data_release),
        P(get_nbx),
        P(put_nbx),
        P(request_check_status),
        P(request_free),
        P(request_cancel),
#undef P
        {ucs, "libucs.so.0", "ucs_status_string", &ucx_dl.status_string},
        {ucs, "libucs.so.0", "ucs_log_push_handler", &ucx_dl.log_push_handler},
        {ucp, "libucp.so.0", "ucp_get_version", &ucx_dl.get_version},
    };
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
        if (sym(t[i].lib, t[i].libname, t[i].name, t[i].slot) != 0) return;
    loaded = 0;
}

int ucx_dl_load(char *err, size_t errlen) {
    pthread_once(&once, load);
    if (loaded != 0 && err) snprintf(err, errlen, "%s", why);
    return loaded;
}

unsigned ucx_dl_version(void) {
    if (ucx_dl_load(NULL, 0) != 0) return 0;
    unsigned major = 0, minor = 0, release = 0;
    ucx_dl.get_version(&major, &minor, &release);
    return major * 1000 + minor;
}
#endif

int ucx_boot_id(char *out) {
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");
    if (!f) return -1;
    char b[UCX_BOOT_ID + 2] = {0};
    size_t n = fread(b, 1, UCX_BOOT_ID, f);
    fclose(f);
    if (n != UCX_BOOT_ID) return -1;
    memcpy(out, b, UCX_BOOT_ID);
    return 0;
}

/* 1 when name is one of list's comma-separated entries. */
static int tls_listed(const char *list, const char *name) {
    size_t n = strlen(name);
    for (const char *p = list; p && *p;) {
        const char *end = strchr(p, ',');
        size_t l = end ? (size_t)(end - p) : strlen(p);
        if (l == n && !strncmp(p, name, n)) return 1;
        p = end ? end + 1 : NULL;
    }
    return 0;
}

/* Append name to out[cap] (comma-separated; at: its length). 0, or -1 when it is full. */
static int tls_add(char *out, size_t cap, size_t *at, const char *name) {
    int k = snprintf(out + *at, cap - *at, "%s%s", *at ? "," : "", name);
    if (k < 0 || (size_t)k >= cap - *at) return -1;
    *at += (size_t)k;
    return 0;
}

int ucx_tls_no_tcp(char *out, size_t cap) {
    const char *allow = getenv("TIDE_UCX_TCP");
    if (allow && !strcmp(allow, "1")) return 0;
    const char *e = getenv("UCX_TLS");
    size_t at = 0;
    out[0] = '\0';
    if (!e || !*e || !strcmp(e, "all")) return tls_add(out, cap, &at, "^tcp") == 0 ? 1 : -1;
    if (e[0] == '^') {
        if (tls_listed(e + 1, "tcp")) return 0;
        return snprintf(out, cap, "%s,tcp", e) < (int)cap ? 1 : -1;
    }
    if (!tls_listed(e, "tcp")) return 0;
    char name[64];
    for (const char *p = e; *p;) {
        size_t l = strcspn(p, ",");
        if (l && l < sizeof(name)) {
            memcpy(name, p, l);
            name[l] = '\0';
            if (strcmp(name, "tcp") && tls_add(out, cap, &at, name) != 0) return -1;
        }
        p += l + (p[l] == ',');
    }
    return at ? 1 : -1;
}

int ucx_tls_same_host(char *out, size_t cap) {
    static const char *const shm[] = {"posix", "sysv", "cma", "knem", "xpmem"};
    const char *e = getenv("UCX_TLS");
    int neg = e && e[0] == '^';
    const char *list = neg ? e + 1 : e;
    int alias = list && (tls_listed(list, "sm") || tls_listed(list, "shm"));
    int all = !list || !*list || tls_listed(list, "all") || (alias && !neg);
    size_t at = 0;
    out[0] = '\0';
    for (size_t i = 0; i < sizeof(shm) / sizeof(shm[0]) && !(neg && alias); i++) {
        int listed = list && tls_listed(list, shm[i]);
        if (neg ? listed : !(all || listed)) continue;
        if (tls_add(out, cap, &at, shm[i]) != 0) break;
    }
    return at > 0;
}

#ifndef TIDE_HAVE_UCX
unsigned ucx_dl_version(void) {
    return 0;
}

int ucx_dl_load(char *err, size_t errlen) {
    if (err)
        snprintf(err, errlen,
                 "this libtide was built without UCX (install libucx-dev and rebuild)");
    return -1;
}
#endif
