#!/bin/sh
# vllm_ttft.sh — bench/vllm_ttft.py (TTFT of a real CPU vLLM engine with a 4k-token prefix
# from tide vs recomputing it, over unix:// and tide://) in the vLLM environment.
#
#   bench/vllm_ttft.sh [options of bench/vllm_ttft.py]     print the table
#   bench/vllm_ttft.sh --update-results [options]         also put it in bench/RESULTS.md
#                                                         (section "## vllm_ttft", the rest
#                                                         of the file kept as it is)
#
# Uses $VLLM_PYTHON when set, else .venv-vllm/bin/python, building .venv-vllm first with
# scripts/vllm-env.sh (idempotent; a few minutes the first time). BUILD (default build)
# holds tide and libtide.so (run make first). VLLM_TTFT_ARGS adds options (make bench).
# Five engine processes and two `vllm serve` servers, one after the other: several
# minutes on 2 cores.
set -eu
cd "$(dirname "$0")/.."
BUILD="${BUILD:-build}"
update=0
if [ "${1:-}" = --update-results ]; then
    update=1
    shift
fi
if [ -n "${VLLM_PYTHON:-}" ]; then
    PY="$VLLM_PYTHON"
else
    scripts/vllm-env.sh >&2
    PY=.venv-vllm/bin/python
fi
for f in "$BUILD/tide" "$BUILD/libtide.so"; do
    [ -e "$f" ] || { echo "vllm_ttft: no $f (run make first)" >&2; exit 1; }
done
# shellcheck disable=SC2086 # VLLM_TTFT_ARGS is a list of options
if [ "$update" -eq 0 ]; then
    exec "$PY" bench/vllm_ttft.py --python "$PY" --tide "$BUILD/tide" \
        --lib "$BUILD/libtide.so" ${VLLM_TTFT_ARGS:-} "$@"
fi
OUT=bench/RESULTS.md
TMP="$(mktemp)"
trap 'rm -f "$TMP" "$TMP.new"' EXIT
{
    echo "## vllm_ttft"
    echo
    echo "Command: \`bench/vllm_ttft.sh${VLLM_TTFT_ARGS:+ $VLLM_TTFT_ARGS}${*:+ $*}\`" \
        "(BUILD=$BUILD), $(date -u '+%Y-%m-%d %H:%M UTC'), commit" \
        "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
    echo
} >"$TMP"
rc=0
# shellcheck disable=SC2086 # VLLM_TTFT_ARGS is a list of options
"$PY" bench/vllm_ttft.py --python "$PY" --tide "$BUILD/tide" --lib "$BUILD/libtide.so" \
    ${VLLM_TTFT_ARGS:-} "$@" >>"$TMP" || rc=$?
cat "$TMP"
if [ -f "$OUT" ]; then
    # Replace the old section (or add one before "## soak", which stays last).
    awk -v sec="$TMP" '
        function emit() { if (!done) { while ((getline l < sec) > 0) print l; print ""; done = 1 } }
        /^## / { skip = ($0 == "## vllm_ttft"); if ($0 == "## soak") emit() }
        !skip { print }
        END { if (!done) { print ""; emit() } }' "$OUT" >"$TMP.new"
    mv "$TMP.new" "$OUT"
else
    cp "$TMP" "$OUT"
fi
echo "vllm_ttft: wrote its section of $OUT" >&2
exit "$rc"
