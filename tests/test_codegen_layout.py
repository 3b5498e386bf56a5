"""Layouts cover every element, and the pieces lowering relies on (slices, reduction
axes, owner masks) mean what they say. Pure Python; no LLVM."""
import itertools

import pytest

from kiln.ir.layout import Blocked, Slice, blocked_for, thread_elements

SHAPES = [(16,), (128,), (1024,), (4096,), (4, 256), (32, 32), (1, 64), (64, 1), (2, 8), (16, 4, 8)]


def _all(shape):
    return set(itertools.product(*[range(d) for d in shape]))


def _layouts(shape, num_warps):
    rank = len(shape)
    orders = [tuple(reversed(range(rank))), tuple(range(rank))]
    for order in orders:
        for vec in (1, 4, 8):
            yield blocked_for(shape, order, vec, num_warps)


@pytest.mark.parametrize("num_warps", [1, 4, 8])
@pytest.mark.parametrize("shape", SHAPES)
def test_blocked_layouts_cover_every_element(shape, num_warps):
    for layout in _layouts(shape, num_warps):
        held = thread_elements(layout, shape, num_warps)
        seen = set()
        for regs in held:
            assert len(set(regs)) == len(regs), layout  # no element twice in one thread
            assert all(0 <= i < d for idx in regs for i, d in zip(idx, shape))
            seen.update(regs)
        assert seen == _all(shape), layout


@pytest.mark.parametrize("shape", [(4, 256), (32, 32), (16, 4, 8), (2, 8)])
def test_slice_holds_what_the_parent_holds_without_the_dim(shape):
    for layout in _layouts(shape, 4):
        for dim in range(len(shape)):
            sliced = Slice(dim, layout)
            small = shape[:dim] + shape[dim + 1:]
            parent = thread_elements(layout, shape, 4)
            child = thread_elements(sliced, small, 4)
            for p, c in zip(parent, child):
                assert set(c) == {i[:dim] + i[dim + 1:] for i in p}
            assert set().union(*map(set, child)) == _all(small)


def test_vectorized_layout_gives_each_thread_contiguous_runs():
    layout = blocked_for((1024,), (0,), 4, 4)
    assert layout == Blocked((4,), (32,), (4,), (0,))
    held = thread_elements(layout, (1024,), 4)
    assert held[0] == [(0,), (1,), (2,), (3,), (512,), (513,), (514,), (515,)]
    assert held[1][0] == (4,)  # lanes are 16 bytes apart: a warp reads 512 contiguous bytes


@pytest.mark.parametrize("shape", [(4, 256), (32, 32), (16, 4, 8), (64, 128)])
def test_register_runs_are_consecutive_and_aligned(shape):
    """What vector loads rely on: each thread's registers, in order, come in runs of n
    consecutive elements along one dim, each starting at a multiple of n; a slice keeps
    its parent's runs along the dims it keeps."""
    from kiln.codegen.analysis.access import register_run
    for parent in _layouts(shape, 4):
        for layout, small in [(parent, shape)] + [(Slice(d, parent), shape[:d] + shape[d + 1:]) for d in range(len(shape))]:
            d, n = register_run(layout)
            if d < 0:
                continue
            n = min(n, small[d])
            for held in thread_elements(layout, small, 4):
                for g in range(0, len(held), n):
                    run = held[g:g + n]
                    assert run[0][d] % n == 0
                    assert run == [run[0][:d] + (run[0][d] + i,) + run[0][d + 1:] for i in range(n)]
    assert register_run(Slice(0, Blocked((1, 16), (4, 8), (8, 1), (1, 0)))) == (0, 16)  # a W8A16 scale row
    assert register_run(Slice(1, Blocked((1, 16), (4, 8), (8, 1), (1, 0)))) == (-1, 1)


@pytest.mark.parametrize("shape", SHAPES)
def test_butterfly_partners_hold_the_same_rows(shape):
    """Reduce shuffles with lane ^ (k * stride) for k < distinct: each partner must hold
    the same other coordinates, and together they must cover the axis once per warp."""
    for layout in _layouts(shape, 4):
        held = thread_elements(layout, shape, 4)
        for d in range(len(shape)):
            lanes = layout.lane_axis(shape, d)
            drop = lambda regs: {i[:d] + i[d + 1:] for i in regs}
            for tid in range(128):
                group = {tid ^ (k * lanes.stride) for k in range(lanes.distinct)}
                assert all(drop(held[t]) == drop(held[tid]) for t in group)
                axis_values = [i[d] for t in sorted(group) for i in held[t]]
                assert len(axis_values) == len(set(axis_values)) * (len(axis_values) // len(set(axis_values)))
