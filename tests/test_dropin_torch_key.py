"""PyTorch's torch_key from the node cache (kiln.dropin.torch_key): the same value PyTorch computes,
computed again whenever a file it reads changes, and a damaged record is a miss."""
import os
import subprocess
import sys

import pytest

from kiln.daemon import tiers
from kiln.dropin import torch_key


@pytest.fixture
def node(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(tiers, "_state", tiers._State())


@pytest.fixture
def tree(tmp_path):
    """A package as torch's is laid out: packages, a folder that is not one, bytecode."""
    root = tmp_path / "torch"
    for folder in ("", "sub", "sub/deeper", "data", "__pycache__", "aoti"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    for package in ("", "sub", "sub/deeper"):
        (root / package / "__init__.py").write_text("")
    (root / "sub" / "deeper" / "mod.py").write_text("x = 1\n")
    (root / "data" / "table.txt").write_text("not a module\n")
    (root / "aoti" / "interface.cpp").write_text("// C++\n")
    return root


def _fingerprint(root):
    return torch_key.fingerprint(str(root), "2.11.0", (str(root / "aoti"),))


def test_the_fingerprint_follows_every_file_torch_key_reads(tree):
    before = _fingerprint(tree)
    assert before == _fingerprint(tree)
    (tree / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"bytecode")  # not a package: not read
    (tree / "data" / "table.txt").write_text("changed, outside the packages\n")
    assert _fingerprint(tree) == before
    assert torch_key.fingerprint(str(tree), "2.12.0", (str(tree / "aoti"),)) != before
    changes = [lambda: (tree / "sub" / "deeper" / "mod.py").write_text("x = 22\n"),  # its size
               lambda: os.utime(tree / "sub" / "deeper" / "mod.py", ns=(1, 1)),  # its time
               lambda: (tree / "sub" / "new.py").write_text(""),
               lambda: (tree / "aoti" / "interface.cpp").write_text("// C++, edited\n"),
               lambda: (tree / "sub" / "deeper" / "mod.py").unlink()]
    seen = {before}
    for change in changes:
        change()
        now = _fingerprint(tree)
        assert now not in seen
        seen.add(now)


def _shared(tree, computed):
    def compute():
        computed.append(1)
        return bytes(range(32))
    return torch_key.SharedTorchKey(compute, str(tree), "2.11.0", (str(tree / "aoti"),))


def test_a_process_takes_the_key_another_stored_until_a_file_changes(node, tree):
    computed = []
    first = _shared(tree, computed)
    assert first() == bytes(range(32)) and first.source == "computed" and computed == [1]
    assert first() == bytes(range(32)) and computed == [1]  # once per process
    second = _shared(tree, computed)  # another process of the node
    assert second() == bytes(range(32)) and second.source == "node cache" and computed == [1]
    (tree / "sub" / "deeper" / "mod.py").write_text("x = 2\n")
    third = _shared(tree, computed)
    assert third() == bytes(range(32)) and third.source == "computed" and computed == [1, 1]


@pytest.mark.parametrize("record", [{"torch_key": "zz" * 32}, {"torch_key": "ab"}, {"torch_key": 7},
                                    {"torch_key": "ab" * 32, "more": 1}])
def test_a_record_that_is_not_a_key_is_a_miss(node, tree, record):
    tiers.node_cache().put_record(_fingerprint(tree), record)
    computed = []
    shared = _shared(tree, computed)
    assert shared() == bytes(range(32)) and shared.source == "computed" and computed == [1]


def test_set_and_clear_are_pytorchs(node, tree):
    computed = []
    shared = _shared(tree, computed)
    shared.set(b"\1" * 32)
    assert shared() == b"\1" * 32 and computed == []
    shared.clear()
    shared.prefetch()
    assert shared() == bytes(range(32)) and computed == [1]


JOB = """
import json, os
import torch._inductor.codecache as codecache
key = codecache.torch_key()
print(json.dumps({"kind": type(codecache.torch_key).__name__, "key": key.hex(),
                  "source": getattr(codecache.torch_key, "source", None)}))
"""


def test_under_the_drop_in_ranks_share_pytorchs_own_key(tmp_path):
    pytest.importorskip("torch")
    from kiln.dropin import doctor
    if doctor.installed_hook() is None:
        pytest.skip("kiln's drop-in hook is not installed here: reinstall with pip install -e .")
    import json
    env = {**os.environ, "KILN_DROPIN": "1", "KILN_SHARE_GRAPHS": "1", "KILN_CACHE_DIR": str(tmp_path / "cache"),
           "KILN_DAEMON": "off"}

    def run(**extra):
        out = subprocess.run([sys.executable, "-c", JOB], env={**env, **extra}, capture_output=True, text=True,
                             timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]
        return json.loads(out.stdout.strip().splitlines()[-1])
    own = run(KILN_SHARE_TORCH_KEY="0")
    first, second = run(), run()
    assert own["kind"] != "SharedTorchKey" and first["kind"] == "SharedTorchKey"
    assert (first["source"], second["source"]) == ("computed", "node cache")
    assert first["key"] == second["key"] == own["key"]
