/*
 * test_store_disk_attack.c — the SSD tier against forged records and damaged files (issue
 * 25): a client's value full of record headers for another key, made the way format 1
 * computed its checksums (xxh3 seeded by segment and offset), combined with torn tails, a
 * flipped bit in every byte of the victim's header and random flips anywhere in the file,
 * each followed by a restart (disk_open's scan); the secret's file checks; segments of
 * format 1 or written under another secret; removes acknowledged on a full disk that must
 * stay removed across a restart, with counters and the log's drop count telling the truth;
 * and the index held to its budget.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "common/checksum.h"
#include "common/endian.h"
#include "disk_util.h"
#include "harness.h"
#include "store/disk.h"
#include "store/store.h"
#include "store/store_int.h"
#include "tide.h"

#define KIB 1024ull
#define MIB (1024ull * 1024ull)

/* ---- a disk opened directly, its files kept and restored between trials ------------- */

static char g_dir[400];

static disk *open_disk(uint64_t cap, uint64_t seg, char *err, size_t errlen, int *rc) {
    disk_config c = {.dir = g_dir, .capacity = cap, .segment_size = seg, .io = DISK_IO_PSYNC};
    disk *d = NULL;
    *rc = disk_open(&c, &d, err, errlen);
    return d;
}

static disk *must_open(void) {
    char err[512];
    int rc;
    disk *d = open_disk(64 * MIB, 4 * MIB, err, sizeof(err), &rc);
    CHECK_MSG(rc == 0, "disk_open: %d %s", rc, err);
    return d;
}

static void put_objs(disk *d, const char *const *keys, uint8_t *const *vals, const uint64_t *lens,
                     size_t n) {
    disk_item it[8];
    CHECK(n <= 8);
    for (size_t i = 0; i < n; i++)
        it[i] = (disk_item){.key = (const uint8_t *)keys[i],
                            .klen = (uint16_t)strlen(keys[i]),
                            .val = vals[i],
                            .vlen = lens[i],
                            .sum = checksum_buf(vals[i], lens[i])};
    char err[512];
    CHECK_MSG(disk_write(d, it, n, err, sizeof(err)) == 0, "disk_write: %s", err);
}

/* Read key: 1 with bytes equal to want[0..wlen), 0 on a miss. Any other bytes fail. */
static int read_is(disk *d, const char *key, const uint8_t *want, uint64_t wlen) {
    disk_loc loc;
    if (disk_find(d, key, strlen(key), &loc) != 0) return 0;
    uint8_t *buf = malloc(loc.vlen ? loc.vlen : 1);
    CHECK(buf);
    int rc = disk_read(d, &loc, key, strlen(key), buf);
    int ok = 0;
    if (rc == 0) {
        CHECK_MSG(loc.vlen == wlen && memcmp(buf, want, wlen) == 0,
                  "key %s served %llu bytes that its writer did not write", key,
                  (unsigned long long)loc.vlen);
        ok = 1;
    } else {
        CHECK_EQ(rc, TIDE_ECHECKSUM);
    }
    disk_loc_put(d, &loc);
    free(buf);
    return ok;
}

typedef struct saved {
    char name[300];
    uint8_t *bytes;
    size_t len;
} saved;

static saved g_files[8];
static int g_nfiles;

static void save_segments(void) {
    DIR *dp = opendir(g_dir);
    CHECK(dp);
    g_nfiles = 0;
    for (struct dirent *de; (de = readdir(dp));) {
        if (!strstr(de->d_name, ".seg")) continue;
        CHECK(g_nfiles < 8);
        saved *f = &g_files[g_nfiles++];
        snprintf(f->name, sizeof(f->name), "%s", de->d_name);
        char path[1024];
        snprintf(path, sizeof(path), "%s/%s", g_dir, de->d_name);
        int fd = open(path, O_RDONLY);
        CHECK(fd >= 0);
        struct stat sb;
        CHECK_EQ(fstat(fd, &sb), 0);
        f->len = (size_t)sb.st_size;
        f->bytes = malloc(f->len);
        CHECK(f->bytes);
        CHECK_EQ(read(fd, f->bytes, f->len), (ssize_t)f->len);
        close(fd);
    }
    closedir(dp);
}

/* Put back the saved segments byte for byte; everything else but the secret goes. */
static void restore_segments(void) {
    DIR *dp = opendir(g_dir);
    CHECK(dp);
    for (struct dirent *de; (de = readdir(dp));) {
        if (de->d_name[0] == '.' || !strcmp(de->d_name, "tide.secret")) continue;
        char path[1024];
        snprintf(path, sizeof(path), "%s/%s", g_dir, de->d_name);
        CHECK_EQ(unlink(path), 0);
    }
    closedir(dp);
    for (int i = 0; i < g_nfiles; i++) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", g_dir, g_files[i].name);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        CHECK(fd >= 0);
        CHECK_EQ(write(fd, g_files[i].bytes, g_files[i].len), (ssize_t)g_files[i].len);
        close(fd);
    }
}

static void segment_path(int i, char *out, size_t len) {
    snprintf(out, len, "%s/%s", g_dir, g_files[i].name);
}

/*
 * The attack of issue 25.1. Key "target-key-0001" is stored genuinely first. Then a client
 * stores "victim-key-0001|" whose 64 KiB value is a run of forged records for the target,
 * each made for the file offset it would have in segment 1 (the segment and the offsets
 * are predictable), with a value of the attacker's bytes and its right checksum. Then the
 * victim's record is damaged: cut at many points (torn tails), one bit flipped in each of
 * its header and key bytes, or a bit flipped anywhere at random in the file, and the disk
 * is reopened each time. Whatever survives, the target is its genuine bytes or a miss,
 * never the forged ones, and no key serves bytes its writer did not write.
 */
TEST_T(store_disk_forged_records_inside_values_never_adopted, 120) {
    snprintf(g_dir, sizeof(g_dir), "%s/forge", test_tmpdir());
    const char *tkey = "target-key-0001", *vkey = "victim-key-0001|", *akey = "after-key-00001";
    static uint8_t genuine[4 * KIB], evil[4096], value[64 * KIB], after[8 * KIB];
    for (size_t i = 0; i < sizeof(genuine); i++)
        genuine[i] = (uint8_t)(i * 7 + 1);
    for (size_t i = 0; i < sizeof(after); i++)
        after[i] = (uint8_t)(i * 13 + 5);
    memset(evil, 'X', sizeof(evil));
    memcpy(evil, "forged bytes", 12);
    /* Layout of segment 1: header 64, target record, then the victim's record. */
    uint64_t target_rec = 64, victim_rec = target_rec + disk_record_size(15, sizeof(genuine));
    uint64_t value_at = victim_rec + 32 + 16; /* 8-aligned: a 16-byte key */
    size_t forged = 0;
    for (size_t p = 0; p + 32 + 15 + 64 <= sizeof(value);) {
        p += disk_test_forge_v1(value + p, 1, value_at + p, tkey, evil, 64);
        forged++;
    }
    CHECK(forged > 500);

    disk *d = must_open();
    const char *k1[] = {tkey};
    uint8_t *v1[] = {genuine};
    uint64_t l1[] = {sizeof(genuine)};
    put_objs(d, k1, v1, l1, 1);
    const char *k2[] = {vkey, akey};
    uint8_t *v2[] = {value, after};
    uint64_t l2[] = {sizeof(value), sizeof(after)};
    put_objs(d, k2, v2, l2, 2);
    CHECK_EQ(read_is(d, vkey, value, sizeof(value)), 1);
    disk_close(d);
    save_segments();
    CHECK_EQ(g_nfiles, 1);
    char seg[1024];
    segment_path(0, seg, sizeof(seg));
    /* The layout the forger assumed is the real one: the victim's key is where it says. */
    CHECK(memcmp(g_files[0].bytes + victim_rec + 32, vkey, 16) == 0);

    /* Intact, every key reads back as written. */
    d = must_open();
    CHECK_EQ(read_is(d, tkey, genuine, sizeof(genuine)), 1);
    CHECK_EQ(read_is(d, vkey, value, sizeof(value)), 1);
    CHECK_EQ(read_is(d, akey, after, sizeof(after)), 1);
    disk_close(d);

    int trials = 0, torn_seen = 0;
    /* Torn tails: a crash while the victim's record was being written. */
    for (uint64_t cut = victim_rec + 8; cut < value_at + sizeof(value); cut += 4093) {
        restore_segments();
        CHECK_EQ(truncate(seg, (off_t)cut), 0);
        d = must_open();
        tide_stats s = {0};
        disk_stats(d, &s);
        torn_seen += s.disk_torn_records > 0;
        CHECK_EQ(read_is(d, tkey, genuine, sizeof(genuine)), 1);
        CHECK_EQ(read_is(d, vkey, value, sizeof(value)), 0);
        CHECK_EQ(read_is(d, akey, after, sizeof(after)), 0);
        CHECK_EQ(s.disk_objects, 1);
        disk_close(d);
        trials++;
    }
    /* One flipped bit in each byte of the victim's header and key. */
    for (uint64_t at = victim_rec; at < victim_rec + 48; at++) {
        restore_segments();
        int fd = open(seg, O_RDWR);
        CHECK(fd >= 0);
        uint8_t b;
        CHECK_EQ(pread(fd, &b, 1, (off_t)at), 1);
        b ^= (uint8_t)(1u << (at % 8));
        CHECK_EQ(pwrite(fd, &b, 1, (off_t)at), 1);
        close(fd);
        d = must_open();
        tide_stats s = {0};
        disk_stats(d, &s);
        torn_seen += s.disk_torn_records > 0;
        CHECK_EQ(read_is(d, tkey, genuine, sizeof(genuine)), 1);
        CHECK_EQ(read_is(d, vkey, value, sizeof(value)), 0);
        read_is(d, akey, after, sizeof(after));
        disk_close(d);
        trials++;
    }
    /* Random single-bit flips anywhere in the file, header included (fixed seed). */
    srand(25);
    for (int t = 0; t < 150; t++) {
        restore_segments();
        uint64_t at = (uint64_t)rand() % g_files[0].len;
        int fd = open(seg, O_RDWR);
        CHECK(fd >= 0);
        uint8_t b;
        CHECK_EQ(pread(fd, &b, 1, (off_t)at), 1);
        b ^= (uint8_t)(1u << (rand() % 8));
        CHECK_EQ(pwrite(fd, &b, 1, (off_t)at), 1);
        close(fd);
        d = must_open();
        int tk = read_is(d, tkey, genuine, sizeof(genuine));
        read_is(d, vkey, value, sizeof(value));
        read_is(d, akey, after, sizeof(after));
        if (at >= victim_rec) CHECK_EQ(tk, 1); /* damage after the target never costs it */
        disk_close(d);
        trials++;
    }
    CHECK(torn_seen >= trials - 150);
    for (int i = 0; i < g_nfiles; i++)
        free(g_files[i].bytes);
}

static int count_files(const char *dir, const char *suffix);

/* A forged tombstone for key as format 1 framed it, claiming file offset off of seq. */
static size_t forge_tomb(uint8_t *p, uint64_t seq, uint64_t off, const char *key) {
    size_t klen = strlen(key);
    uint8_t hb[24 + 64];
    memset(p, 0, 32);
    le_wrn(p, 0x43455254u, 4);
    p[4] = 2;
    le_wrn(p + 6, klen, 2);
    memcpy(hb, p, 24);
    memcpy(hb + 24, key, klen);
    le_wrn(p + 24, XXH3_64bits_withSeed(hb, 24 + klen, disk_test_forge_seed(seq, off)), 8);
    memcpy(p + 32, key, klen);
    size_t sz = (32 + klen + 7) & ~(size_t)7;
    memset(p + 32 + klen, 0, sz - 32 - klen);
    return sz;
}

static void write_pending(disk *d, uint64_t ticket) {
    char err[512];
    CHECK_EQ(disk_write(d, NULL, 0, err, sizeof(err)), 0);
    CHECK_MSG(err[0] == '\0', "%s", err);
    CHECK_EQ(disk_ticket(d, ticket), 0);
}

static void flip_at(const char *path, uint64_t at) {
    int fd = open(path, O_RDWR);
    CHECK(fd >= 0);
    uint8_t b;
    CHECK_EQ(pread(fd, &b, 1, (off_t)at), 1);
    b ^= 0x10;
    CHECK_EQ(pwrite(fd, &b, 1, (off_t)at), 1);
    close(fd);
}

/*
 * A damaged record ends its segment's walk, but a remove or clear recorded after it still
 * holds across the restart: the damaged tail is searched for removals only, each accepted
 * only with its keyed checksum at its offset. A client's value full of forged tombstones
 * (format-1 checksums, for every offset) removes nothing.
 */
TEST(store_disk_damage_never_undoes_a_remove) {
    static uint8_t v[2000], trap[8192];
    memset(v, 0x42, sizeof(v));
    for (int clear = 0; clear < 2; clear++) {
        snprintf(g_dir, sizeof(g_dir), "%s/rm%d", test_tmpdir(), clear);
        disk *d = must_open();
        /* Layout: [T 2000][A][B][C][D = forged tombstones for T][tombstone A or clear][E] */
        uint64_t rec = disk_record_size(1, sizeof(v));
        uint64_t d_val = 64 + 4 * rec + 32 + 1; /* key "D": one byte; forged from the next 8 */
        memset(trap, 0, sizeof(trap));
        for (size_t p = (8 - d_val % 8) % 8; p + 40 <= sizeof(trap);)
            p += forge_tomb(trap + p, 1, d_val + p, "T");
        const char *k1[] = {"T", "A", "B", "C", "D"};
        uint8_t *v1[] = {v, v, v, v, trap};
        uint64_t l1[] = {sizeof(v), sizeof(v), sizeof(v), sizeof(v), sizeof(trap)};
        put_objs(d, k1, v1, l1, 5);
        uint64_t t = 0;
        if (clear) {
            CHECK_EQ(disk_clear(d, &t), 0);
        } else {
            CHECK_EQ(disk_remove(d, "A", 1, &t), 0);
            CHECK_EQ(read_is(d, "A", v, sizeof(v)), 1); /* until the tombstone is down */
        }
        write_pending(d, t);
        CHECK_EQ(read_is(d, "A", v, sizeof(v)), 0);
        const char *k2[] = {"E"};
        uint8_t *v2[] = {v};
        uint64_t l2[] = {sizeof(v)};
        put_objs(d, k2, v2, l2, 1);
        disk_close(d);
        save_segments();
        CHECK_EQ(g_nfiles, 1);
        char seg[1024];
        segment_path(0, seg, sizeof(seg));
        CHECK(memcmp(g_files[0].bytes + 64 + 4 * rec + 32, "D", 1) == 0);
        flip_at(seg, 64 + 2 * rec + 9); /* B's value length */
        d = must_open();
        CHECK_EQ(read_is(d, "A", v, sizeof(v)), 0);
        CHECK_EQ(read_is(d, "T", v, sizeof(v)), !clear); /* no forged tombstone taken */
        CHECK_EQ(read_is(d, "B", v, sizeof(v)), 0);
        CHECK_EQ(read_is(d, "E", v, sizeof(v)), 0);
        char desc[1024];
        disk_describe(d, desc, sizeof(desc));
        CHECK_CONTAINS(desc, "1 damaged or torn records");
        CHECK_CONTAINS(desc, "1 removes and clears in them kept");
        disk_close(d);
        for (int i = 0; i < g_nfiles; i++)
            free(g_files[i].bytes);
    }
}

/* A segment whose own header is damaged cannot be read, nor its removes: the segments
 * before it go too, so that a key removed there stays removed; later segments stay. */
TEST(store_disk_damaged_segment_header_never_undoes_a_remove) {
    snprintf(g_dir, sizeof(g_dir), "%s/seghdr", test_tmpdir());
    static uint8_t v[2000];
    memset(v, 0x24, sizeof(v));
    char err[512];
    int rc;
    /* 4 KiB segments: one 2000-byte record each, the tombstone joins B's. */
    disk *d = open_disk(64 * MIB, 4096, err, sizeof(err), &rc);
    CHECK_MSG(rc == 0, "%s", err);
    const char *ka[] = {"A"}, *kb[] = {"B"}, *kc[] = {"C"};
    uint8_t *vs[] = {v};
    uint64_t l[] = {sizeof(v)};
    put_objs(d, ka, vs, l, 1);
    put_objs(d, kb, vs, l, 1);
    uint64_t t = 0;
    CHECK_EQ(disk_remove(d, "A", 1, &t), 0);
    write_pending(d, t);
    put_objs(d, kc, vs, l, 1);
    disk_close(d);
    char seg2[1024];
    snprintf(seg2, sizeof(seg2), "%s/0000000000000002.seg", g_dir);
    flip_at(seg2, 40); /* a byte of its nonce */
    d = open_disk(64 * MIB, 4096, err, sizeof(err), &rc);
    CHECK_MSG(rc == 0, "%s", err);
    CHECK_EQ(read_is(d, "A", v, sizeof(v)), 0);
    CHECK_EQ(read_is(d, "B", v, sizeof(v)), 0);
    CHECK_EQ(read_is(d, "C", v, sizeof(v)), 1);
    char desc[1024];
    disk_describe(d, desc, sizeof(desc));
    CHECK_CONTAINS(desc, "1 unreadable files set aside as *.bad (1 older segments dropped");
    disk_close(d);
    CHECK_EQ(count_files(g_dir, ".bad"), 1);
}

static int count_files(const char *dir, const char *suffix) {
    DIR *dp = opendir(dir);
    CHECK(dp);
    int n = 0;
    for (struct dirent *de; (de = readdir(dp));) {
        size_t l = strlen(de->d_name), sl = strlen(suffix);
        n += l > sl && !strcmp(de->d_name + l - sl, suffix);
    }
    closedir(dp);
    return n;
}

/* The secret: made 0600 and 32 bytes at first use; a wider mode, another size or a link
 * is refused with a message that says what is wrong; the same secret opens the same
 * records again. */
TEST(store_disk_secret_file_is_private_and_checked) {
    snprintf(g_dir, sizeof(g_dir), "%s/secret", test_tmpdir());
    umask(0);
    disk *d = must_open();
    const char *k[] = {"a-key"};
    static uint8_t v[1000];
    memset(v, 3, sizeof(v));
    uint8_t *vs[] = {v};
    uint64_t l[] = {sizeof(v)};
    put_objs(d, k, vs, l, 1);
    disk_close(d);
    char path[1024];
    snprintf(path, sizeof(path), "%s/tide.secret", g_dir);
    struct stat sb;
    CHECK_EQ(stat(path, &sb), 0);
    CHECK_EQ(sb.st_mode & 07777, 0600);
    CHECK_EQ(sb.st_size, 32);
    d = must_open();
    CHECK_EQ(read_is(d, "a-key", v, sizeof(v)), 1);
    disk_close(d);

    char err[512];
    int rc;
    CHECK_EQ(chmod(path, 0640), 0);
    d = open_disk(64 * MIB, 4 * MIB, err, sizeof(err), &rc);
    CHECK(!d);
    CHECK_EQ(rc, TIDE_ECONFIG);
    CHECK_CONTAINS(err, "tide.secret");
    CHECK_CONTAINS(err, "0640");
    CHECK_EQ(chmod(path, 0600), 0);

    uint8_t sec[32];
    int fd = open(path, O_RDWR);
    CHECK(fd >= 0);
    CHECK_EQ(read(fd, sec, 32), 32);
    CHECK_EQ(ftruncate(fd, 31), 0);
    d = open_disk(64 * MIB, 4 * MIB, err, sizeof(err), &rc);
    CHECK(!d);
    CHECK_EQ(rc, TIDE_ECONFIG);
    CHECK_CONTAINS(err, "31 bytes");
    CHECK_EQ(pwrite(fd, sec, 32, 0), 32);
    close(fd);

    char moved[600];
    snprintf(moved, sizeof(moved), "%s/elsewhere", test_tmpdir());
    CHECK_EQ(rename(path, moved), 0);
    CHECK_EQ(symlink(moved, path), 0);
    d = open_disk(64 * MIB, 4 * MIB, err, sizeof(err), &rc);
    CHECK(!d);
    CHECK_CONTAINS(err, "tide.secret");
    CHECK_EQ(unlink(path), 0);
    CHECK_EQ(rename(moved, path), 0);

    d = must_open(); /* the same secret again: the record is still its writer's */
    CHECK_EQ(read_is(d, "a-key", v, sizeof(v)), 1);
    disk_close(d);
}

/* Segments written under another store's secret, and segments of format 1 (checksums
 * anyone can compute), are deleted unread, counted in the open's description. */
TEST(store_disk_foreign_and_format1_segments_dropped_unread) {
    char a[400], b[400];
    snprintf(a, sizeof(a), "%s/a", test_tmpdir());
    snprintf(b, sizeof(b), "%s/b", test_tmpdir());
    snprintf(g_dir, sizeof(g_dir), "%s", a);
    disk *d = must_open();
    const char *k[] = {"copied-key"};
    static uint8_t v[5000];
    memset(v, 9, sizeof(v));
    uint8_t *vs[] = {v};
    uint64_t l[] = {sizeof(v)};
    put_objs(d, k, vs, l, 1);
    disk_close(d);
    save_segments();
    CHECK_EQ(g_nfiles, 1);
    snprintf(g_dir, sizeof(g_dir), "%s", b);
    d = must_open(); /* b gets its own secret */
    disk_close(d);
    restore_segments(); /* a's segment, byte for byte, in b */
    d = must_open();
    tide_stats s = {0};
    disk_stats(d, &s);
    CHECK_EQ(s.disk_objects, 0);
    CHECK_EQ(read_is(d, "copied-key", v, sizeof(v)), 0);
    char desc[1024];
    disk_describe(d, desc, sizeof(desc));
    CHECK_CONTAINS(desc, "1 written under another secret dropped");
    disk_close(d);
    CHECK_EQ(count_files(b, ".seg"), 0);

    /* A format-1 segment as tide wrote it before: header version 1, xxh3 checksums. */
    uint8_t seg[64 + 64 + 64] = {0};
    memcpy(seg, "TIDESEG1", 8);
    le_wrn(seg + 8, 1, 4);
    le_wrn(seg + 12, 64, 4);
    le_wrn(seg + 16, 7, 8);
    le_wrn(seg + 56, XXH3_64bits(seg, 56), 8);
    static const uint8_t old_val[8] = "oldbytes";
    disk_test_forge_v1(seg + 64, 7, 64, "old-format-key", old_val, 8);
    char path[1024];
    snprintf(path, sizeof(path), "%s/0000000000000007.seg", b);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    CHECK(fd >= 0);
    CHECK_EQ(write(fd, seg, 64 + disk_record_size(14, 8)), (ssize_t)(64 + disk_record_size(14, 8)));
    close(fd);
    d = must_open();
    CHECK_EQ(read_is(d, "old-format-key", old_val, 8), 0);
    disk_describe(d, desc, sizeof(desc));
    CHECK_CONTAINS(desc, "1 segments of format 1");
    disk_close(d);
    CHECK_EQ(count_files(b, ".seg"), 0);
    for (int i = 0; i < g_nfiles; i++)
        free(g_files[i].bytes);
}

/* ---- through the store: removes on a full disk, the drop count, the index budget ----- */

static void skey(char *buf, size_t len, int i) {
    snprintf(buf, len, "full-%06d|", i);
}

static int sput(store *st, int i, uint64_t vlen) {
    char k[32];
    skey(k, sizeof(k), i);
    store_ref r;
    int rc = store_reserve(st, k, strlen(k), vlen, 0, &r);
    if (rc != 0) return rc;
    uint8_t *p = store_base(st) + r.offset;
    for (uint64_t j = 0; j < vlen; j++)
        p[j] = (uint8_t)(i * 31 + j);
    CHECK_EQ(store_commit(st, r.id, checksum_buf(p, vlen)), 0);
    return 0;
}

/* 1 with the right bytes, 0 on a miss. */
static int sget(store *st, int i, uint64_t vlen) {
    char k[32];
    skey(k, sizeof(k), i);
    store_ref r;
    int rc = store_pin(st, k, strlen(k), 0, &r);
    if (rc == TIDE_ENOTFOUND) return 0;
    CHECK_EQ(rc, 0);
    CHECK_EQ(r.len, vlen);
    const uint8_t *p = store_base(st) + r.offset;
    for (uint64_t j = 0; j < vlen; j++)
        CHECK_MSG(p[j] == (uint8_t)(i * 31 + j), "key %d byte %llu wrong", i,
                  (unsigned long long)j);
    CHECK_EQ(store_unpin(st, r.id), 0);
    return 1;
}

static int on_disk(store *st, int i) {
    char k[32];
    skey(k, sizeof(k), i);
    return disk_contains(st->dk, k, strlen(k));
}

/* The newest segment file's size. */
static off_t newest_segment_size(void) {
    DIR *dp = opendir(g_dir);
    CHECK(dp);
    char best[300] = "";
    for (struct dirent *de; (de = readdir(dp));)
        if (strlen(de->d_name) == 20 && strstr(de->d_name, ".seg") && strcmp(de->d_name, best) > 0)
            snprintf(best, sizeof(best), "%s", de->d_name);
    closedir(dp);
    CHECK(best[0]);
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", g_dir, best);
    struct stat sb;
    CHECK_EQ(stat(path, &sb), 0);
    return sb.st_size;
}

/* Make the disk refuse every append from now on: on the tmpfs, a file takes every free
 * page; under the file size limit, the limit comes down to the newest segment's size. */
static void make_full(int use_tmpfs) {
    if (use_tmpfs) {
        char path[1024];
        snprintf(path, sizeof(path), "%s/filler", g_dir);
        int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0600);
        CHECK(fd >= 0);
        static uint8_t page[4096];
        for (int i = 0; i < 4096 && write(fd, page, sizeof(page)) == (ssize_t)sizeof(page); i++)
            ;
        close(fd);
    } else {
        struct rlimit rl;
        CHECK_EQ(getrlimit(RLIMIT_FSIZE, &rl), 0);
        rl.rlim_cur = (rlim_t)newest_segment_size();
        CHECK_EQ(setrlimit(RLIMIT_FSIZE, &rl), 0);
    }
}

static void make_room(int use_tmpfs, rlim_t was) {
    if (use_tmpfs) {
        char path[1024];
        snprintf(path, sizeof(path), "%s/filler", g_dir);
        CHECK_EQ(unlink(path), 0);
    } else {
        struct rlimit rl;
        CHECK_EQ(getrlimit(RLIMIT_FSIZE, &rl), 0);
        rl.rlim_cur = was;
        CHECK_EQ(setrlimit(RLIMIT_FSIZE, &rl), 0);
    }
}

/*
 * Spill until the disk refuses writes, make it refuse every append, then remove keys that
 * are only on disk, and later clear: every acknowledged remove and the clear must hold
 * across a restart, and the disk's error counter must count the refusals. The tmpfs case
 * uses 4 KiB segments (one 16 KiB record each), so that a record needs a new segment file,
 * the path where a record "cannot be planned", once the first tombstones have filled what
 * the last page of the newest file had left; so it removes up to 200 keys.
 */
static void removes_survive_a_full_disk(int use_tmpfs) {
    const uint64_t val = use_tmpfs ? 16 * KIB : 64 * KIB, seg = use_tmpfs ? 4096 : 8 * MIB;
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl;
    CHECK_EQ(getrlimit(RLIMIT_FSIZE, &rl), 0);
    rlim_t was = rl.rlim_cur;
    if (!use_tmpfs) {
        rl.rlim_cur = 1 * MIB;
        CHECK_EQ(setrlimit(RLIMIT_FSIZE, &rl), 0);
    }
    disk_test_log[0] = '\0';
    store *st = disk_test_store(g_dir, 1 * MIB, 64 * MIB, seg, DISK_IO_AUTO);
    int n = use_tmpfs ? 400 : 64, most = use_tmpfs ? 200 : 29;
    for (int i = 0; i < n; i++)
        CHECK_EQ(sput(st, i, val), 0);
    disk_test_settle(st);
    make_full(use_tmpfs);
    tide_stats s;
    store_stats(st, &s);
    CHECK(s.disk_dropped > 0);
    uint64_t errors = s.disk_errors;
    int removed[256], nrem = 0, refused = 0;
    for (int i = 0; i < n && nrem < most; i++) {
        if (!on_disk(st, i)) continue;
        char k[32];
        skey(k, sizeof(k), i);
        int rc = store_remove(st, k, strlen(k));
        CHECK_MSG(rc == 0 || rc < 0, "remove: %d", rc);
        if (rc == 0) removed[nrem++] = i;
        refused += rc != 0;
    }
    CHECK_MSG(nrem >= 5, "only %d keys were on disk to remove (%d refused)", nrem, refused);
    for (int j = 0; j < nrem; j++)
        CHECK_EQ(sget(st, removed[j], val), 0);
    disk_test_settle(st);
    store_stats(st, &s);
    CHECK_MSG(s.disk_errors > errors, "disk_errors stayed %llu while appends were refused",
              (unsigned long long)s.disk_errors);
    store_destroy(st);
    make_room(use_tmpfs, was);
    st = disk_test_store(g_dir, 1 * MIB, 64 * MIB, seg, DISK_IO_AUTO);
    int back = 0;
    for (int j = 0; j < nrem; j++)
        back += sget(st, removed[j], val);
    printf("    %d removes acknowledged on the full disk, %d refused, %d came back after the "
           "restart\n",
           nrem, refused, back);
    CHECK_MSG(back == 0, "%d of %d removed keys came back after the restart", back, nrem);
    /* Fill again, refuse appends, clear: nothing of it comes back either. */
    if (!use_tmpfs) {
        rl.rlim_cur = 1 * MIB;
        CHECK_EQ(setrlimit(RLIMIT_FSIZE, &rl), 0);
    }
    for (int i = 1000; i < 1000 + n; i++)
        CHECK_EQ(sput(st, i, val), 0);
    disk_test_settle(st);
    make_full(use_tmpfs);
    store_clear(st);
    disk_test_settle(st);
    store_destroy(st);
    make_room(use_tmpfs, was);
    st = disk_test_store(g_dir, 1 * MIB, 64 * MIB, seg, DISK_IO_AUTO);
    back = 0;
    for (int i = 1000; i < 1000 + n; i++)
        back += sget(st, i, val);
    CHECK_MSG(back == 0, "%d cleared keys came back after the restart", back);
    store_destroy(st);
}

TEST(store_disk_removes_on_a_file_size_limit_survive_restart) {
    snprintf(g_dir, sizeof(g_dir), "%s/fsize", test_tmpdir());
    removes_survive_a_full_disk(0);
}

/* A real full file system: a 4 MiB tmpfs mounted in a mount namespace of this test's own
 * process (it vanishes with it). Needs CAP_SYS_ADMIN; without it the test is a skip. */
TEST(store_disk_removes_on_a_full_tmpfs_survive_restart) {
    snprintf(g_dir, sizeof(g_dir), "%s/tmpfs", test_tmpdir());
    CHECK_EQ(mkdir(g_dir, 0700), 0);
    if (unshare(CLONE_NEWNS) != 0 || mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL) != 0 ||
        mount("tmpfs", g_dir, "tmpfs", 0, "size=4m,mode=0700") != 0)
        TEST_SKIP("no CAP_SYS_ADMIN: cannot mount the tmpfs (the file size limit case covers "
                  "refused writes)");
    removes_survive_a_full_disk(1);
    CHECK_EQ(umount2(g_dir, MNT_DETACH), 0);
}

/*
 * The disk turns read-only under a running store (ext4's errors=remount-ro does this): no
 * tombstone or clear record can be written and no segment file unlinked. Every remove and
 * the clear must be refused, or hold across a restart once the disk is writable again.
 * Before: the first refused remove had dropped the oldest segment from the index although
 * its file stayed, so removes of its keys and the clear counted as done with nothing on
 * disk to say so, were acknowledged, and came back at the restart.
 */
TEST_T(store_disk_removes_on_a_read_only_disk_refused_or_kept, 120) {
    snprintf(g_dir, sizeof(g_dir), "%s/rofs", test_tmpdir());
    CHECK_EQ(mkdir(g_dir, 0700), 0);
    if (unshare(CLONE_NEWNS) != 0 || mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL) != 0 ||
        mount("tmpfs", g_dir, "tmpfs", 0, "size=16m,mode=0700") != 0)
        TEST_SKIP("no CAP_SYS_ADMIN: cannot mount a tmpfs to make read-only");
    /* One 16 KiB record a 4 KiB segment: a tombstone needs a new segment file. */
    const uint64_t val = 16 * KIB, seg = 4096;
    store *st = disk_test_store(g_dir, 1 * MIB, 8 * MIB, seg, DISK_IO_AUTO);
    const int n = 300;
    for (int i = 0; i < n; i++)
        CHECK_EQ(sput(st, i, val), 0);
    disk_test_settle(st);
    /* A read-only bind mount over the directory (a remount of the tmpfs itself is refused
     * while the store holds a segment open for writing): no file can be made or unlinked. */
    CHECK_EQ(mount(g_dir, g_dir, "none", MS_BIND, NULL), 0);
    CHECK_EQ(mount("none", g_dir, "none", MS_REMOUNT | MS_BIND | MS_RDONLY, NULL), 0);
    int removed[300], nrem = 0, refused = 0;
    for (int i = 0; i < n; i++) {
        if (!on_disk(st, i)) continue;
        char k[32];
        skey(k, sizeof(k), i);
        int rc = store_remove(st, k, strlen(k));
        if (rc == 0) removed[nrem++] = i;
        refused += rc != 0;
    }
    int clear_rc = store_clear(st);
    disk_test_settle(st);
    store_destroy(st);
    CHECK_EQ(umount2(g_dir, 0), 0); /* the bind mount: writable again */
    st = disk_test_store(g_dir, 1 * MIB, 8 * MIB, seg, DISK_IO_AUTO);
    int back = 0, kept = 0;
    for (int j = 0; j < nrem; j++)
        back += sget(st, removed[j], val);
    for (int i = 0; i < n; i++)
        kept += sget(st, i, val);
    printf("    read-only disk: %d removes acknowledged, %d refused, clear %s; after the "
           "restart %d removed keys back, %d keys kept\n",
           nrem, refused, clear_rc == 0 ? "acknowledged" : "refused", back, kept);
    CHECK_MSG(refused > 0, "no remove was refused although nothing could be recorded");
    CHECK_MSG(back == 0, "%d of %d acknowledged removes came back after the restart", back, nrem);
    CHECK_MSG(clear_rc != 0 || kept == 0, "the clear was acknowledged and %d keys came back", kept);
    store_destroy(st);
    CHECK_EQ(umount2(g_dir, MNT_DETACH), 0);
}

/* Tiny objects: the index would cost more RAM than the disk holds bytes. It stays within
 * its budget (capacity / 8 by default): the oldest segments go instead. */
TEST_T(store_disk_index_stays_within_its_budget, 120) {
    snprintf(g_dir, sizeof(g_dir), "%s/budget", test_tmpdir());
    const uint64_t disk_cap = 8 * MIB, budget = disk_cap / 8;
    store *st = disk_test_store(g_dir, 1 * MIB, disk_cap, 1 * MIB, DISK_IO_AUTO);
    char key[220];
    memset(key, 'k', sizeof(key));
    uint64_t worst = 0;
    int n = 15000;
    for (int i = 0; i < n; i++) {
        snprintf(key, 24, "tiny-%09d|", i);
        key[23] = 'k';
        store_ref r;
        int rc = store_reserve(st, key, 200, 1, 0, &r);
        CHECK_EQ(rc, 0);
        uint8_t *p = store_base(st) + r.offset;
        p[0] = (uint8_t)i;
        CHECK_EQ(store_commit(st, r.id, checksum_buf(p, 1)), 0);
        if (i % 1000 == 999) {
            tide_stats ds = {0};
            disk_stats(st->dk, &ds); /* meta_bytes: the disk index alone */
            if (ds.meta_bytes > worst) worst = ds.meta_bytes;
        }
    }
    disk_test_settle(st);
    tide_stats s;
    store_stats(st, &s);
    tide_stats ds = {0};
    disk_stats(st->dk, &ds);
    printf("    %llu objects on disk in %llu bytes, index %llu bytes (worst %llu, budget %llu); "
           "%llu evicted from disk, %llu dropped unwritten, %llu disk errors\n",
           (unsigned long long)s.disk_objects, (unsigned long long)s.disk_used_bytes,
           (unsigned long long)ds.meta_bytes, (unsigned long long)worst, (unsigned long long)budget,
           (unsigned long long)s.disk_evictions, (unsigned long long)s.disk_dropped,
           (unsigned long long)s.disk_errors);
    CHECK_EQ(s.disk_errors, 0); /* the budget is not an error of the disk */
    CHECK_MSG(worst <= budget, "the disk index took %llu bytes, over its budget of %llu",
              (unsigned long long)worst, (unsigned long long)budget);
    CHECK(s.disk_objects > 1000);
    CHECK(s.disk_evictions > 0);
    /* The newest spilled objects are served; nothing is wrong. */
    int served = 0;
    for (int i = n - 1; i >= n - 3000; i--) {
        snprintf(key, 24, "tiny-%09d|", i);
        key[23] = 'k';
        store_ref r;
        int rc = store_pin(st, key, 200, 0, &r);
        if (rc == TIDE_ENOTFOUND) continue;
        CHECK_EQ(rc, 0);
        CHECK_EQ(store_base(st)[r.offset], (uint8_t)i);
        CHECK_EQ(store_unpin(st, r.id), 0);
        served++;
    }
    CHECK(served > 1000);
    store_destroy(st);
    /* Reopened, the scan keeps to the budget too. */
    st = disk_test_store(g_dir, 1 * MIB, disk_cap, 1 * MIB, DISK_IO_AUTO);
    ds = (tide_stats){0};
    disk_stats(st->dk, &ds);
    CHECK(ds.meta_bytes <= budget);
    char desc[1024];
    store_describe_disk(st, desc, sizeof(desc));
    printf("    %s\n", desc);
    store_destroy(st);
}
