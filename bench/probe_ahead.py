"""Wall time of compiling Inductor's foreach AdamW step for N parameters, with a big kernel's first
register-cap probe linked beside the first link (kiln.codegen.compiler._probe_ahead, the default)
and after it (the probe turned off), on this machine; the cubins must be the same.

    python bench/probe_ahead.py [--params 4,12,24] [--reps 3]

The kernel is bench/inductor_kernels.py's foreach step (4 parameters) with its first parameter's
branch repeated for N parameters, as Inductor writes the step of a model with N parameters. The
medians go to stdout as a markdown table (dated figures: bench/results/).
"""
from __future__ import annotations

import argparse
import hashlib
import os
import re
import statistics
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SIZES = (1048576, 1024, 3145728, 4096)  # the four parameters' element counts, in turn


def foreach_source(n: int) -> str:
    """The foreach AdamW step of `n` parameters (5 inputs and 3 outputs each), as kiln source."""
    text = open(os.path.join(HERE, "inductor_kernels.py")).read()
    first = text.index("    if pid < num_xblocks_0:\n")
    body = text[text.index("\n", first) + 1:text.index("    elif pid < num_xblocks_1:", first)]
    lines, inputs, outputs = ["    pid = tl.program_id(0)", "    XBLOCK: tl.constexpr = 1024"], [], []
    for i in range(n):
        before = f"num_xblocks_{i - 1} + " if i else ""
        lines.append(f"    num_xblocks_{i} = {before}tl.cdiv({SIZES[i % 4]}, XBLOCK)")
    for i in range(n):
        ins, outs = [f"in_ptr{5 * i + j}" for j in range(5)], [f"out_ptr{3 * i + j}" for j in range(3)]
        inputs, outputs = inputs + ins, outputs + outs
        branch = re.sub(r"\bin_ptr(\d)\b", lambda m: ins[int(m.group(1))], body)
        branch = re.sub(r"\bout_ptr(\d)\b", lambda m: outs[int(m.group(1))], branch)
        branch = re.sub(r"xnumel = \d+", f"xnumel = {SIZES[i % 4]}", branch)
        if i:
            branch = branch.replace("pid_offset = pid\n", f"pid_offset = pid - num_xblocks_{i - 1}\n", 1)
        lines += [f"    {'elif' if i else 'if'} pid < num_xblocks_{i}:", branch.rstrip("\n")]
    header = "import kiln as triton\nimport kiln.language as tl\nfrom kiln.language.extra import libdevice\n\n\n"
    return header + f"@triton.jit\ndef foreach_{n}({', '.join(inputs + outputs)}):\n" + "\n".join(lines) + "\n"


def measure(n: int, reps: int) -> dict:
    import importlib.util

    from kiln import language as tl
    from kiln.codegen import compile as compile_ir
    from kiln.codegen import compiler
    from kiln.compiler import compile_kernel

    path = os.path.join(tempfile.mkdtemp(prefix="kiln-probe-ahead-"), f"foreach_{n}.py")
    with open(path, "w") as f:
        f.write(foreach_source(n))
    spec = importlib.util.spec_from_file_location(f"foreach_{n}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn = getattr(module, f"foreach_{n}")
    ir = compile_kernel(fn, {a: (tl.pointer_type(tl.float32), {"divisibility": 16}) for a in fn.arg_names},
                        {"num_warps": 4, "num_stages": 1}).ir
    compile_ir(ir, "sm_90a", {"num_warps": 4})  # warm: libdevice, the guess of the first probe
    probe_ahead, row = compiler._probe_ahead, {"params": n}
    for label, ahead in (("beside", probe_ahead), ("after", lambda *args: None)) * 2:
        compiler._probe_ahead = ahead
        try:
            walls, kernel = [], None
            for _ in range(reps):
                start = time.perf_counter()
                kernel = compile_ir(ir, "sm_90a", {"num_warps": 4})
                walls.append(time.perf_counter() - start)
        finally:
            compiler._probe_ahead = probe_ahead
        row.setdefault(label, []).extend(walls)
        row[f"{label}_cubin"] = hashlib.sha256(kernel.cubin).hexdigest()
        row.update(ptx_kb=len(kernel.ptx) // 1024, links=kernel.metadata["links"])
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", default="4,12,24")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("KILN_DAEMON", "off")
    print(f"{os.cpu_count()} CPUs; wall ms per compile, medians of {2 * args.reps}\n")
    print("| parameters | PTX (KB) | probe beside the first link | probe after it | same cubin |")
    print("|---:|---:|---:|---:|---|")
    for n in (int(p) for p in args.params.split(",")):
        row = measure(n, args.reps)
        beside, after = (1000 * statistics.median(row[k]) for k in ("beside", "after"))
        print(f"| {n} | {row['ptx_kb']} | {beside:.0f} | {after:.0f} | {row['beside_cubin'] == row['after_cubin']} |")


if __name__ == "__main__":
    main()
