/*
 * disk.c — disk.h: the SSD tier's segment files, their index, the scan that rebuilds the
 * index at open, appends, verified reads and eviction by whole segments.
 *
 * Segments form a list, oldest first; the newest is the active one, appended to only by
 * the writer (disk_write). Each index entry (a dent) is on its segment's list too, so
 * dropping a segment forgets exactly its entries. A segment is freed when it has left the
 * list and no reader holds a disk_loc on it; until then its fd stays open, so a read that
 * found a record keeps working even if the file is unlinked meanwhile.
 *
 * Capacity: `used` is the sum of the segment files' sizes. Before a record is appended,
 * sealed segments are dropped oldest first until it fits (the simplest order, and the one
 * an append-only log can keep without compaction: a segment's records are all older than
 * the next one's). A record larger than the capacity is refused.
 *
 * Permissions: the directory is made 0700 and segment files 0600 (the umask may narrow them
 * further); segments found at open with wider bits are narrowed to 0600. A directory that
 * exists keeps its mode. disk_open refuses a path that is not a directory or in which a
 * file cannot be created.
 *
 * Durability: a write is reported (indexed) once the kernel has completed it, which is
 * what survives the death of the process. A sealed segment is fdatasync'ed when it is
 * sealed; the active one is not, so a power loss can lose the unsealed tail (the scan then
 * truncates what is torn).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "common/checksum.h"
#include "common/util.h"
#include "store/store_int.h"

#define SEG_MAGIC "TIDESEG1"
#define SEG_VERSION 1u
#define SEG_HDR 64u
#define REC_MAGIC 0x43455254u /* "TREC" little-endian */
#define REC_HDR 32u
#define REC_OBJECT 1
#define REC_TOMB 2
#define REC_CLEAR 3
#define SCAN_CHUNK (1u << 20)
#define WRITE_CHUNK_MAX 256 /* records in one batch of writes */
#define DISK_DIR_MAX 512    /* longest directory path */
#define DISK_PATH_MAX (DISK_DIR_MAX + 32)
/* Segment files hold KV blocks: readable by tided's user only (the directory, when tide
 * makes it, is 0700). The umask can narrow these further, never widen them. */
#define DISK_FILE_MODE 0600

typedef struct dent dent;

struct disk_seg {
    uint64_t seq;
    int fd;
    uint64_t size;  /* bytes in the file: header and every record appended */
    uint32_t refs;  /* disk_locs held, plus one while on the list */
    int dropped;    /* off the list (evicted or cleared), file unlinked */
    dent *entries;  /* index entries in this segment */
    disk_seg *next; /* list order, oldest first */
};

struct dent {
    disk_seg *seg;
    dent *sprev, *snext; /* the segment's entry list */
    uint64_t off, vlen, sum;
    uint32_t hash;
    uint16_t klen;
    uint8_t key[];
};

typedef struct pend {
    uint8_t kind; /* REC_TOMB or REC_CLEAR */
    uint16_t klen;
    uint8_t key[TIDE_KEY_MAX];
} pend;

struct disk {
    /*
     * Lock rules: `mu` guards the index, the segment list and every segment's size, refs,
     * dropped and entries, the pending records and the counters. No read or write of
     * record bytes happens under it (only unlink, close, ftruncate of a cut-back segment
     * and file creation, which are metadata calls). The active segment's file is appended
     * to only by disk_write's caller, outside the lock; it reserves the bytes under the
     * lock first (size grows), so capacity and rotation are decided in one place. Nothing
     * is called out while `mu` is held. A caller may hold the store's lock (store -> disk). Helpers named do_x()
     * expect `mu` held; x() takes it.
     */
    pthread_mutex_t mu;
    char dir[DISK_DIR_MAX];
    uint64_t capacity, seg_size;
    disk_io io;
    htab index;
    disk_seg *oldest, *active; /* list ends; active is the newest */
    int active_sealed;         /* the newest segment is an earlier run's: do not append */
    uint64_t nsegs, used, next_seq;
    uint64_t meta; /* heap bytes of entries */
    pend *pending;
    size_t npending, cap_pending;
    /* Counters (tide_stats disk_*). */
    uint64_t writes, write_bytes, reads, read_bytes, errors, checksum_errors, evictions;
    uint64_t torn;
    struct store_events *events; /* departures of evicted segments' keys (may be NULL) */
    /* What the scan at open found, for disk_describe. */
    uint64_t found_segs, found_objects, found_bytes, torn_bytes, bad_files, scan_ns;
};

typedef struct keyref {
    const void *p;
    size_t len;
} keyref;

static uint32_t dent_hash(const void *e) {
    return ((const dent *)e)->hash;
}

static int dent_eq(const void *e, const void *k) {
    const dent *d = e;
    const keyref *kr = k;
    return d->klen == kr->len && memcmp(d->key, kr->p, kr->len) == 0;
}

static uint32_t key_hash(const void *key, size_t klen) {
    uint64_t h = checksum_buf(key, klen);
    return (uint32_t)(h ^ (h >> 32));
}

uint64_t disk_record_size(uint64_t klen, uint64_t vlen) {
    return (REC_HDR + klen + vlen + 7) & ~7ull;
}

static uint64_t rec_seed(uint64_t seq, uint64_t off) {
    return seq * 0x9E3779B97F4A7C15ull ^ off;
}

static void put_le16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static void put_le32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static void put_le64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static uint16_t le16(const uint8_t *p) {
    return (uint16_t)(p[0] | p[1] << 8);
}
static uint32_t le32(const uint8_t *p) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}
static uint64_t le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* Header checksum: the first 24 header bytes and the key, seeded by place. */
static uint64_t rec_hsum(const uint8_t *hdr, const void *key, size_t klen, uint64_t seq,
                         uint64_t off) {
    uint8_t buf[24 + TIDE_KEY_MAX];
    memcpy(buf, hdr, 24);
    if (klen) memcpy(buf + 24, key, klen);
    return XXH3_64bits_withSeed(buf, 24 + klen, rec_seed(seq, off));
}

static void rec_encode(uint8_t *hdr, int kind, const void *key, uint16_t klen, uint64_t vlen,
                       uint64_t vsum, uint64_t seq, uint64_t off) {
    memset(hdr, 0, REC_HDR);
    put_le32(hdr, REC_MAGIC);
    hdr[4] = (uint8_t)kind;
    put_le16(hdr + 6, klen);
    put_le64(hdr + 8, vlen);
    put_le64(hdr + 16, vsum);
    put_le64(hdr + 24, rec_hsum(hdr, key, klen, seq, off));
}

/* A decoded record header, valid when its checksum (over the key that follows) holds. */
typedef struct rec {
    int kind;
    uint16_t klen;
    uint64_t vlen, vsum;
    const uint8_t *key;
} rec;

/* Check a header and its key at buf (have bytes) for a record at off of segment seq whose
 * file is file_size bytes. 1 and *r when valid. */
static int rec_decode(const uint8_t *buf, size_t have, uint64_t seq, uint64_t off,
                      uint64_t file_size, rec *r) {
    if (have < REC_HDR || le32(buf) != REC_MAGIC || buf[5] != 0) return 0;
    r->kind = buf[4];
    r->klen = le16(buf + 6);
    r->vlen = le64(buf + 8);
    r->vsum = le64(buf + 16);
    r->key = buf + REC_HDR;
    if (r->kind < REC_OBJECT || r->kind > REC_CLEAR || r->klen > TIDE_KEY_MAX) return 0;
    if ((r->kind == REC_CLEAR) != (r->klen == 0)) return 0;
    if (r->kind != REC_OBJECT && r->vlen != 0) return 0;
    if (have < REC_HDR + r->klen) return 0;
    if (le64(buf + 24) != rec_hsum(buf, r->key, r->klen, seq, off)) return 0;
    if (r->vlen > file_size || off + disk_record_size(r->klen, r->vlen) > file_size) return 0;
    return 1;
}

static void seg_path(const disk *d, uint64_t seq, char *buf, size_t len) {
    snprintf(buf, len, "%s/%016llx.seg", d->dir, (unsigned long long)seq);
}

/* ---- index (caller holds mu) ------------------------------------------------------ */

static void do_unlink_entry(disk *d, dent *e) {
    if (e->sprev)
        e->sprev->snext = e->snext;
    else
        e->seg->entries = e->snext;
    if (e->snext) e->snext->sprev = e->sprev;
    htab_delete(&d->index, e);
    d->meta -= malloc_cost(sizeof(dent) + e->klen);
    free(e);
}

static dent *do_lookup(disk *d, const void *key, size_t klen) {
    keyref kr = {key, klen};
    return htab_find(&d->index, key_hash(key, klen), dent_eq, &kr);
}

/* Index an object record, replacing an older record of the same key. */
static int do_index(disk *d, disk_seg *s, const void *key, uint16_t klen, uint64_t off,
                    uint64_t vlen, uint64_t sum) {
    dent *old = do_lookup(d, key, klen);
    if (old) do_unlink_entry(d, old);
    if (htab_reserve(&d->index, 1) < 0) return -ENOMEM;
    dent *e = malloc(sizeof(dent) + klen);
    if (!e) return -ENOMEM;
    *e = (dent){
        .seg = s, .off = off, .vlen = vlen, .sum = sum, .klen = klen, .hash = key_hash(key, klen)};
    memcpy(e->key, key, klen);
    e->snext = s->entries;
    if (s->entries) s->entries->sprev = e;
    s->entries = e;
    htab_insert(&d->index, e);
    d->meta += malloc_cost(sizeof(dent) + klen);
    return 0;
}

static void do_seg_unref(disk *d, disk_seg *s) {
    if (--s->refs > 0) return;
    if (s->fd >= 0) close(s->fd);
    free(s);
}

/* Take a segment off the list: forget its entries, unlink its file. */
static void do_drop_seg(disk *d, disk_seg *s, int evicted) {
    while (s->entries) {
        if (evicted) d->evictions++;
        if (evicted)
            store_events_add(d->events, TIDE_EVENT_EVICTED, s->entries->key, s->entries->klen);
        do_unlink_entry(d, s->entries);
    }
    disk_seg **pp = &d->oldest;
    disk_seg *prev = NULL;
    while (*pp && *pp != s) {
        prev = *pp;
        pp = &(*pp)->next;
    }
    if (*pp) *pp = s->next;
    if (d->active == s) d->active = prev;
    char path[DISK_PATH_MAX];
    seg_path(d, s->seq, path, sizeof(path));
    unlink(path);
    d->used -= s->size;
    d->nsegs--;
    s->dropped = 1;
    do_seg_unref(d, s);
}

static void do_append_seg(disk *d, disk_seg *s) {
    s->next = NULL;
    if (d->active)
        d->active->next = s;
    else
        d->oldest = s;
    d->active = s;
    d->nsegs++;
    d->used += s->size;
}

static int do_pend(disk *d, int kind, const void *key, size_t klen) {
    if (d->npending == d->cap_pending) {
        size_t cap = d->cap_pending ? d->cap_pending * 2 : 16;
        pend *p = realloc(d->pending, cap * sizeof(*p));
        if (!p) return -ENOMEM;
        d->pending = p;
        d->cap_pending = cap;
    }
    pend *p = &d->pending[d->npending++];
    p->kind = (uint8_t)kind;
    p->klen = (uint16_t)klen;
    if (klen) memcpy(p->key, key, klen);
    return 0;
}

/* ---- scan at open ------------------------------------------------------------------ */

/* Find the next valid record at an 8-aligned offset after `from`; 0 when none. */
static uint64_t scan_resync(disk *d, disk_seg *s, uint64_t from, uint8_t *chunk) {
    uint8_t hb[REC_HDR + TIDE_KEY_MAX];
    for (uint64_t base = (from + 8) & ~7ull; base < s->size; base += SCAN_CHUNK) {
        ssize_t n = pread(s->fd, chunk, SCAN_CHUNK, (off_t)base);
        if (n <= 0) return 0;
        for (uint64_t i = 0; i + 4 <= (uint64_t)n; i += 8) {
            if (le32(chunk + i) != REC_MAGIC) continue;
            ssize_t h = pread(s->fd, hb, sizeof(hb), (off_t)(base + i));
            rec r;
            if (h > 0 && rec_decode(hb, (size_t)h, s->seq, base + i, s->size, &r)) return base + i;
        }
    }
    return 0;
}

/* Apply every record of segment s to the index, skipping damage and cutting a torn tail. */
static int scan_seg(disk *d, disk_seg *s, uint8_t *chunk, char *err, size_t errlen) {
    uint8_t hb[REC_HDR + TIDE_KEY_MAX];
    uint64_t off = SEG_HDR;
    while (off < s->size) {
        ssize_t h = pread(s->fd, hb, sizeof(hb), (off_t)off);
        if (h < 0) {
            int e = errno;
            snprintf(err, errlen, "reading segment %016llx at %llu: %s", (unsigned long long)s->seq,
                     (unsigned long long)off, strerror(e));
            return -e;
        }
        rec r;
        if (!rec_decode(hb, (size_t)h, s->seq, off, s->size, &r)) {
            d->torn++;
            uint64_t next = scan_resync(d, s, off, chunk);
            if (next) {
                d->torn_bytes += next - off;
                off = next;
                continue;
            }
            /* Nothing valid follows: a torn tail. Cut it off so appends never follow it. */
            d->torn_bytes += s->size - off;
            if (ftruncate(s->fd, (off_t)off) != 0) {
                int e = errno;
                snprintf(err, errlen, "truncating segment %016llx to %llu: %s",
                         (unsigned long long)s->seq, (unsigned long long)off, strerror(e));
                return -e;
            }
            d->used -= s->size - off;
            s->size = off;
            break;
        }
        if (r.kind == REC_OBJECT) {
            if (do_index(d, s, r.key, r.klen, off, r.vlen, r.vsum) < 0) {
                snprintf(err, errlen, "out of memory for the disk index");
                return -ENOMEM;
            }
        } else if (r.kind == REC_TOMB) {
            dent *e = do_lookup(d, r.key, r.klen);
            if (e) do_unlink_entry(d, e);
        } else {
            for (disk_seg *t = d->oldest; t; t = t->next)
                while (t->entries)
                    do_unlink_entry(d, t->entries);
        }
        off += disk_record_size(r.klen, r.vlen);
    }
    return 0;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* A file whose name is a segment's but whose header is not: set it aside, never delete. */
static void set_aside(disk *d, const char *path, int fd, off_t size) {
    close(fd);
    if (size < (off_t)SEG_HDR) { /* died while creating it: nothing was ever in it */
        unlink(path);
        return;
    }
    char bad[DISK_PATH_MAX + 8];
    snprintf(bad, sizeof(bad), "%s.bad", path);
    rename(path, bad);
    d->bad_files++;
}

static int seg_header_ok(const uint8_t *h, uint64_t seq) {
    return memcmp(h, SEG_MAGIC, 8) == 0 && le32(h + 8) == SEG_VERSION && le32(h + 12) == SEG_HDR &&
           le64(h + 16) == seq && le64(h + 56) == XXH3_64bits(h, 56);
}

static int scan_dir(disk *d, char *err, size_t errlen) {
    DIR *dir = opendir(d->dir);
    if (!dir) {
        int e = errno;
        snprintf(err, errlen, "opendir %s: %s", d->dir, strerror(e));
        return -e;
    }
    uint64_t *seqs = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    int rc = 0;
    while ((de = readdir(dir))) {
        const char *name = de->d_name;
        if (strlen(name) != 20 || strcmp(name + 16, ".seg") != 0) continue;
        char *end;
        unsigned long long seq = strtoull(name, &end, 16);
        if (end != name + 16) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            uint64_t *g = realloc(seqs, cap * sizeof(*g));
            if (!g) {
                rc = -ENOMEM;
                snprintf(err, errlen, "out of memory listing %s", d->dir);
                break;
            }
            seqs = g;
        }
        seqs[n++] = seq;
    }
    closedir(dir);
    uint8_t *chunk = rc == 0 ? malloc(SCAN_CHUNK) : NULL;
    if (rc == 0 && !chunk) {
        rc = -ENOMEM;
        snprintf(err, errlen, "out of memory for the disk scan");
    }
    if (n) qsort(seqs, n, sizeof(*seqs), cmp_u64);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        char path[DISK_PATH_MAX];
        seg_path(d, seqs[i], path, sizeof(path));
        int fd = open(path, O_RDWR | O_CLOEXEC);
        struct stat sb;
        if (fd < 0 || fstat(fd, &sb) != 0) {
            int e = errno;
            snprintf(err, errlen, "opening %s: %s", path, strerror(e));
            if (fd >= 0) close(fd);
            rc = -e;
            break;
        }
        /* A segment left with wider bits (by a tide before 0600) is narrowed: it holds KV
         * blocks. */
        if ((sb.st_mode & 07777 & ~(mode_t)DISK_FILE_MODE) && fchmod(fd, DISK_FILE_MODE) != 0) {
            int e = errno;
            snprintf(err, errlen, "%s is mode %04o and cannot be narrowed to %04o: %s", path,
                     (unsigned)(sb.st_mode & 07777), DISK_FILE_MODE, strerror(e));
            close(fd);
            rc = -e;
            break;
        }
        uint8_t h[SEG_HDR];
        if (pread(fd, h, SEG_HDR, 0) != SEG_HDR || !seg_header_ok(h, seqs[i])) {
            set_aside(d, path, fd, sb.st_size);
            continue;
        }
        disk_seg *s = calloc(1, sizeof(*s));
        if (!s) {
            close(fd);
            rc = -ENOMEM;
            snprintf(err, errlen, "out of memory for a segment");
            break;
        }
        s->seq = seqs[i];
        s->fd = fd;
        s->size = (uint64_t)sb.st_size;
        s->refs = 1;
        do_append_seg(d, s); /* before the scan: a clear record forgets its entries too */
        d->next_seq = s->seq + 1;
        rc = scan_seg(d, s, chunk, err, errlen);
    }
    free(chunk);
    free(seqs);
    return rc;
}

/* ---- open / close ------------------------------------------------------------------ */

/* The directory exists (made 0700 when it did not), is a directory and takes new files:
 * checked by creating and removing a probe file, the only test that also holds for root
 * and for read-only mounts. An existing directory keeps its mode; the files tide puts in
 * it are 0600 whatever that mode is. */
static int disk_dir_ready(const char *dir, char *err, size_t errlen) {
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        int e = errno;
        snprintf(err, errlen, "disk_dir %s: cannot create it: %s", dir, strerror(e));
        return -e;
    }
    struct stat sb;
    if (stat(dir, &sb) != 0) {
        int e = errno;
        snprintf(err, errlen, "disk_dir %s: %s", dir, strerror(e));
        return -e;
    }
    if (!S_ISDIR(sb.st_mode)) {
        snprintf(err, errlen, "disk_dir %s is not a directory", dir);
        return -ENOTDIR;
    }
    char probe[DISK_PATH_MAX];
    snprintf(probe, sizeof(probe), "%s/.tide-probe-%d", dir, (int)getpid());
    int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 && errno == EEXIST) { /* left by a process of this pid that died: retry once */
        unlink(probe);
        fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    }
    if (fd < 0) {
        int e = errno;
        snprintf(err, errlen, "disk_dir %s is not writable: %s", dir, strerror(e));
        return -e;
    }
    close(fd);
    unlink(probe);
    return 0;
}

int disk_open(const disk_config *cfg, disk **out, char *err, size_t errlen) {
    *out = NULL;
    if (!cfg->dir || !cfg->dir[0] || cfg->capacity == 0) {
        snprintf(err, errlen, "the disk tier needs a directory and a capacity above 0");
        return TIDE_ECONFIG;
    }
    disk *d = calloc(1, sizeof(*d));
    if (!d) {
        snprintf(err, errlen, "out of memory for the disk tier");
        return -ENOMEM;
    }
    if (strlen(cfg->dir) >= sizeof(d->dir)) {
        free(d);
        snprintf(err, errlen, "disk directory path too long");
        return TIDE_ECONFIG;
    }
    snprintf(d->dir, sizeof(d->dir), "%s", cfg->dir);
    d->capacity = cfg->capacity;
    d->events = cfg->events;
    uint64_t seg = cfg->segment_size;
    if (!seg) {
        seg = cfg->capacity / 8;
        if (seg > (64ull << 20)) seg = 64ull << 20;
        if (seg < (1ull << 20)) seg = 1ull << 20;
        if (seg < cfg->capacity / 256) seg = cfg->capacity / 256; /* bounds open files */
    }
    if (seg < 4096) seg = 4096;
    d->seg_size = seg;
    d->next_seq = 1;
    int rc = disk_dir_ready(d->dir, err, errlen);
    if (rc < 0) {
        free(d);
        return rc;
    }
    rc = disk_io_init(&d->io, cfg->io, err, errlen);
    if (rc < 0) {
        free(d);
        return rc;
    }
    if (htab_init(&d->index, 1024, dent_hash) < 0) {
        disk_io_fini(&d->io);
        free(d);
        snprintf(err, errlen, "out of memory for the disk index");
        return -ENOMEM;
    }
    pthread_mutex_init(&d->mu, NULL);
    uint64_t t0 = now_ns();
    rc = scan_dir(d, err, errlen);
    d->scan_ns = now_ns() - t0;
    if (rc < 0) {
        disk_close(d);
        return rc;
    }
    d->found_segs = d->nsegs;
    d->found_objects = d->index.count;
    for (disk_seg *s = d->oldest; s; s = s->next)
        d->found_bytes += s->size;
    /* Over capacity (a smaller --disk-capacity than last time): drop the oldest now. */
    while (d->used > d->capacity && d->oldest)
        do_drop_seg(d, d->oldest, 1);
    /* Appends go to a fresh segment, never after what an earlier run left. */
    d->active_sealed = d->active != NULL;
    *out = d;
    return 0;
}

void disk_close(disk *d) {
    if (!d) return;
    while (d->oldest) {
        disk_seg *s = d->oldest;
        while (s->entries)
            do_unlink_entry(d, s->entries);
        d->oldest = s->next;
        do_seg_unref(d, s);
    }
    htab_fini(&d->index);
    disk_io_fini(&d->io);
    free(d->pending);
    pthread_mutex_destroy(&d->mu);
    free(d);
}

/* "io_uring" or "pwritev". */
static const char *disk_io_name(const disk *d) {
    return d->io.uring ? "io_uring" : "pwritev";
}

void disk_describe(disk *d, char *buf, size_t len) {
    char cap[32], found[32], seg[32];
    pthread_mutex_lock(&d->mu);
    snprintf(buf, len,
             "disk tier at %s: capacity %s in segments of %s; found %llu segments, %llu "
             "objects, %s in %.1f ms; %llu damaged or torn records (%llu bytes skipped or "
             "truncated), %llu unreadable files set aside as *.bad; writes through %s, "
             "reads through preadv",
             d->dir, size_format(d->capacity, cap, sizeof(cap)),
             size_format(d->seg_size, seg, sizeof(seg)), (unsigned long long)d->found_segs,
             (unsigned long long)d->found_objects,
             size_format(d->found_bytes, found, sizeof(found)), (double)d->scan_ns / 1e6,
             (unsigned long long)d->torn, (unsigned long long)d->torn_bytes,
             (unsigned long long)d->bad_files, disk_io_name(d));
    pthread_mutex_unlock(&d->mu);
}

/* ---- lookups and reads ------------------------------------------------------------- */

int disk_contains(disk *d, const void *key, size_t klen) {
    pthread_mutex_lock(&d->mu);
    int found = do_lookup(d, key, klen) != NULL;
    pthread_mutex_unlock(&d->mu);
    return found;
}

int disk_find(disk *d, const void *key, size_t klen, disk_loc *loc) {
    pthread_mutex_lock(&d->mu);
    dent *e = do_lookup(d, key, klen);
    if (e) {
        e->seg->refs++;
        *loc = (disk_loc){.seg = e->seg, .off = e->off, .vlen = e->vlen, .sum = e->sum};
    }
    pthread_mutex_unlock(&d->mu);
    return e ? 0 : TIDE_ENOTFOUND;
}

void disk_loc_put(disk *d, disk_loc *loc) {
    if (!loc->seg) return;
    pthread_mutex_lock(&d->mu);
    do_seg_unref(d, loc->seg);
    pthread_mutex_unlock(&d->mu);
    loc->seg = NULL;
}

int disk_read(disk *d, const disk_loc *loc, const void *key, size_t klen, void *dst) {
    uint8_t hb[REC_HDR + TIDE_KEY_MAX];
    struct iovec iov[2] = {{hb, REC_HDR + klen}, {dst, loc->vlen}};
    uint64_t want = REC_HDR + klen + loc->vlen, got = 0;
    int rc = 0;
    while (got < want) {
        struct iovec v[2];
        int cnt = 0;
        uint64_t skip = got;
        for (int i = 0; i < 2; i++) {
            if (skip >= iov[i].iov_len) {
                skip -= iov[i].iov_len;
                continue;
            }
            v[cnt].iov_base = (uint8_t *)iov[i].iov_base + skip;
            v[cnt++].iov_len = iov[i].iov_len - skip;
            skip = 0;
        }
        ssize_t r = preadv(loc->seg->fd, v, cnt, (off_t)(loc->off + got));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            rc = -errno;
            break;
        }
        if (r == 0) { /* the file is shorter than the record: cut or damaged */
            rc = TIDE_ECHECKSUM;
            break;
        }
        got += (uint64_t)r;
    }
    if (rc == 0) {
        rec r;
        if (!rec_decode(hb, REC_HDR + klen, loc->seg->seq, loc->off, UINT64_MAX / 2, &r) ||
            r.kind != REC_OBJECT || r.klen != klen || memcmp(r.key, key, klen) != 0 ||
            r.vlen != loc->vlen || r.vsum != loc->sum || checksum_buf(dst, loc->vlen) != loc->sum)
            rc = TIDE_ECHECKSUM;
    }
    pthread_mutex_lock(&d->mu);
    if (rc == 0) {
        d->reads++;
        d->read_bytes += loc->vlen;
    } else if (rc == TIDE_ECHECKSUM) {
        d->checksum_errors++;
    } else {
        d->errors++;
    }
    pthread_mutex_unlock(&d->mu);
    return rc;
}

void disk_forget(disk *d, const disk_loc *loc, const void *key, size_t klen) {
    pthread_mutex_lock(&d->mu);
    dent *e = do_lookup(d, key, klen);
    if (e && e->seg == loc->seg && e->off == loc->off) {
        do_unlink_entry(d, e);
        do_pend(d, REC_TOMB, key, klen);
    }
    pthread_mutex_unlock(&d->mu);
}

int disk_remove(disk *d, const void *key, size_t klen) {
    pthread_mutex_lock(&d->mu);
    dent *e = do_lookup(d, key, klen);
    if (e) {
        do_unlink_entry(d, e);
        do_pend(d, REC_TOMB, key, klen);
    }
    pthread_mutex_unlock(&d->mu);
    return e ? 0 : TIDE_ENOTFOUND;
}

void disk_clear(disk *d) {
    pthread_mutex_lock(&d->mu);
    /* Entries of the active segment go too; its file stays (the writer may be appending)
     * and the clear record written next makes a restart forget what precedes it. */
    for (disk_seg *s = d->oldest, *next; s; s = next) {
        next = s->next;
        if (s == d->active && !d->active_sealed)
            while (s->entries)
                do_unlink_entry(d, s->entries);
        else
            do_drop_seg(d, s, 0);
    }
    if (!d->active) d->active_sealed = 0;
    d->npending = 0; /* tombstones before a clear have nothing left to say */
    do_pend(d, REC_CLEAR, NULL, 0);
    pthread_mutex_unlock(&d->mu);
}

int disk_pending(disk *d) {
    pthread_mutex_lock(&d->mu);
    int n = d->npending > 0;
    pthread_mutex_unlock(&d->mu);
    return n;
}

/* ---- writing ----------------------------------------------------------------------- */

/* Create the next segment file with its header. Called without mu (file creation). */
static int seg_create(disk *d, disk_seg **out, char *err, size_t errlen) {
    uint64_t seq = d->next_seq++;
    char path[DISK_PATH_MAX];
    seg_path(d, seq, path, sizeof(path));
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, DISK_FILE_MODE);
    if (fd < 0) {
        int e = errno;
        snprintf(err, errlen, "creating %s: %s", path, strerror(e));
        return -e;
    }
    uint8_t h[SEG_HDR] = {0};
    memcpy(h, SEG_MAGIC, 8);
    put_le32(h + 8, SEG_VERSION);
    put_le32(h + 12, SEG_HDR);
    put_le64(h + 16, seq);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    put_le64(h + 24, (uint64_t)ts.tv_sec);
    put_le64(h + 56, XXH3_64bits(h, 56));
    struct iovec v = {h, SEG_HDR};
    int64_t w = disk_pwritev_all(fd, &v, 1, 0);
    if (w < 0) {
        snprintf(err, errlen, "writing the header of %s: %s", path, strerror((int)-w));
        close(fd);
        unlink(path);
        return (int)w;
    }
    disk_seg *s = calloc(1, sizeof(*s));
    if (!s) {
        close(fd);
        unlink(path);
        snprintf(err, errlen, "out of memory for a segment");
        return -ENOMEM;
    }
    s->seq = seq;
    s->fd = fd;
    s->size = SEG_HDR;
    s->refs = 1;
    *out = s;
    return 0;
}

/* One record to write in a chunk. */
typedef struct wrec {
    int kind;
    const uint8_t *key;
    uint16_t klen;
    const uint8_t *val;
    uint64_t vlen, sum, off, size;
    disk_item *item; /* NULL for tombstones and clears */
    uint8_t hdr[REC_HDR];
    struct iovec iov[4];
} wrec;

static const uint8_t zeros[8];

/*
 * Place records w[0..n) at the end of the active segment, rotating to a new segment and
 * dropping old ones as needed. All records of one call go to one segment; returns how many
 * were placed (0 with err set when even the first cannot be), and the segment in *segp.
 */
static size_t plan_chunk(disk *d, wrec *w, size_t n, disk_seg **segp, int *errp, char *err,
                         size_t errlen) {
    *errp = 0;
    uint64_t need = w[0].size;
    if (need + SEG_HDR > d->capacity) {
        snprintf(err, errlen, "a record of %llu bytes is larger than the disk capacity",
                 (unsigned long long)need);
        *errp = TIDE_ENOSPACE;
        return 0;
    }
    pthread_mutex_lock(&d->mu);
    disk_seg *s = d->active;
    int rotate = !s || d->active_sealed || (s->size + need > d->seg_size && s->size > SEG_HDR) ||
                 (d->used + need > d->capacity && s == d->oldest && s->size > SEG_HDR);
    pthread_mutex_unlock(&d->mu);
    if (rotate) {
        if (s) fdatasync(s->fd); /* sealed: its records now survive a power loss too */
        disk_seg *ns = NULL;
        int rc = seg_create(d, &ns, err, errlen);
        if (rc < 0) {
            *errp = rc;
            return 0;
        }
        pthread_mutex_lock(&d->mu);
        do_append_seg(d, ns);
        d->active_sealed = 0;
        pthread_mutex_unlock(&d->mu);
    }
    pthread_mutex_lock(&d->mu);
    s = d->active;
    size_t placed = 0;
    for (; placed < n; placed++) {
        uint64_t sz = w[placed].size;
        if (placed > 0 && s->size + sz > d->seg_size) break;
        while (d->used + sz > d->capacity && d->oldest != s)
            do_drop_seg(d, d->oldest, 1);
        if (d->used + sz > d->capacity) break;
        w[placed].off = s->size;
        s->size += sz;
        d->used += sz;
    }
    if (placed == 0) {
        snprintf(err, errlen, "no room for a record of %llu bytes within the disk capacity",
                 (unsigned long long)need);
        *errp = TIDE_ENOSPACE;
    }
    *segp = s;
    pthread_mutex_unlock(&d->mu);
    return placed;
}

/* Write one planned chunk to segment s; returns the index of the first failed record, or
 * n. Records from the first failure on are cut off the file. */
static size_t write_chunk(disk *d, disk_seg *s, wrec *w, size_t n, char *err, size_t errlen) {
    disk_op ops[WRITE_CHUNK_MAX];
    for (size_t i = 0; i < n; i++) {
        wrec *r = &w[i];
        rec_encode(r->hdr, r->kind, r->key, r->klen, r->vlen, r->sum, s->seq, r->off);
        int c = 0;
        r->iov[c++] = (struct iovec){r->hdr, REC_HDR};
        if (r->klen) r->iov[c++] = (struct iovec){(void *)r->key, r->klen};
        if (r->vlen) r->iov[c++] = (struct iovec){(void *)r->val, r->vlen};
        uint64_t pad = r->size - REC_HDR - r->klen - r->vlen;
        if (pad) r->iov[c++] = (struct iovec){(void *)zeros, pad};
        ops[i] = (disk_op){.fd = s->fd, .off = r->off, .iov = r->iov, .iovcnt = c};
    }
    disk_io_write(&d->io, ops, n);
    size_t bad = n;
    for (size_t i = 0; i < n; i++) {
        if (ops[i].res < 0) {
            bad = i;
            break;
        }
    }
    if (bad < n) {
        char path[DISK_PATH_MAX];
        seg_path(d, s->seq, path, sizeof(path));
        snprintf(err, errlen, "writing %s at offset %llu: %s", path, (unsigned long long)w[bad].off,
                 strerror((int)-ops[bad].res));
        pthread_mutex_lock(&d->mu);
        /* Cut the file back to the last good record: later records of the chunk may have
         * landed, but they were never reported, and a hole must not precede a good one. */
        if (ftruncate(s->fd, (off_t)w[bad].off) == 0) {
            d->used -= s->size - w[bad].off;
            s->size = w[bad].off;
        }
        d->errors++;
        pthread_mutex_unlock(&d->mu);
    }
    return bad;
}

size_t disk_write(disk *d, disk_item *items, size_t n, char *err, size_t errlen) {
    pthread_mutex_lock(&d->mu);
    pend *pending = d->pending;
    size_t np = d->npending;
    d->pending = NULL;
    d->npending = d->cap_pending = 0;
    pthread_mutex_unlock(&d->mu);

    size_t total = np + n, failed = 0, done = 0;
    wrec *w = calloc(total ? total : 1, sizeof(*w));
    if (!w) {
        snprintf(err, errlen, "out of memory for a disk write");
        for (size_t i = 0; i < n; i++)
            items[i].result = -ENOMEM;
        free(pending);
        return n;
    }
    for (size_t i = 0; i < np; i++) {
        w[i] = (wrec){.kind = pending[i].kind, .key = pending[i].key, .klen = pending[i].klen};
        w[i].size = disk_record_size(w[i].klen, 0);
    }
    for (size_t i = 0; i < n; i++) {
        wrec *r = &w[np + i];
        *r = (wrec){.kind = REC_OBJECT,
                    .key = items[i].key,
                    .klen = items[i].klen,
                    .val = items[i].val,
                    .vlen = items[i].vlen,
                    .sum = items[i].sum,
                    .item = &items[i]};
        r->size = disk_record_size(r->klen, r->vlen);
        items[i].result = 0;
    }
    err[0] = '\0';
    while (done < total) {
        size_t want = total - done < WRITE_CHUNK_MAX ? total - done : WRITE_CHUNK_MAX;
        disk_seg *s = NULL;
        int perr;
        char e1[1024];
        size_t placed = plan_chunk(d, w + done, want, &s, &perr, e1, sizeof(e1));
        if (placed == 0) { /* this record cannot be written; the next one might */
            if (!err[0]) snprintf(err, errlen, "%s", e1);
            if (w[done].item) {
                w[done].item->result = perr;
                failed++;
            }
            done++;
            continue;
        }
        size_t ok = write_chunk(d, s, w + done, placed, e1, sizeof(e1));
        if (ok < placed && !err[0]) snprintf(err, errlen, "%s", e1);
        pthread_mutex_lock(&d->mu);
        for (size_t i = 0; i < placed; i++) {
            wrec *r = &w[done + i];
            if (i >= ok) {
                if (r->item) {
                    r->item->result = -EIO;
                    failed++;
                }
                continue;
            }
            if (!r->item) continue;
            if (do_index(d, s, r->key, r->klen, r->off, r->vlen, r->sum) < 0) {
                r->item->result = -ENOMEM;
                failed++;
                continue;
            }
            d->writes++;
            d->write_bytes += r->vlen;
        }
        pthread_mutex_unlock(&d->mu);
        done += placed;
    }
    free(w);
    free(pending);
    return failed;
}

void disk_stats(disk *d, tide_stats *out) {
    pthread_mutex_lock(&d->mu);
    out->disk_capacity_bytes = d->capacity;
    out->disk_used_bytes = d->used;
    out->disk_objects = d->index.count;
    out->disk_writes = d->writes;
    out->disk_write_bytes = d->write_bytes;
    out->disk_reads = d->reads;
    out->disk_read_bytes = d->read_bytes;
    out->disk_errors = d->errors;
    out->disk_checksum_errors = d->checksum_errors;
    out->disk_evictions = d->evictions;
    out->disk_torn_records = d->torn;
    out->disk_segments = d->nsegs;
    out->meta_bytes +=
        d->meta + htab_meta_bytes(&d->index) + d->nsegs * malloc_cost(sizeof(disk_seg));
    pthread_mutex_unlock(&d->mu);
}
