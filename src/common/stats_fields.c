/*
 * stats_fields.c — the table of stats_fields.h. Order is the order of tide_stats.
 */
#include "common/stats_fields.h"

#define F(member, metric, counter, bytes, help)                                                    \
    { #member, metric, help, offsetof(tide_stats, member), counter, bytes }

const stats_field stats_disk_fields[] = {
    F(disk_capacity_bytes, "tide_disk_capacity_bytes", 0, 1,
      "SSD tier: segment file bytes allowed."),
    F(disk_used_bytes, "tide_disk_used_bytes", 0, 1, "SSD tier: bytes in segment files."),
    F(disk_objects, "tide_disk_objects", 0, 0, "SSD tier: objects with a record on disk."),
    F(disk_segments, "tide_disk_segments", 0, 0, "SSD tier: segment files."),
    F(disk_writes, "tide_disk_writes_total", 1, 0,
      "SSD tier: objects written to disk on their way out of memory."),
    F(disk_write_bytes, "tide_disk_write_bytes_total", 1, 1, "SSD tier: value bytes written."),
    F(disk_reads, "tide_disk_reads_total", 1, 0, "SSD tier: objects read back and verified."),
    F(disk_read_bytes, "tide_disk_read_bytes_total", 1, 1, "SSD tier: value bytes read back."),
    F(disk_promotions, "tide_disk_promotions_total", 1, 0,
      "SSD tier: objects read back and promoted into memory to serve a get."),
    F(disk_errors, "tide_disk_errors_total", 1, 0,
      "SSD tier: failed disk writes and reads (I/O errors, a full disk)."),
    F(disk_checksum_errors, "tide_disk_checksum_errors_total", 1, 0,
      "SSD tier: read-backs that failed verification, served as misses."),
    F(disk_dropped, "tide_disk_dropped_total", 1, 0,
      "SSD tier: objects evicted from memory that could not be written."),
    F(disk_evictions, "tide_disk_evictions_total", 1, 0,
      "SSD tier: objects dropped from disk with their segment."),
    F(disk_torn_records, "tide_disk_torn_records_total", 1, 0,
      "SSD tier: damaged or torn records skipped when the files were scanned at start."),
    F(disk_queued_bytes, "tide_disk_queued_bytes", 0, 1,
      "SSD tier: evicted bytes held in memory until the writer has written them."),
};

const size_t stats_disk_nfields = sizeof(stats_disk_fields) / sizeof(stats_disk_fields[0]);
