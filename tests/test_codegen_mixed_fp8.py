"""A dot of an e4m3 block and an e5m2 one (fp8 training's backward: e5m2 gradients against e4m3
weights) runs on the tensor cores with each operand in its own format, as Triton does:
`mma.sync...e4m3.e5m2` (sm_89) and `wgmma...e4m3.e5m2` (sm_90a), no conversion to fp16 (which
kiln did before: fp16 products at half fp8's rate). The kernels are bench/kernels.py's
`fp8_matmul_kernel` (fp32 out) and `f16_acc_matmul_kernel` (fp16 accumulators)."""
import re

import numpy as np
import pytest

import kiln
import kiln.language as tl

from bench_support import bench_kernels, needs_cuda
from test_codegen_emulate import in_child


_kernels = bench_kernels()
PAIRS = [("float8e4nv", "float8e5"), ("float8e5", "float8e4nv")]
PTX_KIND = {"float8e4nv": "e4m3", "float8e5": "e5m2"}


def _compiled(target, a_type, b_type, f16_out=False, k=256):
    kernel = _kernels.f16_acc_matmul_kernel if f16_out else _kernels.fp8_matmul_kernel
    a, b = (kiln.reinterpret(np.zeros((64, k), np.uint8), getattr(tl, t)) for t in (a_type, b_type))
    c = np.zeros((64, 64), np.float16 if f16_out else np.float32)
    extra = {} if f16_out else {"IMPRECISE": 0}
    return kernel.warmup(a, b, c, 64, 64, k, BLOCK_M=64, BLOCK_N=64, BLOCK_K=128, **extra, num_warps=4, num_stages=3,
                         grid=(1,), target=target)


@pytest.mark.parametrize("a_type,b_type", PAIRS)
@pytest.mark.parametrize("target,f16_out,instruction", [
    ("sm_89", False, "mma.sync.aligned.m16n8k32.row.col.f32.{a}.{b}.f32"),
    ("sm_90a", False, "wgmma.mma_async.sync.aligned.m64n64k32.f32.{a}.{b}"),
    ("sm_90a", True, "wgmma.mma_async.sync.aligned.m64n64k32.f16.{a}.{b}"),
])
def test_each_operand_reaches_the_tensor_cores_in_its_own_format(a_type, b_type, target, f16_out, instruction):
    kernel = _compiled(target, a_type, b_type, f16_out)
    ptx = kernel.asm["ptx"]
    found = set(re.findall(r"(?:wgmma\.mma_async|mma\.sync)\.[\w.]+", ptx))
    assert found == {instruction.format(a=PTX_KIND[a_type], b=PTX_KIND[b_type])}
    assert not re.search(r"cvt\.rn\.f16x2\.e[45]m[23]x2", ptx)  # no operand widened to fp16
    if not f16_out:
        assert "fp16" not in kernel.asm["kir"]


def test_other_mixed_operands_still_share_a_type():
    """fp16 with fp8 is promoted (to fp16) before the dot, as before; only e4m3 x e5m2 stays mixed."""
    @kiln.jit
    def mixed(a_ptr, b_ptr, c_ptr):
        r = tl.arange(0, 32)
        a = tl.load(a_ptr + r[:, None] * 32 + r[None, :])
        b = tl.load(b_ptr + r[:, None] * 32 + r[None, :])
        tl.store(c_ptr + r[:, None] * 32 + r[None, :], tl.dot(a, b))
    a = np.zeros((32, 32), np.float16)
    b = kiln.reinterpret(np.zeros((32, 32), np.uint8), tl.float8e5)
    kir = mixed.warmup(a, b, np.zeros((32, 32), np.float32), grid=(1,), target="sm_90a").asm["kir"]
    (dot,) = [line for line in kir.splitlines() if "= dot " in line]
    assert "fp8" not in dot.split(":")[-1]


def _per_instruction(a, b):
    """A @ B^T as the tensor cores sum it in fp32: each instruction's 32 products of k exactly, the
    sum rounded to fp32."""
    acc = np.zeros((a.shape[0], b.shape[0]), np.float32)
    for k in range(0, a.shape[1], 32):
        acc = (acc + a[:, k:k + 32].astype(np.float64) @ b[:, k:k + 32].astype(np.float64).T).astype(np.float32)
    return acc


def _emulated(a_type, b_type):
    import ml_dtypes
    from kiln.codegen.emulate import run_on_cpu
    from kiln.ir import parse_function
    formats = {"float8e4nv": ml_dtypes.float8_e4m3fn, "float8e5": ml_dtypes.float8_e5m2}
    rng = np.random.default_rng(5)
    a = rng.standard_normal((64, 256)).astype(formats[a_type])
    b = rng.standard_normal((64, 256)).astype(formats[b_type])
    c = np.zeros((64, 64), np.float32)
    kernel = _compiled("sm_90a", a_type, b_type)
    run_on_cpu(parse_function(kernel.asm["kir"]), (1,), [a.view(np.uint8), b.view(np.uint8), c, 64, 64, 256],
               num_warps=4)
    return c, _per_instruction(a, b)


@pytest.mark.parametrize("a_type,b_type", PAIRS)
def test_a_mixed_fp8_mma_on_the_emulator_reads_each_format(a_type, b_type):
    """Read in the wrong format, an e4m3 and an e5m2 byte differ in value by a factor of up to 2^7."""
    got, want = in_child(_emulated, a_type, b_type, timeout=300)
    np.testing.assert_array_equal(got, want)


def test_the_interpreter_multiplies_mixed_fp8_as_numpy_does():
    import ml_dtypes
    rng = np.random.default_rng(6)
    a = rng.standard_normal((64, 128)).astype(ml_dtypes.float8_e4m3fn)
    b = rng.standard_normal((64, 128)).astype(ml_dtypes.float8_e5m2)
    c = np.zeros((64, 64), np.float32)
    _kernels.fp8_matmul_kernel[(1, 1)](kiln.reinterpret(a.view(np.uint8), tl.float8e4nv),
                                       kiln.reinterpret(b.view(np.uint8), tl.float8e5), c, 64, 64, 128,
                                       BLOCK_M=64, BLOCK_N=64, BLOCK_K=128, IMPRECISE=0)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64).T, rtol=1e-5, atol=1e-4)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("a_type,b_type", [("float8_e4m3fn", "float8_e5m2"), ("float8_e5m2", "float8_e4m3fn")])
def test_a_mixed_fp8_matmul_on_the_gpu_matches_torch(a_type, b_type):
    """Small integers: every product and partial sum exact in the tensor cores' fp8 accumulation too."""
    import torch
    rng = np.random.default_rng(12)
    a = torch.tensor(rng.integers(-4, 5, (128, 512)), dtype=torch.float32)
    b = torch.tensor(rng.integers(-4, 5, (128, 512)), dtype=torch.float32)
    c = torch.zeros(128, 128, device="cuda")
    _kernels.fp8_matmul_kernel[(2, 2)](a.to(getattr(torch, a_type)).cuda(), b.to(getattr(torch, b_type)).cuda(), c,
                                       128, 128, 512, BLOCK_M=64, BLOCK_N=64, BLOCK_K=128, IMPRECISE=0, num_warps=4,
                                       num_stages=3)
    torch.testing.assert_close(c.cpu(), a @ b.T, rtol=0, atol=0)
