#!/usr/bin/env bash
# read_check.sh — what the cluster read check costs (docs/CLUSTER.md, "Hints"): GET latency
# through tide://A,B?replicas=2 with read_check=0 (no question) and read_check=1 (the
# default with replicas >= 2: one REPLICA ASK to the key's other replica beside each
# member's GET, in parallel), as a ratio measured in the same script.
#
#   small   one 4 KiB key a call, 1 client thread (the round trip dominates);
#   batch   one 64-key batch GET of 64 KiB values (4 MiB a call), 1 client thread.
#
# Two nodes (--threads 1, --prefault, --capacity 256MiB) are started once; each
# configuration runs REPS times, the rounds interleaved, medians reported. Prints a
# Markdown table on stdout; progress on stderr. Needs jq. The nodes are stopped by PID and
# the temporary directory removed on exit. Knobs: BUILD (build), SECS (2), REPS (3).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${BUILD:-build}"
TIDE="$BUILD/tide"
SECS="${SECS:-2}"
REPS="${REPS:-3}"
command -v jq >/dev/null || { echo "bench/read_check.sh: jq is needed (make deps)" >&2; exit 1; }
[ -x "$TIDE" ] || { echo "bench/read_check.sh: no $TIDE (run make first)" >&2; exit 1; }

DIR="$(mktemp -d "${TMPDIR:-/tmp}/tide-rcbench.XXXXXX")"
PIDS=()
cleanup() {
    local pid
    for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    rm -rf "$DIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

PORTS=()
for i in 1 2; do
    "$TIDE" serve --port 0 --metrics-port 0 --threads 1 --capacity 256MiB --prefault \
        --log-level warn --ready-file "$DIR/ready$i" >"$DIR/node$i.log" 2>&1 &
    PIDS+=($!)
done
for i in 1 2; do
    for _ in $(seq 1 300); do
        [ -s "$DIR/ready$i" ] && break
        kill -0 "${PIDS[$((i - 1))]}" 2>/dev/null || { cat "$DIR/node$i.log" >&2; exit 1; }
        sleep 0.1
    done
    [ -s "$DIR/ready$i" ] || { echo "bench/read_check.sh: node $i did not start" >&2; exit 1; }
    PORTS+=("$(cut -d' ' -f1 "$DIR/ready$i")")
done
BASE="tide://127.0.0.1:${PORTS[0]},127.0.0.1:${PORTS[1]}?replicas=2"

# name | read_check | size | batch | keys
CONFIGS=(
    "small-0|0|4KiB|1|4096"
    "small-1|1|4KiB|1|4096"
    "batch-0|0|64KiB|64|1024"
    "batch-1|1|64KiB|64|1024"
)
RAW="$DIR/raw.tsv"
: >"$RAW"
for rep in $(seq 1 "$REPS"); do
    for c in "${CONFIGS[@]}"; do
        IFS='|' read -r name chk size batch keys <<<"$c"
        u="$BASE&read_check=$chk"
        echo "bench: [$rep/$REPS] $name: tide bench --url '$u' --size $size --batch $batch" >&2
        if ! "$TIDE" bench --url "$u" --op get --size "$size" --batch "$batch" --threads 1 \
            --keys "$keys" --seconds "$SECS" --json --quiet >"$DIR/out.json" 2>"$DIR/err.txt"; then
            cat "$DIR/err.txt" "$DIR/out.json" >&2
            exit 1
        fi
        jq -r --arg name "$name" '.results[0] as $x |
            [$name, $x.ops_per_s, $x.p50_us, $x.p99_us] | @tsv' "$DIR/out.json" >>"$RAW"
    done
done

# median NAME FIELD (2 ops/s, 3 p50 us, 4 p99 us)
median() {
    awk -F'\t' -v n="$1" -v f="$2" '$1 == n { print $f }' "$RAW" | sort -g |
        awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2];
              else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "—" }'; }

echo "| 2 nodes, replicas=2, GET, 1 client thread | read_check | p50 | p99 | ops/s | p50 vs off | p99 vs off |"
echo "|---|---:|---:|---:|---:|---:|---:|"
for base in small batch; do
    label="one 4 KiB key a call"
    [ "$base" = batch ] && label="one 64 x 64 KiB batch"
    p50_0="$(median "$base-0" 3)" p99_0="$(median "$base-0" 4)"
    for chk in 0 1; do
        n="$base-$chk"
        p50="$(median "$n" 3)" p99="$(median "$n" 4)" ops="$(median "$n" 2)"
        printf '| %s | %s | %.0f us | %.0f us | %.0f | %s | %s |\n' "$label" "$chk" "$p50" "$p99" \
            "$ops" "$(ratio "$p50" "$p50_0")" "$(ratio "$p99" "$p99_0")"
    done
done
echo
echo "$REPS interleaved runs of ${SECS} s each, medians; commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'), load $(cut -d' ' -f1-3 /proc/loadavg)."
