"""User errors in kernels: each is a kiln.CompilationError that points at the user's line with a caret."""
import numpy as np
import pytest

import kiln
import kiln.language as tl

THIS_FILE = __file__
with open(THIS_FILE) as _f:
    SOURCE = _f.read().splitlines()

INTERNAL_PATHS = ("frontend/", "kiln/language", "ast_to_ir", "semantic.py", "site-packages", "Traceback")


def line_of(marker: str) -> int:
    """The 1-based line of this file that carries `# <marker>`."""
    hits = [i + 1 for i, text in enumerate(SOURCE) if text.rstrip().endswith(f"# {marker}")]
    assert len(hits) == 1, marker
    return hits[0]


def compile_error(launch, marker: str, token: str, *reason_words) -> str:
    with pytest.raises(kiln.CompilationError) as info:
        launch()
    msg = str(info.value)
    line = line_of(marker)
    assert f"{THIS_FILE}:{line}:" in msg, msg
    lines = msg.splitlines()
    src = [i for i, text in enumerate(lines) if text.strip() == SOURCE[line - 1].strip()]
    assert src, f"the source line is not shown:\n{msg}"
    caret = lines[src[0] + 1]
    assert caret.strip() == "^", msg
    col = caret.index("^")
    assert lines[src[0]][col:].startswith(token), f"caret not under {token!r}:\n{msg}"
    loc_col = int(msg.split(f"{THIS_FILE}:{line}:")[1].split(":")[0])
    assert SOURCE[line - 1][loc_col:].startswith(token), msg
    for path in INTERNAL_PATHS:
        assert path not in msg, f"kiln-internal {path!r} leaks into:\n{msg}"
    for word in reason_words:
        assert word.lower() in msg.lower(), msg
    return msg


X = np.zeros(16, np.float32)


@kiln.jit
def _unknown_name(x_ptr):
    y = tl.load(x_ptr)
    tl.store(x_ptr, y + undefined_thing)  # noqa: F821  # E_UNKNOWN


def test_unknown_name():
    compile_error(lambda: _unknown_name[(1,)](X), "E_UNKNOWN", "undefined_thing", "undefined_thing", "not defined")


@kiln.jit
def _unknown_attribute(x_ptr):
    tl.store(x_ptr, tl.no_such_builtin(1.0))  # E_ATTR


def test_unknown_attribute_of_tl():
    compile_error(lambda: _unknown_attribute[(1,)](X), "E_ATTR", "tl.no_such_builtin", "no_such_builtin")


@kiln.jit
def _shape_mismatch(x_ptr):
    a = tl.arange(0, 8)
    b = tl.arange(0, 16)
    tl.store(x_ptr + b, (a + b).to(tl.float32))  # E_SHAPE


def test_shape_mismatch_in_broadcasting():
    compile_error(lambda: _shape_mismatch[(1,)](X), "E_SHAPE", "a + b", "8", "16")


@kiln.jit
def _shape_mismatch_2d(x_ptr):
    a = tl.arange(0, 4)[:, None]
    b = tl.zeros((8, 2), tl.int32)
    c = a * b  # E_SHAPE2D
    tl.store(x_ptr + tl.arange(0, 4), tl.sum(c, axis=1).to(tl.float32))


def test_shape_mismatch_2d():
    compile_error(lambda: _shape_mismatch_2d[(1,)](X), "E_SHAPE2D", "a * b", "broadcast")


@kiln.jit
def _runtime_arange(x_ptr, n):
    offs = tl.arange(0, n)  # E_ARANGE
    tl.store(x_ptr + offs, 0.0)


def test_non_constexpr_where_one_is_needed():
    compile_error(lambda: _runtime_arange[(1,)](X, 8), "E_ARANGE", "tl.arange", "constexpr")


@kiln.jit
def _runtime_shape(x_ptr, n):
    z = tl.zeros((n,), tl.float32)  # E_ZEROS
    tl.store(x_ptr + tl.arange(0, 16), z)


def test_runtime_value_as_a_shape():
    compile_error(lambda: _runtime_shape[(1,)](X, 8), "E_ZEROS", "tl.zeros", "constexpr")


@kiln.jit
def _non_power_of_two(x_ptr):
    offs = tl.arange(0, 12)  # E_POW2
    tl.store(x_ptr + offs, 1.0)


def test_arange_needs_a_power_of_two():
    compile_error(lambda: _non_power_of_two[(1,)](X), "E_POW2", "tl.arange", "power of")


@kiln.jit
def _uses_break(x_ptr, n):
    for i in range(n):
        if i == 3:
            break  # E_BREAK
    tl.store(x_ptr, 1.0)


def test_break_is_unsupported():
    compile_error(lambda: _uses_break[(1,)](X, 5), "E_BREAK", "break", "break")


@kiln.jit
def _uses_continue(x_ptr, n):
    for i in range(n):
        continue  # E_CONTINUE
    tl.store(x_ptr, 1.0)


def test_continue_is_unsupported():
    compile_error(lambda: _uses_continue[(1,)](X, 5), "E_CONTINUE", "continue", "continue")


@kiln.jit
def _negates_a_tuple(x_ptr):
    flag = not (0, 0)  # E_NOT_TUPLE
    tl.store(x_ptr, flag)


def test_not_of_a_tuple_is_an_error_at_the_not():
    """As in Triton: a tuple has no unary operators (Python would say `not (0, 0)` is False)."""
    msg = compile_error(lambda: _negates_a_tuple[(1,)](X), "E_NOT_TUPLE", "not (0, 0)", "not", "tuple")
    with pytest.raises(kiln.CompilationError) as info:
        _negates_a_tuple[(1,)](X)
    assert info.value.__cause__ is None, msg


@kiln.jit
def _uses_lambda(x_ptr):
    f = lambda v: v + 1  # noqa: E731  # E_LAMBDA
    tl.store(x_ptr, f(1.0))


def test_lambda_is_unsupported():
    compile_error(lambda: _uses_lambda[(1,)](X), "E_LAMBDA", "lambda", "lambda")


@kiln.jit
def _uses_with(x_ptr):
    with open("x") as f:  # E_WITH
        tl.store(x_ptr, 1.0)


def test_with_is_unsupported():
    compile_error(lambda: _uses_with[(1,)](X), "E_WITH", "with", "with")


@kiln.jit
def _uses_try(x_ptr):
    try:  # E_TRY
        tl.store(x_ptr, 1.0)
    except Exception:
        pass


def test_try_is_unsupported():
    compile_error(lambda: _uses_try[(1,)](X), "E_TRY", "try", "try")


@kiln.jit
def _loop_type_change(x_ptr, n):
    acc = 0
    for i in range(n):  # E_LOOP
        acc = acc + 0.5
    tl.store(x_ptr, acc)


def test_loop_carried_type_mismatch():
    compile_error(lambda: _loop_type_change[(1,)](X, 4), "E_LOOP", "for", "acc", "int32", "fp32")


@kiln.jit
def _while_type_change(x_ptr, n):
    v = tl.zeros((4,), tl.float16)
    while n > 0:  # E_WHILE
        v = v + 1.0
        v = v.to(tl.float32)
        n -= 1
    tl.store(x_ptr + tl.arange(0, 4), v)


def test_while_carried_type_mismatch():
    compile_error(lambda: _while_type_change[(1,)](X, 4), "E_WHILE", "while", "'v'", "fp16", "fp32")


@kiln.jit
def _branch_type_mismatch(x_ptr, flag):
    if flag > 0:  # E_IF
        v = 1
    else:
        v = 1.5
    tl.store(x_ptr, v)


def test_runtime_if_branches_with_different_types():
    compile_error(lambda: _branch_type_mismatch[(1,)](X, 5), "E_IF", "if", "'v'")


@kiln.jit
def _two_args(a, b):
    return a + b


@kiln.jit
def _wrong_arg_count(x_ptr):
    v = _two_args(1.0)  # E_ARGS
    tl.store(x_ptr, v)


def test_wrong_argument_count_of_a_jit_call():
    compile_error(lambda: _wrong_arg_count[(1,)](X), "E_ARGS", "_two_args", "_two_args", "argument")


@kiln.jit
def _too_many_args(x_ptr):
    v = _two_args(1.0, 2.0, 3.0)  # E_ARGS3
    tl.store(x_ptr, v)


def test_too_many_arguments_of_a_jit_call():
    compile_error(lambda: _too_many_args[(1,)](X), "E_ARGS3", "_two_args", "_two_args")


@kiln.jit
def _bad_bitcast(x_ptr):
    v = tl.load(x_ptr)
    tl.store(x_ptr, v.to(tl.int16, bitcast=True).to(tl.float32))  # E_BITCAST


def test_bad_bitcast_width():
    compile_error(lambda: _bad_bitcast[(1,)](X), "E_BITCAST", "v.to(tl.int16, bitcast=True)", "bitcast", "fp32",
                  "int16")


@kiln.jit
def _bad_cast_target(x_ptr):
    v = tl.load(x_ptr)
    tl.store(x_ptr, tl.cast(v, 3))  # E_CAST


def test_cast_to_something_that_is_not_a_dtype():
    compile_error(lambda: _bad_cast_target[(1,)](X), "E_CAST", "tl.cast", "dtype")


@kiln.jit
def _float_pointer_offset(x_ptr):
    p = x_ptr + 1.5  # E_PTRF
    tl.store(p, 1.0)


def test_pointer_plus_float():
    compile_error(lambda: _float_pointer_offset[(1,)](X), "E_PTRF", "x_ptr + 1.5")


@kiln.jit
def _static_assert_fails(x_ptr, BLOCK: tl.constexpr):
    tl.static_assert(BLOCK >= 32, "BLOCK too small")  # E_STATIC
    tl.store(x_ptr, 1.0)


def test_static_assert_fails_at_compile_time():
    compile_error(lambda: _static_assert_fails[(1,)](X, BLOCK=16), "E_STATIC", "tl.static_assert",
                  "BLOCK too small")


@kiln.jit
def _inner_bad(v):
    return v + not_defined_inside  # noqa: F821  # E_INNER


@kiln.jit
def _outer_calls_bad(x_ptr):
    tl.store(x_ptr, _inner_bad(1.0))  # E_CALL


def test_error_inside_a_called_jit_function_points_at_the_call_caused_by_the_callee():
    # as Triton: the error is at the call (Triton's "at 2:20:" too), its __cause__ the error in the callee
    outer = compile_error(lambda: _outer_calls_bad[(1,)](X), "E_CALL", "_inner_bad", "not_defined_inside")
    assert outer.splitlines()[0].endswith("error: at 2:20: in _outer_calls_bad"), outer
    with pytest.raises(kiln.CompilationError) as info:
        _outer_calls_bad[(1,)](X)
    inner = info.value.__cause__
    assert isinstance(inner, kiln.CompilationError) and inner.__traceback__ is None
    assert f"{THIS_FILE}:{line_of('E_INNER')}:" in str(inner) and "at 2:15: in _inner_bad" in str(inner)


@kiln.jit
def _library_misuse(x_ptr):
    offs = tl.arange(0, 4)
    v = tl.load(x_ptr + offs)
    tl.store(x_ptr + offs, tl.xor_sum(v, axis=0))  # E_LIB


def test_error_inside_a_kiln_library_function_points_at_the_users_call():
    compile_error(lambda: _library_misuse[(1,)](X), "E_LIB", "tl.xor_sum", "xor_sum")


@kiln.jit
def _block_condition(x_ptr):
    v = tl.load(x_ptr + tl.arange(0, 4))
    if v > 0:  # E_BLOCKCOND
        tl.store(x_ptr, 1.0)


def test_block_as_an_if_condition():
    compile_error(lambda: _block_condition[(1,)](X), "E_BLOCKCOND", "if", "scalar")


@kiln.jit
def _returns_value(x_ptr):
    return tl.load(x_ptr)  # E_RETURN


def test_kernel_returning_a_value():
    compile_error(lambda: _returns_value[(1,)](X), "E_RETURN", "return", "return")


@kiln.jit
def _reduce_bad_axis(x_ptr):
    v = tl.load(x_ptr + tl.arange(0, 4))
    tl.store(x_ptr, tl.sum(v, axis=2))  # E_AXIS


def test_reduction_axis_out_of_range():
    compile_error(lambda: _reduce_bad_axis[(1,)](X), "E_AXIS", "tl.sum", "axis")


@kiln.jit
def _dot_shapes_disagree(x_ptr):
    a = tl.zeros((16, 32), tl.float16)
    c = tl.dot(a, a)  # E_DOT
    tl.store(x_ptr + tl.arange(0, 16), tl.sum(c, axis=1))


def test_dot_operands_must_agree_on_k():
    compile_error(lambda: _dot_shapes_disagree[(1,)](X), "E_DOT", "tl.dot", "32")


@kiln.jit
def _tensor_in_python_call(x_ptr):
    v = tl.load(x_ptr)
    tl.store(x_ptr, float(v))  # E_PYCALL


def test_tensor_passed_to_a_python_function():
    compile_error(lambda: _tensor_in_python_call[(1,)](X), "E_PYCALL", "float(v)")


def test_error_is_raised_again_on_the_next_launch():
    for _ in range(2):
        with pytest.raises(kiln.CompilationError):
            _unknown_name[(1,)](X)


def test_cause_is_the_underlying_error_without_kiln_frames():
    # as Triton: users and Triton's tests read the underlying error from __cause__
    with pytest.raises(kiln.CompilationError) as info:
        _unknown_name[(1,)](X)
    assert isinstance(info.value.__cause__, NameError) and info.value.__suppress_context__
    assert info.value.__cause__.__traceback__ is None


@kiln.jit
def _runtime_static_range(x_ptr, n):
    for i in tl.static_range(n):  # E_STATIC_RANGE
        tl.store(x_ptr + i, 1.0)


def test_static_range_with_a_runtime_bound():
    compile_error(lambda: _runtime_static_range[(1,)](X, 4), "E_STATIC_RANGE", "for", "static_range", "constexpr")


@kiln.jit
def _uses_del(x_ptr):
    v = tl.load(x_ptr)
    del v  # E_DEL
    tl.store(x_ptr, 1.0)


def test_del_is_unsupported():
    compile_error(lambda: _uses_del[(1,)](X), "E_DEL", "del", "Delete")


@kiln.jit
def _bad_reshape(x_ptr):
    v = tl.load(x_ptr + tl.arange(0, 16))
    w = tl.reshape(v, (4, 8))  # E_RESHAPE
    tl.store(x_ptr + tl.arange(0, 16), tl.ravel(w))


def test_reshape_to_a_different_number_of_elements():
    compile_error(lambda: _bad_reshape[(1,)](X), "E_RESHAPE", "tl.reshape", "16", "[4, 8]")


@kiln.jit
def _store_float_block_to_scalar_pointer(x_ptr):
    tl.store(x_ptr, tl.zeros((4,), tl.float32))  # E_STORE


def test_storing_a_block_through_a_scalar_pointer():
    compile_error(lambda: _store_float_block_to_scalar_pointer[(1,)](X), "E_STORE", "tl.store", "block")


def test_error_classes_share_tritons_base():
    import pickle
    assert issubclass(kiln.CompilationError, kiln.TritonError)
    assert issubclass(kiln.InterpreterError, kiln.TritonError) and issubclass(kiln.InterpreterError, RuntimeError)
    err = kiln.OutOfResources(262144, 232448, "shared memory")
    assert isinstance(err, kiln.TritonError)
    assert str(err).startswith("out of resource: shared memory, Required: 262144, Hardware limit: 232448")
    again = pickle.loads(pickle.dumps(err))  # crosses process boundaries (autotuning workers, daemons)
    assert (again.required, again.limit, again.name) == (262144, 232448, "shared memory")


def test_interpreter_faults_are_interpreter_errors():
    @kiln.jit
    def out_of_bounds(x_ptr):
        tl.store(x_ptr + 100 + tl.arange(0, 4), 1.0)

    with pytest.raises(kiln.InterpreterError, match="out_of_bounds"):
        out_of_bounds[(1,)](np.zeros(4, np.float32))
