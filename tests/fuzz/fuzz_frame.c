/*
 * fuzz_frame.c — libFuzzer target for the native frame decoder (src/proto/frame*.c).
 *
 * Build and run with `make fuzz` (clang, -fsanitize=fuzzer,address,undefined). The input is
 * a byte stream as a peer would send it; frame_check() decodes it and asserts the
 * properties listed in frame_check.h (round trip through the encoders, prefix behaviour,
 * sticky errors, limits). A violated property aborts, so libFuzzer keeps the input.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "fuzz/frame_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *bad = frame_check(data, size);
    if (bad) {
        fprintf(stderr, "frame_check: %s\n", bad);
        abort();
    }
    return 0;
}
