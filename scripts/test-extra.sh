#!/bin/sh
# test-extra.sh — test steps that are not C unit tests, run by `make test` after
# tide-tests (and by `make python-test` for the python step alone).
#
#   BUILD=build scripts/test-extra.sh            every step
#   BUILD=build/san scripts/test-extra.sh python  the named steps only
#
# BUILD is the build directory whose libtide.so the steps use (make passes its own).
# PYTEST_ARGS is passed to pytest (e.g. PYTEST_ARGS="-k scatter -x").
#
# Each step is a function step_NAME that returns 0 (passed), 1 (failed) or 77 (skipped,
# after printing why). To add a step, write its function and add NAME to STEPS. The run
# ends with one summary line and exits non-zero if any step failed.
set -u
cd "$(dirname "$0")/.." || exit 1

BUILD=${BUILD:-build}
case "$BUILD" in /*) ;; *) BUILD="$PWD/$BUILD" ;; esac
PYTHON=${PYTHON:-/usr/bin/python3}
STEPS="python install"

# The Python binding's tests (tests/python) on Debian's python3 with python3-pytest and
# python3-numpy (installed by `make deps`), against $BUILD/libtide.so and, for the tide://
# tests, a tided started from $BUILD/tide. A sanitizer build's libtide.so needs the ASan
# runtime loaded before anything else in the process, so python runs with it preloaded
# (and leak checking off: the interpreter itself does not free everything at exit).
step_python() {
    lib="$BUILD/libtide.so"
    if [ ! -f "$lib" ]; then
        echo "python: $lib is missing (run make first)"
        return 1
    fi
    if ! "$PYTHON" -c "import pytest, numpy" 2>/dev/null; then
        echo "python: $PYTHON cannot import pytest and numpy (run make deps:" \
            "python3-pytest, python3-numpy)"
        return 1
    fi
    preload=""
    asan=$(ldd "$lib" 2>/dev/null | awk '/libasan/ { print $3; exit }')
    if [ -n "$asan" ]; then
        if [ ! -f "$asan" ]; then
            echo "python: skipped: $lib needs libasan, which ldd cannot find"
            return 77
        fi
        preload="$asan"
        echo "python: $lib is ASan-instrumented; running with LD_PRELOAD=$asan" \
            "ASAN_OPTIONS=detect_leaks=0"
    fi
    TIDE_BIN=${TIDE_BIN:-$BUILD/tide}
    export TIDE_BIN
    echo "python: PYTHONPATH=python TIDE_LIB=$lib TIDE_BIN=$TIDE_BIN" \
        "$PYTHON -m pytest -q tests/python ${PYTEST_ARGS:-}"
    # shellcheck disable=SC2086
    if [ -n "$preload" ]; then
        env LD_PRELOAD="$preload" ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=0}" \
            PYTHONPATH=python TIDE_LIB="$lib" \
            "$PYTHON" -m pytest -q -p no:cacheprovider tests/python ${PYTEST_ARGS:-}
    else
        env PYTHONPATH=python TIDE_LIB="$lib" \
            "$PYTHON" -m pytest -q -p no:cacheprovider tests/python ${PYTEST_ARGS:-}
    fi
}

# tide installed as a user installs it (make install DESTDIR=/PREFIX=, pkg-config, pip into
# a venv, tests/python against that, the systemd unit): scripts/test-install.sh says how.
step_install() {
    BUILD="$BUILD" PYTHON="$PYTHON" scripts/test-install.sh
}

[ $# -gt 0 ] && STEPS="$*"
passed="" failed="" skipped=""
for s in $STEPS; do
    if ! command -v "step_$s" >/dev/null 2>&1; then
        echo "test-extra: no step named '$s' (steps: python install)"
        failed="$failed $s"
        continue
    fi
    echo "== test-extra: $s"
    "step_$s"
    case $? in
    0) passed="$passed $s" ;;
    77) skipped="$skipped $s" ;;
    *) failed="$failed $s" ;;
    esac
done

# Word splitting is the point here: count the names in a space-separated list.
# shellcheck disable=SC2086
count() { set -- $1; echo $#; }
echo "test-extra: $(count "$passed") passed, $(count "$failed") failed," \
    "$(count "$skipped") skipped${failed:+ (failed:$failed)}${skipped:+ (skipped:$skipped)}"
[ -z "$failed" ]
