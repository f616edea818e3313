/*
 * suggest.h — "did you mean ...?" for names a user mistyped: subcommands, flags, config
 * settings, URL options, units.
 *
 * A suggestion is the candidate at the smallest edit distance from the word typed
 * (insertions, deletions, substitutions and swaps of two neighbouring characters each count
 * one), compared without case and with '-' and '_' alike, and only when that distance is
 * small for the word's length: a guess further off would mislead more than it helps. The
 * first candidate offered wins a tie, so callers offer in the order they list names.
 */
#ifndef TIDE_SUGGEST_H
#define TIDE_SUGGEST_H

#include <stddef.h>

typedef struct suggest {
    const char *word; /* what the user typed (borrowed) */
    const char *best; /* the closest candidate so far (borrowed), or NULL */
    int dist;
} suggest;

void suggest_init(suggest *sg, const char *word);
/* Consider cand (borrowed: it must outlive sg's use). */
void suggest_offer(suggest *sg, const char *cand);
/* The closest candidate when close enough to be a likely misspelling, else NULL. */
const char *suggest_best(const suggest *sg);
/* " (did you mean 'BEST'?)" in buf, or "" when there is no suggestion. Returns buf. */
const char *suggest_hint(const suggest *sg, char *buf, size_t cap);

/* Edit distance between a and b as above, at most limit + 1 (the walk stops there). */
int suggest_distance(const char *a, const char *b, int limit);

#endif
