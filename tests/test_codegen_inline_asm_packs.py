"""`inline_asm_elementwise` with pack > 1 hands each asm call `pack` consecutive registers of a thread.
As in Triton, the asm runs in its operand's layout, so for a tile loaded from memory a call gets `pack`
elements in a row along the contiguous dim (the bytes of one 32-bit word), even where the tile's other
uses (here a store in another order) would prefer another layout: triton_kernels' mxfp4 weights, whose
asm untwiddles the bits of a word's four bytes together, came out wrong when a call got four rows.
With pack 1 the asm is an elementwise op like any other: it runs in its operands' layout, not its result
shape's preferred one (triton_kernels' swiglu converted three 16x128 fp32 blocks around its `ex2`).
Checked as IR on the CPU (no interpreter runs PTX) and on the GPU against NumPy."""
import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.codegen import compile as compile_ir
from kiln.ir import parse_function
from kiln.ir.layout import thread_elements

K, N = 64, 32


@kiln.jit
def reversed_words(w_ptr, out_ptr, K: tl.constexpr, N: tl.constexpr):
    """w: K x N bytes stored K-contiguous; out = w.T with each 32-bit word's bytes reversed, stored
    N-contiguous (so the store alone would rather hold runs of N)."""
    rk, rn = tl.arange(0, K), tl.arange(0, N)
    w = tl.load(w_ptr + rk[:, None] + rn[None, :] * K)
    x = tl.inline_asm_elementwise("prmt.b32 $0, $1, 0, 0x0123;", "=r,r", [w.trans()], dtype=tl.uint8,
                                  is_pure=True, pack=4)
    tl.store(out_ptr + rn[:, None] + rk[None, :] * N, x)


def _args():
    w_memory = np.random.default_rng(2).integers(0, 256, N * K).astype(np.uint8)  # column n at n*K
    return w_memory, np.zeros(N * K, np.uint8)


def _want(w_memory):
    words = w_memory.reshape(N, K // 4, 4)[:, :, ::-1].reshape(N, K)  # [n, k]
    return words.T.reshape(-1)  # stored N-contiguous: out[k*N + n]


@pytest.mark.parametrize("target, num_warps", [("sm_90a", 4), ("sm_80", 8), ("sm_80", 1)])
def test_each_asm_call_takes_four_bytes_of_a_row(target, num_warps):
    warm = reversed_words.warmup(*_args(), K=K, N=N, grid=(1,), target=target, num_warps=num_warps)
    built = parse_function(compile_ir(parse_function(warm.asm["kir"]), target, {"num_warps": num_warps},
                                      link=False).kir)
    (asm,) = [op for op in built.walk() if op.name == "inline_asm"]
    layout = asm.results[0].type.encoding
    for registers in thread_elements(layout, (N, K), num_warps):
        for g in range(0, len(registers), 4):
            n, k = registers[g]
            assert k % 4 == 0 and registers[g:g + 4] == [(n, k + j) for j in range(4)]


@pytest.mark.gpu
@pytest.mark.parametrize("num_warps", [1, 4, 8])
def test_reversed_words_on_the_gpu(num_warps, cuda_torch):
    torch = cuda_torch
    w_memory, out = (torch.from_numpy(x).cuda() for x in _args())
    reversed_words[(1,)](w_memory, out, K=K, N=N, num_warps=num_warps)
    np.testing.assert_array_equal(out.cpu().numpy(), _want(w_memory.cpu().numpy()))


@kiln.jit
def gated(a_ptr, out_ptr, M: tl.constexpr, N: tl.constexpr):
    """out = 2^(gate) * linear, gate and linear interleaved in a's rows (swiglu's packed input)."""
    rm = tl.arange(0, M)
    packed = tl.load(a_ptr + rm[:, None] * 2 * N + tl.arange(0, 2 * N)[None, :])
    gate, linear = tl.split(tl.reshape(packed, (M, N, 2)))
    power = tl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=r,r", [gate.to(tl.float32)], dtype=tl.float32,
                                      is_pure=True, pack=1)
    out = power / (1.0 + power) * linear.to(tl.float32)
    tl.store(out_ptr + rm[:, None] * N + tl.arange(0, N)[None, :], out.to(tl.bfloat16))


def test_one_element_a_call_runs_in_its_operands_layout():
    """Only the result converts for its store (16x128 bf16: 4 KB), nothing fp32 around the asm."""
    import ml_dtypes
    a, out = np.zeros((16, 256), ml_dtypes.bfloat16), np.zeros((16, 128), ml_dtypes.bfloat16)
    warm = gated.warmup(a, out, M=16, N=128, grid=(1,), target="sm_90a", num_warps=4)
    built = compile_ir(parse_function(warm.asm["kir"]), "sm_90a", {"num_warps": 4}, link=False)
    converted = [line for line in built.kir.splitlines() if "convert_layout" in line and "scratch" in line]
    assert len(converted) <= 1 and all("xbf16" in line for line in converted), converted


@pytest.mark.gpu
def test_one_element_a_call_on_the_gpu(cuda_torch):
    torch = cuda_torch
    a = torch.randn(16, 256, device="cuda").bfloat16()
    out = torch.zeros(16, 128, device="cuda", dtype=torch.bfloat16)
    gated[(1,)](a, out, M=16, N=128, num_warps=4)
    gate, linear = a.float().reshape(16, 128, 2).unbind(-1)
    power = torch.exp2(gate)
    torch.testing.assert_close(out.float(), power / (1 + power) * linear, rtol=2e-2, atol=2e-2)
