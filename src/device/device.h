/*
 * device.h — the device-copy layer: moving bytes between an engine's device memory (GPU
 * KV pages) and host memory (tide's pool), behind one table of functions per memory kind,
 * as the transports sit behind backend_ops.
 *
 *   host  (device_host.c)  memcpy; used for tests and as the reference behaviour
 *   cuda  (device_cuda.c)  the CUDA runtime, loaded with dlopen at dev_open(): libtide
 *                          links nothing of CUDA and runs where CUDA is absent
 *   test  (device_test.c)  "device" memory in a mapping of its own that the host cannot
 *                          touch directly, copies completed later on another thread; it
 *                          takes the CUDA kind's place in tests (dev_set_ops)
 *
 * The objects: a `dev` is one opened device (runtime + device index); a `dev_queue` an
 * ordered queue of copies (a CUDA stream of tide's own; one per job thread, used by that
 * thread only); a `dev_event` a point in an engine's stream (its forward pass) that a
 * queue can wait for without blocking the CPU.
 *
 * A queue collects copies with dev_queue_add() (adjacent copies — source and destination
 * both continuing the previous one — merge into one run), issues them with
 * dev_queue_flush() as one batch (one batched call where the runtime has one, else one
 * async copy per run), which returns a ticket; dev_queue_wait(q, ticket) blocks until every
 * copy issued up to that ticket has landed (or failed), and fails with TIDE_EDEVICE when one
 * of them (or the device) failed. Once a queue has failed it stays failed: later flushes and
 * waits fail too (a wait still waits), so a caller never takes bytes that follow a failure
 * as good; close it and open another.
 *
 * Errors are negative codes (TIDE_EDEVICE, -ENOMEM, -EINVAL) with a message in the
 * caller's buffer. Nothing here prints.
 */
#ifndef TIDE_DEVICE_H
#define TIDE_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#define DEV_HOST 0 /* == TIDE_MEM_HOST */
#define DEV_CUDA 1 /* == TIDE_MEM_CUDA */
#define DEV_KINDS 2

/* One copy; either side may be device or host memory. */
typedef struct dev_copy {
    void *dst;
    const void *src;
    size_t len;
} dev_copy;

/*
 * What a memory kind implements. `impl` is what open() made; `q` what queue_create()
 * made; `ev` what event_record() made. Every call that can fail writes a message to
 * msg[0..mlen) and returns a negative code.
 */
typedef struct dev_ops {
    const char *name;
    int (*open)(int device, void **impl, char *msg, size_t mlen);
    void (*close)(void *impl);
    /* [p, p + len) is memory of this device (0), or not (TIDE_EDEVICE). */
    int (*check)(void *impl, const void *p, uint64_t len, char *msg, size_t mlen);
    /* Make host memory a copy target (pin it). 0: registered here, unregister it later;
     * 1: it was registered already (by someone else: leave it). */
    int (*host_register)(void *impl, void *p, uint64_t len, char *msg, size_t mlen);
    void (*host_unregister)(void *impl, void *p);
    /* Queues: created, used and destroyed by one thread. */
    int (*queue_create)(void *impl, void **q, char *msg, size_t mlen);
    void (*queue_destroy)(void *impl, void *q);
    /* A point in the caller's stream (0: the default stream), from any thread. */
    int (*event_record)(void *impl, uintptr_t stream, void **ev, char *msg, size_t mlen);
    void (*event_destroy)(void *impl, void *ev);
    /* The queue's later copies start after ev. */
    int (*queue_wait_event)(void *impl, void *q, void *ev, char *msg, size_t mlen);
    /* Issue n copies (n >= 1) in order on the queue; the ticket they end at goes to *ticket. */
    int (*copy)(void *impl, void *q, const dev_copy *c, size_t n, uint64_t *ticket, char *msg,
                size_t mlen);
    /* Block until every copy up to ticket has landed. */
    int (*wait)(void *impl, void *q, uint64_t ticket, char *msg, size_t mlen);
    /* What is in use, in words (the runtime, its library, how copies are issued); NULL:
     * the kind's name says it all. */
    void (*describe)(void *impl, char *buf, size_t len);
} dev_ops;

typedef struct dev {
    const dev_ops *ops;
    void *impl;
    int kind, device;
} dev;

typedef struct dev_queue {
    dev *d;
    void *q;
    dev_copy *runs; /* collected, not yet issued */
    size_t nruns, cap;
    uint64_t ticket;              /* the last ticket issued */
    uint64_t copies, issued_runs; /* figures: copies added, runs issued */
    int failed;                   /* a copy failed: every later flush and wait fails */
    /* The staging buffer of the transfers that cannot copy straight into a pool (devio.c):
     * kept with the queue, released by on_close when the queue closes. */
    void *stage;
    size_t stage_len;
    int stage_pinned, stage_declared;
    void (*on_close)(struct dev_queue *q);
} dev_queue;

typedef struct dev_event {
    dev *d;
    void *ev;
} dev_event;

extern const dev_ops dev_host_ops;
extern const dev_ops dev_cuda_ops;
extern const dev_ops dev_test_ops;

/* The name of a kind ("host", "cuda"), or NULL. */
const char *dev_kind_name(int kind);

/* Replace the table used for a kind (tests: the test table for DEV_CUDA); NULL restores
 * the built-in one. Call before any dev_open of that kind. */
void dev_set_ops(int kind, const dev_ops *ops);

/* Open device `device` of a kind. TIDE_EDEVICE: no runtime (CUDA not installed), no such
 * device; -EINVAL: an unknown kind. */
int dev_open(int kind, int device, dev **out, char *msg, size_t mlen);
void dev_close(dev *d);

/* One line on what d runs with: for CUDA the runtime's version, the library it was found
 * or loaded as, and whether copies go batched (or why not any more). */
void dev_describe(dev *d, char *buf, size_t len);
/* The CUDA kind's runtime candidates, in order of preference (tests); NULL restores the
 * built-in list. Call before dev_open. */
void dev_cuda_set_candidates(const char *const *names, size_t n);

int dev_check(dev *d, const void *p, uint64_t len, char *msg, size_t mlen);
int dev_host_register(dev *d, void *p, uint64_t len, char *msg, size_t mlen);
void dev_host_unregister(dev *d, void *p);

int dev_event_record(dev *d, uintptr_t stream, dev_event **out, char *msg, size_t mlen);
void dev_event_free(dev_event *e);

int dev_queue_open(dev *d, dev_queue **out, char *msg, size_t mlen);
void dev_queue_close(dev_queue *q);
int dev_queue_wait_event(dev_queue *q, const dev_event *e, char *msg, size_t mlen);
/* Collect one copy (merged into the previous run when both sides continue it). */
int dev_queue_add(dev_queue *q, void *dst, const void *src, size_t len);
/* Issue what was collected; *ticket names its end (the previous ticket when nothing was
 * collected). */
int dev_queue_flush(dev_queue *q, uint64_t *ticket, char *msg, size_t mlen);
int dev_queue_wait(dev_queue *q, uint64_t ticket, char *msg, size_t mlen);
/* Drop what was collected and not issued. */
void dev_queue_discard(dev_queue *q);

/* ---- the test table's controls (device_test.c) ------------------------------------------ */

/* Allocate n bytes of test device `device`'s memory (a bump allocator over a mapping of
 * DEV_TEST_MEM bytes, created on first use). The address cannot be dereferenced by the
 * host: read and write it with dev_test_peek / dev_test_poke. NULL when full. */
#define DEV_TEST_MEM (64u << 20)
void *dev_test_alloc(int device, size_t n);
void dev_test_poke(void *dst_dev, const void *src, size_t n);
void dev_test_peek(void *dst, const void *src_dev, size_t n);
/* A test engine stream: kernels queued on it run in order on a thread of their own. */
typedef struct dev_test_stream dev_test_stream;
dev_test_stream *dev_test_stream_new(void);
void dev_test_stream_free(dev_test_stream *s);
/* Queue a "kernel" that, after delay_us, writes n bytes of src (copied now) to dst_dev. */
void dev_test_stream_write(dev_test_stream *s, void *dst_dev, const void *src, size_t n,
                           unsigned delay_us);
/* A gate queued on s: what s runs after it waits until dev_test_gate_open (once). */
typedef struct dev_test_gate dev_test_gate;
dev_test_gate *dev_test_stream_gate(dev_test_stream *s);
void dev_test_gate_open(dev_test_gate *g);
/* Block until every kernel queued on s so far has run. */
void dev_test_stream_sync(dev_test_stream *s);
/* Every copy of the test table is delayed this long (default 200 µs). */
void dev_test_set_copy_delay(unsigned us);
/* The copy that is the k-th from now (k >= 1) fails: it writes garbage over its
 * destination, and its queue reports TIDE_EDEVICE. 0 turns it off. */
void dev_test_fail_copy(unsigned k);
/* Figures: copies (runs) done, of which into or out of registered host memory; host
 * registrations made and still held. */
typedef struct dev_test_counts {
    uint64_t copies, copies_registered, bytes, registrations, registered_now;
} dev_test_counts;
void dev_test_get_counts(dev_test_counts *out);

#endif
