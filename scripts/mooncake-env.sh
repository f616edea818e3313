#!/bin/sh
# mooncake-env.sh — make .venv-mooncake/ (git-ignored, in the repository root): a virtual
# environment with Mooncake's PyPI package (master, store client, Python API), for
# bench/mooncake.sh. Idempotent: when the stamp file names the pinned package and the
# package imports, nothing is done (one import, about a second); otherwise the environment
# is (re)built. Prints the Mooncake version it has.
#
# The package's binaries and store.so link libibverbs.so.1 even for the TCP transport
# (no RDMA is used or needed); Debian's libibverbs1 provides it and is installed here, not
# by `make deps`, since only this benchmark needs it.
set -eu
cd "$(dirname "$0")/.."
VENV=${MOONCAKE_VENV:-.venv-mooncake}
PKG="mooncake-transfer-engine-non-cuda==0.3.13.post1"
PY=/usr/bin/python3

have() {
    "$VENV/bin/python" -c 'import importlib.metadata as m, mooncake.store
print("mooncake-env: mooncake-transfer-engine-non-cuda %s, python %s" % (
      m.version("mooncake-transfer-engine-non-cuda"), __import__("platform").python_version()))' \
        2>/dev/null
}

if ! dpkg-query -W -f='${Status}' libibverbs1 2>/dev/null | grep -q "install ok installed"; then
    echo "mooncake-env: installing libibverbs1 (Mooncake's binaries link it)" >&2
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
        libibverbs1 >/dev/null
fi

stamp="$VENV/.tide-pin"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$PKG" ] && have; then
    exit 0
fi
if ! $PY -c 'import ensurepip' 2>/dev/null; then
    echo "mooncake-env: $PY has no venv/ensurepip (make deps installs python3-venv)" >&2
    exit 1
fi
echo "mooncake-env: building $VENV ($PKG)" >&2
rm -rf "$VENV"
$PY -m venv "$VENV"
"$VENV/bin/pip" install -q --disable-pip-version-check "$PKG"
if ! have; then
    echo "mooncake-env: $VENV was built but mooncake.store does not import:" >&2
    "$VENV/bin/python" -c 'import mooncake.store' >&2 || true
    exit 1
fi
echo "$PKG" >"$stamp"
