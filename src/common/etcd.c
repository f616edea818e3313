/*
 * etcd.c — etcd v3 through its JSON gateway: every call is one POST of a JSON body to
 * /v3/..., answered by one JSON object. Keys and values travel base64-encoded (OpenSSL's
 * EVP_EncodeBlock/EVP_DecodeBlock); 64-bit integers come back as JSON strings.
 *
 * One CURL easy handle per client, used under a mutex, so the HTTP connection is reused
 * between calls. CURLOPT_NOSIGNAL is set: the library runs in threads and must not take
 * SIGALRM for DNS timeouts.
 */
#include "common/etcd.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <errno.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/hostport.h"
#include "tide.h"

#define ETCD_MAX_ENDPOINTS 16
#define ETCD_MAX_REPLY (16u << 20)

struct etcd_client {
    pthread_mutex_t lock;
    CURL *curl;
    char *ep[ETCD_MAX_ENDPOINTS]; /* "http://host:port", no trailing slash */
    int nep;
    int good; /* the endpoint that answered last */
    long timeout_ms;
};

static pthread_once_t etcd_once = PTHREAD_ONCE_INIT;
static CURLcode etcd_global_rc;

static void etcd_global_init(void) {
    etcd_global_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

typedef struct etcd_buf {
    char *p;
    size_t len, cap;
} etcd_buf;

static size_t etcd_on_body(char *data, size_t size, size_t nmemb, void *arg) {
    etcd_buf *b = arg;
    size_t n = size * nmemb;
    if (b->len + n + 1 > ETCD_MAX_REPLY) return 0; /* makes curl fail the transfer */
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *grown = realloc(b->p, cap);
        if (!grown) return 0;
        b->p = grown;
        b->cap = cap;
    }
    memcpy(b->p + b->len, data, n);
    b->len += n;
    b->p[b->len] = '\0';
    return n;
}

int etcd_open(const char *endpoints, int timeout_ms, etcd_client **out, char *err, size_t errlen) {
    *out = NULL;
    pthread_once(&etcd_once, etcd_global_init);
    if (etcd_global_rc != CURLE_OK) {
        snprintf(err, errlen, "etcd: libcurl init failed: %s", curl_easy_strerror(etcd_global_rc));
        return -EIO;
    }
    etcd_client *e = calloc(1, sizeof(*e));
    if (!e) return snprintf(err, errlen, "etcd: out of memory"), -ENOMEM;
    pthread_mutex_init(&e->lock, NULL);
    e->timeout_ms = timeout_ms > 0 ? timeout_ms : 2000;
    int rc = 0;
    const char *p = endpoints;
    while (p && *p) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        while (len && p[len - 1] == '/')
            len--;
        if (len == 0 || e->nep == ETCD_MAX_ENDPOINTS) {
            snprintf(err, errlen, "etcd: bad endpoint list '%s' (empty entry, or more than %d)",
                     endpoints, ETCD_MAX_ENDPOINTS);
            rc = TIDE_EURL;
            goto fail;
        }
        /* [http://]HOST[:PORT], the host an IPv6 one in brackets (hostport.h). */
        size_t skip = len > 7 && strncmp(p, "http://", 7) == 0 ? 7 : 0;
        if (memchr(p + skip, '/', len - skip)) {
            snprintf(err, errlen, "etcd: endpoint '%.*s': only http://HOST:PORT is supported",
                     (int)len, p);
            rc = TIDE_EURL;
            goto fail;
        }
        hostport hp;
        char why[200], addr[HOSTPORT_HOST_MAX + 8];
        if (hostport_parse(p + skip, len - skip, ETCD_DEFAULT_PORT, &hp, why, sizeof(why))) {
            snprintf(err, errlen, "etcd: endpoint '%.*s': %s", (int)len, p, why);
            rc = TIDE_EURL;
            goto fail;
        }
        hostport_format(hp.host, hp.port, addr, sizeof(addr));
        char *ep = malloc(strlen(addr) + 8);
        if (!ep) {
            rc = -ENOMEM;
            snprintf(err, errlen, "etcd: out of memory");
            goto fail;
        }
        snprintf(ep, strlen(addr) + 8, "http://%s", addr);
        e->ep[e->nep++] = ep;
        p = comma ? comma + 1 : NULL;
    }
    if (e->nep == 0) {
        snprintf(err, errlen, "etcd: no endpoint given");
        rc = TIDE_EURL;
        goto fail;
    }
    e->curl = curl_easy_init();
    if (!e->curl) {
        snprintf(err, errlen, "etcd: curl_easy_init failed");
        rc = -ENOMEM;
        goto fail;
    }
    *out = e;
    return 0;
fail:
    etcd_close(e);
    return rc;
}

void etcd_close(etcd_client *e) {
    if (!e) return;
    if (e->curl) curl_easy_cleanup(e->curl);
    for (int i = 0; i < e->nep; i++)
        free(e->ep[i]);
    pthread_mutex_destroy(&e->lock);
    free(e);
}

/* Map a transfer failure to a negative errno. */
static int etcd_curl_errno(CURLcode cc, long os_errno) {
    switch (cc) {
    case CURLE_COULDNT_CONNECT:
        return os_errno ? -(int)os_errno : -ECONNREFUSED;
    case CURLE_OPERATION_TIMEDOUT:
        return -ETIMEDOUT;
    case CURLE_COULDNT_RESOLVE_HOST:
        return -EHOSTUNREACH;
    case CURLE_OUT_OF_MEMORY:
        return -ENOMEM;
    default:
        return os_errno ? -(int)os_errno : -EIO;
    }
}

/* POST body to path on the endpoints in turn; the parsed reply in *reply (cJSON_Delete). */
static int etcd_call(etcd_client *e, const char *path, const char *body, cJSON **reply, char *err,
                     size_t errlen) {
    *reply = NULL;
    pthread_mutex_lock(&e->lock);
    int rc = -EIO;
    for (int t = 0; t < e->nep; t++) {
        int i = (e->good + t) % e->nep;
        char urlbuf[512];
        snprintf(urlbuf, sizeof(urlbuf), "%s%s", e->ep[i], path);
        etcd_buf b = {0};
        struct curl_slist *hdr = curl_slist_append(NULL, "Content-Type: application/json");
        CURL *c = e->curl;
        curl_easy_reset(c);
        curl_easy_setopt(c, CURLOPT_URL, urlbuf);
        curl_easy_setopt(c, CURLOPT_POST, 1L);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, etcd_on_body);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
        curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, e->timeout_ms);
        curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, e->timeout_ms);
        curl_easy_setopt(c, CURLOPT_PROXY, ""); /* loopback etcd: never through a proxy */
        CURLcode cc = curl_easy_perform(c);
        curl_slist_free_all(hdr);
        long status = 0, os_errno = 0;
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
        curl_easy_getinfo(c, CURLINFO_OS_ERRNO, &os_errno);
        if (cc != CURLE_OK) {
            rc = etcd_curl_errno(cc, os_errno);
            snprintf(err, errlen, "etcd %s: POST %s: %s (errno %ld: %s)", e->ep[i], path,
                     curl_easy_strerror(cc), os_errno, os_errno ? strerror((int)os_errno) : "-");
            free(b.p);
            continue; /* the next endpoint may answer */
        }
        cJSON *j = b.p ? cJSON_Parse(b.p) : NULL;
        if (!j || !cJSON_IsObject(j)) {
            snprintf(err, errlen, "etcd %s: POST %s: HTTP %ld, reply is not a JSON object",
                     e->ep[i], path, status);
            cJSON_Delete(j);
            free(b.p);
            rc = TIDE_EPARSE;
            e->good = i;
            break;
        }
        free(b.p);
        const cJSON *emsg = cJSON_GetObjectItemCaseSensitive(j, "error");
        if (status != 200 || emsg) {
            snprintf(err, errlen, "etcd %s: POST %s: HTTP %ld: %s", e->ep[i], path, status,
                     cJSON_IsString(emsg) ? emsg->valuestring : "error");
            cJSON_Delete(j);
            rc = TIDE_ESERVER;
            e->good = i;
            break;
        }
        e->good = i;
        *reply = j;
        rc = 0;
        break;
    }
    pthread_mutex_unlock(&e->lock);
    return rc;
}

/* base64 of n bytes into a malloc'd string. */
static char *etcd_b64(const void *p, size_t n) {
    char *out = malloc(4 * ((n + 2) / 3) + 1);
    if (out) EVP_EncodeBlock((unsigned char *)out, p, (int)n);
    return out;
}

/* Decode base64 text into a malloc'd buffer (NUL-terminated); its length in *len. */
static char *etcd_unb64(const char *text, size_t *len) {
    size_t n = strlen(text);
    if (n % 4) return NULL;
    char *out = malloc(n / 4 * 3 + 1);
    if (!out) return NULL;
    int r = n ? EVP_DecodeBlock((unsigned char *)out, (const unsigned char *)text, (int)n) : 0;
    if (r < 0) {
        free(out);
        return NULL;
    }
    size_t pad = (n && text[n - 1] == '=') + (n > 1 && text[n - 2] == '=');
    *len = (size_t)r - pad;
    out[*len] = '\0';
    return out;
}

/* An int64 field that the gateway writes as a string (or a number); def when absent. */
static int64_t etcd_int(const cJSON *obj, const char *name, int64_t def) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    if (cJSON_IsString(v)) return strtoll(v->valuestring, NULL, 10);
    if (cJSON_IsNumber(v)) return (int64_t)v->valuedouble;
    return def;
}

int etcd_lease_grant(etcd_client *e, int ttl_s, int64_t *id, char *err, size_t errlen) {
    char body[64];
    snprintf(body, sizeof(body), "{\"TTL\":%d}", ttl_s);
    cJSON *j;
    int rc = etcd_call(e, "/v3/lease/grant", body, &j, err, errlen);
    if (rc) return rc;
    *id = etcd_int(j, "ID", 0);
    cJSON_Delete(j);
    if (*id == 0) {
        snprintf(err, errlen, "etcd: lease grant answered without a lease ID");
        return TIDE_EPARSE;
    }
    return 0;
}

int etcd_lease_keepalive(etcd_client *e, int64_t id, int64_t *ttl, char *err, size_t errlen) {
    char body[64];
    snprintf(body, sizeof(body), "{\"ID\":\"%lld\"}", (long long)id);
    cJSON *j;
    int rc = etcd_call(e, "/v3/lease/keepalive", body, &j, err, errlen);
    if (rc) return rc;
    /* A stream endpoint: the one answer comes wrapped in "result"; an expired lease comes
     * back without a TTL. */
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(j, "result");
    *ttl = etcd_int(r ? r : j, "TTL", 0);
    if (*ttl < 0) *ttl = 0;
    cJSON_Delete(j);
    return 0;
}

int etcd_lease_revoke(etcd_client *e, int64_t id, char *err, size_t errlen) {
    char body[64];
    snprintf(body, sizeof(body), "{\"ID\":\"%lld\"}", (long long)id);
    cJSON *j;
    int rc = etcd_call(e, "/v3/lease/revoke", body, &j, err, errlen);
    cJSON_Delete(j);
    return rc;
}

int etcd_put(etcd_client *e, const char *key, const char *val, int64_t lease, char *err,
             size_t errlen) {
    char *k = etcd_b64(key, strlen(key)), *v = etcd_b64(val, strlen(val));
    size_t len = (k ? strlen(k) : 0) + (v ? strlen(v) : 0) + 96;
    char *body = malloc(len);
    int rc = -ENOMEM;
    if (k && v && body) {
        snprintf(body, len, "{\"key\":\"%s\",\"value\":\"%s\",\"lease\":\"%lld\"}", k, v,
                 (long long)lease);
        cJSON *j;
        rc = etcd_call(e, "/v3/kv/put", body, &j, err, errlen);
        cJSON_Delete(j);
    } else {
        snprintf(err, errlen, "etcd: out of memory");
    }
    free(k), free(v), free(body);
    return rc;
}

int etcd_range_prefix(etcd_client *e, const char *prefix, etcd_kv_fn fn, void *arg, char *err,
                      size_t errlen) {
    size_t plen = strlen(prefix);
    if (plen == 0 || (unsigned char)prefix[plen - 1] == 0xff) {
        snprintf(err, errlen, "etcd: prefix '%s' cannot be ranged", prefix);
        return -EINVAL;
    }
    /* The range end of a prefix: the prefix with its last byte incremented. */
    char *end = strdup(prefix);
    char *k = etcd_b64(prefix, plen), *r = NULL, *body = NULL;
    int rc = -ENOMEM;
    cJSON *j = NULL;
    if (!end || !k) goto out;
    end[plen - 1]++;
    r = etcd_b64(end, plen);
    size_t len = strlen(k) + (r ? strlen(r) : 0) + 64;
    if (!r || !(body = malloc(len))) goto out;
    snprintf(body, len, "{\"key\":\"%s\",\"range_end\":\"%s\"}", k, r);
    if ((rc = etcd_call(e, "/v3/kv/range", body, &j, err, errlen)) != 0) goto out;
    const cJSON *kvs = cJSON_GetObjectItemCaseSensitive(j, "kvs"), *kv;
    cJSON_ArrayForEach(kv, kvs) {
        const cJSON *jk = cJSON_GetObjectItemCaseSensitive(kv, "key");
        const cJSON *jv = cJSON_GetObjectItemCaseSensitive(kv, "value");
        size_t kl = 0, vl = 0;
        char *dk = cJSON_IsString(jk) ? etcd_unb64(jk->valuestring, &kl) : NULL;
        /* An empty value is omitted by the gateway. */
        char *dv = cJSON_IsString(jv) ? etcd_unb64(jv->valuestring, &vl) : strdup("");
        if (!dk || !dv) {
            free(dk), free(dv);
            snprintf(err, errlen, "etcd: range reply with a key or value that is not base64");
            rc = TIDE_EPARSE;
            goto out;
        }
        rc = fn(arg, dk, kl, dv, vl);
        free(dk), free(dv);
        if (rc) goto out;
    }
out:
    if (rc == -ENOMEM) snprintf(err, errlen, "etcd: out of memory");
    cJSON_Delete(j);
    free(end), free(k), free(r), free(body);
    return rc;
}
