"""What keeps ptxas from serializing a loop's wgmmas (C7514): an epilogue that converts the
accumulators two registers at a time (`cvt.rn.f16x2.f32`), as kiln's lowering does for every
fp32 -> fp16/bf16 block cast on sm_80+."""
import re

import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.codegen import nvjitlink
from kiln.codegen.target import parse_target


@kiln.jit
def _narrow(x_ptr, y_ptr, BLOCK: tl.constexpr, TO: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs).to(TO))


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("to, kind", [("fp16", "f16x2"), ("bf16", "bf16x2")])
def test_fp32_blocks_narrow_two_registers_at_a_time(target, to, kind):
    import ml_dtypes
    out = np.zeros(1024, np.float16 if to == "fp16" else ml_dtypes.bfloat16)
    k = _narrow.warmup(np.zeros(1024, np.float32), out, BLOCK=1024, TO=getattr(tl, {"fp16": "float16",
                                                                                      "bf16": "bfloat16"}[to]),
                       grid=(1,), target=target)
    ptx = k.asm["ptx"]
    assert len(re.findall(rf"cvt\.rn\.{kind}\.f32", ptx)) == 4  # 8 elements per thread
    assert not re.search(r"cvt\.rn\.(b)?f16\.f32", ptx)


def test_tutorial_08s_tile_loop_keeps_its_wgmmas_async():
    import sys
    import pathlib
    sys.path.insert(0, str(pathlib.Path(__file__).parent))
    from test_lang_tensor_descriptor import _grouped_matmul_device_descriptors as grouped
    pool, offsets, sizes = np.zeros(1 << 16, np.float16), np.zeros(30, np.int32), np.zeros(60, np.int32)
    k = grouped.warmup(pool, offsets, sizes, 4, NUM_PROGRAMS=132, BM=128, BN=128, BK=64, num_warps=4, num_stages=3,
                       grid=(1,), target="sm_90a")
    _, info = nvjitlink.link_cubin(k.asm["ptx"], parse_target("sm_90a"))
    assert "wgmma.mma_async" in k.asm["ptx"] and not nvjitlink.wgmma_serialized(info)


def test_benchs_tensor_core_kernels_keep_their_wgmmas_async():
    """Tutorial 03's matmul (tile and persistent), the W8A16 matmul, a matmul of an A scaled in the
    loop (fp32 and fp16 A), the fp16-accumulator matmul (fp16 and fp8) and the FlashAttention-2
    forward (pointers and host descriptors, fp16 and fp8) and backward, at the configs the
    benchmarks pick (tests/codegen_corpus/ptx_diff.py's set)."""
    import sys
    import pathlib
    sys.path.insert(0, str(pathlib.Path(__file__).parent / "codegen_corpus"))
    import ptx_diff
    seen = 0
    for name, kernel in ptx_diff.bench_kernels():
        _, info = nvjitlink.link_cubin(kernel.asm["ptx"], parse_target("sm_90a"))
        assert "wgmma.mma_async" in kernel.asm["ptx"] and not nvjitlink.wgmma_serialized(info), name
        seen += 1
    assert seen == 21
