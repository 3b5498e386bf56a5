"""Interpreter: memory model (spans, masks, bounds, alignment), grids, arguments, torch."""
import ml_dtypes
import numpy as np
import pytest

from kiln.interpret import InterpreterError, run
from kiln.ir import parse_function, verify


def build(text):
    fn = parse_function(text)
    verify(fn)
    return fn


ADD = build("""kernel @add(%x: ptr<fp32> {name = "x_ptr"}, %y: ptr<fp32> {name = "y_ptr"}, %o: ptr<fp32>, %n: int32) {
  %pid = program_id {axis = 0} : int32
  %c4 = constant {value = 4} : int32
  %base = mul %pid, %c4 : int32
  %r = arange {start = 0, end = 4} : <4xint32>
  %bs = splat %base : <4xint32>
  %off = add %bs, %r : <4xint32>
  %ns = splat %n : <4xint32>
  %m = cmp %off, %ns {pred = "lt"} : <4xint1>
  %px = splat %x : <4xptr<fp32>>
  %qx = addptr %px, %off : <4xptr<fp32>>
  %vx = load %qx, %m : <4xfp32> loc("add.py":7:8)
  %py = splat %y : <4xptr<fp32>>
  %qy = addptr %py, %off : <4xptr<fp32>>
  %vy = load %qy : <4xfp32> loc("add.py":8:8)
  %s = add %vx, %vy : <4xfp32>
  %po = splat %o : <4xptr<fp32>>
  %qo = addptr %po, %off : <4xptr<fp32>>
  store %qo, %s, %m loc("add.py":10:4)
  return
}""")


def test_masked_vector_add_over_a_grid():
    x, y = np.arange(10, dtype=np.float32), np.arange(12, dtype=np.float32) * 10
    out = np.full(12, -1, np.float32)
    run(ADD, (3,), [x, y, out, 10])
    assert out.tolist() == [11 * i for i in range(10)] + [-1, -1]  # masked-off lanes untouched


def test_out_of_bounds_names_kernel_location_and_address():
    x, y, out = np.zeros(10, np.float32), np.zeros(10, np.float32), np.zeros(10, np.float32)
    with pytest.raises(InterpreterError) as info:
        run(ADD, (3,), [x, y, out, 10], name="my_add")
    msg = str(info.value)
    bad = y.ctypes.data + 10 * 4
    assert "my_add" in msg and "add.py:8" in msg and f"{bad:#x}" in msg and "y_ptr" in msg
    assert "load" in msg and "program (2, 0, 0)" in msg and "(lane 2)" in msg


def test_masked_off_lanes_are_never_checked():
    fn = build("""kernel @k(%x: ptr<int32>, %o: ptr<int32>) {
      %r = arange {start = 0, end = 8} : <8xint32>
      %big = constant {value = 1000000000} : <8xint32>
      %c2 = constant {value = 2} : <8xint32>
      %m = cmp %r, %c2 {pred = "lt"} : <8xint1>
      %off = select %m, %r, %big : <8xint32>
      %px = splat %x : <8xptr<int32>>
      %q = addptr %px, %off : <8xptr<int32>>
      %other = constant {value = -7} : <8xint32>
      %v = load %q, %m, %other : <8xint32>
      %po = splat %o : <8xptr<int32>>
      %qo = addptr %po, %r : <8xptr<int32>>
      store %qo, %v
      store %q, %v, %m
      return
    }""")
    x, out = np.array([5, 6], np.int32), np.zeros(8, np.int32)
    run(fn, (1,), [x, out])
    assert out.tolist() == [5, 6] + [-7] * 6


SCALAR_LOAD = """kernel @k(%x: ptr<{t}>, %o: ptr<{t}>) {{
  %v = load %x : {t} loc("s.py":3:4)
  store %o, %v
  return
}}"""


def test_null_pointer_and_unknown_address():
    fn = build(SCALAR_LOAD.format(t="fp32"))
    with pytest.raises(InterpreterError, match=r"s\.py:3.*0x0 .*null pointer"):
        run(fn, (1,), [None, np.zeros(1, np.float32)])
    with pytest.raises(InterpreterError, match="outside every argument's memory"):
        run(fn, (1,), [0x1000_0000, np.zeros(1, np.float32)])


def test_raw_address_inside_a_registered_argument_and_extra_memory():
    fn = build(SCALAR_LOAD.format(t="int64"))
    x = np.arange(4, dtype=np.int64)
    out = np.arange(4, dtype=np.int64)
    run(fn, (1,), [out.ctypes.data + 8, out])  # read out[1], registered by the other argument
    assert out.tolist() == [1, 1, 2, 3]
    run(fn, (1,), [x.ctypes.data + 24, out], extra_memory=[x])
    assert out[0] == 3


def test_misaligned_access_is_an_error():
    fn = build("""kernel @k(%x: ptr<int8>, %o: ptr<int32>) {
      %i = cast %x : int64
      %c1 = constant {value = 1} : int64
      %j = add %i, %c1 : int64
      %q = cast %j : ptr<int32>
      %v = load %q : int32 loc("m.py":5:2)
      store %o, %v
      return
    }""")
    with pytest.raises(InterpreterError, match=r"m\.py:5.*misaligned load of 4 byte"):
        run(fn, (1,), [np.zeros(16, np.int8), np.zeros(1, np.int32)])


def test_span_whose_base_is_not_aligned_to_the_element_size():
    # A span starting at an odd address, read as int16 at the even addresses inside it.
    fn = build("""kernel @k(%x: ptr<int8>, %o: ptr<int16>) {
      %i = cast %x : int64
      %c1 = constant {value = 1} : int64
      %j = add %i, %c1 : int64
      %q = cast %j : ptr<int16>
      %r = arange {start = 0, end = 4} : <4xint32>
      %qs = splat %q : <4xptr<int16>>
      %qq = addptr %qs, %r : <4xptr<int16>>
      %v = load %qq : <4xint16>
      store %qq, %v
      %os = splat %o : <4xptr<int16>>
      %oo = addptr %os, %r : <4xptr<int16>>
      store %oo, %v
      return
    }""")
    raw = np.zeros(64, np.uint8)
    start = (-raw.ctypes.data) % 2 + 1  # an odd address
    buf = raw[start:start + 9]
    buf[:] = np.arange(1, 10)
    out = np.zeros(4, np.int16)
    run(fn, (1,), [buf, out])
    assert out.tolist() == buf[1:9].copy().view(np.int16).tolist()


def test_same_storage_passed_twice_and_overlapping_views():
    fn = build("""kernel @k(%a: ptr<int32>, %b: ptr<int32>) {
      %r = arange {start = 0, end = 4} : <4xint32>
      %pa = splat %a : <4xptr<int32>>
      %qa = addptr %pa, %r : <4xptr<int32>>
      %pb = splat %b : <4xptr<int32>>
      %qb = addptr %pb, %r : <4xptr<int32>>
      %v = load %qa : <4xint32>
      %w = load %qb : <4xint32>
      %s = add %v, %w : <4xint32>
      store %qa, %s
      return
    }""")
    x = np.arange(6, dtype=np.int32)
    run(fn, (1,), [x, x])
    assert x.tolist() == [0, 2, 4, 6, 4, 5]
    x = np.arange(6, dtype=np.int32)
    run(fn, (1,), [x[:4], x[2:]])
    assert x.tolist() == [2, 4, 6, 8, 4, 5]


def test_scalar_and_int1_memory_and_negative_offsets():
    fn = build("""kernel @k(%x: ptr<int1>, %o: ptr<int1>, %f: ptr<fp64>) {
      %r = arange {start = 0, end = 4} : <4xint32>
      %c3 = constant {value = 3} : <4xint32>
      %back = sub %r, %c3 : <4xint32>
      %px = splat %x : <4xptr<int1>>
      %e = addptr %px, %c3 : <4xptr<int1>>
      %q = addptr %e, %back : <4xptr<int1>>
      %v = load %q : <4xint1>
      %nv = not %v : <4xint1>
      %po = splat %o : <4xptr<int1>>
      %qo = addptr %po, %r : <4xptr<int1>>
      store %qo, %nv
      %s = load %f : fp64
      %two = constant {value = 2.0} : fp64
      %d = mul %s, %two : fp64
      store %f, %d
      return
    }""")
    x, out, f = np.array([1, 0, 0, 1], bool), np.zeros(4, bool), np.array([1.25])
    run(fn, (1,), [x, out, f])
    assert out.tolist() == [0, 1, 1, 0] and f[0] == 2.5


def test_grid_program_ids_and_num_programs():
    fn = build("""kernel @k(%o: ptr<int32>) {
      %x = program_id {axis = 0} : int32
      %y = program_id {axis = 1} : int32
      %z = program_id {axis = 2} : int32
      %nx = num_programs {axis = 0} : int32
      %ny = num_programs {axis = 1} : int32
      %t = mul %y, %nx : int32
      %zz = mul %z, %nx : int32
      %zzz = mul %zz, %ny : int32
      %i0 = add %t, %x : int32
      %i = add %i0, %zzz : int32
      %p = addptr %o, %i : ptr<int32>
      %c100 = constant {value = 100} : int32
      %v0 = mul %z, %c100 : int32
      %c10 = constant {value = 10} : int32
      %v1 = mul %y, %c10 : int32
      %v2 = add %v0, %v1 : int32
      %v = add %v2, %x : int32
      store %p, %v
      return
    }""")
    out = np.zeros(3 * 2 * 2, np.int32)
    run(fn, (3, 2, 2), [out])
    assert out.tolist() == [z * 100 + y * 10 + x for z in range(2) for y in range(2) for x in range(3)]
    run(fn, (0,), [out])  # an empty grid runs nothing


def test_scalar_arguments_wrap_and_round():
    fn = build("""kernel @k(%a: int32, %b: uint32, %c: fp16, %d: int1, %o: ptr<fp64>) {
      %fa = cast %a : fp64
      %fb = cast %b : fp64
      %fc = cast %c : fp64
      %fd = cast %d : fp64
      %o1 = addptr %o, %a : ptr<fp64>
      %c0 = constant {value = 0} : int32
      %p0 = addptr %o, %c0 : ptr<fp64>
      %c1 = constant {value = 1} : int32
      %p1 = addptr %o, %c1 : ptr<fp64>
      %c2 = constant {value = 2} : int32
      %p2 = addptr %o, %c2 : ptr<fp64>
      %c3 = constant {value = 3} : int32
      %p3 = addptr %o, %c3 : ptr<fp64>
      store %p0, %fa
      store %p1, %fb
      store %p2, %fc
      store %p3, %fd
      return
    }""")
    out = np.zeros(4)
    run(fn, (1,), [2**32 + 2, -1, 0.1, True, out])
    assert out.tolist() == [2.0, 2.0**32 - 1, float(np.float16(0.1)), 1.0]
    run(fn, (1,), [np.int64(3), np.uint32(7), np.float32(2.5), np.bool_(False), out])
    assert out.tolist() == [3.0, 7.0, 2.5, 0.0]
    with pytest.raises(InterpreterError, match="takes 5 arguments"):
        run(fn, (1,), [1, 2, 3])


def test_pointers_loaded_from_memory():
    fn = build("""kernel @k(%table: ptr<ptr<fp32>>, %o: ptr<fp32>) {
      %c1 = constant {value = 1} : int32
      %e = addptr %table, %c1 : ptr<ptr<fp32>>
      %p = load %e : ptr<fp32>
      %q = addptr %p, %c1 : ptr<fp32>
      %v = load %q : fp32
      store %o, %v
      return
    }""")
    a, b = np.array([1.0, 2.0], np.float32), np.array([3.0, 4.0], np.float32)
    table = np.array([a.ctypes.data, b.ctypes.data], np.uint64)
    out = np.zeros(1, np.float32)
    run(fn, (1,), [table, out], extra_memory=[a, b])
    assert out[0] == 4.0
    with pytest.raises(InterpreterError, match="outside every argument's memory"):
        run(fn, (1,), [table, out])


COPY2D = """kernel @copy(%x: ptr<{t}>, %o: ptr<{t}>, %sx: int32) {{
  %r = arange {{start = 0, end = 4}} : <4xint32>
  %rs = splat %sx : <4xint32>
  %off = mul %r, %rs : <4xint32>
  %px = splat %x : <4xptr<{t}>>
  %qx = addptr %px, %off : <4xptr<{t}>>
  %v = load %qx : <4x{t}>
  %c = constant {{value = 1.0}} : <4x{t}>
  %w = add %v, %c : <4x{t}>
  %po = splat %o : <4xptr<{t}>>
  %qo = addptr %po, %r : <4xptr<{t}>>
  store %qo, %w
  return
}}"""


def test_strided_numpy_views():
    fn = build(COPY2D.format(t="fp32"))
    m = np.arange(16, dtype=np.float32).reshape(4, 4)
    out = np.zeros(4, np.float32)
    run(fn, (1,), [m.T, out, 4])  # a transposed view: column 0 of m.T is row 0 of m
    assert out.tolist() == [1.0, 5.0, 9.0, 13.0]
    rev = m[::-1, 0]  # negative stride: the span reaches below the data pointer
    run(fn, (1,), [rev, out, -4])
    assert out.tolist() == [13.0, 9.0, 5.0, 1.0]


def test_a_numpy_view_reaches_the_array_it_was_sliced_from():
    fn = build(COPY2D.format(t="fp32"))
    x, out = np.arange(8, dtype=np.float32), np.zeros(4, np.float32)
    run(fn, (1,), [x[4:6], out, 1])
    assert out.tolist() == [5.0, 6.0, 7.0, 8.0]
    with pytest.raises(InterpreterError, match="past the end"):
        run(fn, (1,), [x[6:8], out, 1])


def test_torch_cpu_tensors_fp32_bf16_and_views():
    torch = pytest.importorskip("torch")
    fn = build(COPY2D.format(t="fp32"))
    t = torch.arange(16, dtype=torch.float32).reshape(4, 4)
    out = torch.zeros(4)
    run(fn, (1,), [t.t(), out, 4])
    assert out.tolist() == [1.0, 5.0, 9.0, 13.0]
    fb = build(COPY2D.format(t="bf16"))
    tb = torch.tensor([1.5, 2.5, 3.5, -4.0], dtype=torch.bfloat16)
    outb = torch.zeros(4, dtype=torch.bfloat16)
    run(fb, (1,), [tb, outb, 1])
    assert outb.float().tolist() == [2.5, 3.5, 4.5, -3.0]
    run(fb, (1,), [tb[:2], outb, 1])  # a view reads on into its storage, as a GPU kernel may
    assert outb.float().tolist() == [2.5, 3.5, 4.5, -3.0]
    with pytest.raises(InterpreterError, match="outside every argument's memory"):
        run(fb, (1,), [tb[:2].clone(), outb, 1])
    # writes land in the tensor's own storage, seen through other views of it
    base = torch.zeros(8)
    run(fn, (1,), [torch.ones(4), base[4:], 1])
    assert base.tolist() == [0.0] * 4 + [2.0] * 4


def test_bf16_numpy_arrays():
    fb = build(COPY2D.format(t="bf16"))
    x = np.array([1, 2, 3, 4], ml_dtypes.bfloat16)
    out = np.zeros(4, ml_dtypes.bfloat16)
    run(fb, (1,), [x, out, 1])
    assert out.astype(np.float32).tolist() == [2, 3, 4, 5]


def test_store_into_read_only_memory_is_refused():
    fn = build(SCALAR_LOAD.format(t="int32"))
    src = np.frombuffer(b"\x07\x00\x00\x00", np.int32)  # loads from read-only memory are fine
    out = np.zeros(1, np.int32)
    run(fn, (1,), [src, out])
    assert out[0] == 7
    with pytest.raises(InterpreterError, match="store into read-only memory"):
        run(fn, (1,), [out, np.frombuffer(b"\x00" * 4, np.int32)])
