/*
 * uds.c — tided's Unix socket listener for same-host clients (unix:// URLs).
 *
 * The socket is the door to the whole pool: a client that passes HELLO on it receives the
 * pool's memfd and maps it read-write. So the door is guarded twice (docs/UNIX.md):
 *   - the socket file is created with mode cfg.unix_mode (0600 by default: tided's user
 *     only). The umask is narrowed around bind() so the file never exists with wider bits,
 *     not even for an instant; uds_listen runs before any other thread of tided starts.
 *   - with --unix-allow-uid, the peer's uid (SO_PEERCRED, as the kernel saw it at connect)
 *     must be listed; others get an error frame and are closed at accept.
 *
 * A socket file left by a tided that died is replaced; a live one (something accepts on
 * it) or a path that is not a socket is never touched. At stop the file is removed only if
 * it is still the one this tided created (same device and inode).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/log.h"
#include "server/server_int.h"

/* Is someone accepting on the socket at path? 1 yes, 0 no (refused: a stale file). */
static int uds_live(const struct sockaddr_un *a) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return 0;
    int live = connect(fd, (const struct sockaddr *)a, sizeof(*a)) == 0 ||
               (errno != ECONNREFUSED && errno != ENOENT);
    close(fd);
    return live;
}

int uds_listen(server *srv) {
    const char *path = srv->cfg.unix_path;
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    size_t plen = strlen(path);
    if (plen == 0 || plen >= sizeof(a.sun_path)) {
        LOG_ERROR("cannot listen on unix socket '%s': the path must be 1..%zu bytes", path,
                  sizeof(a.sun_path) - 1);
        return -ENAMETOOLONG;
    }
    memcpy(a.sun_path, path, plen + 1);

    struct stat sb;
    if (lstat(path, &sb) == 0) {
        if (!S_ISSOCK(sb.st_mode)) {
            LOG_ERROR("cannot listen on unix socket %s: the path exists and is not a socket; "
                      "refusing to replace it",
                      path);
            return -EEXIST;
        }
        if (uds_live(&a)) {
            LOG_ERROR("cannot listen on unix socket %s: another process is serving it", path);
            return -EADDRINUSE;
        }
        LOG_INFO("removing stale unix socket %s (nothing accepts on it)", path);
        if (unlink(path) != 0 && errno != ENOENT) {
            int e = errno;
            LOG_ERROR("cannot remove stale unix socket %s: %s", path, strerror(e));
            return -e;
        }
    }

    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        int e = errno;
        LOG_ERROR("cannot listen on unix socket %s: socket: %s", path, strerror(e));
        return -e;
    }
    mode_t mode = (mode_t)(srv->cfg.unix_mode & 0777);
    mode_t old = umask((mode_t)(~mode & 0777));
    int brc = bind(fd, (struct sockaddr *)&a, sizeof(a));
    int e = errno;
    umask(old);
    if (brc != 0) {
        LOG_ERROR("cannot listen on unix socket %s: bind: %s", path, strerror(e));
        close(fd);
        return -e;
    }
    /* bind() honours the umask only; chmod makes the bits exactly what was asked. */
    if (chmod(path, mode) != 0 || listen(fd, 512) != 0 || stat(path, &sb) != 0) {
        e = errno;
        LOG_ERROR("cannot listen on unix socket %s: %s", path, strerror(e));
        close(fd);
        unlink(path);
        return -e;
    }
    srv->unix_fd = fd;
    srv->unix_dev = (uint64_t)sb.st_dev;
    srv->unix_ino = (uint64_t)sb.st_ino;
    return 0;
}

int uds_peer_allowed(server *srv, int fd) {
    if (srv->cfg.unix_nallow == 0) return 1;
    struct ucred cred;
    socklen_t len = sizeof(cred);
    char msg[200];
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
        snprintf(msg, sizeof(msg), "unix socket %s: cannot read the peer's credentials: %s",
                 srv->cfg.unix_path, strerror(errno));
    } else {
        for (int i = 0; i < srv->cfg.unix_nallow; i++)
            if (srv->cfg.unix_allow_uid[i] == (uint32_t)cred.uid) return 1;
        snprintf(msg, sizeof(msg),
                 "unix socket %s: peer uid %u (pid %d) is not in "
                 "--unix-allow-uid",
                 srv->cfg.unix_path, (unsigned)cred.uid, (int)cred.pid);
    }
    LOG_LIMITED(LOG_LEVEL_WARN, "refusing a connection: %s", msg);
    /* Say why before closing. The socket is new and empty, so a frame this small fits in
     * its buffer; if it does not, the peer sees only the close. */
    uint8_t frame[FRAME_HDR_SIZE + sizeof(msg)];
    size_t flen;
    if (frame_encode_error(frame, sizeof(frame), &flen, FRAME_OP_ERROR, 0, TIDE_EAUTH, msg,
                           strlen(msg)) == 0) {
        ssize_t w = send(fd, frame, flen, MSG_NOSIGNAL | MSG_DONTWAIT);
        (void)w;
    }
    return 0;
}

void uds_close(server *srv) {
    if (srv->unix_fd < 0) return;
    close(srv->unix_fd);
    srv->unix_fd = -1;
    struct stat sb;
    const char *path = srv->cfg.unix_path;
    if (lstat(path, &sb) == 0 && (uint64_t)sb.st_dev == srv->unix_dev &&
        (uint64_t)sb.st_ino == srv->unix_ino)
        unlink(path);
}
