/*
 * fuzz_ccfg.c — libFuzzer target for the connector configuration pipeline: JSON parse
 * (src/connector/config.c), value checks and both connectors' verdicts (validate.c), and
 * key building (keys.c). Properties in ccfg_check.h; a broken one aborts, so libFuzzer
 * keeps the input. Seeds: tests/fuzz/corpus/ccfg/ (examples/ plus edge cases).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "fuzz/ccfg_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int outcome;
    const char *bad = ccfg_fuzz_one(data, size, &outcome);
    if (bad) {
        fprintf(stderr, "ccfg property broken: %s\n", bad);
        abort();
    }
    return 0;
}
