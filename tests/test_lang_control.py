"""Conformance: loops, branches, constexpr folding, @jit calls, tuples, min/max builtins."""
import numpy as np
import pytest

import kiln
import kiln.language as tl


@kiln.jit
def _loops(out_ptr, n, N: tl.constexpr):
    offs = tl.arange(0, N)
    acc = tl.zeros((N,), tl.int32)
    total = 0
    for i in range(n):
        acc += offs * i
        total = total + i
    tl.store(out_ptr + offs, acc)
    tl.store(out_ptr + N, total)
    s = 0
    for i in range(3, n, 2):
        s += i
    tl.store(out_ptr + N + 1, s)
    t = 0
    for i in tl.range(n, 0, -3, num_stages=2):
        t += i
    tl.store(out_ptr + N + 2, t)
    u = 1
    for i in range(0, n):
        u = u * 2
    tl.store(out_ptr + N + 3, u)


@pytest.mark.parametrize("n", [0, 1, 7, 10])
def test_for_range_with_carried_values(n):
    out = np.full(12, -1, np.int32)
    _loops[(1,)](out, n, N=8)
    tri = sum(range(n))
    np.testing.assert_array_equal(out[:8], np.arange(8) * tri)
    assert out[8] == tri
    assert out[9] == sum(range(3, n, 2))
    assert out[10] == sum(range(n, 0, -3))
    assert out[11] == 2 ** n


@kiln.jit
def _static_range(out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    acc = tl.zeros((N,), tl.float32)
    for i in tl.static_range(4):
        tl.static_assert(i < 4)
        if i % 2 == 0:  # folded: i is a constexpr
            acc += i
        else:
            acc -= 10
    for j in tl.static_range(1, 8, 3):
        acc += offs * j
    tl.store(out_ptr + offs, acc)


def test_static_range_unrolls_with_constexpr_index():
    out = np.zeros(8, np.float32)
    _static_range[(1,)](out, N=8)
    np.testing.assert_array_equal(out, (0 + 2 - 20) + np.arange(8) * (1 + 4 + 7))
    ir = _static_range.cache[next(iter(_static_range.cache))].asm["kir"]
    assert " for " not in ir and "scf.for" not in ir  # unrolled: no loop op


@kiln.jit
def _while_loop(out_ptr, start):
    n = start
    steps = 0
    while n != 1:
        if n % 2 == 0:
            n = n // 2
        else:
            n = 3 * n + 1
        steps += 1
    tl.store(out_ptr, steps)


@pytest.mark.parametrize("start", [1, 6, 27])
def test_while_loop_with_runtime_if(start):
    out = np.zeros(1, np.int32)
    _while_loop[(1,)](out, start)
    n, steps = start, 0
    while n != 1:
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        steps += 1
    assert out[0] == steps


@kiln.jit
def _if_chain(x_ptr, out_ptr):
    pid = tl.program_id(0)
    x = tl.load(x_ptr + pid)
    if x < 0:
        y = -1
    elif x == 0:
        y = 0
    elif x < 10:
        y = x * 2
    else:
        y = 100
    tl.store(out_ptr + pid, y)


def test_if_elif_else_on_runtime_scalars():
    x = np.array([-5, 0, 3, 9, 10, 50], np.int32)
    out = np.zeros(6, np.int32)
    _if_chain[(6,)](x, out)
    np.testing.assert_array_equal(out, np.select([x < 0, x == 0, x < 10], [-1, 0, x * 2], 100))


@kiln.jit
def _constexpr_if(out_ptr, MODE: tl.constexpr):
    if MODE == 0:
        v = 1.5
    elif MODE == 1:
        v = tl.load(out_ptr) + 1
    else:
        v = this_name_does_not_exist  # noqa: F821 -- never compiled: the branch is folded
    tl.store(out_ptr, v)


def test_constexpr_if_is_folded():
    out = np.zeros(1, np.float32)
    _constexpr_if[(1,)](out, MODE=0)
    assert out[0] == 1.5
    _constexpr_if[(1,)](out, MODE=1)
    assert out[0] == 2.5
    ir = _constexpr_if.cache[next(iter(_constexpr_if.cache))].asm["kir"]
    assert " if " not in ir


@kiln.jit
def _ternary(x_ptr, out_ptr, FLAG: tl.constexpr):
    x = tl.load(x_ptr)
    y = x * 2 if x > 3 else x - 1
    z = 7 if FLAG else 8
    tl.store(out_ptr, y + z)


def test_conditional_expressions():
    out = np.zeros(1, np.int32)
    _ternary[(1,)](np.array([5], np.int32), out, FLAG=True)
    assert out[0] == 17
    _ternary[(1,)](np.array([2], np.int32), out, FLAG=False)
    assert out[0] == 9


@kiln.jit
def _divmod(a, b):
    return a // b, a % b


@kiln.jit
def _scale_add(x, y, scale: tl.constexpr = 3):
    return x * scale + y


@kiln.jit
def _nested(x):
    q, r = _divmod(x, 5)
    return _scale_add(q, r), _scale_add(q, r, scale=10)


@kiln.jit
def _calls(x_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    a, b = _nested(x)
    tl.store(out_ptr + offs, a)
    tl.store(out_ptr + N + offs, b)
    pair = _divmod(x, 4)
    tl.store(out_ptr + 2 * N + offs, pair[0] + pair[1])


def test_nested_jit_calls_with_tuple_returns_and_defaults():
    x = np.arange(8, dtype=np.int32) * 7
    out = np.zeros(24, np.int32)
    _calls[(1,)](x, out, N=8)
    q, r = x // 5, x % 5
    np.testing.assert_array_equal(out[:8], q * 3 + r)
    np.testing.assert_array_equal(out[8:16], q * 10 + r)
    np.testing.assert_array_equal(out[16:], x // 4 + x % 4)


@kiln.jit
def _early_return(x, LIMIT: tl.constexpr):
    if LIMIT > 0:
        return tl.minimum(x, LIMIT)
    return x


@kiln.jit
def _runtime_return(x):
    if x > 0:
        return x * 10
    else:
        return -x


@kiln.jit
def _returns(x_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    tl.store(out_ptr + offs, _early_return(x, 5))
    tl.store(out_ptr + N + offs, _early_return(x, 0))
    s = tl.load(x_ptr + 1)
    tl.store(out_ptr + 2 * N, _runtime_return(s))
    s0 = tl.load(x_ptr)
    tl.store(out_ptr + 2 * N + 1, _runtime_return(s0 - 3))


def test_returns_from_constexpr_and_runtime_branches():
    x = np.arange(8, dtype=np.int32)
    out = np.zeros(18, np.int32)
    _returns[(1,)](x, out, N=8)
    np.testing.assert_array_equal(out[:8], np.minimum(x, 5))
    np.testing.assert_array_equal(out[8:16], x)
    assert out[16] == 10 and out[17] == 3


@kiln.jit
def _minmax_builtins(x_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    tl.store(out_ptr + offs, min(x, 3))
    tl.store(out_ptr + N + offs, max(x, 2, 4 - x))
    BIG: tl.constexpr = max(N, 3) * min(2, 5)
    tl.store(out_ptr + 2 * N, BIG)


def test_min_max_builtins_on_tensors_and_constexprs():
    x = np.arange(8, dtype=np.int32) - 2
    out = np.zeros(17, np.int32)
    _minmax_builtins[(1,)](x, out, N=8)
    np.testing.assert_array_equal(out[:8], np.minimum(x, 3))
    np.testing.assert_array_equal(out[8:16], np.maximum(np.maximum(x, 2), 4 - x))
    assert out[16] == 16


@kiln.jit
def _constexpr_tuple(out_ptr, given: tl.constexpr, N: tl.constexpr):
    SHAPE: tl.constexpr = (N, 2 * N)
    # annotated constexpr, a tuple is one constexpr as Triton makes it: its type is constexpr_type of the tuple
    tl.static_assert(SHAPE.type == tl.core.constexpr_type((N, 2 * N)))
    tl.static_assert(given.type == tl.core.constexpr_type((4, 8)))
    tl.static_assert(given == SHAPE)
    tl.store(out_ptr + tl.arange(0, N), tl.sum(tl.full(SHAPE, 1, tl.int32), axis=1) + SHAPE[0])


def test_a_tuple_annotated_constexpr_is_one_constexpr():
    out = np.zeros(4, np.int32)
    _constexpr_tuple[(1,)](out, (4, 8), N=4)
    assert out.tolist() == [12] * 4


@kiln.jit
def _constexpr_of_a_runtime_value(x_ptr, y_ptr, n, tiles_per_program, TILE: tl.constexpr):
    SPAN: tl.constexpr = TILE * tiles_per_program  # a tensor: Triton binds it through its wrapper
    start = SPAN * tl.program_id(0)
    end = tl.minimum(start + SPAN, n)
    for s in range(start, end, TILE):
        offs = s + tl.arange(0, TILE)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < end) * 2, mask=offs < end)


def test_a_runtime_value_annotated_constexpr_is_that_value():
    x = np.arange(1000, dtype=np.float32)
    y = np.zeros(1000, np.float32)
    _constexpr_of_a_runtime_value[(kiln.cdiv(1000, 4 * 64),)](x, y, 1000, 4, TILE=64)
    np.testing.assert_array_equal(y, x * 2)


@kiln.jit
def _largest(dtype: tl.constexpr):
    if dtype.value.is_floating():
        return float("inf")
    return dtype.value.get_int_max_value()


@kiln.jit
def _smallest(dtype):  # unannotated: a dtype is passed as a constexpr all the same, as in Triton
    kind = dtype.value
    if kind.is_floating():
        return float("-inf")
    return -(2 ** (kind.int_bitwidth - 1))


@kiln.jit
def _min_and_max(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr, tl.min(tl.load(x_ptr + offs, mask=offs < n, other=_largest(x_ptr.type.element_ty)), 0))
    tl.store(out_ptr + 1, tl.max(tl.load(x_ptr + offs, mask=offs < n, other=_smallest(x_ptr.dtype.element_ty)), 0))


@pytest.mark.parametrize("np_dtype", [np.float32, np.int32])
def test_a_dtype_given_to_a_jit_function_is_a_constexpr_with_a_value(np_dtype):
    x = np.array([7, -3, 12, 5, 0, 9], np_dtype)
    out = np.zeros(2, np_dtype)
    _min_and_max[(1,)](x, out, 6, BLOCK=8)
    assert out.tolist() == [-3, 12]


@kiln.jit
def _constexpr_redefined(out_ptr, N: tl.constexpr):
    N: tl.constexpr = 2
    tl.store(out_ptr, N)


def test_an_annotated_constexpr_of_a_defined_name_is_triton_s_error():
    with pytest.raises(kiln.CompilationError) as info:
        _constexpr_redefined[(1,)](np.zeros(1, np.int32), N=4)
    assert "N is already defined. constexpr cannot be reassigned." in str(info.value)


@kiln.jit
def _tuples(out_ptr):
    a, b = 1, 2
    a, b = b, a
    c, d, e = a * 10, b * 10, 5  # (Triton 3.6 cannot unpack nested targets like (c, d), e)
    t = (a, b, c, d, e)
    tl.store(out_ptr + 0, t[0])
    tl.store(out_ptr + 1, t[1])
    tl.store(out_ptr + 2, c + d)
    tl.store(out_ptr + 3, e + len(t))


def test_tuple_unpacking_and_swaps():
    out = np.zeros(4, np.int32)
    _tuples[(1,)](out)
    np.testing.assert_array_equal(out, [2, 1, 30, 10])


@kiln.jit
def _loop_with_tensor_carry_and_if(x_ptr, out_ptr, n, N: tl.constexpr):
    offs = tl.arange(0, N)
    acc = tl.load(x_ptr + offs)
    for i in range(n):
        if i % 2 == 0:
            acc = acc * 2
        else:
            acc = acc - 1
    tl.store(out_ptr + offs, acc)


def test_runtime_if_inside_a_loop_carries_values():
    x = np.arange(8, dtype=np.int32)
    out = np.zeros(8, np.int32)
    _loop_with_tensor_carry_and_if[(1,)](x, out, 5, N=8)
    ref = x.copy()
    for i in range(5):
        ref = ref * 2 if i % 2 == 0 else ref - 1
    np.testing.assert_array_equal(out, ref)


@kiln.jit
def _nested_loops(out_ptr, n, m):
    total = 0
    for i in range(n):
        j = 0
        while j < m:
            total += i * j
            j += 1
    tl.store(out_ptr, total)


def test_nested_for_and_while():
    out = np.zeros(1, np.int32)
    _nested_loops[(1,)](out, 4, 5)
    assert out[0] == sum(i * j for i in range(4) for j in range(5))


@kiln.jit
def _bool_ops(x_ptr, out_ptr, FLAG: tl.constexpr):
    x = tl.load(x_ptr)
    if (x > 2 and x < 10) or not FLAG:
        r = 1
    else:
        r = 0
    tl.store(out_ptr, r)


def test_and_or_not_on_runtime_and_constexpr_values():
    out = np.zeros(1, np.int32)
    for v, flag, expect in [(5, True, 1), (1, True, 0), (12, True, 0), (1, False, 1)]:
        _bool_ops[(1,)](np.array([v], np.int32), out, FLAG=flag)
        assert out[0] == expect, (v, flag)


@kiln.jit
def _chained_compare(x_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    tl.store(out_ptr + offs, (2 <= x) & (x < 5))


def test_comparisons_make_int1_blocks():
    x = np.arange(8, dtype=np.int32)
    out = np.zeros(8, np.bool_)
    _chained_compare[(1,)](x, out, N=8)
    np.testing.assert_array_equal(out, (x >= 2) & (x < 5))


@kiln.jit
def _pass_jit_as_constexpr(x_ptr, out_ptr, FN: tl.constexpr, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(out_ptr + offs, FN(tl.load(x_ptr + offs), 1))


@kiln.jit
def _plus(a, b):
    return a + b


@kiln.jit
def _times(a, b):
    return a * (b + 1)


def test_jit_function_passed_as_constexpr_argument():
    x = np.arange(8, dtype=np.int32)
    out = np.zeros(8, np.int32)
    _pass_jit_as_constexpr[(1,)](x, out, FN=_plus, N=8)
    np.testing.assert_array_equal(out, x + 1)
    _pass_jit_as_constexpr[(1,)](x, out, FN=_times, N=8)
    np.testing.assert_array_equal(out, x * 2)


@kiln.jit
def _runtime_loop_bounds(out_ptr, lo, hi, step):
    total = 0
    count = 0
    for i in range(lo, hi, step):
        total += i
        count += 1
    tl.store(out_ptr, total)
    tl.store(out_ptr + 1, count)


# (a negative step known only at run time runs no iteration in Triton 3.6, so none is tested)
@pytest.mark.parametrize("lo,hi,step", [(0, 10, 3), (5, 5, 1), (7, 2, 1), (-4, 4, 2), (3, 50, 16)])
def test_runtime_start_end_and_step(lo, hi, step):
    out = np.zeros(2, np.int32)
    _runtime_loop_bounds[(1,)](out, lo, hi, step)
    assert out.tolist() == [sum(range(lo, hi, step)), len(range(lo, hi, step))]


@kiln.jit
def _static_range_with_runtime_if(x_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    s = tl.sum(x, axis=0)
    acc = tl.zeros((N,), tl.int32)
    for k in tl.static_range(0, 6, 2):
        if s > k * 10:
            acc += x * k
        else:
            acc -= 1
    tl.store(out_ptr + offs, acc)


def test_runtime_if_inside_static_range():
    x = np.array([1, 2, 3, 9], np.int32)  # sum 15
    out = np.zeros(4, np.int32)
    _static_range_with_runtime_if[(1,)](x, out, N=4)
    ref = np.zeros(4, np.int64)
    for k in range(0, 6, 2):
        ref = ref + x * k if 15 > k * 10 else ref - 1
    np.testing.assert_array_equal(out, ref)


@kiln.jit
def _while_on_a_block_reduction(x_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    rounds = 0
    while tl.max(x, axis=0) > 1:
        x = tl.where(x > 1, x // 2, x)
        rounds += 1
    tl.store(out_ptr + offs, x)
    tl.store(out_ptr + N, rounds)


def test_while_with_a_block_carried_through_a_reduction_condition():
    x = np.array([1, 40, 3, 7], np.int32)
    out = np.zeros(5, np.int32)
    _while_on_a_block_reduction[(1,)](x, out, N=4)
    assert out.tolist() == [1, 1, 1, 1, 5]  # 40 -> 20 -> 10 -> 5 -> 2 -> 1


@kiln.jit
def _kw_helper(x, scale=2, offset: tl.constexpr = 0):
    return x * scale + offset


@kiln.jit
def _keyword_calls(x_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    tl.store(out_ptr + offs, _kw_helper(x))
    tl.store(out_ptr + N + offs, _kw_helper(x, offset=5))
    tl.store(out_ptr + 2 * N + offs, _kw_helper(scale=3, x=x))


def test_jit_calls_with_defaults_and_keywords():
    x = np.arange(4, dtype=np.int32)
    out = np.zeros(12, np.int32)
    _keyword_calls[(1,)](x, out, N=4)
    np.testing.assert_array_equal(out, np.concatenate([x * 2, x * 2 + 5, x * 3]))


@kiln.jit
def _range_hints(out_ptr, n):
    acc = 0
    for i in tl.range(0, n, 1, num_stages=3, loop_unroll_factor=2):
        acc += i
    for j in tl.range(n, num_stages=1, flatten=True):
        acc += 100
    for k in tl.static_range(6, 0, -2):
        acc += k * 1000
    tl.store(out_ptr, acc)


def test_tl_range_hints_and_negative_static_step():
    out = np.zeros(1, np.int32)
    _range_hints[(1,)](out, 5)
    assert out[0] == sum(range(5)) + 500 + (6 + 4 + 2) * 1000


@kiln.jit
def _scalar_condition_where(x_ptr, out_ptr, flag, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    tl.store(out_ptr + offs, tl.where(flag > 2, x, -x))


def test_where_with_a_scalar_runtime_condition():
    x = np.arange(4, dtype=np.float32) + 1
    out = np.zeros(4, np.float32)
    _scalar_condition_where[(1,)](x, out, 5, N=4)
    np.testing.assert_array_equal(out, x)
    _scalar_condition_where[(1,)](x, out, 0, N=4)
    np.testing.assert_array_equal(out, -x)


@kiln.jit
def _while_with_tl_condition(out_ptr, n):
    total = 0
    i = 0
    while tl.condition(i < n, disable_licm=True):
        total += i
        i += 1
    tl.store(out_ptr, total)


def test_while_with_tl_condition():
    out = np.zeros(1, np.int32)
    _while_with_tl_condition[(1,)](out, 10)
    assert out[0] == 45


@kiln.constexpr_function
def _doubled_block(block):
    return 2 * block


@kiln.jit
def _arange_of_a_constexpr_function(out_ptr, BLOCK: tl.constexpr):
    WIDE: tl.constexpr = _doubled_block(BLOCK)
    offs = tl.arange(0, WIDE)
    tl.store(out_ptr + offs, offs)


def test_constexpr_function_result_is_a_compile_time_constant():
    out = np.zeros(16, np.int32)
    _arange_of_a_constexpr_function[(1,)](out, BLOCK=8)
    assert out.tolist() == list(range(16))
    assert _doubled_block(3) == 6  # still an ordinary function on the host


@kiln.jit
def _plus_one_if_positive(x, c):
    if c > 0:
        return x + 1


@kiln.jit
def _returns_on_one_path(out_ptr, c):
    offs = tl.arange(0, 4)
    tl.store(out_ptr + offs, _plus_one_if_positive(offs, c))


def test_a_path_that_returns_nothing_gives_an_undefined_value_of_the_returned_type():
    """As in Triton (its poison): where one path of a runtime `if` returns a value and the other falls off
    the end of the function, that path's value is undefined; kiln gives zeros."""
    out = np.full(4, 7, np.int32)
    _returns_on_one_path[(1,)](out, 1)
    np.testing.assert_array_equal(out, [1, 2, 3, 4])
    _returns_on_one_path[(1,)](out, -1)
    np.testing.assert_array_equal(out, [0, 0, 0, 0])


@kiln.jit
def _exit_early_then_rebind(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    if n == 0:  # as Inductor's templates begin: the rest rebinds the pointers to blocks of pointers
        return
    x_ptr = x_ptr + tl.arange(0, BLOCK)
    y_ptr = y_ptr + tl.arange(0, BLOCK)
    tl.store(y_ptr, tl.load(x_ptr) * 2)


@kiln.jit
def _tripled_or_zeros(x_ptr, n, BLOCK: tl.constexpr):
    if n == 0:
        return tl.zeros((BLOCK,), tl.float32)
    x_ptr = x_ptr + tl.arange(0, BLOCK)
    return tl.load(x_ptr) * 3


@kiln.jit
def _call_tripled_or_zeros(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    tl.store(y_ptr + tl.arange(0, BLOCK), _tripled_or_zeros(x_ptr, n, BLOCK))


@pytest.mark.parametrize("n", [0, 2])  # (1 would be specialized: a constant condition, no runtime if)
def test_names_rebound_to_other_types_after_an_early_return(n):
    # what follows `if ...: return` runs in the if's other branch: its names are not merged with the
    # returning branch's (a scalar pointer there, a block of pointers here)
    x, y = np.arange(16, dtype=np.float32), np.full(16, -1.0, np.float32)
    _exit_early_then_rebind[(1,)](x, y, n, BLOCK=16)
    np.testing.assert_array_equal(y, x * 2 if n else np.full(16, -1.0, np.float32))
    _call_tripled_or_zeros[(1,)](x, y, n, BLOCK=16)
    np.testing.assert_array_equal(y, x * 3 if n else np.zeros(16, np.float32))
