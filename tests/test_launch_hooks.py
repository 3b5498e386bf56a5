"""Triton's launch and kernel-load hooks (`knobs.runtime`) around kiln's own launches and the
drop-in's, in the interpreter (kiln's CPU device); the GPU tier checks the handles on a GPU."""
import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.dropin import knobs
from kiln.dropin.compile import ASTSource, compile
from kiln.runtime import GPUTarget


def _flops(grid, kernel, args):
    return {"name": f"{kernel.name} [n={args['n']}, BLOCK={args['BLOCK']}]", "grid": grid, "flops": 2 * args["n"]}


@kiln.jit(launch_metadata=_flops)
def scaled(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


@kiln.jit
def plain(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)


@pytest.fixture(autouse=True)
def interpreted(monkeypatch):
    monkeypatch.setenv("KILN_INTERPRET", "1")
    hooks = ("launch_enter_hook", "launch_exit_hook", "kernel_load_start_hook", "kernel_load_end_hook")
    saved = {name: getattr(knobs.runtime, name) for name in hooks}
    for name, chain in saved.items():
        setattr(knobs.runtime, name, knobs.HookChain(reversed=chain.reversed))
    yield
    for name, chain in saved.items():
        setattr(knobs.runtime, name, chain)


def test_enter_and_exit_hooks_see_the_kernels_launch_metadata():
    seen = []
    knobs.runtime.launch_enter_hook.add(lambda meta: seen.append(("enter", meta.get())))
    knobs.runtime.launch_exit_hook.add(lambda meta: seen.append(("exit", meta.get()["name"])))
    x, out = np.arange(40, dtype=np.float32), np.zeros(40, np.float32)
    scaled[(3, 1, 2)](x, out, 40, BLOCK=16)
    np.testing.assert_array_equal(out, 2 * x)  # launched between the two
    enter, exit_ = seen
    assert enter[0] == "enter" and exit_ == ("exit", "scaled [n=40, BLOCK=16]")
    assert enter[1]["flops"] == 80 and enter[1]["grid"] == (3, 1, 2) and enter[1]["stream"] is None


def test_a_kernels_metadata_function_runs_only_when_a_hook_reads_it():
    calls = []

    @kiln.jit(launch_metadata=lambda grid, kernel, args: calls.append(grid) or {})
    def touched(x_ptr):
        tl.store(x_ptr, 1.0)
    x = np.zeros(1, np.float32)
    touched[(1,)](x)  # no hook: no metadata at all
    knobs.runtime.launch_enter_hook.add(lambda meta: None)
    touched[(1,)](x)
    assert calls == []
    knobs.runtime.launch_enter_hook = lambda meta: meta.get()  # a callable set in place of the chain
    touched[(1,)](x)
    assert calls == [(1,)]


def test_the_metadata_function_sees_the_grid_as_launched():
    # Triton hands it the grid as given (a grid function's answer), not padded to three sizes
    grids = []
    knobs.runtime.launch_enter_hook.add(lambda meta: grids.append(meta.get()["grid"]))
    x, out = np.arange(40, dtype=np.float32), np.zeros(40, np.float32)
    scaled[(3,)](x, out, 40, BLOCK=16)
    scaled[[3, 1]](x, out, 40, BLOCK=16)
    scaled[lambda meta: (meta["n"] // meta["BLOCK"] + 1,)](x, out, 40, BLOCK=16)  # compiled already
    scaled.run(x, out, 40, BLOCK=8, grid=lambda meta: (5,))  # a grid function before a compile
    scaled.warmup(x, out, 40, BLOCK=16, grid=(3,))[(3, 1)](x, out, 40, 16)  # kiln's compiled kernel
    assert grids == [(3,), [3, 1], (3,), (5,), (3, 1)]
    np.testing.assert_array_equal(out, 2 * x)


def test_a_launch_knows_at_once_when_hooks_come_and_go():
    hook = lambda meta: None  # noqa: E731
    assert not knobs.launch_hooked
    knobs.runtime.launch_exit_hook.add(hook)
    assert knobs.launch_hooked
    knobs.runtime.launch_exit_hook.remove(hook)
    assert not knobs.launch_hooked
    with knobs.runtime.scope():
        knobs.runtime.launch_enter_hook = hook
        assert knobs.launch_hooked
    assert not knobs.launch_hooked  # the scope gave the empty chain back
    knobs.runtime.launch_enter_hook = None
    assert not knobs.launch_hooked


def test_a_runtime_group_put_in_place_of_the_knobs_own_is_read(monkeypatch):
    # Triton's test fixtures replace `knobs.runtime` with a reset copy and set hooks on that
    seen = []
    fresh = knobs.runtime.copy()
    fresh.launch_enter_hook = lambda meta: seen.append(meta.get()["name"])
    plain[(1,)](np.zeros(8, np.float32), 8, BLOCK=8)  # the knobs' own group: no hook
    monkeypatch.setattr(knobs, "runtime", fresh)  # no knob set after this: the launch must notice
    plain[(1,)](np.zeros(8, np.float32), 8, BLOCK=8)
    assert seen == ["plain"]


def test_exit_hooks_run_in_reverse_order_of_adding():
    order = []
    for name in ("first", "second"):
        knobs.runtime.launch_exit_hook.add(lambda meta, name=name: order.append(name))
    plain[(1,)](np.zeros(8, np.float32), 8, BLOCK=8)
    assert order == ["second", "first"]


def test_load_hooks_run_once_per_kernel_with_one_hash():
    loads = []
    knobs.runtime.kernel_load_start_hook.add(lambda *a: loads.append(("start", *a)))
    knobs.runtime.kernel_load_end_hook.add(lambda *a: loads.append(("end", *a)))
    x = np.zeros(8, np.float32)
    plain[(1,)](x, 8, BLOCK=4)
    plain[(2,)](x, 8, BLOCK=4)  # the same specialization: loaded already
    assert [entry[0] for entry in loads] == ["start", "end"]
    (_, *start), (_, *end) = loads
    assert start[2] == end[2] == "plain" and start[4] == end[4] and len(start[4]) == 64
    assert start[:2] == [None, None]  # no module before the load; the interpreter has none after it
    plain[(1,)](x, 8, BLOCK=2)  # another specialization: another load
    assert len(loads) == 4 and loads[2][5] != start[4]


def test_the_dropins_compiled_kernel_gives_the_hooks_tritons_metadata():
    from kiln.dropin.jit import jit

    @jit(launch_metadata=_flops)
    def doubled(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)
    kernel = compile(ASTSource(doubled, {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},
                               {"BLOCK": 32}), target=GPUTarget("cpu", 0, 1))
    seen = []
    knobs.runtime.launch_enter_hook.add(lambda meta: seen.append(meta.get()))
    x, out = np.arange(50, dtype=np.float32), np.zeros(50, np.float32)
    kernel[(2,)](x, out, 50, 32)
    np.testing.assert_array_equal(out, 2 * x)
    assert seen == [{"name": "doubled [n=50, BLOCK=32]", "function": None, "stream": None, "grid": (2,),
                     "flops": 100}]


@pytest.mark.gpu
def test_on_a_gpu_the_hooks_get_the_loaded_handles_and_the_stream(cuda_torch):
    torch = cuda_torch
    loads, launches = [], []
    knobs.runtime.kernel_load_end_hook.add(lambda module, function, name, group, digest: loads.append((module, function)))
    knobs.runtime.launch_enter_hook.add(lambda meta: launches.append(meta.get()))
    x, out = torch.arange(40, dtype=torch.float32, device="cuda"), torch.zeros(40, device="cuda")
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        scaled[(3,)](x, out, 40, BLOCK=16)
    stream.synchronize()
    torch.testing.assert_close(out, 2 * x)
    (module, function), = loads
    assert isinstance(module, int) and module and isinstance(function, int) and function
    assert launches == [{"name": "scaled [n=40, BLOCK=16]", "function": function, "stream": stream.cuda_stream,
                         "grid": (3,), "flops": 80}]
