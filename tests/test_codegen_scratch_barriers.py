"""The scratch_barriers pass: scratch bytes for reductions and scans across warps, layout
conversions, exchanges and histograms, and a barrier before one only where an earlier access
to shared memory may still be in flight (IR text in, IR text out), and what lowering makes of
the plans."""
import numpy as np
import pytest

from kiln.codegen import compile as compile_ir
from kiln.codegen.lower.context import ScratchUse
from kiln.codegen.passes import scratch_barriers, smem_alloc
from kiln.codegen.analysis import Analysis
from kiln.codegen.analysis.scratch_use import touches_no_shared
from kiln.codegen.pipeline import PassContext
from kiln.codegen.target import parse_target
from kiln.ir import parse_function, print_function, verify
from scratch_chains import exchanges, scans  # the kernels racecheck runs

V = "<512xfp32:blocked:spt4:tpw32:wpc4:order0>"  # 4 warps along the only axis: reductions cross warps
T = "<64x64xfp32:blocked:spt1.4:tpw2.16:wpc4.1:order1.0>"  # rows across warps
R = "<64xfp32:slice1:blocked:spt1.4:tpw2.16:wpc4.1:order1.0>"  # a row statistic of T
C = "<64xfp32:slice0:blocked:spt1.4:tpw2.16:wpc4.1:order1.0>"  # a column statistic of T


def reduce_(out, src, kind="add", axis=0, ty="fp32"):
    return f"""  {out} = reduce {src} {{axis = {axis}}} : {ty} {{
  ^(%a{out[1:]}: fp32, %b{out[1:]}: fp32):
    %c{out[1:]} = {kind} %a{out[1:]}, %b{out[1:]} : fp32
    yield %c{out[1:]}
  }}
"""


def kernel(body: str, args: str = "%x: ptr<fp32>, %o: ptr<fp32>") -> str:
    return f"""kernel @k({args}) {{
  %r = arange {{end = 512, start = 0}} : {V.replace("fp32", "int32")}
  %xs = splat %x : <512xptr<fp32>:blocked:spt4:tpw32:wpc4:order0>
  %p = addptr %xs, %r : <512xptr<fp32>:blocked:spt4:tpw32:wpc4:order0>
  %v = load %p : {V}
{body}  return
}}
"""


def planned(text, num_warps=4):
    fn = parse_function(text)
    ctx = PassContext(parse_target("sm_90a"), num_warps=num_warps)
    smem_alloc.apply(fn, ctx)
    scratch_barriers.apply(fn, ctx)
    verify(fn)
    return fn, ctx


def plans(fn):
    return [(op.name, op.attrs.get("scratch")) for op in fn.walk() if op.name in ("reduce", "barrier")]


def test_reductions_one_after_the_other_take_disjoint_bytes_and_no_barrier():
    # softmax's max then sum: the sum's writes may not wait for the max's reads, so it takes other bytes
    body = reduce_("%m", "%v", "max") + f"  %ms = splat %m : {V}\n  %d = sub %v, %ms : {V}\n  %e = exp %d : {V}\n" \
        + reduce_("%s", "%e") + "  store %o, %s\n"
    fn, _ = planned(kernel(body))
    assert plans(fn) == [("reduce", [0, 32]), ("reduce", [32, 32])]  # 4 warps x 8 bytes each; nothing before the first
    again = parse_function(print_function(fn))  # the plans are IR text
    assert [op.attrs.get("scratch") for op in again.walk() if op.name == "reduce"] == [[0, 32], [32, 32]]


def test_a_third_reduction_goes_back_to_bytes_the_first_left():
    body = reduce_("%m", "%v", "max") + reduce_("%s", "%v") + reduce_("%t", "%v", "min") + "  store %o, %t\n"
    fn, _ = planned(kernel(body))
    # the third writes while the second's reads may be in flight, but the first's are done (the
    # second's own barrier came after them)
    assert plans(fn) == [("reduce", [0, 32]), ("reduce", [32, 32]), ("reduce", [0, 32])]


def test_a_reduction_inside_a_warp_touches_no_shared_memory():
    body = (f"  %t = load %tp : {T}\n" + reduce_("%row", "%t", axis=1, ty=R) + reduce_("%col", "%t", axis=0, ty=C)
            + reduce_("%all", "%v") + "  store %o, %all\n")
    text = kernel(body, "%x: ptr<fp32>, %o: ptr<fp32>, %tp: <64x64xptr<fp32>:blocked:spt1.4:tpw2.16:wpc4.1:order1.0>")
    fn, ctx = planned(text)
    # rows stay in their warp (shuffles only); columns cross the 4 warps: 64 outputs x 4 warps x 8 bytes
    assert plans(fn) == [("reduce", None), ("reduce", [0, 2048]), ("reduce", [2048, 32])]  # 1 KB more at most
    row = next(op for op in fn.walk() if op.name == "reduce")
    assert touches_no_shared(row, Analysis(fn, ctx))


def test_a_reduction_after_shared_buffers_waits_at_a_barrier():
    body = ("  %buf = local_alloc : smem<1x64x64xfp16:swizzle128:order1.0>\n  %z = constant {value = 0} : int32\n"
            "  %tile = local_index %buf, %z : smem<64x64xfp16:swizzle128:order1.0>\n"
            + reduce_("%s", "%v") + "  store %o, %s\n")
    fn, _ = planned(kernel(body))
    # the buffer's bytes are dead at the reduction, which writes from byte 0: a slow warp may still use them
    # (the first barrier is smem_alloc's, before the buffer)
    assert plans(fn) == [("barrier", None), ("barrier", None), ("reduce", [0, 32])]
    ops = [op.name for op in fn.body.ops]
    assert ops[ops.index("reduce") - 1] == "barrier" and ops.index("local_index") < ops.index("reduce") - 1


def loop(body_ops: str, carried: str = "%v") -> str:
    return f"""  %lb = constant {{value = 0}} : int32
  %ub = constant {{value = 4}} : int32
  %st = constant {{value = 1}} : int32
  %acc = for %lb, %ub, %st, {carried} : {V} {{
  ^(%i: int32, %y: {V}):
{body_ops}    yield %y2
  }}
"""


def test_a_lone_reduction_in_a_loop_waits_for_its_last_iteration():
    # iteration i+1 writes the bytes iteration i reads: a barrier at the top of the body's reduction
    fn, _ = planned(kernel(loop(reduce_("%s", "%y") + f"    %ss = splat %s : {V}\n    %y2 = sub %y, %ss : {V}\n")))
    assert plans(fn) == [("barrier", None), ("reduce", [0, 32])]


def test_two_reductions_in_a_loop_need_one_barrier_per_iteration():
    body_ops = (reduce_("%s", "%y") + f"    %ss = splat %s : {V}\n    %y1 = sub %y, %ss : {V}\n"
                + reduce_("%m", "%y1", "max") + f"    %ms = splat %m : {V}\n    %y2 = sub %y1, %ms : {V}\n")
    fn, _ = planned(kernel(loop(body_ops)))
    assert plans(fn) == [("barrier", None), ("reduce", [0, 32]), ("reduce", [32, 32])]


def test_a_loop_that_touches_no_shared_memory_is_walked_past():
    # layer norm: a sum, a loop of loads and arithmetic, another sum: no barrier between them
    body = reduce_("%s", "%v") + loop(f"    %y2 = add %y, %y : {V}\n") + reduce_("%t", "%acc") + "  store %o, %t\n"
    fn, _ = planned(kernel(body))
    assert plans(fn) == [("reduce", [0, 32]), ("reduce", [32, 32])]


def test_a_branch_starts_from_what_precedes_its_if():
    body = (reduce_("%s", "%v") + "  %c = cmp %s, %s {pred = \"eq\"} : int1\n  %f = if %c : fp32 {\n  ^():\n"
            + reduce_("%m", "%v", "max") + "    yield %m\n  } {\n  ^():\n    yield %s\n  }\n  store %o, %f\n")
    fn, _ = planned(kernel(body))
    assert plans(fn) == [("reduce", [0, 32]), ("reduce", [32, 32])]


def test_neighbours_that_would_grow_the_area_take_a_barrier_instead():
    # two conversions of a 64x64 fp32 tile (16 KB each): side by side they would need 32 KB
    body = (f"  %t = load %tp : {T}\n"
            "  %u = convert_layout %t : <64x64xfp32:blocked:spt4.1:tpw16.2:wpc1.4:order0.1>\n"
            "  %w = convert_layout %u : <64x64xfp32:blocked:spt1.4:tpw2.16:wpc4.1:order1.0>\n"
            "  %s = convert_layout %w : <64x64xfp32:blocked:spt4.1:tpw16.2:wpc1.4:order0.1>\n"
            "  store %tp2, %s\n")
    args = ("%x: ptr<fp32>, %o: ptr<fp32>, %tp: <64x64xptr<fp32>:blocked:spt1.4:tpw2.16:wpc4.1:order1.0>, "
            "%tp2: <64x64xptr<fp32>:blocked:spt4.1:tpw16.2:wpc1.4:order0.1>")
    fn, _ = planned(kernel(body, args))
    got = [(op.name, op.attrs.get("scratch")) for op in fn.walk() if op.name in ("convert_layout", "barrier")]
    size = got[0][1][1]
    assert size >= 64 * 64 * 4 and got == [("convert_layout", [0, size]), ("barrier", None), ("convert_layout", [0, size]),
                                           ("barrier", None), ("convert_layout", [0, size])]


def test_plans_in_the_incoming_text_are_dropped():
    # a request cannot place a reduction's bytes: the pass replans every op
    body = reduce_("%m", "%v", "max").replace("{axis = 0}", "{axis = 0, scratch = [4096, 8]}") + "  store %o, %m\n"
    fn, _ = planned(kernel(body))
    assert plans(fn) == [("reduce", [0, 32])]


def test_lowering_ends_an_op_with_a_barrier_where_it_could_not_keep_its_plan():
    kept = ScratchUse([32, 32])
    assert kept.take(32) and not kept.needs_barrier_after(lambda: False)
    bigger = ScratchUse([32, 32])
    assert not bigger.take(64) and bigger.needs_barrier_after(lambda: False)  # it used the area's start, after a barrier
    twice = ScratchUse([0, 32])
    assert twice.take(16) and not twice.take(16) and twice.needs_barrier_after(lambda: False)
    unused = ScratchUse([0, 32])
    assert unused.needs_barrier_after(lambda: False)  # the next op counted on this one's barrier
    assert not ScratchUse(None).needs_barrier_after(lambda: False)
    surprise = ScratchUse(None)
    assert not surprise.take(8) and surprise.needs_barrier_after(lambda: True)  # taken for an op touching no shared memory
    assert ScratchUse([3, 32]).plan is None and ScratchUse("0, 32").plan is None  # not a plan this pass makes


def _bar_syncs(ptx: str) -> int:
    return ptx.count("bar.sync") + ptx.count("barrier.sync")


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_softmax_has_one_barrier_per_reduction(target):
    import kiln
    import kiln.language as tl

    @kiln.jit
    def softmax(out_ptr, in_ptr, stride, n, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        x = tl.load(in_ptr + row * stride + cols, mask=cols < n, other=-float("inf"))
        x = x - tl.max(x, axis=0)
        num = tl.exp(x)
        tl.store(out_ptr + row * stride + cols, num / tl.sum(num, axis=0), mask=cols < n)

    x = np.zeros(4, np.float32)
    k = softmax.warmup(x, x, 512, 500, BLOCK=512, num_warps=4, grid=(1,), target=target)
    # each reduction's barrier between its writes and reads; none before them (was 4)
    assert _bar_syncs(k.asm["ptx"]) == 2


def kernel_plans(k, num_warps=4):
    """The planned ops and barriers of a built kernel's block IR after the passes (sm_90a)."""
    fn = parse_function(k.ir if isinstance(k.ir, str) else print_function(k.ir))
    kir = parse_function(compile_ir(fn, "sm_90a", {"num_warps": num_warps}, link=False).kir)
    return [(op.name, op.attrs.get("scratch")) for op in kir.walk() if "scratch" in op.attrs or op.name == "barrier"]


def test_exchanges_and_histograms_are_planned_like_reductions():
    x = np.zeros(4, np.float32)
    k = exchanges.warmup(x, x, np.zeros(4, np.int32), N=32, num_warps=4, grid=(1,), target="sm_90a")
    got = kernel_plans(k)
    tile = 32 * 32 * 4  # an exchange holds the whole fp32 tile
    # the transpose, both reshapes and the join rename registers (kiln.ir.layout_moves); the split
    # exchanges (after the transpose a pair is on two lanes), and the store takes a conversion
    assert got == [("split", [0, tile]),
                   ("reduce", [tile, 32 * 4 * 8]),  # column sums across 4 warps, beside the split's bytes
                   ("convert_layout", [0, tile]),  # after the sums' barrier: no barrier of its own before it
                   ("histogram", [tile, 32])]  # 8 counters where the sums were, after the conversion's barrier


def test_scans_across_warps_are_planned_like_reductions():
    x = np.zeros(4, np.float32)
    k = scans.warmup(x, x, N=256, num_warps=4, grid=(1,), target="sm_90a")
    got = kernel_plans(k)
    # each warp's total (8 bytes) for the 4 warps; one repetition of the layout tile along the axis
    assert got == [("scan", [0, 32]), ("scan", [32, 32]), ("reduce", [0, 32])]
    assert _bar_syncs(k.asm["ptx"]) == 3


def test_the_ops_it_knows_touch_no_shared_memory_are_the_ones_lowering_computes_in_registers():
    # the scratch model takes the elementwise ops from the IR's op table, not from lowering's rules:
    # the two lists must name the same ops
    from kiln.codegen.lower import elementwise
    from kiln.ir.ops import ELEMENTWISE_OPS
    assert set(elementwise.RULES) == ELEMENTWISE_OPS
