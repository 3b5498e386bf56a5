"""Ahead-of-time link: one C entry point for the kernels kiln.tools.compile wrote (Triton's
`triton/tools/link.py`, the same command line and the same C functions).

    python -m kiln.tools.link matmul_fp16.*.h -o kernel      # writes kernel.h and kernel.c

The headers' compiles of one out name `<name>` are grouped by their constants and launch options
(an algorithm: `<name>_<constants>_warps<W>xstages<S>`); within one, the compiles differ by their
hints, and its dispatcher launches the most specialized compile whose hints the arguments meet
(`x % 16 == 0`, `x == 1`), or returns CUDA_ERROR_INVALID_VALUE. Then, per name:
`<name>(stream, args..., int algo_id)` (the algorithms in the order their headers came),
`<name>_default` (algorithm 0), `<name>_get_num_algos`, `load_<name>` and `unload_<name>`.
"""
from __future__ import annotations

from argparse import ArgumentParser
from pathlib import Path

from kiln.tools.aot import AotError, prototype, read_header, stream_prototype


def main(argv=None):
    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("headers", nargs="+", help="the .h files kiln.tools.compile wrote")
    parser.add_argument("--out", "-o", type=Path, required=True, help="the files' path, less .h and .c")
    parser.add_argument("--prefix", default="", help="a prefix for the dispatchers' names")
    args = parser.parse_args(argv)
    try:
        link([Path(h) for h in args.headers], args.out, args.prefix)
    except (AotError, OSError) as e:
        parser.exit(2, f"{parser.prog}: error: {e}\n")


def link(headers, out: Path, prefix: str = "") -> list:
    """Write `out`.h and `out`.c dispatching to the kernels of `headers`; the two paths."""
    kernels = []
    for header in headers:
        found = read_header(Path(header).read_text(), str(header))
        if not found:
            raise AotError(f"{header} holds no kiln-aot line (is it kiln.tools.compile's?)")
        kernels += found
    names = {}  # out name -> algorithm -> its kernels, in the headers' order
    for kernel in kernels:
        algos = names.setdefault(kernel.name, {})
        algos.setdefault(kernel.algo, []).append(kernel)
    for name, algos in names.items():
        first = _arguments(algos)
        for kernel in (k for group in algos.values() for k in group):
            if [a.ctype for a in kernel.args] != [a.ctype for a in first]:
                raise AotError(f"the compiles of {name} differ in their arguments: "
                               f"({prototype(first)}) and ({prototype(kernel.args)})")
    header, source = [_HEAD], [_HEAD]
    for name, algos in names.items():
        header.append(_declarations(prefix + name, algos))
        source.append(_definitions(prefix + name, algos))
    written = [out.with_suffix(".h"), out.with_suffix(".c")]
    written[0].write_text("\n".join(header))
    written[1].write_text("\n".join(source))
    return written


def _arguments(algos: dict) -> tuple:
    """The full signature a name's dispatchers take: its first compile's (all compiles have its types)."""
    return next(iter(algos.values()))[0].args


_HEAD = "/* linked by kiln.tools.link */\n#include <cuda.h>\n#include <stdint.h>\n"


def _declarations(name: str, algos: dict) -> str:
    args = _arguments(algos)
    lines = []
    for algo in algos:
        lines += [f"CUresult {name}_{algo}({stream_prototype(args)});",
                  f"void load_{name}_{algo}(void);", f"void unload_{name}_{algo}(void);"]
    lines += [f"int {name}_get_num_algos(void);",
              f"CUresult {name}_default({stream_prototype(args)});",
              f"CUresult {name}({stream_prototype(args)}, int algo_id);",
              f"void load_{name}(void);", f"void unload_{name}(void);"]
    return "\n".join(lines) + "\n"


def _definitions(name: str, algos: dict) -> str:
    args = _arguments(algos)
    names = ", ".join(["stream", *(a.name for a in args)])
    out = []
    for algo, kernels in algos.items():
        ordered = sorted(kernels, key=lambda k: -k.specializations)  # stable: ties keep the headers' order
        for k in ordered:
            out += [f"CUresult {k.function}({stream_prototype(k.passed)});",
                    f"void load_{k.function}(void);", f"void unload_{k.function}(void);"]
        out.append(f"\nCUresult {name}_{algo}({stream_prototype(args)}) {{")
        for k in ordered:
            conditions = [f"({a.name} % 16 == 0)" if a.hint == 16 else f"({a.name} == 1)"
                          for a in k.args if a.hint is not None]
            call = ", ".join(["stream", *(a.name for a in k.passed)])
            out.append(f"    if ({' && '.join(conditions) or '1'})\n        return {k.function}({call});")
        out.append("    return CUDA_ERROR_INVALID_VALUE;  /* no compile's hints hold for these arguments */\n}")
        for mode in ("load", "unload"):
            out.append(f"void {mode}_{name}_{algo}(void) {{")
            out += [f"    {mode}_{k.function}();" for k in ordered]
            out.append("}")
    table = ", ".join(f"{name}_{algo}" for algo in algos)
    out += [f"\ntypedef CUresult (*{name}_kernel_t)({stream_prototype(args)});",
            f"static const {name}_kernel_t {name}_kernels[] = {{{table}}};",
            f"\nint {name}_get_num_algos(void) {{\n    return (int)(sizeof {name}_kernels / sizeof {name}_kernels[0]);\n}}",
            f"\nCUresult {name}({stream_prototype(args)}, int algo_id) {{",
            f"    if (algo_id < 0 || algo_id >= {name}_get_num_algos()) return CUDA_ERROR_INVALID_VALUE;",
            f"    return {name}_kernels[algo_id]({names});\n}}",
            f"\nCUresult {name}_default({stream_prototype(args)}) {{\n    return {name}({names}, 0);\n}}"]
    for mode in ("load", "unload"):
        out.append(f"\nvoid {mode}_{name}(void) {{")
        out += [f"    {mode}_{name}_{algo}();" for algo in algos]
        out.append("}")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    main()
