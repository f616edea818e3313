#!/bin/sh
# deps.sh — install the Debian packages tide's build, tests and benchmarks need, when any
# is missing. Idempotent; prints nothing when everything is already installed.
set -e
PKGS="build-essential clang libclang-rt-14-dev pkg-config libxxhash-dev libssl-dev \
libcjson-dev liburing-dev libcurl4-openssl-dev libucx-dev ucx-utils python3 python3-numpy \
python3-pytest python3-venv python3-mypy \
redis-server redis-tools etcd-server etcd-client iproute2 valgrind jq curl llvm-14"
# The counters test (tests/integration/test_counters.c): promtool checks /metrics and a real
# Prometheus server, started by the test on loopback, scrapes tided.
PKGS="$PKGS prometheus"
# make test-sglang: SGLang's HiCache page hash is a C++ extension torch builds with ninja,
# against Python's headers (python3-dev).
PKGS="$PKGS ninja-build python3-dev"
# make install-test: pip install --no-build-isolation (setuptools), the venv's pip, readelf
# (binutils), and systemd-analyze verify for contrib/tided.service (systemd; nothing starts).
PKGS="$PKGS python3-setuptools python3-pip binutils systemd"
# make check's format stage (make format-check): clang-format for the C files, shellcheck for
# the shell scripts.
PKGS="$PKGS clang-format shellcheck"
missing=""
for p in $PKGS; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done
if [ -n "$missing" ]; then
    echo "deps: installing:$missing"
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    # shellcheck disable=SC2086
    $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
    echo "deps: done"
fi

# The UCX the same-host tests run against (tests/integration/test_ucx.c, docs/UCX.md: Debian's
# 1.13 is older than the 1.22 that endpoint needs): PyPI's libucx-cu12 wheel, whose UCX
# loads without CUDA, unpacked into .deps/ (git-ignored). Nothing is installed.
cd "$(dirname "$0")/.."
UCX_NEW=.deps/libucx-1.22
if [ ! -f "$UCX_NEW/libucx/lib/libucp.so.0" ]; then
    echo "deps: fetching libucx-cu12 1.22.0 into $UCX_NEW"
    rm -rf "$UCX_NEW" .deps/wheels
    python3 -m pip download -q --disable-pip-version-check --no-deps \
        -d .deps/wheels libucx-cu12==1.22.0
    python3 -m zipfile -e .deps/wheels/libucx_cu12-1.22.0-*.whl "$UCX_NEW"
    chmod +x "$UCX_NEW"/libucx/bin/* # zip keeps no modes: its ucx_perftest, for bench/ucx.sh
    rm -rf .deps/wheels
fi
