"""Interpreter: whole kernels in the shape the frontend emits (tiled matmul, softmax)."""
import numpy as np
import pytest

from kiln.interpret import run
from kiln.ir import parse_function, verify


def matmul_ir(BM, BN, BK, t="fp16"):
    return f"""kernel @matmul(%a: ptr<{t}>, %b: ptr<{t}>, %c: ptr<fp32>, %M: int32, %N: int32, %K: int32) {{
  %pid_m = program_id {{axis = 0}} : int32
  %pid_n = program_id {{axis = 1}} : int32
  %cBM = constant {{value = {BM}}} : int32
  %cBN = constant {{value = {BN}}} : int32
  %m0 = mul %pid_m, %cBM : int32
  %n0 = mul %pid_n, %cBN : int32
  %rm0 = arange {{start = 0, end = {BM}}} : <{BM}xint32>
  %rn0 = arange {{start = 0, end = {BN}}} : <{BN}xint32>
  %rk = arange {{start = 0, end = {BK}}} : <{BK}xint32>
  %m0s = splat %m0 : <{BM}xint32>
  %n0s = splat %n0 : <{BN}xint32>
  %rm = add %m0s, %rm0 : <{BM}xint32>
  %rn = add %n0s, %rn0 : <{BN}xint32>
  %rm2 = expand_dims %rm {{axis = 1}} : <{BM}x1xint32>
  %rn2 = expand_dims %rn {{axis = 0}} : <1x{BN}xint32>
  %rkr = expand_dims %rk {{axis = 0}} : <1x{BK}xint32>
  %rkc = expand_dims %rk {{axis = 1}} : <{BK}x1xint32>
  %Ks = splat %K : <{BM}x1xint32>
  %arow = mul %rm2, %Ks : <{BM}x1xint32>
  %arowb = broadcast %arow : <{BM}x{BK}xint32>
  %akb = broadcast %rkr : <{BM}x{BK}xint32>
  %aoff = add %arowb, %akb : <{BM}x{BK}xint32>
  %Ns = splat %N : <{BK}x1xint32>
  %brow = mul %rkc, %Ns : <{BK}x1xint32>
  %browb = broadcast %brow : <{BK}x{BN}xint32>
  %bnb = broadcast %rn2 : <{BK}x{BN}xint32>
  %boff = add %browb, %bnb : <{BK}x{BN}xint32>
  %pa = splat %a : <{BM}x{BK}xptr<{t}>>
  %pa0 = addptr %pa, %aoff : <{BM}x{BK}xptr<{t}>>
  %pb = splat %b : <{BK}x{BN}xptr<{t}>>
  %pb0 = addptr %pb, %boff : <{BK}x{BN}xptr<{t}>>
  %Mb = splat %M : <{BM}x1xint32>
  %mm = cmp %rm2, %Mb {{pred = "lt"}} : <{BM}x1xint1>
  %mmb = broadcast %mm : <{BM}x{BK}xint1>
  %Nb = splat %N : <1x{BN}xint32>
  %nm = cmp %rn2, %Nb {{pred = "lt"}} : <1x{BN}xint1>
  %nmb = broadcast %nm : <{BK}x{BN}xint1>
  %acc0 = constant {{value = 0.0}} : <{BM}x{BN}xfp32>
  %c0 = constant {{value = 0}} : int32
  %cBK = constant {{value = {BK}}} : int32
  %sA = constant {{value = {BK}}} : <{BM}x{BK}xint32>
  %NBK = mul %N, %cBK : int32
  %sB = splat %NBK : <{BK}x{BN}xint32>
  %zA = constant {{value = 0.0}} : <{BM}x{BK}x{t}>
  %zB = constant {{value = 0.0}} : <{BK}x{BN}x{t}>
  %acc, %pa_end, %pb_end = for %c0, %K, %cBK, %acc0, %pa0, %pb0 : <{BM}x{BN}xfp32>, <{BM}x{BK}xptr<{t}>>, <{BK}x{BN}xptr<{t}>> {{
  ^(%k: int32, %accI: <{BM}x{BN}xfp32>, %paI: <{BM}x{BK}xptr<{t}>>, %pbI: <{BK}x{BN}xptr<{t}>>):
    %ks = splat %k : <1x{BK}xint32>
    %kk = add %ks, %rkr : <1x{BK}xint32>
    %Kr = splat %K : <1x{BK}xint32>
    %km = cmp %kk, %Kr {{pred = "lt"}} : <1x{BK}xint1>
    %kmb = broadcast %km : <{BM}x{BK}xint1>
    %amask = and %mmb, %kmb : <{BM}x{BK}xint1>
    %ksc = splat %k : <{BK}x1xint32>
    %kkc = add %ksc, %rkc : <{BK}x1xint32>
    %Kc = splat %K : <{BK}x1xint32>
    %kmc = cmp %kkc, %Kc {{pred = "lt"}} : <{BK}x1xint1>
    %kmcb = broadcast %kmc : <{BK}x{BN}xint1>
    %bmask = and %kmcb, %nmb : <{BK}x{BN}xint1>
    %av = load %paI, %amask, %zA : <{BM}x{BK}x{t}>
    %bv = load %pbI, %bmask, %zB : <{BK}x{BN}x{t}>
    %acc2 = dot %av, %bv, %accI : <{BM}x{BN}xfp32>
    %pa2 = addptr %paI, %sA : <{BM}x{BK}xptr<{t}>>
    %pb2 = addptr %pbI, %sB : <{BK}x{BN}xptr<{t}>>
    yield %acc2, %pa2, %pb2
  }}
  %Nc = splat %N : <{BM}x1xint32>
  %crow = mul %rm2, %Nc : <{BM}x1xint32>
  %crowb = broadcast %crow : <{BM}x{BN}xint32>
  %cnb = broadcast %rn2 : <{BM}x{BN}xint32>
  %coff = add %crowb, %cnb : <{BM}x{BN}xint32>
  %pc = splat %c : <{BM}x{BN}xptr<fp32>>
  %pc0 = addptr %pc, %coff : <{BM}x{BN}xptr<fp32>>
  %mmc = broadcast %mm : <{BM}x{BN}xint1>
  %nmc = broadcast %nm : <{BM}x{BN}xint1>
  %cmask = and %mmc, %nmc : <{BM}x{BN}xint1>
  store %pc0, %acc, %cmask
  return
}}"""


@pytest.mark.parametrize("t,dt", [("fp16", np.float16), ("fp32", np.float32)])
def test_tiled_matmul_with_ragged_edges(t, dt):
    fn = parse_function(matmul_ir(16, 32, 16, t))
    verify(fn)
    rng = np.random.default_rng(0)
    M, N, K = 40, 70, 50
    a = rng.standard_normal((M, K)).astype(dt)
    b = rng.standard_normal((K, N)).astype(dt)
    c = np.full((M, N), np.nan, np.float32)
    run(fn, ((M + 15) // 16, (N + 31) // 32), [a, b, c, M, N, K])
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-4)


SOFTMAX = """kernel @softmax(%x: ptr<fp32>, %y: ptr<fp32>, %stride: int32, %n: int32) {
  %row = program_id {axis = 0} : int32
  %start = mul %row, %stride : int32
  %xr = addptr %x, %start : ptr<fp32>
  %yr = addptr %y, %start : ptr<fp32>
  %cols = arange {start = 0, end = 128} : <128xint32>
  %ns = splat %n : <128xint32>
  %mask = cmp %cols, %ns {pred = "lt"} : <128xint1>
  %px = splat %xr : <128xptr<fp32>>
  %qx = addptr %px, %cols : <128xptr<fp32>>
  %ninf = constant {value = -inf} : <128xfp32>
  %v = load %qx, %mask, %ninf : <128xfp32>
  %mx = reduce %v {axis = 0} : fp32 {
  ^(%a: fp32, %b: fp32):
    %m = max %a, %b : fp32
    yield %m
  }
  %mxs = splat %mx : <128xfp32>
  %z = sub %v, %mxs : <128xfp32>
  %e = exp %z : <128xfp32>
  %s = reduce %e {axis = 0} : fp32 {
  ^(%c: fp32, %d: fp32):
    %t = add %c, %d : fp32
    yield %t
  }
  %ss = splat %s : <128xfp32>
  %out = div %e, %ss : <128xfp32>
  %py = splat %yr : <128xptr<fp32>>
  %qy = addptr %py, %cols : <128xptr<fp32>>
  store %qy, %out, %mask
  return
}"""


def test_softmax_rows():
    fn = parse_function(SOFTMAX)
    verify(fn)
    x = np.random.default_rng(0).standard_normal((6, 100)).astype(np.float32) * 5
    y = np.zeros_like(x)
    run(fn, (6,), [x, y, x.strides[0] // 4, x.shape[1]])
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(1, keepdims=True), rtol=1e-5)
