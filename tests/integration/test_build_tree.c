/*
 * test_build_tree.c — what the build tree promises a program built against it: a C program
 * linked with -L$(BUILD) -ltide runs from the build tree (the soname libtide.so.0 is there),
 * and sees the version the header names.
 */
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "tide.h"

#define STR2(x) #x
#define STR(x) STR2(x)
#define HEADER_VERSION                                                                             \
    STR(TIDE_VERSION_MAJOR) "." STR(TIDE_VERSION_MINOR) "." STR(TIDE_VERSION_PATCH)

TEST_T(build_tree_program_linked_against_libtide_so_runs, 60) {
    char src[400], bin[400], cmd[2400], out[4096];
    snprintf(src, sizeof(src), "%s/app.c", test_tmpdir());
    snprintf(bin, sizeof(bin), "%s/app", test_tmpdir());
    FILE *f = fopen(src, "w");
    CHECK(f != NULL);
    fputs("#include <stdio.h>\n#include \"tide.h\"\n"
          "int main(void) {\n"
          "    tide_store *s;\n"
          "    if (tide_open(\"mem://?capacity=1MiB\", &s) != 0) return 3;\n"
          "    int rc = tide_put(s, \"k\", 1, \"v\", 1);\n"
          "    tide_close(s);\n"
          "    printf(\"version %s put %d\\n\", tide_version(), rc);\n"
          "    return rc == 0 ? 0 : 4;\n"
          "}\n",
          f);
    fclose(f);
    /* Linked the way a newcomer links against a build tree, run with the loader told where
     * the build tree is and nothing else. An ASan build's libtide needs ASan's runtime
     * linked into the program first, as the build links it. */
#if defined(__SANITIZE_ADDRESS__)
    const char *san = "-fsanitize=address,undefined ";
#else
    const char *san = "";
#endif
    snprintf(cmd, sizeof(cmd),
             "cc %s-Iinclude -o %s %s -L%s -ltide 2>&1 && LD_LIBRARY_PATH=%s %s 2>&1", san, bin,
             src, test_build_dir(), test_build_dir(), bin);
    int rc = test_run(cmd, out, sizeof(out));
    CHECK_MSG(rc == 0, "exit %d: %s", rc, out);
    CHECK_CONTAINS(out, "version " HEADER_VERSION " put 0");
}

/* libtide holds the library only: the trace simulator and the test device kind are linked
 * by the tide binary and the test runner, not shipped in libtide.so or libtide.a. */
TEST_T(build_tree_libtide_holds_only_the_library, 60) {
    char cmd[1200], out[8192];
    snprintf(cmd, sizeof(cmd),
             "nm %s/libtide.so %s/libtide.a 2>/dev/null | grep -E ' [TtDdBbR] "
             "(sim_|trace_|dev_test_)' | head -20",
             test_build_dir(), test_build_dir());
    int rc = test_run(cmd, out, sizeof(out));
    CHECK_EQ(rc, 0);
    CHECK_MSG(out[0] == '\0', "libtide carries symbols of the CLI or the tests:\n%s", out);
    snprintf(cmd, sizeof(cmd), "nm %s/libtide.so | grep -c ' T tide_open$'", test_build_dir());
    test_run(cmd, out, sizeof(out));
    CHECK_MSG(atoi(out) == 1, "nm found no tide_open in libtide.so: %s", out);
}
