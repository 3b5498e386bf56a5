"""The PTX of a fixed set of kernels, written to a folder, so that a refactor of codegen can
show what it changed (or that it changed nothing) between two commits:

    python tests/codegen_corpus/ptx_diff.py --out /tmp/before          # on the old commit
    python tests/codegen_corpus/ptx_diff.py --out /tmp/after --against /tmp/before

The set: every kernel of this folder and of `lang/` for sm_80 and sm_90a, and bench/'s
tensor-core kernels (tutorial 03's matmul, tile and persistent; the W8A16 matmul; a matmul of an
A scaled in the loop; the FlashAttention-2 forward, causal and not, and its backward) for sm_90a
at the configs the benchmarks pick. The line tables' lines (`.loc`, `.file`, their labels and
section) are dropped (a moved source line is not a change), and so are LLVM's
call-sequence numbers (they count the process's earlier calls). `--against` lists the
files that differ, are new or are gone, and exits 1 if any do.

`--digests` writes instead the sha256 of each kernel's PTX to `ptx_digests.json`, with the
LLVM version that made it; tests/test_codegen_ptx_golden.py fails when a kernel's PTX no
longer matches its digest. After a codegen change that is meant (and measured), rewrite it:

    python tests/codegen_corpus/ptx_diff.py --digests
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import pathlib
import re
import sys
import tempfile

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
BENCH = HERE.parent.parent / "bench"
TARGETS = ("sm_80", "sm_90a")
DIGESTS = HERE / "ptx_digests.json"
REGENERATE = "python tests/codegen_corpus/ptx_diff.py --digests"


def corpus_kernels(targets=TARGETS):
    """(name, target, ptx) for every .kir kernel of the corpus."""
    from kiln.codegen import compile
    from kiln.ir import parse_function
    for path in sorted(HERE.glob("*.kir")) + sorted((HERE / "lang").glob("*.kir")):
        name = path.stem if path.parent == HERE else f"lang.{path.stem}"
        for target in targets:
            yield name, target, compile(parse_function(path.read_text()), target).ptx


def _bench_module():
    spec = importlib.util.spec_from_file_location("kiln_bench_kernels", BENCH / "kernels.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _reinterpret(array, dtype: str):
    import kiln
    import kiln.language as tl
    return kiln.reinterpret(array, getattr(tl, dtype))


def bench_kernels():
    """(name, "sm_90a", ptx) for bench/'s tensor-core kernels, built with `warmup` (no GPU)."""
    from kiln.tools.tensor_descriptor import TensorDescriptor
    k = _bench_module()
    n, z, h = 4096, 4, 32
    half = np.zeros((64, 64), np.float16)
    f32 = np.zeros(64, np.float32)
    mm = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3, grid=(1,), target="sm_90a")
    yield "bench.matmul", k.matmul_kernel.warmup(half, half, half, n, n, n, n, 1, n, 1, n, 1, **mm)
    yield "bench.persistent_matmul", k.persistent_matmul_kernel.warmup(half, half, half, n, n, n, n, 1, n, 1, n, 1,
                                                                       NUM_SMS=132, **mm)
    int8 = np.zeros((64, 64), np.int8)
    yield "bench.dequant_matmul", k.dequant_matmul_kernel.warmup(half, int8, half, half, n, n, n, n, n, n, n,
                                                                 GROUP_K=128, **{**mm, "BLOCK_N": 128})
    for a in (np.zeros((64, 64), np.float32), half):  # wgmma's A computed in the loop: (A * 0.5).to(fp16)
        yield f"bench.scaled_a_matmul.{a.dtype}", k.scaled_a_matmul_kernel.warmup(
            a, half, f32, n, n, n, SCALE=0.5, BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=3,
            grid=(1,), target="sm_90a")
    for dtype, bk in (("float16", 64), ("float8e4nv", 128)):  # out_dtype=float16: fp16 wgmma accumulators
        op = half if dtype == "float16" else _reinterpret(np.zeros((64, 64), np.uint8), dtype)
        yield f"bench.f16_acc_matmul.{dtype}", k.f16_acc_matmul_kernel.warmup(
            op, op, half, n, n, n, BLOCK_M=128, BLOCK_N=128, BLOCK_K=bk, num_warps=8, num_stages=3, grid=(1,),
            target="sm_90a")
    for dim in (64, 128):
        strides = (h * n * dim, n * dim, dim, 1) * 4
        for causal in (False, True):
            yield f"bench.attention_fwd.d{dim}{'.causal' if causal else ''}", k.attention_fwd_kernel.warmup(
                half, half, half, half, f32, 0.125, *strides, h, n, HEAD_DIM=dim, BLOCK_M=128, BLOCK_N=64,
                CAUSAL=causal, num_warps=8, num_stages=3, grid=(1,), target="sm_90a")
        rows = np.zeros((z * h * n, dim), np.float16)  # tutorial 06's forward on Hopper: host descriptors, TMA rings
        descs = [TensorDescriptor.from_tensor(rows, [block, dim]) for block in (128, 64, 64, 128)]
        for causal in (False, True):
            yield f"bench.attention_host_fwd.d{dim}{'.causal' if causal else ''}", \
                k.attention_host_descriptor_fwd_kernel.warmup(*descs, f32, 0.125, n, HEAD_DIM=dim, BLOCK_M=128,
                                                               BLOCK_N=64, CAUSAL=causal, num_warps=8, num_stages=3,
                                                               grid=(1,), target="sm_90a")
        # tutorial 06's fp8 forward: V transposed per head, P to the second wgmma from registers, at the
        # config bench/attention.py's autotuning picked on the H200 (2026-11-30)
        fp8 = np.zeros((z * h * n, dim), np.uint8)
        vt = np.zeros((z * h * dim, n), np.uint8)
        e5 = [_reinterpret(a, "float8e5") for a in (fp8, vt)]
        bm, bn = 128, (64 if dim == 64 else 128)
        fp8_descs = [TensorDescriptor.from_tensor(e5[0], [bm, dim]), TensorDescriptor.from_tensor(e5[0], [bn, dim]),
                     TensorDescriptor.from_tensor(e5[1], [dim, bn]), TensorDescriptor.from_tensor(e5[0], [bm, dim])]
        yield f"bench.attention_host_fp8_fwd.d{dim}", k.attention_host_descriptor_fp8_fwd_kernel.warmup(
            *fp8_descs, f32, 0.125, n, HEAD_DIM=dim, BLOCK_M=bm, BLOCK_N=bn, CAUSAL=False, num_warps=8, num_stages=3,
            grid=(1,), target="sm_90a")
        # (narrow, wide, warps) as bench/attention.py's autotuning picks them on the H200
        narrow, wide, warps = (32, 128, 4) if dim == 64 else (64, 128, 8)
        tuning = dict(HEAD_DIM=dim, CAUSAL=True, num_warps=warps, num_stages=3, grid=(1,), target="sm_90a")
        yield f"bench.attention_bwd_dkdv.d{dim}", k.attention_bwd_dkdv_kernel.warmup(
            half, half, half, half, half, half, f32, f32, 0.125, n, BLOCK_M=narrow, BLOCK_N=wide, **tuning)
        yield f"bench.attention_bwd_dq.d{dim}", k.attention_bwd_dq_kernel.warmup(
            half, half, half, half, half, f32, f32, 0.125, n, BLOCK_M=wide, BLOCK_N=narrow, **tuning)


def bench_memory_kernels():
    """The same for bench/'s memory-bound kernels whose shape ops the layout pass keeps in registers."""
    k = _bench_module()
    half, f32 = np.zeros((64, 64), np.float16), np.zeros(64, np.float32)
    yield "bench.rotary_interleaved", k.rotary_interleaved_kernel.warmup(half, f32, f32, half, 4096, HEADS=32, D=128,
                                                                         ROWS=32, grid=(1,), target="sm_90a")


# LLVM numbers its call sequences per process ("{ // callseq 3, 0"): the comment says how many
# calls the process compiled before, not what this kernel is
_CALLSEQ = re.compile(r"// callseq \d+(, \d+)?")


def without_locations(ptx: str) -> str:
    from kiln.codegen.lower.line_info import without_line_tables
    return _CALLSEQ.sub("// callseq", without_line_tables(ptx))


PARTS = (*TARGETS, "bench")  # the .kir kernels for each target; bench/'s ("bench." names)


def all_ptx(parts=PARTS) -> dict[str, str]:
    """{"<name>.<target>": PTX without locations} for the set's `parts`."""
    ptx = {f"{name}.{target}": without_locations(text)
           for name, target, text in corpus_kernels([t for t in TARGETS if t in parts])}
    if "bench" in parts:
        for kernels in (bench_kernels(), bench_memory_kernels()):
            ptx.update((f"{name}.sm_90a", without_locations(kernel.asm["ptx"])) for name, kernel in kernels)
    return ptx


def part_of(name: str) -> str:
    return "bench" if name.startswith("bench.") else name.rsplit(".", 1)[1]


def write(out: pathlib.Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name, ptx in all_ptx().items():
        (out / f"{name}.ptx").write_text(ptx)


def llvm_version() -> str:
    import llvmlite.binding
    return ".".join(map(str, llvmlite.binding.llvm_version_info))


def ptx_digests(parts=PARTS) -> dict[str, str]:
    """{"<name>.<target>": sha256 of its PTX}: a few kilobytes that stand for megabytes of PTX."""
    return {name: hashlib.sha256(ptx.encode()).hexdigest() for name, ptx in sorted(all_ptx(parts).items())}


def write_digests(path: pathlib.Path) -> int:
    digests = ptx_digests()
    record = {"llvm": llvm_version(), "note": f"PTX sha256 per kernel; regenerate: {REGENERATE}", "ptx": digests}
    # one entry a line, sorted, so that a regenerated file diffs kernel by kernel
    path.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    return len(digests)


def compare_digests(new: dict[str, str], old: dict[str, str]) -> list[str]:
    """`compare`'s answer for two {name: digest} maps."""
    changed = []
    for name in sorted(new.keys() | old.keys()):
        if name not in old:
            changed.append(f"new: {name}")
        elif name not in new:
            changed.append(f"gone: {name}")
        elif new[name] != old[name]:
            changed.append(f"changed: {name}")
    return changed


def compare(new: pathlib.Path, old: pathlib.Path) -> list[str]:
    names = {p.name for p in new.glob("*.ptx")} | {p.name for p in old.glob("*.ptx")}
    changed = []
    for name in sorted(names):
        a, b = new / name, old / name
        if not b.exists():
            changed.append(f"new: {name}")
        elif not a.exists():
            changed.append(f"gone: {name}")
        elif a.read_text() != b.read_text():
            changed.append(f"changed: {name}")
    return changed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--out", type=pathlib.Path, help="the folder to write the PTX to")
    mode.add_argument("--digests", nargs="?", const=DIGESTS, type=pathlib.Path,
                      help=f"write the PTX's digests to this file (default {DIGESTS.relative_to(HERE.parent.parent)})")
    parser.add_argument("--against", type=pathlib.Path, help="a folder written by an earlier run")
    args = parser.parse_args()
    if args.digests is not None and args.against is not None:
        parser.error("--against compares folders: use it with --out")
    # compiled here and now: not from a cache that an older compiler filled, nor by a daemon
    os.environ["KILN_CACHE_DIR"] = tempfile.mkdtemp(prefix="kiln-ptx-diff-")
    os.environ["KILN_DAEMON"] = "off"
    if args.digests is not None:
        print(f"{write_digests(args.digests)} digests written to {args.digests}")
        return 0
    write(args.out)
    if args.against is None:
        return 0
    changed = compare(args.out, args.against)
    print("\n".join(changed) if changed else f"no PTX changed ({len(list(args.out.glob('*.ptx')))} files)")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
