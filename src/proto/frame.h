/*
 * frame.h — tide's native wire protocol: frame layout, limits, decoder and encoders.
 *
 * The codec is pure: it turns bytes into messages and messages into bytes, and never does
 * I/O, allocates or prints. The server (tided) and the TCP client backend share it.
 * docs/PROTOCOL.md describes the same format for people; this comment is the reference.
 *
 * ---------------------------------------------------------------------------------------
 * Frame = header (40 bytes) + key section (keys_len bytes) + value bytes (the rest).
 * Every integer is little-endian. Offsets are in bytes.
 *
 *   off size field
 *    0   4   magic     0x45444954 (the bytes "TIDE")
 *    4   1   version   1 (HELLO and its reply always carry 1; see HELLO below)
 *    5   1   opcode    a request (0x01..0x0f), its reply (request | 0x80), or ERROR (0xff)
 *    6   2   flags     0; no flag is defined in version 1 and unknown bits are an error
 *    8   8   req_id    chosen by the client, echoed by the reply
 *   16   4   count     number of per-key entries in the key section
 *   20   4   status    requests: 0. Replies: 0, or a negative tide code when the request
 *                      failed as a whole (see "error replies")
 *   24   4   keys_len  length of the key section
 *   28   4   reserved  0
 *   32   8   body_len  bytes after the header: keys_len + the value bytes
 *
 * The value bytes (body_len - keys_len of them) are the values of the frame laid end to
 * end in entry order, with nothing between them. Only a PUT request and a GET reply carry
 * value bytes; for every other opcode body_len == keys_len.
 *
 * The key section is parsed by the decoder; the value bytes never are, so a receiver can
 * read the header and the key section first (frame_decode_head), learn every value's length
 * from it, and then read the value bytes straight into their destination memory.
 *
 * Key sections. A "key" below is  u16 klen, klen bytes  with 1 <= klen <= TIDE_KEY_MAX.
 *
 *   HELLO        count 0:  u16 min_version, u16 max_version, u32 reserved (0),
 *                          u64 features, u16 token_len, token_len bytes of auth token
 *                          (token_len <= FRAME_TOKEN_MAX; 0 = no token)
 *   HELLO reply  count 0:  u16 version (chosen), u16 ucx_port (0 unless features has
 *                          FRAME_FEATURE_UCX, then tided's UCX listener port), u32 max_keys,
 *                          u64 features (the offered bits the server accepts),
 *                          u64 max_value, u64 max_frame (the server's limits)
 *   PUT          count n:  n x { key, u64 vlen (>= 1), u64 xxh3-64 of the value };
 *                          value bytes: the n values, sum(vlen) bytes
 *   PUT reply    count n:  n x { i32 status }  (0 = stored or already present)
 *   GET          count n:  n x { key, u64 cap }  (the room the client has for the value;
 *                          UINT64_MAX = no bound)
 *   GET reply    count n:  n x { i32 status, u64 vlen, u64 xxh3-64 };
 *                          status 0: vlen >= 1 value bytes follow, in entry order;
 *                          status TIDE_EBUFSMALL: vlen = the size needed, sum 0, no bytes;
 *                          other status (TIDE_ENOTFOUND, ...): vlen 0, sum 0, no bytes
 *   EXISTS       count n:  n x { key };  reply: n x { u8 present (0 or 1) }
 *   REMOVE       count n:  n x { key };  reply: n x { i32 status }
 *   MATCH_PREFIX count n:  n x { key };  reply count 0: u32 matched (leading keys present)
 *   STAT         count 0:  empty;        reply count n: n x { u8 name_len (1..64),
 *                          name ([A-Za-z0-9_.]), u64 value }
 *   PING, CLEAR  count 0:  empty;        reply count 0: empty
 *   REPLICA      count 0:  u32 flags (FRAME_REPLICA_MISSED or 0), u32 timeout_ms (>= 1),
 *                          u64 reserved (0). Sent by cluster clients (docs/CLUSTER.md,
 *                          src/server/replica.c) on each new connection, and with
 *                          MISSED before anything else once they skipped this node.
 *   REPLICA reply count 0: u64 fences (times this node dropped its contents because it
 *                          may have missed writes), u64 generation (bumped by each fence)
 *   REPLICA hint  count 0:  u32 flags (exactly one of FRAME_REPLICA_HINT, _ASK, _TOLD),
 *                          u32 timeout_ms (>= 1), u64 member (the rendezvous seed of the
 *                          member it is about), u64 seq (TOLD only, else 0): 24 bytes. Only
 *                          on a connection granted FRAME_FEATURE_HINTS (docs/CLUSTER.md,
 *                          "Hints"). Reply as above, read as u64 missed (hints this node
 *                          holds for that member), u64 told (those it was told since; bit
 *                          63, FRAME_REPLICA_TOLD_RECENT: the last TOLD is recent).
 *   EVENTS       count 0:  u64 from, u32 max (1..max_keys), u32 reserved (0): the store's
 *                          departure events numbered from `from` on (0: from now on)
 *   EVENTS reply count n:  u64 next, u64 lost, then n x { u64 seq, u8 kind (1..4),
 *                          u16 klen, klen bytes of key } (klen 0 exactly for kind 4,
 *                          TIDE_DEPARTURE_CLEARED; see tide_events_read)
 *
 * Shared-pool requests, served only on a connection whose HELLO was granted
 * FRAME_FEATURE_SHM (a same-host Unix socket; the pool's memfd came with the HELLO reply)
 * or FRAME_FEATURE_UCX (the client moves the bytes by UCX RMA, docs/UCX.md).
 * No value bytes travel: the client copies them itself, into or out of the pool, at the
 * offsets these replies give. An id names a reservation or pin (a lease) of this connection.
 *
 *   RESERVE      count n:  n x { key, u64 vlen (>= 1) }
 *   RESERVE reply count n: n x { i32 status, u64 id, u64 offset }
 *                          status 0, id != 0: write vlen bytes at pool offset, then COMMIT;
 *                          status 0, id 0, offset 0: the key exists already (nothing to do);
 *                          status < 0 (TIDE_ENOSPACE, TIDE_EVALBIG, ...): id 0, offset 0
 *   COMMIT       count n:  n x { u64 id (!= 0), u64 xxh3-64 of the bytes written };
 *                          reply: n x { i32 status }  (TIDE_ENOTFOUND: unknown or expired)
 *   PIN          count n:  n x { key, u64 cap }  (as GET)
 *   PIN reply    count n:  n x { i32 status, u64 id, u64 offset, u64 vlen, u64 xxh3-64 }
 *                          status 0: id != 0, vlen >= 1: read vlen bytes at offset, RELEASE;
 *                          status TIDE_EBUFSMALL: vlen = the size needed, the rest 0 (no pin);
 *                          other status: every field 0
 *   RELEASE      count n:  n x { u64 id (!= 0), i32 outcome }: end a pin (outcome 0, or
 *                          TIDE_ECHECKSUM: the bytes read failed their checksum, so the
 *                          object is dropped and counted) or abort a reservation (outcome 0);
 *                          reply: n x { i32 status }
 *
 * Every request with keys may have zero of them. Per-key statuses are 0 or negative.
 *
 * Error replies. A reply whose header status is not 0 reports that the whole request
 * failed: count 0, no value bytes, and a key section of 0..FRAME_ERRMSG_MAX bytes holding
 * a message for people (not NUL-terminated). Its opcode is the request's | 0x80, or ERROR
 * (0xff, always with a nonzero status) when the request's opcode could not be read.
 *
 * HELLO. The header version of HELLO and its reply is always 1, so that any server can read
 * it; the body offers a version range and feature bits, and the reply picks one version
 * and the accepted features (unknown feature bits are ignored, never echoed). A wrong token
 * is answered by an error reply with TIDE_EAUTH.
 *
 * Canonical form: everything the decoder accepts re-encodes to the same bytes (reserved
 * fields and flags are 0, statuses of misses carry vlen 0 and sum 0, and so on); the fuzz
 * target checks this.
 * ---------------------------------------------------------------------------------------
 *
 * Limits (frame_limits) are checked as early as the bytes allow: the header alone is
 * checked for magic, version, opcode, count against max_keys, body_len against max_frame,
 * and keys_len / value bytes against what count entries can possibly need, before the
 * caller waits for (or allocates room for) a body. Key and value lengths are checked when
 * the key section is parsed, before any value byte is read.
 */
#ifndef TIDE_FRAME_H
#define TIDE_FRAME_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#include "common/endian.h"
#include "tide.h"

#define FRAME_MAGIC 0x45444954u /* "TIDE" on the wire */
#define FRAME_HDR_SIZE 40
#define FRAME_VERSION 1        /* the version this code speaks */
#define FRAME_TOKEN_MAX 256    /* longest HELLO auth token */
#define FRAME_ERRMSG_MAX 1024  /* longest message in an error reply */
#define FRAME_STAT_NAME_MAX 64 /* longest figure name in a STAT reply */
#define FRAME_HELLO_KEYS 18    /* HELLO key section without the token */
#define FRAME_HELLO_REPLY_KEYS 32
#define FRAME_REPLICA_KEYS 16 /* REPLICA request and reply key sections */
/* REPLICA flag: the client skipped this node (a call failed or timed out) and may have
 * written to other replicas what this node did not see. */
#define FRAME_REPLICA_MISSED 1u
/* REPLICA hint operations (24-byte key section, FRAME_FEATURE_HINTS): a write this node
 * took skipped `member` (HINT); how many such hints it holds and how many were since told to
 * the member (ASK); the member dropped its contents after hint number `seq` (TOLD). */
#define FRAME_REPLICA_HINT 2u
#define FRAME_REPLICA_ASK 4u
#define FRAME_REPLICA_TOLD 8u
#define FRAME_REPLICA_HINT_META 24
/* In a hint reply's `told`: the last TOLD came within the longest timeout a cluster client
 * announced, so a read begun before that fence may still be answered (docs/CLUSTER.md). */
#define FRAME_REPLICA_TOLD_RECENT (1ull << 63)

/* HELLO feature bits. */
/* Send the pool's memfd with the reply and serve RESERVE, COMMIT, PIN, RELEASE. */
#define FRAME_FEATURE_SHM (1ull << 0)
/* Serve REPLICA (a cluster client's; an older tided never echoes the bit, and is then sent
 * none). */
#define FRAME_FEATURE_REPLICA (1ull << 1)
/* UCX data path (docs/UCX.md): the reply names tided's UCX port (ucx_port) and the
 * connection serves RESERVE, COMMIT, PIN, RELEASE; the values move by UCX RMA. Granted only
 * by a tided started with --ucx-port whose UCX came up. */
#define FRAME_FEATURE_UCX (1ull << 2)
/* Hold hints for cluster members that missed writes (REPLICA HINT, ASK, TOLD); offered with
 * FRAME_FEATURE_REPLICA, granted by a tided that knows them. */
#define FRAME_FEATURE_HINTS (1ull << 3)

enum frame_op {
    FRAME_OP_HELLO = 0x01,
    FRAME_OP_PUT = 0x02,
    FRAME_OP_GET = 0x03,
    FRAME_OP_EXISTS = 0x04,
    FRAME_OP_REMOVE = 0x05,
    FRAME_OP_MATCH_PREFIX = 0x06,
    FRAME_OP_STAT = 0x07,
    FRAME_OP_PING = 0x08,
    FRAME_OP_CLEAR = 0x09,
    FRAME_OP_RESERVE = 0x0a,
    FRAME_OP_COMMIT = 0x0b,
    FRAME_OP_PIN = 0x0c,
    FRAME_OP_RELEASE = 0x0d,
    FRAME_OP_REPLICA = 0x0e,
    /* the store's departure feed (tide_events_read) */
    FRAME_OP_EVENTS = 0x0f,
    FRAME_OP_REPLY = 0x80, /* bit set on every reply: FRAME_OP_GET | FRAME_OP_REPLY */
    FRAME_OP_ERROR = 0xff, /* reply to a request whose opcode was not understood */
};

/* "PUT", "GET_REPLY", "ERROR"; "?" for a value that is no opcode. */
const char *frame_op_name(unsigned op);
/* 1 if op is a request or reply opcode of this version. */
int frame_op_valid(unsigned op);

/* What a receiver accepts. Each field must be at least 1; see frame_limits_check(). */
typedef struct frame_limits {
    uint32_t max_keys;  /* entries per frame, <= TIDE_BATCH_MAX (default 4096) */
    uint64_t max_value; /* bytes of one value (default 64 MiB) */
    uint64_t max_frame; /* header + body (default 1 GiB; at least FRAME_HDR_SIZE) */
} frame_limits;

#define FRAME_DEFAULT_MAX_KEYS 4096u
#define FRAME_DEFAULT_MAX_VALUE (64ull << 20)
#define FRAME_DEFAULT_MAX_FRAME (1ull << 30)
#define FRAME_MAX_FRAME_CAP (1ull << 48) /* max_frame above this is refused */

void frame_limits_default(frame_limits *lim);
/* 0, or TIDE_ECONFIG when a field is out of range (message in errstr, if not NULL). */
int frame_limits_check(const frame_limits *lim, char *errstr, size_t errlen);

/* The fixed header, decoded. */
typedef struct frame_header {
    uint8_t version;
    uint8_t opcode;
    uint16_t flags;
    uint64_t req_id;
    uint32_t count;
    int32_t status;
    uint32_t keys_len;
    uint64_t body_len;
} frame_header;

typedef struct frame_hello {
    uint16_t min_version, max_version;
    uint64_t features;
    const uint8_t *token; /* token_len bytes; NULL when token_len is 0 */
    uint16_t token_len;
} frame_hello;

/* REPLICA request (flags, timeout_ms) and reply (fences, generation). */
typedef struct frame_replica {
    uint32_t flags, timeout_ms;
    uint64_t fences, generation;
    uint64_t member, seq; /* hint operations: the member's seed, TOLD's hint number */
} frame_replica;

typedef struct frame_hello_reply {
    uint16_t version;
    uint32_t max_keys;
    uint64_t features;
    uint64_t max_value;
    uint64_t max_frame;
    uint16_t ucx_port; /* with FRAME_FEATURE_UCX: tided's UCX listener; else 0 */
} frame_hello_reply;

/*
 * A decoded frame. Every pointer points into the buffer given to the decoder and lives as
 * long as those bytes do. Per-key entries are read with frame_iter_*.
 */
typedef struct frame_msg {
    frame_header h;
    const uint8_t *keysec;              /* the key section, h.keys_len bytes */
    const uint8_t *data;                /* the value bytes; NULL after frame_decode_head */
    uint64_t data_len;                  /* h.body_len - h.keys_len */
    frame_hello hello;                  /* HELLO */
    frame_hello_reply hello_reply;      /* HELLO reply */
    uint32_t matched;                   /* MATCH_PREFIX reply */
    frame_replica replica;              /* REPLICA request and reply */
    uint64_t ev_from, ev_next, ev_lost; /* EVENTS request (from) and reply (next, lost) */
    uint32_t ev_max;                    /* EVENTS request */
    const char *errmsg;                 /* error reply: errmsg_len bytes, not NUL-terminated */
    size_t errmsg_len;
} frame_msg;

/* One per-key entry. Only the fields of the frame's opcode are set; the rest are 0. */
typedef struct frame_entry {
    tide_key key;       /* requests with keys; STAT reply: the figure's name */
    uint64_t vlen;      /* PUT, RESERVE, GET and PIN replies: value length (TIDE_EBUFSMALL:
                           the size needed) */
    uint64_t sum;       /* PUT, COMMIT, GET and PIN replies: xxh3-64 of the value */
    uint64_t voff;      /* PUT, GET reply: offset of the value in the value bytes */
    const uint8_t *val; /* the value itself when the value bytes are in the buffer */
    uint64_t cap;       /* GET, PIN: the client's room for the value */
    uint64_t figure;    /* STAT reply: the figure's value */
    uint64_t id;        /* COMMIT, RELEASE, RESERVE and PIN replies: the lease */
    uint64_t offset;    /* RESERVE and PIN replies: pool offset of the value */
    int32_t status;     /* PUT, GET, REMOVE, COMMIT, RELEASE replies; RELEASE: outcome */
    uint8_t present;    /* EXISTS reply */
    uint64_t seq;       /* EVENTS reply: the event's number (key: its key, or empty) */
    uint8_t kind;       /* EVENTS reply: TIDE_DEPARTURE_* */
} frame_entry;

/* Walks the entries of a frame the decoder accepted (never of anything else). */
typedef struct frame_iter {
    const frame_msg *m;
    const uint8_t *p;
    uint32_t i;
    uint64_t voff;
} frame_iter;

void frame_iter_init(frame_iter *it, const frame_msg *m);
/* Fill *e with the next entry and return 1, or return 0 after the last. */
int frame_iter_next(frame_iter *it, frame_entry *e);

/* 0 if val (e->vlen bytes) matches e->sum, else TIDE_ECHECKSUM. */
int frame_value_check(const frame_entry *e, const void *val);

/*
 * The decoder: limits, and the state of the stream it reads. Errors are sticky — once a
 * call fails, the stream's framing is lost and every later call returns the same error
 * until frame_decoder_reset().
 */
typedef struct frame_decoder {
    frame_limits lim;
    size_t need;      /* after a call that returned 0: more bytes needed, at least this many */
    int err;          /* 0, or the code of the error that stopped the stream */
    char errstr[256]; /* the message for err, naming the limit or the field and its value */
} frame_decoder;

/* Start a decoder with `lim` (NULL = defaults). Errors: TIDE_ECONFIG (message in errstr). */
int frame_decoder_init(frame_decoder *d, const frame_limits *lim);
/* Clear a sticky error, keeping the limits. */
void frame_decoder_reset(frame_decoder *d);

/*
 * Decode the frame at the start of buf[0..len), which may hold less than a frame, exactly
 * one, or more.
 *
 *   > 0  a whole frame of that many bytes was decoded into *m (m->data points at its value
 *        bytes); the caller drops that many bytes and calls again for the next frame.
 *   0    buf holds part of a frame; d->need says how many more bytes (at least) to get.
 *        Errors are reported as soon as the bytes that show them are present: the header
 *        is checked as soon as it is complete (and the magic and version before that).
 *        The key section is checked once the whole frame is present; to have it checked
 *        before the value bytes arrive, use frame_decode_head.
 *   < 0  the bytes break the protocol: TIDE_EPROTO (malformed), TIDE_EUNSUPPORTED (a
 *        version this code does not speak), TIDE_ELIMIT (more than max_keys entries, or a
 *        frame larger than max_frame), TIDE_EKEYLONG / TIDE_EKEYEMPTY (a key longer than
 *        TIDE_KEY_MAX or empty), TIDE_EVALBIG (a value over max_value), TIDE_EVALEMPTY (a
 *        PUT of an empty value). d->errstr says which field, its value and the limit.
 */
ssize_t frame_decode(frame_decoder *d, const void *buf, size_t len, frame_msg *m);

/*
 * Decode the header and the key section only: returns FRAME_HDR_SIZE + keys_len when they
 * are present and valid (0 and d->need while they are not; errors as frame_decode). *m is
 * then complete except that m->data is NULL: the m->data_len value bytes that follow are
 * the caller's to read, wherever it wants them; entry i's value is bytes
 * [e.voff, e.voff + e.vlen) of them.
 */
ssize_t frame_decode_head(frame_decoder *d, const void *buf, size_t len, frame_msg *m);

/*
 * Encoders. Each writes a header and a key section into buf[0..cap) and sets *len to the
 * number of bytes (the value bytes are never copied: the caller sends them after buf, e.g.
 * with writev from its own memory). When buf is NULL or cap is too small, nothing is
 * written, *len is the size needed and the call returns TIDE_EBUFSMALL. Other errors:
 * TIDE_EKEYEMPTY / TIDE_EKEYLONG for a bad key, TIDE_EVALEMPTY for an empty value,
 * TIDE_ELIMIT for more than TIDE_BATCH_MAX entries, TIDE_EPROTO for a field the format
 * cannot carry (a positive status, a long token, a bad stat name, ...). 0 on success.
 */

/* HELLO request / reply. */
int frame_encode_hello(void *buf, size_t cap, size_t *len, uint64_t req_id,
                       const frame_hello *hello);
int frame_encode_hello_reply(void *buf, size_t cap, size_t *len, uint64_t req_id,
                             const frame_hello_reply *r);

/*
 * PUT of n keys. Key i's value is the concatenation of iovcnt[i] consecutive entries of
 * iov (one each when iovcnt is NULL), as in tide_put_many(). sums[i] is its xxh3-64, or
 * sums is NULL and the encoder computes them. *data_len (if not NULL) receives the number
 * of value bytes the caller sends after the header and key section.
 */
int frame_encode_put(void *buf, size_t cap, size_t *len, uint64_t req_id, const tide_key *keys,
                     size_t n, const tide_iov *iov, const size_t *iovcnt, const uint64_t *sums,
                     uint64_t *data_len);

/* GET of n keys; caps[i] is the room for value i (caps NULL = no bound for any). */
int frame_encode_get(void *buf, size_t cap, size_t *len, uint64_t req_id, const tide_key *keys,
                     const uint64_t *caps, size_t n);

/* Shared-pool requests (see the layout above). RESERVE: vlens[i] >= 1 for key i. PIN: as
 * GET. COMMIT: ids[i] != 0 and the checksum of what was written. RELEASE: ids[i] != 0 and
 * outcomes[i] 0 or TIDE_ECHECKSUM (outcomes NULL = all 0). */
int frame_encode_reserve(void *buf, size_t cap, size_t *len, uint64_t req_id, const tide_key *keys,
                         const uint64_t *vlens, size_t n);
int frame_encode_pin(void *buf, size_t cap, size_t *len, uint64_t req_id, const tide_key *keys,
                     const uint64_t *caps, size_t n);
int frame_encode_commit(void *buf, size_t cap, size_t *len, uint64_t req_id, const uint64_t *ids,
                        const uint64_t *sums, size_t n);
int frame_encode_release(void *buf, size_t cap, size_t *len, uint64_t req_id, const uint64_t *ids,
                         const int32_t *outcomes, size_t n);

/* RESERVE reply: status[i], and for status 0 ids[i] (0 = the key exists already) and
 * offsets[i]; fields the layout says are 0 are written as 0 whatever the arrays hold. */
int frame_encode_reserve_reply(void *buf, size_t cap, size_t *len, uint64_t req_id,
                               const int32_t *status, const uint64_t *ids, const uint64_t *offsets,
                               size_t n);
/* PIN reply: status[i]; for status 0 ids[i] (!= 0), offsets[i], vlens[i] (>= 1), sums[i];
 * for TIDE_EBUFSMALL vlens[i], the size needed. */
int frame_encode_pin_reply(void *buf, size_t cap, size_t *len, uint64_t req_id,
                           const int32_t *status, const uint64_t *ids, const uint64_t *offsets,
                           const uint64_t *vlens, const uint64_t *sums, size_t n);

/* EXISTS, REMOVE or MATCH_PREFIX of n keys (op says which). */
int frame_encode_keys(void *buf, size_t cap, size_t *len, unsigned op, uint64_t req_id,
                      const tide_key *keys, size_t n);

/* REPLICA request (flags: 0 or FRAME_REPLICA_MISSED; timeout_ms >= 1) and its reply. */
int frame_encode_replica(void *buf, size_t cap, size_t *len, uint64_t req_id, uint32_t flags,
                         uint32_t timeout_ms);
int frame_encode_replica_reply(void *buf, size_t cap, size_t *len, uint64_t req_id, uint64_t fences,
                               uint64_t generation);
/* REPLICA hint operation (flags: exactly one of FRAME_REPLICA_HINT, _ASK, _TOLD) about the
 * member whose rendezvous seed is `member`; seq is TOLD's hint number, 0 otherwise. */
int frame_encode_replica_hint(void *buf, size_t cap, size_t *len, uint64_t req_id, uint32_t flags,
                              uint32_t timeout_ms, uint64_t member, uint64_t seq);

/* A frame with no body: STAT, PING, CLEAR requests; PING and CLEAR replies. */
int frame_encode_empty(void *buf, size_t cap, size_t *len, unsigned op, uint64_t req_id);

/* PUT, REMOVE, COMMIT or RELEASE reply (op is the request's opcode): status[i] for entry i
 * (0 or negative). */
int frame_encode_status_reply(void *buf, size_t cap, size_t *len, unsigned op, uint64_t req_id,
                              const int32_t *status, size_t n);

/*
 * GET reply. For key i: status[i], vlens[i], sums[i] as the layout above says (vlens and
 * sums of entries that carry no value are written as the layout demands whatever the
 * arrays hold, except the size needed for TIDE_EBUFSMALL, which comes from vlens[i]).
 * *data_len (if not NULL) receives the number of value bytes the caller sends after.
 */
int frame_encode_get_reply(void *buf, size_t cap, size_t *len, uint64_t req_id,
                           const int32_t *status, const uint64_t *vlens, const uint64_t *sums,
                           size_t n, uint64_t *data_len);

/* EXISTS reply: present[i] is 0 or 1 (any nonzero is written as 1). */
int frame_encode_exists_reply(void *buf, size_t cap, size_t *len, uint64_t req_id,
                              const uint8_t *present, size_t n);

/* MATCH_PREFIX reply. */
int frame_encode_match_reply(void *buf, size_t cap, size_t *len, uint64_t req_id, uint32_t matched);

/* STAT reply: n figures, names[i] (NUL-terminated, 1..64 chars of [A-Za-z0-9_.]). */
int frame_encode_stat_reply(void *buf, size_t cap, size_t *len, uint64_t req_id,
                            const char *const *names, const uint64_t *values, size_t n);

/*
 * Error reply to a request with opcode op (any byte: an opcode this version does not know
 * gets an ERROR reply). status is negative; msg (msglen bytes, cut to FRAME_ERRMSG_MAX)
 * may be NULL.
 */
int frame_encode_error(void *buf, size_t cap, size_t *len, unsigned op, uint64_t req_id,
                       int32_t status, const char *msg, size_t msglen);

/* EVENTS request; EVENTS reply of n events (kinds 1..4, klen <= TIDE_KEY_MAX, 0 only for
 * TIDE_DEPARTURE_CLEARED: else TIDE_EPROTO). In frame_events.c. */
int frame_encode_events(void *buf, size_t cap, size_t *len, uint64_t req_id, uint64_t from,
                        uint32_t max);
int frame_encode_events_reply(void *buf, size_t cap, size_t *len, uint64_t req_id, uint64_t next,
                              uint64_t lost, const tide_event *ev, size_t n);
#define FRAME_EVENTS_KEYS 16u     /* the request's key section; the reply's head */
#define FRAME_EVENT_ENTRY_MIN 11u /* u64 seq, u8 kind, u16 klen */
#define FRAME_EVENTS_MAX 4096u    /* events a server puts in one reply at most */

#endif
