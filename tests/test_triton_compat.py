"""Triton programs that run unchanged: the host-side and frontend behaviour that Triton's own
tests and tutorials rely on (issue 9)."""
import importlib.util
import inspect
from typing import NamedTuple
import textwrap

import numpy as np
import pytest

import kiln
import kiln as triton
import kiln.language as tl


@triton.jit
def _template(Z, X, SIZE: tl.constexpr):
    off = tl.arange(0, SIZE)
    x = tl.load(X + off)
    z = GENERATE_TEST_HERE  # noqa: F821
    tl.store(Z + off, z)


def _exec_patched(template, expr):
    """A kernel built from source text by exec(), as generated-code users and Triton's tests do."""
    namespace = {}
    src = textwrap.dedent(inspect.getsource(template.fn)).replace("GENERATE_TEST_HERE", expr)
    exec(src, globals(), namespace)
    return namespace[template.fn.__name__]


def _run(kernel, x):
    z = np.zeros_like(x)
    kernel[(1,)](z, x, SIZE=x.size)
    return z


X = np.arange(8, dtype=np.float32)


def test_jit_of_a_function_built_by_exec():
    kernel = _exec_patched(_template, "x * 3")
    np.testing.assert_array_equal(_run(kernel, X), X * 3)
    assert kernel.src.startswith("def _template(")
    assert "x * 3" in kernel.src


def test_jit_source_patched_with_unsafe_update_src():
    kernel = triton.JITFunction(_template.fn)
    kernel._unsafe_update_src(kernel.src.replace("GENERATE_TEST_HERE", "x + 1"))
    np.testing.assert_array_equal(_run(kernel, X), X + 1)
    kernel._unsafe_update_src(kernel.src.replace("x + 1", "x - 1"))  # recompiles: no stale kernel
    np.testing.assert_array_equal(_run(kernel, X), X - 1)
    with pytest.raises(AttributeError, match="_unsafe_update_src"):
        kernel.src = "def f(): pass"


def test_src_is_the_dedented_function_without_decorators():
    assert _template.src.splitlines()[0] == "def _template(Z, X, SIZE: tl.constexpr):"


def test_src_and_line_numbers_under_a_long_decorator(tmp_path):
    """Inductor's kernels carry a decorator of several long lines; its text may even hold a `def`.
    `src` starts at the kernel's own `def`, and errors point at the file's real lines."""
    path = tmp_path / "inductor_like.py"
    path.write_text(
        "import kiln\nimport kiln.language as tl\n\n\n"
        "def heuristics(**meta):\n    return lambda fn: fn\n\n\n"
        "@heuristics(\n    note='''\ndef other(x):\n    pass\n''',\n    meta={'a': [1, 2, 3]},\n)\n"
        "@kiln.jit\n"
        "def kernel(Z, X, SIZE: tl.constexpr):\n"
        "    offs = tl.arange(0, SIZE)\n"
        "    tl.store(Z + offs, tl.load(X + offs) * undefined_name)\n"
        "\n\n# a comment after the kernel\nAFTER = 1\n")
    spec = importlib.util.spec_from_file_location("inductor_like", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    src = module.kernel.src
    assert src.startswith("def kernel(Z, X, SIZE: tl.constexpr):") and "AFTER" not in src and "other" not in src
    assert module.kernel.source_info().first_line == 17
    with pytest.raises(kiln.CompilationError, match="undefined_name") as info:
        _run(module.kernel, X)
    assert "inductor_like.py:19" in str(info.value)


def test_error_in_patched_source_shows_the_patched_line():
    kernel = triton.JITFunction(_template.fn)
    kernel._unsafe_update_src(kernel.src.replace("GENERATE_TEST_HERE", "x * not_defined_here"))
    with pytest.raises(kiln.CompilationError, match="not_defined_here") as info:
        _run(kernel, X)
    lines = str(info.value).splitlines()
    shown = next(i for i, text in enumerate(lines) if "x * not_defined_here" in text)
    assert lines[shown][lines[shown + 1].index("^"):].startswith("not_defined_here")


def test_exec_without_a_readable_source_says_so():
    code = compile("def f(x):\n    pass\n", "<nowhere>", "exec")
    namespace = {}
    exec(code, namespace)
    with pytest.raises(ValueError, match="defined in a Python file"):
        triton.jit(namespace["f"])


# --- Triton's error types and words ---------------------------------------------------------

@triton.jit
def _binary(Z, X, Y, SIZE: tl.constexpr):
    off = tl.arange(0, SIZE)
    x = tl.load(X + off)
    y = tl.load(Y + off)
    z = GENERATE_TEST_HERE  # noqa: F821
    tl.store(Z + off, z)


def _binary_with(expr):
    kernel = triton.JITFunction(_binary.fn)
    kernel._unsafe_update_src(kernel.src.replace("GENERATE_TEST_HERE", expr))
    return kernel


@pytest.mark.parametrize("op", ["&", "|", "^", "<<", ">>"])
def test_bitwise_op_on_floats_says_invalid_operands(op):
    x, y = np.ones(4, np.float32), np.ones(4, np.int32)
    with pytest.raises(triton.TritonError, match="invalid operands of type") as info:
        _binary_with(f"x {op} y")[(1,)](np.zeros(4, np.float32), x, y, SIZE=4)
    assert isinstance(info.value, triton.CompilationError)
    assert "invalid operands of type" in str(info.value.__cause__)


@pytest.mark.parametrize("op", ["/", "%", "//"])
def test_div_mod_of_mixed_signedness_says_cannot_use(op):
    x, y = np.ones(4, np.int32), np.ones(4, np.uint32)
    with pytest.raises(triton.TritonError, match="Cannot use .* because they have different signedness"):
        _binary_with(f"x {op} y")[(1,)](np.zeros(4, np.float32), x, y, SIZE=4)


@triton.jit
def _expand(dummy, N: tl.constexpr, AXES: tl.constexpr):
    t = tl.expand_dims(tl.arange(0, N), AXES)


@pytest.mark.parametrize("axes, words", [(-3, "invalid axis -3"), (2, "invalid axis 2"),
                                         ((0, 0), "duplicate axes, normalized axes = [0, 0]"),
                                         ((0, -3), "duplicate axes, normalized axes = [0, 0]")])
def test_compilation_error_cause_holds_the_underlying_error(axes, words):
    with pytest.raises(triton.TritonError) as info:
        _expand[(1,)](np.zeros(1), 32, axes)
    assert words in str(info.value.__cause__)
    assert info.value.__cause__.__traceback__ is None  # no frame inside kiln is printed


@triton.jit
def _bad_pid(dst):
    pid = tl.program_id(20)


def test_program_id_axis_message():
    with pytest.raises(triton.TritonError) as info:
        _bad_pid[(1,)](np.zeros(1))
    assert "program_id axis must be 0, 1, or 2 but got 20" in str(info.value.__cause__)


# --- semantics ------------------------------------------------------------------------------

@triton.jit
def _shapes(N: tl.constexpr):
    data = tl.arange(0, N)
    tl.static_assert(data.shape == [N])
    tl.static_assert(data[None, :].shape == [1, N])
    scalar = tl.full([], 1, tl.int32)
    tl.static_assert(scalar.shape == [])
    tl.static_assert(scalar[None, None].shape == [1, 1])
    tl.static_assert(tl.arange(0, 32).reshape(4, 8).permute(1, 0).shape == [tl.constexpr(8), tl.constexpr(4)])
    tl.static_assert(tl.expand_dims(N, -1).shape == [1])


def test_shape_is_a_list():
    _shapes[(1,)](32)


@pytest.mark.parametrize("dx, dy", [("int8", "uint32"), ("int32", "uint32"), ("int64", "uint64"),
                                    ("uint8", "int32"), ("uint16", "int16")])
def test_right_shift_follows_the_signedness_of_the_shifted_value(dx, dy):
    x = np.array([-128, -1, 64, -5, 100, -77, 3, -2]).astype(dx)
    y = np.array([1, 2, 3, 7, 0, 5, 1, 6]).astype(dy)
    bits = max(x.dtype.itemsize, y.dtype.itemsize) * 8
    wide = np.dtype(("int" if dx.startswith("int") else "uint") + str(bits))  # the shift's kind: x's
    unsigned, signed = (x.dtype, y.dtype) if dx[0] == "u" else (y.dtype, x.dtype)
    out_dtype = unsigned if unsigned.itemsize >= signed.itemsize else signed  # C's usual conversions
    z = np.zeros(8, out_dtype)
    _binary_with("x >> y")[(1,)](z, x, y, SIZE=8)
    np.testing.assert_array_equal(z, (x.astype(wide) >> y.astype(wide)).astype(out_dtype))


@triton.jit
def _static_steps(Z, N: tl.constexpr):
    for i in tl.static_range(0, N, step=2):
        tl.store(Z + i, i)
    for i in tl.static_range(1, N, 3):
        tl.store(Z + i, 100 + i)


def test_static_range_step():
    z = np.zeros(8, np.int32)
    _static_steps[(1,)](z, 8)
    np.testing.assert_array_equal(z, [0, 101, 2, 0, 104, 0, 6, 107])


@triton.jit
def _interleave_scalars(X, Y, Z):
    z = tl.interleave(X, Y)
    tl.static_assert(z.shape == [tl.constexpr(2)])
    tl.store(Z + tl.arange(0, 2), z)


def test_interleave_scalars():
    z = np.zeros(2, np.float32)
    _interleave_scalars[(1,)](10, 20, z)
    np.testing.assert_array_equal(z, [10, 20])


@triton.jit
def _where_pointers(cond_ptr, a_ptr, b_ptr, out_ptr, SCALAR: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    if SCALAR:
        out = tl.load(tl.where(tl.load(cond_ptr), a_ptr, b_ptr) + offs)
    else:
        a = tl.load(a_ptr + offs).to(tl.pi32_t)
        b = tl.load(b_ptr + offs).to(tl.pi32_t)
        out = tl.where(tl.load(cond_ptr + offs), a, b)
    tl.store(out_ptr + offs, out)


@pytest.mark.parametrize("scalar", [False, True])
def test_where_on_pointers(scalar):
    rs = np.random.RandomState(0)
    cond = rs.rand(16) > 0.5
    a, b = rs.randint(0, 99, 16).astype(np.int64), rs.randint(0, 99, 16).astype(np.int64)
    out = np.zeros(16, np.int64)
    _where_pointers[(1,)](cond, a, b, out, scalar, 16)
    np.testing.assert_array_equal(out, np.where(cond[0], a, b) if scalar else np.where(cond, a, b))


@triton.jit
def _kinds(X, Z, C: tl.constexpr):
    x = tl.load(X)
    tl.static_assert(isinstance(x, tl.tensor))
    tl.static_assert(isinstance(C, tl.constexpr))
    tl.static_assert(not isinstance(x, tl.constexpr))
    tl.static_assert(isinstance((x, x), tuple))
    tl.static_assert(isinstance(C, (int, float)))
    tl.store(Z, x)


def test_isinstance_in_a_kernel():
    z = np.zeros(1, np.int32)
    _kinds[(1,)](np.array([7], np.int32), z, 3)
    assert z[0] == 7


@triton.jit
def _early_return(X, Z):
    x = tl.load(X)
    if x > 0:
        if x > 10:
            tl.store(Z, 3)
            return
        tl.store(Z + 1, 7)
    tl.store(Z, 4)


@triton.jit
def _sign_scale(x):
    if x > 0:
        return x * 2
    return x * 3


@triton.jit
def _call_sign_scale(X, Z):
    tl.store(Z, _sign_scale(tl.load(X)))


@pytest.mark.parametrize("v, expected", [(50, [3, 0]), (5, [4, 7]), (-5, [4, 0])])
def test_return_inside_a_runtime_if(v, expected):
    z = np.zeros(2, np.int32)
    _early_return[(1,)](np.array([v], np.int32), z)
    np.testing.assert_array_equal(z, expected)
    z = np.zeros(1, np.int32)
    _call_sign_scale[(1,)](np.array([v], np.int32), z)
    assert z[0] == (v * 2 if v > 0 else v * 3)


@triton.jit
def _void_conditional(X, Z):
    x = tl.load(X)
    tl.store(Z, 1) if x > 0 else tl.store(Z, 2)


@pytest.mark.parametrize("v, expected", [(5, 1), (-5, 2)])
def test_void_conditional_expression(v, expected):
    z = np.zeros(1, np.int32)
    _void_conditional[(1,)](np.array([v], np.int32), z)
    assert z[0] == expected


# --- what Triton's tutorials use --------------------------------------------------------------

def test_perf_report_prints_the_table_and_saves_csv(tmp_path, capsys):
    @triton.testing.perf_report(triton.testing.Benchmark(
        x_names=["size"], x_vals=[4096, 8192], x_log=True, line_arg="provider", line_vals=["kiln", "numpy"],
        line_names=["Kiln", "NumPy"], styles=[("blue", "-"), ("green", "-")], ylabel="GB/s",
        plot_name="vector-add-performance", args={"scale": 2}))
    def bench(size, provider, scale):
        value = size * scale / (1 if provider == "kiln" else 2)
        return value, value - 1, value + 1

    frame = bench.run(print_data=True, save_path=str(tmp_path), return_df=True)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "vector-add-performance:"
    assert out[1].split() == ["size", "Kiln", "(GB/s)", "NumPy", "(GB/s)"]
    assert out[2].split() == ["0", "4096", "8192", "4096"] and out[3].split() == ["1", "8192", "16384", "8192"]
    assert (tmp_path / "vector-add-performance.csv").read_text().splitlines()[0] == "size,Kiln (GB/s),NumPy (GB/s)"
    assert (tmp_path / "results.html").exists()
    rows = frame.to_dict("records") if hasattr(frame, "to_dict") else frame
    assert rows[1]["NumPy (GB/s)"] == 8192


def test_current_target_is_an_object_with_backend_arch_and_warp_size(monkeypatch):
    from kiln.runtime import cuda_driver
    monkeypatch.setattr(cuda_driver, "device_and_stream", lambda: (0, 0))
    monkeypatch.setattr(cuda_driver, "target", lambda device: "sm_90a")
    target = triton.runtime.driver.active.get_current_target()
    assert (target.backend, target.arch, target.warp_size) == ("cuda", 90, 32)


def test_import_kiln_brings_kiln_runtime():
    import subprocess
    import sys
    code = "import kiln as triton; print(type(triton.runtime.driver.active).__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip()


def test_early_config_prune_gets_the_launch_keyword_arguments():
    seen = []

    def prune(configs, nargs, **kwargs):
        seen.append((sorted(nargs), kwargs.get("N_CTX")))
        return [c for c in configs if c.kwargs["BLOCK"] <= kwargs["N_CTX"]]

    @triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (4, 8, 16)], key=["N_CTX"],
                     prune_configs_by={"early_config_prune": prune}, do_bench=lambda fn, quantiles: [1.0, 1.0, 1.0])
    @triton.jit
    def kernel(X, N_CTX: tl.constexpr, BLOCK: tl.constexpr):
        tl.store(X + tl.arange(0, BLOCK), 1.0)

    x = np.zeros(16, np.float32)
    kernel[(1,)](x, N_CTX=8)
    assert seen == [(["X"], 8)]  # as Triton: nargs holds the arguments given by position
    assert kernel.best_config.kwargs["BLOCK"] <= 8


@triton.jit
def _maybe_descriptor(desc_or_ptr, M: tl.constexpr, N: tl.constexpr):
    if isinstance(desc_or_ptr, tl.tensor_descriptor):
        return desc_or_ptr
    return tl.make_tensor_descriptor(desc_or_ptr, [M, N], [N, 1], [M, N])


@triton.jit
def _offset_store(ptr, offs: tl.constexpr, value: tl.constexpr):
    tl.store(ptr + offs, value)


@triton.jit
def _descriptor_copy(x_ptr, y_ptr, M: tl.constexpr, N: tl.constexpr):
    src = _maybe_descriptor(x_ptr, M, N)
    dst = _maybe_descriptor(_maybe_descriptor(y_ptr, M, N), M, N)
    dst.store([0, 0], src.load([0, 0]))
    _offset_store(y_ptr + M * N, tl.arange(0, 4), 7.0)  # a constexpr parameter given a tensor


def test_isinstance_tensor_descriptor_and_constexpr_parameter_given_a_tensor():
    x = np.arange(32, dtype=np.float32)
    y = np.zeros(36, np.float32)
    _descriptor_copy[(1,)](x, y, 4, 8)
    np.testing.assert_array_equal(y[:32], x)
    np.testing.assert_array_equal(y[32:], 7.0)


def test_extern_libs_launch_keyword_is_an_option_as_in_triton():
    # kiln links its own libdevice, but as in Triton the keyword makes its own specialization and
    # the compile hook sees it as (name, path) pairs
    from kiln.dropin import knobs
    compiles = []
    z = np.zeros(8, np.int32)
    libraries = {"libdevice": "/path/to/libdevice.10.bc"}
    with knobs.runtime.scope():
        knobs.runtime.jit_post_compile_hook = lambda **kw: compiles.append(kw["compile"].get("extern_libs"))
        _static_steps.cache.clear()
        _static_steps[(1,)](z, 8)
        _static_steps[(1,)](z, 8, extern_libs=libraries)
        _static_steps[(1,)](z, 8, extern_libs=dict(libraries))  # an equal dict: the same one
    assert z[2] == 2 and compiles == [None, (("libdevice", "/path/to/libdevice.10.bc"),)]


def test_dtype_class_attributes_and_exponent_bias():
    assert tl.dtype.SINT_TYPES == ["int8", "int16", "int32", "int64"]
    assert "int1" in tl.dtype.UINT_TYPES and "bf16" in tl.dtype.FP_TYPES and "fp16" in tl.dtype.STANDARD_FP_TYPES
    assert [t.exponent_bias for t in (tl.float16, tl.bfloat16, tl.float32, tl.float64)] == [15, 127, 127, 1023]
    assert [t.exponent_bias for t in (tl.float8e4nv, tl.float8e4b15, tl.float8e5, tl.float8e4b8)] == [7, 15, 15, 8]


def test_compile_error_under_the_interpreter_is_also_an_interpreter_error(monkeypatch):
    monkeypatch.setenv("KILN_INTERPRET", "1")
    with pytest.raises(triton.InterpreterError) as info:
        _expand[(1,)](np.zeros(1), 16, 5)
    assert isinstance(info.value, triton.CompilationError)
    assert "invalid axis 5" in str(info.value.__cause__)


@triton.jit
def _sum_keep_dims(X, Z, M: tl.constexpr, N: tl.constexpr):
    x = tl.load(X + tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :])
    z = tl.sum(x, axis=None, keep_dims=True)
    tl.static_assert(Z[None, None, :].shape == [1, 1])
    tl.store(Z[None, None, :], z)


def test_scalar_indexed_with_none_and_colon():
    x = np.arange(32, dtype=np.float32)
    z = np.zeros(1, np.float32)
    _sum_keep_dims[(1,)](x, z, 4, 8)
    assert z[0] == x.sum()


def test_dtype_repr_is_tritons_evaluatable_form():
    names = ["int8", "uint32", "int1", "float16", "bfloat16", "float32", "float64", "float8e4nv", "float8e4b15"]
    for name in names:
        assert repr(getattr(tl, name)) == f"triton.language.{name}"
        assert eval(repr(getattr(tl, name)), {"triton": kiln}) is getattr(tl, name)
    assert repr(tl.pointer_type(tl.float16)) == "pointer<fp16>"


def test_runtime_jit_and_errors_modules():
    from kiln.runtime.errors import InterpreterError, OutOfResources
    from kiln.runtime.jit import JITFunction, TensorWrapper, reinterpret
    assert (InterpreterError, OutOfResources, JITFunction) == (kiln.InterpreterError, kiln.OutOfResources,
                                                               kiln.JITFunction)
    assert isinstance(reinterpret(np.zeros(4, np.uint8), tl.float8e5), TensorWrapper)


@triton.jit
def _narrow_descriptor(ptr):
    desc = tl.make_tensor_descriptor(ptr, [16, 16], [16, 1], [2, 2])
    desc.load([0, 0])


def test_descriptor_block_too_narrow_says_tritons_words():
    with pytest.raises(triton.CompilationError) as info:
        _narrow_descriptor[(1,)](np.zeros(256, np.float32))
    assert "Descriptor block shape must have at least 16 bytes" in str(info.value.__cause__)


@triton.jit
def _store_through(src: tl.const, dst, USE_SRC: tl.constexpr):
    target = src if USE_SRC else dst
    tl.store(target + tl.arange(0, 4), tl.load(src + tl.arange(0, 4)))


@triton.jit
def _pick_pointer(src: tl.const, dst, flag):
    if flag > 0:
        target = src
    else:
        target = dst
    tl.store(target + tl.arange(0, 4), 1.0)


def test_const_pointer_annotation_is_read_only():
    x, y = np.arange(4, dtype=np.float32), np.zeros(4, np.float32)
    _store_through[(1,)](x, y, USE_SRC=False)
    np.testing.assert_array_equal(y, x)
    with pytest.raises(triton.CompilationError) as info:
        _store_through[(1,)](x, y, USE_SRC=True)
    assert "Cannot store to a constant pointer" in info.value.error_message  # Triton's attribute and words
    with pytest.raises(triton.CompilationError, match="Mismatched type for target") as info:
        _pick_pointer[(1,)](x, y, 0)
    assert "(const)" in str(info.value)


def test_num_warps_not_a_power_of_two_is_an_assertion_error():
    with pytest.raises(AssertionError, match="must be a power of 2"):
        _static_steps[(1,)](np.zeros(8, np.int32), 8, num_warps=3)


class _View(NamedTuple):
    ptr: object
    size: object
    scale: object


@triton.jit
def _bump(values):
    return tl.tuple([v + 1 for v in values if v is not None])


@triton.jit
def _make_view(ptr, size, scale):
    view = _View(ptr=ptr, size=size, scale=scale)
    return view


@triton.jit
def _tuple_args(outs, values, view, fn, N: tl.constexpr):
    tl.static_assert(values[1] is None and view.scale == 3)  # constant leaves stay constexprs
    bumped = _bump(values)
    tl.store(outs[0], bumped[0])
    tl.store(outs[1], bumped[1])
    v = _make_view(view.ptr, view.size, view.scale)
    offs = tl.arange(0, N)
    tl.store(v.ptr + offs, fn(tl.load(v.ptr + offs, mask=offs < v.size), v.scale), mask=offs < v.size)


@triton.jit
def _times(x, k):
    return x * k


def test_tuple_and_namedtuple_arguments():
    a, b = np.zeros(1, np.float32), np.zeros(1, np.float32)
    data = np.arange(8, dtype=np.float32)
    _tuple_args[(1,)]((a, b), (2.5, None, 7), _View(data, 5, tl.constexpr(3)), _times, N=8)
    assert (a[0], b[0]) == (3.5, 8.0)
    np.testing.assert_array_equal(data, [0, 3, 6, 9, 12, 5, 6, 7])
    assert _tuple_args.cache and len(_tuple_args.cache) == 1
    _tuple_args[(1,)]((a, b), (0.5, None, 1), _View(data, 2, tl.constexpr(3)), _times, N=8)  # same kernel
    assert (a[0], b[0]) == (1.5, 2.0) and data[1] == 9


def test_compiler_errors_module_path():
    import subprocess
    import sys
    code = "import kiln as triton; print(triton.compiler.errors.CompilationError is triton.CompilationError)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "True" and kiln.compiler.CompilationError is kiln.CompilationError


class _HostTensor:
    """Enough of a PyTorch CPU tensor for specialization: a host address, a dtype, not on CUDA."""

    def __init__(self, pinned):
        self.array, self.pinned, self.is_cuda, self.dtype = np.zeros(4, np.float32), pinned, False, "torch.float32"

    def data_ptr(self):
        return self.array.ctypes.data

    def is_pinned(self):
        return self.pinned


def test_host_tensor_launched_on_the_gpu_path_says_cpu_tensor(monkeypatch):
    monkeypatch.setenv("KILN_INTERPRET", "0")
    with pytest.raises(ValueError, match=r"Pointer argument \(at 0\) cannot be accessed from Triton \(cpu tensor\?\)"):
        _static_steps[(1,)](_HostTensor(pinned=False), 4)
    # warmup only compiles: a host tensor is fine, as in Triton (and pinned host memory is reachable anyway)
    _static_steps.warmup(_HostTensor(pinned=False), 8, grid=(1,))
    _static_steps.warmup(_HostTensor(pinned=True), 4, grid=(1,))


def test_autotune_reset_and_restore_skip_arguments_given_as_none():
    @triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (4, 8)], key=["n"], reset_to_zero=["extra"],
                     restore_value=["extra"], do_bench=lambda fn, quantiles: [fn() or 1.0] * 3)
    @triton.jit
    def kernel(out, extra, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(out + offs, tl.load(out + offs, mask=offs < n) + 1.0, mask=offs < n)

    out = np.zeros(8, np.float32)
    kernel[(1,)](out, None, 8)
    assert out[0] >= 1.0


def test_active_torch_device_is_the_cpu_when_interpreting_without_a_gpu(monkeypatch):
    import sys
    import types
    fake_torch = types.SimpleNamespace(device=lambda kind, index=None: (kind, index))
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    monkeypatch.setenv("KILN_INTERPRET", "1")
    monkeypatch.setattr(type(triton.runtime.driver.active), "is_active", lambda self: False)
    assert triton.runtime.driver.active.get_active_torch_device() == ("cpu", None)


# --- triton.compile(ASTSource(...)) and the errors Triton's test_compile_errors.py matches ---

@triton.jit
def _scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2.0, mask=offs < n)


def _compile(fn, signature=None, constexprs=None, **kwargs):
    return triton.compile(triton.compiler.ASTSource(fn=fn, signature=signature or {}, constexprs=constexprs or {}),
                          **kwargs)


def test_compile_an_ast_source_builds_the_ir_of_its_signature(monkeypatch):
    monkeypatch.setenv("KILN_INTERPRET", "1")
    kernel = _compile(_scale, {"x_ptr": "*fp32", "y_ptr": "*fp16", "n": "i32", "BLOCK": "constexpr"}, {"BLOCK": 64})
    kir = kernel.asm["kir"]
    assert "ptr<fp32>" in kir and "ptr<fp16>" in kir and "64" in kir
    aligned = triton.compile(triton.compiler.ASTSource(
        _scale, {"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}, {(3,): 64},
        attrs={(0,): [["tt.divisibility", 16]]}))
    assert aligned.asm["kir"] != kernel.asm["kir"]
    with pytest.raises(TypeError, match="Signature keys must be string"):
        triton.compiler.ASTSource(_scale, {0: "*fp32"})


def test_compile_for_a_named_target_needs_no_gpu():
    kernel = _compile(_scale, {"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}, {"BLOCK": 128},
                      target=triton.runtime.GPUTarget("cuda", 90, 32), options={"num_warps": 4})
    assert ".target sm_90a" in kernel.asm["ptx"] and kernel.asm["cubin"]


def test_compile_errors_have_tritons_locator_and_classes(monkeypatch):
    from kiln.compiler.errors import CompilationError, CompileTimeAssertionFailure
    monkeypatch.setenv("KILN_INTERPRET", "1")

    @triton.jit
    def static_fails():
        tl.static_assert(isinstance(0, tl.tensor))

    with pytest.raises(CompileTimeAssertionFailure) as info:
        _compile(static_fails)
    assert info.value.__cause__ is None and "at 2:4: in static_fails" in str(info.value).splitlines()[0]
    assert str(info.value).splitlines()[-1] == "static assertion failed"  # the reason last, as Triton's

    @triton.jit
    def shift_float():
        1.0 << 1

    with pytest.raises(CompilationError, match="at 2:4: in shift_float"):
        _compile(shift_float)


@triton.jit
def _two_shapes(N):
    if N == 0:
        return tl.arange(0, 4)
    else:
        return tl.arange(0, 8)  # the return the message names


def test_inconsistent_returns_point_at_the_def_and_the_call(monkeypatch):
    """Triton 3.6 decides a function's return type after its whole body: the error is at the `def`."""
    monkeypatch.setenv("KILN_INTERPRET", "1")

    @triton.jit
    def kernel(N):
        _two_shapes(N)

    with pytest.raises(triton.CompilationError) as info:
        _compile(kernel, {"N": "i32"})
    assert "at 2:4: in kernel" in str(info.value)
    assert "at 1:0: in _two_shapes" in str(info.value.__cause__)
    assert "def _two_shapes(N):" in str(info.value.__cause__)
    assert "Inconsistent return types" in str(info.value.__cause__)
    assert "(the return at 5:8)" in str(info.value.__cause__)


@pytest.mark.parametrize("body, words", [
    ("tl.arange(2, 7)", "arange's range must be a power of 2"),
    ("tl.full((33, ), 0, dtype=tl.int64)", "Shape element 0 must be a power of 2"),
    ("tl.dot(tl.full((64, 64), 0.0, tl.float8e5), tl.full((64, 64), 0.0, tl.float8e5), max_num_imprecise_acc=128)",
     "max_num_imprecise_acc (128) must be <= K (64)"),
])
def test_tritons_words_for_shapes_and_dot_limits(monkeypatch, body, words):
    monkeypatch.setenv("KILN_INTERPRET", "1")
    kernel = _exec_patched(_body_template, body)
    with pytest.raises(triton.CompilationError) as info:
        _compile(kernel)
    assert str(info.value.__cause__) == words


@triton.jit
def _body_template():
    GENERATE_TEST_HERE  # noqa: F821


def test_where_with_a_non_boolean_condition_warns_as_triton(monkeypatch):
    monkeypatch.setenv("KILN_INTERPRET", "1")
    kernel = _exec_patched(_body_template, "tl.where(tl.full((64, ), 0, tl.uint32), 1.0, 2.0)")
    with pytest.warns(UserWarning, match="tl.where with a non-boolean condition is deprecated"):
        _compile(kernel)


@triton.jit
def _twice(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


def test_a_compiled_kernel_launches_with_every_argument_as_tritons(monkeypatch):
    # tutorial 02: kernel = k.warmup(...); kernel[(n, 1, 1)](all arguments, constexprs included)
    monkeypatch.setenv("KILN_INTERPRET", "1")
    x, y = np.arange(20, dtype=np.float32), np.zeros(20, np.float32)
    compiled = _twice.warmup(x, y, 20, BLOCK=8, grid=(1,))
    compiled[(3, 1, 1)](x, y, 20, 8)
    assert np.array_equal(y, 2 * x)
    z = np.zeros(20, np.float32)
    built = _compile(_twice, {"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}, {"BLOCK": 8})
    built[(3,)](x, z, 20, 8)
    assert np.array_equal(z, 2 * x)


@triton.jit
def _where_on_ints(x_ptr):
    offs = tl.arange(0, 16)
    tl.store(x_ptr + offs, tl.where(offs % 2, 1.0, 2.0))  # W_WHERE


def test_tritons_deprecation_warning_points_at_the_kernel_line(monkeypatch):
    monkeypatch.setenv("KILN_INTERPRET", "1")
    line = next(i + 1 for i, text in enumerate(open(__file__).read().splitlines()) if text.endswith("# W_WHERE"))
    with pytest.warns(UserWarning, match="non-boolean condition") as record:
        _where_on_ints.warmup(np.zeros(16, np.float32), grid=(1,))
    assert (record[0].filename, record[0].lineno) == (__file__, line)


def test_device_peaks_as_triton_testing_gives_them(monkeypatch):
    """Inductor estimates run times from triton.testing's peak figures; kiln computes them from
    the device's properties the same way (an H100-like device here, no GPU needed)."""
    from kiln import device_peaks
    props = {"multiprocessor_count": 132, "mem_clock_rate": 2_619_000, "mem_bus_width": 5120}
    monkeypatch.setattr(device_peaks, "_properties", lambda device: (props, 9))
    assert kiln.testing.get_dram_gbps() == pytest.approx(2_619_000 * 5120 * 2 / 8 / 1e6)
    clock = 1_980_000  # kHz
    assert kiln.testing.get_max_tensorcore_tflops(tl.float16, clock) == pytest.approx(132 * 4 * clock * 512 * 1e-9)
    assert kiln.testing.get_max_tensorcore_tflops(tl.float8e4nv, clock) == pytest.approx(132 * 4 * clock * 1024 * 1e-9)
    assert kiln.testing.get_max_simd_tflops(tl.float32, clock) == pytest.approx(132 * 4 * clock * 32 * 1e-9)
    with pytest.raises(RuntimeError, match="not supported"):
        kiln.testing.get_max_tensorcore_tflops(tl.float64, clock)
    monkeypatch.setattr(device_peaks, "_properties", lambda device: (props, 7))
    with pytest.raises(RuntimeError, match="fp16 only"):
        kiln.testing.get_max_tensorcore_tflops(tl.bfloat16, clock)


def test_device_peaks_take_pytorch_dtypes(monkeypatch):
    torch = pytest.importorskip("torch")
    from kiln import device_peaks
    monkeypatch.setattr(device_peaks, "_properties", lambda device: ({"multiprocessor_count": 132}, 9))
    assert kiln.testing.get_max_tensorcore_tflops(torch.bfloat16, 1_980_000) == pytest.approx(132 * 4 * 1.98e6 * 512e-9)
    assert kiln.testing.get_max_tensorcore_tflops(torch.float32, 1_980_000) == pytest.approx(132 * 4 * 1.98e6 * 256e-9)
