"""CPU time of PTX -> cubin alone, by assembler, on the same PTX (no GPU needed).

The link is the largest stage of a compile (bench/compile_speed.py: kiln's nvJitLink against the
ptxas binary Triton runs), and the two differ in CUDA version as well as in being a library or a
process. This separates the two: each kernel of bench/compile_speed.py is compiled once by kiln (and
by Triton with --triton-python), and each PTX is assembled for sm_90a by
- `nvjitlink`: the nvJitLink kiln links with (kiln.codegen.nvjitlink, no register cap);
- every `--nvjitlink-lib PATH`: another libnvJitLink.so (ctypes; a 12.x wheel's, say);
- every `--ptxas PATH`: a ptxas binary, run as a process (its CPU time counted, as Triton's is).
Each figure is the best of --reps assemblies, after one untimed.

    python bench/link_speed.py --triton-python /tmp/tv/bin/python --ptxas PATH [--nvjitlink-lib PATH]
"""
from __future__ import annotations

import argparse
import ctypes
import datetime
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import compile_speed  # noqa: E402  (its kernels, CPU clock and compiler environments)
import results_file  # noqa: E402
WRITE_PTX = """
import sys
sys.path.insert(0, {here!r})
import compile_speed
kernel = compile_speed.compile_one({compiler!r}, *compile_speed.KERNELS[{kernel!r}])
open({path!r}, "w").write(kernel.asm["ptx"])
"""
PTX_INPUT = 2  # nvJitLinkInputType's NVJITLINK_INPUT_PTX


def write_ptx(compiler: str, python: str, kernel: str, path: str, scratch: str) -> None:
    code = WRITE_PTX.format(here=HERE, compiler=compiler, kernel=kernel, path=path)
    subprocess.run([python, "-c", code], env=compile_speed.compiler_env(compiler, scratch), check=True,
                   capture_output=True, timeout=600)


def installed_nvjitlink():
    from kiln.codegen import nvjitlink
    from kiln.codegen.target import parse_target
    target = parse_target("sm_90a")
    return lambda ptx: nvjitlink.link_cubin(ptx, target)


def library_nvjitlink(path: str):
    """An assembly through the libnvJitLink at `path`: its newest versioned entry points
    (`__nvJitLinkCreate_12_8`: the names nvJitLink.h's macros call)."""
    lib = ctypes.CDLL(path)
    symbols = subprocess.run(["nm", "-D", "--defined-only", path], capture_output=True, text=True, check=True).stdout
    versions = sorted({tuple(map(int, v)) for v in re.findall(r"__nvJitLinkCreate_(\d+)_(\d+)", symbols)})
    if not versions:
        raise SystemExit(f"{path}: no __nvJitLinkCreate_<major>_<minor> entry point")
    suffix = "_%d_%d" % versions[-1]
    create, add, complete, size, destroy = (getattr(lib, f"__nvJitLink{name}{suffix}") for name in
                                            ("Create", "AddData", "Complete", "GetLinkedCubinSize", "Destroy"))

    def link(ptx: str):
        handle, data = ctypes.c_void_p(), ptx.encode()
        options = [b"-arch=sm_90a", b"-O3"]
        if create(ctypes.byref(handle), len(options), (ctypes.c_char_p * len(options))(*options)):
            raise RuntimeError(f"{path}: nvJitLinkCreate failed")
        try:
            if add(handle, PTX_INPUT, data, len(data), b"kernel.ptx") or complete(handle):
                raise RuntimeError(f"{path}: the PTX did not assemble")
            got = ctypes.c_size_t()
            size(handle, ctypes.byref(got))
            return got.value
        finally:
            destroy(ctypes.byref(handle))
    return link


def ptxas_binary(path: str, scratch: str):
    def link(ptx: str):
        source = os.path.join(scratch, "kernel.ptx")
        with open(source, "w") as f:
            f.write(ptx)
        subprocess.run([path, "-arch=sm_90a", "-O3", source, "-o", os.path.join(scratch, "kernel.cubin")],
                       check=True, capture_output=True)
    return link


def version_of(path: str) -> str:
    text = subprocess.run([path, "--version"], capture_output=True, text=True).stdout
    found = re.search(r"release ([\d.]+)", text)
    return found.group(1) if found else "?"


def best_ms(link, ptx: str, reps: int) -> float:
    link(ptx)
    best = float("inf")
    for _ in range(reps):
        started = compile_speed.cpu_ms()
        link(ptx)
        best = min(best, compile_speed.cpu_ms() - started)
    return best


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--triton-python", help="an interpreter with Triton 3.6 installed: its PTX too")
    parser.add_argument("--ptxas", action="append", default=[], help="a ptxas binary to time (repeatable)")
    parser.add_argument("--nvjitlink-lib", action="append", default=[], help="a libnvJitLink.so to time (repeatable)")
    parser.add_argument("--kernels", default="vector_add,inductor_pointwise,matmul_128x256x64,attention_fwd",
                        help=f"comma-separated, of: {', '.join(compile_speed.KERNELS)}")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out", default=os.path.join(HERE, "results"), help="where the dated figures go")
    args = parser.parse_args(argv)
    from cuda.bindings import nvjitlink
    assemblers = {"nvjitlink %d.%d (kiln's)" % nvjitlink.version(): installed_nvjitlink()}
    for path in args.nvjitlink_lib:
        assemblers[f"nvjitlink {os.path.basename(path)}"] = library_nvjitlink(path)
    sources = {"kiln": sys.executable, **({"triton": args.triton_python} if args.triton_python else {})}
    rows = []
    with tempfile.TemporaryDirectory(prefix="kiln-link-speed-") as scratch:
        for path in args.ptxas:
            assemblers[f"ptxas {version_of(path)}"] = ptxas_binary(path, scratch)
        for kernel in args.kernels.split(","):
            for compiler, python in sources.items():
                path = os.path.join(scratch, f"{compiler}-{kernel}.ptx")
                write_ptx(compiler, python, kernel, path, scratch)
                ptx = open(path).read()
                rows.append((kernel, compiler, len(ptx.splitlines()),
                             [best_ms(link, ptx, args.reps) for link in assemblers.values()]))
                print(rows[-1], flush=True)
    names = list(assemblers)
    lines = [f"# PTX -> cubin CPU time by assembler (sm_90a), {datetime.date.today()}", "",
             f"`python bench/link_speed.py` (best of {args.reps} after one untimed; a ptxas process's CPU counted)", "",
             "| kernel | PTX by | PTX lines | " + " | ".join(f"{n} ms" for n in names) + " |",
             "|---|---|---:|" + "---:|" * len(names)]
    lines += [f"| {k} | {c} | {n} | " + " | ".join(f"{ms:.0f}" for ms in times) + " |" for k, c, n, times in rows]
    markdown = "\n".join(lines) + "\n"
    print(markdown)
    figures = [{"kernel": k, "ptx_by": c, "ptx_lines": n, "ms": dict(zip(names, t))} for k, c, n, t in rows]
    path = results_file.save(args.out, results_file.stem(datetime.date.today().isoformat(), "cpu", "link-speed"),
                             figures, markdown)
    print(f"saved {path}.md")


if __name__ == "__main__":
    main()
