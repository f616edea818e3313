/*
 * test_store_disk.c — the SSD tier through store.h and mem://: spill on eviction and
 * read-back with promotion (both write paths), the index rebuilt at reopen, torn tails,
 * flipped bytes and cut files (a miss and a counter, never wrong bytes), eviction from
 * disk by capacity, remove and clear across tiers and restarts, a disk that refuses writes
 * (RLIMIT_FSIZE, the log's drop count equal to disk_dropped), threads, file modes (0700
 * directory, 0600 segments, the secret), a disk_dir that is
 * not a writable directory, and the mem:// options.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "backend_suite.h"
#include "common/checksum.h"
#include "common/stats_fields.h"
#include "disk_util.h"
#include "harness.h"
#include "store/disk.h"
#include "store/store.h"
#include "store/store_int.h"
#include "tide.h"

#define KIB 1024ull
#define MIB (1024ull * 1024ull)
#define VAL (64 * KIB)

static const char *disk_dir(void) {
    static char dir[300];
    snprintf(dir, sizeof(dir), "%s/disk", test_tmpdir());
    return dir;
}

static void key_of(char *buf, size_t len, int i) {
    snprintf(buf, len, "spill-%06d|", i);
}

static uint8_t byte_at(int i, uint64_t j) {
    return (uint8_t)(i * 131 + j * 7 + (j >> 9));
}

static int put_i(store *st, int i, uint64_t vlen) {
    char k[32];
    key_of(k, sizeof(k), i);
    store_ref r;
    int rc = store_reserve(st, k, strlen(k), vlen, 0, &r);
    if (rc != 0) return rc;
    uint8_t *p = store_base(st) + r.offset;
    for (uint64_t j = 0; j < vlen; j++)
        p[j] = byte_at(i, j);
    CHECK_EQ(store_commit(st, r.id, checksum_buf(p, vlen)), 0);
    return 0;
}

/* Get key i: 1 with every byte checked, 0 on a miss. Never anything else. */
static int get_i(store *st, int i, uint64_t vlen) {
    char k[32];
    key_of(k, sizeof(k), i);
    store_ref r;
    int rc = store_pin(st, k, strlen(k), 0, &r);
    if (rc == TIDE_ENOTFOUND) return 0;
    CHECK_EQ(rc, 0);
    CHECK_EQ(r.len, vlen);
    const uint8_t *p = store_base(st) + r.offset;
    for (uint64_t j = 0; j < vlen; j++)
        if (p[j] != byte_at(i, j)) CHECK_MSG(0, "key %d byte %llu wrong", i, (unsigned long long)j);
    CHECK_EQ(r.checksum, checksum_buf(p, vlen));
    CHECK_EQ(store_unpin(st, r.id), 0);
    return 1;
}

static tide_stats stats(store *st) {
    tide_stats s;
    store_stats(st, &s);
    return s;
}

/* The segment file (full path into out) and offset where key i's record begins; 0 if none. */
static int find_record(int i, char *out, size_t outlen, uint64_t *off) {
    char k[32];
    key_of(k, sizeof(k), i);
    DIR *d = opendir(disk_dir());
    CHECK(d);
    struct dirent *de;
    int found = 0;
    static uint8_t buf[8 * MIB];
    while (!found && (de = readdir(d))) {
        if (!strstr(de->d_name, ".seg") || strstr(de->d_name, ".bad")) continue;
        snprintf(out, outlen, "%s/%s", disk_dir(), de->d_name);
        int fd = open(out, O_RDONLY);
        CHECK(fd >= 0);
        ssize_t n = read(fd, buf, sizeof(buf));
        close(fd);
        const uint8_t *at = n > 0 ? memmem(buf, (size_t)n, k, strlen(k)) : NULL;
        if (at) {
            *off = (uint64_t)(at - buf) - 32;
            found = 1;
        }
    }
    closedir(d);
    return found;
}

static void flip_byte(const char *path, uint64_t off) {
    int fd = open(path, O_RDWR);
    CHECK(fd >= 0);
    uint8_t b;
    CHECK_EQ(pread(fd, &b, 1, (off_t)off), 1);
    b ^= 0x5a;
    CHECK_EQ(pwrite(fd, &b, 1, (off_t)off), 1);
    close(fd);
}

static void spill_and_read_back(int io) {
    store *st = disk_test_store(disk_dir(), 1 * MIB, 16 * MIB, 1 * MIB, io);
    for (int i = 0; i < 48; i++) {
        CHECK_EQ(put_i(st, i, VAL), 0);
        CHECK_EQ(store_check(st), 0);
    }
    disk_test_settle(st);
    tide_stats s = stats(st);
    CHECK_EQ(s.objects, 16);     /* the pool holds 16 of them */
    CHECK_EQ(s.disk_writes, 32); /* the other 32 were written on their way out */
    CHECK_EQ(s.disk_objects, 32);
    CHECK_EQ(s.disk_dropped, 0);
    CHECK_EQ(s.evictions, 32);
    CHECK(s.disk_used_bytes > 32 * VAL && s.disk_used_bytes <= 16 * MIB);
    CHECK_EQ(store_exists(st, "spill-", 6), 0);
    for (int i = 0; i < 48; i++) {
        char k[32];
        key_of(k, sizeof(k), i);
        CHECK_EQ(store_exists(st, k, strlen(k)), 1);
    }
    CHECK_EQ(put_i(st, 3, VAL), STORE_DUP); /* on disk only: still a duplicate */
    for (int i = 0; i < 48; i++) {
        CHECK_MSG(get_i(st, i, VAL) == 1, "key %d lost", i);
        CHECK_EQ(store_check(st), 0);
    }
    disk_test_settle(st);
    s = stats(st);
    CHECK_EQ(s.misses, 0);
    CHECK_EQ(s.gets, 48);
    CHECK(s.disk_promotions >= 32);
    CHECK_EQ(s.disk_reads, s.disk_promotions);
    CHECK_EQ(s.disk_checksum_errors, 0);
    CHECK_EQ(s.disk_errors, 0);
    /* A promoted object keeps its record: evicting it again writes nothing. */
    CHECK_EQ(s.disk_writes, 48);
    CHECK_EQ(s.disk_objects, 48);
    CHECK_EQ(store_check(st), 0);
    store_destroy(st);
}

TEST(store_disk_spill_and_read_back_pwritev) {
    spill_and_read_back(DISK_IO_PSYNC);
}

TEST(store_disk_spill_and_read_back_io_uring) {
    /* io_uring is enabled on the machines this project runs on (MACHINE.md): insisting on
     * it must work, and the tier must say it uses it. */
    store *st = disk_test_store(disk_dir(), 1 * MIB, 16 * MIB, 1 * MIB, DISK_IO_URING);
    char line[1024];
    store_describe_disk(st, line, sizeof(line));
    CHECK_CONTAINS(line, "writes through io_uring");
    store_destroy(st);
    spill_and_read_back(DISK_IO_URING);
}

TEST(store_disk_restart_rebuilds_the_index) {
    store *st = disk_test_store(disk_dir(), 1 * MIB, 16 * MIB, 1 * MIB, DISK_IO_AUTO);
    for (int i = 0; i < 48; i++)
        CHECK_EQ(put_i(st, i, VAL), 0);
    disk_test_settle(st);
    store_destroy(st);
    st = disk_test_store(disk_dir(), 1 * MIB, 16 * MIB, 1 * MIB, DISK_IO_AUTO);
    tide_stats s = stats(st);
    CHECK_EQ(s.disk_objects, 32);
    CHECK_EQ(s.disk_torn_records, 0);
    CHECK_EQ(s.objects, 0);
    char line[1024];
    store_describe_disk(st, line, sizeof(line));
    CHECK_CONTAINS(line, "32 objects");
    /* The 32 evicted are back from disk; the 16 that were only in memory are gone. */
    for (int i = 0; i < 48; i++)
        CHECK_EQ(get_i(st, i, VAL), i < 32);
    CHECK_EQ(store_check(st), 0);
    store_destroy(st);
}

TEST(store_disk_torn_tail_is_cut_and_the_rest_served) {
    store *st = disk_test_store(disk_dir(), 1 * MIB, 16 * MIB, 4 * MIB, DISK_IO_AUTO);
    for (int i = 0; i < 40; i++)
        CHECK_EQ(put_i(st, i, VAL), 0);
    disk_test_settle(st);
    store_destroy(st); /* keys 0..23 are on disk, 23 last */
    char path[600];
    uint64_t off;
    CHECK(find_record(23, path, sizeof(path), &off));
    struct stat sb;
    CHECK_EQ(stat(path, &sb), 0);
    CHECK_EQ(truncate(path, sb.st_size - 1000), 0); /* the last record loses its end */
    st = disk_test_store(disk_dir(), 1 * MIB, 16 * MIB, 4 * MIB, DISK_IO_AUTO);
    tide_stats s = stats(st);
    CHECK_EQ(s.disk_torn_records, 1);
    CHECK_EQ(s.disk_objects, 23);
    CHECK_EQ(stat(path, &sb), 0);
    CHECK_EQ((uint64_t)sb.st_size, off); /* cut back to where the torn record began */
    for (int i = 0; i < 24; i++)
        CHECK_EQ(get_i(st, i, VAL), i < 23);
    store_destroy(st);
    st = disk_test_store(disk_dir(), 1 * MIB, 16 * MIB, 4 * MIB, DISK_IO_AUTO);
    CHECK_EQ(stats(st).disk_torn_records, 0); /* cut for good */
    CHECK_EQ(get_i(st, 22, VAL), 1);
    store_destroy(st);
}

TEST(store_disk_flipped_value_byte_is_a_miss_never_wrong_bytes) {
    store *st = disk_test_store(disk_dir(), 1 * MIB, 16 * MIB, 4 * MIB, DISK_IO_AUTO);
    for (int i = 0; i < 40; i++)
        CHECK_EQ(put_i(st, i, VAL), 0);
    disk_test_settle(st);
    char path[600];
    uint64_t off;
    CHECK(find_record(7, path, sizeof(path), &off));
    flip_byte(path, off + 32 + 13 + 5000); /* a byte of key 7's value */
    CHECK_EQ(get_i(st, 7, VAL), 0);
    tide_stats s = stats(st);
    CHECK_EQ(s.disk_checksum_errors, 1);
    CHECK_EQ(s.misses, 1);
    CHECK_EQ(store_exists(st, "spill-000007|", 13), 0); /* forgotten */
    CHECK_EQ(get_i(st, 7, VAL), 0);
    CHECK_EQ(stats(st).disk_checksum_errors, 1); /* not read again */
    CHECK_EQ(get_i(st, 6, VAL), 1);
    CHECK_EQ(get_i(st, 8, VAL), 1);
    CHECK(find_record(12, path, sizeof(path), &off));
    flip_byte(path, off + 9); /* key 12's header: caught at read-back too */
    CHECK_EQ(get_i(st, 12, VAL), 0);
    CHECK_EQ(stats(st).disk_checksum_errors, 2);
    CHECK_EQ(store_check(st), 0);
    disk_test_settle(st);
    store_destroy(st);
    /* The scan checks headers only, but the tombstone keeps the bad record forgotten. */
    st = disk_test_store(disk_dir(), 1 * MIB, 16 * MIB, 4 * MIB, DISK_IO_AUTO);
    CHECK_EQ(get_i(st, 7, VAL), 0);
    CHECK_EQ(get_i(st, 9, VAL), 1);
    store_destroy(st);
}

TEST(store_disk_flipped_header_byte_ends_its_segment_at_restart) {
    store *st = disk_test_store(disk_dir(), 1 * MIB, 16 * MIB, 4 * MIB, DISK_IO_AUTO);
    for (int i = 0; i < 40; i++)
        CHECK_EQ(put_i(st, i, VAL), 0);
    disk_test_settle(st);
    store_destroy(st); /* keys 0..23 on disk, in one segment */
    char path[600];
    uint64_t off;
    CHECK(find_record(10, path, sizeof(path), &off));
    flip_byte(path, off + 32 + 2); /* a byte of key 10 */
    CHECK(find_record(12, path, sizeof(path), &off));
    flip_byte(path, off + 9); /* key 12's length */
    st = disk_test_store(disk_dir(), 1 * MIB, 16 * MIB, 4 * MIB, DISK_IO_AUTO);
    tide_stats s = stats(st);
    /* The scan never searches past a bad record: key 10 ends the segment, 12 is not seen. */
    CHECK_EQ(s.disk_torn_records, 1);
    CHECK_EQ(s.disk_objects, 10);
    for (int i = 0; i < 24; i++)
        CHECK_EQ(get_i(st, i, VAL), i < 10);
    CHECK_EQ(stats(st).disk_checksum_errors, 0);
    store_destroy(st);
}

TEST(store_disk_cut_file_while_running_is_a_miss) {
    store *st = disk_test_store(disk_dir(), 1 * MIB, 16 * MIB, 4 * MIB, DISK_IO_PSYNC);
    for (int i = 0; i < 40; i++)
        CHECK_EQ(put_i(st, i, VAL), 0);
    disk_test_settle(st);
    char path[600];
    uint64_t off;
    CHECK(find_record(20, path, sizeof(path), &off));
    CHECK_EQ(truncate(path, (off_t)(off + 100)), 0); /* 20 and all after it lose their bytes */
    for (int i = 0; i < 24; i++)
        CHECK_EQ(get_i(st, i, VAL), i < 20);
    tide_stats s = stats(st);
    CHECK_EQ(s.disk_checksum_errors, 4);
    CHECK_EQ(s.misses, 4);
    CHECK_EQ(store_check(st), 0);
    store_destroy(st);
}

TEST(store_disk_evicts_oldest_segments_at_capacity) {
    store *st = disk_test_store(disk_dir(), 1 * MIB, 4 * MIB, 1 * MIB, DISK_IO_AUTO);
    for (int i = 0; i < 160; i++) {
        CHECK_EQ(put_i(st, i, VAL), 0);
        CHECK(stats(st).disk_used_bytes <= 4 * MIB);
    }
    disk_test_settle(st);
    tide_stats s = stats(st);
    CHECK(s.disk_evictions > 0);
    CHECK(s.disk_used_bytes <= 4 * MIB);
    CHECK(s.disk_segments <= 4);
    CHECK_EQ(s.disk_objects + s.disk_evictions, s.disk_writes);
    int served = 0;
    for (int i = 159; i >= 0; i--)
        served += get_i(st, i, VAL);
    CHECK(get_i(st, 159, VAL) == 1);
    CHECK(get_i(st, 0, VAL) == 0); /* the oldest went with their segment */
    CHECK(served >= 16 + 30 && served < 160);
    CHECK_EQ(store_check(st), 0);
    store_destroy(st);
}

TEST(store_disk_remove_and_clear_reach_both_tiers_and_restarts) {
    store *st = disk_test_store(disk_dir(), 1 * MIB, 16 * MIB, 1 * MIB, DISK_IO_AUTO);
    for (int i = 0; i < 48; i++)
        CHECK_EQ(put_i(st, i, VAL), 0);
    disk_test_settle(st);
    CHECK_EQ(store_remove(st, "spill-000003|", 13), 0); /* on disk */
    CHECK_EQ(store_remove(st, "spill-000047|", 13), 0); /* in memory */
    CHECK_EQ(store_remove(st, "spill-000003|", 13), TIDE_ENOTFOUND);
    CHECK_EQ(get_i(st, 3, VAL), 0);
    CHECK_EQ(get_i(st, 47, VAL), 0);
    disk_test_settle(st);
    store_destroy(st);
    st = disk_test_store(disk_dir(), 1 * MIB, 16 * MIB, 1 * MIB, DISK_IO_AUTO);
    CHECK_EQ(get_i(st, 3, VAL), 0); /* the tombstone outlived the restart */
    CHECK_EQ(get_i(st, 4, VAL), 1);
    CHECK_EQ(put_i(st, 3, VAL), 0); /* and a new put of the key is a new object */
    CHECK_EQ(get_i(st, 3, VAL), 1);
    store_clear(st);
    for (int i = 0; i < 48; i++)
        CHECK_EQ(get_i(st, i, VAL), 0);
    CHECK_EQ(stats(st).disk_objects, 0);
    CHECK_EQ(store_check(st), 0);
    store_destroy(st);
    st = disk_test_store(disk_dir(), 1 * MIB, 16 * MIB, 1 * MIB, DISK_IO_AUTO);
    CHECK_EQ(stats(st).disk_objects, 0);
    for (int i = 0; i < 48; i++)
        CHECK_EQ(get_i(st, i, VAL), 0);
    store_destroy(st);
}

TEST(store_disk_refusing_writes_keeps_memory_serving) {
    /* The disk "fills" at 1 MiB a file: writes past it fail with EFBIG, as a full disk
     * fails with ENOSPC. Puts must go on, from memory. */
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl;
    CHECK_EQ(getrlimit(RLIMIT_FSIZE, &rl), 0);
    rlim_t was = rl.rlim_cur;
    rl.rlim_cur = 1 * MIB;
    CHECK_EQ(setrlimit(RLIMIT_FSIZE, &rl), 0);
    disk_test_log[0] = '\0';
    store *st = disk_test_store(disk_dir(), 1 * MIB, 64 * MIB, 8 * MIB, DISK_IO_AUTO);
    for (int i = 0; i < 64; i++) {
        CHECK_EQ(put_i(st, i, VAL), 0);
        CHECK_EQ(get_i(st, i, VAL), 1);
    }
    disk_test_settle(st);
    tide_stats s = stats(st);
    CHECK(s.disk_errors > 0);
    CHECK(s.disk_dropped > 0);
    CHECK(s.disk_objects > 0 && s.disk_objects < 16); /* what fit below the limit */
    CHECK_EQ(s.objects, 16);
    for (int i = 48; i < 64; i++)
        CHECK_EQ(get_i(st, i, VAL), 1);
    pthread_mutex_lock(&disk_test_log_lock);
    CHECK_CONTAINS(disk_test_log, "File too large");
    CHECK_CONTAINS(disk_test_log, disk_dir());
    CHECK_CONTAINS(disk_test_log, "keeps serving from memory");
    pthread_mutex_unlock(&disk_test_log_lock);
    /* Room comes back: within the backoff and a batch, spilling resumes. */
    rl.rlim_cur = was;
    CHECK_EQ(setrlimit(RLIMIT_FSIZE, &rl), 0);
    uint64_t before = stats(st).disk_writes;
    for (int i = 64; i < 64 + 1000 && stats(st).disk_writes == before; i++) {
        CHECK_EQ(put_i(st, i, VAL), 0);
        struct timespec d = {0, 10000000};
        nanosleep(&d, NULL);
    }
    disk_test_settle(st);
    CHECK(stats(st).disk_writes > before);
    pthread_mutex_lock(&disk_test_log_lock);
    CHECK_CONTAINS(disk_test_log, "writes succeed again");
    /* The count the log gives is every object the spell cost: the ones whose write failed
     * and the ones evictions dropped unqueued while the disk was backed off. */
    const char *at = strstr(disk_test_log, "failed batches (");
    CHECK(at);
    unsigned long long logged = strtoull(at + strlen("failed batches ("), NULL, 10);
    pthread_mutex_unlock(&disk_test_log_lock);
    CHECK_MSG(logged == stats(st).disk_dropped,
              "the log says %llu objects dropped, disk_dropped %llu", logged,
              (unsigned long long)stats(st).disk_dropped);
    CHECK_EQ(store_check(st), 0);
    store_destroy(st);
}

/* Threads put, get and remove over a small pool with a disk tier; every byte read is
 * checked, and the invariants hold at the end. */
static store *g_st;
static void *stress_thread(void *arg) {
    unsigned seed = (unsigned)(uintptr_t)arg;
    for (int n = 0; n < 1500; n++) {
        int i = (int)(rand_r(&seed) % 96);
        int op = (int)(rand_r(&seed) % 10);
        uint64_t vlen = 16 * KIB + (uint64_t)(i % 5) * 8 * KIB;
        if (op < 5) {
            int rc = put_i(g_st, i, vlen);
            CHECK(rc == 0 || rc == STORE_DUP);
        } else if (op < 9) {
            get_i(g_st, i, vlen);
        } else {
            char k[32];
            key_of(k, sizeof(k), i);
            int rc = store_remove(g_st, k, strlen(k));
            CHECK(rc == 0 || rc == TIDE_ENOTFOUND);
        }
    }
    return NULL;
}

TEST_T(store_disk_threads_never_read_wrong_bytes, 120) {
    g_st = disk_test_store(disk_dir(), 512 * KIB, 8 * MIB, 1 * MIB, DISK_IO_AUTO);
    pthread_t t[3];
    for (int i = 0; i < 3; i++)
        pthread_create(&t[i], NULL, stress_thread, (void *)(uintptr_t)(i + 1));
    for (int i = 0; i < 20; i++) {
        CHECK_EQ(store_check(g_st), 0);
        struct timespec d = {0, 5000000};
        nanosleep(&d, NULL);
    }
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    disk_test_settle(g_st);
    CHECK_EQ(store_check(g_st), 0);
    tide_stats s = stats(g_st);
    CHECK(s.disk_writes > 0 && s.disk_promotions > 0);
    CHECK_EQ(s.disk_checksum_errors, 0);
    store_destroy(g_st);
}

TEST(mem_disk_url_options) {
    char url[600];
    tide_store *s;
    snprintf(url, sizeof(url), "mem://?capacity=1MiB&disk_dir=%s&disk_capacity=16MiB", disk_dir());
    CHECK_MSG(tide_open(url, &s) == 0, "%s", tide_errmsg(NULL));
    static uint8_t val[VAL], back[VAL];
    for (int i = 0; i < 40; i++) {
        char k[32];
        key_of(k, sizeof(k), i);
        memset(val, i, sizeof(val));
        CHECK_EQ(tide_put(s, k, strlen(k), val, sizeof(val)), 0);
    }
    tide_key keys[40];
    char kb[40][32];
    for (int i = 0; i < 40; i++) {
        key_of(kb[i], sizeof(kb[i]), i);
        keys[i] = (tide_key){kb[i], strlen(kb[i])};
    }
    CHECK_EQ(tide_match_prefix(s, keys, 40), 40); /* disk objects count as present */
    for (int i = 0; i < 40; i++) {
        size_t vlen;
        CHECK_EQ(tide_get(s, kb[i], strlen(kb[i]), back, sizeof(back), &vlen), 0);
        memset(val, i, sizeof(val));
        CHECK(vlen == VAL && memcmp(val, back, VAL) == 0);
    }
    tide_stats st;
    CHECK_EQ(tide_stats_get(s, &st, sizeof(st)), 0);
    CHECK_EQ(st.disk_capacity_bytes, 16 * MIB);
    CHECK(st.disk_promotions > 0);
    tide_close(s);

    CHECK_EQ(tide_open("mem://?disk_capacity=1GiB", &s), TIDE_EOPTION);
    snprintf(url, sizeof(url), "mem://?disk_dir=%s", disk_dir());
    CHECK_EQ(tide_open(url, &s), TIDE_EOPTION);
    CHECK_CONTAINS(tide_errmsg(NULL), "disk_capacity");
    snprintf(url, sizeof(url), "mem://?disk_dir=%s&disk_capacity=1GiB&disk_io=aio", disk_dir());
    CHECK_EQ(tide_open(url, &s), TIDE_EOPTION);
    CHECK_CONTAINS(tide_errmsg(NULL), "disk_io=aio");
    CHECK_EQ(tide_open("mem://?disk_dir=/proc/no/such/dir&disk_capacity=1GiB", &s) < 0, 1);
    CHECK_CONTAINS(tide_errmsg(NULL), "/proc/no/such/dir");
}

/* The tier's files hold KV blocks: the directory tide makes is 0700, segments are 0600,
 * and a segment found with wider bits (left by an older tide) is narrowed at open. The
 * umask is 0 here, so these are exactly the modes tide asks for. */
TEST(store_disk_files_are_private) {
    umask(0);
    store *st = disk_test_store(disk_dir(), 1 * MIB, 16 * MIB, 1 * MIB, DISK_IO_PSYNC);
    for (int i = 0; i < 40; i++)
        CHECK_EQ(put_i(st, i, VAL), 0);
    disk_test_settle(st);
    store_destroy(st);
    struct stat sb;
    CHECK_EQ(stat(disk_dir(), &sb), 0);
    CHECK_MSG((sb.st_mode & 07777) == 0700, "directory mode %04o", (unsigned)(sb.st_mode & 07777));
    DIR *d = opendir(disk_dir());
    CHECK(d);
    int segs = 0;
    char first[600] = "";
    for (struct dirent *de; (de = readdir(d));) {
        if (de->d_name[0] == '.') continue;
        char path[600];
        snprintf(path, sizeof(path), "%s/%s", disk_dir(), de->d_name);
        CHECK_EQ(stat(path, &sb), 0);
        CHECK_MSG((sb.st_mode & 07777) == 0600, "%s: mode %04o", de->d_name,
                  (unsigned)(sb.st_mode & 07777));
        /* no probe file left behind: segments and the secret only */
        if (!strcmp(de->d_name, "tide.secret")) continue;
        CHECK(strstr(de->d_name, ".seg") != NULL);
        if (!first[0]) snprintf(first, sizeof(first), "%s", path);
        segs++;
    }
    closedir(d);
    CHECK(segs >= 2);
    /* A segment made world-readable by someone else is narrowed when the tier opens. */
    CHECK_EQ(chmod(first, 0644), 0);
    st = disk_test_store(disk_dir(), 1 * MIB, 16 * MIB, 1 * MIB, DISK_IO_PSYNC);
    CHECK_EQ(stat(first, &sb), 0);
    CHECK_MSG((sb.st_mode & 07777) == 0600, "after reopen: mode %04o",
              (unsigned)(sb.st_mode & 07777));
    CHECK(get_i(st, 0, VAL) == 1); /* and still read */
    store_destroy(st);
    /* A directory the operator made keeps its mode; what tide writes in it is 0600. */
    char own[400];
    snprintf(own, sizeof(own), "%s/own", test_tmpdir());
    CHECK_EQ(mkdir(own, 0750), 0);
    store_config c = {.capacity = 1 * MIB,
                      .disk_dir = own,
                      .disk_capacity = 16 * MIB,
                      .disk_segment = 1 * MIB,
                      .disk_io = DISK_IO_PSYNC};
    char err[512];
    CHECK_MSG(store_create(&c, &st, err, sizeof(err)) == 0, "%s", err);
    for (int i = 0; i < 40; i++)
        CHECK_EQ(put_i(st, i, VAL), 0);
    disk_test_settle(st);
    store_destroy(st);
    CHECK_EQ(stat(own, &sb), 0);
    CHECK_EQ(sb.st_mode & 07777, 0750);
    d = opendir(own);
    CHECK(d);
    for (struct dirent *de; (de = readdir(d));) {
        if (de->d_name[0] == '.') continue;
        char path[700];
        snprintf(path, sizeof(path), "%s/%s", own, de->d_name);
        CHECK_EQ(stat(path, &sb), 0);
        CHECK_EQ(sb.st_mode & 07777, 0600);
    }
    closedir(d);
}

/* A disk_dir that is not a directory, or in which no file can be made, is refused at open
 * with a message saying which, rather than failing every spill later. */
TEST(mem_disk_dir_not_a_writable_directory_refused) {
    char file[400], url[600];
    snprintf(file, sizeof(file), "%s/plain-file", test_tmpdir());
    FILE *f = fopen(file, "w");
    CHECK(f != NULL);
    fputs("x", f);
    fclose(f);
    tide_store *s = NULL;
    snprintf(url, sizeof(url), "mem://?disk_dir=%s&disk_capacity=16MiB", file);
    CHECK_EQ(tide_open(url, &s), -ENOTDIR);
    CHECK_CONTAINS(tide_errmsg(NULL), "is not a directory");
    CHECK_CONTAINS(tide_errmsg(NULL), file);
    /* sysfs takes no new files, not even from root. */
    CHECK(tide_open("mem://?disk_dir=/sys&disk_capacity=16MiB", &s) < 0);
    CHECK_CONTAINS(tide_errmsg(NULL), "disk_dir /sys is not writable");
    /* A directory without write permission (root passes permission checks: skipped). */
    char ro[400];
    snprintf(ro, sizeof(ro), "%s/read-only", test_tmpdir());
    CHECK_EQ(mkdir(ro, 0500), 0);
    snprintf(url, sizeof(url), "mem://?disk_dir=%s&disk_capacity=16MiB", ro);
    if (geteuid() != 0) {
        CHECK_EQ(tide_open(url, &s), -EACCES);
        CHECK_CONTAINS(tide_errmsg(NULL), "is not writable");
    } else {
        printf("    (root: the mode-0500 directory case is skipped; /sys covers refusal)\n");
    }
    chmod(ro, 0700);
    CHECK(s == NULL);
}

TEST_T(mem_disk_backend_suite, 120) {
    char url[600];
    snprintf(url, sizeof(url), "mem://?capacity=64MiB&disk_dir=%s&disk_capacity=256MiB",
             disk_dir());
    backend_suite(url);
}

TEST(stats_disk_table_covers_the_end_of_tide_stats) {
    size_t base = offsetof(tide_stats, disk_capacity_bytes);
    for (size_t i = 0; i < stats_disk_nfields; i++)
        CHECK_EQ(stats_disk_fields[i].off, base + 8 * i);
    CHECK_EQ(base + 8 * stats_disk_nfields, sizeof(tide_stats));
    CHECK_STR(stats_disk_fields[0].name, "disk_capacity_bytes");
    CHECK_STR(stats_disk_fields[stats_disk_nfields - 1].name, "disk_queued_bytes");
    CHECK_EQ(offsetof(tide_stats, reserved), 14 * 8); /* the older fields did not move */
}
