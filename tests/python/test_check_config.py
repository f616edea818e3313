"""`tide check-config` and tide.vllm's connector accept the same configurations: both read
the key table of src/connector/config.c (the binding hands its own keys to the C parser
with the rest), so the README's --kv-transfer-config passes both, and a key either refuses
is refused by the other with the same words."""

import json
import os
import subprocess

import pytest

import tide
import tide.vllm as tv

TIDE_BIN = os.environ.get("TIDE_BIN", "build/tide")

#: The README's --kv-transfer-config (README.md, docs/VLLM.md), with every key the binding
#: reads itself.
README_TRANSFER = {
    "kv_connector": "TideStoreConnector",
    "kv_connector_module_path": "tide.vllm",
    "kv_role": "kv_both",
    "kv_load_failure_policy": "recompute",
    "kv_connector_extra_config": {"url": "tide://127.0.0.1:7474", "reconnect_s": 5,
                                  "kv_events": False},
}


def document(transfer):
    return {
        "model_config": {"model": "org/Tiny-1B"},
        "cache_config": {"block_size": 16},
        "kv_transfer_config": transfer,
        "kv_cache_config": {"num_blocks": 8, "kv_cache_groups": [{"kv_cache_spec": {
            "type": "FullAttentionSpec", "block_size": 16, "num_kv_heads": 2,
            "head_size": 32, "dtype": "float16"}}]},
    }


def check_config(doc, tmp_path, *args):
    path = tmp_path / "c.json"
    path.write_text(json.dumps(doc))
    return subprocess.run([TIDE_BIN, "check-config", *args, str(path)], capture_output=True,
                          text=True, timeout=30)


def connector(doc):
    """tide.vllm's connector over a private mem:// store, built from the same document."""
    store = tide.Store("mem://?capacity=4MiB")
    try:
        return tv.TideStoreConnector(doc, "scheduler", store=store), store
    except Exception:
        store.close()
        raise


def test_readme_transfer_config_passes_check_config_and_the_connector(tmp_path):
    doc = document(README_TRANSFER)
    out = check_config(doc, tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    c, store = connector(doc)
    try:
        assert c.url == "tide://127.0.0.1:7474"
        assert c.reconnect_s == 5.0
    finally:
        c.shutdown()
        store.close()


@pytest.mark.parametrize("extra, message", [
    ({"reconect_s": 5},
     "kv_transfer_config.kv_connector_extra_config.reconect_s: unknown key (did you mean "
     "'reconnect_s'?)"),
    ({"reconnect_s": "soon"},
     "kv_transfer_config.kv_connector_extra_config.reconnect_s: expected a number, got a string"),
    ({"reconnect_s": 0},
     "kv_transfer_config.kv_connector_extra_config.reconnect_s: must be > 0, got 0"),
    ({"url": 7},
     "kv_transfer_config.kv_connector_extra_config.url: expected a string, got an integer"),
    ({"kv_events": "yes"},
     "kv_transfer_config.kv_connector_extra_config.kv_events: expected a boolean, got a string"),
])
def test_a_bad_binding_key_is_refused_by_both_in_the_same_words(tmp_path, extra, message):
    doc = document(dict(README_TRANSFER, kv_connector_extra_config=extra))
    out = check_config(doc, tmp_path)
    assert out.returncode == 2
    assert message in out.stderr
    with pytest.raises(tide.ConfigError) as e:
        connector(doc)
    assert message in str(e.value)


def test_the_binding_keys_are_in_the_c_table(tmp_path):
    """Every key tide.vllm reads itself is one check-config accepts (PYTHON_EXTRA_KEYS is
    documentation of the C table's binding rows, never a second list of accepted keys)."""
    values = {"url": "unix:///x.sock", "reconnect_s": 1.5, "kv_events": True}
    assert set(tv.config.PYTHON_EXTRA_KEYS) == set(values)
    doc = document(dict(README_TRANSFER, kv_connector_extra_config=values))
    assert check_config(doc, tmp_path).returncode == 0
