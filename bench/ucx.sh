#!/usr/bin/env bash
# ucx.sh — tide's UCX data path (tide://...?transport=ucx, docs/UCX.md) against ucx_perftest
# on the same UCX transport, and against plain tide:// (TCP), in one run.
#
# For each UCX_TLS in UCX_BENCH_TLS (default "tcp" and "posix,cma,self,tcp"; tcp is needed
# there for client-server endpoints in UCX 1.13) and each value size in UCX_SIZES (default
# 64KiB 256KiB 1MiB 4MiB) it starts a fresh tided (`--ucx-port 0 --prefault`) with that
# UCX_TLS, and measures:
#   tide ucx   `tide bench --op get` over transport=ucx, one thread, batch 1 (GB/s) and
#              tided's CPU seconds per GB moved (utime+stime from /proc/PID/stat around
#              the timed run, `--no-fill`): active messages on the UCX port's endpoint,
#              or RMA on the same-host endpoint where there is one (docs/UCX.md);
#   ucx b16    the same, 16 values per call (`--batch 16`: one PIN for 16, their
#              transfers in flight together, one RELEASE), GB/s;
#   ucx put    `tide bench --op put` over transport=ucx, GB/s;
#   tide tcp   get and put over plain tide:// against the same tided; tcp b16 its get
#              with 16 values per call;
#   perftest   `ucx_perftest` pairs (server and client started here, same UCX_TLS, a free
#              loopback port) for ucp_get (one-sided RMA, what tide does), ucp_put_bw and
#              ucp_am_bw (active messages), the same size; the best of the three is the
#              reference.
# With a UCX of 1.22 or newer unpacked at UCX_BENCH_NEW (default .deps/libucx-1.22/libucx,
# fetched by make deps), the shared-memory list runs once more with it (tided, client and
# that UCX's own ucx_perftest): values then go by RMA on the same-host endpoint (docs/UCX.md).
# Then prints one markdown row per size: the figures, tide-ucx / best-perftest (batch 1 and
# batch 16), and tided-CPU-per-GB ucx / tcp (batch 1). Ratios only are meant to be compared
# across machines.
# UCX_NET_DEVICES defaults to lo (loopback only: without it UCX also stripes TCP over eth0),
# and TIDE_UCX_TCP=1 is set: tide uses UCX's TCP transport only when told (docs/UCX.md).
# Environment: BUILD (default build), UCX_SIZES, UCX_BENCH_TLS, UCX_SECONDS (default 1),
# UCX_RUNS (median of, default 3), UCX_CAPACITY (default 1GiB), UCX_PERF_BYTES (bytes per
# ucx_perftest run, default 2e9).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD="${BUILD:-build}"
SIZES="${UCX_SIZES:-64KiB 256KiB 1MiB 4MiB}"
TLSES="${UCX_BENCH_TLS:-tcp posix,cma,self,tcp}"
SECS="${UCX_SECONDS:-1}"
RUNS="${UCX_RUNS:-3}"
CAP="${UCX_CAPACITY:-1GiB}"
export UCX_NET_DEVICES="${UCX_NET_DEVICES:-lo}"
export TIDE_UCX_TCP=1
NEW="${UCX_BENCH_NEW:-.deps/libucx-1.22/libucx}"
CONFIGS="$TLSES"
if [ -x "$NEW/bin/ucx_perftest" ] && [ -f "$NEW/lib/libucp.so.0" ]; then
    CONFIGS="$CONFIGS posix,cma,self,tcp@new"
fi
TIDE="$BUILD/tide"
[ -x "$TIDE" ] || { echo "ucx.sh: $TIDE not built (run make)" >&2; exit 1; }
command -v ucx_perftest >/dev/null || { echo "ucx.sh: ucx_perftest not installed (make deps: ucx-utils)" >&2; exit 1; }

TMP="$(mktemp -d)"
TIDE_PID=""
PF_PID=""
# shellcheck source=bench/procs.sh
. bench/procs.sh
cleanup() {
    stop_pid "$TIDE_PID"
    stop_pid "$PF_PID"
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP PIPE
log() { echo "ucx: $*" >&2; }

bytes_of() {
    case "$1" in
    *KiB) echo $((${1%KiB} * 1024)) ;;
    *MiB) echo $((${1%MiB} * 1048576)) ;;
    *) echo "$1" ;;
    esac
}
CLK_TCK="$(getconf CLK_TCK)"
cpu_ticks() { sed 's/.*) //' "/proc/$1/stat" | awk '{ print $12 + $13 }'; }
json_num() { grep -o "\"$1\": *[-0-9.eE+]*" | head -n1 | sed 's/.*: *//'; }
median() { sort -g | awk '{ a[NR] = $1 } END { print (NR ? a[int((NR + 1) / 2)] : 0) }'; }

# A free loopback TCP port (bound then released; ucx_perftest cannot pick its own).
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# tide bench OP (default get) over URL, BATCH keys a call (default 1): "GBPS CPU_S_PER_GB"
# of tided.
tide_run() { # url size keys [op [batch]]
    local c0 c1 out gbps bytes op="${4:-get}" batch="${5:-1}"
    "$TIDE" bench --url "$1" --size "$2" --keys "$3" --op get --seconds 0.01 --quiet --json >/dev/null
    c0="$(cpu_ticks "$TIDE_PID")"
    out="$("$TIDE" bench --url "$1" --size "$2" --keys "$3" --op "$op" --batch "$batch" \
        --seconds "$SECS" --no-fill --quiet --json)"
    c1="$(cpu_ticks "$TIDE_PID")"
    gbps="$(json_num gb_per_s <<<"${out#*\"results\"}")"
    bytes="$(json_num bytes <<<"${out#*\"results\"}")"
    grep -q '"ok":true' <<<"$out" || { echo "ucx.sh: tide bench failed on $1: $out" >&2; exit 1; }
    awk -v g="$gbps" -v b="$bytes" -v t=$((c1 - c0)) -v hz="$CLK_TCK" \
        'BEGIN { printf "%.4f %.4f\n", g, (b > 0 ? t / hz / (b / 1e9) : 0) }'
}

# ucx_perftest TEST SIZE: GB/s (10^9) from the "Final:" line's overall bandwidth (MB/s of
# 2^20 bytes).
perf_run() {
    local port n out
    port="$(free_port)"
    n=$(( ${UCX_PERF_BYTES:-2000000000} / $2 ))
    [ "$n" -ge 100 ] || n=100
    "${PERFTEST[@]}" -p "$port" >"$TMP/pf-server.log" 2>&1 &
    PF_PID=$!
    sleep 0.5
    out="$(timeout 60 "${PERFTEST[@]}" 127.0.0.1 -p "$port" -t "$1" -s "$2" -n "$n" 2>&1 || true)"
    stop_pid "$PF_PID"
    PF_PID=""
    awk '/^Final:/ { printf "%.4f\n", $7 * 1048576 / 1e9; found = 1 } END { if (!found) print 0 }' <<<"$out"
}

echo "| UCX_TLS | size | tide ucx get GB/s | ucx get b16 | tide tcp get | tcp get b16 | ucx put | tcp put | perftest get | perftest put_bw | perftest am_bw | ucx get / best perftest | ucx b16 / best | tided CPU s/GB ucx | tided CPU s/GB tcp | CPU ucx / tcp |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
for cfg in $CONFIGS; do
    tls="${cfg%@new}"
    label="$tls"
    PERFTEST=(ucx_perftest)
    unset TIDE_UCX_LIBDIR
    if [ "$cfg" != "$tls" ]; then
        export TIDE_UCX_LIBDIR="$NEW/lib"
        PERFTEST=(env "LD_LIBRARY_PATH=$NEW/lib" "$NEW/bin/ucx_perftest")
        label="$tls (UCX $(LD_LIBRARY_PATH="$NEW/lib" "$NEW/bin/ucx_info" -v 2>/dev/null |
            sed -n 's/^# Library version: //p'))"
    fi
    export UCX_TLS="$tls"
    for size in $SIZES; do
        # A fresh tided for each size: with one tided the earlier sizes' working sets, read
        # often, held the pool's main queue and left the new one the small queue (16 of 24
        # batched 4 MiB gets missed in such a run).
        stop_pid "$TIDE_PID"
        rm -f "$TMP/tided.ready"
        "$TIDE" serve --port 0 --metrics-port 0 --capacity "$CAP" --prefault --ucx-port 0 \
            --log-level warn --ready-file "$TMP/tided.ready" >"$TMP/tided.log" 2>&1 &
        TIDE_PID=$!
        wait_ready "$TMP/tided.ready" "$TIDE_PID" "$TMP/tided.log" ucx.sh
        port="$(cut -d' ' -f1 "$TMP/tided.ready")"
        log "UCX_TLS=$label, $size: tided pid $TIDE_PID on $port"
        sb="$(bytes_of "$size")"
        keys=$((256 * 1048576 / sb))
        : >"$TMP/u" ; : >"$TMP/t"; : >"$TMP/up"; : >"$TMP/tp"
        : >"$TMP/ub"; : >"$TMP/tb"; : >"$TMP/pg"; : >"$TMP/pp"; : >"$TMP/pa"
        for _ in $(seq "$RUNS"); do
            tide_run "tide://127.0.0.1:$port?transport=ucx" "$size" "$keys" >>"$TMP/u"
            tide_run "tide://127.0.0.1:$port" "$size" "$keys" >>"$TMP/t"
            tide_run "tide://127.0.0.1:$port?transport=ucx" "$size" "$keys" get 16 >>"$TMP/ub"
            tide_run "tide://127.0.0.1:$port" "$size" "$keys" get 16 >>"$TMP/tb"
            tide_run "tide://127.0.0.1:$port?transport=ucx" "$size" "$keys" put >>"$TMP/up"
            tide_run "tide://127.0.0.1:$port" "$size" "$keys" put >>"$TMP/tp"
            perf_run ucp_get "$sb" >>"$TMP/pg"
            perf_run ucp_put_bw "$sb" >>"$TMP/pp"
            perf_run ucp_am_bw "$sb" >>"$TMP/pa"
        done
        ug="$(cut -d' ' -f1 "$TMP/u" | median)"; uc="$(cut -d' ' -f2 "$TMP/u" | median)"
        tg="$(cut -d' ' -f1 "$TMP/t" | median)"; tc="$(cut -d' ' -f2 "$TMP/t" | median)"
        ub="$(cut -d' ' -f1 "$TMP/ub" | median)"; tb="$(cut -d' ' -f1 "$TMP/tb" | median)"
        up="$(cut -d' ' -f1 "$TMP/up" | median)"; tp="$(cut -d' ' -f1 "$TMP/tp" | median)"
        pg="$(median <"$TMP/pg")"; pp="$(median <"$TMP/pp")"; pa="$(median <"$TMP/pa")"
        awk -v tls="$label" -v s="$size" -v ug="$ug" -v tg="$tg" -v pg="$pg" -v pp="$pp" -v pa="$pa" \
            -v uc="$uc" -v tc="$tc" -v up="$up" -v tp="$tp" -v ub="$ub" -v tb="$tb" 'BEGIN {
            best = pg; if (pp > best) best = pp; if (pa > best) best = pa
            printf "| %s | %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2fx | %.2fx | %.3f | %.3f | %.2fx |\n",
                tls, s, ug, ub, tg, tb, up, tp, pg, pp, pa, (best > 0 ? ug / best : 0),
                (best > 0 ? ub / best : 0), uc, tc, (tc > 0 ? uc / tc : 0)
        }'
    done
done
echo
echo "Targets (issue 28): tide ucx >= 0.8x the best ucx_perftest mode at >= 256KiB; tided CPU per GB"
echo "for GETs <= 0.25x tide://'s. Load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)."
