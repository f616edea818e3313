/*
 * ccfg_check.h — the properties the connector configuration pipeline must keep on any
 * input, shared by the libFuzzer target (fuzz_ccfg.c) and the unit test that replays its
 * corpus (tests/unit/test_ccfg_corpus.c).
 *
 * ccfg_fuzz_one() runs the bytes through ccfg_parse_string, ccfg_check and
 * connector_validate (both connectors), and builds every lookup namespace's key for one
 * hash. It returns NULL when every property held, else the first one broken:
 *   - parse returns 0, TIDE_EPARSE or -ENOMEM; a failure always comes with a message;
 *   - check returns 0 or TIDE_ECONFIG, again with a message on failure; a failure after the
 *     point where vLLM builds its connector (reached_connector) still gets the reference's
 *     verdict, and never tide's;
 *   - after a successful check: ngroups >= 1, every parallel size >= 1 and every rank
 *     within its size, block and hash sizes > 0, each group's page bytes > 0;
 *   - validate returns 0 or TIDE_EUNSUPPORTED (then with a non-empty message), for tide and
 *     for the reference under every release's rules;
 *   - keys are at most TIDE_KEY_MAX bytes or refused with TIDE_EKEYLONG.
 * Sanitizers (ASan, UBSan) catch what the properties do not: overflows, leaks, UB.
 * The outcome (0 = accepted by tide's connector, else the failing code) goes to *outcome.
 */
#ifndef TIDE_FUZZ_CCFG_CHECK_H
#define TIDE_FUZZ_CCFG_CHECK_H

#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "connector/config.h"
#include "connector/keys.h"
#include "tide.h"

static inline const char *ccfg_props(ccfg *cfg, ccfg_errs *errs, const uint8_t *data, size_t size,
                                     int *outcome) {
    int rc = ccfg_parse_string((const char *)data, size, cfg, errs);
    *outcome = rc;
    if (rc != 0 && rc != TIDE_EPARSE && rc != -ENOMEM) return "parse: unexpected return code";
    if (rc == TIDE_EPARSE && errs->n == 0 && !errs->oom) return "parse failed without a message";
    if (rc != 0) return NULL;
    rc = ccfg_check(cfg, errs);
    *outcome = rc;
    if (rc != 0 && rc != TIDE_ECONFIG) return "check: unexpected return code";
    if (rc != 0 && errs->n == 0 && !errs->oom) return "check failed without a message";
    if (rc != 0 && cfg->reached_connector) {
        static connector_verdict rv;
        int vr = connector_validate(cfg, CONNECTOR_IMPL_REFERENCE, &rv);
        if (vr != 0 && vr != TIDE_EUNSUPPORTED) return "reference verdict lost to a later check";
        if (vr == TIDE_EUNSUPPORTED && (rv.message[0] == '\0' || rv.nitems == 0))
            return "validate refused without a message";
        if (connector_validate(cfg, CONNECTOR_IMPL_TIDE, &rv) != TIDE_ECONFIG)
            return "tide's verdict on an invalid configuration";
    }
    if (rc != 0) return NULL;
    if (cfg->ngroups < 1 || cfg->ngroups > CONNECTOR_MAX_GROUPS)
        return "checked: ngroups out of range";
    const int64_t sizes[] = {cfg->tp_size, cfg->pp_size, cfg->pcp_size, cfg->dcp_size};
    const int64_t ranks[] = {cfg->tp_rank, cfg->pp_rank, cfg->pcp_rank, cfg->dcp_rank};
    for (int i = 0; i < 4; i++)
        if (sizes[i] < 1 || ranks[i] < 0 || ranks[i] >= sizes[i])
            return "checked: a parallel size or rank out of range";
    if (cfg->block_size < 1 || cfg->scheduler_block_size < 1 || cfg->hash_block_size < 1)
        return "checked: a block size < 1";
    for (size_t g = 0; g < cfg->ngroups; g++)
        if (cfg->groups[g].page_bytes < 1) return "checked: a group with page_bytes < 1";
    static connector_verdict v;
    /* The reference under every release's rules, then tide's. */
    for (int r = CONNECTOR_RULES_SEED; r <= CONNECTOR_RULES_V030; r++) {
        memset(&v, 0, sizeof(v));
        rc = connector_validate_reference(cfg, (connector_rules)r, &v);
        if (rc != 0 && rc != TIDE_EUNSUPPORTED) return "reference: unexpected return code";
        if (rc == TIDE_EUNSUPPORTED && (v.message[0] == '\0' || v.nitems == 0))
            return "reference refused without a message";
        if (memchr(v.message, '\0', sizeof(v.message)) == NULL) return "verdict not terminated";
    }
    for (int impl = 0; impl < 2; impl++) {
        memset(&v, 0, sizeof(v));
        rc = connector_validate(cfg, (connector_impl)impl, &v);
        if (rc != 0 && rc != TIDE_EUNSUPPORTED) return "validate: unexpected return code";
        if (rc == TIDE_EUNSUPPORTED && (v.message[0] == '\0' || v.nitems == 0))
            return "validate refused without a message";
        if (memchr(v.message, '\0', sizeof(v.message)) == NULL) return "verdict not terminated";
        if (impl == CONNECTOR_IMPL_TIDE) *outcome = rc;
    }
    uint8_t hash[32];
    memset(hash, 0xab, sizeof(hash));
    size_t hlen = connector_hash_bytes(cfg);
    if (hlen > sizeof(hash)) return "hash bytes > 32";
    for (size_t g = 0; g < cfg->ngroups; g++) {
        connector_ns ns[16];
        size_t nns = connector_lookup_namespaces(cfg, g, ns, 16);
        for (size_t i = 0; i < nns && i < 16; i++) {
            char key[TIDE_KEY_MAX + 64];
            int kl = connector_key(cfg, g, &ns[i], hash, hlen, key, sizeof(key));
            if (kl == TIDE_EKEYLONG) continue;
            if (kl < 0) return "key: unexpected error";
            if (kl > TIDE_KEY_MAX || strlen(key) != (size_t)kl) return "key: longer than allowed";
        }
    }
    return NULL;
}

/* One input through the whole pipeline; NULL when every property held. */
static inline const char *ccfg_fuzz_one(const uint8_t *data, size_t size, int *outcome) {
    ccfg_errs errs;
    ccfg_errs_init(&errs);
    static ccfg cfg; /* large: keep it off the stack */
    const char *bad = ccfg_props(&cfg, &errs, data, size, outcome);
    ccfg_free(&cfg);
    ccfg_errs_free(&errs);
    return bad;
}

#endif
