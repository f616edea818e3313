# shellcheck shell=bash
# procs.sh — sourced by the bench scripts that start servers (bench/net.sh, bench/mooncake.sh):
# stop_pid PID sends SIGTERM, waits up to 5 s for the process to go, then SIGKILLs it, and
# reaps it. An empty PID or one already gone is not an error.
# wait_ready FILE PID LOG WHO waits up to 30 s for a tided's --ready-file while PID lives;
# when it does not come, prints "WHO: tided did not start:" and LOG, and exits 1.
stop_pid() {
    local pid="$1"
    [ -n "$pid" ] || return 0
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
    fi
    wait "$pid" 2>/dev/null || true
}

wait_ready() {
    local file="$1" pid="$2" log="$3" who="$4"
    for _ in $(seq 300); do
        [ -s "$file" ] && return 0
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    [ -s "$file" ] && return 0
    echo "$who: tided did not start:" >&2
    cat "$log" >&2
    exit 1
}
