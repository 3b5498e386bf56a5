"""A runtime parameter annotated with a type takes that type, whatever its value's, as in Triton's
JIT (`KernelParam.annotation_type`): `x: tl.float16`, `x: "fp16"`, `n: "tl.uint8"`, `n: int` (i32),
`p: "*fp16"`, `p: "const *fp32"`. An annotated integer keeps divisibility by 16 but is never folded
to a constant when it is 1; a float is packed at its width (bf16 as Triton packs it: truncated)."""
import ctypes
import math
import re

import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.errors import CompilationError
from kiln.ir import print_function
from kiln.ir.types import half_float_bits, parse_type
from kiln.runtime import launcher
from kiln.specialize import annotation_type, normalize_annotation


def _annotated(fn, **types):
    """`fn` with these parameter annotations (as upstream's tests set them), then jitted."""
    fn.__annotations__ = dict(types)
    return kiln.jit(fn)


def _store_val(ptr, val):
    tl.static_assert(val.dtype == EXPECTED)
    tl.store(ptr, val)


def _signature(kernel, *args, **kwargs) -> str:
    return print_function(kernel.warmup(*args, grid=(1,), **kwargs).ir).splitlines()[0]


@pytest.mark.parametrize("annotation, expected", [
    (tl.float16, tl.float16), ("fp16", tl.float16), ("tl.float16", tl.float16), ("half", tl.float16),
    (tl.bfloat16, tl.bfloat16), ("bf16", tl.bfloat16), (tl.float32, tl.float32), (float, tl.float32),
    (tl.float64, tl.float64), ("double", tl.float64)])
@pytest.mark.parametrize("value", [0.0, 42.0, float("inf"), float("nan"), -2.5])
def test_a_float_parameter_takes_its_annotated_type(annotation, expected, value):
    globals()["EXPECTED"] = expected
    kernel = _annotated(_store_val, val=annotation)
    out = np.zeros(1, np.float32)
    kernel[(1,)](out, value)
    np.testing.assert_allclose(out, [value])
    assert f"val: {expected}" in _signature(kernel, out, value).replace("%1", "val")


def _store_wide(ptr, v):
    if v.dtype == tl.uint64:
        tl.store(ptr, v)
    else:
        tl.store(ptr, v.to(tl.int64))


@pytest.mark.parametrize("annotation, kiln_type, value, stored", [
    ("tl.uint8", "uint8", 300, 44), ("u8", "uint8", 3, 3), ("tl.int8", "int8", 200, -56), ("int16", "int16", 7, 7),
    ("uint32", "uint32", -1, 2**32 - 1), (int, "int32", 2**32 + 5, 5), ("i64", "int64", 2**40, 2**40),
    (tl.uint64, "uint64", 2**63, 2**63), (bool, "int1", 3, 1), ("tl.int1", "int1", 0, 0)])
def test_an_integer_parameter_takes_its_annotated_type_and_wraps(annotation, kiln_type, value, stored):
    kernel = _annotated(_store_wide, v=annotation)
    out = np.zeros(1, np.uint64 if kiln_type == "uint64" else np.int64)
    kernel[(1,)](out, value)
    assert int(out[0]) == stored
    assert f"%1: {kiln_type} {{" in _signature(kernel, out, value)


def test_an_annotated_one_stays_a_runtime_value_and_sixteen_keeps_its_divisibility():
    @kiln.jit
    def k(ptr, plain, annotated: "i32", unhinted: "i32"):
        tl.store(ptr, plain + annotated + unhinted)

    out = np.zeros(1, np.int32)
    head = _signature(k, out, 1, 1, 16)
    assert re.search(r"%1: int32 \{name = \"annotated\"\}", head), head  # `plain` (1) is a constant
    assert "%2: int32 {divisibility = 16, name = \"unhinted\"}" in head
    k[(1,)](out, 1, 1, 16)
    assert out[0] == 18
    dns = kiln.jit(k.fn, do_not_specialize=["unhinted"])
    assert "%2: int32 {name = \"unhinted\"}" in _signature(dns, out, 1, 1, 16)


def test_a_pointer_annotation_gives_the_element_type_and_constness():
    @kiln.jit
    def k(out: "*fp16", src: "const *fp32"):
        tl.store(out, tl.load(src).to(tl.float16))

    raw = np.zeros(2, np.int16)  # any array: the annotation says its elements are fp16
    src = np.array([1.5], np.float32)
    assert "%0: ptr<fp16> {divisibility = 16, name = \"out\"}" in _signature(k, raw, src)
    k[(1,)](raw, src)
    assert raw.view(np.float16)[0] == 1.5

    @kiln.jit
    def writes_const(p: "const *fp32"):
        tl.store(p, 1.0)

    with pytest.raises(CompilationError):
        writes_const[(1,)](src)


def test_annotations_that_name_no_type_change_nothing():
    @kiln.jit
    def k(x: "torch.Tensor", n: "Foo", m: object, BLOCK: tl.constexpr):
        tl.store(x + tl.arange(0, BLOCK), n + m)

    out = np.zeros(4, np.float32)
    k[(1,)](out, 1.5, 2, BLOCK=4)  # n a float (fp32), m a one (a constant)
    assert list(out) == [3.5] * 4
    assert [p.annotation_type for p in k.params] == ["", "", "", ""]


def test_a_value_of_the_wrong_kind_for_its_annotation_is_refused():
    @kiln.jit
    def k(x: "*fp32", n: "i32"):
        pass

    a = np.zeros(1, np.float32)
    with pytest.raises(TypeError, match="argument n .*annotated i32.* is a scalar, not a ndarray"):
        k[(1,)](a, a)
    with pytest.raises(TypeError, match="argument x .*annotated \\*fp32.* is a pointer, not a int"):
        k[(1,)](3, 3)


@pytest.mark.parametrize("annotation, normal, typed", [
    (tl.float16, "fp16", "fp16"), ("tl.uint8", "u8", "u8"), ("float8_e4m3fn", "fp8e4nv", "fp8e4nv"),
    (int, "i32", "i32"), (bool, "u1", "u1"), ("int32_t", "i32", "i32"), ("fp16*", "*fp16", "*fp16"),
    ("*tl.float32", "*fp32", "*fp32"), (tl.pointer_type(tl.bfloat16), "*bf16", "*bf16"),
    ("const *fp32", "*kfp32", "*kfp32"), (tl.constexpr, "constexpr", ""), ("tl.constexpr", "constexpr", ""),
    ("torch.Tensor", "torch.Tensor", ""), ("void", "void", "")])
def test_annotations_normalize_as_tritons(annotation, normal, typed):
    assert normalize_annotation(annotation) == normal
    assert annotation_type(annotation) == typed


@pytest.mark.parametrize("value", [1.0, 1.0 + 2**-8 + 2**-9, -3.99, 1e-40, 65504.0, 1e6, float("inf"), float("nan")])
def test_sixteen_bit_floats_are_packed_as_tritons_launcher_packs_them(value):
    fp16 = half_float_bits(value, "fp16")
    with np.errstate(over="ignore"):
        assert fp16 == int(np.float16(value).view(np.uint16))  # rounded to nearest even
    f32 = int(np.float32(value).view(np.uint32))
    assert half_float_bits(value, "bf16") == f32 >> 16  # truncated, not rounded
    assert half_float_bits(1.0 + 2**-8 + 2**-9, "bf16") == 0x3F80  # round to nearest would give 0x3F81

    @kiln.jit
    def k(out, v: "bf16"):
        tl.store(out, v)

    out = np.zeros(1, np.float32)
    k[(1,)](out, value)  # the interpreter passes the same bits
    expected = np.array(f32 >> 16, np.uint16).view(tl.bfloat16.to_numpy()).astype(np.float32)
    assert out[0] == expected or (math.isnan(out[0]) and math.isnan(expected))


class _Loaded:
    handle = 0x1000


def test_the_launcher_packs_fp16_and_bf16_arguments_in_two_bytes(monkeypatch):
    seen = []

    def launch(handle, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        slots = ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p))
        seen.append([ctypes.c_uint16.from_address(slots[i]).value for i in (1, 2)])
        return 0

    monkeypatch.setattr(launcher, "_cu_launch_kernel", lambda: launch)
    types = [parse_type("ptr<fp32>"), parse_type("fp16"), parse_type("bf16")]
    run = launcher.make_launcher(_Loaded(), types, 4, 0, "k")
    run((1, 1, 1), [0x2000, 1.5, 1.0 + 2**-8 + 2**-9], 0)
    assert seen == [[0x3E00, 0x3F80]]
