/*
 * cluster.c — the cluster backends: many tided nodes behind one handle.
 *
 *   tide://H1:P1,H2:P2,...?replicas=R[&fallback=1&timeout_ms=2000&conns=4&retry_ms=1000
 *                                     &threads=4&token=T]
 *   etcd://E1:2379[,E2:2379]/CLUSTER?replicas=R[&poll_ms=1000&...the same options]
 *
 * Each member is reached through its own tide:// handle (node.c, through the public API),
 * so the wire code lives in one place. A batch call works in rounds: every key gets one
 * action per round (GET at its current rank, say), the actions are grouped into one call
 * per member, and those calls run in parallel on a small pool; the results decide each
 * key's next action. Rounds are bounded by the ranks a key may try.
 *
 *   put     R copies on the key's R best live members; a member that fails is replaced by
 *           the next-ranked one. Success when at least one copy is stored.
 *   get     GET at rank 0; on an error (or timeout) the next rank; on a miss, EXISTS at the
 *           remaining ranks (R + fallback in all) and GET from the first that has the key.
 *           A miss so costs one miss on one node, and a hit after a join one extra EXISTS.
 *   exists  EXISTS at rank 0, then at the remaining ranks for the keys not found there.
 *   remove  REMOVE at every rank a read would try.
 *   clear, stats   every member; stats are summed.
 *
 * Values read are checked by node.c against the checksum the server sent; a bad copy is a
 * miss there, and the next rank is asked, so no wrong byte is handed back.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/cluster.h"
#include "common/checksum.h"

#define CLUSTER_DEFAULT_TIMEOUT_MS 2000
#define CLUSTER_DEFAULT_CONNS 4
#define CLUSTER_DEFAULT_RETRY_MS 1000
#define CLUSTER_DEFAULT_THREADS 4
#define CLUSTER_DEFAULT_POLL_MS 1000
#define CLUSTER_MAX_THREADS 64

enum { OP_PUT, OP_GET, OP_EXISTS, OP_REMOVE, OP_CLEAR, OP_STATS };

/* One call to one member. */
typedef struct ctask {
    cluster *c;
    cmember *m;
    int op;
    size_t n;
    tide_key *keys;
    tide_iov *iov; /* PUT/GET: the entries' scatter lists, one after another */
    size_t *iovcnt;
    int *res;
    size_t *vlens;
    uint8_t *present;
    tide_stats st;
    int rc; /* negative: the member failed as a whole */
    char msg[ERR_MSG_MAX];
} ctask;

/* ---- the fan-out pool ---------------------------------------------------------------- */

/* A job is one round's tasks. The caller runs tasks of its own job too, so a round never
 * waits for a pool thread that is busy elsewhere. Lock rule: pool.lock guards the queue
 * and every job's next/finished counters. */
typedef struct cjob {
    ctask *tasks;
    size_t n, next, finished;
    struct cjob *link;
} cjob;

struct cpool {
    pthread_mutex_t lock;
    pthread_cond_t work, done;
    cjob *queue;
    int stop;
    int nth;
    pthread_t th[CLUSTER_MAX_THREADS];
};

static void task_run(ctask *t) {
    tide_store *h;
    int rc = member_handle(t->c, t->m, &h, t->msg, sizeof(t->msg));
    if (rc) {
        t->rc = rc;
        return;
    }
    switch (t->op) {
    case OP_PUT:
        rc = tide_put_many(h, t->keys, t->n, t->iov, t->iovcnt, t->res);
        break;
    case OP_GET:
        rc = tide_get_many(h, t->keys, t->n, t->iov, t->iovcnt, t->res, t->vlens);
        break;
    case OP_EXISTS:
        rc = tide_exists_many(h, t->keys, t->n, t->present);
        break;
    case OP_REMOVE:
        rc = tide_remove_many(h, t->keys, t->n, t->res);
        break;
    case OP_CLEAR:
        rc = tide_clear(h);
        break;
    default:
        rc = tide_stats_get(h, &t->st);
        break;
    }
    if (rc < 0) {
        snprintf(t->msg, sizeof(t->msg), "%s", tide_errmsg(h));
        member_fail(t->c, t->m);
    } else {
        member_ok(t->m);
    }
    t->rc = rc < 0 ? rc : 0;
}

/* Claim the next task of j (pool lock held); unlink j once its last task is claimed. */
static size_t pool_claim(cpool *p, cjob *j) {
    size_t i = j->next++;
    if (j->next == j->n) {
        cjob **pp = &p->queue;
        while (*pp && *pp != j)
            pp = &(*pp)->link;
        if (*pp) *pp = j->link;
    }
    return i;
}

static void *pool_main(void *arg) {
    cpool *p = arg;
    pthread_mutex_lock(&p->lock);
    while (!p->stop) {
        cjob *j = p->queue;
        if (!j) {
            pthread_cond_wait(&p->work, &p->lock);
            continue;
        }
        size_t i = pool_claim(p, j);
        pthread_mutex_unlock(&p->lock);
        task_run(&j->tasks[i]);
        pthread_mutex_lock(&p->lock);
        if (++j->finished == j->n) pthread_cond_broadcast(&p->done);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

static void pool_run(cpool *p, ctask *tasks, size_t n) {
    if (n == 0) return;
    if (n == 1 || p->nth == 0) {
        for (size_t i = 0; i < n; i++)
            task_run(&tasks[i]);
        return;
    }
    cjob j = {tasks, n, 0, 0, NULL};
    pthread_mutex_lock(&p->lock);
    cjob **pp = &p->queue;
    while (*pp)
        pp = &(*pp)->link;
    *pp = &j;
    pthread_cond_broadcast(&p->work);
    while (j.next < j.n) {
        size_t i = pool_claim(p, &j);
        pthread_mutex_unlock(&p->lock);
        task_run(&tasks[i]);
        pthread_mutex_lock(&p->lock);
        j.finished++;
    }
    while (j.finished < j.n)
        pthread_cond_wait(&p->done, &p->lock);
    pthread_mutex_unlock(&p->lock);
}

static void pool_destroy(cpool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->lock);
    p->stop = 1;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->lock);
    for (int i = 0; i < p->nth; i++)
        pthread_join(p->th[i], NULL);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->work);
    pthread_cond_destroy(&p->done);
    free(p);
}

static int pool_create(int nth, cpool **out) {
    cpool *p = calloc(1, sizeof(*p));
    if (!p) return -ENOMEM;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->work, NULL);
    pthread_cond_init(&p->done, NULL);
    for (; p->nth < nth; p->nth++) {
        int rc = pthread_create(&p->th[p->nth], NULL, pool_main, p);
        if (rc) {
            pool_destroy(p);
            return -rc;
        }
    }
    *out = p;
    return 0;
}

/* ---- placement of a batch ------------------------------------------------------------ */

/* Each key's candidate members, best first, as indices into the view. */
typedef struct cplan {
    cview *v;
    size_t depth;
    uint32_t *cand; /* key i: cand[i * depth .. + nc[i]) */
    uint8_t *nc;
    int ignore_down; /* no member was live: try them all */
    uint64_t now;
} cplan;

static void plan_free(cplan *p) {
    free(p->cand);
    free(p->nc);
}

static int plan_make(tide_store *s, cluster *c, cview *v, const tide_key *keys, size_t n,
                     size_t want, cplan *p) {
    memset(p, 0, sizeof(*p));
    p->v = v;
    p->now = now_ns();
    if (v->n == 0)
        return client_err(s, -EHOSTUNREACH, "cluster: no members%s",
                          c->from_etcd ? " registered in etcd" : "");
    uint64_t *seeds = malloc(v->n * sizeof(*seeds));
    uint32_t *live = malloc(v->n * sizeof(*live));
    if (!seeds || !live) {
        free(seeds), free(live);
        return client_err(s, -ENOMEM, "out of memory");
    }
    size_t nl = 0;
    for (size_t i = 0; i < v->n; i++)
        if (!member_is_down(v->m[i], p->now)) live[nl++] = (uint32_t)i;
    if (nl == 0) {
        p->ignore_down = 1;
        for (size_t i = 0; i < v->n; i++)
            live[nl++] = (uint32_t)i;
    }
    for (size_t i = 0; i < nl; i++)
        seeds[i] = v->m[live[i]]->seed;
    p->depth = want < nl ? want : nl;
    if (p->depth > CLUSTER_MAX_DEPTH) p->depth = CLUSTER_MAX_DEPTH;
    p->cand = malloc((n ? n : 1) * p->depth * sizeof(*p->cand));
    p->nc = calloc(n ? n : 1, 1);
    if (!p->cand || !p->nc) {
        free(seeds), free(live);
        plan_free(p);
        return client_err(s, -ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        if (client_key_check(&keys[i]) != 0) continue;
        uint32_t *o = p->cand + i * p->depth;
        cluster_rank(seeds, nl, keys[i].data, keys[i].len, o, p->depth);
        for (size_t r = 0; r < p->depth; r++)
            o[r] = live[o[r]];
        p->nc[i] = (uint8_t)p->depth;
    }
    free(seeds), free(live);
    return 0;
}

static cmember *plan_member(const cplan *p, size_t key, size_t rank) {
    return p->v->m[p->cand[key * p->depth + rank]];
}

/* The first usable rank of key at or after `from` (in `mask` when mask is not ~0), or -1. */
static int plan_next(const cplan *p, size_t key, size_t from, uint32_t mask) {
    for (size_t r = from; r < p->nc[key]; r++) {
        if (!(mask & (1u << r))) continue;
        if (!p->ignore_down && member_is_down(plan_member(p, key, r), now_ns())) continue;
        return (int)r;
    }
    return -1;
}

/* ---- rounds -------------------------------------------------------------------------- */

/* One action of one key in a round, and what came of it. */
typedef struct cact {
    uint32_t key;
    uint8_t rank, op;
    int rc; /* the member's whole-call result */
    int res;
    size_t vlen;
    uint8_t present;
} cact;

/* The caller's batch: keys and, for PUT/GET, scatter lists with each key's offset. */
typedef struct cbatch {
    tide_store *s;
    cluster *c;
    const tide_key *keys;
    size_t n;
    const tide_iov *iov;
    const size_t *iovcnt;
    size_t *off; /* key i's first entry in iov */
    cplan plan;
    int err; /* the first member failure of the call, with its message */
    char errmsg[ERR_MSG_MAX];
} cbatch;

static size_t batch_cnt(const cbatch *b, size_t key) {
    return b->iovcnt ? b->iovcnt[key] : 1;
}

/* Run the actions a[0..na): one call per (member, op), in parallel. */
static int round_run(cbatch *b, cact *a, size_t na) {
    cplan *p = &b->plan;
    size_t groups = p->v->n * 2; /* (member, GET|PUT|REMOVE) and (member, EXISTS) */
    size_t *count = calloc(groups, sizeof(*count)), *slot = calloc(groups, sizeof(*slot));
    uint32_t *order = malloc((na ? na : 1) * sizeof(*order));
    ctask *t = calloc(groups, sizeof(*t));
    int rc = 0;
    if (!count || !slot || !order || !t) {
        rc = client_err(b->s, -ENOMEM, "out of memory");
        goto out;
    }
    /* Group the actions by (member, op) with a counting sort. */
    for (size_t i = 0; i < na; i++) {
        size_t g = p->cand[a[i].key * p->depth + a[i].rank] * 2 + (a[i].op == OP_EXISTS);
        count[g]++;
    }
    size_t sum = 0;
    for (size_t g = 0; g < groups; g++)
        slot[g] = sum, sum += count[g];
    for (size_t i = 0; i < na; i++) {
        size_t g = p->cand[a[i].key * p->depth + a[i].rank] * 2 + (a[i].op == OP_EXISTS);
        order[slot[g]++] = (uint32_t)i;
    }
    size_t nt = 0, at = 0;
    for (size_t g = 0; g < groups; g++) {
        if (!count[g]) continue;
        ctask *k = &t[nt++];
        const cact *first = &a[order[at]];
        k->c = b->c;
        k->m = plan_member(p, first->key, first->rank);
        k->op = first->op;
        k->n = count[g];
        k->keys = malloc(k->n * sizeof(*k->keys));
        k->res = calloc(k->n, sizeof(*k->res));
        k->vlens = calloc(k->n, sizeof(*k->vlens));
        k->present = calloc(k->n, 1);
        k->iovcnt = malloc(k->n * sizeof(*k->iovcnt));
        size_t niov = 0;
        for (size_t j = 0; j < k->n; j++)
            niov += batch_cnt(b, a[order[at + j]].key);
        k->iov = malloc((niov ? niov : 1) * sizeof(*k->iov));
        if (!k->keys || !k->res || !k->vlens || !k->present || !k->iovcnt || !k->iov) {
            rc = client_err(b->s, -ENOMEM, "out of memory");
            goto out;
        }
        size_t q = 0;
        for (size_t j = 0; j < k->n; j++) {
            size_t key = a[order[at + j]].key, cnt = batch_cnt(b, key);
            k->keys[j] = b->keys[key];
            k->iovcnt[j] = cnt;
            if (b->iov) memcpy(k->iov + q, b->iov + b->off[key], cnt * sizeof(*k->iov));
            q += cnt;
        }
        at += k->n;
    }
    pool_run(b->c->pool, t, nt);
    at = 0;
    for (size_t i = 0; i < nt; i++) {
        ctask *k = &t[i];
        if (k->rc < 0 && !b->err) {
            b->err = k->rc;
            snprintf(b->errmsg, sizeof(b->errmsg), "%s", k->msg);
        }
        for (size_t j = 0; j < k->n; j++) {
            cact *x = &a[order[at + j]];
            x->rc = k->rc;
            x->res = k->res[j];
            x->vlen = k->vlens[j];
            x->present = k->present[j];
        }
        at += k->n;
    }
out:
    for (size_t i = 0; t && i < groups; i++) {
        free(t[i].keys), free(t[i].res), free(t[i].vlens), free(t[i].present);
        free(t[i].iovcnt), free(t[i].iov);
    }
    free(t), free(count), free(slot), free(order);
    return rc;
}

static int batch_begin(cbatch *b, tide_store *s, const tide_key *keys, size_t n,
                       const tide_iov *iov, const size_t *iovcnt, size_t depth) {
    memset(b, 0, sizeof(*b));
    b->s = s;
    b->c = s->impl;
    b->keys = keys;
    b->n = n;
    b->iov = iov;
    b->iovcnt = iovcnt;
    if (iov) {
        if (!(b->off = malloc(n * sizeof(*b->off)))) return client_err(s, -ENOMEM, "out of memory");
        size_t o = 0;
        for (size_t i = 0; i < n; i++)
            b->off[i] = o, o += batch_cnt(b, i);
    }
    cview *v = view_get(b->c);
    int rc = plan_make(s, b->c, v, keys, n, depth, &b->plan);
    if (rc) {
        view_put(v);
        free(b->off);
        b->off = NULL;
    }
    return rc;
}

static void batch_end(cbatch *b) {
    view_put(b->plan.v);
    plan_free(&b->plan);
    free(b->off);
}

/* When every key failed because its members did: the whole call fails, naming the node. */
static int batch_result(cbatch *b, int ok, int failed_keys, int valid_keys) {
    if (ok == 0 && failed_keys > 0 && failed_keys == valid_keys)
        return client_err(b->s, b->err ? b->err : -EHOSTUNREACH, "cluster: %s",
                          b->err ? b->errmsg : "no member answered");
    if (failed_keys > 0 && b->err)
        client_err(b->s, b->err, "cluster: %d keys unreachable: %s", failed_keys, b->errmsg);
    return ok;
}

static size_t read_depth(const cluster *c) {
    return c->replicas + c->fallback;
}

/* ---- operations ---------------------------------------------------------------------- */

static int cluster_put_many(tide_store *s, const tide_key *keys, size_t n, const tide_iov *iov,
                            const size_t *iovcnt, int *results) {
    cluster *c = s->impl;
    cbatch b;
    int rc = batch_begin(&b, s, keys, n, iov, iovcnt, CLUSTER_MAX_DEPTH);
    if (rc) return rc;
    size_t target = c->replicas < b.plan.v->n ? c->replicas : b.plan.v->n;
    uint8_t *copies = calloc(n, 1), *pos = calloc(n, 1), *done = calloc(n, 1);
    int *keyerr = calloc(n, sizeof(int)), ok = 0, failed = 0, valid = 0;
    cact *a = malloc(n * target * sizeof(*a) + 1);
    if (!copies || !pos || !done || !keyerr || !a) {
        rc = client_err(s, -ENOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        results[i] = client_key_check(&keys[i]);
        if (!results[i] && iov_total(iov + b.off[i], batch_cnt(&b, i)) == 0)
            results[i] = TIDE_EVALEMPTY;
        done[i] = results[i] != 0;
        valid += !done[i];
    }
    for (size_t round = 0; round <= CLUSTER_MAX_DEPTH; round++) {
        size_t na = 0;
        for (size_t i = 0; i < n; i++) {
            if (done[i]) continue;
            size_t added = 0;
            while (copies[i] + added < target) {
                int r = plan_next(&b.plan, i, pos[i], ~0u);
                if (r < 0) break;
                pos[i] = (uint8_t)(r + 1);
                a[na++] = (cact){.key = (uint32_t)i, .rank = (uint8_t)r, .op = OP_PUT};
                added++;
            }
            if (added == 0) done[i] = 1; /* nothing left to try */
        }
        if (na == 0) break;
        if ((rc = round_run(&b, a, na)) != 0) goto out;
        for (size_t j = 0; j < na; j++) {
            cact *x = &a[j];
            if (x->rc == 0 && x->res == 0) {
                copies[x->key]++;
            } else if (x->rc == 0) {
                if (!keyerr[x->key]) keyerr[x->key] = x->res;
                /* Only a full or busy node is worth replacing; other key errors repeat. */
                if (x->res != TIDE_ENOSPACE && x->res != TIDE_EBUSY) done[x->key] = 1;
            }
        }
        for (size_t i = 0; i < n; i++)
            if (copies[i] >= target) done[i] = 1;
    }
    for (size_t i = 0; i < n; i++) {
        if (client_key_check(&keys[i]) || results[i]) continue;
        atomic_fetch_add(&c->copies_written, copies[i]);
        if (copies[i] > 0) {
            ok++;
            if (copies[i] < c->replicas) atomic_fetch_add(&c->puts_degraded, 1);
        } else {
            atomic_fetch_add(&c->puts_failed, 1);
            results[i] = keyerr[i] ? keyerr[i] : b.err ? b.err : -EHOSTUNREACH;
            failed += !keyerr[i];
        }
    }
    rc = batch_result(&b, ok, failed, valid);
out:
    free(copies), free(pos), free(done), free(keyerr), free(a);
    batch_end(&b);
    return rc;
}

/* A key's read: done, GET due at pos, EXISTS due at the ranks from pos, EXISTS sent. */
enum { K_DONE, K_GET, K_PROBE, K_PROBING };

static int cluster_get_many(tide_store *s, const tide_key *keys, size_t n, const tide_iov *iov,
                            const size_t *iovcnt, int *results, size_t *vlens) {
    cluster *c = s->impl;
    cbatch b;
    int rc = batch_begin(&b, s, keys, n, iov, iovcnt, read_depth(c));
    if (rc) return rc;
    uint8_t *state = calloc(n, 1), *pos = calloc(n, 1), *failover = calloc(n, 1);
    uint32_t *mask = malloc(n * sizeof(*mask));
    int *lasterr = calloc(n, sizeof(int)), ok = 0, failed = 0, valid = 0;
    cact *a = malloc(n * b.plan.depth * sizeof(*a) + 1);
    if (!state || !pos || !failover || !mask || !lasterr || !a) {
        rc = client_err(s, -ENOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        results[i] = client_key_check(&keys[i]);
        if (vlens) vlens[i] = 0;
        mask[i] = ~0u;
        if (results[i]) continue;
        valid++;
        int r = plan_next(&b.plan, i, 0, ~0u);
        if (r < 0) {
            results[i] = -EHOSTUNREACH;
            failed++;
            continue;
        }
        state[i] = K_GET;
        pos[i] = (uint8_t)r;
    }
    for (size_t round = 0; round < 3 * CLUSTER_MAX_DEPTH; round++) {
        size_t na = 0;
        for (size_t i = 0; i < n; i++) {
            if (state[i] == K_GET) {
                a[na++] = (cact){.key = (uint32_t)i, .rank = pos[i], .op = OP_GET};
            } else if (state[i] == K_PROBE) {
                size_t before = na;
                for (int r = plan_next(&b.plan, i, pos[i], ~0u); r >= 0;
                     r = plan_next(&b.plan, i, (size_t)r + 1, ~0u))
                    a[na++] = (cact){.key = (uint32_t)i, .rank = (uint8_t)r, .op = OP_EXISTS};
                state[i] = K_PROBING;
                if (na == before) {
                    state[i] = K_DONE;
                    results[i] = TIDE_ENOTFOUND;
                }
                mask[i] = 0;
            }
        }
        if (na == 0) break;
        if ((rc = round_run(&b, a, na)) != 0) goto out;
        for (size_t j = 0; j < na; j++) {
            cact *x = &a[j];
            size_t i = x->key;
            int probed = mask[i] != ~0u;
            if (x->op == OP_EXISTS) {
                if (x->rc == 0 && x->present) mask[i] |= 1u << x->rank;
                continue;
            }
            if (x->rc < 0) { /* the member failed: fail over to the next rank */
                lasterr[i] = x->rc;
                failover[i] = 1;
                int r = plan_next(&b.plan, i, (size_t)x->rank + 1, mask[i]);
                if (r >= 0) {
                    pos[i] = (uint8_t)r;
                } else {
                    state[i] = K_DONE;
                    results[i] = probed ? TIDE_ENOTFOUND : x->rc;
                    failed += !probed;
                }
            } else if (x->res == TIDE_ENOTFOUND) {
                int r = probed ? plan_next(&b.plan, i, (size_t)x->rank + 1, mask[i]) : -1;
                if (!probed && (size_t)x->rank + 1 < b.plan.nc[i]) {
                    state[i] = K_PROBE; /* ask the remaining ranks who has it */
                    pos[i] = (uint8_t)(x->rank + 1);
                } else if (r >= 0) {
                    pos[i] = (uint8_t)r;
                } else {
                    state[i] = K_DONE;
                    results[i] = TIDE_ENOTFOUND;
                }
            } else {
                state[i] = K_DONE;
                results[i] = x->res;
                if (vlens) vlens[i] = x->vlen;
                if (x->res == 0) {
                    ok++;
                    if (probed)
                        atomic_fetch_add(&c->read_fallbacks, 1);
                    else if (failover[i])
                        atomic_fetch_add(&c->read_failovers, 1);
                }
            }
        }
        /* Probes answered: read from the first rank that has the key. */
        for (size_t i = 0; i < n; i++) {
            if (state[i] != K_PROBING) continue;
            int r = plan_next(&b.plan, i, pos[i], mask[i]);
            if (r < 0) {
                state[i] = K_DONE;
                results[i] = TIDE_ENOTFOUND;
            } else {
                state[i] = K_GET;
                pos[i] = (uint8_t)r;
            }
        }
    }
    rc = batch_result(&b, ok, failed, valid);
out:
    free(state), free(pos), free(failover), free(mask), free(lasterr), free(a);
    batch_end(&b);
    return rc;
}

enum { E_DONE, E_FIRST, E_REST };

static int cluster_exists_many(tide_store *s, const tide_key *keys, size_t n, uint8_t *present) {
    cluster *c = s->impl;
    cbatch b;
    int rc = batch_begin(&b, s, keys, n, NULL, NULL, read_depth(c));
    if (rc) return rc;
    uint8_t *state = calloc(n, 1), *pos = calloc(n, 1);
    cact *a = malloc(n * b.plan.depth * sizeof(*a) + 1);
    int count = 0, failed = 0, valid = 0;
    if (!state || !pos || !a) {
        rc = client_err(s, -ENOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        present[i] = 0;
        if (client_key_check(&keys[i])) continue;
        valid++;
        int r = plan_next(&b.plan, i, 0, ~0u);
        if (r < 0) {
            failed++;
            continue;
        }
        state[i] = E_FIRST;
        pos[i] = (uint8_t)r;
    }
    for (size_t round = 0; round < 2 * CLUSTER_MAX_DEPTH; round++) {
        size_t na = 0;
        for (size_t i = 0; i < n; i++) {
            if (state[i] == E_FIRST) {
                a[na++] = (cact){.key = (uint32_t)i, .rank = pos[i], .op = OP_EXISTS};
            } else if (state[i] == E_REST) {
                for (int r = plan_next(&b.plan, i, pos[i], ~0u); r >= 0;
                     r = plan_next(&b.plan, i, (size_t)r + 1, ~0u))
                    a[na++] = (cact){.key = (uint32_t)i, .rank = (uint8_t)r, .op = OP_EXISTS};
                state[i] = E_DONE; /* decided by this round's answers */
            }
        }
        if (na == 0) break;
        if ((rc = round_run(&b, a, na)) != 0) goto out;
        for (size_t j = 0; j < na; j++) {
            cact *x = &a[j];
            size_t i = x->key;
            if (state[i] != E_FIRST) { /* one of the remaining ranks */
                if (x->rc == 0 && x->present) present[i] = 1;
                continue;
            }
            if (x->rc < 0) {
                int r = plan_next(&b.plan, i, (size_t)x->rank + 1, ~0u);
                if (r >= 0) {
                    pos[i] = (uint8_t)r;
                } else {
                    state[i] = E_DONE;
                    failed++;
                }
            } else if (x->present) {
                present[i] = 1;
                state[i] = E_DONE;
            } else {
                state[i] = E_REST;
                pos[i] = (uint8_t)(x->rank + 1);
            }
        }
    }
    for (size_t i = 0; i < n; i++)
        count += present[i];
    rc = batch_result(&b, count, failed, valid);
    if (rc >= 0 && failed > 0 && b.err) rc = b.err; /* an unanswerable key: say so */
out:
    free(state), free(pos), free(a);
    batch_end(&b);
    return rc;
}

static int cluster_remove_many(tide_store *s, const tide_key *keys, size_t n, int *results) {
    cluster *c = s->impl;
    cbatch b;
    int rc = batch_begin(&b, s, keys, n, NULL, NULL, read_depth(c));
    if (rc) return rc;
    cact *a = malloc(n * b.plan.depth * sizeof(*a) + 1);
    int removed = 0, failed = 0, valid = 0;
    if (!a) {
        rc = client_err(s, -ENOMEM, "out of memory");
        goto out;
    }
    size_t na = 0;
    for (size_t i = 0; i < n; i++) {
        results[i] = client_key_check(&keys[i]);
        if (results[i]) continue;
        valid++;
        results[i] = -EHOSTUNREACH; /* until a member answers */
        for (int r = plan_next(&b.plan, i, 0, ~0u); r >= 0;
             r = plan_next(&b.plan, i, (size_t)r + 1, ~0u))
            a[na++] = (cact){.key = (uint32_t)i, .rank = (uint8_t)r, .op = OP_REMOVE};
    }
    if ((rc = round_run(&b, a, na)) != 0) goto out;
    for (size_t j = 0; j < na; j++) {
        cact *x = &a[j];
        int *r = &results[x->key];
        if (x->rc < 0) {
            if (*r == -EHOSTUNREACH) *r = x->rc;
        } else if (x->res == 0 || *r < 0) {
            /* Removed somewhere wins; otherwise any answer beats an unreachable node. */
            if (*r != 0) *r = x->res;
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (client_key_check(&keys[i])) continue;
        removed += results[i] == 0;
        failed += results[i] != 0 && results[i] != TIDE_ENOTFOUND;
    }
    rc = batch_result(&b, removed, failed, valid);
out:
    free(a);
    batch_end(&b);
    return rc;
}

/* CLEAR or STAT on every member of the view, in parallel. */
static int cluster_all(tide_store *s, int op, tide_stats *sum) {
    cluster *c = s->impl;
    cview *v = view_get(c);
    ctask *t = calloc(v->n ? v->n : 1, sizeof(*t));
    if (!t) {
        view_put(v);
        return client_err(s, -ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < v->n; i++)
        t[i] = (ctask){.c = c, .m = v->m[i], .op = op};
    pool_run(c->pool, t, v->n);
    int rc = 0, nfail = 0;
    const ctask *first = NULL;
    for (size_t i = 0; i < v->n; i++) {
        if (t[i].rc < 0) {
            nfail++;
            if (!first) first = &t[i];
            continue;
        }
        if (op != OP_STATS) continue;
        const uint64_t *src = (const uint64_t *)&t[i].st;
        uint64_t *dst = (uint64_t *)sum;
        for (size_t f = 0; f < sizeof(*sum) / sizeof(uint64_t); f++)
            dst[f] += src[f];
    }
    const char *what = op == OP_STATS ? "stats" : "clear";
    if (v->n == 0)
        rc = client_err(s, -EHOSTUNREACH, "cluster %s: no members", what);
    else if (first && (op == OP_CLEAR || (size_t)nfail == v->n))
        /* A clear must reach every member; stats are summed over those that answered. */
        rc = client_err(s, first->rc, "cluster %s: %d of %zu members failed: %s", what, nfail, v->n,
                        first->msg);
    free(t);
    view_put(v);
    return rc;
}

static int cluster_clear(tide_store *s) {
    return cluster_all(s, OP_CLEAR, NULL);
}

static int cluster_stats(tide_store *s, tide_stats *st) {
    return cluster_all(s, OP_STATS, st);
}

/* ---- open / close -------------------------------------------------------------------- */

static void cluster_close(tide_store *s) {
    cluster *c = s->impl;
    if (!c) return;
    cluster_etcd_stop(c);
    pool_destroy(c->pool);
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
    c->timeout_ms = timeout_ms;
    c->retry_ns = retry_ms * 1000000ull;
    int n = snprintf(c->node_query, sizeof(c->node_query), "?timeout_ms=%llu&conns=%llu",
                     (unsigned long long)timeout_ms, (unsigned long long)conns);
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
    if ((rc = pool_create((int)threads, &c->pool)) != 0) {
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
    pool_run(c->pool, t, v->n);
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

int cluster_claims(const url *u) {
    if (strchr(u->authority, ',')) return 1;
    for (size_t i = 0; i < u->nopts; i++)
        if (!strcmp(u->opts[i].name, "replicas") || !strcmp(u->opts[i].name, "fallback")) return 1;
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
};

/* ---- cluster introspection (public) -------------------------------------------------- */

static cluster *cluster_of(tide_store *s) {
    return s && (s->ops == &cluster_backend || s->ops == &etcd_backend) ? s->impl : NULL;
}

TIDE_API int tide_cluster_info_get(tide_store *s, tide_cluster_info *info) {
    if (!s || !info) return err_set(NULL, NULL, -EINVAL, "tide_cluster_info_get: NULL argument");
    cluster *c = cluster_of(s);
    if (!c)
        return client_err(s, TIDE_EUNSUPPORTED, "tide_cluster_info_get: %s:// is not a cluster",
                          s->ops->scheme);
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
