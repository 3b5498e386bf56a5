"""Layout conversions within warps lower to warp shuffles (kiln.codegen.analysis.warp_shuffles,
kiln.codegen.lower.warp_gather): no scratch bytes, no barrier. fla's forward substitution (one warp, a
16x16 block, a row turned into a column every serial step) took a store, a barrier and a load through
shared memory a step, and now takes shuffles as Triton's does. Plans are checked by replaying their
shuffles on the layouts' element maps; the kernel is emulated on the CPU against NumPy and its loop's
PTX read."""
import re

import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.codegen import compile as compile_ir
from kiln.codegen.analysis.warp_shuffles import shuffle_plan
from kiln.ir import parse_function
from kiln.ir.layout import Slice, parse_layout, thread_indices

from test_codegen_emulate import in_child

ROWS_16 = parse_layout("blocked:spt1.2:tpw8.4:wpc1.1:order1.0")  # mma.sync's accumulator on one warp
COLUMNS_16 = parse_layout("blocked:spt2.1:tpw4.8:wpc1.1:order0.1")
WIDE_ROWS_16 = parse_layout("blocked:spt1.4:tpw8.4:wpc1.1:order1.0")  # a loaded 16x16 block on one warp
TWO_WARPS = parse_layout("blocked:spt1.2:tpw8.4:wpc2.1:order1.0")


def _replayed(src, dst, shape, num_warps, plan):
    """Each thread's destination registers as the plan's shuffles deliver them (flat element ids)."""
    held = thread_indices(src, shape, num_warps)
    strides = np.cumprod((1,) + tuple(shape[:0:-1]))[::-1]
    held_ids = (held * strides).sum(-1)
    out = np.zeros((32 * num_warps, len(plan)), np.int64)
    for t in range(32 * num_warps):
        warp, lane = divmod(t, 32)
        for j, sources in enumerate(plan):
            source = next((s for s in sources if s.lanes >> lane & 1), sources[-1])
            out[t, j] = held_ids[warp * 32 + source.lane_of(lane), source.register]
    return out, (thread_indices(dst, shape, num_warps) * strides).sum(-1)


@pytest.mark.parametrize("src, dst, shape, num_warps", [
    (Slice(0, ROWS_16), Slice(1, ROWS_16), (16,), 1),  # a row of the block turned into a column
    (Slice(1, ROWS_16), Slice(0, ROWS_16), (16,), 1),
    (Slice(0, WIDE_ROWS_16), Slice(1, WIDE_ROWS_16), (16,), 1),  # four registers a row: four shuffles
    (parse_layout("blocked:spt1.4:tpw8.4:wpc2.1:order1.0"), TWO_WARPS, (16, 16), 2),  # each warp keeps its rows
    (parse_layout("blocked:spt1:tpw32:wpc1:order0"), Slice(1, parse_layout("blocked:spt1.1:tpw32.1:wpc1.1:order1.0")),
     (32,), 1),
])
def test_a_plan_s_shuffles_deliver_every_element(src, dst, shape, num_warps):
    plan = shuffle_plan(src, dst, shape, num_warps)
    assert plan is not None and all(1 <= len(sources) <= 4 for sources in plan)
    got, want = _replayed(src, dst, shape, num_warps, plan)
    np.testing.assert_array_equal(got, want)


def test_a_row_turned_into_a_column_takes_two_shuffles_a_register():
    # the row's element 2k + s sits in lane k's register s (replicated down the rows); the column's
    # element 8r + g in lane g's register r: lanes whose g is even read register 2r, odd ones 2r + 1
    plan = shuffle_plan(Slice(0, ROWS_16), Slice(1, ROWS_16), (16,), 1)
    assert [[s.register for s in sources] for sources in plan] == [[0, 1], [2, 3]]
    assert [plan[0][0].lane_of(lane) for lane in range(32)] == [lane >> 3 for lane in range(32)]


def test_a_conversion_across_warps_or_of_wide_tiles_goes_through_shared_memory():
    across = TWO_WARPS, parse_layout("blocked:spt1.2:tpw8.4:wpc1.2:order1.0")
    assert shuffle_plan(*across, (16, 16), 2) is None  # half of each warp's rows are another warp's
    assert shuffle_plan(Slice(1, TWO_WARPS), Slice(0, TWO_WARPS), (16,), 2) is None  # a column: half in each warp
    # within the warp, but a register gathers from eight source registers: more shuffles than a store and a load
    assert shuffle_plan(ROWS_16, COLUMNS_16, (16, 16), 1) is None
    wide = parse_layout("blocked:spt1.8:tpw8.4:wpc1.1:order1.0"), parse_layout("blocked:spt8.1:tpw4.8:wpc1.1:order0.1")
    assert shuffle_plan(*wide, (64, 64), 1) is None  # 128 registers a thread: shared memory moves them faster


@kiln.jit
def forward_substitution(a_ptr, out_ptr, N: tl.constexpr):
    """(I + L)^-1 of a strictly lower triangular L (N x N), one row a step, as fla's kkt_solve computes
    each diagonal block: the row extracted by a masked sum over the rows, then combined with the rows
    solved so far (a sum over the same axis of the row, as a column, times the block)."""
    o = tl.arange(0, N)
    a = tl.load(a_ptr + o[:, None] * N + o[None, :])
    a = tl.where(o[:, None] > o[None, :], a, 0.0)
    inv = -a
    for i in range(2, N):
        row = tl.sum(tl.where((o == i)[:, None], -a, 0.0), 0)
        row = tl.where(o < i, row, 0.0)
        row = row + tl.sum(row[:, None] * inv, 0)
        inv = tl.where((o == i)[:, None], row, inv)
    inv += (o[:, None] == o[None, :]).to(tl.float32)
    tl.store(out_ptr + o[:, None] * N + o[None, :], inv)


def _matrix(n=16):
    rng = np.random.default_rng(2)
    return (np.tril(rng.standard_normal((n, n)), -1) / 4).astype(np.float32)


def _built(num_warps):
    a = _matrix()
    warm = forward_substitution.warmup(a, np.zeros_like(a), N=16, grid=(1,), target="sm_90a", num_warps=num_warps)
    return compile_ir(parse_function(warm.asm["kir"]), "sm_90a", {"num_warps": num_warps}, link=False)


def test_the_substitution_loop_converts_by_shuffles_on_one_warp():
    built = _built(1)
    loop = built.kir[built.kir.index(" = for "):]
    loop = loop[:loop.index("\n  }\n")]
    assert "convert_layout" in loop and "scratch" not in loop and "barrier" not in loop
    body = re.split(r"\n\$L__BB0_\d+:", built.ptx)
    looping = [b for b in body if re.search(r"bra(\.uni)?\s+\$L__BB0_\d+;", b) and "shfl.sync.idx" in b]
    assert looping and all("bar.sync" not in b and "st.shared" not in b for b in looping)


def _emulated(num_warps):
    from kiln.codegen.emulate import run_on_cpu
    a = _matrix()
    out = np.zeros_like(a)
    warm = forward_substitution.warmup(a, out, N=16, grid=(1,), target="sm_90a", num_warps=num_warps)
    run_on_cpu(warm.ir, (1,), [a, out], num_warps=num_warps)
    return a, out


@pytest.mark.parametrize("num_warps", [1, 2])
def test_the_substitution_matches_numpy_emulated(num_warps):
    a, out = in_child(_emulated, num_warps, timeout=300)
    np.testing.assert_allclose(out, np.linalg.inv(np.eye(16) + a), rtol=1e-4, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("num_warps", [1, 2, 4])
def test_the_substitution_on_the_gpu(num_warps, cuda_torch):
    torch = cuda_torch
    a = torch.from_numpy(_matrix()).cuda()
    out = torch.zeros_like(a)
    forward_substitution[(1,)](a, out, N=16, num_warps=num_warps)
    np.testing.assert_allclose(out.cpu().numpy(), np.linalg.inv(np.eye(16) + a.cpu().numpy()), rtol=1e-4, atol=1e-5)
