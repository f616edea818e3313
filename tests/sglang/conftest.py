"""Fixtures of the tests of tide.sglang against SGLang 0.5.23's own classes on CPU
(.venv-sglang, scripts/sglang-env.sh; run by `make test-sglang` against build/libtide.so and
build/tide): tided processes (TCP and a unix socket) and SGLang's real host pools
(MHATokenToKVPoolHost, MambaPoolHost) over small CPU device buffers."""

import os
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("BUILD", os.path.join(ROOT, "build"))
sys.path.insert(0, os.path.join(ROOT, "python"))
os.environ.setdefault("TIDE_LIB", os.path.join(BUILD, "libtide.so"))
os.environ.setdefault("TIDE_BIN", os.path.join(BUILD, "tide"))
# SGLang's page hash (HiCacheController's, tests/sglang/test_cache_controller.py) is a C++
# extension it compiles on first use with torch's builder (g++, ninja, -lcrypto): built under
# build/, not in ~/.cache.
os.environ.setdefault("TORCH_EXTENSIONS_DIR", os.path.join(BUILD, "torch-extensions"))

import torch  # noqa: E402

L, H, D, PAGE, TOKENS = 2, 2, 8, 4, 64  # layers, heads, head dim, page size, device tokens


class Tided:
    """One tided on a free loopback port (and a unix socket), stopped by its pid."""

    def __init__(self, tmp, name, capacity="64MiB", token=None):
        self.dir = tmp / name
        self.dir.mkdir()
        self.sock = str(self.dir / "tide.sock")
        ready, self.log = self.dir / "ready", self.dir / "tided.log"
        args = [os.environ["TIDE_BIN"], "serve", "--port", "0", "--metrics-port", "0",
                "--capacity", capacity, "--unix", self.sock, "--ready-file", str(ready)]
        if token:
            (self.dir / "token").write_text(token)
            args += ["--auth-token-file", str(self.dir / "token")]
        with open(self.log, "wb") as logf:
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=logf,
                                         stderr=logf)
        deadline = time.monotonic() + 15
        while not (ready.exists() and ready.read_text().strip()):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"tided did not start: {self.log.read_text()}")
            time.sleep(0.02)
        self.port = int(ready.read_text().split()[0])
        self.tcp = f"tide://127.0.0.1:{self.port}"
        self.unix = f"unix://{self.sock}"

    def stop(self, sig=None):
        if self.proc.poll() is None:
            if sig is None:
                self.proc.terminate()
            else:
                self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def tided(tmp_path):
    t = Tided(tmp_path, "tided")
    yield t
    t.stop()


@pytest.fixture
def cluster(tmp_path):
    nodes = [Tided(tmp_path, f"n{i}") for i in range(2)]
    yield nodes
    for n in nodes:
        n.stop()


def mha_host(layout="page_first", dtype=torch.bfloat16, seed=None):
    """SGLang's MHATokenToKVPoolHost over CPU K/V buffers (pin_memory off: no GPU)."""
    from sglang.srt.mem_cache.device_pool_info import KVBufferLayout, KVBuffers, MHABufferInfo
    from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost

    k = tuple(torch.zeros(TOKENS, H, D, dtype=dtype) for _ in range(L))
    v = tuple(torch.zeros(TOKENS, H, D, dtype=dtype) for _ in range(L))
    bufs = KVBuffers(k=k, v=v, k_data_ptrs=torch.tensor([t.data_ptr() for t in k]),
                     v_data_ptrs=torch.tensor([t.data_ptr() for t in v]),
                     layout=KVBufferLayout.NHD)
    info = MHABufferInfo(buffers=bufs, page_size=PAGE, head_num=H, head_dim=D, v_head_dim=D,
                         dtype=dtype, device=torch.device("cpu"))
    host = MHATokenToKVPoolHost(info, 2.0, 0, PAGE, layout, pin_memory=False, device="cpu",
                                device_capacity_tokens=TOKENS, start_layer=0, end_layer=L)
    host._device_bufs = (k, v)  # keep the device tensors alive with the pool
    return host


def mamba_host(layout="page_first"):
    """SGLang's MambaPoolHost (a float32 temporal state, one bf16 conv state per layer)."""
    from sglang.srt.mem_cache.device_pool_info import MambaStateBufferInfo
    from sglang.srt.mem_cache.pool_host.mamba import MambaPoolHost

    temporal = torch.zeros(L, 16, 3, 5, dtype=torch.float32)
    conv = (torch.zeros(L, 16, 4, 2, dtype=torch.bfloat16),)
    host = MambaPoolHost(MambaStateBufferInfo(temporal=temporal, conv=conv), 2.0, 0,
                         device_capacity=16, pin_memory=False, device="cpu", layout=layout)
    host._device_bufs = (temporal, conv)
    return host


def storage_config(url, model="tiny-model", tp_rank=0, tp_size=1, mla=False, **extra):
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig

    cfg = {"backend_name": "tide", "module_path": "tide.sglang",
           "class_name": "TideHiCacheStorage", "tide_url": url}
    cfg.update(extra)
    return HiCacheStorageConfig(
        tp_rank=tp_rank, tp_size=tp_size, pp_rank=0, pp_size=1, attn_cp_rank=0,
        attn_cp_size=1, is_mla_model=mla, enable_storage_metrics=False,
        is_page_first_layout=True, model_name=model, extra_config=cfg)


def fill(host, indices, seed):
    """Write seeded random bytes into the host pool's pages at `indices` (page starts)."""
    g = torch.Generator().manual_seed(seed)
    for i in indices:
        page = host.get_data_page(i, flat=True)
        data = torch.randint(0, 255, (page.numel() * page.element_size(),), dtype=torch.uint8,
                             generator=g)
        host.set_from_flat_data_page(i, data.view(page.dtype))


def page_bytes(host, i):
    p = host.get_data_page(i, flat=True).contiguous()
    return bytes(p.view(torch.uint8).numpy().tobytes())
