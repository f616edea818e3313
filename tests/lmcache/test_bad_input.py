"""Bad input to tide.lmcache: LMCache missing, an LMCache without the native_plugin L2
interface this adapter implements, bad connector arguments: each a clear message naming
what is wrong (tested by hiding the package or the module from the import machinery)."""

import importlib
import importlib.metadata

import pytest

import tide.lmcache as tl


def test_lmcache_present_and_tested_version():
    assert tl.check_lmcache() == tl.TESTED_LMCACHE


def test_missing_lmcache_named(monkeypatch):
    def no_pkg(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", no_pkg)
    with pytest.raises(tl.LMCacheInterfaceError,
                       match="the lmcache package is not installed in this Python"):
        tl.TideConnector("mem://")


def test_other_interface_version_named(monkeypatch):
    real = importlib.import_module

    def hide(name, *a):
        if name == "lmcache.v1.distributed.l2_adapters.native_plugin_l2_adapter":
            raise ModuleNotFoundError(f"No module named {name!r}")
        return real(name, *a)

    monkeypatch.setattr(importlib, "import_module", hide)
    with pytest.raises(tl.LMCacheInterfaceError,
                       match=r"lmcache 0\.5\.6 has no lmcache\.v1\.distributed\.l2_adapters"
                             r"\.native_plugin_l2_adapter .*native_plugin L2 interface of "
                             r"lmcache 0\.5\.6"):
        tl.TideConnector("mem://")


@pytest.mark.parametrize("kw,msg", [({"url": ""}, "url must be a tide store URL"),
                                    ({"url": "mem://", "num_workers": 0},
                                     "num_workers must be a positive integer")])
def test_bad_arguments(kw, msg):
    with pytest.raises(ValueError, match=msg):
        tl.TideConnector(**kw)


def test_bad_url_names_the_scheme():
    with pytest.raises(Exception, match="nosuch"):
        tl.TideConnector("nosuch://x")
