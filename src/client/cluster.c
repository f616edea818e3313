/*
 * cluster.c — the cluster backends' handle: many tided nodes behind one tide_store.
 *
 *   tide://H1:P1,H2:P2,...?replicas=R[&fallback=1&timeout_ms=2000&conns=4&retry_ms=1000
 *                                     &threads=4&token=T]
 *   etcd://E1:2379[,E2:2379]/CLUSTER?replicas=R[&poll_ms=1000&...the same options]
 *
 * This file parses those URLs, opens and closes the handle, holds the two backend tables
 * and answers the public cluster introspection calls. Each member is reached through its
 * own tide:// handle (node.c, through the public API), so the wire code lives in one place.
 * The rest of the backend: cluster_view.c (members, views, rendezvous ranking, etcd),
 * cluster_place.c (a batch's placement), cluster_batch.c (the operations) and
 * cluster_fanout.c (the threads that call the members in parallel).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/cluster.h"
#include "common/abi.h"

#define CLUSTER_DEFAULT_TIMEOUT_MS 2000
#define CLUSTER_DEFAULT_CONNS 4
#define CLUSTER_DEFAULT_RETRY_MS 1000
#define CLUSTER_DEFAULT_THREADS 4
#define CLUSTER_DEFAULT_POLL_MS 1000

/* ---- open / close -------------------------------------------------------------------- */

static void cluster_close(tide_store *s) {
    cluster *c = s->impl;
    if (!c) return;
    cluster_etcd_stop(c);
    cluster_fanout_destroy(c->fanout);
    view_put(c->view);
    pthread_mutex_destroy(&c->view_lock);
    pthread_mutex_destroy(&c->stop_lock);
    pthread_cond_destroy(&c->stop_cond);
    free(c);
    s->impl = NULL;
}

/* Percent-encode text for a URL option value. */
static void cluster_urlenc(char *out, size_t cap, const char *text) {
    size_t j = 0;
    for (const unsigned char *p = (const unsigned char *)text; *p && j + 4 < cap; p++) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
            strchr("-._~", *p))
            out[j++] = (char)*p;
        else
            j += (size_t)snprintf(out + j, cap - j, "%%%02X", *p);
    }
    out[j] = '\0';
}

static int cluster_open_common(tide_store *s, url *u, const char *scheme, cluster **out) {
    char msg[ERR_MSG_MAX];
    uint64_t replicas, fallback, timeout_ms, conns, retry_ms, threads;
    int rc;
    if ((rc = url_opt_uint(u, "replicas", 1, &replicas, msg, sizeof(msg))) ||
        (rc = url_opt_uint(u, "fallback", 1, &fallback, msg, sizeof(msg))) ||
        (rc = url_opt_uint(u, "timeout_ms", CLUSTER_DEFAULT_TIMEOUT_MS, &timeout_ms, msg,
                           sizeof(msg))) ||
        (rc = url_opt_uint(u, "conns", CLUSTER_DEFAULT_CONNS, &conns, msg, sizeof(msg))) ||
        (rc = url_opt_uint(u, "retry_ms", CLUSTER_DEFAULT_RETRY_MS, &retry_ms, msg, sizeof(msg))) ||
        (rc = url_opt_uint(u, "threads", CLUSTER_DEFAULT_THREADS, &threads, msg, sizeof(msg))))
        return client_err(s, rc, "%s://: %s", scheme, msg);
    /* read_check: ask another replica beside each read whether the member read from missed
     * writes (docs/CLUSTER.md, "Hints"); on by default with replicas >= 2. */
    uint64_t read_check;
    if ((rc = url_opt_uint(u, "read_check", replicas >= 2, &read_check, msg, sizeof(msg))))
        return client_err(s, rc, "%s://: %s", scheme, msg);
    if (read_check > 1)
        return client_err(s, TIDE_EOPTION, "%s://: read_check must be 0 or 1, got %llu", scheme,
                          (unsigned long long)read_check);
    if (replicas < 1 || replicas > 8)
        return client_err(s, TIDE_EOPTION, "%s://: replicas must be 1..8, got %llu", scheme,
                          (unsigned long long)replicas);
    if (replicas + fallback > CLUSTER_MAX_DEPTH)
        return client_err(s, TIDE_EOPTION, "%s://: replicas + fallback must be at most %d", scheme,
                          CLUSTER_MAX_DEPTH);
    if (timeout_ms == 0 || conns == 0 || conns > 1024 || retry_ms == 0 ||
        threads > CLUSTER_MAX_THREADS)
        return client_err(s, TIDE_EOPTION,
                          "%s://: timeout_ms and retry_ms must be above 0, conns 1..1024, "
                          "threads 0..%d",
                          scheme, CLUSTER_MAX_THREADS);
    cluster *c = calloc(1, sizeof(*c));
    if (!c) return client_err(s, -ENOMEM, "out of memory");
    pthread_mutex_init(&c->view_lock, NULL);
    pthread_mutex_init(&c->stop_lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->stop_cond, &ca);
    pthread_condattr_destroy(&ca);
    s->impl = c;
    c->replicas = (unsigned)replicas;
    c->fallback = (unsigned)fallback;
    c->read_check = (int)read_check;
    c->timeout_ms = timeout_ms;
    c->retry_ns = retry_ms * 1000000ull;
    /* replica=1: the member handles tell their nodes they serve a cluster (wire.h). */
    int n = snprintf(c->node_query, sizeof(c->node_query), "?timeout_ms=%llu&conns=%llu&replica=1",
                     (unsigned long long)timeout_ms, (unsigned long long)conns);
    /* transport=ucx: every member moves its values over UCX (node.c, ucx.c). */
    const char *transport = url_get(u, "transport");
    if (transport && strcmp(transport, "tcp") != 0 && strcmp(transport, "ucx") != 0) {
        cluster_close(s);
        return client_err(s, TIDE_EOPTION, "%s://: transport must be tcp or ucx, got '%s'", scheme,
                          transport);
    }
    if (transport)
        n += snprintf(c->node_query + n, sizeof(c->node_query) - (size_t)n, "&transport=%s",
                      transport);
    const char *token = url_get(u, "token");
    if (token) {
        char enc[400];
        if (strlen(token) > 128) {
            cluster_close(s);
            return client_err(s, TIDE_EOPTION, "%s://: the auth token is too long", scheme);
        }
        cluster_urlenc(enc, sizeof(enc), token);
        snprintf(c->node_query + n, sizeof(c->node_query) - (size_t)n, "&token=%s", enc);
    }
    if ((rc = cluster_fanout_create((int)threads, &c->fanout)) != 0) {
        cluster_close(s);
        return client_err(s, rc, "%s://: cannot start threads: %s", scheme, strerror(-rc));
    }
    *out = c;
    return 0;
}

/* Open every member's handle now, in parallel, so a wrong list fails tide_open; members
 * that do not answer are only marked down (they may come up later). */
static int cluster_connect(tide_store *s, cluster *c, const char *what) {
    cview *v = view_get(c);
    if (v->n == 0) {
        view_put(v);
        return 0; /* an empty etcd cluster: nodes may register later */
    }
    ctask *t = calloc(v->n, sizeof(*t));
    if (!t) {
        view_put(v);
        return client_err(s, -ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < v->n; i++)
        t[i] = (ctask){.c = c, .m = v->m[i], .op = OP_STATS};
    cluster_fanout_run(c->fanout, t, v->n);
    int rc = 0, up = 0;
    for (size_t i = 0; i < v->n; i++)
        up += t[i].rc == 0;
    if (!up)
        rc = client_err(s, t[0].rc, "%s: none of the %zu members answered; first: %s", what, v->n,
                        t[0].msg);
    free(t);
    view_put(v);
    return rc;
}

static int cluster_open(tide_store *s, url *u) {
    if (u->path[0] && strcmp(u->path, "/") != 0)
        return client_err(s, TIDE_EURL, "tide://%s%s: a cluster URL takes no path", u->authority,
                          u->path);
    char **list;
    size_t n;
    int rc = cluster_parse_list(s, "tide", u->authority, &list, &n);
    if (rc) return rc;
    cluster *c;
    if ((rc = cluster_open_common(s, u, "tide", &c)) != 0) {
        cluster_free_list(list, n);
        return rc;
    }
    c->view = view_build(list, n, NULL);
    cluster_free_list(list, n);
    if (!c->view) {
        cluster_close(s);
        return client_err(s, -ENOMEM, "out of memory");
    }
    char msg[ERR_MSG_MAX];
    if ((rc = url_check_unused(u, msg, sizeof(msg))) != 0) {
        cluster_close(s);
        return client_err(s, rc, "%s", msg);
    }
    if ((rc = cluster_connect(s, c, "tide://")) != 0) cluster_close(s);
    return rc;
}

static int etcd_open_url(tide_store *s, url *u) {
    const char *name = u->path[0] == '/' ? u->path + 1 : u->path;
    if (!u->authority[0] || !*name || strpbrk(name, "/ "))
        return client_err(s, TIDE_EURL, "etcd://%s%s: expected etcd://HOST:PORT/CLUSTER",
                          u->authority, u->path);
    uint64_t poll_ms;
    char msg[ERR_MSG_MAX];
    int rc = url_opt_uint(u, "poll_ms", CLUSTER_DEFAULT_POLL_MS, &poll_ms, msg, sizeof(msg));
    if (rc) return client_err(s, rc, "etcd://: %s", msg);
    if (poll_ms == 0) return client_err(s, TIDE_EOPTION, "etcd://: poll_ms must be above 0");
    cluster *c;
    if ((rc = cluster_open_common(s, u, "etcd", &c)) != 0) return rc;
    c->from_etcd = 1;
    c->poll_ns = poll_ms * 1000000ull;
    if ((rc = url_check_unused(u, msg, sizeof(msg))) != 0) {
        cluster_close(s);
        return client_err(s, rc, "%s", msg);
    }
    char what[300];
    snprintf(what, sizeof(what), "etcd://%s/%s", u->authority, name);
    if ((rc = cluster_etcd_start(s, c, u->authority, name)) != 0 ||
        (rc = cluster_connect(s, c, what)) != 0)
        cluster_close(s);
    return rc;
}

/* Whether a tide:// URL belongs to the cluster backend (several members, or a cluster
 * option such as replicas=). */
static int cluster_claims(const url *u) {
    if (strchr(u->authority, ',')) return 1;
    for (size_t i = 0; i < u->nopts; i++)
        if (!strcmp(u->opts[i].name, "replicas") || !strcmp(u->opts[i].name, "fallback")) return 1;
    return 0;
}

/* A cluster handle (tide:// list or etcd://) whose members move values over UCX. */
static int cluster_uses_ucx(tide_store *s) {
    const cluster *c = s->impl;
    return c && strstr(c->node_query, "&transport=ucx") != NULL;
}

/* Its GPU values are staged: the straight path is one node's (node.c). */
static int cluster_ucx_cuda(tide_store *s, char *why, size_t len) {
    if (!cluster_uses_ucx(s)) {
        snprintf(why, len, "not a transport=ucx store");
        return -1;
    }
    snprintf(why, len,
             "a cluster's GPU values are staged (straight GPU transfers: one tide:// "
             "node)");
    return 0;
}

const backend_ops cluster_backend = {
    .scheme = "tide",
    .claims = cluster_claims,
    .open = cluster_open,
    .close = cluster_close,
    .put_many = cluster_put_many,
    .get_many = cluster_get_many,
    .exists_many = cluster_exists_many,
    .remove_many = cluster_remove_many,
    .match_prefix = NULL, /* answered with exists_many: the keys live on many nodes */
    .clear = cluster_clear,
    .stats = cluster_stats,
    .uses_ucx = cluster_uses_ucx,
    .ucx_cuda = cluster_ucx_cuda,
};

const backend_ops etcd_backend = {
    .scheme = "etcd",
    .open = etcd_open_url,
    .close = cluster_close,
    .put_many = cluster_put_many,
    .get_many = cluster_get_many,
    .exists_many = cluster_exists_many,
    .remove_many = cluster_remove_many,
    .match_prefix = NULL,
    .clear = cluster_clear,
    .stats = cluster_stats,
    .uses_ucx = cluster_uses_ucx,
    .ucx_cuda = cluster_ucx_cuda,
};

/* ---- cluster introspection (public) -------------------------------------------------- */

static cluster *cluster_of(tide_store *s) {
    return s && (s->ops == &cluster_backend || s->ops == &etcd_backend) ? s->impl : NULL;
}

_Static_assert(sizeof(tide_cluster_info) % 8 == 0 &&
                   sizeof(tide_cluster_info) >= TIDE_CLUSTER_INFO_SIZE_V1 &&
                   offsetof(tide_cluster_info, etcd_errors) + 8 == TIDE_CLUSTER_INFO_SIZE_V1,
               "tide_cluster_info's first fields stay where they are");

TIDE_API int tide_cluster_info_get(tide_store *s, tide_cluster_info *out, size_t size) {
    if (!s || !out) return err_set(NULL, NULL, -EINVAL, "tide_cluster_info_get: NULL argument");
    if (!abi_size_ok(size, TIDE_CLUSTER_INFO_SIZE_V1, TIDE_STRUCT_SIZE_MAX))
        return client_err(s, -EINVAL,
                          "tide_cluster_info_get: size %zu is not a tide_cluster_info size (pass "
                          "sizeof (tide_cluster_info): a multiple of 8 from %d to %d; this "
                          "library's is %zu)",
                          size, TIDE_CLUSTER_INFO_SIZE_V1, TIDE_STRUCT_SIZE_MAX,
                          sizeof(tide_cluster_info));
    cluster *c = cluster_of(s);
    if (!c)
        return client_err(s, TIDE_EUNSUPPORTED, "tide_cluster_info_get: %s:// is not a cluster",
                          s->ops->scheme);
    tide_cluster_info full, *info = &full;
    memset(info, 0, sizeof(*info));
    cview *v = view_get(c);
    uint64_t now = now_ns();
    info->members = (uint32_t)v->n;
    for (size_t i = 0; i < v->n; i++)
        info->members_down += member_is_down(v->m[i], now);
    view_put(v);
    info->replicas = c->replicas;
    info->view_changes = atomic_load(&c->view_changes);
    info->copies_written = atomic_load(&c->copies_written);
    info->puts_degraded = atomic_load(&c->puts_degraded);
    info->puts_failed = atomic_load(&c->puts_failed);
    info->read_failovers = atomic_load(&c->read_failovers);
    info->read_fallbacks = atomic_load(&c->read_fallbacks);
    info->node_errors = atomic_load(&c->node_errors);
    info->etcd_errors = atomic_load(&c->etcd_errors);
    abi_fill(out, size, &full, sizeof(full));
    return 0;
}

TIDE_API int tide_cluster_members(tide_store *s, char *buf, size_t cap) {
    if (!s || (!buf && cap)) return err_set(NULL, NULL, -EINVAL, "tide_cluster_members: NULL");
    cluster *c = cluster_of(s);
    if (!c)
        return client_err(s, TIDE_EUNSUPPORTED, "tide_cluster_members: %s:// is not a cluster",
                          s->ops->scheme);
    cview *v = view_get(c);
    uint64_t now = now_ns();
    size_t len = 0;
    for (size_t i = 0; i < v->n; i++) {
        char line[CLUSTER_ADDR_MAX + 8];
        int l = snprintf(line, sizeof(line), "%s %s\n", v->m[i]->addr,
                         member_is_down(v->m[i], now) ? "down" : "up");
        if (len + (size_t)l < cap) memcpy(buf + len, line, (size_t)l);
        len += (size_t)l;
    }
    int n = (int)v->n;
    view_put(v);
    if (len >= cap)
        return client_err(s, TIDE_EBUFSMALL, "tide_cluster_members: %zu bytes needed", len + 1);
    buf[len] = '\0';
    return n;
}
