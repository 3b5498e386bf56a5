"""The block IR passes, checked on IR text: folding, CSE, DCE, dot accumulation, axis info
and layouts."""
from kiln.ir.layout import Blocked, Slice
from kiln.codegen.passes import canonicalize, cse, dce, dot_accumulate, layouts
from kiln.codegen.analysis.axis_info import AxisAnalysis
from kiln.codegen.pipeline import PassContext, run_passes
from kiln.codegen.target import parse_target
from kiln.ir import parse_function, print_function, verify


def run(text, *passes):
    fn = parse_function(text)
    ctx = PassContext(parse_target("sm_90a"))
    for p in passes:
        p.apply(fn, ctx)
    verify(fn)
    return fn, ctx


def ops(fn):
    return [op.name for op in fn.walk()]


FOLD = """
kernel @k(%p: ptr<int32> {name = "p"}, %x: int32 {name = "x"}) {
  %a = constant {value = 3} : int32
  %b = constant {value = 4} : int32
  %c = mul %a, %b : int32
  %z = constant {value = 0} : int32
  %d = add %x, %z : int32
  %e = add %d, %c : int32
  %big = constant {value = 2147483647} : int32
  %w = add %big, %a : int32
  %f = add %e, %w : int32
  store %p, %f
  return
}
"""


def test_canonicalize_folds_constants_with_wraparound():
    fn, _ = run(FOLD, canonicalize, dce)
    text = print_function(fn, locs=False)
    assert "value = 12" in text and "value = -2147483646" in text
    assert ops(fn).count("add") == 2 and "mul" not in ops(fn)


CSE = """
kernel @k(%p: ptr<int32> {name = "p"}, %x: int32 {name = "x"}) {
  %a = add %x, %x : int32
  %b = add %x, %x : int32
  %c = mul %a, %b : int32
  %dead = mul %c, %c : int32
  %l1 = load %p : int32
  %l2 = load %p : int32
  %s = add %l1, %l2 : int32
  %t = add %s, %c : int32
  store %p, %t
  return
}
"""


def test_cse_merges_pure_ops_but_not_loads_and_dce_drops_dead_ones():
    fn, _ = run(CSE, cse, dce)
    names = ops(fn)
    assert names.count("add") == 3  # one x+x left, plus l1+l2 and s+c
    assert names.count("load") == 2 and names.count("mul") == 1


VADD = (__import__("pathlib").Path(__file__).parent / "codegen_corpus" / "vector_add.kir").read_text()


def _value(fn, index):
    return [op for op in fn.walk()][index].results[0]


def test_axis_info_of_vector_add():
    fn, _ = run(VADD)
    axis = AxisAnalysis(fn)
    loads = [op for op in fn.walk() if op.name == "load"]
    info = axis.get(loads[0].operands[0])
    assert info.contiguity == (1024,) and info.divisibility == (16,)
    mask = axis.get(loads[0].operands[1])
    assert mask.constancy == (16,)


def test_axis_info_follows_hints_and_loops():
    fn, ctx = run("""
kernel @k(%p: ptr<fp32> {name = "p"}, %n: int32 {name = "n"}) {
  %h = multiple_of %n {values = [8]} : int32
  %ar = arange {end = 64, start = 0} : <64xint32>
  %s = splat %h : <64xint32>
  %o = add %s, %ar : <64xint32>
  %q = max_contiguous %o {values = [64]} : <64xint32>
  %zero = constant {value = 0} : int32
  %step = constant {value = 64} : int32
  %r = for %zero, %n, %step, %zero : int32 {
  ^(%i: int32, %acc: int32):
    %ib = splat %i : <64xint32>
    %off = add %ib, %ar : <64xint32>
    %ps = splat %p : <64xptr<fp32>>
    %pp = addptr %ps, %off : <64xptr<fp32>>
    %v = load %pp : <64xfp32>
    yield %acc
  }
  return
}
""")
    axis = AxisAnalysis(fn)
    named = {}
    for op in fn.walk():
        for r in op.results:
            named.setdefault(op.name, []).append(r)
    assert axis.get(named["multiple_of"][0]).divisibility == (8,)
    assert axis.get(named["max_contiguous"][0]).contiguity == (64,)
    iv = [op for op in fn.walk() if op.name == "for"][0].regions[0].args[0]
    assert axis.get(iv).divisibility[0] == 64
    load = [op for op in fn.walk() if op.name == "load"][0]
    assert axis.get(load.operands[0]).contiguity == (64,)


def test_layouts_vectorize_and_slice():
    text = (VADD.replace("1024", "1024"))
    fn, _ = run(text, layouts)
    load = [op for op in fn.walk() if op.name == "load"][0]
    assert load.results[0].type.encoding == Blocked((4,), (32,), (4,), (0,))
    fn2, _ = run((VADD.__class__((__import__("pathlib").Path(__file__).parent / "codegen_corpus" / "softmax_2d.kir").read_text())),
                 layouts)
    red = [op for op in fn2.walk() if op.name == "reduce"][0]
    src = red.operands[0].type.encoding
    assert red.results[0].type.encoding == Slice(1, src)
    expand = [op for op in fn2.walk() if op.name == "expand_dims" and op.operands[0] is red.results[0]][0]
    assert expand.results[0].type.encoding == src  # x - max(x)[:, None] moves no data


def test_pipeline_keeps_ir_valid():
    fn = parse_function(VADD)
    run_passes(fn, PassContext(parse_target("sm_80")), check=True)


def _loop_result_count(name, num_stages):
    from kiln.codegen.passes import prefetch
    text = (__import__("pathlib").Path(__file__).parent / "codegen_corpus" / f"{name}.kir").read_text()
    fn = parse_function(text)
    ctx = PassContext(parse_target("sm_90a"), num_stages=num_stages)
    for p in (canonicalize, cse, dce, prefetch, canonicalize, cse, dce):
        p.apply(fn, ctx)
        verify(fn)
    return [len(op.results) for op in fn.walk() if op.name == "for"]


def test_prefetch_carries_the_next_iterations_loads():
    assert _loop_result_count("dot_f16", 3) == [3]  # acc + the next A and B tiles
    assert _loop_result_count("dot_f16", 1) == [1]  # num_stages=1: untouched
    # layer norm: no dot and no num_stages on the loops: left alone, as Triton does
    assert _loop_result_count("layer_norm", 3) == [1, 1, 0]


DOT_ADD = """
kernel @k(%a: <16x16xfp16> {name = "a"}, %b: <16x16xfp16> {name = "b"}, %acc: <16x16xfp32> {name = "acc"}, %p: <16x16xptr<fp32>> {name = "p"}) {
  %z = constant {value = 0.0} : <16x16xfp32>
  %d = dot %a, %b, %z {input_precision = "tf32"} : <16x16xfp32>
  %s = add %acc, %d : <16x16xfp32>
  %e = dot %a, %b, %z {input_precision = "ieee"} : <16x16xfp32>
  %t = add %e, %s : <16x16xfp32>
  %f = dot %a, %b, %acc {input_precision = "tf32"} : <16x16xfp32>
  %u = add %f, %t : <16x16xfp32>
  %g = dot %a, %b, %z {input_precision = "tf32"} : <16x16xfp32>
  %v = add %g, %u : <16x16xfp32>
  store %p, %v
  store %p, %g
  return
}
"""


def test_acc_plus_a_dot_of_zero_accumulates_in_place():
    fn, _ = run(DOT_ADD, dot_accumulate, dce)
    a, b, acc, _ = fn.args
    body = [op for op in fn.body.ops if op.name in ("dot", "add")]
    assert [op.name for op in body] == ["dot", "dot", "dot", "add", "dot", "add"]
    s, t, f, u, g, v = body
    # acc + dot(a, b, 0) and dot(a, b, 0) + acc both become one dot on acc, attrs kept
    assert s.operands == [a, b, acc] and s.attrs == {"input_precision": "tf32"}
    assert t.operands == [a, b, s.results[0]] and t.attrs == {"input_precision": "ieee"}
    # a dot with its own accumulator, or whose product is used twice, stays as it was
    assert f.operands == [a, b, acc] and u.operands == [f.results[0], t.results[0]]
    assert g.operands[2].defining_op.name == "constant" and v.operands == [g.results[0], u.results[0]]
