/*
 * device_test.c — the test kind: a stand-in for a GPU, so that the ordering rules of device
 * copies can be tested on machines without one. Tests install it in the CUDA kind's place
 * (dev_set_ops(DEV_CUDA, &dev_test_ops)).
 *
 * - "Device" memory is a PROT_NONE reservation whose addresses the host cannot touch (a
 *   stray memcpy on one crashes the test), backed by a second, readable mapping that only
 *   this file (copies, dev_test_poke / peek) reaches.
 * - Queues, and the test's engine streams, are threads that run their operations in order,
 *   each copy DEV_TEST delay after the previous one, so a copy lands well after it was
 *   issued: a caller that used bytes before waiting for them would see stale ones.
 * - An event is a point in a stream: it is reached when the stream's thread gets there; a
 *   queue that waits for it stops until then.
 * - A copy picked by dev_test_fail_copy() fails: it writes garbage over its destination and
 *   its ticket (and every later one) reports TIDE_EDEVICE.
 * - A copy whose two sides are both host memory, or whose device side is outside the
 *   device's allocations, fails the same way: tide must only move bytes between the device
 *   and host memory.
 *
 * One mutex (tlock) covers the devices, the counters and every event; each thread's
 * operation list has its own mutex and condition variable. memlock is held by every access
 * to the backing of device memory (copies, writes, peek, poke), as a GPU's memory is
 * coherent for its own accesses: a test may peek while a copy is in flight. Host memory
 * gets no such lock, so ThreadSanitizer still sees tide touching host bytes that a copy
 * is writing. Events are reference-counted
 * (owner + each queued operation naming one), freed when the count reaches 0.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "device/device.h"
#include "tide.h"

#define TEST_DEVICES 4
#define TEST_REGS 64

typedef struct test_dev {
    uint8_t *addr, *back; /* addr: what callers see (PROT_NONE); back: the bytes */
    size_t used;
} test_dev;

typedef struct test_event {
    int done, refs;
} test_event;

enum { OP_COPY, OP_WRITE, OP_MARK, OP_SIGNAL, OP_WAITEV, OP_GATE, OP_STOP };

typedef struct test_op {
    struct test_op *next;
    int kind;
    void *dst;
    const void *src;
    void *owned; /* OP_WRITE: the bytes, freed after */
    size_t len;
    unsigned delay_us;
    uint64_t ticket;
    test_event *ev;
} test_op;

/* A thread running operations in order: a queue of tide's, or an engine stream. */
typedef struct test_runner {
    pthread_mutex_t lock;
    pthread_cond_t cond; /* an operation was added, or one finished */
    test_op *head, *tail;
    uint64_t issued, done; /* tickets */
    uint64_t first_fail;   /* ticket of the first failed copy, 0 = none */
    pthread_t thread;
} test_runner;

struct dev_test_stream {
    test_runner w;
};

/* Lock rules: above. Helpers named do_x() expect the lock their comment names held. */
static pthread_mutex_t tlock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t memlock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t tcond = PTHREAD_COND_INITIALIZER; /* an event was reached */
static test_dev devs[TEST_DEVICES];
static dev_test_stream *default_stream[TEST_DEVICES];
static struct {
    void *p;
    uint64_t len;
} regs[TEST_REGS];
static size_t nregs;
static dev_test_counts counts;
static unsigned copy_delay_us = 200;
static unsigned fail_countdown;

typedef struct test_impl {
    int device;
} test_impl;

static void sleep_us(unsigned us) {
    struct timespec ts = {.tv_sec = us / 1000000, .tv_nsec = (long)(us % 1000000) * 1000};
    while (us && nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Map a device's memory on first use (tlock held). */
static int do_dev_map(int device) {
    test_dev *d = &devs[device];
    if (d->addr) return 0;
    void *a =
        mmap(NULL, DEV_TEST_MEM, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    void *b = mmap(NULL, DEV_TEST_MEM, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (a == MAP_FAILED || b == MAP_FAILED) {
        if (a != MAP_FAILED) munmap(a, DEV_TEST_MEM);
        if (b != MAP_FAILED) munmap(b, DEV_TEST_MEM);
        return -ENOMEM;
    }
    d->addr = a;
    d->back = b;
    return 0;
}

/* The device holding [p, p + len) entirely, -1 for host memory, -2 for a range that is
 * partly a device's or past its allocations (tlock held). */
static int do_which(const void *p, size_t len) {
    const uint8_t *b = p;
    for (int i = 0; i < TEST_DEVICES; i++) {
        const test_dev *d = &devs[i];
        if (!d->addr || b + len <= d->addr || b >= d->addr + DEV_TEST_MEM) continue;
        return b >= d->addr && b + len <= d->addr + d->used ? i : -2;
    }
    return -1;
}

static uint8_t *do_back(int device, const void *p) {
    return devs[device].back + ((const uint8_t *)p - devs[device].addr);
}

static int do_registered(const void *p, size_t len) {
    for (size_t i = 0; i < nregs; i++)
        if ((const uint8_t *)p >= (uint8_t *)regs[i].p &&
            (const uint8_t *)p + len <= (uint8_t *)regs[i].p + regs[i].len)
            return 1;
    return 0;
}

static void do_event_unref(test_event *e) {
    if (e && --e->refs == 0) free(e);
}

/* One copy: 0, or -1 when it failed (garbage written where it could be). */
static int run_copy(const test_op *op) {
    pthread_mutex_lock(&tlock);
    int dd = do_which(op->dst, op->len), sd = do_which(op->src, op->len);
    int fail = dd == -2 || sd == -2 || (dd == -1 && sd == -1);
    if (fail_countdown && --fail_countdown == 0) fail = 1;
    uint8_t *dst = dd >= 0 ? do_back(dd, op->dst) : dd == -1 ? op->dst : NULL;
    const uint8_t *src = sd >= 0 ? do_back(sd, op->src) : op->src;
    counts.copies++;
    counts.bytes += op->len;
    if ((dd == -1 && do_registered(op->dst, op->len)) ||
        (sd == -1 && do_registered(op->src, op->len)))
        counts.copies_registered++;
    pthread_mutex_unlock(&tlock);
    int dev_side = dd >= 0 || sd >= 0;
    if (dev_side) pthread_mutex_lock(&memlock);
    if (fail && dst)
        for (size_t i = 0; i < op->len; i++)
            dst[i] = (uint8_t)(0xA5 ^ i);
    else if (!fail)
        memcpy(dst, src, op->len);
    if (dev_side) pthread_mutex_unlock(&memlock);
    return fail ? -1 : 0;
}

static void *runner_main(void *arg) {
    test_runner *w = arg;
    uint64_t failed_in = 0; /* a copy of the ticket being built failed */
    for (;;) {
        pthread_mutex_lock(&w->lock);
        while (!w->head)
            pthread_cond_wait(&w->cond, &w->lock);
        test_op *op = w->head;
        pthread_mutex_unlock(&w->lock);
        int stop = 0;
        switch (op->kind) {
        case OP_COPY:
            pthread_mutex_lock(&tlock);
            unsigned delay = copy_delay_us;
            pthread_mutex_unlock(&tlock);
            sleep_us(delay);
            if (run_copy(op)) failed_in = 1;
            break;
        case OP_WRITE:
            sleep_us(op->delay_us);
            pthread_mutex_lock(&tlock);
            int d = do_which(op->dst, op->len);
            pthread_mutex_unlock(&tlock);
            pthread_mutex_lock(&memlock);
            if (d >= 0) memcpy(do_back(d, op->dst), op->owned, op->len);
            pthread_mutex_unlock(&memlock);
            break;
        case OP_SIGNAL:
            pthread_mutex_lock(&tlock);
            op->ev->done = 1;
            do_event_unref(op->ev);
            pthread_cond_broadcast(&tcond);
            pthread_mutex_unlock(&tlock);
            break;
        case OP_WAITEV:
            pthread_mutex_lock(&tlock);
            while (!op->ev->done)
                pthread_cond_wait(&tcond, &tlock);
            do_event_unref(op->ev);
            pthread_mutex_unlock(&tlock);
            break;
        case OP_GATE: /* op->ev is the gate: it opens when done is set */
            pthread_mutex_lock(&tlock);
            while (!op->ev->done)
                pthread_cond_wait(&tcond, &tlock);
            do_event_unref(op->ev);
            pthread_mutex_unlock(&tlock);
            break;
        case OP_STOP:
            stop = 1;
            break;
        }
        pthread_mutex_lock(&w->lock);
        if (op->kind == OP_MARK) {
            if (failed_in && !w->first_fail) w->first_fail = op->ticket;
            failed_in = 0;
            w->done = op->ticket;
        }
        w->head = op->next;
        if (!w->head) w->tail = NULL;
        pthread_cond_broadcast(&w->cond);
        pthread_mutex_unlock(&w->lock);
        free(op->owned);
        free(op);
        if (stop) return NULL;
    }
}

static int runner_start(test_runner *w) {
    memset(w, 0, sizeof(*w));
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->cond, NULL);
    if (pthread_create(&w->thread, NULL, runner_main, w) != 0) {
        pthread_mutex_destroy(&w->lock);
        pthread_cond_destroy(&w->cond);
        return -EAGAIN;
    }
    return 0;
}

/* Append an operation (w->lock held). */
static void do_push(test_runner *w, test_op *op) {
    op->next = NULL;
    if (w->tail)
        w->tail->next = op;
    else
        w->head = op;
    w->tail = op;
    pthread_cond_broadcast(&w->cond);
}

static int push(test_runner *w, int kind, void *dst, const void *src, size_t len) {
    test_op *op = calloc(1, sizeof(*op));
    if (!op) return -ENOMEM;
    op->kind = kind;
    op->dst = dst;
    op->src = src;
    op->len = len;
    pthread_mutex_lock(&w->lock);
    do_push(w, op);
    pthread_mutex_unlock(&w->lock);
    return 0;
}

static void runner_stop(test_runner *w) {
    while (push(w, OP_STOP, NULL, NULL, 0) != 0)
        sleep_us(1000);
    pthread_join(w->thread, NULL);
    pthread_mutex_destroy(&w->lock);
    pthread_cond_destroy(&w->cond);
}

/* ---- the table -------------------------------------------------------------------------- */

static int test_open(int device, void **impl, char *msg, size_t mlen) {
    if (device >= TEST_DEVICES) {
        snprintf(msg, mlen, "test device %d does not exist (there are %d)", device, TEST_DEVICES);
        return TIDE_EDEVICE;
    }
    test_impl *t = calloc(1, sizeof(*t));
    if (!t) {
        snprintf(msg, mlen, "out of memory");
        return -ENOMEM;
    }
    t->device = device;
    *impl = t;
    return 0;
}

static void test_close(void *impl) {
    free(impl);
}

static int test_check(void *impl, const void *p, uint64_t len, char *msg, size_t mlen) {
    test_impl *t = impl;
    pthread_mutex_lock(&tlock);
    int d = do_which(p, (size_t)len);
    pthread_mutex_unlock(&tlock);
    if (d == t->device) return 0;
    snprintf(msg, mlen, "%p (%llu bytes) is not memory of test device %d", p,
             (unsigned long long)len, t->device);
    return TIDE_EDEVICE;
}

static int test_host_register(void *impl, void *p, uint64_t len, char *msg, size_t mlen) {
    int rc = 0;
    pthread_mutex_lock(&tlock);
    for (size_t i = 0; i < nregs; i++)
        if (regs[i].p == p) rc = 1;
    if (rc == 0 && nregs == TEST_REGS) {
        snprintf(msg, mlen, "test device: more than %d host registrations", TEST_REGS);
        rc = TIDE_EDEVICE;
    } else if (rc == 0) {
        regs[nregs].p = p;
        regs[nregs++].len = len;
        counts.registrations++;
        counts.registered_now++;
    }
    pthread_mutex_unlock(&tlock);
    return rc;
}

static void test_host_unregister(void *impl, void *p) {
    pthread_mutex_lock(&tlock);
    for (size_t i = 0; i < nregs; i++) {
        if (regs[i].p == p) {
            regs[i] = regs[--nregs];
            counts.registered_now--;
            break;
        }
    }
    pthread_mutex_unlock(&tlock);
}

static int test_queue_create(void *impl, void **q, char *msg, size_t mlen) {
    test_runner *w = malloc(sizeof(*w));
    if (!w || runner_start(w) != 0) {
        free(w);
        snprintf(msg, mlen, "test device: cannot start a queue thread");
        return -ENOMEM;
    }
    *q = w;
    return 0;
}

static void test_queue_destroy(void *impl, void *q) {
    runner_stop(q);
    free(q);
}

static int test_event_record(void *impl, uintptr_t stream, void **ev, char *msg, size_t mlen) {
    test_impl *t = impl;
    dev_test_stream *s = (dev_test_stream *)stream;
    if (!s) {
        pthread_mutex_lock(&tlock);
        if (!default_stream[t->device]) default_stream[t->device] = dev_test_stream_new();
        s = default_stream[t->device];
        pthread_mutex_unlock(&tlock);
    }
    test_event *e = calloc(1, sizeof(*e));
    test_op *op = calloc(1, sizeof(*op));
    if (!s || !e || !op) {
        free(e);
        free(op);
        snprintf(msg, mlen, "out of memory");
        return -ENOMEM;
    }
    e->refs = 2; /* the caller's, and the signal's */
    op->kind = OP_SIGNAL;
    op->ev = e;
    pthread_mutex_lock(&s->w.lock);
    do_push(&s->w, op);
    pthread_mutex_unlock(&s->w.lock);
    *ev = e;
    return 0;
}

static void test_event_destroy(void *impl, void *ev) {
    pthread_mutex_lock(&tlock);
    do_event_unref(ev);
    pthread_mutex_unlock(&tlock);
}

static int test_wait_event(void *impl, void *q, void *ev, char *msg, size_t mlen) {
    test_op *op = calloc(1, sizeof(*op));
    if (!op) {
        snprintf(msg, mlen, "out of memory");
        return -ENOMEM;
    }
    op->kind = OP_WAITEV;
    op->ev = ev;
    pthread_mutex_lock(&tlock);
    ((test_event *)ev)->refs++;
    pthread_mutex_unlock(&tlock);
    test_runner *w = q;
    pthread_mutex_lock(&w->lock);
    do_push(w, op);
    pthread_mutex_unlock(&w->lock);
    return 0;
}

static int test_copy(void *impl, void *q, const dev_copy *c, size_t n, uint64_t *ticket, char *msg,
                     size_t mlen) {
    test_runner *w = q;
    test_op *ops = NULL, *last = NULL;
    for (size_t i = 0; i <= n; i++) {
        test_op *op = calloc(1, sizeof(*op));
        if (!op) {
            while (ops) {
                test_op *nx = ops->next;
                free(ops);
                ops = nx;
            }
            snprintf(msg, mlen, "out of memory");
            return -ENOMEM;
        }
        if (i < n) {
            op->kind = OP_COPY;
            op->dst = c[i].dst;
            op->src = c[i].src;
            op->len = c[i].len;
        } else {
            op->kind = OP_MARK;
        }
        if (last)
            last->next = op;
        else
            ops = op;
        last = op;
    }
    pthread_mutex_lock(&w->lock);
    last->ticket = ++w->issued;
    while (ops) {
        test_op *nx = ops->next;
        do_push(w, ops);
        ops = nx;
    }
    *ticket = w->issued;
    pthread_mutex_unlock(&w->lock);
    return 0;
}

static int test_wait(void *impl, void *q, uint64_t ticket, char *msg, size_t mlen) {
    test_runner *w = q;
    pthread_mutex_lock(&w->lock);
    while (w->done < ticket)
        pthread_cond_wait(&w->cond, &w->lock);
    int failed = w->first_fail && w->first_fail <= ticket;
    pthread_mutex_unlock(&w->lock);
    if (!failed) return 0;
    snprintf(msg, mlen, "test device: a copy failed (ticket %llu)", (unsigned long long)ticket);
    return TIDE_EDEVICE;
}

const dev_ops dev_test_ops = {
    .name = "test",
    .open = test_open,
    .close = test_close,
    .check = test_check,
    .host_register = test_host_register,
    .host_unregister = test_host_unregister,
    .queue_create = test_queue_create,
    .queue_destroy = test_queue_destroy,
    .event_record = test_event_record,
    .event_destroy = test_event_destroy,
    .queue_wait_event = test_wait_event,
    .copy = test_copy,
    .wait = test_wait,
};

/* ---- controls --------------------------------------------------------------------------- */

void *dev_test_alloc(int device, size_t n) {
    if (device < 0 || device >= TEST_DEVICES || n == 0) return NULL;
    void *p = NULL;
    pthread_mutex_lock(&tlock);
    test_dev *d = &devs[device];
    size_t need = (n + 255) & ~(size_t)255;
    if (do_dev_map(device) == 0 && need <= DEV_TEST_MEM - d->used) {
        p = d->addr + d->used;
        d->used += need;
    }
    pthread_mutex_unlock(&tlock);
    return p;
}

void dev_test_poke(void *dst_dev, const void *src, size_t n) {
    pthread_mutex_lock(&tlock);
    int d = do_which(dst_dev, n);
    pthread_mutex_unlock(&tlock);
    if (d < 0) abort(); /* a test's own mistake */
    pthread_mutex_lock(&memlock);
    memcpy(do_back(d, dst_dev), src, n);
    pthread_mutex_unlock(&memlock);
}

void dev_test_peek(void *dst, const void *src_dev, size_t n) {
    pthread_mutex_lock(&tlock);
    int d = do_which(src_dev, n);
    pthread_mutex_unlock(&tlock);
    if (d < 0) abort();
    pthread_mutex_lock(&memlock);
    memcpy(dst, do_back(d, src_dev), n);
    pthread_mutex_unlock(&memlock);
}

dev_test_stream *dev_test_stream_new(void) {
    dev_test_stream *s = malloc(sizeof(*s));
    if (!s || runner_start(&s->w) != 0) {
        free(s);
        return NULL;
    }
    return s;
}

void dev_test_stream_free(dev_test_stream *s) {
    if (!s) return;
    runner_stop(&s->w);
    free(s);
}

void dev_test_stream_write(dev_test_stream *s, void *dst_dev, const void *src, size_t n,
                           unsigned delay_us) {
    test_op *op = calloc(1, sizeof(*op));
    void *copy = malloc(n ? n : 1);
    if (!op || !copy) abort();
    memcpy(copy, src, n);
    op->kind = OP_WRITE;
    op->dst = dst_dev;
    op->owned = copy;
    op->len = n;
    op->delay_us = delay_us;
    pthread_mutex_lock(&s->w.lock);
    do_push(&s->w, op);
    pthread_mutex_unlock(&s->w.lock);
}

struct dev_test_gate {
    test_event ev;
};

dev_test_gate *dev_test_stream_gate(dev_test_stream *s) {
    test_event *e = calloc(1, sizeof(*e));
    test_op *op = calloc(1, sizeof(*op));
    if (!e || !op) abort();
    e->refs = 2; /* the caller's (dev_test_gate_open), and the operation's */
    op->kind = OP_GATE;
    op->ev = e;
    pthread_mutex_lock(&s->w.lock);
    do_push(&s->w, op);
    pthread_mutex_unlock(&s->w.lock);
    return (dev_test_gate *)e;
}

void dev_test_gate_open(dev_test_gate *g) {
    pthread_mutex_lock(&tlock);
    test_event *e = (test_event *)g;
    e->done = 1;
    pthread_cond_broadcast(&tcond);
    do_event_unref(e);
    pthread_mutex_unlock(&tlock);
}

void dev_test_stream_sync(dev_test_stream *s) {
    pthread_mutex_lock(&s->w.lock);
    while (s->w.head)
        pthread_cond_wait(&s->w.cond, &s->w.lock);
    pthread_mutex_unlock(&s->w.lock);
}

void dev_test_set_copy_delay(unsigned us) {
    pthread_mutex_lock(&tlock);
    copy_delay_us = us;
    pthread_mutex_unlock(&tlock);
}

void dev_test_fail_copy(unsigned k) {
    pthread_mutex_lock(&tlock);
    fail_countdown = k;
    pthread_mutex_unlock(&tlock);
}

void dev_test_get_counts(dev_test_counts *out) {
    pthread_mutex_lock(&tlock);
    *out = counts;
    pthread_mutex_unlock(&tlock);
}
