"""Conformance: kernels that Triton 3.6's frontend rejects, and kiln once accepted.

Each case was found by building the same small kernel with Triton 3.6 (AST to TTIR, no GPU) and
with kiln and comparing which of them accepts it. kiln now rejects them as its other frontend
errors: a `CompilationError` at the user's line whose message holds Triton's words (which users
match) and then kiln's explanation; the underlying error, of Triton's type where it is a Python
one, is the `__cause__`. The few where Triton accepted what kiln rejected are here too.
"""
import linecache
import warnings

import numpy as np
import pytest
torch = pytest.importorskip("torch", reason="these cases are Triton's own tests, which pass torch tensors")

import kiln
import kiln.language as tl


def _jit_source(source: str, label: str):
    """`kernel` of `source` as a @jit function (its text registered with linecache, as a file's)."""
    namespace = {}
    path = f"<{label}>"
    linecache.cache[path] = (len(source), None, source.splitlines(True), path)
    exec(compile(source, path, "exec"), {"tl": tl}, namespace)
    return kiln.jit(namespace["kernel"])


def _rejects(kernel, *args, words, cause=None, **kwargs):
    with pytest.raises(kiln.CompilationError) as info:
        kernel.warmup(*args, grid=(1,), **kwargs)
    assert words in str(info.value), str(info.value)
    if cause is not None:
        assert isinstance(info.value.__cause__, cause), repr(info.value.__cause__)
    return info.value


# --- ** and unary + : Triton's tensors have neither -------------------------------------

@kiln.jit
def _pow(x_ptr, out_ptr, N: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, N))
    tl.store(out_ptr + tl.arange(0, N), x ** 2)


@kiln.jit
def _rpow(x_ptr, out_ptr, N: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, N))
    tl.store(out_ptr + tl.arange(0, N), 2.0 ** x)


@kiln.jit
def _pow_assign(x_ptr, out_ptr):
    x = tl.load(x_ptr)
    x **= 3
    tl.store(out_ptr, x)


@kiln.jit
def _unary_plus(x_ptr, out_ptr, N: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, N))
    tl.store(out_ptr + tl.arange(0, N), +x)


def test_power_of_a_tensor_is_rejected():
    error = _rejects(_pow, torch.float32, torch.float32, N=4, words="'tensor' object has no attribute '__pow__'",
                     cause=AttributeError)
    assert "x ** 2" in error.source_line and error.at[0] == 3  # the user's line
    _rejects(_rpow, torch.float32, torch.float32, N=4, words="'tensor' object has no attribute '__rpow__'")
    _rejects(_pow_assign, torch.float64, torch.float64, words="'tensor' object has no attribute '__pow__'")


def test_unary_plus_of_a_tensor_is_rejected():
    for dtype in (torch.int32, torch.float16, torch.bool):
        _rejects(_unary_plus, dtype, dtype, N=4, words="'tensor' object has no attribute '__pos__'",
                 cause=AttributeError)


@kiln.jit
def _constexpr_pow_and_plus(out_ptr, C: tl.constexpr):
    tl.store(out_ptr, +(C ** 2))  # constexprs keep Python's operators


def test_constexprs_keep_power_and_unary_plus_which_tensors_lack():
    out = np.zeros(1, np.int32)
    _constexpr_pow_and_plus[(1,)](out, C=5)
    assert out[0] == 25
    _rejects(_unary_plus, torch.float32, torch.float32, N=1, words="'tensor' object has no attribute '__pos__'")


# --- and / or / not take int1 (and pointers) only -----------------------------------------

@kiln.jit
def _and(x_ptr, y_ptr, out_ptr, N: tl.constexpr, BLOCK: tl.constexpr):
    if BLOCK:
        x, y = tl.load(x_ptr + tl.arange(0, N)), tl.load(y_ptr + tl.arange(0, N))
    else:
        x, y = tl.load(x_ptr), tl.load(y_ptr)
    r = x and y
    tl.store(out_ptr + tl.arange(0, N), r)


@kiln.jit
def _or(x_ptr, y_ptr, out_ptr, N: tl.constexpr):
    x, y = tl.load(x_ptr + tl.arange(0, N)), tl.load(y_ptr + tl.arange(0, N))
    tl.store(out_ptr + tl.arange(0, N), x or y)


@kiln.jit
def _not(x_ptr, out_ptr, N: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, N))
    tl.store(out_ptr + tl.arange(0, N), not x)


@kiln.jit
def _logical_method(x_ptr, y_ptr, out_ptr, N: tl.constexpr):
    x, y = tl.load(x_ptr + tl.arange(0, N)), tl.load(y_ptr + tl.arange(0, N))
    tl.store(out_ptr + tl.arange(0, N), x.logical_and(y))


@pytest.mark.parametrize("dtype,bits", [(torch.int32, 32), (torch.int8, 8), (torch.float16, 16),
                                        (torch.float64, 64), (torch.uint32, 32)])
@pytest.mark.parametrize("block", [False, True])
def test_and_or_not_of_a_non_boolean_tensor_are_rejected(dtype, bits, block):
    words = f"Cannot bitcast data-type of size {bits} to data-type of size 1"
    _rejects(_and, dtype, dtype, dtype, N=4 if block else 1, BLOCK=block, words=words, cause=ValueError)
    if block:
        _rejects(_or, dtype, dtype, dtype, N=4, words=words, cause=ValueError)
        _rejects(_not, dtype, dtype, N=4, words=words, cause=ValueError)
        _rejects(_logical_method, dtype, dtype, dtype, N=4, words=words, cause=ValueError)


@kiln.jit
def _boolean_logic(x_ptr, y_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    a, b = tl.load(x_ptr + offs) > 0, tl.load(y_ptr + offs) > 0
    tl.store(out_ptr + offs, a and b)
    tl.store(out_ptr + N + offs, a or b)
    tl.store(out_ptr + 2 * N + offs, not a)
    tl.store(out_ptr + 3 * N + offs, a.logical_or(b))
    s = tl.load(x_ptr) != 0
    tl.store(out_ptr + 4 * N, (s and True) or False)


def test_and_or_not_take_boolean_tensors_only():
    x = np.array([1, 0, 1, 0], np.int32)
    y = np.array([1, 1, 0, 0], np.int32)
    out = np.zeros(5 * 4, np.int8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Triton's deprecation of and/or on blocks
        _boolean_logic[(1,)](x, y, out, N=4)
    out = out.reshape(5, 4)
    np.testing.assert_array_equal(out[0], [1, 0, 0, 0])
    np.testing.assert_array_equal(out[1], [1, 1, 1, 0])
    np.testing.assert_array_equal(out[2], [0, 1, 0, 1])
    np.testing.assert_array_equal(out[3], [1, 1, 1, 0])
    assert out[4, 0] == 1
    _rejects(_logical_method, torch.int32, torch.int32, torch.int32, N=4,
             words="Cannot bitcast data-type of size 32 to data-type of size 1")


# --- math functions take fp32/fp64 (or the few types Triton lists) -------------------------

def _math_kernel(expr):
    return _jit_source(f"def kernel(x_ptr, y_ptr, out_ptr):\n"
                       f"    offs = tl.arange(0, 4)\n"
                       f"    x = tl.load(x_ptr + offs)\n"
                       f"    y = tl.load(y_ptr + offs)\n"
                       f"    tl.store(out_ptr + offs, {expr})\n", f"math_kernel {expr}")


@pytest.mark.parametrize("fn", ["exp", "exp2", "log", "log2", "cos", "sin", "sqrt", "rsqrt", "erf", "floor",
                                "ceil", "math.exp", "math.sqrt"])
@pytest.mark.parametrize("dtype,name", [(torch.float16, "fp16"), (torch.bfloat16, "bf16"), (torch.int32, "int32")])
def test_math_function_of_fp16_bf16_or_int_is_rejected(fn, dtype, name):
    kernel = _math_kernel(f"tl.{fn}(x)")
    _rejects(kernel, dtype, dtype, torch.float32, words=f"Expected dtype ['fp32', 'fp64'] but got {name}",
             cause=ValueError)


@pytest.mark.parametrize("expr,dtype,words", [
    ("tl.sqrt_rn(x)", torch.float64, "Expected dtype ['fp32'] but got fp64"),
    ("tl.div_rn(x, y)", torch.float16, "Expected dtype ['fp32'] but got fp16"),
    ("tl.umulhi(x, y)", torch.int8, "Expected dtype ['int32', 'int64', 'uint32', 'uint64'] but got int8"),
    ("tl.umulhi(x, y)", torch.uint16, "Expected dtype ['int32', 'int64', 'uint32', 'uint64'] but got uint16"),
    ("tl.sigmoid(x)", torch.float16, "Expected dtype ['fp32', 'fp64'] but got fp16"),
])
def test_math_function_outside_its_types_is_rejected(expr, dtype, words):
    _rejects(_math_kernel(expr), dtype, dtype, torch.float32, words=words)


@kiln.jit
def _math_accepted(x_ptr, h_ptr, out_ptr):
    offs = tl.arange(0, 4)
    x = tl.load(x_ptr + offs)
    h = tl.load(h_ptr + offs)
    tl.store(out_ptr + offs, tl.exp(x) + tl.sqrt(2.0))  # a Python number is not checked
    tl.store(out_ptr + 4 + offs, tl.softmax(h).to(tl.float32))  # softmax computes fp16 in fp32: accepted
    tl.store(out_ptr + 8 + offs, tl.exp(h.to(tl.float32)))


def test_math_functions_take_fp32_and_python_numbers_not_fp16():
    x = np.array([0.0, 1.0, -1.0, 2.0], np.float32)
    h = x.astype(np.float16)
    out = np.zeros(12, np.float32)
    _math_accepted[(1,)](x, h, out)
    np.testing.assert_allclose(out[:4], np.exp(x) + np.sqrt(2.0), rtol=1e-6)
    np.testing.assert_allclose(out[4:8], np.exp(x) / np.exp(x).sum(), rtol=1e-3)
    np.testing.assert_allclose(out[8:], np.exp(x), rtol=1e-6)
    _rejects(_math_kernel("tl.exp(x)"), torch.float16, torch.float16, torch.float16,
             words="Expected dtype ['fp32', 'fp64'] but got fp16")


@pytest.mark.parametrize("expr,dtypes,words", [
    ("tl.fdiv(x, y)", (torch.float32, torch.int32), "both operands of fdiv must have floating scalar type"),
    ("tl.fdiv(x, 2)", (torch.float32, torch.float32), "both operands of fdiv must have floating scalar type"),
    ("tl.fdiv(x, y)", (torch.float32, torch.float16), "fdiv takes two operands of one floating-point type"),
])
def test_fdiv_does_not_promote(expr, dtypes, words):
    _rejects(_math_kernel(expr), *dtypes, torch.float32, words=words, cause=TypeError)


def test_tl_math_has_triton_names_only():
    # tanh, pow, isnan... are libdevice's (tl.extra.cuda.libdevice), not tl.math's, in Triton 3.6
    _rejects(_math_kernel("tl.math.tanh(x)"), torch.float32, torch.float32, torch.float32,
             words="has no attribute 'tanh'")
    _rejects(_math_kernel("tl.math.pow(x, y)"), torch.float32, torch.float32, torch.float32,
             words="has no attribute 'pow'")
    _math_kernel("tl.extra.cuda.libdevice.tanh(x)").warmup(torch.float32, torch.float32, torch.float32, grid=(1,))


# --- pointers -------------------------------------------------------------------------------

@kiln.jit
def _pointer_compare(x_ptr, y_ptr, out_ptr, BLOCK: tl.constexpr):
    if BLOCK:
        tl.store(out_ptr + tl.arange(0, 4), x_ptr + tl.arange(0, 4) < y_ptr + tl.arange(0, 4))
    else:
        tl.store(out_ptr, x_ptr == y_ptr)


@kiln.jit
def _pointer_abs(x_ptr, out_ptr):
    tl.store(out_ptr, tl.abs(x_ptr).to(tl.int64))


def test_pointers_do_not_compare():
    for block in (False, True):
        _rejects(_pointer_compare, torch.float32, torch.float32, torch.bool, BLOCK=block,
                 words="invalid operands of type pointer<fp32> and pointer<fp32>", cause=TypeError)


def test_abs_of_a_pointer_is_a_compilation_error():
    _rejects(_pointer_abs, torch.float32, torch.int64, words="Unexpected dtype pointer<fp32>")


# --- reductions of scalars -----------------------------------------------------------------

@pytest.mark.parametrize("expr", ["tl.sum(x)", "tl.max(x)", "tl.min(x)", "tl.xor_sum(x)", "tl.ravel(x)"])
def test_reducing_a_scalar_is_rejected(expr):
    kernel = _jit_source(f"def kernel(x_ptr, out_ptr):\n    x = tl.load(x_ptr)\n    tl.store(out_ptr, {expr})\n",
                         f"scalar {expr}")
    _rejects(kernel, torch.int32, torch.int32, words="a scalar")


# --- conditions --------------------------------------------------------------------------------

@kiln.jit
def _while_int(x_ptr, out_ptr):
    x = tl.load(x_ptr)
    while x:
        x -= 1
    tl.store(out_ptr, x)


@kiln.jit
def _while_bool(x_ptr, out_ptr):
    x = tl.load(x_ptr)
    while x != 0:
        x -= 1
    tl.store(out_ptr, x)


def test_while_condition_must_be_boolean():
    _rejects(_while_int, torch.int32, torch.int32, words="the condition of a `while` must be a boolean (int1) scalar")
    x, out = np.array([5], np.int32), np.full(1, 7, np.int32)
    _while_bool[(1,)](x, out)
    assert out[0] == 0


@kiln.jit
def _if_one_element(x_ptr, out_ptr, N: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, N))
    if x > 0:
        y = 1
    else:
        y = 2
    tl.store(out_ptr, y)


def test_if_on_a_one_element_block_takes_its_element():
    with pytest.warns(UserWarning, match="If conditional called with multidimensional Tensor"):
        _if_one_element.warmup(torch.int32, torch.int32, N=1, grid=(1,))  # warned once, when compiled
    for value, expected in ((3, 1), (-3, 2)):
        x, out = np.array([value], np.int32), np.zeros(1, np.int32)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _if_one_element[(1,)](x, out, N=1)
        assert out[0] == expected
    _rejects(_if_one_element, torch.int32, torch.int32, N=4,
             words="Boolean value of Tensor with more than one value is ambiguous")


@kiln.jit
def _exp_method(x_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    tl.store(out_ptr + offs, x.exp())


def test_math_method_takes_fp16_as_triton_s_does():
    # Triton registers x.exp() (x.sqrt(), ...) before the dtype check of tl.exp: the method
    # computes in fp16 where the function rejects fp16
    x = np.array([0.0, 1.0, -1.0, 0.5], np.float16)
    out = np.zeros(4, np.float16)
    _exp_method[(1,)](x, out, N=4)
    np.testing.assert_allclose(out.astype(np.float32), np.exp(x.astype(np.float32)), rtol=1e-3)
    _rejects(_math_kernel("tl.exp(x)"), torch.float16, torch.float16, torch.float16,
             words="Expected dtype ['fp32', 'fp64'] but got fp16")


# --- atomics take Triton's element types ----------------------------------------------------

def _atomic_kernel(expr):
    return _jit_source(f"def kernel(x_ptr):\n"
                       f"    offs = tl.arange(0, 4)\n"
                       f"    v = tl.load(x_ptr + offs)\n"
                       f"    r = {expr}\n", f"atomic_kernel {expr}")


@pytest.mark.parametrize("op,dtype,words", [
    ("add", torch.int8, "atomic_add does not support int8"),
    ("add", torch.uint16, "atomic_add does not support uint16"),
    ("add", torch.bool, "atomic_add does not support int1"),
    ("max", torch.float16, "atomic_max does not support fp16"),
    ("min", torch.bfloat16, "atomic_min does not support bf16"),
    ("xchg", torch.float16, "atomic_xchg does not support fp16"),
    ("and", torch.int16, "atomic_and does not support int16"),
])
def test_atomic_of_a_narrow_element_is_rejected(op, dtype, words):
    _rejects(_atomic_kernel(f"tl.atomic_{op}(x_ptr + offs, v)"), dtype, words=words, cause=ValueError)


def test_atomic_cas_of_a_byte_is_rejected_and_fp16_add_is_not():
    _rejects(_atomic_kernel("tl.atomic_cas(x_ptr + offs, v, v)"), torch.uint8,
             words="atomic_cas only supports elements with width {16, 32, 64}", cause=ValueError)
    _atomic_kernel("tl.atomic_add(x_ptr + offs, v)").warmup(torch.float16, grid=(1,))
    _atomic_kernel("tl.atomic_cas(x_ptr + offs, v, v)").warmup(torch.int16, grid=(1,))


# --- shapes, creation, masks ----------------------------------------------------------------------

@pytest.mark.parametrize("expr,words", [
    ("x.T", "permute dims must have the same length as input shape"),
    ("tl.broadcast_to(x, (2, 4))", "Cannot broadcast, rank mismatch: [4], [2, 4]"),
    ("tl.reshape(tl.load(x_ptr), (1,))", "cannot reshape a scalar"),
    ("tl.full([4], 2.5, tl.int32)", "get_int32(): incompatible function arguments"),
    ("tl.full([4], -1, tl.uint8)", "get_uint8(): incompatible function arguments"),
    ("tl.load(y_ptr + offs, mask=x)", "Mask must have boolean scalar type"),
    ("tl.store(y_ptr + offs, x, mask=x)", "Mask must have boolean scalar type"),
    ("0 < x < 2", "simultaneous multiple comparison is not supported"),
    ("tl.full_like(x, 2)", "has no attribute 'full_like'"),
])
def test_shape_creation_and_mask_errors_of_triton(expr, words):
    kernel = _jit_source(f"def kernel(x_ptr, y_ptr):\n"
                         f"    offs = tl.arange(0, 4)\n"
                         f"    x = tl.load(x_ptr + offs)\n"
                         f"    r = {expr}\n", f"shape_kernel {expr}")
    _rejects(kernel, torch.int32, torch.int32, words=words)


@kiln.jit
def _accepted_shapes(x_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    m = tl.reshape(x, (2, N // 2)).T  # a 2-D block's transpose
    b = tl.broadcast_to(x[None, :], (2, N)) + tl.broadcast_to(tl.load(x_ptr), (2, N))  # same rank, or a scalar
    tl.store(out_ptr + offs, tl.reshape(m, (N,)) + tl.full([N], True, tl.int32))
    tl.store(out_ptr + N + offs, tl.sum(b, 0), mask=offs < 2)


def test_triton_shapes_still_work():
    x = np.arange(4, dtype=np.int32) + 1
    out = np.zeros(8, np.int32)
    _accepted_shapes[(1,)](x, out, N=4)
    np.testing.assert_array_equal(out[:4], x.reshape(2, 2).T.reshape(4) + 1)
    np.testing.assert_array_equal(out[4:6], 2 * (x[:2] + x[0]))
    _rejects(_atomic_kernel("v.T"), torch.int32, words="permute dims must have the same length as input shape")


@kiln.jit
def _float_bitwise_atomics(x_ptr, v_ptr, out_ptr, OP: tl.constexpr):
    offs = tl.arange(0, 4)
    v = tl.load(v_ptr + offs)
    if OP == 0:
        old = tl.atomic_and(x_ptr + offs, v)
    elif OP == 1:
        old = tl.atomic_or(x_ptr + offs, v)
    else:
        old = tl.atomic_xor(x_ptr + offs, v)
    tl.store(out_ptr + offs, old)


@pytest.mark.parametrize("dtype,bits", [(np.float32, np.int32), (np.float64, np.int64)])
def test_bitwise_atomics_of_floats_act_on_their_bits(dtype, bits):
    # Triton accepts them and compiles atom.and.b32 (.b64): the float's bit pattern is and-ed
    for op, fn in enumerate([np.bitwise_and, np.bitwise_or, np.bitwise_xor]):
        x = np.array([1.5, -2.0, 3.25, 0.0], dtype)
        v = np.array([-1.0, 2.5, 7.0, -0.0], dtype)
        before, old = x.copy(), np.zeros(4, dtype)
        _float_bitwise_atomics[(1,)](x, v, old, OP=op)
        np.testing.assert_array_equal(old.view(bits), before.view(bits))
        np.testing.assert_array_equal(x.view(bits), fn(before.view(bits), v.view(bits)))
