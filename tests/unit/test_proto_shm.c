/*
 * test_proto_shm.c — the shared-pool frames of the codec (RESERVE, COMMIT, PIN, RELEASE and
 * their replies): what the encoders refuse, what the iterator reads back, and the
 * canonical zeros an encoder writes whatever its arrays hold.
 */
#include "harness.h"
#include "proto/frame.h"
#include "tide.h"

static frame_msg decode_one(const uint8_t *buf, size_t len) {
    frame_decoder d;
    frame_msg m;
    frame_decoder_init(&d, NULL);
    ssize_t n = frame_decode(&d, buf, len, &m);
    CHECK_MSG(n == (ssize_t)len, "decode returned %zd of %zu: %s", n, len, d.errstr);
    return m;
}

TEST(proto_shm_requests) {
    uint8_t buf[4096];
    size_t len;
    tide_key keys[2] = {{"k0", 2}, {"key-one", 7}};
    uint64_t vlens[2] = {4096, 1}, zero[2] = {4096, 0};
    CHECK_EQ(frame_encode_reserve(buf, sizeof(buf), &len, 5, keys, zero, 2), TIDE_EVALEMPTY);
    CHECK_EQ(frame_encode_reserve(NULL, 0, &len, 5, keys, vlens, 2), TIDE_EBUFSMALL);
    CHECK_EQ(len, FRAME_HDR_SIZE + 2 * 2 + 2 + 7 + 2 * 8);
    CHECK_EQ(frame_encode_reserve(buf, sizeof(buf), &len, 5, keys, vlens, 2), 0);
    frame_msg m = decode_one(buf, len);
    CHECK_EQ(m.h.opcode, FRAME_OP_RESERVE);
    CHECK_EQ(m.data_len, 0);
    frame_iter it;
    frame_entry e;
    frame_iter_init(&it, &m);
    CHECK(frame_iter_next(&it, &e));
    CHECK_EQ(e.key.len, 2);
    CHECK_EQ(e.vlen, 4096);
    CHECK(frame_iter_next(&it, &e));
    CHECK_EQ(e.vlen, 1);
    CHECK(!frame_iter_next(&it, &e));

    /* A RESERVE is not held to max_value: no value bytes follow it. */
    uint64_t huge[1] = {1ull << 50};
    CHECK_EQ(frame_encode_reserve(buf, sizeof(buf), &len, 6, keys, huge, 1), 0);
    m = decode_one(buf, len);
    frame_iter_init(&it, &m);
    CHECK(frame_iter_next(&it, &e));
    CHECK_EQ(e.vlen, 1ull << 50);

    uint64_t ids[2] = {11, 12}, sums[2] = {0xabcdef, 7}, bad_ids[2] = {11, 0};
    CHECK_EQ(frame_encode_commit(buf, sizeof(buf), &len, 7, bad_ids, sums, 2), TIDE_EPROTO);
    CHECK_EQ(frame_encode_commit(buf, sizeof(buf), &len, 7, ids, sums, 2), 0);
    m = decode_one(buf, len);
    frame_iter_init(&it, &m);
    CHECK(frame_iter_next(&it, &e));
    CHECK_EQ(e.id, 11);
    CHECK_EQ(e.sum, 0xabcdef);

    int32_t outs[2] = {0, TIDE_ECHECKSUM}, bad_outs[2] = {0, TIDE_ENOSPACE};
    CHECK_EQ(frame_encode_release(buf, sizeof(buf), &len, 8, ids, bad_outs, 2), TIDE_EPROTO);
    CHECK_EQ(frame_encode_release(buf, sizeof(buf), &len, 8, ids, outs, 2), 0);
    m = decode_one(buf, len);
    frame_iter_init(&it, &m);
    CHECK(frame_iter_next(&it, &e));
    CHECK(frame_iter_next(&it, &e));
    CHECK_EQ(e.id, 12);
    CHECK_EQ(e.status, TIDE_ECHECKSUM);
    CHECK_EQ(frame_encode_release(buf, sizeof(buf), &len, 8, ids, NULL, 2), 0);

    CHECK_EQ(frame_encode_pin(buf, sizeof(buf), &len, 9, keys, NULL, 2), 0);
    m = decode_one(buf, len);
    CHECK_STR(frame_op_name(m.h.opcode), "PIN");
    frame_iter_init(&it, &m);
    CHECK(frame_iter_next(&it, &e));
    CHECK_EQ(e.cap, UINT64_MAX);
}

TEST(proto_shm_replies) {
    uint8_t buf[4096];
    size_t len;
    /* Reserved, already present (id 0), refused: the last two get zero id and offset even
     * though the arrays hold something else. */
    int32_t st[3] = {0, 0, TIDE_ENOSPACE};
    uint64_t ids[3] = {21, 0, 99}, offs[3] = {8192, 77, 55};
    CHECK_EQ(frame_encode_reserve_reply(buf, sizeof(buf), &len, 1, st, ids, offs, 3), 0);
    frame_msg m = decode_one(buf, len);
    frame_iter it;
    frame_entry e;
    frame_iter_init(&it, &m);
    CHECK(frame_iter_next(&it, &e));
    CHECK_EQ(e.status, 0);
    CHECK_EQ(e.id, 21);
    CHECK_EQ(e.offset, 8192);
    CHECK(frame_iter_next(&it, &e));
    CHECK_EQ(e.id, 0);
    CHECK_EQ(e.offset, 0);
    CHECK(frame_iter_next(&it, &e));
    CHECK_EQ(e.status, TIDE_ENOSPACE);
    CHECK_EQ(e.id, 0);
    CHECK_EQ(e.offset, 0);

    int32_t pst[3] = {0, TIDE_EBUFSMALL, TIDE_ENOTFOUND};
    uint64_t pids[3] = {31, 5, 6}, poffs[3] = {256, 1, 2}, pvl[3] = {100, 5000, 9};
    uint64_t psum[3] = {0x1234, 3, 4};
    CHECK_EQ(frame_encode_pin_reply(buf, sizeof(buf), &len, 2, pst, pids, poffs, pvl, psum, 3), 0);
    m = decode_one(buf, len);
    frame_iter_init(&it, &m);
    CHECK(frame_iter_next(&it, &e));
    CHECK_EQ(e.id, 31);
    CHECK_EQ(e.offset, 256);
    CHECK_EQ(e.vlen, 100);
    CHECK_EQ(e.sum, 0x1234);
    CHECK(frame_iter_next(&it, &e));
    CHECK_EQ(e.status, TIDE_EBUFSMALL);
    CHECK_EQ(e.vlen, 5000);
    CHECK_EQ(e.id, 0);
    CHECK(frame_iter_next(&it, &e));
    CHECK_EQ(e.vlen, 0);
    CHECK_EQ(e.sum, 0);
    /* A pin without an id, or of an empty value, cannot be written. */
    pids[0] = 0;
    CHECK_EQ(frame_encode_pin_reply(buf, sizeof(buf), &len, 2, pst, pids, poffs, pvl, psum, 1),
             TIDE_EPROTO);

    int32_t cst[2] = {0, TIDE_ENOTFOUND};
    CHECK_EQ(frame_encode_status_reply(buf, sizeof(buf), &len, FRAME_OP_COMMIT, 3, cst, 2), 0);
    m = decode_one(buf, len);
    CHECK_STR(frame_op_name(m.h.opcode), "COMMIT_REPLY");
    CHECK_EQ(frame_encode_status_reply(buf, sizeof(buf), &len, FRAME_OP_RELEASE, 3, cst, 2), 0);
    m = decode_one(buf, len);
    CHECK_STR(frame_op_name(m.h.opcode), "RELEASE_REPLY");
    frame_iter_init(&it, &m);
    CHECK(frame_iter_next(&it, &e));
    CHECK(frame_iter_next(&it, &e));
    CHECK_EQ(e.status, TIDE_ENOTFOUND);
}
