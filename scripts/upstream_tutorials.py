#!/usr/bin/env python3
"""Run upstream Triton's tutorials under kiln's drop-in, as users run them, and report per tutorial.

Two steps, since the GPU machine has neither network nor upstream's git history:

    python scripts/upstream_tutorials.py extract --triton-git MIRROR --ref 004d7f5f --name 3.6 \\
        --dest .scratch/tutorials
    python scripts/upstream_tutorials.py run --dir .scratch/tutorials/3.6 --out OUT \\
        [--only 01,06] [--timeout 60] [--timeout-for 06=120] [--budget 400] [--baseline]

`extract` reads python/tutorials/*.py of REF from a Triton git repository (a clone or a bare git dir)
into DEST/NAME/ (NAME: --name, else REF), with SOURCE.json saying which commit they are. Upstream's
code is never part of this repository: DEST is a scratch directory (.scratch/ is git-ignored).

`run` runs each tutorial in a fresh process, `python TUTORIAL.py` as a user would, from a copy in a
temporary directory that is its working directory (its plots and CSVs land there, and go with it),
with KILN_DROPIN=1 and matplotlib's Agg backend. A small wrapper (WRAPPER below) first imports
triton and checks that it is kiln, then runs the tutorial with runpy as `__main__`; it notes when
the tutorial's first `perf_report` benchmark starts, and the exception that ended it, if any.
Each run has a time limit (--timeout, --timeout-for) and the whole command a budget (--budget); a run
stopped by its limit is reported as cut. --baseline runs each tutorial once more without the drop-in
(the installed Triton) and gives the time ratios kiln / Triton. The report, tutorials.json and
tutorials.md in --out, is a report, not a gate: the exit status is 0 whenever the harness ran,
2 on bad arguments.
"""
from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path


def _sibling(name: str):
    """scripts/NAME.py as module NAME (scripts/ is no package)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parent / f"{name}.py")
        sys.modules[name] = importlib.util.module_from_spec(spec)  # its dataclasses look their module up
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


upstream_tests = _sibling("upstream_tests")  # the language tests' harness: the git helpers and conventions
UsageError, find_git_dir, resolve_commit, _git = (upstream_tests.UsageError, upstream_tests.find_git_dir,
                                                  upstream_tests.resolve_commit, upstream_tests._git)

TUTORIALS_DIR = "python/tutorials/"
VERSION_FILE = "python/triton/__init__.py"
SOURCE = "SOURCE.json"  # what extract wrote: the commit, the version, the files
TAIL_LINES = 40
TABLE_CHARS = 6000  # the benchmark tables a run printed, kept in the JSON up to this size
MIN_RUN_S = 5.0  # a run is not started with less of the budget left than this

# Run in the tutorial's process as `python -c WRAPPER PROBE EXPECT TUTORIAL`: what `import triton`
# gave, when each perf_report benchmark ran, and the exception that ended the tutorial go to PROBE.
WRAPPER = r'''
import json, os, runpy, sys, time, traceback
probe_path, expect, script = sys.argv[1:4]
sys.argv = [script]
probe = {"start": time.time(), "benchmarks": []}
def dump():  # whole or not at all: the time limit may kill the process at any line
    with open(probe_path + ".part", "w") as f:
        json.dump(probe, f)
    os.replace(probe_path + ".part", probe_path)
def cuda():
    try:
        import torch
        return bool(torch.cuda.is_available())
    except Exception:
        return None
try:
    import triton
except BaseException as e:
    probe["exception"] = {"type": type(e).__name__, "message": str(e)[:500], "missing": getattr(e, "name", None)}
    dump()
    raise
probe["triton"] = {"name": triton.__name__, "file": getattr(triton, "__file__", None),
                   "version": getattr(triton, "__version__", None)}
probe["kiln"] = triton.__name__.split(".")[0] == "kiln"
dump()
if probe["kiln"] != (expect == "kiln"):
    sys.stderr.write(f"upstream_tutorials: asked for {expect}, but `import triton` gave {triton.__name__} "
                     f"from {getattr(triton, '__file__', None)}\n")
    sys.exit(3)
try:
    import triton.testing
    _run = triton.testing.Mark.run
    def run(self, *args, **kwargs):
        entry = {"start": time.time(), "end": None}
        probe["benchmarks"].append(entry)
        dump()
        try:
            return _run(self, *args, **kwargs)
        finally:
            entry["end"] = time.time()
            dump()
    triton.testing.Mark.run = run
except (ImportError, AttributeError):
    pass
try:
    runpy.run_path(script, run_name="__main__")
except SystemExit:
    raise
except BaseException as e:
    tb = e.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != script:
        tb = tb.tb_next  # this wrapper's and runpy's frames: `python TUTORIAL.py` shows none
    own = [f for f in traceback.extract_tb(e.__traceback__) if f.filename == script]
    missing = getattr(e, "name", None) if isinstance(e, ImportError) else None
    probe["exception"] = {"type": type(e).__name__, "message": str(e)[:500], "missing": missing,
                          "line": own[-1].line if own else None}  # the tutorial's last line that ran
    probe["cuda"] = cuda()
    dump()
    traceback.print_exception(type(e), e, tb or e.__traceback__)
    sys.exit(1)
'''

STATUSES = {  # status -> what it means, for the markdown's legend
    "passed": "exited 0",
    "benchmark cut": "its checks ran; its time limit stopped it during a benchmark",
    "timeout": "its time limit stopped it before any benchmark",
    "failed": "an exception or a non-zero exit",
    "missing package": "needs a Python package this machine lacks",
    "needs a GPU": "failed without a CUDA device, on something CUDA",
    "wrong triton": "`import triton` did not give what the run asked for (kiln, or the installed Triton)",
    "not run": "the budget was spent before it",
}
GPU_WORDS = re.compile(r"cuda|nvidia|gpu", re.IGNORECASE)
TABLE_ROW = re.compile(r"^\s*\d+\s+\S")


@dataclass
class Run:
    """One run of one tutorial under one Triton: "kiln" (the drop-in) or "triton" (the installed one)."""
    triton: str
    status: str = "not run"
    returncode: int | None = None
    seconds: float | None = None
    limit: float | None = None  # the time limit it ran under
    to_benchmark: float | None = None  # seconds from its start to its first perf_report benchmark
    benchmarks_done: int = 0  # perf_report benchmarks that finished
    tables: list[str] = field(default_factory=list)  # the names of the benchmark tables it printed
    table_text: str = ""  # those tables, as printed
    error: str | None = None  # the exception that ended it, one line
    detail: str | None = None  # the missing package; what needed a GPU
    imported: str | None = None  # what `import triton` gave: module (version) file
    tail: list[str] = field(default_factory=list)


@dataclass
class TutorialResult:
    file: str
    kiln: Run
    triton: Run | None = None  # with --baseline
    wall_ratio: float | None = None  # kiln / Triton, both passed
    to_benchmark_ratio: float | None = None  # kiln / Triton, time to the first benchmark, both reached it


# ---- extract ------------------------------------------------------------------------------------

def tutorial_paths(git_dir: Path, sha: str) -> list[str]:
    """The tutorials at `sha`: python/tutorials/*.py, the top level only (gluon's are a dialect of their own)."""
    listing = _git(git_dir, "ls-tree", "--name-only", sha, TUTORIALS_DIR).stdout.decode().splitlines()
    paths = sorted(p for p in listing if p.endswith(".py"))
    if not paths:
        raise UsageError(f"no {TUTORIALS_DIR}*.py at {sha[:12]}")
    return paths


def upstream_version(git_dir: Path, sha: str) -> str | None:
    text = _git(git_dir, "show", f"{sha}:{VERSION_FILE}").stdout.decode(errors="replace")
    found = re.search(r"""^__version__\s*=\s*['"]([^'"]+)['"]""", text, re.MULTILINE)
    return found.group(1) if found else None


def extract(git_dir: Path, ref: str, dest: Path) -> dict:
    """Writes REF's tutorials and SOURCE.json into `dest`; returns what SOURCE.json says."""
    sha = resolve_commit(git_dir, ref)
    paths = tutorial_paths(git_dir, sha)
    if dest.exists() and any(dest.iterdir()) and not (dest / SOURCE).exists():
        raise UsageError(f"{dest} holds files that extract did not write: name an empty or new directory")
    dest.mkdir(parents=True, exist_ok=True)
    for old in dest.glob("*.py"):
        old.unlink()  # an earlier extract's tutorials: a ref's tutorials replace them whole
    files = {}
    for path in paths:
        blob = _git(git_dir, "show", f"{sha}:{path}")
        if blob.returncode != 0:
            raise UsageError(f"cannot read {path} at {sha[:12]}: {blob.stderr.decode().strip()}")
        name = path.rsplit("/", 1)[-1]
        (dest / name).write_bytes(blob.stdout)
        files[name] = _git(git_dir, "rev-parse", f"{sha}:{path}").stdout.decode().strip()
    log = _git(git_dir, "log", "-1", "--format=%cs%x00%s", sha).stdout.decode().strip().split("\0")
    source = {"ref": ref, "commit": sha, "version": upstream_version(git_dir, sha), "committed": log[0],
              "subject": log[-1], "git_dir": str(git_dir), "files": files}
    (dest / SOURCE).write_text(json.dumps(source, indent=1) + "\n")
    return source


# ---- running one tutorial -----------------------------------------------------------------------

def child_env(mode: str) -> dict:
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONDONTWRITEBYTECODE="1", MPLBACKEND="Agg")
    if mode == "kiln":
        env["KILN_DROPIN"] = "1"
    else:
        env.pop("KILN_DROPIN", None)
    return env


def benchmark_tables(lines: list[str]) -> list[tuple[str, str]]:
    """(name, text) of each perf_report table in `lines`: `NAME:`, a header, then rows `0 ...`, `1 ...`
    (pandas' DataFrame print, which Triton's print_data and kiln's both give)."""
    tables, i = [], 0
    while i + 2 < len(lines):
        name, header, first = lines[i], lines[i + 1], lines[i + 2]
        if name.endswith(":") and name.strip() == name and header[:1].isspace() and re.match(r"^\s*0\s+\S", first):
            end = i + 2
            while end < len(lines) and TABLE_ROW.match(lines[end]):
                end += 1
            tables.append((name[:-1], "\n".join(lines[i:end])))
            i = end
        else:
            i += 1
    return tables


def classify(run: Run, timed_out: bool, probe: dict) -> None:
    """Sets run.status (and detail) from how the process ended and what the wrapper saw."""
    exc = probe.get("exception")
    if exc:
        run.error = (exc["type"] + (f": {exc['message']}" if exc["message"] else "")).splitlines()[0][:300]
    missing = exc and exc.get("missing")
    if timed_out:
        run.status = "benchmark cut" if probe.get("benchmarks") else "timeout"
    elif run.returncode == 0:
        run.status = "passed"
    elif "triton" in probe and probe.get("kiln") != (run.triton == "kiln"):
        run.status, run.detail = "wrong triton", run.imported
    elif run.triton == "kiln" and "triton" not in probe and missing == "triton":
        run.status, run.detail = "wrong triton", "no module triton: the drop-in is not installed here"
    elif missing and (run.triton != "kiln" or missing.split(".")[0] not in ("triton", "kiln")):
        # a triton.X the drop-in lacks is kiln's gap (failed); any other module is a package to install
        run.status, run.detail = "missing package", missing
    elif exc and probe.get("cuda") is not True and GPU_WORDS.search(f"{run.error} {exc.get('line')}"):
        run.status, run.detail = "needs a GPU", exc.get("line") or run.error  # the line that asked for it
    else:
        run.status = "failed"
        if run.returncode is not None and run.returncode < 0:
            run.error = run.error or f"killed by signal {-run.returncode}"


def run_tutorial(path: Path, mode: str, limit: float, keep: Path | None) -> Run:
    """`python TUTORIAL` under `mode` ("kiln" or "triton") from a copy in a temporary directory."""
    run = Run(mode, limit=round(limit, 1))
    work = Path(tempfile.mkdtemp(prefix=f"kiln-tutorial-{mode}-"))
    try:
        shutil.copy2(path, work / path.name)
        probe_path = work / ".probe.json"
        cmd = [sys.executable, "-c", WRAPPER, str(probe_path), mode, path.name]
        lines: list[str] = []
        start = time.time()
        proc = subprocess.Popen(cmd, cwd=work, env=child_env(mode), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        reader = threading.Thread(target=lambda: lines.extend(ln.decode(errors="replace").rstrip("\r\n")
                                                              for ln in proc.stdout), daemon=True)
        reader.start()
        try:
            proc.wait(timeout=limit)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
        try:  # the tutorial, and what it started and left (kiln's daemon has a session of its own and stays)
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        run.seconds = round(time.time() - start, 2)
        reader.join(timeout=10)
        run.returncode = proc.returncode
        probe = json.loads(probe_path.read_text()) if probe_path.exists() else {}  # none: python itself failed
        if "triton" in probe:
            t = probe["triton"]
            run.imported = f"{t['name']} ({t['version']}) {t['file']}"
        marks = probe.get("benchmarks", [])
        if marks:
            run.to_benchmark = round(marks[0]["start"] - start, 2)
        run.benchmarks_done = sum(m["end"] is not None for m in marks)
        tables = benchmark_tables(lines)
        run.tables = [name for name, _ in tables]
        run.table_text = "\n\n".join(text for _, text in tables)[:TABLE_CHARS]
        run.tail = lines[-TAIL_LINES:]
        classify(run, timed_out, probe)
        if keep is not None:
            (work / "output.log").write_text("\n".join(lines) + "\n")
            shutil.copytree(work, keep / f"{path.stem}-{mode}", dirs_exist_ok=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return run


# ---- the report ---------------------------------------------------------------------------------

def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def compare(result: TutorialResult) -> None:
    k, t = result.kiln, result.triton
    if t is None:
        return
    if k.status == t.status == "passed":
        result.wall_ratio = _ratio(k.seconds, t.seconds)
    result.to_benchmark_ratio = _ratio(k.to_benchmark, t.to_benchmark)


def _cell(run: Run | None) -> list[str]:
    if run is None:
        return []
    status = run.status + (f" ({run.detail})" if run.detail and run.status == "missing package" else "")
    tables = f"{len(run.tables)}" if run.tables or run.status != "not run" else ""
    return [status, "" if run.seconds is None else f"{run.seconds:g}",
            "" if run.to_benchmark is None else f"{run.to_benchmark:g}", tables]


def markdown(report: dict) -> str:
    src, baseline = report["source"], report["baseline"]
    lines = [f"# Upstream Triton's tutorials under kiln's drop-in ({report['date']})", "",
             f"Upstream commit `{src.get('commit', '?')}` (`__version__` {src.get('version')!r}, committed "
             f"{src.get('committed', '?')}: {src.get('subject', '')}); kiln `{report['kiln']}`; Python "
             f"{report['python']} on {report['machine']}. Each tutorial runs as `python TUTORIAL.py` in a fresh "
             "process from a copy in a temporary working directory, with KILN_DROPIN=1"
             + (" and TRITON_INTERPRET=1" if report["interpret"] else "")
             + (", then once more without the drop-in (the installed Triton)" if baseline else "")
             + f". Time limit {report['timeout']:g} s a run"
             + "".join(f", {k}: {v:g} s" for k, v in report["timeout_for"].items())
             + (f"; budget {report['budget']:g} s in all" if report["budget"] else "")
             + ". Seconds are wall time from the process's start; *to bench*: to its first perf_report benchmark; "
             "*tables*: benchmark tables printed.", "", f"Made with `{report['command']}`.", ""]
    head = ["tutorial", "kiln", "s", "to bench", "tables"]
    if baseline:
        head += ["Triton", "s", "to bench", "tables", "kiln/Triton (wall)", "kiln/Triton (to bench)"]
    lines += ["| " + " | ".join(head) + " |", "|---|" + "---|" * (len(head) - 1)]
    for r in report["tutorials"]:
        k, t = Run(**r["kiln"]), Run(**r["triton"]) if r["triton"] else None
        row = [r["file"], *_cell(k)]
        if baseline:
            row += [*_cell(t), "" if r["wall_ratio"] is None else f"{r['wall_ratio']:.2f}",
                    "" if r["to_benchmark_ratio"] is None else f"{r['to_benchmark_ratio']:.2f}"]
        lines.append("| " + " | ".join(row) + " |")
    counts = report["total"]
    lines += ["", "**kiln:** " + ", ".join(f"{n} {s}" for s, n in counts["kiln"].items())]
    if baseline:
        lines.append("**Triton:** " + ", ".join(f"{n} {s}" for s, n in counts["triton"].items()))
    lines += ["", "Statuses: " + "; ".join(f"*{s}*: {m}" for s, m in STATUSES.items()) + "."]
    troubled = [(r["file"], Run(**run)) for r in report["tutorials"]
                for run in (r["kiln"], r["triton"]) if run and run["status"] not in ("passed", "not run")]
    if troubled:
        lines += ["", "## Runs that did not pass"]
    for name, run in troubled:
        after = f", after {run.seconds:g} s" if run.seconds else ""
        lines += ["", f"### {name} ({run.triton}): {run.status}{after}"]
        if run.error:
            lines.append(f"`{run.error}`")
        if run.detail and run.status == "needs a GPU":
            lines.append(f"at `{run.detail}`")
        if run.imported and run.status == "wrong triton":
            lines.append(f"`import triton` gave {run.imported}")
        lines += ["", "```", *run.tail, "```"] if run.tail else ["", "(no output)"]
    return "\n".join(lines) + "\n"


def build_report(results: list[TutorialResult], source: dict, args: argparse.Namespace) -> dict:
    def count(mode: str) -> dict:
        runs = [getattr(r, mode) for r in results if getattr(r, mode) is not None]
        return {s: sum(run.status == s for run in runs) for s in STATUSES if any(run.status == s for run in runs)}
    return {"date": datetime.date.today().isoformat(), "source": source, "kiln": upstream_tests._kiln_revision(),
            "python": platform.python_version(), "machine": f"{platform.machine()} {platform.system()}",
            "command": " ".join(["python", "scripts/upstream_tutorials.py", *args.argv]),
            "interpret": os.environ.get("TRITON_INTERPRET", "") == "1" or os.environ.get("KILN_INTERPRET", "") == "1",
            "baseline": args.baseline, "timeout": args.timeout, "timeout_for": args.timeout_for,
            "budget": args.budget, "total": {"kiln": count("kiln"), "triton": count("triton")},
            "tutorials": [asdict(r) for r in results]}


# ---- command line ------------------------------------------------------------------------------

def _number(name: str) -> str:
    """'06' for '06-fused-attention.py' or '6'; the name itself when it has no number."""
    digits = re.match(r"\d+", name)
    return f"{int(digits.group()):02d}" if digits else name


def select(tutorials: list[Path], only: str | None) -> list[Path]:
    if not only:
        return tutorials
    wanted = [w.strip() for w in only.split(",") if w.strip()]
    known = {_number(p.name) for p in tutorials} | {p.name for p in tutorials}
    unknown = [w for w in wanted if _number(w) not in known and w not in known]
    if unknown:
        raise UsageError(f"--only {','.join(unknown)}: no such tutorial (there: "
                         f"{', '.join(p.name for p in tutorials)})")
    keys = {_number(w) for w in wanted} | set(wanted)
    return [p for p in tutorials if _number(p.name) in keys or p.name in keys]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="step", required=True)
    ex = sub.add_parser("extract", help="write REF's python/tutorials/*.py into DEST/NAME")
    ex.add_argument("--triton-git", required=True, help="a clone of Triton, or its git dir")
    ex.add_argument("--ref", required=True, help="a commit (or branch, tag) of it")
    ex.add_argument("--dest", required=True, help="scratch directory; the tutorials go to DEST/NAME")
    ex.add_argument("--name", help="the folder under DEST (default: REF, '/' made '-')")
    rn = sub.add_parser("run", help="run the tutorials of a directory that extract wrote")
    rn.add_argument("--dir", required=True, help="DEST/NAME from extract")
    rn.add_argument("--out", required=True, help="directory for tutorials.json and tutorials.md")
    rn.add_argument("--only", help="comma-separated tutorial numbers (01,06) or file names")
    rn.add_argument("--timeout", type=float, default=300, help="seconds a run (default 300)")
    rn.add_argument("--timeout-for", action="append", default=[], metavar="NN=S",
                    help="another limit for one tutorial (06=120); repeatable")
    rn.add_argument("--budget", type=float, help="seconds for all the runs together; a run gets at most what is left")
    rn.add_argument("--baseline", action="store_true", help="run each once more without the drop-in (installed Triton)")
    rn.add_argument("--keep", help="copy each run's working directory (output.log, plots, CSVs) under this one")
    args = p.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if args.step == "run":
        limits = {}
        for item in args.timeout_for:
            key, _, value = item.partition("=")
            try:
                limits[_number(key.strip())] = float(value)
            except ValueError:
                p.error(f"--timeout-for {item}: NN=SECONDS")
        args.timeout_for = limits
        if args.timeout <= 0 or any(v <= 0 for v in limits.values()) or (args.budget is not None and args.budget <= 0):
            p.error("time limits and the budget must be positive")
    return args


def main_extract(args: argparse.Namespace) -> int:
    git_dir = find_git_dir(args.triton_git)
    dest = Path(args.dest) / (args.name or args.ref.replace("/", "-"))
    source = extract(git_dir, args.ref, dest)
    print(f"upstream {source['commit'][:12]} ({source['version']}, {source['committed']}): "
          f"{len(source['files'])} tutorials into {dest}", file=sys.stderr)
    return 0


def main_run(args: argparse.Namespace) -> int:
    folder = Path(args.dir)
    if not folder.is_dir():
        raise UsageError(f"--dir {folder}: no such directory")
    tutorials = select(sorted(folder.glob("*.py")), args.only)
    if not tutorials:
        raise UsageError(f"--dir {folder}: no tutorials (*.py) there")
    source = json.loads((folder / SOURCE).read_text()) if (folder / SOURCE).exists() else {}
    source.pop("files", None)
    keep = Path(args.keep).resolve() if args.keep else None
    if keep:
        keep.mkdir(parents=True, exist_ok=True)
    deadline = None if args.budget is None else time.monotonic() + args.budget
    results = []
    for path in tutorials:
        limit = args.timeout_for.get(_number(path.name), args.timeout)
        result = TutorialResult(path.name, Run("kiln"), Run("triton") if args.baseline else None)
        for mode in ("kiln", "triton") if args.baseline else ("kiln",):
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left < MIN_RUN_S:
                break  # stays "not run"
            run = run_tutorial(path, mode, limit if left is None else min(limit, left), keep)
            setattr(result, mode, run)
            print(f"  {path.name} [{mode}]: {run.status}" + (f" ({run.detail})" if run.detail else "")
                  + f" in {run.seconds:g} s" + (f", {len(run.tables)} tables" if run.tables else ""), file=sys.stderr)
        compare(result)
        results.append(result)
    report = build_report(results, source, args)
    text = markdown(report)
    sys.stdout.write(text)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "tutorials.json").write_text(json.dumps(report, indent=1) + "\n")
    (out / "tutorials.md").write_text(text)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return main_extract(args) if args.step == "extract" else main_run(args)
    except UsageError as e:
        print(f"upstream_tutorials: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
