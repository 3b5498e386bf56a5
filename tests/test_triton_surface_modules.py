"""Triton 3.6's Python surface that its own tests and users import, under the drop-in: the modules
and names (`triton.runtime._allocation`, `runtime.jit`, `compiler.errors`, `tools.mxfp`), `triton.knobs`
with Triton's semantics, and autotuning's `print` and `cache` knobs."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.dropin import hook, jit as dropin_jit, knobs
from kiln.runtime import _allocation, scratch


def run_dropin(code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, hook.ENV: "1", "TRITON_INTERPRET": "1"}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                          timeout=120)


def test_a_plain_import_triton_has_tritons_submodules_as_attributes():
    out = run_dropin("""
        import triton
        from triton.compiler.errors import CompilationError, CompileTimeAssertionFailure, UnsupportedLanguageConstruct
        from triton.runtime._allocation import NullAllocator
        from triton.runtime.jit import TensorWrapper, reinterpret, type_canonicalisation_dict, MockTensor
        from triton import knobs
        assert triton.compiler.errors.CompileTimeAssertionFailure is CompileTimeAssertionFailure
        assert issubclass(CompileTimeAssertionFailure, CompilationError)
        assert issubclass(UnsupportedLanguageConstruct, CompilationError)
        assert issubclass(CompilationError, triton.compiler.errors.TritonError)
        assert triton.runtime.jit.jit is triton.jit and triton.runtime._allocation.NullAllocator is NullAllocator
        assert triton.compiler.compiler.ASTSource is triton.compiler.ASTSource
        assert isinstance(knobs.autotuning, knobs.base_knobs) and callable(triton.must_use_result)
        for name in ("triton.tools.mxfp_nonexistent", "triton.nothing_here"):
            try:
                __import__(name)
            except ModuleNotFoundError as e:
                assert repr(name) in str(e) and "kiln." not in str(e) and e.name == name, e
            else:
                raise AssertionError(name)
        print("ok")
    """)
    assert out.stdout.strip() == "ok", out.stderr


def test_type_canonicalisation_dict_maps_every_spelling_to_a_signature_type():
    names = dropin_jit.type_canonicalisation_dict
    assert names["float32"] == names["float"] == names["fp32"] == "fp32"
    assert names["bool"] == names["int1"] == "u1" and names["int"] == "i32" and names["uint16"] == "u16"
    assert names["float8_e4m3fn"] == "fp8e4nv" and names["float8_e5m2"] == "fp8e5" and names["bfloat16"] == "bf16"
    for short in set(names.values()) - {"void"}:
        tl.str_to_ty(short)  # each is a type kiln knows
    assert dropin_jit.canonicalize_dtype(tl.float16) == "fp16"
    with pytest.raises(ValueError, match="names no scalar type"):
        dropin_jit.canonicalize_dtype("complex64")
    assert dropin_jit.mangle_type(3) == "i32" and dropin_jit.mangle_type(2**40) == "i64"
    assert dropin_jit.mangle_type(2**63) == "u64" and dropin_jit.mangle_type(True) == "u1"


def test_null_allocator_raises_tritons_error_and_setting_it_gives_scratch_back_to_kiln():
    with pytest.raises(RuntimeError, match="no allocator was set. Use triton.set_allocator"):
        _allocation.NullAllocator()(128, 128, None)

    def mine(size, alignment, stream):
        return None
    kiln.set_allocator(mine)
    try:
        assert scratch._allocator is mine and _allocation.get_allocator() is mine
    finally:
        kiln.set_allocator(_allocation.NullAllocator())
    assert scratch._allocator is None and isinstance(_allocation.get_allocator(), _allocation.NullAllocator)
    with pytest.raises(TypeError, match="allocator"):
        _allocation.set_profile_allocator(7)


def test_knobs_read_their_variable_and_setting_one_sets_it(monkeypatch):
    monkeypatch.delenv("TRITON_PRINT_AUTOTUNING", raising=False)
    assert knobs.autotuning.print is False
    monkeypatch.setenv("TRITON_PRINT_AUTOTUNING", "1")
    assert knobs.autotuning.print is True
    with knobs.autotuning.scope():
        knobs.autotuning.print = False
        assert os.environ["TRITON_PRINT_AUTOTUNING"] == "0" and knobs.autotuning.print is False
        knobs.autotuning.cache = True
        assert os.environ["TRITON_CACHE_AUTOTUNING"] == "1"
    assert os.environ["TRITON_PRINT_AUTOTUNING"] == "1" and "TRITON_CACHE_AUTOTUNING" not in os.environ
    assert knobs.autotuning.print is True and knobs.autotuning.knobs == {"cache": False, "print": True}
    knobs.autotuning.print = False
    knobs.autotuning.print = knobs.env  # back to the variable (which setting it changed)
    assert knobs.autotuning.print is False
    monkeypatch.setenv("TRITON_PRINT_AUTOTUNING", "maybe")
    with pytest.raises(RuntimeError, match="TRITON_PRINT_AUTOTUNING='maybe': expected a boolean"):
        knobs.autotuning.print
    monkeypatch.setenv("TRITON_REDIS_PORT", "x")
    with pytest.raises(RuntimeError, match="expected an int"):
        knobs.redis.port


def test_knob_groups_copy_reset_and_refuse_unknown_names(monkeypatch):
    monkeypatch.setattr(knobs, "propagate_env", False)
    fresh = knobs.compilation.copy()
    fresh.allow_non_constexpr_globals = True
    assert fresh.allow_non_constexpr_globals and "TRITON_ALLOW_NON_CONSTEXPR_GLOBALS" not in os.environ
    assert knobs.compilation.allow_non_constexpr_globals is False  # the copy is apart
    assert fresh.reset().allow_non_constexpr_globals is False
    groups = [name for name, value in vars(knobs).items() if isinstance(value, knobs.base_knobs)]
    assert {"build", "redis", "cache", "compilation", "autotuning", "runtime", "language", "nvidia", "amd",
            "proton"} <= set(groups)
    with pytest.raises(AttributeError, match="no knob autotuning.printing"):
        knobs.autotuning.printing = True
    assert knobs.cache.dir == str(__import__("kiln.cache.env", fromlist=["x"]).cache_dir())


def _fake_tool(path, release: str) -> str:
    path.write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release {release}, V{release}.1'\n")
    path.chmod(0o755)
    return str(path)


def test_nvidia_tool_knobs_name_the_program_of_their_variable_else_of_path(tmp_path, monkeypatch):
    """`knobs.nvidia.ptxas` (and cuobjdump, nvdisasm, ptxas_blackwell) is an NvidiaTool: the program
    TRITON_PTXAS_PATH names if it runs, else the one on PATH, its release read from `--version`."""
    (tmp_path / "bin").mkdir()
    on_path = _fake_tool(tmp_path / "bin" / "ptxas", "12.4")
    named = _fake_tool(tmp_path / "ptxas-named", "12.8")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    for key in ("TRITON_PTXAS_PATH", "TRITON_CUOBJDUMP_PATH"):
        monkeypatch.delenv(key, raising=False)
    assert knobs.nvidia.ptxas == knobs.NvidiaTool(on_path, "12.4")
    monkeypatch.setenv("TRITON_PTXAS_PATH", named)
    assert knobs.nvidia.ptxas == knobs.NvidiaTool(named, "12.8")
    monkeypatch.setenv("TRITON_PTXAS_PATH", str(tmp_path / "missing"))
    assert knobs.nvidia.ptxas.path == on_path  # a variable naming no program falls back, as Triton's
    with knobs.nvidia.scope():
        knobs.nvidia.ptxas = named
        assert os.environ["TRITON_PTXAS_PATH"] == named and knobs.nvidia.ptxas.version == "12.8"
    assert knobs.nvidia.ptxas.path == on_path
    monkeypatch.setenv("TRITON_CUOBJDUMP_PATH", _fake_tool(tmp_path / "cuobjdump", "13.0"))
    assert knobs.nvidia.cuobjdump.version == "13.0"
    assert knobs.nvidia_knobs.ptxas_blackwell.key == "TRITON_PTXAS_BLACKWELL_PATH"
    assert knobs.NvidiaTool.from_path(str(tmp_path / "missing")) is None


def test_without_the_programs_ptxas_is_nvjitlink_and_cuobjdump_is_tritons_error(tmp_path, monkeypatch):
    """kiln assembles with nvJitLink: with no ptxas program the assembler knobs say so (no path, its
    release, which Triton's test helpers compare); a missing cuobjdump or nvdisasm raises as in Triton."""
    from cuda.bindings import nvjitlink
    from kiln.dropin import nvidia_tools
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(nvidia_tools, "wheel_copies", lambda binary: [])  # the test extra's cuobjdump wheel
    for key in ("TRITON_PTXAS_PATH", "TRITON_PTXAS_BLACKWELL_PATH", "TRITON_CUOBJDUMP_PATH", "TRITON_NVDISASM_PATH"):
        monkeypatch.delenv(key, raising=False)
    release = "{}.{}".format(*nvjitlink.version())
    assert knobs.nvidia.ptxas == knobs.nvidia.ptxas_blackwell == knobs.NvidiaTool(None, release)
    for name in ("cuobjdump", "nvdisasm"):
        with pytest.raises(RuntimeError, match=f"Cannot find {name}: no TRITON_{name.upper()}_PATH, none on PATH"):
            getattr(knobs.nvidia, name)


def test_launch_hooks_are_chains_that_are_false_while_empty():
    chain = knobs.HookChain(reversed=True)
    assert not chain
    seen = []
    chain.add(lambda meta: seen.append(("a", meta)))
    chain.add(lambda meta: seen.append(("b", meta)))
    chain("m")
    assert chain and seen == [("b", "m"), ("a", "m")]
    with pytest.raises(TypeError, match="callable"):
        chain.add(3)
    assert isinstance(knobs.runtime.launch_enter_hook, knobs.HookChain)


@kiln.autotune(configs=[kiln.Config({"BLOCK": 16}), kiln.Config({"BLOCK": 32})], key=["n"])
@kiln.jit
def add_one(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)


def test_print_autotuning_prints_each_config_and_the_choice_as_triton(monkeypatch, capsys):
    monkeypatch.setenv("TRITON_PRINT_AUTOTUNING", "1")
    x = np.zeros(48, np.float32)
    add_one[lambda meta: (kiln.cdiv(48, meta["BLOCK"]),)](x, 48)
    out = capsys.readouterr().out
    assert "Autotuning kernel add_one with config BLOCK: 16," in out and "with config BLOCK: 32," in out
    assert "Triton autotuning for function add_one,\nwith key as (48, 'float32'),\nfinished after " in out
    assert f"best config selected: {add_one.best_config};" in out
    add_one[lambda meta: (kiln.cdiv(48, meta["BLOCK"]),)](x, 48)
    assert capsys.readouterr().out == ""  # a choice already made prints nothing
    monkeypatch.setenv("TRITON_PRINT_AUTOTUNING", "0")
    add_one.cache.clear()
    add_one[lambda meta: (kiln.cdiv(48, meta["BLOCK"]),)](x, 48)
    assert capsys.readouterr().out == ""


def test_cache_autotuning_knob_asks_for_shared_choices(monkeypatch):
    from kiln import tuning_results
    monkeypatch.delenv("TRITON_CACHE_AUTOTUNING", raising=False)
    assert not tuning_results.requested(False) and tuning_results.requested(True)
    with knobs.autotuning.scope():
        knobs.autotuning.cache = True
        assert tuning_results.requested(False)
    assert not tuning_results.requested(False)


# Triton 3.6's public names of `triton.language.core` defined in other modules of kiln.language
CORE_NAMES_FROM_ELSEWHERE = ("PropagateNan", "TRITON_MAX_TENSOR_NUMEL", "advance", "const", "dot_scaled",
                             "load_tensor_descriptor", "make_block_ptr", "make_tensor_descriptor", "map_elementwise",
                             "pi32_t", "slice", "store_tensor_descriptor", "tensor_descriptor", "tuple")


def test_language_core_and_standard_have_tritons_names():
    """`triton.language.core.X` is `tl.X` for the names Triton's core.py defines, and
    `triton.language.standard` has `sort_impl` (what its sort and topk call)."""
    from kiln.jit import JITCallable, constexpr_function
    from kiln.language import core, standard
    assert [name for name in CORE_NAMES_FROM_ELSEWHERE if getattr(core, name, None) is not getattr(tl, name)] == []
    assert core.JITCallable is JITCallable and core.CONSTEXPR_0 == 0 and isinstance(core.CONSTEXPR_0, tl.constexpr)
    assert core._unwrap_if_constexpr(tl.constexpr(tl.uint16)) is tl.uint16 and core._unwrap_if_constexpr(3) == 3
    assert standard.core is core and standard.constexpr_function is constexpr_function
    assert core.Shape([2, 3]) == (2, 3) and core.Shape([2, 3])[:1] == [2]  # builtins.tuple / slice inside core.py


@kiln.jit
def _packed_and_sorted(x_ptr, packed_ptr, sorted_ptr, top_ptr, N: tl.constexpr, AS_UINT: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    as_uint = tl.core._unwrap_if_constexpr(AS_UINT)  # as Inductor's pack_value_flag spells it
    tl.store(packed_ptr + offs, x.to(as_uint, bitcast=True).to(tl.uint32) << as_uint.primitive_bitwidth)
    tl.store(sorted_ptr + offs, tl.standard.sort_impl(x, descending=tl.core.CONSTEXPR_0))
    tl.store(top_ptr + tl.arange(0, N // 4), tl.standard.sort_impl(x, k=N // 4, descending=True))


def test_kernels_call_core_and_standard_names_as_tritons_do():
    x = np.random.default_rng(0).standard_normal(32).astype(np.float16)
    packed, ordered, top = np.zeros(32, np.uint32), np.zeros(32, np.float16), np.zeros(8, np.float16)
    _packed_and_sorted[(1,)](x, packed, ordered, top, N=32, AS_UINT=tl.uint16)
    np.testing.assert_array_equal(packed, x.view(np.uint16).astype(np.uint32) << 16)
    np.testing.assert_array_equal(ordered, np.sort(x))
    np.testing.assert_array_equal(top, np.sort(x)[::-1][:8])
