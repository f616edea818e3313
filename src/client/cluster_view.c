/*
 * cluster_view.c — who is in the cluster and where a key lives: rendezvous ranking,
 * members (lazily opened node handles, down-marks with back-off), refcounted views, and
 * the etcd membership poller.
 *
 * Placement: a key's nodes are the members with the highest xxh3(key, seed(member)),
 * computed by every client alike from nothing but the member addresses, so clients agree
 * without talking to each other and there is no metadata owner to lose.
 *
 * Membership from etcd is polled (a range read of the prefix every poll_ms), not watched:
 * a poll is one short request with nothing to resume, and a change is seen within poll_ms
 * of etcd dropping the key. When etcd cannot be reached the current view stays and the
 * failure is counted (tide_cluster_info_get) — the library never logs.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "client/cluster.h"
#include "common/hostport.h"

/* ---- placement ----------------------------------------------------------------------- */

uint64_t cluster_seed(const char *addr) {
    return XXH3_64bits(addr, strlen(addr));
}

uint64_t cluster_weight(uint64_t seed, const void *key, size_t klen) {
    return XXH3_64bits_withSeed(key, klen, seed);
}

void cluster_rank(const uint64_t *seeds, size_t n, const void *key, size_t klen, uint32_t *order,
                  size_t depth) {
    uint64_t w[CLUSTER_MAX_DEPTH];
    size_t have = 0;
    if (depth == 0) return;
    /* Keep the top `depth` by insertion: depth is small (R + fallback). */
    for (size_t i = 0; i < n; i++) {
        uint64_t x = cluster_weight(seeds[i], key, klen);
        if (have == depth && x <= w[depth - 1]) continue;
        size_t j = have < depth ? have++ : depth - 1;
        while (j > 0 && w[j - 1] < x) {
            w[j] = w[j - 1];
            order[j] = order[j - 1];
            j--;
        }
        w[j] = x;
        order[j] = (uint32_t)i;
    }
}

/* ---- members ------------------------------------------------------------------------- */

static cmember *member_new(const char *addr) {
    cmember *m = calloc(1, sizeof(*m));
    if (!m) return NULL;
    snprintf(m->addr, sizeof(m->addr), "%s", addr);
    m->seed = cluster_seed(m->addr);
    pthread_mutex_init(&m->open_lock, NULL);
    atomic_init(&m->refs, 1);
    return m;
}

static void member_put(cmember *m) {
    if (atomic_fetch_sub(&m->refs, 1) != 1) return;
    tide_close(atomic_load(&m->h));
    pthread_mutex_destroy(&m->open_lock);
    free(m);
}

int member_is_down(const cmember *m, uint64_t now) {
    return atomic_load(&m->down_until) > now;
}

void member_ok(cmember *m) {
    if (atomic_load(&m->fails)) atomic_store(&m->fails, 0);
    if (atomic_load(&m->down_until)) atomic_store(&m->down_until, 0);
}

void member_fail(cluster *c, cmember *m) {
    unsigned f = atomic_fetch_add(&m->fails, 1);
    uint64_t backoff = c->retry_ns << (f < 4 ? f : 4);
    atomic_store(&m->down_until, now_ns() + backoff);
    atomic_fetch_add(&c->node_errors, 1);
}

int member_handle(cluster *c, cmember *m, tide_store **out, char *msg, size_t len) {
    tide_store *h = atomic_load(&m->h);
    int rc = 0;
    if (!h) {
        pthread_mutex_lock(&m->open_lock);
        h = atomic_load(&m->h);
        if (!h) {
            char u[CLUSTER_ADDR_MAX + sizeof(c->node_query) + 16];
            snprintf(u, sizeof(u), "tide://%s%s", m->addr, c->node_query);
            /* A member is one node: its URL names one address and node options only. */
            static const backend_ops *const node_only[] = {&node_backend};
            if ((rc = client_open("tide_open", u, node_only, 1, &h)) != 0) {
                snprintf(msg, len, "%s", tide_errmsg(NULL));
                h = NULL;
                member_fail(c, m);
            } else {
                atomic_store(&m->h, h);
            }
        }
        pthread_mutex_unlock(&m->open_lock);
    }
    *out = h;
    return rc;
}

/* ---- views --------------------------------------------------------------------------- */

cview *view_get(cluster *c) {
    pthread_mutex_lock(&c->view_lock);
    cview *v = c->view;
    atomic_fetch_add(&v->refs, 1);
    pthread_mutex_unlock(&c->view_lock);
    return v;
}

void view_put(cview *v) {
    if (!v || atomic_fetch_sub(&v->refs, 1) != 1) return;
    for (size_t i = 0; i < v->n; i++)
        member_put(v->m[i]);
    free(v->m);
    free(v);
}

static int view_cmp_addr(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

cview *view_build(char *const *addrs, size_t n, const cview *old) {
    cview *v = calloc(1, sizeof(*v));
    char **sorted = malloc((n ? n : 1) * sizeof(*sorted));
    if (!v || !sorted || !(v->m = calloc(n ? n : 1, sizeof(*v->m)))) goto nomem;
    atomic_init(&v->refs, 1);
    if (n) memcpy(sorted, addrs, n * sizeof(*sorted));
    qsort(sorted, n, sizeof(*sorted), view_cmp_addr);
    for (size_t i = 0; i < n; i++) {
        if (i > 0 && strcmp(sorted[i], sorted[i - 1]) == 0) continue;
        cmember *m = NULL;
        for (size_t j = 0; old && j < old->n && !m; j++)
            if (strcmp(old->m[j]->addr, sorted[i]) == 0) m = old->m[j];
        if (m)
            atomic_fetch_add(&m->refs, 1);
        else if (!(m = member_new(sorted[i])))
            goto nomem;
        v->m[v->n++] = m;
    }
    free(sorted);
    return v;
nomem:
    free(sorted);
    if (v) {
        for (size_t i = 0; i < v->n; i++)
            member_put(v->m[i]);
        free(v->m);
        free(v);
    }
    return NULL;
}

/* Install v as the current view (takes the caller's reference); 1 if the member set
 * changed. */
static int view_install(cluster *c, cview *v) {
    pthread_mutex_lock(&c->view_lock);
    cview *old = c->view;
    int changed = !old || old->n != v->n;
    for (size_t i = 0; !changed && i < v->n; i++)
        changed = old->m[i] != v->m[i];
    c->view = v;
    pthread_mutex_unlock(&c->view_lock);
    view_put(old);
    return changed;
}

/* ---- member lists -------------------------------------------------------------------- */

void cluster_free_list(char **list, size_t n) {
    for (size_t i = 0; list && i < n; i++)
        free(list[i]);
    free(list);
}

/* A member address must be HOST:PORT with a numeric port (hostport.h: an IPv6 host in
 * brackets); 1 when it is, else 0 with the reason in why. */
static int cluster_addr_ok(const char *a, char *why, size_t whylen) {
    hostport hp;
    if (strlen(a) >= CLUSTER_ADDR_MAX) {
        snprintf(why, whylen, "longer than %d bytes", CLUSTER_ADDR_MAX - 1);
        return 0;
    }
    return hostport_parse(a, strlen(a), 0, &hp, why, whylen) == 0;
}

int cluster_parse_list(tide_store *s, const char *scheme, const char *list, char ***out,
                       size_t *n) {
    *out = NULL;
    *n = 0;
    size_t cap = 1;
    for (const char *p = list; *p; p++)
        cap += *p == ',';
    if (cap > CLUSTER_MAX_MEMBERS)
        return client_err(s, TIDE_ELIMIT, "%s://: %zu members, the limit is %d", scheme, cap,
                          CLUSTER_MAX_MEMBERS);
    char **v = calloc(cap, sizeof(*v));
    if (!v) return client_err(s, -ENOMEM, "out of memory");
    const char *p = list;
    for (size_t i = 0; i < cap; i++) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        v[i] = strndup(p, len);
        if (!v[i]) {
            cluster_free_list(v, i);
            return client_err(s, -ENOMEM, "out of memory");
        }
        char why[200];
        if (!cluster_addr_ok(v[i], why, sizeof(why))) {
            int rc = client_err(s, TIDE_EURL, "%s://%s: member %zu '%s' is not HOST:PORT: %s",
                                scheme, list, i + 1, v[i], why);
            cluster_free_list(v, i + 1);
            return rc;
        }
        p = comma ? comma + 1 : p + len;
    }
    *out = v;
    *n = cap;
    return 0;
}

/* ---- etcd membership ----------------------------------------------------------------- */

typedef struct etcd_collect {
    const char *prefix;
    char **addrs;
    size_t n, cap;
} etcd_collect;

/* Each key under the prefix is a member; its address is the rest of the key. */
static int etcd_collect_kv(void *arg, const char *key, size_t klen, const char *val, size_t vlen) {
    etcd_collect *ec = arg;
    const char *addr = key + strlen(ec->prefix);
    char why[200];
    if (!cluster_addr_ok(addr, why, sizeof(why)) || ec->n == CLUSTER_MAX_MEMBERS)
        return 0; /* not ours */
    if (ec->n == ec->cap) {
        size_t cap = ec->cap ? ec->cap * 2 : 8;
        char **grown = realloc(ec->addrs, cap * sizeof(*grown));
        if (!grown) return -ENOMEM;
        ec->addrs = grown;
        ec->cap = cap;
    }
    if (!(ec->addrs[ec->n] = strdup(addr))) return -ENOMEM;
    ec->n++;
    return 0;
}

/* Read the member list once and install it. */
static int cluster_etcd_read(cluster *c, char *err, size_t errlen) {
    etcd_collect ec = {c->etcd_prefix, NULL, 0, 0};
    int rc = etcd_range_prefix(c->etcd, c->etcd_prefix, etcd_collect_kv, &ec, err, errlen);
    if (rc == 0) {
        pthread_mutex_lock(&c->view_lock);
        cview *old = c->view;
        if (old) atomic_fetch_add(&old->refs, 1);
        pthread_mutex_unlock(&c->view_lock);
        cview *v = view_build(ec.addrs, ec.n, old);
        view_put(old);
        if (!v) {
            rc = -ENOMEM;
            snprintf(err, errlen, "out of memory building the member view");
        } else if (view_install(c, v) && old) { /* the first read is no change */
            atomic_fetch_add(&c->view_changes, 1);
        }
    }
    cluster_free_list(ec.addrs, ec.n);
    return rc;
}

static void *cluster_etcd_poll(void *arg) {
    cluster *c = arg;
    pthread_mutex_lock(&c->stop_lock);
    while (!c->stopping) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t t = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec + c->poll_ns;
        ts.tv_sec = (time_t)(t / 1000000000ull);
        ts.tv_nsec = (long)(t % 1000000000ull);
        pthread_cond_timedwait(&c->stop_cond, &c->stop_lock, &ts);
        if (c->stopping) break;
        pthread_mutex_unlock(&c->stop_lock);
        char err[ERR_MSG_MAX];
        if (cluster_etcd_read(c, err, sizeof(err)) != 0) {
            /* Keep the last view: nodes keep serving without etcd. */
            atomic_fetch_add(&c->etcd_errors, 1);
            pthread_mutex_lock(&c->view_lock);
            snprintf(c->etcd_msg, sizeof(c->etcd_msg), "%s", err);
            pthread_mutex_unlock(&c->view_lock);
        }
        pthread_mutex_lock(&c->stop_lock);
    }
    pthread_mutex_unlock(&c->stop_lock);
    return NULL;
}

int cluster_etcd_start(tide_store *s, cluster *c, const char *endpoints, const char *name) {
    char err[ERR_MSG_MAX];
    snprintf(c->etcd_prefix, sizeof(c->etcd_prefix), "/tide/%s/members/", name);
    int rc = etcd_open(endpoints, (int)c->timeout_ms, &c->etcd, err, sizeof(err));
    if (rc) return client_err(s, rc, "etcd://%s/%s: %s", endpoints, name, err);
    if ((rc = cluster_etcd_read(c, err, sizeof(err))) != 0)
        return client_err(s, rc, "etcd://%s/%s: cannot read the members: %s", endpoints, name, err);
    if ((rc = pthread_create(&c->poller, NULL, cluster_etcd_poll, c)) != 0)
        return client_err(s, -rc, "etcd://%s/%s: cannot start the poller: %s", endpoints, name,
                          strerror(rc));
    c->poller_started = 1;
    return 0;
}

void cluster_etcd_stop(cluster *c) {
    if (c->poller_started) {
        pthread_mutex_lock(&c->stop_lock);
        c->stopping = 1;
        pthread_cond_signal(&c->stop_cond);
        pthread_mutex_unlock(&c->stop_lock);
        pthread_join(c->poller, NULL);
        c->poller_started = 0;
    }
    etcd_close(c->etcd);
    c->etcd = NULL;
}

int cluster_no_members(tide_store *s, const cluster *c, const char *what) {
    if (!c->from_etcd) return client_err(s, -EHOSTUNREACH, "cluster %s: no members", what);
    return client_err(s, -EHOSTUNREACH,
                      "cluster %s: no members registered in etcd under %s (start tided with "
                      "--etcd and --cluster, or check the cluster name in the URL)",
                      what, c->etcd_prefix);
}
