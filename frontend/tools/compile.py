"""Ahead-of-time compile: one specialization of a kernel to C source that embeds its binary
(Triton's `triton/tools/compile.py`, the same command line and the same C functions).

    python -m kiln.tools.compile kernel.py -n kernel -s "*fp32:16, i32, 1024" -g "N/1024, 1, 1" -w 4 -o out
    # under the drop-in: python $(python -c "import triton.tools, sys; sys.stdout.write(triton.tools.__path__[0])")/compile.py ...

The file at `path` is run (from its own folder, as an import) and its @jit function `kernel_name`
compiled for `--target` (`cuda:90:32` or `sm_90a`; by default this machine's GPU) as the signature
spells it: one entry per parameter, a type (`*fp16`, `i32`, ...) with an optional hint, `:16`
(divisible by 16) or `:1` (equal to 1: a constant, left out of the C function), or a constexpr's
value. The kernel is built as written: no argument the compiler derives (TMA maps of pointer loads,
a persistent grid), so C launches it with exactly its own arguments. Out come `<out>.<hash>_<suffix>.c`
and `.h`: `CUresult <out>_<hash>_<suffix>(CUstream stream, <arguments>)` launches it on the grid
`--grid` computes (C expressions of the arguments and integer constexprs), loading the module at the
first launch; `load_...` and `unload_...` do so by hand. kiln.tools.link joins such files into one
dispatcher.
"""
from __future__ import annotations

import hashlib
import importlib.util
import re
import sys
from argparse import ArgumentParser
from dataclasses import dataclass
from pathlib import Path

from kiln.tools.aot import C_BYTES, C_TYPES, HALF_ROUNDING, AotArg, AotError, AotKernel, c_type, c_word
from kiln.tools.kernel_c import RESERVED, c_header, c_source, grid_code


@dataclass
class CompileArgs:
    """The command line's arguments (Triton's class of the name, for callers of `compile_kernel`)."""
    path: str = ""
    kernel_name: str = ""
    signature: str = ""
    grid: str = ""
    target: str | None = None
    num_warps: int = 1
    num_stages: int = 3
    out_name: str | None = None
    out_path: Path | None = None


@dataclass(frozen=True)
class Entry:
    """One signature entry: a parameter's type and hint, or a constexpr's value."""
    type: str | None = None
    hint: int | None = None
    value: object = None


def main(argv=None):
    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", help="Python source holding the kernel (it is run, from its folder)")
    parser.add_argument("--kernel-name", "-n", required=True, help="the @jit function's name in that file")
    parser.add_argument("--target", "-t", default=None,
                        help="cuda:<capability>:<warp size> (cuda:90:32) or a kiln target (sm_90a); default: this GPU")
    parser.add_argument("--num-warps", "-w", type=int, default=1)
    parser.add_argument("--num-stages", "-ns", type=int, default=3)
    parser.add_argument("--out-name", "-on", default=None, help="the C functions' name (default: the kernel's)")
    parser.add_argument("--out-path", "-o", type=Path, default=None, help="the files' path, less suffixes")
    parser.add_argument("--signature", "-s", required=True, help='"*fp32:16, i32, 1024": types, hints, constexprs')
    parser.add_argument("--grid", "-g", required=True, help='"M/16, N/16, 1": three C expressions')
    args = parser.parse_args(argv)
    from kiln.dropin import hook
    from kiln.errors import KilnError
    if "triton" not in sys.modules:
        hook.activate()  # the kernel file's `import triton` is kiln, as under the drop-in
    try:
        compile_kernel(CompileArgs(**vars(args)))
    except (AotError, KilnError) as e:  # the signature's or the kernel's fault: said, with no traceback
        parser.exit(2, f"{parser.prog}: error: {e}\n")


def compile_kernel(args: CompileArgs):
    """Compile as `args` say; (the launch function's name, [the .c and .h written])."""
    from kiln.cache.metadata import launched_warps
    from kiln.compiler import compile_kernel as build
    from kiln.dropin.compile import ASTSource
    from kiln.signatures import Declared, SignatureError

    out_name = args.out_name or args.kernel_name
    if not re.fullmatch(r"[A-Za-z_]\w*", out_name or ""):
        raise AotError(f"the out name {out_name!r} is no C identifier")
    out_path = Path(args.out_path) if args.out_path else Path(out_name)
    fn = _kernel(Path(args.path), args.kernel_name)
    texts = [s.strip() for s in args.signature.split(",")]
    if len(texts) > len(fn.arg_names):
        raise AotError(f"the signature has {len(texts)} entries, {fn.__name__} {len(fn.arg_names)} parameters")
    entries = [parse_entry(text, name) for text, name in zip(texts, fn.arg_names)]
    grid = [g.strip() for g in args.grid.split(",")]
    if len(grid) != 3:
        raise AotError(f"the grid {args.grid!r} is not three expressions")

    signature, constexprs, attrs, full = {}, {}, {}, []
    for i, (name, entry) in enumerate(zip(fn.arg_names, entries)):
        if entry.type is None:
            signature[name], constexprs[name] = "constexpr", entry.value
            continue
        if entry.hint == 1:
            signature[name], constexprs[name] = "constexpr", 1
        else:
            signature[name] = entry.type
            if entry.hint == 16:
                attrs[(i,)] = [["tt.divisibility", 16]]
        if name in RESERVED:
            raise AotError(f"{fn.__name__}: an argument named {name!r} would clash with a C word of the launch")
        full.append(AotArg(c_type(entry.type), name, entry.hint))
    # the constexprs' values, then the arguments specialized to 1 (Triton's order: its names of algorithms)
    constants = {n: constexprs[n] for n, e in zip(fn.arg_names, entries) if e.type is None}
    constants.update((a.name, 1) for a in full if a.hint == 1)
    grid_lines = grid_code(grid, full, constants)  # checked before the compile
    src = ASTSource(fn, signature, constexprs, attrs)
    try:
        params, options = Declared(fn, src.declared_values({"num_warps": args.num_warps,
                                                            "num_stages": args.num_stages})).params_and_options()
    except SignatureError as e:
        raise AotError(f"{fn.__name__}: {e}") from None
    kernel = build(fn, params, options, name=fn.__name__)
    binary = kernel.build_as_written(_target(args.target))

    runtime = [a for a in full if a.hint != 1]
    types = [entries[fn.arg_names.index(a.name)].type for a in runtime]
    entry_name = _check_abi(fn.__name__, kernel.arg_types, binary, runtime, types)
    meta = f"warps{args.num_warps}xstages{args.num_stages}"
    sig_hash = hashlib.sha256(" ".join(texts + [meta]).encode()).hexdigest()[:8]
    suffix = "".join(f"{i}{'c' if e.hint == 1 else 'd'}" for i, e in enumerate(entries) if e.hint is not None)
    algo = "_".join(["x".join(c_word(v) for v in constants.values()), meta])
    aot = AotKernel(out_name, sig_hash, suffix, algo, tuple(full))
    doc = [f"{k}={v}" for k, v in constants.items()] + [f"num_warps={args.num_warps}", f"num_stages={args.num_stages}"]
    source = c_source(aot, entry_name, binary.cubin, binary.ptx, binary.metadata["shared"],
                      32 * launched_warps(binary.metadata), grid_lines, types, doc)
    written = []
    for ext, text in ((".c", source), (".h", c_header(aot, doc))):
        path = out_path.with_suffix(f".{sig_hash}_{suffix}{ext}")
        path.write_text(text)
        written.append(path)
    return aot.function, written


def parse_entry(text: str, name: str) -> Entry:
    """One signature entry for parameter `name`: `*fp16:16`, `i32:1`, `i64`, `1024`, `0.5`, `True`."""
    if text in ("True", "False"):
        return Entry(value=text == "True")
    for convert in (int, float):
        try:
            return Entry(value=convert(text))
        except ValueError:
            pass
    kind, _, hint_text = text.partition(":")
    kind = kind.strip()
    if not kind.startswith("*") and kind not in C_TYPES:
        raise AotError(f"{name}: {text!r} is neither a type ({', '.join(C_TYPES)} or *T) nor a constexpr value")
    if not hint_text:
        return Entry(kind)
    if hint_text.strip() not in ("1", "16"):
        raise AotError(f"{name}: {text!r}: the hints are 1 and 16")
    hint = int(hint_text)
    if hint == 1 and kind[0] not in "iu":
        raise AotError(f"{name}: {text!r}: only an integer can be specialized to 1")
    if hint == 16 and kind[0] not in "iu*":
        raise AotError(f"{name}: {text!r}: a float has no divisibility")
    return Entry(kind, hint)


def _kernel(path: Path, name: str):
    """The @jit function `name` of the Python file at `path`, run as a module from its folder
    (an autotuner's or heuristics' wrapper unwrapped to its kernel)."""
    from kiln.jit import JITFunction
    if not path.is_file():
        raise AotError(f"no file {path}")
    sys.path.insert(0, str(path.resolve().parent))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn = getattr(module, name, None)
    while fn is not None and not isinstance(fn, JITFunction) and hasattr(fn, "fn"):
        fn = fn.fn
    if not isinstance(fn, JITFunction):
        raise AotError(f"{path} has no kiln @jit function {name!r} (a Triton kernel compiles under kiln's drop-in: "
                       "KILN_DROPIN=1)")
    return fn


def _target(text: str | None) -> str:
    """kiln's target name for `--target`: `cuda:90:32`, `sm_90a`, or (None) this machine's GPU."""
    from kiln.codegen.target import target_name
    if text is None:
        from kiln.runtime import driver
        if not driver.is_available():
            raise AotError("no GPU here to compile for: name the target, --target cuda:90:32")
        return driver.current_compile_target()
    if re.fullmatch(r"sm_\d+[af]?", text):
        return text
    parts = text.split(":")
    if len(parts) != 3 or parts[0] != "cuda" or not parts[1].isdigit() or parts[2] != "32":
        raise AotError(f"the target {text!r}: kiln compiles for cuda:<capability>:32 (cuda:90:32) or sm_XY")
    return target_name(int(parts[1]))


def _check_abi(name, arg_types, binary, runtime, types) -> str:
    """The kernel's entry name, once its parameters are found to be the C function's arguments,
    one for one and each as wide; else an AotError saying what the C launch could not pass."""
    from kiln.dropin.static_abi import _CLUSTER, ptx_entry
    from kiln.ir.types import tensormap
    from kiln.runtime.launcher import _CTYPES
    import ctypes

    args = binary.metadata.get("args", ())
    if any(isinstance(a, dict) and a.get("tma_box") for a in args) or tensormap in arg_types:
        raise AotError(f"{name} takes a tensor descriptor: ahead-of-time kernels take pointers and scalars")
    if len(args) > len(arg_types):
        raise AotError(f"{name} needs arguments its launch derives (global scratch): not ahead of time")
    entry = ptx_entry(binary.ptx)
    if isinstance(entry, str):
        raise AotError(f"{name}: {entry}")
    entry_name, params, directives = entry
    if any(word in directives for word in _CLUSTER):
        raise AotError(f"{name} is launched in clusters: not ahead of time")
    if not (len(params) == len(arg_types) == len(runtime)):
        raise AotError(f"{name}: the kernel takes {len(params)} parameters, the signature gives {len(runtime)}")
    for a, ty, kiln_type, param in zip(runtime, types, arg_types, params):
        if kiln_type.is_ptr() != ty.startswith("*"):
            raise AotError(f"{name}: argument {a.name} is {ty}, the kernel takes {kiln_type}")
        width = 8 if kiln_type.is_ptr() else ctypes.sizeof(_CTYPES[kiln_type.name])
        passed = 2 if ty in HALF_ROUNDING else C_BYTES[a.ctype]
        if width != passed or param[1] != width:
            raise AotError(f"{name}: argument {a.name} ({ty}) is {passed} bytes, the kernel reads {param[1]}")
    return entry_name


if __name__ == "__main__":
    main()
