#!/bin/sh
# lmcache.sh — LMCache 0.5.6's own L2 benchmark (`lmcache bench l2`, in .venv-lmcache from
# scripts/lmcache-env.sh) against tide three ways, in one run on the same machine: its `resp`
# adapter on redis-server (the baseline), its `resp` adapter on tided's RESP port, and its
# `native_plugin` adapter with tide.lmcache over tide:// and unix://. Prints store and load
# MB/s (LMCache's figures, average of ROUNDS rounds) and each path's ratio to resp on
# redis-server. KEYS keys of SIZE_KB KiB a submit (defaults 16, 256), ROUNDS (default 5).
# Every server it starts is stopped by its pid; ports are fixed loopback ones (BASE_PORT).
set -eu
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv-lmcache}
KEYS=${KEYS:-16} SIZE_KB=${SIZE_KB:-256} ROUNDS=${ROUNDS:-5} BASE_PORT=${BASE_PORT:-17480}
[ -x "$VENV/bin/lmcache" ] || { echo "lmcache.sh: no $VENV (run scripts/lmcache-env.sh)" >&2; exit 1; }
tmp=${KEEP:-$(mktemp -d)}; mkdir -p "$tmp"
pids=""
# shellcheck disable=SC2154 # p is the trap loop's own variable
trap 'for p in $pids; do kill "$p" 2>/dev/null || true; done; [ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
export LMCACHE_DISABLE_BANNER=1 PYTHONPATH="$PWD/python" TIDE_LIB="$PWD/build/libtide.so"
redis-server --port $((BASE_PORT + 1)) --bind 127.0.0.1 --save "" --appendonly no \
    --maxmemory 1gb >"$tmp/redis.log" 2>&1 &
pids="$pids $!"
build/tide serve --port $((BASE_PORT + 2)) --metrics-port 0 --resp-port $((BASE_PORT + 3)) \
    --capacity 1GiB --unix "$tmp/tided.sock" >"$tmp/tided.log" 2>&1 &
pids="$pids $!"
sleep 1
one() { # name, adapter JSON
    "$VENV/bin/lmcache" bench l2 --l2-adapter "$2" --num-keys "$KEYS" --data-size-kb "$SIZE_KB" \
        --rounds "$ROUNDS" --format json 2>"$tmp/$1.err" | sed -n '/^{/,/^}/p' >"$tmp/$1.json"
    if [ ! -s "$tmp/$1.json" ]; then # a path that gave no figures is named, with its errors
        echo "lmcache.sh: $1: lmcache bench l2 gave no figures; the end of its stderr:" >&2
        tail -n 5 "$tmp/$1.err" >&2
        exit 1
    fi
}
one redis "{\"type\":\"resp\",\"host\":\"127.0.0.1\",\"port\":$((BASE_PORT + 1)),\"num_workers\":2}"
one tided-resp "{\"type\":\"resp\",\"host\":\"127.0.0.1\",\"port\":$((BASE_PORT + 3)),\"num_workers\":2}"
one tide-native-tcp "{\"type\":\"native_plugin\",\"module_path\":\"tide.lmcache\",\"class_name\":\"TideConnector\",\"adapter_params\":{\"url\":\"tide://127.0.0.1:$((BASE_PORT + 2))\"}}"
one tide-native-unix "{\"type\":\"native_plugin\",\"module_path\":\"tide.lmcache\",\"class_name\":\"TideConnector\",\"adapter_params\":{\"url\":\"unix://$tmp/tided.sock\"}}"
/usr/bin/python3 - "$tmp" "$KEYS" "$SIZE_KB" "$ROUNDS" <<'PY'
import json, sys
tmp, keys, kb, rounds = sys.argv[1:]
def figs(name):
    d = json.load(open(f"{tmp}/{name}.json"))
    ops = {o["operation"]: o for k, o in d["metrics"].items() if k.startswith("op_")}
    return {op: ops[op]["throughput_avg_mbps"] for op in ("Store", "Load")}
base = figs("redis")
print(f"lmcache bench l2: {keys} keys x {kb} KiB a submit, {rounds} rounds")
print("| path | store MB/s | load MB/s | store / redis | load / redis |")
print("|---|---|---|---|---|")
for name in ("redis", "tided-resp", "tide-native-tcp", "tide-native-unix"):
    f = figs(name)
    print(f"| {name} | {f['Store']:.0f} | {f['Load']:.0f} | {f['Store'] / base['Store']:.2f} |"
          f" {f['Load'] / base['Load']:.2f} |")
PY
