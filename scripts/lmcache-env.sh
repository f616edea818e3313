#!/bin/sh
# lmcache-env.sh — make .venv-lmcache/ (git-ignored, in the repository root; $VENV overrides
# it): LMCache 0.5.6 from PyPI for `make test-lmcache` (tests/lmcache: its RESP client, its
# resp:// and redis:// remote connectors and its multiprocess L2 adapters driven on CPU
# against a real tided).
#
# Cheap by design: lmcache declares torch, CUDA Python, CuPy, transformers, gRPC and
# OpenTelemetry among ~40 dependencies (GBs). Its remote-store modules need only a handful of
# them beyond torch and numpy, so this environment installs exactly
# tests/lmcache/requirements.lock with --no-deps (~20 MB download, ~130 MB on disk, seconds)
# and reads torch, numpy and pytest from the vLLM 0.33 environment ($VENV33, default
# .venv-vllm33, made first by scripts/vllm33-env.sh, which `make test-vllm33` needs anyway)
# through a .pth file placed after its own site-packages. lmcache's native extensions list
# libtorch among their libraries, so a torch must be importable; any 2.x does.
# Idempotent: a complete environment is left alone (one import, a few seconds).
set -eu
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv-lmcache}
VENV33=${VENV33:-.venv-vllm33}
LOCK=tests/lmcache/requirements.lock
PY=/usr/bin/python3

versions() {
    "$VENV/bin/python" -c 'import importlib.metadata as m, platform, torch
import lmcache.lmcache_redis, lmcache.v1.distributed.l2_adapters.native_connector_l2_adapter
assert m.version("lmcache") == "0.5.6", m.version("lmcache")
print("lmcache-env: lmcache %s, torch %s, redis-py %s, python %s" % (m.version("lmcache"),
      torch.__version__, m.version("redis"), platform.python_version()))' 2>/dev/null
}

pth() {
    echo "$(cd "$VENV33" && pwd -P)/lib/python3.11/site-packages"
}

# The torch this environment reads: .venv-vllm33, made (or checked) by its own script unless
# it is there already (in `make check`, test-vllm33 has just checked it).
[ -f "$VENV33/.tide-lock" ] || VENV=$VENV33 scripts/vllm33-env.sh
stamp="$VENV/.tide-lock"
want=$( (grep -v '^#' "$LOCK"; pth) | sha256sum | cut -c1-16)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && versions; then
    exit 0
fi
echo "lmcache-env: building $VENV ($(grep -v '^#' "$LOCK" | grep -c '==') pinned packages, --no-deps; torch from $VENV33)"
start=$(date +%s)
rm -rf "$VENV"
$PY -m venv "$VENV"
site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
pth > "$site/zz-tide-vllm33.pth"
"$VENV/bin/pip" install -q --disable-pip-version-check --no-deps -r "$LOCK"
if ! versions; then
    echo "lmcache-env: $VENV was built but lmcache 0.5.6's RESP modules do not import:" >&2
    "$VENV/bin/python" -c 'import lmcache.lmcache_redis' >&2 || true
    exit 1
fi
echo "$want" > "$stamp"
echo "lmcache-env: done in $(( $(date +%s) - start )) s, $(du -sh "$VENV" | cut -f1)"
