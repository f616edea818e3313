/*
 * server_util.c — start tided as a child process and wait for its ready file.
 */
#include "server_util.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "proto/frame.h"

void server_start(test_server *ts, const char *const *extra) {
    static int serial;
    char ready[256];
    snprintf(ready, sizeof(ready), "%s/ready-%d-%d", test_tmpdir(), (int)getpid(), serial);
    snprintf(ts->log, sizeof(ts->log), "%s/tided-%d-%d.log", test_tmpdir(), (int)getpid(),
             serial++);
    unlink(ready);
    const char *argv[64] = {test_tide_bin(), "serve", "--port", "0", "--ready-file", ready};
    int argc = 6;
    for (int i = 0; extra && extra[i] && argc < 62; i++)
        argv[argc++] = extra[i];
    argv[argc] = NULL;
    pid_t pid = fork();
    if (pid == 0) {
        /* stdout too: tided writes nothing there itself, but UCX's default log handler
         * does, and its lines are tided's log as much as stderr's. */
        int fd = open(ts->log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) dup2(fd, 1), dup2(fd, 2);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    ts->pid = pid;
    for (int i = 0; i < 1000; i++) { /* up to 10 s */
        FILE *f = fopen(ready, "r");
        if (f) {
            int ok = fscanf(f, "%d %d", &ts->port, &ts->metrics_port) == 2;
            fclose(f);
            if (ok) {
                snprintf(ts->url, sizeof(ts->url), "tide://127.0.0.1:%d", ts->port);
                return;
            }
        }
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            char cmd[300];
            snprintf(cmd, sizeof(cmd), "cat %s >&2", ts->log);
            if (system(cmd)) {
            }
            test_fail(__FILE__, __LINE__, "tide serve exited before listening (status %d)", st);
        }
        struct timespec d = {0, 10000000};
        nanosleep(&d, NULL);
    }
    kill(pid, SIGKILL);
    test_fail(__FILE__, __LINE__, "tide serve did not start within 10 s");
}

void server_start_unix(test_server *ts, const char *path, const char *capacity,
                       const char *log_level, const char *const *extra) {
    const char *args[48] = {"--capacity", capacity, "--log-level",    log_level,
                            "--unix",     path,     "--metrics-port", "0"};
    int n = 8;
    for (int i = 0; extra && extra[i]; i++) {
        if (n == 47) test_fail(__FILE__, __LINE__, "server_start_unix: too many arguments");
        args[n++] = extra[i];
    }
    args[n] = NULL;
    server_start(ts, args);
}

int server_serve_status(const char *args, char *out, size_t cap) {
    char cmd[1024];
    int w = snprintf(cmd, sizeof(cmd), "timeout 5 %s serve --port 0 --metrics-port 0 %s 2>&1",
                     test_tide_bin(), args);
    CHECK_MSG(w > 0 && (size_t)w < sizeof(cmd), "command too long: serve %s", args);
    return test_run(cmd, out, cap);
}

int server_stop(test_server *ts, int sig) {
    int st = 0;
    kill(ts->pid, sig);
    for (int i = 0; i < 1000; i++) { /* up to 10 s, then force */
        if (waitpid(ts->pid, &st, WNOHANG) == ts->pid) {
            if (sig != SIGKILL && st != 0) { /* show why it did not stop cleanly */
                char cmd[300];
                snprintf(cmd, sizeof(cmd), "tail -n 40 %s >&2", ts->log);
                if (system(cmd)) {
                }
            }
            return st;
        }
        struct timespec d = {0, 10000000};
        nanosleep(&d, NULL);
    }
    kill(ts->pid, SIGKILL);
    waitpid(ts->pid, &st, 0);
    return st;
}

int server_connect(int port, int timeout_s) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0)
        test_fail(__FILE__, __LINE__, "cannot connect to port %d", port);
    struct timeval tv = {.tv_sec = timeout_s};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

int server_put_half_sent(int port, const char *key, uint8_t *val, size_t vlen) {
    tide_key k = {key, strlen(key)};
    tide_iov v = {val, vlen};
    uint8_t head[512];
    size_t hlen;
    CHECK_EQ(frame_encode_put(head, sizeof(head), &hlen, 9, &k, 1, &v, NULL, NULL, NULL), 0);
    int fd = server_connect(port, 10);
    CHECK(fd >= 0);
    CHECK_EQ(send(fd, head, hlen, MSG_NOSIGNAL), (ssize_t)hlen);
    CHECK_EQ(send(fd, val, vlen / 2, MSG_NOSIGNAL), (ssize_t)(vlen / 2));
    return fd;
}

long long server_metric(int metrics_port, const char *name) {
    int fd = server_connect(metrics_port, 5);
    CHECK_MSG(fd >= 0, "no metrics port %d", metrics_port);
    static const char req[] = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
    CHECK_EQ(send(fd, req, sizeof(req) - 1, MSG_NOSIGNAL), (ssize_t)(sizeof(req) - 1));
    size_t cap = 1 << 20, have = 0;
    char *buf = malloc(cap);
    CHECK(buf != NULL);
    for (ssize_t r; have < cap - 1 && (r = recv(fd, buf + have, cap - 1 - have, 0)) > 0;)
        have += (size_t)r;
    buf[have] = '\0';
    close(fd);
    char pat[128];
    snprintf(pat, sizeof(pat), "\n%s ", name);
    const char *p = strstr(buf, pat);
    long long v = p ? atoll(p + strlen(pat)) : -1;
    free(buf);
    return v;
}

/* 1 when every thread of pid is in state T (stopped) or t (traced). */
static int all_threads_stopped(pid_t pid) {
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    if (!d) return 0;
    int all = 1;
    struct dirent *e;
    while (all && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char sp[320], buf[512];
        snprintf(sp, sizeof(sp), "/proc/%d/task/%s/stat", (int)pid, e->d_name);
        FILE *f = fopen(sp, "r");
        if (!f) continue; /* a thread that just exited */
        size_t n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = 0;
        const char *paren = strrchr(buf, ')'); /* the state follows the command's ") " */
        all = paren && (paren[2] == 'T' || paren[2] == 't');
    }
    closedir(d);
    return all;
}

void server_sigstop(pid_t pid) {
    CHECK_EQ(kill(pid, SIGSTOP), 0);
    double deadline = test_now_ms() + 10000;
    while (!all_threads_stopped(pid)) {
        CHECK_MSG(test_now_ms() < deadline, "pid %d: not every thread stopped 10 s after SIGSTOP",
                  (int)pid);
        usleep(1000);
    }
}

long server_status_kib(pid_t pid, const char *field) {
    char path[64], line[256], want[64];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    snprintf(want, sizeof(want), "%s: %%ld kB", field);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    long kib = -1;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, want, &kib) == 1) break;
    fclose(f);
    return kib;
}
