#!/bin/sh
# bench.sh — run tide's benchmarks (every program under $BUILD/bench/, then the trace
# replay of scripts/bench_trace.sh) and write bench/RESULTS.md: the machine, the date, each
# command and what it printed, and the plot bench/hitrate.svg.
#
# Called by `make bench` after the build. BUILD defaults to build. Each benchmark prints
# medians of its own runs and ratios against a baseline it measures in the same run; the
# absolute figures move with the machine and with whatever else runs on it (the load
# average at the start is recorded for that reason).
set -e
cd "$(dirname "$0")/.."
BUILD="${BUILD:-build}"
OUT=bench/RESULTS.md
TMP="$(mktemp)"
trap 'rm -f "$TMP"' EXIT

cpu="$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')"
l3="$(lscpu 2>/dev/null | sed -n 's/^L3 cache: *//p' | head -n1)"
mem="$(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"
{
    echo "# tide benchmark results"
    echo
    echo "Written by \`make bench\` (scripts/bench.sh). Compare ratios measured in one run;"
    echo "absolute figures depend on the machine and on what else it was running."
    echo
    echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "- commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
    echo "- CPU: ${cpu:-unknown} (nproc $(nproc)${l3:+, L3 $l3}), memory $mem"
    echo "- kernel: $(uname -sr)"
    echo "- load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "- compiler: $(${CC:-gcc} --version 2>/dev/null | head -n1)"
} >"$TMP"

found=0
for b in "$BUILD"/bench/*; do
    [ -x "$b" ] && [ -f "$b" ] || continue
    found=1
    name="$(basename "$b")"
    echo "bench: running $b" >&2
    {
        echo
        echo "## $name"
        echo
        echo "Command: \`$b\`"
        echo
    } >>"$TMP"
    "$b" | tee -a "$TMP"
done
if [ "$found" -eq 0 ]; then
    echo "bench: no benchmark programs under $BUILD/bench (run make first)" >&2
    exit 1
fi
# Trace replay: hit rate against capacity per policy and the optimum, and the plot
# bench/hitrate.svg (scripts/bench_trace.sh).
TRACE_MD="$(mktemp)"
if ! BUILD="$BUILD" scripts/bench_trace.sh >"$TRACE_MD"; then
    rm -f "$TRACE_MD"
    echo "bench: the trace replay failed" >&2
    exit 1
fi
echo >>"$TMP"
tee -a "$TMP" <"$TRACE_MD"
rm -f "$TRACE_MD"
# The soak's section (written from `make soak`, not run here) is kept across runs.
[ -f "$OUT" ] && awk '/^## /{p = ($0 == "## soak")} p' "$OUT" | sed '1s/^/\n/' >>"$TMP"
mv "$TMP" "$OUT"
trap - EXIT
echo "bench: wrote $OUT" >&2
