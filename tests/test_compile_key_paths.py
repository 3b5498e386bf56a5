"""The compile key does not depend on where a kernel's file lives or what it is called: the same
kernel in two directories (two checkouts, two homes, a container's mount) or in two files of
other names (Inductor names each file by a hash of its whole text, which holds the device index)
gives one key and one compile, while its block IR keeps each copy's full path for line info."""
import importlib.util

import numpy as np
import pytest

from kiln.cache import Cache
from kiln.daemon import create_server
from kiln.daemon.client import Client
from kiln.proto import canonical_bytes, compile_key
from kiln.proto import compiler_pb2 as pb

KERNEL = '''
import kiln
import kiln.language as tl


@kiln.jit
def copy_kernel(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst + offs, tl.load(src + offs, mask=offs < n), mask=offs < n)
'''


def kernel_ir(directory, module_name, file_name="kernels.py", header=""):
    """The block IR kiln builds for the kernel file copied into `directory` as `file_name`."""
    directory.mkdir()
    path = directory / file_name
    path.write_text(header + KERNEL)
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    x = np.zeros(128, np.float32)
    return module.copy_kernel.warmup(x, x, 100, BLOCK=128).ir


@pytest.fixture
def two_copies(tmp_path):
    (tmp_path / "home").mkdir()
    return kernel_ir(tmp_path / "checkout-a", "kernels_a"), kernel_ir(tmp_path / "home" / "b", "kernels_b")


def test_two_file_names_one_key(tmp_path):
    """As Inductor writes one kernel for two ranks on cuda:0 and cuda:1: the files differ in name
    and in a line outside the kernel, the kernel's text and lines are the same."""
    a = kernel_ir(tmp_path / "rank0", "c4f1_rank0", "c4f1e2.py", "META = {'device': 0}\n")
    b = kernel_ir(tmp_path / "rank1", "c9b3_rank1", "c9b37a.py", "META = {'device': 1}\n")
    assert "c4f1e2.py" in str(canonical_bytes(a)) and "c9b37a.py" in str(canonical_bytes(b))
    assert compile_key(a, "sm_90a", {"num_warps": 4}) == compile_key(b, "sm_90a", {"num_warps": 4})


def test_the_same_kernel_on_other_lines_is_another_key(tmp_path):
    """Line numbers stay in the key (the binary's line info is theirs), as Triton's key holds the
    kernel's first line."""
    a = kernel_ir(tmp_path / "a", "moved_a")
    b = kernel_ir(tmp_path / "b", "moved_b", header="\n\n")
    assert compile_key(a, "sm_90a", {"num_warps": 4}) != compile_key(b, "sm_90a", {"num_warps": 4})


def test_two_paths_one_key(two_copies, tmp_path):
    a, b = two_copies
    assert canonical_bytes(a) != canonical_bytes(b)  # each keeps its own path for line info
    assert str(tmp_path / "checkout-a") in str(canonical_bytes(a))
    assert compile_key(a, "sm_90a", {"num_warps": 4}) == compile_key(b, "sm_90a", {"num_warps": 4})


def test_two_paths_one_compile_on_the_daemon(two_copies, tmp_path):
    cache = Cache(tmp_path / "cache", size_limit=1 << 30)
    server, _ = create_server(f"unix:{tmp_path / 'd.sock'}", "kiln.daemon.fake:compile", workers=1, cache=cache)
    server.start()
    try:
        with Client(f"unix:{tmp_path / 'd.sock'}") as client:
            first, second = (client.compile(fn, "sm_90a", {"num_warps": 4}) for fn in two_copies)
            assert (first.cache_status, second.cache_status) == (pb.CACHE_MISS, pb.CACHE_HIT)
            assert first.key == second.key and client.stats().misses == 1
    finally:
        server.stop(1)
        cache.close()


@pytest.fixture
def fresh_identity(tmp_path, monkeypatch):
    """The compiler identity asked afresh: no memo of an earlier answer, in memory or on disk."""
    from kiln.codegen import libdevice
    from kiln.proto import key
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))

    def identity():
        libdevice.libdevice_path.cache_clear()
        key._identity.cache_clear()
        return key.compiler_identity()
    yield identity
    libdevice.libdevice_path.cache_clear()
    key._identity.cache_clear()


def test_the_libdevice_linked_is_part_of_the_key_by_its_contents_not_its_path(fresh_identity, tmp_path, monkeypatch):
    fn = kernel_ir(tmp_path / "k", "kiln_key_libdevice")
    keys = {}
    for name, contents in (("a/libdevice.10.bc", b"BC\xc0\xde one"), ("b/libdevice.10.bc", b"BC\xc0\xde one"),
                           ("c/libdevice.10.bc", b"BC\xc0\xde two")):
        path = tmp_path / name
        path.parent.mkdir()
        path.write_bytes(contents)
        monkeypatch.setenv("KILN_LIBDEVICE", str(path))
        keys[name[0]] = compile_key(fn, "sm_90a", {"num_warps": 4}, fresh_identity())
    assert keys["a"] == keys["b"] != keys["c"]  # the same file in two places is one key; another file, another
