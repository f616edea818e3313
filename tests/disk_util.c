/*
 * disk_util.c — helpers for the tests of the SSD tier (disk_util.h).
 */
#include "disk_util.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "common/checksum.h"
#include "common/endian.h"
#include "harness.h"
#include "store/disk.h"
#include "store/store_int.h"

char disk_test_log[16384];
pthread_mutex_t disk_test_log_lock = PTHREAD_MUTEX_INITIALIZER;

static void disk_test_capture(void *ctx, int level, const char *msg) {
    (void)ctx;
    pthread_mutex_lock(&disk_test_log_lock);
    size_t n = strlen(disk_test_log);
    snprintf(disk_test_log + n, sizeof(disk_test_log) - n, "[%d] %s\n", level, msg);
    pthread_mutex_unlock(&disk_test_log_lock);
}

store *disk_test_store(const char *dir, uint64_t cap, uint64_t disk_cap, uint64_t seg, int io) {
    store_config c = {.capacity = cap,
                      .policy = STORE_POLICY_DEFAULT, /* the tier under the policy users get */
                      .disk_dir = dir,
                      .disk_capacity = disk_cap,
                      .disk_segment = seg,
                      .disk_io = io,
                      .log = disk_test_capture};
    store *st;
    char err[512];
    int rc = store_create(&c, &st, err, sizeof(err));
    CHECK_MSG(rc == 0, "store_create: %d %s", rc, err);
    return st;
}

void disk_test_settle(store *st) {
    for (int i = 0; i < 10000; i++) {
        pthread_mutex_lock(&st->mu);
        int idle = st->spill_held == 0 && !disk_pending(st->dk);
        pthread_mutex_unlock(&st->mu);
        if (idle) return;
        struct timespec d = {0, 1000000};
        nanosleep(&d, NULL);
    }
    CHECK_MSG(0, "the disk writer did not settle within 10 s");
}

uint64_t disk_test_forge_seed(uint64_t seq, uint64_t off) {
    return seq * 0x9E3779B97F4A7C15ull ^ off;
}

size_t disk_test_forge_v1(uint8_t *p, uint64_t seq, uint64_t off, const char *key,
                          const uint8_t *val, uint64_t vlen) {
    size_t klen = strlen(key);
    uint8_t hb[24 + 64];
    memset(p, 0, 32);
    le_wrn(p, 0x43455254u, 4);
    p[4] = 1;
    le_wrn(p + 6, klen, 2);
    le_wrn(p + 8, vlen, 8);
    le_wrn(p + 16, checksum_buf(val, vlen), 8);
    memcpy(hb, p, 24);
    memcpy(hb + 24, key, klen);
    le_wrn(p + 24, XXH3_64bits_withSeed(hb, 24 + klen, disk_test_forge_seed(seq, off)), 8);
    memcpy(p + 32, key, klen);
    memcpy(p + 32 + klen, val, vlen);
    size_t sz = (32 + klen + vlen + 7) & ~(size_t)7;
    memset(p + 32 + klen + vlen, 0, sz - 32 - klen - vlen);
    return sz;
}
