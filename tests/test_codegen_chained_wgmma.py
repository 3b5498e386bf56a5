"""A 16-bit dot after a K loop whose A is computed from that loop's wgmma accumulator (fla's
chunk_fwd_kernel_o: `o = q @ h + tril(q @ k^T) @ v` a chunk) runs on wgmma too, A from registers in
wgmma's fragment layout and B stored to a shared tile (codegen/passes/standalone_wgmma.py). On
mma.sync its A came out of the accumulator's layout through shared memory and its result went back
into it the same way to meet the loop's other accumulator. A 16-bit dot chained to no wgmma result
stays on mma.sync. Built for sm_90a and checked as IR and PTX; the kernel emulated on the CPU (its
mma.sync form) against NumPy; on the GPU against NumPy."""
import re

import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.codegen import compile
from kiln.ir import parse_function

from test_codegen_emulate import in_child


@kiln.jit
def chunk_output(q_ptr, k_ptr, h_ptr, v_ptr, o_ptr, scale, KD: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr,
                 BV: tl.constexpr):
    """Program c: o = (q @ h + tril(q @ k^T) @ v) * scale over chunk c's BT rows, K summed BK at a time."""
    rows = tl.program_id(0) * BT + tl.arange(0, BT)
    vs = tl.arange(0, BV)
    b_o = tl.zeros((BT, BV), dtype=tl.float32)
    b_a = tl.zeros((BT, BT), dtype=tl.float32)
    for k0 in range(0, KD, BK):
        ks = k0 + tl.arange(0, BK)
        q = tl.load(q_ptr + rows[:, None] * KD + ks[None, :])
        kt = tl.load(k_ptr + rows[None, :] * KD + ks[:, None])
        h = tl.load(h_ptr + ks[:, None] * BV + vs[None, :])
        b_o += tl.dot(q, h)
        b_a += tl.dot(q, kt)
    causal = tl.arange(0, BT)[:, None] >= tl.arange(0, BT)[None, :]
    b_a = tl.where(causal, b_a, 0)
    v = tl.load(v_ptr + rows[:, None] * BV + vs[None, :])
    b_o = b_o * scale + tl.dot(b_a.to(v.dtype), v) * scale
    tl.store(o_ptr + rows[:, None] * BV + vs[None, :], b_o.to(o_ptr.dtype.element_ty))


@kiln.jit
def loaded_dot(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    """One dot of loaded operands, no loop: chained to no wgmma."""
    rm, rn, rk = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    c = tl.dot(tl.load(a_ptr + rm[:, None] * K + rk[None, :]), tl.load(b_ptr + rk[:, None] * N + rn[None, :]))
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], c)


CHUNKS, BT, KD, BK = 3, 64, 128, 64
SCALE = 0.125


def _args(dtype=np.float16, bv=64):
    rng = np.random.default_rng(11)
    q = (rng.standard_normal((CHUNKS * BT, KD)) / 4).astype(dtype)
    k = (rng.standard_normal((CHUNKS * BT, KD)) / 4).astype(dtype)
    h = (rng.standard_normal((KD, bv)) / 4).astype(dtype)
    v = rng.standard_normal((CHUNKS * BT, bv)).astype(dtype)
    return q, k, h, v, np.zeros((CHUNKS * BT, bv), dtype)


def _reference(q, k, h, v):
    q, k, h, v = (x.astype(np.float32) for x in (q, k, h, v))
    out = []
    for c in range(CHUNKS):
        rows = slice(c * BT, (c + 1) * BT)
        a = np.tril(q[rows] @ k[rows].T).astype(np.float16).astype(np.float32)
        out.append((q[rows] @ h + a @ v[rows]) * SCALE)
    return np.concatenate(out)


def _built(num_warps, bv=64, bf16=False, stages=3):
    args = _args(np.float16, bv)
    if bf16:  # (only the types count for a build)
        args = [kiln.reinterpret(np.zeros(x.shape, np.uint16), tl.bfloat16) for x in args]
    warm = chunk_output.warmup(*args, SCALE, KD=KD, BT=BT, BK=BK, BV=bv, grid=(CHUNKS,), target="sm_90a")
    return compile(parse_function(warm.asm["kir"]), "sm_90a", {"num_warps": num_warps, "num_stages": stages},
                   link=False)


def _after_loop(kir: str) -> str:
    return kir[kir.rindex("yield"):]


@pytest.mark.parametrize("num_warps, bv", [(4, 64), (8, 128)])
def test_the_epilogue_dot_runs_on_wgmma_with_a_from_registers(num_warps, bv):
    built = _built(num_warps, bv)
    after = _after_loop(built.kir)
    dot = next(line for line in after.splitlines() if " = warp_group_dot " in line)
    a = re.search(r"warp_group_dot (%\d+), (%\d+)", dot).group(1)
    # A a register value (a block in wgmma's layout), not a shared tile: no store of it
    assert re.search(rf"{a} = [^\n]*: <64x64xfp16:wgmma", after)
    assert after.count("local_store") == 1  # B's
    assert " dot " not in after and "mma.sync" not in built.ptx
    assert "{pending = 0}" in after


def test_at_four_warps_the_accumulator_is_read_as_a_without_a_conversion():
    # wgmma's A fragment holds what the loop's accumulator of the same rows holds: neither A nor the result
    # goes through shared memory (before: 8 KB into the mma operand, 17 KB back into wgmma's layout)
    after = _after_loop(_built(4).kir)
    conversions = [line for line in after.splitlines() if "scratch = " in line]
    assert len(conversions) == 1 and "blocked" in conversions[0]  # the store's, as Triton's


def test_the_epilogue_dot_assembles_for_sm_90a():
    from kiln.codegen.nvjitlink import link_cubin, resource_usage
    from kiln.codegen.target import parse_target
    for num_warps, bv in ((4, 64), (8, 128)):
        ptx = _built(num_warps, bv).ptx
        assert re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n64k16\.f32\.f16\.f16 \{[^}]*\}, \{", ptx)
        _, info = link_cubin(ptx, parse_target("sm_90a"))
        assert resource_usage(info)[1] == 0  # no spills


def test_a_bf16_chain_runs_on_wgmma_too():
    ptx = _built(4, bf16=True).ptx
    assert "mma.sync" not in ptx and "m64n64k16.f32.bf16.bf16" in ptx


def test_a_dot_of_loaded_operands_stays_on_mma_sync():
    a, b = np.zeros((64, 64), np.float16), np.zeros((64, 64), np.float16)
    warm = loaded_dot.warmup(a, b, np.zeros((64, 64), np.float32), M=64, N=64, K=64, grid=(1,), target="sm_90a")
    built = compile(parse_function(warm.asm["kir"]), "sm_90a", {"num_warps": 4}, link=False)
    assert "mma.sync" in built.ptx and "wgmma.mma_async" not in built.ptx  # (the .file line names this file)


def test_at_two_warps_the_epilogue_dot_stays_on_mma_sync():
    assert "mma.sync" in _built(2).ptx


def _emulated(num_warps):
    from kiln.codegen.emulate import run_on_cpu
    args = _args()
    kernel = chunk_output.warmup(*args, SCALE, KD=KD, BT=BT, BK=BK, BV=64, grid=(CHUNKS,), target="sm_90a")
    run_on_cpu(kernel.ir, (CHUNKS,), [*args, SCALE], num_warps=num_warps, options={"num_stages": 3})
    return args


def test_the_kernel_matches_numpy_emulated():
    q, k, h, v, o = in_child(_emulated, 4, timeout=600)
    np.testing.assert_allclose(o.astype(np.float32), _reference(q, k, h, v), rtol=2e-2, atol=2e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("num_warps, bv", [(2, 64), (4, 64), (8, 128)])
@pytest.mark.parametrize("num_stages", [2, 3])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_the_chained_dots_on_the_gpu(num_warps, bv, num_stages, dtype, cuda_torch):
    """As built for the GPU: the epilogue's dot on wgmma at 4 and 8 warps, mma.sync at 2."""
    torch = cuda_torch
    q, k, h, v, o = (torch.from_numpy(x).cuda().to(getattr(torch, dtype)) for x in _args(np.float16, bv))
    chunk_output[(CHUNKS,)](q, k, h, v, o, SCALE, KD=KD, BT=BT, BK=BK, BV=bv, num_warps=num_warps,
                            num_stages=num_stages)
    want = _reference(*(x.float().cpu().numpy() for x in (q, k, h, v)))
    tol = 2e-2 if dtype == "float16" else 6e-2
    np.testing.assert_allclose(o.float().cpu().numpy(), want, rtol=tol, atol=tol)
