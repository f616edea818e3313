#!/usr/bin/env bash
# cluster.sh — the cluster benchmark: tide bench against 1, 2 and 3 tided nodes on loopback.
#
#   throughput  GET and PUT of 256 KiB values, one key a call, CLIENT_THREADS client threads,
#               through tide://...?replicas=R with 1, 2 and 3 nodes (R=1; PUT also R=2 with
#               2 and 3 nodes), and through plain tide://HOST:PORT (one node, no cluster
#               layer) for reference;
#   latency     one 64-key batch GET of 64 KiB values (4 MiB a call), one client thread,
#               against one node and spread over 3 nodes.
#
# Three nodes are started once (each --threads 1, --prefault, --capacity NODE_CAPACITY) and
# the 1- and 2-node figures use the first one or two of them. Every configuration is run
# REPS times, the rounds interleaved (configuration order repeated), and the median is
# reported. Prints a Markdown section on stdout (scripts/bench.sh appends it to
# bench/RESULTS.md); progress goes to stderr. Needs jq. Every node is stopped by its PID
# and the temporary directory removed on exit, whatever happens.
#
# Knobs (environment): BUILD (default build), SECS seconds a run (default 2), REPS (3),
# CLIENT_THREADS (2), NODE_CAPACITY (512MiB).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${BUILD:-build}"
TIDE="$BUILD/tide"
SECS="${SECS:-2}"
REPS="${REPS:-3}"
CLIENT_THREADS="${CLIENT_THREADS:-2}"
NODE_CAPACITY="${NODE_CAPACITY:-512MiB}"
NODES=3
# Working sets: 512 x 256 KiB = 128 MiB for the throughput GETs, 2048 x 64 KiB = 128 MiB
# for the batch GETs; with both resident a node holds 256 MiB, the rest is room for puts.
TP_KEYS=512
BATCH_KEYS=2048

command -v jq >/dev/null || { echo "bench/cluster.sh: jq is needed (make deps)" >&2; exit 1; }
[ -x "$TIDE" ] || { echo "bench/cluster.sh: no $TIDE (run make first)" >&2; exit 1; }

DIR="$(mktemp -d "${TMPDIR:-/tmp}/tide-cbench.XXXXXX")"
PIDS=()
cleanup() {
    local pid
    for pid in "${PIDS[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in "${PIDS[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$DIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

load_start="$(cut -d' ' -f1-3 /proc/loadavg)"
t_start=$SECONDS

# Start the nodes, each on a free port (--port 0, read back from its ready file).
PORTS=()
for i in $(seq 1 $NODES); do
    "$TIDE" serve --port 0 --metrics-port 0 --threads 1 --capacity "$NODE_CAPACITY" --prefault \
        --log-level warn --ready-file "$DIR/ready$i" >"$DIR/node$i.log" 2>&1 &
    PIDS+=($!)
done
for i in $(seq 1 $NODES); do
    for _ in $(seq 1 300); do
        [ -s "$DIR/ready$i" ] && break
        kill -0 "${PIDS[$((i - 1))]}" 2>/dev/null || {
            echo "bench/cluster.sh: node $i exited:" >&2
            cat "$DIR/node$i.log" >&2
            exit 1
        }
        sleep 0.1
    done
    [ -s "$DIR/ready$i" ] || { echo "bench/cluster.sh: node $i did not start" >&2; exit 1; }
    PORTS+=("$(cut -d' ' -f1 "$DIR/ready$i")")
done
echo "bench: cluster nodes on ports ${PORTS[*]}" >&2

# The URL of the first n nodes; r = replicas, or "direct" for plain tide://HOST:PORT.
url() {
    local n=$1 r=$2 list="" i
    for ((i = 0; i < n; i++)); do
        list="$list${list:+,}127.0.0.1:${PORTS[$i]}"
    done
    if [ "$r" = direct ]; then echo "tide://$list"; else echo "tide://$list?replicas=$r"; fi
}

# Configurations: name | nodes | replicas | op | size | batch | threads | keys
CONFIGS=(
    "tp-get-direct|1|direct|get|256KiB|1|$CLIENT_THREADS|$TP_KEYS"
    "tp-get-1|1|1|get|256KiB|1|$CLIENT_THREADS|$TP_KEYS"
    "tp-get-2|2|1|get|256KiB|1|$CLIENT_THREADS|$TP_KEYS"
    "tp-get-3|3|1|get|256KiB|1|$CLIENT_THREADS|$TP_KEYS"
    "tp-put-direct|1|direct|put|256KiB|1|$CLIENT_THREADS|$TP_KEYS"
    "tp-put-1|1|1|put|256KiB|1|$CLIENT_THREADS|$TP_KEYS"
    "tp-put-2|2|1|put|256KiB|1|$CLIENT_THREADS|$TP_KEYS"
    "tp-put-3|3|1|put|256KiB|1|$CLIENT_THREADS|$TP_KEYS"
    "tp-put-2r2|2|2|put|256KiB|1|$CLIENT_THREADS|$TP_KEYS"
    "tp-put-3r2|3|2|put|256KiB|1|$CLIENT_THREADS|$TP_KEYS"
    "b64-direct|1|direct|get|64KiB|64|1|$BATCH_KEYS"
    "b64-1|1|1|get|64KiB|64|1|$BATCH_KEYS"
    "b64-3|3|1|get|64KiB|64|1|$BATCH_KEYS"
)

# One result line per run: name ops_per_s gb_per_s p50_us p99_us
RAW="$DIR/raw.tsv"
: >"$RAW"
for rep in $(seq 1 "$REPS"); do
    for c in "${CONFIGS[@]}"; do
        IFS='|' read -r name n r op size batch threads keys <<<"$c"
        u="$(url "$n" "$r")"
        echo "bench: [$rep/$REPS] $name: tide bench --url '$u' --op $op --size $size --batch $batch --threads $threads" >&2
        if ! "$TIDE" bench --url "$u" --op "$op" --size "$size" --batch "$batch" \
            --threads "$threads" --keys "$keys" --seconds "$SECS" --json --quiet \
            >"$DIR/out.json" 2>"$DIR/err.txt"; then
            echo "bench/cluster.sh: tide bench failed for $name:" >&2
            cat "$DIR/err.txt" "$DIR/out.json" >&2
            exit 1
        fi
        jq -r --arg name "$name" '.results[0] as $x |
            [$name, $x.ops_per_s, $x.gb_per_s, $x.p50_us, $x.p99_us] | @tsv' \
            "$DIR/out.json" >>"$RAW"
    done
done
load_end="$(cut -d' ' -f1-3 /proc/loadavg)"
elapsed=$((SECONDS - t_start))

# median NAME FIELD (2 ops/s, 3 GB/s, 4 p50 us, 5 p99 us)
median() {
    awk -F'\t' -v n="$1" -v f="$2" '$1 == n { print $f }' "$RAW" | sort -g |
        awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2];
              else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
# range NAME FIELD DECIMALS: "min–max" of the runs
range() {
    awk -F'\t' -v n="$1" -v f="$2" -v d="$3" '$1 == n { if (!c++ || $f < lo) lo = $f;
        if (c == 1 || $f > hi) hi = $f } END { printf "%.*f–%.*f", d, lo, d, hi }' "$RAW"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "—" }'; }
fmt() { awk -v v="$1" -v d="$2" 'BEGIN { printf "%.*f", d, v }'; }

tp_row() { # label name base_name
    local ops gb base
    ops="$(median "$2" 2)"
    gb="$(median "$2" 3)"
    base="$(median "$3" 3)"
    echo "| $1 | $(fmt "$gb" 2) | $(range "$2" 3 2) | $(fmt "$ops" 0) | $(ratio "$gb" "$base") |"
}
lat_row() { # label name base_name
    local p50 p99 gb b50 b99
    p50="$(median "$2" 4)"
    p99="$(median "$2" 5)"
    gb="$(median "$2" 3)"
    b50="$(median "$3" 4)"
    b99="$(median "$3" 5)"
    echo "| $1 | $(fmt "$p50" 0) us | $(range "$2" 4 0) | $(fmt "$p99" 0) us | $(fmt "$gb" 2) | $(ratio "$p50" "$b50") | $(ratio "$p99" "$b99") |"
}

echo "## cluster (bench/cluster.sh)"
echo
echo "$NODES tided nodes on loopback, started once (\`tide serve --port 0 --threads 1"
echo "--capacity $NODE_CAPACITY --prefault\`); the 1- and 2-node figures use the first one or"
echo "two of them through \`tide://127.0.0.1:P1[,...]?replicas=R\` (the cluster client even"
echo "for one node); \"direct\" is plain \`tide://127.0.0.1:P1\` (no cluster layer). Measured"
echo "with \`$TIDE bench --seconds $SECS --json\`; median of $REPS runs of each configuration,"
echo "the rounds interleaved. Load average $load_start at the start, $load_end at the end;"
echo "${elapsed} s in all ($(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git describe --always --dirty 2>/dev/null || echo unknown))."
echo
echo "**What this machine limits.** It has $(nproc) cores, and every node and the client"
echo "share them: adding nodes adds no CPU, memory bandwidth or network, only server threads"
echo "and sockets to spread the same work over. These figures show the cost of the fan-out"
echo "and how much the parallel calls overlap, not scale-out; on separate hosts each node"
echo "brings its own cores and NIC. Threads are not pinned: the kernel places the client's"
echo "threads and the nodes' I/O threads on the $(nproc) cores (waking the other core costs"
echo "~45 us here, see ../shared/MACHINE.md)."
echo
echo "Throughput: 256 KiB values, one key a call, $CLIENT_THREADS client threads, working set"
echo "$TP_KEYS keys (GET); PUT writes fresh keys (the nodes evict once full). GB/s counts each"
echo "value once (10^9 bytes/s), so with R=2 twice as many bytes cross the sockets. Ratio:"
echo "GB/s against the 1-node cluster figure of the same operation."
echo
echo "| configuration | GB/s | GB/s, the $REPS runs | ops/s | vs 1 node |"
echo "|---|---:|---:|---:|---:|"
tp_row "GET, 1 node, direct" tp-get-direct tp-get-1
tp_row "GET, 1 node, R=1" tp-get-1 tp-get-1
tp_row "GET, 2 nodes, R=1" tp-get-2 tp-get-1
tp_row "GET, 3 nodes, R=1" tp-get-3 tp-get-1
tp_row "PUT, 1 node, direct" tp-put-direct tp-put-1
tp_row "PUT, 1 node, R=1" tp-put-1 tp-put-1
tp_row "PUT, 2 nodes, R=1" tp-put-2 tp-put-1
tp_row "PUT, 3 nodes, R=1" tp-put-3 tp-put-1
tp_row "PUT, 2 nodes, R=2" tp-put-2r2 tp-put-1
tp_row "PUT, 3 nodes, R=2" tp-put-3r2 tp-put-1
echo
echo "Batch latency: one \`tide_get_many\` of 64 keys of 64 KiB (4 MiB a call), one client"
echo "thread, one call in flight, working set $BATCH_KEYS keys. Over 3 nodes the batch is cut"
echo "into one request per node, run in parallel (the calling thread and the client's"
echo "fan-out pool). Ratios against the 1-node cluster figure."
echo
echo "| configuration | p50 | p50, the $REPS runs (us) | p99 | GB/s | p50 vs 1 node | p99 vs 1 node |"
echo "|---|---:|---:|---:|---:|---:|---:|"
lat_row "64 x 64 KiB GET, 1 node, direct" b64-direct b64-1
lat_row "64 x 64 KiB GET, 1 node, R=1" b64-1 b64-1
lat_row "64 x 64 KiB GET, 3 nodes, R=1" b64-3 b64-1
echo
