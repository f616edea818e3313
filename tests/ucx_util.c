/*
 * ucx_util.c — the UCX tests' shared environment (ucx_util.h).
 */
#include "ucx_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#ifdef TIDE_HAVE_UCX
#include "client/ucx_dl.h"
#endif

const char *const ucx_test_with_ucx[] = {"--capacity", "256MiB", "--log-level", "warn",
                                         "--ucx-port", "0",      NULL};

const char *ucx_test_new_libdir(void) {
    static char dir[4096];
    const char *e = getenv("TIDE_TEST_UCX_NEW");
    snprintf(dir, sizeof(dir), "%s", e && *e ? e : ".deps/libucx-1.22/libucx/lib");
    char lib[4200];
    snprintf(lib, sizeof(lib), "%s/libucp.so.0", dir);
    return access(lib, R_OK) == 0 ? dir : NULL;
}

#ifdef TIDE_HAVE_UCX
void ucx_test_with_new_ucx(const char *tls) {
    const char *d = ucx_test_new_libdir();
    if (!d) TEST_SKIP("no UCX 1.22 here (.deps/libucx-1.22, fetched by make deps)");
    setenv("TIDE_UCX_LIBDIR", d, 1);
    ucx_test_env(tls);
    char why[256];
    CHECK_MSG(ucx_dl_load(why, sizeof(why)) == 0, "%s", why);
    CHECK_MSG(ucx_dl_version() >= UCX_SAME_HOST_MIN, "%s holds UCX %u.%u", d,
              ucx_dl_version() / 1000, ucx_dl_version() % 1000);
}
#endif

void ucx_test_env(const char *tls) {
    setenv("UCX_TLS", tls, 1);
    /* UCX's TCP transport, which tide leaves out unless told (ucx_dl.h): these tests run
     * on loopback, with UCX_NET_DEVICES=lo (ucx_tcp_transport_only_with_tide_ucx_tcp
     * tests the default). */
    setenv("TIDE_UCX_TCP", "1", 1);
    setenv("UCX_NET_DEVICES", "lo", 0); /* loopback only (else UCX stripes over every NIC) */
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
    /* UCX's memory hooks (libucm patching mmap/munmap) do not mix with TSan's and ASan's own
     * interception, and crash the process at exit. */
    setenv("UCX_MEM_EVENTS", "no", 1);
#endif
#ifdef __SANITIZE_THREAD__
    /* The tideds these tests start do not check send buffers (intercept_send=0; this process
     * keeps its checks). The torn-read tests make tided's UCX thread send pool bytes that a
     * worker is rewriting, on purpose (tests/tsan.supp), and TSan's report-then-suppress
     * work on every racing send of MiBs, growing with the races it had seen, stalled that
     * thread: a GET past its 60 s deadline in 3 of 6 runs on a loaded machine, gdb showing
     * the thread in TSan's ReportRace under sendmsg; 6 of 6 in 6-12 s with this. */
    const char *o = getenv("TSAN_OPTIONS");
    if (!o || !strstr(o, "intercept_send=")) {
        char opts[1024];
        snprintf(opts, sizeof(opts), "%s%sintercept_send=0", o ? o : "", o && *o ? ":" : "");
        setenv("TSAN_OPTIONS", opts, 1);
    }
#endif
}
