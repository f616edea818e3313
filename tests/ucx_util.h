/*
 * ucx_util.h — what the UCX tests (integration/test_ucx.c, integration/test_ucx_connector.c)
 * share: the environment tided and the client read UCX's settings from, and the flags of a
 * tided with a UCX port.
 */
#ifndef TIDE_TESTS_UCX_UTIL_H
#define TIDE_TESTS_UCX_UTIL_H

/* UCX_TLS=tls for tided and the client (both read it), TIDE_UCX_TCP=1 (UCX's TCP transport
 * allowed: loopback), UCX_NET_DEVICES=lo unless set; in
 * sanitizer builds the settings those need (ucx_util.c says why). Call before the client
 * loads UCX and before tided starts. */
void ucx_test_env(const char *tls);

/* The directory of a UCX new enough for same-host endpoints (UCX_SAME_HOST_MIN, docs/UCX.md):
 * TIDE_TEST_UCX_NEW, else .deps/libucx-1.22/libucx/lib under the current directory (make
 * deps fetches PyPI's libucx-cu12 1.22.0 there); NULL when it holds no libucp. */
const char *ucx_test_new_libdir(void);

/* TIDE_UCX_LIBDIR for this test's client and its tideds: the newer UCX (or a skip), loaded
 * with ucx_test_env(tls)'s settings. */
void ucx_test_with_new_ucx(const char *tls);

/* `tide serve` flags for a tided with a UCX port (256 MiB, warnings only). */
extern const char *const ucx_test_with_ucx[];

#endif
