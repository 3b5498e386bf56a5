"""fp32 dots at input_precision "tf32x3", "bf16x3" and "bf16x6" run as several tensor-core dots on
split operands, Triton's F32DotTC decomposition (codegen/passes/f32_dot_split.py): the pass's IR,
the instructions, and the emulator's sums against a NumPy model of the same parts and order (which
differs from both a plain tf32 product and the exact one)."""
import re

import numpy as np
import pytest

import kiln as triton
import kiln.language as tl

from kiln.codegen.passes import f32_dot_split
from kiln.ir import parse_function

from bench_support import needs_cuda
from test_codegen_emulate import in_child
from test_codegen_gpu_stage import _fp32_matmul


def _compiled(precision, target="sm_90a", k=64, bm=64, bn=64):
    f = np.zeros((64, 64), np.float32)  # B N-major: strides (BN, 1)
    return _fp32_matmul.warmup(f, f, f, k, bn, 1, BM=bm, BN=bn, BK=32, PRECISION=precision, grid=(1,), target=target,
                               num_warps=4, num_stages=3)


@pytest.mark.parametrize("precision,dots,operands", [
    ("tf32x3", 3, "fp32"), ("bf16x3", 3, "bf16"), ("bf16x6", 6, "bf16"), ("tf32", 1, "fp32"), ("ieee", 1, "fp32")])
def test_the_pass_splits_the_dot_into_tensor_core_dots(precision, dots, operands):
    fn = parse_function(_compiled(precision).asm["kir"])
    f32_dot_split.apply(fn)
    found = [op for op in fn.walk() if op.name == "dot"]
    assert len(found) == dots
    if dots > 1:
        assert {op.attrs["input_precision"] for op in found} == {"tf32" if operands == "fp32" else "ieee"}
        assert {op.operands[0].type.element_ty.name for op in found} == {operands}


@pytest.mark.parametrize("precision,instruction", [
    ("tf32x3", "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32"),
    ("bf16x3", "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16"),
])
def test_the_parts_run_on_wgmma(precision, instruction):
    ptx = _compiled(precision).asm["ptx"]
    assert instruction in ptx and "fma.rn.f32" not in ptx  # no FMA loop: the fp32 product is not computed so


def _tf32_rna(x):
    bits = x.view(np.int32)
    rounded = ((bits + 0x1000) & -0x2000).view(np.float32)
    return np.where(np.isnan(x), x, rounded)


def _tf32_read(x):
    """An fp32 operand as the tensor cores read it at tf32: its low 13 mantissa bits dropped."""
    return (x.view(np.uint32) & 0xFFFFE000).view(np.float32).astype(np.float64)


def _mma(a, b, acc, k_step, operand):
    """The tensor cores' sum: each instruction's k_step products exact (operands read as `operand`
    reads them), the running sum rounded to fp32 after each."""
    for k in range(0, a.shape[1], k_step):
        acc = (acc.astype(np.float64) + operand(a[:, k:k + k_step]) @ operand(b[k:k + k_step])).astype(np.float32)
    return acc


def _model(a, b, precision, block_k=32):
    """The kernel's loop: each block of k split and summed from zero, then added to the accumulator."""
    acc = np.zeros((a.shape[0], b.shape[1]), np.float32)
    for k in range(0, a.shape[1], block_k):
        acc = _split_dot(a[:, k:k + block_k], b[k:k + block_k], precision) + acc
    return acc


def _split_dot(a, b, precision):
    import ml_dtypes
    zero = np.zeros((a.shape[0], b.shape[1]), np.float32)
    if precision == "tf32x3":
        dot = lambda x, y, acc: _mma(x, y, acc, 8, _tf32_read)  # noqa: E731
        a_big, b_big = _tf32_rna(a), _tf32_rna(b)
        a_small, b_small = a - a_big, b - b_big
        d = dot(a_big, b_small, dot(a_small, b_big, zero))
        return dot(a_big, b_big, np.where(np.isnan(d), np.float32(0), d))
    def parts(x, n):
        out = []
        for i in range(n):
            out.append(x.astype(ml_dtypes.bfloat16))
            x = x - out[-1].astype(np.float32)
        return out
    n = 2 if precision == "bf16x3" else 3
    pa, pb = parts(a, n), parts(b, n)
    dot = lambda x, y, acc: _mma(x, y, acc, 16, lambda v: v.astype(np.float64))  # noqa: E731
    d = zero
    pairs = [(1, 1), (2, 0), (0, 2)] if n == 3 else []
    for i, j in pairs + [(1, 0), (0, 1)]:
        d = dot(pa[i], pb[j], d)
    return dot(pa[0], pb[0], np.where(np.isnan(d), np.float32(0), d))


def _emulated(precision):
    """A 32x32 tile over two k-steps of 32 (the emulator's time grows with the tile)."""
    from kiln.codegen.emulate import run_on_cpu
    rng = np.random.default_rng(8)
    a, b = rng.standard_normal((32, 64)).astype(np.float32), rng.standard_normal((64, 32)).astype(np.float32)
    c = np.zeros((32, 32), np.float32)
    kernel = _compiled(precision, bm=32, bn=32)
    run_on_cpu(parse_function(kernel.asm["kir"]), (1,), [a, b, c, 64, 32, 1], num_warps=4)
    return a, b, c


@pytest.mark.parametrize("precision", ["tf32x3", "bf16x3", "bf16x6"])
def test_the_emulated_parts_sum_as_the_model_does(precision):
    a, b, got = in_child(_emulated, precision, timeout=300)
    np.testing.assert_array_equal(got, _model(a, b, precision))
    exact = a.astype(np.float64) @ b.astype(np.float64)
    tf32_alone = _mma(a, b, np.zeros_like(got), 8, _tf32_read)
    assert np.abs(got - exact).max() * 20 < np.abs(tf32_alone - exact).max()  # the parts recover fp32's bits


@triton.jit
def _one_block_dot(A, B, C, S: tl.constexpr, PRECISION: tl.constexpr):
    r = tl.arange(0, S)
    c = tl.dot(tl.load(A + r[:, None] * S + r[None, :]), tl.load(B + r[:, None] * S + r[None, :]),
               input_precision=PRECISION)
    tl.store(C + r[:, None] * S + r[None, :], c)


def _one_block(precision, target, size=32):
    f = np.zeros((size, size), np.float32)
    return _one_block_dot.warmup(f, f, f, S=size, PRECISION=precision, grid=(1,), target=target, num_warps=4)


@pytest.mark.parametrize("precision", ["tf32x3", "bf16x6"])
@pytest.mark.parametrize("size", [32, 64])
def test_a_split_operand_is_loaded_16_bytes_at_a_time(precision, size):
    # read only by the split's parts, each staged for the dot: the loads keep their coalesced layout, not
    # the mma fragment's 8-byte pieces (the result's shape is the operands')
    ptx = _one_block(precision, "sm_90a", size).asm["ptx"]
    assert "ld.global.v4.b32" in ptx and "ld.global.v2.b32" not in ptx


def _emulated_one_block(precision):
    from kiln.codegen.emulate import run_on_cpu
    rng = np.random.default_rng(9)
    a, b = rng.standard_normal((32, 32)).astype(np.float32), rng.standard_normal((32, 32)).astype(np.float32)
    c = np.zeros((32, 32), np.float32)
    run_on_cpu(parse_function(_one_block(precision, "sm_80").asm["kir"]), (1,), [a, b, c], num_warps=4)
    return a, b, c


@pytest.mark.parametrize("precision", ["tf32x3", "bf16x6"])
def test_the_emulated_one_block_split_sums_as_the_model_does(precision):
    a, b, got = in_child(_emulated_one_block, precision, timeout=300)
    np.testing.assert_array_equal(got, _model(a, b, precision))


def test_a_tf32_dot_of_an_n_major_b_sums_as_the_tensor_cores_do():
    """B [K, N] row-major reaches mma.sync through N-major ring tiles, its fragments read an element a
    register (ldmatrix transposes 16-bit elements only): the emulator's sum is theirs, 8 of K per
    instruction."""
    a, b, got = in_child(_emulated, "tf32", timeout=300)
    np.testing.assert_array_equal(got, _mma(a, b, np.zeros_like(got), 8, _tf32_read))


def test_an_n_major_tf32_b_is_copied_as_stored_and_read_as_the_transposed_products_a_for_wgmma():
    """wgmma reads tf32 tiles K-major only: an unmasked N-major B (no TMA box) is copied 16 bytes
    at a time as stored and read into registers as the A of C^T = B^T A^T, not copied an
    element at a time into a K-major tile."""
    ptx = _compiled("tf32", target="sm_90a").asm["ptx"]
    assert re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n64k8\.f32\.tf32\.tf32 \{[^}]*\}, \{[^}]*\}", ptx)
    assert set(re.findall(r"cp\.async\.c[ag]\.shared\.global \[[^\]]*\], \[[^\]]*\], (\d+)", ptx)) == {"16"}
    assert "cp.async.bulk.tensor" not in ptx


def test_an_n_major_tf32_b_is_copied_as_stored_for_mma_sync():
    """mma.sync reads B's fragments an element a register: 16-byte copies keep the tile N-major."""
    ptx = _compiled("tf32", target="sm_80").asm["ptx"]
    assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in ptx and "ld.shared.b32" in ptx
    assert set(re.findall(r"cp\.async\.c[ag]\.shared\.global \[[^\]]*\], \[[^\]]*\], (\d+)", ptx)) == {"16"}


def test_the_interpreter_takes_the_bf16_precisions():
    rng = np.random.default_rng(9)
    a, b = rng.standard_normal((32, 32)).astype(np.float32), rng.standard_normal((32, 32)).astype(np.float32)
    c = np.zeros((32, 32), np.float32)
    _fp32_matmul[(1,)](a, b, c, 32, 32, 1, BM=32, BN=32, BK=32, PRECISION="bf16x6")
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("precision", ["tf32x3", "bf16x3", "bf16x6"])
def test_the_parts_on_the_gpu_come_near_the_fp32_product(precision):
    import torch
    gen = torch.Generator().manual_seed(10)
    a, b = torch.randn(128, 512, generator=gen), torch.randn(512, 64, generator=gen)
    c = torch.zeros(128, 64, device="cuda")
    _fp32_matmul[(1,)](a.cuda(), b.cuda(), c, 512, 64, 1, BM=128, BN=64, BK=32, PRECISION=precision, num_warps=4,
                       num_stages=3)
    exact = a.double() @ b.double()
    tf32 = torch.from_numpy(_mma(a.numpy(), b.numpy(), np.zeros((128, 64), np.float32), 8, _tf32_read))
    err, err_tf32 = (c.cpu().double() - exact).abs().max(), (tf32.double() - exact).abs().max()
    assert err * 20 < err_tf32, (err, err_tf32)
