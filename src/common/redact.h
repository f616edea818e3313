/*
 * redact.h — the one place that decides what of a text is secret before tide prints or
 * writes it: error messages (err_vset), log lines (log_write), the CLI's output and
 * reports, and the Python binding (through tide_redact()).
 *
 * Masked, each replaced by "***":
 *   - the value of a URL option whose name ends in "token", "password" or "secret" (any
 *     case), or in a near misspelling of one ("tokn", "passwrod": an edit or a swap away,
 *     two for the longer words), after '?' or '&': up to the next '&', '#', space, quote,
 *     '<', '>' or the end;
 *   - the password of a URL's user information: scheme://user:PASSWORD@host;
 *   - any literal occurrence of the token in $TIDE_AUTH_TOKEN, and of each secret given
 *     to redact_add_secret() (tided's token file), when at least 8 bytes long (a shorter
 *     one would mask common words in every message; the URL forms are masked whatever
 *     their length).
 */
#ifndef TIDE_REDACT_H
#define TIDE_REDACT_H

#include <stddef.h>

#define REDACT_MASK "***"

/* Copy text to out[cap] with every secret masked, NUL-terminated and cut to fit; returns
 * the length the whole result needs (as snprintf does). text NULL reads as "". text and
 * out may not overlap. */
size_t redact_text(const char *text, char *out, size_t cap);

/* Mask the secrets of buf[cap] (a NUL-terminated string) in place, cutting to fit. */
void redact_inplace(char *buf, size_t cap);

/* Remember a secret that is not in a URL (the token read from tided's token file), so that
 * every later redaction masks it too. At most 4 are kept (further ones: -1). Call before
 * starting threads: the list is not locked. Secrets shorter than 8 bytes are not kept
 * (masking them would garble every message) and return 0. */
int redact_add_secret(const char *secret);

#endif
