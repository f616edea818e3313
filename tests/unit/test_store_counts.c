/*
 * test_store_counts.c — the store counts a read once: a size-only answer (store_pin_cap
 * with too little room) is neither a hit nor a miss, pins nothing and leaves the object
 * readable, and the read that follows counts as the one hit; mem:// (tide_get, get_many)
 * counts the same way through the public API.
 */
#include "harness.h"
#include "store/store.h"
#include "tide.h"

static store *mk(void) {
    store_config c = {.capacity = 1 << 20, .policy = STORE_POLICY_LRU};
    store *st = NULL;
    char err[256];
    int rc = store_create(&c, &st, err, sizeof(err));
    CHECK_MSG(rc == 0, "store_create: %d %s", rc, err);
    return st;
}

static tide_stats stats_of(store *st) {
    tide_stats s;
    store_stats(st, &s);
    return s;
}

static int put(store *st, const char *key, uint64_t vlen) {
    store_ref r;
    int rc = store_reserve(st, key, strlen(key), vlen, 0, &r);
    if (rc) return rc;
    return store_commit(st, r.id, 0);
}

TEST(store_size_answer_is_no_get) {
    store *st = mk();
    CHECK_EQ(put(st, "a", 1000), 0);
    store_ref r;
    /* Asked with no room, then with too little: the size, twice, and nothing counted. */
    CHECK_EQ(store_pin_cap(st, "a", 1, 0, 0, &r), TIDE_EBUFSMALL);
    CHECK_EQ(r.len, 1000);
    CHECK_EQ(store_pin_cap(st, "a", 1, 0, 999, &r), TIDE_EBUFSMALL);
    tide_stats s = stats_of(st);
    CHECK_EQ(s.gets, 0);
    CHECK_EQ(s.misses, 0);
    CHECK_EQ(s.pinned, 0);
    /* Room enough: one hit, one pin. */
    CHECK_EQ(store_pin_cap(st, "a", 1, 0, 1000, &r), 0);
    CHECK_EQ(r.len, 1000);
    s = stats_of(st);
    CHECK_EQ(s.gets, 1);
    CHECK_EQ(s.pinned, 1);
    CHECK_EQ(store_unpin(st, r.id), 0);
    /* An absent key is a miss whatever the room. */
    CHECK_EQ(store_pin_cap(st, "zz", 2, 0, 0, &r), TIDE_ENOTFOUND);
    s = stats_of(st);
    CHECK_EQ(s.gets, 1);
    CHECK_EQ(s.misses, 1);
    CHECK_EQ(s.pinned, 0);
    store_destroy(st);
}

/* mem:// through the public API: the size query tide_get documents (cap 0), a buffer too
 * small in a batch, then the reads. */
TEST(mem_size_query_then_read_is_one_hit) {
    tide_store *s;
    CHECK_EQ(tide_open("mem://?capacity=4MiB", &s), 0);
    uint8_t v[3000] = {1, 2, 3}, buf[3000];
    CHECK_EQ(tide_put(s, "k", 1, v, sizeof(v)), 0);
    size_t len = 0;
    CHECK_EQ(tide_get(s, "k", 1, NULL, 0, &len), TIDE_EBUFSMALL);
    CHECK_EQ(len, sizeof(v));
    CHECK_EQ(tide_get(s, "k", 1, buf, len, &len), 0);
    tide_key keys[2] = {{"k", 1}, {"none", 4}};
    tide_iov iov[2] = {{buf, 10}, {buf, 10}};
    int res[2];
    size_t lens[2];
    CHECK_EQ(tide_get_many(s, keys, 2, iov, NULL, res, lens), 0);
    CHECK_EQ(res[0], TIDE_EBUFSMALL);
    CHECK_EQ(lens[0], sizeof(v));
    CHECK_EQ(res[1], TIDE_ENOTFOUND);
    tide_stats st;
    CHECK_EQ(tide_stats_get(s, &st, sizeof(st)), 0);
    CHECK_EQ(st.gets, 1);
    CHECK_EQ(st.misses, 1);
    CHECK_EQ(st.pinned, 0);
    tide_close(s);
}
