#!/bin/sh
# sglang-env.sh — make .venv-sglang/ (git-ignored, in the repository root; $VENV overrides it):
# a virtual environment with SGLang 0.5.23 (`sglang` from PyPI) for `make test-sglang`
# (tests/sglang: SGLang's own HiCache storage factory, host pools and cache controller on CPU,
# with tide.sglang as the storage backend).
#
# Cheap on purpose. `pip install sglang` pulls torch 2.14.1 with CUDA 13 (5.4 GB and ~5 min for
# torch alone, measured) plus flashinfer, deep-gemm, flash-attn and the rest of the GPU stack.
# Here: sglang==0.5.23 --no-deps, and --no-deps every package of tests/sglang/requirements.lock
# (what SGLang's HiCache modules import, ~0.75 GB); torch, torchvision and triton are not
# downloaded again but linked from .venv-vllm33 (torch 2.14.0 with its NVIDIA libraries, made
# by scripts/vllm33-env.sh, which this script runs when that venv has no torch; $TORCH_VENV
# overrides it). Byte-code is not compiled at install (--no-compile): only what is imported.
# Idempotent: a complete environment is left alone (a stamp and one import, a few seconds).
set -eu
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv-sglang}
TORCH_VENV=${TORCH_VENV:-.venv-vllm33}
SGLANG_PKG="sglang==0.5.23"
LOCK=tests/sglang/requirements.lock
PY=/usr/bin/python3
SITE=lib/python3.11/site-packages

versions() {
    "$VENV/bin/python" -c 'import torch, platform
from importlib.metadata import version
assert version("sglang") == "0.5.23", version("sglang")
import sglang.srt.mem_cache.hicache_storage
print("sglang-env: sglang %s, torch %s, python %s" % (version("sglang"), torch.__version__,
      platform.python_version()))' 2>/dev/null
}

stamp="$VENV/.tide-lock"
want=$( (grep -v '^#' "$LOCK"; echo "$SGLANG_PKG"; readlink -f "$TORCH_VENV" || true) |
    sha256sum | cut -c1-16)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && versions; then
    exit 0
fi

if [ ! -d "$TORCH_VENV/$SITE/torch" ]; then
    VENV="$TORCH_VENV" scripts/vllm33-env.sh
fi
torch_site="$(readlink -f "$TORCH_VENV")/$SITE"
if [ ! -d "$torch_site/torch" ] || [ ! -d "$torch_site/torchvision" ]; then
    echo "sglang-env: $TORCH_VENV has no torch/torchvision to link" >&2
    exit 1
fi

n=$(grep -v '^#' "$LOCK" | grep -c '==')
echo "sglang-env: building $VENV ($SGLANG_PKG and $n pinned packages, --no-deps; torch from" \
    "$TORCH_VENV)"
start=$(date +%s)
rm -rf "$VENV"
$PY -m venv "$VENV"
"$VENV/bin/pip" install -q --disable-pip-version-check --no-deps --no-compile -r "$LOCK" \
    "$SGLANG_PKG" pytest==9.2.0 iniconfig==2.3.1 pluggy==1.7.0
for d in "$torch_site"/torch "$torch_site"/torchgen "$torch_site"/functorch \
    "$torch_site"/torch-*.dist-info "$torch_site"/torchvision \
    "$torch_site"/torchvision-*.dist-info "$torch_site"/torchvision.libs "$torch_site"/nvidia \
    "$torch_site"/triton "$torch_site"/triton-*.dist-info; do
    [ -e "$d" ] && ln -sfn "$d" "$VENV/$SITE/$(basename "$d")"
done
if ! versions; then
    echo "sglang-env: $VENV was built but SGLang's HiCache storage does not import:" >&2
    "$VENV/bin/python" -c 'import sglang.srt.mem_cache.hicache_storage' >&2 || true
    exit 1
fi
echo "$want" > "$stamp"
echo "sglang-env: done in $(( $(date +%s) - start )) s, $(du -sh "$VENV" | cut -f1)" \
    "(the links to $TORCH_VENV not counted)"
