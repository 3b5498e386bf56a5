"""Prewarming through the daemon's pool, from a recorded manifest or from the node cache."""
import os
import subprocess
import sys
import tempfile

import pytest

from kiln.cache import Cache
from kiln.daemon import create_server, prewarm
from kiln.daemon.client import Client
from kiln.ir import parse_function

IR = '''
kernel @{name}(%x: ptr<fp16>) {{
  %v = load %x : fp16
  %w = mul %v, %v : fp16
  store %x, %w
  return
}}
'''


def kernel(name):
    return parse_function(IR.format(name=name))


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    path = os.path.join(tempfile.mkdtemp(prefix="kp-", dir="/tmp"), "d.sock")
    cache = Cache(tmp_path_factory.mktemp("prewarm-cache"))
    server, _ = create_server(f"unix:{path}", "kiln.daemon.fake:compile", workers=2, cache=cache)
    server.start()
    yield f"unix:{path}", cache
    server.stop(0)


def test_manifest_records_and_replays(tmp_path, daemon):
    manifest = tmp_path / "run.jsonl"
    for name in ("pa", "pb", "pa"):  # a kernel compiled twice is prewarmed once
        prewarm.record(manifest, kernel(name), "sm_90a", {"num_warps": 4})
    assert len(prewarm.from_manifest(manifest)) == 2
    kernels = prewarm.from_manifest(manifest, targets=["sm_80", "sm_90a"])
    assert sorted((fn.name, t) for fn, t, _ in kernels) == [("pa", "sm_80"), ("pa", "sm_90a"),
                                                            ("pb", "sm_80"), ("pb", "sm_90a")]
    seen = []
    with Client(daemon[0]) as client:
        report = prewarm.prewarm(kernels, client, progress=lambda done, total: seen.append((done, total)))
        assert report.ok and report.total == 4 and report.statuses["CACHE_MISS"] == 4
        assert seen[-1] == (4, 4)
        assert prewarm.prewarm(kernels, client).statuses["CACHE_HIT"] == 4


def test_replay_the_node_cache_for_a_new_target(daemon):
    address, cache = daemon
    with Client(address) as client:
        client.compile(kernel("from_cache"), "sm_90a", {"num_warps": 8})
        kernels = prewarm.from_cache(cache, targets=["sm_100a"])
        assert ("from_cache", "sm_100a", {"num_warps": 8}) in [(fn.name, t, o) for fn, t, o in kernels]
        report = prewarm.prewarm(kernels, client)
        assert report.ok and report.statuses["CACHE_MISS"] >= 1


def test_errors_are_reported_per_kernel(daemon):
    with Client(daemon[0]) as client:
        report = prewarm.prewarm([(kernel("good"), "sm_90a", {}), (kernel("bad"), "sm_90a", {"fake_error": "nope"})],
                                 client)
    assert not report.ok and report.errors == [("bad", "sm_90a", "RuntimeError: nope")]
    assert report.statuses["ERROR"] == 1


def test_command_line(tmp_path, daemon):
    manifest = tmp_path / "run.jsonl"
    prewarm.record(manifest, kernel("cli_a"), "sm_90a", {})
    prewarm.record(manifest, kernel("cli_b"), "sm_90a", {"fake_error": "broken"})
    out = subprocess.run([sys.executable, "-m", "kiln.daemon", "prewarm", "--from-manifest", str(manifest),
                          "--address", daemon[0]], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "prewarmed 2 kernels" in out.stdout and "broken" in out.stderr
    (tmp_path / "junk.jsonl").write_text("{not json\n")
    with pytest.raises(ValueError, match="junk.jsonl:1"):
        prewarm.from_manifest(tmp_path / "junk.jsonl")
