/*
 * announce.c — keep this node registered in etcd while it serves.
 *
 * The key /tide/CLUSTER/members/HOST:PORT (value HOST:PORT; an IPv6 host in brackets,
 * hostport.h) is put under a lease of etcd_ttl_s seconds, renewed every TTL/3. A node that
 * stops renewing (killed, hung, cut off) drops out when the lease expires. When etcd cannot be
 * reached the node logs one warning and serves on — clients keep their last view — and registers
 * again (new lease) once etcd answers and the old lease has expired. A clean stop revokes the
 * lease.
 *
 * Each etcd call is bounded by a timeout shorter than the renewal interval, so one slow
 * call cannot make the lease lapse on a healthy etcd.
 */
#include "server/announce.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/etcd.h"
#include "common/hostport.h"
#include "common/log.h"
#include "tide.h"

struct announce {
    etcd_client *etcd;
    char endpoints[256];
    char key[400];
    char addr[256];
    int ttl_s;
    int64_t lease;
    int outage; /* a warning about etcd was logged and no success since */
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int stop;
    void (*on_lapse)(void *); /* the lease expired: clients wrote around this node */
    void *lapse_arg;
};

/* Grant a lease and put the key under it. */
static int announce_register(announce *a) {
    char err[512];
    int64_t id;
    int rc = etcd_lease_grant(a->etcd, a->ttl_s, &id, err, sizeof(err));
    if (rc == 0 && (rc = etcd_put(a->etcd, a->key, a->addr, id, err, sizeof(err))) != 0)
        etcd_lease_revoke(a->etcd, id, err + strlen(err), sizeof(err) - strlen(err));
    if (rc) {
        if (!a->outage)
            LOG_WARN("cannot register %s in etcd (%s): %s; serving on and retrying every %d ms",
                     a->addr, a->endpoints, err, a->ttl_s * 1000 / 3);
        a->outage = 1;
        return rc;
    }
    a->lease = id;
    LOG_INFO("registered %s in etcd %s as %s (lease %llx, TTL %d s)%s", a->addr, a->endpoints,
             a->key, (unsigned long long)id, a->ttl_s, a->outage ? " after an outage" : "");
    a->outage = 0;
    return 0;
}

/* Renew once; register again when the lease is gone. */
static void announce_tick(announce *a) {
    if (!a->lease) {
        announce_register(a);
        return;
    }
    char err[512];
    int64_t ttl = 0;
    int rc = etcd_lease_keepalive(a->etcd, a->lease, &ttl, err, sizeof(err));
    if (rc && rc != TIDE_ESERVER) {
        if (!a->outage)
            LOG_WARN("etcd unreachable, lease %llx not renewed: %s; serving on with the last "
                     "registration",
                     (unsigned long long)a->lease, err);
        a->outage = 1;
        return;
    }
    if (rc || ttl == 0) { /* etcd answered: the lease is gone */
        LOG_WARN("lease %llx expired in etcd; registering %s again", (unsigned long long)a->lease,
                 a->addr);
        a->lease = 0;
        if (a->on_lapse) a->on_lapse(a->lapse_arg);
        announce_register(a);
        return;
    }
    if (a->outage)
        LOG_INFO("etcd %s answers again; lease %llx renewed", a->endpoints,
                 (unsigned long long)a->lease);
    a->outage = 0;
}

static void *announce_main(void *arg) {
    announce *a = arg;
    uint64_t interval_ns = (uint64_t)a->ttl_s * 1000000000ull / 3;
    pthread_mutex_lock(&a->lock);
    while (!a->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t t = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec + interval_ns;
        ts.tv_sec = (time_t)(t / 1000000000ull);
        ts.tv_nsec = (long)(t % 1000000000ull);
        pthread_cond_timedwait(&a->cond, &a->lock, &ts);
        if (a->stop) break;
        pthread_mutex_unlock(&a->lock);
        announce_tick(a);
        pthread_mutex_lock(&a->lock);
    }
    pthread_mutex_unlock(&a->lock);
    return NULL;
}

/* 1 when tided listens on every address (0.0.0.0, ::): no address to announce. */
static int bind_is_any(const char *bind) {
    struct sockaddr_storage sa;
    socklen_t len;
    char err[160];
    if (hostport_bind_addr(bind, 0, &sa, &len, NULL, 0, err, sizeof(err)) != 0) return 0;
    if (sa.ss_family == AF_INET6)
        return IN6_IS_ADDR_UNSPECIFIED(&((struct sockaddr_in6 *)&sa)->sin6_addr);
    return ((struct sockaddr_in *)&sa)->sin_addr.s_addr == htonl(INADDR_ANY);
}

int announce_check(const server_config *cfg) {
    if (!cfg->cluster[0]) {
        LOG_ERROR("--etcd needs --cluster NAME");
        return -EINVAL;
    }
    if (!cfg->advertise[0] && bind_is_any(cfg->bind)) {
        LOG_ERROR("listening on every address (%s): give --advertise HOST:PORT, the address "
                  "clients should use",
                  cfg->bind);
        return -EINVAL;
    }
    /* The endpoint list parses (etcd_open does no I/O). */
    etcd_client *e;
    char err[512];
    int rc = etcd_open(cfg->etcd, 1000, &e, err, sizeof(err));
    if (rc) {
        LOG_ERROR("--etcd %s: %s", cfg->etcd, err);
        return rc;
    }
    etcd_close(e);
    return 0;
}

int announce_start(const server_config *cfg, int port, void (*on_lapse)(void *), void *lapse_arg,
                   announce **out) {
    *out = NULL;
    int rc = announce_check(cfg);
    if (rc) return rc;
    announce *a = calloc(1, sizeof(*a));
    if (!a) return -ENOMEM;
    a->ttl_s = cfg->etcd_ttl_s > 0 ? cfg->etcd_ttl_s : 5;
    a->on_lapse = on_lapse;
    a->lapse_arg = lapse_arg;
    snprintf(a->endpoints, sizeof(a->endpoints), "%s", cfg->etcd);
    if (cfg->advertise[0])
        snprintf(a->addr, sizeof(a->addr), "%s", cfg->advertise);
    else
        hostport_format(cfg->bind, port, a->addr, sizeof(a->addr)); /* [::1]:7474 */
    snprintf(a->key, sizeof(a->key), "/tide/%s/members/%s", cfg->cluster, a->addr);
    char err[512];
    /* Calls end well before the next renewal is due. */
    int timeout_ms = a->ttl_s * 1000 / 4;
    rc = etcd_open(cfg->etcd, timeout_ms < 2000 ? timeout_ms : 2000, &a->etcd, err, sizeof(err));
    if (rc) {
        LOG_ERROR("--etcd %s: %s", cfg->etcd, err);
        free(a);
        return rc;
    }
    pthread_mutex_init(&a->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&a->cond, &ca);
    pthread_condattr_destroy(&ca);
    announce_register(a);
    if ((rc = pthread_create(&a->thread, NULL, announce_main, a)) != 0) {
        LOG_ERROR("cannot start the etcd keepalive thread: %s", strerror(rc));
        etcd_close(a->etcd);
        pthread_mutex_destroy(&a->lock);
        pthread_cond_destroy(&a->cond);
        free(a);
        return -rc;
    }
    *out = a;
    return 0;
}

void announce_stop(announce *a) {
    if (!a) return;
    pthread_mutex_lock(&a->lock);
    a->stop = 1;
    pthread_cond_signal(&a->cond);
    pthread_mutex_unlock(&a->lock);
    pthread_join(a->thread, NULL);
    if (a->lease) {
        char err[512];
        if (etcd_lease_revoke(a->etcd, a->lease, err, sizeof(err)) == 0)
            LOG_INFO("left cluster: lease %llx revoked", (unsigned long long)a->lease);
        else
            LOG_WARN("could not revoke lease %llx (%s); the node drops out when it expires",
                     (unsigned long long)a->lease, err);
    }
    etcd_close(a->etcd);
    pthread_mutex_destroy(&a->lock);
    pthread_cond_destroy(&a->cond);
    free(a);
}
