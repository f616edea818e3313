#!/usr/bin/env bash
# hostile.sh — how much 8 hostile connections slow tided's well-behaved clients: the p99
# latency of a well-behaved `tide bench` run alone, then beside 8 connections (4 on the
# native port, 4 on the RESP port) that each pipeline GETs of a 1 MiB value, never read
# the replies, and leave half a request in their input — the shape that stopped whole
# I/O workers before the event loop bounded each connection's work per wake-up. Prints
# both p99s and their ratio (target <= 2x); both runs are in this script, against the same
# tided, so the ratio does not depend on the machine.
#
# Starts one tided (2 I/O threads, --write-stall-timeout long enough that the hostile
# connections stay for the whole run) on free loopback ports; stops it and the hostile
# clients by PID on exit. Environment: BUILD (default build), HOSTILE_SECONDS (per timed
# run, default 3), HOSTILE_SIZE (well-behaved value size, default 4KiB), HOSTILE_RUNS
# (runs of each kind, interleaved; the median p99 is kept; default 3).
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/procs.sh

BUILD="${BUILD:-build}"
SECS="${HOSTILE_SECONDS:-3}"
SIZE="${HOSTILE_SIZE:-4KiB}"
RUNS="${HOSTILE_RUNS:-3}"
TIDE="$BUILD/tide"
TMP="$(mktemp -d)"
TIDED=""
HOSTILE=""
cleanup() {
    [ -n "$HOSTILE" ] && stop_pid "$HOSTILE"
    stop_pid "$TIDED"
    rm -rf "$TMP"
}
trap cleanup EXIT

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

RPORT="$(free_port)"
"$TIDE" serve --port 0 --metrics-port 0 --resp-port "$RPORT" --threads 2 --capacity 512MiB \
    --write-stall-timeout 600 --idle-timeout 600 --ready-file "$TMP/ready" --log-level warn \
    2>"$TMP/tided.log" &
TIDED=$!
wait_ready "$TMP/ready" "$TIDED" "$TMP/tided.log" "hostile.sh"
PORT="$(cut -d' ' -f1 "$TMP/ready")"
URL="tide://127.0.0.1:$PORT"

# The value the hostile clients ask for, stored once.
head -c 1048576 /dev/zero | tr '\0' v >"$TMP/big"
"$TIDE" put "$URL" hostile-big "$TMP/big" >/dev/null

p99() { # one timed run of the well-behaved client: its p99 in microseconds
    "$TIDE" bench --url "$URL" --size "$SIZE" --threads 2 --seconds "$SECS" --keys 1024 \
        --op get --json --quiet | python3 -c 'import json,sys; print(json.load(sys.stdin)["results"][0]["p99_us"])'
}

start_hostile() { # 8 non-reading pipelining clients with a partial request, kept open
    python3 - "$PORT" "$RPORT" <<'PY' &
import socket, struct, sys, time
native, resp = int(sys.argv[1]), int(sys.argv[2])
key = b"hostile-big"
# A native GET of one key (docs/PROTOCOL.md): the 40-byte header, then { u16 klen, key,
# u64 cap }.
meta = struct.pack("<H", len(key)) + key + struct.pack("<Q", 2**64 - 1)
native_get = struct.pack("<IBBHQIiIIQ", 0x45444954, 1, 0x03, 0, 1, 1, 0, len(meta), 0,
                         len(meta)) + meta
resp_get = b"*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n" % (len(key), key)
socks = []
for port, one in [(native, native_get)] * 4 + [(resp, resp_get)] * 4:
    s = socket.create_connection(("127.0.0.1", port))
    # 24 GETs of 1 MiB stay under tided's 64 MiB output bound: only the unread socket
    # blocks the replies. Then half a request.
    s.sendall(one * 24 + one[: len(one) // 2])
    socks.append(s)
time.sleep(3600)
PY
    HOSTILE=$!
    sleep 1
}

alone=()
beside=()
for run in $(seq "$RUNS"); do
    echo "run $run/$RUNS: alone" >&2
    alone+=("$(p99)")
    start_hostile
    echo "run $run/$RUNS: beside 8 hostile connections" >&2
    beside+=("$(p99)")
    stop_pid "$HOSTILE"
    HOSTILE=""
    sleep 0.5
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
A="$(median "${alone[@]}")"
B="$(median "${beside[@]}")"
python3 - "$A" "$B" "$SIZE" <<'PY'
import sys
a, b, size = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
r = b / a if a > 0 else float("inf")
print("| well-behaved GETs (%s, 2 threads) | p99 alone | p99 beside 8 hostile | ratio |" % size)
print("|---|---|---|---|")
# Four decimals where two would read as the other verdict (2.004 is not <= 2).
rs = "%.2f" % r
if (float(rs) <= 2) != (r <= 2):
    rs = "%.4f" % r
print("| tided | %.1f us | %.1f us | %sx |" % (a, b, rs))
print("target <= 2x: %s" % ("met" if r <= 2 else "NOT met"))
PY
