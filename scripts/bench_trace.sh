#!/bin/sh
# bench_trace.sh — the trace-replay benchmark: hit rate against capacity for an infinite
# cache, Belady's optimum and every simulated policy (tide analyze: lru, s3fifo, arc, admit,
# chain, chainarc, adapt) and for tide's store under each of its policies (tide replay
# against mem://?policy=lru|s3fifo|chain|adapt), over a sweep of capacities, with the
# targets of issue 19 checked for the default policy, adapt (>= LRU at every capacity, >= 1.2x
# LRU at 1024 and 4096 blocks) and each policy's distance from Belady; then one replay with real
# llama-3.2-1b block sizes for bytes and latency.
#
# Then the policy matrix of issue 29 ("## policy matrix"): every trace of TRACES at 1024,
# 4096 and 16384 blocks, lru, s3fifo, chain and adapt simulated, adapt also replayed through
# the store (the two must agree block for block), each cell marked met or not met (adapt's
# hits >= the best of lru, s3fifo and chain within 1%; >= 0.5x Belady at the smallest
# capacity of the sweep where Belady is above 20%), and a plot per trace
# (bench/hitrate-NAME.svg). TRACES holds NAME=SOURCE:BLOCK_TOKENS words; SOURCE is a file,
# or gen-SHAPE-REQUESTS-SEED for scripts/gen_trace.py (regenerated each run, not
# committed). The default: Mooncake's synthetic and conversation traces (from
# TIDE_TRACE_DIR, default ../shared/traces; a missing one is reported, not measured) and
# the generator's chat, tooluse and coding shapes.
#
# Prints Markdown sections on stdout (bench.sh appends them to bench/RESULTS.md) and writes
# the plots bench/hitrate.svg and bench/hitrate-NAME.svg. Needs jq and python3. TIDE_TRACE
# names the trace of the sweep (default: Mooncake's synthetic trace in ../shared/traces);
# BLOCKS the capacities in blocks.
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
TRACE_DIR="${TIDE_TRACE_DIR:-../shared/traces}"
TRACES="${TRACES:-synthetic=$TRACE_DIR/synthetic_trace.jsonl:512 conversation=$TRACE_DIR/conversation_trace.jsonl:512 chat=gen-chat-12000-1:512 tooluse=gen-tooluse-12000-1:512 coding=gen-coding-3000-1:256}"

if [ ! -r "$TRACE" ]; then
    echo "## trace replay"
    echo
    echo "Skipped: no trace at \`$TRACE\` (set TIDE_TRACE)."
    exit 0
fi
command -v jq >/dev/null || { echo "bench_trace: jq is needed (make deps)" >&2; exit 1; }

TSV="$(mktemp)"
GEN="$(mktemp -d)"
trap 'rm -rf "$TSV" "$GEN"' EXIT
# The words of $1 joined by commas ("256 512" -> "256,512").
commas() {
    _out=""
    for _w in $1; do _out="${_out:+$_out,}$_w"; done
    echo "$_out"
}
list="$(commas "$BLOCKS")"
echo "bench: tide analyze $TRACE --blocks $list" >&2
an="$("$TIDE" analyze "$TRACE" --model llama-3-8b --blocks "$list" --json)"

STORES="lru s3fifo chain adapt"
echo "# Block hit rate against capacity: $(basename "$TRACE")" >"$TSV"
for nb in $BLOCKS; do
    row="$(echo "$an" | jq -r --argjson nb "$nb" '.results[] | select(.capacity_blocks == $nb) |
        [.infinite, .belady, .lru, .s3fifo, .arc, .admit, .chain, .chainarc, .adapt] |
        map(.block_hit_rate) | @tsv')"
    store=""
    for p in $STORES; do
        echo "bench: tide replay $TRACE --url mem://?policy=$p, $nb blocks of 4 KiB" >&2
        r="$("$TIDE" replay "$TRACE" --bytes-per-token 8 --url "mem://?policy=$p" \
            --capacity "$((nb * 4096))B" --json --quiet)"
        store="$store	$(echo "$r" | jq -r '.block_hit_rate')"
    done
    gib="$(awk -v b="$nb" 'BEGIN { g = b / 16; if (g >= 1024) printf "%g TiB", g / 1024;
        else printf "%g GiB", g }')"
    # Columns: 1 blocks, 2 label, 3..10 simulated, 11..13 store lru, s3fifo, chain, 14 adapt
    # simulated, 15 store adapt (plot_hitrate.awk's order).
    printf '%s\t%s\t%s%s\n' "$nb" "$gib" "$row" "$store" |
        awk -F'\t' -v OFS='\t' '{ a = $11; $11 = $12; $12 = $13; $13 = $14; $14 = a; print }' >>"$TSV"
done
awk -F'\t' -f scripts/plot_hitrate.awk "$TSV" >"$SVG"
echo "bench: wrote $SVG" >&2

req="$(echo "$an" | jq -r '.requests')"
refs="$(echo "$an" | jq -r '.blocks')"
dist="$(echo "$an" | jq -r '.distinct_blocks')"
echo "## trace replay"
echo
echo "Trace \`$TRACE\`: $req requests, $refs block references, $dist distinct blocks of 512"
echo "tokens. A hit is a block of a"
echo "request's longest stored prefix. Simulated columns (lru .. chainarc, adapt):"
echo "\`$TIDE analyze\`; tide columns: \`$TIDE replay --bytes-per-token 8 --url"
echo "'mem://?policy=P' --capacity BLOCKS*4KiB\` (4 KiB blocks, every loaded byte verified; hit"
echo "rates depend only on the number of blocks). Block hit rate:"
echo
echo "| capacity (blocks) | at llama-3-8b | infinite | Belady | lru | s3fifo | arc | admit | chain | chainarc | tide lru | tide s3fifo | tide chain | adapt | tide adapt (default) | default / LRU | target |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
awk -F'\t' '!/^#/ {
    ratio = $11 > 0 ? $15 / $11 : 0
    want = ($1 == 1024 || $1 == 4096) ? 1.2 : 1.0
    verdict = ratio >= want ? "met" : "NOT met"
    printf "| %s | %s |", $1, $2
    for (c = 3; c <= 15; c++) printf " %.2f%% |", 100 * $c
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
echo "rules (lru, chain, adapt): $(awk -F'\t' 'function eq(a, b) { return a - b < 1e-9 && b - a < 1e-9 }
    !/^#/ { if (eq($5, $11) && eq($9, $13) && eq($14, $15)) same++; n++ }
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

# ---- the policy matrix of issue 29: every trace, adapt against lru, s3fifo and chain ----
MATRIX="1024 4096 16384"
SWEEP="256 512 1024 2048 4096 8192 16384 32768"
echo
echo "## policy matrix"
echo
echo "Every trace at 1024, 4096 and 16384 blocks (issue 29). lru, s3fifo, chain, adapt and"
echo "Belady: \`$TIDE analyze TRACE --block-tokens B --blocks ...\`; *adapt (store)*: \`$TIDE"
echo "replay TRACE --url 'mem://?policy=adapt' --capacity BLOCKS*4KiB\` (4 KiB blocks). Target"
echo "per cell: adapt >= 0.99 x the best of lru, s3fifo and chain (*met*). Block hit rates:"
echo
echo "| trace | blocks | Belady | lru | s3fifo | chain | adapt | adapt (store) | store = sim | adapt / best | target | adapt / Belady |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---|---:|"
BEL="$(mktemp)"
trap 'rm -rf "$TSV" "$GEN" "$BEL"' EXIT
for spec in $TRACES; do
    name="${spec%%=*}"
    rest="${spec#*=}"
    src="${rest%:*}"
    bt="${rest##*:}"
    bpt=$((4096 / bt))
    case "$src" in
    gen-*)
        # gen-SHAPE-REQUESTS-SEED
        IFS=- read -r _ shape requests seed <<EOF
$src
EOF
        path="$GEN/$name.jsonl"
        echo "bench: scripts/gen_trace.py $shape --requests $requests --seed $seed --block-tokens $bt" >&2
        python3 scripts/gen_trace.py "$shape" --requests "$requests" --seed "$seed" --block-tokens "$bt" >"$path"
        ;;
    *) path="$src" ;;
    esac
    if [ ! -r "$path" ]; then
        echo "| $name | — | not measured: no trace at \`$path\` | | | | | | | | | |"
        continue
    fi
    list="$(commas "$SWEEP")"
    echo "bench: tide analyze $path --block-tokens $bt --blocks $list" >&2
    an="$("$TIDE" analyze "$path" --block-tokens "$bt" --bytes-per-token "$bpt" --blocks "$list" --json)"
    ptsv="$GEN/$name.tsv"
    echo "# Block hit rate against capacity: $name ($(echo "$an" | jq -r .requests) requests)" >"$ptsv"
    for nb in $SWEEP; do
        sim="$(echo "$an" | jq -r --argjson nb "$nb" '.results[] | select(.capacity_blocks == $nb)')"
        store=""
        case " $MATRIX " in
        *" $nb "*)
            echo "bench: tide replay $path --url mem://?policy=adapt, $nb blocks" >&2
            r="$("$TIDE" replay "$path" --block-tokens "$bt" --bytes-per-token "$bpt" \
                --url 'mem://?policy=adapt' --capacity "$((nb * 4096))B" --json --quiet)"
            store="$(echo "$r" | jq -r '.block_hit_rate')"
            echo "$sim" | jq -r --arg name "$name" --argjson rep "$r" '
                def pct: . * 10000 | round / 100 | tostring + "%";
                ([.lru.hit_blocks, .s3fifo.hit_blocks, .chain.hit_blocks] | max) as $best |
                (if $best > 0 then .adapt.hit_blocks / $best else 1 end) as $ratio |
                "| \($name) | \(.capacity_blocks) | \(.belady.block_hit_rate | pct) | " +
                "\(.lru.block_hit_rate | pct) | \(.s3fifo.block_hit_rate | pct) | " +
                "\(.chain.block_hit_rate | pct) | **\(.adapt.block_hit_rate | pct)** | " +
                "\($rep.block_hit_rate | pct) | " +
                (if $rep.hit_blocks == .adapt.hit_blocks and $rep.store.evictions == .adapt.evictions
                 then "yes" else "**NO**" end) + " | " +
                "\($ratio * 1000 | round / 1000) | " +
                (if $ratio >= 0.99 then "met" else "**not met**" end) + " | " +
                "\(if .belady.hit_blocks > 0 then (.adapt.hit_blocks / .belady.hit_blocks * 100 | round / 100) else "—" end) |"'
            ;;
        esac
        gib="$(awk -v b="$nb" 'BEGIN { printf "%d K tokens", b * '"$bt"' / 1024 }')"
        echo "$sim" | jq -r --arg gib "$gib" --arg store "$store" '
            [.capacity_blocks, $gib, .infinite.block_hit_rate, .belady.block_hit_rate,
             .lru.block_hit_rate, .s3fifo.block_hit_rate, .arc.block_hit_rate,
             .admit.block_hit_rate, .chain.block_hit_rate, .chainarc.block_hit_rate,
             "", "", "", .adapt.block_hit_rate, $store] | @tsv' >>"$ptsv"
    done
    awk -F'\t' -f scripts/plot_hitrate.awk "$ptsv" >"bench/hitrate-$name.svg"
    echo "bench: wrote bench/hitrate-$name.svg" >&2
    # Belady's target: the smallest capacity of the sweep where Belady is above 20%.
    echo "$an" | jq -r --arg name "$name" '
        [.results[] | select(.belady.block_hit_rate > 0.2)] | sort_by(.capacity_blocks) |
        if length == 0 then "| \($name) | Belady never above 20% in the sweep | — | — |"
        else .[0] | (.adapt.hit_blocks / .belady.hit_blocks) as $r |
            "| \($name) | \(.capacity_blocks) | \(.belady.block_hit_rate * 10000 | round / 100)% | " +
            "\($r * 100 | round / 100) (" + (if $r >= 0.5 then "met" else "**not met**" end) + ") |"
        end' >>"$BEL"
done
echo
echo "adapt >= 0.5x Belady at the smallest capacity of the sweep ($SWEEP blocks) where Belady's"
echo "block hit rate is above 20%:"
echo
echo "| trace | blocks | Belady | adapt / Belady |"
echo "|---|---:|---:|---:|"
cat "$BEL"
echo
for spec in $TRACES; do
    name="${spec%%=*}"
    [ -f "bench/hitrate-$name.svg" ] && echo "![$name: hit rate against capacity](hitrate-$name.svg)"
done
echo
