"""What a kernel's sm_90a build does, counted on a CPU: its block IR (a `.kir` file, as bench/fla_stand_in.py
keeps them with KERNELS_OUT) built by kiln's compiler, then, in its PTX, barriers, shared-memory stores and
loads, ldmatrix / stmatrix, shuffles, mma.sync / wgmma and async copies, for the whole kernel and for each loop
(a label and the branch back to it), with registers and shared bytes. A check between GPU runs that a codegen
change did to a kernel what it was meant to (fla's kkt_solve: stores and barriers of its block merge).

    python bench/ptx_counts.py DIR/kernel.kir [--warps N] [--stages N] [--ptx OUT.ptx]

Options default to the `.json` beside the `.kir`, else 4 warps and 3 stages.
"""
import argparse
import collections
import json
import os
import re

from kiln.codegen.compiler import compile
from kiln.ir.parser import parse_function

COUNTED = ("bar.sync", "st.shared", "ld.shared", "ldmatrix", "stmatrix", "shfl.sync", "mma.sync", "wgmma.mma_async",
           "cp.async.bulk.tensor", "cp.async.ca", "cp.async.cg", "mbarrier.try_wait")


def counts(lines) -> collections.Counter:
    found = collections.Counter()
    for line in lines:
        text = line.strip()
        if not text or text.startswith(("//", ".loc", ".file")) or text.endswith(":"):
            continue  # (the line tables' directives are no instructions)
        found["instructions"] += 1
        for name in COUNTED:
            if name in text:
                found[name] += 1
    return found


def loops(ptx: str):
    """(first line, last line) of each loop: a label and a later branch back to it."""
    lines = ptx.splitlines()
    labels = {m.group(1): i for i, line in enumerate(lines) for m in [re.match(r"^(\$\w+):", line)] if m}
    return [(labels[m.group(1)], i) for i, line in enumerate(lines)
            for m in [re.search(r"bra(?:\.uni)?\s+(\$\w+);", line)] if m and labels.get(m.group(1), i) < i]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kir")
    parser.add_argument("--warps", type=int)
    parser.add_argument("--stages", type=int)
    parser.add_argument("--ptx", help="write the PTX here too")
    args = parser.parse_args()
    options = {"num_warps": 4, "num_stages": 3}
    beside = os.path.splitext(args.kir)[0] + ".json"
    if os.path.exists(beside):
        with open(beside) as f:
            options.update({k: v for k, v in json.load(f).items() if k in options})
    options.update({k: v for k, v in (("num_warps", args.warps), ("num_stages", args.stages)) if v is not None})
    with open(args.kir) as f:
        built = compile(parse_function(f.read()), "sm_90a", options)
    if args.ptx:
        with open(args.ptx, "w") as f:
            f.write(built.ptx)
    lines = built.ptx.splitlines()
    print(f"{built.name}: {options}, {built.n_regs} registers, {built.n_spills} spilled, "
          f"{built.metadata['shared']} bytes of shared memory")
    print("kernel:", json.dumps(counts(lines)))
    for first, last in loops(built.ptx):
        print(f"loop at PTX lines {first}-{last}:", json.dumps(counts(lines[first:last + 1])))


if __name__ == "__main__":
    main()
