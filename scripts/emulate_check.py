#!/usr/bin/env python3
"""kiln's builds of a test suite's kernels run on the CPU emulator and checked against the interpreter, on a
machine without a GPU: a codegen check on workloads kiln has not seen.

    python scripts/emulate_check.py run --out rows.jsonl -- tests/ops -x     # the suite, each launch checked
    python scripts/emulate_check.py report rows.jsonl                        # counts, then the worst rows

`run` runs pytest in a child under the drop-in's interpreter (`KILN_DROPIN=1 TRITON_INTERPRET=1`) with this
file's plugin. Each launch runs in the interpreter as usual (the suite's own checks still hold) and, from a
copy of its arguments taken before, as kiln builds it (`--target`, at the launch's num_warps and
num_stages) on the CPU emulator (kiln.codegen.emulate: the LLVM IR on host threads, mma and ldmatrix
emulated), in a forked child with a time limit. The arrays the two leave are compared element by element
(integers exactly; floats by the largest difference over the largest magnitude; an address a kernel stored
into an int64 tensor as the place it points to in the arguments). The emulator runs kiln's
portable build (no inline PTX): dots that would run on wgmma run on mma.sync there, so wgmma, TMA and the
rest of the PTX-only parts are left to the PTX checks of the CPU tier and to the GPU tier; a build that
still needs what the emulator lacks is a `refused` row, not a failure.
A launch of more than SAMPLED_PROGRAMS programs runs a sample of them, compared where they wrote (one with
atomics runs whole, up to ATOMIC_PROGRAMS: a sample would add up only its share); more than a few launches of
one specialization are not checked. Tensors over the same memory (an in-place kernel's input and output) are
views of one copy, as on a GPU. A host TensorDescriptor's TMA map goes in as 128 zero bytes: the portable build
loads the descriptor's blocks through its pieces' pointers.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from build_parity import in_child  # noqa: E402  (a launch's emulation in a forked child)

TIMEOUT_S = 180
SAMPLED_PROGRAMS = 16  # a larger grid runs these of its programs (a vector add's program emulates in ~4 ms, a 64x64x64
# tf32 tile's in ~0.6 s: the emulator's threads run every program of a launch, its mma products in Python)
LAUNCHES_PER_SPECIALIZATION = 2
ATOMIC_PROGRAMS = 256  # a launch with atomics runs whole up to this many programs (else it is not checked)
FLOAT_TOLERANCE = 1e-2  # largest difference over largest magnitude: the interpreter sums in another order


def _storage_views(args, moved=None) -> list:
    """`args` with each tensor as the bytes of its storage from its first element on (what the kernel may
    reach through it), copied once per storage: tensors over the same memory (an in-place kernel's input
    and output) are views of one copy, as they are of one allocation on a GPU. `moved` (a list) gets
    (the copy's address, the storage's, its bytes) for each storage."""
    import torch
    copies = {}
    out = []
    for a in args:
        if not isinstance(a, torch.Tensor):
            out.append(a)
            continue
        storage = a.untyped_storage()
        if storage.data_ptr() not in copies:
            whole = torch.empty(0, dtype=torch.uint8).set_(storage, 0, (storage.nbytes(),), (1,))
            copies[storage.data_ptr()] = whole.numpy().copy()
            if moved is not None:
                moved.append((copies[storage.data_ptr()].ctypes.data, storage.data_ptr(), storage.nbytes()))
        out.append(copies[storage.data_ptr()][a.storage_offset() * a.element_size():])
    return out


def _addresses_moved_back(got, *moves):
    """A 64-bit integer output with each value inside a buffer the emulator ran on (an address a kernel
    stored: flashinfer's grouped-GEMM arguments) moved to the same place in the argument itself, as the
    interpreter, which ran on the arguments, stored it. `moves`: lists of (from, to, bytes), applied in
    turn (the emulator's device buffers to this process's copies, the copies to the tensors)."""
    import torch
    if got.dtype != torch.int64 or not moves or not moves[0]:
        return got
    inside = torch.zeros_like(got, dtype=torch.bool)
    for start, _, nbytes in moves[0]:
        inside |= (got >= start) & (got < start + nbytes)
    out = got.clone()
    places = got[inside]
    for spans in moves:
        places = _shifted(places, spans)
    out[inside] = places
    return out


def _shifted(values, spans):
    """`values` inside one of `spans` ((from, to, bytes)) moved to the same place from `to` on; the rest as they are."""
    out = values.clone()
    for start, to, nbytes in spans:
        inside = (values >= start) & (values < start + nbytes)
        out[inside] = values[inside] - start + to
    return out


def _as_tensor(raw, like, bits=False):
    """`raw` (a storage's bytes from `like`'s first element on) as `like` (`bits`: its integers)."""
    import torch
    dtype = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[like.element_size()] if bits else like.dtype
    if like.numel() == 0:  # an empty storage copies to a NumPy array of stride 0, which torch cannot view
        return torch.empty(like.size(), dtype=dtype)
    return torch.from_numpy(raw).view(dtype).as_strided(like.size(), like.stride(), 0)


def _sample(grid) -> list | None:
    """The programs to emulate: all of a small grid; else the first and last few and some between."""
    every = [(x, y, z) for z in range(grid[2]) for y in range(grid[1]) for x in range(grid[0])]
    n = len(every)
    if n <= SAMPLED_PROGRAMS:
        return None
    between = SAMPLED_PROGRAMS - 6  # beside the first three and the last three, evenly over the rest
    picks = {0, 1, 2, n - 3, n - 2, n - 1} | {3 + j * (n - 6) // between for j in range(between)}
    return [every[i] for i in sorted(picks)]


def _emulated(kir, grid, args, options, target, programs):
    """The arrays after the run, and where the emulator kept each ((device, array, bytes))."""
    from kiln.codegen.emulate import run_on_cpu
    from kiln.ir import parse_function
    warps = options.get("num_warps", 4)
    rest = {k: v for k, v in options.items() if k != "num_warps"}
    moved: list = []
    run_on_cpu(parse_function(kir), grid, args, num_warps=warps, options=rest, target=target, programs=programs,
               moved=moved)
    return [a for a in args if hasattr(a, "dtype")], moved


def _difference(got, want, where=None) -> float:
    """0 where equal; for floats the largest difference over the largest magnitude of the whole output
    (inf: NaN or inf in one and not the other, or in other places); for integers the count of elements
    that differ. `where`: compare only these elements (those the programs emulated wrote). The
    magnitude is the whole output's, not only theirs: a later launch's elements left as an earlier one
    wrote them drop out of `where`, and a row of rounding noise compared alone read as a mismatch
    (native-sparse-attention's dq at the first token, where the exact gradient is zero)."""
    import torch
    whole = want
    if where is not None:
        got, want = got[where], want[where]
    if not want.dtype.is_floating_point:
        return float((got != want).sum())
    g, w, whole = got.double(), want.double(), whole.double()  # fp8 has no isnan / isfinite on the CPU
    if not torch.equal(torch.isnan(g), torch.isnan(w)) or not torch.equal(torch.isinf(g), torch.isinf(w)):
        return float("inf")
    finite = torch.isfinite(w)
    if not finite.any():
        return 0.0
    scale = max(float(whole[torch.isfinite(whole)].abs().max()), 1e-6)
    return float((g[finite] - w[finite]).abs().max()) / scale


def _check(kernel, grid, args, launch, out_path, target):
    """Run the launch in the interpreter (`launch()`), and from a copy of `args` on the emulator; a row."""
    import torch
    opts = {k: int(v) for k, v in dict(kernel.options).items() if k in ("num_warps", "num_stages") and v is not None}
    row = {"kernel": kernel.name, "opts": opts, "grid": list(grid)}
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    signature = kernel.asm["kir"].split("\n", 1)[0]  # the kernel's arguments, named and typed in order
    maps = {i for i, kind in enumerate(re.findall(r"%\w+: ([^\s,)]+)", signature)) if kind == "tensormap"}
    simple = all(isinstance(a, (torch.Tensor, bool, int, float)) or i in maps for i, a in enumerate(args))
    if not simple or any(t.device.type != "cpu" for t in tensors):
        launch()
        return dict(row, status="skipped", why="arguments other than CPU tensors and numbers")
    # a host descriptor's TMA map (the descriptor itself, at a launch): the emulator's portable build reads
    # the descriptor's blocks through its pieces' pointers and never the map
    import numpy as np
    moved: list = []
    emu_args = _storage_views([np.zeros(128, np.uint8) if i in maps else a for i, a in enumerate(args)], moved)
    arrays = [i for i, a in enumerate(emu_args) if hasattr(a, "dtype")]  # what the emulation gives back
    before = [emu_args[i].copy() for i in arrays if i not in maps]
    launch()
    programs = _sample(grid)
    if programs is not None and re.search(r"= atomic_(rmw|cas)\b", kernel.asm["kir"]):
        # programs adding into the same places: a sample would hold only its share of the sums
        if grid[0] * grid[1] * grid[2] > ATOMIC_PROGRAMS:
            return dict(row, status="skipped", why="atomics over more programs than the emulator runs whole")
        programs = None
    status, result = in_child(_emulated, kernel.asm["kir"], grid, emu_args, opts, target, programs, timeout=TIMEOUT_S)
    if status != "ok":
        refused = status == "error" and "has no host version" in (result or "")
        return dict(row, status="refused" if refused else status, why=(result or "").strip()[-300:])
    result, on_device = result
    result = [raw for i, raw in zip(arrays, result) if i not in maps]
    worst, where = 0.0, None
    tensor_names = [n for n, a in zip(re.findall(r'name = "([^"]+)"', signature), args) if isinstance(a, torch.Tensor)]
    for k, (t, raw, old) in enumerate(zip(tensors, result, before)):
        got = _addresses_moved_back(_as_tensor(raw, t), on_device, moved)
        # a sample of the programs: only what they wrote (where the emulator's copy changed)
        written = None if programs is None else _as_tensor(raw, t, bits=True) != _as_tensor(old, t, bits=True)
        d = _difference(got, t, written)
        if d > worst:
            worst, where = d, tensor_names[k] if k < len(tensor_names) else k
    bad = worst > (FLOAT_TOLERANCE if any(t.dtype.is_floating_point for t in tensors) else 0)
    return dict(row, status="mismatch" if bad else "ok", difference=worst, where=where,
                programs=len(programs) if programs else grid[0] * grid[1] * grid[2])


def _install(out_path: str, target: str) -> None:
    import importlib
    compiler = importlib.import_module("kiln.compiler")
    config = importlib.import_module("kiln.config")
    original = compiler.CompiledKernel._launch
    launches = Counter()

    def launch(self, grid, args, stream=None):
        if not config.interpret():
            return original(self, grid, args, stream)
        grid3 = tuple(grid) + (1,) * (3 - len(grid))
        key = hashlib.sha1((self.asm["kir"] + repr(sorted(dict(self.options).items()))).encode()).hexdigest()
        launches[key] += 1
        if launches[key] > LAUNCHES_PER_SPECIALIZATION:
            return original(self, grid, args, stream)
        try:
            row = _check(self, grid3, list(args), lambda: original(self, grid, args, stream), out_path, target)
        except Exception as e:  # a row lost, never the suite's run
            row = {"kernel": self.name, "status": "harness", "why": repr(e)[-300:]}
        with open(out_path, "a") as f:
            f.write(json.dumps(row, default=str) + "\n")

    compiler.CompiledKernel._launch = launch


def pytest_configure(config):
    out = os.environ.get("EMULATE_CHECK_OUT")
    if out:
        _install(out, os.environ.get("EMULATE_CHECK_TARGET", "sm_90a"))


def run(out: str, target: str, pytest_args: list[str]) -> int:
    open(out, "w").close()
    env = dict(os.environ, KILN_DROPIN="1", TRITON_INTERPRET="1", EMULATE_CHECK_OUT=os.path.abspath(out),
               EMULATE_CHECK_TARGET=target,
               PYTHONPATH=os.pathsep.join(filter(None, [os.path.dirname(os.path.abspath(__file__)),
                                                        os.environ.get("PYTHONPATH")])))
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "emulate_check", "-p", "no:cacheprovider",
                    *pytest_args], env=env)
    print(report(out))
    return 0


def report(path: str) -> str:
    rows = [json.loads(line) for line in open(path)]
    counts = Counter(r["status"] for r in rows)
    lines = [f"{len(rows)} launches: " + ", ".join(f"{n} {s}" for s, n in counts.most_common()), ""]
    bad = [r for r in rows if r["status"] in ("mismatch", "error", "crash", "timeout", "harness")]
    bad.sort(key=lambda r: -(r.get("difference") or 0))
    if bad:
        lines += ["| kernel | options | grid | status | difference (where) or why |", "|---|---|---|---|---|"]
        for r in bad:
            detail = f"{r['difference']:.3g} ({r.get('where')})" if "difference" in r else r.get("why", "")
            lines.append(f"| {r['kernel']} | {json.dumps(r.get('opts'))} | {r.get('grid')} | {r['status']} | "
                         f"{detail.replace('|', '/')[:200]} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run a test suite, each launch also on the emulator")
    r.add_argument("--out", required=True)
    r.add_argument("--target", default="sm_90a", help="the build to emulate (sm_90a, sm_80)")
    r.add_argument("pytest_args", nargs=argparse.REMAINDER)
    p = sub.add_parser("report", help="counts and the rows that differ")
    p.add_argument("rows")
    args = parser.parse_args(argv)
    if args.cmd == "run":
        return run(args.out, args.target, [a for a in args.pytest_args if a != "--"])
    print(report(args.rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
