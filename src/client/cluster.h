/*
 * cluster.h — the cluster backend's internal parts: members, membership views, rendezvous
 * placement and the fan-out threads.
 *
 *   tide://H1:P1,H2:P2,...?replicas=R      a static member list
 *   etcd://E1:2379[,E2:2379]/CLUSTER?replicas=R   members read from etcd
 *
 * A view is an immutable, refcounted list of members sorted by address. An operation takes
 * the current view at its start (view_get) and works on it to the end, so a membership
 * change (etcd) never moves a key in the middle of a call. Members are refcounted as well
 * and carried from one view to the next when their address stays, so their connections and
 * their down-marks survive a change.
 *
 * Files: cluster.c (URLs, open/close, backend tables, introspection), cluster_view.c
 * (ranking, members, views, etcd), cluster_place.c (a batch's placement), cluster_batch.c
 * (the operations), cluster_fanout.c (the threads that call members in parallel).
 *
 * Lock rules: cluster.view_lock guards cluster.view (the pointer swap) and etcd_msg. A
 * member's open_lock serialises opening its node handle; everything else in a member is
 * atomic. The fan-out threads have their own lock (cluster_fanout.c).
 */
#ifndef TIDE_CLUSTER_H
#define TIDE_CLUSTER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "client/client.h"
#include "common/etcd.h"

#define CLUSTER_ADDR_MAX 256
#define CLUSTER_MAX_MEMBERS 1024
/* Ranks a key's read may try: replicas + fallback, at most this many. */
#define CLUSTER_MAX_DEPTH 16
/* Fan-out threads a handle may start (threads=). */
#define CLUSTER_MAX_THREADS 64

typedef struct cmember {
    char addr[CLUSTER_ADDR_MAX]; /* "host:port" as the member list spells it */
    uint64_t seed;               /* the member's rendezvous seed: a hash of addr */
    pthread_mutex_t open_lock;   /* serialises opening h */
    _Atomic(tide_store *) h;     /* the node's tide:// handle; NULL until opened */
    _Atomic uint64_t down_until; /* now_ns() below this: skipped (failed, backing off) */
    _Atomic unsigned fails;      /* consecutive failures, for the back-off */
    atomic_int missed;           /* skipped since the node last heard it: tell it (REPLICA) */
    atomic_int refs;
} cmember;

typedef struct cview {
    cmember **m; /* sorted by addr */
    size_t n;
    atomic_int refs;
} cview;

typedef struct cfanout cfanout;

typedef struct cluster {
    int from_etcd;
    unsigned replicas; /* R: copies a put writes */
    unsigned fallback; /* ranks beyond R a read asks after a miss */
    int read_check;    /* each read asks another replica about the member read (hints) */
    uint64_t timeout_ms;
    uint64_t retry_ns;    /* first back-off after a failure; doubles up to 16x */
    char node_query[600]; /* "?timeout_ms=..&conns=..[&token=..]" for member URLs */

    pthread_mutex_t view_lock;
    cview *view; /* holds one reference */

    /* etcd membership (from_etcd only): a thread polls the prefix every poll_ns. The stop
     * lock and condition (CLOCK_MONOTONIC) exist for every cluster handle. */
    etcd_client *etcd;
    char etcd_prefix[300];
    uint64_t poll_ns;
    pthread_t poller;
    int poller_started;
    pthread_mutex_t stop_lock;
    pthread_cond_t stop_cond;
    int stopping;
    char etcd_msg[ERR_MSG_MAX]; /* the last etcd failure (view_lock) */

    cfanout *fanout;

    /* Figures for tide_cluster_info_get (since open, this handle). */
    _Atomic uint64_t view_changes, copies_written, puts_degraded, puts_failed, read_failovers,
        read_fallbacks, node_errors, etcd_errors;
} cluster;

/* ---- placement (cluster_view.c) ------------------------------------------------------ */

/* A member's rendezvous seed from its address. */
uint64_t cluster_seed(const char *addr);
/* The rendezvous weight of a key on the member seeded `seed` (higher ranks first). */
uint64_t cluster_weight(uint64_t seed, const void *key, size_t klen);
/*
 * Rendezvous (highest-random-weight) ranking: the `depth` members of seeds[0..n) with the
 * highest weight hash(key, seed), best first, as indices into seeds. depth <= n and
 * depth <= CLUSTER_MAX_DEPTH. Removing a member never reorders the others, and adding one
 * only inserts it — the property that keeps a join's disruption to ~1/n of the keys.
 */
void cluster_rank(const uint64_t *seeds, size_t n, const void *key, size_t klen, uint32_t *order,
                  size_t depth);

/* ---- members and views (cluster_view.c) ---------------------------------------------- */

/* The current view, with a reference the caller drops with view_put. */
cview *view_get(cluster *c);
void view_put(cview *v);
/* Build a view from addresses (duplicates dropped), reusing members of `old` (may be
 * NULL) that keep their address. Returns NULL when out of memory. */
cview *view_build(char *const *addrs, size_t n, const cview *old);
/* Parse a comma-separated "host:port,host:port" list into malloc'd strings. */
int cluster_parse_list(tide_store *s, const char *scheme, const char *list, char ***out, size_t *n);
void cluster_free_list(char **list, size_t n);

/* 1 while the member is backing off after a failure. */
int member_is_down(const cmember *m, uint64_t now);
void member_ok(cmember *m);
void member_fail(cluster *c, cmember *m);
/* A REPLICA hint operation's rc that is the node's answer, not its failure: a status reply
 * such as TIDE_EUNSUPPORTED (an older tided) or TIDE_ELIMIT (its hint table is full). The
 * node is up and answering; marking it down would fail over every call to it. */
static inline int replica_refused(int rc) {
    return rc <= -(TIDE_ERRBASE + 1) && rc >= TIDE_ERRLAST && rc != TIDE_EPROTO &&
           rc != TIDE_ECLOSED && rc != TIDE_ESERVER && rc != TIDE_EAUTH;
}
/* The member's node handle in *out, opened on first use. On failure returns the code,
 * marks the member down and writes the reason to msg. */
int member_handle(cluster *c, cmember *m, tide_store **out, char *msg, size_t len);

/* Start or stop etcd membership: read the prefix once (must succeed), then poll. */
int cluster_etcd_start(tide_store *s, cluster *c, const char *endpoints, const char *name);
void cluster_etcd_stop(cluster *c);

/* ---- the fan-out threads (cluster_fanout.c) ------------------------------------------ */

enum { OP_PUT, OP_GET, OP_EXISTS, OP_REMOVE, OP_CLEAR, OP_STATS, OP_REPLICA };

/* One call to one member: the caller fills c, m, op and the op's arguments; running it
 * fills the per-key results (res, vlens, present, st), rc and, on failure, msg. */
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
    /* OP_REPLICA: a hint operation (FRAME_REPLICA_HINT, _ASK, _TOLD) about the member
     * seeded `about`, and the two counters it answered (missed, told). */
    uint32_t rflags;
    uint64_t about, seq, hint[2];
    int rc; /* negative: the member failed as a whole */
    char msg[ERR_MSG_MAX];
} ctask;

/* Start nth threads (0: callers run their tasks themselves). Returns 0 or -errno. */
int cluster_fanout_create(int nth, cfanout **out);
/* Stop and join the threads; NULL is a no-op. */
void cluster_fanout_destroy(cfanout *p);
/* Run tasks[0..n) in parallel, the caller taking part; returns when all are done. */
void cluster_fanout_run(cfanout *p, ctask *tasks, size_t n);

/* ---- a batch's placement (cluster_place.c) ------------------------------------------- */

/* Each key's candidate members, best first, as indices into the view. */
typedef struct cplan {
    cview *v;
    size_t depth;
    uint32_t *cand; /* key i: cand[i * depth .. + nc[i]) */
    uint8_t *nc;
    int ignore_down; /* no member was live: try them all */
    uint64_t now;
} cplan;

/* Rank every valid key's `want` best members of v (live ones, or all when none is live).
 * The plan borrows v (the caller keeps its reference). Returns 0 or an error set on s. */
/* The one error for a view with no members, for every call (what: "get", "stats", ...):
 * -EHOSTUNREACH with a message saying where members were looked for. */
int cluster_no_members(tide_store *s, const cluster *c, const char *what);

int cluster_plan_make(tide_store *s, cluster *c, cview *v, const tide_key *keys, size_t n,
                      size_t want, cplan *p);
void cluster_plan_free(cplan *p);
cmember *cluster_plan_member(const cplan *p, size_t key, size_t rank);
/* The first usable rank of key at or after `from` (in `mask` when mask is not ~0), or -1. */
int cluster_plan_next(const cplan *p, size_t key, size_t from, uint32_t mask);

/* ---- the operations (cluster_batch.c), as backend_ops entries ------------------------ */

int cluster_put_many(tide_store *s, const tide_key *keys, size_t n, const tide_iov *iov,
                     const size_t *iovcnt, int *results);
int cluster_get_many(tide_store *s, const tide_key *keys, size_t n, const tide_iov *iov,
                     const size_t *iovcnt, int *results, size_t *vlens);
int cluster_exists_many(tide_store *s, const tide_key *keys, size_t n, uint8_t *present);
int cluster_remove_many(tide_store *s, const tide_key *keys, size_t n, int *results);
int cluster_clear(tide_store *s);
int cluster_stats(tide_store *s, tide_stats *st);

/* ---- the handle (cluster.c) ---------------------------------------------------------- */

extern const backend_ops cluster_backend;
extern const backend_ops etcd_backend;

#endif
