/*
 * step.c — one step's connector metadata: the jobs the scheduler hands to every worker
 * rank, read through accessors, or carried between processes as bytes.
 *
 * The byte form (little-endian, no padding):
 *
 *   "TCM1" u32 njobs u32 nfinished
 *   per job:      u8 kind, u8 hash_len, u16 id_len, id bytes, i64 start, i64 end, u32 nblocks
 *     per block:  u16 group, i32 block_id, i64 end_token, hash_len bytes of hash
 *   per finished: u16 id_len, id bytes
 *
 * Parsing checks every length against what is left before reading, so malformed input is
 * an error (TIDE_EPARSE with the offset), never a read past the end.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/endian.h"
#include "common/errors.h"
#include "connector/connector.h"

connector_mjob *connector_step_add_job(tide_connector_meta *m, int kind, const char *req_id,
                                       int64_t start, int64_t end, size_t hash_len) {
    if (m->njobs == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 8;
        connector_mjob *j = realloc(m->jobs, cap * sizeof(*j));
        if (!j) return NULL;
        m->jobs = j;
        m->cap = cap;
    }
    connector_mjob *j = &m->jobs[m->njobs];
    memset(j, 0, sizeof(*j));
    j->req_id = strdup(req_id);
    if (!j->req_id) return NULL;
    j->kind = kind;
    j->start = start;
    j->end = end;
    j->hash_len = hash_len;
    m->njobs++;
    return j;
}

int connector_step_add_block(connector_mjob *j, int group, int32_t block_id, int64_t end_token,
                             const uint8_t *hash) {
    if (j->nblocks == j->cap) {
        size_t cap = j->cap ? j->cap * 2 : 16;
        connector_mblock *b = realloc(j->blocks, cap * sizeof(*b));
        if (!b) return -ENOMEM;
        j->blocks = b;
        j->cap = cap;
    }
    connector_mblock *b = &j->blocks[j->nblocks++];
    b->group = group;
    b->block_id = block_id;
    b->end_token = end_token;
    memset(b->hash, 0, sizeof(b->hash));
    memcpy(b->hash, hash, j->hash_len);
    return 0;
}

TIDE_API void tide_connector_meta_free(tide_connector_meta *m) {
    if (!m) return;
    for (size_t i = 0; i < m->njobs; i++) {
        free(m->jobs[i].req_id);
        free(m->jobs[i].blocks);
    }
    free(m->jobs);
    for (size_t i = 0; i < m->nfinished; i++)
        free(m->finished[i]);
    free(m->finished);
    free(m);
}

TIDE_API size_t tide_connector_meta_num_jobs(const tide_connector_meta *m) {
    return m ? m->njobs : 0;
}

TIDE_API int tide_connector_meta_job(const tide_connector_meta *m, size_t i,
                                     tide_connector_job *out) {
    if (!m || !out || i >= m->njobs)
        return err_set(NULL, NULL, -EINVAL, "tide_connector_meta_job: no job %zu", i);
    const connector_mjob *j = &m->jobs[i];
    out->kind = j->kind;
    out->req_id = j->req_id;
    out->start_tokens = j->start;
    out->end_tokens = j->end;
    out->nblocks = j->nblocks;
    return 0;
}

TIDE_API int tide_connector_meta_block(const tide_connector_meta *m, size_t job, size_t k,
                                       tide_connector_block *out) {
    if (!m || !out || job >= m->njobs || k >= m->jobs[job].nblocks)
        return err_set(NULL, NULL, -EINVAL, "tide_connector_meta_block: no block %zu of job %zu", k,
                       job);
    const connector_mblock *b = &m->jobs[job].blocks[k];
    out->group = b->group;
    out->block_id = b->block_id;
    out->end_token = b->end_token;
    out->hash = b->hash;
    out->hash_len = m->jobs[job].hash_len;
    return 0;
}

TIDE_API size_t tide_connector_meta_num_finished(const tide_connector_meta *m) {
    return m ? m->nfinished : 0;
}

TIDE_API const char *tide_connector_meta_finished(const tide_connector_meta *m, size_t i) {
    return m && i < m->nfinished ? m->finished[i] : NULL;
}

/* A writer that counts what it would write past the end of the buffer. */
typedef struct wbuf {
    uint8_t *p;
    size_t cap, len;
} wbuf;

static void put_bytes(wbuf *w, const void *src, size_t n) {
    if (w->len + n <= w->cap) memcpy(w->p + w->len, src, n);
    w->len += n;
}

static void put_u(wbuf *w, uint64_t v, size_t n) {
    uint8_t b[8];
    le_wrn(b, v, n);
    put_bytes(w, b, n);
}

TIDE_API int tide_connector_meta_serialize(const tide_connector_meta *m, void *buf, size_t cap,
                                           size_t *len) {
    if (!m || !len || (cap && !buf))
        return err_set(NULL, NULL, -EINVAL, "tide_connector_meta_serialize: NULL argument");
    wbuf w = {buf, cap, 0};
    put_bytes(&w, "TCM1", 4);
    put_u(&w, m->njobs, 4);
    put_u(&w, m->nfinished, 4);
    for (size_t i = 0; i < m->njobs; i++) {
        const connector_mjob *j = &m->jobs[i];
        size_t idl = strlen(j->req_id);
        put_u(&w, (uint64_t)j->kind, 1);
        put_u(&w, j->hash_len, 1);
        put_u(&w, idl, 2);
        put_bytes(&w, j->req_id, idl);
        put_u(&w, (uint64_t)j->start, 8);
        put_u(&w, (uint64_t)j->end, 8);
        put_u(&w, j->nblocks, 4);
        for (size_t k = 0; k < j->nblocks; k++) {
            put_u(&w, (uint64_t)j->blocks[k].group, 2);
            put_u(&w, (uint32_t)j->blocks[k].block_id, 4);
            put_u(&w, (uint64_t)j->blocks[k].end_token, 8);
            put_bytes(&w, j->blocks[k].hash, j->hash_len);
        }
    }
    for (size_t i = 0; i < m->nfinished; i++) {
        size_t idl = strlen(m->finished[i]);
        put_u(&w, idl, 2);
        put_bytes(&w, m->finished[i], idl);
    }
    *len = w.len;
    if (w.len > cap)
        return err_set(NULL, NULL, TIDE_EBUFSMALL,
                       "tide_connector_meta_serialize: %zu bytes needed, buffer holds %zu", w.len,
                       cap);
    return 0;
}

typedef struct rbuf {
    const uint8_t *p;
    size_t len, off;
    int bad;
} rbuf;

static uint64_t get_u(rbuf *r, size_t n) {
    if (r->bad || r->len - r->off < n) {
        r->bad = 1;
        return 0;
    }
    uint64_t v = le_rdn(r->p + r->off, n);
    r->off += n;
    return v;
}

/* A string of n bytes as a new NUL-terminated copy; NULL (and r->bad) when cut short or
 * when it holds a NUL byte. */
static char *get_str(rbuf *r, size_t n, int *oom) {
    if (r->bad || r->len - r->off < n || n == 0 || n > CONNECTOR_REQ_ID_MAX ||
        memchr(r->p + r->off, 0, n)) {
        r->bad = 1;
        return NULL;
    }
    char *s = malloc(n + 1);
    if (!s) {
        *oom = 1;
        return NULL;
    }
    memcpy(s, r->p + r->off, n);
    s[n] = '\0';
    r->off += n;
    return s;
}

TIDE_API int tide_connector_meta_parse(const void *buf, size_t len, tide_connector_meta **out) {
    if (!out || (len && !buf))
        return err_set(NULL, NULL, -EINVAL, "tide_connector_meta_parse: NULL argument");
    *out = NULL;
    rbuf r = {buf, len, 0, 0};
    int oom = 0;
    if (len < 12 || memcmp(buf, "TCM1", 4) != 0)
        return err_set(NULL, NULL, TIDE_EPARSE,
                       "connector metadata: bad header (expected \"TCM1\" and two counts)");
    r.off = 4;
    uint64_t njobs = get_u(&r, 4), nfin = get_u(&r, 4);
    /* Each job takes at least 25 bytes and each finished id at least 3: a count that cannot
     * fit in what is left is refused before anything is allocated for it. */
    if (njobs > (len - r.off) / 25 || nfin > (len - r.off) / 3)
        return err_set(NULL, NULL, TIDE_EPARSE, "connector metadata: counts exceed the data");
    tide_connector_meta *m = calloc(1, sizeof(*m));
    if (!m) return err_set(NULL, NULL, -ENOMEM, "connector metadata: out of memory");
    for (uint64_t i = 0; i < njobs && !r.bad && !oom; i++) {
        int kind = (int)get_u(&r, 1);
        size_t hl = (size_t)get_u(&r, 1), idl = (size_t)get_u(&r, 2);
        if (r.bad) break;
        if ((kind != TIDE_CONNECTOR_LOAD && kind != TIDE_CONNECTOR_SAVE) || hl == 0 ||
            hl > CONNECTOR_HASH_MAX) {
            r.bad = 1;
            break;
        }
        char *id = get_str(&r, idl, &oom);
        if (!id) break;
        int64_t start = (int64_t)get_u(&r, 8), end = (int64_t)get_u(&r, 8);
        uint64_t nb = get_u(&r, 4);
        if (r.bad || nb > (len - r.off) / (14 + hl)) {
            r.bad = 1;
            free(id);
            break;
        }
        connector_mjob *j = connector_step_add_job(m, kind, id, start, end, hl);
        free(id);
        if (!j) {
            oom = 1;
            break;
        }
        for (uint64_t k = 0; k < nb && !r.bad; k++) {
            int g = (int)get_u(&r, 2);
            int32_t bid = (int32_t)(uint32_t)get_u(&r, 4);
            int64_t et = (int64_t)get_u(&r, 8);
            if (r.bad || r.len - r.off < hl) {
                r.bad = 1;
                break;
            }
            if (connector_step_add_block(j, g, bid, et, r.p + r.off) < 0) {
                oom = 1;
                break;
            }
            r.off += hl;
        }
    }
    if (!r.bad && !oom && nfin) {
        m->finished = calloc(nfin, sizeof(char *));
        if (!m->finished) oom = 1;
        for (uint64_t i = 0; i < nfin && !r.bad && !oom; i++) {
            size_t idl = (size_t)get_u(&r, 2);
            char *id = get_str(&r, idl, &oom);
            if (!id) break;
            m->finished[m->nfinished++] = id;
        }
    }
    if (!r.bad && !oom && r.off != len) r.bad = 1;
    if (r.bad || oom) {
        size_t at = r.off;
        tide_connector_meta_free(m);
        if (oom) return err_set(NULL, NULL, -ENOMEM, "connector metadata: out of memory");
        return err_set(NULL, NULL, TIDE_EPARSE, "connector metadata: malformed at byte %zu of %zu",
                       at, len);
    }
    *out = m;
    return 0;
}
