/*
 * replica.c — a node that may have missed writes drops its contents before a cluster client
 * reads from it again.
 *
 * tide clusters are masterless: a put or remove goes to the key's R replicas and is
 * acknowledged when one copy took it; a replica that did not answer in time is skipped.
 * That replica still holds the old state of the key (the bytes a remove deleted, or the
 * older bytes a newer put replaced elsewhere) and, being unaware of it, would serve it when
 * it answers again — and it may then be the only copy left. This file makes such a node
 * discard everything before it serves a cluster client, whenever it cannot rule out having
 * missed a write ("doubt"):
 *
 *   - at start, when the SSD tier restored anything: it predates this process;
 *   - after a stop: SIGCONT (blocked in every thread by server.c, read here from a signalfd)
 *     says the process was stopped, for however long;
 *   - after a stall: a heartbeat thread ticks every `period`; a gap between ticks (or
 *     between the last tick and a request) longer than the shortest timeout the cluster
 *     clients announced means this node was stopped or starved for long enough that a
 *     client gave up on a call it made during the gap. The request path checks the gap
 *     itself, so the first request after a SIGCONT is judged before it is served even when
 *     a worker wakes before this thread;
 *   - when its etcd lease lapsed (announce.c): clients dropped it from their views;
 *   - when a cluster client says it skipped this node (REPLICA with FRAME_REPLICA_MISSED,
 *     sent before anything else once the client marked the node down).
 *
 * Doubt is settled by store_clear() (memory and disk) as soon as the node is in replica mode
 * — set by the first REPLICA request, which cluster clients send on every new connection —
 * and connections opened before the clear are closed at their next request, so a write
 * buffered from before the gap (superseded since) is never applied after it. Plain clients
 * (one node, no REPLICA) never put the node in replica mode: a single node cannot miss an
 * acknowledged write, and its SSD contents survive restarts as before.
 *
 * Hints (docs/CLUSTER.md, "Hints"): a node also holds, for each cluster member a write it
 * took had to skip, two counters: hints recorded (a writer's REPLICA HINT, before the write
 * is acknowledged) and hints told (a reader that found missed > told made the member drop
 * its contents, then sent REPLICA TOLD with the count it saw). Readers ask (REPLICA ASK)
 * beside every read, so a member that may hold removed or superseded bytes is recognised
 * by any client, whether or not the writer ever calls it again. At most REPLICA_HINTS_MAX
 * members (one entry each, 24 bytes); resolved entries are reused first.
 *
 * Lock rules: `hint_lock` guards the hint table alone. `lock` serialises settling (the clear); the
 * fast path reads atomics only. The tick is stored with release after any clear, so a worker that
 * sees a fresh tick also sees the generation that clear bumped.
 */
#include "server/replica.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "server/server_int.h"

/* The stall threshold before any cluster client announced its timeout: the default
 * cluster timeout (2000 ms). */
#define REPLICA_DEFAULT_GAP_NS (2000ull * 1000000ull)
/* Floor of the threshold: a client announcing a tiny timeout cannot make scheduling noise
 * clear the node, and the heartbeat (every REPLICA_MAX_PERIOD_NS at most, whatever period
 * it slept with when the threshold fell) stays well inside it. */
#define REPLICA_MIN_GAP_NS (250ull * 1000000ull)
#define REPLICA_MAX_PERIOD_NS (100ull * 1000000ull)
/* Members a node holds hints for: the cluster size cap (CLUSTER_MAX_MEMBERS). */
#define REPLICA_HINTS_MAX 1024
#define START_WHY "restored from the SSD tier at start, they may predate writes this node missed"

typedef struct hint {
    uint64_t member;  /* the member's rendezvous seed */
    uint64_t missed;  /* writes this node took that skipped it, counted */
    uint64_t told;    /* of those, the ones it dropped its contents after */
    uint64_t told_at; /* now_ns() of the TOLD that last raised `told` */
} hint;

struct replica {
    pthread_mutex_t hint_lock;
    hint *hints; /* REPLICA_HINTS_MAX entries, `nhints` used (hint_lock) */
    size_t nhints;
    pthread_mutex_t lock;
    pthread_t thread;
    int started;
    atomic_int stop;
    atomic_int on;                   /* a cluster client sent REPLICA: clear on doubt */
    atomic_int doubt;                /* this node may have missed writes */
    const char *why;                 /* why, for the log (lock) */
    int sigfd;                       /* signalfd of SIGCONT, -1 when none */
    _Atomic uint64_t gap_ns;         /* a gap longer than this is a stall */
    _Atomic uint64_t max_timeout_ns; /* the longest timeout a cluster client announced */
    _Atomic uint64_t last_tick;      /* now_ns() of the last heartbeat */
    _Atomic uint64_t generation;     /* bumped by each clear; connections older are closed */
    _Atomic uint64_t fences;         /* clears made */
};

static uint64_t period_of(uint64_t gap) {
    uint64_t p = gap / 4;
    return p > REPLICA_MAX_PERIOD_NS ? REPLICA_MAX_PERIOD_NS : p;
}

/* This node may have missed writes, for the reason `why` (lock held). */
static void doubt_locked(replica *r, const char *why) {
    atomic_store(&r->doubt, 1);
    r->why = why;
}

/* Note a stall seen at `now`, and clear when in doubt and in replica mode (lock held). */
static void settle_locked(server *srv, replica *r, uint64_t now) {
    uint64_t last = atomic_load(&r->last_tick), gap = atomic_load(&r->gap_ns);
    if (now > last && now - last > gap) {
        LOG_WARN("no progress for %llu ms (stopped or starved): this node may have missed "
                 "writes its replicas took",
                 (unsigned long long)((now - last) / 1000000));
        doubt_locked(r, "this node stalled");
    }
    if (atomic_load(&r->doubt) && atomic_load(&r->on)) {
        tide_stats st;
        store_stats(srv->st, &st);
        store_clear(srv->st);
        atomic_store(&r->doubt, 0);
        atomic_fetch_add(&r->fences, 1);
        atomic_fetch_add(&r->generation, 1);
        LOG_WARN("dropped %llu objects that may be stale after a remove or newer put the other "
                 "replicas acknowledged (%s); connections opened before are closed",
                 (unsigned long long)(st.objects + st.disk_objects), r->why);
    }
    if (now > last) atomic_store_explicit(&r->last_tick, now, memory_order_release);
}

/* Settle, after noting a reason for doubt when `why` is not NULL. */
static void settle(server *srv, replica *r, const char *why) {
    pthread_mutex_lock(&r->lock);
    if (why) doubt_locked(r, why);
    settle_locked(srv, r, now_ns());
    pthread_mutex_unlock(&r->lock);
}

static void *replica_main(void *arg) {
    server *srv = arg;
    replica *r = srv->rep;
    while (!atomic_load(&r->stop)) {
        uint64_t p = period_of(atomic_load(&r->gap_ns));
        struct pollfd pf = {r->sigfd, POLLIN, 0};
        const char *why = NULL;
        if (poll(&pf, r->sigfd >= 0 ? 1 : 0, (int)(p / 1000000)) > 0) {
            struct signalfd_siginfo si;
            if (read(r->sigfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
                LOG_WARN("continued after a stop (SIGCONT): this node may have missed writes its "
                         "replicas took");
                why = "this node was stopped";
            }
        }
        settle(srv, r, why);
    }
    return NULL;
}

int replica_start(server *srv) {
    replica *r = calloc(1, sizeof(*r));
    if (!r) {
        LOG_ERROR("cannot start tided: out of memory");
        return -ENOMEM;
    }
    pthread_mutex_init(&r->lock, NULL);
    pthread_mutex_init(&r->hint_lock, NULL);
    if (!(r->hints = calloc(REPLICA_HINTS_MAX, sizeof(*r->hints)))) {
        free(r);
        LOG_ERROR("cannot start tided: out of memory");
        return -ENOMEM;
    }
    /* What the SSD tier restored predates this process: it may be stale. An empty store
     * cannot be. */
    tide_stats st;
    store_stats(srv->st, &st);
    atomic_store(&r->doubt, st.objects + st.disk_objects > 0);
    r->why = START_WHY;
    atomic_store(&r->gap_ns, REPLICA_DEFAULT_GAP_NS);
    atomic_store(&r->last_tick, now_ns());
    atomic_store(&r->generation, 1);
    sigset_t cont;
    sigemptyset(&cont);
    sigaddset(&cont, SIGCONT);
    r->sigfd = signalfd(-1, &cont, SFD_CLOEXEC | SFD_NONBLOCK);
    if (r->sigfd < 0)
        LOG_WARN("signalfd(SIGCONT): %s; stops are judged by the clock only", strerror(errno));
    srv->rep = r;
    int rc = pthread_create(&r->thread, NULL, replica_main, srv);
    if (rc) {
        LOG_ERROR("cannot start tided: replica heartbeat thread: %s", strerror(rc));
        return -rc;
    }
    r->started = 1;
    return 0;
}

void replica_stop(server *srv) {
    replica *r = srv->rep;
    if (!r) return;
    atomic_store(&r->stop, 1);
    if (r->started) pthread_join(r->thread, NULL);
    if (r->sigfd >= 0) close(r->sigfd);
    pthread_mutex_destroy(&r->lock);
    pthread_mutex_destroy(&r->hint_lock);
    free(r->hints);
    free(r);
    srv->rep = NULL;
}

int replica_gate(server *srv, uint64_t *conn_gen) {
    replica *r = srv->rep;
    if (!r) return 0;
    uint64_t last = atomic_load_explicit(&r->last_tick, memory_order_acquire), now = now_ns();
    if ((now > last && now - last > atomic_load(&r->gap_ns)) ||
        (atomic_load(&r->doubt) && atomic_load(&r->on)))
        settle(srv, r, NULL);
    uint64_t gen = atomic_load(&r->generation);
    if (*conn_gen == 0) *conn_gen = gen;
    return *conn_gen == gen ? 0 : -ECONNRESET;
}

void replica_lapsed(void *arg) {
    server *srv = arg;
    replica *r = srv->rep;
    if (!r) return;
    LOG_WARN("the etcd lease lapsed: clients dropped this node from the cluster meanwhile, and "
             "it may have missed writes its replicas took");
    settle(srv, r, "its etcd lease lapsed");
}

/* The hint entry of `member`, created when `create` (reusing a resolved one when the table
 * is full); NULL when absent or when the table is full of unresolved ones (hint_lock). */
static hint *hint_find(replica *r, uint64_t member, int create) {
    hint *spare = NULL;
    for (size_t i = 0; i < r->nhints; i++) {
        if (r->hints[i].member == member) return &r->hints[i];
        if (!spare && r->hints[i].missed == r->hints[i].told) spare = &r->hints[i];
    }
    if (!create) return NULL;
    if (r->nhints < REPLICA_HINTS_MAX) spare = &r->hints[r->nhints++];
    if (spare) *spare = (hint){member, 0, 0, 0};
    return spare;
}

int replica_hint_op(server *srv, const frame_msg *m, uint64_t reply[3]) {
    replica *r = srv->rep;
    const frame_replica *q = &m->replica;
    int rc = 0;
    pthread_mutex_lock(&r->hint_lock);
    hint *h = hint_find(r, q->member, q->flags == FRAME_REPLICA_HINT);
    if (q->flags == FRAME_REPLICA_HINT) {
        if (h)
            h->missed++;
        else
            rc = TIDE_ELIMIT;
    } else if (q->flags == FRAME_REPLICA_TOLD && h) {
        uint64_t seq = q->seq > h->missed ? h->missed : q->seq;
        if (seq > h->told) h->told = seq, h->told_at = now_ns();
    }
    /* A read whose GET the member answered before that fence, and whose question reaches
     * this node after the TOLD, must not take the hint as settled: for the longest client
     * timeout after a TOLD (no call outlives it), the answer says the fence is recent. */
    uint64_t window = atomic_load(&r->max_timeout_ns);
    if (window == 0) window = REPLICA_DEFAULT_GAP_NS;
    int recent = h && h->told_at && now_ns() - h->told_at < window;
    reply[0] = m->h.req_id;
    reply[1] = h ? h->missed : 0;
    reply[2] = (h ? h->told : 0) | (recent ? FRAME_REPLICA_TOLD_RECENT : 0);
    pthread_mutex_unlock(&r->hint_lock);
    if (rc)
        LOG_WARN("hint table full (%d members with writes they have not been told of): a write "
                 "that skipped a member is refused its hint",
                 REPLICA_HINTS_MAX);
    return rc;
}

void replica_op(server *srv, const frame_msg *m, uint64_t *conn_gen, uint64_t reply[3]) {
    replica *r = srv->rep;
    uint64_t gap = (uint64_t)m->replica.timeout_ms * 1000000ull;
    /* A maximum under concurrent raises: a plain load then store could lower it. */
    uint64_t cur = atomic_load(&r->max_timeout_ns);
    while (gap > cur && !atomic_compare_exchange_weak(&r->max_timeout_ns, &cur, gap)) {
    }
    if (gap < REPLICA_MIN_GAP_NS) gap = REPLICA_MIN_GAP_NS;
    pthread_mutex_lock(&r->lock);
    if (gap < atomic_load(&r->gap_ns)) atomic_store(&r->gap_ns, gap);
    if (!atomic_load(&r->on)) {
        atomic_store(&r->on, 1);
        LOG_INFO("a cluster client connected: this node drops its contents whenever it may "
                 "have missed writes (restart, stall, or a client that skipped it)");
    }
    if (m->replica.flags & FRAME_REPLICA_MISSED)
        doubt_locked(r, "a cluster client skipped this node: a write to it failed or went around "
                        "it");
    settle_locked(srv, r, now_ns());
    reply[0] = m->h.req_id;
    reply[1] = atomic_load(&r->fences);
    reply[2] = atomic_load(&r->generation);
    *conn_gen = reply[2]; /* this connection saw the clear: it stays */
    pthread_mutex_unlock(&r->lock);
}
