"""Metadata read from the node cache or a daemon's reply is data: every field is held to
its type and range (kiln.cache.metadata) before the launcher sees it, and the launcher
never writes a value into the source it generates."""
import os
import tempfile

import pytest
import rogue_daemon

from kiln.cache import Cache
from kiln.cache.metadata import MetadataError, checked
from kiln.daemon import create_server, fake, tiers
from kiln.ir import parse_function
from kiln.proto import compile_key
from kiln.proto import compiler_pb2 as pb
from kiln.proto import compiler_pb2_grpc, function_to_proto
from kiln.proto.messages import options_to_proto
from kiln.runtime import launcher

IR = '''
kernel @{name}(%x: ptr<int32>) {{
  %v = load %x : int32
  store %x, %v
  return
}}
'''


def kernel(name):
    return parse_function(IR.format(name=name))


@pytest.fixture
def node(monkeypatch, tmp_path):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "node-cache"))
    monkeypatch.setenv("KILN_RUNTIME_DIR", str(tmp_path / "run"))
    monkeypatch.setenv("KILN_DAEMON", "off")
    monkeypatch.setattr(tiers, "_state", tiers._State())
    return tmp_path


def _shell(marker):
    return f"__import__('os').system('touch {marker}') or 4"


@pytest.mark.parametrize("bad", [
    {"num_warps": "SHELL"}, {"num_warps": 3}, {"num_warps": True}, {"shared": -1}, {"shared": 1 << 40},
    {"shared": "0"}, {"name": "another_kernel"}, {"n_regs": 1e9}, {"args": "x"}, {"threads": 64},
    {"planted": {"nested": 1}}, {"split_trips": [5, 63, 0, 0, 1]}, {"split_trips": [-2, 0, 1, 0, 1]},
    {"split_trips": [5, 63, 64, 0]}, {"split_trips": [5, 1 << 40, 64, 0, 1]}, {"split_trips": "SHELL"},
    {"args": [{"name": "d.5", "type": "tensormap", "llvm_type": "ptr", "tma_box": "64x999:swizzle128"}]},
    {"args": [{"name": "d.5", "type": "tensormap", "llvm_type": "ptr", "tma_box": "64x64:swizzle16"}]},
])
def test_a_planted_cache_entry_is_a_miss(node, bad):
    fn, options = kernel("victim"), {"num_warps": 4}
    marker = node / "ran"
    bad = {k: _shell(marker) if v == "SHELL" else v for k, v in bad.items()}
    key = compile_key(fn, "sm_90a", options)
    good = vars(fake.compile(fn, "sm_90a", options))
    with Cache() as cache:
        cache.put_result(key, {n: good[n] for n in ("cubin", "ptx", "llir", "kir")},
                         {**good["metadata"], "threads": 128, **bad})
    with pytest.warns(RuntimeWarning, match="ignored the node cache's entry"):
        binary = tiers.cached_compile(fn, "sm_90a", options, compile_fn=fake.compile)
    assert binary.source == "local" and binary.metadata["num_warps"] == 4 and binary.metadata["shared"] == 0
    assert tiers.cached_compile(fn, "sm_90a", options, compile_fn=fake.compile).source == "cache"  # rewritten
    assert not marker.exists()


def test_a_daemon_reply_with_bad_metadata_is_not_used(node, monkeypatch):
    path = os.path.join(tempfile.mkdtemp(prefix="km-", dir="/tmp"), "d.sock")
    fn, options = kernel("asked"), {"num_warps": 4}
    key = compile_key(fn, "sm_90a", options)
    server, servicer = rogue_daemon.serve(path, lambda request: rogue_daemon.response(
        key, {"name": "asked", "num_warps": _shell(node / "ran"), "shared": 0}))
    monkeypatch.setenv("KILN_DAEMON", f"unix:{path}")
    try:
        with pytest.warns(RuntimeWarning, match="bad reply"):
            binary = tiers.cached_compile(fn, "sm_90a", options, compile_fn=fake.compile)
        assert servicer.calls == 1 and binary.source == "local" and b"planted" not in binary.cubin
    finally:
        server.stop(0)
    assert not (node / "ran").exists()


def test_the_daemon_does_not_serve_a_bad_entry_of_its_cache(tmp_path):
    fn, options = kernel("served"), {"num_warps": 4}
    path = os.path.join(tempfile.mkdtemp(prefix="ks-", dir="/tmp"), "d.sock")
    cache = Cache(tmp_path / "daemon-cache")
    server, _ = create_server(f"unix:{path}", "kiln.daemon.fake:compile", workers=1, cache=cache)
    key = compile_key(fn, "sm_90a", options, server.service.identity)
    cache.put_result(key, {"cubin": b"planted", "ptx": "planted"}, {"name": "served", "num_warps": "4", "shared": 0})
    server.start()
    try:
        import grpc
        with grpc.insecure_channel(f"unix:{path}") as ch:
            request = pb.CompileRequest(ir=function_to_proto(fn), target="sm_90a", options=options_to_proto(options))
            reply = compiler_pb2_grpc.CompilerStub(ch).Compile(request, timeout=60)
        assert reply.cache_status == pb.CACHE_MISS and reply.cubin != b"planted" and reply.metadata.num_warps == 4
    finally:
        server.stop(0)
        cache.close()


class _Kernel:
    handle = 0


def test_the_launcher_takes_only_ints_and_writes_no_value_into_its_source(monkeypatch, tmp_path):
    marker = tmp_path / "ran"
    for num_warps, shared in ((_shell(marker), 0), (4, f"0) or __import__('os').system('touch {marker}') or (0"),
                              (4.0, 0), (64, 0), (4, -1)):
        with pytest.raises(ValueError, match="kernel k:"):
            launcher.make_launcher(_Kernel(), [], num_warps, shared, "k")
    assert not marker.exists()
    calls = []
    monkeypatch.setattr(launcher, "_cu_launch_kernel", lambda: lambda *args: calls.append(args) or 0)
    launcher.make_launcher(_Kernel(), [], 8, 1024, "k")((2, 1, 1), (), 0)
    assert calls[0][1:8] == (2, 1, 1, 256, 1, 1, 1024)


def test_checked_accepts_what_codegen_writes():
    metadata = {"name": "k", "target": "sm_90a", "num_warps": 8, "num_stages": 3, "threads": 256, "shared": 4096,
                "n_regs": 40, "n_spills": 0, "args": [{"name": "x", "type": "ptr<fp32>", "llvm_type": "ptr"},
                                                      {"name": "d.5", "type": "tensormap", "llvm_type": "ptr",
                                                       "tma_box": "64x128:swizzle128"}],
                "ptx_version": 80, "options": {"num_warps": 8}}
    assert checked(metadata, name="k", target="sm_90a", num_warps=8) is metadata
    with pytest.raises(MetadataError, match="target"):
        checked(metadata, target="sm_80")
