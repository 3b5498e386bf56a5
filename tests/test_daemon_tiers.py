"""cached_compile: node cache, then the daemon, then this process; a daemon that is down
costs one warning and a local compile."""
import os
import tempfile
import warnings

import pytest

from kiln.cache import Cache
from kiln.daemon import create_server, fake, tiers
from kiln.ir import parse_function

IR = '''
kernel @{name}(%x: ptr<int32>) {{
  %v = load %x : int32
  %w = mul %v, %v : int32
  store %x, %w
  return
}}
'''


def kernel(name):
    return parse_function(IR.format(name=name))


@pytest.fixture
def node(monkeypatch, tmp_path):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "node-cache"))
    monkeypatch.setenv("KILN_RUNTIME_DIR", str(tmp_path / "run"))
    monkeypatch.setattr(tiers, "_state", tiers._State())  # a fresh process, as far as tiers knows
    return tmp_path


def test_daemon_off_compiles_here_then_reads_the_cache(node, monkeypatch):
    monkeypatch.setenv("KILN_DAEMON", "off")
    first = tiers.cached_compile(kernel("off"), "sm_90a", {"num_warps": 4}, compile_fn=fake.compile)
    assert first.source == "local" and first.cubin and "kernel @off" in first.kir
    again = tiers.cached_compile(kernel("off"), "sm_90a", {"num_warps": 4}, compile_fn=fake.compile)
    assert again.source == "cache" and again.cubin == first.cubin
    assert again.metadata == {**first.metadata, "target": "sm_90a", "options": {"num_warps": 4}}
    assert again.key == first.key and again.ptx == first.ptx


@pytest.mark.parametrize("how", ["environment", "knob"])
def test_always_compile_asks_no_tier_and_still_stores(node, monkeypatch, how):
    from kiln.dropin import knobs
    monkeypatch.setenv("KILN_DAEMON", "off")
    first = tiers.cached_compile(kernel("always"), "sm_90a", {"num_warps": 4}, compile_fn=fake.compile)
    monkeypatch.setenv("KILN_DAEMON", f"unix:{node}/no-daemon.sock")  # a daemon asked would warn
    with knobs.compilation.scope(), warnings.catch_warnings():
        warnings.simplefilter("error")
        if how == "environment":
            monkeypatch.setenv("TRITON_ALWAYS_COMPILE", "1")
        else:
            knobs.compilation.always_compile = True
        again = tiers.cached_compile(kernel("always"), "sm_90a", {"num_warps": 4}, compile_fn=fake.compile)
    assert first.source == "local" and again.source == "local" and again.key == first.key
    monkeypatch.delenv("TRITON_ALWAYS_COMPILE", raising=False)
    monkeypatch.setenv("KILN_DAEMON", "off")
    after = tiers.cached_compile(kernel("always"), "sm_90a", {"num_warps": 4}, compile_fn=fake.compile)
    assert after.source == "cache"  # the compile stored what it made, as Triton's does


def test_through_a_daemon(node, monkeypatch):
    path = os.path.join(tempfile.mkdtemp(prefix="kt-", dir="/tmp"), "d.sock")
    server, _ = create_server(f"unix:{path}", "kiln.daemon.fake:compile", workers=1, cache=Cache())
    server.start()
    monkeypatch.setenv("KILN_DAEMON", f"unix:{path}")
    try:
        first = tiers.cached_compile(kernel("viad"), "sm_80", {"num_warps": 2}, compile_fn=_must_not_run)
        assert first.source == "daemon" and first.metadata["target"] == "sm_80" and first.llir
        again = tiers.cached_compile(kernel("viad"), "sm_80", {"num_warps": 2}, compile_fn=_must_not_run)
        assert again.source == "cache" and again.cubin == first.cubin  # the daemon filled the node cache
    finally:
        server.stop(0)


def test_daemon_of_another_build_is_not_used(node, monkeypatch, tmp_path):
    """Its binaries are another code generator's: used or cached under this build's key,
    they would outlive the upgrade that fixed them."""
    path = os.path.join(tempfile.mkdtemp(prefix="kv-", dir="/tmp"), "d.sock")
    server, _ = create_server(f"unix:{path}", "kiln.daemon.fake:compile", workers=1, cache=Cache(tmp_path / "theirs"))
    server.service.identity = {**server.service.identity, "kiln": "0.0.1"}
    server.start()
    monkeypatch.setenv("KILN_DAEMON", f"unix:{path}")
    try:
        with pytest.warns(RuntimeWarning, match="another kiln build"):
            first = tiers.cached_compile(kernel("older"), "sm_90a", {}, compile_fn=fake.compile)
        assert first.source == "local"
        again = tiers.cached_compile(kernel("older"), "sm_90a", {}, compile_fn=_must_not_run)
        assert again.source == "cache" and again.cubin == first.cubin
    finally:
        server.stop(0)


def test_daemon_down_warns_once_and_compiles_here(node, monkeypatch):
    monkeypatch.setenv("KILN_DAEMON", "unix:/nonexistent/kiln.sock")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        a = tiers.cached_compile(kernel("down_a"), "sm_90a", {}, compile_fn=fake.compile)
        b = tiers.cached_compile(kernel("down_b"), "sm_90a", {}, compile_fn=fake.compile)
    assert a.source == b.source == "local"
    messages = [str(w.message) for w in caught]
    assert len(messages) == 1 and "compiling in this process" in messages[0], messages
    assert "unix:/nonexistent/kiln.sock" in tiers._state.down_until  # not asked again for a while


def test_compile_errors_come_from_the_local_compile(node, monkeypatch):
    monkeypatch.setenv("KILN_DAEMON", "off")
    with pytest.raises(RuntimeError, match="boom"):
        tiers.cached_compile(kernel("err"), "sm_90a", {"fake_error": "boom"}, compile_fn=fake.compile)


def _must_not_run(*args):
    raise AssertionError("compiled in-process although a daemon or the cache should have answered")


def test_a_run_records_its_kernels_for_prewarming(node, monkeypatch):
    from kiln.daemon import prewarm
    monkeypatch.setenv("KILN_DAEMON", "off")
    monkeypatch.setenv("KILN_MANIFEST", str(node / "run.jsonl"))
    for name in ("rec_a", "rec_b"):
        tiers.cached_compile(kernel(name), "sm_90a", {"num_warps": 4}, compile_fn=fake.compile)
    kernels = prewarm.from_manifest(node / "run.jsonl", targets=["sm_100a"])
    assert [(fn.name, t, o) for fn, t, o in kernels] == [("rec_a", "sm_100a", {"num_warps": 4}),
                                                        ("rec_b", "sm_100a", {"num_warps": 4})]
