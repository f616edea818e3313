/*
 * syscount.c — an LD_PRELOAD shim that counts a process's socket and event-loop syscalls
 * (recv, recvfrom, recvmsg, readv, writev, sendmsg, send, epoll_wait, epoll_ctl, poll,
 * setsockopt), the EAGAIN answers among them and the bytes moved, and writes them at exit
 * to $SYSCOUNT_OUT.PID ("name calls eagain bytes" a line). bench/syscalls.sh builds and
 * uses it; perf is not available on the project's machines, and strace slows a loopback
 * exchange so much that the counts it sees are not those of a normal run.
 *
 *   gcc -O2 -shared -fPIC -o build/syscount.so scripts/syscount.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

enum { RECV, RECVFROM, RECVMSG, READV, WRITEV, SENDMSG, SEND, EPWAIT, EPCTL, POLL, SOCKOPT, N };
static const char *const names[N] = {"recv",      "recvfrom", "recvmsg",   "readv",
                                     "writev",    "sendmsg",  "send",      "epoll_wait",
                                     "epoll_ctl", "poll",     "setsockopt"};
static atomic_long calls[N], eagain[N], bytes[N];

static void count(int i, long r, int err) {
    atomic_fetch_add_explicit(&calls[i], 1, memory_order_relaxed);
    if (r < 0 && (err == EAGAIN || err == EWOULDBLOCK))
        atomic_fetch_add_explicit(&eagain[i], 1, memory_order_relaxed);
    else if (r > 0 && i < EPWAIT)
        atomic_fetch_add_explicit(&bytes[i], r, memory_order_relaxed);
}

/* Call the real f with the arguments, count it as slot i, keep errno. */
#define WRAP(i, f, ...)                                                                            \
    static __typeof__(f) *real;                                                                    \
    if (!real) real = (__typeof__(f) *)dlsym(RTLD_NEXT, #f);                                       \
    __typeof__(f(__VA_ARGS__)) r = real(__VA_ARGS__);                                              \
    int e = errno;                                                                                 \
    count(i, (long)r, e);                                                                          \
    errno = e;                                                                                     \
    return r

ssize_t recv(int fd, void *b, size_t n, int fl) {
    WRAP(RECV, recv, fd, b, n, fl);
}
ssize_t recvfrom(int fd, void *b, size_t n, int fl, struct sockaddr *a, socklen_t *l) {
    WRAP(RECVFROM, recvfrom, fd, b, n, fl, a, l);
}
ssize_t recvmsg(int fd, struct msghdr *m, int fl) {
    WRAP(RECVMSG, recvmsg, fd, m, fl);
}
ssize_t readv(int fd, const struct iovec *v, int n) {
    WRAP(READV, readv, fd, v, n);
}
ssize_t writev(int fd, const struct iovec *v, int n) {
    WRAP(WRITEV, writev, fd, v, n);
}
ssize_t sendmsg(int fd, const struct msghdr *m, int fl) {
    WRAP(SENDMSG, sendmsg, fd, m, fl);
}
ssize_t send(int fd, const void *b, size_t n, int fl) {
    WRAP(SEND, send, fd, b, n, fl);
}
int epoll_wait(int ep, struct epoll_event *ev, int m, int t) {
    WRAP(EPWAIT, epoll_wait, ep, ev, m, t);
}
int epoll_ctl(int ep, int op, int fd, struct epoll_event *ev) {
    WRAP(EPCTL, epoll_ctl, ep, op, fd, ev);
}
int poll(struct pollfd *p, nfds_t n, int t) {
    WRAP(POLL, poll, p, n, t);
}
int setsockopt(int fd, int l, int o, const void *v, socklen_t len) {
    WRAP(SOCKOPT, setsockopt, fd, l, o, v, len);
}

__attribute__((destructor)) static void syscount_dump(void) {
    const char *out = getenv("SYSCOUNT_OUT");
    if (!out) return;
    char path[4096];
    snprintf(path, sizeof(path), "%s.%d", out, (int)getpid());
    FILE *f = fopen(path, "w");
    if (!f) return;
    for (int i = 0; i < N; i++)
        if (calls[i]) fprintf(f, "%s %ld %ld %ld\n", names[i], calls[i], eagain[i], bytes[i]);
    fclose(f);
}
