#!/usr/bin/env bash
# syscalls.sh — socket and event-loop syscalls per operation of tided and of its tide://
# client, counted by an LD_PRELOAD shim (scripts/syscount.c, built into $BUILD/syscount.so on
# first use), for the profile in docs/WRITE_PATH.md.
#
#   bench/syscalls.sh [OP SIZE CONNS [SECONDS]]     (default: put 256KiB 1 2)
#
# Starts a tided of $BUILD (512 MiB pool, pre-faulted, 2 I/O threads) on a free loopback
# port with the shim, fills a working set for gets (not counted: the fill runs without the
# shim and before the counted phase), runs `tide bench --op OP --size SIZE --threads CONNS
# --keys 256 --no-fill` with the shim, stops tided by PID, and prints each syscall per
# operation (calls, EAGAIN answers, bytes per call that moved bytes) for both sides. The
# server's counts include its HELLO and the fill's requests for gets (a few hundred).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${BUILD:-build}"
OP="${1:-put}" SIZE="${2:-256KiB}" CONNS="${3:-1}" SECS="${4:-2}"
TIDE="$BUILD/tide"
[ -x "$TIDE" ] || { echo "syscalls.sh: $TIDE not built (run make)" >&2; exit 1; }
SO="$BUILD/syscount.so"
[ "$SO" -nt scripts/syscount.c ] || gcc -O2 -shared -fPIC -o "$SO" scripts/syscount.c -ldl
SO="$(cd "$(dirname "$SO")" && pwd)/$(basename "$SO")"
TMP="$(mktemp -d)"
PID=""
cleanup() {
    if [ -n "$PID" ] && kill -0 "$PID" 2>/dev/null; then kill "$PID"; wait "$PID" || true; fi
    rm -rf "$TMP"
}
trap cleanup EXIT
SYSCOUNT_OUT="$TMP/server" LD_PRELOAD="$SO" "$TIDE" serve --port 0 --capacity 512MiB \
    --threads 2 --metrics-port 0 --prefault --log-level warn --ready-file "$TMP/ready" \
    >"$TMP/log" 2>&1 &
PID=$!
for _ in $(seq 300); do [ -s "$TMP/ready" ] && break; sleep 0.1; done
[ -s "$TMP/ready" ] || { echo "syscalls.sh: tided did not start" >&2; cat "$TMP/log" >&2; exit 1; }
URL="tide://127.0.0.1:$(cut -d' ' -f1 "$TMP/ready")"
if [ "$OP" = get ]; then
    "$TIDE" bench --url "$URL" --size "$SIZE" --keys 256 --threads 2 --op get --seconds 0.01 \
        --quiet --json >/dev/null
fi
out="$(SYSCOUNT_OUT="$TMP/client" LD_PRELOAD="$SO" "$TIDE" bench --url "$URL" --op "$OP" \
    --size "$SIZE" --threads "$CONNS" --keys 256 --seconds "$SECS" --no-fill --quiet --json)"
kill "$PID"
wait "$PID" || true
PID=""
res="${out#*\"results\"}"
ops="$(grep -o '"ops": *[0-9]*' <<<"$res" | head -n1 | sed 's/.*: *//')"
gbps="$(grep -o '"gb_per_s": *[0-9.]*' <<<"$res" | head -n1 | sed 's/.*: *//')"
echo "$OP $SIZE x$CONNS: $ops operations, $gbps GB/s ($BUILD/tide, load $(cut -d' ' -f1-3 /proc/loadavg))"
echo "| side | syscall | calls/op | EAGAIN/op | bytes/call |"
echo "|---|---|---|---|---|"
for side in server client; do
    for f in "$TMP/$side".*; do
        awk -v n="$ops" -v side="$side" '{ moved = $2 - $3
            printf "| %s | %s | %.2f | %.2f | %.0f |\n", side, $1, $2 / n, $3 / n,
                   (moved > 0 ? $4 / moved : 0) }' "$f"
    done
done
