#!/usr/bin/env bash
# mooncake.sh — tide against Mooncake Store on loopback, in one run (issue 18).
#
# Makes .venv-mooncake on first use (scripts/mooncake-env.sh: Mooncake's PyPI package,
# pinned), then starts, each on free loopback ports:
#   mooncake_master   with its HTTP metadata server built in (no etcd), no HA, no offload;
#   mooncake_client   the store client holding Mooncake's segment (MC_CAPACITY, TCP
#                     transport, host 127.0.0.1);
#   tided             `tide serve --prefault` with the same memory and 2 I/O threads;
# and runs bench/mooncake_drive.py (all four clients in one process, see there) against
# them; then again with --overhead: tide.Store against tide's C client alone, batch rows,
# more and shorter alternations (MC_OVH_RUNS, default 15, of MC_OVH_SECONDS, default 0.3),
# so that load from elsewhere falls alike on both. MC_MAIN=0 or MC_OVERHEAD=0 skips a pass. The measuring client holds no Mooncake segment of its own, so on both systems every
# value crosses a loopback TCP connection between two processes.
#
# Loopback only: Mooncake's transfer engine and metadata server listen on every interface
# whatever host they are given, so the whole run is made in a network namespace of its
# own (`unshare --net`, only `lo` up) when the machine allows one; it says which it used.
#
# Every process started here is stopped by PID on exit (trap). Every wait is bounded.
# Prints the markdown tables on stdout, progress on stderr.
# Environment: BUILD (default build), MC_SIZES, MC_BATCH_SIZES, MC_THREADS, MC_RUNS
# (default 3), MC_SECONDS (per timed run, default 1), MC_CAPACITY (bytes, default 2 GiB),
# MC_JSON (a file for the raw figures).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${BUILD:-build}"

# The environment first: installing it needs PyPI, which the namespace below cannot reach.
if [ -z "${MC_IN_NETNS:-}" ]; then scripts/mooncake-env.sh >&2; fi

# Re-run inside a fresh network namespace (root, util-linux's unshare) unless already in one.
if [ -z "${MC_IN_NETNS:-}" ] && [ "${MC_NETNS:-1}" != 0 ] && command -v unshare >/dev/null &&
    unshare --net true 2>/dev/null; then
    export MC_IN_NETNS=1
    # shellcheck disable=SC2016  # $0 and $@ are the inner bash's: they must not expand here
    exec unshare --net -- bash -c 'ip link set lo up && exec "$0" "$@"' "$0" "$@"
fi

VENV="${MOONCAKE_VENV:-.venv-mooncake}"
MC_BIN="$VENV/bin"
TIDE="$BUILD/tide"
DRIVE="$BUILD/bench/drive/tide_drive"
for f in "$TIDE" "$DRIVE"; do
    [ -x "$f" ] || { echo "mooncake.sh: $f not built (run make)" >&2; exit 1; }
done
CAP="${MC_CAPACITY:-2147483648}"
# The address Mooncake's transfer engine advertises for its segment (without it, the first
# non-loopback address of the machine).
export MC_TCP_BIND_ADDRESS=127.0.0.1

TMP="$(mktemp -d)"
PIDS=()
# shellcheck source=bench/procs.sh
. bench/procs.sh
cleanup() {
    local i
    for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do stop_pid "${PIDS[$i]}"; done
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP PIPE
log() { echo "mooncake: $*" >&2; }

# A free loopback TCP port (bound, then released: another process could take it before
# the server binds it, in which case that server fails to start and the script says so).
free_port() {
    /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
# Wait (at most 30 s) until something listens on 127.0.0.1:$2 or process $1 dies.
wait_port() {
    for _ in $(seq 300); do
        kill -0 "$1" 2>/dev/null || return 1
        (exec 3<>"/dev/tcp/127.0.0.1/$2") 2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}

if [ -n "${MC_IN_NETNS:-}" ]; then
    log "in a network namespace of its own (only lo)"
else
    log "no separate network namespace: Mooncake's transfer engine listens on all interfaces"
fi
LOAD0="$(cut -d' ' -f1-3 /proc/loadavg)"

RPC_PORT="$(free_port)"
META_PORT="$(free_port)"
METRICS_PORT="$(free_port)"
"$MC_BIN/mooncake_master" --rpc_address=127.0.0.1 --rpc_port="$RPC_PORT" \
    --enable_http_metadata_server=true --http_metadata_server_host=127.0.0.1 \
    --http_metadata_server_port="$META_PORT" --metrics_host=127.0.0.1 \
    --metrics_port="$METRICS_PORT" --enable_metric_reporting=false \
    >"$TMP/master.log" 2>&1 &
PIDS+=($!)
if ! wait_port "${PIDS[-1]}" "$RPC_PORT" || ! wait_port "${PIDS[-1]}" "$META_PORT"; then
    echo "mooncake.sh: mooncake_master did not start:" >&2
    tail -n 20 "$TMP/master.log" >&2
    exit 1
fi

CLIENT_PORT="$(free_port)"
"$MC_BIN/mooncake_client" --host=127.0.0.1 --port="$CLIENT_PORT" \
    --global_segment_size="$CAP" --local_buffer_size=0 --protocol=tcp \
    --master_server_address="127.0.0.1:$RPC_PORT" \
    --metadata_server="http://127.0.0.1:$META_PORT/metadata" >"$TMP/client.log" 2>&1 &
PIDS+=($!)
wait_port "${PIDS[-1]}" "$CLIENT_PORT" ||
    { echo "mooncake.sh: mooncake_client did not start:" >&2; tail -n 20 "$TMP/client.log" >&2; exit 1; }
log "mooncake_master pid ${PIDS[0]} (rpc $RPC_PORT, metadata $META_PORT), mooncake_client pid ${PIDS[1]} ($CAP bytes)"

"$TIDE" serve --port 0 --capacity "${CAP}B" --threads 2 --metrics-port 0 --prefault \
    --log-level warn --ready-file "$TMP/tided.ready" >"$TMP/tided.log" 2>&1 &
PIDS+=($!)
wait_ready "$TMP/tided.ready" "${PIDS[-1]}" "$TMP/tided.log" mooncake.sh
TIDE_PORT="$(cut -d' ' -f1 "$TMP/tided.ready")"
log "tided pid ${PIDS[2]} on $TIDE_PORT ($CAP bytes, prefaulted)"

# The driver, bounded in time like everything else (its runs are bounded in count and
# seconds; this is the outer limit). Mooncake's glog lines are dropped from its stderr.
drive() {
    local rc
    set +e
    PYTHONPATH="$PWD/python" TIDE_LIB="$PWD/$BUILD/libtide.so" timeout 1800 "$MC_BIN/python" \
        bench/mooncake_drive.py --tide-url "tide://127.0.0.1:$TIDE_PORT" \
        --mc-master "127.0.0.1:$RPC_PORT" --mc-metadata "http://127.0.0.1:$META_PORT/metadata" \
        --drive "$DRIVE" ${MC_SIZES:+--sizes "$MC_SIZES"} \
        ${MC_BATCH_SIZES:+--batch-sizes "$MC_BATCH_SIZES"} ${MC_THREADS:+--threads "$MC_THREADS"} \
        "$@" 2> >(grep --line-buffered -v '^[IWE][0-9]\{4\} \|^WARNING: Logging before' >&2)
    rc=$?
    set -e
    [ "$rc" = 0 ] || { echo "mooncake.sh: the driver failed ($rc)" >&2; exit "$rc"; }
}
if [ "${MC_MAIN:-1}" != 0 ]; then
    log "tide and Mooncake, all rows"
    drive --runs "${MC_RUNS:-3}" --seconds "${MC_SECONDS:-1}" ${MC_JSON:+--json "$MC_JSON"}
    echo
fi
if [ "${MC_OVERHEAD:-1}" != 0 ]; then
    log "tide.Store against tide's C client, batch rows"
    drive --overhead --runs "${MC_OVH_RUNS:-15}" --seconds "${MC_OVH_SECONDS:-0.3}" \
        ${MC_JSON:+--json "$MC_JSON.overhead"}
fi
echo
echo "Servers: mooncake_master and mooncake_client ($("$MC_BIN/python" -c 'import importlib.metadata as m; print("mooncake-transfer-engine-non-cuda", m.version("mooncake-transfer-engine-non-cuda"))'), TCP transport, HTTP metadata in the master, global segment $CAP bytes), tided (\`tide serve --capacity ${CAP}B --threads 2 --prefault\`); $( [ -n "${MC_IN_NETNS:-}" ] && echo 'all in a network namespace with only lo' || echo 'host network namespace, loopback addresses'). Load average at start $LOAD0, at end $(cut -d' ' -f1-3 /proc/loadavg)."
