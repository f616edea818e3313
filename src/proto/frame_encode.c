/*
 * frame_encode.c — frames to bytes: a header and a key section per call, written into the
 * caller's buffer. Value bytes are never copied here; the caller sends them from its own
 * memory after the bytes written.
 *
 * Every encoder first checks its arguments and computes the exact size, so that a buffer
 * that is too small is left untouched and the caller learns the size in one call. What an
 * encoder writes is always something frame_decode accepts (given large enough limits).
 */
#include "frame.h"

#include <errno.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>
#include <xxh_x86dispatch.h>

#include "common/checksum.h"

static int check_key(const tide_key *k) {
    if (k->len == 0) return TIDE_EKEYEMPTY;
    if (k->len > TIDE_KEY_MAX) return TIDE_EKEYLONG;
    return 0;
}

static int check_keys(const tide_key *keys, size_t n) {
    if (n > TIDE_BATCH_MAX) return TIDE_ELIMIT;
    if (n && !keys) return -EINVAL;
    for (size_t i = 0; i < n; i++) {
        int rc = check_key(&keys[i]);
        if (rc) return rc;
    }
    return 0;
}

/* Report the size and say whether buf has room for it. */
static int room(const void *buf, size_t cap, size_t *len, size_t need) {
    *len = need;
    return buf && cap >= need ? 0 : TIDE_EBUFSMALL;
}

static uint8_t *put_header(void *buf, unsigned op, uint64_t req_id, size_t count, int32_t status,
                           size_t keys_len, uint64_t data_len) {
    uint8_t *p = buf;
    le_wr32(p, FRAME_MAGIC);
    p[4] = FRAME_VERSION;
    p[5] = (uint8_t)op;
    le_wr16(p + 6, 0);
    le_wr64(p + 8, req_id);
    le_wr32(p + 16, (uint32_t)count);
    le_wr32(p + 20, (uint32_t)status);
    le_wr32(p + 24, (uint32_t)keys_len);
    le_wr32(p + 28, 0);
    le_wr64(p + 32, keys_len + data_len);
    return p + FRAME_HDR_SIZE;
}

static uint8_t *put_key(uint8_t *p, const tide_key *k) {
    le_wr16(p, (uint16_t)k->len);
    memcpy(p + 2, k->data, k->len);
    return p + 2 + k->len;
}

static size_t keys_bytes(const tide_key *keys, size_t n, size_t extra) {
    size_t t = 0;
    for (size_t i = 0; i < n; i++)
        t += 2 + keys[i].len + extra;
    return t;
}

int frame_encode_hello(void *buf, size_t cap, size_t *len, uint64_t req_id,
                       const frame_hello *hello) {
    if (hello->min_version == 0 || hello->min_version > hello->max_version ||
        hello->token_len > FRAME_TOKEN_MAX)
        return TIDE_EPROTO;
    if (hello->token_len && !hello->token) return -EINVAL;
    size_t keysec = FRAME_HELLO_KEYS + (size_t)hello->token_len;
    int rc = room(buf, cap, len, FRAME_HDR_SIZE + keysec);
    if (rc) return rc;
    uint8_t *p = put_header(buf, FRAME_OP_HELLO, req_id, 0, 0, keysec, 0);
    le_wr16(p, hello->min_version);
    le_wr16(p + 2, hello->max_version);
    le_wr32(p + 4, 0);
    le_wr64(p + 8, hello->features);
    le_wr16(p + 16, hello->token_len);
    if (hello->token_len) memcpy(p + FRAME_HELLO_KEYS, hello->token, hello->token_len);
    return 0;
}

int frame_encode_hello_reply(void *buf, size_t cap, size_t *len, uint64_t req_id,
                             const frame_hello_reply *r) {
    if (r->version == 0 || !(r->features & FRAME_FEATURE_UCX) != !r->ucx_port) return TIDE_EPROTO;
    int rc = room(buf, cap, len, FRAME_HDR_SIZE + FRAME_HELLO_REPLY_KEYS);
    if (rc) return rc;
    uint8_t *p =
        put_header(buf, FRAME_OP_HELLO | FRAME_OP_REPLY, req_id, 0, 0, FRAME_HELLO_REPLY_KEYS, 0);
    le_wr16(p, r->version);
    le_wr16(p + 2, r->ucx_port);
    le_wr32(p + 4, r->max_keys);
    le_wr64(p + 8, r->features);
    le_wr64(p + 16, r->max_value);
    le_wr64(p + 24, r->max_frame);
    return 0;
}

/* xxh3-64 of a value given as a scatter list, without copying it. */
static uint64_t iov_sum(const tide_iov *iov, size_t cnt) {
    if (cnt == 1) return checksum_buf(iov[0].base, iov[0].len);
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    for (size_t i = 0; i < cnt; i++)
        XXH3_64bits_update_dispatch(&st, iov[i].base, iov[i].len);
    return XXH3_64bits_digest(&st);
}

int frame_encode_put(void *buf, size_t cap, size_t *len, uint64_t req_id, const tide_key *keys,
                     size_t n, const tide_iov *iov, const size_t *iovcnt, const uint64_t *sums,
                     uint64_t *data_len) {
    int rc = check_keys(keys, n);
    if (rc) return rc;
    if (n && !iov) return -EINVAL;
    uint64_t data = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        size_t cnt = iovcnt ? iovcnt[i] : 1;
        size_t vlen = iov_total(iov + at, cnt);
        if (vlen == 0) return TIDE_EVALEMPTY;
        data += vlen;
        at += cnt;
    }
    size_t keysec = keys_bytes(keys, n, 16);
    if (data_len) *data_len = data;
    rc = room(buf, cap, len, FRAME_HDR_SIZE + keysec);
    if (rc) return rc;
    uint8_t *p = put_header(buf, FRAME_OP_PUT, req_id, n, 0, keysec, data);
    at = 0;
    for (size_t i = 0; i < n; i++) {
        size_t cnt = iovcnt ? iovcnt[i] : 1;
        p = put_key(p, &keys[i]);
        le_wr64(p, iov_total(iov + at, cnt));
        le_wr64(p + 8, sums ? sums[i] : iov_sum(iov + at, cnt));
        p += 16;
        at += cnt;
    }
    return 0;
}

/* GET, PIN and RESERVE: each key followed by a u64 (a cap, or a value length); `dflt` is
 * that u64 when `nums` is NULL. */
static int encode_keys_u64(void *buf, size_t cap, size_t *len, unsigned op, uint64_t req_id,
                           const tide_key *keys, const uint64_t *nums, uint64_t dflt, size_t n) {
    int rc = check_keys(keys, n);
    if (rc) return rc;
    size_t keysec = keys_bytes(keys, n, 8);
    rc = room(buf, cap, len, FRAME_HDR_SIZE + keysec);
    if (rc) return rc;
    uint8_t *p = put_header(buf, op, req_id, n, 0, keysec, 0);
    for (size_t i = 0; i < n; i++) {
        p = put_key(p, &keys[i]);
        le_wr64(p, nums ? nums[i] : dflt);
        p += 8;
    }
    return 0;
}

int frame_encode_get(void *buf, size_t cap, size_t *len, uint64_t req_id, const tide_key *keys,
                     const uint64_t *caps, size_t n) {
    return encode_keys_u64(buf, cap, len, FRAME_OP_GET, req_id, keys, caps, UINT64_MAX, n);
}

int frame_encode_pin(void *buf, size_t cap, size_t *len, uint64_t req_id, const tide_key *keys,
                     const uint64_t *caps, size_t n) {
    return encode_keys_u64(buf, cap, len, FRAME_OP_PIN, req_id, keys, caps, UINT64_MAX, n);
}

int frame_encode_reserve(void *buf, size_t cap, size_t *len, uint64_t req_id, const tide_key *keys,
                         const uint64_t *vlens, size_t n) {
    if (n && !vlens) return -EINVAL;
    for (size_t i = 0; i < n; i++)
        if (vlens[i] == 0) return TIDE_EVALEMPTY;
    return encode_keys_u64(buf, cap, len, FRAME_OP_RESERVE, req_id, keys, vlens, 0, n);
}

int frame_encode_commit(void *buf, size_t cap, size_t *len, uint64_t req_id, const uint64_t *ids,
                        const uint64_t *sums, size_t n) {
    if (n > TIDE_BATCH_MAX) return TIDE_ELIMIT;
    if (n && (!ids || !sums)) return -EINVAL;
    for (size_t i = 0; i < n; i++)
        if (ids[i] == 0) return TIDE_EPROTO;
    int rc = room(buf, cap, len, FRAME_HDR_SIZE + 16 * n);
    if (rc) return rc;
    uint8_t *p = put_header(buf, FRAME_OP_COMMIT, req_id, n, 0, 16 * n, 0);
    for (size_t i = 0; i < n; i++, p += 16) {
        le_wr64(p, ids[i]);
        le_wr64(p + 8, sums[i]);
    }
    return 0;
}

int frame_encode_release(void *buf, size_t cap, size_t *len, uint64_t req_id, const uint64_t *ids,
                         const int32_t *outcomes, size_t n) {
    if (n > TIDE_BATCH_MAX) return TIDE_ELIMIT;
    if (n && !ids) return -EINVAL;
    for (size_t i = 0; i < n; i++) {
        int32_t o = outcomes ? outcomes[i] : 0;
        if (ids[i] == 0 || (o != 0 && o != TIDE_ECHECKSUM)) return TIDE_EPROTO;
    }
    int rc = room(buf, cap, len, FRAME_HDR_SIZE + 12 * n);
    if (rc) return rc;
    uint8_t *p = put_header(buf, FRAME_OP_RELEASE, req_id, n, 0, 12 * n, 0);
    for (size_t i = 0; i < n; i++, p += 12) {
        le_wr64(p, ids[i]);
        le_wr32(p + 8, (uint32_t)(outcomes ? outcomes[i] : 0));
    }
    return 0;
}

int frame_encode_reserve_reply(void *buf, size_t cap, size_t *len, uint64_t req_id,
                               const int32_t *status, const uint64_t *ids, const uint64_t *offsets,
                               size_t n) {
    if (n > TIDE_BATCH_MAX) return TIDE_ELIMIT;
    for (size_t i = 0; i < n; i++)
        if (status[i] > 0) return TIDE_EPROTO;
    int rc = room(buf, cap, len, FRAME_HDR_SIZE + 20 * n);
    if (rc) return rc;
    uint8_t *p = put_header(buf, FRAME_OP_RESERVE | FRAME_OP_REPLY, req_id, n, 0, 20 * n, 0);
    for (size_t i = 0; i < n; i++, p += 20) {
        int held = status[i] == 0 && ids[i] != 0;
        le_wr32(p, (uint32_t)status[i]);
        le_wr64(p + 4, held ? ids[i] : 0);
        le_wr64(p + 12, held ? offsets[i] : 0);
    }
    return 0;
}

int frame_encode_pin_reply(void *buf, size_t cap, size_t *len, uint64_t req_id,
                           const int32_t *status, const uint64_t *ids, const uint64_t *offsets,
                           const uint64_t *vlens, const uint64_t *sums, size_t n) {
    if (n > TIDE_BATCH_MAX) return TIDE_ELIMIT;
    for (size_t i = 0; i < n; i++) {
        if (status[i] > 0) return TIDE_EPROTO;
        if (status[i] == 0 && (ids[i] == 0 || vlens[i] == 0)) return TIDE_EPROTO;
    }
    int rc = room(buf, cap, len, FRAME_HDR_SIZE + 36 * n);
    if (rc) return rc;
    uint8_t *p = put_header(buf, FRAME_OP_PIN | FRAME_OP_REPLY, req_id, n, 0, 36 * n, 0);
    for (size_t i = 0; i < n; i++, p += 36) {
        int32_t st = status[i];
        le_wr32(p, (uint32_t)st);
        le_wr64(p + 4, st == 0 ? ids[i] : 0);
        le_wr64(p + 12, st == 0 ? offsets[i] : 0);
        le_wr64(p + 20, st == 0 || st == TIDE_EBUFSMALL ? vlens[i] : 0);
        le_wr64(p + 28, st == 0 ? sums[i] : 0);
    }
    return 0;
}

int frame_encode_keys(void *buf, size_t cap, size_t *len, unsigned op, uint64_t req_id,
                      const tide_key *keys, size_t n) {
    if (op != FRAME_OP_EXISTS && op != FRAME_OP_REMOVE && op != FRAME_OP_MATCH_PREFIX)
        return -EINVAL;
    int rc = check_keys(keys, n);
    if (rc) return rc;
    size_t keysec = keys_bytes(keys, n, 0);
    rc = room(buf, cap, len, FRAME_HDR_SIZE + keysec);
    if (rc) return rc;
    uint8_t *p = put_header(buf, op, req_id, n, 0, keysec, 0);
    for (size_t i = 0; i < n; i++)
        p = put_key(p, &keys[i]);
    return 0;
}

int frame_encode_replica(void *buf, size_t cap, size_t *len, uint64_t req_id, uint32_t flags,
                         uint32_t timeout_ms) {
    if ((flags & ~FRAME_REPLICA_MISSED) || timeout_ms == 0) return TIDE_EPROTO;
    int rc = room(buf, cap, len, FRAME_HDR_SIZE + FRAME_REPLICA_KEYS);
    if (rc) return rc;
    uint8_t *p = put_header(buf, FRAME_OP_REPLICA, req_id, 0, 0, FRAME_REPLICA_KEYS, 0);
    le_wr32(p, flags);
    le_wr32(p + 4, timeout_ms);
    le_wr64(p + 8, 0);
    return 0;
}

int frame_encode_replica_hint(void *buf, size_t cap, size_t *len, uint64_t req_id, uint32_t flags,
                              uint32_t timeout_ms, uint64_t member, uint64_t seq) {
    if ((flags != FRAME_REPLICA_HINT && flags != FRAME_REPLICA_ASK &&
         flags != FRAME_REPLICA_TOLD) ||
        timeout_ms == 0 || (flags != FRAME_REPLICA_TOLD && seq != 0))
        return TIDE_EPROTO;
    int rc = room(buf, cap, len, FRAME_HDR_SIZE + FRAME_REPLICA_HINT_META);
    if (rc) return rc;
    uint8_t *p = put_header(buf, FRAME_OP_REPLICA, req_id, 0, 0, FRAME_REPLICA_HINT_META, 0);
    le_wr32(p, flags);
    le_wr32(p + 4, timeout_ms);
    le_wr64(p + 8, member);
    le_wr64(p + 16, seq);
    return 0;
}

int frame_encode_replica_reply(void *buf, size_t cap, size_t *len, uint64_t req_id, uint64_t fences,
                               uint64_t generation) {
    int rc = room(buf, cap, len, FRAME_HDR_SIZE + FRAME_REPLICA_KEYS);
    if (rc) return rc;
    uint8_t *p =
        put_header(buf, FRAME_OP_REPLICA | FRAME_OP_REPLY, req_id, 0, 0, FRAME_REPLICA_KEYS, 0);
    le_wr64(p, fences);
    le_wr64(p + 8, generation);
    return 0;
}

int frame_encode_empty(void *buf, size_t cap, size_t *len, unsigned op, uint64_t req_id) {
    switch (op) {
    case FRAME_OP_STAT:
    case FRAME_OP_PING:
    case FRAME_OP_CLEAR:
    case FRAME_OP_PING | FRAME_OP_REPLY:
    case FRAME_OP_CLEAR | FRAME_OP_REPLY:
        break;
    default:
        return -EINVAL;
    }
    int rc = room(buf, cap, len, FRAME_HDR_SIZE);
    if (rc) return rc;
    put_header(buf, op, req_id, 0, 0, 0, 0);
    return 0;
}

int frame_encode_status_reply(void *buf, size_t cap, size_t *len, unsigned op, uint64_t req_id,
                              const int32_t *status, size_t n) {
    op &= ~(unsigned)FRAME_OP_REPLY;
    if (op != FRAME_OP_PUT && op != FRAME_OP_REMOVE && op != FRAME_OP_COMMIT &&
        op != FRAME_OP_RELEASE)
        return -EINVAL;
    if (n > TIDE_BATCH_MAX) return TIDE_ELIMIT;
    for (size_t i = 0; i < n; i++)
        if (status[i] > 0) return TIDE_EPROTO;
    int rc = room(buf, cap, len, FRAME_HDR_SIZE + 4 * n);
    if (rc) return rc;
    uint8_t *p = put_header(buf, op | FRAME_OP_REPLY, req_id, n, 0, 4 * n, 0);
    for (size_t i = 0; i < n; i++)
        le_wr32(p + 4 * i, (uint32_t)status[i]);
    return 0;
}

int frame_encode_get_reply(void *buf, size_t cap, size_t *len, uint64_t req_id,
                           const int32_t *status, const uint64_t *vlens, const uint64_t *sums,
                           size_t n, uint64_t *data_len) {
    if (n > TIDE_BATCH_MAX) return TIDE_ELIMIT;
    uint64_t data = 0;
    for (size_t i = 0; i < n; i++) {
        if (status[i] > 0) return TIDE_EPROTO;
        if (status[i] == 0 && vlens[i] == 0) return TIDE_EVALEMPTY;
        if (status[i] == 0) data += vlens[i];
    }
    size_t keysec = 20 * n;
    if (data_len) *data_len = data;
    int rc = room(buf, cap, len, FRAME_HDR_SIZE + keysec);
    if (rc) return rc;
    uint8_t *p = put_header(buf, FRAME_OP_GET | FRAME_OP_REPLY, req_id, n, 0, keysec, data);
    for (size_t i = 0; i < n; i++, p += 20) {
        int32_t st = status[i];
        le_wr32(p, (uint32_t)st);
        le_wr64(p + 4, st == 0 || st == TIDE_EBUFSMALL ? vlens[i] : 0);
        le_wr64(p + 12, st == 0 ? sums[i] : 0);
    }
    return 0;
}

int frame_encode_exists_reply(void *buf, size_t cap, size_t *len, uint64_t req_id,
                              const uint8_t *present, size_t n) {
    if (n > TIDE_BATCH_MAX) return TIDE_ELIMIT;
    int rc = room(buf, cap, len, FRAME_HDR_SIZE + n);
    if (rc) return rc;
    uint8_t *p = put_header(buf, FRAME_OP_EXISTS | FRAME_OP_REPLY, req_id, n, 0, n, 0);
    for (size_t i = 0; i < n; i++)
        p[i] = present[i] ? 1 : 0;
    return 0;
}

int frame_encode_match_reply(void *buf, size_t cap, size_t *len, uint64_t req_id,
                             uint32_t matched) {
    int rc = room(buf, cap, len, FRAME_HDR_SIZE + 4);
    if (rc) return rc;
    uint8_t *p = put_header(buf, FRAME_OP_MATCH_PREFIX | FRAME_OP_REPLY, req_id, 0, 0, 4, 0);
    le_wr32(p, matched);
    return 0;
}

static int stat_name_ok(const char *s, size_t *nl) {
    size_t l = strnlen(s, FRAME_STAT_NAME_MAX + 1);
    if (l < 1 || l > FRAME_STAT_NAME_MAX) return 0;
    for (size_t i = 0; i < l; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.'))
            return 0;
    }
    *nl = l;
    return 1;
}

int frame_encode_stat_reply(void *buf, size_t cap, size_t *len, uint64_t req_id,
                            const char *const *names, const uint64_t *values, size_t n) {
    if (n > TIDE_BATCH_MAX) return TIDE_ELIMIT;
    size_t keysec = 0, nl;
    for (size_t i = 0; i < n; i++) {
        if (!stat_name_ok(names[i], &nl)) return TIDE_EPROTO;
        keysec += 1 + nl + 8;
    }
    int rc = room(buf, cap, len, FRAME_HDR_SIZE + keysec);
    if (rc) return rc;
    uint8_t *p = put_header(buf, FRAME_OP_STAT | FRAME_OP_REPLY, req_id, n, 0, keysec, 0);
    for (size_t i = 0; i < n; i++) {
        stat_name_ok(names[i], &nl);
        *p = (uint8_t)nl;
        memcpy(p + 1, names[i], nl);
        le_wr64(p + 1 + nl, values[i]);
        p += 1 + nl + 8;
    }
    return 0;
}

int frame_encode_error(void *buf, size_t cap, size_t *len, unsigned op, uint64_t req_id,
                       int32_t status, const char *msg, size_t msglen) {
    if (status >= 0) return TIDE_EPROTO;
    if (!msg) msglen = 0;
    if (msglen > FRAME_ERRMSG_MAX) msglen = FRAME_ERRMSG_MAX;
    unsigned rop = op | FRAME_OP_REPLY;
    if (op > 0xff || !frame_op_valid(rop)) rop = FRAME_OP_ERROR;
    int rc = room(buf, cap, len, FRAME_HDR_SIZE + msglen);
    if (rc) return rc;
    uint8_t *p = put_header(buf, rop, req_id, 0, status, msglen, 0);
    if (msglen) memcpy(p, msg, msglen);
    return 0;
}
