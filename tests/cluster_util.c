/*
 * cluster_util.c — start tided nodes and etcd for the cluster tests.
 */
#include "cluster_util.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/prng.h"
#include "common/etcd.h"
#include "harness.h"

static const char *const node_quiet[] = {"--capacity",     "64MiB", "--log-level", "warn",
                                         "--metrics-port", "0",     NULL};

void cluster_start_node(test_server *ts, int port, const char *const *extra) {
    const char *argv[40];
    int n = 0;
    for (int i = 0; node_quiet[i]; i++)
        argv[n++] = node_quiet[i];
    char pbuf[16];
    if (port) {
        snprintf(pbuf, sizeof(pbuf), "%d", port);
        argv[n++] = "--port";
        argv[n++] = pbuf;
    }
    for (int i = 0; extra && extra[i] && n < 38; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    server_start(ts, argv);
}

void cluster_start_nodes_with(test_server *ts, int n, int *ports, const char *const *extra) {
    for (int i = 0; i < n; i++) {
        int port = ports ? (ports[i] = test_free_port()) : 0;
        cluster_start_node(&ts[i], port, extra);
    }
}

void cluster_start_nodes(test_server *ts, int n, int *ports) {
    cluster_start_nodes_with(ts, n, ports, NULL);
}

void cluster_restart_node(test_server *ts, int port) {
    cluster_start_node(ts, port, NULL);
}

void cluster_url(char *buf, size_t cap, const test_server *ts, int n, const char *opts) {
    size_t len = (size_t)snprintf(buf, cap, "tide://");
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s127.0.0.1:%d", i ? "," : "", ts[i].port);
    snprintf(buf + len, cap - len, "?%s", opts);
}

size_t cluster_value(char *key, size_t cap, uint8_t *v, int i) {
    snprintf(key, cap, "ld-%d", i);
    size_t len = 100 + (size_t)((unsigned)i * 37u % 3900u);
    uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1);
    for (size_t j = 0; j < len; j++) {
        v[j] = (uint8_t)prng_next(&x);
    }
    return len;
}

void etcd_start(test_etcd *e) {
    etcd_start_on(e, 0);
}

void etcd_start_on(test_etcd *e, int client_port) {
    etcd_start_at(e, "127.0.0.1", client_port);
}

void etcd_start_at(test_etcd *e, const char *host, int client_port) {
    e->client_port = client_port ? client_port : test_free_port();
    do
        e->peer_port = test_free_port();
    while (e->peer_port == e->client_port);
    snprintf(e->endpoint, sizeof(e->endpoint), "%s:%d", host, e->client_port);
    snprintf(e->log, sizeof(e->log), "%s/etcd.log", test_tmpdir());
    char dir[300], curl[80], purl[80], cluster[100];
    snprintf(dir, sizeof(dir), "%s/etcd-data", test_tmpdir());
    snprintf(curl, sizeof(curl), "http://%s:%d", host, e->client_port);
    snprintf(purl, sizeof(purl), "http://%s:%d", host, e->peer_port);
    snprintf(cluster, sizeof(cluster), "t=%s", purl);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(e->log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) dup2(fd, 1), dup2(fd, 2);
        execlp("etcd", "etcd", "--name", "t", "--data-dir", dir, "--listen-client-urls", curl,
               "--advertise-client-urls", curl, "--listen-peer-urls", purl,
               "--initial-advertise-peer-urls", purl, "--initial-cluster", cluster, (char *)NULL);
        _exit(127);
    }
    e->pid = pid;
    etcd_client *c;
    char err[512];
    if (etcd_open(e->endpoint, 500, &c, err, sizeof(err)) != 0)
        test_fail(__FILE__, __LINE__, "%s", err);
    for (int i = 0; i < 200; i++) { /* up to ~20 s */
        int64_t id;
        if (etcd_lease_grant(c, 5, &id, err, sizeof(err)) == 0) {
            etcd_lease_revoke(c, id, err, sizeof(err));
            etcd_close(c);
            return;
        }
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid)
            test_fail(__FILE__, __LINE__, "etcd exited before answering (see %s)", e->log);
        struct timespec d = {0, 100000000};
        nanosleep(&d, NULL);
    }
    etcd_close(c);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    test_fail(__FILE__, __LINE__, "etcd did not answer within 20 s: %s", err);
}

void etcd_kill(test_etcd *e) {
    if (e->pid <= 0) return;
    kill(e->pid, SIGKILL);
    waitpid(e->pid, NULL, 0);
    e->pid = 0;
}
