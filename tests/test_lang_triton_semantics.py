"""Conformance: corners of Triton 3.6's language semantics where kiln once differed.

Each case was found by running the same small kernel on Triton 3.6 and on kiln and comparing
result types, values and errors; the expected values are those of Triton's compiled kernels
(its semantic layer: python/triton/language/semantic.py and core.py's operator methods).
"""
import numpy as np
import pytest

import kiln
import kiln.language as tl


# --- a Python number becomes a constant of the computation type directly ------------------

@kiln.jit
def _scalar_ops(x_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    tl.store(out_ptr + 0 * N + offs, x * 1e20)
    tl.store(out_ptr + 1 * N + offs, 1e20 - x)
    tl.store(out_ptr + 2 * N + offs, tl.where(x > 2.0, x, 0.1))
    tl.store(out_ptr + 3 * N + offs, x + 16777217)


def test_python_float_meets_fp64_without_rounding_through_fp32():
    # Triton materializes 1e20 (and 0.1, and 2**24 + 1) in fp64 when the tensor is fp64;
    # a detour through fp32 would give 1.0000000200408773e20
    x = np.array([1.0, 2.0, 3.0, -4.0], np.float64)
    out = np.zeros(4 * 4, np.float64)
    _scalar_ops[(1,)](x, out, N=4)
    out = out.reshape(4, 4)
    np.testing.assert_array_equal(out[0], x * 1e20)
    np.testing.assert_array_equal(out[1], 1e20 - x)
    np.testing.assert_array_equal(out[2], np.where(x > 2.0, x, 0.1))
    np.testing.assert_array_equal(out[3], x + 16777217.0)


def test_python_float_rounds_once_to_fp16():
    # 1 + 2**-11 + 2**-40 lies just above the midpoint of two halves: rounded once to fp16 it
    # goes up; rounded to fp32 first it becomes the midpoint and then goes to the even half
    c = 1.0 + 2.0**-11 + 2.0**-40
    x = np.zeros(4, np.float16)
    out = np.zeros(16, np.float16)
    _scalar_ops[(1,)](x, out, N=4)  # out[8:12] = where(x > 2, x, 0.1): fp16 of 0.1
    assert out[8] == np.float16(0.1)

    @kiln.jit
    def add_const(x_ptr, out_ptr, C: tl.constexpr):
        tl.store(out_ptr, tl.load(x_ptr) + C)

    out1 = np.zeros(1, np.float16)
    add_const[(1,)](x, out1, C=c)
    assert out1[0] == np.float16(c) == np.float16(1.0 + 2.0**-10)


# --- >> takes its signedness from the tensor whose operator runs --------------------------

@kiln.jit
def _shifts(x_ptr, out_ptr, N: tl.constexpr, K: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    tl.store(out_ptr + offs, 200 >> x)        # x.__rrshift__(200): x is unsigned, so logical
    tl.store(out_ptr + N + offs, K >> x)      # a constexpr on the left: the same
    tl.store(out_ptr + 2 * N + offs, x >> 1)  # x.__rshift__


def test_reflected_right_shift_is_logical_for_an_unsigned_tensor():
    x = np.array([1, 2, 3, 7], np.uint8)
    out = np.zeros(3 * 4, np.uint8)
    _shifts[(1,)](x, out, N=4, K=255)
    out = out.reshape(3, 4)
    np.testing.assert_array_equal(out[0], np.uint8(200) >> x)  # [100, 50, 25, 1], not [228, ...]
    np.testing.assert_array_equal(out[1], np.uint8(255) >> x)
    np.testing.assert_array_equal(out[2], x >> 1)


@kiln.jit
def _shift_constexpr(x_ptr, out_ptr, N: tl.constexpr, K: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(out_ptr + offs, K >> tl.load(x_ptr + offs))


def test_reflected_right_shift_is_arithmetic_for_a_signed_tensor():
    x = np.array([1, 2, 3, 7], np.int8)
    out = np.zeros(4, np.int8)
    _shift_constexpr[(1,)](x, out, N=4, K=-128)
    np.testing.assert_array_equal(out, np.int8(-128) >> x)


# --- unary minus is 0 - x ------------------------------------------------------------------

@kiln.jit
def _negate(x_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(out_ptr + offs, -tl.load(x_ptr + offs))


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_unary_minus_of_a_zero_is_positive_zero(dtype):
    x = np.array([0.0, -0.0, 1.5, -2.0], dtype)
    out = np.zeros(4, dtype)
    _negate[(1,)](x, out, N=4)
    np.testing.assert_array_equal(out, [0.0, 0.0, -1.5, 2.0])
    assert not np.signbit(out[0]) and not np.signbit(out[1])


def test_unary_minus_of_integers_wraps():
    x = np.array([0, 1, -128, 127], np.int8)
    out = np.zeros(4, np.int8)
    _negate[(1,)](x, out, N=4)
    np.testing.assert_array_equal(out, -x)


# --- tl.store: the value and mask broadcast to the pointer, which keeps its shape -----------

@kiln.jit
def _store_lower_rank(out_ptr, N: tl.constexpr):
    i = tl.arange(0, N)
    ptrs = out_ptr + i[:, None, None] * N * N + i[None, :, None] * N + i[None, None, :]
    tl.store(ptrs, i[None, :])  # rank 2 into rank 3: leading axes are added, as for binary ops


def test_store_broadcasts_a_lower_rank_value():
    out = np.zeros((4, 4, 4), np.int32)
    _store_lower_rank[(1,)](out, N=4)
    np.testing.assert_array_equal(out, np.broadcast_to(np.arange(4, dtype=np.int32), (4, 4, 4)))


@kiln.jit
def _store_mask_wider_than_ptr(out_ptr, N: tl.constexpr):
    i = tl.arange(0, N)
    tl.store(out_ptr + i, i, mask=i[:, None] < 2)


@kiln.jit
def _store_value_wider_than_ptr(out_ptr, N: tl.constexpr):
    i = tl.arange(0, N)
    tl.store(out_ptr + i, i[:, None] + i[None, :])


@kiln.jit
def _store_block_mask_scalar_ptr(out_ptr, N: tl.constexpr):
    i = tl.arange(0, N)
    tl.store(out_ptr, 1, mask=i < 2)


@kiln.jit
def _load_block_mask_scalar_ptr(x_ptr, out_ptr, N: tl.constexpr):
    i = tl.arange(0, N)
    tl.store(out_ptr + i, tl.load(x_ptr, mask=i < 2))


@pytest.mark.parametrize("kernel, words", [
    (_store_mask_wider_than_ptr, "Expected pointer argument to have shape"),
    (_store_value_wider_than_ptr, "Expected pointer argument to have shape"),
    (_store_block_mask_scalar_ptr, "Mask argument cannot be block type"),
    (_load_block_mask_scalar_ptr, "Mask argument cannot be block type"),
])
def test_pointer_shape_is_not_widened(kernel, words):
    out = np.zeros(16, np.int32)
    args = (out, out) if kernel is _load_block_mask_scalar_ptr else (out,)
    with pytest.raises(kiln.CompilationError) as info:
        kernel[(1,)](*args, N=4)
    assert words in str(info.value.__cause__)


@kiln.jit
def _load_mask_widens_ptr(x_ptr, out_ptr, N: tl.constexpr):
    i = tl.arange(0, N)
    v = tl.load(x_ptr + i, mask=i[:, None] < 2, other=-1)  # a load's pointer may widen to the mask
    tl.store(out_ptr + i[:, None] * N + i[None, :], v)


def test_load_pointer_widens_to_its_mask():
    x = np.arange(4, dtype=np.int32)
    out = np.zeros((4, 4), np.int32)
    _load_mask_widens_ptr[(1,)](x, out, N=4)
    expect = np.where(np.arange(4)[:, None] < 2, x[None, :], -1)
    np.testing.assert_array_equal(out, expect)


# --- tl.sort, tl.topk and tl.bitonic_merge run Triton's network --------------------------

@kiln.jit
def _sorts(x_ptr, asc_ptr, desc_ptr, top_ptr, merge_ptr, N: tl.constexpr, K: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    tl.store(asc_ptr + offs, tl.sort(x))
    tl.store(desc_ptr + offs, tl.sort(x, descending=True))
    top = tl.topk(x, K)
    tl.static_assert(top.dtype == (tl.int32 if x.dtype == tl.int8 else x.dtype))  # max widens int8
    tl.store(top_ptr + tl.arange(0, K), top)
    tl.store(merge_ptr + offs, tl.bitonic_merge(x))


def _run_sorts(x, k):
    outs = [np.full(len(x), 99, x.dtype) for _ in range(2)] + [np.full(k, 99, x.dtype), np.full(len(x), 99, x.dtype)]
    _sorts[(1,)](x, *outs, N=len(x), K=k)
    return outs


def test_sort_and_topk_of_distinct_values():
    x = np.array([5, -3, 12, 0, 7, 1, -8, 4], np.int8)
    asc, desc, top, _ = _run_sorts(x, 4)
    np.testing.assert_array_equal(asc, np.sort(x))
    np.testing.assert_array_equal(desc, np.sort(x)[::-1])
    np.testing.assert_array_equal(top, np.sort(x)[::-1][:4])


def test_sort_moves_nan_and_signed_zeros_as_triton():
    # Each element of a compare-and-swap pair decides for itself, so a NaN (never greater,
    # never smaller) is lost and its partner doubled, and +0.0 can replace -0.0: Triton's outputs
    x = np.array([3, np.nan, -0.0, 0.0, 7, 7, -1, 2], np.float32)
    asc, desc, top, merged = _run_sorts(x, 4)
    np.testing.assert_array_equal(asc, [-1, 0, 0, 2, 3, 3, 7, 7])
    np.testing.assert_array_equal(desc, [7, 7, 3, 3, 2, 0, 0, -1])
    np.testing.assert_array_equal(top, [7, 7, 3, 3])
    assert not np.signbit(asc[1:3]).any()  # both zeros come out +0.0
    np.testing.assert_array_equal(merged, [-1, -1, 3, 3, -0.0, -0.0, 7, 7])
    assert np.signbit(merged[4]) and np.signbit(merged[5])


def test_bitonic_merge_sorts_a_bitonic_row():
    x = np.array([1, 4, 6, 9, 8, 5, 3, 0], np.float32)
    *_, merged = _run_sorts(x, 2)
    np.testing.assert_array_equal(merged, np.sort(x))


def test_topk_of_fp16_is_fp32():
    @kiln.jit
    def top_dtype(x_ptr, out_ptr):
        offs = tl.arange(0, 8)
        top = tl.topk(tl.load(x_ptr + offs), 2)
        tl.static_assert(top.dtype == tl.float32)
        full = tl.topk(tl.load(x_ptr + offs), 8)  # k = n: a plain descending sort keeps fp16
        tl.static_assert(full.dtype == tl.float16)
        tl.store(out_ptr + tl.arange(0, 2), top)

    x = np.array([0.5, 3, -1, 8, 2, 7, 6, 1], np.float16)
    out = np.zeros(2, np.float32)
    top_dtype[(1,)](x, out)
    np.testing.assert_array_equal(out, [8, 7])


# --- fp32/fp64 atomic max and min compare the bits, as Triton's --------------------------

@kiln.jit
def _atomic_min_max(p_ptr, v_ptr, old_ptr, MAX: tl.constexpr):
    offs = tl.arange(0, 8)
    v = tl.load(v_ptr + offs)
    keep = offs != 3
    if MAX:
        old = tl.atomic_max(p_ptr + offs, v, mask=keep)
    else:
        old = tl.atomic_min(p_ptr + offs, v, mask=keep)
    tl.store(old_ptr + offs, old, mask=keep)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("is_max", [True, False])
def test_float_atomic_min_max_orders_signed_zeros_and_nans_by_bits(dtype, is_max):
    # a value with its sign bit clear goes through a signed integer max (min) of the bits, one
    # with it set through an unsigned min (max): -0.0 < +0.0, and a positive NaN is above all
    p = np.array([0.0, -0.0, 1.5, -2.0, np.nan, 3.0, -np.inf, 0.5], dtype)
    v = np.array([-0.0, 0.0, -1.5, -3.0, 1.0, np.nan, 2.0, 0.25], dtype)
    old = np.full(8, 7, dtype)
    start = p.copy()
    _atomic_min_max[(1,)](p, v, old, MAX=is_max)
    if is_max:
        expect = np.array([0.0, 0.0, 1.5, -2.0, np.nan, np.nan, 2.0, 0.5], dtype)
    else:
        expect = np.array([-0.0, -0.0, -1.5, -2.0, 1.0, 3.0, -np.inf, 0.25], dtype)
    np.testing.assert_array_equal(p, expect)
    np.testing.assert_array_equal(np.signbit(p), np.signbit(expect))
    np.testing.assert_array_equal(old[[0, 1, 2, 4, 5, 6, 7]], start[[0, 1, 2, 4, 5, 6, 7]])
    assert old[3] == 7  # masked off


# --- `and` / `or`: constants decide or drop out, as in Triton's code generator -----------

@kiln.jit
def _bool_ops(x_ptr, out_ptr, n, FLAG: tl.constexpr):
    offs = tl.arange(0, 8)
    x = tl.load(x_ptr + offs)
    kept = x and FLAG  # FLAG true: dropped, the result is x itself (not converted to bool)
    tl.static_assert(kept.dtype == tl.float32)
    tl.static_assert((n > 0 and False) == False)  # noqa: E712  a falsy constant decides `and`
    tl.static_assert((n > 0 or 5) == 5)  # a truthy constant decides `or`, whatever came before
    both = (n > 0) and (n < 10) and FLAG
    tl.static_assert(both.dtype == tl.int1)
    tl.store(out_ptr + offs, tl.where(both, kept, -1.0))


def test_boolean_operators_follow_tritons_constant_rules():
    x = np.arange(8, dtype=np.float32)
    out = np.zeros(8, np.float32)
    with pytest.warns(UserWarning, match="Logical operators 'and' and 'or' are deprecated"):
        _bool_ops[(1,)](x, out, 3, FLAG=True)
    np.testing.assert_array_equal(out, x)
    _bool_ops[(1,)](x, out, 30, FLAG=True)
    np.testing.assert_array_equal(out, -1.0)


# --- API pieces of Triton 3.6: must_use_result, MockTensor, tl.target_info, tl.str_to_ty -----

@kiln.must_use_result("the sum is returned, not stored")
@kiln.jit
def _plus_one(x):
    return x + 1


@kiln.jit
def _result_dropped(x_ptr):
    _plus_one(tl.load(x_ptr))


@kiln.jit
def _result_used(x_ptr, out_ptr):
    tl.store(out_ptr, _plus_one(tl.load(x_ptr)))


def test_must_use_result_rejects_a_dropped_result():
    x = np.ones(1, np.float32)
    with pytest.raises(kiln.CompilationError) as info:
        _result_dropped[(1,)](x)
    assert "The result of _plus_one is not being used. the sum is returned, not stored" in str(info.value)
    out = np.zeros(1, np.float32)
    _result_used[(1,)](x, out)
    assert out[0] == 2


@kiln.jit
def _guarded(out_ptr):
    if tl.target_info.cuda_capability_geq(9, 0):
        value = 90
    elif tl.target_info.is_cuda():
        value = 80
    else:
        value = -1  # no GPU target: the portable path
    tl.store(out_ptr, value)


def test_target_info_picks_the_branch_of_the_target_it_runs_on():
    """The interpreter has no GPU target (the portable branch); on the GPU (the conformance run
    there) the branch of the device's capability."""
    out = np.zeros(1, np.int32)
    _guarded[(1,)](out)
    target = tl.target_info.current_target()
    if target is None:
        assert out[0] == -1
    else:
        assert out[0] == (90 if target.arch >= 90 else 80)


def test_str_to_ty_reads_signature_strings():
    assert tl.str_to_ty("fp32", None) == tl.float32 and tl.str_to_ty("u8", None) == tl.uint8
    assert tl.str_to_ty("i1", None) == tl.int1 and tl.str_to_ty("bf16", None) == tl.bfloat16
    p = tl.str_to_ty("*kfp16", None)
    assert p.is_ptr() and p.element_ty == tl.float16 and p.is_const()
    assert tl.str_to_ty(("i32", "*fp8e5"), None) == (tl.int32, tl.pointer_type(tl.float8e5))


@kiln.jit
def _scaled_copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


def test_warmup_takes_torch_dtypes_for_tensors():
    torch = pytest.importorskip("torch")
    compiled = _scaled_copy.warmup(torch.float16, torch.float16, 1000, BLOCK=128, grid=(8,), target="sm_90a")
    assert ".target sm_90a" in compiled.asm["ptx"]
    assert "ptr<fp16>" in compiled.asm["kir"]
    assert kiln.MockTensor(torch.float32, [4, 8]).stride() == (8, 1)


@kiln.jit
def _int_limits(x_ptr, out_ptr):
    x = tl.load(x_ptr + tl.arange(0, 4))
    tl.static_assert(x.dtype.is_int16() and not x.dtype.is_uint16())
    lo: tl.constexpr = x.dtype.get_int_min_value()
    hi: tl.constexpr = x.dtype.get_int_max_value()
    tl.store(out_ptr + tl.arange(0, 4), tl.minimum(tl.maximum(x, lo + 1), hi - 1))


def test_dtype_limits_and_predicates_in_a_kernel():
    x = np.array([-32768, 0, 5, 32767], np.int16)
    out = np.zeros(4, np.int16)
    _int_limits[(1,)](x, out)
    np.testing.assert_array_equal(out, [-32767, 0, 5, 32766])
    assert tl.uint8.get_int_max_value() == 255 and tl.int1.get_int_max_value() == 1
    assert tl.block_type(tl.int8, [4]).with_element_ty(tl.float32) == tl.block_type(tl.float32, [4])
    assert not tl.float32.is_const() and tl.pointer_type(tl.float32, const=True).is_const()


def test_config_prints_and_compares_as_tritons():
    c = kiln.Config({"BLOCK": 64}, num_warps=8)
    assert str(c) == "BLOCK: 64, num_warps: 8, num_ctas: 1, num_stages: 3, maxnreg: None"
    assert c == kiln.Config({"BLOCK": 64}, num_warps=8) and len({c, kiln.Config({"BLOCK": 64}, num_warps=8)}) == 1
    assert c != kiln.Config({"BLOCK": 64}, num_warps=4)
    assert kiln.Config({}, ir_override=None).ir_override is None
    kiln.autotune(configs=[c], key=[], cache_results=True)(_scaled_copy)  # Triton's keyword is accepted


def test_config_kwargs_pickle_and_autotuner_names_as_tritons():
    """What Inductor relies on in max-autotune: all_kwargs in Triton's order without the options set
    to None, the caller's kwargs dict kept, pickles that lack fields (Triton's __setstate__ defaults)
    and keep added attributes, and the Autotuner's names torch.compile reads."""
    import pickle
    kwargs = {"XBLOCK": 8}
    c = kiln.Config(kwargs, num_warps=None, maxnreg=64)
    assert list(c.all_kwargs().items()) == [("XBLOCK", 8), ("num_ctas", 1), ("num_stages", 3), ("maxnreg", 64)]
    kwargs["XBLOCK"] = 16
    assert c.kwargs is kwargs and c.all_kwargs()["XBLOCK"] == 16
    c.found_by_coordesc = True
    again = pickle.loads(pickle.dumps(c))
    assert again == c and again.found_by_coordesc
    old = kiln.Config.__new__(kiln.Config)
    old.__setstate__({"kwargs": {"R": 2}})
    assert old == kiln.Config({"R": 2}) and old.maxnreg is None and old.ir_override is None
    tuned = kiln.autotune(configs=[c], key=[], prune_configs_by={"top_k": 2})(_scaled_copy)
    assert tuned.configs_top_k == 2 and tuned.user_defined_pre_hook is False and tuned.user_defined_post_hook is False


@kiln.jit
def _item_and_advance(x_ptr, out_ptr):
    one = tl.load(x_ptr + tl.arange(0, 1)[:, None])  # [1, 1]
    s = one.item()
    tl.static_assert(len(s.shape) == 0)
    tl.store(out_ptr, s * 2)
    p = tl.make_block_ptr(x_ptr, (8, 8), (8, 1), (0, 0), (2, 4), (1, 0))
    p = p.advance((4, 2))  # the method form of tl.advance
    tl.store(out_ptr + 1 + tl.arange(0, 2)[:, None] * 4 + tl.arange(0, 4)[None, :], tl.load(p))


def test_item_and_the_advance_method():
    x = np.arange(64, dtype=np.float32) + 1
    out = np.zeros(9, np.float32)
    _item_and_advance[(1,)](x, out)
    assert out[0] == 2
    np.testing.assert_array_equal(out[1:].reshape(2, 4), x.reshape(8, 8)[4:6, 2:6])


def test_jit_function_describes_its_parameters():
    params = _scaled_copy.params
    assert [p.name for p in params] == ["x_ptr", "y_ptr", "n", "BLOCK"]
    assert [p.is_constexpr for p in params] == [False, False, False, True] and params[3].num == 3
    assert _scaled_copy.constexprs == [3]
    assert _scaled_copy.starting_line_number > 0
