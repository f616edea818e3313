/*
 * json_diag.h — why a text is not JSON, said the way a person can fix it: the line and
 * column where it stops being JSON and what was expected there ("a trailing comma before
 * '}'", "expected ':' after the key \"port\"", "single quotes: JSON strings take double
 * quotes"). cJSON parses; this only explains a text cJSON refused.
 */
#ifndef TIDE_JSON_DIAG_H
#define TIDE_JSON_DIAG_H

#include <stddef.h>

/* 0 when text[0..len) is one JSON value with only whitespace around it. Else -1 with
 * *line and *col (1-based, columns in bytes) of the first offending byte, or of the end of
 * the text, and what[cap] saying what was found and what was expected. Nesting deeper than
 * 256 is reported as such rather than followed. */
int json_diagnose(const char *text, size_t len, int *line, int *col, char *what, size_t cap);

#endif
