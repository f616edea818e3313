#!/usr/bin/env bash
# gpu-check.sh — the GPU check of issue 16, for one machine with a CUDA GPU, PyTorch and the
# CUDA toolkit, and no network. Sized to finish in well under 5 minutes on one H200.
#
#   scripts/gpu-check.sh            (PYTHON=/path/to/python3-with-torch to pick the interpreter)
#   STANDIN=1 scripts/gpu-check.sh  (no GPU: every stage through a stand-in CUDA runtime)
#
# 1. Says what the machine has (GPU, driver, nvcc, the Python that imports torch) and which
#    of the build's Debian libraries are missing (libxxhash, libssl, libcjson, liburing,
#    libcurl): nothing is installed or downloaded. With one missing it uses the bundle that
#    scripts/gpu-bundle.sh made elsewhere ($BUNDLE, default build/gpu-bundle: libtide.so,
#    tide, the test runner and their libraries), putting on LD_LIBRARY_PATH only the
#    libraries ldd reports missing here; without a bundle, a prebuilt build/libtide.so and
#    build/tide whose libraries all resolve here; else it stops and says what to install.
# 2. Builds libtide and tided (make) where it can, runs the device unit tests (the test
#    device kind; the CUDA kind against a stand-in runtime built with cc, and opening the
#    real GPU: the runtime it loaded and how it copies), and checks that libtide.so links no
#    CUDA library.
# 3. scripts/gpu_check.py through mem:// (the embedded pool), again with
#    TIDE_CUDA_BATCH=0 (one cudaMemcpyAsync per run instead of cudaMemcpyBatchAsync, to see
#    which is faster), and through unix:// against a tided it starts here and stops by PID:
#    paged KV caches allocated with torch on the GPU, prefixes saved and loaded, every byte
#    compared, save and load GB/s against cudaMemcpyAsync of the same bytes between device
#    and pinned host memory in the same run (target: 0.8x, objects of 2 MiB made of 64
#    pages). The mem:// run also checks tide.vllm's tensor -> region code on CUDA tensors in
#    vLLM's layouts (K/V planes per layer, blocks-first, MLA, Mamba state views), and the
#    ordering against the engine's stream: a ~0.5 s sleep kernel queued before the kernels
#    that write the pages, so that a save that does not wait for the forward pass, or a load
#    that does not wait for an earlier pass writing its blocks, is caught; with the CPU time
#    the process spends while the save waits (a spinning job thread shows as ~1 core); then
#    fp8 K/V and a hybrid model's attention and Mamba states (conv + SSM) round-tripped; and
#    the engine's slowdown: a bf16 matmul loop timed alone and while tide saves and loads.
# 4. The same through tide://...?transport=ucx against a tided with --ucx-port: with a
#    CUDA-enabled UCX (TIDE_UCX_LIBDIR, or the libucx-cu12/cu13 wheel the Python imports)
#    the GPU regions go straight between the GPU and the pool by UCX, else they are staged;
#    the log says which path ran and why (the direct path needs a GPU to be checked at all).
#
# STANDIN=1 runs all of it where there is no GPU (make check does, so the script and
# gpu_check.py are known to run before a GPU machine is lent): a Python with torch (no CUDA
# needed), tests/device/fake_cudart.c built here as the CUDA runtime libtide loads
# (TIDE_CUDART), host tensors it counts as device memory, smaller sizes, no ordering stage
# (a sleep kernel needs a GPU); every comparison is made, the figures mean nothing.
#
# Writes its log and figures under $OUT (default build/gpu-check). Exit status: 0 when all
# ran and compared equal; 1 on a failure; 2 when the machine lacks a GPU or torch; 3 when
# the build's libraries are missing and no usable prebuilt library is here.
set -uo pipefail

cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
OUT=${OUT:-$ROOT/build/gpu-check}
mkdir -p "$OUT"
exec > >(tee "$OUT/gpu-check.log") 2>&1

say() { printf '== %s\n' "$*"; }
T0=$(date +%s)
status=0
TIDED_PID=""
TMPD=$(mktemp -d)
# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() {
    if [ -n "$TIDED_PID" ] && kill -0 "$TIDED_PID" 2>/dev/null; then
        kill "$TIDED_PID" 2>/dev/null
        wait "$TIDED_PID" 2>/dev/null
    fi
    rm -rf "$TMPD"
}
trap cleanup EXIT

# ---- 1. the machine ------------------------------------------------------------------
say "machine: $(uname -srm), $(nproc) CPUs"
if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader |
        sed 's/^/== GPU: /'
else
    say "no nvidia-smi on PATH"
fi
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
if [ -x "$NVCC" ]; then
    say "nvcc: $("$NVCC" --version | tail -1)"
else
    say "no nvcc (the CUDA kind then builds with its own declarations)"
fi

PY=""
for cand in ${PYTHON:-} python3 python /usr/bin/python3; do
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import torch' 2>/dev/null; then
        PY=$(command -v "$cand")
        break
    fi
done
if [ -z "$PY" ]; then
    say "MISSING: no Python here imports torch (set PYTHON=/path/to/python3)"
    exit 2
fi
say "python: $PY ($("$PY" -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())'))"
# The sizes of the Python stages: a GPU's, or the stand-in's (host memory, 2 cores).
PYARGS=()
POOL=6GiB PREFAULT=(--prefault) MEMURL='mem://?capacity=6GiB&prefault=1'
if [ -n "${STANDIN:-}" ]; then
    say "STANDIN: no GPU; libtide loads tests/device/fake_cudart.c as its CUDA runtime"
    if ! ${CC:-cc} -shared -fPIC -O1 -DFAKE_VERSION=13000 -Wl,-soname,libcudart.so.13 \
        -o "$TMPD/libcudart.so.13" tests/device/fake_cudart.c -pthread; then
        say "FAIL: the stand-in runtime does not build"
        exit 1
    fi
    export TIDE_CUDART=$TMPD/libcudart.so.13
    say "STANDIN: TIDE_CUDART=$TIDE_CUDART"
    PYARGS=(--standin --layers 4 --blocks 16)
    POOL=1GiB PREFAULT=() MEMURL='mem://?capacity=1GiB'
elif ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    say "MISSING: torch sees no CUDA device"
    exit 2
fi

# The build's libraries: header, library, Debian package.
CC=${CC:-cc}
missing=""
check_dep() {
    if ! printf '#include <%s>\nint main(void) { return 0; }\n' "$1" |
        "$CC" -x c - -o "$TMPD/dep" "-l$2" 2>/dev/null; then
        missing="$missing $3"
        say "MISSING: $3 (<$1>, -l$2)"
    fi
}
check_dep xxhash.h xxhash libxxhash-dev
check_dep openssl/sha.h crypto libssl-dev
check_dep cjson/cJSON.h cjson libcjson-dev
check_dep liburing.h uring liburing-dev
check_dep curl/curl.h curl libcurl4-openssl-dev

# ---- 2. build ------------------------------------------------------------------------
LIB=$ROOT/build/libtide.so
TIDE=$ROOT/build/tide
TESTS=$ROOT/build/tests/tide-tests
TBUILD=$ROOT/build
BUNDLE=${BUNDLE:-$ROOT/build/gpu-bundle}
case $BUNDLE in /*) ;; *) BUNDLE=$ROOT/$BUNDLE ;; esac
# Use the bundle: its binaries, and from its lib/ only what ldd finds missing here.
use_bundle() {
    LIB=$BUNDLE/libtide.so
    TIDE=$BUNDLE/tide
    TESTS=$BUNDLE/tide-tests
    TBUILD=$BUNDLE
    local have need libs=$TMPD/libs
    have=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
    need=$(grep -o 'GLIBC_[0-9.]*' "$BUNDLE/MANIFEST" | sed 's/GLIBC_//' | sort -uV | tail -1)
    say "bundle $BUNDLE: $(head -2 "$BUNDLE/MANIFEST" | tr '\n' ' ')"
    say "glibc here $have; the bundle needs $need"
    if [ -n "$have" ] && [ -n "$need" ] &&
        [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -1)" != "$need" ]; then
        say "this glibc is older than the bundle needs: build here instead (install$missing)"
        exit 3
    fi
    mkdir -p "$libs"
    local name
    for name in $(ldd "$LIB" "$TIDE" "$TESTS" 2>/dev/null | awk '/not found/{print $1}' | sort -u); do
        if [ -f "$BUNDLE/lib/$name" ]; then
            ln -sf "$BUNDLE/lib/$name" "$libs/$name"
        fi
    done
    # What the bundled libraries need in turn, until nothing more is missing.
    for _ in 1 2 3 4; do
        for name in $(LD_LIBRARY_PATH=$libs ldd "$libs"/* "$LIB" "$TIDE" "$TESTS" 2>/dev/null |
            awk '/not found/{print $1}' | sort -u); do
            [ -f "$BUNDLE/lib/$name" ] && ln -sf "$BUNDLE/lib/$name" "$libs/$name"
        done
    done
    export LD_LIBRARY_PATH=$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    say "from the bundle (missing here): $(find "$libs" -mindepth 1 -printf '%f ')"
    if ldd "$LIB" "$TIDE" "$TESTS" | grep 'not found'; then
        say "the bundle lacks a library this machine lacks too: stopping"
        exit 3
    fi
}
run_unit() {
    say "device unit tests (test kind; the CUDA kind against a stand-in runtime and on this GPU)"
    if ! TIDE_BIN=$TIDE TIDE_BUILD=$TBUILD timeout 300 "$TESTS" device_ connector_device_ \
        >"$OUT/unit.log" 2>&1; then
        status=1
        grep -E '^(FAIL|    )' "$OUT/unit.log" | head -20
        say "FAIL: device unit tests (log: $OUT/unit.log)"
    fi
    grep -E '^cuda device [0-9]+: runtime' "$OUT/unit.log" | sed 's/^/== real GPU: /'
    tail -1 "$OUT/unit.log"
}
if [ -z "$missing" ] && [ -z "${USE_BUNDLE:-}" ]; then
    say "building (make -j$(nproc))"
    if ! make -j"$(nproc)" build/libtide.so build/tide build/tided build/tests/tide-tests \
        >"$OUT/build.log" 2>&1; then
        tail -30 "$OUT/build.log"
        say "FAIL: the build failed (log: $OUT/build.log)"
        exit 1
    fi
    run_unit
elif [ -f "$BUNDLE/libtide.so" ] && [ -f "$BUNDLE/MANIFEST" ]; then
    say "not building here (missing:${missing:- none, USE_BUNDLE set}): using the bundle"
    use_bundle
    run_unit
else
    say "cannot build here: install$missing (Debian), or bring a bundle (scripts/gpu-bundle.sh)"
    if [ -f "$LIB" ] && [ -x "$TIDE" ] && ! ldd "$LIB" "$TIDE" | grep -q 'not found'; then
        say "using the prebuilt build/libtide.so and build/tide: their libraries resolve"
    else
        [ -f "$LIB" ] && ldd "$LIB" | grep 'not found'
        say "no usable prebuilt library either: stopping"
        exit 3
    fi
fi
if ldd "$LIB" | grep -Ei 'cuda|libnv'; then
    say "FAIL: libtide.so links a CUDA library"
    status=1
else
    say "ldd $LIB names no CUDA library"
fi

# ---- 3. saves and loads --------------------------------------------------------------
run_py() { # label url [extra args]
    local label=$1 url=$2
    shift 2
    say "$label: $url"
    if ! timeout 180 "$PY" scripts/gpu_check.py --lib "$LIB" --url "$url" --label "$label" \
        --json "$OUT/$label.json" "${PYARGS[@]}" "$@"; then
        say "FAIL: $label"
        status=1
    fi
}

if [ -n "${STANDIN:-}" ]; then
    run_py mem "$MEMURL" --bad-input --vllm-layouts --interference 256 --reps 1
else
    run_py mem "$MEMURL" --bad-input --vllm-layouts --ordering --interference 8192
fi
TIDE_CUDA_BATCH=0 run_py mem-nobatch "$MEMURL" --reps 2

SOCK=$TMPD/tide.sock
"$TIDE" serve --port 0 --metrics-port 0 --capacity "$POOL" "${PREFAULT[@]}" --unix "$SOCK" \
    --ready-file "$TMPD/ready" --log-level warn 2>"$OUT/tided.log" &
TIDED_PID=$!
for _ in $(seq 1 600); do
    [ -s "$TMPD/ready" ] && break
    kill -0 "$TIDED_PID" 2>/dev/null || break
    sleep 0.1
done
if [ -s "$TMPD/ready" ]; then
    say "tided pid $TIDED_PID on unix://$SOCK"
    run_py unix "unix://$SOCK"
    kill "$TIDED_PID"
    if wait "$TIDED_PID"; then
        say "tided stopped (exit 0)"
    else
        say "FAIL: tided exited with status $?"
        status=1
    fi
    TIDED_PID=""
else
    say "FAIL: tided did not start (log: $OUT/tided.log)"
    cat "$OUT/tided.log"
    status=1
fi

# ---- 4. tide:// over UCX: GPU regions straight, or staged --------------------------------
# The same round trip through tide://...?transport=ucx (issue 28). With a UCX that moves
# CUDA memory (TIDE_UCX_LIBDIR when set, else the libucx wheel this Python imports: PyPI's
# libucx-cu12 / libucx-cu13), the connector registers its GPU regions with UCX as CUDA
# memory and values go by UCX's rendezvous between the GPU and tided's pool ("moved
# straight" below);
# with Debian's UCX (no CUDA memory) they are staged through the pinned buffers, and the
# line says why. Either way every byte is compared. Skipped when this build has no UCX.
if [ -z "${TIDE_UCX_LIBDIR:-}" ]; then
    WHEEL_UCX=$("$PY" -c 'import libucx, os; print(os.path.join(os.path.dirname(libucx.__file__), "lib"))' 2>/dev/null || true)
    if [ -n "$WHEEL_UCX" ] && [ -d "$WHEEL_UCX" ]; then export TIDE_UCX_LIBDIR=$WHEEL_UCX; fi
fi
say "UCX: ${TIDE_UCX_LIBDIR:-the system library (no TIDE_UCX_LIBDIR, no libucx wheel)}"
# One host, loopback: UCX's TCP transport (which tide uses only when told, docs/UCX.md)
# carries the first endpoint, on lo alone.
export TIDE_UCX_TCP=1 UCX_NET_DEVICES="${UCX_NET_DEVICES:-lo}"
"$TIDE" serve --port 0 --metrics-port 0 --capacity 2GiB --ucx-port 0 \
    --ready-file "$TMPD/ready-ucx" --log-level info 2>"$OUT/tided-ucx.log" &
TIDED_PID=$!
for _ in $(seq 1 600); do
    [ -s "$TMPD/ready-ucx" ] && break
    kill -0 "$TIDED_PID" 2>/dev/null || break
    sleep 0.1
done
if [ -s "$TMPD/ready-ucx" ] && ! grep -q "UCX data path off\|without UCX" "$OUT/tided-ucx.log"; then
    UPORT=$(awk '{print $1}' "$TMPD/ready-ucx")
    TIDE_UCX_DEBUG=1 run_py ucx "tide://127.0.0.1:$UPORT?transport=ucx" --blocks 64 --reps 1 \
        2>"$OUT/ucx-client.log"
    grep -h 'ucx: ' "$OUT/ucx-client.log" | sort -u | sed 's/^/== ucx path: /'
    grep -E 'Traceback|Error|FAIL' "$OUT/ucx-client.log" | head -5
    if grep -q 'moved straight' "$OUT/ucx-client.log"; then
        say "ucx: GPU regions moved straight by UCX (CUDA memory): checked"
    else
        say "ucx: GPU regions staged (no CUDA-enabled UCX here): the direct path NOT checked"
    fi
    kill "$TIDED_PID"
    wait "$TIDED_PID" || { say "FAIL: tided (UCX) exited with status $?"; status=1; }
else
    say "ucx: skipped (tided's UCX did not start: $(grep -m1 'UCX' "$OUT/tided-ucx.log"))"
    kill "$TIDED_PID" 2>/dev/null
    wait "$TIDED_PID" 2>/dev/null
fi
TIDED_PID=""

# ---- summary -------------------------------------------------------------------------
say "summary (GB/s; ratio = tide / cudaMemcpyAsync of the same bytes, target 0.8)"
for f in "$OUT"/mem.json "$OUT"/mem-nobatch.json "$OUT"/unix.json "$OUT"/ucx.json; do
    [ -f "$f" ] || continue
    "$PY" - "$f" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"== {r['label']:12s} save {r['save_GBps']:6.1f} ({r['save_ratio']:.2f}x of d2h "
      f"{r['memcpy_d2h_GBps']:.1f})  load {r['load_GBps']:6.1f} ({r['load_ratio']:.2f}x of h2d "
      f"{r['memcpy_h2d_GBps']:.1f})  {r['bytes'] / 2**30:.2f} GiB, {r['object_bytes'] / 2**20:g} MiB objects")
i = r.get("interference")
if i:
    print(f"== {r['label']:12s} bf16 matmul {i['matmul_n']}: {i['slowdown']:.2f}x the time while tide "
          f"moved {i['tide_GBps_meanwhile']:.1f} GB/s beside it")
if r.get("pin_s_per_GiB") is not None:
    print(f"== {r['label']:12s} pool pinned in {r['pin_s']:.2f} s ({r['pin_s_per_GiB']:.3f} s per GiB)")
EOF
done
say "took $(($(date +%s) - T0)) s; $([ "$status" -eq 0 ] && echo PASSED || echo FAILED)"
exit "$status"
