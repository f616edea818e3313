/*
 * gen_frame_corpus.c — writes the seed corpus for fuzz_frame into a directory
 * (`make fuzz-seeds` runs it into tests/fuzz/corpus/frame/, where the files are committed).
 *
 * Each file is a byte stream as a peer would send it. Its name says how decoding it ends,
 * and the corpus replay test (tests/unit/test_proto_corpus.c) holds it to that:
 *   ok-*            every frame decodes and nothing is left over
 *   need-*          the frames decode until one is cut short (more bytes needed)
 *   err-CODE-*      decoding stops with error CODE (e.g. err-TIDE_EKEYLONG-...)
 * Files of other names need only pass frame_check(): fuzz-* are inputs the fuzzer found
 * that reach code the seeds do not (merged with -merge=1 -use_counters=0), crash-* would be
 * inputs that once crashed, kept as regression inputs.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/frame.h"

static const char *dir;
static uint8_t buf[1 << 20];
static size_t blen;

static size_t len; /* set by each encoder call through ROOM */

/* Append raw bytes. */
static void raw(const void *p, size_t n) {
    if (blen + n > sizeof(buf)) exit(1);
    if (n) memcpy(buf + blen, p, n);
    blen += n;
}

/* Keep the head an encoder call just wrote (`rc` is its return; add() runs after the call,
 * so `len` is the call's), then append `tail` bytes. */
static void add(int rc, const void *tail, size_t tlen) {
    if (rc != 0) {
        fprintf(stderr, "gen_frame_corpus: encoder failed (%d)\n", rc);
        exit(1);
    }
    blen += len;
    raw(tail, tlen);
}

static void emit(const char *name) {
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(buf, 1, blen, f) != blen || fclose(f)) {
        fprintf(stderr, "gen_frame_corpus: cannot write %s: %s\n", path, strerror(errno));
        exit(1);
    }
    blen = 0;
}

#define ROOM (buf + blen), (sizeof(buf) - blen), &len

/* Patch a little-endian field of the frame that starts at `at`. */
static void patch32(size_t at, size_t off, uint32_t v) {
    le_wr32(buf + at + off, v);
}
static void patch64(size_t at, size_t off, uint64_t v) {
    le_wr64(buf + at + off, v);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: gen_frame_corpus DIR\n");
        return 2;
    }
    dir = argv[1];
    uint64_t dl;
    tide_key k3[3] = {{"alpha", 5}, {"b", 1}, {"model@fp:1@tp_rank:0@0123abcd", 29}};
    char v0[] = "value-zero", v1[] = "1", v2[300];
    memset(v2, 'x', sizeof(v2));
    tide_iov iov3[3] = {{v0, 10}, {v1, 1}, {v2, sizeof(v2)}};
    char longkey[TIDE_KEY_MAX];
    memset(longkey, 'k', sizeof(longkey));
    uint8_t binkey[4] = {0, 0xff, '\n', 0x80};

    /* --- valid frames of every opcode --- */
    frame_hello hello = {1, 1, 0x5, (const uint8_t *)"secret-token", 12};
    add(frame_encode_hello(ROOM, 1, &hello), NULL, 0);
    emit("ok-hello-token");
    hello.token = NULL, hello.token_len = 0, hello.max_version = 3;
    add(frame_encode_hello(ROOM, 2, &hello), NULL, 0);
    emit("ok-hello-no-token");
    frame_hello_reply hr = {1, 4096, 0x1, 64ull << 20, 1ull << 30, 0};
    add(frame_encode_hello_reply(ROOM, 1, &hr), NULL, 0);
    emit("ok-hello-reply");

    add(frame_encode_put(ROOM, 7, k3, 3, iov3, NULL, NULL, &dl), NULL, 0);
    raw(v0, 10), raw(v1, 1), raw(v2, sizeof(v2));
    emit("ok-put-3keys");
    add(frame_encode_put(ROOM, 8, NULL, 0, NULL, NULL, NULL, &dl), NULL, 0);
    emit("ok-put-0keys");
    tide_key kl[2] = {{longkey, TIDE_KEY_MAX}, {binkey, 4}};
    size_t cnt[2] = {2, 1};
    tide_iov iovs[3] = {{v0, 4}, {v0 + 4, 6}, {v1, 1}};
    add(frame_encode_put(ROOM, 9, kl, 2, iovs, cnt, NULL, &dl), NULL, 0);
    raw(v0, 10), raw(v1, 1);
    emit("ok-put-longkey-binkey-iov");
    int32_t st3[3] = {0, 0, TIDE_ENOSPACE};
    add(frame_encode_status_reply(ROOM, FRAME_OP_PUT, 7, st3, 3), NULL, 0);
    emit("ok-put-reply");

    uint64_t caps[3] = {UINT64_MAX, 0, 4096};
    add(frame_encode_get(ROOM, 10, k3, caps, 3), NULL, 0);
    emit("ok-get-3keys");
    add(frame_encode_get(ROOM, 11, NULL, NULL, 0), NULL, 0);
    emit("ok-get-0keys");
    int32_t gst[4] = {0, TIDE_ENOTFOUND, TIDE_EBUFSMALL, 0};
    uint64_t gvl[4] = {10, 0, 5000, 1}, gsum[4] = {0x1122334455667788ull, 0, 0, 42};
    add(frame_encode_get_reply(ROOM, 10, gst, gvl, gsum, 4, &dl), NULL, 0);
    raw(v0, 10), raw(v1, 1);
    emit("ok-get-reply-mixed");

    add(frame_encode_keys(ROOM, FRAME_OP_EXISTS, 12, k3, 3), NULL, 0);
    emit("ok-exists");
    uint8_t pres[3] = {1, 0, 1};
    add(frame_encode_exists_reply(ROOM, 12, pres, 3), NULL, 0);
    emit("ok-exists-reply");
    add(frame_encode_keys(ROOM, FRAME_OP_REMOVE, 13, k3, 3), NULL, 0);
    emit("ok-remove");
    int32_t rst[3] = {0, TIDE_ENOTFOUND, 0};
    add(frame_encode_status_reply(ROOM, FRAME_OP_REMOVE, 13, rst, 3), NULL, 0);
    emit("ok-remove-reply");
    add(frame_encode_keys(ROOM, FRAME_OP_MATCH_PREFIX, 14, k3, 3), NULL, 0);
    emit("ok-match-prefix");
    add(frame_encode_match_reply(ROOM, 14, 2), NULL, 0);
    emit("ok-match-prefix-reply");
    add(frame_encode_empty(ROOM, FRAME_OP_STAT, 15), NULL, 0);
    emit("ok-stat");
    const char *names[3] = {"capacity_bytes", "objects", "latency.p99_us"};
    uint64_t vals[3] = {1ull << 30, 12345, 17};
    add(frame_encode_stat_reply(ROOM, 15, names, vals, 3), NULL, 0);
    emit("ok-stat-reply");
    add(frame_encode_events(ROOM, 17, 5, 64), NULL, 0);
    emit("ok-events");
    tide_event evs[2] = {{.seq = 5, .kind = TIDE_DEPARTURE_EVICTED, .klen = 3, .key = "abc"},
                         {.seq = 6, .kind = TIDE_DEPARTURE_CLEARED}};
    add(frame_encode_events_reply(ROOM, 17, 7, 1, evs, 2), NULL, 0);
    emit("ok-events-reply");
    add(frame_encode_events_reply(ROOM, 17, 7, 1, evs, 2), NULL, 0);
    buf[FRAME_HDR_SIZE + 16 + 8] = TIDE_DEPARTURE_CLEARED; /* a clear that names a key */
    emit("err-TIDE_EPROTO-events-reply-clear-with-key");
    add(frame_encode_empty(ROOM, FRAME_OP_PING, 16), NULL, 0);
    emit("ok-ping");
    add(frame_encode_empty(ROOM, FRAME_OP_PING | FRAME_OP_REPLY, 16), NULL, 0);
    emit("ok-ping-reply");
    add(frame_encode_empty(ROOM, FRAME_OP_CLEAR, 17), NULL, 0);
    emit("ok-clear");
    add(frame_encode_empty(ROOM, FRAME_OP_CLEAR | FRAME_OP_REPLY, 17), NULL, 0);
    emit("ok-clear-reply");
    const char *msg = "frame has 5000 entries, limit max_keys=4096";
    add(frame_encode_error(ROOM, FRAME_OP_GET, 18, TIDE_ELIMIT, msg, strlen(msg)), NULL, 0);
    emit("ok-error-reply");
    add(frame_encode_error(ROOM, 0x42, 19, TIDE_EPROTO, "unknown opcode", 14), NULL, 0);
    emit("ok-error-unknown-op");

    /* Shared-pool requests and replies. */
    uint64_t rvl[3] = {10, 1, 1ull << 20};
    add(frame_encode_reserve(ROOM, 30, k3, rvl, 3), NULL, 0);
    emit("ok-reserve-3keys");
    int32_t rrst[3] = {0, 0, TIDE_ENOSPACE};
    uint64_t rids[3] = {7, 0, 0}, roffs[3] = {4096, 0, 0};
    add(frame_encode_reserve_reply(ROOM, 30, rrst, rids, roffs, 3), NULL, 0);
    emit("ok-reserve-reply-mixed");
    uint64_t cids[2] = {7, 1ull << 40}, csums[2] = {0x1122334455667788ull, 0};
    add(frame_encode_commit(ROOM, 31, cids, csums, 2), NULL, 0);
    emit("ok-commit");
    int32_t cst[2] = {0, TIDE_ENOTFOUND};
    add(frame_encode_status_reply(ROOM, FRAME_OP_COMMIT, 31, cst, 2), NULL, 0);
    emit("ok-commit-reply");
    add(frame_encode_pin(ROOM, 32, k3, caps, 3), NULL, 0);
    emit("ok-pin-3keys");
    int32_t pst[3] = {0, TIDE_EBUFSMALL, TIDE_ENOTFOUND};
    uint64_t pids[3] = {9, 0, 0}, poffs[3] = {256, 0, 0}, pvl[3] = {10, 5000, 0};
    uint64_t psum[3] = {42, 0, 0};
    add(frame_encode_pin_reply(ROOM, 32, pst, pids, poffs, pvl, psum, 3), NULL, 0);
    emit("ok-pin-reply-mixed");
    int32_t rout[2] = {0, TIDE_ECHECKSUM};
    add(frame_encode_release(ROOM, 33, cids, rout, 2), NULL, 0);
    emit("ok-release");
    add(frame_encode_status_reply(ROOM, FRAME_OP_RELEASE, 33, cst, 2), NULL, 0);
    emit("ok-release-reply");

    /* A pipeline: several requests back to back. */
    add(frame_encode_empty(ROOM, FRAME_OP_PING, 20), NULL, 0);
    add(frame_encode_put(ROOM, 21, k3, 3, iov3, NULL, NULL, &dl), NULL, 0);
    raw(v0, 10), raw(v1, 1), raw(v2, sizeof(v2));
    add(frame_encode_get(ROOM, 22, k3, NULL, 3), NULL, 0);
    add(frame_encode_keys(ROOM, FRAME_OP_MATCH_PREFIX, 23, k3, 3), NULL, 0);
    emit("ok-pipeline");

    /* --- truncated input --- */
    add(frame_encode_put(ROOM, 7, k3, 3, iov3, NULL, NULL, &dl), NULL, 0);
    raw(v0, 10);
    emit("need-put-values-cut");
    add(frame_encode_keys(ROOM, FRAME_OP_EXISTS, 12, k3, 3), NULL, 0);
    blen = 20;
    emit("need-header-cut");
    add(frame_encode_empty(ROOM, FRAME_OP_PING, 16), NULL, 0);
    add(frame_encode_keys(ROOM, FRAME_OP_EXISTS, 12, k3, 3), NULL, 0);
    blen -= 5;
    emit("need-second-frame-cut");

    /* --- header errors --- */
    size_t at = 0;
    add(frame_encode_empty(ROOM, FRAME_OP_PING, 1), NULL, 0);
    buf[0] = 'X';
    emit("err-TIDE_EPROTO-magic");
    raw("GET / HTTP/1.1\r\n", 16);
    emit("err-TIDE_EPROTO-http");
    add(frame_encode_empty(ROOM, FRAME_OP_PING, 1), NULL, 0);
    buf[4] = 2;
    emit("err-TIDE_EUNSUPPORTED-version");
    add(frame_encode_empty(ROOM, FRAME_OP_PING, 1), NULL, 0);
    buf[5] = 0x3e; /* no opcode (0x0a..0x0d became the shared-pool requests) */
    emit("err-TIDE_EPROTO-opcode");
    add(frame_encode_empty(ROOM, FRAME_OP_PING, 1), NULL, 0);
    buf[6] = 1;
    emit("err-TIDE_EPROTO-flags");
    add(frame_encode_empty(ROOM, FRAME_OP_PING, 1), NULL, 0);
    patch32(at, 28, 1);
    emit("err-TIDE_EPROTO-reserved");
    add(frame_encode_empty(ROOM, FRAME_OP_PING, 1), NULL, 0);
    patch32(at, 20, (uint32_t)TIDE_ENOTFOUND);
    emit("err-TIDE_EPROTO-request-status");
    add(frame_encode_keys(ROOM, FRAME_OP_EXISTS, 1, k3, 1), NULL, 0);
    patch32(at, 16, 4097);
    emit("err-TIDE_ELIMIT-max-keys");
    add(frame_encode_keys(ROOM, FRAME_OP_EXISTS, 1, k3, 1), NULL, 0);
    patch64(at, 32, 1ull << 31);
    emit("err-TIDE_ELIMIT-max-frame");
    add(frame_encode_put(ROOM, 7, k3, 1, iov3, NULL, NULL, &dl), NULL, 0);
    patch64(at, 32, le_rd32(buf + 24) + (64ull << 20) + 1);
    emit("err-TIDE_EVALBIG-header");
    add(frame_encode_empty(ROOM, FRAME_OP_PING, 1), NULL, 0);
    patch32(at, 16, 1);
    emit("err-TIDE_EPROTO-ping-with-keys");
    add(frame_encode_keys(ROOM, FRAME_OP_EXISTS, 1, k3, 3), NULL, 0);
    patch32(at, 24, 2);
    emit("err-TIDE_EPROTO-keysec-too-short-for-count");
    add(frame_encode_keys(ROOM, FRAME_OP_EXISTS, 1, k3, 1), NULL, 0);
    patch32(at, 24, 9);
    emit("err-TIDE_EPROTO-keysec-overruns-body");
    add(frame_encode_keys(ROOM, FRAME_OP_EXISTS, 1, k3, 1), "zz", 2);
    patch64(at, 32, le_rd64(buf + 32) + 2);
    emit("err-TIDE_EPROTO-value-bytes-on-exists");

    /* --- key section errors --- */
    add(frame_encode_keys(ROOM, FRAME_OP_EXISTS, 1, k3, 3), NULL, 0);
    patch32(at, 16, 2);
    emit("err-TIDE_EPROTO-count-too-small");
    add(frame_encode_keys(ROOM, FRAME_OP_EXISTS, 1, k3, 2), NULL, 0);
    patch32(at, 16, 3);
    emit("err-TIDE_EPROTO-count-too-large");
    char k257[TIDE_KEY_MAX + 1];
    memset(k257, 'q', sizeof(k257));
    tide_key kk = {k257, TIDE_KEY_MAX};
    tide_key k2[2] = {kk, {"b", 1}};
    add(frame_encode_keys(ROOM, FRAME_OP_REMOVE, 1, k2, 2), NULL, 0);
    le_wr16(buf + FRAME_HDR_SIZE, TIDE_KEY_MAX + 1); /* the 'q' key now swallows a byte */
    emit("err-TIDE_EKEYLONG-257");
    add(frame_encode_keys(ROOM, FRAME_OP_REMOVE, 1, k3, 2), NULL, 0);
    le_wr16(buf + FRAME_HDR_SIZE, 0);
    emit("err-TIDE_EKEYEMPTY");
    /* Two values, the first over max_value: the header's total is still within 2 x
     * max_value, so only the key section shows it (frame_decode_head fails at once). */
    add(frame_encode_put(ROOM, 7, k3, 2, iov3, NULL, NULL, &dl), v0, 10);
    patch64(at, 32, le_rd32(buf + 24) + (64ull << 20) + 2);
    le_wr64(buf + FRAME_HDR_SIZE + 2 + 5, (64ull << 20) + 1);
    emit("need-put-value-over-max-value");
    add(frame_encode_put(ROOM, 7, k3, 2, iov3, NULL, NULL, &dl), v0, 10);
    raw(v1, 1);
    le_wr64(buf + FRAME_HDR_SIZE + 2 + 5, 9);
    emit("err-TIDE_EPROTO-put-values-short");
    add(frame_encode_put(ROOM, 7, k3, 2, iov3, NULL, NULL, &dl), v0, 10);
    raw(v1, 1);
    le_wr64(buf + FRAME_HDR_SIZE + 2 + 5, 0);
    emit("err-TIDE_EVALEMPTY-put");
    uint8_t junk[3] = {1, 2, 3};
    add(frame_encode_keys(ROOM, FRAME_OP_EXISTS, 1, k3, 1), junk, 3);
    patch32(at, 24, le_rd32(buf + 24) + 3);
    patch64(at, 32, le_rd64(buf + 32) + 3);
    emit("err-TIDE_EPROTO-keysec-left-over");
    add(frame_encode_exists_reply(ROOM, 1, pres, 3), NULL, 0);
    buf[FRAME_HDR_SIZE + 1] = 2;
    emit("err-TIDE_EPROTO-exists-reply-2");
    add(frame_encode_get_reply(ROOM, 10, gst, gvl, gsum, 4, &dl), v0, 10);
    raw(v1, 1);
    le_wr64(buf + FRAME_HDR_SIZE + 20 + 4, 3);
    emit("err-TIDE_EPROTO-get-reply-miss-with-vlen");
    add(frame_encode_stat_reply(ROOM, 15, names, vals, 3), NULL, 0);
    buf[FRAME_HDR_SIZE + 1] = ' ';
    emit("err-TIDE_EPROTO-stat-name");
    add(frame_encode_hello(ROOM, 1, &hello), NULL, 0);
    le_wr16(buf + FRAME_HDR_SIZE, 4); /* min 4 > max 3 */
    emit("err-TIDE_EPROTO-hello-version-range");

    /* Shared-pool frames out of canonical form. */
    add(frame_encode_reserve(ROOM, 30, k3, rvl, 2), NULL, 0);
    le_wr64(buf + FRAME_HDR_SIZE + 2 + 5, 0);
    emit("err-TIDE_EVALEMPTY-reserve");
    add(frame_encode_commit(ROOM, 31, cids, csums, 2), NULL, 0);
    le_wr64(buf + FRAME_HDR_SIZE + 16, 0);
    emit("err-TIDE_EPROTO-commit-id-0");
    add(frame_encode_release(ROOM, 33, cids, rout, 2), NULL, 0);
    le_wr32(buf + FRAME_HDR_SIZE + 8, (uint32_t)TIDE_ENOSPACE);
    emit("err-TIDE_EPROTO-release-outcome");
    add(frame_encode_reserve_reply(ROOM, 30, rrst, rids, roffs, 3), NULL, 0);
    le_wr64(buf + FRAME_HDR_SIZE + 20 + 12, 512); /* the duplicate gets an offset */
    emit("err-TIDE_EPROTO-reserve-reply-dup-offset");
    add(frame_encode_pin_reply(ROOM, 32, pst, pids, poffs, pvl, psum, 3), NULL, 0);
    le_wr64(buf + FRAME_HDR_SIZE + 72 + 20, 3); /* the miss gets a length */
    emit("err-TIDE_EPROTO-pin-reply-miss-with-vlen");
    add(frame_encode_pin_reply(ROOM, 32, pst, pids, poffs, pvl, psum, 1), NULL, 0);
    le_wr64(buf + FRAME_HDR_SIZE + 4, 0); /* pinned without an id */
    emit("err-TIDE_EPROTO-pin-reply-id-0");

    /* --- a good frame followed by garbage --- */
    add(frame_encode_empty(ROOM, FRAME_OP_PING, 16), "garbage-after-frame!", 20);
    emit("err-TIDE_EPROTO-trailing-garbage");
    add(frame_encode_empty(ROOM, FRAME_OP_PING, 16), "TIDE", 4);
    emit("need-trailing-magic-only");
    return 0;
}
