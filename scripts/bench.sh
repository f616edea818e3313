#!/bin/sh
# bench.sh — run tide's benchmarks (every program under $BUILD/bench/, then bench/net.sh,
# the trace replay of scripts/bench_trace.sh, bench/resp.sh (also with the pool shared),
# bench/hostile.sh, bench/ucx.sh,
# bench/mooncake.sh and bench/cluster.sh) and write
# bench/RESULTS.md: the machine, the date, each command and what it printed, and the plot
# bench/hitrate.svg.
#
# Called by `make bench` after the build. BUILD defaults to build. Each benchmark prints
# medians of its own runs and ratios against a baseline it measures in the same run; the
# absolute figures move with the machine and with whatever else runs on it (the load
# average at the start is recorded for that reason).
#
# $BUILD/bench/ttft (bench/ttft.c: the reference engine's time to first token with a
# prefix from tide vs recomputing it, 2k/8k/16k tokens, mem://, unix:// and tide://) finds
# build/tide beside its directory to start its tided; it computes 16k-token prompts from
# scratch four times, so it takes minutes. TTFT_ARGS passes options to it
# (e.g. TTFT_ARGS="--sizes 2048").
#
# bench/vllm_ttft.sh (the same with a real vLLM engine on CPU, see below) needs .venv-vllm
# and takes several minutes; VLLM_TTFT=0 skips it.
set -e
cd "$(dirname "$0")/.."
BUILD="${BUILD:-build}"
OUT=bench/RESULTS.md
TMP="$(mktemp)"
trap 'rm -f "$TMP" "$TMP.net"' EXIT

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
    if [ ! -x "$b" ] || [ ! -f "$b" ]; then continue; fi
    found=1
    name="$(basename "$b")"
    args=
    if [ "$name" = ttft ]; then args="${TTFT_ARGS:-}"; fi
    echo "bench: running $b" >&2
    {
        echo
        echo "## $name"
        echo
        echo "Command: \`$b${args:+ $args}\`"
        echo
    } >>"$TMP"
    # shellcheck disable=SC2086 # args is a list of options
    "$b" $args | tee -a "$TMP"
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
# tided's RESP port against redis-server (needs redis-server and redis-tools).
echo "bench: running bench/resp.sh" >&2
{
    echo
    echo "## resp"
    echo
    echo "Command: \`BUILD=$BUILD bench/resp.sh\`"
    echo
} >>"$TMP"
BUILD="$BUILD" bench/resp.sh | tee -a "$TMP"
# The same with a Unix socket: the pool is shared, so GETs copy each value into the reply
# and check the copy (issue 17); the 1 MiB rows of both sections give that check's cost.
echo "bench: running bench/resp.sh with the pool shared" >&2
{
    echo
    echo "## resp, shared pool"
    echo
    echo "Command: \`BUILD=$BUILD TIDE_UNIX=1 SIZES=1048576 bench/resp.sh\`"
    echo
} >>"$TMP"
BUILD="$BUILD" TIDE_UNIX=1 SIZES=1048576 bench/resp.sh | tee -a "$TMP"
# Fairness under hostile clients: well-behaved clients' p99 alone and beside 8 connections
# that never read their replies (bench/hostile.sh; target <= 2x).
echo "bench: running bench/hostile.sh" >&2
{
    echo
    echo "## hostile"
    echo
    echo "Command: \`BUILD=$BUILD bench/hostile.sh\`"
    echo
} >>"$TMP"
BUILD="$BUILD" bench/hostile.sh | tee -a "$TMP"
# The network benchmark: tided against redis-server and raw loopback TCP (a script, since
# it starts servers; it stops them by PID when it ends).
echo "bench: running bench/net.sh" >&2
{
    echo
    echo "## net"
    echo
    echo "Command: \`bench/net.sh\` (BUILD=$BUILD)"
    echo
} >>"$TMP"
BUILD="$BUILD" bench/net.sh >"$TMP.net" || {
    echo "bench: bench/net.sh failed" >&2
    exit 1
}
cat "$TMP.net"
cat "$TMP.net" >>"$TMP"
# The UCX data path against ucx_perftest on the same transport and against tide:// (bench/ucx.sh,
# docs/UCX.md; it starts its tided and the perftest pairs and stops them by PID). UCX_BENCH=0
# skips it and keeps the last run's section.
if [ "${UCX_BENCH:-1}" != 0 ]; then
    echo "bench: running bench/ucx.sh" >&2
    {
        echo
        echo "## ucx"
        echo
        echo "Command: \`bench/ucx.sh\` (BUILD=$BUILD)"
        echo
    } >>"$TMP"
    BUILD="$BUILD" bench/ucx.sh >"$TMP.net" || {
        echo "bench: bench/ucx.sh failed" >&2
        exit 1
    }
    tee -a "$TMP" <"$TMP.net"
elif [ -f "$OUT" ]; then
    awk '/^## /{p = ($0 == "## ucx")} p' "$OUT" | sed '1s/^/\n/' >>"$TMP"
fi
# Mooncake Store side by side (bench/mooncake.sh: builds .venv-mooncake from PyPI on first
# use, starts mooncake_master, mooncake_client and a tided, stops them by PID; ~5 minutes).
# MOONCAKE_BENCH=0 skips it and keeps the last run's section.
if [ "${MOONCAKE_BENCH:-1}" != 0 ]; then
    echo "bench: running bench/mooncake.sh" >&2
    {
        echo
        echo "## mooncake"
        echo
        echo "Command: \`bench/mooncake.sh\` (BUILD=$BUILD)"
        echo
    } >>"$TMP"
    BUILD="$BUILD" bench/mooncake.sh >"$TMP.net" || {
        echo "bench: bench/mooncake.sh failed" >&2
        exit 1
    }
    tee -a "$TMP" <"$TMP.net"
elif [ -f "$OUT" ]; then
    awk '/^## /{p = ($0 == "## mooncake")} p' "$OUT" | sed '1s/^/\n/' >>"$TMP"
fi
# Cluster: throughput with 1, 2 and 3 tided nodes and the latency of a 64-key batch over
# 3 nodes against one (bench/cluster.sh; it starts and stops its own nodes).
CLUSTER_MD="$(mktemp)"
if ! BUILD="$BUILD" bench/cluster.sh >"$CLUSTER_MD"; then
    rm -f "$CLUSTER_MD"
    echo "bench: the cluster benchmark failed" >&2
    exit 1
fi
echo >>"$TMP"
tee -a "$TMP" <"$CLUSTER_MD"
rm -f "$CLUSTER_MD"
# A real vLLM engine (CPU build, .venv-vllm; bench/vllm_ttft.sh builds it on first use):
# TTFT with a 4k-token prefix loaded from tide vs recomputing it, over unix:// and tide://,
# then a `vllm serve` check (five engines and two servers: several minutes). VLLM_TTFT=0
# skips it and keeps the last run's section; VLLM_TTFT_ARGS passes options to
# bench/vllm_ttft.py; VLLM_PYTHON names another vLLM environment's python.
if [ "${VLLM_TTFT:-1}" != 0 ]; then
    echo "bench: running bench/vllm_ttft.sh" >&2
    {
        echo
        echo "## vllm_ttft"
        echo
        echo "Command: \`bench/vllm_ttft.sh${VLLM_TTFT_ARGS:+ $VLLM_TTFT_ARGS}\` (BUILD=$BUILD)"
        echo
    } >>"$TMP"
    BUILD="$BUILD" bench/vllm_ttft.sh >"$TMP.net" || {
        cat "$TMP.net"
        echo "bench: bench/vllm_ttft.sh failed" >&2
        exit 1
    }
    tee -a "$TMP" <"$TMP.net"
elif [ -f "$OUT" ]; then
    awk '/^## /{p = ($0 == "## vllm_ttft")} p' "$OUT" | sed '1s/^/\n/' >>"$TMP"
fi
# The soak's section (written from `make soak`, not run here) and the before/after
# measurements of issue 17's integrity fix and issue 18's binding change (the code before
# them is gone) are kept across runs.
[ -f "$OUT" ] && awk '/^## /{p = ($0 == "## soak" || $0 == "## integrity (issue 17)" ||
    $0 == "## python binding (issue 18)")} p' "$OUT" |
    sed '1s/^/\n/' >>"$TMP"
mv "$TMP" "$OUT"
rm -f "$TMP.net"
trap - EXIT
echo "bench: wrote $OUT" >&2
