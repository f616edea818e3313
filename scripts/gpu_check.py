#!/usr/bin/env python3
"""gpu_check.py — the GPU part of scripts/gpu-check.sh: paged KV caches allocated with torch
on a CUDA device, saved and loaded through libtide's connector (device regions: the GPU's copy
engine moves the bytes between the pages and tide's pool), compared byte for byte, and timed
against cudaMemcpyAsync of the same bytes between device memory and pinned host memory in the
same run.

Layout: LAYERS tensors of shape (2, NUM_BLOCKS, 16, 8, 128) bfloat16 (vLLM's K/V planes), so
one block is 2 x 32 KiB per layer and one object (a block across every layer) is 64 pages,
2 MiB. It talks to libtide.so with ctypes directly (prototypes below), so it needs nothing of
the tide Python package.

    gpu_check.py --lib build/libtide.so --url mem://?capacity=6GiB [--label mem] [--json out]

With --vllm-layouts it also registers CUDA tensors through tide.vllm (python/tide, the
tensor -> region code vLLM's workers run) in vLLM's layouts — FlashAttention's (2, blocks,
...) K/V planes per layer, FlashInfer's blocks-first, MLA's latent, fp8 K/V, a hybrid model's
attention and Mamba states (conv and SSM views into one raw buffer per block) — and round-trips
each bit-exact. With --interference it times a bf16 matmul loop on the engine's stream alone
and while saves and loads run beside it (the engine's slowdown).

With --standin (make check runs it so, on machines without a GPU) the tensors are host memory
that the stand-in CUDA runtime libtide loads then (TIDE_CUDART=tests/device/fake_cudart.c
built as a library) counts as device memory: every call into libtide and every comparison is
the GPU run's, the figures mean nothing, and the ordering check (it needs a sleep kernel) is
not run.

Exit status: 0 when every byte compared equal and every error case answered as it should
(the speed verdict is printed, not turned into a failure); 1 on a correctness failure; 2 when
torch or a GPU is missing.
"""

import argparse
import ctypes as C
import json
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

LAYERS = 32
BLOCK_TOKENS = 16
KV_HEADS = 8
HEAD_SIZE = 128
HASH_LEN = 16
TIDE_CONNECTOR_SCHEDULER, TIDE_CONNECTOR_WORKER = 0, 1
LOAD, SAVE = 1, 2
TIDE_MEM_CUDA = 1
TIDE_EDEVICE = -1023


class Dev:
    """Where the check's KV caches live: CUDA tensors made by torch on GPU 0 and the engine's
    current stream; or, standing in for a GPU, host tensors the stand-in runtime is told are
    device memory (fake_declare) and the legacy stream 0."""

    def __init__(self, standin):
        import torch

        self.torch, self.standin = torch, standin
        if standin:
            path = os.environ.get("TIDE_CUDART", "")
            if not path:
                fail("--standin needs TIDE_CUDART: the stand-in runtime libtide is to load")
            self.fake = C.CDLL(path)
            self.fake.fake_declare.restype = C.c_int
            self.fake.fake_declare.argtypes = [C.c_void_p, C.c_size_t, C.c_int]
            self.dev = torch.device("cpu")
        else:
            self.dev = torch.device("cuda", 0)
            torch.cuda.set_device(self.dev)

    def name(self):
        if self.standin:
            return f"no GPU: host memory through the stand-in runtime {os.environ['TIDE_CUDART']}"
        return self.torch.cuda.get_device_name(self.dev)

    def _made(self, x):
        if self.standin:
            st = x.untyped_storage()
            if self.fake.fake_declare(st.data_ptr(), st.nbytes(), 0) != 0:
                fail("the stand-in runtime's table of device allocations is full")
        return x

    def zeros(self, shape, dtype):
        return self._made(self.torch.zeros(shape, dtype=dtype, device=self.dev))

    def randn(self, shape, dtype, gen=None):
        return self._made(self.torch.randn(shape, dtype=dtype, device=self.dev, generator=gen))

    def randbytes(self, shape, dtype, seed):
        """Random bits of any dtype (fp8 included: no NaN checks get in the way)."""
        g = self.generator(seed)
        x = self.torch.randint(0, 256, shape[:-1] + (shape[-1] * _esize(self.torch, dtype),),
                               dtype=self.torch.uint8, device=self.dev, generator=g)
        return self._made(x.view(dtype))

    def index(self, ids):
        return self.torch.tensor(ids, device=self.dev)

    def generator(self, seed):
        return self.torch.Generator(device=self.dev).manual_seed(seed)

    def sync(self):
        """Wait for what the engine's stream has queued (not the whole device: tide's own
        copy streams run on beside it)."""
        if not self.standin:
            self.torch.cuda.current_stream(self.dev).synchronize()

    def stream(self):
        if self.standin:
            return 0
        return self.torch.cuda.current_stream(self.dev).cuda_stream

    def new_stream(self):
        """Another stream of the device (the legacy stream 0 standing in), as an integer;
        kept alive by the Dev."""
        if self.standin:
            return 0
        st = self.torch.cuda.Stream(self.dev)
        self._streams = getattr(self, "_streams", []) + [st]
        return st.cuda_stream

    def for_vllm(self, x):
        """The tensor as tide.vllm's workers are handed it: on the GPU itself; standing in,
        a view of the host tensor that says it is on cuda:0."""
        return _AsCuda(x) if self.standin else x


def _esize(torch, dtype):
    return torch.empty((), dtype=dtype).element_size()


class _CudaZero:
    type, index = "cuda", 0

    def __str__(self):
        return "cuda:0"


class _AsCuda:
    """A host tensor that says it is on cuda:0 (tide.vllm reads .device to choose the CUDA
    path); everything else is the tensor's own."""

    device = _CudaZero()

    def __init__(self, t):
        self._t = t

    def __getattr__(self, k):
        return getattr(self._t, k)


def fail(msg):
    print(f"FAIL: {msg}", flush=True)
    sys.exit(1)


def load_lib(path):
    lib = C.CDLL(path)
    p, i32, i64, u64, sz = C.c_void_p, C.c_int, C.c_int64, C.c_uint64, C.c_size_t
    protos = {
        "tide_open": (i32, [C.c_char_p, C.POINTER(p)]),
        "tide_close": (None, [p]),
        "tide_errmsg": (C.c_char_p, [p]),
        "tide_strerror": (C.c_char_p, [i32]),
        "tide_prefix_hashes": (i32, [i32, C.POINTER(C.c_uint32), sz, sz, p, sz, p, sz]),
        "tide_connector_create_with_store": (i32, [C.c_char_p, p, i32, C.POINTER(p)]),
        "tide_connector_destroy": (None, [p]),
        "tide_connector_errmsg": (C.c_char_p, [p]),
        "tide_connector_register_device_region": (
            i32,
            [p, i32, i32, i32, p, u64, i64, sz, C.POINTER(i64), C.POINTER(i64), sz],
        ),
        "tide_connector_lookup": (
            i32,
            [p, C.c_char_p, i64, p, sz, sz, i64, C.POINTER(i64)],
        ),
        "tide_connector_update_after_alloc": (
            i32,
            [p, C.c_char_p, C.POINTER(C.c_int32), C.POINTER(sz), sz, i64],
        ),
        "tide_connector_request_step": (
            i32,
            [p, C.c_char_p, i64, i64, p, sz, sz, C.POINTER(C.c_int32), C.POINTER(sz), sz, i32],
        ),
        "tide_connector_request_finished": (i32, [p, C.c_char_p]),
        "tide_connector_build_meta": (i32, [p, C.POINTER(p)]),
        "tide_connector_meta_free": (None, [p]),
        "tide_connector_start_jobs_stream": (i32, [p, p, i32, u64]),
        "tide_connector_wait": (i32, [p]),
        "tide_connector_get_finished": (i32, [p, i32, C.c_char_p, sz]),
        "tide_connector_get_load_errors": (i32, [p, C.POINTER(C.c_int32), sz]),
    }
    for name, (res, args) in protos.items():
        f = getattr(lib, name)
        f.restype, f.argtypes = res, args
    return lib


class Tide:
    def __init__(self, lib, url, layers=LAYERS):
        self.lib = lib
        self.store = C.c_void_p()
        rc = lib.tide_open(url.encode(), C.byref(self.store))
        if rc:
            fail(f"tide_open({url}): {rc} {lib.tide_errmsg(None).decode()}")
        self.doc = json.dumps(
            {
                "model_config": {"model": "org/GpuCheck-8B", "total_num_kv_heads": KV_HEADS},
                "cache_config": {"block_size": BLOCK_TOKENS},
                "parallel_config": {},
                "kv_transfer_config": {
                    "kv_role": "kv_both",
                    "kv_connector_extra_config": {},
                },
                "kv_cache_config": {
                    "kv_cache_groups": [
                        {
                            "kv_cache_spec": {
                                "type": "FullAttentionSpec",
                                "block_size": BLOCK_TOKENS,
                                "num_kv_heads": KV_HEADS,
                                "head_size": HEAD_SIZE,
                                "dtype": "bfloat16",
                            },
                            "layer_names": [f"model.layers.{i}.attn" for i in range(layers)],
                        }
                    ]
                },
            }
        ).encode()

    def connector(self, role):
        c = C.c_void_p()
        rc = self.lib.tide_connector_create_with_store(self.doc, self.store, role, C.byref(c))
        if rc:
            fail(f"connector create: {rc} {self.lib.tide_connector_errmsg(None).decode()}")
        return c

    def check(self, c, rc, what):
        if rc < 0:
            fail(f"{what}: {rc} {self.lib.tide_connector_errmsg(c).decode()}")
        return rc


def register(t, w, caches, expect=0):
    """Register every layer's tensor as a device region: pointer, size and layout from the
    tensor, as tide.vllm does."""
    for x in caches:
        shape = (C.c_int64 * x.dim())(*x.shape)
        strides = (C.c_int64 * x.dim())(*x.stride())
        rc = t.lib.tide_connector_register_device_region(
            w,
            0,
            TIDE_MEM_CUDA,
            x.device.index or 0,
            C.c_void_p(x.data_ptr()),
            x.untyped_storage().nbytes(),
            x.shape[1],
            x.dim(),
            shape,
            strides,
            x.element_size(),
        )
        if expect == 0:
            t.check(w, rc, "register_device_region")
        elif rc != expect:
            fail(f"register_device_region answered {rc}, expected {expect}")
        else:
            return rc
    return 0


def hashes(t, seed, ntok):
    toks = (C.c_uint32 * ntok)(*[(seed * 7919 + i * 31) & 0xFFFFFFFF for i in range(ntok)])
    n = ntok // BLOCK_TOKENS
    out = (C.c_uint8 * (n * HASH_LEN))()
    k = t.lib.tide_prefix_hashes(0, toks, ntok, BLOCK_TOKENS, None, 0, out, n)
    if k != n:
        fail(f"tide_prefix_hashes gave {k}")
    return out, n


def step(t, s, w, stream):
    m = C.c_void_p()
    t.check(s, t.lib.tide_connector_build_meta(s, C.byref(m)), "build_meta")
    n = t.check(w, t.lib.tide_connector_start_jobs_stream(w, m, LOAD | SAVE, stream), "start_jobs")
    t.lib.tide_connector_meta_free(m)
    return n


def _table(ids):
    """A block table as the C API takes it: ids flattened, a count per group. `ids` is one
    group's list, or a list of lists (one per KV-cache group)."""
    groups = ids if ids and isinstance(ids[0], list) else [ids]
    flat = [b for g in groups for b in g]
    return (C.c_int32 * max(len(flat), 1))(*flat), (C.c_size_t * len(groups))(*map(len, groups)), len(groups)


def schedule(t, s, rid, h, nh, ntok, ids, ext, computed=None, run=True):
    """vLLM's scheduler on a new request: the lookup, the allocation (`ext` external tokens
    granted; None: what the lookup offered) and, when `run`, its first step, after which it
    has `computed` tokens (default all). Returns the tokens the lookup offered."""
    arr, cnt, ng = _table(ids)
    new = C.c_int64(-1)
    t.check(s, t.lib.tide_connector_lookup(s, rid, ntok, h, nh, HASH_LEN, 0, C.byref(new)), "lookup")
    if ext is None:
        ext = new.value
    t.check(s, t.lib.tide_connector_update_after_alloc(s, rid, arr, cnt, ng, ext), "update_after_alloc")
    if run:
        first_step(t, s, rid, h, nh, ntok, ids, ntok if computed is None else computed)
    return new.value


def first_step(t, s, rid, h, nh, ntok, ids, computed):
    """A request's first step with its whole block table: `computed` tokens after it (for
    a load vLLM has not scheduled yet, the tokens loaded)."""
    arr, cnt, ng = _table(ids)
    t.check(
        s,
        t.lib.tide_connector_request_step(s, rid, ntok, computed, h, nh, HASH_LEN, arr, cnt, ng, 1),
        "request_step",
    )


def advance(t, s, rid, h, nh, ntok, computed, ngroups):
    """A later step of a running request, no new blocks: it has `computed` tokens after it."""
    arr, cnt, _ = _table([[] for _ in range(ngroups)])
    t.check(
        s,
        t.lib.tide_connector_request_step(s, rid, ntok, computed, h, nh, HASH_LEN, arr, cnt,
                                          ngroups, 0),
        "request_step",
    )


def finished(t, w, kind):
    buf = C.create_string_buffer(1 << 16)
    n = t.lib.tide_connector_get_finished(w, kind, buf, len(buf))
    return [x.decode() for x in buf.raw.split(b"\0")[:n]]


def load_errors(t, w):
    arr = (C.c_int32 * 4096)()
    n = t.lib.tide_connector_get_load_errors(w, arr, 4096)
    return list(arr[:n])


class _Shim:
    """What schedule()/step() need, over handles made by tide.vllm."""

    def __init__(self, lib):
        self.lib = lib

    def check(self, c, rc, what):
        if rc < 0:
            fail(f"{what}: {rc} {self.lib.tide_connector_errmsg(c).decode()}")
        return rc


def vllm_layouts(lib, url, d):
    """CUDA tensors through tide.vllm's region code, in vLLM's layouts, each round-tripped
    and compared bit for bit."""
    import torch

    sys.path.insert(0, os.path.join(ROOT, "python"))
    os.environ.setdefault("TIDE_LIB", os.path.abspath(lib._name))
    import tide

    try:
        import tide.vllm as tv
    except Exception as e:  # an installed vLLM of a version tide.vllm does not take
        print(f"[vllm] SKIPPED: tide.vllm does not import here: {e}", flush=True)
        return

    store = tide.Store(url)
    sh = _Shim(lib)
    nb, bt = 64, 16
    attn = {"block_size": bt, "num_kv_heads": KV_HEADS, "head_size": HEAD_SIZE, "dtype": "bfloat16"}
    fp8 = {**attn, "dtype": "float8_e4m3fn"}
    bf16, f8 = torch.bfloat16, torch.float8_e4m3fn
    # name: (spec, shape, dtype, the pages of block ids `ids` as bytes)
    layouts = {
        "kv_first": ({"type": "FullAttentionSpec", **attn}, (2, nb, bt, KV_HEADS, HEAD_SIZE), bf16,
                     lambda x, ids: x.view(torch.uint8)[:, ids]),
        "blocks_first": ({"type": "FullAttentionSpec", **attn}, (nb, 2, bt, KV_HEADS, HEAD_SIZE),
                         bf16, lambda x, ids: x.view(torch.uint8)[ids]),
        "mla": ({"type": "MLAAttentionSpec", "block_size": bt, "num_kv_heads": 1, "head_size": 576,
                 "dtype": "bfloat16"}, (nb, bt, 576), bf16, lambda x, ids: x.view(torch.uint8)[ids]),
        "fp8_kv_first": ({"type": "FullAttentionSpec", **fp8}, (2, nb, bt, KV_HEADS, HEAD_SIZE), f8,
                         lambda x, ids: x.view(torch.uint8)[:, ids]),
    }
    layers = [f"model.layers.{i}.attn" for i in range(4)]
    for name, (spec, shape, dtype, page) in layouts.items():
        cfg = {
            "model_config": {"model": f"org/GpuCheck-{name}", "total_num_kv_heads": KV_HEADS},
            "cache_config": {"block_size": bt},
            "parallel_config": {},
            "kv_transfer_config": {"kv_connector": "TideStoreConnector", "kv_role": "kv_both",
                                   "kv_connector_extra_config": {}},
            "kv_cache_config": {"num_blocks": nb,
                                "kv_cache_groups": [{"layer_names": layers, "kv_cache_spec": spec}]},
        }
        s = tv.TideStoreConnector(cfg, "scheduler", store=store)
        wp = tv.TideStoreConnector(cfg, "worker", store=store)
        wc = tv.TideStoreConnector(cfg, "worker", store=store)
        prod = {ln: d.randbytes(shape, dtype, 100 + i) for i, ln in enumerate(layers)}
        cons = {ln: d.zeros(shape, dtype) for ln in layers}
        wp.register_kv_caches({k: d.for_vllm(v) for k, v in prod.items()})
        wc.register_kv_caches({k: d.for_vllm(v) for k, v in cons.items()})
        S, WP, WC = (C.c_void_p(C.cast(x._handle(), C.c_void_p).value) for x in (s, wp, wc))
        ntok = 20 * bt + 3
        h, nh = hashes(sh, 77, ntok)
        src, dst = list(range(2, 23)), list(range(40, 61))
        schedule(sh, S, b"p", h, nh, ntok, src, 0)
        step(sh, S, WP, d.stream())
        lib.tide_connector_wait(WP)
        if schedule(sh, S, b"c", h, nh, ntok, dst, None) != 20 * bt:
            fail(f"tide.vllm {name}: the saved prefix is not found")
        step(sh, S, WC, d.stream())
        lib.tide_connector_wait(WC)
        if load_errors(sh, WC):
            fail(f"tide.vllm {name}: load errors")
        d.sync()
        for ln in layers:
            if not torch.equal(page(prod[ln], src[:-1]), page(cons[ln], dst[:-1])):
                fail(f"tide.vllm {name}: layer {ln} differs after the round trip")
        print(f"[vllm] {name}: {str(dtype)[6:]} tensors {tuple(shape)} registered through "
              f"tide.vllm, 20 blocks saved and loaded bit-exact", flush=True)
        del wp, wc, s
    hybrid(lib, store, tv, d)
    # Mixed memory is refused: a host tensor after device ones (standing in, every tensor
    # is host memory: nothing to mix).
    if d.standin:
        return
    raw, conv, ssm = _mamba_pages(d, None)
    w2 = tv.TideStoreConnector(_hybrid_config(), "worker", store=store)
    try:
        w2.register_kv_caches({
            "model.layers.3.self_attn.attn": d.zeros((8, 2, 64, 1, 256), torch.bfloat16),
            "model.layers.0.linear_attn": [conv.cpu(), ssm.cpu()],
        })
        fail("tide.vllm accepted CUDA and CPU tensors in one connector")
    except tide.InvalidArgument as e:
        print(f"[vllm] CUDA and CPU tensors mixed: refused ({str(e)[:100]})", flush=True)


def _hybrid_config():
    """examples/qwen3-next-hybrid-align.json on one rank, its two layers named, 8 blocks."""
    with open(os.path.join(ROOT, "examples", "qwen3-next-hybrid-align.json")) as f:
        cfg = json.load(f)
    cfg["parallel_config"] = {"tensor_parallel_size": 1}
    cfg["kv_transfer_config"]["kv_role"] = "kv_both"
    groups = cfg["kv_cache_config"]["kv_cache_groups"]
    groups[0]["layer_names"] = ["model.layers.3.self_attn.attn"]
    groups[1]["layer_names"] = ["model.layers.0.linear_attn"]
    cfg["kv_cache_config"]["num_blocks"] = 8
    return cfg


def _mamba_pages(d, seed):
    """A Mamba layer's states as vLLM lays them out: conv (3, 2048) bf16 and SSM
    (8, 128, 128) f32, views into one raw device buffer of 8 block pages."""
    import torch

    conv_b, ssm_b = 3 * 2048 * 2, 8 * 128 * 128 * 4
    raw = d.zeros((8, conv_b + ssm_b), torch.uint8) if seed is None else \
        d.randbytes((8, conv_b + ssm_b), torch.uint8, seed)
    conv = raw[:, :conv_b].view(torch.bfloat16).view(8, 3, 2048)
    ssm = raw[:, conv_b:].view(torch.float32).view(8, 8, 128, 128)
    if conv.untyped_storage().data_ptr() != raw.data_ptr():
        fail("torch made a copy of the Mamba state views")
    return raw, conv, ssm


def hybrid(lib, store, tv, d):
    """A hybrid model (examples/qwen3-next-hybrid-align.json: attention blocks of 64 tokens,
    Mamba states in align mode, hashes every 16 tokens): 200 tokens prefilled to the replay
    boundary 192 then 8 more, saved (3 attention blocks, the Mamba state at 192); another
    engine's lookup finds 192 tokens and loads the attention blocks and every byte of the
    conv and SSM states into other block ids."""
    import torch

    cfg = _hybrid_config()
    sh = _Shim(lib)
    attn = "model.layers.3.self_attn.attn"
    pa, ca = d.randbytes((8, 2, 64, 1, 256), torch.bfloat16, 21), d.zeros((8, 2, 64, 1, 256), torch.bfloat16)
    praw, pconv, pssm = _mamba_pages(d, 22)
    craw, cconv, cssm = _mamba_pages(d, None)
    s = tv.TideStoreConnector(cfg, "scheduler", store=store)
    wp = tv.TideStoreConnector(cfg, "worker", store=store)
    wc = tv.TideStoreConnector(cfg, "worker", store=store)
    wp.register_kv_caches({attn: d.for_vllm(pa),
                           "model.layers.0.linear_attn": [d.for_vllm(pconv), d.for_vllm(pssm)]})
    wc.register_kv_caches({attn: d.for_vllm(ca),
                           "model.layers.0.linear_attn": [d.for_vllm(cconv), d.for_vllm(cssm)]})
    print("[vllm] hybrid: attention + Mamba state views (one raw device buffer) registered",
          flush=True)
    S, WP, WC = (C.c_void_p(C.cast(x._handle(), C.c_void_p).value) for x in (s, wp, wc))
    ntok = 200
    h, nh = hashes(sh, 5, ntok)
    atable, mtable = [1, 2, 3, 4], [0, 0, 6, 7]  # 0: vLLM's null block
    schedule(sh, S, b"hp", h, nh, ntok, [atable, mtable], 0, computed=192)
    step(sh, S, WP, d.stream())
    advance(sh, S, b"hp", h, nh, ntok, 200, 2)
    step(sh, S, WP, d.stream())
    lib.tide_connector_request_finished(S, b"hp")
    step(sh, S, WP, d.stream())
    lib.tide_connector_wait(WP)
    catable, cmtable = [5, 4, 3, 2], [0, 0, 1, 7]
    hit = schedule(sh, S, b"hc", h, nh, ntok, [catable, cmtable], None, run=False)
    if hit != 192:
        fail(f"hybrid: the lookup offered {hit} tokens, expected 192 (3 blocks of 64)")
    first_step(sh, S, b"hc", h, nh, ntok, [catable, cmtable], hit)
    step(sh, S, WC, d.stream())
    lib.tide_connector_wait(WC)
    errs = load_errors(sh, WC)
    if errs:
        fail(f"hybrid: load errors {errs}")
    d.sync()
    for i in range(3):
        if not torch.equal(pa[atable[i]].view(torch.uint8), ca[catable[i]].view(torch.uint8)):
            fail(f"hybrid: attention block {atable[i]} -> {catable[i]} differs")
    if not torch.equal(praw[6], craw[1]):
        fail("hybrid: the Mamba state at token 192 (conv and SSM) differs after the round trip")
    if bool(craw[7].any()):
        fail("hybrid: a Mamba page that no load targets was written")
    print(f"[vllm] hybrid: 3 attention blocks and the Mamba state at 192 ({praw.shape[1]} bytes "
          f"of conv + SSM) saved and loaded bit-exact", flush=True)


def loaded_runtimes():
    """The libcudart files mapped into this process (torch's, and tide's if another)."""
    out = set()
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                if "libcudart" in line:
                    out.add(line.split()[-1])
    except OSError:
        pass
    return sorted(out)


def cpu_s():
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def ordering(lib, url, dev, sleep_cycles):
    """The engine's timing on the GPU: a long sleep kernel is queued on the engine's stream
    before the kernels that write the pages, so every copy that does not wait for the
    engine's stream runs first and is caught.

    1. save: the "forward pass" (sleep, then fill the saved blocks with 3.0) is queued,
       then the save; a save that did not wait for it stores the zeros from before. While
       it waits, the process's CPU time against the wall time (a spinning job thread makes
       it about 1).
    2. load: the previous owner's pass (sleep, then fill the target blocks with -1.0) is
       queued, then the load; a load that did not wait lands first and is overwritten."""
    import torch

    t = Tide(lib, url)
    nb = 64
    shape = (2, nb, BLOCK_TOKENS, KV_HEADS, HEAD_SIZE)
    prod = [torch.zeros(shape, dtype=torch.bfloat16, device=dev) for _ in range(LAYERS)]
    cons = [torch.zeros(shape, dtype=torch.bfloat16, device=dev) for _ in range(LAYERS)]
    s = t.connector(TIDE_CONNECTOR_SCHEDULER)
    wp = t.connector(TIDE_CONNECTOR_WORKER)
    wc = t.connector(TIDE_CONNECTOR_WORKER)
    register(t, wp, prod)
    register(t, wc, cons)
    stream = torch.cuda.current_stream(dev).cuda_stream
    nblk = 8
    ntok = nblk * BLOCK_TOKENS + 5
    h, nh = hashes(t, 424242, ntok)
    src = list(range(1, nblk + 2))
    dst = list(range(30, 30 + nblk + 1))
    si = torch.tensor(src[:-1], device=dev)
    di = torch.tensor(dst[:-1], device=dev)
    torch.cuda.synchronize()

    # 1. save after a late forward pass
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    torch.cuda._sleep(sleep_cycles)
    e1.record()
    for x in prod:
        x.index_fill_(1, si, 3.0)
    schedule(t, s, b"ord-p", h, nh, ntok, src, 0)
    w0, c0 = time.perf_counter(), cpu_s()
    step(t, s, wp, stream)
    lib.tide_connector_wait(wp)
    wall, cpu = time.perf_counter() - w0, cpu_s() - c0
    torch.cuda.synchronize()
    slept = e0.elapsed_time(e1) / 1000
    lib.tide_connector_request_finished(s, b"ord-p")
    step(t, s, wp, stream)
    lib.tide_connector_wait(wp)
    print(f"[order] save behind a {slept:.2f} s sleep kernel: waited {wall:.2f} s, "
          f"process CPU {cpu:.2f} s ({cpu / max(wall, 1e-9):.2f} of a core)", flush=True)

    # 2. load after a late write of the blocks' previous owner
    hit = schedule(t, s, b"ord-c", h, nh, ntok, dst, None)
    if hit != nblk * BLOCK_TOKENS:
        fail(f"ordering: lookup hit {hit} tokens, expected {nblk * BLOCK_TOKENS}")
    torch.cuda._sleep(sleep_cycles)
    for y in cons:
        y.index_fill_(1, di, -1.0)
    step(t, s, wc, stream)
    lib.tide_connector_wait(wc)
    errs = load_errors(t, wc)
    torch.cuda.synchronize()
    bad = []
    for li, (x, y) in enumerate(zip(prod, cons)):
        a_, b_ = x.index_select(1, si), y.index_select(1, di)
        if not torch.equal(a_, b_):
            bad.append((li, float(b_.float().mean())))
    saved_ok = all(bool((x.index_select(1, si) == 3.0).all()) for x in prod)
    for c in (wp, wc, s):
        lib.tide_connector_destroy(c)
    lib.tide_close(t.store)
    if errs:
        fail(f"ordering: load errors {errs[:8]}")
    if not saved_ok:
        fail("ordering: the producer's pages are not what the forward pass wrote")
    if bad:
        fail(f"ordering: {len(bad)} layers differ after the round trip (layer {bad[0][0]} "
             f"mean {bad[0][1]}: 0.0 = the save did not wait, -1.0 = the load did not)")
    if wall < slept * 0.5:
        fail(f"ordering: the save returned after {wall:.2f} s, before the {slept:.2f} s "
             f"forward pass it must wait for")
    ratio = cpu / max(wall, 1e-9)
    print(f"[order] OK: the save waited for the forward pass and the load for the earlier "
          f"write; CPU while waiting {ratio:.2f} of a core", flush=True)
    if ratio > 0.5:
        fail(f"ordering: {ratio:.2f} of a core burned while the save waited (spinning?)")
    return {"sleep_s": slept, "save_wait_s": wall, "save_wait_cpu_s": cpu}


def interference(lib, url, d, layers, blocks, n, iters):
    """The engine's compute while tide moves its KV: `iters` bf16 matmuls of n x n on the
    engine's stream, timed alone, then while another thread saves and loads prefixes of
    `blocks` blocks through tide; the slowdown is the time with over the time alone, and
    the thread's GB/s is printed. The thread's jobs are ordered after a stream of their own
    (idle), not the engine's: the matmuls are queued at once, and a save ordered after them
    would copy only once they are done, as the save of step N copies during step N+1."""
    import threading

    import torch

    t = Tide(lib, url, layers)
    nb = 2 * blocks + 2
    shape = (2, nb, BLOCK_TOKENS, KV_HEADS, HEAD_SIZE)
    prod = [d.randn(shape, torch.bfloat16, d.generator(7 + i)) for i in range(layers)]
    cons = [d.zeros(shape, torch.bfloat16) for _ in range(layers)]
    s = t.connector(TIDE_CONNECTOR_SCHEDULER)
    wp = t.connector(TIDE_CONNECTOR_WORKER)
    wc = t.connector(TIDE_CONNECTOR_WORKER)
    register(t, wp, prod)
    register(t, wc, cons)
    ntok = blocks * BLOCK_TOKENS + 1
    obj = 2 * BLOCK_TOKENS * KV_HEADS * HEAD_SIZE * 2 * layers
    stream = d.new_stream()
    a = d.randn((n, n), torch.bfloat16, d.generator(3))
    b = d.randn((n, n), torch.bfloat16, d.generator(4))

    def matmuls():
        d.sync()
        t0 = time.perf_counter()
        for _ in range(iters):
            a @ b
        d.sync()
        return time.perf_counter() - t0

    matmuls()  # warm-up
    alone = matmuls()
    stop, started, moved, errs = threading.Event(), threading.Event(), [0], []

    def mover():
        rnd = 0
        while not stop.is_set() and rnd < 10_000:
            h, nh = hashes(t, 900_000 + rnd, ntok)
            rid, crid = f"i{rnd}".encode(), f"j{rnd}".encode()
            schedule(t, s, rid, h, nh, ntok, list(range(0, blocks + 1)), 0)
            step(t, s, wp, stream)
            lib.tide_connector_wait(wp)
            lib.tide_connector_request_finished(s, rid)
            started.set()
            if schedule(t, s, crid, h, nh, ntok, list(range(blocks + 1, 2 * blocks + 2)), None) \
                    != blocks * BLOCK_TOKENS:
                errs.append(f"round {rnd}: the saved prefix is not found")
                break
            step(t, s, wc, stream)
            lib.tide_connector_wait(wc)
            if load_errors(t, wc):
                errs.append(f"round {rnd}: load errors")
                break
            lib.tide_connector_request_finished(s, crid)
            step(t, s, wc, stream)
            lib.tide_connector_wait(wc)
            moved[0] += 2 * blocks * obj
            rnd += 1
        started.set()

    th = threading.Thread(target=mover)
    th.start()
    started.wait(120)
    m0, t0 = moved[0], time.perf_counter()
    busy = matmuls()
    gbps = (moved[0] - m0) / 1e9 / max(time.perf_counter() - t0, 1e-9)
    stop.set()
    th.join(120)
    for c in (wp, wc, s):
        lib.tide_connector_destroy(c)
    lib.tide_close(t.store)
    if errs:
        fail(f"interference: {errs[0]}")
    slow = busy / alone
    print(f"[interference] {iters} bf16 matmuls {n}x{n}: {alone:.3f} s alone, {busy:.3f} s while "
          f"tide saved and loaded {gbps:.1f} GB/s beside them: {slow:.2f}x the time", flush=True)
    return {"matmul_n": n, "matmul_iters": iters, "alone_s": alone, "with_tide_s": busy,
            "slowdown": slow, "tide_GBps_meanwhile": gbps}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--url", required=True)
    ap.add_argument("--label", default="mem")
    ap.add_argument("--blocks", type=int, default=512, help="blocks of one saved prefix (2 MiB each)")
    ap.add_argument("--layers", type=int, default=LAYERS, help="layers (2 pages of 32 KiB each per block)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--requests", type=int, default=2, help="requests the prefix is split over")
    ap.add_argument("--json")
    ap.add_argument("--bad-input", action="store_true", help="also check the error cases")
    ap.add_argument("--vllm-layouts", action="store_true", help="also check tide.vllm's regions")
    ap.add_argument("--ordering", action="store_true",
                    help="also check the ordering against the engine's stream (sleep kernels)")
    ap.add_argument("--sleep-cycles", type=int, default=1_000_000_000,
                    help="the sleep kernel's length in GPU clock cycles (about 0.5 s)")
    ap.add_argument("--interference", type=int, metavar="N", default=0,
                    help="also time N x N bf16 matmuls alone and while tide moves KV (0: no)")
    ap.add_argument("--standin", action="store_true",
                    help="no GPU: host tensors through the stand-in runtime named by TIDE_CUDART")
    a = ap.parse_args()
    try:
        import torch
    except ImportError as e:
        print(f"MISSING: torch does not import ({e})")
        sys.exit(2)
    if not a.standin and not torch.cuda.is_available():
        print("MISSING: torch sees no CUDA device")
        sys.exit(2)
    if a.standin and a.ordering:
        fail("--ordering needs a GPU (a sleep kernel on the engine's stream): not with --standin")
    d = Dev(a.standin)
    lib = load_lib(a.lib)
    t = Tide(lib, a.url, a.layers)
    per_req = a.blocks // a.requests
    nb = a.blocks * (a.reps + 1) + 64  # blocks per rank: every rep's prefix, and spares
    shape = (2, nb, BLOCK_TOKENS, KV_HEADS, HEAD_SIZE)
    gen = d.generator(1)
    prod = [d.randn(shape, torch.bfloat16, gen) for _ in range(a.layers)]
    cons = [d.zeros(shape, torch.bfloat16) for _ in range(a.layers)]
    obj = 2 * BLOCK_TOKENS * KV_HEADS * HEAD_SIZE * 2 * a.layers
    print(
        f"[{a.label}] {d.name()}; {a.layers} layers x (2, {nb}, 16, 8, 128) "
        f"bf16 per rank; objects of {obj / 2**20:g} MiB ({2 * a.layers} pages); prefix {a.blocks} "
        f"blocks = {a.blocks * obj / 2**30:.2f} GiB over {a.requests} requests",
        flush=True,
    )
    s = t.connector(TIDE_CONNECTOR_SCHEDULER)
    wp = t.connector(TIDE_CONNECTOR_WORKER)
    wc = t.connector(TIDE_CONNECTOR_WORKER)
    t0 = time.perf_counter()
    register(t, wp, prod)
    reg_s = time.perf_counter() - t0
    register(t, wc, cons)
    import re

    cap = re.search(r"capacity=(\d+)GiB", a.url)
    per_gib = f", {reg_s / int(cap.group(1)):.3f} s per GiB of pool" if cap else ""
    print(f"[{a.label}] registered (the pool pinned once): {reg_s:.2f} s{per_gib}", flush=True)
    print(f"[{a.label}] libcudart mapped: {', '.join(loaded_runtimes()) or 'none'}; "
          f"TIDE_CUDA_BATCH={os.environ.get('TIDE_CUDA_BATCH', '(unset)')}", flush=True)
    stream = d.stream()
    ntok = per_req * BLOCK_TOKENS + 5
    save_s, load_s = [], []
    for rep in range(a.reps):
        reqs = []
        for r in range(a.requests):
            h, nh = hashes(t, 1000 * rep + r, ntok)
            src = list(range(rep * a.blocks + r * per_req, rep * a.blocks + (r + 1) * per_req + 1))
            reqs.append((f"p{rep}.{r}".encode(), h, nh, src))
        # Save: the "forward pass" (a kernel on the engine's stream writing the pages) is
        # queued right before the jobs; the saves must copy what it wrote.
        for _, _, _, src in reqs:
            idx = d.index(src[:-1])
            for x in prod:
                x.index_fill_(1, idx[:1], 0.5)  # touches the pages on the stream
        for rid, h, nh, src in reqs:
            schedule(t, s, rid, h, nh, ntok, src, 0)
        t0 = time.perf_counter()
        step(t, s, wp, stream)
        lib.tide_connector_wait(wp)
        save_s.append(time.perf_counter() - t0)
        for rid, _, _, _ in reqs:
            lib.tide_connector_request_finished(s, rid)
        step(t, s, wp, stream)
        lib.tide_connector_wait(wp)
        done = finished(t, wp, SAVE)
        if sorted(done) != sorted(r[0].decode() for r in reqs):
            fail(f"saves reported {done}")
        # Load into other block ids of another rank.
        loads = []
        for r, (rid, h, nh, src) in enumerate(reqs):
            dst = [nb - 1 - i for i in range(r * per_req, (r + 1) * per_req + 1)]
            crid = rid.replace(b"p", b"c", 1)
            hit = schedule(t, s, crid, h, nh, ntok, dst, None)
            if hit != per_req * BLOCK_TOKENS:
                fail(f"{crid}: lookup hit {hit} tokens, expected {per_req * BLOCK_TOKENS}")
            loads.append((crid, src, dst))
        d.sync()
        t0 = time.perf_counter()
        step(t, s, wc, stream)
        lib.tide_connector_wait(wc)
        load_s.append(time.perf_counter() - t0)
        got = finished(t, wc, LOAD)
        errs = load_errors(t, wc)
        if errs or sorted(got) != sorted(x[0].decode() for x in loads):
            fail(f"loads: finished {got}, load errors {errs[:8]}")
        d.sync()
        for crid, src, dst in loads:
            lib.tide_connector_request_finished(s, crid)
            si, di = d.index(src[:-1]), d.index(dst[:-1])
            for li, (x, y) in enumerate(zip(prod, cons)):
                if not torch.equal(x.index_select(1, si), y.index_select(1, di)):
                    fail(f"{crid.decode()}: layer {li} differs after the round trip")
        step(t, s, wc, stream)  # the finished list
        lib.tide_connector_wait(wc)
        finished(t, wc, SAVE)
    moved = a.blocks * obj
    # Baseline: cudaMemcpyAsync of the same bytes, device <-> pinned host, one copy each way.
    dbuf = d.zeros(moved, torch.uint8)
    hbuf = torch.empty(moved, dtype=torch.uint8, pin_memory=not a.standin)
    d2h, h2d = [], []
    for _ in range(a.reps):
        d.sync()
        t0 = time.perf_counter()
        hbuf.copy_(dbuf, non_blocking=True)
        d.sync()
        d2h.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        dbuf.copy_(hbuf, non_blocking=True)
        d.sync()
        h2d.append(time.perf_counter() - t0)
    gb = moved / 1e9
    res = {
        "label": a.label,
        "device": d.name(),
        "bytes": moved,
        "object_bytes": obj,
        "save_GBps": gb / statistics.median(save_s),
        "load_GBps": gb / statistics.median(load_s),
        "memcpy_d2h_GBps": gb / statistics.median(d2h),
        "memcpy_h2d_GBps": gb / statistics.median(h2d),
    }
    res["pin_s"] = reg_s
    res["pin_s_per_GiB"] = reg_s / int(cap.group(1)) if cap else None
    res["libcudart"] = loaded_runtimes()
    res["save_ratio"] = res["save_GBps"] / res["memcpy_d2h_GBps"]
    res["load_ratio"] = res["load_GBps"] / res["memcpy_h2d_GBps"]
    for k in ("save", "load"):
        base = "d2h" if k == "save" else "h2d"
        verdict = "meets" if res[f"{k}_ratio"] >= 0.8 else "BELOW"
        print(
            f"[{a.label}] {k}: {res[f'{k}_GBps']:.1f} GB/s vs cudaMemcpyAsync {base} "
            f"{res[f'memcpy_{base}_GBps']:.1f} GB/s = {res[f'{k}_ratio']:.2f}x "
            f"({verdict} the 0.8x target); medians of {a.reps}",
            flush=True,
        )
    if a.bad_input:
        # Host memory named as device memory, and a CPU tensor: TIDE_EDEVICE at registration.
        wb = t.connector(TIDE_CONNECTOR_WORKER)
        cpu = [torch.zeros((2, 8, BLOCK_TOKENS, KV_HEADS, HEAD_SIZE), dtype=torch.bfloat16)]
        rc = register(t, wb, cpu, expect=TIDE_EDEVICE)
        print(f"[{a.label}] a host tensor registered as CUDA memory: {rc} "
              f"({lib.tide_connector_errmsg(wb).decode()})")
        lib.tide_connector_destroy(wb)
    for c in (wp, wc, s):
        lib.tide_connector_destroy(c)
    lib.tide_close(t.store)

    def save_json():
        if a.json:
            with open(a.json, "w") as f:
                json.dump(res, f, indent=1)

    save_json()
    print(f"[{a.label}] OK: every byte of {a.reps} round trips compared equal", flush=True)
    if a.ordering:
        res["ordering"] = ordering(lib, "mem://?capacity=1GiB", d.dev, a.sleep_cycles)
        save_json()
    if a.vllm_layouts:
        vllm_layouts(lib, "mem://?capacity=512MiB", d)
        print("[vllm] OK", flush=True)
    if a.interference:
        iters = 20 if a.standin else 400
        res["interference"] = interference(lib, "mem://?capacity=2GiB", d, a.layers,
                                           min(a.blocks, 64), a.interference, iters)
        save_json()


if __name__ == "__main__":
    main()
