/*
 * handle.c — the connector handle's life and the calls on the whole handle: create (parse,
 * check, validate, open or borrow the store, start the worker's threads), destroy,
 * messages, info and figures. The helpers every connector file calls on a handle live
 * apart, in base.c, so that this file depends on the others and none on it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/abi.h"
#include "connector/connector.h"

/* The last step of destroying a handle (or of a create that failed): its locks, condition
 * variables, error buffer and memory. */
static void free_handle(tide_connector *c) {
    pthread_mutex_destroy(&c->sched_lock);
    pthread_mutex_destroy(&c->wlock);
    pthread_mutex_destroy(&c->stats_lock);
    pthread_mutex_destroy(&c->ucx_lock);
    pthread_cond_destroy(&c->wcond);
    pthread_cond_destroy(&c->donecond);
    errbuf_destroy(&c->err);
    free(c);
}

/* Join every collected problem into one message. */
static int fail_errs(int rc, const char *what, ccfg_errs *e) {
    char msg[ERR_MSG_MAX];
    size_t len = (size_t)snprintf(msg, sizeof(msg), "%s: ", what);
    for (size_t i = 0; i < e->n && len < sizeof(msg); i++)
        len += (size_t)snprintf(msg + len, sizeof(msg) - len, "%s%s", i ? "; " : "", e->msg[i]);
    if (e->n == 0 && len < sizeof(msg))
        snprintf(msg + len, sizeof(msg) - len, "%s", tide_strerror(rc));
    return err_set(NULL, NULL, rc, "%s", msg);
}

static int create(const char *json, const char *path, const char *url, tide_store *store, int role,
                  tide_connector **out) {
    if (!out) return err_set(NULL, NULL, -EINVAL, "tide_connector_create: out is NULL");
    *out = NULL;
    if (role != TIDE_CONNECTOR_SCHEDULER && role != TIDE_CONNECTOR_WORKER)
        return err_set(NULL, NULL, -EINVAL,
                       "tide_connector_create: role %d is neither "
                       "TIDE_CONNECTOR_SCHEDULER nor TIDE_CONNECTOR_WORKER",
                       role);
    if (!json && !path)
        return err_set(NULL, NULL, -EINVAL, "tide_connector_create: no configuration");
    tide_connector *c = calloc(1, sizeof(*c));
    if (!c) return err_set(NULL, NULL, -ENOMEM, "tide_connector_create: out of memory");
    c->role = role;
    errbuf_init(&c->err);
    pthread_mutex_init(&c->sched_lock, NULL);
    pthread_mutex_init(&c->wlock, NULL);
    pthread_mutex_init(&c->stats_lock, NULL);
    pthread_mutex_init(&c->ucx_lock, NULL);
    pthread_cond_init(&c->wcond, NULL);
    pthread_cond_init(&c->donecond, NULL);

    ccfg_errs e;
    ccfg_errs_init(&e);
    int rc = json ? ccfg_parse_string(json, strlen(json), &c->cfg, &e)
                  : ccfg_parse_file(path, &c->cfg, &e);
    if (rc == 0) rc = ccfg_check(&c->cfg, &e);
    if (rc) {
        fail_errs(rc, "connector configuration", &e);
        goto fail_cfg;
    }
    connector_verdict *v = calloc(1, sizeof(*v));
    if (!v) {
        rc = err_set(NULL, NULL, -ENOMEM, "tide_connector_create: out of memory");
        goto fail_cfg;
    }
    rc = connector_validate(&c->cfg, CONNECTOR_IMPL_TIDE, v);
    if (rc) err_set(NULL, NULL, rc, "%s", v->message[0] ? v->message : "configuration refused");
    free(v);
    if (rc) goto fail_cfg;
    c->saves = c->cfg.kv_role != CONNECTOR_ROLE_CONSUMER || c->cfg.extra.save_decode_cache;
    if (connector_capacity_only(&c->cfg)) c->saves = 0;

    if (store) {
        c->store = store;
    } else {
        rc = tide_open(url, &c->store);
        if (rc) {
            char msg[ERR_MSG_MAX];
            snprintf(msg, sizeof(msg), "%s", tide_errmsg(NULL));
            err_set(NULL, NULL, rc, "tide_connector_create: cannot open the store '%s': %s",
                    url && *url ? url : "mem://", msg);
            goto fail_cfg;
        }
        c->own_store = 1;
    }
    connector_sched_init(c);
    if (!c->buckets) {
        rc = err_set(NULL, NULL, -ENOMEM, "tide_connector_create: out of memory");
        goto fail;
    }
    if (role == TIDE_CONNECTOR_WORKER && (rc = connector_worker_start(c)) != 0) {
        char msg[ERR_MSG_MAX];
        snprintf(msg, sizeof(msg), "%s", tide_connector_errmsg(c));
        err_set(NULL, NULL, rc, "%s", msg);
        goto fail;
    }
    ccfg_errs_free(&e);
    *out = c;
    return 0;
fail:
    connector_sched_free(c);
    if (c->own_store) tide_close(c->store);
fail_cfg:
    ccfg_errs_free(&e);
    ccfg_free(&c->cfg);
    free_handle(c);
    return rc;
}

TIDE_API int tide_connector_create(const char *config_json, const char *store_url, int role,
                                   tide_connector **out) {
    if (!config_json)
        return err_set(NULL, NULL, -EINVAL, "tide_connector_create: config_json is NULL");
    return create(config_json, NULL, store_url, NULL, role, out);
}

TIDE_API int tide_connector_create_file(const char *config_path, const char *store_url, int role,
                                        tide_connector **out) {
    if (!config_path)
        return err_set(NULL, NULL, -EINVAL, "tide_connector_create_file: config_path is NULL");
    return create(NULL, config_path, store_url, NULL, role, out);
}

TIDE_API int tide_connector_create_with_store(const char *config_json, tide_store *store, int role,
                                              tide_connector **out) {
    if (!config_json || !store)
        return err_set(NULL, NULL, -EINVAL, "tide_connector_create_with_store: NULL argument");
    return create(config_json, NULL, NULL, store, role, out);
}

TIDE_API void tide_connector_destroy(tide_connector *c) {
    if (!c) return;
    if (c->role == TIDE_CONNECTOR_WORKER) {
        tide_connector_wait(c);
        connector_worker_stop(c);
    }
    connector_sched_free(c);
    if (c->own_store) tide_close(c->store);
    ccfg_free(&c->cfg);
    free_handle(c);
}

TIDE_API const char *tide_connector_errmsg(const tide_connector *c) {
    return err_get(c, c ? (errbuf *)&c->err : NULL);
}

/* The callers' sizes of the structs the connector fills (common/abi.h). */
static int struct_size_check(tide_connector *c, const char *fn, const char *type, size_t size,
                             size_t v1, size_t ours) {
    if (abi_size_ok(size, v1, TIDE_STRUCT_SIZE_MAX)) return 0;
    return connector_err(c, -EINVAL,
                         "%s: size %zu is not a %s size (pass sizeof (%s): a multiple of 8 "
                         "from %zu to %d; this library's is %zu)",
                         fn, size, type, type, v1, TIDE_STRUCT_SIZE_MAX, ours);
}

_Static_assert(sizeof(tide_connector_info) == TIDE_CONNECTOR_INFO_SIZE_V1 &&
                   sizeof(tide_connector_stats) == TIDE_CONNECTOR_STATS_SIZE_V1,
               "a grown connector struct keeps its first fields and gets a new _V2 size");

TIDE_API int tide_connector_get_info(tide_connector *c, tide_connector_info *dst, size_t size) {
    if (!c || !dst) return err_set(c, c ? &c->err : NULL, -EINVAL, "get_info: NULL argument");
    int rc = struct_size_check(c, "tide_connector_get_info", "tide_connector_info", size,
                               TIDE_CONNECTOR_INFO_SIZE_V1, sizeof(tide_connector_info));
    if (rc) return rc;
    tide_connector_info full, *out = &full;
    memset(out, 0, sizeof(*out));
    out->role = c->role;
    out->ngroups = (int)c->cfg.ngroups;
    out->scheduler_block_size = c->cfg.scheduler_block_size;
    out->hash_block_size = c->cfg.hash_block_size;
    out->hash_bytes = (int)connector_hash_bytes(&c->cfg);
    out->load_async = c->cfg.extra.load_async;
    out->capacity_only = connector_capacity_only(&c->cfg);
    out->saves = c->saves;
    out->partial_hits = c->cfg.partial_hits;
    abi_fill(dst, size, &full, sizeof(full));
    return 0;
}

TIDE_API int tide_connector_get_stats(tide_connector *c, tide_connector_stats *dst, size_t size) {
    if (!c || !dst) return err_set(c, c ? &c->err : NULL, -EINVAL, "get_stats: NULL argument");
    int rc = struct_size_check(c, "tide_connector_get_stats", "tide_connector_stats", size,
                               TIDE_CONNECTOR_STATS_SIZE_V1, sizeof(tide_connector_stats));
    if (rc) return rc;
    tide_connector_stats full;
    pthread_mutex_lock(&c->stats_lock);
    full = c->stats;
    pthread_mutex_unlock(&c->stats_lock);
    pthread_mutex_lock(&c->wlock);
    full.pressure_active = c->pressure;
    pthread_mutex_unlock(&c->wlock);
    abi_fill(dst, size, &full, sizeof(full));
    return 0;
}

TIDE_API int tide_connector_hit_tokens(tide_connector *c, int64_t num_tokens, const uint8_t *hashes,
                                       size_t nhashes, size_t hash_len, int64_t *hit_tokens) {
    static const char fn[] = "tide_connector_hit_tokens";
    if (!c) return err_set(NULL, NULL, -EINVAL, "%s: connector is NULL", fn);
    if (!hit_tokens) return connector_err(c, -EINVAL, "%s: hit_tokens is NULL", fn);
    int rc = connector_check_hashes(c, fn, hashes, nhashes, hash_len);
    if (rc) return rc;
    return connector_hit_tokens(c, num_tokens, hashes, nhashes, hash_len, hit_tokens);
}
