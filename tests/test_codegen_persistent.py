"""kiln.codegen.passes.persistent on a CPU: which kernels run persistent on sm_90a, the loop
they get, and the metadata the launcher fills the grid sizes from. On the GPU every
conformance kernel it applies to runs that way (tests/test_lang_dot.py's tiled matmuls:
2-D grids, a row of programs past the matrix)."""
import re

import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.cache.metadata import MetadataError, checked
from kiln.codegen import compile as compile_ir
from kiln.codegen.passes import persistent
from kiln.codegen.pipeline import PassContext
from kiln.codegen.target import parse_target
from kiln.ir import parse_function, print_function, verify


@kiln.jit
def _tiles(a_ptr, b_ptr, c_ptr, K, VARIANT: tl.constexpr):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    rm = pid_m * 64 + tl.arange(0, 64)
    rn = pid_n * 64 + tl.arange(0, 64)
    acc = tl.zeros((64, 64), dtype=tl.float32)
    for k in range(0, K, 32):
        rk = k + tl.arange(0, 32)
        a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
        b = tl.load(b_ptr + rk[:, None] * 64 * tl.num_programs(1) + rn[None, :]) if VARIANT == "grid" else \
            tl.load(b_ptr + rk[:, None] * 1024 + rn[None, :])
        acc = tl.dot(a, b, acc)
    if VARIANT == "atomic":
        tl.atomic_add(c_ptr + rm[:, None] * 1024 + rn[None, :], acc)
    else:
        tl.store(c_ptr + rm[:, None] * 1024 + rn[None, :], acc)


def _build(variant="plain", target="sm_90a"):
    x = np.zeros((64, 64), np.float16)
    return _tiles.warmup(x, x, np.zeros((64, 64), np.float32), 1024, VARIANT=variant, num_warps=4, num_stages=3,
                         grid=(1,), target=target)


def _grid_args(k):
    return [(a["name"], a["launch_grid"]) for a in k.metadata["args"] if "launch_grid" in a]


def test_a_tile_kernel_with_a_wgmma_loop_loops_over_the_launch_grid():
    k = _build()
    assert _grid_args(k) == [("launch_grid.0", "0"), ("launch_grid.1", "1"), ("launch_grid.2", "2")]
    fn = parse_function(compile_ir(_source(), "sm_90a", {"num_warps": 4, "num_stages": 3}, link=False).kir)
    top = [op.name for op in fn.body.ops]
    assert top.count("for") == 1 and top[-2:] == ["for", "return"]
    outer = next(op for op in fn.body.ops if op.name == "for")
    assert outer.attrs["num_stages"] == 1
    assert [op.name for op in fn.walk()].count("program_id") == 1  # the CTA's, before the loop
    assert any(op.name == "for" for op in outer.regions[0].walk() if op is not outer)  # the K loop inside
    assert "wgmma.mma_async" in k.asm["ptx"] and k.n_spills == 0


@pytest.mark.parametrize("variant", ["grid", "atomic"])
def test_kernels_that_read_the_grid_size_or_use_atomics_keep_one_program_per_cta(variant):
    assert _grid_args(_build(variant)) == []


def test_other_targets_keep_one_program_per_cta():
    assert _grid_args(_build(target="sm_80")) == []


def _source():
    """The frontend's IR of `_tiles` (before codegen's passes)."""
    ir = _build().ir
    return parse_function(ir if isinstance(ir, str) else print_function(ir))


def test_the_pass_maps_program_ids_to_the_loops_program():
    fn = _source()
    persistent.apply(fn, PassContext(parse_target("sm_90a"), num_warps=4, num_stages=3))
    verify(fn)
    text = print_function(fn, locs=False)
    assert text.count("program_id") == 1 and text.count("num_programs") == 1
    assert 'launch_grid = 0' in text and 'launch_grid = 2' in text
    again = _source()
    again.attrs["derived_args"] = 0  # the build the launcher falls back to is the kernel as written
    persistent.apply(again, PassContext(parse_target("sm_90a"), num_warps=4, num_stages=3))
    assert "launch_grid" not in print_function(again)


def test_metadata_with_a_bad_grid_axis_is_refused():
    metadata = {"name": "k", "target": "sm_90a", "num_warps": 4, "num_stages": 3, "threads": 128, "shared": 0,
                "n_regs": 40, "n_spills": 0, "ptx_version": 80,
                "args": [{"name": "launch_grid.0", "type": "int32", "llvm_type": "i32", "launch_grid": "0"}]}
    assert checked(metadata, name="k") is metadata
    metadata["args"][0]["launch_grid"] = "3"
    with pytest.raises(MetadataError):
        checked(metadata, name="k")


@kiln.jit
def _causal(a_ptr, b_ptr, c_ptr, K):
    """A loop up to the program's diagonal: programs of unequal work."""
    pid = tl.program_id(0)
    rm = pid * 64 + tl.arange(0, 64)
    rn = tl.arange(0, 64)
    acc = tl.zeros((64, 64), dtype=tl.float32)
    for k in range(0, (pid + 1) * 64, 32):
        rk = k + tl.arange(0, 32)
        a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
        b = tl.load(b_ptr + rk[:, None] * 64 + rn[None, :])
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rm[:, None] * 64 + rn[None, :], acc)


def test_programs_of_unequal_work_keep_one_program_per_cta():
    x = np.zeros((64, 64), np.float16)
    k = _causal.warmup(x, x, np.zeros((64, 64), np.float32), 1024, num_warps=4, num_stages=3, grid=(1,),
                       target="sm_90a")
    assert _grid_args(k) == [] and "wgmma.mma_async" in k.asm["ptx"]


def test_the_launcher_runs_a_persistent_kernel_on_the_resident_ctas(monkeypatch):
    """Grid sizes go to the appended arguments, the launch takes min(programs, resident)
    CTAs in x; derived maps are encoded only for a launch that runs."""
    from kiln.ir.types import parse_type
    from kiln.runtime import launcher
    calls, fills = [], []
    monkeypatch.setattr(launcher, "_cu_launch_kernel", lambda: lambda *args: calls.append(args) or 0)
    monkeypatch.setattr(launcher, "derived_encoder", lambda box, elem: lambda slot, *values: fills.append(values))
    types = [parse_type(t) for t in ("ptr<fp16>", "int32", "int32", "int32")]
    derived = [("grid", 0), ("grid", 1), ("grid", 2), ("map", (64, 64, 128), (0, 1, 2, 3))]
    run = launcher.make_launcher(type("Loaded", (), {"handle": 0})(), types, 8, 1024, "k", {}, derived, resident=132)
    run((0, 4, 1), [4096, 64, 32, 64], 0)
    assert calls == [] and fills == []
    run((16, 32, 1), [4096, 64, 32, 64], 0)
    assert calls[0][1:8] == (132, 1, 1, 256, 1, 1, 1024) and fills == [(4096, 64, 32, 64)]
    run((100, 1, 1), [4096, 64, 32, 64], 0)
    assert calls[1][1:4] == (100, 1, 1)
    with pytest.raises(ValueError, match="neither|two int32 extents"):
        launcher.make_launcher(type("Loaded", (), {"handle": 0})(), types, 8, 0, "k", {},
                               [("map", (64, 64, 128), (0, 1, 2, 9))])


@kiln.jit
def _two_dots(q_ptr, k_ptr, v_ptr, o_ptr, N):
    """Attention's loop: two dots per iteration."""
    rm = tl.program_id(0) * 64 + tl.arange(0, 64)
    rd = tl.arange(0, 64)
    q = tl.load(q_ptr + rm[:, None] * 64 + rd[None, :])
    acc = tl.zeros((64, 64), dtype=tl.float32)
    for start in range(0, N, 64):
        rn = start + tl.arange(0, 64)
        k = tl.load(k_ptr + rd[:, None] + rn[None, :] * 64)
        v = tl.load(v_ptr + rn[:, None] * 64 + rd[None, :])
        p = tl.dot(q, k).to(tl.float16)
        acc = tl.dot(p, v, acc)
    tl.store(o_ptr + rm[:, None] * 64 + rd[None, :], acc)


def test_loops_of_two_dots_keep_one_program_per_cta():
    x = np.zeros((64, 64), np.float16)
    k = _two_dots.warmup(x, x, x, np.zeros((64, 64), np.float32), 4096, num_warps=4, num_stages=3, grid=(1,),
                         target="sm_90a")
    assert _grid_args(k) == [] and "wgmma.mma_async" in k.asm["ptx"]


@kiln.jit
def _stored_as(a_ptr, b_ptr, c_ptr, K, ROUND_TO_FP16: tl.constexpr):
    """Tutorial 03's tile whose result is rounded to fp16 and then stored to `c_ptr`'s type."""
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    rm, rn, rk = pid_m * 128 + tl.arange(0, 128), pid_n * 256 + tl.arange(0, 256), tl.arange(0, 64)
    acc = tl.zeros((128, 256), dtype=tl.float32)
    for k in range(0, K, 64):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * 4096 + rn[None, :])
        acc = tl.dot(a, b, acc)
    out = acc.to(tl.float16) if ROUND_TO_FP16 else acc.to(c_ptr.dtype.element_ty)
    tl.store(c_ptr + rm[:, None] * 4096 + rn[None, :], out)


def _stored_build(c_dtype, round_to_fp16):
    import ml_dtypes
    x = np.zeros((64, 64), ml_dtypes.bfloat16)
    return _stored_as.warmup(x, x, np.zeros((64, 64), c_dtype), 4096, ROUND_TO_FP16=round_to_fp16, num_warps=8,
                             num_stages=3, grid=(1,), target="sm_90a")


def test_a_persistent_build_whose_wgmmas_ptxas_serializes_is_dropped_for_the_tile_kernel(monkeypatch):
    """C7514 in the link log (ptxas made each wgmma wait for the last) sends the compile back
    to the kernel as written; a build that is not persistent is kept whatever the log says."""
    from kiln.codegen import nvjitlink
    real = nvjitlink.link_cubin
    params = []  # of each build linked: the persistent one has the grid's three sizes more

    def serializing(ptx, tgt):
        cubin, info = real(ptx, tgt)
        params.append(len(set(re.findall(r"_param_(\d+)", ptx))))
        return cubin, "ptxas info    : (C7514) Potential Performance Loss: wgmma.mma_async instructions " \
                      "are serialized\n" + info
    fn = _source()
    monkeypatch.setattr(nvjitlink, "link_cubin", serializing)
    ck = compile_ir(fn, "sm_90a", {"num_warps": 4, "num_stages": 3})
    assert params == [len(fn.args) + 3, len(fn.args)]  # the persistent build, then the tile kernel as written
    assert not any("launch_grid" in a for a in ck.metadata["args"]) and "wgmma.mma_async" in ck.ptx
    assert fn.attrs.get("persistent") is None  # the caller's function is left as it was


@pytest.mark.parametrize("c_dtype, round_to_fp16", [(np.float16, True), ("bf16", False), ("bf16", True)])
def test_no_build_kiln_returns_has_its_wgmmas_serialized(c_dtype, round_to_fp16):
    """The persistent tile whose fp16 result is stored to bf16 had its wgmmas serialized by
    ptxas (554 against 685 TFLOP/s on the H200) while the epilogue narrowed one register at a
    time; whatever the epilogue, what kiln returns never is."""
    import ml_dtypes
    from kiln.codegen import nvjitlink
    k = _stored_build(ml_dtypes.bfloat16 if c_dtype == "bf16" else c_dtype, round_to_fp16)
    _, info = nvjitlink.link_cubin(k.asm["ptx"], parse_target("sm_90a"))
    assert not nvjitlink.wgmma_serialized(info) and "wgmma.mma_async" in k.asm["ptx"]
