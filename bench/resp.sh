#!/bin/sh
# resp.sh — redis-benchmark against tided's RESP port and against redis-server, in the same
# run with the same parameters, and the ratio tided / Redis (target: at least 1 for values
# of 64 KiB and more).
#
#   BUILD=build bench/resp.sh          (scripts/bench.sh runs it after the C benchmarks)
#
# Both servers get the same memory (1 GiB: tided's pool, pre-faulted, and Redis's
# maxmemory; Redis with persistence off). For each value size (64 KiB, 256 KiB, 1 MiB),
# client count (-c 4, 16) and pipeline depth (-P 1, 8), redis-benchmark runs SET then GET
# over 100 random keys (-r 100), REPEAT times alternating the servers; the table shows the
# medians in GB/s of value bytes. Each run moves MB_PER_RUN MiB of values per operation.
# Environment: TIDE_RESP_PORT, REDIS_PORT (defaults 26379, 26380), REPEAT (3),
# MB_PER_RUN (256), THREADS (tided's I/O threads, default 2), SIZES (value sizes in bytes,
# default "65536 262144 1048576"), TIDE_UNIX (1: tided also listens on a Unix socket, so
# its pool is shared with same-host clients and a GET copies each value into its reply and
# checks the copy instead of sending it from the pool: the cost of that check, issue 17).
set -eu
cd "$(dirname "$0")/.."
BUILD="${BUILD:-build}"
TIDE="$BUILD/tide"
TPORT="${TIDE_RESP_PORT:-26379}"
RPORT="${REDIS_PORT:-26380}"
REPEAT="${REPEAT:-3}"
MB="${MB_PER_RUN:-256}"
THREADS="${THREADS:-2}"
SIZES="${SIZES:-65536 262144 1048576}"
TIDE_UNIX="${TIDE_UNIX:-0}"

for tool in redis-server redis-benchmark redis-cli; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "resp.sh: $tool is missing (install redis-server and redis-tools: make deps)" >&2
        exit 1
    fi
done
[ -x "$TIDE" ] || { echo "resp.sh: $TIDE is missing (run make first)" >&2; exit 1; }
for p in "$TPORT" "$RPORT"; do
    if redis-cli -p "$p" ping >/dev/null 2>&1; then
        echo "resp.sh: port $p is already in use" >&2
        exit 1
    fi
done

TMP="$(mktemp -d)"
TPID=""
RPID=""
cleanup() {
    if [ -n "$TPID" ] && kill "$TPID" 2>/dev/null; then wait "$TPID" 2>/dev/null || true; fi
    if [ -n "$RPID" ] && kill "$RPID" 2>/dev/null; then wait "$RPID" 2>/dev/null || true; fi
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM # stop here (the EXIT trap cleans up), not carry on

UNIX_ARGS=""
[ "$TIDE_UNIX" = 1 ] && UNIX_ARGS="--unix $TMP/tide.sock"
# shellcheck disable=SC2086 # UNIX_ARGS is two words or none
"$TIDE" serve --port 0 --metrics-port 0 --resp-port "$TPORT" --capacity 1GiB --prefault \
    --threads "$THREADS" --ready-file "$TMP/ready" --log-level warn $UNIX_ARGS \
    2>"$TMP/tided.log" &
TPID=$!
redis-server --port "$RPORT" --bind 127.0.0.1 --save '' --appendonly no --maxmemory 1gb \
    --maxmemory-policy allkeys-lru --logfile "$TMP/redis.log" &
RPID=$!
# Both answer PING before anything is measured (tided pre-faults its pool first).
for p in "$TPORT" "$RPORT"; do
    i=0
    until redis-cli -p "$p" ping >/dev/null 2>&1; do
        i=$((i + 1))
        if [ "$i" -gt 300 ]; then
            echo "resp.sh: nothing answers on port $p after 30 s" >&2
            cat "$TMP/tided.log" >&2
            exit 1
        fi
        sleep 0.1
    done
done

# One redis-benchmark run: prints "SET_RPS GET_RPS".
run() { # port size clients pipeline n
    redis-benchmark -p "$1" -t set,get -d "$2" -c "$3" -P "$4" -n "$5" -r 100 --csv 2>/dev/null |
        awk -F'"' '$2 == "SET" { s = $4 } $2 == "GET" { g = $4 } END { print s + 0, g + 0 }'
}

median() { # values...
    printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}

echo "redis-benchmark -t set,get -r 100 -d SIZE -c C -P P -n N, medians of $REPEAT runs,"
SHARED=""
[ "$TIDE_UNIX" = 1 ] && SHARED=", --unix: pool shared, GETs copied and checked"
echo "tided (--threads $THREADS, 1 GiB pre-faulted pool$SHARED) vs redis-server $(redis-server --version |
    sed -n 's/.*v=\([^ ]*\).*/\1/p') (save '', appendonly no, maxmemory 1gb),"
echo "$(nproc) cores, load average at start $(cut -d' ' -f1-3 /proc/loadavg). GB/s of values."
echo
echo "| value | -c | -P | op | tided GB/s | Redis GB/s | tided / Redis |"
echo "|---|---|---|---|---|---|---|"
: >"$TMP/ratios"
for size in $SIZES; do
    n=$((MB * 1048576 / size))
    case $size in 65536) label="64 KiB" ;; 262144) label="256 KiB" ;; *) label="1 MiB" ;; esac
    for c in 4 16; do
        for P in 1 8; do
            ts=""; tg=""; rs=""; rg=""
            r=0
            # shellcheck disable=SC2046  # run prints "SET_RPS GET_RPS": split into $1 and $2
            while [ "$r" -lt "$REPEAT" ]; do
                set -- $(run "$TPORT" "$size" "$c" "$P" "$n")
                ts="$ts $1"; tg="$tg $2"
                set -- $(run "$RPORT" "$size" "$c" "$P" "$n")
                rs="$rs $1"; rg="$rg $2"
                r=$((r + 1))
            done
            for op in SET GET; do
                # shellcheck disable=SC2086  # ts, tg, rs, rg are lists of numbers: one argument each
                if [ "$op" = SET ]; then
                    t=$(median $ts); x=$(median $rs)
                else
                    t=$(median $tg); x=$(median $rg)
                fi
                awk -v l="$label" -v c="$c" -v p="$P" -v op="$op" -v t="$t" -v x="$x" -v s="$size" \
                    'BEGIN { tg = t * s / 1e9; rg = x * s / 1e9;
                             printf "| %s | %s | %s | %s | %.2f | %.2f | %s |\n", l, c, p, op,
                                    tg, rg, (rg > 0 ? sprintf("%.2f", tg / rg) : "-") }'
                # Every run's own ratio, for the target below ("on every run").
                if [ "$op" = SET ]; then tv="$ts"; rv="$rs"; else tv="$tg"; rv="$rg"; fi
                awk -v l="$label -c $c -P $P $op" -v t="$tv" -v r="$rv" 'BEGIN {
                    n = split(t, a, " "); split(r, b, " "); lo = -1
                    for (i = 1; i <= n; i++) if (b[i] > 0) { q = a[i] / b[i]; if (lo < 0 || q < lo) lo = q }
                    printf "%s\t%.6f\n", l, lo }' >>"$TMP/ratios"
            done
        done
    done
done
echo
# Two decimals, or four where rounding would read as the other verdict (0.996 is not >= 1.0).
awk -F'\t' 'function tfig(v,   s) { s = sprintf("%.2f", v); if ((s + 0 >= 1.0) != (v >= 1.0)) s = sprintf("%.4f", v); return s }
    { n++; if ($2 >= 1.0) met++; else miss = miss sprintf(" %s (%s);", $1, tfig($2))
              if (lo == "" || $2 < lo) lo = $2 }
    END { if (!n) exit
          printf "Target (issue 18): RESP GET and SET >= 1.0x Redis at every size, on every run: "
          printf "lowest single-run ratio %s; %d of %d rows met on every run — %s\n", tfig(lo), met, n,
                 met == n ? "met" : "NOT met"
          if (miss != "") printf "Rows with a run below 1.0:%s\n", miss }' "$TMP/ratios"
if grep -q . "$TMP/tided.log"; then
    echo
    echo "tided logged:"
    sed 's/^/    /' "$TMP/tided.log"
fi
