/*
 * resp_cmd.c — the Redis commands tided's RESP port runs against the store: GET SET SETNX MGET MSET
 * EXISTS DEL PING ECHO INFO DBSIZE FLUSHALL FLUSHDB SELECT COMMAND CLIENT CONFIG AUTH QUIT, and the
 * replies they queue. The connection that reads them is resp_conn.c's; everything here runs on its
 * worker's thread.
 *
 * Keys and values are the store's: a key written here is read natively and the other way
 * round, same bytes. Tide objects are immutable, so SET of an existing key replaces it by
 * remove + put: the old value disappears when the SET's value starts to arrive and the
 * new one appears when its last byte is in (a GET in between misses; nobody ever sees a
 * mix of the two). Two SETs of one key at the same time: the first to reserve the key
 * stores its value, the other answers +OK and drops its bytes, as if it had come first.
 * SETNX and SET NX are first-writer-wins, the store's own rule. Empty values are refused
 * (the store holds none), and so are expiry options (the store has no TTL).
 *
 * Sending. Replies are queued as segments (outq.c): small replies are appended to owned
 * chunks. RESP has no checksum of its own, so the server is the reader that checks, and
 * what it checks must be what it sends: a GET's value is copied and the copy is checked —
 * a small one into the reply's chunk, a large one just before it is sent, when the pool
 * is shared — except a large value while the pool is tided's alone (no Unix socket),
 * which is checked in the pool and sent with writev straight from there under a pin,
 * released when its segment has left (reply_value says why each is safe).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/checksum.h"
#include "common/log.h"
#include "common/util.h"
#include "server/resp_conn.h"

#define COPY_MAX (16 * 1024) /* GET values up to this are copied; larger go by pin */

static atomic_uint_fast64_t start_ns;

void resp_cmd_started(void) {
    uint64_t zero = 0;
    atomic_compare_exchange_strong(&start_ns, &zero, now_ns());
}

typedef int (*cmd_fn)(resp_conn *c, const resp_cmd *cmd, int *status);

/* ---- output -------------------------------------------------------------------------- */

int resp_out_bytes(resp_conn *c, const void *p, size_t n) {
    uint8_t *b = outq_room(&c->io.out, n);
    if (!b) return -ENOMEM;
    memcpy(b, p, n);
    outq_wrote(&c->io.out, n);
    return 0;
}

int resp_out_num(resp_conn *c, char type, int64_t v) {
    uint8_t *b = outq_room(&c->io.out, RESP_NUM_MAX);
    if (!b) return -ENOMEM;
    outq_wrote(&c->io.out, resp_enc_num(b, type, v));
    return 0;
}

int resp_out_bulk(resp_conn *c, const void *p, size_t n) {
    int rc = resp_out_num(c, '$', (int64_t)n);
    if (rc == 0) rc = resp_out_bytes(c, p, n);
    return rc ? rc : RESP_OUT_LIT(c, "\r\n");
}

int resp_out_bulk_str(resp_conn *c, const char *s) {
    return resp_out_bulk(c, s, strlen(s));
}

int resp_out_line(resp_conn *c, char type, const char *s) {
    size_t n = strlen(s);
    uint8_t *b = outq_room(&c->io.out, n + 3);
    if (!b) return -ENOMEM;
    outq_wrote(&c->io.out, resp_enc_line(b, type, s, n));
    return 0;
}

int resp_out_nil(resp_conn *c) {
    return c->resp3 ? RESP_OUT_LIT(c, "_\r\n") : RESP_OUT_LIT(c, "$-1\r\n");
}

int resp_out_map(resp_conn *c, int64_t n) {
    return c->resp3 ? resp_out_num(c, '%', n) : resp_out_num(c, '*', 2 * n);
}

int resp_out_err(resp_conn *c, const char *fmt, ...) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return resp_out_line(c, '-', msg);
}

/* ---- SET ----------------------------------------------------------------------------- */

/* Decide what a SET of key (vlen bytes) does: reserve room for the value (c->res_id set),
 * or drop the value and answer c->drop_reply. nx: only when absent; xx: only when present. */
void resp_set_plan(resp_conn *c, const resp_arg *key, uint64_t vlen, int nx, int xx, int setnx) {
    store *st = c->srv->st;
    c->res_id = 0;
    c->ok_reply = setnx ? SR_ONE : SR_OK;
    c->drop_reply = SR_ERR;
    if (vlen == 0) { /* refused before anything is removed: a failed SET changes nothing */
        snprintf(c->err, sizeof(c->err), "ERR empty value: tide does not store empty values");
        return;
    }
    if (xx && store_exists(st, key->p, key->len) != 1) {
        c->drop_reply = SR_NIL;
        return;
    }
    if (!nx) store_remove(st, key->p, key->len); /* replace: see the top of this file */
    store_ref ref;
    int rc = store_reserve(st, key->p, key->len, vlen, 0, &ref);
    switch (rc) {
    case 0:
        c->res_id = ref.id;
        c->res_off = ref.offset;
        return;
    case STORE_DUP: /* present (nx), or another SET of this key is under way */
        c->drop_reply = setnx ? SR_ZERO : nx ? SR_NIL : SR_OK;
        return;
    case TIDE_EKEYEMPTY:
    case TIDE_EKEYLONG:
        snprintf(c->err, sizeof(c->err), "ERR key of %zu bytes: tide keys are 1..%d bytes",
                 key->len, TIDE_KEY_MAX);
        return;
    case TIDE_EVALBIG:
        snprintf(c->err, sizeof(c->err), "ERR value of %llu bytes is over the limit of %llu",
                 (unsigned long long)vlen, (unsigned long long)c->parser.lim.max_bulk);
        return;
    case TIDE_ENOSPACE:
        snprintf(c->err, sizeof(c->err),
                 "OOM no room for %llu bytes: the pool is full of pinned or incoming values",
                 (unsigned long long)vlen);
        return;
    default:
        snprintf(c->err, sizeof(c->err), "ERR cannot store the value: %s", tide_strerror(rc));
    }
}

int resp_set_reply(resp_conn *c, int kind) {
    switch (kind) {
    case SR_OK:
        return RESP_OUT_LIT(c, "+OK\r\n");
    case SR_ONE:
        return RESP_OUT_LIT(c, ":1\r\n");
    case SR_ZERO:
        return RESP_OUT_LIT(c, ":0\r\n");
    case SR_NIL:
        return resp_out_nil(c);
    default:
        return resp_out_line(c, '-', c->err);
    }
}

/* The value bytes are in place at the reservation: checksum, commit, answer. */
int resp_set_commit(resp_conn *c, uint64_t sum) {
    int rc = store_commit(c->srv->st, c->res_id, sum);
    c->res_id = 0;
    if (rc != 0) {
        snprintf(c->err, sizeof(c->err), "ERR the value was lost: %s", tide_strerror(rc));
        return resp_set_reply(c, SR_ERR);
    }
    store_count_io(c->srv->st, c->vlen, 0);
    return resp_set_reply(c, c->ok_reply);
}

/* SET of a value that is in the buffer. *stored says whether it was. */
static int set_buffered(resp_conn *c, const resp_arg *key, const resp_arg *val, int nx, int xx,
                        int setnx, int *stored) {
    resp_set_plan(c, key, val->len, nx, xx, setnx);
    *stored = c->res_id != 0;
    if (!c->res_id) return resp_set_reply(c, c->drop_reply);
    tide_iov iov = {(void *)val->p, val->len};
    uint64_t sum = copy_gather(store_base(c->srv->st) + c->res_off, &iov, 1, 1);
    c->vlen = val->len;
    return resp_set_commit(c, sum);
}

/* ---- commands ------------------------------------------------------------------------ */

/* A value that failed its checksum: log, report it to the store (which drops it), unpin. */
static void value_failed(store *st, const store_ref *ref) {
    LOG_WARN("RESP: a value of %llu bytes failed its checksum; removed, answered as a miss",
             (unsigned long long)ref->len);
    store_verify_failed(st, ref->id);
    store_unpin(st, ref->id);
}

/* Queue a small pinned value as a bulk string copied into the reply's chunks, checking the
 * copy (not the pool) against the checksum; nil when it fails. Unpins. *hit: 1 when the
 * value was queued. */
static int reply_copy(resp_conn *c, const store_ref *ref, const uint8_t *v, int *hit) {
    store *st = c->srv->st;
    uint8_t hdr[RESP_NUM_MAX];
    size_t hl = resp_enc_num(hdr, '$', (int64_t)ref->len), need = hl + ref->len + 2;
    uint8_t *b = outq_room(&c->io.out, need);
    if (!b) {
        store_unpin(st, ref->id);
        return -ENOMEM;
    }
    memcpy(b, hdr, hl);
    if (copy_out_hashed(b + hl, v, ref->len) != ref->checksum) {
        value_failed(st, ref);
        return resp_out_nil(c); /* the room is reused: nothing was committed to it */
    }
    store_unpin(st, ref->id);
    memcpy(b + hl + ref->len, "\r\n", 2);
    outq_wrote(&c->io.out, need);
    *hit = 1;
    return 0;
}

/* Queue key's value as a bulk string, or nil when it is absent or fails its checksum.
 *
 * The bytes sent must be the bytes checked. Small values are copied into the reply and the
 * copy is checked (reply_copy). While the pool is tided's alone (no Unix socket: no other
 * process maps it), a committed object's bytes never change, so a large value is checked in
 * the pool and sent from there by writev under its pin. With a Unix socket, same-host
 * clients map the pool read-write and may write it between a check and the send, so a
 * large value is queued as a checked segment (outq_push_checked): copied out of the pool
 * and checked when it reaches the head of the output queue, just before it is sent (while
 * the copy is in cache, and one value at a time however long the reply), its bulk header
 * and "\r\n" going with it, or nil instead of all three when the check fails. The get is
 * counted as a hit when it is queued. */
static int reply_value(resp_conn *c, const resp_arg *key, int *hit) {
    store *st = c->srv->st;
    store_ref ref;
    *hit = 0;
    if (store_pin(st, key->p, key->len, 0, &ref) != 0) return resp_out_nil(c);
    const uint8_t *v = store_base(st) + ref.offset;
    int rc;
    if (ref.len <= COPY_MAX) {
        rc = reply_copy(c, &ref, v, hit);
    } else if (server_pool_shared(c->srv)) {
        outq_frame fr = {.post = "\r\n", .fail = "$-1\r\n", .npost = 2, .nfail = 5};
        if (c->resp3) { /* the null it sends instead when the check fails */
            memcpy(fr.fail, "_\r\n", 3);
            fr.nfail = 3;
        }
        fr.npre = (uint8_t)resp_enc_num(fr.pre, '$', (int64_t)ref.len);
        rc = outq_push_checked(&c->io.out, v, ref.len, ref.id, ref.checksum, &fr);
        if (rc) store_unpin(st, ref.id);
        *hit = rc == 0;
    } else {
        if (checksum_buf(v, ref.len) != ref.checksum) {
            value_failed(st, &ref);
            return resp_out_nil(c);
        }
        rc = resp_out_num(c, '$', (int64_t)ref.len);
        if (rc == 0) rc = outq_push(&c->io.out, v, ref.len, NULL, ref.id); /* the pin goes along */
        if (rc) store_unpin(st, ref.id);
        if (rc == 0) rc = RESP_OUT_LIT(c, "\r\n");
        *hit = 1;
    }
    if (*hit) store_count_io(st, 0, ref.len);
    return rc;
}

static int cmd_get(resp_conn *c, const resp_cmd *cmd, int *status) {
    int hit;
    int rc = reply_value(c, &cmd->argv[1], &hit);
    *status = hit ? MST_OK : MST_MISS;
    return rc;
}

static int cmd_mget(resp_conn *c, const resp_cmd *cmd, int *status) {
    int rc = resp_out_num(c, '*', cmd->argc - 1), all = 1;
    for (uint32_t i = 1; i < cmd->argc && rc == 0; i++) {
        int hit;
        rc = reply_value(c, &cmd->argv[i], &hit);
        all &= hit;
    }
    *status = all ? MST_OK : MST_MISS;
    return rc;
}

static int cmd_set(resp_conn *c, const resp_cmd *cmd, int *status) {
    int nx = 0, xx = 0, stored;
    for (uint32_t i = 3; i < cmd->argc; i++) {
        const resp_arg *o = &cmd->argv[i];
        if (resp_arg_is(o, "NX")) {
            nx = 1;
        } else if (resp_arg_is(o, "XX")) {
            xx = 1;
        } else if (resp_arg_is(o, "EX") || resp_arg_is(o, "PX") || resp_arg_is(o, "EXAT") ||
                   resp_arg_is(o, "PXAT") || resp_arg_is(o, "KEEPTTL")) {
            *status = MST_ERROR;
            return resp_out_err(c,
                                "ERR tide does not expire keys: SET %.*s is not supported "
                                "(values leave by eviction or DEL)",
                                (int)o->len, o->p);
        } else if (resp_arg_is(o, "GET")) {
            *status = MST_ERROR;
            return resp_out_err(c, "ERR SET ... GET is not supported by tide");
        } else {
            *status = MST_ERROR;
            return resp_out_err(c, "ERR syntax error");
        }
    }
    if (nx && xx) {
        *status = MST_ERROR;
        return resp_out_err(c, "ERR syntax error");
    }
    int rc = set_buffered(c, &cmd->argv[1], &cmd->argv[2], nx, xx, 0, &stored);
    *status = stored || c->drop_reply != SR_ERR ? MST_OK : MST_ERROR;
    return rc;
}

static int cmd_setnx(resp_conn *c, const resp_cmd *cmd, int *status) {
    int stored;
    int rc = set_buffered(c, &cmd->argv[1], &cmd->argv[2], 1, 0, 1, &stored);
    *status = stored || c->drop_reply != SR_ERR ? MST_OK : MST_ERROR;
    return rc;
}

static int cmd_mset(resp_conn *c, const resp_cmd *cmd, int *status) {
    if (cmd->argc % 2 != 1) {
        *status = MST_ERROR;
        return resp_out_err(c, "ERR wrong number of arguments for 'mset' command");
    }
    /* Each pair is a SET; the first failure is the answer (the other pairs are stored). */
    char first_err[sizeof(c->err)] = "";
    for (uint32_t i = 1; i < cmd->argc; i += 2) {
        resp_set_plan(c, &cmd->argv[i], cmd->argv[i + 1].len, 0, 0, 0);
        if (!c->res_id) {
            if (c->drop_reply == SR_ERR && !first_err[0]) memcpy(first_err, c->err, sizeof(c->err));
            continue;
        }
        tide_iov iov = {(void *)cmd->argv[i + 1].p, cmd->argv[i + 1].len};
        uint64_t sum = copy_gather(store_base(c->srv->st) + c->res_off, &iov, 1, 1);
        int rc = store_commit(c->srv->st, c->res_id, sum);
        c->res_id = 0;
        if (rc == 0)
            store_count_io(c->srv->st, iov.len, 0);
        else if (!first_err[0])
            snprintf(first_err, sizeof(first_err), "ERR a value was lost: %s", tide_strerror(rc));
    }
    *status = first_err[0] ? MST_ERROR : MST_OK;
    return first_err[0] ? resp_out_line(c, '-', first_err) : RESP_OUT_LIT(c, "+OK\r\n");
}

static int cmd_exists(resp_conn *c, const resp_cmd *cmd, int *status) {
    int64_t n = 0;
    for (uint32_t i = 1; i < cmd->argc; i++)
        n += store_exists(c->srv->st, cmd->argv[i].p, cmd->argv[i].len) == 1;
    *status = n == (int64_t)cmd->argc - 1 ? MST_OK : MST_MISS;
    return resp_out_num(c, ':', n);
}

static int cmd_del(resp_conn *c, const resp_cmd *cmd, int *status) {
    int64_t n = 0;
    for (uint32_t i = 1; i < cmd->argc; i++)
        n += store_remove(c->srv->st, cmd->argv[i].p, cmd->argv[i].len) == 0;
    *status = n == (int64_t)cmd->argc - 1 ? MST_OK : MST_MISS;
    return resp_out_num(c, ':', n);
}

static int cmd_ping(resp_conn *c, const resp_cmd *cmd, int *status) {
    if (cmd->argc > 2) {
        *status = MST_ERROR;
        return resp_out_err(c, "ERR wrong number of arguments for 'ping' command");
    }
    if (cmd->argc == 2) return resp_out_bulk(c, cmd->argv[1].p, cmd->argv[1].len);
    return RESP_OUT_LIT(c, "+PONG\r\n");
}

static int cmd_echo(resp_conn *c, const resp_cmd *cmd, int *status) {
    return resp_out_bulk(c, cmd->argv[1].p, cmd->argv[1].len);
}

static int cmd_dbsize(resp_conn *c, const resp_cmd *cmd, int *status) {
    tide_stats st;
    store_stats(c->srv->st, &st);
    return resp_out_num(c, ':', (int64_t)st.objects);
}

static int cmd_flushall(resp_conn *c, const resp_cmd *cmd, int *status) {
    if (cmd->argc > 2 || (cmd->argc == 2 && !resp_arg_is(&cmd->argv[1], "ASYNC") &&
                          !resp_arg_is(&cmd->argv[1], "SYNC"))) {
        *status = MST_ERROR;
        return resp_out_err(c, "ERR syntax error");
    }
    int rc = store_clear(c->srv->st);
    if (rc) {
        *status = MST_ERROR;
        return resp_out_err(c, "ERR flush not recorded on the SSD tier: %s", tide_strerror(rc));
    }
    return RESP_OUT_LIT(c, "+OK\r\n");
}

static int cmd_select(resp_conn *c, const resp_cmd *cmd, int *status) {
    int64_t db;
    if (resp_arg_int(&cmd->argv[1], &db) != 0) {
        *status = MST_ERROR;
        return resp_out_err(c, "ERR value is not an integer or out of range");
    }
    if (db != 0) {
        *status = MST_ERROR;
        return resp_out_err(c, "ERR DB index is out of range (tide has one keyspace, db 0)");
    }
    return RESP_OUT_LIT(c, "+OK\r\n");
}

/* Human-readable bytes the way Redis writes them (1.50M). */
static const char *human(uint64_t v, char *buf, size_t cap) {
    static const char units[] = "BKMGTP";
    double d = (double)v;
    int u = 0;
    while (d >= 1024 && u < 5) {
        d /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, cap, "%lluB", (unsigned long long)v);
    else
        snprintf(buf, cap, "%.2f%c", d, units[u]);
    return buf;
}

enum { INFO_SERVER = 1, INFO_CLIENTS = 2, INFO_MEMORY = 4, INFO_STATS = 8, INFO_KEYSPACE = 16 };

/* The eviction policy as INFO and CONFIG GET name it: Redis's name for LRU, tide's own for
 * the others. */
static const char *maxmemory_policy(const server *srv) {
    return srv->cfg.store.policy == STORE_POLICY_LRU ? "allkeys-lru"
                                                     : store_policy_name(srv->cfg.store.policy);
}

static int cmd_info(resp_conn *c, const resp_cmd *cmd, int *status) {
    static const char *const names[] = {"server", "clients", "memory", "stats", "keyspace"};
    unsigned want = cmd->argc == 1 ? 0x1f : 0;
    for (uint32_t i = 1; i < cmd->argc; i++) {
        if (resp_arg_is(&cmd->argv[i], "all") || resp_arg_is(&cmd->argv[i], "everything") ||
            resp_arg_is(&cmd->argv[i], "default"))
            want = 0x1f;
        for (unsigned s = 0; s < 5; s++)
            if (resp_arg_is(&cmd->argv[i], names[s])) want |= 1u << s;
    }
    server *srv = c->srv;
    tide_stats st;
    store_stats(srv->st, &st);
    char b[4096], h1[32], h2[32];
    size_t n = 0;
#define ADD(...) (n += (size_t)snprintf(b + n, n < sizeof(b) ? sizeof(b) - n : 0, __VA_ARGS__))
    if (want & INFO_SERVER) {
        uint64_t up = (now_ns() - atomic_load(&start_ns)) / 1000000000ull;
        /* redis_version: the Redis release whose RESP2 commands tided answers like, for
         * clients that look at it; tide_version is what this is. */
        ADD("# Server\r\nredis_version:7.0.0\r\ntide_version:%s\r\nredis_mode:standalone\r\n"
            "process_id:%d\r\ntcp_port:%d\r\nio_threads_active:%d\r\nuptime_in_seconds:%llu\r\n"
            "uptime_in_days:%llu\r\n",
            tide_version(), (int)getpid(), srv->resp_port, srv->cfg.threads, (unsigned long long)up,
            (unsigned long long)(up / 86400));
    }
    if (want & INFO_CLIENTS) {
        ADD("%s# Clients\r\nconnected_clients:%d\r\nmaxclients:%d\r\n", n ? "\r\n" : "",
            atomic_load(&srv->open_conns), srv->cfg.max_conns);
    }
    if (want & INFO_MEMORY) {
        ADD("%s# Memory\r\nused_memory:%llu\r\nused_memory_human:%s\r\nmaxmemory:%llu\r\n"
            "maxmemory_human:%s\r\nmaxmemory_policy:%s\r\ntide_meta_bytes:%llu\r\n"
            "tide_pinned_objects:%llu\r\ntide_reserved_objects:%llu\r\n",
            n ? "\r\n" : "", (unsigned long long)st.used_bytes, human(st.used_bytes, h1, 32),
            (unsigned long long)st.capacity_bytes, human(st.capacity_bytes, h2, 32),
            maxmemory_policy(srv), (unsigned long long)st.meta_bytes, (unsigned long long)st.pinned,
            (unsigned long long)st.reserved);
    }
    if (want & INFO_STATS) {
        uint64_t cmds = 0;
        for (int op = 0; op < MOP_COUNT; op++)
            for (int s = 0; s < MST_COUNT; s++)
                cmds += atomic_load(&srv->m.ops[op][s]);
        ADD("%s# Stats\r\ntotal_connections_received:%llu\r\ntotal_commands_processed:%llu\r\n"
            "total_net_input_bytes:%llu\r\ntotal_net_output_bytes:%llu\r\n"
            "rejected_connections:%llu\r\nevicted_keys:%llu\r\nkeyspace_hits:%llu\r\n"
            "keyspace_misses:%llu\r\ntide_puts:%llu\r\ntide_put_dups:%llu\r\n"
            "tide_evicted_bytes:%llu\r\ntide_checksum_errors:%llu\r\ntide_value_bytes_in:%llu\r\n"
            "tide_value_bytes_out:%llu\r\ntide_protocol_errors:%llu\r\ntide_auth_failures:%llu\r\n",
            n ? "\r\n" : "", (unsigned long long)atomic_load(&srv->m.conns_total),
            (unsigned long long)cmds, (unsigned long long)atomic_load(&srv->m.bytes_in),
            (unsigned long long)atomic_load(&srv->m.bytes_out),
            (unsigned long long)atomic_load(&srv->m.conns_rejected),
            (unsigned long long)st.evictions, (unsigned long long)st.gets,
            (unsigned long long)st.misses, (unsigned long long)st.puts,
            (unsigned long long)st.put_dups, (unsigned long long)st.evicted_bytes,
            (unsigned long long)st.checksum_errors, (unsigned long long)st.bytes_in,
            (unsigned long long)st.bytes_out, (unsigned long long)atomic_load(&srv->m.proto_errors),
            (unsigned long long)atomic_load(&srv->m.auth_failures));
    }
    if (want & INFO_KEYSPACE) {
        ADD("%s# Keyspace\r\n", n ? "\r\n" : "");
        if (st.objects)
            ADD("db0:keys=%llu,expires=0,avg_ttl=0\r\n", (unsigned long long)st.objects);
    }
#undef ADD
    return resp_out_bulk(c, b, n < sizeof(b) ? n : sizeof(b) - 1);
}

/* Name the connection (CLIENT SETNAME, HELLO's SETNAME): 0 with nothing queued, or the
 * error reply queued and *status MST_ERROR. */
static int set_name(resp_conn *c, const resp_arg *nm, int *status) {
    for (size_t i = 0; i < nm->len; i++) {
        if (nm->p[i] < '!' || nm->p[i] > '~') {
            *status = MST_ERROR;
            return resp_out_err(c, "ERR Client names cannot contain spaces, newlines or special "
                                   "characters.");
        }
    }
    if (nm->len >= sizeof(c->name)) {
        *status = MST_ERROR;
        return resp_out_err(c, "ERR client name longer than %zu bytes", sizeof(c->name) - 1);
    }
    memcpy(c->name, nm->p, nm->len);
    c->name[nm->len] = '\0';
    return 0;
}

static int cmd_client(resp_conn *c, const resp_cmd *cmd, int *status) {
    const resp_arg *sub = &cmd->argv[1];
    if (resp_arg_is(sub, "SETNAME") && cmd->argc == 3) {
        int rc = set_name(c, &cmd->argv[2], status);
        return rc || *status == MST_ERROR ? rc : RESP_OUT_LIT(c, "+OK\r\n");
    }
    if (resp_arg_is(sub, "GETNAME") && cmd->argc == 2)
        return c->name[0] ? resp_out_bulk_str(c, c->name) : resp_out_nil(c);
    if (resp_arg_is(sub, "ID") && cmd->argc == 2) return resp_out_num(c, ':', (int64_t)c->id);
    if (resp_arg_is(sub, "SETINFO") && cmd->argc == 4) return RESP_OUT_LIT(c, "+OK\r\n");
    *status = MST_ERROR;
    return resp_out_err(c,
                        "ERR unknown subcommand or wrong number of arguments for CLIENT %.*s "
                        "(tide answers SETNAME, GETNAME, ID, SETINFO)",
                        (int)(sub->len > 32 ? 32 : sub->len), sub->p);
}

static int cmd_config(resp_conn *c, const resp_cmd *cmd, int *status) {
    if (!resp_arg_is(&cmd->argv[1], "GET") || cmd->argc < 3) {
        *status = MST_ERROR;
        return resp_out_err(c, "ERR tide answers CONFIG GET only (settings are tided's flags)");
    }
    /* The settings clients and redis-benchmark ask about, as tided has them. */
    char maxmem[32];
    snprintf(maxmem, sizeof(maxmem), "%llu", (unsigned long long)store_capacity(c->srv->st));
    const char *const kv[][2] = {{"save", ""},
                                 {"appendonly", "no"},
                                 {"databases", "1"},
                                 {"maxmemory", maxmem},
                                 {"maxmemory-policy", maxmemory_policy(c->srv)}};
    size_t nkv = sizeof(kv) / sizeof(kv[0]);
    int match[sizeof(kv) / sizeof(kv[0])] = {0}, count = 0;
    for (uint32_t i = 2; i < cmd->argc; i++) {
        const resp_arg *pat = &cmd->argv[i];
        for (size_t k = 0; k < nkv; k++) {
            if (!match[k] && ((pat->len == 1 && pat->p[0] == '*') || resp_arg_is(pat, kv[k][0]))) {
                match[k] = 1;
                count++;
            }
        }
    }
    int rc = resp_out_map(c, count);
    for (size_t k = 0; k < nkv && rc == 0; k++) {
        if (!match[k]) continue;
        rc = resp_out_bulk_str(c, kv[k][0]);
        if (rc == 0) rc = resp_out_bulk_str(c, kv[k][1]);
    }
    return rc;
}

/* Check user (NULL: none given) and password against tided's token, for AUTH and HELLO's
 * AUTH option. 1: authenticated, nothing queued; 0: an error reply was queued (its result
 * in *rc, negative to close). */
static int auth_check(resp_conn *c, const resp_arg *user, const resp_arg *pw, int *status,
                      int *rc) {
    const char *token = c->srv->cfg.auth_token;
    *rc = 0;
    if (!token[0]) {
        *status = MST_ERROR;
        *rc = resp_out_err(c, "ERR AUTH <password> called without any password configured for "
                              "the default user (tided runs without --auth-token-file)");
        return 0;
    }
    int user_ok = !user || resp_arg_is(user, "default");
    if (!connio_token_equal(token, pw->p, pw->len) || !user_ok) {
        /* The connection stays, but pauses before its next command, longer after each
         * failure (connio_auth_failed): a few guesses a second at most. */
        connio_auth_failed(&c->io);
        *status = MST_ERROR;
        *rc = resp_out_err(c, "WRONGPASS invalid username-password pair or user is disabled.");
        return 0;
    }
    if (!c->io.authed) { /* out of its pre-auth slot (preauth.c) */
        int r = connio_authed(&c->io);
        if (r == -ECONNABORTED) {
            *rc = r;
            return 0;
        }
        if (r == TIDE_ELIMIT) {
            *status = MST_ERROR;
            c->io.close_after_flush = 1;
            *rc = resp_out_err(c, "ERR max number of clients reached (--max-conns %d)",
                               c->srv->cfg.max_conns);
            return 0;
        }
    }
    return 1;
}

static int cmd_auth(resp_conn *c, const resp_cmd *cmd, int *status) {
    if (cmd->argc > 3) {
        *status = MST_ERROR;
        return resp_out_err(c, "ERR syntax error");
    }
    int rc;
    if (!auth_check(c, cmd->argc == 3 ? &cmd->argv[1] : NULL, &cmd->argv[cmd->argc - 1], status,
                    &rc))
        return rc;
    return RESP_OUT_LIT(c, "+OK\r\n");
}

static int set_name(resp_conn *c, const resp_arg *nm, int *status);

/* HELLO [protover [AUTH user pass] [SETNAME name]]: choose RESP2 or RESP3 for this
 * connection (redis-py 8 and other RESP3 clients send HELLO 3 first, with AUTH when they
 * have a password), authenticate and name it, and answer the server's description as a
 * map. Allowed before AUTH: without its AUTH option it then answers NOAUTH, as Redis. */
static int cmd_hello(resp_conn *c, const resp_cmd *cmd, int *status) {
    int proto = c->resp3 ? 3 : 2;
    uint32_t i = 1;
    if (cmd->argc >= 2) {
        const resp_arg *v = &cmd->argv[1];
        if (v->len != 1 || (v->p[0] != '2' && v->p[0] != '3')) {
            *status = MST_ERROR;
            return resp_out_err(c, "NOPROTO sorry, this protocol version is not supported");
        }
        proto = v->p[0] - '0';
        i = 2;
    }
    const resp_arg *user = NULL, *pw = NULL, *name = NULL;
    for (; i < cmd->argc; i++) {
        if (resp_arg_is(&cmd->argv[i], "AUTH") && i + 2 < cmd->argc) {
            user = &cmd->argv[i + 1];
            pw = &cmd->argv[i + 2];
            i += 2;
        } else if (resp_arg_is(&cmd->argv[i], "SETNAME") && i + 1 < cmd->argc) {
            name = &cmd->argv[++i];
        } else {
            *status = MST_ERROR;
            return resp_out_err(c, "ERR Syntax error in HELLO option '%.*s'",
                                (int)(cmd->argv[i].len > 32 ? 32 : cmd->argv[i].len),
                                cmd->argv[i].p);
        }
    }
    int rc;
    if (pw && !auth_check(c, user, pw, status, &rc)) return rc;
    if (!c->io.authed) {
        *status = MST_ERROR;
        atomic_fetch_add(&c->srv->m.auth_failures, 1);
        return resp_out_err(c, "NOAUTH HELLO must be called with the client already "
                               "authenticated, otherwise the HELLO <proto> AUTH <user> <pass> "
                               "option can be used to authenticate the client and select the "
                               "RESP protocol version at the same time");
    }
    if (name) {
        rc = set_name(c, name, status);
        if (rc || *status == MST_ERROR) return rc;
    }
    c->resp3 = proto == 3;
    rc = resp_out_map(c, 7);
    if (rc == 0) rc = resp_out_bulk_str(c, "server");
    if (rc == 0) rc = resp_out_bulk_str(c, "redis");
    if (rc == 0) rc = resp_out_bulk_str(c, "version");
    if (rc == 0) rc = resp_out_bulk_str(c, "7.0.0"); /* as INFO's redis_version */
    if (rc == 0) rc = resp_out_bulk_str(c, "proto");
    if (rc == 0) rc = resp_out_num(c, ':', proto);
    if (rc == 0) rc = resp_out_bulk_str(c, "id");
    if (rc == 0) rc = resp_out_num(c, ':', (int64_t)c->id);
    if (rc == 0) rc = resp_out_bulk_str(c, "mode");
    if (rc == 0) rc = resp_out_bulk_str(c, "standalone");
    if (rc == 0) rc = resp_out_bulk_str(c, "role");
    if (rc == 0) rc = resp_out_bulk_str(c, "master");
    if (rc == 0) rc = resp_out_bulk_str(c, "modules");
    if (rc == 0) rc = RESP_OUT_LIT(c, "*0\r\n");
    return rc;
}

static int cmd_quit(resp_conn *c, const resp_cmd *cmd, int *status) {
    c->io.close_after_flush = 1;
    return RESP_OUT_LIT(c, "+OK\r\n");
}

static int cmd_command(resp_conn *c, const resp_cmd *cmd, int *status);

/* The command table: name, arity (Redis's convention: n = exactly n arguments with the
 * name, -n = at least n), flags, first/last/step key positions, handler, metrics op
 * (-1: not counted). */
static const struct rcmd {
    const char *name;
    int arity;
    const char *flags[3];
    int first, last, step;
    cmd_fn fn;
    int mop;
} cmds[] = {
    {"get", 2, {"readonly", "fast"}, 1, 1, 1, cmd_get, MOP_GET},
    {"set", -3, {"write", "denyoom"}, 1, 1, 1, cmd_set, MOP_PUT},
    {"setnx", 3, {"write", "denyoom", "fast"}, 1, 1, 1, cmd_setnx, MOP_PUT},
    {"mget", -2, {"readonly", "fast"}, 1, -1, 1, cmd_mget, MOP_GET},
    {"mset", -3, {"write", "denyoom"}, 1, -1, 2, cmd_mset, MOP_PUT},
    {"exists", -2, {"readonly", "fast"}, 1, -1, 1, cmd_exists, MOP_EXISTS},
    {"del", -2, {"write"}, 1, -1, 1, cmd_del, MOP_REMOVE},
    {"ping", -1, {"fast"}, 0, 0, 0, cmd_ping, MOP_PING},
    {"echo", 2, {"fast"}, 0, 0, 0, cmd_echo, -1},
    {"info", -1, {"loading", "stale"}, 0, 0, 0, cmd_info, MOP_STAT},
    {"dbsize", 1, {"readonly", "fast"}, 0, 0, 0, cmd_dbsize, MOP_STAT},
    {"flushall", -1, {"write"}, 0, 0, 0, cmd_flushall, MOP_CLEAR},
    {"flushdb", -1, {"write"}, 0, 0, 0, cmd_flushall, MOP_CLEAR},
    {"select", 2, {"loading", "fast"}, 0, 0, 0, cmd_select, -1},
    {"command", -1, {"loading", "stale"}, 0, 0, 0, cmd_command, -1},
    {"client", -2, {"loading", "stale"}, 0, 0, 0, cmd_client, -1},
    {"config", -2, {"admin", "loading", "stale"}, 0, 0, 0, cmd_config, -1},
    {"auth", -2, {"noscript", "loading", "stale"}, 0, 0, 0, cmd_auth, -1},
    {"hello", -1, {"noscript", "loading", "stale"}, 0, 0, 0, cmd_hello, -1},
    {"quit", -1, {"loading", "stale", "fast"}, 0, 0, 0, cmd_quit, -1},
};
#define NCMDS (sizeof(cmds) / sizeof(cmds[0]))

static const struct rcmd *cmd_find(const resp_arg *name) {
    for (size_t i = 0; i < NCMDS; i++)
        if (resp_arg_is(name, cmds[i].name)) return &cmds[i];
    return NULL;
}

/* One entry of a COMMAND reply: name, arity, flags, first key, last key, step. */
static int command_entry(resp_conn *c, const struct rcmd *d) {
    int nf = 0;
    while (nf < 3 && d->flags[nf])
        nf++;
    int rc = resp_out_num(c, '*', 6);
    if (rc == 0) rc = resp_out_bulk_str(c, d->name);
    if (rc == 0) rc = resp_out_num(c, ':', d->arity);
    if (rc == 0) rc = resp_out_num(c, '*', nf);
    for (int i = 0; i < nf && rc == 0; i++)
        rc = resp_out_line(c, '+', d->flags[i]);
    if (rc == 0) rc = resp_out_num(c, ':', d->first);
    if (rc == 0) rc = resp_out_num(c, ':', d->last);
    if (rc == 0) rc = resp_out_num(c, ':', d->step);
    return rc;
}

static int cmd_command(resp_conn *c, const resp_cmd *cmd, int *status) {
    if (cmd->argc == 1) {
        int rc = resp_out_num(c, '*', (int64_t)NCMDS);
        for (size_t i = 0; i < NCMDS && rc == 0; i++)
            rc = command_entry(c, &cmds[i]);
        return rc;
    }
    const resp_arg *sub = &cmd->argv[1];
    if (resp_arg_is(sub, "COUNT")) return resp_out_num(c, ':', (int64_t)NCMDS);
    if (resp_arg_is(sub, "DOCS")) /* no docs: redis-cli falls back on its own help */
        return RESP_OUT_LIT(c, "*0\r\n");
    if (resp_arg_is(sub, "LIST")) {
        int rc = resp_out_num(c, '*', (int64_t)NCMDS);
        for (size_t i = 0; i < NCMDS && rc == 0; i++)
            rc = resp_out_bulk_str(c, cmds[i].name);
        return rc;
    }
    if (resp_arg_is(sub, "INFO")) {
        int rc = resp_out_num(c, '*', cmd->argc - 2);
        for (uint32_t i = 2; i < cmd->argc && rc == 0; i++) {
            const struct rcmd *d = cmd_find(&cmd->argv[i]);
            rc = d ? command_entry(c, d) : c->resp3 ? resp_out_nil(c) : RESP_OUT_LIT(c, "*-1\r\n");
        }
        return rc;
    }
    *status = MST_ERROR;
    return resp_out_err(c,
                        "ERR unknown subcommand '%.*s' (tide answers COMMAND, COMMAND COUNT, "
                        "DOCS, LIST, INFO)",
                        (int)(sub->len > 32 ? 32 : sub->len), sub->p);
}

/* An argument as it may appear in an error message: printable, at most 64 bytes. */
static void arg_show(const resp_arg *a, char *buf, size_t cap) {
    size_t n = 0;
    for (size_t i = 0; i < a->len && n + 5 < cap && i < 64; i++) {
        uint8_t ch = a->p[i];
        if (ch >= 0x20 && ch < 0x7f && ch != '\'')
            buf[n++] = (char)ch;
        else
            n += (size_t)snprintf(buf + n, cap - n, "\\x%02x", ch);
    }
    buf[n] = '\0';
}

int resp_dispatch(resp_conn *c, const resp_cmd *cmd) {
    uint64_t t0 = now_ns();
    const struct rcmd *d = cmd_find(&cmd->argv[0]);
    char shown[300];
    if (!d) {
        arg_show(&cmd->argv[0], shown, sizeof(shown));
        char args[200] = "";
        size_t n = 0;
        for (uint32_t i = 1; i < cmd->argc && i < 4 && n < 150; i++) {
            char a[300];
            arg_show(&cmd->argv[i], a, 40);
            n += (size_t)snprintf(args + n, sizeof(args) - n, "'%s' ", a);
        }
        return resp_out_err(c, "ERR unknown command '%s', with args beginning with: %s", shown,
                            args);
    }
    if (!c->io.authed && d->fn != cmd_auth && d->fn != cmd_quit && d->fn != cmd_hello) {
        atomic_fetch_add(&c->srv->m.auth_failures, 1);
        return resp_out_err(c, "NOAUTH Authentication required.");
    }
    if ((d->arity > 0 && cmd->argc != (uint32_t)d->arity) ||
        (d->arity < 0 && cmd->argc < (uint32_t)-d->arity))
        return resp_out_err(c, "ERR wrong number of arguments for '%s' command", d->name);
    int status = MST_OK;
    int rc = d->fn(c, cmd, &status);
    if (d->mop >= 0) {
        uint64_t keys = d->first ? cmd->argc - 1 : 0;
        if (d->fn == cmd_mset || d->fn == cmd_set || d->fn == cmd_setnx) keys = (cmd->argc - 1) / 2;
        metrics_op_done(&c->srv->m, d->mop, rc ? MST_ERROR : status, keys, now_ns() - t0);
    }
    return rc;
}
