"""Triton 3.6 language surface that upstream's tests use: `hasattr`/`getattr` in kernels,
`tl.core._aggregate`, a descriptor's `block_shape` in a kernel, and `TensorWrapper`'s tensor methods."""
import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.errors import CompilationError
from kiln.tools.tensor_descriptor import TensorDescriptor


@kiln.jit
def clamp_int32_kernel(x):
    # Triton's short-circuit: each test runs only if the ones before it hold
    if (x is not None) and hasattr(x, "dtype") and isinstance(x.dtype, tl.pointer_type) and \
            (x.dtype.element_ty == tl.int32) and (tl.load(x) > 42):
        tl.store(x, 42)


def test_hasattr_on_tensors_and_constexprs_in_a_kernel():
    clamp_int32_kernel[(1,)](None)
    clamp_int32_kernel[(1,)](1)  # a constexpr 1: an int has no dtype
    clamp_int32_kernel[(1,)](2)  # a runtime int32 scalar: not a pointer
    for values, expected in ((np.array([100000], np.int32), 42), (np.array([7], np.int32), 7),
                             (np.array([100000], np.int64), 100000), (np.array([84.0], np.float32), 84.0)):
        clamp_int32_kernel[(1,)](values)
        assert values[0] == expected


@kiln.jit
def getattr_kernel(x_ptr, out_ptr, N: tl.constexpr):
    v = tl.load(x_ptr + tl.arange(0, N))
    tl.static_assert(getattr(v, "shape")[0] == N)
    tl.static_assert(getattr(v, "nope", 5) == 5)
    tl.store(out_ptr + tl.arange(0, N), v.to(getattr(tl, "float32")) * 2)


@kiln.jit
def bad_hasattr_kernel(x_ptr):
    tl.static_assert(hasattr(x_ptr, 3))


def test_getattr_in_a_kernel_and_bad_names_are_errors():
    x, out = np.arange(8, dtype=np.int32), np.zeros(8, np.float32)
    getattr_kernel[(1,)](x, out, N=8)
    np.testing.assert_array_equal(out, 2 * x)
    with pytest.raises(CompilationError, match="attribute name must be string"):
        bad_hasattr_kernel[(1,)](x)


@tl.core._aggregate
class Pair:
    first: tl.tensor
    second: tl.tensor

    def __init__(self, first, second):
        self.first = first
        self.second = second

    @kiln.jit
    def total(self):
        return self.first + self.second

    def get_second(self, _semantic=None):
        return self.second

    @kiln.jit
    def unpack(self):
        return self.first, self.get_second()

    def __getitem__(self, index: tl.constexpr, _semantic=None):
        return self.first if index == 0 else self.second


@tl.core._aggregate
class Boxed:
    value: tl.tensor

    def __init__(self, value):
        self.value = value

    @kiln.jit
    def __getitem__(self, index):
        return self.value * index


@kiln.jit
def swapped(pair):
    return Pair(pair.second, pair.first)


@kiln.jit
def aggregate_kernel(x_ptr, out_ptr, flag, N: tl.constexpr):
    offs = tl.arange(0, N)
    pair = Pair(tl.load(x_ptr + offs), 11)
    first, second = pair.unpack()
    for _ in range(3):  # carried through a loop field by field
        pair = Pair(pair.first + 1, pair.second)
    if flag > 0:  # and through a runtime branch
        pair = Pair(pair.first * 2, pair.second)
    other = swapped(pair)
    tl.store(out_ptr + offs, pair.total() + other[0] + second + first * 0 + Boxed(pair[0])[2])


@kiln.jit
def assign_field_kernel(x_ptr):
    pair = Pair(tl.load(x_ptr), 1)
    pair.second = 42


@tl.core._aggregate
class Incomplete:
    a: tl.tensor
    b: tl.tensor

    def __init__(self, a):
        self.a = a


@kiln.jit
def incomplete_kernel(x_ptr):
    Incomplete(tl.load(x_ptr))


def test_aggregates_hold_values_call_their_methods_and_travel_through_calls_loops_and_branches():
    x = np.arange(8, dtype=np.float32)
    for flag, scale in ((0, 1), (1, 2)):
        out = np.zeros_like(x)
        aggregate_kernel[(1,)](x, out, flag, N=8)
        first = (x + 3) * scale
        np.testing.assert_array_equal(out, first + 11 + 11 + 11 + 2 * first)


def test_aggregate_errors():
    x = np.zeros(1, np.float32)
    with pytest.raises(CompilationError, match="kernels assign only to names"):
        assign_field_kernel[(1,)](x)
    with pytest.raises(CompilationError, match=r"Incomplete.__init__ left b unset"):
        incomplete_kernel[(1,)](x)
    with pytest.raises(TypeError, match="decorates a class"):
        tl.core._aggregate(lambda: None)


@kiln.jit
def block_shape_kernel(a_ptr, host_desc, out_ptr, M, N, M_BLOCK: tl.constexpr, N_BLOCK: tl.constexpr):
    desc = tl.make_tensor_descriptor(a_ptr, shape=[M, N], strides=[N, 1], block_shape=[M_BLOCK, N_BLOCK])
    tl.static_assert(desc.block_shape == [M_BLOCK, N_BLOCK])
    tl.static_assert(host_desc.block_shape == [M_BLOCK, N_BLOCK])
    assert desc.block_shape == [M_BLOCK, N_BLOCK]
    block = desc.load([0, 0])
    tl.store(out_ptr + tl.arange(0, M_BLOCK)[:, None] * N_BLOCK + tl.arange(0, N_BLOCK)[None, :], block)


def test_a_descriptors_block_shape_is_a_list_in_a_kernel():
    a = np.arange(8 * 16, dtype=np.float32).reshape(8, 16)
    out = np.zeros((4, 8), np.float32)
    block_shape_kernel[(1,)](a, TensorDescriptor.from_tensor(a, [4, 8]), out, 8, 16, 4, 8)
    np.testing.assert_array_equal(out, a[:4, :8])


def test_tensor_wrapper_has_tensor_methods():
    torch = pytest.importorskip("torch")
    wrapped = kiln.reinterpret(torch.arange(24, dtype=torch.int8).reshape(4, 6), tl.uint8)
    empty = wrapped.new_empty((2, 3))
    assert isinstance(empty, kiln.TensorWrapper) and empty.shape == (2, 3) and empty.dtype == tl.uint8
    assert empty.base.dtype == torch.int8 and wrapped.new_zeros((5,)).base.eq(0).all()
    assert wrapped.data.data_ptr() == wrapped.data_ptr()
    wrapped.data = wrapped.data[:, :3]  # as torch's `t.data = view`: the wrapper sees the view
    assert wrapped.shape == (4, 3) and wrapped.stride() == (6, 1) and str(wrapped).startswith("TensorWrapper[")
    with pytest.raises(TypeError, match="tensor or an array"):
        wrapped.data = [1, 2]
    on_numpy = kiln.reinterpret(np.zeros(4, np.int8), tl.uint8)
    assert on_numpy.data is on_numpy.base and on_numpy.new_empty((3,)).base.dtype == np.int8


def test_a_constexpr_listed_in_do_not_specialize_is_refused_when_compiled():
    import kiln
    import kiln.language as tl
    from kiln.errors import CompilationError

    @kiln.jit(do_not_specialize=["N"])  # decorating is fine, as in Triton
    def both(N: tl.constexpr):
        pass

    with pytest.raises(CompilationError, match="N marked as constexpr and listed in do_not_specialize"):
        both[(1,)](5)


def test_a_constexprs_type_is_a_constexpr_type_in_kernels_and_out():
    import numpy as np

    import kiln
    import kiln.language as tl

    assert tl.constexpr(1).type == tl.constexpr_type(1) != tl.constexpr_type(2)
    assert repr(tl.constexpr(4).type) == "constexpr_type[4]"

    @kiln.jit
    def strided(x, strides, out):
        tl.static_assert(isinstance(strides[1].type, tl.constexpr_type))  # a specialized 1 in a tuple
        tl.store(out, tl.load(x + strides[0]))

    x = np.arange(16, dtype=np.float32)
    out = np.zeros(1, np.float32)
    strided[(1,)](x, (4, 1), out)
    assert out[0] == 4.0
    assert "ld.global" in strided.warmup(x, (4, 1), out, grid=(1,), target="sm_90a").asm["ptx"]
