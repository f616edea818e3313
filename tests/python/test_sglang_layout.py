"""tide.sglang without SGLang (Debian's python3): the import names SGLang when it is missing,
and the pure parts (settings, header, hit arithmetic) behave. tests/sglang runs the backend
against SGLang itself."""

import importlib.util

import pytest

import tide.sglang
from tide.sglang import layout


@pytest.mark.skipif(importlib.util.find_spec("sglang") is not None, reason="SGLang is here")
def test_without_sglang_the_backend_names_what_is_missing():
    with pytest.raises(ImportError, match=r"tide.sglang needs SGLang .*sglang-env.sh"):
        tide.sglang.TideHiCacheStorage


def test_settings_name_what_is_wrong(monkeypatch):
    monkeypatch.delenv("TIDE_URL", raising=False)
    with pytest.raises(layout.SGLangSetupError, match="no store URL"):
        layout.settings({})
    with pytest.raises(layout.SGLangSetupError, match="'tide_nmespace'"):
        layout.settings({"tide_url": "tide://h:1", "tide_nmespace": "x"})
    with pytest.raises(layout.SGLangSetupError, match="tide_namespace 'a/b'"):
        layout.settings({"tide_url": "tide://h:1", "tide_namespace": "a/b"})
    monkeypatch.setenv("TIDE_URL", "unix:///run/t.sock")
    assert layout.settings({"interface_v1": 1}) == layout.Settings("unix:///run/t.sock", "sglang")
    with pytest.raises(layout.SGLangSetupError, match="unknown HiCache pool kind 'weird'"):
        layout.pool_kind("weird")


def test_header_binds_key_and_kv_page():
    h = layout.pack_header(layout.KIND_STATE, 100, "ns/s/mamba/a", "ns/s/kv/a")
    assert len(h) == layout.HEADER_SIZE
    assert layout.header_ok(h, layout.KIND_STATE, 100, "ns/s/mamba/a", "ns/s/kv/a")
    assert not layout.header_ok(h, layout.KIND_STATE, 100, "ns/s/mamba/b", "ns/s/kv/a")
    assert not layout.header_ok(h, layout.KIND_STATE, 100, "ns/s/mamba/a", "ns/s/kv/b")
    assert not layout.header_ok(h, layout.KIND_STATE, 101, "ns/s/mamba/a", "ns/s/kv/a")
    assert not layout.header_ok(h, layout.KIND_PAGE, 100, "ns/s/mamba/a", "ns/s/kv/a")
    assert not layout.header_ok(h[:20], layout.KIND_STATE, 100, "ns/s/mamba/a", "ns/s/kv/a")


def test_prefix_hits():
    T, F = True, False
    # KV 4 pages; a trailing-1 state only at page 2 (prefix 3) and page 3 (prefix 4) missing
    pages, hits, rest = layout.prefix_hits([T, T, T, T], [("mamba", "trailing_pages", 1,
                                                          [F, F, T, F])])
    assert (pages, hits, rest) == (3, {"kv": 4, "mamba": 3}, [3])
    # a state without the KV below it never counts
    assert layout.prefix_hits([T, F, T], [("mamba", "trailing_pages", 1, [F, F, T])])[0] == 0
    # trailing 2 (SWA window): prefixes whose last two pages exist
    assert layout.prefix_hits([T] * 4, [("swa", "trailing_pages", 2, [F, T, T, T])])[2] == [3, 4]
    # all_pages pool cuts the prefix at its first gap
    assert layout.prefix_hits([T] * 4, [("indexer", "all_pages", 1, [T, T, F, T])])[0] == 2
    assert layout.prefix_hits([F, T], [])[0] == 0
    with pytest.raises(layout.SGLangSetupError, match="hit policy 'block_groups'"):
        layout.prefix_hits([T], [("x", "block_groups", 1, [T])])


def test_long_page_hashes_still_make_valid_keys():
    k = layout.Keys("sglang", "kv", "0123456789abcdef")
    assert len(k.key("x" * 400)) <= 256
    assert k.key("x" * 400) != k.key("x" * 399)
    assert k.key("ab") == "sglang/0123456789abcdef/kv/ab"
