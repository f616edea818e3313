/*
 * stats_fields.h — one table of the SSD tier's figures in tide_stats (the disk_* fields):
 * their names in STAT replies and `tide stat`, their Prometheus names and help, and where
 * they sit in the struct. The server's STAT reply, the tide:// client, `tide stat` and
 * /metrics all walk this table, so a new disk figure is added in one place.
 */
#ifndef TIDE_STATS_FIELDS_H
#define TIDE_STATS_FIELDS_H

#include <stddef.h>
#include <stdint.h>

#include "tide.h"

typedef struct stats_field {
    const char *name;   /* STAT reply and `tide stat` name: the tide_stats member's name */
    const char *metric; /* Prometheus name */
    const char *help;
    size_t off;  /* offsetof(tide_stats, member) */
    int counter; /* 1 counter, 0 gauge */
    int bytes;   /* counts bytes (printed with a unit by `tide stat`) */
} stats_field;

extern const stats_field stats_disk_fields[];
extern const size_t stats_disk_nfields;

static inline uint64_t stats_field_get(const tide_stats *s, const stats_field *f) {
    return *(const uint64_t *)((const char *)s + f->off);
}

static inline void stats_field_set(tide_stats *s, const stats_field *f, uint64_t v) {
    *(uint64_t *)((char *)s + f->off) = v;
}

#endif
