#!/bin/sh
# test-install.sh — tide as a user installs it, in temporary folders (removed at the end;
# KEEP=1 keeps them): the step "install" of scripts/test-extra.sh (make test, make
# install-test).
#
#   1. make install DESTDIR=D: exactly the expected files and links, the soname, tide.pc,
#      working --help; make uninstall DESTDIR=D removes those and nothing else;
#   2. make install PREFIX=P: a C program built with `pkg-config --cflags --libs tide` runs
#      against P's libtide.so.MAJOR, and one linked statically from libtide.a with
#      `pkg-config --static --libs tide` runs without any libtide.so;
#   3. a venv (--system-site-packages, for Debian's pytest and numpy), pip install
#      --no-build-isolation --no-index of python/, then tests/python against that installed
#      package and P's libtide, found by its soname (LD_LIBRARY_PATH=P/lib, no TIDE_LIB);
#   4. contrib/tided.service, pointed at P/bin/tided, passes systemd-analyze verify (skipped,
#      saying so, without systemd-analyze), and tided starts with its flags.
#
# BUILD is the build directory to install from (make passes its own); MAKE the make to run.
# Exits 0 (passed), 1 (failed) or 77 (skipped, with the reason).
set -u
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
BUILD=${BUILD:-build}
MAKE=${MAKE:-make}
PYTHON=${PYTHON:-/usr/bin/python3}

fail() {
    echo "install: FAILED: $*"
    exit 1
}

[ -f "$BUILD/libtide.so" ] || fail "$BUILD/libtide.so is missing (run make first)"
# A sanitizer build's library needs its runtime loaded first, in every program that uses it:
# not what a user installs. `make test` (a plain build) runs this step.
if ldd "$BUILD/libtide.so" 2>/dev/null | grep -Eq 'lib(asan|ubsan|tsan)'; then
    echo "install: skipped: $BUILD is a sanitizer build (make install-test checks a plain one)"
    exit 77
fi
for tool in pkg-config readelf "$PYTHON"; do
    command -v "$tool" >/dev/null 2>&1 || fail "$tool is not installed (run make deps)"
done
"$PYTHON" -c "import venv, ensurepip" 2>/dev/null ||
    fail "$PYTHON has no venv/ensurepip (run make deps: python3-venv)"
"$PYTHON" -c "import setuptools, pytest, numpy" 2>/dev/null ||
    fail "$PYTHON cannot import setuptools, pytest and numpy (run make deps:" \
        "python3-setuptools, python3-pytest, python3-numpy)"

T=$(mktemp -d "${TMPDIR:-/tmp}/tide-install.XXXXXX") || fail "mktemp"
if [ -n "${KEEP:-}" ]; then
    echo "install: keeping $T"
else
    trap 'rm -rf "$T"' EXIT
fi
ver() { sed -n "s/^#define TIDE_VERSION_$1 \([0-9][0-9]*\).*/\1/p" include/tide.h; }
MAJOR=$(ver MAJOR)
VERSION="$MAJOR.$(ver MINOR).$(ver PATCH)"
SONAME="libtide.so.$MAJOR"
mk() { "$MAKE" --no-print-directory -s BUILD="$BUILD" LDCONFIG= "$@"; }

# -- 1. DESTDIR: the file list, the soname, tide.pc, --help; uninstall -------------------
D="$T/stage"
mk install DESTDIR="$D" PREFIX=/usr/local >"$T/install.log" 2>&1 ||
    fail "make install DESTDIR=$D: $(cat "$T/install.log")"
(cd "$D" && find . ! -type d -printf "%y %p %l\n" | LC_ALL=C sort) >"$T/files"
LC_ALL=C sort >"$T/want" <<EOF
f ./usr/local/bin/tide 
f ./usr/local/include/tide.h 
f ./usr/local/lib/libtide.a 
f ./usr/local/lib/libtide.so.$VERSION 
f ./usr/local/lib/pkgconfig/tide.pc 
l ./usr/local/bin/tided tide
l ./usr/local/lib/$SONAME libtide.so.$VERSION
l ./usr/local/lib/libtide.so $SONAME
EOF
diff -u "$T/want" "$T/files" >"$T/diff" || fail "installed files differ from the list: $(cat "$T/diff")"
L="$D/usr/local/lib"
readelf -d "$L/libtide.so.$VERSION" | grep -q "Library soname: \[$SONAME\]" ||
    fail "libtide.so.$VERSION has no soname $SONAME: $(readelf -d "$L/libtide.so.$VERSION" | grep SONAME)"
cmp -s include/tide.h "$D/usr/local/include/tide.h" || fail "the installed tide.h is not include/tide.h"
pc="$L/pkgconfig/tide.pc"
grep -qx "prefix=/usr/local" "$pc" || fail "tide.pc: no prefix=/usr/local: $(cat "$pc")"
[ "$(PKG_CONFIG_PATH="$L/pkgconfig" pkg-config --modversion tide)" = "$VERSION" ] ||
    fail "pkg-config --modversion tide is not $VERSION"
for b in tide tided; do
    "$D/usr/local/bin/$b" --help >"$T/help" 2>&1 || fail "$b --help exited $?: $(cat "$T/help")"
    grep -q "^usage: tide" "$T/help" || fail "$b --help printed no usage: $(cat "$T/help")"
done
"$D/usr/local/bin/tide" version >"$T/v" 2>&1 || fail "tide version: $(cat "$T/v")"
grep -q "$VERSION" "$T/v" || fail "tide version does not say $VERSION: $(cat "$T/v")"
echo "someone else's" >"$L/libother.so.1" # uninstall must leave it
mk uninstall DESTDIR="$D" PREFIX=/usr/local >"$T/uninstall.log" 2>&1 ||
    fail "make uninstall DESTDIR=$D: $(cat "$T/uninstall.log")"
left=$(cd "$D" && find . ! -type d | sort | tr '\n' ' ')
[ "$left" = "./usr/local/lib/libother.so.1 " ] ||
    fail "after make uninstall, expected only ./usr/local/lib/libother.so.1, found: $left"
echo "install: DESTDIR install has the $(wc -l <"$T/want") files and links, uninstall removed them"

# -- 2. PREFIX: pkg-config, a dynamic and a static C program -------------------------------
P="$T/prefix"
mk install PREFIX="$P" >"$T/install.log" 2>&1 || fail "make install PREFIX=$P: $(cat "$T/install.log")"
export PKG_CONFIG_PATH="$P/lib/pkgconfig"
cat >"$T/hello.c" <<'EOF'
/* hello.c — a program against the installed libtide: a mem:// round trip. */
#include <stdio.h>
#include <string.h>
#include <tide.h>

int main(void) {
    tide_store *s = NULL;
    char buf[16];
    size_t n = 0;
    int rc = tide_open("mem://?capacity=1MiB", &s);
    if (rc == 0) rc = tide_put(s, "k", 1, "value", 5);
    if (rc == 0) rc = tide_get(s, "k", 1, buf, sizeof buf, &n);
    if (rc != 0 || n != 5 || memcmp(buf, "value", 5) != 0) {
        fprintf(stderr, "hello: %s\n", rc ? tide_strerror(rc) : "wrong value");
        return 1;
    }
    tide_close(s);
    printf("libtide %s\n", tide_version());
    return 0;
}
EOF
CC=${CC:-cc}
# shellcheck disable=SC2046  # pkg-config's flags are meant to split
$CC -std=c11 -Wall -Wextra -Werror -o "$T/hello" "$T/hello.c" $(pkg-config --cflags --libs tide) \
    >"$T/cc.log" 2>&1 || fail "cc hello.c \$(pkg-config --cflags --libs tide): $(cat "$T/cc.log")"
readelf -d "$T/hello" | grep -q "Shared library: \[$SONAME\]" ||
    fail "hello does not need $SONAME: $(readelf -d "$T/hello" | grep NEEDED)"
out=$(LD_LIBRARY_PATH="$P/lib" "$T/hello" 2>&1) || fail "hello (dynamic): $out"
[ "$out" = "libtide $VERSION" ] || fail "hello (dynamic) printed '$out', not 'libtide $VERSION'"
# Static: libtide.a first, then what Libs.private lists; --as-needed drops the -ltide that
# pkg-config repeats, so a missing private library shows up as a link error here.
# shellcheck disable=SC2046
$CC -std=c11 -o "$T/hello-static" "$T/hello.c" $(pkg-config --cflags tide) "$P/lib/libtide.a" \
    -Wl,--as-needed $(pkg-config --static --libs tide) >"$T/cc.log" 2>&1 ||
    fail "static link with \$(pkg-config --static --libs tide): $(cat "$T/cc.log")"
if readelf -d "$T/hello-static" | grep -q "libtide"; then
    fail "hello-static still needs a libtide.so"
fi
out=$("$T/hello-static" 2>&1) || fail "hello (static): $out"
[ "$out" = "libtide $VERSION" ] || fail "hello (static) printed '$out'"
echo "install: C programs built with pkg-config (dynamic, $SONAME; static, libtide.a) run"

# -- 3. pip install into a venv, tests/python against it -----------------------------------
V="$T/venv"
"$PYTHON" -m venv --system-site-packages "$V" >"$T/venv.log" 2>&1 || fail "venv: $(cat "$T/venv.log")"
# A copy of python/ without build outputs, so that the build leaves nothing in the tree.
mkdir "$T/src" || fail "copying python/"
(cd python && tar cf - --exclude=__pycache__ --exclude=build --exclude='*.egg-info' .) |
    (cd "$T/src" && tar xf -) || fail "copying python/"
(cd "$T" && PIP_NO_INDEX=1 "$V/bin/pip" install -q --no-build-isolation --no-index "$T/src") \
    >"$T/pip.log" 2>&1 || fail "pip install --no-build-isolation $T/src: $(cat "$T/pip.log")"
# Run from $T so that neither the tree's python/ nor its build/ can be picked up.
(cd "$T" && env -u TIDE_LIB -u PYTHONPATH LD_LIBRARY_PATH="$P/lib" "$V/bin/python" -c '
import sys, tide, tide._lib as L
print(tide.__file__, L.lib().file, tide.__version__)' >"$T/where" 2>&1) ||
    fail "import tide in the venv: $(cat "$T/where")"
case "$(cat "$T/where")" in
"$V"/lib/python3*/site-packages/tide/__init__.py" $(realpath "$P/lib/libtide.so.$VERSION") $VERSION") ;;
*) fail "the installed package or library is not the one expected: $(cat "$T/where")" ;;
esac
echo "install: pip-installed tide loads $P/lib/$SONAME by its soname"
echo "install: TIDE_TEST_INSTALLED=1 LD_LIBRARY_PATH=$P/lib TIDE_BIN=$P/bin/tide" \
    "$V/bin/python -m pytest -q tests/python ${PYTEST_ARGS:-}"
# shellcheck disable=SC2086
(cd "$T" && env -u TIDE_LIB -u PYTHONPATH TIDE_TEST_INSTALLED=1 TIDE_TEST_LIBDIR="$P/lib" \
    LD_LIBRARY_PATH="$P/lib" TIDE_BIN="$P/bin/tide" "$V/bin/python" -m pytest -q \
    -p no:cacheprovider --rootdir="$ROOT/tests/python" "$ROOT/tests/python" ${PYTEST_ARGS:-}) ||
    fail "tests/python against the installed package"

# -- 4. the systemd unit -------------------------------------------------------------------
unit="$T/tided.service"
sed "s|/usr/local/bin/tided|$P/bin/tided|" contrib/tided.service >"$unit"
grep -q "^ExecStart=$P/bin/tided " "$unit" || fail "contrib/tided.service: no ExecStart=/usr/local/bin/tided"
# tided accepts the unit's flags: ExecStart's command line, %S as a folder here, any port.
args=$(awk '/^ExecStart=/ { on = 1 } on { print; if ($0 !~ /\\$/) exit }' "$unit" |
    sed 's/\\$//; s/^ExecStart=//' | tr '\n' ' ' | sed "s|%S|$T/state|g; s|--port [0-9]*|--port 0|")
mkdir -p "$T/state/tide"
# shellcheck disable=SC2086
$args --metrics-port 0 --ready-file "$T/ready" >"$T/tided.log" 2>&1 &
pid=$!
i=0
while [ ! -s "$T/ready" ] && kill -0 "$pid" 2>/dev/null && [ $i -lt 100 ]; do
    sleep 0.1
    i=$((i + 1))
done
if [ ! -s "$T/ready" ]; then
    kill "$pid" 2>/dev/null
    fail "tided did not start with the unit's flags ($args): $(cat "$T/tided.log")"
fi
kill -TERM "$pid"
wait "$pid" || fail "tided with the unit's flags exited $? on SIGTERM: $(cat "$T/tided.log")"
[ -d "$T/state/tide/ssd" ] || fail "tided did not make its --disk-dir under the state directory"
echo "install: tided runs with contrib/tided.service's flags"
if ! command -v systemd-analyze >/dev/null 2>&1; then
    echo "install: skipped systemd-analyze verify: systemd-analyze is not installed" \
        "(Debian package systemd); everything else passed"
    exit 77
fi
systemd-analyze verify "$unit" >"$T/verify.log" 2>&1
rc=$?
if [ $rc -ne 0 ] || grep -q "tided.service" "$T/verify.log"; then
    fail "systemd-analyze verify contrib/tided.service (exit $rc): $(cat "$T/verify.log")"
fi
echo "install: systemd-analyze verify contrib/tided.service: clean"
