"""Programs of unequal work launched longest first (kiln.codegen.passes.launch_order): which kernels the
pass marks, the order lowering's map gives their CTAs (run on the host), and kernels so marked on the CPU
emulator, each program's result where it was."""
import ctypes

import numpy as np
import pytest
from llvmlite import binding as llvm, ir

import kiln
import kiln.language as tl
from kiln.codegen import compile as compile_ir
from kiln.codegen.lower.program_ids import I32, longest_first
from kiln.codegen.passes import launch_order
from kiln.ir import parse_function

from test_codegen_emulate import in_child


@kiln.jit
def _to_diagonal(X, Out, n, BLOCK: tl.constexpr, FROM_DIAGONAL: tl.constexpr):
    """Program (i, h) sums the blocks of row h of X up to its diagonal block i, or from it on."""
    i, h = tl.program_id(0), tl.program_id(1)
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    if FROM_DIAGONAL:
        lo, hi = i * BLOCK, n
    else:
        lo, hi = 0, (i + 1) * BLOCK
    for start in range(lo, hi, BLOCK):
        acc += tl.load(X + h * n + start + cols)
    tl.store(Out + (h * tl.num_programs(0) + i) * BLOCK + cols, acc)


@kiln.jit
def _clamped(X, Out, n, BLOCK: tl.constexpr, COUNTED: tl.constexpr):
    """Program i's loop runs to its diagonal block clamped to n, or (COUNTED) counts the blocks from it to n."""
    i = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    if COUNTED:
        for step in range((n - i * BLOCK) // BLOCK):
            acc += tl.load(X + (i + step) * BLOCK + cols)
    else:
        for start in range(0, tl.minimum((i + 1) * BLOCK, n), BLOCK):
            acc += tl.load(X + start + cols)
    tl.store(Out + i * BLOCK + cols, acc)


@kiln.jit
def _two_ways(X, Out, n, BLOCK: tl.constexpr):
    """Two loops, one growing with the program id and one shrinking: as much work in every program."""
    i = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, i * BLOCK, BLOCK):
        acc += tl.load(X + start + cols)
    for start in range(i * BLOCK, n, BLOCK):
        acc += tl.load(X + start + cols)
    tl.store(Out + i * BLOCK + cols, acc)


@kiln.jit
def _loaded_bound(X, Ends, Out, BLOCK: tl.constexpr, ATOMIC: tl.constexpr):
    """Each program's loop ends where Ends says (or, ATOMIC, at its diagonal, adding into Out)."""
    i = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    hi = (i + 1) * BLOCK if ATOMIC else tl.load(Ends + i)
    for start in range(0, hi, BLOCK):
        acc += tl.load(X + start + cols)
    if ATOMIC:
        tl.atomic_add(Out + cols, acc)
    else:
        tl.store(Out + i * BLOCK + cols, acc)


@kiln.jit
def _grid_stride(X, Out, n, BLOCK: tl.constexpr, PROGRAMS: tl.constexpr):
    """A persistent kernel's loop: from the program id, a step of the launch's programs (one block each)."""
    cols = tl.arange(0, BLOCK)
    for block in range(tl.program_id(0), n, PROGRAMS):
        tl.store(Out + block * BLOCK + cols, tl.load(X + block * BLOCK + cols) * 2)


def _order(kernel, *args, target="sm_80", **meta):
    k = kernel.warmup(*args, grid=(1,), num_warps=1, target=target, **meta)
    return parse_function(compile_ir(parse_function(k.asm["kir"]), target, {"num_warps": 1}, link=False).kir) \
        .attrs.get("launch_order")


def test_work_growing_or_shrinking_along_one_axis_is_marked():
    x, out = np.zeros(256, np.float32), np.zeros(256, np.float32)
    # 16 blocks of 16 fp32 a program index along axis 0, 64 bytes each
    assert _order(_to_diagonal, x, out, 256, BLOCK=16, FROM_DIAGONAL=False) == [0, 1, launch_order.L2_BYTES // 64]
    assert _order(_to_diagonal, x, out, 256, BLOCK=16, FROM_DIAGONAL=True) == [0, 0, launch_order.L2_BYTES // 64]


def test_bounds_clamped_or_counted_by_a_division_are_followed():
    """A minimum or a division by a constant keeps a bound monotone in the program id: one 64-byte block a
    program more, or less."""
    x, out = np.zeros(256, np.float32), np.zeros(256, np.float32)
    assert _order(_clamped, x, out, 256, BLOCK=16, COUNTED=False) == [0, 1, launch_order.L2_BYTES // 64]
    assert _order(_clamped, x, out, 256, BLOCK=16, COUNTED=True) == [0, 0, launch_order.L2_BYTES // 64]


def test_kernels_of_equal_work_or_whose_programs_may_wait_are_not_marked():
    x, out, ends = np.zeros(256, np.float32), np.zeros(256, np.float32), np.zeros(16, np.int32)
    assert _order(_two_ways, x, out, 256, BLOCK=16) is None
    assert _order(_grid_stride, x, out, 16, BLOCK=16, PROGRAMS=132) is None
    assert _order(_loaded_bound, x, ends, out, BLOCK=16, ATOMIC=False) is None
    assert _order(_loaded_bound, x, ends, out, BLOCK=16, ATOMIC=True) is None


def test_an_order_in_the_incoming_ir_is_dropped():
    """The order is the pass's finding: a request's IR saying otherwise (an axis past z) builds as written."""
    x, out = np.zeros(256, np.float32), np.zeros(256, np.float32)
    fn = parse_function(_two_ways.warmup(x, out, 256, BLOCK=16, grid=(1,), num_warps=1, target="sm_80").asm["kir"])
    fn.attrs["launch_order"] = [7, 1, -3]
    built = compile_ir(fn, "sm_80", {"num_warps": 1})
    assert "launch_order" not in parse_function(built.kir).attrs and "%nctaid" not in built.ptx


def _host_map(axis, reverse, budget):
    """longest_first as a host function: (x, y, z, nx, ny, nz, int32[3] out)."""
    module = ir.Module("order")
    module.triple = llvm.get_process_triple()
    f = ir.Function(module, ir.FunctionType(ir.VoidType(), [I32] * 6 + [I32.as_pointer()]), "order")
    b = ir.IRBuilder(f.append_basic_block())
    ids = longest_first(b, list(f.args[:3]), list(f.args[3:6]), axis, reverse, budget)
    for i, v in enumerate(ids):
        b.store(v, b.gep(f.args[6], [ir.Constant(I32, i)]))
    b.ret_void()
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    target = llvm.Target.from_default_triple().create_target_machine()
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(str(module)), target)
    engine.finalize_object()
    signature = ctypes.CFUNCTYPE(None, *[ctypes.c_int32] * 6, ctypes.POINTER(ctypes.c_int32))
    call = signature(engine.get_function_address("order"))
    return engine, call


@pytest.mark.parametrize("axis,reverse,budget,grid", [(0, 1, 12, (4, 5, 1)), (0, 0, 8, (4, 3, 2)), (1, 1, 1, (3, 4, 2)),
                                                      (2, 1, 1000, (2, 3, 5)), (0, 1, 12, (1, 7, 1))])
def test_ctas_play_every_program_once_longest_first_a_group_of_slices_at_a_time(axis, reverse, budget, grid):
    engine, call = _host_map(axis, reverse, budget)
    nx, ny, nz = grid
    out = (ctypes.c_int32 * 3)()
    played = []
    for z in range(nz):  # the hardware's order: linear index x + nx * (y + ny * z)
        for y in range(ny):
            for x in range(nx):
                call(x, y, z, nx, ny, nz, out)
                played.append(tuple(out))
    assert sorted(played) == sorted((x, y, z) for z in range(nz) for y in range(ny) for x in range(nx))
    along = [p[axis] for p in played]
    rank = [grid[axis] - 1 - a if reverse else a for a in along]
    slices = nx * ny * nz // grid[axis]
    group = max(1, min(budget // grid[axis], slices))
    for start in range(0, len(played), group * grid[axis]):  # within a group: ranks in order, each over its slices
        ranks = rank[start:start + group * grid[axis]]
        assert ranks == sorted(ranks)
        width = len(ranks) // grid[axis]
        assert ranks == [r for r in range(grid[axis]) for _ in range(width)]


def test_ids_stay_as_they_are_where_the_grid_has_2_to_the_31_programs_or_more():
    engine, call = _host_map(0, 1, 12)
    out = (ctypes.c_int32 * 3)()
    call(5, 7, 1, 65536, 65535, 1, out)
    assert tuple(out) == (5, 7, 1)


def _run_to_diagonal(from_diagonal):
    from kiln.codegen.emulate import run_on_cpu
    n, block, heads = 128, 16, 5
    x = np.random.default_rng(0).standard_normal((heads, n)).astype(np.float32)
    out = np.full((heads, n // block, block), np.nan, np.float32)
    k = _to_diagonal.warmup(x, out, n, BLOCK=block, FROM_DIAGONAL=from_diagonal, grid=(1,), num_warps=1, target="sm_80")
    built = compile_ir(parse_function(k.asm["kir"]), "sm_80", {"num_warps": 1}, link=False).kir
    assert parse_function(built).attrs["launch_order"] == [0, int(not from_diagonal), 16]
    run_on_cpu(parse_function(k.asm["kir"]), (n // block, heads), [x, out, n], num_warps=1)
    blocks = x.reshape(heads, n // block, block)
    sums = np.cumsum(blocks[:, ::-1], axis=1)[:, ::-1] if from_diagonal else np.cumsum(blocks, axis=1)
    return float(np.abs(out - sums).max())


@pytest.mark.parametrize("from_diagonal", [False, True])
def test_marked_kernels_on_the_emulator_write_every_program_s_result_where_it_was(monkeypatch, from_diagonal):
    monkeypatch.setattr(launch_order, "L2_BYTES", 64 * 8 * 2)  # groups of two slices of 8 programs, the last one alone
    assert in_child(_run_to_diagonal, from_diagonal) < 1e-4


@pytest.mark.gpu
@pytest.mark.parametrize("from_diagonal", [False, True])
def test_marked_kernels_on_the_gpu_write_every_program_s_result_where_it_was(from_diagonal):
    """4 KB a step, 64 programs along the work axis: groups of 24 MB / 4 KB // 64 = 96 slices, 300 slices in four."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    n, block, slices = 64 * 1024, 1024, 300
    x = torch.randn(slices, n, device="cuda")
    out = torch.full((slices, n // block, block), float("nan"), device="cuda")
    host = np.zeros(1, np.float32)
    assert _order(_to_diagonal, host, host, n, BLOCK=block, FROM_DIAGONAL=from_diagonal) == \
        [0, int(not from_diagonal), launch_order.L2_BYTES // (4 * block)]
    _to_diagonal[(n // block, slices)](x, out, n, BLOCK=block, FROM_DIAGONAL=from_diagonal)
    blocks = x.view(slices, n // block, block).double()
    want = blocks.flip(1).cumsum(1).flip(1) if from_diagonal else blocks.cumsum(1)
    torch.testing.assert_close(out.double(), want, atol=1e-3, rtol=1e-4)
