"""Run kiln's LLVM IR on the host CPU: one OS thread per GPU thread.

For tests on machines without a GPU. The kernel is lowered in portable mode (masked
accesses are branches, not inline PTX), its address spaces and NVVM intrinsics are
mapped to host equivalents (thread ids, `bar.sync` and warp shuffles become Python
callbacks over `threading.Barrier`s; approximations and libdevice calls become host
math), and it is JIT-compiled for the host with llvmlite. CTAs run one after another.
This checks the lowering's semantics (layouts, reductions, scans, conversions, dot);
the PTX-only parts (inline asm) are checked by ptxas in the PTX tier instead.
Buggy kernels can crash the process: run it in a child process in tests.
"""
from __future__ import annotations

import ctypes
import math
import re
import threading

import numpy as np

from kiln.ir.types import SCALAR_TYPES, half_float_bits

from .analysis.shared_buffers import ALIGN
from .compiler import _options, lower_to_llvm
from .lower.elementwise import CVT_NAMES, ROUNDED_NAMES
from .target import parse_target

_C = {"i1": ctypes.c_bool, "i8": ctypes.c_int8, "i16": ctypes.c_int16, "i32": ctypes.c_int32,
      "i64": ctypes.c_int64, "float": ctypes.c_float, "double": ctypes.c_double, "ptr": ctypes.c_void_p}


class EmulationError(RuntimeError):
    pass


class _Grid:
    """The state the callbacks see: which thread this OS thread plays, barriers, shuffles.

    A warp's collectives (mma, ldmatrix, shfl) share its slots and wait twice: once every lane
    has written its slot, and once they were read. A lane writes its slot for the next one only
    after the second wait, and lane 0 overwrites the warp's mma product only after every lane
    wrote a slot for a later mma, so each wait is one handoff of the warp's 32 threads."""

    def __init__(self, threads: int):
        self.threads = threads
        self.local = threading.local()
        self.ctaid = (0, 0, 0)
        self.nctaid = (1, 1, 1)
        self.errors: list[str] = []
        self.printed: list[str] = []
        self.cta_barrier = threading.Barrier(threads, timeout=30)
        warps = max(1, threads // 32)
        self.warp_barriers = [threading.Barrier(min(32, threads), timeout=30) for _ in range(warps)]
        self.slots = [[0] * 32 for _ in range(warps)]
        self.products = [None] * warps  # each warp's last mma result, computed by its lane 0

    def barrier(self):
        try:
            self.cta_barrier.wait()
        except threading.BrokenBarrierError:
            self.errors.append("bar.sync: not every thread arrived (divergent barrier?)")

    def shfl(self, kind, val, off, clamp):
        tid = self.local.tid
        warp, lane = tid // 32, tid % 32
        slots, bar = self.slots[warp], self.warp_barriers[warp]
        try:  # (the two waits: _Grid)
            slots[lane] = val
            bar.wait()
            if kind == "bfly":
                src = lane ^ off
            elif kind == "up":
                src = lane - off if lane - off >= 0 else lane
            elif kind == "down":
                src = lane + off if lane + off <= 31 else lane
            else:
                src = off & 31
            out = slots[src]
            bar.wait()
            return out
        except threading.BrokenBarrierError:
            self.errors.append(f"shfl.{kind}: warp did not converge")
            return 0


def _mma(state, kinds, out, regs, f16_acc=False):
    """The warp-wide m16n8k16 (m16n8k32 for s8 and fp8, m16n8k8 for tf32) product, from
    every lane's fragments (PTX ISA layouts) of A's and B's `kinds` (two fp8 ones may differ).
    tf32 keeps the top 19 bits of each fp32 word. With `f16_acc` C and D are two f16x2 words
    per lane (row g, then row g + 8), and D is rounded to fp16 once per instruction. Lane 0
    computes the warp's D once; every lane then takes its part (the two waits: `_Grid`)."""
    tid = state.local.tid
    warp, lane = tid // 32, tid % 32
    slots, bar = state.slots[warp], state.warp_barriers[warp]
    try:
        slots[lane] = regs
        bar.wait()
        if lane == 0:
            state.products[warp] = _warp_product(slots, kinds, f16_acc)
        bar.wait()
        D = state.products[warp]
        g, t = lane // 4, lane % 4
        mine = (D[g, 2 * t], D[g, 2 * t + 1], D[g + 8, 2 * t], D[g + 8, 2 * t + 1])
        if f16_acc:
            mine = np.array(mine, np.float16).view(np.int32)
        for i, v in enumerate(mine):
            out[i] = int(v) if kinds[0] == "s8" or f16_acc else v
    except threading.BrokenBarrierError:
        state.errors.append("mma: warp did not converge")


def _warp_product(slots, kinds, f16_acc):
    """D = C + A @ B in float64 from the 32 lanes' registers (`slots[lane]`: A's four words, B's
    two, then C's four values, or two f16x2 words with `f16_acc`). Lane (g, t) holds A's rows g
    and g + 8 at k = per * t and per * t + K / 2, B's column g at those k, C's rows g and g + 8
    at columns 2t and 2t + 1."""
    import ml_dtypes
    elems = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "s8": np.int8, "tf32": np.float32,
             "e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}
    per = {"s8": 4, "e4m3": 4, "e5m2": 4, "tf32": 1}.get(kinds[0], 2)  # elements in one 32-bit register
    K = 8 * per
    words = np.array([[w & 0xFFFFFFFF for w in s[:6]] for s in slots], np.uint32)
    if kinds[0] == "tf32":
        words &= np.uint32(0xFFFFE000)

    def unpack(w, kind):  # (32, n) words -> (32, n, per) float64 elements, the low bits first
        raw = np.ascontiguousarray(w).view({4: np.int8, 2: np.uint16, 1: np.uint32}[per])
        return raw.view(elems[kind]).astype(np.float64).reshape(32, w.shape[1], per)
    lanes = np.arange(32)
    g, t = lanes // 4, lanes % 4
    k0, k1 = per * t, per * t + K // 2
    within = np.arange(per)
    A, B, C = np.zeros((16, K)), np.zeros((K, 8)), np.zeros((16, 8))
    rows = np.stack([g, g + 8, g, g + 8], axis=1)[:, :, None]
    A[rows, np.stack([k0, k0, k1, k1], axis=1)[:, :, None] + within] = unpack(words[:, :4], kinds[0])
    B[np.stack([k0, k1], axis=1)[:, :, None] + within, g[:, None, None]] = unpack(words[:, 4:6], kinds[1])
    if f16_acc:
        c = np.array([s[6:8] for s in slots], np.int32).view(np.float16).astype(np.float64)
    else:
        c = np.array([s[6:10] for s in slots], np.float64)
    for i, (dr, dc) in enumerate(((0, 0), (0, 1), (8, 0), (8, 1))):
        C[g + dr, 2 * t + dc] = c[:, i]
    D = C + A @ B
    return np.clip(D, -2.0 ** 31, 2.0 ** 31 - 1) if kinds[0] == "s8" else D  # `.satfinite`, as the mma


def _ldmatrix(state, count, out, addr, trans=False):
    """Every lane of the warp offers a row address; lane (g, t) takes word t of row g
    of each matrix (with `trans`, element g of rows 2t and 2t + 1)."""
    tid = state.local.tid
    warp, lane = tid // 32, tid % 32
    slots, bar = state.slots[warp], state.warp_barriers[warp]
    try:  # (the two waits: _Grid)
        slots[lane] = addr
        bar.wait()
        g, t = lane // 4, lane % 4
        if trans:
            def half(i, row):
                return ctypes.c_uint16.from_address(slots[8 * i + row] + 2 * g).value
            words = [half(i, 2 * t) | half(i, 2 * t + 1) << 16 for i in range(count)]
        else:
            words = [ctypes.c_uint32.from_address(slots[8 * i + g] + 4 * t).value for i in range(count)]
        bar.wait()
        for i, w in enumerate(words):
            out[i] = w
    except threading.BrokenBarrierError:
        state.errors.append("ldmatrix: warp did not converge")


def _host_math():
    f = {
        "ex2_approx_f": lambda x: _safe(lambda: 2.0 ** x), "lg2_approx_f": lambda x: _safe(lambda: math.log2(x)),
        "ex2_approx_ftz_f": lambda x: _safe(lambda: _flush(2.0 ** _flush(x))),
        "rsqrt_approx_f": lambda x: _safe(lambda: 1 / math.sqrt(x)), "sqrt_approx_f": lambda x: _safe(lambda: math.sqrt(x)),
        "rsqrt_approx_ftz_f": lambda x: _safe(lambda: _flush(1 / math.sqrt(_flush(x)))),
        "sqrt_approx_ftz_f": lambda x: _safe(lambda: _flush(math.sqrt(_flush(x)))),
    }
    one = {"exp": math.exp, "exp2": lambda x: 2.0 ** x, "log": math.log, "log2": math.log2, "log1p": math.log1p,
           "sin": math.sin, "cos": math.cos, "tan": math.tan, "tanh": math.tanh, "erf": math.erf,
           "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc, "rsqrt": lambda x: 1 / math.sqrt(x),
           "round": lambda x: np.copysign(np.floor(abs(x) + 0.5), x)}  # NumPy's: infinities stay infinite
    one.update({"expm1": math.expm1, "exp10": lambda x: 10.0 ** x, "log10": math.log10,
                "cbrt": lambda x: math.copysign(abs(x) ** (1 / 3), x), "rint": np.rint,
                "sinh": math.sinh, "cosh": math.cosh, "asin": math.asin, "acos": math.acos, "atan": math.atan,
                "asinh": math.asinh, "acosh": math.acosh, "atanh": math.atanh, "erfc": math.erfc,
                "erfinv": _erfinv, "lgamma": math.lgamma, "tgamma": math.gamma})
    two = {"pow": math.pow, "atan2": math.atan2, "hypot": math.hypot, "remainder": math.remainder,
           "fdim": lambda x, y: max(x - y, 0.0), "nextafter": math.nextafter}
    return f, one, two


_ARITY = {"add_r": 2, "mul_r": 2, "div_r": 2, "fma_r": 3, "sqrt_r": 1}
_CTYPES = {np.float32: ctypes.c_float, np.float64: ctypes.c_double, np.int32: ctypes.c_int32,
           np.uint32: ctypes.c_uint32, np.int64: ctypes.c_int64, np.uint64: ctypes.c_uint64}
_MODES = ("rn", "rz", "rd", "ru")


def _directed_rounding(sym) -> None:
    """Host versions of libdevice's explicitly rounded arithmetic and directed conversions to float,
    under the names lowering calls (ROUNDED_NAMES, CVT_NAMES): the interpreter's exact rounding
    (kiln.interpret, a layer above codegen, imported on use), so an emulated kernel gives its numbers."""
    from kiln.interpret import rounding
    for op, (f32_name, f64_name) in ROUNDED_NAMES.items():
        fn = getattr(rounding, op.removesuffix("_r"))  # add_r -> rounding.add
        for mode in _MODES:
            for name, t in ((f32_name, np.float32), (f64_name, np.float64)):
                sym(f"__nv_{name}_{mode}", _CTYPES[t], [_CTYPES[t]] * _ARITY[op],
                    lambda *xs, fn=fn, mode=mode, t=t: float(fn(*(t(x) for x in xs), mode)))
    for (source_name, result_name), name in CVT_NAMES.items():
        source, result = (SCALAR_TYPES[n].to_numpy().type for n in (source_name, result_name))
        for mode in _MODES:
            sym(f"__nv_{name}_{mode}", _CTYPES[result], [_CTYPES[source]],
                lambda x, mode=mode, source=source, result=result:
                    float(rounding.convert(np.asarray(x, source), np.dtype(result), mode)))


def _flush(x):
    """fp32 subnormals become zero (the `.ftz` instruction forms)."""
    return math.copysign(0.0, x) if abs(x) < 1.1754943508222875e-38 else x


def _erfinv(y):
    """Newton's method on erf (the host has no erfinv)."""
    if not -1 < y < 1:
        return math.copysign(math.inf, y) if abs(y) == 1 else math.nan
    x = 0.0
    for _ in range(60):
        x -= (math.erf(x) - y) / (2 / math.sqrt(math.pi) * math.exp(-x * x))
    return x


def _safe(fn):
    try:
        return float(fn())
    except (ValueError, ZeroDivisionError):
        return math.nan
    except OverflowError:
        return math.inf


# Routines the host backend calls where the host CPU has no instruction for a conversion: fp32 ->
# bf16 is a libcall (compiler-rt's __truncsfbf2) on x86 without AVX512-BF16 (an AMD EPYC: the JIT
# resolved it to address 0 and the kernel crashed), and so is fp64 -> fp16 (__truncdfhf2), which x86
# makes of llvm.fma.f16 (an fp64 fma, exact for fp16 operands, then narrowed). Defined in the module,
# round to nearest even; fp64 -> fp16 through fp32 rounded to odd (inexact marked in the last bit),
# so that it rounds once.
_HOST_ROUTINES = """
define bfloat @__truncsfbf2(float %x) {
  %bits = bitcast float %x to i32
  %magnitude = and i32 %bits, 2147483647
  %nan = icmp ugt i32 %magnitude, 2139095040
  %odd = lshr i32 %bits, 16
  %lsb = and i32 %odd, 1
  %bias = add i32 %lsb, 32767
  %rounded = add i32 %bits, %bias
  %high = lshr i32 %rounded, 16
  %quiet = or i32 %odd, 64
  %chosen = select i1 %nan, i32 %quiet, i32 %high
  %half = trunc i32 %chosen to i16
  %out = bitcast i16 %half to bfloat
  ret bfloat %out
}

define half @__truncdfhf2(double %x) {
  %nearest = fptrunc double %x to float
  %back = fpext float %nearest to double
  %exact = fcmp oeq double %back, %x
  %x_bits = bitcast double %x to i64
  %back_bits = bitcast double %back to i64
  %x_magnitude = and i64 %x_bits, 9223372036854775807
  %back_magnitude = and i64 %back_bits, 9223372036854775807
  %away = icmp ugt i64 %back_magnitude, %x_magnitude
  %bits = bitcast float %nearest to i32
  %below = sub i32 %bits, 1
  %toward_zero = select i1 %away, i32 %below, i32 %bits
  %odd = or i32 %toward_zero, 1
  %chosen = select i1 %exact, i32 %bits, i32 %odd
  %narrow = bitcast i32 %chosen to float
  %out = fptrunc float %narrow to half
  ret half %out
}
"""


def _portable_text(llir: str) -> str:
    text = re.sub(r'^target (triple|datalayout) = .*$', "", llir, flags=re.M)
    text = re.sub(r" addrspace\([13]\)", "", text).replace("ptx_kernel ", "")
    text = re.sub(r'syncscope\("[a-z]+"\) ', "", text)
    text = re.sub(r'@"?llvm\.nvvm\.([A-Za-z0-9_.]+)"?', lambda m: "@emu_" + m.group(1).replace(".", "_"), text)
    return text + _HOST_ROUTINES


# fp16 / bf16 scalar arguments: LLVM's type -> kiln's (their bits as the launcher packs them)
_HALVES = {"half": "fp16", "bfloat": "bf16"}


def _low_half(bits: int) -> float:
    """The fp32 whose bit pattern is `bits` (16 bits): a subnormal, exact through a Python float."""
    return float(np.uint32(bits).view(np.float32))


def _refuse_unprovided(name: str, text: str, provided: set) -> None:
    """A call to a function the host has no version of would jump to address 0 (a crash, not an
    error): refuse the kernel first. LLVM's own intrinsics are the host backend's to lower."""
    declared = re.findall(r'^declare [^@]*@"?([\w.$]+)"?\(', text, flags=re.M)
    missing = sorted(d for d in declared if not d.startswith("llvm.") and d not in provided)
    if missing:
        raise EmulationError(f"{name}: the CPU emulator has no host version of {', '.join(missing)}")


def _byte_bounds(array: np.ndarray) -> tuple[int, int]:
    """The first byte `array` reaches and the one past its last."""
    utils = getattr(np.lib, "array_utils", None)  # NumPy 2 moved it there
    return (utils.byte_bounds if utils is not None else np.byte_bounds)(array)


def _device_copies(arrays: list, alignment: int = 256) -> list:
    """The arrays among `arrays` copied to buffers aligned as CUDA allocations are (the kernel's vector
    accesses assume its pointers' divisibility, 16 bytes, and on the host an aligned vector store to a
    lesser address is a segfault; NumPy promises only the element's alignment); other arguments as they
    are. Arrays whose bytes overlap (an in-place kernel's input and output, views of one tensor) share
    one buffer at their offsets from each other, so a store through one is read through the other as on
    a GPU."""
    spans = sorted({_byte_bounds(a) for a in arrays if isinstance(a, np.ndarray) and a.nbytes})
    groups = []  # [first byte, end byte) of overlapping arrays, merged in address order
    for first, end in spans:
        if groups and first < groups[-1][1]:
            groups[-1][1] = max(groups[-1][1], end)
        else:
            groups.append([first, end])
    buffers = []
    for first, end in groups:
        raw = np.empty(end - first + alignment, np.uint8)
        start = -raw.ctypes.data % alignment
        buffers.append((first, end, raw[start:start + end - first]))

    def copy(a):
        if not isinstance(a, np.ndarray):
            return a
        if not a.nbytes:
            return np.empty(a.shape, a.dtype)
        low = _byte_bounds(a)[0]
        first, _, raw = next(b for b in buffers if b[0] <= low < b[1])
        return np.ndarray(a.shape, a.dtype, raw.data, a.ctypes.data - first, a.strides)
    device = [copy(a) for a in arrays]
    for a, d in zip(arrays, device):  # every array's bytes first, then the kernel runs on the copies
        if isinstance(a, np.ndarray):
            d[...] = a
    return device


def run_on_cpu(fn, grid, args, num_warps: int = 4, options: dict | None = None, target: str = "sm_90a",
               programs=None, moved: list | None = None) -> list[str]:
    """Run block IR `fn` over `grid` with `args` (NumPy arrays for pointers, Python
    numbers for scalars), built for `target` with compile `options` (num_stages, ...). Arrays
    are copied to aligned "device" buffers and back, so they are written in place as on a GPU.
    `programs`: the (x, y, z) program ids to run, in order (default: the whole grid). `moved` (a
    list) gets (a device buffer's address, its array's, the bytes) per array: what an address the
    kernel stored points to. Returns the device_print lines."""
    import llvmlite.binding as llvm
    opts = _options({**(options or {}), "num_warps": num_warps})
    _, llir, arg_layout, shared = lower_to_llvm(fn, parse_target(target), opts, portable=True)
    text = _portable_text(llir)
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    grid = tuple(grid) + (1,) * (3 - len(grid))
    state = _Grid(32 * num_warps)
    keep = []  # callbacks must outlive the run

    provided = set()

    def sym(name, restype, argtypes, py):
        cb = ctypes.CFUNCTYPE(restype, *argtypes)(py)
        keep.append(cb)
        provided.add(name)
        llvm.add_symbol(name, ctypes.cast(cb, ctypes.c_void_p).value)

    i32, f32, f64 = ctypes.c_int32, ctypes.c_float, ctypes.c_double
    sym("emu_read_ptx_sreg_tid_x", i32, [], lambda: state.local.tid)
    for k, axis in enumerate("xyz"):
        sym(f"emu_read_ptx_sreg_ctaid_{axis}", i32, [], lambda k=k: state.ctaid[k])
        sym(f"emu_read_ptx_sreg_nctaid_{axis}", i32, [], lambda k=k: state.nctaid[k])
    sym("emu_barrier0", None, [], state.barrier)
    for kind in ("bfly", "up", "down", "idx"):
        sym(f"emu_shfl_sync_{kind}_i32", i32, [i32, i32, i32, i32],
            lambda mask, val, off, clamp, kind=kind: state.shfl(kind, val, off, clamp))
    approx, one, two = _host_math()
    for name, py in approx.items():
        sym(f"emu_{name}", f32, [f32], py)
    for name, py in one.items():
        sym(f"__nv_{name}f", f32, [f32], lambda x, py=py: _safe(lambda: py(x)))
        sym(f"__nv_{name}", f64, [f64], lambda x, py=py: _safe(lambda: py(x)))
    for name, py in two.items():
        sym(f"__nv_{name}f", f32, [f32, f32], lambda x, y, py=py: _safe(lambda: py(x, y)))
        sym(f"__nv_{name}", f64, [f64, f64], lambda x, y, py=py: _safe(lambda: py(x, y)))
    _directed_rounding(sym)
    # emu_mma_<A's kind>[_<B's kind> where it differs][_f16 for fp16 accumulators], as lower/mma.py calls them
    fp8_pairs = [("e4m3", "e5m2"), ("e5m2", "e4m3")]
    accumulators = {"f16": f32, "bf16": f32, "s8": i32, "tf32": f32, "e4m3": f32, "e5m2": f32}
    for kinds in [(k, k) for k in accumulators] + fp8_pairs:
        acc = accumulators[kinds[0]]
        name = "emu_mma_" + "_".join(dict.fromkeys(kinds))
        sym(name, None, [ctypes.POINTER(acc)] + [i32] * 6 + [acc] * 4,
            lambda out, *regs, kinds=kinds: _mma(state, kinds, out, regs))
        if kinds[0] in ("f16", "e4m3", "e5m2"):
            sym(name + "_f16", None, [ctypes.POINTER(i32)] + [i32] * 8,
                lambda out, *regs, kinds=kinds: _mma(state, kinds, out, regs, f16_acc=True))
    for count in (2, 4):
        for trans in (False, True):
            sym(f"emu_ldmatrix{'_trans' if trans else ''}_x{count}", None,
                [ctypes.POINTER(ctypes.c_uint32), ctypes.c_void_p],
                lambda out, addr, count=count, trans=trans: _ldmatrix(state, count, out, addr, trans))
    sym("vprintf", i32, [ctypes.c_char_p, ctypes.c_void_p], lambda fmt, buf: state.printed.append(fmt.decode()) or 0)
    sym("__assertfail", None, [ctypes.c_char_p, ctypes.c_char_p, i32, ctypes.c_char_p, ctypes.c_int64],
        lambda msg, file, line, func, size: state.errors.append("assert: " + msg.decode()))
    smem = (ctypes.c_char * (max(16, shared) + ALIGN))()  # from an address aligned as declared
    llvm.add_symbol("kiln_smem", -(-ctypes.addressof(smem) // ALIGN) * ALIGN)
    _refuse_unprovided(fn.name, text, provided)

    mod = llvm.parse_assembly(text)
    mod.verify()
    tm = llvm.Target.from_default_triple().create_target_machine(
        cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(), opt=1)
    engine = llvm.create_mcjit_compiler(mod, tm)
    engine.finalize_object()
    device = _device_copies(args)
    if moved is not None:
        moved.extend((copy.ctypes.data, array.ctypes.data, array.nbytes) for array, copy in zip(args, device)
                     if isinstance(array, np.ndarray) and array.nbytes)
    ctypes_args, values = [], []
    for spec, value in zip(arg_layout, device):
        ty = spec["llvm_type"].split()[0]
        if ty in _HALVES:  # passed in an XMM register as a float is: its 16 bits the low half of one
            ctypes_args.append(ctypes.c_float)
            values.append(_low_half(half_float_bits(value, _HALVES[ty])))
            continue
        ctypes_args.append(_C[ty])
        values.append(value.ctypes.data if isinstance(value, np.ndarray) else value)
    kernel = ctypes.CFUNCTYPE(None, *ctypes_args)(engine.get_function_address(fn.name))

    def thread(tid):
        state.local.tid = tid
        try:
            kernel(*values)
        except Exception as e:  # (an argument ctypes cannot pass): the run's error, not a thread's stray traceback
            state.errors.append(f"{type(e).__name__}: {e}")

    state.nctaid = grid
    if programs is None:
        programs = [(x, y, z) for z in range(grid[2]) for y in range(grid[1]) for x in range(grid[0])]
    for pid in programs:
        state.ctaid = tuple(pid)
        workers = [threading.Thread(target=thread, args=(t,)) for t in range(state.threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        if state.errors:
            raise EmulationError("; ".join(sorted(set(state.errors))))
    for array, copy in zip(args, device):
        if isinstance(array, np.ndarray):
            array[...] = copy
    return state.printed
