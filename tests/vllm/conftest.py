"""Fixtures of the vLLM end-to-end tests: a tided started for real, tiny models described by a
local config.json (no download), and vLLM engines run one per process (engine_run.py).

Run by `make test-vllm` in .venv-vllm (scripts/vllm-env.sh), against build/libtide.so and
build/tide.
"""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("BUILD", os.path.join(ROOT, "build"))
TIDE_BIN = os.path.join(BUILD, "tide")
TIDE_LIB = os.path.join(BUILD, "libtide.so")
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, HERE)
import engine_run  # noqa: E402  (the engine launcher, beside this file)
os.environ.setdefault("TIDE_LIB", TIDE_LIB)

#: One engine's start-up, prompts and shutdown on two shared cores: a bound, not a figure.
ENGINE_TIMEOUT_S = int(os.environ.get("TIDE_VLLM_ENGINE_TIMEOUT", "420"))

# A Llama-shaped model small enough for two CPU cores: 2 layers, 4 query heads and 2 KV
# heads of 32 (vLLM's CPU attention wants head sizes of 32 and up), a 512-token vocabulary.
LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 512,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "torch_dtype": "float32",
    "bos_token_id": 1,
    "eos_token_id": 2,
}

# Gemma-3-shaped: sliding-window layers and a full-attention layer (two KV-cache groups).
GEMMA3 = {
    "architectures": ["Gemma3ForCausalLM"],
    "model_type": "gemma3_text",
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "vocab_size": 512,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "rope_local_base_freq": 10000.0,
    "sliding_window": 64,
    "sliding_window_pattern": 2,
    "layer_types": ["sliding_attention", "full_attention", "sliding_attention",
                    "full_attention"],
    "query_pre_attn_scalar": 32,
    "hidden_activation": "gelu_pytorch_tanh",
    "tie_word_embeddings": True,
    "torch_dtype": "float32",
    "bos_token_id": 2,
    "eos_token_id": 1,
    "pad_token_id": 0,
}


# Qwen3-Next-shaped hybrid: gated-delta-net layers (Mamba-style state, vLLM's CPU GDN
# kernel wants bfloat16 and 128-wide heads) and full-attention layers, with a small MoE.
QWEN3_NEXT = {
    "architectures": ["Qwen3NextForCausalLM"],
    "model_type": "qwen3_next",
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "vocab_size": 512,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "partial_rotary_factor": 0.25,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_num_key_heads": 1,
    "linear_num_value_heads": 2,
    "layer_types": ["linear_attention", "full_attention", "linear_attention",
                    "full_attention"],
    "full_attention_interval": 2,
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 64,
    "shared_expert_intermediate_size": 64,
    "decoder_sparse_step": 1,
    "norm_topk_prob": True,
    "mlp_only_layers": [],
    "bos_token_id": 1,
    "eos_token_id": 2,
}


def model_dir(tmp_root, name, config):
    d = os.path.join(tmp_root, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config, f)
    return d


@pytest.fixture(scope="session")
def models(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("models"))
    return {"llama": model_dir(root, "tiny-llama", LLAMA),
            "gemma3": model_dir(root, "tiny-gemma3", GEMMA3),
            "qwen3next": model_dir(root, "tiny-qwen3-next", QWEN3_NEXT)}


class Tided:
    """A tided on loopback with a Unix socket, started for a test and stopped by its pid."""

    def __init__(self, workdir, *args):
        self.dir = workdir
        self.sock = os.path.join(workdir, "tide.sock")
        ready = os.path.join(workdir, "ready")
        self.log_path = os.path.join(workdir, "tided.log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [TIDE_BIN, "serve", "--port", "0", "--metrics-port", "0", "--unix", self.sock,
             "--ready-file", ready, "--capacity", "256MiB", *args],
            stdout=self.log, stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 20
        while not os.path.exists(ready) or not open(ready).read().strip():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"tided did not start: {open(self.log_path).read()}")
            time.sleep(0.05)
        self.port = int(open(ready).read().split()[0])
        self.tcp = f"tide://127.0.0.1:{self.port}"
        self.unix = f"unix://{self.sock}"

    def store(self):
        import tide

        return tide.Store(self.tcp)

    def stats(self):
        with self.store() as s:
            return s.stats()

    def kill(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.log.close()


@pytest.fixture
def tided(tmp_path):
    started = []

    def start(*args):
        d = tmp_path / f"tided{len(started)}"
        d.mkdir()
        t = Tided(str(d), *args)
        started.append(t)
        return t

    yield start
    for t in started:
        t.stop()


class EngineError(AssertionError):
    pass


def run_engine(spec, tmp, name, timeout=ENGINE_TIMEOUT_S, expect_error=False):
    """Run one engine (engine_run.py) in its own process; returns its OUT, with the engine's
    log text under "log". The process group is killed if it outlives `timeout`."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.join(ROOT, "python"), HERE, env.get("PYTHONPATH", "")]
    )
    env["TIDE_LIB"] = TIDE_LIB
    env.setdefault("VLLM_LOGGING_LEVEL", "INFO")
    try:
        out, text, rc = engine_run.launch(sys.executable, spec, tmp, name, env, timeout)
    except TimeoutError as e:
        raise EngineError(str(e))
    out["log"] = text
    out["rc"] = rc
    if "error" in out and not expect_error:
        raise EngineError(f"engine {name} failed: {out['error']}\n--- log tail ---\n"
                          + text[-6000:])
    return out


@pytest.fixture
def engine(tmp_path):
    def run(spec, name, **kw):
        return run_engine(spec, str(tmp_path), name, **kw)

    return run
