"""kiln.codegen.passes.broadcast_mul_reduce: `tl.sum(a[:, :, None] * b[None, :, :], axis=1)` as a dot (Triton's
combine pattern), on the IR and in the PTX on a CPU, and against NumPy on the GPU."""
import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.codegen.passes import broadcast_mul_reduce, canonicalize, dce, dot_accumulate
from kiln.codegen.pipeline import PassContext
from kiln.codegen.target import parse_target
from kiln.ir import parse_function, print_function, verify


@kiln.jit
def _summed_products(Z, X, Y, K: tl.constexpr, N: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                     BK: tl.constexpr, AXIS: tl.constexpr, SWAP: tl.constexpr):
    """upstream test_core's test_dot_mulbroadcasted loop: Z = X @ Y by broadcast products summed over K."""
    pidm, pidn = tl.program_id(0), tl.program_id(1)
    offm = tl.arange(0, BM)[:, None]
    offn = tl.arange(0, BN)[None, :]
    offak = tl.arange(0, BK)[None, :]
    offbk = tl.arange(0, BK)[:, None]
    acc = tl.full((BM, BN), 0.0, tl.float32)
    for k in range(0, K // BK):
        x = tl.load(X + pidm * K * BM + offm * K + k * BK + offak)
        y = tl.load(Y + pidn * BN + offbk * N + k * N * BK + offn)
        x = tl.expand_dims(x, axis=2)
        y = tl.expand_dims(y, axis=0)
        t = tl.sum(y * x if SWAP else x * y, axis=AXIS)
        acc = t + acc
    tl.store(Z + pidm * BM * N + pidn * BN + offm * N + offn, acc)


def _build(bm=128, bn=32, bk=32, axis=1, swap=False):
    x = np.zeros((256, 160), np.float32)
    return _summed_products.warmup(x, x, x, K=160, N=192, BM=bm, BN=bn, BK=bk, AXIS=axis, SWAP=swap, grid=(1,),
                                   target="sm_90a")


def _rewritten(kernel):
    text = kernel.ir if isinstance(kernel.ir, str) else print_function(kernel.ir)
    fn = parse_function(text)
    ctx = PassContext(parse_target("sm_90a"), 4)
    for p in (canonicalize, broadcast_mul_reduce, dot_accumulate, dce):
        p.apply(fn, ctx)
        verify(fn)
    return fn


@pytest.mark.parametrize("swap", [False, True])
def test_the_sum_of_broadcast_products_becomes_a_dot_that_accumulates(swap):
    fn = _rewritten(_build(swap=swap))
    assert "reduce" not in [op.name for op in fn.walk()]
    assert not [r for op in fn.walk() for r in op.results if len(getattr(r.type, "shape", ())) == 3]  # all dead
    (dot,) = [op for op in fn.walk() if op.name == "dot"]
    assert dot.attrs["input_precision"] == "tf32"  # Triton's precision for the fp32 product
    assert [list(v.type.shape) for v in dot.operands] == [[128, 32], [32, 32], [128, 32]]
    assert dot.operands[2].owner is dot.parent  # `t + acc` folded: the loop's accumulator


@pytest.mark.parametrize("bm, bn, bk", [(128, 32, 8), (8, 32, 32), (128, 8, 32)])
def test_blocks_below_16_keep_their_sum(bm, bn, bk):
    assert "reduce" in [op.name for op in _rewritten(_build(bm, bn, bk)).walk()]


def test_a_sum_along_another_axis_is_no_dot():
    """Summed over N (axis 2) the block is M x K: the same pattern of products, not a matrix product."""
    x = np.zeros((64, 64), np.float32)
    k = _summed_products.warmup(x, x, x, K=32, N=32, BM=32, BN=32, BK=32, AXIS=2, SWAP=False, grid=(1,),
                                target="sm_90a")
    assert "reduce" in [op.name for op in _rewritten(k).walk()]


def test_the_kernel_fits_the_sm_without_spilling():
    """As a sum the 128x32x32 fp32 block took 589,824 bytes of shared memory (more than an SM has) and spilled."""
    k = _build()
    assert k.metadata["shared"] < 100_000 and k.n_spills == 0


@pytest.mark.gpu
def test_summed_products_match_numpy_on_the_gpu(hopper_torch):
    torch = hopper_torch
    M, N, K, BM, BN, BK = 256, 192, 160, 128, 32, 32
    rs = np.random.RandomState(17)
    x = (rs.randn(M, K) * 0.1).astype(np.float32)
    y = (rs.randn(K, N) * 0.1).astype(np.float32)
    z = torch.zeros((M, N), device="cuda")
    _summed_products[(M // BM, N // BN)](z, torch.from_numpy(x).cuda(), torch.from_numpy(y).cuda(), K=K, N=N, BM=BM,
                                         BN=BN, BK=BK, AXIS=1, SWAP=False)
    np.testing.assert_allclose(z.cpu().numpy(), x @ y, atol=0.01)  # tf32 products, as Triton's
