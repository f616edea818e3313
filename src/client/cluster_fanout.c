/*
 * cluster_fanout.c — the cluster backends' fan-out threads: run one round's calls (one
 * ctask per member and op) in parallel and wait for all of them.
 *
 * The calling thread takes tasks of its own round too, so a round always progresses even
 * when every fan-out thread is busy with another caller's round. With threads=0 (or a single
 * task) the caller runs everything itself.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "client/cluster.h"

/* A job is one round's tasks. The caller runs tasks of its own job too, so a round never
 * waits for a fan-out thread that is busy elsewhere. Lock rule: the fan-out lock guards the queue
 * and every job's next/finished counters. */
typedef struct cjob {
    ctask *tasks;
    size_t n, next, finished;
    struct cjob *link;
} cjob;

struct cfanout {
    pthread_mutex_t lock;
    pthread_cond_t work, done;
    cjob *queue;
    int stop;
    int nth;
    pthread_t th[CLUSTER_MAX_THREADS];
};

static void task_run(ctask *t) {
    tide_store *h;
    const int write = t->op == OP_PUT || t->op == OP_REMOVE || t->op == OP_CLEAR;
    int rc = member_handle(t->c, t->m, &h, t->msg, sizeof(t->msg));
    if (rc) {
        if (write) atomic_store(&t->m->missed, 1);
        t->rc = rc;
        return;
    }
    if (atomic_load(&t->m->missed) && atomic_exchange(&t->m->missed, 0)) node_mark_missed(h);
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
    case OP_REPLICA:
        rc = node_replica_call(h, t->rflags, t->about, t->seq, t->hint);
        if (replica_refused(rc)) { /* an answer (no hints held, table full): not failing */
            snprintf(t->msg, sizeof(t->msg), "%s", tide_errmsg(h));
            t->rc = rc;
            return;
        }
        break;
    default:
        rc = tide_stats_get(h, &t->st, sizeof(t->st));
        break;
    }
    if (rc < 0) {
        snprintf(t->msg, sizeof(t->msg), "%s", tide_errmsg(h));
        /* The write may not have landed: the node must learn it (REPLICA MISSED, wire.c). */
        if (write) atomic_store(&t->m->missed, 1);
        member_fail(t->c, t->m);
    } else {
        member_ok(t->m);
    }
    t->rc = rc < 0 ? rc : 0;
}

/* Claim the next task of j (fan-out lock held); unlink j once its last task is claimed. */
static size_t cluster_fanout_claim(cfanout *p, cjob *j) {
    size_t i = j->next++;
    if (j->next == j->n) {
        cjob **pp = &p->queue;
        while (*pp && *pp != j)
            pp = &(*pp)->link;
        if (*pp) *pp = j->link;
    }
    return i;
}

static void *cluster_fanout_main(void *arg) {
    cfanout *p = arg;
    pthread_mutex_lock(&p->lock);
    while (!p->stop) {
        cjob *j = p->queue;
        if (!j) {
            pthread_cond_wait(&p->work, &p->lock);
            continue;
        }
        size_t i = cluster_fanout_claim(p, j);
        pthread_mutex_unlock(&p->lock);
        task_run(&j->tasks[i]);
        pthread_mutex_lock(&p->lock);
        if (++j->finished == j->n) pthread_cond_broadcast(&p->done);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

void cluster_fanout_run(cfanout *p, ctask *tasks, size_t n) {
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
        size_t i = cluster_fanout_claim(p, &j);
        pthread_mutex_unlock(&p->lock);
        task_run(&tasks[i]);
        pthread_mutex_lock(&p->lock);
        j.finished++;
    }
    while (j.finished < j.n)
        pthread_cond_wait(&p->done, &p->lock);
    pthread_mutex_unlock(&p->lock);
}

void cluster_fanout_destroy(cfanout *p) {
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

int cluster_fanout_create(int nth, cfanout **out) {
    cfanout *p = calloc(1, sizeof(*p));
    if (!p) return -ENOMEM;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->work, NULL);
    pthread_cond_init(&p->done, NULL);
    for (; p->nth < nth; p->nth++) {
        int rc = pthread_create(&p->th[p->nth], NULL, cluster_fanout_main, p);
        if (rc) {
            cluster_fanout_destroy(p);
            return -rc;
        }
    }
    *out = p;
    return 0;
}
