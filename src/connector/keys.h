/*
 * keys.h — the connector's object keys, layout fingerprints and lookup namespaces.
 *
 * One object is one block of one KV-cache group on one rank. Its key is
 *
 *   [cache_prefix@]model@fp:<fingerprint>@tp_rank:T@pcpP@dcpD@pp_rank:R@group:G@<hash hex>
 *
 * where model is the last path component of model_config.model, T is the rank's TP rank
 * divided by the group's replication factor (ranks holding identical bytes share keys),
 * and the fingerprint (16 hex digits) digests everything that decides the bytes of the
 * block's page — spec class, block size, dtypes, head geometry, Mamba state shapes, page
 * size, layers, the TP shard count and the PP/PCP/DCP sizes — so that caches written with a
 * different dtype, layout or parallel layout never share a key. The canonical string the
 * fingerprint digests is documented in docs/CONNECTOR_CONFIG.md.
 *
 * A lookup hit for a block needs the key present in every lookup namespace of the group:
 * every TP shard (every TP rank when dcp > 1), every PCP rank and every PP stage.
 */
#ifndef TIDE_CONNECTOR_KEYS_H
#define TIDE_CONNECTOR_KEYS_H

#include <stddef.h>
#include <stdint.h>

#include "connector/config.h"

/* One key namespace: the rank fields of a key. */
typedef struct connector_ns {
    int64_t tp;  /* TP rank / replication factor (the TP shard id) */
    int64_t pcp; /* PCP rank */
    int64_t dcp; /* DCP rank */
    int64_t pp;  /* PP rank */
} connector_ns;

/* The canonical layout string of group g (what the fingerprint digests) into buf; returns
 * its length (like snprintf). */
int connector_layout_string(const ccfg *cfg, size_t g, char *buf, size_t cap);

/* The fingerprint of group g: XXH3-64 of its layout string as 16 lowercase hex digits.
 * Returns 0 or -ENOMEM. */
int connector_fingerprint(const ccfg *cfg, size_t g, char out[CONNECTOR_FP_HEX + 1]);

/* This rank's own namespace for group g. */
connector_ns connector_own_ns(const ccfg *cfg, size_t g);

/*
 * The namespaces a lookup of group g must find a block in, in a fixed order (PCP rank
 * outermost, then TP shard, then PP stage). Writes at most cap entries; returns how many
 * there are in all.
 */
size_t connector_lookup_namespaces(const ccfg *cfg, size_t g, connector_ns *out, size_t cap);

/*
 * The key prefix (everything before "@<hash hex>") of group g in namespace ns, NUL
 * terminated, into buf[0..cap). Returns its length, TIDE_EKEYLONG when the prefix alone
 * leaves no room for a hash within TIDE_KEY_MAX, or TIDE_EBUFSMALL.
 */
int connector_key_prefix(const ccfg *cfg, size_t g, const connector_ns *ns, char *buf, size_t cap);

/*
 * The full key of a block of group g in namespace ns whose chained hash is hash[0..hlen)
 * (written as lowercase hex). Returns the key's length, TIDE_EKEYLONG when it would
 * exceed TIDE_KEY_MAX bytes, or TIDE_EBUFSMALL when cap is too small.
 */
int connector_key(const ccfg *cfg, size_t g, const connector_ns *ns, const uint8_t *hash,
                  size_t hlen, char *buf, size_t cap);

/* Hash bytes of the configured prefix-caching hash (32 for sha256, 16 for xxhash). */
size_t connector_hash_bytes(const ccfg *cfg);

/* The longest key this configuration can produce, in bytes. */
size_t connector_key_max_len(const ccfg *cfg);

#endif
