"""CPU tier of codegen: every corpus kernel compiles to PTX and a cubin (nvJitLink
assembles it, which proves the PTX valid) for sm_80 and sm_90a, and the PTX has the
shape that performance needs (16-byte vector accesses, predication instead of branches,
shuffles in reductions)."""
import pathlib
import re

import pytest

from kiln.codegen import CompileError, TargetError, compile
from kiln.ir import parse_function, print_function

CORPUS = pathlib.Path(__file__).parent / "codegen_corpus"
KERNELS = sorted(p.stem for p in CORPUS.glob("*.kir"))
TARGETS = ["sm_80", "sm_90a"]
_CACHE = {}


def kernel(name):
    return parse_function((CORPUS / f"{name}.kir").read_text())


def compiled(name, target="sm_90a", **options):
    key = (name, target, tuple(sorted(options.items())))
    if key not in _CACHE:
        _CACHE[key] = compile(kernel(name), target, options or None, check=True)
    return _CACHE[key]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", KERNELS)
def test_corpus_compiles_to_cubin(name, target):
    ck = compiled(name, target)
    assert ck.cubin[:4] == b"\x7fELF"
    assert f".target {target}" in ck.ptx
    assert ck.metadata["n_regs"] > 0 and ck.metadata["target"] == target
    assert ck.metadata["threads"] == 128


def test_metadata_and_arg_layout():
    ck = compiled("vector_add")
    md = ck.metadata
    assert md["num_warps"] == 4 and md["num_stages"] == 3 and md["shared"] == 0 and md["n_spills"] == 0
    assert [a["llvm_type"] for a in md["args"]] == ["ptr addrspace(1)"] * 3 + ["i32"]
    assert [a["name"] for a in md["args"]] == ["x", "y", "out", "n"]
    assert set(ck.asm) == {"kir", "llir", "ptx", "cubin"}
    assert ".maxntid 128" in ck.ptx
    assert "ptx_kernel" in ck.llir


def test_vector_add_is_vectorized_and_predicated():
    ptx = compiled("vector_add").ptx
    loads = re.findall(r"@%p\d+ ld\.global\.v4\.b32", ptx)
    stores = re.findall(r"@%p\d+ st\.global\.v4\.b32", ptx)
    assert len(loads) == 4 and len(stores) == 2  # 1024 fp32 / 128 threads = 2 x 16 bytes each
    assert "bra" not in ptx  # no per-element branches


def test_masked_unaligned_tail_is_predicated_scalar():
    # n has no divisibility: the mask may change at any element, so accesses are scalar,
    # but still predicated rather than branched.
    ptx = compiled("masked_copy").ptx
    assert re.search(r"@%p\d+ ld\.global\.b32", ptx)
    assert re.search(r"@%p\d+ st\.global\.b32", ptx)
    assert "ld.global.v" not in ptx and "bra" not in ptx


def test_unmasked_loads_use_plain_vector_accesses():
    ptx = compiled("softmax_2d").ptx
    assert "ld.global.v4.b32" in ptx and "st.global.v4.b32" in ptx


def test_fp16_loads_are_16_bytes():
    ptx = compiled("layer_norm").ptx
    assert re.search(r"@%p\d+ ld\.global\.v4\.b32", ptx)  # 8 x fp16 per access
    assert re.search(r"@%p\d+ st\.global\.v4\.b32", ptx)


def test_reductions_use_warp_shuffles_and_exp2():
    ptx = compiled("softmax_row").ptx
    assert ptx.count("shfl.sync.bfly.b32") == 10  # 5 steps for max, 5 for sum
    assert "ex2.approx.f32" in ptx
    assert compiled("softmax_row").metadata["shared"] > 0  # the 4 warps meet in shared memory


def test_2d_softmax_needs_no_layout_conversion():
    ck = compiled("softmax_2d")
    # only the cross-warp step of the two reductions uses shared memory: 4 rows x 2 warps x 8 bytes
    # each, side by side (scratch_barriers: no barrier between them)
    assert ck.metadata["shared"] <= 2 * 64
    assert ck.metadata["n_regs"] < 64


def test_math_never_uses_aborting_intrinsics():
    llir = compiled("math").llir
    for bad in ("llvm.exp.f", "llvm.log.f", "llvm.sin.", "llvm.cos.", "llvm.tanh."):
        assert bad not in llir
    ptx = compiled("math").ptx
    assert "ex2.approx" in ptx and "rsqrt.approx.ftz" in ptx
    assert ".func" not in ptx.split(".entry")[0] or "__nv_" not in ptx  # libdevice inlined


def _unary_kernel(op: str, result: str = "fp32") -> str:
    return f"""kernel @{op}_kernel(%0: ptr<fp32> {{divisibility = 16}}, %1: ptr<{result}> {{divisibility = 16}}) {{
  %2 = arange {{end = 128, start = 0}} : <128xint32>
  %3 = splat %0 : <128xptr<fp32>>
  %4 = addptr %3, %2 : <128xptr<fp32>>
  %5 = load %4 : <128xfp32>
  %6 = {op} %5 : <128x{result}>
  %7 = splat %1 : <128xptr<{result}>>
  %8 = addptr %7, %2 : <128xptr<{result}>>
  store %8, %6
  return
}}
"""


# What Triton 3.6 emits for sm_90 (its math.sqrt and math.rsqrt become libdevice's __nv_sqrtf and
# __nv_rsqrtf, which its reflect settings resolve to the approximate roots with flush-to-zero; log and
# sin are libdevice's on their flush-to-zero paths), read from its PTX for the same one-op kernels
@pytest.mark.parametrize("op, present, absent", [
    ("sqrt", ["sqrt.approx.ftz.f32"], ["sqrt.rn"]),
    ("sqrt_rn", ["sqrt.rn.f32"], ["sqrt.approx"]),
    ("rsqrt", ["rsqrt.approx.ftz.f32"], []),
    ("exp", ["ex2.approx.f32"], ["ex2.approx.ftz"]),
    ("exp2", ["ex2.approx.ftz.f32"], []),
    ("log", ["fma.rn.ftz.f32"], ["lg2.approx"]),
    ("log2", ["fma.rn.ftz.f32"], ["lg2.approx"]),
    ("sin", ["abs.ftz.f32", "mul.rn.ftz.f32"], ["abs.f32"]),
])
def test_fp32_math_takes_tritons_instructions(op, present, absent):
    ptx = compile(parse_function(_unary_kernel(op)), "sm_90a", {"num_warps": 4}, link=False).ptx
    body = ptx.split(".entry")[1]
    assert all(form in body for form in present) and not any(form in body for form in absent)


@pytest.mark.parametrize("op, flushed, kept", [
    ("exp2", "ex2.approx.ftz.f32", "ex2.approx.f32"), ("sqrt", "sqrt.approx.ftz.f32", "sqrt.approx.f32"),
    ("rsqrt", "rsqrt.approx.ftz.f32", "rsqrt.approx.f32"), ("sin", "abs.ftz.f32", "abs.f32"),
])
def test_enable_reflect_ftz_0_keeps_subnormals(op, flushed, kept):
    """Triton's enable_reflect_ftz=False: libdevice's non-flushing paths, the roots without .ftz."""
    fn = parse_function(_unary_kernel(op))
    on = compile(fn, "sm_90a", {"num_warps": 4}, link=False).ptx.split(".entry")[1]
    off = compile(fn, "sm_90a", {"num_warps": 4, "enable_reflect_ftz": 0}, link=False).ptx.split(".entry")[1]
    assert flushed in on and flushed not in off and kept in off
    with pytest.raises(CompileError, match="enable_reflect_ftz must be 0 or 1"):
        compile(fn, "sm_90a", {"enable_reflect_ftz": 2}, link=False)


@pytest.mark.parametrize("fusion", [1, 0])
def test_libdevice_arithmetic_fuses_as_the_kernels_own(fusion):
    """Triton compiles libdevice with fp-contract=fast: its multiplies may fuse (`mul.f32`, which
    ptxas may contract); with enable_fp_fusion=0 neither libdevice's nor the kernel's do (`mul.rn.f32`)."""
    options = {"num_warps": 4} if fusion else {"num_warps": 4, "enable_fp_fusion": 0}
    body = compile(parse_function(_unary_kernel("log")), "sm_90a", options, link=False).ptx.split(".entry")[1]
    assert ("mul.rn.f32" in body) != bool(fusion) and ("mul.f32" in body) == bool(fusion)


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_bf16_fma_rounds_once(target):
    """tl.fma of bf16 is one bf16 fma (Triton's fma.rn.bf16), not an fp32 fma rounded again."""
    text = _unary_kernel("fma", "bf16").replace("ptr<fp32>", "ptr<bf16>").replace("<128xfp32>", "<128xbf16>")
    text = text.replace("fma %5 :", "fma %5, %5, %5 :")
    body = compile(parse_function(text), target, {"num_warps": 4}, link=False).ptx.split(".entry")[1]
    assert "fma.rn.bf16" in body and "fma.rn.f32" not in body


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_atomics_are_ordered_and_scoped_as_triton_writes_them(target):
    """Each element's atom carries its scope and ordering (Triton's text: upstream's tests read it), no fences;
    an RMW no atom does (fp32 max, in IR only: the frontend's goes through integer max / min) is LLVM's CAS loop,
    its ordering kept."""
    ptx = compiled("atomics", target).ptx
    for atom in ("atom.global.gpu.acq_rel.add.f32", "atom.global.gpu.relaxed.max.s32", "atom.global.gpu.acq_rel.add.u32",
                 "atom.global.acquire.gpu.cas.b32", "atom.global.sys.relaxed.exch.b32", "atom.release.cta.global.cas.b32"):
        assert atom in ptx
    assert "fence." not in ptx


def test_dot_uses_tensor_cores_for_fp16_and_bf16():
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in compiled("dot_f16").ptx
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in compiled("dot_bf16", "sm_80").ptx
    assert "mma.sync.aligned.m16n8k32.row.col.satfinite.s32.s8.s8.s32" in compiled("dot_i8").ptx
    assert "fma.rn.f32" in compiled("dot_f32").ptx  # fp32 at ieee precision: the exact FMA path
    assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in compiled("dot_tf32", "sm_80").ptx
    assert "mad.lo.s32" in compiled("dot_i8").ptx or "mad.lo" in compiled("dot_i8").ptx


def test_debug_ops_call_vprintf_and_assertfail():
    ptx = compiled("debug").ptx
    assert "vprintf" in ptx and "__assertfail" in ptx and "bar.sync" in ptx


@pytest.mark.parametrize("num_warps", [1, 2, 8])
def test_num_warps(num_warps):
    ck = compiled("softmax_row", num_warps=num_warps)
    assert f".maxntid {32 * num_warps}" in ck.ptx
    assert ck.metadata["threads"] == 32 * num_warps


def test_maxnreg_caps_registers():
    free = compiled("layer_norm", num_warps=8)
    capped = compiled("layer_norm", num_warps=8, maxnreg=24)
    assert capped.ptx.count(".maxnreg") == 1 and ".maxnreg 24" in capped.ptx  # no occupancy cap beside it
    assert capped.metadata["n_regs"] <= 24 < free.metadata["n_regs"]


def test_unknown_target_is_an_error():
    with pytest.raises(TargetError, match="sm_75"):
        compile(kernel("vector_add"), "sm_75")
    with pytest.raises(TargetError):
        compile(kernel("vector_add"), "compute_90")


def test_bad_options_are_errors():
    with pytest.raises(CompileError, match="num_warps"):
        compile(kernel("vector_add"), "sm_80", {"num_warps": 3})
    with pytest.raises(CompileError, match="unknown compile option"):
        compile(kernel("vector_add"), "sm_80", {"num_wraps": 4})
    with pytest.raises(CompileError, match="maxnreg"):
        compile(kernel("vector_add"), "sm_80", {"maxnreg": 8})


@pytest.mark.parametrize("target", ["sm_86", "sm_89", "sm_90", "sm_100", "sm_120"])
def test_other_targets(target):
    ck = compile(kernel("vector_add"), target)
    assert f".target {target}" in ck.ptx and ck.cubin[:4] == b"\x7fELF"


def test_compile_leaves_the_input_untouched():
    fn = kernel("layer_norm")
    before = print_function(fn)
    compile(fn, "sm_80", link=False)
    assert print_function(fn) == before


def test_compiled_kir_is_valid_ir():
    ck = compiled("layer_norm")
    assert print_function(parse_function(ck.kir)) == ck.kir


def test_compile_request_round_trips_as_plain_data():
    from kiln.codegen.isolated import compile_request
    out = compile_request((CORPUS / "vector_add.kir").read_text(), "sm_80")
    assert out["cubin"][:4] == b"\x7fELF" and out["metadata"]["name"] == "vector_add"


def test_unlowered_op_is_a_clear_error(monkeypatch):
    from kiln.codegen import lower
    monkeypatch.delitem(lower.LOWER, "umulhi")
    with pytest.raises(CompileError, match="cannot lower 'umulhi'"):
        compile(kernel("philox"), "sm_90a")


def test_every_op_of_the_ir_lowers():
    from kiln.codegen.lower import LOWER
    from kiln.ir import OPS
    assert set(OPS) - set(LOWER) <= {"yield", "condition", "return"}


LANG = sorted(p.stem for p in (CORPUS / "lang").glob("*.kir"))  # refreshed by codegen_corpus/harvest.py


@pytest.mark.parametrize("name", LANG)
def test_language_conformance_kernels_compile(name):
    fn = parse_function((CORPUS / "lang" / f"{name}.kir").read_text())
    for target in TARGETS:
        ck = compile(fn, target)
        assert ck.cubin[:4] == b"\x7fELF"


def test_cache_hints_and_volatile_loads():
    ptx = compiled("cache_hints").ptx
    assert "ld.global.cg.v4.b32" in ptx
    # the eviction priority for L1 and, as Triton's, an L2 policy made beside the access
    assert re.search(r"createpolicy\.fractional\.L2::evict_first\.b64 (%\w+), 1\.0; .*"
                     r"ld\.global\.L1::evict_first\.L2::cache_hint\.v4\.b32 \{[^}]*\}, \[%\w+\], \1;", ptx)
    assert "st.global.cs.v4.b32" in ptx
    loop = ptx[ptx.index("$L__BB0_1:"):]  # the spin loop re-reads the flag every time round
    assert "ld.volatile.global.b32" in loop
    assert "L1::evict" not in compiled("cache_hints", "sm_80").ptx  # needs PTX 7.4


def test_inline_asm_is_applied_per_pack():
    ptx = compiled("inline_asm").ptx
    assert ptx.count("prmt.b32") == 1  # the layout gives each thread one pack of 4 int8
    assert "add.f32" in ptx and "sub.f32" in ptx


@pytest.mark.parametrize("stages", [1, 3])  # operands staged from registers; a cp.async ring
def test_mma_operands_come_from_ldmatrix(stages):
    ptx = compiled("dot_f16", "sm_80", num_stages=stages).ptx
    assert ("cp.async" in ptx) == (stages > 1)
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in ptx  # A
    assert re.search(r"ldmatrix\.sync\.aligned\.m8n8\.x[24]\.trans\.shared\.b16", ptx)  # B, row-major
    int8 = compiled("dot_i8", "sm_80", num_stages=stages).ptx  # ldmatrix transposes 16-bit elements only:
    assert ".trans" not in int8 and "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in int8  # B staged transposed


def test_mma_operands_are_staged_with_vector_stores():
    ptx = compiled("dot_f16", "sm_80", num_stages=1).ptx
    staging = ptx[:ptx.index("mma.sync")]  # each thread's run of a row (8 fp16 as loaded) is one store
    assert "st.shared.v4.b32" in staging and "st.shared.b16" not in staging and "st.shared.v2.b16" not in staging


def test_tensor_core_accumulator_is_stored_coalesced():
    ptx = compiled("dot_f16").ptx  # converted from the mma layout before the store
    assert ptx.count("st.global.v4.b32") == 2 and "st.global.v2" not in ptx


def test_fp_fusion_is_on_by_default_and_can_be_turned_off():
    fused = compiled("layer_norm", num_warps=8).ptx
    exact = compiled("layer_norm", num_warps=8, enable_fp_fusion=0).ptx
    assert "fma.rn.f32" in fused
    # without fusion every float op is rounded on its own: `.rn` keeps ptxas from fusing them
    assert "fma.rn.f32" not in exact and "mul.rn.f32" in exact and "add.rn.f32" in exact
    with pytest.raises(CompileError, match="enable_fp_fusion"):
        compile(kernel("vector_add"), "sm_80", {"enable_fp_fusion": 2})


def test_enable_fp_fusion_reaches_codegen_from_a_launch():
    import numpy as np

    import kiln
    import kiln.language as tl

    @kiln.jit
    def axpy(x_ptr, y_ptr, a, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, a * tl.load(x_ptr + offs) + tl.load(y_ptr + offs))

    x = np.zeros(64, np.float32)
    fused = axpy.warmup(x, x, 2.0, BLOCK=64, target="sm_80").asm["ptx"]
    again = axpy.warmup(x, x, 2.0, BLOCK=64, target="sm_80", enable_fp_fusion=True)
    exact = axpy.warmup(x, x, 2.0, BLOCK=64, target="sm_80", enable_fp_fusion=False).asm["ptx"]
    assert "fma.rn.f32" in fused and "fma.rn.f32" not in exact
    assert again.binary_inputs()[1] == axpy.warmup(x, x, 2.0, BLOCK=64).binary_inputs()[1]  # one compile key


def test_loop_hints_that_codegen_ignores_do_not_split_the_compile_key():
    """tl.range's flatten changes nothing codegen generates: kernels that differ only in it
    compile the same IR (one compile key, one binary); num_stages and warp_specialize (the
    warp_specialize pass reads it) are kept."""
    import numpy as np

    import kiln
    import kiln.language as tl
    from kiln.ir import print_function

    @kiln.jit
    def total(x_ptr, n, HINT: tl.constexpr, WS: tl.constexpr):
        acc = 0.0
        for i in tl.range(0, n, 1, num_stages=2, flatten=HINT, warp_specialize=WS):
            acc += tl.load(x_ptr + i)
        tl.store(x_ptr, acc)

    x = np.zeros(16, np.float32)
    plain, hinted, specialized = (total.warmup(x, 16, HINT=hint, WS=ws) for hint, ws in ((False, False), (True, False),
                                                                                         (False, True)))
    assert "flatten = true" in hinted.asm["kir"]  # the kernel's own IR keeps what it was given
    compiled = [print_function(k.binary_inputs()[0]) for k in (plain, hinted, specialized)]
    assert compiled[0] == compiled[1] and "num_stages = 2" in compiled[1]
    assert "warp_specialize = true" in compiled[2]


def test_lowering_pauses_the_cycle_collector_and_restores_it(monkeypatch):
    """The cycle collector is off while the passes and lowering build their objects (they
    live until the LLVM IR is printed), and left after as it was found."""
    import gc

    import kiln.codegen.compiler as cc
    seen = []

    def lower(fn, ctx):
        seen.append(gc.isenabled())
        return lower_function(fn, ctx)
    lower_function, was = cc.lower_function, gc.isenabled()
    monkeypatch.setattr(cc, "lower_function", lower)
    try:
        for enabled in (True, False):
            gc.enable() if enabled else gc.disable()
            compile(kernel("vector_add"), "sm_80", link=False)
            assert gc.isenabled() is enabled
    finally:
        gc.enable() if was else gc.disable()
    assert seen == [False, False]


def test_dot_in_a_loop_alternates_two_staging_buffers():
    """One barrier per k-step: the next step's operands go to the other buffer."""
    k = compiled("dot_f16", "sm_80", num_stages=1)  # (with stages, a ring of cp.async copies)
    loop = re.search(r"^\$L__BB0_(\d+):\n(.*?)bra\s+\$L__BB0_\1;", k.ptx, re.S | re.M).group(2)
    assert loop.count("bar.sync") == 1 and "mma.sync" in loop
    a_and_b = 2 * 32 * (32 + 8) * 2  # two fp16 32x32 operands, rows padded by 16 bytes
    assert k.metadata["shared"] >= 2 * a_and_b


def test_double_staging_gives_way_where_shared_memory_is_short():
    """128x128x64 fp16 tiles, not pipelined: two staging buffers and the epilogue fit an
    A100 (163 KB per CTA) but not an sm_86 (99 KB), which gets one buffer and two barriers
    per k-step."""
    import numpy as np

    import kiln
    import kiln.language as tl

    @kiln.jit
    def tile_matmul(a_ptr, b_ptr, c_ptr, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, K, BK):
            a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
            b = tl.load(b_ptr + (k + rk)[:, None] * BN + rn[None, :])
            acc = tl.dot(a, b, acc)
        tl.store(c_ptr + rm[:, None] * BN + rn[None, :], acc.to(tl.float16))

    x = np.zeros((128, 128), np.float16)
    staged = (128 * 72 + 64 * 136) * 2  # A and B, rows padded by 16 bytes
    big = tile_matmul.warmup(x, x, x, 128, BM=128, BN=128, BK=64, num_warps=8, num_stages=1, target="sm_80")
    small = tile_matmul.warmup(x, x, x, 128, BM=128, BN=128, BK=64, num_warps=8, num_stages=1, target="sm_86")
    assert big.binaries["sm_80"].metadata["shared"] >= 2 * staged
    assert small.binaries["sm_86"].metadata["shared"] < 2 * staged
