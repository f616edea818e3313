/*
 * test_server_disk.c — tided with an SSD tier, for real: SIGKILL at random points while it
 * spills and every write it reported before the kill served after the restart (never a
 * wrong byte), the tier's figures in /metrics and `tide stat`, a disk that refuses writes
 * (RLIMIT_FSIZE) with the node serving from memory, a client's value full of forged record
 * headers followed by a damaged record and a restart, removes acknowledged while the disk
 * refuses appends surviving a SIGKILL, the error counter and the log's drop count, a clear
 * refused (CLEAR and FLUSHALL answer an error) when the disk turns read-only, and the flags.
 */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "common/endian.h"
#include "disk_util.h"
#include "harness.h"
#include "server_util.h"
#include "tide.h"

#define VLEN (64 * 1024)

static void key_of(char *buf, size_t len, int round, int i) {
    snprintf(buf, len, "r%d/k%05d", round, i);
}

static void fill(uint8_t *v, int round, int i) {
    for (size_t j = 0; j < VLEN; j++)
        v[j] = (uint8_t)(round * 77 + i * 131 + j * 7 + (j >> 10));
}

/* 1: the value is there with every byte right; 0: a miss. Anything else fails. */
static int get_ok(tide_store *s, int round, int i) {
    static uint8_t want[VLEN], got[VLEN];
    char k[32];
    key_of(k, sizeof(k), round, i);
    size_t vlen = 0;
    int rc = tide_get(s, k, strlen(k), got, sizeof(got), &vlen);
    if (rc == TIDE_ENOTFOUND) return 0;
    CHECK_MSG(rc == 0, "get %s: %s", k, tide_strerror(rc));
    fill(want, round, i);
    CHECK_MSG(vlen == VLEN && memcmp(want, got, VLEN) == 0, "%s: wrong bytes", k);
    return 1;
}

/* Put keys round/0 .. round/(n-1), each with its own bytes; every put must succeed. */
static void put_round(tide_store *s, int round, int n) {
    static uint8_t val[VLEN];
    for (int i = 0; i < n; i++) {
        char k[32];
        key_of(k, sizeof(k), round, i);
        fill(val, round, i);
        CHECK_EQ(tide_put(s, k, strlen(k), val, VLEN), 0);
    }
}

static tide_stats stat_of(tide_store *s) {
    tide_stats st;
    CHECK_EQ(tide_stats_get(s, &st, sizeof(st)), 0);
    return st;
}

static const char *disk_dir(void) {
    static char dir[300];
    snprintf(dir, sizeof(dir), "%s/ssd", test_tmpdir());
    return dir;
}

static void start_disk(test_server *ts, const char *cap, const char *disk_cap, const char *seg,
                       const char *level) {
    static char mport[16];
    snprintf(mport, sizeof(mport), "%d", test_free_port());
    const char *const args[] = {"--capacity",
                                cap,
                                "--disk-dir",
                                disk_dir(),
                                "--disk-capacity",
                                disk_cap,
                                "--disk-segment",
                                seg,
                                "--log-level",
                                level,
                                "--metrics-port",
                                mport,
                                NULL};
    server_start(ts, args);
}

static char *slurp(const char *path) {
    static char buf[65536];
    FILE *f = fopen(path, "r");
    CHECK(f);
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

#define ROUNDS 6
#define PER_ROUND 160

/*
 * Each round: restart tided on the same directory, check every earlier round (the writes
 * it had reported before its kill must all be served; nothing may come back wrong), then
 * put a round of objects through a 2 MiB pool — so they spill — polling the count of
 * completed disk writes, and SIGKILL it at a random put (after a random pause of up to
 * 2 ms, to land inside the writer's work). With LRU and no reads in a round, objects are
 * evicted and written in put order, so "W writes completed" means keys 0..W-1 of the round.
 * Promoted objects keep their records, so reading earlier rounds writes nothing.
 */
TEST_T(server_disk_sigkill_while_spilling_loses_no_reported_write, 180) {
    unsigned seed = (unsigned)time(NULL);
    char ctx[64];
    snprintf(ctx, sizeof(ctx), "seed %u", seed);
    test_context = ctx;
    int confirmed[ROUNDS] = {0}, put_count[ROUNDS] = {0};
    uint64_t confirmed_total = 0;
    static uint8_t val[VLEN];
    for (int r = 0; r <= ROUNDS; r++) {
        test_server ts;
        start_disk(&ts, "2MiB", "256MiB", "4MiB", "warn");
        tide_store *s;
        CHECK_MSG(tide_open(ts.url, &s) == 0, "%s", tide_errmsg(NULL));
        tide_stats st = stat_of(s);
        CHECK_MSG(st.disk_objects >= confirmed_total, "round %d: %llu on disk, %llu reported", r,
                  (unsigned long long)st.disk_objects, (unsigned long long)confirmed_total);
        for (int k = 0; k < r; k++) {
            for (int i = 0; i < put_count[k]; i++) {
                int ok = get_ok(s, k, i);
                CHECK_MSG(ok || i >= confirmed[k], "round %d key %d was reported written, lost", k,
                          i);
            }
        }
        st = stat_of(s);
        CHECK_EQ(st.disk_writes, 0);
        CHECK_EQ(st.disk_checksum_errors, 0);
        if (r == ROUNDS) {
            tide_close(s);
            CHECK_EQ(server_stop(&ts, SIGTERM), 0);
            break;
        }
        int kill_at = 40 + (int)(rand_r(&seed) % (PER_ROUND - 40));
        for (int i = 0; i <= kill_at; i++) {
            char k[32];
            key_of(k, sizeof(k), r, i);
            fill(val, r, i);
            CHECK_EQ(tide_put(s, k, strlen(k), val, VLEN), 0);
            put_count[r] = i + 1;
            if (i % 4 == 3) {
                st = stat_of(s);
                CHECK_EQ(st.disk_dropped, 0);
                CHECK_EQ(st.disk_errors, 0);
                confirmed[r] = (int)st.disk_writes;
            }
        }
        struct timespec pause = {0, (long)(rand_r(&seed) % 2000) * 1000};
        nanosleep(&pause, NULL);
        server_stop(&ts, SIGKILL);
        tide_close(s);
        CHECK(confirmed[r] > 0);
        confirmed_total += (uint64_t)confirmed[r];
        if (getenv("TIDE_TEST_VERBOSE"))
            fprintf(stderr, "round %d: %d put, %d reported written, killed\n", r, put_count[r],
                    confirmed[r]);
    }
    test_context = NULL;
}

TEST_T(server_disk_figures_in_metrics_and_stat, 60) {
    test_server ts;
    start_disk(&ts, "1MiB", "64MiB", "4MiB", "info");
    tide_store *s;
    CHECK_EQ(tide_open(ts.url, &s), 0);
    put_round(s, 0, 40);
    for (int i = 0; i < 40; i++)
        CHECK_EQ(get_ok(s, 0, i), 1);
    tide_stats st = stat_of(s);
    CHECK_EQ(st.disk_capacity_bytes, 64ull << 20);
    CHECK(st.disk_writes >= 24 && st.disk_promotions >= 24 && st.disk_objects >= 24);
    CHECK_EQ(st.misses, 0);
    tide_close(s);

    char cmd[512];
    snprintf(cmd, sizeof(cmd), "%s stat %s", test_tide_bin(), ts.url);
    FILE *p = popen(cmd, "r");
    static char out[8192];
    size_t n = fread(out, 1, sizeof(out) - 1, p);
    out[n] = '\0';
    CHECK_EQ(pclose(p), 0);
    CHECK_CONTAINS(out, "disk_promotions");
    CHECK_CONTAINS(out, "disk_capacity_bytes");
    CHECK_CONTAINS(out, "64.0 MiB");
    snprintf(cmd, sizeof(cmd), "%s stat %s --json", test_tide_bin(), ts.url);
    p = popen(cmd, "r");
    n = fread(out, 1, sizeof(out) - 1, p);
    out[n] = '\0';
    CHECK_EQ(pclose(p), 0);
    CHECK_CONTAINS(out, "\"disk_capacity_bytes\": 67108864");
    CHECK_CONTAINS(out, "\"disk_checksum_errors\": 0");

    int fd = server_connect(ts.metrics_port, 5);
    const char req[] = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
    CHECK_EQ(send(fd, req, sizeof(req) - 1, MSG_NOSIGNAL), (ssize_t)(sizeof(req) - 1));
    static char body[1 << 17];
    size_t have = 0;
    for (ssize_t r; (r = recv(fd, body + have, sizeof(body) - 1 - have, 0)) > 0;)
        have += (size_t)r;
    body[have] = '\0';
    close(fd);
    CHECK_CONTAINS(body, "# TYPE tide_disk_writes_total counter\n");
    CHECK_CONTAINS(body, "tide_disk_capacity_bytes 67108864\n");
    CHECK_CONTAINS(body, "tide_disk_checksum_errors_total 0\n");
    CHECK_CONTAINS(body, "tide_disk_promotions_total ");
    CHECK_CONTAINS(body, "tide_disk_errors_total 0\n");
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
    const char *log = slurp(ts.log);
    CHECK_CONTAINS(log, "disk tier at ");
    CHECK_CONTAINS(log, "writes through io_uring");
    CHECK_CONTAINS(log, "summary: disk ");
}

TEST_T(server_disk_refusing_writes_keeps_serving_from_memory, 60) {
    /* Files stop growing at 1 MiB (inherited by tided): its segment writes fail with EFBIG
     * the way a full disk fails with ENOSPC. */
    struct rlimit rl;
    CHECK_EQ(getrlimit(RLIMIT_FSIZE, &rl), 0);
    rl.rlim_cur = 1 << 20;
    CHECK_EQ(setrlimit(RLIMIT_FSIZE, &rl), 0);
    test_server ts;
    start_disk(&ts, "1MiB", "64MiB", "8MiB", "warn");
    tide_store *s;
    CHECK_EQ(tide_open(ts.url, &s), 0);
    static uint8_t val[VLEN];
    for (int i = 0; i < 64; i++) {
        char k[32];
        key_of(k, sizeof(k), 0, i);
        fill(val, 0, i);
        CHECK_EQ(tide_put(s, k, strlen(k), val, VLEN), 0);
        CHECK_EQ(get_ok(s, 0, i), 1);
    }
    tide_stats st = stat_of(s);
    CHECK(st.disk_errors > 0 && st.disk_dropped > 0);
    CHECK_EQ(st.objects, 16);
    tide_close(s);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
    const char *log = slurp(ts.log);
    CHECK_CONTAINS(log, "File too large");
    CHECK_CONTAINS(log, disk_dir());
    CHECK_CONTAINS(log, "keeps serving from memory");
}

TEST(server_disk_flags) {
    char cmd[700];
    snprintf(cmd, sizeof(cmd), "%s serve --disk-dir %s 2>/dev/null", test_tide_bin(), disk_dir());
    int st = system(cmd);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 2);
    snprintf(cmd, sizeof(cmd), "%s serve --disk-capacity 1GiB 2>/dev/null", test_tide_bin());
    st = system(cmd);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 2);
    snprintf(cmd, sizeof(cmd),
             "%s serve --disk-dir %s --disk-capacity 1GiB --disk-io aio 2>/dev/null",
             test_tide_bin(), disk_dir());
    st = system(cmd);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 2);
    snprintf(cmd, sizeof(cmd),
             "%s serve --port 0 --metrics-port 0 --disk-dir /proc/no/such --disk-capacity 1GiB "
             "2>&1",
             test_tide_bin());
    FILE *p = popen(cmd, "r");
    char out[1024] = {0};
    CHECK(fread(out, 1, sizeof(out) - 1, p) > 0);
    st = pclose(p);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1);
    CHECK_CONTAINS(out, "/proc/no/such");
    /* Not a directory, and not writable: refused at start, saying which (bounded by
     * `timeout`: a tided that started anyway would run on). */
    static const struct {
        const char *dir, *words;
    } bad[] = {{"/etc/passwd", "is not a directory"}, {"/sys", "is not writable"}};
    for (size_t i = 0; i < 2; i++) {
        snprintf(cmd, sizeof(cmd),
                 "timeout 5 %s serve --port 0 --metrics-port 0 --disk-dir %s "
                 "--disk-capacity 1GiB 2>&1",
                 test_tide_bin(), bad[i].dir);
        p = popen(cmd, "r");
        memset(out, 0, sizeof(out));
        CHECK(fread(out, 1, sizeof(out) - 1, p) > 0);
        st = pclose(p);
        CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 1, "%s: status %d: %s", bad[i].dir, st, out);
        CHECK_CONTAINS(out, bad[i].words);
    }
}

/* The segment file holding key (path into out) and the offset of its record; 0 if none. */
static int find_key(const char *key, char *out, size_t outlen, uint64_t *off) {
    DIR *d = opendir(disk_dir());
    CHECK(d);
    static uint8_t buf[8 << 20];
    int found = 0;
    for (struct dirent *de; !found && (de = readdir(d));) {
        if (strlen(de->d_name) != 20 || !strstr(de->d_name, ".seg")) continue;
        snprintf(out, outlen, "%s/%s", disk_dir(), de->d_name);
        int fd = open(out, O_RDONLY);
        CHECK(fd >= 0);
        ssize_t n = read(fd, buf, sizeof(buf));
        close(fd);
        const uint8_t *at = n > 0 ? memmem(buf, (size_t)n, key, strlen(key)) : NULL;
        if (at) {
            *off = (uint64_t)(at - buf) - 32;
            found = 1;
        }
    }
    closedir(d);
    return found;
}

/*
 * Issue 25.1 against a real tided: the target key is stored, then a client stores a value
 * made of forged records for the target (one for every offset it could have in segment 1),
 * more puts spill both, and tided is killed. The victim's record is then damaged the two
 * ways the docs call recoverable — one flipped bit in its header, or a torn tail — and
 * tided restarts on the directory. The target is its genuine bytes, never the forged ones.
 */
TEST_T(server_disk_forged_records_in_a_value_never_served, 90) {
    const char *tkey = "r0/k00000", *vkey = "evil/value00"; /* 9 and 12 bytes */
    static uint8_t val[VLEN], evil[64];
    memset(evil, 'F', sizeof(evil));
    /* LRU order: the target is evicted first (record at 64), the victim next. */
    uint64_t vrec = 64 + ((32 + 9 + VLEN + 7) & ~7ull), vstart = vrec + 32 + 12;
    static uint8_t victim[VLEN];
    memset(victim, 0, sizeof(victim));
    size_t p = (8 - vstart % 8) % 8, forged = 0;
    while (p + 32 + 9 + sizeof(evil) + 8 <= sizeof(victim)) {
        p += disk_test_forge_v1(victim + p, 1, vstart + p, tkey, evil, sizeof(evil));
        forged++;
    }
    for (int damage = 0; damage < 2; damage++) {
        char cmd[600];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", disk_dir());
        CHECK_EQ(system(cmd), 0);
        test_server ts;
        start_disk(&ts, "1MiB", "64MiB", "4MiB", "info");
        tide_store *s;
        CHECK_EQ(tide_open(ts.url, &s), 0);
        fill(val, 0, 0);
        CHECK_EQ(tide_put(s, tkey, strlen(tkey), val, VLEN), 0);
        CHECK_EQ(tide_put(s, vkey, strlen(vkey), victim, VLEN), 0);
        for (int i = 1; i < 40; i++) {
            char k[32];
            key_of(k, sizeof(k), 1, i);
            fill(val, 1, i);
            CHECK_EQ(tide_put(s, k, strlen(k), val, VLEN), 0);
        }
        for (int i = 0; i < 200 && stat_of(s).disk_writes < 20; i++)
            usleep(10000);
        tide_close(s);
        server_stop(&ts, SIGKILL);
        char seg[600];
        uint64_t off;
        CHECK(find_key(vkey, seg, sizeof(seg), &off));
        CHECK_MSG(off == vrec, "the victim's record is at %llu, not %llu as forged",
                  (unsigned long long)off, (unsigned long long)vrec);
        if (damage == 0) { /* one flipped bit in the victim's value length */
            int fd = open(seg, O_RDWR);
            CHECK(fd >= 0);
            uint8_t b;
            CHECK_EQ(pread(fd, &b, 1, (off_t)(off + 9)), 1);
            b ^= 0x01;
            CHECK_EQ(pwrite(fd, &b, 1, (off_t)(off + 9)), 1);
            close(fd);
        } else { /* torn: the file ends inside the victim's value */
            CHECK_EQ(truncate(seg, (off_t)(vstart + VLEN / 2 + 3)), 0);
        }
        start_disk(&ts, "1MiB", "64MiB", "4MiB", "info");
        CHECK_EQ(tide_open(ts.url, &s), 0);
        static uint8_t got[VLEN];
        size_t vlen = 0;
        int rc = tide_get(s, tkey, strlen(tkey), got, sizeof(got), &vlen);
        CHECK_MSG(rc == 0 || rc == TIDE_ENOTFOUND, "get: %s", tide_strerror(rc));
        CHECK_MSG(rc != 0 || vlen != sizeof(evil), "damage %d: the forged record was served",
                  damage);
        CHECK_EQ(get_ok(s, 0, 0), 1); /* its genuine record, before the damage, stays */
        rc = tide_get(s, vkey, strlen(vkey), got, sizeof(got), &vlen);
        CHECK_EQ(rc, TIDE_ENOTFOUND);
        tide_close(s);
        CHECK_EQ(server_stop(&ts, SIGTERM), 0);
        const char *log = slurp(ts.log);
        CHECK_CONTAINS(log, "1 damaged or torn records");
    }
    CHECK(forged > 400);
}

/* The metric line `name value`, as a number; fails when absent. */
static unsigned long long metric(int port, const char *name) {
    long long v = server_metric(port, name);
    CHECK_MSG(v >= 0, "no %s in /metrics", name);
    return (unsigned long long)v;
}

static void set_fsize(pid_t pid, rlim_t cur) {
    struct rlimit rl;
    CHECK_EQ(prlimit(pid, RLIMIT_FSIZE, NULL, &rl), 0);
    rl.rlim_cur = cur;
    CHECK_EQ(prlimit(pid, RLIMIT_FSIZE, &rl, NULL), 0);
}

/*
 * Issue 25.3(a) against a real tided: spill under a 1 MiB file size limit, then lower the
 * limit to the segment's size so that no record can be appended, remove every key that is
 * on disk only (each acknowledged), SIGKILL, restart without the limit: none comes back.
 * Then the counters: tide_disk_errors_total counts the refusals, and when writes succeed
 * again the log's drop count equals tide_disk_dropped_total.
 */
TEST_T(server_disk_removes_acknowledged_on_a_full_disk_stay_removed, 90) {
    signal(SIGXFSZ, SIG_IGN);
    test_server ts;
    start_disk(&ts, "1MiB", "64MiB", "8MiB", "info");
    set_fsize(ts.pid, 1 << 20);
    tide_store *s;
    CHECK_EQ(tide_open(ts.url, &s), 0);
    static uint8_t val[VLEN];
    put_round(s, 0, 64);
    char seg[600];
    uint64_t off;
    CHECK(find_key("r0/k00000", seg, sizeof(seg), &off));
    struct stat sb;
    CHECK_EQ(stat(seg, &sb), 0);
    set_fsize(ts.pid, (rlim_t)sb.st_size);
    CHECK(metric(ts.metrics_port, "tide_disk_errors_total") > 0);
    int removed = 0;
    for (int i = 0; i < 48; i++) { /* 48..63 are in memory */
        char k[32];
        key_of(k, sizeof(k), 0, i);
        int rc = tide_remove(s, k, strlen(k));
        CHECK_MSG(rc == 0 || rc == TIDE_ENOTFOUND || rc < 0, "remove: %d", rc);
        removed += rc == 0;
    }
    CHECK_MSG(removed >= 8, "only %d keys were on disk to remove", removed);
    tide_close(s);
    server_stop(&ts, SIGKILL);
    start_disk(&ts, "1MiB", "64MiB", "8MiB", "info");
    CHECK_EQ(tide_open(ts.url, &s), 0);
    int back = 0;
    for (int i = 0; i < 48; i++)
        back += get_ok(s, 0, i);
    CHECK_MSG(back == 0, "%d of %d acknowledged removes undone by the restart", back, removed);

    /* The drop count: refuse writes, then let them succeed again. */
    set_fsize(ts.pid, 1 << 20);
    put_round(s, 1, 64);
    set_fsize(ts.pid, RLIM_INFINITY);
    uint64_t before = stat_of(s).disk_writes;
    for (int i = 64; i < 64 + 400 && stat_of(s).disk_writes == before; i++) {
        char k[32];
        key_of(k, sizeof(k), 1, i);
        fill(val, 1, i);
        CHECK_EQ(tide_put(s, k, strlen(k), val, VLEN), 0);
        usleep(10000);
    }
    unsigned long long dropped = metric(ts.metrics_port, "tide_disk_dropped_total");
    CHECK(metric(ts.metrics_port, "tide_disk_errors_total") > 0);
    tide_close(s);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
    const char *log = slurp(ts.log);
    const char *at = strstr(log, "failed batches (");
    CHECK_MSG(at, "no 'writes succeed again' line in the log");
    unsigned long long logged = strtoull(at + strlen("failed batches ("), NULL, 10);
    CHECK_MSG(logged == dropped, "the log says %llu objects dropped, tide_disk_dropped_total %llu",
              logged, dropped);
}

/*
 * The disk turns read-only under a running tided (a read-only bind mount over its disk
 * directory, in a mount namespace of this test's own that tided inherits): no clear record
 * can be written and no segment unlinked, so a clear is not durable. tided must say so:
 * the CLEAR frame answers an error (tide_clear returns it), RESP FLUSHALL answers an ERR;
 * before, both answered OK and a restart brought every object back.
 */
TEST_T(server_disk_clear_on_a_read_only_disk_is_refused, 90) {
    char dir[300];
    snprintf(dir, sizeof(dir), "%s/rossd", test_tmpdir());
    CHECK_EQ(mkdir(dir, 0700), 0);
    if (unshare(CLONE_NEWNS) != 0 || mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL) != 0 ||
        mount("tmpfs", dir, "tmpfs", 0, "size=64m,mode=0700") != 0)
        TEST_SKIP("no CAP_SYS_ADMIN: cannot mount a tmpfs to make read-only");
    char rport[16];
    snprintf(rport, sizeof(rport), "%d", test_free_port());
    /* 64 KiB segments: a 64 KiB value fills one, so the clear record needs a new file. */
    const char *const args[] = {
        "--capacity", "1MiB",           "--disk-dir", dir,           "--disk-capacity",
        "32MiB",      "--disk-segment", "64KiB",      "--resp-port", rport,
        NULL};
    test_server ts;
    server_start(&ts, args);
    tide_store *s;
    CHECK_EQ(tide_open(ts.url, &s), 0);
    put_round(s, 0, 64);
    for (int i = 0; i < 500 && stat_of(s).disk_objects < 32; i++)
        usleep(10000);
    CHECK_MSG(stat_of(s).disk_objects >= 32, "only %llu objects spilled",
              (unsigned long long)stat_of(s).disk_objects);
    /* A bind mount over the directory made read-only (the tmpfs itself cannot be remounted
     * so while tided holds a segment open for writing): tided's next file calls fail. */
    CHECK_EQ(mount(dir, dir, "none", MS_BIND, NULL), 0);
    CHECK_EQ(mount("none", dir, "none", MS_REMOUNT | MS_BIND | MS_RDONLY, NULL), 0);

    int rc = tide_clear(s);
    printf("    read-only disk: tide_clear -> %d (%s)\n", rc, rc ? tide_errmsg(s) : "ok");
    CHECK_MSG(rc < 0, "a clear that could not be recorded was acknowledged");
    CHECK_CONTAINS(tide_errmsg(s), "clear not recorded on the SSD tier");

    int fd = server_connect(atoi(rport), 10);
    static const char flush[] = "*1\r\n$8\r\nFLUSHALL\r\n";
    CHECK_EQ(send(fd, flush, sizeof(flush) - 1, MSG_NOSIGNAL), (ssize_t)sizeof(flush) - 1);
    char reply[256] = "";
    ssize_t n = recv(fd, reply, sizeof(reply) - 1, 0);
    CHECK(n > 0);
    reply[n] = '\0';
    printf("    RESP FLUSHALL -> %s", reply);
    CHECK_MSG(strncmp(reply, "-ERR flush not recorded on the SSD tier", 39) == 0,
              "FLUSHALL answered %s", reply);
    close(fd);
    tide_close(s);
    CHECK_EQ(umount2(dir, MNT_DETACH), 0); /* the bind mount: writable again */
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
    CHECK_EQ(umount2(dir, MNT_DETACH), 0);
}
