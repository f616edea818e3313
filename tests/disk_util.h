/*
 * disk_util.h — helpers for the tests of the SSD tier (unit/test_store_disk.c,
 * unit/test_store_disk_attack.c, integration/test_server_disk.c): a store over a disk
 * directory whose log the test reads, the wait for the disk writer, and the forger of
 * format 1's record headers.
 */
#ifndef TIDE_TESTS_DISK_UTIL_H
#define TIDE_TESTS_DISK_UTIL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "store/store.h"

/* The log lines of stores made by disk_test_store ("[LEVEL] message\n" each), for the test
 * to read under disk_test_log_lock while a store runs (its threads log); clear it with
 * disk_test_log[0] = '\0'. */
extern char disk_test_log[16384];
extern pthread_mutex_t disk_test_log_lock;
/* A store of cap bytes over the disk tier in dir (disk_cap bytes, segments of seg, io one of
 * DISK_IO_*), with the policy users get and its log in disk_test_log. Fails the test when
 * store_create fails. */
store *disk_test_store(const char *dir, uint64_t cap, uint64_t disk_cap, uint64_t seg, int io);
/* Wait (bounded: 10 s, else the test fails) until st's disk writer holds and has pending
 * nothing. */
void disk_test_settle(store *st);
/* The seed format 1 hashed a record header with: its segment and file offset, nothing
 * secret. */
uint64_t disk_test_forge_seed(uint64_t seq, uint64_t off);
/* Write at p a record for key (under 64 bytes) and val as format 1 framed it, claiming file
 * offset off of segment seq, with the checksum anyone could compute then (xxh3 seeded by
 * segment and offset). Returns its size (8-aligned). */
size_t disk_test_forge_v1(uint8_t *p, uint64_t seq, uint64_t off, const char *key,
                          const uint8_t *val, uint64_t vlen);

#endif
