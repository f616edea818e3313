/*
 * abi.h — structs the library fills for its caller (tide_stats, tide_cluster_info,
 * tide_connector_info, tide_connector_stats) come with the caller's size of them, so that
 * they can grow: the library writes only the fields that fit the caller's size (a program
 * built against an older header gets its own fields and nothing past its struct) and
 * zeroes the rest of it (fields a newer header has and this library does not read 0).
 * New fields are only ever added at the end. include/tide.h documents each call.
 */
#ifndef TIDE_COMMON_ABI_H
#define TIDE_COMMON_ABI_H

#include <stddef.h>
#include <string.h>

/* Whether size can be a caller's size of a struct whose first version was v1 bytes: a
 * multiple of 8 from v1 to TIDE_STRUCT_SIZE_MAX. */
static inline int abi_size_ok(size_t size, size_t v1, size_t max) {
    return size % 8 == 0 && size >= v1 && size <= max;
}

/* Hand the library's whole struct (full, full_size bytes) to the caller's size bytes. */
static inline void abi_fill(void *dst, size_t size, const void *full, size_t full_size) {
    memset(dst, 0, size);
    memcpy(dst, full, size < full_size ? size : full_size);
}

#endif
