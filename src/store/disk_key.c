/*
 * disk_key.c — the SSD tier's secret (DIR/tide.secret) and the keyed checksum made with it:
 * HMAC-SHA256 from OpenSSL, cut to 64 bits, over every segment and record header (disk.c).
 * Whoever can read the secret can forge records, so it is made private and refused when it
 * is not: any group or other permission bit, another owner, a link, a wrong size.
 *
 * The keyed context is initialised once and only ever copied (disk_key_mac), so any thread
 * may compute checksums with it at the same time.
 */
#include <errno.h>
#include <fcntl.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store/store_int.h"

#define SECRET_NAME "tide.secret"
#define SECRET_LEN 32u
#define KEY_PATH_MAX 1024

/* Make DIR/tide.secret: written under a private temporary name, then linked into place, so
 * a crash never leaves half a secret under the real name and two openers agree on one. */
static int make_secret(const char *dir, const char *path, char *err, size_t errlen) {
    char tmp[KEY_PATH_MAX];
    snprintf(tmp, sizeof(tmp), "%s/.tide-secret-%d", dir, (int)getpid());
    unlink(tmp);
    uint8_t fresh[SECRET_LEN];
    int rc = getrandom(fresh, sizeof(fresh), 0) == (ssize_t)sizeof(fresh) ? 0 : -EIO;
    int t = rc == 0 ? open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600) : -1;
    if (rc == 0 && t < 0) rc = -errno;
    if (t >= 0) {
        errno = 0;
        if (write(t, fresh, sizeof(fresh)) != (ssize_t)sizeof(fresh) || fsync(t) != 0)
            rc = errno ? -errno : -EIO;
        close(t);
        if (rc == 0 && link(tmp, path) != 0 && errno != EEXIST) rc = -errno;
        unlink(tmp);
    }
    OPENSSL_cleanse(fresh, sizeof(fresh));
    if (rc < 0)
        snprintf(err, errlen, "disk_dir %s: cannot create its secret %s: %s", dir, path,
                 strerror(-rc));
    return rc;
}

/* Read the secret (made at first use) after checking that it is private and whole. */
static int load_secret(const char *dir, uint8_t *secret, char *err, size_t errlen) {
    char path[KEY_PATH_MAX];
    snprintf(path, sizeof(path), "%s/" SECRET_NAME, dir);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) {
        int rc = make_secret(dir, path, err, errlen);
        if (rc < 0) return rc;
        fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    }
    if (fd < 0) {
        int e = errno;
        snprintf(err, errlen, "disk secret %s: %s%s", path, strerror(e),
                 e == ELOOP ? " (a symbolic link: the secret must be a file of its own)" : "");
        return -e;
    }
    struct stat sb;
    int rc = 0;
    if (fstat(fd, &sb) != 0) {
        rc = -errno;
        snprintf(err, errlen, "disk secret %s: %s", path, strerror(-rc));
    } else if (!S_ISREG(sb.st_mode)) {
        rc = TIDE_ECONFIG;
        snprintf(err, errlen, "disk secret %s is not a regular file", path);
    } else if (sb.st_mode & 077) {
        rc = TIDE_ECONFIG;
        snprintf(err, errlen,
                 "disk secret %s is mode %04o: it must be readable by its owner only "
                 "(chmod 600 %s), since whoever reads it can forge records",
                 path, (unsigned)(sb.st_mode & 07777), path);
    } else if (sb.st_uid != geteuid()) {
        rc = TIDE_ECONFIG;
        snprintf(err, errlen, "disk secret %s belongs to uid %u, not to tided's uid %u", path,
                 (unsigned)sb.st_uid, (unsigned)geteuid());
    } else if (sb.st_size != SECRET_LEN) {
        rc = TIDE_ECONFIG;
        snprintf(err, errlen,
                 "disk secret %s is %lld bytes, not %u: not a tide disk secret (remove it "
                 "together with the *.seg files to start the tier empty)",
                 path, (long long)sb.st_size, SECRET_LEN);
    } else if (pread(fd, secret, SECRET_LEN, 0) != (ssize_t)SECRET_LEN) {
        rc = -EIO;
        snprintf(err, errlen, "disk secret %s: short read", path);
    }
    close(fd);
    return rc;
}

int disk_key_open(disk_key *k, const char *dir, char *err, size_t errlen) {
    memset(k, 0, sizeof(*k));
    uint8_t secret[SECRET_LEN];
    int rc = load_secret(dir, secret, err, errlen);
    if (rc < 0) return rc;
    char digest[] = "SHA256";
    OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                           OSSL_PARAM_construct_end()};
    k->mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    k->base = k->mac ? EVP_MAC_CTX_new(k->mac) : NULL;
    if (!k->base || EVP_MAC_init(k->base, secret, SECRET_LEN, params) != 1) {
        snprintf(err, errlen, "OpenSSL's HMAC-SHA256 is not available for the disk tier");
        rc = TIDE_ECONFIG;
    }
    OPENSSL_cleanse(secret, sizeof(secret));
    static const char label[] = "tide disk key id";
    struct iovec part = {(void *)label, sizeof(label) - 1};
    if (rc == 0 && disk_key_mac(k, &part, 1, &k->id) < 0) {
        snprintf(err, errlen, "out of memory keying the disk tier");
        rc = -ENOMEM;
    }
    if (rc < 0) disk_key_close(k);
    return rc;
}

void disk_key_close(disk_key *k) {
    EVP_MAC_CTX_free(k->base);
    EVP_MAC_free(k->mac);
    k->base = NULL;
    k->mac = NULL;
}

int disk_key_mac(const disk_key *k, const struct iovec *parts, int n, uint64_t *out) {
    EVP_MAC_CTX *c = EVP_MAC_CTX_dup(k->base);
    if (!c) return -ENOMEM;
    int ok = 1;
    for (int i = 0; ok && i < n; i++)
        ok = EVP_MAC_update(c, parts[i].iov_base, parts[i].iov_len) == 1;
    unsigned char md[EVP_MAX_MD_SIZE];
    size_t mdlen = 0;
    ok = ok && EVP_MAC_final(c, md, &mdlen, sizeof(md)) == 1 && mdlen >= 8;
    EVP_MAC_CTX_free(c);
    if (!ok) return -ENOMEM;
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | md[i];
    *out = v;
    return 0;
}
