#!/bin/sh
# bench_trace.sh — the trace-replay benchmark: hit rate against capacity for an infinite
# cache, Belady's optimum and every simulated policy (tide analyze: lru, s3fifo, arc, admit,
# chain, chainarc) and for tide's store under each of its policies (tide replay against
# mem://?policy=lru|s3fifo|chain), over a sweep of capacities, with the targets of issue 19
# checked (the default policy >= LRU at every capacity, >= 1.2x LRU at 1024 and 4096
# blocks) and each policy's distance from Belady; then one replay with real llama-3.2-1b
# block sizes for bytes and latency.
#
# Prints a Markdown section on stdout (bench.sh appends it to bench/RESULTS.md) and writes
# the plot bench/hitrate.svg. Needs jq. TIDE_TRACE names the trace (default: Mooncake's
# synthetic trace in ../shared/traces); BLOCKS the capacities in blocks.
#
# Hit rates depend only on how many blocks fit, so the sweep replays 4 KiB blocks
# (--bytes-per-token 8) with the same block counts: the table gives each capacity in
# blocks and what it is at llama-3-8b bf16 (64 MiB a block).
set -e
cd "$(dirname "$0")/.."
BUILD="${BUILD:-build}"
TIDE="$BUILD/tide"
TRACE="${TIDE_TRACE:-../shared/traces/synthetic_trace.jsonl}"
BLOCKS="${BLOCKS:-256 512 1024 2048 4096 8192 16384 32768}"
SVG=bench/hitrate.svg

if [ ! -r "$TRACE" ]; then
    echo "## trace replay"
    echo
    echo "Skipped: no trace at \`$TRACE\` (set TIDE_TRACE)."
    exit 0
fi
command -v jq >/dev/null || { echo "bench_trace: jq is needed (make deps)" >&2; exit 1; }

TSV="$(mktemp)"
trap 'rm -f "$TSV"' EXIT
list="$(echo $BLOCKS | tr ' ' ',')"
echo "bench: tide analyze $TRACE --blocks $list" >&2
an="$("$TIDE" analyze "$TRACE" --model llama-3-8b --blocks "$list" --json)"

STORES="lru s3fifo chain"
echo "# Block hit rate against capacity: $(basename "$TRACE")" >"$TSV"
for nb in $BLOCKS; do
    row="$(echo "$an" | jq -r --argjson nb "$nb" '.results[] | select(.capacity_blocks == $nb) |
        [.infinite, .belady, .lru, .s3fifo, .arc, .admit, .chain, .chainarc] |
        map(.block_hit_rate) | @tsv')"
    store=""
    for p in $STORES; do
        echo "bench: tide replay $TRACE --url mem://?policy=$p, $nb blocks of 4 KiB" >&2
        r="$("$TIDE" replay "$TRACE" --bytes-per-token 8 --url "mem://?policy=$p" \
            --capacity "$((nb * 4096))" --json --quiet)"
        store="$store	$(echo "$r" | jq -r '.block_hit_rate')"
    done
    gib="$(awk -v b="$nb" 'BEGIN { g = b / 16; if (g >= 1024) printf "%g TiB", g / 1024;
        else printf "%g GiB", g }')"
    printf '%s\t%s\t%s%s\n' "$nb" "$gib" "$row" "$store" >>"$TSV"
done
awk -F'\t' -f scripts/plot_hitrate.awk "$TSV" >"$SVG"
echo "bench: wrote $SVG" >&2

req="$(echo "$an" | jq -r '.requests')"
refs="$(echo "$an" | jq -r '.blocks')"
dist="$(echo "$an" | jq -r '.distinct_blocks')"
echo "## trace replay"
echo
echo "Trace \`$TRACE\`: $req requests, $refs block references, $dist distinct blocks of 512"
echo "tokens (the one public trace in Mooncake's format available here). A hit is a block of a"
echo "request's longest stored prefix. Simulated columns (lru .. chainarc):"
echo "\`$TIDE analyze\`; tide columns: \`$TIDE replay --bytes-per-token 8 --url"
echo "'mem://?policy=P' --capacity BLOCKS*4KiB\` (4 KiB blocks, every loaded byte verified; hit"
echo "rates depend only on the number of blocks). Block hit rate:"
echo
echo "| capacity (blocks) | at llama-3-8b | infinite | Belady | lru | s3fifo | arc | admit | chain | chainarc | tide lru | tide s3fifo | tide chain (default) | default / LRU | target |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
# Columns: 1 blocks, 2 label, 3..10 simulated, 11 tide lru, 12 tide s3fifo, 13 tide chain.
awk -F'\t' '!/^#/ {
    ratio = $11 > 0 ? $13 / $11 : 0
    want = ($1 == 1024 || $1 == 4096) ? 1.2 : 1.0
    verdict = ratio >= want ? "met" : "NOT met"
    printf "| %s | %s |", $1, $2
    for (c = 3; c <= 13; c++) printf " %.2f%% |", 100 * $c
    printf " %.3f | %s %s |\n", ratio, (want > 1 ? ">= 1.2x:" : ">= LRU:"), verdict
}' "$TSV"
echo
echo "How far from Belady (block hits as a fraction of Belady's, through the store for lru,"
echo "s3fifo and chain, simulated for the others):"
echo
echo "| capacity (blocks) | lru | s3fifo (store) | arc | admit | chain (store) | chainarc |"
echo "|---:|---:|---:|---:|---:|---:|---:|"
awk -F'\t' '!/^#/ && $4 > 0 { printf "| %s | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f |\n",
    $1, $11 / $4, $12 / $4, $7 / $4, $8 / $4, $13 / $4, $10 / $4 }' "$TSV"
echo
echo "Store and simulation agree block for block where the store implements the simulated"
echo "rules (lru, chain): $(awk -F'\t' 'function eq(a, b) { return a - b < 1e-9 && b - a < 1e-9 }
    !/^#/ { if (eq($5, $11) && eq($9, $13)) same++; n++ }
    END { printf "%d of %d capacities", same, n }' "$TSV")."
echo
echo "![hit rate against capacity]($(basename "$SVG"))"
echo

# One replay at real block sizes: what moves and how long the calls take.
limit=100
echo "bench: tide replay $TRACE --model llama-3.2-1b --capacity 4GiB --limit $limit" >&2
r="$("$TIDE" replay "$TRACE" --model llama-3.2-1b --url 'mem://?prefault=1' --capacity 4GiB \
    --limit "$limit" --json --quiet)"
echo "Real block sizes: \`tide replay --model llama-3.2-1b --url 'mem://?prefault=1'"
echo "--capacity 4GiB --limit $limit\` (16 MiB blocks, pool pre-faulted, one thread, latency per"
echo "request over all its blocks):"
echo
echo "$r" | jq -r '"| block hit rate | token hit rate | loaded | saved | seconds |\n|---:|---:|---:|---:|---:|\n" +
    "| \(.block_hit_rate * 10000 | round / 100)% | \(.token_hit_rate * 10000 | round / 100)% | " +
    "\(.loaded_bytes / 1073741824 * 100 | round / 100) GiB | \(.saved_bytes / 1073741824 * 100 | round / 100) GiB | " +
    "\(.seconds * 100 | round / 100) |\n\n" +
    "| call | requests | p50 | p90 | p99 | max | GB/s at p50 (one request) |\n|---|---:|---:|---:|---:|---:|---:|\n" +
    ([["lookup", .lookup, 0], ["load (tide_get_many)", .load, (.loaded_bytes / (if .load.count > 0 then .load.count else 1 end))],
      ["save (tide_put_many)", .save, (.saved_bytes / (if .save.count > 0 then .save.count else 1 end))]] |
     map("| \(.[0]) | \(.[1].count) | \(.[1].p50_us | round) us | \(.[1].p90_us | round) us | " +
         "\(.[1].p99_us | round) us | \(.[1].max_us | round) us | " +
         (if .[2] > 0 and .[1].p50_us > 0 then "\(.[2] / .[1].p50_us / 1000 * 100 | round / 100)" else "—" end) + " |") |
     join("\n"))'
echo
echo "(GB/s at p50 divides a request's mean bytes by the median call time: a rough figure.)"
