"""Block IR <-> kiln.v1 protobuf: round trips over a hand-written corpus that uses every op,
errors on malformed messages, and the canonical bytes."""
import math

import pytest

from kiln.ir import parse_function, print_function, verify
from kiln.ir.ops import GPU_STAGE_OPS, OPS
from kiln.proto import (ConversionError, canonical_bytes, function_from_bytes, function_from_proto,
                        function_to_proto, ir_pb2)

ELEMENTWISE = r'''
kernel @elementwise(%x: ptr<fp32> {divisibility = 16}, %y: ptr<int32> {divisibility = 16}, %n: int32) attributes {noinline = false} {
  %pid = program_id {axis = 0} : int32 loc("/src/ew.py":3:10)
  %np = num_programs {axis = 1} : int32 loc("/src/ew.py":4:10)
  %bs = constant {value = 128} : int32
  %start = mul %pid, %bs : int32 loc("/src/ew.py":5:4)
  %r = arange {end = 128, start = 0} : <128xint32>
  %s = splat %start : <128xint32>
  %offs = add %s, %r : <128xint32>
  %ns = splat %n : <128xint32>
  %mask = cmp %offs, %ns {pred = "lt"} : <128xint1> loc("other \"file\".py":1:0)
  %xs = splat %x : <128xptr<fp32>>
  %xp = addptr %xs, %offs : <128xptr<fp32>>
  %zero = constant {value = 0.0} : <128xfp32>
  %a = load %xp, %mask, %zero {cache = ".ca", evict = "evict_last", volatile = false} : <128xfp32>
  %b = load %xp, %mask : <128xfp32>
  %c = load %xp : <128xfp32>
  %f0 = add %a, %b : <128xfp32>
  %f1 = sub %f0, %c : <128xfp32>
  %f2 = mul %f1, %a : <128xfp32>
  %f3 = div %f2, %b : <128xfp32>
  %f4 = rem %f3, %c : <128xfp32>
  %f5 = min %f4, %a : <128xfp32>
  %f6 = max %f5, %b : <128xfp32>
  %f7 = div_rn %f6, %c : <128xfp32>
  %f8 = pow %f7, %a : <128xfp32>
  %f9 = atan2 %f8, %b : <128xfp32>
  %f10 = copysign %f9, %c : <128xfp32>
  %u0 = neg %f10 : <128xfp32>
  %u1 = abs %u0 : <128xfp32>
  %u2 = exp %u1 : <128xfp32>
  %u3 = exp2 %u2 : <128xfp32>
  %u4 = log %u3 : <128xfp32>
  %u5 = log2 %u4 : <128xfp32>
  %u6 = log1p %u5 : <128xfp32>
  %u7 = sqrt %u6 : <128xfp32>
  %u8 = sqrt_rn %u7 : <128xfp32>
  %u9 = rsqrt %u8 : <128xfp32>
  %u10 = sin %u9 : <128xfp32>
  %u11 = cos %u10 : <128xfp32>
  %u12 = tan %u11 : <128xfp32>
  %u13 = tanh %u12 : <128xfp32>
  %u14 = erf %u13 : <128xfp32>
  %u15 = floor %u14 : <128xfp32>
  %u16 = ceil %u15 : <128xfp32>
  %u17 = round %u16 : <128xfp32>
  %u18 = trunc %u17 : <128xfp32>
  %nan = isnan %u18 : <128xint1>
  %inf = isinf %u18 : <128xint1>
  %t = fma %u18, %a, %b : <128xfp32>
  %sel = select %nan, %zero, %t : <128xfp32>
  %i0 = and %offs, %r : <128xint32>
  %i1 = or %i0, %r : <128xint32>
  %i2 = xor %i1, %r : <128xint32>
  %i3 = shl %i2, %r : <128xint32>
  %i4 = shr %i3, %r : <128xint32>
  %i5 = umulhi %i4, %r : <128xint32>
  %i6 = not %i5 : <128xint32>
  %i7 = div %i6, %r : <128xint32>
  %h = cast %sel {rounding = "rtne"} : <128xfp16>
  %back = cast %h : <128xfp32>
  %bits = bitcast %back : <128xint32>
  store %xp, %back, %mask loc("/src/ew.py":9:4)
  %ys = splat %y : <128xptr<int32>>
  %yp = addptr %ys, %offs : <128xptr<int32>>
  store %yp, %bits
  return
}
'''

SHAPES = r'''
kernel @shapes(%a: ptr<fp16>, %c: ptr<fp32>, %o: ptr<int32>) {
  %r = arange {end = 16, start = 0} : <16xint32>
  %r0 = expand_dims %r {axis = 1} : <16x1xint32>
  %r1 = expand_dims %r {axis = 0} : <1x16xint32>
  %b0 = broadcast %r0 : <16x16xint32>
  %b1 = broadcast %r1 : <16x16xint32>
  %k = constant {value = 16} : <16x16xint32>
  %row = mul %b0, %k : <16x16xint32>
  %off = add %row, %b1 : <16x16xint32>
  %off2 = multiple_of %off {values = [16, 1]} : <16x16xint32>
  %off3 = max_contiguous %off2 {values = [1, 16]} : <16x16xint32>
  %ap = splat %a : <16x16xptr<fp16>>
  %pa = addptr %ap, %off3 : <16x16xptr<fp16>>
  %x = load %pa : <16x16xfp16>
  %xt = permute %x {order = [1, 0]} : <16x16xfp16>
  %acc0 = constant {value = 0.0} : <16x16xfp32>
  %d = dot %x, %xt, %acc0 {input_precision = "tf32", max_num_imprecise_acc = 0} : <16x16xfp32>
  %flat = reshape %d {can_reorder = false} : <256xfp32>
  %j = join %flat, %flat : <256x2xfp32>
  %s0, %s1 = split %j : <256xfp32>, <256xfp32>
  %cc = cat %s0, %s1 : <512xfp32>
  %sum = reduce %d {axis = 1} : <16xfp32> {
  ^(%l: fp32, %rr: fp32):
    %t = add %l, %rr : fp32
    yield %t
  }
  %vmax, %imax = reduce %d, %b1 {axis = 1} : <16xfp32>, <16xint32> {
  ^(%lv: fp32, %li: int32, %rv: fp32, %ri: int32):
    %gt = cmp %lv, %rv {pred = "gt"} : int1
    %v = select %gt, %lv, %rv : fp32
    %i = select %gt, %li, %ri : int32
    yield %v, %i
  }
  %cs = scan %cc {axis = 0, reverse = true} : <512xfp32> {
  ^(%l2: fp32, %r2: fp32):
    %t2 = mul %l2, %r2 : fp32
    yield %t2
  }
  %cr = arange {end = 512, start = 0} : <512xint32>
  %cp = splat %c : <512xptr<fp32>>
  %cpo = addptr %cp, %cr : <512xptr<fp32>>
  store %cpo, %cs
  %or = arange {end = 16, start = 0} : <16xint32>
  %op = splat %o : <16xptr<int32>>
  %opo = addptr %op, %or : <16xptr<int32>>
  store %opo, %imax
  return
}
'''

CONTROL = r'''
kernel @control(%p: ptr<int32>, %n: int32, %q: ptr<fp32>) {
  %zero = constant {value = 0} : int32
  %one = constant {value = 1} : int32
  %sum = for %zero, %n, %one, %zero : int32 {
  ^(%i: int32, %acc: int32):
    %odd = and %i, %one : int32
    %c = cmp %odd, %one {pred = "eq"} : int1
    %next = if %c : int32 {
    ^():
      %a = add %acc, %i : int32 loc("ctl.py":7:12)
      yield %a
    } {
    ^():
      %inner = for %zero, %i, %one, %acc : int32 {
      ^(%k: int32, %acc2: int32):
        %w = while %acc2 : int32 {
        ^(%b: int32):
          %lt = cmp %b, %n {pred = "lt"} : int1
          condition %lt, %b
        } {
        ^(%a2: int32):
          %d2 = add %a2, %one : int32
          yield %d2
        }
        yield %w
      }
      yield %inner
    }
    yield %next
  }
  %m = constant {value = true} : int1
  %old = atomic_rmw %p, %sum, %m {kind = "add", scope = "gpu", sem = "acq_rel"} : int32
  %prev = atomic_cas %p, %zero, %old {scope = "cta", sem = "relaxed"} : int32
  %r = arange {end = 64, start = 0} : <64xint32>
  %qs = splat %q : <64xptr<fp32>>
  %qp = addptr %qs, %r : <64xptr<fp32>>
  %rows = for %zero, %n, %one, %zero : int32 {
  ^(%it: int32, %carry: int32):
    %vals = load %qp : <64xfp32>
    %mx = reduce %vals {axis = 0} : fp32 {
    ^(%x: fp32, %y: fp32):
      %z = max %x, %y : fp32
      yield %z
    }
    %mxi = cast %mx : int32
    %nc = add %carry, %mxi : int32
    yield %nc
  }
  if %m {
  ^():
    print %old, %prev {hex = false, prefix = "vals: "}
    yield
  } {
  ^():
    yield
  }
  assert %m {message = "must hold"}
  assume %m
  barrier
  store %p, %rows
  return
}
'''

TYPES_AND_ATTRS = r'''
kernel @types(%a: int1, %b: int8, %c: int16, %d: int32 {divisibility = 16, equal_to_1 = false}, %e: int64, %f: uint8, %g: uint16, %h: uint32, %i: uint64, %j: fp8e4nv, %k: fp8e5, %l: fp16, %m: bf16, %n: fp32, %o: fp64, %pp: ptr<ptr<fp32>>, %pq: ptr<bf16>) attributes {flags = [true, false], grid = [], names = ["x", "y \"quoted\" \u00e9"], scales = [0.5, -1.5e-07, inf, -inf]} {
  %big = constant {value = 18446744073709551615} : uint64
  %neg = constant {value = -9223372036854775808} : int64
  %nan = constant {value = nan} : fp32
  %pinf = constant {value = inf} : fp64
  %minf = constant {value = -inf} : fp16
  %small = constant {value = 1e-300} : fp64
  %x1 = cast %j : fp32
  %x2 = cast %k {rounding = "rtz"} : bf16
  %x3 = cast %i : int8
  %x4 = bitcast %h : fp32
  %x5 = add %big, %i : uint64
  %inner = load %pp : ptr<fp32>
  %v = load %inner : fp32
  return
}
'''

EXTRAS = r'''
kernel @extras(%p: ptr<fp32>, %q: ptr<int32>) {
  gdc_wait
  %r = arange {end = 16, start = 0} : <16xint32>
  %ps = splat %p : <16xptr<fp32>>
  %xp = addptr %ps, %r : <16xptr<fp32>>
  %x = load %xp : <16xfp32>
  %u0 = expm1 %x : <16xfp32>
  %u1 = exp10 %u0 : <16xfp32>
  %u2 = log10 %u1 : <16xfp32>
  %u3 = cbrt %u2 : <16xfp32>
  %u4 = rint %u3 : <16xfp32>
  %u5 = sinh %u4 : <16xfp32>
  %u6 = cosh %u5 : <16xfp32>
  %u7 = asin %u6 : <16xfp32>
  %u8 = acos %u7 : <16xfp32>
  %u9 = atan %u8 : <16xfp32>
  %u10 = asinh %u9 : <16xfp32>
  %u11 = acosh %u10 : <16xfp32>
  %u12 = atanh %u11 : <16xfp32>
  %u13 = erfc %u12 : <16xfp32>
  %u14 = erfinv %u13 : <16xfp32>
  %u15 = lgamma %u14 : <16xfp32>
  %u16 = tgamma %u15 : <16xfp32>
  %b0 = hypot %u16, %x : <16xfp32>
  %b1 = remainder %b0, %x : <16xfp32>
  %b2 = fdim %b1, %x : <16xfp32>
  %b3 = nextafter %b2, %x : <16xfp32>
  %l0 = add_r %b3, %x {rounding = "rd"} : <16xfp32>
  %l1 = mul_r %l0, %x {rounding = "ru"} : <16xfp32>
  %l2 = div_r %l1, %x {rounding = "rz"} : <16xfp32>
  %l3 = fma_r %l2, %x, %x {rounding = "rn"} : <16xfp32>
  %l4 = sqrt_r %l3 {rounding = "rd"} : <16xfp32>
  %l5 = rsqrt_rn %l4 : <16xfp32>
  %l6 = rcbrt %l5 : <16xfp32>
  %l7 = erfcx %l6 : <16xfp32>
  %l8 = j0 %l7 : <16xfp32>
  %l9 = j1 %l8 : <16xfp32>
  %l10 = y0 %l9 : <16xfp32>
  %l11 = y1 %l10 : <16xfp32>
  %l12 = cyl_bessel_i0 %l11 : <16xfp32>
  %l13 = cyl_bessel_i1 %l12 : <16xfp32>
  %l14 = jn %r, %l13 : <16xfp32>
  %l15 = yn %r, %l14 : <16xfp32>
  %l16 = norm3d %l15, %x, %x : <16xfp32>
  %l17 = rnorm3d %l16, %x, %x : <16xfp32>
  %l18 = norm4d %l17, %x, %x, %x : <16xfp32>
  %l19 = rnorm4d %l18, %x, %x, %x : <16xfp32>
  %l20 = cvt_r %r {rounding = "ru"} : <16xfp32>
  %l21 = add %l19, %l20 : <16xfp32>
  %wide = cast %l21 : <16xfp64>
  %l22 = rcp64h %wide : <16xfp64>
  %l23 = cvt_r %l22 {rounding = "rz"} : <16xfp32>
  %fin = isfinite %l23 : <16xint1>
  %neg = signbit %b3 : <16xint1>
  %c = popc %r : <16xint32>
  %z = clz %c : <16xint32>
  %v = brev %z : <16xint32>
  %g = gather %b3, %v {axis = 0} : <16xfp32>
  %h = histogram %v, %fin {num_bins = 16} : <16xint32>
  %a0, %a1 = inline_asm %h, %g {asm = "mov.b32 $0, $2; mov.b32 $1, $3;", constraints = "=r,=r,r,r", pack = 1, volatile = true} : <16xint32>, <16xfp32>
  store %xp, %a1, %neg
  gdc_launch_dependents
  %qs = splat %q : <16xptr<int32>>
  %qp = addptr %qs, %r : <16xptr<int32>>
  store %qp, %a0
  return
}
'''

DESCRIPTORS = r'''
kernel @descriptors(%p: ptr<fp16> {divisibility = 16}, %map: tensormap) {
  %r = arange {start = 0, end = 16} : <16xint32>
  %row = expand_dims %r {axis = 1} : <16x1xint32>
  %rows = broadcast %row : <16x16xint32>
  %sixteen = constant {value = 16} : <16x16xint32>
  %offs = mul %rows, %sixteen : <16x16xint32>
  %col = expand_dims %r {axis = 0} : <1x16xint32>
  %cols = broadcast %col : <16x16xint32>
  %idx = add %offs, %cols : <16x16xint32>
  %ps = splat %p : <16x16xptr<fp16>>
  %ptrs = addptr %ps, %idx : <16x16xptr<fp16>>
  %fallback = load %ptrs : <16x16xfp16>
  %zero = constant {value = 0} : int32
  %block = descriptor_load %map, %zero, %zero, %fallback : <16x16xfp16>
  store %ptrs, %block
  return
}
'''

CORPUS = {"elementwise": ELEMENTWISE, "shapes": SHAPES, "control": CONTROL, "types": TYPES_AND_ATTRS,
          "extras": EXTRAS, "descriptors": DESCRIPTORS}


def _roundtrip(fn):
    return function_from_bytes(function_to_proto(fn).SerializeToString(), verify=True)


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_corpus_is_valid_ir(name):
    verify(parse_function(CORPUS[name]))


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_roundtrip_prints_the_same(name):
    fn = parse_function(CORPUS[name])
    assert print_function(_roundtrip(fn)) == print_function(fn)


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_canonical_bytes_survive_a_roundtrip(name):
    fn = parse_function(CORPUS[name])
    assert canonical_bytes(_roundtrip(fn)) == canonical_bytes(fn)
    assert canonical_bytes(parse_function(print_function(fn))) == canonical_bytes(fn)


def test_corpus_uses_every_op():
    """Every op a kernel can send; codegen's GPU-stage ops are refused on the wire."""
    used = {op.name for text in CORPUS.values() for op in parse_function(text).walk()}
    assert used == set(OPS) - GPU_STAGE_OPS, f"ops missing from the corpus: {sorted(set(OPS) - GPU_STAGE_OPS - used)}"


def test_gpu_stage_ops_are_refused_on_the_wire():
    fn = parse_function("""kernel @k() {
  async_commit
  return
}
""")
    with pytest.raises(ConversionError, match="codegen's own op"):
        function_from_proto(function_to_proto(fn))


def test_attribute_values_survive():
    fn = _roundtrip(parse_function(TYPES_AND_ATTRS))
    consts = [op.attrs["value"] for op in fn.walk() if op.name == "constant"]
    assert consts[0] == 2**64 - 1 and consts[1] == -2**63
    assert math.isnan(consts[2]) and consts[3] == math.inf and consts[4] == -math.inf
    assert fn.attrs["flags"] == [True, False] and fn.attrs["grid"] == []
    assert fn.attrs["names"][1] == 'y "quoted" \u00e9'
    assert fn.arg_attrs[3] == {"divisibility": 16, "equal_to_1": False}


def test_pointer_details_and_type_attrs_survive():
    from kiln.ir.types import float32, pointer_type
    fn = parse_function(TYPES_AND_ATTRS)
    fn.attrs["elem"] = pointer_type(float32)
    fn.args[16].type = pointer_type(float32, 3, True)
    back = _roundtrip_unverified(fn)
    assert back.attrs["elem"] == pointer_type(float32)
    assert back.args[16].type.address_space == 3 and back.args[16].type.const


def _roundtrip_unverified(fn):
    return function_from_proto(function_to_proto(fn))


def test_canonical_bytes_ignore_attribute_insertion_order():
    a, b = parse_function(ELEMENTWISE), parse_function(ELEMENTWISE)
    op = next(op for op in b.walk() if op.name == "load")
    op.attrs = dict(reversed(list(op.attrs.items())))
    assert canonical_bytes(a) == canonical_bytes(b)


def test_canonical_bytes_see_locations_and_values():
    base = canonical_bytes(parse_function(ELEMENTWISE))
    assert canonical_bytes(parse_function(ELEMENTWISE.replace('"/src/ew.py":5:4', '"/src/ew.py":5:5'))) != base
    assert canonical_bytes(parse_function(ELEMENTWISE.replace("value = 128", "value = 64"))) != base


# --- malformed messages -------------------------------------------------------------------

def _pb(text=CONTROL):
    return function_to_proto(parse_function(text))


def _fails(pb, *words):
    with pytest.raises(ConversionError) as e:
        function_from_proto(pb)
    for word in words:
        assert word in str(e.value)


def test_unknown_ir_version():
    pb = _pb()
    pb.ir_version = 7
    _fails(pb, "ir_version 7")
    pb.ClearField("ir_version")
    _fails(pb, "ir_version 0")


def test_unknown_op():
    pb = _pb()
    pb.body[0].name = "frobnicate"
    _fails(pb, "unknown op", "frobnicate")


def test_value_number_out_of_range():
    pb = _pb()
    pb.body[2].operands[0] = 999
    _fails(pb, "%999")


def test_value_used_outside_its_region():
    pb = _pb()
    # `%sum = for ...`: its body's first value is the induction variable, number 5
    # (3 args, %zero, %one, then %sum = 5, then %i = 6). Use %i after the loop.
    last_store = pb.body[-2]
    assert last_store.name == "store"
    last_store.operands[1] = 6
    _fails(pb, "%6")


def test_result_used_inside_its_own_region():
    pb = _pb()
    assert pb.body[2].name == "for"
    pb.body[2].regions[0].ops[0].operands[0] = 5  # %sum inside the loop that defines it
    _fails(pb, "%5")


@pytest.mark.parametrize("bad, word", [
    (ir_pb2.Type(scalar="fp128"), "fp128"),
    (ir_pb2.Type(), "no kind"),
    (ir_pb2.Type(block=ir_pb2.BlockType(element=ir_pb2.Type(scalar="fp32"))), "shape"),
    (ir_pb2.Type(block=ir_pb2.BlockType(element=ir_pb2.Type(scalar="fp32"), shape=[4, 0])), "shape"),
    (ir_pb2.Type(block=ir_pb2.BlockType(shape=[4], element=ir_pb2.Type(
        block=ir_pb2.BlockType(element=ir_pb2.Type(scalar="fp32"), shape=[4])))), "blocks"),
    (ir_pb2.Type(pointer=ir_pb2.PointerType(element=ir_pb2.Type(
        block=ir_pb2.BlockType(element=ir_pb2.Type(scalar="fp32"), shape=[4])))), "pointer"),
])
def test_bad_types(bad, word):
    pb = _pb()
    pb.body[0].result_types[0].CopyFrom(bad)
    _fails(pb, word)
    pb = _pb()
    pb.args[1].type.CopyFrom(bad)
    _fails(pb, word)


def test_attribute_without_value_or_repeated():
    pb = _pb()
    pb.body[0].attrs[0].ClearField("value")
    _fails(pb, "no value")
    pb = _pb()
    pb.body[0].attrs.add(name="value").value.int_value = 3
    _fails(pb, "repeated")


@pytest.mark.parametrize("name", ["", "we?ird", "a.b", "1st", "x y"])
def test_an_attribute_name_is_a_word(name):
    """The IR text prints an attribute's name as it is, and its parser reads back only words: any other
    name made the compile worker's parse fail (INTERNAL)."""
    pb = _pb()
    pb.body[0].attrs[0].name = name
    _fails(pb, "attribute name")


def test_location_file_out_of_range():
    pb = _pb()
    del pb.files[:]
    _fails(pb, "file #0")


def test_bad_kernel_name():
    pb = _pb()
    pb.name = "not a name"
    _fails(pb, "kernel name")


def test_garbage_bytes():
    with pytest.raises(ConversionError):
        function_from_bytes(b"\xff\xff\xff\xff not protobuf")


def test_verify_reports_type_errors():
    pb = _pb()
    pb.body[0].result_types[0].scalar = "fp32"  # %zero = constant : fp32, used as an int bound
    function_from_proto(pb)  # structurally fine
    with pytest.raises(ConversionError, match="invalid"):
        function_from_proto(pb, verify=True)


def test_unencodable_attributes():
    fn = parse_function(CONTROL)
    fn.attrs["mixed"] = [1, "a"]
    with pytest.raises(ConversionError, match="mixed"):
        function_to_proto(fn)
    fn.attrs["mixed"] = object()
    with pytest.raises(ConversionError):
        function_to_proto(fn)
