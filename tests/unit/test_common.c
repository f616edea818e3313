/*
 * test_common.c — size strings, URLs, the error table and the streaming checksum.
 */
#include <errno.h>

#include "common/checksum.h"
#include "common/errors.h"
#include "common/util.h"
#include "harness.h"
#include "tide.h"

TEST(common_size_parse_accepts) {
    uint64_t v;
    CHECK_EQ(tide_size_parse("4096", &v), 0);
    CHECK_EQ(v, 4096);
    CHECK_EQ(tide_size_parse("1GiB", &v), 0);
    CHECK_EQ(v, 1ull << 30);
    CHECK_EQ(tide_size_parse("512MB", &v), 0);
    CHECK_EQ(v, 512000000ull);
    CHECK_EQ(tide_size_parse("80GB", &v), 0);
    CHECK_EQ(v, 80000000000ull);
    CHECK_EQ(tide_size_parse("1.5 KiB", &v), 0);
    CHECK_EQ(v, 1536);
    CHECK_EQ(tide_size_parse("64kib", &v), 0);
    CHECK_EQ(v, 65536);
}

TEST(common_size_parse_rejects) {
    uint64_t v;
    const char *bad[] = {"",
                         "GiB",
                         "-1",
                         "1XB",
                         "1.5",
                         "0x10",
                         "1e9",
                         "99999999999999999999",
                         "20000000000TiB",
                         "1..5GiB",
                         "1.GiB"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        CHECK_MSG(tide_size_parse(bad[i], &v) == TIDE_ESIZE, "'%s' accepted", bad[i]);
}

TEST(common_url_parse) {
    url u;
    char err[256];
    CHECK_EQ(url_parse("tide://h1:1,h2:2/pool?replicas=2&x=a%20b", &u, err, sizeof(err)), 0);
    CHECK_STR(u.scheme, "tide");
    CHECK_STR(u.authority, "h1:1,h2:2");
    CHECK_STR(u.path, "/pool");
    CHECK_STR(url_get(&u, "x"), "a b");
    CHECK_EQ(url_check_unused(&u, err, sizeof(err)), TIDE_EOPTION);
    CHECK_CONTAINS(err, "replicas");
    uint64_t r;
    CHECK_EQ(url_opt_uint(&u, "replicas", 1, &r, err, sizeof(err)), 0);
    CHECK_EQ(r, 2);
    CHECK_EQ(url_check_unused(&u, err, sizeof(err)), 0);
    url_free(&u);

    CHECK_EQ(url_parse("no-scheme", &u, err, sizeof(err)), TIDE_EURL);
    CHECK_EQ(url_parse("mem://?capacity=%zz", &u, err, sizeof(err)), TIDE_EURL);
    CHECK_EQ(url_parse("mem://?capacity=%2", &u, err, sizeof(err)), TIDE_EURL);
    CHECK_EQ(url_parse("mem://?capacity=lots", &u, err, sizeof(err)), 0);
    uint64_t cap;
    CHECK_EQ(url_opt_size(&u, "capacity", 0, &cap, err, sizeof(err)), TIDE_ESIZE);
    CHECK_CONTAINS(err, "capacity=lots");
    url_free(&u);
}

TEST(common_error_table) {
    CHECK_STR(tide_errname(TIDE_ENOTFOUND), "TIDE_ENOTFOUND");
    CHECK_STR(tide_errname(-ENOMEM), "ENOMEM");
    CHECK_STR(tide_strerror(TIDE_EBUFSMALL), "buffer too small for the value");
    CHECK_STR(tide_strerror(-ENOENT), "No such file or directory");
    /* Every code in the range has a name of its own. */
    for (int c = -TIDE_ERRBASE - 1; c >= TIDE_ERRLAST; c--) {
        CHECK_MSG(strncmp(tide_errname(c), "TIDE_E", 6) == 0, "code %d has no name", c);
        CHECK_MSG(strcmp(tide_strerror(c), "unknown error") != 0, "code %d has no text", c);
    }
}

TEST(common_errmsg_per_thread_and_handle) {
    errbuf eb;
    errbuf_init(&eb);
    int owner;
    CHECK_EQ(err_set(&owner, &eb, TIDE_ENOTFOUND, "key %s missing", "k"), TIDE_ENOTFOUND);
    CHECK_STR(err_get(&owner, &eb), "key k missing");
    CHECK_STR(err_get(NULL, NULL), "key k missing");
    errbuf_destroy(&eb);
}

#include "common/checksum.h"

TEST(common_checksum_iov_equals_flat) {
    uint8_t buf[10000];
    for (size_t i = 0; i < sizeof(buf); i++)
        buf[i] = (uint8_t)(i * 7 + 3);
    tide_iov one = {buf, sizeof(buf)};
    tide_iov three[3] = {{buf, 1}, {buf + 1, 4999}, {buf + 5000, 5000}};
    uint64_t flat = checksum_buf(buf, sizeof(buf));
    CHECK(checksum_iov(&one, 1, sizeof(buf)) == flat);
    CHECK(checksum_iov(three, 3, sizeof(buf)) == flat);
    CHECK(checksum_iov(three, 3, 6000) == checksum_buf(buf, 6000));
    uint8_t out[10000];
    tide_iov dst[2] = {{out, 3333}, {out + 3333, 6667}};
    CHECK(copy_scatter(dst, 2, buf, sizeof(buf), 1) == flat);
    CHECK(memcmp(out, buf, sizeof(buf)) == 0);
    uint8_t back[10000];
    CHECK(copy_gather(back, three, 3, 1) == flat);
    CHECK(memcmp(back, buf, sizeof(buf)) == 0);
}

/* The streaming checksum equals the one-shot checksum however the bytes are cut. */
TEST(common_checksum_stream_matches_buf) {
    size_t n = 300 * 1024 + 17;
    uint8_t *p = malloc(n);
    CHECK(p);
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(i * 131 + (i >> 11));
    checksum_state *cs = checksum_new();
    CHECK(cs);
    const size_t pieces[] = {1, 7, 64, 1000, 65535, 65536, 128 * 1024, n};
    for (size_t k = 0; k < sizeof(pieces) / sizeof(pieces[0]); k++) {
        for (size_t len = 0; len <= n; len += len < 300 ? 1 : n / 3) {
            checksum_reset(cs);
            for (size_t off = 0; off < len; off += pieces[k])
                checksum_update(cs, p + off, len - off < pieces[k] ? len - off : pieces[k]);
            CHECK_EQ(checksum_digest(cs), checksum_buf(p, len));
        }
    }
    checksum_free(cs);
    free(p);
}

/* A new message may quote the thread's previous one (a connector quoting its store's). */
TEST(common_errmsg_may_quote_the_last_message) {
    errbuf eb;
    errbuf_init(&eb);
    int a, b;
    err_set(&a, NULL, TIDE_ENOTFOUND, "inner detail %d", 7);
    err_set(&b, &eb, TIDE_ECONFIG, "outer: %s", err_get(&a, NULL));
    CHECK_STR(err_get(&b, &eb), "outer: inner detail 7");
    errbuf_destroy(&eb);
}

/* An option given twice is refused before anything is opened, naming the option — for
 * every option of every scheme, whatever the two values, and also when the second
 * spelling differs only by %-escapes. */
TEST(common_url_option_twice_refused_everywhere) {
    static const struct {
        const char *base;
        const char *opts[12];
    } schemes[] = {
        {"mem://",
         {"capacity=1GiB", "max_value=1MiB", "verify=1", "policy=lru", "prefault=0", "hugepages=0",
          "disk_dir=/tmp/x", "disk_capacity=1GiB", "disk_segment=1MiB", "disk_io=auto", NULL}},
        {"tide://127.0.0.1:1", {"timeout_ms=100", "conns=2", "token=secret", NULL}},
        {"tide://127.0.0.1:1,127.0.0.1:2",
         {"replicas=2", "fallback=1", "timeout_ms=100", "conns=2", "retry_ms=10", "threads=2",
          "read_check=1", "token=secret", NULL}},
        {"etcd://127.0.0.1:1/c",
         {"replicas=2", "fallback=1", "timeout_ms=100", "conns=2", "retry_ms=10", "threads=2",
          "read_check=1", "token=secret", "poll_ms=100", NULL}},
        {"unix:///tmp/no-such-tided.sock",
         {"timeout_ms=100", "conns=2", "token=secret", "verify=1", "populate=0", NULL}},
    };
    int n = 0;
    for (size_t s = 0; s < sizeof(schemes) / sizeof(schemes[0]); s++) {
        for (size_t o = 0; schemes[s].opts[o]; o++) {
            const char *opt = schemes[s].opts[o];
            char name[32], text[256], want[64];
            snprintf(name, sizeof(name), "%.*s", (int)(strchr(opt, '=') - opt), opt);
            snprintf(want, sizeof(want), "'%s' given twice", name);
            /* Same value, another value, and an option in between. */
            const char *forms[] = {"%s?%s&%s", "%s?%s&%s9", "%s?%s&conns=1&%s"};
            for (size_t f = 0; f < 3; f++) {
                if (f == 2 && strcmp(name, "conns") == 0) continue;
                snprintf(text, sizeof(text), forms[f], schemes[s].base, opt, opt);
                if (strstr(schemes[s].base, "mem") && f == 2)
                    snprintf(text, sizeof(text), "%s?%s&verify=1&%s", schemes[s].base, opt, opt);
                if (f == 2 && strcmp(name, "verify") == 0) continue;
                test_context = text;
                tide_store *st = NULL;
                int rc = tide_open(text, &st);
                CHECK_MSG(rc == TIDE_EOPTION, "%s: %d (%s)", text, rc, tide_errmsg(NULL));
                CHECK_CONTAINS(tide_errmsg(NULL), want);
                CHECK(st == NULL);
                n++;
            }
        }
    }
    test_context = "escaped name";
    tide_store *st = NULL;
    CHECK_EQ(tide_open("mem://?capacity=1GiB&capac%69ty=2GiB", &st), TIDE_EOPTION);
    CHECK_CONTAINS(tide_errmsg(NULL), "'capacity' given twice");
    /* The token's value is not repeated in the message. */
    CHECK_EQ(tide_open("tide://127.0.0.1:1?token=hunter2&token=hunter3", &st), TIDE_EOPTION);
    CHECK(strstr(tide_errmsg(NULL), "hunter") == NULL);
    /* Once each is fine. */
    CHECK_EQ(tide_open("mem://?capacity=16MiB&verify=1", &st), 0);
    tide_close(st);
    CHECK(n > 90);
}
