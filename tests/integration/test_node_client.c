/*
 * test_node_client.c — the tide:// client against a scripted fake server, for replies a
 * real tided never sends: a GET value whose bytes do not match the checksum in the reply
 * must come back as a miss (never as data), also when the value arrives in small pieces
 * and lands in a scatter list.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/checksum.h"
#include "harness.h"
#include "proto/frame.h"
#include "tide.h"

#define VAL_LEN (300 * 1024 + 5)

typedef struct fake {
    int lfd;
    uint8_t *vals[2];
} fake;

/* Read one request frame (head and any values) from a blocking socket. */
static int fake_read(int fd, uint8_t *buf, size_t cap, frame_msg *m) {
    frame_decoder d;
    frame_decoder_init(&d, NULL);
    size_t have = 0;
    for (;;) {
        ssize_t n = frame_decode(&d, buf, have, m);
        if (n != 0) return n > 0 ? 0 : -1;
        if (have == cap) return -1;
        ssize_t r = recv(fd, buf + have, cap - have, 0);
        if (r <= 0) return -1;
        have += (size_t)r;
    }
}

/* Send in 1000-byte pieces, so the client sees the value arrive a little at a time. */
static void fake_send(int fd, const uint8_t *p, size_t n) {
    while (n) {
        size_t take = n < 1000 ? n : 1000;
        if (send(fd, p, take, MSG_NOSIGNAL) != (ssize_t)take) return;
        p += take;
        n -= take;
    }
}

/* Answer HELLO, then one GET of two keys: value 0 with its right checksum, value 1 with a
 * checksum of other bytes. */
static void *fake_main(void *arg) {
    fake *f = arg;
    int fd = accept(f->lfd, NULL, NULL);
    uint8_t buf[8192], out[512];
    frame_msg m;
    size_t len;
    if (fd < 0 || fake_read(fd, buf, sizeof(buf), &m) != 0) goto out;
    frame_hello_reply hr = {FRAME_VERSION, 4096, 0, 1ull << 30, 1ull << 32, 0};
    frame_encode_hello_reply(out, sizeof(out), &len, m.h.req_id, &hr);
    fake_send(fd, out, len);
    if (fake_read(fd, buf, sizeof(buf), &m) != 0 || m.h.count != 2) goto out;
    int32_t st[2] = {0, 0};
    uint64_t vlens[2] = {VAL_LEN, VAL_LEN};
    uint64_t sums[2] = {checksum_buf(f->vals[0], VAL_LEN), checksum_buf(f->vals[0], VAL_LEN)};
    frame_encode_get_reply(out, sizeof(out), &len, m.h.req_id, st, vlens, sums, 2, NULL);
    fake_send(fd, out, len);
    fake_send(fd, f->vals[0], VAL_LEN);
    fake_send(fd, f->vals[1], VAL_LEN);
    /* Wait for the client to close. */
    while (recv(fd, buf, sizeof(buf), 0) > 0) {
    }
out:
    if (fd >= 0) close(fd);
    return NULL;
}

TEST(node_client_get_checksum_mismatch_is_a_miss) {
    fake f;
    f.lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    CHECK_EQ(bind(f.lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    CHECK_EQ(listen(f.lfd, 1), 0);
    CHECK_EQ(getsockname(f.lfd, (struct sockaddr *)&sa, &sl), 0);
    for (int v = 0; v < 2; v++) {
        f.vals[v] = malloc(VAL_LEN);
        CHECK(f.vals[v]);
        for (size_t i = 0; i < VAL_LEN; i++)
            f.vals[v][i] = (uint8_t)(i * 31 + (size_t)v * 7 + (i >> 9));
    }
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, fake_main, &f), 0);

    char url[64];
    snprintf(url, sizeof(url), "tide://127.0.0.1:%u", ntohs(sa.sin_port));
    tide_store *s = NULL;
    CHECK_EQ(tide_open(url, &s), 0);
    /* Key 0 lands in a scatter list of three pieces (with room to spare); key 1 in one. */
    uint8_t *a = malloc(VAL_LEN + 100), *b = malloc(VAL_LEN);
    CHECK(a && b);
    tide_key keys[2] = {{"k0", 2}, {"k1", 2}};
    tide_iov iov[4] = {
        {a, 4096}, {a + 4096, 200000}, {a + 204096, VAL_LEN + 100 - 204096}, {b, VAL_LEN}};
    size_t cnt[2] = {3, 1}, vl[2] = {0, 0};
    int res[2] = {1, 1};
    CHECK_EQ(tide_get_many(s, keys, 2, iov, cnt, res, vl), 1);
    CHECK_EQ(res[0], 0);
    CHECK_EQ(vl[0], VAL_LEN);
    CHECK(memcmp(a, f.vals[0], VAL_LEN) == 0);
    CHECK_EQ(res[1], TIDE_ENOTFOUND);
    CHECK_EQ(vl[1], 0);
    tide_close(s);
    pthread_join(th, NULL);
    close(f.lfd);
    free(a), free(b), free(f.vals[0]), free(f.vals[1]);
}
