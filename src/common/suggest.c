/*
 * suggest.c — the closest name to a mistyped one (suggest.h): an optimal-string-alignment
 * edit distance over at most SUGGEST_MAX characters, so it needs no allocation.
 */
#include "common/suggest.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#define SUGGEST_MAX 64 /* longer words are never suggested for (nor as) */

static int fold(char c) {
    return c == '_' ? '-' : tolower((unsigned char)c);
}

static int min3(int a, int b, int c) {
    int m = a < b ? a : b;
    return m < c ? m : c;
}

int suggest_distance(const char *a, const char *b, int limit) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > SUGGEST_MAX || lb > SUGGEST_MAX) return limit + 1;
    if ((la > lb ? la - lb : lb - la) > (size_t)limit) return limit + 1;
    /* Three rows of the distance matrix: i-2, i-1, i. */
    int rows[3][SUGGEST_MAX + 1];
    int *pp = rows[0], *prev = rows[1], *cur = rows[2];
    for (size_t j = 0; j <= lb; j++)
        prev[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        cur[0] = (int)i;
        int rowmin = cur[0];
        for (size_t j = 1; j <= lb; j++) {
            int cost = fold(a[i - 1]) != fold(b[j - 1]);
            int d = min3(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost);
            if (i > 1 && j > 1 && fold(a[i - 1]) == fold(b[j - 2]) &&
                fold(a[i - 2]) == fold(b[j - 1]) && pp[j - 2] + 1 < d)
                d = pp[j - 2] + 1; /* two neighbours swapped */
            cur[j] = d;
            if (d < rowmin) rowmin = d;
        }
        if (rowmin > limit) return limit + 1;
        int *t = pp;
        pp = prev;
        prev = cur;
        cur = t;
    }
    return prev[lb] > limit ? limit + 1 : prev[lb];
}

/* How far off a word of len characters may be and still get a suggestion. */
static int suggest_limit(size_t len) {
    return len <= 3 ? 1 : len <= 7 ? 2 : 3;
}

void suggest_init(suggest *sg, const char *word) {
    sg->word = word;
    sg->best = NULL;
    sg->dist = suggest_limit(strlen(word)) + 1;
}

void suggest_offer(suggest *sg, const char *cand) {
    if (!cand || !*cand) return;
    /* A name shorter than its allowance would be suggested for almost anything. */
    int limit = sg->dist - 1, clen = (int)strlen(cand);
    if (limit >= clen) limit = clen - 1;
    int d = suggest_distance(sg->word, cand, limit);
    if (d <= limit && d < sg->dist) {
        sg->dist = d;
        sg->best = cand;
    }
}

const char *suggest_best(const suggest *sg) {
    return sg->best;
}

const char *suggest_hint(const suggest *sg, char *buf, size_t cap) {
    if (cap) buf[0] = '\0';
    if (sg->best) snprintf(buf, cap, " (did you mean '%s'?)", sg->best);
    return buf;
}
