/*
 * test_abi_sizes.c — every call that fills a struct for its caller takes the caller's size
 * of it (common/abi.h): tide_cluster_info_get, tide_connector_get_info and
 * tide_connector_get_stats here (tide_stats_get: test_backend_mem.c). An older, smaller
 * struct gets only its fields and nothing past it is written; a newer, bigger one reads 0
 * past this library's fields; a size that cannot be one is -EINVAL, named in the message,
 * with nothing written.
 */
#include <errno.h>
#include <signal.h>
#include <stddef.h>

#include "cluster_util.h"
#include "harness.h"
#include "tide.h"
#include "connector_rig.h"

#define CANARY 0xA5A5A5A5A5A5A5A5ull
#define WORDS (TIDE_STRUCT_SIZE_MAX / 8 + 4)
#define HL 32 /* bytes of a block hash (sha256-sized, vLLM's default) */

typedef struct filler {
    const char *name;                          /* the struct's type, for messages */
    size_t v1, ours;                           /* its first size, this library's size */
    int (*fill)(void *h, void *dst, size_t n); /* the call under test */
    void *h;
    size_t probe; /* offset of a field known to be nonzero in this test */
} filler;

static int cluster_info(void *h, void *dst, size_t n) {
    return tide_cluster_info_get(h, dst, n);
}
static int connector_info(void *h, void *dst, size_t n) {
    return tide_connector_get_info(h, dst, n);
}
static int connector_stats(void *h, void *dst, size_t n) {
    return tide_connector_get_stats(h, dst, n);
}

static void check_sizes(const filler *f, const char *(*msg)(void *h)) {
    static uint64_t full[WORDS], buf[WORDS];
    test_context = f->name;
    CHECK_EQ(f->fill(f->h, full, f->ours), 0);
    CHECK_MSG(full[f->probe / 8] != 0, "%s: the probe field is 0", f->name);

    /* The first version's size: its words, then canaries. */
    memset(buf, 0xA5, sizeof(buf));
    CHECK_EQ(f->fill(f->h, buf, f->v1), 0);
    CHECK(memcmp(buf, full, f->v1) == 0);
    for (size_t i = f->v1 / 8; i < WORDS; i++)
        CHECK_MSG(buf[i] == CANARY, "%s: word %zu past a %zu-byte struct written", f->name, i,
                  f->v1);

    /* A newer header's bigger struct: ours, then zeros, then untouched. */
    size_t big = f->ours + 48;
    memset(buf, 0xA5, sizeof(buf));
    CHECK_EQ(f->fill(f->h, buf, big), 0);
    CHECK(memcmp(buf, full, f->ours) == 0);
    for (size_t i = f->ours / 8; i < big / 8; i++)
        CHECK_MSG(buf[i] == 0, "%s: word %zu of a bigger struct is not 0", f->name, i);
    CHECK_EQ(buf[big / 8], CANARY);

    const size_t bad[] = {
        0, 1, 8, f->v1 - 8, f->v1 + 4, f->ours + 1, TIDE_STRUCT_SIZE_MAX + 8, (size_t)-1};
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        memset(buf, 0xA5, sizeof(buf));
        CHECK_MSG(f->fill(f->h, buf, bad[k]) == -EINVAL, "%s: size %zu accepted", f->name, bad[k]);
        char want[64];
        snprintf(want, sizeof(want), "size %zu", bad[k]);
        CHECK_CONTAINS(msg(f->h), want);
        for (size_t i = 0; i < WORDS; i++)
            CHECK_MSG(buf[i] == CANARY, "%s: size %zu refused but word %zu written", f->name,
                      bad[k], i);
    }
    CHECK_MSG(f->fill(f->h, NULL, f->ours) == -EINVAL, "%s: NULL accepted", f->name);
    test_context = NULL;
}

static const char *store_msg(void *h) {
    return tide_errmsg(h);
}
static const char *connector_msg(void *h) {
    return tide_connector_errmsg(h);
}

TEST(abi_sizes_connector_info_and_stats) {
    tide_store *st = NULL;
    CHECK_EQ(tide_open("mem://?capacity=16MiB", &st), 0);
    tide_connector *c =
        rig_open(rig_doc(16, "", "", "kv_both", "", R_FULL(16)), st, TIDE_CONNECTOR_SCHEDULER);
    uint8_t *h = rig_hashes(1, 8, HL);
    CHECK_EQ(rig_hit(c, 100, h, 6, HL), 0); /* one lookup: lookup_exists.calls = 1 */
    filler info = {"tide_connector_info",
                   TIDE_CONNECTOR_INFO_SIZE_V1,
                   sizeof(tide_connector_info),
                   connector_info,
                   c,
                   offsetof(tide_connector_info, scheduler_block_size)};
    check_sizes(&info, connector_msg);
    filler stats = {"tide_connector_stats",
                    TIDE_CONNECTOR_STATS_SIZE_V1,
                    sizeof(tide_connector_stats),
                    connector_stats,
                    c,
                    offsetof(tide_connector_stats, lookup_exists.calls)};
    check_sizes(&stats, connector_msg);
    free(h);
    tide_connector_destroy(c);
    tide_close(st);
}

TEST_T(abi_sizes_cluster_info, 60) {
    test_server ts[2];
    cluster_start_nodes(ts, 2, NULL);
    char u[256];
    cluster_url(u, sizeof(u), ts, 2, "replicas=2");
    tide_store *s;
    CHECK_EQ(tide_open(u, &s), 0);
    filler f = {"tide_cluster_info",
                TIDE_CLUSTER_INFO_SIZE_V1,
                sizeof(tide_cluster_info),
                cluster_info,
                s,
                offsetof(tide_cluster_info, members)};
    check_sizes(&f, store_msg);
    tide_close(s);
    for (int i = 0; i < 2; i++)
        CHECK_EQ(server_stop(&ts[i], SIGTERM), 0);
}
