/*
 * fuzz_resp.c — libFuzzer target for the RESP2 parser (src/proto/resp.c).
 *
 * Build and run with `make fuzz` (clang, -fsanitize=fuzzer,address,undefined). The input is
 * a byte stream as a Redis client would send it; resp_check() parses it and asserts the
 * properties listed in resp_check.h. A violated property aborts, so libFuzzer keeps the
 * input.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "fuzz/resp_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *bad = resp_check(data, size);
    if (bad) {
        fprintf(stderr, "resp_check: %s\n", bad);
        abort();
    }
    return 0;
}
