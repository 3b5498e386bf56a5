"""The CPU emulator's native collectives (codegen/emulate_collectives.py) on a hand-written kernel:
threads meet at `bar.sync`, and a barrier one thread alone reaches is reported, not waited on forever."""
import ctypes

import pytest

from kiln.codegen import emulate_collectives
from kiln.codegen.emulate_collectives import Collectives

KERNEL = """
declare i32 @emu_read_ptx_sreg_tid_x()
declare void @emu_barrier0()
declare i32 @emu_shfl_sync_bfly_i32(i32, i32, i32, i32)

define void @kernel(ptr %out, i32 %waiting_threads) {
  %tid = call i32 @emu_read_ptx_sreg_tid_x()
  %waits = icmp slt i32 %tid, %waiting_threads
  br i1 %waits, label %wait, label %done
wait:
  call void @emu_barrier0()
  %other = call i32 @emu_shfl_sync_bfly_i32(i32 -1, i32 %tid, i32 1, i32 31)
  %slot = getelementptr i32, ptr %out, i32 %tid
  store i32 %other, ptr %slot
  br label %done
done:
  ret void
}
"""


# every thread but 0 counts to %spins (volatile stores: a loop LLVM keeps) before the barrier thread 0 waits at
SLOW_ARRIVALS = """
declare i32 @emu_read_ptx_sreg_tid_x()
declare void @emu_barrier0()

define void @kernel(ptr %out, i32 %spins) {
entry:
  %tid = call i32 @emu_read_ptx_sreg_tid_x()
  %slot = getelementptr i32, ptr %out, i32 %tid
  %first = icmp eq i32 %tid, 0
  br i1 %first, label %wait, label %spin
spin:
  %i = phi i32 [ 0, %entry ], [ %next, %spin ]
  store volatile i32 %i, ptr %slot
  %next = add i32 %i, 1
  %more = icmp slt i32 %next, %spins
  br i1 %more, label %spin, label %wait
wait:
  call void @emu_barrier0()
  store i32 7, ptr %slot
  ret void
}
"""


def _run(threads, waiting_threads, kernel_text=KERNEL):
    import llvmlite.binding as llvm
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    errors = []
    collectives = Collectives(threads, errors)
    text, runtime = collectives.definitions(kernel_text)
    assert "declare void @emu_barrier0" not in text and runtime >= {"pthread_barrier_wait"}
    for name, address in collectives.symbols().items():
        llvm.add_symbol(name, address)
    product = ctypes.CFUNCTYPE(None, ctypes.c_int32, ctypes.c_int32)(collectives.warp_product)
    llvm.add_symbol("emu_warp_product", ctypes.cast(product, ctypes.c_void_p).value)
    tm = llvm.Target.from_default_triple().create_target_machine(opt=1)
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(text), tm)
    engine.finalize_object()
    kernel = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int32)(engine.get_function_address("kernel"))
    out = (ctypes.c_int32 * threads)(*([-1] * threads))
    enter = ctypes.CFUNCTYPE(None, *[ctypes.c_int32] * 4)(engine.get_function_address("emu_enter_program"))
    workers = [collectives.start(lambda tid: kernel(ctypes.addressof(out), waiting_threads), t, [(0, 0, 0)], enter)
               for t in range(threads)]
    finished = collectives.join(workers, keep=(engine, product, out))
    return finished, list(out), errors


def test_every_thread_meets_at_the_barrier_and_the_shuffle_trades_neighbours():
    finished, out, errors = _run(64, 64)
    assert finished and not errors
    assert out == [tid ^ 1 for tid in range(64)]


def test_a_barrier_one_thread_reaches_is_reported_once_nothing_moves(monkeypatch):
    monkeypatch.setattr(emulate_collectives, "STALL_S", 0.5)
    finished, out, _ = _run(64, 1)
    assert not finished
    assert out == [-1] * 64  # (thread 0 still waits; the others stored nothing)


def test_threads_still_computing_while_one_waits_are_no_stall(monkeypatch):
    """Thread 0 waits at the barrier far longer than STALL_S while the others count (with more cores than
    threads the count may end sooner: then it is only the barrier's ordinary case)."""
    monkeypatch.setattr(emulate_collectives, "STALL_S", 0.2)
    finished, out, errors = _run(64, 200_000_000, SLOW_ARRIVALS)
    assert finished and not errors
    assert out == [7] * 64


def test_an_unknown_mma_form_is_the_runs_error_not_a_crash():
    errors = []
    Collectives(32, errors).warp_product(0, 999)
    assert errors and errors[0].startswith("mma: IndexError")


@pytest.mark.parametrize("kind", ["bfly", "up", "down", "idx"])
def test_each_shuffle_and_mma_form_is_defined_where_declared(kind):
    text = (f"declare i32 @emu_shfl_sync_{kind}_i32(i32, i32, i32, i32)\n"
            "declare void @emu_mma_f16(ptr, i32, i32, i32, i32, i32, i32, float, float, float, float)\n")
    defined, _ = Collectives(32, []).definitions(text)
    assert f"define i32 @emu_shfl_sync_{kind}_i32(" in defined and "define void @emu_mma_f16(" in defined
    assert "emu_mma_s8" not in defined  # (only what the kernel declares)


def _where_kernel():
    import kiln
    import kiln.language as tl

    @kiln.jit
    def where(out):
        place = tl.program_id(0) + tl.num_programs(0) * (tl.program_id(1) + tl.num_programs(1) * tl.program_id(2))
        pid = tl.program_id(0) + 10 * tl.program_id(1) + 100 * tl.program_id(2)
        grid = tl.num_programs(0) + 10 * tl.num_programs(1) + 100 * tl.num_programs(2)
        tl.store(out + 2 * place, pid)
        tl.store(out + 2 * place + 1, grid)
    return where


def _run_where(programs):
    import numpy as np

    from kiln.codegen.emulate import run_on_cpu
    from kiln.ir import parse_function
    out = np.full(2 * 12, -1, np.int32)
    built = _where_kernel().warmup(out, grid=(1,), num_warps=2)
    run_on_cpu(parse_function(built.asm["kir"]), (2, 3, 2), [out], num_warps=2, programs=programs)
    return out.reshape(12, 2)


def test_each_thread_reads_the_program_it_runs_and_the_grid():
    """One set of threads runs every program in turn: each program's id and the grid, as a GPU's CTAs see
    them; with `programs`, only those."""
    from test_codegen_emulate import in_child
    every = in_child(_run_where, None)
    assert [tuple(row) for row in every] == [(x + 10 * y + 100 * z, 232) for z in range(2) for y in range(3)
                                             for x in range(2)]
    some = in_child(_run_where, [(1, 2, 1), (0, 0, 0)])
    assert some[0].tolist() == [0, 232] and some[11].tolist() == [121, 232]
    assert (some[1:11] == -1).all()
