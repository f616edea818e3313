#!/usr/bin/env bash
# net.sh — tided over loopback TCP against redis-server and raw loopback TCP, in one run.
#
# Starts a redis-server (persistence off, --maxmemory = tided's capacity, allkeys-lru) and
# a tided (`tide serve --prefault`, same capacity), both on free loopback ports, and stops
# both by PID on exit. Then, for 64 KiB, 256 KiB and 1 MiB values and 1 and 2 client
# connections:
#   GET / SET   `tide bench --op get|put` against tided, `redis-benchmark -t get|set` against
#               Redis, at the same client count (one thread per connection on both sides)
#               and pipeline depth 1 (one request in flight per connection: tide bench does
#               not pipeline, so Redis runs with -P 1);
#   raw TCP     `tcp_baseline` (a forked server answering each 8-byte request with SIZE bytes
#               from a buffer it holds), same size and connection count.
# And a batch: 64 values of 64 KiB in one request (`tide bench --batch 64`) against Redis
# `MGET` of 64 random keys, with raw TCP answering 4 MiB per request as the reference.
#
# GETs read random keys of a working set of NET_WS bytes (default 64 MiB, larger than the
# L3 cache) stored before the timed runs, on both servers. tided's PUTs store fresh keys
# (evicting old ones once the pool is full); Redis's SETs overwrite working-set keys.
#
# Server CPU: utime+stime of the server process (all its threads) from /proc/PID/stat
# before and after each measurement, divided by the value bytes moved. tide bench runs with
# --no-fill so only its timed phase is counted. Every figure is a median of NET_RUNS runs
# (default 3), the runs interleaved so that load from elsewhere falls on all three systems.
#
# Prints a markdown table and the targets (met / NOT met) on stdout; progress on stderr.
# Environment: BUILD (default build), NET_SIZES, NET_CONNS, NET_RUNS, NET_SECONDS (per
# timed run, default 1), NET_CAPACITY (default 512MiB), NET_WS (default 64MiB).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD="${BUILD:-build}"
SIZES="${NET_SIZES:-64KiB 256KiB 1MiB}"
CONNS="${NET_CONNS:-1 2}"
RUNS="${NET_RUNS:-3}"
SECS="${NET_SECONDS:-1}"
CAP="${NET_CAPACITY:-512MiB}"
WS="${NET_WS:-64MiB}"
BATCH=64
BATCH_SIZE=64KiB

TIDE="$BUILD/tide"
RAW="$BUILD/bench/tcp_baseline"
for f in "$TIDE" "$RAW"; do
    [ -x "$f" ] || { echo "net.sh: $f not built (run make)" >&2; exit 1; }
done
for p in redis-server redis-benchmark redis-cli; do
    command -v "$p" >/dev/null || { echo "net.sh: $p not installed (make deps)" >&2; exit 1; }
done

TMP="$(mktemp -d)"
TIDE_PID=""
REDIS_PID=""
# shellcheck source=bench/procs.sh
. bench/procs.sh
cleanup() {
    stop_pid "$TIDE_PID"
    stop_pid "$REDIS_PID"
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP PIPE

log() { echo "net: $*" >&2; }

# "64KiB" -> 65536 (the sizes this script uses: a number with KiB, MiB or no suffix).
bytes_of() {
    case "$1" in
    *KiB) echo $((${1%KiB} * 1024)) ;;
    *MiB) echo $((${1%MiB} * 1048576)) ;;
    *GiB) echo $((${1%GiB} * 1073741824)) ;;
    *) echo "$1" ;;
    esac
}

CLK_TCK="$(getconf CLK_TCK)"
# utime+stime of a process, in clock ticks (fields 14 and 15; the command name in field 2
# is cut off first since it may hold spaces).
cpu_ticks() { sed 's/.*) //' "/proc/$1/stat" | awk '{ print $12 + $13 }'; }

# A JSON number field from tide bench's one-line output (the first occurrence).
json_num() { grep -o "\"$1\": *[-0-9.eE+]*" | head -n1 | sed 's/.*: *//'; }

CAP_BYTES="$(bytes_of "$CAP")"
WS_BYTES="$(bytes_of "$WS")"
LOAD_START="$(cut -d' ' -f1-3 /proc/loadavg)"
T_START="$(date +%s)"

# ---- servers -------------------------------------------------------------------------

log "starting tided (capacity $CAP, prefaulted, 2 I/O threads)"
"$TIDE" serve --port 0 --capacity "$CAP" --threads 2 --metrics-port 0 --prefault \
    --log-level warn --ready-file "$TMP/tided.ready" >"$TMP/tided.log" 2>&1 &
TIDE_PID=$!
wait_ready "$TMP/tided.ready" "$TIDE_PID" "$TMP/tided.log" net.sh
TIDE_PORT="$(cut -d' ' -f1 "$TMP/tided.ready")"
TIDE_URL="tide://127.0.0.1:$TIDE_PORT"

# Redis cannot pick its own port: try a few until one binds.
REDIS_PORT=""
for attempt in $(seq 20); do
    port=$((20000 + (RANDOM * 7 + $$ + attempt) % 40000))
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
        --maxmemory "$CAP_BYTES" --maxmemory-policy allkeys-lru --daemonize no \
        --dir "$TMP" --logfile "$TMP/redis.log" &
    REDIS_PID=$!
    for _ in $(seq 50); do
        kill -0 "$REDIS_PID" 2>/dev/null || break
        if redis-cli -p "$port" ping >/dev/null 2>&1; then REDIS_PORT="$port"; break; fi
        sleep 0.1
    done
    [ -n "$REDIS_PORT" ] && break
    stop_pid "$REDIS_PID"
    REDIS_PID=""
done
[ -n "$REDIS_PORT" ] || { echo "net.sh: redis-server did not start:" >&2; cat "$TMP/redis.log" >&2; exit 1; }
log "tided pid $TIDE_PID on $TIDE_PORT, redis-server pid $REDIS_PID on $REDIS_PORT"

# ---- one measurement each ------------------------------------------------------------
# Each prints "GBPS CPU_S_PER_GB" (value bytes, 10^9 bytes a GB).

# Store the working set of one size in tided (not timed, CPU not counted).
tide_fill() { # size keys
    "$TIDE" bench --url "$TIDE_URL" --size "$1" --keys "$2" --threads 2 --op get \
        --seconds 0.01 --quiet --json >/dev/null
}

tide_run() { # op size conns keys batch
    local c0 c1 out gbps bytes misses
    c0="$(cpu_ticks "$TIDE_PID")"
    out="$("$TIDE" bench --url "$TIDE_URL" --op "$1" --size "$2" --threads "$3" --keys "$4" \
        --batch "$5" --seconds "$SECS" --no-fill --quiet --json)"
    c1="$(cpu_ticks "$TIDE_PID")"
    # The figures of the timed phase are in "results" (the "fill" object comes before).
    gbps="$(json_num gb_per_s <<<"${out#*\"results\"}")"
    bytes="$(json_num bytes <<<"${out#*\"results\"}")"
    misses="$(json_num misses <<<"$out")"
    [ "$misses" = 0 ] || log "warning: tide bench $1 $2 x$3: $misses misses"
    awk -v g="$gbps" -v b="$bytes" -v t=$((c1 - c0)) -v hz="$CLK_TCK" \
        'BEGIN { printf "%.4f %.4f\n", g, (b > 0 ? t / hz / (b / 1e9) : 0) }'
}

# Store the working set of one size in Redis: key:%012d for 0..keys-1, the names
# redis-benchmark -r KEYS draws from, through redis-cli --pipe.
redis_fill() { # bytes keys
    redis-cli -p "$REDIS_PORT" flushall >/dev/null
    awk -v n="$1" -v k="$2" 'BEGIN {
        v = "x"; while (length(v) < n) v = v v; v = substr(v, 1, n)
        for (i = 0; i < k; i++)
            printf "*3\r\n$3\r\nSET\r\n$16\r\nkey:%012d\r\n$%d\r\n%s\r\n", i, n, v
    }' | redis-cli -p "$REDIS_PORT" --pipe >"$TMP/redis-fill.log"
    local have
    have="$(redis-cli -p "$REDIS_PORT" dbsize)"
    [ "$have" = "$2" ] || { echo "net.sh: Redis holds $have keys after the fill, not $2" >&2; exit 1; }
}

redis_misses() { redis-cli -p "$REDIS_PORT" info stats | tr -d '\r' | sed -n 's/^keyspace_misses://p'; }

# redis-benchmark with N requests; bytes moved = N x bytes_per_request.
redis_run() { # conns keys requests bytes_per_request ARGS...
    local conns="$1" keys="$2" n="$3" per="$4" c0 c1 m0 m1 out rps
    shift 4
    m0="$(redis_misses)"
    c0="$(cpu_ticks "$REDIS_PID")"
    out="$(redis-benchmark -p "$REDIS_PORT" -c "$conns" -n "$n" -r "$keys" \
        -P 1 --csv "$@")"
    c1="$(cpu_ticks "$REDIS_PID")"
    m1="$(redis_misses)"
    [ "$m0" = "$m1" ] || log "warning: redis-benchmark $*: $((m1 - m0)) misses"
    rps="$(tail -n1 <<<"$out" | cut -d, -f2 | tr -d '"')"
    awk -v r="$rps" -v p="$per" -v n="$n" -v t=$((c1 - c0)) -v hz="$CLK_TCK" \
        'BEGIN { printf "%.4f %.4f\n", r * p / 1e9, t / hz / (n * p / 1e9) }'
}

raw_run() { # size conns
    local out
    out="$("$RAW" --size "$1" --conns "$2" --seconds "$SECS" --json)"
    printf '%s %s\n' "$(json_num gbps <<<"$out")" "$(json_num server_cpu_s_per_gb <<<"$out")"
}

# Results: one line "KEY GBPS CPU" per run in $TMP/results.
record() { echo "$1 $2" >>"$TMP/results"; }

# Requests for a Redis run: about as many bytes as a timed run moves at ~1 GB/s.
redis_n() { # bytes_per_request
    awk -v s="$SECS" -v p="$1" 'BEGIN { n = int(s * 1e9 / p); print n < 64 ? 64 : n }'
}

# ---- the runs ------------------------------------------------------------------------

: >"$TMP/results"
for size in $SIZES; do
    sb="$(bytes_of "$size")"
    keys=$((WS_BYTES / sb))
    log "$size: filling $keys keys ($WS) into each server"
    redis_fill "$sb" "$keys"
    n="$(redis_n "$sb")"
    for run in $(seq "$RUNS"); do
        tide_fill "$size" "$keys"
        for c in $CONNS; do
            log "$size x$c run $run/$RUNS: get"
            record "get.$size.$c.tide" "$(tide_run get "$size" "$c" "$keys" 1)"
            record "get.$size.$c.redis" "$(redis_run "$c" "$keys" "$n" "$sb" -d "$sb" -t get)"
            record "get.$size.$c.raw" "$(raw_run "$size" "$c")"
        done
        for c in $CONNS; do
            log "$size x$c run $run/$RUNS: put/set"
            record "set.$size.$c.tide" "$(tide_run put "$size" "$c" "$keys" 1)"
            record "set.$size.$c.redis" "$(redis_run "$c" "$keys" "$n" "$sb" -d "$sb" -t set)"
        done
    done
done

bsb="$(bytes_of "$BATCH_SIZE")"
bkeys=$((WS_BYTES / bsb))
per=$((BATCH * bsb))
log "batch: $BATCH x $BATCH_SIZE, filling $bkeys keys into each server"
redis_fill "$bsb" "$bkeys"
mget=(MGET)
for _ in $(seq "$BATCH"); do mget+=("key:__rand_int__"); done
n="$(redis_n "$per")"
for run in $(seq "$RUNS"); do
    tide_fill "$BATCH_SIZE" "$bkeys"
    for c in $CONNS; do
        log "batch x$c run $run/$RUNS"
        record "batch.$BATCH_SIZE.$c.tide" "$(tide_run get "$BATCH_SIZE" "$c" "$bkeys" "$BATCH")"
        record "batch.$BATCH_SIZE.$c.redis" "$(redis_run "$c" "$bkeys" "$n" "$per" "${mget[@]}")"
        record "batch.$BATCH_SIZE.$c.raw" "$(raw_run "$per" "$c")"
    done
done

LOAD_END="$(cut -d' ' -f1-3 /proc/loadavg)"
ELAPSED=$(($(date +%s) - T_START))

# ---- the table -----------------------------------------------------------------------

# GB/s and CPU columns: medians per system. Ratios: one per run, tided against the baseline
# measured right beside it in that run, then the median of those, with their range.
awk -v sizes="$SIZES" -v conns="$CONNS" -v bsize="$BATCH_SIZE" -v batch="$BATCH" \
    -v runs="$RUNS" -v secs="$SECS" -v ws="$WS" -v cap="$CAP" \
    -v load0="$LOAD_START" -v load1="$LOAD_END" -v elapsed="$ELAPSED" '
function sort(a, n,   i, j, t) {
    for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] + 0 > t + 0; j--) a[j + 1] = a[j]; a[j + 1] = t }
}
function median(key, col,   n, a) {
    n = split(vals[key, col], a, " ")
    if (n == 0) return -1
    sort(a, n)
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
# Per-run ratios of key a over key b in column col: sets RMED, RMIN, RMAX; returns the count.
function ratios(a, b, col,   na, nb, x, y, i, n, r) {
    na = split(vals[a, col], x, " "); nb = split(vals[b, col], y, " ")
    n = 0
    for (i = 1; i <= na && i <= nb; i++) if (x[i] > 0 && y[i] > 0) r[++n] = x[i] / y[i]
    if (n == 0) return 0
    sort(r, n)
    RMED = n % 2 ? r[(n + 1) / 2] : (r[n / 2] + r[n / 2 + 1]) / 2; RMIN = r[1]; RMAX = r[n]
    return n
}
function rfig(a, b, col) {
    if (!ratios(a, b, col)) return "—"
    return RMIN == RMAX ? sprintf("%.2f", RMED) : sprintf("%.2f (%.2f–%.2f)", RMED, RMIN, RMAX)
}
function fig(v, f) { return v < 0 ? "—" : sprintf(f, v) }
function size_bytes(z) {
    if (z ~ /KiB$/) return substr(z, 1, length(z) - 3) * 1024
    if (z ~ /MiB$/) return substr(z, 1, length(z) - 3) * 1048576
    if (z ~ /GiB$/) return substr(z, 1, length(z) - 3) * 1073741824
    return z + 0
}
function row(label, key, rawkey) {
    printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", label,
        fig(median(key ".tide", 1), "%.2f"), fig(median(key ".redis", 1), "%.2f"),
        fig(median(rawkey, 1), "%.2f"), rfig(key ".tide", rawkey, 1),
        rfig(key ".tide", key ".redis", 1), fig(median(key ".tide", 2), "%.3f"),
        fig(median(key ".redis", 2), "%.3f"), fig(median(rawkey, 2), "%.3f"),
        rfig(key ".tide", key ".redis", 2)
}
# A ratio as a target line prints it: two decimals, unless rounding would put it on the
# other side of the threshold thr (0.896 is not ">= 0.9", though "0.90" reads as if it
# were): then four. ge: the target is v >= thr (else v <= thr).
function tfig(v, thr, ge,   s) {
    s = sprintf("%.2f", v)
    if ((ge ? s + 0 >= thr : s + 0 <= thr) != (ge ? v >= thr : v <= thr)) s = sprintf("%.4f", v)
    return s
}
# One line of the CPU target over the rows whose keys start with prefix.
# GET of one value size >= 0.9x raw loopback TCP at every connection count measured.
function get_raw_target(size, label,   j, key, all, any, line) {
    all = 1; line = ""; any = 0
    for (j = 1; j <= nc; j++) {
        key = "get." size "." C[j]
        if (!ratios(key ".tide", key ".raw", 1)) continue
        any = 1; all = all && RMED >= 0.9
        line = line sprintf(" x%s %s;", C[j], tfig(RMED, 0.9, 1))
    }
    if (any) printf "- %s GET >= 0.9x raw loopback TCP at the same connection count:%s %s\n", label, line, all ? "met" : "NOT met"
}
function cpu_target(what, prefix,   key, n, met, lo, hi, k) {
    n = 0; met = 0; lo = 99; hi = 0
    for (k in seen) {
        if (index(k, prefix) != 1) continue
        if (!ratios(k ".tide", k ".redis", 2)) continue
        n++; met += RMED <= 0.5
        if (RMED < lo) lo = RMED
        if (RMED > hi) hi = RMED
    }
    if (n) printf "- server CPU per GB <= 0.5x Redis, %s: median ratio %s to %s; <= 0.5 in %d of %d rows — %s\n", what, tfig(lo, 0.5, 0), tfig(hi, 0.5, 0), met, n, met == n ? "met" : "NOT met"
}
{
    vals[$1, 1] = vals[$1, 1] " " $2; vals[$1, 2] = vals[$1, 2] " " $3
    k = $1; sub(/\.(tide|redis|raw)$/, "", k); seen[k] = 1
}
END {
    ns = split(sizes, S, " "); nc = split(conns, C, " ")
    printf "tided vs redis-server %s vs raw loopback TCP, same run; %d runs of ~%s s each per figure,\n", redis_version, runs, secs
    printf "the three systems measured back to back within each run. GB/s = 10^9 value bytes a second\n"
    printf "(median of the runs). Ratios: tided over the baseline measured beside it in the same run,\n"
    printf "median of the runs (range in brackets). Pipeline depth 1: one request in flight per\n"
    printf "connection, one client thread per connection for tide bench and tcp_baseline, one\n"
    printf "event-loop thread for redis-benchmark. GETs read random keys of a %s working set stored\n", ws
    printf "beforehand; both servers have %s of memory. CPU s/GB = server utime+stime (all threads)\n", cap
    printf "per GB moved. Raw TCP: tcp_baseline (server -> client, same size and connections).\n"
    printf "Load average (1/5/15 min): %s at start, %s at end; %d s in all.\n\n", load0, load1, elapsed
    print "| op, value, conns | tided GB/s | Redis GB/s | raw TCP GB/s | tided/raw | tided/Redis | tided CPU s/GB | Redis CPU s/GB | raw server CPU s/GB | tided/Redis CPU |"
    print "|---|---|---|---|---|---|---|---|---|---|"
    for (o = 1; o <= 2; o++)
        for (i = 1; i <= ns; i++)
            for (j = 1; j <= nc; j++) {
                op = o == 1 ? "get" : "set"
                row((o == 1 ? "GET " : "SET (tided PUT) ") S[i] " x" C[j], op "." S[i] "." C[j],
                    "get." S[i] "." C[j] ".raw")
            }
    for (j = 1; j <= nc; j++) {
        key = "batch." bsize "." C[j]
        row("batch GET " batch " x " bsize " (Redis MGET) x" C[j], key, key ".raw")
    }
    printf "\nRaw TCP in the SET rows is the GET direction (the same figure as the GET row); in the batch\n"
    printf "rows it answers %d x %s in one response.\n\n", batch, bsize
    print "Targets (on the median of the per-run ratios):"
    get_raw_target("1MiB", "1 MiB")
    # Issue 18: the write path at the speed of the wire, and GET at 256 KiB.
    get_raw_target("256KiB", "256 KiB")
    all = 1; line = ""; any = 0
    for (i = 1; i <= ns; i++) {
        if (size_bytes(S[i]) < 262144) continue
        for (j = 1; j <= nc; j++) {
            key = "set." S[i] "." C[j]
            if (!ratios(key ".tide", "get." S[i] "." C[j] ".raw", 1)) continue
            any = 1; all = all && RMED >= 0.9
            line = line sprintf(" %s x%s %s;", S[i], C[j], tfig(RMED, 0.9, 1))
        }
    }
    if (any) printf "- PUT >= 0.9x raw loopback TCP for values of 256 KiB and up, same connection count:%s %s\n", line, all ? "met" : "NOT met"
    all = 1; line = ""; any = 0
    for (j = 1; j <= nc; j++) {
        key = "batch." bsize "." C[j]
        if (!ratios(key ".tide", key ".redis", 1)) continue
        any = 1; all = all && RMED >= 2
        line = line sprintf(" x%s %s;", C[j], tfig(RMED, 2, 1))
    }
    if (any) printf "- batch of %d x %s >= 2x Redis MGET GB/s:%s %s\n", batch, bsize, line, all ? "met" : "NOT met"
    cpu_target("GET rows", "get.")
    cpu_target("SET rows", "set.")
    cpu_target("batch rows", "batch.")
}' redis_version="$(redis-server --version | sed -n 's/.*v=\([0-9.]*\).*/\1/p')" "$TMP/results"
