/*
 * cluster_batch.c — the cluster backends' operations. A batch call works in rounds: every
 * key gets one action per round (GET at its current rank, say), the actions are grouped into
 * one call per member (round_run), and those calls run in parallel on the fan-out threads
 * (cluster_fanout.c); the results decide each key's next action. Rounds are bounded by the
 * ranks a key may try.
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
#include "proto/frame.h"

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

/* Run the member calls t[0..nt) (at most one) in this thread while the hint question q
 * travels: q is sent first, its answer read after them. The member answering q is marked
 * as task_run would (cluster_fanout.c). */
static void ask_overlapped(cluster *c, ctask *t, size_t nt, ctask *q) {
    tide_store *h = NULL;
    node_pending *pend = NULL;
    int hrc = 0;
    if (!atomic_load(&q->m->missed) &&
        (hrc = member_handle(c, q->m, &h, q->msg, sizeof(q->msg))) == 0)
        pend = node_ask_send(h, q->about);
    for (size_t i = 0; i < nt; i++)
        cluster_fanout_run(c->fanout, &t[i], 1);
    if (hrc) { /* no handle: member_handle marked the member down */
        q->rc = hrc;
        return;
    }
    if (!pend) { /* the whole call, as a task (tells the member first if it is due) */
        cluster_fanout_run(c->fanout, q, 1);
        return;
    }
    int rc = node_ask_recv(h, q->about, pend, q->hint);
    q->rc = rc < 0 ? rc : 0;
    if (replica_refused(rc)) { /* an answer, as in task_run: the member is not failing */
        snprintf(q->msg, sizeof(q->msg), "%s", tide_errmsg(h));
    } else if (rc < 0) {
        snprintf(q->msg, sizeof(q->msg), "%s", tide_errmsg(h));
        member_fail(c, q->m);
    } else {
        member_ok(q->m);
    }
}

/* Run the actions a[0..na): one call per (member, op), in parallel, and beside them the
 * ready-made tasks extra[0..nextra) (hint questions), whose results are copied back. */
static int round_run_with(cbatch *b, cact *a, size_t na, ctask *extra, size_t nextra) {
    cplan *p = &b->plan;
    size_t groups = p->v->n * 2; /* (member, GET|PUT|REMOVE) and (member, EXISTS) */
    size_t *count = calloc(groups, sizeof(*count)), *slot = calloc(groups, sizeof(*slot));
    uint32_t *order = malloc((na ? na : 1) * sizeof(*order));
    ctask *t = calloc(groups + nextra, sizeof(*t));
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
        k->m = cluster_plan_member(p, first->key, first->rank);
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
    if (nextra) memcpy(t + nt, extra, nextra * sizeof(*t));
    if (nt <= 1 && nextra == 1 && t[nt].op == OP_REPLICA && t[nt].rflags == FRAME_REPLICA_ASK) {
        /* One member's call and one question: both from this thread, the question sent
         * first and its answer read after the call (handing either to a pool thread cost
         * more than the round trip: docs/CLUSTER.md, "Hints"). */
        ask_overlapped(b->c, t, nt, &t[nt]);
    } else {
        cluster_fanout_run(b->c->fanout, t, nt + nextra);
    }
    if (nextra) memcpy(extra, t + nt, nextra * sizeof(*t));
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

static int round_run(cbatch *b, cact *a, size_t na) {
    return round_run_with(b, a, na, NULL, 0);
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
    int rc = cluster_plan_make(s, b->c, v, keys, n, depth, &b->plan);
    if (rc) {
        view_put(v);
        free(b->off);
        b->off = NULL;
    }
    return rc;
}

static void batch_end(cbatch *b) {
    view_put(b->plan.v);
    cluster_plan_free(&b->plan);
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

/* A write skips the members backing off after a failure: each must learn, at its next call,
 * that it may have missed writes (REPLICA MISSED; docs/CLUSTER.md). */
static void batch_mark_skipped(const cbatch *b) {
    const cview *v = b->plan.v;
    for (size_t i = 0; i < v->n; i++)
        if (member_is_down(v->m[i], b->plan.now)) atomic_store(&v->m[i]->missed, 1);
}

/* ---- hints (docs/CLUSTER.md, "Hints") ------------------------------------------------- */

/* Whether view member x, backing off when the batch began, would have taken a write of
 * key k had it been up: it would rank among the key's first `upto` candidates. */
static int down_would_hold(const cbatch *b, size_t k, uint32_t x, size_t upto) {
    const cplan *p = &b->plan;
    size_t nc = p->nc[k] < upto ? p->nc[k] : upto;
    if (nc < upto) return 1; /* fewer live members than the write wanted */
    const tide_key *key = &b->keys[k];
    uint32_t last = p->cand[k * p->depth + nc - 1];
    return cluster_weight(p->v->m[x]->seed, key->data, key->len) >=
           cluster_weight(p->v->m[last]->seed, key->data, key->len);
}

/* The members backing off when the batch began (none when all were, and so all tried):
 * their view indices in down[], how many returned. */
static size_t batch_down(const cbatch *b, uint32_t *down) {
    size_t nd = 0;
    for (size_t i = 0; !b->plan.ignore_down && i < b->plan.v->n; i++)
        if (member_is_down(b->plan.v->m[i], b->plan.now)) down[nd++] = (uint32_t)i;
    return nd;
}

/* Member y took key k's write: it owes hints for every member the write of k skipped —
 * one whose call failed in this batch (failed[x]), or one backing off that would have taken
 * it (need[y * n + x]). */
static void note_taker(const cbatch *b, size_t k, uint32_t y, const uint8_t *failed,
                       const uint32_t *down, size_t nd, size_t upto, uint8_t *need) {
    size_t n = b->plan.v->n;
    for (size_t x = 0; x < n; x++)
        if (failed[x] && x != y) need[y * n + x] = 1;
    for (size_t d = 0; d < nd; d++)
        if (down[d] != y && down_would_hold(b, k, down[d], upto)) need[y * n + down[d]] = 1;
}

/* The (taker, skipped) matrix, allocated only when the batch skipped a member (one backing
 * off, or one whose call failed): *need stays NULL otherwise. 0 or -ENOMEM. */
static int need_alloc(cbatch *b, const uint8_t *failed, size_t nd, uint8_t **need) {
    size_t n = b->plan.v->n, any = nd;
    for (size_t i = 0; i < n; i++)
        any += failed[i];
    if (!any) return 0;
    if (!(*need = calloc(n * n, 1))) return client_err(b->s, -ENOMEM, "out of memory");
    return 0;
}

/*
 * Before a write that skipped members is acknowledged, every member that took a part of it
 * records a hint for each member skipped for that part (REPLICA HINT; need[y * n + x]: y
 * owes one for x), so that a reader asking it learns that the skipped member may hold
 * removed or superseded bytes. hinted[y] says whether member y recorded all it owed (or is
 * an older tided that holds none: there the write is acknowledged as before). Nothing is
 * sent when nothing was skipped.
 */
static int batch_hint(cbatch *b, const uint8_t *need, uint8_t *hinted) {
    const cview *v = b->plan.v;
    size_t nt = 0, nn = 0;
    for (size_t i = 0; i < v->n; i++)
        hinted[i] = 1;
    for (size_t i = 0; need && i < v->n * v->n; i++)
        nn += need[i];
    if (nn == 0) return 0;
    ctask *t = calloc(nn, sizeof(*t));
    if (!t) return client_err(b->s, -ENOMEM, "out of memory");
    for (size_t y = 0; y < v->n; y++)
        for (size_t x = 0; x < v->n; x++)
            if (need[y * v->n + x])
                t[nt++] = (ctask){.c = b->c,
                                  .m = v->m[y],
                                  .op = OP_REPLICA,
                                  .rflags = FRAME_REPLICA_HINT,
                                  .about = v->m[x]->seed};
    cluster_fanout_run(b->c->fanout, t, nt);
    for (size_t i = 0; i < nt; i++) {
        if (t[i].rc == 0 || t[i].rc == TIDE_EUNSUPPORTED) continue;
        for (size_t y = 0; y < v->n; y++)
            if (v->m[y] == t[i].m) hinted[y] = 0;
        if (!b->err) {
            b->err = t[i].rc;
            snprintf(b->errmsg, sizeof(b->errmsg), "recording a hint: %s", t[i].msg);
        }
    }
    free(t);
    return 0;
}

/* A read's witness for the member at `rank` of `key`: the key's first other candidate that
 * is not down (the replica a write that skipped it went to: writes skip down members too),
 * or -1 when it has none. A down member is never asked: its question would only wait out
 * the timeout a second time, after the read that marked it down already did. */
static int witness_of(const cplan *p, size_t key, size_t rank) {
    uint32_t x = p->cand[key * p->depth + rank];
    uint64_t now = now_ns();
    for (size_t r = 0; r < p->nc[key]; r++) {
        uint32_t w = p->cand[key * p->depth + r];
        if (w == x || (!p->ignore_down && member_is_down(p->v->m[w], now))) continue;
        return (int)w;
    }
    return -1;
}

/* The hint questions for a round's reads a[0..na) of op `op`: one per (member read,
 * witness) pair, at most maxask, into ask/about. Returns how many. */
static size_t round_asks(cbatch *b, const cact *a, size_t na, int op, ctask *ask, uint32_t *about,
                         size_t maxask) {
    size_t nask = 0;
    for (size_t j = 0; j < na; j++) {
        if (a[j].op != op) continue;
        uint32_t x = b->plan.cand[a[j].key * b->plan.depth + a[j].rank];
        int w = witness_of(&b->plan, a[j].key, a[j].rank);
        if (w < 0) continue;
        size_t q = 0;
        while (q < nask && !(about[q] == x && ask[q].m == b->plan.v->m[w]))
            q++;
        if (q < nask || nask == maxask) continue;
        about[nask] = x;
        ask[nask++] = (ctask){.c = b->c,
                              .m = b->plan.v->m[w],
                              .op = OP_REPLICA,
                              .rflags = FRAME_REPLICA_ASK,
                              .about = b->plan.v->m[x]->seed};
    }
    return nask;
}

/* Why doubt[x] is set (bits), for the caller's message. */
enum {
    DOUBT_RECENT = 1,  /* told only recently: a GET of this round may precede the fence */
    DOUBT_DROPPED = 2, /* held untold hints: told MISSED now, it dropped its contents */
    DOUBT_UNTOLD = 4,  /* held untold hints: MISSED could not be said now (said next call) */
};

/* The message for a read dropped for doubt[x]'s reasons. */
static const char *doubt_msg(uint8_t why) {
    if (why & DOUBT_DROPPED)
        return "a member that missed writes was made to drop its contents; its keys were "
               "read from their next replica";
    if (why & DOUBT_UNTOLD)
        return "a member that missed writes could not be told to drop its contents (it will "
               "be on its next call); its keys were read from their next replica";
    return "a member was told it missed writes while this read ran; its keys were read from "
           "their next replica";
}

/*
 * After a round whose GETs or EXISTS ran beside hint questions ask[0..nask) (ask[i] asked
 * the witness ask[i].m about view member about[i]): a member some witness holds untold hints for
 * may serve removed or superseded bytes. Tell it (REPLICA MISSED: it drops its contents), then tell
 * the witnesses (REPLICA TOLD with the count they gave). Either way, and also when a
 * witness says the member was told only recently (a GET of this round may have been
 * answered before that fence), doubt[x] is set: what this round read from it is discarded
 * and those keys go to their next rank. A witness that did not answer settles nothing: the
 * member's answer stands (docs/CLUSTER.md, "Hints", limits).
 */
static void batch_settle_doubt(cbatch *b, ctask *ask, const uint32_t *about, size_t nask,
                               uint8_t *doubt) {
    const cview *v = b->plan.v;
    uint8_t *untold = calloc(v->n + 1, 1);
    for (size_t i = 0; i < nask; i++) {
        if (ask[i].rc != 0) continue;
        uint64_t told = ask[i].hint[1] & ~FRAME_REPLICA_TOLD_RECENT;
        if (ask[i].hint[1] & FRAME_REPLICA_TOLD_RECENT) doubt[about[i]] |= DOUBT_RECENT;
        if (ask[i].hint[0] > told && untold) untold[about[i]] = 1;
    }
    for (size_t x = 0; untold && x < v->n; x++) {
        if (!untold[x]) continue;
        cmember *m = v->m[x];
        tide_store *h;
        char msg[ERR_MSG_MAX];
        uint64_t out[2];
        int rc = member_handle(b->c, m, &h, msg, sizeof(msg));
        if (rc == 0) rc = node_replica_call(h, FRAME_REPLICA_MISSED, 0, 0, out);
        if (rc) { /* not told now: its next call tells it; the hints stay */
            atomic_store(&m->missed, 1);
            doubt[x] |= DOUBT_UNTOLD;
            continue;
        }
        doubt[x] |= DOUBT_DROPPED;
        for (size_t i = 0; i < nask; i++) {
            if (about[i] != x || ask[i].rc != 0 ||
                ask[i].hint[0] <= (ask[i].hint[1] & ~FRAME_REPLICA_TOLD_RECENT))
                continue;
            ctask t = {.c = b->c,
                       .m = ask[i].m,
                       .op = OP_REPLICA,
                       .rflags = FRAME_REPLICA_TOLD,
                       .about = m->seed,
                       .seq = ask[i].hint[0]};
            cluster_fanout_run(b->c->fanout, &t, 1);
        }
    }
    if (!untold) /* out of memory: nobody is told now, but nothing doubtful is read */
        for (size_t i = 0; i < nask; i++)
            if (ask[i].rc == 0 && ask[i].hint[0] > 0) doubt[about[i]] |= DOUBT_UNTOLD;
    free(untold);
}

/* ---- operations ---------------------------------------------------------------------- */

int cluster_put_many(tide_store *s, const tide_key *keys, size_t n, const tide_iov *iov,
                     const size_t *iovcnt, int *results) {
    cluster *c = s->impl;
    cbatch b;
    int rc = batch_begin(&b, s, keys, n, iov, iovcnt, CLUSTER_MAX_DEPTH);
    if (rc) return rc;
    size_t target = c->replicas < b.plan.v->n ? c->replicas : b.plan.v->n;
    uint8_t *copies = calloc(n, 1), *pos = calloc(n, 1), *done = calloc(n, 1);
    int *keyerr = calloc(n, sizeof(int)), ok = 0, failed = 0, valid = 0;
    cact *a = malloc(n * target * sizeof(*a) + 1);
    uint32_t *took = malloc(n * (target ? target : 1) * sizeof(*took));
    size_t nm = b.plan.v->n;
    uint8_t *failed_m = calloc(nm + 1, 1), *need = NULL, *hinted = calloc(nm + 1, 1);
    uint32_t *down = malloc((nm + 1) * sizeof(*down));
    if (!copies || !pos || !done || !keyerr || !a || !took || !failed_m || !hinted || !down) {
        rc = client_err(s, -ENOMEM, "out of memory");
        goto out;
    }
    batch_mark_skipped(&b);
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
                int r = cluster_plan_next(&b.plan, i, pos[i], ~0u);
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
            uint32_t mi = b.plan.cand[x->key * b.plan.depth + x->rank];
            if (x->rc < 0) failed_m[mi] = 1;
            if (x->rc == 0 && x->res == 0) {
                took[x->key * target + copies[x->key]] = mi;
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
    /* A copy counts once its member recorded the hints for the members the put skipped. */
    size_t nd = batch_down(&b, down);
    if ((rc = need_alloc(&b, failed_m, nd, &need)) != 0) goto out;
    for (size_t i = 0; need && i < n; i++)
        for (size_t j = 0; j < copies[i]; j++)
            note_taker(&b, i, took[i * target + j], failed_m, down, nd, target, need);
    if ((rc = batch_hint(&b, need, hinted)) != 0) goto out;
    for (size_t i = 0; i < n; i++) {
        uint8_t kept = 0;
        for (size_t j = 0; j < copies[i]; j++)
            kept += hinted[took[i * target + j]];
        copies[i] = kept;
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
    free(took), free(failed_m), free(need), free(hinted), free(down);
    batch_end(&b);
    return rc;
}

/* A read's check (read_check=1): the round's hint questions and which members are in
 * doubt after them, shared by get and exists. */
typedef struct rcheck {
    ctask *ask;
    uint32_t *about;
    uint8_t *doubt; /* per view member: DOUBT_* bits, or 0 */
    size_t nm, maxask;
} rcheck;

/* 0, or -1 out of memory. */
static int rcheck_init(rcheck *k, const cbatch *b) {
    cluster *c = b->c;
    k->nm = b->plan.v->n;
    k->maxask = k->nm * (k->nm > 1 ? k->nm - 1 : 1);
    k->ask = c->read_check ? calloc(k->maxask ? k->maxask : 1, sizeof(*k->ask)) : NULL;
    k->about = c->read_check ? malloc((k->maxask ? k->maxask : 1) * sizeof(*k->about)) : NULL;
    k->doubt = calloc(k->nm + 1, 1);
    return !k->doubt || (c->read_check && (!k->ask || !k->about)) ? -1 : 0;
}

static void rcheck_free(rcheck *k) {
    free(k->ask), free(k->about), free(k->doubt);
}

/* Run the round's actions a[0..na) of kind op (OP_GET or OP_EXISTS) with their hint
 * questions beside them, then settle k->doubt. */
static int rcheck_round(rcheck *k, cbatch *b, cact *a, size_t na, int op) {
    size_t nask = b->c->read_check ? round_asks(b, a, na, op, k->ask, k->about, k->maxask) : 0;
    int rc = round_run_with(b, a, na, k->ask, nask);
    if (rc) return rc;
    memset(k->doubt, 0, k->nm);
    if (nask) batch_settle_doubt(b, k->ask, k->about, nask, k->doubt);
    return 0;
}

/* A key's read: done, GET due at pos, EXISTS due at the ranks from pos, EXISTS sent. */
enum { K_DONE, K_GET, K_PROBE, K_PROBING };

int cluster_get_many(tide_store *s, const tide_key *keys, size_t n, const tide_iov *iov,
                     const size_t *iovcnt, int *results, size_t *vlens) {
    cluster *c = s->impl;
    cbatch b;
    int rc = batch_begin(&b, s, keys, n, iov, iovcnt, read_depth(c));
    if (rc) return rc;
    uint8_t *state = calloc(n, 1), *pos = calloc(n, 1), *failover = calloc(n, 1);
    uint32_t *mask = malloc(n * sizeof(*mask));
    int *lasterr = calloc(n, sizeof(int)), ok = 0, failed = 0, valid = 0;
    cact *a = malloc(n * b.plan.depth * sizeof(*a) + 1);
    /* read_check: beside each round's GETs, one question per (member read, witness). */
    rcheck chk;
    int chk_rc = rcheck_init(&chk, &b);
    uint8_t *doubt = chk.doubt;
    if (!state || !pos || !failover || !mask || !lasterr || !a || chk_rc) {
        rc = client_err(s, -ENOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        results[i] = client_key_check(&keys[i]);
        if (vlens) vlens[i] = 0;
        mask[i] = ~0u;
        if (results[i]) continue;
        valid++;
        int r = cluster_plan_next(&b.plan, i, 0, ~0u);
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
                for (int r = cluster_plan_next(&b.plan, i, pos[i], ~0u); r >= 0;
                     r = cluster_plan_next(&b.plan, i, (size_t)r + 1, ~0u))
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
        if ((rc = rcheck_round(&chk, &b, a, na, OP_GET)) != 0) goto out;
        for (size_t j = 0; j < na; j++) {
            cact *x = &a[j];
            size_t i = x->key;
            int probed = mask[i] != ~0u;
            if (x->op == OP_EXISTS) {
                if (x->rc == 0 && x->present) mask[i] |= 1u << x->rank;
                continue;
            }
            uint8_t why = doubt[b.plan.cand[i * b.plan.depth + x->rank]];
            if (x->rc == 0 && why) {
                /* It may have missed writes: what it sent is dropped, the next rank asked. */
                x->rc = -ESTALE;
                if (!b.err) {
                    b.err = -ESTALE;
                    snprintf(b.errmsg, sizeof(b.errmsg), "%s", doubt_msg(why));
                }
            }
            if (x->rc < 0) { /* the member failed: fail over to the next rank */
                lasterr[i] = x->rc;
                failover[i] = 1;
                int r = cluster_plan_next(&b.plan, i, (size_t)x->rank + 1, mask[i]);
                if (r >= 0) {
                    pos[i] = (uint8_t)r;
                } else {
                    state[i] = K_DONE;
                    results[i] = probed ? TIDE_ENOTFOUND : x->rc;
                    failed += !probed;
                }
            } else if (x->res == TIDE_ENOTFOUND) {
                int r = probed ? cluster_plan_next(&b.plan, i, (size_t)x->rank + 1, mask[i]) : -1;
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
            int r = cluster_plan_next(&b.plan, i, pos[i], mask[i]);
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
    rcheck_free(&chk);
    batch_end(&b);
    return rc;
}

enum { E_DONE, E_FIRST, E_REST };

int cluster_exists_many(tide_store *s, const tide_key *keys, size_t n, uint8_t *present) {
    cluster *c = s->impl;
    cbatch b;
    int rc = batch_begin(&b, s, keys, n, NULL, NULL, read_depth(c));
    if (rc) return rc;
    uint8_t *state = calloc(n, 1), *pos = calloc(n, 1);
    cact *a = malloc(n * b.plan.depth * sizeof(*a) + 1);
    int count = 0, failed = 0, valid = 0;
    /* read_check: "present" from a member in doubt may be a removed key (see get). */
    rcheck chk;
    int chk_rc = rcheck_init(&chk, &b);
    uint8_t *doubt = chk.doubt;
    if (!state || !pos || !a || chk_rc) {
        rc = client_err(s, -ENOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        present[i] = 0;
        if (client_key_check(&keys[i])) continue;
        valid++;
        int r = cluster_plan_next(&b.plan, i, 0, ~0u);
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
                for (int r = cluster_plan_next(&b.plan, i, pos[i], ~0u); r >= 0;
                     r = cluster_plan_next(&b.plan, i, (size_t)r + 1, ~0u))
                    a[na++] = (cact){.key = (uint32_t)i, .rank = (uint8_t)r, .op = OP_EXISTS};
                state[i] = E_DONE; /* decided by this round's answers */
            }
        }
        if (na == 0) break;
        if ((rc = rcheck_round(&chk, &b, a, na, OP_EXISTS)) != 0) goto out;
        for (size_t j = 0; j < na; j++) {
            cact *x = &a[j];
            size_t i = x->key;
            if (x->rc == 0 && doubt[b.plan.cand[i * b.plan.depth + x->rank]])
                x->rc = -ESTALE;       /* its answer is dropped: the next rank decides */
            if (state[i] != E_FIRST) { /* one of the remaining ranks */
                if (x->rc == 0 && x->present) present[i] = 1;
                continue;
            }
            if (x->rc < 0) {
                int r = cluster_plan_next(&b.plan, i, (size_t)x->rank + 1, ~0u);
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
    rcheck_free(&chk);
    batch_end(&b);
    return rc;
}

int cluster_remove_many(tide_store *s, const tide_key *keys, size_t n, int *results) {
    cluster *c = s->impl;
    cbatch b;
    int rc = batch_begin(&b, s, keys, n, NULL, NULL, read_depth(c));
    if (rc) return rc;
    cact *a = malloc(n * b.plan.depth * sizeof(*a) + 1);
    int removed = 0, failed = 0, valid = 0;
    size_t nm = b.plan.v->n;
    uint8_t *failed_m = calloc(nm + 1, 1), *need = NULL, *hinted = calloc(nm + 1, 1);
    uint32_t *down = malloc((nm + 1) * sizeof(*down));
    if (!a || !failed_m || !hinted || !down) {
        rc = client_err(s, -ENOMEM, "out of memory");
        goto out;
    }
    batch_mark_skipped(&b);
    size_t na = 0;
    for (size_t i = 0; i < n; i++) {
        results[i] = client_key_check(&keys[i]);
        if (results[i]) continue;
        valid++;
        results[i] = -EHOSTUNREACH; /* until a member answers */
        for (int r = cluster_plan_next(&b.plan, i, 0, ~0u); r >= 0;
             r = cluster_plan_next(&b.plan, i, (size_t)r + 1, ~0u))
            a[na++] = (cact){.key = (uint32_t)i, .rank = (uint8_t)r, .op = OP_REMOVE};
    }
    if ((rc = round_run(&b, a, na)) != 0) goto out;
    /* Every member that answered holds the key's new state (absent): it records hints for
     * the members the remove skipped, and an answer counts only once it did. */
    for (size_t j = 0; j < na; j++)
        if (a[j].rc < 0) failed_m[b.plan.cand[a[j].key * b.plan.depth + a[j].rank]] = 1;
    size_t nd = batch_down(&b, down);
    if ((rc = need_alloc(&b, failed_m, nd, &need)) != 0) goto out;
    for (size_t j = 0; need && j < na; j++)
        if (a[j].rc == 0)
            note_taker(&b, a[j].key, b.plan.cand[a[j].key * b.plan.depth + a[j].rank], failed_m,
                       down, nd, read_depth(c), need);
    if ((rc = batch_hint(&b, need, hinted)) != 0) goto out;
    for (size_t j = 0; j < na; j++) {
        cact *x = &a[j];
        int *r = &results[x->key];
        if (x->rc == 0 && !hinted[b.plan.cand[x->key * b.plan.depth + x->rank]])
            x->rc = b.err ? b.err : -EIO;
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
    free(a), free(failed_m), free(need), free(hinted), free(down);
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
    cluster_fanout_run(c->fanout, t, v->n);
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
        rc = cluster_no_members(s, c, what);
    else if (first && (op == OP_CLEAR || (size_t)nfail == v->n))
        /* A clear must reach every member; stats are summed over those that answered. */
        rc = client_err(s, first->rc, "cluster %s: %d of %zu members failed: %s", what, nfail, v->n,
                        first->msg);
    free(t);
    view_put(v);
    return rc;
}

int cluster_clear(tide_store *s) {
    return cluster_all(s, OP_CLEAR, NULL);
}

int cluster_stats(tide_store *s, tide_stats *st) {
    return cluster_all(s, OP_STATS, st);
}
