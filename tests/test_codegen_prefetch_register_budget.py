"""The prefetch pass carries a loop's loads one iteration ahead only while they fit a thread's registers
together (codegen/passes/prefetch.py `_within_registers`): a tile loaded element by element (unaligned
strides: no cp.async ring) of more than 255 registers a thread stays in its iteration, a small one beside it
is still carried (triton_kernels' 1-warp 16x256x128 fp8 matmul: its 128x256 B tile carried spilled 88,988
bytes). Checked as IR, emulated on the CPU against NumPy, and on the GPU."""
import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.codegen.compiler import _options, lower_to_llvm
from kiln.codegen.target import parse_target
from kiln.ir import parse_function

from test_codegen_emulate import warmed_and_emulated


@kiln.jit
def unaligned_dot(a_ptr, b_ptr, c_ptr, K, stride_bn, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """c = a @ b.T over K in steps of BK, b read K-contiguous with a run-time row stride."""
    rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    a_ptrs = a_ptr + rm[:, None] * K + rk[None, :]
    b_ptrs = b_ptr + rk[:, None] + rn[None, :] * stride_bn
    acc = tl.zeros((BM, BN), tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptrs, mask=(rk < K - k)[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=(rk < K - k)[:, None], other=0.0)
        acc += tl.dot(a, b)
        a_ptrs += BK
        b_ptrs += BK
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], acc)


def _args(bm, bn, k):
    rng = np.random.default_rng(7)
    a = rng.integers(-2, 3, (bm, k)).astype(np.float16)
    b = rng.integers(-2, 3, (bn, k)).astype(np.float16)
    return a, b, np.zeros((bm, bn), np.float32), k, k  # K odd: no stride is 16-byte aligned


def _loads_before_the_loop(bm, bn, bk, num_warps):
    warm = unaligned_dot.warmup(*_args(bm, bn, 259), BM=bm, BN=bn, BK=bk, grid=(1,), target="sm_90a",
                                num_warps=num_warps)
    text = lower_to_llvm(parse_function(warm.asm["kir"]), parse_target("sm_90a"),
                         _options({"num_warps": num_warps, "num_stages": 3}), portable=True)[0]
    before = text[:text.index(" = for ")]
    return [line.split(" : ")[-1].split(":")[0] for line in before.splitlines() if " = load " in line]


def test_a_tile_past_the_register_file_is_loaded_in_its_iteration():
    # B: 128x64 fp16 over 32 threads, 256 registers a thread; A: 16x128, 64
    assert _loads_before_the_loop(16, 64, 128, num_warps=1) == ["<16x128xfp16"]


def test_tiles_that_fit_are_both_carried():
    # on 4 warps B takes 64 registers a thread, A 16: both carried
    assert sorted(_loads_before_the_loop(16, 64, 128, num_warps=4)) == ["<128x64xfp16", "<16x128xfp16"]


def test_the_product_is_numpy_s_emulated():
    a, b, c, _, _ = warmed_and_emulated(unaligned_dot, _args(16, 64, 259), "sm_90a", 1, BM=16, BN=64, BK=128)
    np.testing.assert_array_equal(c, a.astype(np.float32) @ b.astype(np.float32).T)


@pytest.mark.gpu
def test_the_product_is_torch_s_on_the_gpu():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    a, b, c, k, _ = (torch.from_numpy(x).cuda() if isinstance(x, np.ndarray) else x for x in _args(16, 256, 259))
    unaligned_dot[(1,)](a, b, c, k, k, BM=16, BN=256, BK=128, num_warps=1)
    torch.testing.assert_close(c, a.float() @ b.float().T, rtol=0, atol=0)
