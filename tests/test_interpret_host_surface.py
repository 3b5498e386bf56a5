"""Interpreter: what host code of Triton's tutorials asks of interpreted kernels.

Tutorial 02 sizes a persistent launch from `kernel.n_regs` and `kernel.metadata.shared` of a kernel
built with `warmup` and from the CPU driver's device properties; the interpreter's CPU device is one
multiprocessor that runs one program at a time, so that arithmetic must find room for one program.
Tutorial 08 passes a table of `tensor.data_ptr()` values and not the tensors: the pointers the
kernel loads from it must reach those tensors' memory (kiln.interpret.live_buffers).
"""
import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.errors import InterpreterError
from kiln.dropin.backends import CPUDriver
from kiln.dropin.compile import ASTSource, compile
from kiln.runtime import GPUTarget


@kiln.jit
def rows_softmax(out_ptr, in_ptr, n_rows, n_cols, BLOCK: tl.constexpr):
    for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0)):
        cols = tl.arange(0, BLOCK)
        x = tl.load(in_ptr + row * n_cols + cols, mask=cols < n_cols, other=-float("inf"))
        e = tl.exp(x - tl.max(x, axis=0))
        tl.store(out_ptr + row * n_cols + cols, e / tl.sum(e, axis=0), mask=cols < n_cols)


def _occupancy(props, n_regs, shared, num_warps):
    """Tutorial 02's: programs per multiprocessor by registers, then by shared memory."""
    by_regs = props["max_num_regs"] // (n_regs * props["warpSize"] * num_warps)
    return min(by_regs, props["max_shared_mem"] // shared)


def test_warmup_reports_resources_that_fit_one_program_per_multiprocessor():
    x = np.random.default_rng(0).standard_normal((37, 20)).astype(np.float32)
    out = np.zeros_like(x)
    props = CPUDriver().get_device_properties(None)
    for num_warps in (1, 4, 8, 32):
        kernel = rows_softmax.warmup(out, x, 37, 20, BLOCK=32, num_warps=num_warps, grid=(1,))
        kernel._init_handles()
        assert kernel.n_spills == kernel.metadata.n_spills == 0
        assert 1 <= kernel.n_regs <= 255 and kernel.shared == kernel.metadata.shared > 0
        assert _occupancy(props, kernel.n_regs, kernel.metadata.shared, num_warps) == 1
    programs = props["multiprocessor_count"] * _occupancy(props, kernel.n_regs, kernel.shared, 32)
    kernel[(programs, 1, 1)](out, x, 37, 20, 32)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(out, e / e.sum(axis=1, keepdims=True), rtol=1e-6)


def test_triton_compile_for_the_cpu_reports_the_same_resources():
    signature = {"out_ptr": "*fp32", "in_ptr": "*fp32", "n_rows": "i32", "n_cols": "i32", "BLOCK": "constexpr"}
    kernel = compile(ASTSource(rows_softmax, signature, {"BLOCK": 32}), target=GPUTarget("cpu", 0, 1),
                     options={"num_warps": 8})
    warm = rows_softmax.warmup(np.zeros(1, np.float32), np.zeros(1, np.float32), 1, 1, BLOCK=32, num_warps=8,
                               grid=(1,))
    assert (kernel.n_regs, kernel.n_spills, kernel.shared) == (warm.n_regs, warm.n_spills, warm.shared)
    assert kernel.metadata.shared == warm.metadata.shared


# --- pointers loaded from memory (tutorial 08's table of `data_ptr()` values) -----------------------
@kiln.jit
def scale_each(table_ptr, sizes_ptr, count, factor, BLOCK: tl.constexpr):
    """out_i = x_i * factor for each pair (x_i, out_i) of pointers in the table."""
    for g in range(count):
        x = tl.load(table_ptr + 2 * g).to(tl.pointer_type(tl.float32))
        out = tl.load(table_ptr + 2 * g + 1).to(tl.pointer_type(tl.float32))
        n = tl.load(sizes_ptr + g)
        offs = tl.arange(0, BLOCK)
        tl.store(out + offs, tl.load(x + offs, mask=offs < n) * factor, mask=offs < n)


def _table(torch, pairs):
    return torch.tensor([t.data_ptr() for pair in pairs for t in pair], dtype=torch.int64)


def test_pointers_loaded_from_a_table_reach_live_tensors_not_passed():
    torch = pytest.importorskip("torch")
    base = torch.arange(40, dtype=torch.float32)
    xs = [torch.arange(5, dtype=torch.float32) + 1, base[8:20]]  # a view: the storage's middle
    outs = [torch.zeros(5), torch.zeros(12)]
    sizes = torch.tensor([5, 12], dtype=torch.int32)
    scale_each[(1,)](_table(torch, zip(xs, outs)), sizes, 2, 3.0, BLOCK=16)
    for x, out in zip(xs, outs):
        torch.testing.assert_close(out, x * 3)


def test_a_second_launch_on_the_same_table_finds_the_tensors_without_a_scan(monkeypatch):
    torch = pytest.importorskip("torch")
    from kiln.interpret import live_buffers
    x, out = torch.ones(4), torch.zeros(4)
    table, sizes = _table(torch, [(x, out)]), torch.tensor([4], dtype=torch.int32)
    scale_each[(1,)](table, sizes, 1, 2.0, BLOCK=4)
    scans = []
    monkeypatch.setattr(live_buffers, "_scan", lambda: scans.append(1))
    scale_each[(1,)](table, sizes, 1, 5.0, BLOCK=4)
    assert scans == [] and out.tolist() == [5.0] * 4


def test_a_scan_for_live_tensors_passes_fake_ones_without_a_warning():
    """torch.compile's FakeTensors have no memory; asking for their storage's address warns (a deprecation)."""
    import warnings
    torch = pytest.importorskip("torch")
    from torch._subclasses.fake_tensor import FakeTensorMode
    from kiln.interpret import live_buffers
    with FakeTensorMode():
        fake = torch.empty(8)
    real = torch.ones(4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        live_buffers._scan()
    assert real.untyped_storage().data_ptr() in live_buffers._found and fake is not None


def test_an_address_past_a_live_tensors_storage_still_faults():
    torch = pytest.importorskip("torch")
    x, out = torch.ones(4), torch.zeros(4)
    table = torch.tensor([x.data_ptr(), out.data_ptr() + out.untyped_storage().nbytes()], dtype=torch.int64)
    with pytest.raises(InterpreterError, match="outside every argument's memory"):
        scale_each[(1,)](table, torch.tensor([4], dtype=torch.int32), 1, 2.0, BLOCK=4)


@kiln.jit
def copy(x_ptr, out_ptr, BLOCK: tl.constexpr):
    tl.store(out_ptr + tl.arange(0, BLOCK), tl.load(x_ptr + tl.arange(0, BLOCK)))


def test_an_argument_reaches_its_storage_and_no_further():
    """A view's kernel may read the rest of the allocation under it, as on a GPU and in Triton's
    interpreter (triton_kernels adds into 32 columns of a slice of fewer); past the storage is a fault."""
    torch = pytest.importorskip("torch")
    base = torch.arange(40, dtype=torch.float32)
    out = torch.zeros(8)
    copy[(1,)](base[8:12], out, BLOCK=8)
    assert out.tolist() == base[8:16].tolist()
    with pytest.raises(InterpreterError, match="past the end of argument 'x_ptr'"):
        copy[(1,)](base[36:40], out, BLOCK=8)
