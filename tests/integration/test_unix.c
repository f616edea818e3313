/*
 * test_unix.c — the unix:// backend against a real tided: the backend suite, the socket's
 * trust rules (file mode, peer uid, token, TCP refusal), leases of clients killed mid-put
 * and mid-get (real child processes, SIGKILL), lease expiry, foreign lease ids, and a pool
 * corrupted by a client turning into a miss.
 *
 * The children and some cases speak the protocol by hand ("raw" below) so that they can
 * stop between RESERVE and COMMIT, or between PIN and RELEASE. Waits poll the daemon's
 * figures until they change, bounded by a generous limit that only guards against a hang;
 * no assertion depends on how long anything took.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "backend_suite.h"
#include "common/checksum.h"
#include "common/prng.h"
#include "harness.h"
#include "proto/frame.h"
#include "server_util.h"
#include "tide.h"

#define MiB (1ull << 20)

static void sock_path(char *out, size_t cap) {
    snprintf(out, cap, "%s/tide.sock", test_tmpdir());
}

static void unix_url(char *out, size_t cap, const char *path) {
    snprintf(out, cap, "unix://%s", path);
}

/* Start tided with a Unix socket at path plus extra arguments (NULL-terminated). */
static void start_unix(test_server *ts, const char *path, const char *capacity,
                       const char *const *extra) {
    server_start_unix(ts, path, capacity, "warn", extra);
}

/* ---- the protocol by hand ------------------------------------------------------------ */

typedef struct raw {
    int fd;
    uint8_t *pool;
    size_t pool_size;
    uint64_t req;
    uint8_t buf[1 << 16];
} raw;

/* Read one whole reply into r->buf; a passed fd lands in *pfd. Returns 0 or -1. */
static int raw_read(raw *r, frame_msg *m, int *pfd) {
    frame_decoder d;
    frame_decoder_init(&d, NULL);
    size_t have = 0;
    for (;;) {
        ssize_t n = frame_decode(&d, r->buf, have, m);
        if (n > 0) return 0;
        if (n < 0 || have == sizeof(r->buf)) return -1;
        union {
            struct cmsghdr h;
            char c[CMSG_SPACE(sizeof(int))];
        } ctl;
        struct iovec v = {r->buf + have, d.need};
        struct msghdr mh = {
            .msg_iov = &v, .msg_iovlen = 1, .msg_control = ctl.c, .msg_controllen = sizeof(ctl.c)};
        ssize_t got = recvmsg(r->fd, &mh, MSG_CMSG_CLOEXEC);
        if (got <= 0) return -1;
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        if (c && c->cmsg_type == SCM_RIGHTS && pfd) memcpy(pfd, CMSG_DATA(c), sizeof(int));
        have += (size_t)got;
    }
}

/* Connect, HELLO (asking for the pool when shm), map the pool. 0, or -1 (no CHECKs, so
 * that children can use it). */
static int raw_open(raw *r, const char *path, int shm) {
    memset(r, 0, sizeof(*r));
    r->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof(a.sun_path)) return -1;
    memcpy(a.sun_path, path, strlen(path) + 1);
    if (r->fd < 0 || connect(r->fd, (struct sockaddr *)&a, sizeof(a)) != 0) return -1;
    struct timeval tv = {.tv_sec = 20};
    setsockopt(r->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    frame_hello h = {1, 1, shm ? FRAME_FEATURE_SHM : 0, NULL, 0};
    uint8_t f[128];
    size_t len;
    if (frame_encode_hello(f, sizeof(f), &len, r->req++, &h) != 0 ||
        send(r->fd, f, len, MSG_NOSIGNAL) != (ssize_t)len)
        return -1;
    frame_msg m;
    int pfd = -1;
    if (raw_read(r, &m, &pfd) != 0 || m.h.status != 0) return -1;
    if (!shm) return pfd < 0 ? 0 : -1;
    struct stat sb;
    if (pfd < 0 || !(m.hello_reply.features & FRAME_FEATURE_SHM) || fstat(pfd, &sb) != 0) return -1;
    r->pool_size = (size_t)sb.st_size;
    r->pool = mmap(NULL, r->pool_size, PROT_READ | PROT_WRITE, MAP_SHARED, pfd, 0);
    close(pfd);
    return r->pool == MAP_FAILED ? -1 : 0;
}

static void raw_close(raw *r) {
    if (r->pool && r->pool != MAP_FAILED) munmap(r->pool, r->pool_size);
    close(r->fd);
}

/* Send a frame encoded in f[0..len) and read the reply. 0 or -1. */
static int raw_call(raw *r, uint8_t *f, size_t len, frame_msg *m) {
    le_wr64(f + 8, r->req++);
    if (send(r->fd, f, len, MSG_NOSIGNAL) != (ssize_t)len) return -1;
    return raw_read(r, m, NULL);
}

/* RESERVE one key: its status, id and offset. -1 on a transport failure. */
static int raw_reserve(raw *r, const char *key, uint64_t vlen, frame_entry *e) {
    uint8_t f[512];
    size_t len;
    tide_key k = {key, strlen(key)};
    frame_msg m;
    frame_iter it;
    if (frame_encode_reserve(f, sizeof(f), &len, 0, &k, &vlen, 1) != 0 ||
        raw_call(r, f, len, &m) != 0 || m.h.status != 0 || m.h.count != 1)
        return -1;
    frame_iter_init(&it, &m);
    frame_iter_next(&it, e);
    return 0;
}

static int raw_pin(raw *r, const char *key, frame_entry *e) {
    uint8_t f[512];
    size_t len;
    tide_key k = {key, strlen(key)};
    frame_msg m;
    frame_iter it;
    if (frame_encode_pin(f, sizeof(f), &len, 0, &k, NULL, 1) != 0 || raw_call(r, f, len, &m) != 0 ||
        m.h.status != 0 || m.h.count != 1)
        return -1;
    frame_iter_init(&it, &m);
    frame_iter_next(&it, e);
    return 0;
}

/* COMMIT (sum given) or RELEASE (outcome given) of one id: the entry's status, or the
 * whole reply's status when the request failed as a whole. */
static int32_t raw_finish(raw *r, unsigned op, uint64_t id, uint64_t sum, int32_t outcome) {
    uint8_t f[128];
    size_t len;
    frame_msg m;
    int rc = op == FRAME_OP_COMMIT ? frame_encode_commit(f, sizeof(f), &len, 0, &id, &sum, 1)
                                   : frame_encode_release(f, sizeof(f), &len, 0, &id, &outcome, 1);
    if (rc != 0 || raw_call(r, f, len, &m) != 0) return INT32_MIN;
    if (m.h.status != 0) return m.h.status;
    frame_iter it;
    frame_entry e;
    frame_iter_init(&it, &m);
    frame_iter_next(&it, &e);
    return e.status;
}

/* ---- waiting on the daemon's figures ------------------------------------------------- */

static tide_stats stats_of(tide_store *s) {
    tide_stats st;
    CHECK_MSG(tide_stats_get(s, &st, sizeof(st)) == 0, "stats: %s", tide_errmsg(s));
    return st;
}

/* Poll until the figure at `off` equals want (at most ~30 s, a guard against a hang). */
static tide_stats wait_figure(tide_store *s, size_t off, uint64_t want, const char *name) {
    tide_stats st;
    for (int i = 0; i < 3000; i++) {
        st = stats_of(s);
        if (*(uint64_t *)((char *)&st + off) == want) return st;
        struct timespec d = {0, 10000000};
        nanosleep(&d, NULL);
    }
    test_fail(__FILE__, __LINE__, "%s stayed at %llu, waited for %llu", name,
              (unsigned long long)*(uint64_t *)((char *)&st + off), (unsigned long long)want);
}

#define WAIT_FIGURE(s, field, want) wait_figure(s, offsetof(tide_stats, field), want, #field)

static void fill(uint8_t *p, size_t n, unsigned seed) {
    uint64_t x = seed;
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)prng_next(&x);
}

/* Fork a child that runs fn(path) and then waits to be killed; returns its pid once it
 * has written its ready byte. fn returns 0 when its work is done. */
static pid_t spawn_holder(const char *path, int (*fn)(const char *path)) {
    int p[2];
    CHECK(pipe(p) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(p[0]);
        if (fn(path) != 0) _exit(1);
        char c = 'r';
        if (write(p[1], &c, 1) != 1) _exit(1);
        for (;;)
            pause();
    }
    close(p[1]);
    char c = 0;
    ssize_t n = read(p[0], &c, 1);
    close(p[0]);
    if (n != 1) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        test_fail(__FILE__, __LINE__, "the child failed before it was ready");
    }
    return pid;
}

static void kill_child(pid_t pid) {
    int st;
    CHECK_EQ(kill(pid, SIGKILL), 0);
    CHECK_EQ(waitpid(pid, &st, 0), pid);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
}

/* ---- tests ---------------------------------------------------------------------------- */

TEST_T(unix_backend_suite, 120) {
    char path[256], url[300];
    sock_path(path, sizeof(path));
    unix_url(url, sizeof(url), path);
    test_server ts;
    start_unix(&ts, path, "256MiB", NULL);
    backend_suite(url);
    /* Both doors lead to the same store. */
    tide_store *u, *t;
    CHECK_MSG(tide_open(url, &u) == 0, "%s", tide_errmsg(NULL));
    CHECK_MSG(tide_open(ts.url, &t) == 0, "%s", tide_errmsg(NULL));
    CHECK_EQ(tide_put(u, "via-unix", 8, "abc", 3), 0);
    char b[4] = {0};
    size_t len;
    CHECK_EQ(tide_get(t, "via-unix", 8, b, 3, &len), 0);
    CHECK_STR(b, "abc");
    CHECK_EQ(tide_put(t, "via-tcp", 7, "xyz", 3), 0);
    CHECK_EQ(tide_get(u, "via-tcp", 7, b, 3, &len), 0);
    CHECK_STR(b, "xyz");
    tide_close(u);
    tide_close(t);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
    /* A clean stop removes the socket file. */
    CHECK(access(path, F_OK) != 0 && errno == ENOENT);
}

TEST(unix_large_batches_are_cut_to_the_server_limits) {
    char path[256], url[300];
    sock_path(path, sizeof(path));
    unix_url(url, sizeof(url), path);
    test_server ts;
    const char *const extra[] = {"--max-keys", "7", NULL};
    start_unix(&ts, path, "64MiB", extra);
    tide_store *s;
    CHECK_MSG(tide_open(url, &s) == 0, "%s", tide_errmsg(NULL));
    enum { N = 50 };
    char names[N][16];
    tide_key keys[N];
    uint64_t vals[N], outs[N];
    tide_iov in[N], out[N];
    int res[N];
    size_t lens[N];
    uint8_t present[N];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof(names[i]), "many-%d", i);
        keys[i] = (tide_key){names[i], strlen(names[i])};
        vals[i] = 1000003ull * (uint64_t)i;
        in[i] = (tide_iov){&vals[i], 8};
        out[i] = (tide_iov){&outs[i], 8};
    }
    CHECK_EQ(tide_put_many(s, keys, N, in, NULL, res), N);
    CHECK_EQ(tide_exists_many(s, keys, N, present), N);
    CHECK_EQ(tide_match_prefix(s, keys, N), N);
    CHECK_EQ(tide_get_many(s, keys, N, out, NULL, res, lens), N);
    for (int i = 0; i < N; i++)
        CHECK_EQ(outs[i], vals[i]);
    CHECK_EQ(tide_remove_many(s, keys, N, res), N);
    tide_close(s);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}

TEST(unix_socket_mode_and_stale_files) {
    char path[256];
    sock_path(path, sizeof(path));
    test_server ts;
    struct stat sb;
    start_unix(&ts, path, "16MiB", NULL);
    CHECK_EQ(stat(path, &sb), 0);
    CHECK(S_ISSOCK(sb.st_mode));
    CHECK_EQ(sb.st_mode & 0777, 0600);
    /* A second tided refuses to take over a live socket. */
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "%s serve --port 0 --metrics-port 0 --unix %s 2>/dev/null",
             test_tide_bin(), path);
    int st = system(cmd);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);

    /* A socket file left behind by a dead process is replaced; the mode is as asked. */
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    CHECK(strlen(path) < sizeof(a.sun_path));
    memcpy(a.sun_path, path, strlen(path) + 1);
    CHECK_EQ(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    close(fd);
    const char *const mode[] = {"--unix-mode", "0660", NULL};
    start_unix(&ts, path, "16MiB", mode);
    CHECK_EQ(stat(path, &sb), 0);
    CHECK_EQ(sb.st_mode & 0777, 0660);
    CHECK_EQ(server_stop(&ts, SIGKILL) & 0x7f, SIGKILL);

    /* A path that is not a socket is never replaced. */
    unlink(path);
    FILE *f = fopen(path, "w");
    fputs("precious", f);
    fclose(f);
    st = system(cmd);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1);
    CHECK_EQ(stat(path, &sb), 0);
    CHECK(S_ISREG(sb.st_mode));
    snprintf(cmd, sizeof(cmd), "%s serve --unix-mode 0999 2>/dev/null", test_tide_bin());
    st = system(cmd);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 2);
}

TEST(unix_peer_uid_check) {
    char path[256], url[300], uids[64];
    sock_path(path, sizeof(path));
    unix_url(url, sizeof(url), path);
    test_server ts;
    snprintf(uids, sizeof(uids), "%u", (unsigned)getuid() + 1);
    const char *const deny[] = {"--unix-allow-uid", uids, NULL};
    start_unix(&ts, path, "16MiB", deny);
    tide_store *s = NULL;
    CHECK_EQ(tide_open(url, &s), TIDE_EAUTH);
    CHECK_CONTAINS(tide_errmsg(NULL), "not in --unix-allow-uid");
    CHECK_CONTAINS(tide_errmsg(NULL), path);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);

    snprintf(uids, sizeof(uids), "%u,%u", (unsigned)getuid() + 1, (unsigned)getuid());
    const char *const allow[] = {"--unix-allow-uid", uids, NULL};
    start_unix(&ts, path, "16MiB", allow);
    CHECK_MSG(tide_open(url, &s) == 0, "%s", tide_errmsg(NULL));
    CHECK_EQ(tide_put(s, "k", 1, "v", 1), 0);
    tide_close(s);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}

TEST(unix_auth_token) {
    char path[256], url[400], tokfile[300];
    sock_path(path, sizeof(path));
    snprintf(tokfile, sizeof(tokfile), "%s/token", test_tmpdir());
    FILE *f = fopen(tokfile, "w");
    fputs("s3cret\n", f);
    fclose(f);
    test_server ts;
    const char *const tok[] = {"--auth-token-file", tokfile, NULL};
    start_unix(&ts, path, "16MiB", tok);
    tide_store *s = NULL;
    unsetenv("TIDE_AUTH_TOKEN");
    snprintf(url, sizeof(url), "unix://%s", path);
    CHECK_EQ(tide_open(url, &s), TIDE_EAUTH);
    CHECK_CONTAINS(tide_errmsg(NULL), "requires a token");
    /* Without the token, no pool: a raw HELLO gets no fd either. */
    raw r;
    CHECK_EQ(raw_open(&r, path, 1), -1);
    close(r.fd);
    snprintf(url, sizeof(url), "unix://%s?token=s3cret", path);
    CHECK_MSG(tide_open(url, &s) == 0, "%s", tide_errmsg(NULL));
    CHECK_EQ(tide_put(s, "k", 1, "v", 1), 0);
    tide_close(s);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}

TEST(unix_shared_pool_requests_need_the_socket_and_the_feature) {
    char path[256];
    sock_path(path, sizeof(path));
    test_server ts;
    start_unix(&ts, path, "16MiB", NULL);
    /* Over TCP: HELLO asking for the pool is answered without it, RESERVE is refused. */
    int fd = server_connect(ts.port, 10);
    raw r = {.fd = fd};
    uint8_t f[512];
    size_t len;
    frame_hello h = {1, 1, FRAME_FEATURE_SHM, NULL, 0};
    frame_msg m;
    CHECK_EQ(frame_encode_hello(f, sizeof(f), &len, 0, &h), 0);
    CHECK_EQ(raw_call(&r, f, len, &m), 0);
    CHECK_EQ(m.h.status, 0);
    CHECK_EQ(m.hello_reply.features & FRAME_FEATURE_SHM, 0);
    tide_key k = {"k", 1};
    uint64_t vl = 100;
    CHECK_EQ(frame_encode_reserve(f, sizeof(f), &len, 0, &k, &vl, 1), 0);
    CHECK_EQ(raw_call(&r, f, len, &m), 0);
    CHECK_EQ(m.h.status, TIDE_EUNSUPPORTED);
    CHECK(m.errmsg_len > 0);
    close(fd);
    /* On the socket without the feature: refused as well, and no fd came. */
    CHECK_EQ(raw_open(&r, path, 0), 0);
    CHECK_EQ(raw_call(&r, f, len, &m), 0);
    CHECK_EQ(m.h.status, TIDE_EUNSUPPORTED);
    raw_close(&r);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}

/* Child of unix_kill_mid_put: reserve four 8 MiB values, write half of the first. */
static int hold_reservations(const char *path) {
    raw r;
    if (raw_open(&r, path, 1) != 0) return -1;
    for (int i = 0; i < 4; i++) {
        char key[32];
        frame_entry e;
        snprintf(key, sizeof(key), "put-%d", i);
        if (raw_reserve(&r, key, 8 * MiB, &e) != 0 || e.status != 0 || e.id == 0) return -1;
        if (e.offset + 8 * MiB > r.pool_size) return -1;
        if (i == 0) memset(r.pool + e.offset, 0xAB, 4 * MiB);
    }
    return 0; /* the connection and mapping stay open until the kill */
}

TEST_T(unix_kill_mid_put, 60) {
    char path[256];
    sock_path(path, sizeof(path));
    test_server ts;
    start_unix(&ts, path, "64MiB", NULL);
    tide_store *t;
    CHECK_MSG(tide_open(ts.url, &t) == 0, "%s", tide_errmsg(NULL));
    tide_stats st = stats_of(t);
    CHECK_EQ(st.used_bytes, 0);

    pid_t child = spawn_holder(path, hold_reservations);
    st = stats_of(t);
    CHECK_EQ(st.reserved, 4);
    CHECK(st.used_bytes >= 32 * MiB);
    CHECK_EQ(st.objects, 0);
    CHECK_EQ(tide_exists(t, "put-0", 5), 0); /* reserved is invisible */

    kill_child(child);
    st = WAIT_FIGURE(t, reserved, 0);
    CHECK_EQ(st.used_bytes, 0);
    CHECK_EQ(st.objects, 0);
    for (int i = 0; i < 4; i++) {
        char key[32];
        snprintf(key, sizeof(key), "put-%d", i);
        CHECK_EQ(tide_exists(t, key, strlen(key)), 0);
    }
    /* The whole pool is usable again: 8 x 8 MiB fits only if the 32 MiB came back. */
    uint8_t *v = malloc(8 * MiB), *o = malloc(8 * MiB);
    char url[300];
    unix_url(url, sizeof(url), path);
    tide_store *u;
    CHECK_MSG(tide_open(url, &u) == 0, "%s", tide_errmsg(NULL));
    for (int i = 0; i < 8; i++) {
        char key[32];
        snprintf(key, sizeof(key), "put-%d", i);
        fill(v, 8 * MiB, (unsigned)i);
        CHECK_MSG(tide_put(u, key, strlen(key), v, 8 * MiB) == 0, "put %d: %s", i, tide_errmsg(u));
    }
    st = stats_of(t);
    CHECK_EQ(st.objects, 8);
    CHECK_EQ(st.evictions, 0);
    size_t len;
    fill(v, 8 * MiB, 0);
    CHECK_EQ(tide_get(u, "put-0", 5, o, 8 * MiB, &len), 0);
    CHECK(memcmp(v, o, 8 * MiB) == 0);
    free(v);
    free(o);
    tide_close(u);
    tide_close(t);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}

/* Child of unix_kill_mid_get: pin the four old values and start copying one out. */
static int hold_pins(const char *path) {
    raw r;
    if (raw_open(&r, path, 1) != 0) return -1;
    static uint8_t sink[1 << 20];
    for (int i = 0; i < 4; i++) {
        char key[32];
        frame_entry e;
        snprintf(key, sizeof(key), "old-%d", i);
        if (raw_pin(&r, key, &e) != 0 || e.status != 0 || e.vlen != 8 * MiB) return -1;
        if (e.offset + e.vlen > r.pool_size) return -1;
        memcpy(sink, r.pool + e.offset, sizeof(sink));
    }
    return 0;
}

TEST_T(unix_kill_mid_get, 60) {
    char path[256], url[300];
    sock_path(path, sizeof(path));
    unix_url(url, sizeof(url), path);
    test_server ts;
    /* LRU, so that "newer values leave no room for any old one" below holds: the default
     * policy (chain) would keep the old values, which were read, in its protected list. */
    const char *const lru[] = {"--policy", "lru", NULL};
    start_unix(&ts, path, "64MiB", lru);
    tide_store *u, *t;
    CHECK_MSG(tide_open(url, &u) == 0, "%s", tide_errmsg(NULL));
    CHECK_MSG(tide_open(ts.url, &t) == 0, "%s", tide_errmsg(NULL));
    uint8_t *v = malloc(8 * MiB);
    char key[32];
    for (int i = 0; i < 4; i++) {
        snprintf(key, sizeof(key), "old-%d", i);
        fill(v, 8 * MiB, 100u + (unsigned)i);
        CHECK_EQ(tide_put(u, key, strlen(key), v, 8 * MiB), 0);
    }
    pid_t child = spawn_holder(path, hold_pins);
    CHECK_EQ(stats_of(t).pinned, 4);

    /* 48 MiB of new values into a 64 MiB pool with 32 MiB pinned: they evict one another,
     * never the pinned ones; and a 40 MiB value cannot fit at all. */
    for (int i = 0; i < 6; i++) {
        snprintf(key, sizeof(key), "new-%d", i);
        fill(v, 8 * MiB, 200u + (unsigned)i);
        CHECK_MSG(tide_put(u, key, strlen(key), v, 8 * MiB) == 0, "put %s: %s", key,
                  tide_errmsg(u));
    }
    CHECK(stats_of(t).evictions >= 2);
    for (int i = 0; i < 4; i++) {
        snprintf(key, sizeof(key), "old-%d", i);
        CHECK_EQ(tide_exists(t, key, strlen(key)), 1);
    }
    uint8_t *big = calloc(1, 40 * MiB);
    CHECK_EQ(tide_put(u, "big", 3, big, 40 * MiB), TIDE_ENOSPACE);

    kill_child(child);
    WAIT_FIGURE(t, pinned, 0);
    /* Eviction proceeds: the 40 MiB value fits now, and then 64 MiB of newer values fill
     * the whole pool, which leaves no room for any old one. */
    CHECK_MSG(tide_put(u, "big", 3, big, 40 * MiB) == 0, "put big: %s", tide_errmsg(u));
    for (int i = 0; i < 8; i++) {
        snprintf(key, sizeof(key), "newer-%d", i);
        fill(v, 8 * MiB, 300u + (unsigned)i);
        CHECK_MSG(tide_put(u, key, strlen(key), v, 8 * MiB) == 0, "put %s: %s", key,
                  tide_errmsg(u));
    }
    for (int i = 0; i < 4; i++) {
        snprintf(key, sizeof(key), "old-%d", i);
        CHECK_EQ(tide_exists(t, key, strlen(key)), 0);
    }
    CHECK_EQ(stats_of(t).objects, 8);
    free(big);
    free(v);
    tide_close(u);
    tide_close(t);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}

TEST_T(unix_leases_expire, 60) {
    char path[256];
    sock_path(path, sizeof(path));
    test_server ts;
    const char *const lease[] = {"--unix-lease-ms", "200", NULL};
    start_unix(&ts, path, "16MiB", lease);
    tide_store *t;
    CHECK_MSG(tide_open(ts.url, &t) == 0, "%s", tide_errmsg(NULL));
    CHECK_EQ(tide_put(t, "pinned", 6, "value", 5), 0);
    raw r;
    CHECK_EQ(raw_open(&r, path, 1), 0);
    frame_entry res, pin;
    CHECK_EQ(raw_reserve(&r, "slow", MiB, &res), 0);
    CHECK_EQ(res.status, 0);
    CHECK(res.id != 0);
    CHECK_EQ(raw_pin(&r, "pinned", &pin), 0);
    CHECK_EQ(pin.status, 0);
    tide_stats st = stats_of(t);
    CHECK_EQ(st.reserved, 1);
    CHECK_EQ(st.pinned, 1);
    /* The client is alive and connected but silent: its leases run out anyway. */
    WAIT_FIGURE(t, reserved, 0);
    WAIT_FIGURE(t, pinned, 0);
    CHECK_EQ(raw_finish(&r, FRAME_OP_COMMIT, res.id, 0, 0), TIDE_ENOTFOUND);
    CHECK_EQ(raw_finish(&r, FRAME_OP_RELEASE, pin.id, 0, 0), TIDE_ENOTFOUND);
    CHECK_EQ(tide_exists(t, "slow", 4), 0);
    CHECK_EQ(stats_of(t).used_bytes, 256); /* only "pinned" (one 256-byte unit) */
    CHECK_EQ(tide_put(t, "slow", 4, "now", 3), 0);
    raw_close(&r);
    tide_close(t);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}

TEST(unix_lease_ids_belong_to_their_connection) {
    char path[256];
    sock_path(path, sizeof(path));
    test_server ts;
    start_unix(&ts, path, "16MiB", NULL);
    tide_store *t;
    CHECK_MSG(tide_open(ts.url, &t) == 0, "%s", tide_errmsg(NULL));
    CHECK_EQ(tide_put(t, "shared", 6, "bytes", 5), 0);
    raw a, b;
    CHECK_EQ(raw_open(&a, path, 1), 0);
    CHECK_EQ(raw_open(&b, path, 1), 0);
    frame_entry res, pin;
    CHECK_EQ(raw_reserve(&a, "mine", 5, &res), 0);
    CHECK_EQ(raw_pin(&a, "shared", &pin), 0);
    /* b cannot commit, abort or release what a holds, nor ids that do not exist. */
    CHECK_EQ(raw_finish(&b, FRAME_OP_COMMIT, res.id, 1, 0), TIDE_ENOTFOUND);
    CHECK_EQ(raw_finish(&b, FRAME_OP_RELEASE, res.id, 0, 0), TIDE_ENOTFOUND);
    CHECK_EQ(raw_finish(&b, FRAME_OP_RELEASE, pin.id, 0, 0), TIDE_ENOTFOUND);
    CHECK_EQ(raw_finish(&b, FRAME_OP_RELEASE, 987654321, 0, 0), TIDE_ENOTFOUND);
    tide_stats st = stats_of(t);
    CHECK_EQ(st.reserved, 1);
    CHECK_EQ(st.pinned, 1);
    /* A second reserve of a key in flight is "already there": nothing to write. */
    frame_entry dup;
    CHECK_EQ(raw_reserve(&b, "mine", 5, &dup), 0);
    CHECK_EQ(dup.status, 0);
    CHECK_EQ(dup.id, 0);
    /* a finishes its own. */
    memcpy(a.pool + res.offset, "hello", 5);
    tide_store *u;
    char url[300];
    unix_url(url, sizeof(url), path);
    CHECK_MSG(tide_open(url, &u) == 0, "%s", tide_errmsg(NULL));
    /* The checksum a writer gives is what verifying readers hold the bytes to. */
    CHECK_EQ(raw_finish(&a, FRAME_OP_COMMIT, res.id, checksum_buf("hello", 5), 0), 0);
    CHECK_EQ(raw_finish(&a, FRAME_OP_RELEASE, pin.id, 0, 0), 0);
    st = stats_of(t);
    CHECK_EQ(st.reserved, 0);
    CHECK_EQ(st.pinned, 0);
    char out[8] = {0};
    size_t len;
    CHECK_EQ(tide_get(u, "mine", 4, out, sizeof(out), &len), 0);
    CHECK_STR(out, "hello");
    /* The get's RELEASE was sent without waiting for its answer; it lands all the same. */
    WAIT_FIGURE(t, pinned, 0);
    tide_close(u);
    raw_close(&a);
    raw_close(&b);
    tide_close(t);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}

TEST(unix_corrupted_pool_bytes_are_a_miss) {
    char path[256], url[300];
    sock_path(path, sizeof(path));
    unix_url(url, sizeof(url), path);
    test_server ts;
    start_unix(&ts, path, "16MiB", NULL);
    tide_store *u, *t;
    CHECK_MSG(tide_open(url, &u) == 0, "%s", tide_errmsg(NULL));
    CHECK_MSG(tide_open(ts.url, &t) == 0, "%s", tide_errmsg(NULL));
    uint8_t v[10000], o[10000];
    fill(v, sizeof(v), 7);
    CHECK_EQ(tide_put(u, "victim", 6, v, sizeof(v)), 0);
    CHECK_EQ(tide_put(u, "victim2", 7, v, sizeof(v)), 0);
    /* A misbehaving client scribbles over both objects through its own mapping. */
    raw r;
    CHECK_EQ(raw_open(&r, path, 1), 0);
    const char *names[2] = {"victim", "victim2"};
    for (int i = 0; i < 2; i++) {
        frame_entry e;
        CHECK_EQ(raw_pin(&r, names[i], &e), 0);
        CHECK_EQ(e.status, 0);
        r.pool[e.offset + 5000] ^= 0xff;
        CHECK_EQ(raw_finish(&r, FRAME_OP_RELEASE, e.id, 0, 0), 0);
    }
    raw_close(&r);
    /* Readers that verify get a miss, over either door. A unix:// reader also tells tided,
     * which counts it and drops the object. (A tide:// reader checks on its side only.) */
    size_t len;
    CHECK_EQ(tide_get(u, "victim", 6, o, sizeof(o), &len), TIDE_ENOTFOUND);
    CHECK_EQ(tide_get(t, "victim2", 7, o, sizeof(o), &len), TIDE_ENOTFOUND);
    /* The report rides on a RELEASE that the reader does not wait for: wait for it here. */
    WAIT_FIGURE(t, checksum_errors, 1);
    CHECK_EQ(tide_exists(t, "victim", 6), 0);
    CHECK_EQ(tide_get(u, "victim2", 7, o, sizeof(o), &len), TIDE_ENOTFOUND);
    WAIT_FIGURE(t, checksum_errors, 2);
    CHECK_EQ(tide_exists(t, "victim2", 7), 0);
    tide_close(u);
    tide_close(t);
    CHECK_EQ(server_stop(&ts, SIGTERM), 0);
}

TEST(unix_bad_urls) {
    tide_store *s = NULL;
    CHECK_EQ(tide_open("unix://relative.sock", &s), TIDE_EURL);
    CHECK_CONTAINS(tide_errmsg(NULL), "ABSOLUTE");
    char url[400];
    snprintf(url, sizeof(url), "unix://%s/absent.sock", test_tmpdir());
    CHECK_EQ(tide_open(url, &s), -ENOENT);
    CHECK_CONTAINS(tide_errmsg(NULL), "absent.sock");
    CHECK_CONTAINS(tide_errmsg(NULL), "No such file");
    snprintf(url, sizeof(url), "unix://%s/x.sock?colour=blue", test_tmpdir());
    CHECK_EQ(tide_open(url, &s), TIDE_EOPTION);
    CHECK_CONTAINS(tide_errmsg(NULL), "colour");
}
