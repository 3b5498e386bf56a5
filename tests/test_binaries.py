"""The frontend's binary lookup: node cache first, compile on a miss, store the result."""
import numpy as np

import kiln
import kiln.language as tl
from kiln import binaries
from kiln.cache import Cache


@kiln.jit
def copy_kernel(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst + offs, tl.load(src + offs, mask=offs < n), mask=offs < n)


def test_second_fetch_is_a_cache_hit_with_identical_bytes(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    binaries.node_cache.cache_clear()
    x = np.zeros(64, np.float32)
    ir = copy_kernel.warmup(x, x, 64, BLOCK=64).ir
    first = binaries.fetch(ir, "sm_80", {"num_warps": 4, "num_stages": 3})
    second = binaries.fetch(ir, "sm_80", {"num_warps": 4, "num_stages": 3})
    assert (first.source, second.source) == ("compiled", "cache")
    assert first.cubin == second.cubin and first.ptx == second.ptx
    assert second.metadata["num_warps"] == 4
    other = binaries.fetch(ir, "sm_80", {"num_warps": 8, "num_stages": 3})
    assert other.source == "compiled"
    binaries.node_cache.cache_clear()


def test_corrupt_blob_is_recompiled(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    binaries.node_cache.cache_clear()
    x = np.zeros(64, np.float32)
    ir = copy_kernel.warmup(x, x, 64, BLOCK=64).ir
    options = {"num_warps": 4, "num_stages": 3}
    good = binaries.fetch(ir, "sm_90a", options)
    cache = Cache(str(tmp_path))
    key = binaries.compile_key(ir, "sm_90a", options)
    blob = cache.entry(key)["artifacts"]["cubin"]
    cache._dc.set("blob/" + blob, b"not the cubin")  # same digest, different bytes
    again = binaries.fetch(ir, "sm_90a", options)
    assert again.source == "compiled" and again.cubin == good.cubin
    binaries.node_cache.cache_clear()
