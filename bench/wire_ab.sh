#!/usr/bin/env bash
# wire_ab.sh — two (or more) builds of tided and tide bench side by side, runs alternated so
# that the load of a shared machine falls on all of them, each next to a raw loopback TCP
# run (tcp_baseline) of the same size and connection count.
#
#   bench/wire_ab.sh ROUNDS "BUILD_A BUILD_B ..." ["put get"] ["256KiB 1MiB"] ["1 2"]
#
# Each BUILD is a directory holding tide (and, for the first, bench/tcp_baseline). One tided
# per build (512 MiB pool, pre-faulted, 2 I/O threads) on a free loopback port, stopped by
# PID at the end. For gets, 256 keys of SIZE are stored first (not timed). A round runs
# `tide bench --op OP --size SIZE --threads CONNS --keys 256 --seconds $SECS --no-fill`
# against each build's own tided in turn, then tcp_baseline. Prints each run, then per
# configuration and build the medians of GB/s, of the ratio to the raw run beside it, and
# of the server's CPU seconds (utime+stime) per GB. Environment: SECS (default 1).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS="$1" BUILDS="$2" OPS="${3:-put get}" SIZES="${4:-256KiB 1MiB}" CONNS="${5:-1 2}"
SECS="${SECS:-1}"
read -r -a B <<<"$BUILDS"
RAW="${B[0]}/bench/tcp_baseline"
[ -x "$RAW" ] || { echo "wire_ab.sh: $RAW not built" >&2; exit 1; }
TMP="$(mktemp -d)"
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do
        if kill "$p" 2>/dev/null; then wait "$p" 2>/dev/null || true; fi
    done
    rm -rf "$TMP"
}
trap cleanup EXIT
for i in "${!B[@]}"; do
    "${B[$i]}/tide" serve --port 0 --capacity 512MiB --threads 2 --metrics-port 0 --prefault \
        --log-level warn --ready-file "$TMP/ready$i" >"$TMP/log$i" 2>&1 &
    PIDS+=($!)
done
for i in "${!B[@]}"; do
    for _ in $(seq 300); do [ -s "$TMP/ready$i" ] && break; sleep 0.1; done
    [ -s "$TMP/ready$i" ] || { echo "wire_ab.sh: tided of ${B[$i]} did not start" >&2; exit 1; }
done
cpu() { sed 's/.*) //' "/proc/$1/stat" | awk '{ print $12 + $13 }'; }
num() { grep -o "\"$1\": *[0-9.eE+-]*" | head -n1 | sed 's/.*: *//'; }
hz="$(getconf CLK_TCK)"
for size in $SIZES; do
    for c in $CONNS; do
        for op in $OPS; do
            for r in $(seq "$ROUNDS"); do
                line="$op $size x$c r$r:"
                for i in "${!B[@]}"; do
                    url="tide://127.0.0.1:$(cut -d' ' -f1 "$TMP/ready$i")"
                    if [ "$op" = get ]; then
                        "${B[$i]}/tide" bench --url "$url" --size "$size" --keys 256 --threads 2 \
                            --op get --seconds 0.01 --quiet --json >/dev/null
                    fi
                    c0="$(cpu "${PIDS[$i]}")"
                    out="$("${B[$i]}/tide" bench --url "$url" --op "$op" --size "$size" \
                        --threads "$c" --keys 256 --seconds "$SECS" --no-fill --quiet --json)"
                    c1="$(cpu "${PIDS[$i]}")"
                    res="${out#*\"results\"}"
                    g="$(num gb_per_s <<<"$res")" by="$(num bytes <<<"$res")"
                    line="$line $i=$g,$(awk -v t=$((c1 - c0)) -v b="$by" -v hz="$hz" \
                        'BEGIN { printf "%.4f", (b > 0 ? t / hz / (b / 1e9) : 0) }')"
                done
                echo "$line raw=$("$RAW" --size "$size" --conns "$c" --seconds "$SECS" --json |
                    num gbps)"
            done
        done
    done
done | tee "$TMP/runs"
echo
echo "Medians over $ROUNDS rounds (load average now $(cut -d' ' -f1-3 /proc/loadavg)):"
awk -v builds="$BUILDS" '
function med(s,   a, n, i, j, t) {
    n = split(s, a, " ")
    for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] + 0 > t + 0; j--) a[j + 1] = a[j]; a[j + 1] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
{
    key = $1 " " $2 " " $3; if (!(key in seen)) { seen[key] = 1; order[++nk] = key }
    raw = $NF; sub(/raw=/, "", raw)
    for (f = 5; f < NF; f++) {
        split($f, kv, "="); split(kv[2], gc, ",")
        G[key, kv[1]] = G[key, kv[1]] " " gc[1]; C[key, kv[1]] = C[key, kv[1]] " " gc[2]
        R[key, kv[1]] = R[key, kv[1]] " " (raw > 0 ? gc[1] / raw : 0)
    }
}
END {
    nb = split(builds, BN, " ")
    for (k = 1; k <= nk; k++)
        for (b = 1; b <= nb; b++)
            printf "%-16s %-24s %5.2f GB/s  %4.2fx raw  %.3f server CPU s/GB\n", order[k],
                BN[b], med(G[order[k], b - 1]), med(R[order[k], b - 1]), med(C[order[k], b - 1])
}' "$TMP/runs"
