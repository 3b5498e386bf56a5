"""Interpreter: loops and branches with carried values, print, assert, errors."""
import numpy as np
import pytest

from kiln.interpret import InterpreterError, run
from kiln.interpret.ops import IMPLS, TERMINATORS
from kiln.ir import OPS, parse_function, verify
from kiln.ir.ops import GPU_STAGE_OPS


def build(text):
    fn = parse_function(text)
    verify(fn)
    return fn


def test_every_ir_op_has_an_implementation():
    assert set(OPS) - TERMINATORS - GPU_STAGE_OPS <= set(IMPLS)


LOOP = build("""kernel @loop(%x: ptr<fp32>, %o: ptr<fp32>, %lb: int32, %ub: int32, %step: int32) {
  %zero = constant {value = 0.0} : fp32
  %cnt0 = constant {value = 0} : int32
  %s, %c = for %lb, %ub, %step, %zero, %cnt0 : fp32, int32 {
  ^(%i: int32, %acc: fp32, %n: int32):
    %p = addptr %x, %i : ptr<fp32>
    %v = load %p : fp32
    %acc2 = add %acc, %v : fp32
    %one = constant {value = 1} : int32
    %n2 = add %n, %one : int32
    yield %acc2, %n2
  }
  store %o, %s
  %c1 = constant {value = 1} : int32
  %o1 = addptr %o, %c1 : ptr<fp32>
  %cf = cast %c : fp32
  store %o1, %cf
  return
}""")


@pytest.mark.parametrize("lb,ub,step", [(0, 8, 1), (1, 8, 3), (7, -1, -2), (5, 5, 1), (6, 2, 1), (2, 6, -1)])
def test_for_loop_bounds_and_carried_values(lb, ub, step):
    x = np.arange(8, dtype=np.float32) ** 2
    out = np.zeros(2, np.float32)
    run(LOOP, (1,), [x, out, lb, ub, step])
    trips = list(range(lb, ub, step))
    assert out.tolist() == [float(sum(x[trips])), float(len(trips))]


def test_for_loop_with_zero_step_is_an_error():
    with pytest.raises(InterpreterError, match="step is 0"):
        run(LOOP, (1,), [np.zeros(8, np.float32), np.zeros(2, np.float32), 0, 4, 0])


def test_nested_loops_and_if_with_results():
    fn = build("""kernel @k(%o: ptr<int32>, %n: int32) {
      %c0 = constant {value = 0} : int32
      %c1 = constant {value = 1} : int32
      %c2 = constant {value = 2} : int32
      %total = for %c0, %n, %c1, %c0 : int32 {
      ^(%i: int32, %acc: int32):
        %inner = for %c0, %i, %c1, %acc : int32 {
        ^(%j: int32, %a: int32):
          %r = rem %j, %c2 : int32
          %even = cmp %r, %c0 {pred = "eq"} : int1
          %d = if %even : int32 {
          ^():
            yield %j
          } {
          ^():
            %nj = neg %j : int32
            yield %nj
          }
          %a2 = add %a, %d : int32
          yield %a2
        }
        yield %inner
      }
      store %o, %total
      return
    }""")
    out = np.zeros(1, np.int32)
    run(fn, (1,), [out, 6])
    assert out[0] == sum(j if j % 2 == 0 else -j for i in range(6) for j in range(i))


def test_while_loop_collatz_steps():
    fn = build("""kernel @k(%o: ptr<int32>, %start: int32) {
      %c0 = constant {value = 0} : int32
      %steps, %last = while %c0, %start : int32, int32 {
      ^(%s: int32, %x: int32):
        %one = constant {value = 1} : int32
        %go = cmp %x, %one {pred = "ne"} : int1
        condition %go, %s, %x
      } {
      ^(%s2: int32, %x2: int32):
        %c1 = constant {value = 1} : int32
        %c2 = constant {value = 2} : int32
        %c3 = constant {value = 3} : int32
        %r = rem %x2, %c2 : int32
        %odd = cmp %r, %c1 {pred = "eq"} : int1
        %half = div %x2, %c2 : int32
        %t = mul %x2, %c3 : int32
        %t1 = add %t, %c1 : int32
        %nx = select %odd, %t1, %half : int32
        %ns = add %s2, %c1 : int32
        yield %ns, %nx
      }
      store %o, %steps
      return
    }""")
    out = np.zeros(1, np.int32)
    run(fn, (1,), [out, 27])
    assert out[0] == 111
    run(fn, (1,), [out, 1])
    assert out[0] == 0


def test_if_on_block_values_and_program_id():
    fn = build("""kernel @k(%o: ptr<int32>) {
      %pid = program_id {axis = 0} : int32
      %c1 = constant {value = 1} : int32
      %is1 = cmp %pid, %c1 {pred = "eq"} : int1
      %v = if %is1 : <4xint32> {
      ^():
        %a = arange {start = 0, end = 4} : <4xint32>
        yield %a
      } {
      ^():
        %b = constant {value = -1} : <4xint32>
        yield %b
      }
      %r = arange {start = 0, end = 4} : <4xint32>
      %c4 = constant {value = 4} : int32
      %base = mul %pid, %c4 : int32
      %bs = splat %base : <4xint32>
      %off = add %bs, %r : <4xint32>
      %po = splat %o : <4xptr<int32>>
      %q = addptr %po, %off : <4xptr<int32>>
      store %q, %v
      barrier
      return
    }""")
    out = np.zeros(12, np.int32)
    run(fn, (3,), [out])
    assert out.tolist() == [-1] * 4 + [0, 1, 2, 3] + [-1] * 4


def test_print_format(capsys):
    fn = build("""kernel @k(%x: int32) {
      %r = arange {start = 0, end = 2} : <2xint32>
      %f = cast %r : <2xfp32>
      %m = expand_dims %r {axis = 0} : <1x2xint32>
      print %x {prefix = "x"}
      print %f {prefix = " f: "}
      print %m {prefix = "m:", hex = true}
      print %r, %x {prefix = "both"}
      print {prefix = "just text"}
      return
    }""")
    run(fn, (2,), [-3])
    lines = capsys.readouterr().out.splitlines()
    assert lines[:5] == [
        "pid (0, 0, 0) idx () x: -3",
        "pid (0, 0, 0) idx (0) f: 0.0",
        "pid (0, 0, 0) idx (1) f: 1.0",
        "pid (0, 0, 0) idx (0, 0) m: 0x00000000",
        "pid (0, 0, 0) idx (0, 1) m: 0x00000001",
    ]
    assert lines[5:9] == ["pid (0, 0, 0) idx (0) both: (operand 0) 0", "pid (0, 0, 0) idx (1) both: (operand 0) 1",
                          "pid (0, 0, 0) idx () both: (operand 1) -3", " just text"]
    assert lines[9] == "pid (1, 0, 0) idx () x: -3" and len(lines) == 18


def test_assert_names_message_kernel_and_line():
    fn = build("""kernel @checked(%n: int32) {
      %r = arange {start = 0, end = 8} : <8xint32>
      %ns = splat %n : <8xint32>
      %ok = cmp %r, %ns {pred = "lt"} : <8xint1>
      assert %ok {message = "r < n"} loc("chk.py":12:4)
      return
    }""")
    run(fn, (2,), [8])
    with pytest.raises(InterpreterError) as info:
        run(fn, (2,), [5], name="checked_kernel")
    msg = str(info.value)
    assert "checked_kernel" in msg and "chk.py:12" in msg and "r < n" in msg and "idx (5)" in msg


def test_numpy_errors_become_interpreter_errors_with_the_op():
    # Not verified on purpose: a shape bug that only NumPy notices.
    fn = parse_function("""kernel @bad(%o: ptr<fp32>) {
      %a = constant {value = 1.0} : <4xfp32>
      %b = constant {value = 2.0} : <8xfp32>
      %c = add %a, %b : <4xfp32> loc("bad.py":3:9)
      return
    }""")
    with pytest.raises(InterpreterError, match=r"kernel 'bad', add at bad\.py:3:9 in program \(0, 0, 0\): ValueError"):
        run(fn, (1,), [np.zeros(1, np.float32)])
    unknown = parse_function("kernel @u() {\n  frobnicate\n  return\n}")
    with pytest.raises(InterpreterError, match="no implementation"):
        run(unknown, (1,), [])
    with pytest.raises(InterpreterError, match="grid"):
        run(unknown, (1, 1, 1, 1), [])
