#!/usr/bin/env python3
"""Registers, shared memory and CTAs per SM of kiln's builds against upstream Triton's, for every kernel a
test suite launches, on a machine without a GPU (a static check of parity: occupancy, not speed).

    # 1. the suite's kernels, as the interpreter builds them (nothing is run: launches build only)
    python scripts/build_parity.py record --out specs.jsonl -- tests/ops -x
    # 2. each built by kiln for sm_90a (nvJitLink's register and spill counts)
    python scripts/build_parity.py kiln specs.jsonl kiln.jsonl
    # 3. each built by Triton for sm_90a, in a Python where `import triton` is Triton (a venv with its wheel)
    /path/to/venv/bin/python scripts/build_parity.py triton specs.jsonl triton.jsonl
    # 4. the table: kernels where kiln's build holds fewer CTAs per SM than Triton's first
    python scripts/build_parity.py report kiln.jsonl triton.jsonl
    # what a change of kiln's did to the same builds: step 2 with an older commit's kiln (laid out in a
    # folder by `source`, first on PYTHONPATH), then with this tree's, then the builds that differ
    python scripts/build_parity.py source a5ff492 /tmp/kiln-before
    PYTHONPATH=/tmp/kiln-before python scripts/build_parity.py kiln specs.jsonl before.jsonl
    python scripts/build_parity.py kiln specs.jsonl after.jsonl
    python scripts/build_parity.py changes before.jsonl after.jsonl

`record` runs pytest in a child under the drop-in's interpreter (`KILN_DROPIN=1 TRITON_INTERPRET=1`) with
this file's plugin: each specialization a launch compiles is written down (its block IR, options, and the
arguments it was specialized on: dtypes, shapes, strides, alignment, scalar values, host TensorDescriptors
over such a tensor) and the launch itself does nothing, so a suite's numerics fail and every kernel it
reaches is still built, in seconds. `triton` rebuilds each from its Python source (`module`, `qualname`)
with tensors (and descriptors over them) of those dtypes, shapes and alignments, under a driver that names
sm_90a (Triton 3.6 compiles without a GPU that way); registers, stack and shared memory come from the cubin
(`cuobjdump --dump-resource-usage`, the wheel's own).
Each build runs in a forked child with a time limit, so a crash or a hang is one row.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing as mp
import os
import re
import subprocess
import sys
import tempfile
import time
import traceback

OPTIONS = ("num_warps", "num_stages", "maxnreg", "enable_fp_fusion")
TIMEOUT_S = 300


# --- record (the pytest plugin this file also is: `-p build_parity`) --------------------------------

def _describe(v):
    """An argument as JSON: what a rebuild needs of it."""
    if hasattr(v, "data_ptr") and hasattr(v, "dtype") and hasattr(v, "shape") and hasattr(v, "stride"):
        return {"tensor": str(v.dtype), "shape": list(v.shape), "stride": list(v.stride()),
                "align16": v.data_ptr() % 16 == 0}
    if v is None or isinstance(v, (bool, int, float, str)):
        return {"value": v}
    if isinstance(v, (tuple, list)):
        return {"tuple": [_describe(x) for x in v]}
    if "dtype" in type(v).__name__:
        return {"dtype": str(v)}
    if hasattr(v, "value"):  # a constexpr
        return _describe(v.value)
    if type(v).__name__ == "TensorDescriptor" and hasattr(v, "block_shape"):  # a host descriptor
        return {"descriptor": {"base": _describe(v.base), "shape": list(v.shape), "strides": list(v.strides),
                               "block_shape": list(v.block_shape), "padding": getattr(v, "padding", "zero")}}
    return {"unknown": type(v).__name__}


def _install_recorder(out_path: str) -> None:
    import importlib
    jit = importlib.import_module("kiln.jit")
    importlib.import_module("kiln.interpret").run = lambda *a, **k: None  # launches build, run nothing
    seen = set()
    original = jit.JITFunction._compiled

    def compiled(self, key, values, options, warmup, kernel):
        try:
            kir = kernel.asm["kir"]
            opts = {k: v for k, v in dict(kernel.options).items() if k in OPTIONS and v is not None}
            digest = hashlib.sha1((kir + json.dumps(opts, sort_keys=True)).encode()).hexdigest()
            if digest not in seen:
                seen.add(digest)
                call = {"module": self.fn.__module__, "qualname": self.fn.__qualname__,
                        "args": dict(zip(self.arg_names, [_describe(v) for v in values]))}
                with open(out_path, "a") as f:
                    f.write(json.dumps({"hash": digest, "kernel": self.__name__, "kir": kir, "opts": opts,
                                        "call": call}, default=str) + "\n")
        except Exception as e:  # a record lost, never the suite's run
            print(f"build_parity: not recorded: {e!r}", file=sys.stderr)
        return original(self, key, values, options, warmup, kernel)

    jit.JITFunction._compiled = compiled


def pytest_configure(config):
    out = os.environ.get("BUILD_PARITY_OUT")
    if out:
        _install_recorder(out)


def record(out: str, pytest_args: list[str]) -> int:
    open(out, "w").close()
    env = dict(os.environ, KILN_DROPIN="1", TRITON_INTERPRET="1", BUILD_PARITY_OUT=os.path.abspath(out),
               PYTHONPATH=os.pathsep.join(filter(None, [os.path.dirname(os.path.abspath(__file__)),
                                                        os.environ.get("PYTHONPATH")])))
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "build_parity", "-p", "no:cacheprovider",
                    *pytest_args], env=env)
    with open(out) as f:
        print(f"{sum(1 for _ in f)} specializations recorded in {out}")
    return 0


# --- the builds --------------------------------------------------------------------------------------

def in_child(fn, *args, timeout: float = TIMEOUT_S):
    """("ok", fn(*args)) from a forked child, else ("error", its traceback's end), ("timeout", None) past
    `timeout` seconds, or ("crash", how it exited): a crash or a hang is one row, not the run's end."""
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)

    def run():
        try:
            child.send(("ok", fn(*args)))
        except BaseException as e:
            child.send(("error", "".join(traceback.format_exception(e))[-1500:]))
    proc = ctx.Process(target=run)
    proc.start()
    child.close()
    if not parent.poll(timeout):
        proc.kill()
        proc.join()
        return "timeout", None
    try:
        status, result = parent.recv()
    except EOFError:
        status, result = "crash", f"exit {proc.exitcode}"
    proc.join()
    return status, result


def _build_all(build, specs: str, out: str) -> None:
    with open(specs) as src, open(out, "w") as dst:
        for line in src:
            rec = json.loads(line)
            status, result = in_child(build, rec)
            dst.write(json.dumps({"hash": rec["hash"], "kernel": rec["kernel"], "opts": rec["opts"],
                                  "status": status, "result": result}) + "\n")
            dst.flush()


def _kiln_build(rec) -> dict:
    from kiln.codegen import compile as compile_ir
    from kiln.ir import parse_function
    started = time.perf_counter()
    built = compile_ir(parse_function(rec["kir"]), "sm_90a", rec["opts"])
    md = built.metadata
    return {"regs": md["n_regs"], "spills": md["n_spills"], "shared": md["shared"], "threads": md["threads"],
            "seconds": round(time.perf_counter() - started, 2)}


def _triton_build(rec) -> dict:
    import torch
    import triton
    from triton.runtime.jit import JITFunction
    import importlib
    obj = importlib.import_module(rec["call"]["module"])
    for part in rec["call"]["qualname"].split("."):
        obj = getattr(obj, part)
    while not isinstance(obj, JITFunction):  # under autotune / heuristics wrappers
        obj = obj.fn
    args = {name: _rebuilt(d, torch) for name, d in rec["call"]["args"].items()}
    # a kernel may take num_warps / num_stages as constexpr parameters (Liger's sparsemax): then the
    # argument carries the value, and warmup refuses it twice
    opts = {k: v for k, v in rec["opts"].items() if k in ("num_warps", "num_stages") and k not in args}
    kernel = obj.warmup(**args, grid=(1,), **opts)
    usage = _resource_usage(kernel.asm["cubin"], os.path.join(os.path.dirname(triton.__file__),
                                                               "backends/nvidia/bin/cuobjdump"))
    return {**usage, "shared": kernel.metadata.shared, "threads": 32 * kernel.metadata.num_warps}


def _rebuilt(d, torch):
    """A stand-in argument: a CPU tensor of the recorded dtype, shape, strides and 16-byte alignment."""
    if "tensor" in d:
        dtype = getattr(torch, d["tensor"].removeprefix("torch."))
        extent = 1 + sum((s - 1) * st for s, st in zip(d["shape"], d["stride"]) if s)
        base = torch.zeros(extent + 16, dtype=dtype)
        return torch.as_strided(base, d["shape"], d["stride"], 0 if d["align16"] else 1)
    if "value" in d:
        return d["value"]
    if "tuple" in d:
        return tuple(_rebuilt(x, torch) for x in d["tuple"])
    if "dtype" in d:
        import triton.language as tl
        return tl.dtype(d["dtype"])
    if "descriptor" in d:  # over a stand-in of its base tensor
        from triton.tools.tensor_descriptor import TensorDescriptor
        desc = d["descriptor"]
        return TensorDescriptor(_rebuilt(desc["base"], torch), desc["shape"], desc["strides"], desc["block_shape"],
                                padding=desc["padding"])
    raise ValueError(f"no stand-in for {d}")


def _resource_usage(cubin: bytes, cuobjdump: str) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        text = subprocess.run([cuobjdump, "--dump-resource-usage", f.name], capture_output=True, text=True).stdout
    m = re.search(r"REG:(\d+) STACK:(\d+)", text)
    if m is None:
        raise RuntimeError(f"no resource usage in cuobjdump's output: {text[-200:]!r}")
    return {"regs": int(m[1]), "stack": int(m[2])}


def _as_sm90a() -> None:
    """Triton's driver answering for an H100/H200 on a machine without one (compiling only)."""
    import torch
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.backends.driver import DriverBase

    class Sm90a(DriverBase):
        def __init__(self):
            self.utils = None

        @staticmethod
        def is_active():
            return True

        def get_current_target(self):
            return GPUTarget("cuda", 90, 32)

        def get_current_device(self):
            return 0

        def get_current_stream(self, device=None):
            return 0

        def get_active_torch_device(self):
            return torch.device("cpu")

        def get_device_interface(self):
            return torch.cuda

        def map_python_to_cpp_type(self, ty):
            return ty

        def get_benchmarker(self):
            raise RuntimeError("no GPU: compiling only")

        def get_empty_cache_for_benchmark(self):
            raise RuntimeError("no GPU: compiling only")

        def clear_cache(self, cache):
            pass
    triton.runtime.driver.set_active(Sm90a())
    # libraries that ask torch which GPU they run on (fla picks its configs by it) are told an H200's
    torch.cuda.get_device_name = lambda *a, **k: "NVIDIA H200"
    torch.cuda.get_device_capability = lambda *a, **k: (9, 0)


# --- report ------------------------------------------------------------------------------------------

def _by_hash(path: str) -> dict:
    """A run's rows (one JSON object a line), by their specialization's hash."""
    with open(path) as rows:
        return {row["hash"]: row for row in map(json.loads, rows)}


def _ctas(result: dict) -> int:
    """CTAs per SM of a build's registers, threads and shared memory (sm_90a)."""
    from kiln.codegen import occupancy
    return occupancy.ctas_per_sm(result["regs"], result["threads"], result["shared"], 90)


def report(kiln_path: str, triton_path: str) -> str:
    ours, theirs = _by_hash(kiln_path), _by_hash(triton_path)
    rows, failed = [], []
    for digest, t in theirs.items():
        k = ours.get(digest)
        if k is None:
            continue
        if k["status"] != "ok" or t["status"] != "ok":
            failed.append(f"| {k['kernel']} | {json.dumps(k['opts'])} | kiln {k['status']} | Triton {t['status']} |")
            continue
        a, b = k["result"], t["result"]
        ctas_k, ctas_t = _ctas(a), _ctas(b)
        rows.append((ctas_k - ctas_t, k["kernel"], json.dumps(k["opts"]), a, b, ctas_k, ctas_t))
    fewer = sorted((r for r in rows if r[0] < 0), key=lambda r: (r[5] / max(r[6], 1), r[1]))
    lines = [f"{len(rows)} builds compared: kiln's holds fewer CTAs per SM than Triton's in {len(fewer)}, "
             f"as many in {sum(r[0] == 0 for r in rows)}, more in {sum(r[0] > 0 for r in rows)}; "
             f"{len(failed)} not built by one of them.", "",
             "| kernel | options | kiln regs / spill bytes / shared | Triton regs / stack / shared | CTAs per SM kiln / Triton |",
             "|---|---|---|---|---|"]
    for _, name, opts, a, b, ck, ct in fewer:
        lines.append(f"| {name} | {opts} | {a['regs']} / {a['spills']} / {a['shared']} | "
                     f"{b['regs']} / {b['stack']} / {b['shared']} | {ck} / {ct} |")
    return "\n".join(lines + ([""] + failed if failed else []))


def source(rev: str, folder: str) -> None:
    """kiln's packages at git commit `rev` of this repository, laid out under `folder` as an install
    would (`folder/kiln/...`, by pyproject.toml's package-dir at that commit), for PYTHONPATH."""
    import io
    import tarfile
    import tomllib
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    git = ["git", "-C", repo]
    project = tomllib.loads(subprocess.run(git + ["show", f"{rev}:pyproject.toml"], capture_output=True,
                                           text=True, check=True).stdout)
    dirs = project["tool"]["setuptools"]["package-dir"]  # package -> folder in the repository
    archive = subprocess.run(git + ["archive", rev, *sorted(set(dirs.values()))], capture_output=True,
                             check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        for member in tar.getmembers():
            if not member.isfile():
                continue
            # the most specific package whose folder holds the file (kiln.language's before kiln's)
            package, where = max(((p, d) for p, d in dirs.items() if member.name.startswith(d + "/")),
                                 key=lambda pd: len(pd[1]))
            target = os.path.join(folder, *package.split("."), member.name[len(where) + 1:])
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "wb") as out:
                out.write(tar.extractfile(member).read())


def changes(before_path: str, after_path: str) -> str:
    """The builds of the same specializations whose registers, spills, shared memory or status differ
    between two of kiln's runs (before a change and after), with their CTAs per SM."""
    before, after = _by_hash(before_path), _by_hash(after_path)
    fields = ("regs", "spills", "shared")

    def shown(build) -> tuple[str, int | str]:
        if build["status"] != "ok":
            return build["status"], "-"
        r = build["result"]
        return " / ".join(str(r[f]) for f in fields), _ctas(r)
    rows = []
    for digest, old in before.items():
        new = after.get(digest)
        if new is None:
            continue
        if old["status"] == new["status"] == "ok" and \
                all(old["result"][f] == new["result"][f] for f in fields):
            continue
        (was, ctas_was), (now, ctas_now) = shown(old), shown(new)
        rows.append(f"| {old['kernel']} | {json.dumps(old['opts'])} | {was} | {now} | {ctas_was} / {ctas_now} |")
    both = sum(d in after for d in before)
    lines = [f"{both} builds in both runs: {len(rows)} changed.", "",
             "| kernel | options | before: regs / spill bytes / shared | after | CTAs per SM before / after |",
             "|---|---|---|---|---|"]
    return "\n".join(lines + sorted(rows))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="step", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("--out", required=True)
    rec.add_argument("pytest_args", nargs=argparse.REMAINDER)
    for step in ("kiln", "triton"):
        p = sub.add_parser(step)
        p.add_argument("specs")
        p.add_argument("out")
    rep = sub.add_parser("report")
    rep.add_argument("kiln")
    rep.add_argument("triton")
    src = sub.add_parser("source")
    src.add_argument("rev")
    src.add_argument("folder")
    ch = sub.add_parser("changes")
    ch.add_argument("before")
    ch.add_argument("after")
    args = parser.parse_args(argv)
    if args.step == "record":
        return record(args.out, [a for a in args.pytest_args if a != "--"])
    if args.step == "kiln":
        _build_all(_kiln_build, args.specs, args.out)
    elif args.step == "triton":
        _as_sm90a()
        _build_all(_triton_build, args.specs, args.out)
    elif args.step == "source":
        source(args.rev, args.folder)
    elif args.step == "changes":
        print(changes(args.before, args.after))
    else:
        print(report(args.kiln, args.triton))
    return 0


if __name__ == "__main__":
    sys.exit(main())
