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
 * the next one's). A record larger than the capacity is refused. The index is held to its
 * budget the same way: an object's entry that would pass it drops the oldest segments
 * first, and a segment is sealed when its entries reach a quarter of the budget.
 *
 * Trust: every header checksum is an HMAC keyed by the store's secret (DIR/tide.secret),
 * bound to the segment's random nonce and the record's offset. The scan at open walks each
 * segment by verified lengths and stops at the first record that fails; only removals are
 * looked for beyond it (scan_removals). Removes and clears with a waiter are resolved
 * (disk_ticket) only once their record is on disk or what they remove has left the disk;
 * on a refused append they are retried in a fresh segment and then after dropping the
 * oldest segments (pend_fallback), never dropped.
 *
 * Permissions: the directory is made 0700 and segment files 0600 (the umask may narrow them
 * further); segments found at open with wider bits are narrowed to 0600. A directory that
 * exists keeps its mode. disk_open refuses a path that is not a directory or in which a
 * file cannot be created.
 *
 * Durability: a write is reported (indexed) once the kernel has completed it, which is
 * what survives the death of the process. A sealed segment is fdatasync'ed when it is
 * sealed; the active one is not, so a power loss can lose the unsealed tail (the scan then
 * cuts off what is torn).
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
#include <sys/random.h>
#include <unistd.h>
#include <xxhash.h>

#include "common/checksum.h"
#include "common/endian.h"
#include "common/util.h"
#include "store/store_int.h"

#define SEG_MAGIC "TIDESEG1"
#define SEG_VERSION 2u /* 1: checksums anyone could compute; 2: keyed by the store's secret */
#define SEG_HDR 64u
#define REC_MAGIC 0x43455254u /* "TREC" little-endian */
#define REC_HDR 32u
#define REC_OBJECT 1
#define REC_TOMB 2
#define REC_CLEAR 3
#define SEG_NONCE 16u
#define INDEX_SEG_SHARE 4     /* a segment's entries take at most 1/4 of the index budget */
#define SCAN_CHUNK (1u << 20) /* bytes read at once when a damaged tail is searched */
#define WRITE_CHUNK_MAX 256   /* records in one batch of writes */
#define DISK_DIR_MAX 512      /* longest directory path */
#define DISK_PATH_MAX (DISK_DIR_MAX + 32)
/* Segment files hold KV blocks: readable by tided's user only (the directory, when tide
 * makes it, is 0700). The umask can narrow these further, never widen them. */
#define DISK_FILE_MODE 0600

typedef struct dent dent;

struct disk_seg {
    uint64_t seq;
    uint8_t nonce[SEG_NONCE]; /* random, from its header: binds its records to this file */
    int fd;
    uint64_t size;  /* bytes in the file: header and every record appended */
    uint32_t refs;  /* disk_locs held, plus one while on the list */
    int dropped;    /* off the list (evicted or cleared), file unlinked */
    dent *entries;  /* index entries in this segment */
    uint64_t meta;  /* their heap bytes */
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

/* A tombstone or clear record waiting for the writer. A remove's tombstone names the record
 * it removes (seg holds a reference on its segment); the record leaves the index only once
 * the tombstone is on disk, or once the record's segment is gone. A ticket above 0 has a
 * waiter (disk_ticket); 0 is a tombstone nobody waits for (disk_forget). */
typedef struct pend {
    uint8_t kind; /* REC_TOMB or REC_CLEAR */
    uint16_t klen;
    disk_seg *seg;
    uint64_t off;
    uint64_t ticket;
    uint8_t key[TIDE_KEY_MAX];
} pend;

/* A ticket whose record could not be made durable, until its waiter collects it. */
typedef struct tfail {
    uint64_t ticket;
    int err;
} tfail;

struct disk {
    /*
     * Lock rules: `mu` guards the index, the segment list and every segment's size, refs,
     * dropped and entries, the pending records and the counters. No read or write of
     * record bytes happens under it (only unlink, close, ftruncate of a cut-back segment
     * and file creation, which are metadata calls). The active segment's file is appended
     * to only by disk_write's caller, outside the lock; it reserves the bytes under the
     * lock first (size grows), so capacity and rotation are decided in one place. Nothing
     * is called out while `mu` is held. A caller may hold the store's lock (store -> disk).
     * Helpers named do_x() expect `mu` held; x() takes it.
     */
    pthread_mutex_t mu;
    char dir[DISK_DIR_MAX];
    uint64_t capacity, seg_size;
    uint64_t index_budget; /* heap bytes the index may take (entries and hash table) */
    disk_key key;          /* the store's secret keys every checksum written (disk_key.c) */
    disk_io io;
    htab index;
    disk_seg *oldest, *active; /* list ends; active is the newest */
    int active_sealed;         /* the newest segment is an earlier run's: do not append */
    uint64_t nsegs, used, next_seq;
    uint64_t meta; /* heap bytes of entries */
    pend *pending;
    size_t npending, cap_pending;
    uint64_t ticket_next; /* last ticket handed out */
    uint64_t ticket_done; /* every ticket up to this one is resolved */
    size_t waiters;       /* tickets handed out and not yet collected as resolved */
    tfail *failed;        /* resolved tickets that failed, not yet collected */
    size_t nfailed, cap_failed;
    /* Counters (tide_stats disk_*). */
    uint64_t writes, write_bytes, reads, read_bytes, errors, checksum_errors, evictions;
    uint64_t torn;
    struct store_events *events; /* departures of evicted segments' keys (may be NULL) */
    /* What the scan at open found, for disk_describe. */
    uint64_t found_segs, found_objects, found_bytes, torn_bytes, bad_files, scan_ns;
    uint64_t old_format, foreign; /* segments dropped: format 1, another store's secret */
    uint64_t budget_drops;        /* segments dropped at open to fit the index budget */
    uint64_t removals_kept;       /* removes and clears found in the damaged tails */
    uint64_t hidden_drops;        /* segments dropped before one whose header is damaged */
    /* Segments dropped whose files could not be unlinked (a read-only or failing disk): a
     * restart would find them, so a remove or clear of what they hold is not done until
     * they are gone (do_pend_moot); the writer retries them (do_unlink_left). */
    uint64_t *left;
    size_t nleft, cap_left;
    int left_lost; /* one could not be recorded (no memory): assume some are left */
};

static uint32_t dent_hash(const void *e) {
    return ((const dent *)e)->hash;
}

static int dent_eq(const void *e, const void *k) {
    const dent *d = e;
    const keyref *kr = k;
    return d->klen == kr->len && memcmp(d->key, kr->p, kr->len) == 0;
}

uint64_t disk_record_size(uint64_t klen, uint64_t vlen) {
    return (REC_HDR + klen + vlen + 7) & ~7ull;
}

/*
 * Header checksum: HMAC of the segment's nonce, its seq, the record's offset, the first 24
 * header bytes and the key. Without the secret nobody can make bytes that pass for a
 * record, and a record is valid only in the file and at the place it was written.
 */
static int rec_hsum(const disk *d, const disk_seg *s, uint64_t off, const uint8_t *hdr,
                    const void *key, size_t klen, uint64_t *out) {
    uint8_t place[16];
    le_wr64(place, s->seq);
    le_wr64(place + 8, off);
    struct iovec parts[4] = {{(void *)s->nonce, SEG_NONCE},
                             {place, sizeof(place)},
                             {(void *)hdr, 24},
                             {(void *)key, klen}};
    return disk_key_mac(&d->key, parts, klen ? 4 : 3, out);
}

static int rec_encode(const disk *d, const disk_seg *s, uint8_t *hdr, int kind, const void *key,
                      uint16_t klen, uint64_t vlen, uint64_t vsum, uint64_t off) {
    memset(hdr, 0, REC_HDR);
    le_wr32(hdr, REC_MAGIC);
    hdr[4] = (uint8_t)kind;
    le_wr16(hdr + 6, klen);
    le_wr64(hdr + 8, vlen);
    le_wr64(hdr + 16, vsum);
    uint64_t h;
    int rc = rec_hsum(d, s, off, hdr, key, klen, &h);
    if (rc < 0) return rc;
    le_wr64(hdr + 24, h);
    return 0;
}

/* A decoded record header, valid when its checksum (over the key that follows) holds. */
typedef struct rec {
    int kind;
    uint16_t klen;
    uint64_t vlen, vsum;
    const uint8_t *key;
} rec;

/* Check a header and its key at buf (have bytes) for a record at off of segment s whose
 * file is file_size bytes. 1 and *r when valid, 0 when not, -ENOMEM when the checksum
 * could not be computed (which says nothing about the record). */
static int rec_decode(const disk *d, const disk_seg *s, const uint8_t *buf, size_t have,
                      uint64_t off, uint64_t file_size, rec *r) {
    if (have < REC_HDR || le_rd32(buf) != REC_MAGIC || buf[5] != 0) return 0;
    r->kind = buf[4];
    r->klen = le_rd16(buf + 6);
    r->vlen = le_rd64(buf + 8);
    r->vsum = le_rd64(buf + 16);
    r->key = buf + REC_HDR;
    if (r->kind < REC_OBJECT || r->kind > REC_CLEAR || r->klen > TIDE_KEY_MAX) return 0;
    if ((r->kind == REC_CLEAR) != (r->klen == 0)) return 0;
    if (r->kind != REC_OBJECT && r->vlen != 0) return 0;
    if (have < REC_HDR + r->klen) return 0;
    if (r->vlen > file_size || off + disk_record_size(r->klen, r->vlen) > file_size) return 0;
    uint64_t h;
    int rc = rec_hsum(d, s, off, buf, r->key, r->klen, &h);
    if (rc < 0) return rc;
    return le_rd64(buf + 24) == h;
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
    e->seg->meta -= malloc_cost(sizeof(dent) + e->klen);
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
    s->meta += malloc_cost(sizeof(dent) + klen);
    return 0;
}

static void do_seg_unref(disk *d, disk_seg *s) {
    if (--s->refs > 0) return;
    if (s->fd >= 0) close(s->fd);
    free(s);
}

/* Take a segment off the list: forget its entries, unlink its file. 0, or -errno when the
 * file could not be unlinked (it is off the list all the same, and noted in d->left: a
 * restart would find it, so removes and clears of what it holds wait for it to go). */
static int do_drop_seg(disk *d, disk_seg *s, int evicted) {
    while (s->entries) {
        if (evicted) d->evictions++;
        if (evicted)
            store_events_add(d->events, TIDE_DEPARTURE_EVICTED, s->entries->key, s->entries->klen);
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
    int rc = unlink(path) == 0 || errno == ENOENT ? 0 : -errno;
    if (rc < 0) {
        if (d->nleft == d->cap_left) {
            size_t cap = d->cap_left ? 2 * d->cap_left : 8;
            uint64_t *l = realloc(d->left, cap * sizeof(*l));
            if (l) {
                d->left = l;
                d->cap_left = cap;
            }
        }
        if (d->nleft < d->cap_left)
            d->left[d->nleft++] = s->seq;
        else
            d->left_lost = 1;
    }
    d->used -= s->size;
    d->nsegs--;
    s->dropped = 1;
    do_seg_unref(d, s);
    return rc;
}

/* 1 when the file of dropped segment seq may still be on disk. */
static int do_left_has(const disk *d, uint64_t seq) {
    for (size_t i = 0; i < d->nleft; i++)
        if (d->left[i] == seq) return 1;
    return d->left_lost;
}

/* 1 when the file of a dropped segment older than seq may still be on disk. */
static int do_left_before(const disk *d, uint64_t seq) {
    for (size_t i = 0; i < d->nleft; i++)
        if (d->left[i] < seq) return 1;
    return d->left_lost;
}

/* Try again to unlink the files of dropped segments that are still on disk: 0 when none
 * is left, or the first failure's -errno (with a message in err). */
static int do_unlink_left(disk *d, char *err, size_t errlen) {
    int first = 0;
    size_t keep = 0;
    for (size_t i = 0; i < d->nleft; i++) {
        char path[DISK_PATH_MAX];
        seg_path(d, d->left[i], path, sizeof(path));
        if (unlink(path) == 0 || errno == ENOENT) continue;
        if (!first) {
            first = -errno;
            snprintf(err, errlen, "removing segment %s, which was dropped but is still on disk: %s",
                     path, strerror(errno));
        }
        d->left[keep++] = d->left[i];
    }
    d->nleft = keep;
    if (!first && d->left_lost) {
        first = -EIO;
        snprintf(err, errlen,
                 "segments of %s whose unlink failed are not known by name (no "
                 "memory to record them); a restart may find them",
                 d->dir);
    }
    return first;
}

/* Heap bytes the index takes now: entries, hash table, segments. */
static uint64_t do_index_bytes(const disk *d) {
    return d->meta + htab_meta_bytes(&d->index) + d->nsegs * malloc_cost(sizeof(disk_seg));
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

/* Queue a tombstone or clear record; a tombstone may name the record it removes (seg, off:
 * a reference on seg is taken) and a ticket its waiter holds. */
static int do_pend(disk *d, int kind, const void *key, size_t klen, disk_seg *seg, uint64_t off,
                   uint64_t ticket) {
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
    p->seg = seg;
    p->off = off;
    p->ticket = ticket;
    if (seg) seg->refs++;
    if (klen) memcpy(p->key, key, klen);
    return 0;
}

/* ---- scan at open ------------------------------------------------------------------ */

/* Apply a verified tombstone or clear record to the index. Caller holds mu (or is the
 * scan at open, before anyone else can see the disk). */
static void do_apply_removal(disk *d, const rec *r) {
    if (r->kind == REC_TOMB) {
        dent *e = do_lookup(d, r->key, r->klen);
        if (e) do_unlink_entry(d, e);
        return;
    }
    for (disk_seg *t = d->oldest; t; t = t->next)
        while (t->entries)
            do_unlink_entry(d, t->entries);
}

/*
 * The scan of s stopped at damage at `from`: the records after it cannot be walked, and
 * their objects are dropped. A remove or clear recorded there must still hold, though, or
 * a flipped bit would bring removed keys back. So the rest is searched for tombstone and
 * clear records only, each accepted only where its keyed checksum holds for its very
 * offset: only records the writer wrote there, never bytes of a value (nobody else can
 * make the checksum). Applying a removal can only forget objects, never serve one.
 */
static int scan_removals(disk *d, disk_seg *s, uint64_t from, char *err, size_t errlen) {
    size_t span = SCAN_CHUNK + REC_HDR + TIDE_KEY_MAX;
    uint8_t *chunk = malloc(span);
    if (!chunk) {
        snprintf(err, errlen, "out of memory searching segment %016llx",
                 (unsigned long long)s->seq);
        return -ENOMEM;
    }
    int rc = 0;
    for (uint64_t base = from + 8; rc == 0 && base < s->size; base += SCAN_CHUNK) {
        ssize_t n = pread(s->fd, chunk, span, (off_t)base);
        if (n < 0) {
            rc = -errno;
            snprintf(err, errlen, "reading segment %016llx at %llu: %s", (unsigned long long)s->seq,
                     (unsigned long long)base, strerror(-rc));
            break;
        }
        for (uint64_t i = 0; i < SCAN_CHUNK && i + REC_HDR <= (uint64_t)n; i += 8) {
            const uint8_t *b = chunk + i;
            if (le_rd32(b) != REC_MAGIC || (b[4] != REC_TOMB && b[4] != REC_CLEAR) ||
                le_rd64(b + 8))
                continue;
            rec r;
            int ok = rec_decode(d, s, b, (size_t)n - i, base + i, s->size, &r);
            if (ok < 0) {
                rc = ok;
                snprintf(err, errlen, "out of memory verifying segment %016llx",
                         (unsigned long long)s->seq);
                break;
            }
            if (!ok) continue;
            do_apply_removal(d, &r);
            d->removals_kept++;
        }
    }
    free(chunk);
    return rc;
}

/*
 * Apply every record of segment s to the index, in file order, from its first record on.
 * The scan visits only the boundaries the writer wrote: each record's length comes from a
 * header whose keyed checksum held. It never looks for a record anywhere else, so bytes
 * inside a value are never read as a header. The first record that fails to verify (torn
 * by a crash, damaged, or written under another secret) ends the segment: it and all that
 * follows are cut off and counted, never searched for an object that decodes (only for
 * the removals recorded there: scan_removals).
 */
static int scan_seg(disk *d, disk_seg *s, char *err, size_t errlen) {
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
        int ok = rec_decode(d, s, hb, (size_t)h, off, s->size, &r);
        if (ok < 0) {
            snprintf(err, errlen, "out of memory verifying segment %016llx",
                     (unsigned long long)s->seq);
            return ok;
        }
        if (!ok) {
            /* Damaged or torn: this record and the rest of the segment go, but the removes
             * recorded there still hold. Then cut them off so that the accounting is true
             * and nothing ever follows them. */
            int rc = scan_removals(d, s, off, err, errlen);
            if (rc < 0) return rc;
            d->torn++;
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
        } else {
            do_apply_removal(d, &r);
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

/* What a segment file's 64-byte header says about it. */
enum { SEG_OK, SEG_BAD, SEG_OLD, SEG_FOREIGN };

/*
 * Header v2: magic, u32 version, u32 header size, u64 seq, u64 creation time, 16-byte
 * random nonce, u64 key id (which secret wrote it), u64 HMAC of the 56 bytes before it.
 * SEG_OLD: a format-1 segment (checksums anyone can compute: never trusted, dropped).
 * SEG_FOREIGN: written under another secret (dropped). SEG_BAD: not a segment header.
 */
static int seg_header_check(const disk *d, const uint8_t *h, uint64_t seq) {
    if (memcmp(h, SEG_MAGIC, 8) != 0 || le_rd32(h + 12) != SEG_HDR || le_rd64(h + 16) != seq)
        return SEG_BAD;
    if (le_rd32(h + 8) == 1 && le_rd64(h + 56) == XXH3_64bits(h, 56)) return SEG_OLD;
    if (le_rd32(h + 8) != SEG_VERSION) return SEG_BAD;
    if (le_rd64(h + 48) != d->key.id) return SEG_FOREIGN;
    uint64_t m;
    struct iovec part = {(void *)h, 56};
    if (disk_key_mac(&d->key, &part, 1, &m) < 0 || m != le_rd64(h + 56)) return SEG_BAD;
    return SEG_OK;
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
        if (seqs[i] >= d->next_seq) d->next_seq = seqs[i] + 1; /* never reuse a name */
        uint8_t h[SEG_HDR];
        int kind = pread(fd, h, SEG_HDR, 0) == SEG_HDR ? seg_header_check(d, h, seqs[i]) : SEG_BAD;
        if (kind == SEG_BAD) {
            /* Records follow a header that cannot be verified: none of them can be, and
             * the removes among them would be lost. Every older segment goes too (misses),
             * so that what they removed never comes back. */
            if ((uint64_t)sb.st_size > SEG_HDR) {
                while (d->oldest) {
                    do_drop_seg(d, d->oldest, 1);
                    d->hidden_drops++;
                }
            }
            set_aside(d, path, fd, sb.st_size);
            continue;
        }
        if (kind != SEG_OK) { /* never adopted: its records cannot be told from forgeries */
            close(fd);
            if (unlink(path) != 0) {
                int e = errno;
                snprintf(err, errlen, "%s was written %s and cannot be removed: %s", path,
                         kind == SEG_OLD ? "in segment format 1" : "under another secret",
                         strerror(e));
                rc = -e;
                break;
            }
            if (kind == SEG_OLD)
                d->old_format++;
            else
                d->foreign++;
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
        memcpy(s->nonce, h + 32, SEG_NONCE);
        s->fd = fd;
        s->size = (uint64_t)sb.st_size;
        s->refs = 1;
        do_append_seg(d, s); /* before the scan: a clear record forgets its entries too */
        rc = scan_seg(d, s, err, errlen);
        /* The index stays within its budget while it is built: the oldest segments go. */
        while (rc == 0 && do_index_bytes(d) > d->index_budget && d->oldest != s) {
            do_drop_seg(d, d->oldest, 1);
            d->budget_drops++;
        }
    }
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
    d->index_budget = disk_index_budget(cfg);
    d->next_seq = 1;
    int rc = disk_dir_ready(d->dir, err, errlen);
    if (rc < 0) {
        free(d);
        return rc;
    }
    rc = disk_key_open(&d->key, d->dir, err, errlen);
    if (rc < 0) {
        free(d);
        return rc;
    }
    rc = disk_io_init(&d->io, cfg->io, err, errlen);
    if (rc < 0) {
        disk_key_close(&d->key);
        free(d);
        return rc;
    }
    if (htab_init(&d->index, 1024, dent_hash) < 0) {
        disk_io_fini(&d->io);
        disk_key_close(&d->key);
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
    while (do_index_bytes(d) > d->index_budget && d->oldest) {
        do_drop_seg(d, d->oldest, 1);
        d->budget_drops++;
    }
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
    for (size_t i = 0; i < d->npending; i++)
        if (d->pending[i].seg) do_seg_unref(d, d->pending[i].seg);
    htab_fini(&d->index);
    disk_io_fini(&d->io);
    disk_key_close(&d->key);
    free(d->failed);
    free(d->left);
    free(d->pending);
    pthread_mutex_destroy(&d->mu);
    free(d);
}

/* "io_uring" or "pwritev". */
static const char *disk_io_name(const disk *d) {
    return d->io.uring ? "io_uring" : "pwritev";
}

uint64_t disk_index_budget(const disk_config *cfg) {
    if (cfg->index_budget) return cfg->index_budget;
    uint64_t b = cfg->capacity / DISK_INDEX_SHARE;
    return b < DISK_INDEX_MIN ? DISK_INDEX_MIN : b;
}

void disk_describe(disk *d, char *buf, size_t len) {
    char cap[32], found[32], seg[32], budget[32];
    pthread_mutex_lock(&d->mu);
    snprintf(buf, len,
             "disk tier at %s: capacity %s in segments of %s, index budget %s; found %llu "
             "segments, %llu objects, %s in %.1f ms; %llu damaged or torn records (%llu bytes "
             "cut off, %llu removes and clears in them kept), %llu unreadable files set aside "
             "as *.bad (%llu older segments dropped with them, their removes unknown), "
             "%llu segments of format 1 "
             "and %llu written under another secret dropped unread, %llu segments dropped "
             "to fit the index budget; writes through %s, reads through preadv",
             d->dir, size_format(d->capacity, cap, sizeof(cap)),
             size_format(d->seg_size, seg, sizeof(seg)),
             size_format(d->index_budget, budget, sizeof(budget)),
             (unsigned long long)d->found_segs, (unsigned long long)d->found_objects,
             size_format(d->found_bytes, found, sizeof(found)), (double)d->scan_ns / 1e6,
             (unsigned long long)d->torn, (unsigned long long)d->torn_bytes,
             (unsigned long long)d->removals_kept, (unsigned long long)d->bad_files,
             (unsigned long long)d->hidden_drops, (unsigned long long)d->old_format,
             (unsigned long long)d->foreign, (unsigned long long)d->budget_drops, disk_io_name(d));
    pthread_mutex_unlock(&d->mu);
}

uint64_t disk_index_bytes(disk *d) {
    pthread_mutex_lock(&d->mu);
    uint64_t n = do_index_bytes(d);
    pthread_mutex_unlock(&d->mu);
    return n;
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
        int ok = rec_decode(d, loc->seg, hb, REC_HDR + klen, loc->off, UINT64_MAX / 2, &r);
        if (ok < 0)
            rc = ok; /* not the record's fault: an error, and the record is kept */
        else if (!ok || r.kind != REC_OBJECT || r.klen != klen || memcmp(r.key, key, klen) != 0 ||
                 r.vlen != loc->vlen || r.vsum != loc->sum ||
                 checksum_buf(dst, loc->vlen) != loc->sum)
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
        do_pend(d, REC_TOMB, key, klen, NULL, 0, 0); /* best effort: the record is bad anyway */
    }
    pthread_mutex_unlock(&d->mu);
}

/* Queue a record with a ticket for its waiter, keeping room for the ticket's failure (so
 * that recording one never needs memory): 0 and *ticket, or -ENOMEM. Caller holds mu. */
static int do_pend_ticket(disk *d, int kind, const void *key, size_t klen, disk_seg *seg,
                          uint64_t off, uint64_t *ticket) {
    if (d->cap_failed < d->waiters + 1) {
        size_t cap = (d->waiters + 1) * 2;
        tfail *f = realloc(d->failed, cap * sizeof(*f));
        if (!f) return -ENOMEM;
        d->failed = f;
        d->cap_failed = cap;
    }
    int rc = do_pend(d, kind, key, klen, seg, off, d->ticket_next + 1);
    if (rc < 0) return rc;
    d->waiters++;
    *ticket = ++d->ticket_next;
    return 0;
}

int disk_remove(disk *d, const void *key, size_t klen, uint64_t *ticket) {
    pthread_mutex_lock(&d->mu);
    dent *e = do_lookup(d, key, klen);
    int rc = TIDE_ENOTFOUND;
    if (e && !ticket) { /* nobody waits: gone from the index now, the tombstone follows */
        do_unlink_entry(d, e);
        do_pend(d, REC_TOMB, key, klen, NULL, 0, 0);
        rc = 0;
    } else if (e) {
        /* The entry stays until the tombstone is durable (or its segment gone): a remove
         * that cannot be recorded is refused, and until then the old value is still the
         * store's. */
        rc = do_pend_ticket(d, REC_TOMB, key, klen, e->seg, e->off, ticket);
    }
    pthread_mutex_unlock(&d->mu);
    return rc;
}

int disk_clear(disk *d, uint64_t *ticket) {
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
    /* Tombstones queued before stay: each has a waiter, and written first they do no harm. */
    int rc = do_pend_ticket(d, REC_CLEAR, NULL, 0, NULL, d->next_seq, ticket);
    pthread_mutex_unlock(&d->mu);
    return rc;
}

int disk_ticket(disk *d, uint64_t ticket) {
    pthread_mutex_lock(&d->mu);
    int rc = ticket > d->ticket_done;
    if (!rc) {
        d->waiters--;
        for (size_t i = 0; i < d->nfailed; i++) {
            if (d->failed[i].ticket != ticket) continue;
            rc = d->failed[i].err;
            d->failed[i] = d->failed[--d->nfailed];
            break;
        }
    }
    pthread_mutex_unlock(&d->mu);
    return rc;
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
    pthread_mutex_lock(&d->mu); /* disk_clear reads it */
    uint64_t seq = d->next_seq++;
    pthread_mutex_unlock(&d->mu);
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
    le_wr32(h + 8, SEG_VERSION);
    le_wr32(h + 12, SEG_HDR);
    le_wr64(h + 16, seq);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    le_wr64(h + 24, (uint64_t)ts.tv_sec);
    int64_t w = getrandom(h + 32, SEG_NONCE, 0) == (ssize_t)SEG_NONCE ? 0 : -EIO;
    le_wr64(h + 48, d->key.id);
    uint64_t m = 0;
    struct iovec part = {h, 56};
    if (w == 0) w = disk_key_mac(&d->key, &part, 1, &m);
    le_wr64(h + 56, m);
    struct iovec v = {h, SEG_HDR};
    if (w == 0) w = disk_pwritev_all(fd, &v, 1, 0);
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
    memcpy(s->nonce, h + 32, SEG_NONCE);
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
    pend *pend;      /* the queued tombstone or clear, for those */
    int failed;      /* a tombstone or clear that could not be written as planned */
    uint8_t hdr[REC_HDR];
    struct iovec iov[4];
} wrec;

static const uint8_t zeros[8];

/* Heap bytes an object record's entry will take (its table slots are counted apart). */
static uint64_t entry_cost(const wrec *r) {
    return r->item ? malloc_cost(sizeof(dent) + r->klen) : 0;
}

/* What the index would take with `more` entries of `meta` bytes added: the table grows as
 * htab_reserve grows it. Caller holds mu. */
static uint64_t do_index_bytes_with(const disk *d, uint64_t more, uint64_t meta) {
    uint64_t n = htab_slots(&d->index), need = (uint64_t)d->index.count + more;
    while (need * 4 > n * 3)
        n += n / 2;
    return do_index_bytes(d) - htab_meta_bytes(&d->index) + n * sizeof(void *) + meta;
}

/*
 * Place records w[0..n) at the end of the active segment, rotating to a new segment and
 * dropping old ones as needed: for the capacity, and for the index budget (an object's
 * entry must fit in it). All records of one call go to one segment; returns how many were
 * placed (0 with err set when even the first cannot be), and the segment in *segp.
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
    uint64_t em0 = entry_cost(&w[0]);
    pthread_mutex_lock(&d->mu);
    disk_seg *s = d->active;
    int rotate =
        !s || d->active_sealed || (s->size + need > d->seg_size && s->size > SEG_HDR) ||
        (d->used + need > d->capacity && s == d->oldest && s->size > SEG_HDR) ||
        (em0 && do_index_bytes_with(d, 1, em0) > d->index_budget && s == d->oldest && s->entries) ||
        (em0 && s->entries && s->meta + em0 > d->index_budget / INDEX_SEG_SHARE);
    pthread_mutex_unlock(&d->mu);
    if (rotate) {
        /* Sealed: its records now survive a power loss too. A failed sync is an I/O error
         * of the disk, counted like a refused write. */
        if (s && fdatasync(s->fd) != 0) {
            pthread_mutex_lock(&d->mu);
            d->errors++;
            pthread_mutex_unlock(&d->mu);
        }
        disk_seg *ns = NULL;
        int rc = seg_create(d, &ns, err, errlen);
        if (rc < 0) {
            pthread_mutex_lock(&d->mu);
            d->errors++;
            pthread_mutex_unlock(&d->mu);
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
    size_t placed = 0, nobj = 0;
    uint64_t meta = 0;
    int budget = 0;
    for (; placed < n; placed++) {
        uint64_t sz = w[placed].size, em = entry_cost(&w[placed]);
        if (placed > 0 && s->size + sz > d->seg_size) break;
        if (placed > 0 && em && s->meta + meta + em > d->index_budget / INDEX_SEG_SHARE) break;
        while (d->used + sz > d->capacity && d->oldest != s)
            do_drop_seg(d, d->oldest, 1);
        while (em && do_index_bytes_with(d, nobj + 1, meta + em) > d->index_budget &&
               d->oldest != s)
            do_drop_seg(d, d->oldest, 1);
        if (d->used + sz > d->capacity) break;
        if (em && do_index_bytes_with(d, nobj + 1, meta + em) > d->index_budget) {
            budget = 1;
            break;
        }
        w[placed].off = s->size;
        s->size += sz;
        d->used += sz;
        meta += em;
        nobj += em != 0;
    }
    if (placed == 0) {
        char b[32];
        if (budget)
            snprintf(err, errlen,
                     "no room for an index entry of %llu bytes within the disk index budget "
                     "of %s",
                     (unsigned long long)em0, size_format(d->index_budget, b, sizeof(b)));
        else
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
    size_t enc = n;
    int enc_err = 0;
    for (size_t i = 0; i < n; i++) {
        wrec *r = &w[i];
        enc_err = rec_encode(d, s, r->hdr, r->kind, r->key, r->klen, r->vlen, r->sum, r->off);
        if (enc_err < 0) {
            enc = i;
            break;
        }
        int c = 0;
        r->iov[c++] = (struct iovec){r->hdr, REC_HDR};
        if (r->klen) r->iov[c++] = (struct iovec){(void *)r->key, r->klen};
        if (r->vlen) r->iov[c++] = (struct iovec){(void *)r->val, r->vlen};
        uint64_t pad = r->size - REC_HDR - r->klen - r->vlen;
        if (pad) r->iov[c++] = (struct iovec){(void *)zeros, pad};
        ops[i] = (disk_op){.fd = s->fd, .off = r->off, .iov = r->iov, .iovcnt = c};
    }
    disk_io_write(&d->io, ops, enc);
    size_t bad = n;
    int64_t res = 0;
    for (size_t i = 0; i < n; i++) {
        res = i < enc ? ops[i].res : enc_err;
        if (res < 0) {
            bad = i;
            break;
        }
    }
    if (bad < n) {
        char path[DISK_PATH_MAX];
        seg_path(d, s->seq, path, sizeof(path));
        snprintf(err, errlen, "writing %s at offset %llu: %s", path, (unsigned long long)w[bad].off,
                 strerror((int)-res));
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

/* A queued tombstone is on disk: the record it removes leaves the index (if it is still
 * the key's entry). Caller holds mu. */
static void do_pend_written(disk *d, const pend *p) {
    if (p->kind != REC_TOMB || !p->seg) return;
    dent *e = do_lookup(d, p->key, p->klen);
    if (e && e->seg == p->seg && e->off == p->off) do_unlink_entry(d, e);
}

/* Nothing a queued record speaks of is left on disk: the tombstone's record has gone with
 * its segment (or is no longer the key's entry), or no segment made before the clear is
 * left (a clear's off is the first seq made after it). Caller holds mu. */
static int do_pend_moot(disk *d, const pend *p) {
    if (p->kind == REC_CLEAR)
        return (!d->oldest || d->oldest->seq >= p->off) && !do_left_before(d, p->off);
    if (!p->seg) return 1;
    if (p->seg->dropped) return !do_left_has(d, p->seg->seq);
    dent *e = do_lookup(d, p->key, p->klen);
    return !e || e->seg != p->seg || e->off != p->off;
}

/* Write one queued record on its own: 1 when it is on disk. Writer only. */
static int pend_write_one(disk *d, pend *p) {
    wrec w = {.kind = p->kind, .key = p->key, .klen = p->klen, .pend = p};
    w.size = disk_record_size(w.klen, 0);
    disk_seg *s = NULL;
    int perr;
    char e1[1024];
    if (plan_chunk(d, &w, 1, &s, &perr, e1, sizeof(e1)) != 1 ||
        write_chunk(d, s, &w, 1, e1, sizeof(e1)) != 1)
        return 0;
    pthread_mutex_lock(&d->mu);
    do_pend_written(d, p);
    pthread_mutex_unlock(&d->mu);
    return 1;
}

/*
 * A tombstone or clear record could not be written (the disk is full, an I/O error, a file
 * size limit). It is never dropped while what it removes is still on disk. First it is
 * tried in a fresh segment (the failure may be the file's own); then segments go, oldest
 * first (as eviction drops them), and it is tried again after each, until it is written or
 * nothing it speaks of is left. A segment dropped here takes its objects with it (misses,
 * counted as evictions); a removed object never comes back. Returns 0, or -errno when a
 * segment file cannot be unlinked (the remove is then refused). Writer only.
 */
static int pend_fallback(disk *d, pend *p, char *err, size_t errlen) {
    pthread_mutex_lock(&d->mu);
    int moot = do_pend_moot(d, p);
    if (!moot && d->active) d->active_sealed = 1;
    pthread_mutex_unlock(&d->mu);
    if (moot || pend_write_one(d, p)) return 0;
    for (;;) {
        pthread_mutex_lock(&d->mu);
        if (do_pend_moot(d, p)) {
            pthread_mutex_unlock(&d->mu);
            return 0;
        }
        disk_seg *victim = d->oldest;
        if (!victim) { /* what it speaks of is only in files left from failed unlinks */
            int rc = do_unlink_left(d, err, errlen);
            if (rc < 0) d->errors++;
            pthread_mutex_unlock(&d->mu);
            if (rc < 0) return rc;
            continue;
        }
        uint64_t seq = victim->seq;
        int rc = do_drop_seg(d, victim, 1);
        if (rc < 0) d->errors++;
        pthread_mutex_unlock(&d->mu);
        if (rc < 0) {
            snprintf(err, errlen, "removing segment %s/%016llx.seg to record a %s: %s", d->dir,
                     (unsigned long long)seq, p->kind == REC_CLEAR ? "clear" : "remove",
                     strerror(-rc));
            return rc;
        }
        if (pend_write_one(d, p)) return 0;
    }
}

size_t disk_write(disk *d, disk_item *items, size_t n, char *err, size_t errlen) {
    pthread_mutex_lock(&d->mu);
    if (d->nleft) { /* files left by failed unlinks: the disk may take them now */
        char e1[1024];
        do_unlink_left(d, e1, sizeof(e1));
    }
    pend *pending = d->pending;
    size_t np = d->npending;
    d->pending = NULL;
    d->npending = d->cap_pending = 0;
    pthread_mutex_unlock(&d->mu);

    size_t total = np + n, failed = 0, done = 0;
    wrec *w = calloc(total ? total : 1, sizeof(*w));
    int *pres = calloc(np ? np : 1, sizeof(*pres)); /* each queued record's outcome */
    err[0] = '\0';
    if (!w || !pres) {
        snprintf(err, errlen, "out of memory for a disk write");
        for (size_t i = 0; i < n; i++)
            items[i].result = -ENOMEM;
        free(w);
        free(pres);
        /* The queued records wait for the next call: never dropped. */
        pthread_mutex_lock(&d->mu);
        for (size_t i = 0; i < np; i++) {
            pend *p = &pending[i];
            do_pend(d, p->kind, p->key, p->klen, p->seg, p->off, p->ticket);
            if (p->seg) do_seg_unref(d, p->seg);
        }
        pthread_mutex_unlock(&d->mu);
        free(pending);
        return n;
    }
    for (size_t i = 0; i < np; i++) {
        w[i] = (wrec){.kind = pending[i].kind,
                      .key = pending[i].key,
                      .klen = pending[i].klen,
                      .pend = &pending[i]};
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
            } else {
                w[done].failed = 1;
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
                } else {
                    r->failed = 1;
                }
                continue;
            }
            if (!r->item) {
                do_pend_written(d, r->pend);
                continue;
            }
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
    /* Tombstones and clears that did not make it as planned are retried now, making room
     * as they must; the outcome of each goes to its waiter. */
    for (size_t i = 0; i < np; i++) {
        if (!w[i].failed) continue;
        char e1[1024];
        pres[i] = pend_fallback(d, &pending[i], e1, sizeof(e1));
        if (pres[i] < 0 && !err[0]) snprintf(err, errlen, "%s", e1);
    }
    pthread_mutex_lock(&d->mu);
    for (size_t i = 0; i < np; i++) {
        pend *p = &pending[i];
        if (pres[i] < 0 && p->ticket) {
            /* Room was reserved when the ticket was handed out (do_ticket). */
            d->failed[d->nfailed++] = (tfail){.ticket = p->ticket, .err = pres[i]};
        }
        if (p->ticket > d->ticket_done) d->ticket_done = p->ticket;
        if (p->seg) do_seg_unref(d, p->seg);
    }
    pthread_mutex_unlock(&d->mu);
    free(w);
    free(pres);
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
    out->meta_bytes += do_index_bytes(d);
    pthread_mutex_unlock(&d->mu);
}
