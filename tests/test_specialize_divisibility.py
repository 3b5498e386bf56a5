"""Integers are specialized on divisibility by 16, as Triton's, and by 8 beside it (kiln.specialize's
int_divisibility): a row of 1000 fp16 elements starts 16-byte aligned, which is what lets a matmul
of such sizes read its tiles with TMA into wgmma."""
import importlib.util
import pathlib

import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.specialize import int_divisibility

BENCH = pathlib.Path(__file__).parent.parent / "bench"


@pytest.mark.parametrize("value, divisor", [(1000, 8), (1008, 16), (0, 16), (1001, 1), (1004, 1), (-24, 8),
                                            (2**40 + 8, 8)])
def test_the_divisibility_an_integer_is_specialized_on(value, divisor):
    assert int_divisibility(value) == divisor


@kiln.jit
def _store_n(out, n):
    tl.store(out, n)


def _argument_of(kernel, name):
    header = kernel.asm["kir"].splitlines()[0]
    return header.split(f'name = "{name}"')[0].rsplit("%", 1)[1]


def test_multiples_of_8_and_of_16_and_the_rest_are_three_kernels():
    out = np.zeros(1, np.int32)
    kernels = {n: _store_n[(1,)](out, n) for n in (1000, 1001, 1008, 1016, 1003)}
    assert out[0] == 1003
    assert "divisibility = 8" in _argument_of(kernels[1000], "n")
    assert "divisibility = 16" in _argument_of(kernels[1008], "n")
    assert "divisibility" not in _argument_of(kernels[1001], "n")
    assert kernels[1000] is kernels[1016] and kernels[1001] is kernels[1003]
    assert len({id(k) for k in kernels.values()}) == 3


def _tutorial_matmul(m, n, k):
    spec = importlib.util.spec_from_file_location("kiln_bench_kernels", BENCH / "kernels.py")
    kernels = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kernels)
    x = np.zeros((64, 64), np.float16)
    return kernels.matmul_kernel.warmup(x, x, x, m, n, k, k, 1, n, 1, n, 1, BLOCK_M=128, BLOCK_N=256, BLOCK_K=64,
                                        GROUP_M=8, num_warps=8, num_stages=3, grid=(1,), target="sm_90a")


def test_a_matmul_whose_sizes_are_multiples_of_8_reads_with_tma_into_wgmma():
    ptx = _tutorial_matmul(3000, 5000, 1000).asm["ptx"]
    assert "cp.async.bulk.tensor.2d" in ptx and "wgmma.mma_async" in ptx
    assert "ld.global.b16" not in ptx


def test_odd_strides_still_compile_to_element_loads():
    ptx = _tutorial_matmul(3001, 5001, 1001).asm["ptx"]
    assert "cp.async.bulk.tensor" not in ptx and "ld.global.b16" in ptx
