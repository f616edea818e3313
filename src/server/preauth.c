/*
 * preauth.c — the budget of connections that have not authenticated yet, on a tided with
 * an auth token (--max-preauth-conns), and the count of authenticated ones (--max-conns).
 *
 * Why: a peer without the token must never take a slot a token holder needs. So on a
 * server with a token a new connection first takes one of the max_preauth_conns pre-auth
 * slots, and only a successful HELLO (or RESP AUTH) moves it to one of the max_conns
 * authenticated slots. When the pre-auth slots are full, the accept thread cuts the oldest
 * pre-auth connection to make room: a flood of silent or slow peers only ever displaces
 * itself, and a token holder, which says HELLO at once, is pre-auth for one round trip.
 * Without a token every connection is authenticated from the start and --max-conns is
 * checked at accept (server.c).
 *
 * Threads: the accept thread admits and cuts; workers promote and release their own
 * connections. Everything here is under `mu`. A cut is shutdown(SHUT_RDWR) on the victim's
 * socket, made under `mu`: the victim's worker then reads end-of-stream and closes it. The
 * fd is still open at that moment because a worker removes its connection's entry (under
 * `mu`) before it closes the fd — so an entry always names an open fd, and never a number
 * the kernel has handed to someone else.
 *
 * The slots are a small array in admission order, scanned linearly (the budget is small:
 * a few hundred at most in any sane setting). Which one is cut: do_preauth_victim.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include "common/log.h"
#include "server/server_int.h"

int preauth_init(preauth *p, int cap) {
    p->slots = calloc((size_t)(cap > 0 ? cap : 1), sizeof(*p->slots));
    if (!p->slots) return -ENOMEM;
    p->cap = cap;
    p->n = 0;
    p->seq = 0;
    pthread_mutex_init(&p->mu, NULL);
    p->ready = 1;
    return 0;
}

void preauth_fini(preauth *p) {
    if (!p->ready) return;
    pthread_mutex_destroy(&p->mu);
    free(p->slots);
    p->slots = NULL;
    p->ready = 0;
}

/* The slot to cut: the oldest connection whose socket holds no unread bytes, else the
 * oldest. A token holder says HELLO at once, so its connection is the one with bytes
 * waiting for its worker; sparing it closes most of the window between its accept and its
 * HELLO. A flooder's bytes do not protect it: its worker reads them as they come (a
 * HELLO is read and checked in the same pass), so its socket is empty again at once.
 * Slots are in admission order, oldest first. Caller holds mu. */
static int do_preauth_victim(preauth *p) {
    for (int i = 0; i < p->n; i++) {
        int unread = 0;
        if (ioctl(p->slots[i].fd, FIONREAD, &unread) == 0 && unread == 0) return i;
    }
    return 0;
}

/* Remove slot i, keeping the others in admission order. Caller holds mu. */
static void do_preauth_remove(server *srv, int i) {
    preauth *p = &srv->pre;
    memmove(&p->slots[i], &p->slots[i + 1], (size_t)(p->n - i - 1) * sizeof(p->slots[0]));
    p->n--;
    atomic_store(&srv->m.conns_preauth, (uint64_t)p->n);
}

int preauth_admit(server *srv, int fd) {
    preauth *p = &srv->pre;
    int cut = 0;
    pthread_mutex_lock(&p->mu);
    if (p->n == p->cap) {
        int victim = do_preauth_victim(p);
        shutdown(p->slots[victim].fd, SHUT_RDWR);
        do_preauth_remove(srv, victim);
        cut = 1;
    }
    p->slots[p->n].fd = fd;
    p->slots[p->n].seq = ++p->seq;
    p->n++;
    atomic_store(&srv->m.conns_preauth, (uint64_t)p->n);
    pthread_mutex_unlock(&p->mu);
    if (cut) atomic_fetch_add(&srv->m.conns_preauth_cut, 1);
    return cut;
}

/* Remove fd's entry; 1 when it was there, 0 when it had been cut. Caller holds mu. */
static int do_preauth_leave(server *srv, int fd) {
    preauth *p = &srv->pre;
    for (int i = 0; i < p->n; i++) {
        if (p->slots[i].fd == fd) {
            do_preauth_remove(srv, i);
            return 1;
        }
    }
    return 0;
}

int preauth_promote(server *srv, int fd) {
    if (!srv->cfg.auth_token[0]) return 0;
    preauth *p = &srv->pre;
    pthread_mutex_lock(&p->mu);
    int rc = 0;
    if (!do_preauth_leave(srv, fd)) {
        rc = -ECONNABORTED; /* cut as the oldest meanwhile: its socket is shut already */
    } else if (atomic_fetch_add(&srv->authed_conns, 1) >= srv->cfg.max_conns) {
        atomic_fetch_sub(&srv->authed_conns, 1);
        rc = TIDE_ELIMIT;
    }
    pthread_mutex_unlock(&p->mu);
    if (rc == TIDE_ELIMIT) {
        atomic_fetch_add(&srv->m.conns_rejected, 1);
        LOG_LIMITED(LOG_LEVEL_WARN,
                    "refusing an authenticated connection: %d are open, the limit is %d "
                    "(--max-conns)",
                    atomic_load(&srv->authed_conns), srv->cfg.max_conns);
    }
    return rc;
}

void preauth_release(server *srv, int fd, int authed) {
    if (!srv->cfg.auth_token[0]) return;
    if (authed) {
        atomic_fetch_sub(&srv->authed_conns, 1);
        return;
    }
    pthread_mutex_lock(&srv->pre.mu);
    do_preauth_leave(srv, fd);
    pthread_mutex_unlock(&srv->pre.mu);
}
