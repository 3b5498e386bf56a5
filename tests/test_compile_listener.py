"""Triton's `knobs.compilation.listener` under kiln's JIT (issue 31): called once per compile of a
specialization with an ASTSource, metadata (`hash`, `target`), a CompileTimes and whether the kernel
was found compiled (after `device_caches.clear()`, kiln's kernels compiled before are found, as
Triton finds them in its cache directory: no lowering, nothing stored)."""
import numpy as np
import pytest

import kiln.language as tl
from kiln.dropin import knobs
from kiln.dropin.compile import ASTSource, IRSource
from kiln.dropin.jit import jit
from kiln.runtime import GPUTarget


@jit
def _cumsum(ptr):
    block = ptr + tl.arange(0, 4)
    tl.store(block, tl.cumsum(tl.load(block), 0))


def test_the_listener_hears_a_compile_then_a_hit_with_its_times():
    heard = []

    def listen(*, src, metadata, metadata_group, times, cache_hit):
        heard.append((src, metadata, metadata_group, times, cache_hit))

    _cumsum.device_caches.clear()
    _cumsum._by_specialization.clear()
    x = np.arange(4, dtype=np.float32)
    with knobs.compilation.scope():
        knobs.compilation.listener = listen
        _cumsum[(1,)](x)
        _cumsum[(1,)](x)  # launched from the launch cache: no compile, nothing heard
        assert len(heard) == 1
        _cumsum.device_caches.clear()
        assert len(_cumsum.device_caches[0][0]) == 0
        _cumsum[(1,)](x)
    assert len(heard) == 2
    (src, metadata, group, times, hit), again = heard
    assert isinstance(src, ASTSource) and src.signature == {"ptr": "*fp32"} and not hit
    assert len(metadata["hash"]) == 64 and isinstance(metadata["target"], GPUTarget)
    assert times.ir_initialization > 0 and times.total_lowering > 0 and times.store_results > 0
    assert times.total == times.ir_initialization + times.total_lowering + times.store_results
    assert again[4] and again[1]["hash"] == metadata["hash"]
    assert again[3].ir_initialization > 0 and again[3].total_lowering == 0 and again[3].store_results == 0
    np.testing.assert_array_equal(x, [0, 1, 5, 15])  # three running sums of 0, 1, 2, 3


def test_knobs_have_tritons_compile_times_and_ir_files_are_refused():
    times = knobs.CompileTimes(ir_initialization=3, lowering_stages=[("kir", 2), ("cubin", 5)], store_results=1)
    assert times.total_lowering == 7 and times.total == 11
    with pytest.raises(NotImplementedError, match="ASTSource"):
        IRSource("kernel.ttir")


def test_triton_compile_tells_the_listener_too():
    heard = []

    def listen(**kwargs):
        heard.append(kwargs)

    src = ASTSource(_cumsum, {"ptr": "*fp32"}, {}, {(0,): [["tt.divisibility", 16]]})
    from kiln.dropin.compile import compile
    with knobs.compilation.scope():
        knobs.compilation.listener = listen
        compiled = compile(src, target=GPUTarget("cpu", 0, 1))
    assert len(heard) == 1 and heard[0]["src"] is src and heard[0]["metadata"]["hash"] == compiled.hash
    assert heard[0]["times"].total > 0
