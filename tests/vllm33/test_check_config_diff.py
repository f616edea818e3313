"""Differential test: `tide check-config --vllm X` against the real reference in vLLM X.

The same configurations (examples/*.json, the table test's, and generated ones: group kinds
x block sizes x Mamba modes x PCP/DCP x roles x capacity-only flags x transfer opt-outs) go
to vLLM's own MooncakeStoreConnector, built by its real ``__init__`` (capacity-only skip and
``_validate_kv_cache_config``) from real ``KVCacheConfig`` / spec / ``CacheConfig`` /
``ParallelConfig`` / ``KVTransferConfig`` objects, and to check-config; the verdicts must be
the same, byte for byte. Runs in whichever vLLM the interpreter has: 0.33 (.venv-vllm33)
and 0.32 (.venv-vllm), both by `make test-vllm33`.
"""

import itertools
import json
import logging
import os
import random
import subprocess
import types

import pytest

torch = pytest.importorskip("torch")
vllm = pytest.importorskip("vllm")

from vllm.config import CacheConfig, KVTransferConfig, ParallelConfig  # noqa: E402
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole  # noqa: E402
from vllm.distributed.kv_transfer.kv_connector.v1.mooncake.store import (  # noqa: E402
    connector as mooncake_store,
)
from vllm.v1 import kv_cache_interface as kvi  # noqa: E402

# The base class warns at every construction ("This API is experimental"): thousands here.
logging.getLogger("vllm").setLevel(logging.ERROR)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TIDE_BIN = os.environ["TIDE_BIN"]
VERSION = ".".join(vllm.__version__.split(".")[:2])

#: Generated configurations: all of them up to this many (seeded sample beyond).
MAX_GENERATED = int(os.environ.get("TIDE_DIFF_CASES", "1500"))


# ---------------------------------------------------------------------------------------
# The real reference, from a configuration document (docs/CONNECTOR_CONFIG.md)
# ---------------------------------------------------------------------------------------

class _NoScheduler:
    """Stands in for MooncakeStoreScheduler, which would reach for a Mooncake store: the
    verdict is decided before it is built."""

    def __init__(self, *args, **kwargs):
        pass


def _dtype(name):
    return getattr(torch, name.removeprefix("torch."))


def _spec(doc_spec, cache):
    """A real vLLM spec object from the document's spec: the class of that name, every
    field passed (a field the class does not have fails the test, so nothing is dropped)."""
    fields = dict(doc_spec)
    cls = getattr(kvi, fields.pop("type"))
    names = {f.name for f in __import__("dataclasses").fields(cls)}
    if cls is kvi.MambaSpec:
        fields["shapes"] = tuple(tuple(s) for s in fields["shapes"])
        fields["dtypes"] = tuple(_dtype(d) for d in fields["dtypes"])
        fields.setdefault("mamba_cache_mode", cache.get("mamba_cache_mode", "none"))
    elif "dtype" in fields:
        fields["dtype"] = _dtype(fields["dtype"])
    if fields.get("compress_ratio") == 1 and "compress_ratio" not in names:
        del fields["compress_ratio"]  # tide's default: no compression
    unknown = set(fields) - names
    assert not unknown, f"{cls.__name__} has no field {sorted(unknown)} in vLLM {VERSION}"
    return cls(**fields)


def reference_verdict(doc):
    """'accepted' or 'rejected: <the ValueError's text>' from vLLM's own connector."""
    cache = doc["cache_config"]
    par = doc.get("parallel_config", {})
    kt = doc["kv_transfer_config"]
    groups = [
        kvi.KVCacheGroupSpec(
            layer_names=[f"layers.{i}"],
            kv_cache_spec=_spec(g["kv_cache_spec"], cache),
            enable_kv_transfer=g.get("enable_kv_transfer", True),
        )
        for i, g in enumerate(doc["kv_cache_config"]["kv_cache_groups"])
    ]
    kv_cache_config = kvi.KVCacheConfig(num_blocks=64, kv_cache_tensors=[],
                                        kv_cache_groups=groups)
    vllm_config = types.SimpleNamespace(
        cache_config=CacheConfig(block_size=cache["block_size"]),
        parallel_config=ParallelConfig(
            tensor_parallel_size=par.get("tensor_parallel_size", 1),
            prefill_context_parallel_size=par.get("prefill_context_parallel_size", 1),
            decode_context_parallel_size=par.get("decode_context_parallel_size", 1),
        ),
        kv_transfer_config=KVTransferConfig(
            kv_connector="MooncakeStoreConnector",
            kv_role=kt["kv_role"],
            kv_connector_extra_config=dict(kt.get("kv_connector_extra_config", {})),
        ),
    )
    saved = mooncake_store.MooncakeStoreScheduler
    mooncake_store.MooncakeStoreScheduler = _NoScheduler
    try:
        mooncake_store.MooncakeStoreConnector(vllm_config, KVConnectorRole.SCHEDULER,
                                              kv_cache_config)
    except ValueError as e:
        return f"rejected: {e}"
    finally:
        mooncake_store.MooncakeStoreScheduler = saved
    return "accepted"


def tide_verdict(doc, tmp_path, version=VERSION):
    """check-config's reference line for vLLM `version`, without its label and with the
    capacity-only note dropped ('accepted' either way, as vLLM's connector says nothing)."""
    path = tmp_path / "c.json"
    path.write_text(json.dumps(doc))
    out = subprocess.run([TIDE_BIN, "check-config", "--quiet", "--vllm", version, str(path)],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode in (0, 1), out.stderr
    first = out.stdout.split("\n", 1)[0]
    label = f"vLLM {version} MooncakeStoreConnector (rules of vLLM 0.30 to 0.33): "
    assert first.startswith(label), first
    verdict = first[len(label):]
    return "accepted" if verdict.startswith("accepted") else verdict


# ---------------------------------------------------------------------------------------
# Configurations
# ---------------------------------------------------------------------------------------

def _attn(kind, block, **extra):
    spec = {"type": kind, "block_size": block, "num_kv_heads": 2, "head_size": 64,
            "dtype": "bfloat16"}
    spec.update(extra)
    return spec


def _kinds(block, mamba_block, mode):
    """Every spec kind tide knows, as document specs."""
    return {
        "full": _attn("FullAttentionSpec", block),
        "sliding": _attn("SlidingWindowSpec", block, sliding_window=128),
        "mla": {"type": "MLAAttentionSpec", "block_size": block, "num_kv_heads": 1,
                "head_size": 576, "dtype": "bfloat16"},
        "cross": _attn("CrossAttentionSpec", block),
        "mamba": {"type": "MambaSpec", "block_size": mamba_block, "shapes": [[4, 64]],
                  "dtypes": ["float32"], "mamba_cache_mode": mode},
        "circular": _attn("CircularBufferSpec", block),
        "hot": {"type": "HiSparseHotSpec", "block_size": block, "page_size": 4096,
                "blocks_per_request": 4},
        "resident": {"type": "HiSparseResidentSpec", "block_size": block, "page_size": 4096},
        "swmla": {"type": "SlidingWindowMLASpec", "block_size": block, "num_kv_heads": 1,
                  "head_size": 576, "dtype": "bfloat16", "sliding_window": 128},
        "swmla-bounded": {"type": "SlidingWindowMLASpec", "block_size": block,
                          "num_kv_heads": 1, "head_size": 576, "dtype": "bfloat16",
                          "sliding_window": 128, "bounded_replay": True},
    }


ROLES = [
    ("kv_both", {}),
    ("kv_producer", {}),
    ("kv_consumer", {}),
    ("kv_consumer", {"enable_lookup": False}),  # capacity-only
    ("kv_consumer", {"enable_lookup": False, "save_decode_cache": True}),
]


def generated():
    """(name, document) for every combination, a seeded sample when there are too many."""
    cases = []
    kinds = list(_kinds(16, 16, "align"))
    for block, mamba_block, mode in [(16, 16, "align"), (16, 64, "align"), (32, 32, "all"),
                                     (16, 16, "none"), (32, 64, "none")]:
        specs = _kinds(block, mamba_block, mode)
        for n in (1, 2, 3):
            for combo in itertools.combinations_with_replacement(kinds, n):
                for opt_out in ([None] + list(range(n)) if n > 1 else [None]):
                    for pcp, dcp in [(1, 1), (2, 1), (1, 2), (2, 2)]:
                        for role, extra in ROLES:
                            groups = []
                            for i, k in enumerate(combo):
                                g = {"kv_cache_spec": dict(specs[k])}
                                if opt_out == i:
                                    g["enable_kv_transfer"] = False
                                groups.append(g)
                            doc = {
                                "model_config": {"model": "org/model"},
                                "cache_config": {"block_size": block,
                                                 "mamba_cache_mode": mode},
                                "parallel_config": {
                                    "tensor_parallel_size": 2 if dcp > 1 else 1,
                                    "prefill_context_parallel_size": pcp,
                                    "decode_context_parallel_size": dcp,
                                },
                                "kv_transfer_config": {"kv_role": role,
                                                       "kv_connector_extra_config": extra},
                                "kv_cache_config": {"kv_cache_groups": groups},
                            }
                            name = (f"b{block}/m{mamba_block}/{mode}/{'+'.join(combo)}/"
                                    f"optout{opt_out}/pcp{pcp}dcp{dcp}/{role}{extra}")
                            cases.append((name, doc))
    if len(cases) > MAX_GENERATED:
        cases = random.Random(26).sample(cases, MAX_GENERATED)
    return cases


def examples():
    """examples/*.json (the table test's) and the fuzz corpus's release-rule seeds (every
    spec kind tide knows in one configuration, groups out of transfer)."""
    out = []
    for d, prefix in (("examples", ""), ("tests/fuzz/corpus/ccfg", "release-rules-")):
        d = os.path.join(ROOT, d)
        for f in sorted(os.listdir(d)):
            if f.startswith(prefix) and f.endswith(".json"):
                with open(os.path.join(d, f)) as fh:
                    out.append((f, json.load(fh)))
    return out


# ---------------------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------------------

def test_examples_match_the_real_reference(tmp_path):
    """The configurations of the examples table (tests/unit/test_connector_cli.c) and the
    fuzz corpus's release-rule seeds."""
    seen = 0
    for name, doc in examples():
        want = reference_verdict(doc)
        got = tide_verdict(doc, tmp_path)
        assert got == want, f"{name}: check-config said {got!r}, vLLM {VERSION} {want!r}"
        seen += 1
    assert seen >= 8


def test_generated_configurations_match_the_real_reference(tmp_path):
    cases = generated()
    outcomes = {}
    for name, doc in cases:
        want = reference_verdict(doc)
        got = tide_verdict(doc, tmp_path)
        assert got == want, f"{name}: check-config said {got!r}, vLLM {VERSION} {want!r}"
        outcomes[want.split(":")[0] if want.startswith("accepted") else want[:60]] = 1
    # The generator reaches every kind of verdict, not only "accepted".
    texts = " | ".join(outcomes)
    for part in ("accepted", "requires at least one",
                 "does not support: group"):
        assert part in texts, f"no generated case gave {part!r}: {texts}"


def test_unknown_version_and_spec_are_refused(tmp_path):
    """A vLLM newer than the rules tide knows is a usage error naming both versions; a spec
    kind tide does not know is named with its path."""
    doc = examples()[0][1]
    path = tmp_path / "c.json"
    path.write_text(json.dumps(doc))
    out = subprocess.run([TIDE_BIN, "check-config", "--vllm", "0.34", str(path)],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2
    assert "vLLM 0.34" in out.stderr and "vLLM 0.33" in out.stderr
    doc = json.loads(json.dumps(doc))
    doc["kv_cache_config"]["kv_cache_groups"][0]["kv_cache_spec"]["type"] = "RSWASpec"
    path.write_text(json.dumps(doc))
    out = subprocess.run([TIDE_BIN, "check-config", str(path)], capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 2
    assert "kv_cache_groups[0].kv_cache_spec.type: unknown KV-cache spec 'RSWASpec'" in out.stderr
