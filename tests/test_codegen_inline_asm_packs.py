"""`inline_asm_elementwise` with pack > 1 hands each asm call `pack` consecutive registers of a thread.
As in Triton, the asm runs in its operand's layout, so for a tile loaded from memory a call gets `pack`
elements in a row along the contiguous dim (the bytes of one 32-bit word), even where the tile's other
uses (here a store in another order) would prefer another layout: triton_kernels' mxfp4 weights, whose
asm untwiddles the bits of a word's four bytes together, came out wrong when a call got four rows.
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
