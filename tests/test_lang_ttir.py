"""`compiled.asm["ttir"]`: the kernel's block IR in Triton's TTIR spelling (kiln.ttir), for tools
and tests written against Triton's. Checked as text with kiln.filecheck."""
import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.filecheck import check
from kiln.ttir import render_ttir, ttir_type


def _ttir(fn, *args, **kwargs) -> str:
    return kiln.jit(fn).warmup(*args, grid=(1,), **kwargs).asm["ttir"]


def _annotated(fn, **types):
    fn.__annotations__ = dict(types)
    return fn


def _store(ptr, val):
    tl.store(ptr, val)


def _store_at(X, v):
    tl.store(X + v, v)


@pytest.mark.parametrize("annotation, checks", [
    (tl.float16, ["%val: f16", "arith.extf %val : f16 to f32"]),
    (tl.bfloat16, ["%val: bf16", "arith.extf %val : bf16 to f32"]),
    (tl.float32, ["%val: f32"]),
    (tl.float64, ["%val: f64", "arith.truncf %val : f64 to f32"]),
])
def test_annotated_float_argument_and_its_conversion(annotation, checks):
    text = _ttir(_annotated(_store, val=annotation), np.zeros(1, np.float32), 1.5)
    for want in checks:
        assert want in text, text
    assert "tt.store %ptr, %0 : !tt.ptr<f32>" in text or annotation == tl.float32


@pytest.mark.parametrize("annotation, width, signed", [
    ("tl.uint8", 8, False), ("tl.uint32", 32, False), ("tl.int16", 16, True), ("tl.int64", 64, True)])
def test_integer_offsets_say_their_signedness(annotation, width, signed):
    text = _ttir(_annotated(_store_at, v=annotation), np.zeros(8, np.float32), 3)
    assert f"%v: i{width}" in text
    assert f"arith.{'si' if signed else 'ui'}tofp %v : i{width} to f32" in text
    # kiln's addptr zero-extends an unsigned offset (TTIR's sign-extends): spelled out
    assert ("arith.extui %v" in text) == (not signed)


def _constant_kernel(out_ptr, VALUE: tl.constexpr):
    val = VALUE
    tl.store(out_ptr.to(tl.pointer_type(val.dtype)), val)


@pytest.mark.parametrize("value, literal", [
    (1e10, "1.000000e+10 : f32"), (0.0, "0.000000e+00 : f32"), (float("inf"), "0x7F800000 : f32"),
    (float("-inf"), "0xFF800000 : f32"), (1e50, "1.000000e+50 : f64"), (5, "%c5_i32 = arith.constant 5 : i32"),
    (2**40, "%c1099511627776_i64 = arith.constant 1099511627776 : i64"), (32.1, "3.210000e+01 : f32"),
])
def test_constants_as_mlir_prints_them(value, literal):
    text = _ttir(_constant_kernel, np.zeros(2, np.float64), value)
    assert literal in text, text


def test_nan_is_printed_as_its_bits():
    text = _ttir(_constant_kernel, np.zeros(2, np.float64), float("nan"))
    check(text, "CHECK: %cst = arith.constant 0x{{[0-9A-F]+}} : f32")


def _loops(ub, out_ptr, N, BLOCK: tl.constexpr):
    k = 1
    for i in tl.range(0, ub, flatten=True, loop_unroll_factor=2):
        tl.atomic_add(out_ptr + i, k)
        k += 1
    x = tl.arange(0, BLOCK)
    i = 0
    while i < N:
        i += 1
        x *= i
    if N > 2:
        x = tl.where(x > 3, x, 5)
    tl.store(out_ptr + tl.arange(0, BLOCK), x + tl.sum(x, 0))


def test_control_flow_and_regions():
    text = _ttir(_loops, 10, np.zeros(16, np.int32), 5, 16)
    check(text, """
    CHECK-LABEL: tt.func public @_loops(%ub: i32, %out_ptr: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %N: i32)
    CHECK: %[[END:[0-9]+]] = arith.addi %c0_i32, %{{[0-9]+}} : i32
    CHECK: %[[MAIN:[0-9]+]] = scf.for %[[IV:arg[0-9]+]] = %c0_i32 to %[[END]] step %c2_i32{{[_0-9]*}}
    CHECK-SAME: iter_args(%[[ACC:arg[0-9]+]] = %c1_i32) -> (i32) : i32 {
    CHECK: tt.atomic_rmw add, acq_rel, gpu, {{.*}} : (!tt.ptr<i32>, i32, i1) -> i32
    CHECK: tt.atomic_rmw add, acq_rel, gpu, {{.*}} : (!tt.ptr<i32>, i32, i1) -> i32
    CHECK: scf.yield {{.*}} : i32
    CHECK-NEXT: } {tt.flatten}
    CHECK: scf.for %{{arg[0-9]+}} = %[[END]] to %ub step %c1_i32{{[_0-9]*}} iter_args(%{{arg[0-9]+}} = %[[MAIN]])
    CHECK: tt.atomic_rmw add
    CHECK: scf.yield {{.*}} : i32
    CHECK-NEXT: } {tt.flatten, tt.num_stages = 1 : i32}
    CHECK: tt.make_range {end = 16 : i32, start = 0 : i32} : tensor<16xi32>
    CHECK: %[[W:[0-9]+]]:2 = scf.while (%[[A:arg[0-9]+]] = %c0_i32{{[_0-9]*}}, %[[B:arg[0-9]+]] = %{{[0-9]+}})
    CHECK-SAME: : (i32, tensor<16xi32>) -> (i32, tensor<16xi32>) {
    CHECK-NEXT: %[[C:[0-9]+]] = arith.cmpi slt, %[[A]], %N : i32
    CHECK-NEXT: scf.condition(%[[C]]) %[[A]], %[[B]] : i32, tensor<16xi32>
    CHECK-NEXT: } do {
    CHECK-NEXT: ^bb0(%{{.*}}: i32, %{{.*}}: tensor<16xi32>):
    CHECK: tt.splat {{.*}} : i32 -> tensor<16xi32>
    CHECK: scf.if {{.*}} -> (tensor<16xi32>) {
    CHECK: %cst{{.*}} = arith.constant dense<5> : tensor<16xi32>
    CHECK: arith.select {{.*}}, %[[W]]#1, {{.*}} : tensor<16xi1>, tensor<16xi32>
    CHECK: } else {
    CHECK-NEXT: scf.yield %[[W]]#1 : tensor<16xi32>
    CHECK: tt.splat %out_ptr : !tt.ptr<i32> -> tensor<16x!tt.ptr<i32>>
    CHECK: tt.addptr {{.*}} : tensor<16x!tt.ptr<i32>>, tensor<16xi32>
    CHECK: "tt.reduce"({{.*}}) <{axis = 0 : i32}> ({
    CHECK-NEXT: ^bb0(%[[X:arg[0-9]+]]: i32, %[[Y:arg[0-9]+]]: i32):
    CHECK-NEXT: %[[S:[0-9]+]] = arith.addi %[[X]], %[[Y]] : i32
    CHECK-NEXT: tt.reduce.return %[[S]] : i32
    CHECK-NEXT: }) : (tensor<16xi32>) -> i32
    CHECK: tt.store {{.*}} : tensor<16x!tt.ptr<i32>>
    CHECK: tt.return
    """)


def _unsigned_math(a_ptr, b_ptr):
    a = tl.load(a_ptr)
    b = tl.load(b_ptr)
    tl.store(a_ptr, a // b)
    tl.store(b_ptr, tl.where(a < b, a >> 1, tl.erf(a.to(tl.float32)).to(tl.uint32)))


def test_signedness_picks_the_op_and_unknown_ops_print_generic():
    text = _ttir(_unsigned_math, np.zeros(1, np.uint32), np.ones(1, np.uint32))
    assert "arith.divui" in text and "arith.cmpi ult" in text and "arith.shrui" in text, text
    assert "math.erf" in text and "arith.fptoui" in text and "arith.uitofp" in text
    assert "loc(unknown)" not in text


def test_an_op_without_a_ttir_spelling_prints_in_generic_form():
    def kernel(x_ptr):
        x = tl.load(x_ptr)
        tl.store(x_ptr, tl.extra.cuda.libdevice.erfinv(x))
    text = _ttir(kernel, np.zeros(1, np.float32))
    assert '"kiln.erfinv"(%0) : (f32) -> f32' in text, text


def test_asm_renders_ttir_on_first_read_and_keeps_kir():
    compiled = kiln.jit(_store).warmup(np.zeros(1, np.float32), 2.0, grid=(1,))
    assert "ttir" not in compiled.asm  # (a GPU build also holds ptx and cubin here)
    before = compiled.hash
    assert compiled.asm.get("ttir").startswith("module {")
    assert "ttir" in compiled.asm and compiled.asm["kir"].startswith("kernel @_store")
    assert compiled.hash == before
    assert render_ttir(compiled.ir, locs=False).count("loc(") == 0


def test_types():
    from kiln.ir.types import block_type, pointer_type
    assert ttir_type(tl.float8e4nv) == "f8E4M3FN" and ttir_type(tl.uint16) == "i16"
    assert ttir_type(block_type(pointer_type(tl.float16), [4, 8])) == "tensor<4x8x!tt.ptr<f16>>"
    assert ttir_type(pointer_type(tl.int8, 3)) == "!tt.ptr<i8, 3>"


def test_integer_not_and_neg_take_the_constant_ttir_spells():
    def kernel(x_ptr, y_ptr):
        x = tl.load(x_ptr + tl.arange(0, 4))
        tl.store(x_ptr + tl.arange(0, 4), ~x)
        y = tl.load(y_ptr)
        tl.store(y_ptr, -y)
    text = _ttir(kernel, np.zeros(4, np.int32), np.zeros(1, np.int8))
    check(text, """
    CHECK: %[[X:[0-9]+]] = tt.load
    CHECK: %[[ONES:cst.*]] = arith.constant dense<-1> : tensor<4xi32>
    CHECK-NEXT: arith.xori %[[X]], %[[ONES]] : tensor<4xi32>
    CHECK: %[[Y:[0-9]+]] = tt.load {{.*}} : !tt.ptr<i8>
    CHECK-NEXT: %c0_i8 = arith.constant 0 : i8
    CHECK-NEXT: arith.subi %c0_i8, %[[Y]] : i8
    """)


# --- parse_to_ttir: @jit calls kept as tt.call, under Triton's symbol names ---------------------

from kiln.ttir import parse_to_ttir  # noqa: E402


@kiln.jit
def _anchor(v):
    pass


@kiln.jit
def _twice(x):
    return x + x, x


@tl.core._aggregate
class _Box:
    value: tl.tensor
    scale: tl.constexpr

    def __init__(self, value, scale):
        self.value = value
        self.scale = tl.constexpr(scale)

    @kiln.jit
    def scaled(self):
        return self.value * self.scale


@kiln.jit
def _halves(x):
    if x.shape[0] == 1:
        return x
    a, b = x.reshape((x.shape[0] // 2, 2)).split()
    return _halves(a) + _halves(b)


def test_calls_are_kept_with_results_and_one_private_function_per_specialization():
    @kiln.jit
    def kernel(n):
        r = tl.arange(0, 4)
        a, b = _twice(r)
        _anchor(a)
        _anchor(b)
        _anchor(n)
        _anchor(3)
        _anchor(tl.float16)
    text = parse_to_ttir(kernel, (7,))
    mod = __name__
    check(text, f"""
    CHECK-LABEL: tt.func public @kernel(%n: i32)
    CHECK: %[[R:[0-9]+]] = tt.make_range
    CHECK-NEXT: %[[V:[0-9]+]]:2 = tt.call @{mod}._twice__i32S4S__(%[[R]]) : (tensor<4xi32>) -> (tensor<4xi32>, tensor<4xi32>)
    CHECK-NEXT: tt.call @{mod}._anchor__i32S4S__(%[[V]]#0) : (tensor<4xi32>) -> ()
    CHECK-NEXT: tt.call @{mod}._anchor__i32S4S__(%[[V]]#1)
    CHECK-NEXT: tt.call @{mod}._anchor__i32__(%n) : (i32) -> ()
    CHECK-NEXT: tt.call @"{mod}._anchor____(0,)cconstexpr_3_"() : () -> ()
    CHECK-NEXT: tt.call @"{mod}._anchor____(0,)cconstexpr_fp16_"() : () -> ()
    CHECK-NEXT: tt.return
    CHECK: tt.func private @{mod}._twice__i32S4S__(%arg0: tensor<4xi32>) -> (tensor<4xi32>, tensor<4xi32>)
    CHECK-NEXT: %[[S:[0-9]+]] = arith.addi %arg0, %arg0 : tensor<4xi32>
    CHECK-NEXT: tt.return %[[S]], %arg0 : tensor<4xi32>, tensor<4xi32>
    """)
    assert text.count(f"tt.func private @{mod}._anchor__i32S4S__(") == 1


def test_aggregate_arguments_pass_their_tensors_and_name_their_constexprs():
    @kiln.jit
    def kernel():
        box = _Box(tl.arange(0, 8), 2.5)
        _anchor(box.scaled())
    text = parse_to_ttir(kernel)
    sym = f"{__name__}._Box.scaled__{__name__}._Box<i32S8S, constexpr_type[2.5]>__"
    assert f'tt.call @"{sym}"(%0) : (tensor<8xi32>) -> tensor<8xf32>' in text, text
    assert f'tt.func private @"{sym}"(%arg0: tensor<8xi32>) -> tensor<8xf32>' in text


def test_recursion_specializes_by_shape():
    @kiln.jit
    def kernel():
        _halves(tl.arange(0, 8))
    text = parse_to_ttir(kernel)
    for n in (8, 4, 2):
        body = text.split(f"tt.func private @{__name__}._halves__i32S{n}S__(")[1].split("tt.func")[0]
        assert body.count(f"tt.call @{__name__}._halves__i32S{n // 2}S__(") == 2, text


def test_kept_calls_leave_the_compiled_kernel_inlined():
    @kiln.jit
    def kernel(x_ptr):
        a, b = _twice(tl.load(x_ptr))
        tl.store(x_ptr, a + b)
    compiled = kernel.warmup(np.zeros(1, np.float32), grid=(1,))
    assert "tt.call" not in compiled.asm["ttir"] and "call" not in compiled.asm["kir"]
    assert "tt.call" in parse_to_ttir(kernel, (np.zeros(1, np.float32),))


@pytest.mark.parametrize("prefix, stored", [("", ": "), ("x", " x: "), ("x:", " x: "), ("val = ", " val =: ")])
def test_print_prefix_as_triton_stores_it(prefix, stored):
    def kernel(x_ptr, PREFIX: tl.constexpr):
        x = tl.load(x_ptr + tl.arange(0, 4))
        tl.device_print(PREFIX, x)
    text = _ttir(kernel, np.zeros(4, np.int32), prefix)
    assert f'tt.print "{stored}" {{hex = false, isSigned = array<i32: 1>}} : %' in text, text


def test_integer_casts_extend_by_the_source_signedness():
    def kernel(u_ptr, s_ptr, out_ptr):
        u = tl.load(u_ptr)
        s = tl.load(s_ptr)
        tl.store(out_ptr, u.to(tl.int32) + s.to(tl.int32) + (u > 0).to(tl.int32))
        tl.store(u_ptr, s.to(tl.int64).to(tl.uint8))
    text = _ttir(kernel, np.zeros(1, np.uint8), np.zeros(1, np.int8), np.zeros(1, np.int32))
    check(text, """
    CHECK: arith.extui %0 : i8 to i32
    CHECK-NEXT: arith.extsi %1 : i8 to i32
    CHECK: %[[C:[0-9]+]] = arith.cmpi sgt
    CHECK-NEXT: arith.extui %[[C]] : i1 to i32
    CHECK: %[[W:[0-9]+]] = arith.extsi %1 : i8 to i64
    CHECK-NEXT: arith.trunci %[[W]] : i64 to i8
    """)
