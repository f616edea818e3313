/*
 * backend_suite.c — cases every backend must pass, whatever carries the bytes.
 */
#include "backend_suite.h"

#include <pthread.h>

#include "common/prng.h"
#include "harness.h"
#include "tide.h"

/* Deterministic value bytes derived from a key and a length. */
static void fill_value(uint8_t *p, size_t n, const char *key) {
    uint64_t x = 1469598103934665603ull;
    for (const char *k = key; *k; k++)
        x = (x ^ (uint8_t)*k) * 1099511628211ull;
    for (size_t i = 0; i < n; i++) {
        p[i] = (uint8_t)prng_next(&x);
    }
}

static void case_single_key(tide_store *s) {
    const char *k = "alpha";
    uint8_t v[1000], out[1000];
    fill_value(v, sizeof(v), k);
    CHECK_EQ(tide_exists(s, k, 5), 0);
    size_t len = 0;
    CHECK_EQ(tide_get(s, k, 5, out, sizeof(out), &len), TIDE_ENOTFOUND);
    CHECK_CONTAINS(tide_errmsg(s), "alpha");
    CHECK_EQ(tide_put(s, k, 5, v, sizeof(v)), 0);
    CHECK_EQ(tide_exists(s, k, 5), 1);
    CHECK_EQ(tide_get(s, k, 5, out, sizeof(out), &len), 0);
    CHECK_EQ(len, sizeof(v));
    CHECK(memcmp(v, out, sizeof(v)) == 0);
    CHECK_EQ(tide_remove(s, k, 5), 0);
    CHECK_EQ(tide_remove(s, k, 5), TIDE_ENOTFOUND);
    CHECK_EQ(tide_exists(s, k, 5), 0);
    /* Binary keys, NUL bytes included, are distinct keys. */
    const char kb1[] = {'a', 0, 'b'}, kb2[] = {'a', 0, 'c'};
    CHECK_EQ(tide_put(s, kb1, 3, "one", 3), 0);
    CHECK_EQ(tide_put(s, kb2, 3, "two", 3), 0);
    char b[4] = {0};
    CHECK_EQ(tide_get(s, kb2, 3, b, 3, &len), 0);
    CHECK_STR(b, "two");
}

static void case_first_writer_wins(tide_store *s) {
    CHECK_EQ(tide_put(s, "dup", 3, "first", 5), 0);
    CHECK_EQ(tide_put(s, "dup", 3, "second!", 7), 0);
    char b[16] = {0};
    size_t len;
    CHECK_EQ(tide_get(s, "dup", 3, b, sizeof(b), &len), 0);
    CHECK_EQ(len, 5);
    CHECK_STR(b, "first");
}

static void case_buffer_too_small(tide_store *s) {
    uint8_t v[300];
    fill_value(v, sizeof(v), "small");
    CHECK_EQ(tide_put(s, "small", 5, v, sizeof(v)), 0);
    size_t len = 0;
    CHECK_EQ(tide_get(s, "small", 5, NULL, 0, &len), TIDE_EBUFSMALL); /* size query */
    CHECK_EQ(len, 300);
    uint8_t b[299];
    CHECK_EQ(tide_get(s, "small", 5, b, sizeof(b), &len), TIDE_EBUFSMALL);
    CHECK_EQ(len, 300);
    CHECK_CONTAINS(tide_errmsg(s), "300 bytes");
    CHECK_CONTAINS(tide_errmsg(s), "299");
    /* A larger buffer is fine: the length says how much is value. */
    uint8_t big[400];
    CHECK_EQ(tide_get(s, "small", 5, big, sizeof(big), &len), 0);
    CHECK_EQ(len, 300);
    CHECK(memcmp(big, v, 300) == 0);
}

static void case_bad_keys_and_values(tide_store *s) {
    char long_key[TIDE_KEY_MAX + 1];
    memset(long_key, 'k', sizeof(long_key));
    CHECK_EQ(tide_put(s, "", 0, "v", 1), TIDE_EKEYEMPTY);
    CHECK_CONTAINS(tide_errmsg(s), "empty key");
    CHECK_EQ(tide_put(s, long_key, sizeof(long_key), "v", 1), TIDE_EKEYLONG);
    CHECK_CONTAINS(tide_errmsg(s), "257");
    CHECK_EQ(tide_put(s, long_key, TIDE_KEY_MAX, "v", 1), 0);
    CHECK_EQ(tide_exists(s, long_key, TIDE_KEY_MAX), 1);
    CHECK_EQ(tide_put(s, "k", 1, "v", 0), TIDE_EVALEMPTY);
    CHECK_CONTAINS(tide_errmsg(s), "empty value");
    size_t len;
    char b[4];
    CHECK_EQ(tide_get(s, "", 0, b, 4, &len), TIDE_EKEYEMPTY);
    CHECK_EQ(tide_exists(s, long_key, sizeof(long_key)), TIDE_EKEYLONG);
    CHECK_EQ(tide_remove(s, "", 0), TIDE_EKEYEMPTY);
}

static void case_batches(tide_store *s) {
    enum { N = 64, VL = 4096 };
    static uint8_t vals[N][VL], outs[N][VL];
    char names[N][16];
    tide_key keys[N];
    tide_iov iov[N], oiov[N];
    int res[N];
    size_t lens[N];
    uint8_t present[N];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof(names[i]), "batch-%d", i);
        keys[i] = (tide_key){names[i], strlen(names[i])};
        fill_value(vals[i], VL - (size_t)i, names[i]);
        iov[i] = (tide_iov){vals[i], VL - (size_t)i};
        oiov[i] = (tide_iov){outs[i], VL};
    }
    /* Put the even keys, then all keys with one empty key among them. */
    tide_key even[N / 2];
    tide_iov even_iov[N / 2];
    for (int i = 0; i < N / 2; i++)
        even[i] = keys[2 * i], even_iov[i] = iov[2 * i];
    CHECK_EQ(tide_put_many(s, even, N / 2, even_iov, NULL, res), N / 2);
    CHECK_EQ(tide_exists_many(s, keys, N, present), N / 2);
    for (int i = 0; i < N; i++)
        CHECK_EQ(present[i], i % 2 == 0);
    CHECK_EQ(tide_get_many(s, keys, N, oiov, NULL, res, lens), N / 2);
    for (int i = 0; i < N; i++) {
        if (i % 2) {
            CHECK_EQ(res[i], TIDE_ENOTFOUND);
        } else {
            CHECK_EQ(res[i], 0);
            CHECK_EQ(lens[i], VL - (size_t)i);
            CHECK(memcmp(outs[i], vals[i], lens[i]) == 0);
        }
    }
    tide_key saved = keys[5];
    keys[5] = (tide_key){"", 0};
    CHECK_EQ(tide_put_many(s, keys, N, iov, NULL, res), N - 1);
    CHECK_EQ(res[5], TIDE_EKEYEMPTY);
    CHECK_CONTAINS(tide_errmsg(s), "key 5");
    keys[5] = saved;
    CHECK_EQ(tide_exists_many(s, keys, N, present), N - 1);
    CHECK_EQ(tide_remove_many(s, keys, N, res), N - 1);
    CHECK_EQ(res[5], TIDE_ENOTFOUND);
    CHECK_EQ(tide_exists_many(s, keys, N, present), 0);
    /* Zero keys is a valid, empty batch. */
    CHECK_EQ(tide_put_many(s, keys, 0, iov, NULL, res), 0);
    CHECK_EQ(tide_get_many(s, keys, 0, oiov, NULL, res, lens), 0);
}

static void case_scatter_gather(tide_store *s) {
    /* Like a paged KV block: K and V planes in separate regions. */
    uint8_t k0[3000], v0[5000], k1[3000], v1[5000], whole[8000];
    fill_value(k0, sizeof(k0), "k0");
    fill_value(v0, sizeof(v0), "v0");
    fill_value(k1, sizeof(k1), "k1");
    fill_value(v1, sizeof(v1), "v1");
    tide_key keys[2] = {{"blk0", 4}, {"blk1", 4}};
    tide_iov in[4] = {{k0, 3000}, {v0, 5000}, {k1, 3000}, {v1, 5000}};
    size_t cnt[2] = {2, 2};
    int res[2];
    CHECK_EQ(tide_put_many(s, keys, 2, in, cnt, res), 2);
    /* Read blk0 whole and blk1 split differently (1000 + 7000). */
    uint8_t a[1000], b[7000];
    tide_iov out[3] = {{whole, 8000}, {a, 1000}, {b, 7000}};
    size_t ocnt[2] = {1, 2}, lens[2];
    CHECK_EQ(tide_get_many(s, keys, 2, out, ocnt, res, lens), 2);
    CHECK_EQ(lens[0], 8000);
    CHECK(memcmp(whole, k0, 3000) == 0 && memcmp(whole + 3000, v0, 5000) == 0);
    CHECK(memcmp(a, k1, 1000) == 0);
    CHECK(memcmp(b, k1 + 1000, 2000) == 0 && memcmp(b + 2000, v1, 5000) == 0);
    /* A scatter list too short in total is too small. */
    tide_iov shorty[2] = {{a, 1000}, {b, 6999}};
    size_t scnt[1] = {2};
    CHECK_EQ(tide_get_many(s, keys, 1, shorty, scnt, res, lens), 0);
    CHECK_EQ(res[0], TIDE_EBUFSMALL);
    CHECK_EQ(lens[0], 8000);
}

static void case_match_prefix(tide_store *s) {
    char names[10][8];
    tide_key keys[10];
    for (int i = 0; i < 10; i++) {
        snprintf(names[i], sizeof(names[i]), "p%d", i);
        keys[i] = (tide_key){names[i], strlen(names[i])};
    }
    CHECK_EQ(tide_match_prefix(s, keys, 10), 0);
    for (int i = 0; i < 10; i++)
        if (i < 6 || i == 7) CHECK_EQ(tide_put(s, names[i], strlen(names[i]), "x", 1), 0);
    CHECK_EQ(tide_match_prefix(s, keys, 10), 6);
    CHECK_EQ(tide_match_prefix(s, keys, 3), 3);
    CHECK_EQ(tide_match_prefix(s, keys + 7, 3), 1);
    CHECK_EQ(tide_match_prefix(s, keys, 0), 0);
}

/* Copies the store keeps of each key (1 but for replicated clusters). */
static int suite_copies = 1;

static void case_clear_and_stats(tide_store *s) {
    tide_stats st0, st1;
    CHECK_EQ(tide_stats_get(s, &st0, sizeof(st0)), 0);
    CHECK_EQ(st0.objects, 0);
    for (int i = 0; i < 20; i++) {
        char k[16];
        snprintf(k, sizeof(k), "s%d", i);
        CHECK_EQ(tide_put(s, k, strlen(k), "0123456789", 10), 0);
    }
    char b[10];
    size_t len;
    CHECK_EQ(tide_get(s, "s3", 2, b, sizeof(b), &len), 0);
    CHECK_EQ(tide_get(s, "nope", 4, b, sizeof(b), &len), TIDE_ENOTFOUND);
    CHECK_EQ(tide_stats_get(s, &st1, sizeof(st1)), 0);
    CHECK_EQ(st1.objects, 20 * suite_copies);
    CHECK_EQ(st1.puts - st0.puts, 20 * suite_copies);
    CHECK_EQ(st1.gets - st0.gets, 1);
    CHECK_EQ(st1.misses - st0.misses, 1);
    CHECK_EQ(st1.bytes_in - st0.bytes_in, 200 * suite_copies);
    CHECK_EQ(st1.bytes_out - st0.bytes_out, 10);
    CHECK(st1.used_bytes >= 200 && st1.used_bytes <= st1.capacity_bytes);
    CHECK(st1.capacity_bytes >= 64ull << 20);
    CHECK_EQ(tide_clear(s), 0);
    CHECK_EQ(tide_stats_get(s, &st1, sizeof(st1)), 0);
    CHECK_EQ(st1.objects, 0);
    CHECK_EQ(tide_exists(s, "s3", 2), 0);
}

static void case_large_values(tide_store *s) {
    size_t n = 4u << 20;
    uint8_t *v = malloc(n), *o = malloc(n);
    fill_value(v, n, "large");
    CHECK_EQ(tide_put(s, "large", 5, v, n), 0);
    size_t len;
    CHECK_EQ(tide_get(s, "large", 5, o, n, &len), 0);
    CHECK_EQ(len, n);
    CHECK(memcmp(v, o, n) == 0);
    free(v);
    free(o);
}

/* Many threads put and get overlapping keys; every byte read must be the key's bytes. */
struct worker_arg {
    tide_store *s;
    int id;
    int bad;
};

static void *worker(void *p) {
    struct worker_arg *a = p;
    uint8_t v[8192], o[8192];
    for (int i = 0; i < 300; i++) {
        char k[32];
        snprintf(k, sizeof(k), "conc-%d", (i * 7 + a->id * 13) % 97);
        size_t vl = 1000 + (size_t)((i * 7 + a->id * 13) % 97) * 70;
        fill_value(v, vl, k);
        if (tide_put(a->s, k, strlen(k), v, vl) != 0) a->bad++;
        size_t len;
        int rc = tide_get(a->s, k, strlen(k), o, sizeof(o), &len);
        if (rc == 0 && (len != vl || memcmp(o, v, vl) != 0)) a->bad++;
        if (rc != 0 && rc != TIDE_ENOTFOUND) a->bad++;
        if (i % 10 == 0) tide_remove(a->s, k, strlen(k));
    }
    return NULL;
}

static void case_threads(tide_store *s) {
    enum { T = 4 };
    pthread_t th[T];
    struct worker_arg args[T];
    for (int i = 0; i < T; i++) {
        args[i] = (struct worker_arg){s, i, 0};
        pthread_create(&th[i], NULL, worker, &args[i]);
    }
    for (int i = 0; i < T; i++) {
        pthread_join(th[i], NULL);
        CHECK_EQ(args[i].bad, 0);
    }
}

static const struct {
    const char *name;
    void (*fn)(tide_store *s);
} cases[] = {
    {"single_key", case_single_key},
    {"first_writer_wins", case_first_writer_wins},
    {"buffer_too_small", case_buffer_too_small},
    {"bad_keys_and_values", case_bad_keys_and_values},
    {"batches", case_batches},
    {"scatter_gather", case_scatter_gather},
    {"match_prefix", case_match_prefix},
    {"clear_and_stats", case_clear_and_stats},
    {"large_values", case_large_values},
    {"threads", case_threads},
};

void backend_suite(const char *url) {
    backend_suite_copies(url, 1);
}

void backend_suite_copies(const char *url, int copies) {
    suite_copies = copies;
    tide_store *s = NULL;
    int rc = tide_open(url, &s);
    CHECK_MSG(rc == 0, "tide_open(%s): %s", url, tide_errmsg(NULL));
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        CHECK_EQ(tide_clear(s), 0);
        static char ctx[300];
        snprintf(ctx, sizeof(ctx), "case %s on %s", cases[i].name, url);
        test_context = ctx;
        cases[i].fn(s);
    }
    test_context = NULL;
    tide_close(s);
}
