"""Layouts in block IR: the encoding of a block type (text form, parsing, what the wire
refuses), `convert_layout`, `check_layouts`, and the convert_layouts pass as IR text in ->
IR text out."""
import pathlib

import pytest

from kiln.codegen import compile
from kiln.codegen.passes import canonicalize, cse, dce, layouts
from kiln.codegen.pipeline import PassContext
from kiln.codegen.target import parse_target
from kiln.ir import parse_function, print_function, verify
from kiln.ir.layout import Blocked, Slice, Wgmma, blocked_for, parse_layout, wgmma_layout
from kiln.ir.layout_check import LayoutError, check_layouts
from kiln.ir.types import block_type, float32, int32, parse_type, pointer_type, scalar_of
from kiln.ir.verifier import VerificationError

CORPUS = pathlib.Path(__file__).parent / "codegen_corpus"
ROWS = blocked_for((64, 32), (1, 0), 8, 4)


@pytest.mark.parametrize("layout", [
    ROWS, blocked_for((256,), (0,), 4, 8), Slice(1, ROWS), Slice(0, Slice(2, blocked_for((4, 8, 16), (2, 1, 0), 4, 4))),
    wgmma_layout((128, 256), 8), Slice(1, Wgmma((4, 1), 64)), Blocked((1, 2), (8, 4), (2, 2), (1, 0)),
])
def test_a_layout_prints_as_text_that_parses_back_to_it(layout):
    assert parse_layout(str(layout)) == layout
    t = block_type(float32, (8,) * layout.rank, layout)
    assert parse_type(str(t)).encoding == layout and str(parse_type(str(t))) == str(t)


@pytest.mark.parametrize("text", [
    "blocked:spt1.8:tpw4.4:wpc4.1:order1.0",    # 16 lanes
    "blocked:spt1.8:tpw4.8:wpc3.1:order1.0",    # 3 warps
    "blocked:spt1.8:tpw4.8:wpc4.1:order1.1",    # order not a permutation
    "blocked:spt1:tpw4.8:wpc4.1:order1.0",      # ranks differ
    "blocked:spt0.8:tpw4.8:wpc4.1:order1.0",
    "slice2:blocked:spt1.8:tpw4.8:wpc4.1:order1.0",  # no dim 2 to drop
    "slice0:blocked:spt4:tpw32:wpc4:order0",    # rank 1 has nothing left
    "wgmma:warps2.2:n64", "wgmma:warps4.1:n12", "wgmma:warps4.1:n512", "wgmma:warps4.1",
    "mma:warps4", "blocked", "", "blocked:sptx:tpw4.8:wpc4.1:order1.0",
])
def test_text_that_is_no_layout_is_refused(text):
    with pytest.raises(ValueError, match="not a layout"):
        parse_layout(text)


def test_encoding_rides_on_the_type_but_not_in_its_equality():
    plain = block_type(pointer_type(float32), (64, 32))
    laid = plain.with_encoding(ROWS)
    assert str(laid) == "<64x32xptr<fp32>:blocked:spt1.8:tpw8.4:wpc4.1:order1.0>"
    assert parse_type(str(laid)).encoding == ROWS and parse_type(str(plain)).encoding is None
    assert laid == plain and hash(laid) == hash(plain)  # the ops' type rules are about shapes and elements
    assert laid.with_element_ty(int32).encoding == ROWS
    with pytest.raises(TypeError, match="does not fit"):
        block_type(float32, (64,), ROWS)


def test_the_wire_refuses_a_type_with_a_layout():
    from kiln.proto.convert import ConversionError, type_to_proto
    type_to_proto(block_type(float32, (64, 32)))
    with pytest.raises(ConversionError, match="GPU-stage"):
        type_to_proto(block_type(float32, (64, 32), ROWS))


ELEMENTWISE = """
kernel @k(%p: ptr<fp32> {divisibility = 16, name = "p"}) {
  %a = arange {end = 64, start = 0} : <64xint32:ROW_SLICE>
  %b = expand_dims %a {axis = 1} : <64x1xint32:ROWS1>
  %c = broadcast %b : <64x32xint32:ROWS>
  %d = constant {value = 1} : <64x32xint32:OTHER>
  %e = CONVERT
  %f = add %c, %e : <64x32xint32:ROWS>
  %ps = splat %p : <64x32xptr<fp32>:ROWS>
  %q = addptr %ps, %f : <64x32xptr<fp32>:ROWS>
  %v = cast %f : <64x32xfp32:ROWS>
  store %q, %v
  return
}
"""
OTHER = blocked_for((64, 32), (0, 1), 4, 4)


def _elementwise(convert=True):
    text = ELEMENTWISE.replace("CONVERT", "convert_layout %d : <64x32xint32:ROWS>" if convert else
                               "add %d, %d : <64x32xint32:OTHER>")
    for name, layout in (("ROW_SLICE", Slice(1, ROWS)), ("ROWS1", ROWS), ("ROWS", ROWS), ("OTHER", OTHER)):
        text = text.replace(name, str(layout))
    return parse_function(text)


def test_check_layouts_wants_a_convert_layout_where_an_op_reads_another_layout():
    fn = _elementwise(convert=True)
    verify(fn)
    check_layouts(fn, 4)
    assert parse_function(print_function(fn)) is not None and print_function(parse_function(print_function(fn))) == \
        print_function(fn)
    fn = _elementwise(convert=False)
    verify(fn)  # the types agree; only the layouts do not
    with pytest.raises(LayoutError, match=r"'add': operand 1 is in blocked:spt4.1.*read in blocked:spt1.8.*convert_layout"):
        check_layouts(fn, 4)


def test_check_layouts_wants_every_block_value_laid_out():
    text = print_function(_elementwise()).replace(f"<64x32xfp32:{ROWS}>", "<64x32xfp32>")
    with pytest.raises(LayoutError, match="'cast'.*has no layout"):
        check_layouts(parse_function(text), 4)


def test_expand_dims_reads_its_source_in_the_slice_of_its_result():
    text = print_function(_elementwise()).replace(f"<64xint32:{Slice(1, ROWS)}>", f"<64xint32:{blocked_for((64,), (0,), 1, 4)}>")
    with pytest.raises(LayoutError, match="'expand_dims': operand 0 .* read in slice1:"):
        check_layouts(parse_function(text), 4)


def test_convert_layout_keeps_shape_and_element():
    text = print_function(_elementwise())
    assert "= convert_layout %" in text
    text = "\n".join(line.replace("x32xint32", "x32xint64") if "convert_layout" in line else line
                     for line in text.splitlines())
    with pytest.raises(VerificationError, match="convert_layout"):
        verify(parse_function(text))


# a reduction's result stored through pointers laid out for coalescing: the value comes to
# the store's layout by a convert_layout; x - max(x)[:, None] needs none (the slice's parent)
SOFTMAX_ROWS = """
kernel @k(%x: ptr<fp32> {divisibility = 16, name = "x"}, %y: ptr<fp32> {divisibility = 16, name = "y"}) {
  %r = arange {end = 32, start = 0} : <32xint32>
  %c = arange {end = 128, start = 0} : <128xint32>
  %r2 = expand_dims %r {axis = 1} : <32x1xint32>
  %k = constant {value = 128} : <32x1xint32>
  %ro = mul %r2, %k : <32x1xint32>
  %rb = broadcast %ro : <32x128xint32>
  %c2 = expand_dims %c {axis = 0} : <1x128xint32>
  %cb = broadcast %c2 : <32x128xint32>
  %off = add %rb, %cb : <32x128xint32>
  %xs = splat %x : <32x128xptr<fp32>>
  %xp = addptr %xs, %off : <32x128xptr<fp32>>
  %v = load %xp : <32x128xfp32>
  %m = reduce %v {axis = 1} : <32xfp32> {
  ^(%a: fp32, %b: fp32):
    %mx = max %a, %b : fp32
    yield %mx
  }
  %m2 = expand_dims %m {axis = 1} : <32x1xfp32>
  %mb = broadcast %m2 : <32x128xfp32>
  %d = sub %v, %mb : <32x128xfp32>
  %ys = splat %y : <32x128xptr<fp32>>
  %yp = addptr %ys, %off : <32x128xptr<fp32>>
  store %yp, %d
  %ys1 = splat %y : <32xptr<fp32>>
  %yp1 = addptr %ys1, %r : <32xptr<fp32>>
  store %yp1, %m
  return
}
"""


def _laid_out(text, num_warps=4):
    fn = parse_function(text)
    ctx = PassContext(parse_target("sm_90a"), num_warps)
    for p in (canonicalize, cse, dce, layouts):
        p.apply(fn, ctx)
    verify(fn)
    check_layouts(fn, num_warps)
    return fn


def test_convert_layouts_writes_layouts_into_the_types_and_converts_only_where_needed():
    fn = _laid_out(SOFTMAX_ROWS)
    out = print_function(fn)
    assert print_function(parse_function(out)) == out  # the text holds the layouts
    for op in fn.walk():
        for v in op.results:
            assert not isinstance(v.type, block_type) or v.type.encoding is not None, op.name
    sub = next(op for op in fn.walk() if op.name == "sub")
    assert all(v.defining_op.name != "convert_layout" for v in sub.operands)  # the slice's parent: no movement
    reduce_ = next(op for op in fn.walk() if op.name == "reduce")
    assert reduce_.results[0].type.encoding == Slice(1, reduce_.operands[0].type.encoding)
    row_store = [op for op in fn.walk() if op.name == "store"][1]
    # the [32] row maxima stay where the reduction left them (one row per lane group of
    # the rows' layout); the store's own pointers come to that layout (index math,
    # recomputed there by lowering)
    ptrs, value = row_store.operands
    assert value is reduce_.results[0]
    assert ptrs.defining_op.name == "convert_layout" and ptrs.type.encoding == value.type.encoding
    assert ptrs.defining_op.operands[0].type.encoding != value.type.encoding


def test_one_convert_layout_per_value_layout_and_block():
    text = SOFTMAX_ROWS.replace("store %yp1, %m", "store %yp1, %m\n  %m3 = add %m, %m : <32xfp32>\n  store %yp1, %m3")
    fn = _laid_out(text)
    converts = [op for op in fn.walk() if op.name == "convert_layout" and op.results[0].type.shape == (32,)]
    stores = [op for op in fn.walk() if op.name == "store"][1:]
    assert len(converts) == 1 and all(s.operands[0] is converts[0].results[0] for s in stores)


# a vector read along both axes of a block (fla's gates, g[:, None] - g[None, :]): where its two slices
# differ, the vector is loaded again in the other (its pointers are index math) rather than converted
BOTH_AXES = """
kernel @k(%g: ptr<fp32> {divisibility = 16, name = "g"}, %y: ptr<fp32> {divisibility = 16, name = "y"}) {
  %r = arange {end = 64, start = 0} : <64xint32>
  %gs = splat %g : <64xptr<fp32>>
  %gp = addptr %gs, %r : <64xptr<fp32>>
  %v = load %gp ATTRS: <64xfp32>
  %v1 = expand_dims %v {axis = 1} : <64x1xfp32>
  %vb1 = broadcast %v1 : <64x64xfp32>
  %v0 = expand_dims %v {axis = 0} : <1x64xfp32>
  %vb0 = broadcast %v0 : <64x64xfp32>
  %d = sub %vb1, %vb0 : <64x64xfp32>
  %r1 = expand_dims %r {axis = 1} : <64x1xint32>
  %k = constant {value = 64} : <64x1xint32>
  %ro = mul %r1, %k : <64x1xint32>
  %rb = broadcast %ro : <64x64xint32>
  %c0 = expand_dims %r {axis = 0} : <1x64xint32>
  %cb = broadcast %c0 : <64x64xint32>
  %off = add %rb, %cb : <64x64xint32>
  %ys = splat %y : <64x64xptr<fp32>>
  %yp = addptr %ys, %off : <64x64xptr<fp32>>
  store %yp, %d
  return
}
"""


def _vector_ops(fn):
    return [op for op in fn.walk() if op.name in ("load", "convert_layout") and op.results[0].type.shape == (64,)]


def test_a_vector_read_in_two_layouts_is_loaded_in_each():
    fn = _laid_out(BOTH_AXES.replace("ATTRS", ""))
    ops = _vector_ops(fn)
    loads = [op for op in ops if op.name == "load"]
    assert len(loads) == 2 and loads[0].results[0].type.encoding != loads[1].results[0].type.encoding
    # the only conversion: the second load's pointers (index math, recomputed by lowering)
    assert all(str(scalar_of(op.results[0].type)).startswith("ptr") for op in ops if op.name == "convert_layout")
    assert fn.body.ops.index(loads[1]) == fn.body.ops.index(loads[0]) + 2  # right after the first


def test_a_volatile_vector_is_converted_not_loaded_again():
    fn = _laid_out(BOTH_AXES.replace("ATTRS", "{volatile = true} "))
    ops = _vector_ops(fn)
    assert [op.name for op in ops] == ["load", "convert_layout"] and ops[1].operands[0] is ops[0].results[0]


@pytest.mark.parametrize("name", ["softmax_2d", "dot_f16", "loops", "scan", "gather_histogram", "layer_norm"])
@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_compiled_kernels_carry_their_layouts_and_lowering_converts_nothing_itself(name, target):
    # check=True: check_layouts after the pass, and lowering raises if it would convert
    ck = compile(parse_function((CORPUS / f"{name}.kir").read_text()), target, check=True, link=False)
    fn = parse_function(ck.kir)
    check_layouts(fn, 4)
    assert print_function(fn).strip() == ck.kir.strip()
