"""scripts/gpu-check.sh, the command a GPU machine runs once when one is lent, run here whole
without a GPU (STANDIN=1): from the bundle scripts/gpu-bundle.sh makes, through every stage
(device unit tests, mem://, unix:// and tide://?transport=ucx round trips, vLLM's layouts
through tide.vllm with fp8 and a hybrid model's Mamba states, the matmul interference loop,
the summary), with tests/device/fake_cudart.c as the CUDA runtime libtide loads. What breaks
the script or scripts/gpu_check.py (an API it calls that changed, a stage that cannot run)
fails here, not on the GPU machine. Also: gpu_check.py fails when copies damage data.

Runs in .venv-vllm33: torch (no GPU needed) and a vLLM that tide.vllm imports.
"""

import importlib
import json
import os
import subprocess
import sys

importlib.import_module("torch")  # gpu_check.py needs it: an error here, not a skip

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("BUILD", os.path.join(ROOT, "build"))


def clean_env(**kw):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TIDE_CUDART", "FAKE_CUDART", "TIDE_UCX", "UCX_"))}
    env.update(kw)
    return env


def test_gpu_check_runs_every_stage_without_a_gpu(tmp_path):
    bundle = tmp_path / "bundle"
    r = subprocess.run(["scripts/gpu-bundle.sh", str(bundle)], cwd=ROOT, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    out = tmp_path / "out"
    r = subprocess.run(["scripts/gpu-check.sh"], cwd=ROOT, capture_output=True, text=True,
                       timeout=600,
                       env=clean_env(STANDIN="1", USE_BUNDLE="1", BUNDLE=str(bundle),
                                     PYTHON=sys.executable, OUT=str(out)))
    log = r.stdout + r.stderr
    assert r.returncode == 0, log[-6000:]
    assert "== STANDIN: no GPU" in log
    fake = log.split("== STANDIN: TIDE_CUDART=", 1)[1].split("\n", 1)[0]
    assert f"== bundle {bundle}" in log
    # The device unit tests ran from the bundle and passed.
    assert "0 failed, 0 skipped" in log and "FAIL:" not in log
    assert "names no CUDA library" in log
    # Every layout tide.vllm registers, round-tripped bit-exact.
    lines = log.splitlines()
    for name in ("kv_first: bfloat16", "blocks_first: bfloat16", "mla: bfloat16",
                 "fp8_kv_first: float8_e4m3fn"):
        line = next((x for x in lines if x.startswith(f"[vllm] {name} tensors")), "")
        assert line.endswith("20 blocks saved and loaded bit-exact"), (name, line)
    assert "[vllm] hybrid: 3 attention blocks and the Mamba state at 192" in log
    assert "[interference] 20 bf16 matmuls 256x256" in log
    for label in ("mem", "mem-nobatch", "unix", "ucx"):
        assert f"[{label}] OK: every byte of" in log, label
        res = json.loads((out / f"{label}.json").read_text())
        assert res["bytes"] > 0 and res["save_GBps"] > 0 and res["load_GBps"] > 0, res
        assert fake in res["libcudart"], (fake, res["libcudart"])  # the runtime libtide used
    mem = json.loads((out / "mem.json").read_text())
    assert mem["interference"]["alone_s"] > 0 and mem["interference"]["with_tide_s"] > 0
    assert mem["pin_s_per_GiB"] is not None
    assert "== ucx: GPU regions staged" in log  # Debian's UCX moves no CUDA memory
    assert log.rstrip().endswith("PASSED")


def test_gpu_check_fails_when_copies_damage_data(tmp_path):
    fake = tmp_path / "libcudart.so.13"
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-DFAKE_VERSION=13000",
                    "-Wl,-soname,libcudart.so.13", "-o", str(fake),
                    os.path.join(ROOT, "tests", "device", "fake_cudart.c"), "-pthread"],
                   check=True, timeout=120)
    args = [sys.executable, os.path.join(ROOT, "scripts", "gpu_check.py"), "--standin",
            "--lib", os.path.join(BUILD, "libtide.so"), "--url", "mem://?capacity=256MiB",
            "--blocks", "8", "--reps", "1", "--layers", "2"]
    ok = subprocess.run(args, capture_output=True, text=True, timeout=300,
                        env=clean_env(TIDE_CUDART=str(fake)))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = subprocess.run(args, capture_output=True, text=True, timeout=300,
                         env=clean_env(TIDE_CUDART=str(fake), FAKE_CUDART_FLIP="1"))
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "FAIL: c0.0: layer 0 differs after the round trip" in bad.stdout
