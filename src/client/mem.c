/*
 * mem.c — the embedded backend, mem://: a store in this process's memory.
 *
 *   mem://?capacity=1GiB&max_value=SIZE&prefault=0&hugepages=0&verify=1&policy=chain
 *         &disk_dir=DIR&disk_capacity=SIZE&disk_segment=SIZE&disk_io=auto|io_uring|pwritev
 *
 * disk_dir turns on the SSD tier (src/store/tier.c): evicted objects spill to segment
 * files under DIR, gets read them back, and a later open of the same DIR finds them again.
 * disk_capacity is then required.
 *
 * Puts copy the caller's scatter list into a reservation while hashing it, then commit
 * with that checksum. Gets pin the object, copy it out while hashing what the caller
 * received, and compare with the stored checksum (verify=1, the default): a mismatch
 * removes the object and reports a miss, so a damaged block is never handed out as good.
 *
 * Batch order is chain order (store.h, store_chain): a put_many commits its keys, and a
 * get_many releases its pins, through one chain cursor, the last key of a put_many of two
 * or more keys marked as the chain's tail (one key alone says nothing about a chain), so
 * the chain-aware policy keeps each batch in prefix order.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "client/client.h"
#include "common/checksum.h"
#include "store/store.h"

#define MEM_DEFAULT_CAPACITY (1ull << 30)

typedef struct mem_impl {
    store *st;
    int verify;
} mem_impl;

static store *mem_store(tide_store *s) {
    return ((mem_impl *)s->impl)->st;
}

static int mem_open(tide_store *s, url *u) {
    char msg[ERR_MSG_MAX];
    store_config cfg = {0};
    int verify = 1, rc;
    if (u->authority[0] || u->path[0])
        return client_err(s, TIDE_EURL, "mem:// takes no host or path (got 'mem://%s%s')",
                          u->authority, u->path);
    if ((rc = url_opt_size(u, "capacity", MEM_DEFAULT_CAPACITY, &cfg.capacity, msg, sizeof(msg))) ||
        (rc = url_opt_size(u, "max_value", 0, &cfg.max_value, msg, sizeof(msg))) ||
        (rc = url_opt_bool(u, "prefault", 0, &cfg.prefault, msg, sizeof(msg))) ||
        (rc = url_opt_bool(u, "hugepages", 0, &cfg.hugepages, msg, sizeof(msg))) ||
        (rc = url_opt_bool(u, "verify", 1, &verify, msg, sizeof(msg))))
        return client_err(s, rc, "mem://: %s", msg);
    /* The default (chain) is chosen by replaying traces through the store (README, "Trace
     * replay"); the same default is in server_config_defaults(). */
    const char *policy = url_get(u, "policy");
    cfg.policy = policy ? store_policy_parse(policy) : STORE_POLICY_DEFAULT;
    if (cfg.policy < 0)
        return client_err(s, TIDE_EOPTION, "mem://: option policy=%s: expected " STORE_POLICY_NAMES,
                          policy);
    if (cfg.capacity == 0)
        return client_err(s, TIDE_EOPTION, "mem://: option capacity must be above 0");
    cfg.disk_dir = url_get(u, "disk_dir");
    if ((rc = url_opt_size(u, "disk_capacity", 0, &cfg.disk_capacity, msg, sizeof(msg))) ||
        (rc = url_opt_size(u, "disk_segment", 0, &cfg.disk_segment, msg, sizeof(msg))))
        return client_err(s, rc, "mem://: %s", msg);
    if (cfg.disk_dir && (!cfg.disk_dir[0] || cfg.disk_capacity == 0))
        return client_err(s, TIDE_EOPTION,
                          "mem://: disk_dir needs a directory and disk_capacity above 0");
    if (!cfg.disk_dir && (cfg.disk_capacity || cfg.disk_segment))
        return client_err(s, TIDE_EOPTION, "mem://: disk_capacity and disk_segment need disk_dir");
    const char *dio = url_get(u, "disk_io");
    if (dio && (cfg.disk_io = store_disk_io_parse(dio)) < 0)
        return client_err(s, TIDE_EOPTION,
                          "mem://: option disk_io=%s: expected auto, io_uring or pwritev", dio);
    mem_impl *m = calloc(1, sizeof(*m));
    if (!m) return client_err(s, -ENOMEM, "mem://: out of memory");
    rc = store_create(&cfg, &m->st, msg, sizeof(msg));
    if (rc) {
        free(m);
        return client_err(s, rc, "mem://: cannot create the store: %s", msg);
    }
    m->verify = verify;
    s->impl = m;
    return 0;
}

static void mem_close(tide_store *s) {
    mem_impl *m = s->impl;
    if (!m) return;
    store_destroy(m->st);
    free(m);
    s->impl = NULL;
}

static int mem_put_many(tide_store *s, const tide_key *keys, size_t n, const tide_iov *iov,
                        const size_t *iovcnt, int *results) {
    store *st = mem_store(s);
    uint8_t *base = store_base(st);
    int ok = 0;
    uint64_t in = 0;
    store_chain chain = STORE_CHAIN_INIT;
    for (size_t i = 0; i < n; i++) {
        size_t cnt = iovcnt ? iovcnt[i] : 1;
        const tide_iov *v = iov;
        iov += cnt;
        int rc = client_key_check(&keys[i]);
        size_t vlen = iov_total(v, cnt);
        if (rc == 0 && vlen == 0) rc = TIDE_EVALEMPTY;
        store_ref ref;
        if (rc == 0) rc = store_reserve(st, keys[i].data, keys[i].len, vlen, 0, &ref);
        if (rc == 0) {
            uint64_t sum = copy_gather(base + ref.offset, v, cnt, 1);
            rc = store_commit_chain(st, ref.id, sum, &chain, n > 1 && i + 1 == n);
            in += vlen;
        } else if (rc == STORE_DUP) {
            rc = 0;
        }
        results[i] = rc;
        ok += rc == 0;
    }
    store_count_io(st, in, 0);
    return ok;
}

static int mem_get_many(tide_store *s, const tide_key *keys, size_t n, const tide_iov *iov,
                        const size_t *iovcnt, int *results, size_t *vlens) {
    mem_impl *m = s->impl;
    uint8_t *base = store_base(m->st);
    int ok = 0;
    uint64_t out = 0;
    store_chain chain = STORE_CHAIN_INIT;
    for (size_t i = 0; i < n; i++) {
        size_t cnt = iovcnt ? iovcnt[i] : 1;
        const tide_iov *v = iov;
        iov += cnt;
        size_t len = 0;
        store_ref ref;
        int rc = client_key_check(&keys[i]);
        if (rc == 0) rc = store_pin(m->st, keys[i].data, keys[i].len, 0, &ref);
        if (rc == 0) {
            len = ref.len;
            if (ref.len > iov_total(v, cnt)) {
                rc = TIDE_EBUFSMALL;
            } else {
                uint64_t sum = copy_scatter(v, cnt, base + ref.offset, ref.len, m->verify);
                if (m->verify && sum != ref.checksum) {
                    store_verify_failed(m->st, ref.id);
                    rc = TIDE_ENOTFOUND;
                    len = 0;
                } else {
                    out += ref.len;
                }
            }
            store_unpin_chain(m->st, ref.id, &chain);
        }
        if (vlens) vlens[i] = len;
        results[i] = rc;
        ok += rc == 0;
    }
    store_count_io(m->st, 0, out);
    return ok;
}

static int mem_exists_many(tide_store *s, const tide_key *keys, size_t n, uint8_t *present) {
    store *st = mem_store(s);
    int count = 0;
    for (size_t i = 0; i < n; i++) {
        present[i] =
            client_key_check(&keys[i]) == 0 && store_exists(st, keys[i].data, keys[i].len) == 1;
        count += present[i];
    }
    return count;
}

static int mem_remove_many(tide_store *s, const tide_key *keys, size_t n, int *results) {
    store *st = mem_store(s);
    int count = 0;
    for (size_t i = 0; i < n; i++) {
        int rc = client_key_check(&keys[i]);
        results[i] = rc ? rc : store_remove(st, keys[i].data, keys[i].len);
        count += results[i] == 0;
    }
    return count;
}

static int mem_match_prefix(tide_store *s, const tide_key *keys, size_t n) {
    store *st = mem_store(s);
    size_t i = 0;
    while (i < n && client_key_check(&keys[i]) == 0 &&
           store_exists(st, keys[i].data, keys[i].len) == 1)
        i++;
    return (int)i;
}

static int mem_clear(tide_store *s) {
    store_clear(mem_store(s));
    return 0;
}

static int mem_stats(tide_store *s, tide_stats *st) {
    store_stats(mem_store(s), st);
    return 0;
}

const backend_ops mem_backend = {
    .scheme = "mem",
    .open = mem_open,
    .close = mem_close,
    .put_many = mem_put_many,
    .get_many = mem_get_many,
    .exists_many = mem_exists_many,
    .remove_many = mem_remove_many,
    .match_prefix = mem_match_prefix,
    .clear = mem_clear,
    .stats = mem_stats,
};
