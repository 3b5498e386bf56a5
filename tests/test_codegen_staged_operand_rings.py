"""A wgmma dot whose B the loop computes (a dequantized weight, staged each iteration) keeps wgmma where the
rings of everything it reads do not fit beside the staged tiles: the raw weights are then loaded in the
iteration and only A comes through a ring (codegen/passes/smem_plan.py, `plan_loop`'s last try). Before,
the loop fell back to mma.sync (triton_kernels' bf16 x fp8 matmul with mx scales, 128x256x128 on 8 warps:
2,380 bytes of spills, none since). Checked as IR at sm_90a, emulated on the CPU, and on the GPU."""
import re

import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.codegen.passes import smem_pipeline
from kiln.codegen.pipeline import PASSES, PassContext, run_passes
from kiln.codegen.target import parse_target
from kiln.ir import parse_function, print_function

from test_codegen_emulate import in_child

E4M3 = {0x00: 0.0, 0x30: 0.5, 0x38: 1.0, 0x40: 2.0, 0xB8: -1.0}  # exact bit patterns


@kiln.jit
def fp8_group_scaled_matmul(x_ptr, w_ptr, s_ptr, out_ptr, K, BM: tl.constexpr, BN: tl.constexpr,
                            BK: tl.constexpr):
    """out = x @ (w * s repeated over each group of 32 rows of k) in fp16, w in fp8 and K-contiguous."""
    rm, rn, rk, rg = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK), tl.arange(0, BK // 32)
    acc = tl.zeros((BM, BN), tl.float32)
    for k in range(0, K, BK):
        x = tl.load(x_ptr + rm[:, None] * K + k + rk[None, :])
        w = tl.load(w_ptr + (k + rk[:, None]) + rn[None, :] * K)
        s = tl.load(s_ptr + (k // 32 + rg[:, None]) * BN + rn[None, :])
        w = (s[:, None, :] * w.to(tl.float32).reshape(BK // 32, 32, BN)).reshape(BK, BN)
        acc += tl.dot(x, w.to(tl.float16))
    tl.store(out_ptr + rm[:, None] * BN + rn[None, :], acc.to(tl.float16))


def _args(bm, bn, k):
    rng = np.random.default_rng(11)
    x = rng.integers(-2, 3, (bm, k)).astype(np.float16)
    bits = rng.choice(np.array(list(E4M3), np.uint8), (bn, k))  # w[k, n] at n * K + k
    s = (2.0 ** rng.integers(-2, 3, (k // 32, bn))).astype(np.float32)
    return x, kiln.reinterpret(bits, tl.float8e4nv), s, np.zeros((bm, bn), np.float16), k, bits


def _want(x, bits, s):
    w = np.vectorize(E4M3.get)(bits).astype(np.float64).T
    return (x.astype(np.float64) @ (w * np.repeat(s, 32, axis=0))).astype(np.float16)


def test_the_dot_stays_on_wgmma_with_its_weights_loaded_in_the_iteration():
    # x's ring (32 KB a stage), w's (32 KB) and s's (4 KB) do not fit beside the staged 128x256 fp16 B's two
    # slots (128 KB): x's ring alone does
    *args, _ = _args(128, 256, 256)
    warm = fp8_group_scaled_matmul.warmup(*args, BM=128, BN=256, BK=128, grid=(1,), target="sm_90a", num_warps=8)
    fn = parse_function(warm.asm["kir"])
    run_passes(fn, PassContext(parse_target("sm_90a"), num_warps=8, num_stages=3),
               stop=PASSES.index(smem_pipeline) + 1)
    text = print_function(fn)
    assert "warp_group_dot" in text and " dot " not in text  # was: the loop as written, a dot for mma.sync
    body = text[text.index(" = for "):]
    assert re.findall(r" = load .* : (<\w+>)", body) == ["<128x256xfp8e4nv>", "<4x256xfp32>"]  # in the iteration
    assert "async_copy" in body  # x through its ring


def test_the_product_is_numpy_s_emulated():
    *args, bits = _args(64, 64, 128)

    def check():
        from kiln.codegen.emulate import run_on_cpu
        warm = fp8_group_scaled_matmul.warmup(*args, BM=64, BN=64, BK=64, grid=(1,), target="sm_90a", num_warps=4)
        run_on_cpu(warm.ir, (1,), [args[0], bits, *args[2:]], num_warps=4, target="sm_90a")  # the fp8 as its bytes
        return args[3]
    np.testing.assert_array_equal(in_child(check, timeout=300), _want(args[0], bits, args[2]))


@pytest.mark.gpu
def test_the_product_is_right_on_the_gpu():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    x, _, s, out, k, bits = _args(128, 256, 512)
    cx, cs, cout = (torch.from_numpy(a).cuda() for a in (x, s, out))
    cw = torch.from_numpy(bits).cuda().view(torch.float8_e4m3fn)
    fp8_group_scaled_matmul[(1,)](cx, cw, cs, cout, k, BM=128, BN=256, BK=128, num_warps=8, num_stages=3)
    np.testing.assert_array_equal(cout.cpu().numpy(), _want(x, bits, s))
