/*
 * test_store_stress.c — many threads putting, reading, removing and clearing one small
 * store at once. Every value's bytes are derived from its key, and every read checks every
 * byte and the checksum under its pin: a space reused while pinned, a torn write or a
 * record pointing at the wrong bytes fails the test. Bounded by op count and by time.
 * Commits and unpins go through one chain cursor per thread (store_chain), restarted now
 * and then, so the chain policy's hints go stale under the other threads' evictions,
 * removes and clears, which must cost nothing but the hint.
 */
#include <pthread.h>

#include "common/checksum.h"
#include "common/util.h"
#include "common/prng.h"
#include "harness.h"
#include "store/store.h"
#include "store/store_int.h"
#include "tide.h"

#define NKEYS 300
#define NTHREADS 4
#define OPS_MAX 40000
#define TIME_MAX_NS (2ull * 1000000000ull)

static store *g_st;
static uint64_t g_start;

static uint64_t klen_of(int k) {
    return 1 + (uint64_t)k * 7919 % 48000;
}

static uint8_t vbyte(int k, uint64_t i) {
    return (uint8_t)((uint32_t)k * 2654435761u + i * 31 + (i >> 9));
}

typedef struct tstat {
    uint64_t verified, puts, dups, nospace, removes, seed;
} tstat;

static void *worker(void *arg) {
    tstat *ts = arg;
    char key[32];
    store_chain chain = STORE_CHAIN_INIT;
    for (int op = 0; op < OPS_MAX; op++) {
        if ((op & 255) == 0 && now_ns() - g_start > TIME_MAX_NS) break;
        uint64_t r = prng_next(&ts->seed);
        int k = (int)(r % NKEYS);
        int klen = snprintf(key, sizeof(key), "stress/%d", k);
        uint64_t vlen = klen_of(k);
        int what = (int)((r >> 20) % 10);
        if ((r >> 56) % 8 == 0) chain = STORE_CHAIN_INIT; /* a new batch */
        store_ref ref;
        if (what < 4) {
            uint64_t deadline = (r >> 40) & 1 ? now_ns() + 60000000000ull : 0;
            int rc = store_reserve(g_st, key, (size_t)klen, vlen, deadline, &ref);
            if (rc == STORE_DUP) {
                ts->dups++;
                continue;
            }
            if (rc == TIDE_ENOSPACE) {
                ts->nospace++;
                continue;
            }
            CHECK_EQ(rc, 0);
            CHECK_EQ(ref.len, vlen);
            uint8_t *p = store_base(g_st) + ref.offset;
            for (uint64_t i = 0; i < vlen; i++)
                p[i] = vbyte(k, i);
            if ((r >> 30) % 16 == 0) {
                CHECK_EQ(store_abort(g_st, ref.id), 0);
            } else {
                CHECK_EQ(store_commit_chain(g_st, ref.id, checksum_buf(p, vlen), &chain,
                                            (r >> 44) % 8 == 0),
                         0);
                ts->puts++;
            }
        } else if (what < 8) {
            int rc = store_pin(g_st, key, (size_t)klen, 0, &ref);
            if (rc == TIDE_ENOTFOUND) continue;
            CHECK_EQ(rc, 0);
            CHECK_EQ(ref.len, vlen);
            const uint8_t *p = store_base(g_st) + ref.offset;
            for (uint64_t i = 0; i < vlen; i++)
                CHECK_MSG(p[i] == vbyte(k, i), "key %d byte %llu: %u != %u", k,
                          (unsigned long long)i, p[i], vbyte(k, i));
            CHECK(checksum_buf(p, vlen) == ref.checksum);
            CHECK_EQ(store_unpin_chain(g_st, ref.id, &chain), 0);
            ts->verified++;
        } else if (what == 8) {
            int rc = store_remove(g_st, key, (size_t)klen);
            CHECK(rc == 0 || rc == TIDE_ENOTFOUND);
            ts->removes += rc == 0;
        } else if ((r >> 50) % 64 == 0) {
            store_clear(g_st);
        } else {
            int rc = store_exists(g_st, key, (size_t)klen);
            CHECK(rc == 0 || rc == 1);
            CHECK_EQ(store_expire(g_st, now_ns()), 0); /* every deadline is a minute away */
            if (op % 512 == 0) CHECK_EQ(store_check(g_st), 0);
        }
    }
    return NULL;
}

static void stress(int which) {
    store_config c = {.capacity = 2 << 20, .policy = which};
    char err[256];
    CHECK_EQ(store_create(&c, &g_st, err, sizeof(err)), 0);
    g_start = now_ns();
    pthread_t th[NTHREADS];
    tstat ts[NTHREADS];
    for (int i = 0; i < NTHREADS; i++) {
        ts[i] = (tstat){.seed = 0x9E3779B97F4A7C15ull * (uint64_t)(i + 1)};
        CHECK_EQ(pthread_create(&th[i], NULL, worker, &ts[i]), 0);
    }
    uint64_t verified = 0, puts = 0;
    for (int i = 0; i < NTHREADS; i++) {
        CHECK_EQ(pthread_join(th[i], NULL), 0);
        verified += ts[i].verified;
        puts += ts[i].puts;
    }
    CHECK_EQ(store_check(g_st), 0);
    tide_stats s;
    store_stats(g_st, &s);
    CHECK_EQ(s.pinned, 0);
    CHECK_EQ(s.reserved, 0);
    CHECK_EQ(s.puts, puts);
    CHECK(s.used_bytes <= s.capacity_bytes);
    CHECK(s.evictions > 0); /* the pool was under pressure */
    CHECK(verified > 100);  /* and reads really happened */
    store_clear(g_st);
    store_stats(g_st, &s);
    CHECK_EQ(s.objects, 0);
    CHECK_EQ(s.used_bytes, 0);
    store_destroy(g_st);
}

TEST_T(store_stress_threads_never_read_wrong_bytes_lru, 30) {
    stress(STORE_POLICY_LRU);
}

TEST_T(store_stress_threads_never_read_wrong_bytes_s3fifo, 30) {
    stress(STORE_POLICY_S3FIFO);
}

TEST_T(store_stress_threads_never_read_wrong_bytes_chain, 30) {
    stress(STORE_POLICY_CHAIN);
}
