"""Interpreter: what host code of Triton's tutorials asks of interpreted kernels.

Tutorial 02 sizes a persistent launch from `kernel.n_regs` and `kernel.metadata.shared` of a kernel
built with `warmup` and from the CPU driver's device properties; the interpreter's CPU device is one
multiprocessor that runs one program at a time, so that arithmetic must find room for one program.
"""
import numpy as np

import kiln
import kiln.language as tl
from kiln.dropin.backends import CPUDriver
from kiln.dropin.compile import ASTSource, compile
from kiln.runtime import GPUTarget


@kiln.jit
def rows_softmax(out_ptr, in_ptr, n_rows, n_cols, BLOCK: tl.constexpr):
    for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0)):
        cols = tl.arange(0, BLOCK)
        x = tl.load(in_ptr + row * n_cols + cols, mask=cols < n_cols, other=-float("inf"))
        e = tl.exp(x - tl.max(x, axis=0))
        tl.store(out_ptr + row * n_cols + cols, e / tl.sum(e, axis=0), mask=cols < n_cols)


def _occupancy(props, n_regs, shared, num_warps):
    """Tutorial 02's: programs per multiprocessor by registers, then by shared memory."""
    by_regs = props["max_num_regs"] // (n_regs * props["warpSize"] * num_warps)
    return min(by_regs, props["max_shared_mem"] // shared)


def test_warmup_reports_resources_that_fit_one_program_per_multiprocessor():
    x = np.random.default_rng(0).standard_normal((37, 20)).astype(np.float32)
    out = np.zeros_like(x)
    props = CPUDriver().get_device_properties(None)
    for num_warps in (1, 4, 8, 32):
        kernel = rows_softmax.warmup(out, x, 37, 20, BLOCK=32, num_warps=num_warps, grid=(1,))
        kernel._init_handles()
        assert kernel.n_spills == kernel.metadata.n_spills == 0
        assert 1 <= kernel.n_regs <= 255 and kernel.shared == kernel.metadata.shared > 0
        assert _occupancy(props, kernel.n_regs, kernel.metadata.shared, num_warps) == 1
    programs = props["multiprocessor_count"] * _occupancy(props, kernel.n_regs, kernel.shared, 32)
    kernel[(programs, 1, 1)](out, x, 37, 20, 32)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(out, e / e.sum(axis=1, keepdims=True), rtol=1e-6)


def test_triton_compile_for_the_cpu_reports_the_same_resources():
    signature = {"out_ptr": "*fp32", "in_ptr": "*fp32", "n_rows": "i32", "n_cols": "i32", "BLOCK": "constexpr"}
    kernel = compile(ASTSource(rows_softmax, signature, {"BLOCK": 32}), target=GPUTarget("cpu", 0, 1),
                     options={"num_warps": 8})
    warm = rows_softmax.warmup(np.zeros(1, np.float32), np.zeros(1, np.float32), 1, 1, BLOCK=32, num_warps=8,
                               grid=(1,))
    assert (kernel.n_regs, kernel.n_spills, kernel.shared) == (warm.n_regs, warm.n_spills, warm.shared)
    assert kernel.metadata.shared == warm.metadata.shared
