#!/bin/sh
# check.sh — `make check`: every test stage in turn, then one summary line over all of them.
#
# Stages: format (every C file as .clang-format lays it out, every shell script clean
# under `shellcheck -x`), test (unit + integration + Python), typecheck (mypy --strict
# over python/tide),
# test-vllm (real vLLM 0.32 engines), test-vllm33 (vLLM 0.33's own scheduler and connector
# classes; check-config against 0.32 and 0.33), test-sglang (tide.sglang as SGLang 0.5.23's
# HiCache storage backend, SGLang's own classes on CPU), test-lmcache (LMCache 0.5.6's RESP
# client and L2 adapters against tided; tided's RESP replies against redis-server's), asan
# (the test suite under ASan+UBSan), valgrind (the unit suite under memcheck), tsan (every
# C test against ThreadSanitizer
# builds), fuzz (a short, reproducible run of every fuzz
# target). A failed stage does not stop the others, so one run shows every broken stage;
# the last line is the summary ("check: PASS ..." or "check: FAIL: <stages> ...") and the
# exit status is 1 when any stage failed. CHECK_STAGES="test tsan" runs a subset.
# Each stage's output is also kept in build/check/<stage>.log (CHECK_LOGS=DIR moves them:
# the script's own tests write theirs elsewhere, not over the running check's); for a failed
# stage, the lines
# that name what failed (a C test's FAIL line and the two lines before it, pytest's FAILED
# and ERROR lines, make's errors) are printed again just above the summary, so the end of a
# long log says which tests broke.
#
# Called by the Makefile with MAKE set to the make that called it.
cd "$(dirname "$0")/.." || exit 2
MAKE="${MAKE:-make}"
# Everything the tests need is installed by `make deps`, so a C test that skips here has
# silently stopped testing what it should: it fails the stage (tests/harness.c).
export TIDE_TESTS_NO_SKIP="${TIDE_TESTS_NO_SKIP:-1}"
STAGES="${CHECK_STAGES:-format test typecheck test-vllm test-vllm33 test-sglang test-lmcache test-docs asan valgrind tsan fuzz}"

run_stage() {
    case "$1" in
    test) $MAKE test ;;
    format) $MAKE format-check ;;
    typecheck) $MAKE typecheck ;;
    test-docs) $MAKE test-docs ;;
    test-vllm) $MAKE test-vllm ;;
    test-vllm33) $MAKE test-vllm33 ;;
    test-sglang) $MAKE test-sglang ;;
    test-lmcache) $MAKE test-lmcache ;;
    asan) $MAKE test SANITIZER=address,undefined ;;
    valgrind) $MAKE valgrind ;;
    tsan) $MAKE tsan ;;
    fuzz) $MAKE fuzz FUZZ_FLAGS='-runs=30000 -seed=1' ;;
    *) echo "check: unknown stage '$1' (stages: format test typecheck test-vllm test-vllm33 test-sglang test-lmcache test-docs asan valgrind tsan fuzz)" >&2
       return 2 ;;
    esac
}

LOGS="${CHECK_LOGS:-build/check}"
mkdir -p "$LOGS"

# The lines of a stage's log that name what failed, at most 60.
failure_digest() {
    grep -a -B2 -E '^(FAIL |FAILED |ERROR |make(\[[0-9]+\])?: \*\*\*)' "$1" | tail -n 60
}

summary=""
failed=""
start_all=$(date +%s)
for stage in $STAGES; do
    echo "=== check: stage $stage ==="
    t0=$(date +%s)
    # The exit status crosses the pipe through a file: POSIX sh has no pipefail.
    { run_stage "$stage"; echo $? > "$LOGS/$stage.rc"; } 2>&1 | tee "$LOGS/$stage.log"
    rc=$(cat "$LOGS/$stage.rc" 2>/dev/null || echo 2)
    secs=$(($(date +%s) - t0))
    if [ "$rc" -eq 0 ]; then
        summary="$summary $stage ok ${secs}s,"
    else
        summary="$summary $stage FAILED (exit $rc) ${secs}s,"
        failed="$failed $stage"
    fi
    echo "=== check: stage $stage: $([ "$rc" -eq 0 ] && echo ok || echo "FAILED, exit $rc") in ${secs}s ==="
done
total=$(($(date +%s) - start_all))
summary="${summary%,}"
if [ -z "$failed" ]; then
    echo "check: PASS:$summary; ${total}s in all"
    exit 0
fi
for stage in $failed; do
    echo "=== check: what failed in stage $stage (all of it in $LOGS/$stage.log) ==="
    failure_digest "$LOGS/$stage.log"
done
echo "check: FAIL:$failed —$summary; ${total}s in all"
exit 1
