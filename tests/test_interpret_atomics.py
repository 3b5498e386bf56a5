"""Interpreter: atomics, with lanes of one block and several programs on one address."""
import numpy as np
import pytest

from kiln.interpret import InterpreterError, run
from kiln.ir import parse_function, verify
from kiln.ir.types import from_numpy


def build(text):
    fn = parse_function(text)
    verify(fn)
    return fn


def rmw_kernel(kind, t, n):
    """Program p: lanes i do atomic_{kind}(x + idx[i], val[i]) where mask[i]; old values to out[p*n + i]."""
    return build(f"""kernel @k(%x: ptr<{t}>, %idx: ptr<int32>, %val: ptr<{t}>, %msk: ptr<int1>, %out: ptr<{t}>) {{
      %pid = program_id {{axis = 0}} : int32
      %cn = constant {{value = {n}}} : int32
      %base = mul %pid, %cn : int32
      %r = arange {{start = 0, end = {n}}} : <{n}xint32>
      %bs = splat %base : <{n}xint32>
      %lane = add %bs, %r : <{n}xint32>
      %pi = splat %idx : <{n}xptr<int32>>
      %qi = addptr %pi, %lane : <{n}xptr<int32>>
      %i = load %qi : <{n}xint32>
      %pv = splat %val : <{n}xptr<{t}>>
      %qv = addptr %pv, %lane : <{n}xptr<{t}>>
      %v = load %qv : <{n}x{t}>
      %pm = splat %msk : <{n}xptr<int1>>
      %qm = addptr %pm, %lane : <{n}xptr<int1>>
      %m = load %qm : <{n}xint1>
      %px = splat %x : <{n}xptr<{t}>>
      %qx = addptr %px, %i : <{n}xptr<{t}>>
      %old = atomic_rmw %qx, %v, %m {{kind = "{kind}", scope = "gpu", sem = "acq_rel"}} : <{n}x{t}> loc("at.py":9:2)
      %po = splat %out : <{n}xptr<{t}>>
      %qo = addptr %po, %lane : <{n}xptr<{t}>>
      store %qo, %old
      return
    }}""")


def reference(kind, x, idx, val, mask):
    """Sequential semantics: programs in order, lanes in order."""
    x = x.copy()
    old = np.zeros_like(val)
    ops = {"add": lambda a, b: a + b, "max": max, "min": min, "and": lambda a, b: a & b,
           "or": lambda a, b: a | b, "xor": lambda a, b: a ^ b, "xchg": lambda a, b: b}
    for lane in range(len(idx)):
        if mask[lane]:
            old[lane] = x[idx[lane]]
            x[idx[lane]] = ops[kind](x[idx[lane]], val[lane])
    return x, old


@pytest.mark.parametrize("kind", ["add", "max", "min", "and", "or", "xor", "xchg"])
@pytest.mark.parametrize("dt", [np.int32, np.uint32])
def test_int_rmw_with_duplicate_addresses_in_and_across_programs(kind, dt):
    rng = np.random.default_rng(1)
    n, programs = 16, 3
    idx = rng.integers(0, 4, n * programs).astype(np.int32)
    idx[:5] = 2  # one address hit by five lanes of the first block
    val = rng.integers(0, 1000, n * programs).astype(dt)
    mask = rng.random(n * programs) < 0.8
    x = rng.integers(0, 1000, 4).astype(dt)
    want_x, want_old = reference(kind, x, idx, val, mask)
    out = np.zeros(n * programs, dt)
    run(rmw_kernel(kind, from_numpy(np.dtype(dt)).name, n), (programs,), [x, idx, val, mask, out])
    assert x.tolist() == want_x.tolist()
    assert out[mask].tolist() == want_old[mask].tolist()


def test_histogram_counter_returns_every_old_value_once():
    n = 64
    x = np.zeros(1, np.int32)
    idx, val, mask = np.zeros(n, np.int32), np.ones(n, np.int32), np.ones(n, bool)
    out = np.zeros(n, np.int32)
    run(rmw_kernel("add", "int32", 32), (2,), [x, idx, val, mask, out])
    assert x[0] == 64 and out.tolist() == list(range(64))


def test_int_add_wraps_and_float_add_max():
    x = np.array([2**31 - 1], np.int32)
    out = np.zeros(4, np.int32)
    run(rmw_kernel("add", "int32", 4), (1,), [x, np.zeros(4, np.int32), np.ones(4, np.int32), np.ones(4, bool), out])
    assert x[0] == -2**31 + 3
    f = np.array([0.5, -1.0], np.float32)
    idx = np.array([0, 1, 0, 1], np.int32)
    val = np.array([1.25, -3.0, 2.0, 0.5], np.float32)
    fout = np.zeros(4, np.float32)
    run(rmw_kernel("add", "fp32", 4), (1,), [f, idx, val, np.ones(4, bool), fout])
    assert f.tolist() == [3.75, -3.5] and fout.tolist() == [0.5, -1.0, 1.75, -4.0]
    run(rmw_kernel("max", "fp32", 4), (1,), [f, idx, val, np.ones(4, bool), fout])
    assert f.tolist() == [3.75, 0.5]
    h = np.array([1.0], np.float16)
    hout = np.zeros(4, np.float16)
    run(rmw_kernel("add", "fp16", 4), (1,), [h, np.zeros(4, np.int32), np.full(4, 0.25, np.float16), np.ones(4, bool), hout])
    assert h[0] == 2.0 and hout.tolist() == [1.0, 1.25, 1.5, 1.75]


def test_masked_off_atomic_lanes_are_not_checked():
    x = np.zeros(2, np.int32)
    idx = np.array([0, 10**6, 1, -10**6], np.int32)
    mask = np.array([1, 0, 1, 0], bool)
    out = np.zeros(4, np.int32)
    run(rmw_kernel("add", "int32", 4), (1,), [x, idx, np.ones(4, np.int32), mask, out])
    assert x.tolist() == [1, 1]
    mask[1] = True
    with pytest.raises(InterpreterError, match=r"at\.py:9.*atomic_add"):
        run(rmw_kernel("add", "int32", 4), (1,), [x, idx, np.ones(4, np.int32), mask, out])


CAS = build("""kernel @cas(%x: ptr<int32>, %cmp: ptr<int32>, %val: ptr<int32>, %out: ptr<int32>) {
  %r = arange {start = 0, end = 8} : <8xint32>
  %zero = constant {value = 0} : <8xint32>
  %px = splat %x : <8xptr<int32>>
  %qx = addptr %px, %zero : <8xptr<int32>>
  %pc = splat %cmp : <8xptr<int32>>
  %qc = addptr %pc, %r : <8xptr<int32>>
  %c = load %qc : <8xint32>
  %pv = splat %val : <8xptr<int32>>
  %qv = addptr %pv, %r : <8xptr<int32>>
  %v = load %qv : <8xint32>
  %old = atomic_cas %qx, %c, %v {scope = "gpu", sem = "acq_rel"} : <8xint32>
  %po = splat %out : <8xptr<int32>>
  %qo = addptr %po, %r : <8xptr<int32>>
  store %qo, %old
  return
}""")


def test_cas_chain_on_one_address():
    # Lane i swaps i -> i+1: in lane order every compare succeeds, so x ends at 8.
    x = np.zeros(1, np.int32)
    out = np.zeros(8, np.int32)
    run(CAS, (1,), [x, np.arange(8, dtype=np.int32), np.arange(1, 9, dtype=np.int32), out])
    assert x[0] == 8 and out.tolist() == list(range(8))
    # Only the lanes whose expected value matches win.
    x[0] = 0
    run(CAS, (1,), [x, np.array([0, 0, 1, 5, 1, 2, 2, 3], np.int32), np.array([1, 9, 2, 9, 9, 3, 9, 4], np.int32), out])
    assert x[0] == 4 and out.tolist() == [0, 1, 1, 2, 2, 2, 3, 3]


def test_scalar_atomic():
    fn = build("""kernel @k(%x: ptr<fp32>, %o: ptr<fp32>) {
      %v = constant {value = 1.5} : fp32
      %m = constant {value = true} : int1
      %old = atomic_rmw %x, %v, %m {kind = "xchg", scope = "gpu", sem = "relaxed"} : fp32
      store %o, %old
      return
    }""")
    x, o = np.array([7.0], np.float32), np.zeros(1, np.float32)
    run(fn, (3,), [x, o])
    assert x[0] == 1.5 and o[0] == 1.5
