"""Run kiln's LLVM IR on the host CPU: one OS thread per GPU thread.

For tests on machines without a GPU. The kernel is lowered in portable mode (masked
accesses are branches, not inline PTX), its address spaces and NVVM intrinsics are
mapped to host equivalents (thread ids, `bar.sync`, warp shuffles, ldmatrix and mma are
native functions over POSIX barriers, emulate_collectives.py; approximations and libdevice
calls become host math), and it is JIT-compiled for the host with llvmlite. CTAs run one after
another, on one set of threads.
This checks the lowering's semantics (layouts, reductions, scans, conversions, dot);
the PTX-only parts (inline asm) are checked by ptxas in the PTX tier instead.
Buggy kernels can crash the process: run it in a child process in tests.
"""
from __future__ import annotations

import ctypes
import math
import re

import numpy as np

from kiln.ir.types import SCALAR_TYPES, half_float_bits

from .analysis.shared_buffers import ALIGN
from .compiler import _options, lower_to_llvm
from .emulate_collectives import STALL_S, Collectives
from .lower.elementwise import CVT_NAMES, ROUNDED_NAMES
from .target import parse_target

_C = {"i1": ctypes.c_bool, "i8": ctypes.c_int8, "i16": ctypes.c_int16, "i32": ctypes.c_int32,
      "i64": ctypes.c_int64, "float": ctypes.c_float, "double": ctypes.c_double, "ptr": ctypes.c_void_p}


class EmulationError(RuntimeError):
    pass


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
    `programs`: the (x, y, z) program ids to run, in order (default: the whole grid); a program's error
    is raised once every program ran. `moved` (a
    list) gets (a device buffer's address, its array's, the bytes) per array: what an address the
    kernel stored points to. Returns the device_print lines."""
    import llvmlite.binding as llvm
    opts = _options({**(options or {}), "num_warps": num_warps})
    _, llir, arg_layout, shared = lower_to_llvm(fn, parse_target(target), opts, portable=True)
    text = _portable_text(llir)
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    grid = tuple(grid) + (1,) * (3 - len(grid))
    errors: list[str] = []
    printed: list[str] = []  # (device_print's lines)
    collectives = Collectives(32 * num_warps, errors, grid)
    text, runtime = collectives.definitions(text)
    keep = []  # callbacks must outlive the run

    provided = set()

    def sym(name, restype, argtypes, py):
        cb = ctypes.CFUNCTYPE(restype, *argtypes)(py)
        keep.append(cb)
        provided.add(name)
        llvm.add_symbol(name, ctypes.cast(cb, ctypes.c_void_p).value)

    i32, f32, f64 = ctypes.c_int32, ctypes.c_float, ctypes.c_double
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
    sym("emu_warp_product", None, [i32, i32], collectives.warp_product)
    for name, address in collectives.symbols().items():
        llvm.add_symbol(name, address)
    sym("vprintf", i32, [ctypes.c_char_p, ctypes.c_void_p], lambda fmt, buf: printed.append(fmt.decode()) or 0)
    sym("__assertfail", None, [ctypes.c_char_p, ctypes.c_char_p, i32, ctypes.c_char_p, ctypes.c_int64],
        lambda msg, file, line, func, size: errors.append("assert: " + msg.decode()))
    smem = (ctypes.c_char * (max(16, shared) + ALIGN))()  # from an address aligned as declared
    llvm.add_symbol("kiln_smem", -(-ctypes.addressof(smem) // ALIGN) * ALIGN)
    _refuse_unprovided(fn.name, text, provided | runtime)

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
        try:
            kernel(*values)
        except Exception as e:  # (an argument ctypes cannot pass): the run's error, not a thread's stray traceback
            errors.append(f"{type(e).__name__}: {e}")

    if programs is None:
        programs = [(x, y, z) for z in range(grid[2]) for y in range(grid[1]) for x in range(grid[0])]
    enter = ctypes.CFUNCTYPE(None, *[ctypes.c_int32] * 4)(engine.get_function_address("emu_enter_program"))
    programs = [tuple(pid) for pid in programs]
    workers = [collectives.start(thread, t, programs, enter) for t in range(collectives.threads)]
    if not collectives.join(workers, keep=(engine, keep, smem, device)):
        errors.append(f"programs {collectives.running(workers)}: threads waited at a barrier {STALL_S:.0f} s "
                      "that not every thread reached (a divergent bar.sync or warp collective?)")
    if errors:
        raise EmulationError("; ".join(sorted(set(errors))))
    for array, copy in zip(args, device):
        if isinstance(array, np.ndarray):
            array[...] = copy
    return printed
