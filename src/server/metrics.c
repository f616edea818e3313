/*
 * metrics.c — counting requests and rendering tided's figures as Prometheus text.
 */
#include "server/metrics.h"

#include "common/log.h"
#include "common/stats_fields.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static const uint64_t bucket_us[METRICS_NBUCKETS] = {
    10,    25,    50,     100,    250,    500,     1000,    2500,    5000,     10000,
    25000, 50000, 100000, 250000, 500000, 1000000, 2500000, 5000000, 10000000, 30000000,
};

static const char *const op_names[] = {
    "put",   "get",     "exists", "remove", "match_prefix", "stat",    "ping",   "clear",
    "hello", "reserve", "commit", "pin",    "release",      "replica", "events", "other",
};
static const char *const status_names[] = {"ok", "too_small", "miss", "error"};
/* A label for every op and every outcome: an enum grown without its name fails here. */
_Static_assert(sizeof(op_names) / sizeof(op_names[0]) == MOP_COUNT, "an op without a label");
_Static_assert(sizeof(status_names) / sizeof(status_names[0]) == MST_COUNT,
               "an outcome without a label");

void metrics_op_done(metrics *m, int op, int status, uint64_t keys, uint64_t latency_ns) {
    if (op < 0 || op >= MOP_COUNT || status < 0 || status >= MST_COUNT) return;
    atomic_fetch_add_explicit(&m->ops[op][status], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&m->keys[op], keys, memory_order_relaxed);
    uint64_t us = latency_ns / 1000;
    int b = 0;
    while (b < METRICS_NBUCKETS && us > bucket_us[b])
        b++;
    atomic_fetch_add_explicit(&m->latency[op].count[b], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&m->latency[op].sum_ns, latency_ns, memory_order_relaxed);
}

/* An appender into a buffer that grows as the text does. The text is rendered once: the
 * counters move while it is (every worker updates them), so a size measured by a first
 * pass would not hold for a second. On out of memory it stops (failed = 1). */
typedef struct out {
    char *buf;
    size_t cap, len;
    int failed;
} out;

__attribute__((format(printf, 2, 3))) static void emit(out *o, const char *fmt, ...) {
    if (o->failed) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(o->buf + o->len, o->cap - o->len, fmt, ap);
        va_end(ap);
        if (n < 0) return;
        if ((size_t)n < o->cap - o->len) {
            o->len += (size_t)n;
            return;
        }
        size_t cap = o->cap * 2;
        while (cap - o->len <= (size_t)n)
            cap *= 2;
        char *grown = realloc(o->buf, cap);
        if (!grown) {
            o->failed = 1;
            return;
        }
        o->buf = grown;
        o->cap = cap;
    }
}

static uint64_t ld(const atomic_uint_fast64_t *a) {
    return atomic_load_explicit(a, memory_order_relaxed);
}

static void gauge(out *o, const char *name, const char *help, const char *type, uint64_t v) {
    emit(o, "# HELP %s %s\n# TYPE %s %s\n%s %llu\n", name, help, name, type, name,
         (unsigned long long)v);
}

char *metrics_render(const metrics *m, const tide_stats *st, size_t *len) {
    out o = {malloc(16384), 16384, 0, 0};
    if (!o.buf) return NULL;
    o.buf[0] = '\0';
    emit(&o, "# HELP tide_requests_total Requests by opcode and outcome (a request of several "
             "keys takes its worst key's: ok, too_small, miss, error; too_small is a read "
             "answered with the value's size only).\n"
             "# TYPE tide_requests_total counter\n");
    for (int op = 0; op < MOP_COUNT; op++)
        for (int s = 0; s < MST_COUNT; s++)
            emit(&o, "tide_requests_total{op=\"%s\",status=\"%s\"} %llu\n", op_names[op],
                 status_names[s], (unsigned long long)ld(&m->ops[op][s]));
    emit(&o, "# HELP tide_request_keys_total Keys carried by requests, by opcode.\n"
             "# TYPE tide_request_keys_total counter\n");
    for (int op = 0; op < MOP_COUNT; op++)
        emit(&o, "tide_request_keys_total{op=\"%s\"} %llu\n", op_names[op],
             (unsigned long long)ld(&m->keys[op]));
    emit(&o, "# HELP tide_request_duration_seconds Time from a request's last byte read to "
             "its reply queued.\n# TYPE tide_request_duration_seconds histogram\n");
    for (int op = 0; op < MOP_COUNT; op++) {
        uint64_t cum = 0;
        for (int b = 0; b <= METRICS_NBUCKETS; b++) {
            cum += ld(&m->latency[op].count[b]);
            if (b < METRICS_NBUCKETS)
                emit(&o, "tide_request_duration_seconds_bucket{op=\"%s\",le=\"%g\"} %llu\n",
                     op_names[op], (double)bucket_us[b] / 1e6, (unsigned long long)cum);
            else
                emit(&o, "tide_request_duration_seconds_bucket{op=\"%s\",le=\"+Inf\"} %llu\n",
                     op_names[op], (unsigned long long)cum);
        }
        emit(&o, "tide_request_duration_seconds_sum{op=\"%s\"} %.9f\n", op_names[op],
             (double)ld(&m->latency[op].sum_ns) / 1e9);
        emit(&o, "tide_request_duration_seconds_count{op=\"%s\"} %llu\n", op_names[op],
             (unsigned long long)cum);
    }
    gauge(&o, "tide_network_received_bytes_total", "Bytes read from client sockets.", "counter",
          ld(&m->bytes_in));
    gauge(&o, "tide_network_sent_bytes_total", "Bytes written to client sockets.", "counter",
          ld(&m->bytes_out));
    gauge(&o, "tide_connections_total", "Connections accepted.", "counter", ld(&m->conns_total));
    gauge(&o, "tide_connections_open", "Connections open now.", "gauge", ld(&m->conns_open));
    gauge(&o, "tide_connections_rejected_total",
          "Connections refused at the connection limit (at accept, or at HELLO with a "
          "token) or by the Unix socket's uid check.",
          "counter", ld(&m->conns_rejected));
    gauge(&o, "tide_connections_preauth", "Connections open that have not authenticated yet.",
          "gauge", ld(&m->conns_preauth));
    gauge(&o, "tide_connections_preauth_cut_total",
          "Unauthenticated connections cut, oldest first, to make room for new ones "
          "(--max-preauth-conns).",
          "counter", ld(&m->conns_preauth_cut));
    gauge(&o, "tide_protocol_errors_total", "Malformed frames received.", "counter",
          ld(&m->proto_errors));
    gauge(&o, "tide_auth_failures_total", "Connections that failed authentication.", "counter",
          ld(&m->auth_failures));
    gauge(&o, "tide_http_connections_cut_total",
          "HTTP connections to /metrics and /health closed unanswered: past their deadline, "
          "or the oldest cut when all HTTP slots were taken.",
          "counter", ld(&m->http_cut));
    gauge(&o, "tide_ucx_endpoints_cut_total",
          "UCX endpoints closed for leaving more answers untaken than a client can have "
          "asked for (4 x --max-keys).",
          "counter", ld(&m->ucx_cut));
    gauge(&o, "tide_ucx_log_lines_suppressed_total",
          "Lines of UCX's own log (a message tided has no handler for, a wire-up UCX cannot "
          "parse, ...) left out of tided's log by its rate limit (docs/UCX.md).",
          "counter", ld(&m->ucx_log_suppressed));
    gauge(&o, "tide_log_lines_suppressed_total",
          "Log lines that peers can cause without end (a connection refused or cut, an "
          "endpoint refused, UCX's reports) left out of tided's log by their rate limits: "
          "40 at once, then 4 a second per kind of line (docs/TIDED.md).",
          "counter", log_suppressed_total());
    if (st) {
        gauge(&o, "tide_capacity_bytes", "Pool size.", "gauge", st->capacity_bytes);
        gauge(&o, "tide_used_bytes", "Pool bytes held by objects and reservations.", "gauge",
              st->used_bytes);
        gauge(&o, "tide_objects", "Committed objects.", "gauge", st->objects);
        gauge(&o, "tide_metadata_bytes", "Memory spent on metadata.", "gauge", st->meta_bytes);
        gauge(&o, "tide_metadata_budget_bytes",
              "Heap the memory tier's per-object metadata may take (--meta-budget); puts evict "
              "to stay within it.",
              "gauge", m->meta_budget);
        gauge(&o, "tide_pinned_objects", "Objects pinned by readers.", "gauge", st->pinned);
        gauge(&o, "tide_reserved_objects", "Puts reserved and not yet committed.", "gauge",
              st->reserved);
        gauge(&o, "tide_store_puts_total", "Puts that stored a new object.", "counter", st->puts);
        gauge(&o, "tide_store_put_duplicates_total", "Puts of a key already present.", "counter",
              st->put_dups);
        gauge(&o, "tide_store_hits_total", "Gets that found their key.", "counter", st->gets);
        gauge(&o, "tide_store_misses_total", "Gets that found nothing.", "counter", st->misses);
        gauge(&o, "tide_evictions_total", "Objects evicted to make room.", "counter",
              st->evictions);
        gauge(&o, "tide_evicted_bytes_total", "Bytes those evictions freed.", "counter",
              st->evicted_bytes);
        gauge(&o, "tide_checksum_errors_total", "Reads whose checksum failed.", "counter",
              st->checksum_errors);
        gauge(&o, "tide_store_bytes_in_total", "Value bytes stored.", "counter", st->bytes_in);
        gauge(&o, "tide_store_bytes_out_total", "Value bytes read.", "counter", st->bytes_out);
        for (size_t i = 0; st->disk_capacity_bytes && i < stats_disk_nfields; i++) {
            const stats_field *f = &stats_disk_fields[i];
            gauge(&o, f->metric, f->help, f->counter ? "counter" : "gauge", stats_field_get(st, f));
        }
    }
    if (o.failed) {
        free(o.buf);
        return NULL;
    }
    *len = o.len;
    return o.buf;
}
