/*
 * test_integrity.c — a hostile writer of the shared pool against every reader: unix://
 * (verify=1), tide://, a cluster of two tided, RESP GET and mem://. No read may hand out
 * wrong bytes: it returns the value that was put, or a miss.
 *
 * The SSD tier is attacked the same way (values spilled from and read back into the pool
 * while bytes anywhere in it flip).
 *
 * The scribbler is a thread that maps the pool's memfd as a unix:// client does (HELLO on
 * tided's socket with the shared-pool feature, the memfd by SCM_RIGHTS; for mem://, the
 * store's own memfd opened again through /proc/self/fd) and, in a loop, flips one byte of
 * the committed object under test, holds it a moment and flips it back. The reader reads
 * that object over and over; a miss (a checksum failure) moves the test on to a fresh key
 * and value. Each case runs READS reads, and more (up to a cap) until MIN_MISSES of them
 * missed — on a busy machine the scribbler and the reader may seldom run at the same
 * time — and asserts that none of them accepted wrong bytes and that the scribbler
 * reached the reader at least once (some read missed), so that a case cannot pass without
 * having been attacked. Nothing depends on how long anything took; the counts are printed.
 *
 * Before the fix (issue 17) the unix:// and mem:// readers hashed the pool's bytes and then
 * copied them (a flip in between landed in the caller's buffer under a matching checksum),
 * and RESP GET hashed pool memory and sent it later by writev: these cases failed.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/prng.h"
#include "harness.h"
#include "proto/frame.h"
#include "server_util.h"
#include "tide.h"

#define READS 4000       /* reads per value size and reader, at least */
#define MIN_MISSES 40    /* ... and more reads, up to a cap, until this many missed */
#define CAP_SMALL 400000 /* the cap for small values (a read is a few microseconds) */
#define CAP_LARGE 40000  /* the cap for large ones */
#define PREFIX 64        /* the bytes by which the scribbler finds a value; never flipped */
#define HOLD 1500        /* spins a flipped byte stays flipped */
#define GAP 1500         /* spins between two flips */

/* The bytes of generation g's value: a prng stream from the seed g (distinct per generation,
 * so that the scribbler finds this value's bytes and no earlier one's). */
static void fill(uint8_t *p, size_t n, uint64_t g) {
    uint64_t x = g * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < n; i++) {
        p[i] = (uint8_t)(prng_next(&x) >> 24);
    }
}

static void spin(int n) {
    for (volatile int i = 0; i < n; i++) {
    }
}

/* ---- the scribbler ------------------------------------------------------------------- */

typedef struct scribbler {
    uint8_t *pool;
    size_t size;
    atomic_size_t vlen;       /* the attacked value's length, read when a new gen is seen */
    atomic_uint_fast64_t gen; /* the generation to attack; 0: stand still */
    atomic_uint_fast64_t at;  /* the generation acted on, stored between flips */
    int whole;                /* attack any byte of the pool instead (gen unused) */
    atomic_int stop;
    atomic_uint_fast64_t flips;
    pthread_t th;
} scribbler;

static void *scribble(void *arg) {
    scribbler *sc = arg;
    uint64_t mine = 0;
    size_t vlen = 0;
    uint8_t *obj = NULL, prefix[PREFIX];
    uint64_t r = 12345;
    while (!atomic_load(&sc->stop)) {
        if (sc->whole) {
            r = prng_mix(r);
            volatile uint8_t *b = sc->pool + r % sc->size;
            *b ^= 0x5a;
            spin(HOLD);
            *b ^= 0x5a;
            atomic_fetch_add(&sc->flips, 1);
            spin(GAP);
            continue;
        }
        uint64_t g = atomic_load(&sc->gen);
        /* No flip is half done here: set_gen() waits for this to say 0 before the space of
         * the object just attacked can be given to another put. */
        atomic_store(&sc->at, g);
        if (g != mine) {
            mine = g;
            obj = NULL;
            vlen = atomic_load(&sc->vlen);
            if (g) {
                fill(prefix, PREFIX, g);
                obj = memmem(sc->pool, sc->size, prefix, PREFIX);
            }
        }
        if (!obj) {
            sched_yield();
            continue;
        }
        r = prng_mix(r);
        volatile uint8_t *b = obj + PREFIX + r % (vlen - PREFIX);
        *b ^= 0x5a;
        spin(HOLD);
        *b ^= 0x5a;
        atomic_fetch_add(&sc->flips, 1);
        spin(GAP);
    }
    return NULL;
}

static void scribbler_start(scribbler *sc, uint8_t *pool, size_t size, int whole) {
    memset(sc, 0, sizeof(*sc));
    sc->pool = pool;
    sc->size = size;
    sc->whole = whole;
    CHECK_EQ(pthread_create(&sc->th, NULL, scribble, sc), 0);
}

static void scribbler_stop(scribbler *sc) {
    atomic_store(&sc->stop, 1);
    pthread_join(sc->th, NULL);
    munmap(sc->pool, sc->size);
}

/* Map tided's pool as a unix:// client does: connect, HELLO with the shared-pool feature,
 * take the memfd from the reply and map it read-write. *size gets its size. */
static uint8_t *map_tided_pool(const char *path, size_t *size, int *sock) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    CHECK(fd >= 0 && strlen(path) < sizeof(a.sun_path));
    memcpy(a.sun_path, path, strlen(path) + 1);
    CHECK_MSG(connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0, "connect %s: %s", path,
              strerror(errno));
    frame_hello h = {1, 1, FRAME_FEATURE_SHM, NULL, 0};
    uint8_t f[128], buf[512];
    size_t len, have = 0;
    CHECK_EQ(frame_encode_hello(f, sizeof(f), &len, 1, &h), 0);
    CHECK_EQ(send(fd, f, len, MSG_NOSIGNAL), (ssize_t)len);
    frame_decoder d;
    frame_decoder_init(&d, NULL);
    frame_msg m;
    int pfd = -1;
    for (;;) {
        ssize_t n = frame_decode(&d, buf, have, &m);
        if (n > 0) break;
        CHECK(n == 0 && have + d.need <= sizeof(buf));
        union {
            struct cmsghdr h;
            char c[CMSG_SPACE(sizeof(int))];
        } ctl;
        struct iovec v = {buf + have, d.need};
        struct msghdr mh = {
            .msg_iov = &v, .msg_iovlen = 1, .msg_control = ctl.c, .msg_controllen = sizeof(ctl.c)};
        ssize_t got = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
        CHECK(got > 0);
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        if (c && c->cmsg_type == SCM_RIGHTS) memcpy(&pfd, CMSG_DATA(c), sizeof(int));
        have += (size_t)got;
    }
    CHECK(m.h.status == 0 && (m.hello_reply.features & FRAME_FEATURE_SHM) && pfd >= 0);
    struct stat sb;
    CHECK_EQ(fstat(pfd, &sb), 0);
    *size = (size_t)sb.st_size;
    uint8_t *p = mmap(NULL, *size, PROT_READ | PROT_WRITE, MAP_SHARED, pfd, 0);
    CHECK(p != MAP_FAILED);
    close(pfd);
    *sock = fd; /* kept open: the mapping does not need it, but a client would keep it */
    return p;
}

/* Map this process's mem:// pool again, through its memfd in /proc/self/fd. */
static uint8_t *map_own_pool(size_t *size) {
    DIR *dir = opendir("/proc/self/fd");
    CHECK(dir);
    struct dirent *de;
    int found = -1;
    while ((de = readdir(dir)) && found < 0) {
        char link[300], target[256];
        snprintf(link, sizeof(link), "/proc/self/fd/%s", de->d_name);
        ssize_t n = readlink(link, target, sizeof(target) - 1);
        if (n <= 0) continue;
        target[n] = '\0';
        if (strstr(target, "memfd:tide-pool")) found = open(link, O_RDWR | O_CLOEXEC);
    }
    closedir(dir);
    CHECK_MSG(found >= 0, "no tide-pool memfd in /proc/self/fd");
    struct stat sb;
    CHECK_EQ(fstat(found, &sb), 0);
    *size = (size_t)sb.st_size;
    uint8_t *p = mmap(NULL, *size, PROT_READ | PROT_WRITE, MAP_SHARED, found, 0);
    CHECK(p != MAP_FAILED);
    close(found);
    return p;
}

/* ---- readers ------------------------------------------------------------------------- */

/* A reader: 0 and the value's length for a hit, 1 for a miss. */
typedef int (*read_fn)(void *ctx, const char *key, uint8_t *buf, size_t cap, size_t *len);

static int read_tide(void *ctx, const char *key, uint8_t *buf, size_t cap, size_t *len) {
    tide_store *s = ctx;
    int rc = tide_get(s, key, strlen(key), buf, cap, len);
    if (rc == TIDE_ENOTFOUND) return 1;
    CHECK_MSG(rc == 0, "get %s: %s", key, tide_errmsg(s));
    return 0;
}

static void send_all(int fd, const void *p, size_t n) {
    const uint8_t *b = p;
    while (n) {
        ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
        CHECK_MSG(w > 0, "send: %s", strerror(errno));
        b += w;
        n -= (size_t)w;
    }
}

static void recv_all(int fd, void *p, size_t n) {
    uint8_t *b = p;
    while (n) {
        ssize_t r = recv(fd, b, n, 0);
        CHECK_MSG(r > 0, "recv: %s", r == 0 ? "closed" : strerror(errno));
        b += r;
        n -= (size_t)r;
    }
}

/* RESP GET over a connection (ctx points to its fd): "$-1" is a miss. */
static int read_resp(void *ctx, const char *key, uint8_t *buf, size_t cap, size_t *len) {
    int fd = *(int *)ctx;
    char cmd[320], line[32];
    int n = snprintf(cmd, sizeof(cmd), "*2\r\n$3\r\nGET\r\n$%zu\r\n%s\r\n", strlen(key), key);
    send_all(fd, cmd, (size_t)n);
    size_t l = 0;
    do {
        CHECK(l < sizeof(line) - 1);
        recv_all(fd, line + l, 1);
    } while (line[l++] != '\n');
    line[l] = '\0';
    CHECK_MSG(line[0] == '$', "GET answered %s", line);
    long long v = atoll(line + 1);
    if (v < 0) return 1;
    CHECK((size_t)v <= cap);
    recv_all(fd, buf, (size_t)v);
    char crlf[2];
    recv_all(fd, crlf, 2);
    *len = (size_t)v;
    return 0;
}

/* ---- one attack ---------------------------------------------------------------------- */

typedef struct attack {
    const char *name;
    tide_store *writer; /* puts and removes the values */
    read_fn read;
    void *ctx;
    scribbler *sc[2]; /* one per pool the value lives in */
    int nsc;
} attack;

/* Point the scribblers at generation g; with g = 0 also wait until each stands still (its
 * last flip undone), so the next put cannot meet a byte flipped in the old object's space. */
static void set_gen(attack *a, uint64_t g) {
    for (int i = 0; i < a->nsc; i++)
        atomic_store(&a->sc[i]->gen, g);
    for (int i = 0; g == 0 && i < a->nsc; i++)
        while (!a->sc[i]->whole && atomic_load(&a->sc[i]->at) != 0)
            sched_yield();
}

/* Reads of values of vlen bytes while the scribblers flip bytes of each (see the top). */
static void run_attack(attack *a, size_t vlen, long *wrong_out, long *misses_out) {
    static uint64_t next_gen = 1;
    uint8_t *want = malloc(vlen), *got = malloc(vlen);
    CHECK(want && got);
    for (int i = 0; i < a->nsc; i++)
        atomic_store(&a->sc[i]->vlen, vlen);
    char key[64];
    uint64_t g = next_gen++;
    long right = 0, wrong = 0, misses = 0, reads = 0, cap = vlen <= 16384 ? CAP_SMALL : CAP_LARGE;
    snprintf(key, sizeof(key), "victim-%llu", (unsigned long long)g);
    fill(want, vlen, g);
    CHECK_MSG(tide_put(a->writer, key, strlen(key), want, vlen) == 0, "put: %s",
              tide_errmsg(a->writer));
    set_gen(a, g);
    uint64_t flips0 = atomic_load(&a->sc[0]->flips);
    for (; reads < cap && (reads < READS || misses < MIN_MISSES); reads++) {
        size_t len = 0;
        if (a->read(a->ctx, key, got, vlen, &len) == 0) {
            if (len == vlen && memcmp(got, want, vlen) == 0)
                right++;
            else
                wrong++;
            continue;
        }
        /* A miss: the checksum caught a flip (or a reader dropped the object). Go on with
         * a fresh key and value, the scribbler standing still meanwhile. */
        misses++;
        set_gen(a, 0);
        tide_remove(a->writer, key, strlen(key));
        g = next_gen++;
        snprintf(key, sizeof(key), "victim-%llu", (unsigned long long)g);
        fill(want, vlen, g);
        CHECK_MSG(tide_put(a->writer, key, strlen(key), want, vlen) == 0, "put: %s",
                  tide_errmsg(a->writer));
        set_gen(a, g);
    }
    set_gen(a, 0);
    uint64_t flips = atomic_load(&a->sc[0]->flips) - flips0;
    printf("    %s, %zu-byte values: %ld reads: %ld right, %ld misses, %ld wrong bytes accepted "
           "(%llu flips)\n",
           a->name, vlen, reads, right, misses, wrong, (unsigned long long)flips);
    fflush(stdout);
    *wrong_out = wrong;
    *misses_out = misses;
    free(want);
    free(got);
}

/* Both paths of every reader: a small value (copied in one piece; RESP copies it into its
 * reply) and a large one (copied in chunks with non-temporal stores; RESP's pinned path).
 * Both run before the verdict, so that a failure shows both counts. */
static void run_sizes(attack *a) {
    long wrong[2], misses[2];
    run_attack(a, 8 * 1024, &wrong[0], &misses[0]);
    run_attack(a, 256 * 1024, &wrong[1], &misses[1]);
    CHECK_MSG(wrong[0] == 0 && wrong[1] == 0,
              "%s: reads accepted wrong bytes (%ld with 8 KiB values, %ld with 256 KiB)", a->name,
              wrong[0], wrong[1]);
    CHECK_MSG(misses[0] > 0 && misses[1] > 0,
              "%s: the scribbler never reached the reader (misses: %ld with 8 KiB values, %ld "
              "with 256 KiB)",
              a->name, misses[0], misses[1]);
}

/* ---- the cases ----------------------------------------------------------------------- */

static void start_unix(test_server *ts, const char *path, const char *const *more) {
    server_start_unix(ts, path, "32MiB", "error", more);
}

/* One tided with a Unix socket, a scribbler on its pool, and a reader over `name`'s door:
 * unix:// with verify=1 (over_unix != 0) or tide://. */
static void attack_one_tided(const char *name, int over_unix) {
    char path[256], url[300];
    snprintf(path, sizeof(path), "%s/tide.sock", test_tmpdir());
    test_server ts;
    start_unix(&ts, path, NULL);
    snprintf(url, sizeof(url), "unix://%s?verify=1", path);
    tide_store *r;
    CHECK_MSG(tide_open(over_unix ? url : ts.url, &r) == 0, "%s", tide_errmsg(NULL));
    scribbler sc;
    size_t size;
    int sock;
    uint8_t *pool = map_tided_pool(path, &size, &sock);
    scribbler_start(&sc, pool, size, 0);
    attack a = {name, r, read_tide, r, {&sc}, 1};
    run_sizes(&a);
    scribbler_stop(&sc);
    close(sock);
    tide_close(r);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}

TEST_T(integrity_scribbler_vs_unix_reader, 120) {
    attack_one_tided("unix:// verify=1", 1);
}

TEST_T(integrity_scribbler_vs_tcp_reader, 120) {
    attack_one_tided("tide://", 0);
}

TEST_T(integrity_scribbler_vs_cluster_reader, 150) {
    char path[2][256], url[300];
    test_server ts[2];
    scribbler sc[2];
    int sock[2];
    for (int i = 0; i < 2; i++) {
        snprintf(path[i], sizeof(path[i]), "%s/tide-%d.sock", test_tmpdir(), i);
        start_unix(&ts[i], path[i], NULL);
    }
    snprintf(url, sizeof(url), "tide://127.0.0.1:%d,127.0.0.1:%d?replicas=2", ts[0].port,
             ts[1].port);
    tide_store *c;
    CHECK_MSG(tide_open(url, &c) == 0, "%s", tide_errmsg(NULL));
    for (int i = 0; i < 2; i++) {
        size_t size;
        uint8_t *pool = map_tided_pool(path[i], &size, &sock[i]);
        scribbler_start(&sc[i], pool, size, 0);
    }
    attack a = {"cluster (2 nodes, R=2)", c, read_tide, c, {&sc[0], &sc[1]}, 2};
    run_sizes(&a);
    for (int i = 0; i < 2; i++) {
        scribbler_stop(&sc[i]);
        close(sock[i]);
    }
    tide_close(c);
    for (int i = 0; i < 2; i++)
        CHECK_EQ(server_stop(&ts[i], SIGTERM), 0);
}

/* A free port below the kernel's ephemeral range, so that --port 0 cannot take it. */
static int low_free_port(void) {
    unsigned seed = (unsigned)getpid() * 2654435761u;
    for (int i = 0; i < 200; i++) {
        seed = seed * 1103515245u + 12345u;
        int port = 20000 + (int)((seed >> 8) % 12000);
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET,
                                 .sin_port = htons((uint16_t)port),
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        int ok = fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
        if (fd >= 0) close(fd);
        if (ok) return port;
    }
    test_fail(__FILE__, __LINE__, "no free port in 20000..31999");
}

TEST_T(integrity_scribbler_vs_resp_reader, 120) {
    char path[256], port[16];
    snprintf(path, sizeof(path), "%s/tide.sock", test_tmpdir());
    int rport = low_free_port();
    snprintf(port, sizeof(port), "%d", rport);
    const char *more[] = {"--resp-port", port, NULL};
    test_server ts;
    start_unix(&ts, path, more);
    tide_store *t;
    CHECK_MSG(tide_open(ts.url, &t) == 0, "%s", tide_errmsg(NULL));
    int fd = server_connect(rport, 20);
    CHECK(fd >= 0);
    scribbler sc;
    size_t size;
    int sock;
    uint8_t *pool = map_tided_pool(path, &size, &sock);
    scribbler_start(&sc, pool, size, 0);
    attack a = {"RESP GET", t, read_resp, &fd, {&sc}, 1};
    run_sizes(&a);
    scribbler_stop(&sc);
    close(sock);
    close(fd);
    tide_close(t);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}

/* (Named without "mem_", which `make valgrind` selects: under valgrind the threads take
 * turns, the scribbler seldom meets the reader, and the case runs to its caps.) */
TEST_T(integrity_scribbler_vs_embedded_reader, 120) {
    tide_store *m;
    CHECK_MSG(tide_open("mem://?capacity=32MiB&verify=1", &m) == 0, "%s", tide_errmsg(NULL));
    scribbler sc;
    size_t size;
    uint8_t *pool = map_own_pool(&size);
    scribbler_start(&sc, pool, size, 0);
    attack a = {"mem:// verify=1", m, read_tide, m, {&sc}, 1};
    run_sizes(&a);
    scribbler_stop(&sc);
    tide_close(m);
}

/* An MGET of 80 values of 1 MiB with the pool shared: each value is copied and checked as
 * it is about to be sent, one at a time. Every byte arrives right, in order. */
TEST_T(integrity_resp_mget_of_80_mib, 120) {
    enum { NV = 80, VLEN = 1 << 20 };
    char path[256], port[16];
    snprintf(path, sizeof(path), "%s/tide.sock", test_tmpdir());
    int rport = low_free_port();
    snprintf(port, sizeof(port), "%d", rport);
    const char *resp[] = {"--resp-port", port, NULL};
    test_server ts;
    server_start_unix(&ts, path, "128MiB", "error", resp);
    tide_store *t;
    CHECK_MSG(tide_open(ts.url, &t) == 0, "%s", tide_errmsg(NULL));
    uint8_t *want = malloc(VLEN), *got = malloc(VLEN);
    CHECK(want && got);
    char cmd[NV * 32 + 32];
    size_t n = (size_t)snprintf(cmd, sizeof(cmd), "*%d\r\n$4\r\nMGET\r\n", NV + 1);
    for (int i = 0; i < NV; i++) {
        char key[16];
        snprintf(key, sizeof(key), "mget-%03d", i);
        fill(want, VLEN, 1000 + (uint64_t)i);
        CHECK_MSG(tide_put(t, key, strlen(key), want, VLEN) == 0, "put: %s", tide_errmsg(t));
        n += (size_t)snprintf(cmd + n, sizeof(cmd) - n, "$%zu\r\n%s\r\n", strlen(key), key);
    }
    int fd = server_connect(rport, 20);
    CHECK(fd >= 0);
    send_all(fd, cmd, n);
    char line[16];
    recv_all(fd, line, 5);
    CHECK(memcmp(line, "*80\r\n", 5) == 0);
    for (int i = 0; i < NV; i++) {
        char hdr[] = "$1048576\r\n";
        recv_all(fd, line, sizeof(hdr) - 1);
        CHECK_MSG(memcmp(line, hdr, sizeof(hdr) - 1) == 0, "value %d: header %.10s", i, line);
        recv_all(fd, got, VLEN);
        fill(want, VLEN, 1000 + (uint64_t)i);
        CHECK_MSG(memcmp(got, want, VLEN) == 0, "value %d differs", i);
        recv_all(fd, line, 2);
        CHECK(line[0] == '\r' && line[1] == '\n');
    }
    close(fd);
    free(want);
    free(got);
    tide_close(t);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}

/* The SSD tier under the same attack: a pool of 4 MiB holding half of 16 values of 512 KiB,
 * so that reading them in turn spills values to disk (written from pool memory the
 * scribbler may be flipping) and reads them back into the pool (promotion) all the time.
 * The scribbler flips bytes anywhere in the pool. A unix:// reader must get every value
 * right or miss; a miss puts the key again with a new value. */
TEST_T(integrity_scribbler_vs_ssd_read_back, 150) {
    enum { NK = 16, VLEN = 512 << 10, NREADS = 3000 };
    char path[256], url[300], dir[300];
    snprintf(path, sizeof(path), "%s/tide.sock", test_tmpdir());
    snprintf(dir, sizeof(dir), "%s/disk", test_tmpdir());
    const char *disk[] = {"--disk-dir", dir, "--disk-capacity", "64MiB", NULL};
    test_server ts;
    server_start_unix(&ts, path, "4MiB", "error", disk);
    snprintf(url, sizeof(url), "unix://%s?verify=1", path);
    tide_store *u;
    CHECK_MSG(tide_open(url, &u) == 0, "%s", tide_errmsg(NULL));
    uint8_t *want = malloc(VLEN), *got = malloc(VLEN);
    CHECK(want && got);
    uint64_t gen[NK];
    char key[NK][16];
    for (int k = 0; k < NK; k++) {
        snprintf(key[k], sizeof(key[k]), "ssd-%02d", k);
        gen[k] = 5000 + (uint64_t)k;
        fill(want, VLEN, gen[k]);
        CHECK_MSG(tide_put(u, key[k], strlen(key[k]), want, VLEN) == 0, "put: %s", tide_errmsg(u));
    }
    tide_stats st0;
    CHECK_EQ(tide_stats_get(u, &st0, sizeof(st0)), 0);
    scribbler sc;
    size_t size;
    int sock;
    uint8_t *pool = map_tided_pool(path, &size, &sock);
    scribbler_start(&sc, pool, size, 1);
    long right = 0, wrong = 0, misses = 0, absent = 0;
    uint64_t next = 6000;
    for (int i = 0; i < NREADS; i++) {
        int k = i % NK;
        size_t len = 0;
        int rc = tide_get(u, key[k], strlen(key[k]), got, VLEN, &len);
        CHECK_MSG(rc == 0 || rc == TIDE_ENOTFOUND, "get: %s", tide_errmsg(u));
        if (rc == 0) {
            fill(want, VLEN, gen[k]);
            if (len == VLEN && memcmp(got, want, VLEN) == 0)
                right++;
            else
                wrong++;
            continue;
        }
        /* A miss: a checksum caught a flip, in memory or in what was spilled to disk (or
         * the disk evicted it: counted apart). Put the key again with a new value. */
        if (tide_exists(u, key[k], strlen(key[k])) == 1)
            misses++;
        else
            absent++;
        tide_remove(u, key[k], strlen(key[k]));
        gen[k] = next++;
        fill(want, VLEN, gen[k]);
        CHECK_MSG(tide_put(u, key[k], strlen(key[k]), want, VLEN) == 0, "put: %s", tide_errmsg(u));
    }
    scribbler_stop(&sc);
    close(sock);
    tide_stats st;
    CHECK_EQ(tide_stats_get(u, &st, sizeof(st)), 0);
    uint64_t promoted = st.disk_promotions - st0.disk_promotions;
    printf("    SSD tier: %d reads: %ld right, %ld misses (%ld absent), %ld wrong bytes accepted; "
           "%llu promotions from disk, %llu disk checksum errors (%llu flips)\n",
           NREADS, right, misses + absent, absent, wrong, (unsigned long long)promoted,
           (unsigned long long)(st.disk_checksum_errors - st0.disk_checksum_errors),
           (unsigned long long)atomic_load(&sc.flips));
    fflush(stdout);
    CHECK_MSG(wrong == 0, "%ld of %d reads accepted wrong bytes", wrong, NREADS);
    CHECK_MSG(promoted > 0, "no read came from disk");
    CHECK_MSG(misses + absent > 0, "the scribbler never reached the reader");
    free(want);
    free(got);
    tide_close(u);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}

/* RESP SETs with the pool shared: a value that streams in (sent in pieces, larger than the
 * buffered limit) goes through tided's staging buffer, hashed there, and is stored right;
 * so is one that was buffered whole. Both read back right over RESP and tide://. */
TEST_T(integrity_resp_set_with_the_pool_shared, 60) {
    enum { BIG = (1 << 20) + 12345, SMALL = 40000 };
    char path[256], port[16];
    snprintf(path, sizeof(path), "%s/tide.sock", test_tmpdir());
    int rport = low_free_port();
    snprintf(port, sizeof(port), "%d", rport);
    const char *more[] = {"--resp-port", port, NULL};
    test_server ts;
    start_unix(&ts, path, more);
    tide_store *t;
    CHECK_MSG(tide_open(ts.url, &t) == 0, "%s", tide_errmsg(NULL));
    int fd = server_connect(rport, 20);
    CHECK(fd >= 0);
    uint8_t *want = malloc(BIG), *got = malloc(BIG);
    CHECK(want && got);
    const size_t lens[2] = {BIG, SMALL};
    for (int i = 0; i < 2; i++) {
        char key[16], hdr[64], ok[5];
        snprintf(key, sizeof(key), "set-%d", i);
        fill(want, lens[i], 7000 + (uint64_t)i);
        int n = snprintf(hdr, sizeof(hdr), "*3\r\n$3\r\nSET\r\n$%zu\r\n%s\r\n$%zu\r\n", strlen(key),
                         key, lens[i]);
        send_all(fd, hdr, (size_t)n);
        /* In pieces, so that tided reads the value as it arrives. */
        for (size_t off = 0; off < lens[i]; off += 100000) {
            size_t k = lens[i] - off < 100000 ? lens[i] - off : 100000;
            send_all(fd, want + off, k);
        }
        send_all(fd, "\r\n", 2);
        recv_all(fd, ok, 5);
        CHECK(memcmp(ok, "+OK\r\n", 5) == 0);
        size_t len = 0;
        CHECK_EQ(read_resp(&fd, key, got, BIG, &len), 0);
        CHECK_EQ(len, lens[i]);
        CHECK(memcmp(got, want, lens[i]) == 0);
        CHECK_EQ(tide_get(t, key, strlen(key), got, BIG, &len), 0);
        CHECK_EQ(len, lens[i]);
        CHECK(memcmp(got, want, lens[i]) == 0);
    }
    free(want);
    free(got);
    close(fd);
    tide_close(t);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}
