#!/usr/bin/env python3
"""Run upstream Triton's tests (language, runtime) under kiln's drop-in on the CPU tier and report per file.

    python scripts/upstream_tests.py --triton-git ~/src/triton --out bench/results \\
        --files test_standard.py test_random.py --timeout 60

Upstream's code is never part of this repository: the files are read from a local Triton git
repository (a clone or a bare git dir) at a pinned commit (default: 004d7f5f, the 3.6 branch point)
and written into a scratch directory, flat, as a user would lay them out:

    test_*.py, print_helper.py      python/test/unit/language/ (all of it: tests import each other)
    conftest_upstream.py            python/test/conftest.py (adds --device, the fixtures)
    _internal_testing_upstream.py   python/triton/_internal_testing.py
    conftest.py                     written here: registers the second as `triton._internal_testing`
                                    (the drop-in has no counterpart) and runs the first, both unedited

Each file runs in its own process, `KILN_DROPIN=1 TRITON_INTERPRET=1 python -m pytest FILE -q
-p no:cacheprovider --device cpu`, and its JUnit XML gives the counts. The report (markdown on
stdout; JSON and markdown in --out) is a report, not a gate: the exit status is 0 whenever the
harness ran, 2 on bad arguments.

`--device cuda` runs them compiled for the GPU instead (no TRITON_INTERPRET, `--device cuda`; `--workers N`
spreads a file over N pytest-xdist processes; `--budget S` stops the run after S seconds, pytest interrupted as by
Ctrl-C so that its report of the tests run until then is kept). A GPU machine without upstream's git reads the
files a run here laid out (`--scratch DIR`, which also records the commit) with `--extracted DIR`:

    python scripts/upstream_tests.py --triton-git ~/src/triton --files test_core.py --scratch .scratch/up --extract-only
    python scripts/upstream_tests.py --extracted .scratch/up --files test_core.py --device cuda --workers 16 --out DIR
"""
from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import fnmatch
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path

PINNED = "004d7f5f"  # upstream Triton's 3.6 branch point
LANGUAGE_DIR = "python/test/unit/language/"
DEFAULT_FILES = (LANGUAGE_DIR + "test_*.py",)
# upstream path -> name in the scratch directory
SUPPORT = {"python/test/conftest.py": "conftest_upstream.py",
           "python/triton/_internal_testing.py": "_internal_testing_upstream.py"}
LISTED_PER_FILE = 20  # failures named per file in the markdown (the JSON keeps them all)
REASON_CHARS = 200

SHIM = '''\
# Written by kiln's scripts/upstream_tests.py: upstream's python/test/conftest.py, with
# upstream's python/triton/_internal_testing.py as triton._internal_testing; both unedited.
import importlib.util, os, sys
_here = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("triton._internal_testing",
                                               os.path.join(_here, "_internal_testing_upstream.py"))
_mod = importlib.util.module_from_spec(_spec)
sys.modules["triton._internal_testing"] = _mod
_spec.loader.exec_module(_mod)
_path = os.path.join(_here, "conftest_upstream.py")
exec(compile(open(_path).read(), _path, "exec"))
'''


class UsageError(Exception):
    """Bad arguments: the message is printed and the exit status is 2."""


@dataclass
class Failure:
    test: str
    outcome: str  # "failed" or "error"
    reason: str


@dataclass
class FileResult:
    file: str
    collected: int = 0
    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    collection_error: str | None = None
    seconds: float = 0.0
    returncode: int | None = None
    failures: list[Failure] = field(default_factory=list)
    interrupted: bool = False  # stopped at --budget: the counts are of the tests run until then

    @property
    def ran(self) -> int:
        return self.passed + self.failed + self.errors


# ---- the upstream checkout ----------------------------------------------------------------------

def _git(git_dir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", f"--git-dir={git_dir}", *args], capture_output=True)


def find_git_dir(path: str) -> Path:
    """The git dir of `path`, which is a clone (with .git) or a git dir itself."""
    root = Path(path).expanduser()
    if not root.exists():
        raise UsageError(f"--triton-git {path}: no such directory")
    for candidate in (root / ".git", root):
        if candidate.exists() and _git(candidate, "rev-parse", "--git-dir").returncode == 0:
            return candidate.resolve()
    raise UsageError(f"--triton-git {path}: not a git repository (neither it nor {path}/.git is a git dir)")


def resolve_commit(git_dir: Path, commit: str) -> str:
    done = _git(git_dir, "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}")
    if done.returncode != 0:
        raise UsageError(f"--commit {commit}: no such commit in {git_dir}")
    return done.stdout.decode().strip()


def select_files(git_dir: Path, sha: str, patterns: list[str]) -> tuple[list[str], list[str]]:
    """(test files matching `patterns`, the modules to copy beside them), as upstream paths.
    A pattern without a '/' is taken in the language directory."""
    listing = _git(git_dir, "ls-tree", "-r", "--name-only", sha).stdout.decode().splitlines()
    tests: list[str] = []
    for pattern in patterns:
        pattern = pattern if "/" in pattern else LANGUAGE_DIR + pattern
        matched = [p for p in listing if fnmatch.fnmatchcase(p, pattern) and p.endswith(".py")]
        if not matched:
            raise UsageError(f"--files {pattern}: matches nothing at {sha[:12]}")
        tests += [p for p in matched if p not in tests]
    names = [p.rsplit("/", 1)[-1] for p in tests]
    if len(set(names)) != len(names):
        raise UsageError("--files: two files share a name; they are laid out flat in one directory")
    for upstream in SUPPORT:
        if upstream not in listing:
            raise UsageError(f"{upstream} is not in {sha[:12]}: the harness needs it (upstream's layout moved?)")
    folders = {p.rsplit("/", 1)[0] for p in tests}
    # every module beside them, tests included: test_standard imports test_core
    helpers = [p for p in listing if p.endswith(".py") and p.rsplit("/", 1)[0] in folders and p not in tests
               and not p.rsplit("/", 1)[1].startswith("conftest")]
    return tests, helpers


COMMIT_FILE = "UPSTREAM_COMMIT"  # in a scratch directory: the commit its files are from


def extract(git_dir: Path, sha: str, tests: list[str], helpers: list[str], scratch: Path) -> None:
    scratch.mkdir(parents=True, exist_ok=True)
    targets = {p: p.rsplit("/", 1)[-1] for p in tests + helpers} | SUPPORT
    for upstream, name in targets.items():
        blob = _git(git_dir, "show", f"{sha}:{upstream}")
        if blob.returncode != 0:
            raise UsageError(f"cannot read {upstream} at {sha[:12]}: {blob.stderr.decode().strip()}")
        (scratch / name).write_bytes(blob.stdout)
    (scratch / "conftest.py").write_text(SHIM)
    (scratch / COMMIT_FILE).write_text(sha + "\n")


def extracted(scratch: Path, patterns: list[str]) -> tuple[str, list[str]]:
    """(commit, test file names) of a directory `extract` laid out, the names matching `patterns`."""
    try:
        sha = (scratch / COMMIT_FILE).read_text().strip()
    except OSError:
        raise UsageError(f"--extracted {scratch}: no {COMMIT_FILE} there (lay it out with --scratch first)") from None
    present = sorted(p.name for p in scratch.glob("test_*.py"))
    names: list[str] = []
    for pattern in patterns:
        matched = [n for n in present if fnmatch.fnmatchcase(n, pattern.rsplit("/", 1)[-1])]
        if not matched:
            raise UsageError(f"--files {pattern}: matches nothing in {scratch}")
        names += [n for n in matched if n not in names]
    return sha, names


# ---- running and reading JUnit XML --------------------------------------------------------------

# `python -m pytest`, with Ctrl-C's handler put back: a process started in the background inherits SIGINT ignored,
# and --budget's interrupt must still reach pytest as a KeyboardInterrupt (so that it writes its report)
PYTEST = [sys.executable, "-c", "import signal, sys, pytest; signal.signal(signal.SIGINT, signal.default_int_handler); "
                                "sys.exit(pytest.main(sys.argv[1:]))"]


def pytest_command(name: str, xml: Path, timeout: float, keyword: str | None, marker: str | None = None,
                   device: str = "cpu", workers: int = 0) -> list[str]:
    cmd = [*PYTEST, name, "-q", "-p", "no:cacheprovider", "--device", device,
           f"--junitxml={xml}", f"--timeout={timeout:g}"]
    return cmd + (["-k", keyword] if keyword else []) + (["-m", marker] if marker else []) + \
        (["-n", str(workers)] if workers else [])


def _one_line(text: str | None) -> str:
    """The line of an error worth reading: pytest's first `E   ` line, else the first non-empty one."""
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    first_e = next((ln[1:].strip() for ln in lines if ln.startswith("E ")), None)
    line = first_e or (lines[0] if lines else "(no message)")
    return line if len(line) <= REASON_CHARS else line[:REASON_CHARS - 3] + "..."


def parse_junit(path: Path, result: FileResult) -> None:
    outcomes: dict[str, tuple[str, str]] = {}  # test id -> (outcome, reason); the worst entry wins
    rank = {"passed": 0, "skipped": 1, "error": 2, "failed": 3}
    for case in ET.parse(path).getroot().iter("testcase"):
        if not case.get("name"):  # an interrupted run's report ends with an empty entry
            continue
        classes = case.get("classname", "").split(".")[1:]  # the module, then any test classes
        test = "::".join([result.file, *classes, case.get("name", "")])
        error, failure, skipped = case.find("error"), case.find("failure"), case.find("skipped")
        if error is not None and error.get("message") == "collection failure":
            result.collection_error = _one_line(error.text or error.get("message"))
            continue
        if failure is not None:
            entry = ("failed", _one_line(failure.get("message") or failure.text))
        elif error is not None:
            entry = ("error", _one_line(error.get("message", "") + "\n" + (error.text or "")))
        elif skipped is not None:
            entry = ("skipped", "")
        else:
            entry = ("passed", "")
        if test not in outcomes or rank[entry[0]] > rank[outcomes[test][0]]:
            outcomes[test] = entry
    for test, (outcome, reason) in outcomes.items():
        result.collected += 1
        if outcome == "passed":
            result.passed += 1
        elif outcome == "skipped":
            result.skipped += 1
        else:
            result.failed += outcome == "failed"
            result.errors += outcome == "error"
            result.failures.append(Failure(test, outcome, reason))


# After SIGINT at the budget, how long pytest (and its xdist workers) may take to stop and write its report
INTERRUPT_GRACE = 30.0


def run_file(name: str, scratch: Path, timeout: float, keyword: str | None, marker: str | None = None,
             device: str = "cpu", workers: int = 0, deadline: float | None = None) -> FileResult:
    """One file's pytest run. `deadline` (time.monotonic()): where it is reached pytest gets SIGINT, as a
    Ctrl-C, so that it stops and still writes its JUnit report of the tests it ran."""
    result = FileResult(name)
    xml = scratch / "junit" / (name + ".xml")
    xml.parent.mkdir(exist_ok=True)
    xml.unlink(missing_ok=True)  # a kept --scratch may hold an earlier run's report
    env = dict(os.environ, KILN_DROPIN="1", TRITON_INTERPRET="1", PYTHONDONTWRITEBYTECODE="1")
    if device != "cpu":  # compiled for the GPU
        del env["TRITON_INTERPRET"]
    start = time.monotonic()
    if deadline is not None and deadline <= start:
        result.interrupted = True
        result.collection_error = "not run: the budget was spent"
        return result
    proc = subprocess.Popen(pytest_command(name, xml, timeout, keyword, marker, device, workers), cwd=scratch, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = proc.communicate(timeout=None if deadline is None else max(deadline - start, 0.0))
    except subprocess.TimeoutExpired:
        result.interrupted = True
        proc.send_signal(signal.SIGINT)
        try:
            stdout, stderr = proc.communicate(timeout=INTERRUPT_GRACE)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
    result.seconds = round(time.monotonic() - start, 1)
    result.returncode = proc.returncode
    if xml.exists():
        parse_junit(xml, result)
    if not xml.exists() or (proc.returncode not in (0, 1, 2, 5) and result.collected == 0
                            and result.collection_error is None):
        # pytest died before writing its report, or stopped for a reason the XML does not give
        result.collection_error = _one_line(stdout + "\n" + stderr) + f" (pytest exit {proc.returncode})"
    return result


# ---- the report --------------------------------------------------------------------------------

def _rate(passed: int, ran: int) -> str:
    return f"{100 * passed / ran:.1f}%" if ran else "–"


def _kiln_revision() -> str:
    here = Path(__file__).resolve().parent.parent
    done = subprocess.run(["git", "-C", str(here), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def markdown(report: dict) -> str:
    results = [FileResult(**{**r, "failures": [Failure(**f) for f in r["failures"]]}) for r in report["files"]]
    suite, device = report.get("suite", "language"), report.get("device", "cpu")
    interpret = "TRITON_INTERPRET=1 " if device == "cpu" else ""
    workers = f" -n {report['workers']}" if report.get("workers") else ""
    lines = [f"# Upstream Triton {suite} tests under kiln's drop-in ({device.upper()}, {report['date']})", "",
             f"Upstream commit `{report['commit']}`; kiln `{report['kiln']}`; Python {report['python']} "
             f"on {report['machine']}. Each file: `KILN_DROPIN=1 {interpret}python -m pytest FILE -q "
             f"-p no:cacheprovider --device {device} --timeout {report['timeout']:g}{workers}`"
             + (f" `-k {report['keyword']!r}`" if report["keyword"] else "")
             + (f" `-m {report['marker']}`" if report.get("marker") else "")
             + ", upstream's conftest and `_internal_testing.py` unedited. Pass rate: passed / (passed + failed + "
             "errors).", "", f"Made with `{report['command']}`.", "",
             "| file | collected | passed | failed | errors | skipped | pass rate | seconds |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        rate = "collection error" if r.collection_error else _rate(r.passed, r.ran)
        name = r.file + (" (stopped at the budget)" if r.interrupted else "")
        lines.append(f"| {name} | {r.collected} | {r.passed} | {r.failed} | {r.errors} | {r.skipped} | {rate} "
                     f"| {r.seconds:g} |")
    t = report["total"]
    lines += ["", f"**Overall:** {t['files_collected']} of {t['files']} files collected; {t['collected']} tests, "
              f"{t['passed']} passed, {t['failed']} failed, {t['errors']} errors, {t['skipped']} skipped: "
              f"{_rate(t['passed'], t['passed'] + t['failed'] + t['errors'])} of those that ran."]
    troubled = [r for r in results if r.collection_error or r.failures]
    if troubled:
        lines += ["", "## Collection errors and failures"]
    for r in troubled:
        lines += ["", f"### {r.file}"]
        if r.collection_error:
            lines.append(f"- collection error: {r.collection_error}")
        for f in r.failures[:LISTED_PER_FILE]:
            lines.append(f"- `{f.test}` ({f.outcome}): {f.reason}")
        if len(r.failures) > LISTED_PER_FILE:
            lines.append(f"- ... and {len(r.failures) - LISTED_PER_FILE} more (all in the JSON)")
    return "\n".join(lines) + "\n"


def build_report(results: list[FileResult], sha: str, args: argparse.Namespace) -> dict:
    keys = ("collected", "passed", "failed", "errors", "skipped")
    total = {k: sum(getattr(r, k) for r in results) for k in keys}
    total |= {"files": len(results), "files_collected": sum(r.collection_error is None for r in results)}
    return {"date": datetime.date.today().isoformat(), "commit": sha, "kiln": _kiln_revision(),
            "python": platform.python_version(), "machine": f"{platform.machine()} {platform.system()}",
            "command": " ".join(["python", "scripts/upstream_tests.py", *args.argv]),
            "timeout": args.timeout, "keyword": args.k, "marker": args.m, "suite": args.suite,
            "device": args.device, "workers": args.workers, "total": total,
            "files": [asdict(r) for r in results]}


# ---- command line ------------------------------------------------------------------------------

def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--triton-git", help="a clone of Triton, or its git dir (or --extracted)")
    p.add_argument("--extracted", help="run the files an earlier --scratch laid out there (no git needed)")
    p.add_argument("--extract-only", action="store_true", help="lay the files out in --scratch and stop")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="cpu: upstream's interpreter mode (default); cuda: compiled for the GPU")
    p.add_argument("--workers", type=int, default=0, help="pytest-xdist processes per file (default: none)")
    p.add_argument("--budget", type=float, help="seconds for the whole run: then pytest is interrupted (its report of "
                                                "the tests run so far kept) and files not started are not run")
    p.add_argument("--commit", default=PINNED,
                   help=f"upstream commit to test at (default {PINNED}, the 3.6 branch point)")
    p.add_argument("--files", nargs="+", default=list(DEFAULT_FILES),
                   help=f"test files or globs, upstream paths; a bare name is in {LANGUAGE_DIR} "
                        "(default: all test_*.py there)")
    p.add_argument("--out", help="directory for the report: DATE-DEVICE-upstream-SUITE-tests[-TAG].{json,md}")
    p.add_argument("--suite", default="language",
                   help="what the files are, for the report's title and name (default: language; e.g. runtime)")
    p.add_argument("--tag", help="appended to the report's name: DATE-DEVICE-upstream-SUITE-tests-TAG")
    p.add_argument("--timeout", type=float, default=120, help="seconds per test (pytest-timeout; default 120)")
    p.add_argument("-k", help="passed to pytest's -k")
    p.add_argument("-m", help="passed to pytest's -m: `-m interpreter` is the subset upstream runs in its interpreter")
    p.add_argument("--jobs", type=int, default=1, help="files run at once (default 1)")
    p.add_argument("--scratch", help="directory to extract into and keep (default: a temporary one, removed)")
    args = p.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if args.jobs < 1 or args.timeout <= 0 or args.workers < 0 or (args.budget is not None and args.budget <= 0):
        p.error("--jobs, --timeout and --budget must be positive, --workers not negative")
    if (args.triton_git is None) == (args.extracted is None):
        p.error("give one of --triton-git and --extracted")
    if args.extract_only and not args.scratch:
        p.error("--extract-only lays the files out in --scratch: give it")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        if args.extracted:
            scratch = Path(args.extracted).resolve()
            sha, names = extracted(scratch, args.files)
        else:
            git_dir = find_git_dir(args.triton_git)
            sha = resolve_commit(git_dir, args.commit)
            tests, helpers = select_files(git_dir, sha, args.files)
            scratch = Path(args.scratch or tempfile.mkdtemp(prefix="kiln-upstream-")).resolve()
            extract(git_dir, sha, tests, helpers, scratch)
            names = [p.rsplit("/", 1)[-1] for p in tests]
    except UsageError as e:
        print(f"upstream_tests: {e}", file=sys.stderr)
        return 2
    print(f"upstream {sha[:12]}: {len(names)} files in {scratch}", file=sys.stderr)
    if args.extract_only:
        return 0
    try:
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            deadline = None if args.budget is None else time.monotonic() + args.budget
            futures = [pool.submit(run_file, n, scratch, args.timeout, args.k, args.m, args.device, args.workers, deadline)
                       for n in names]
            for fut in concurrent.futures.as_completed(futures):
                r = fut.result()
                print(f"  {r.file}: {r.passed} passed, {r.failed} failed, {r.errors} errors, {r.skipped} skipped"
                      + (" (collection error)" if r.collection_error else "")
                      + (" (stopped at the budget)" if r.interrupted else "") + f" in {r.seconds:g} s",
                      file=sys.stderr)
            results = [f.result() for f in futures]
    finally:
        if not args.scratch and not args.extracted:
            shutil.rmtree(scratch, ignore_errors=True)
    report = build_report(results, sha, args)
    text = markdown(report)
    sys.stdout.write(text)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        stem = out / (f"{report['date']}-{args.device}-upstream-{args.suite}-tests" + (f"-{args.tag}" if args.tag else ""))
        stem.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
        stem.with_suffix(".md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
