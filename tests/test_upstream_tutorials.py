"""scripts/upstream_tutorials.py, the harness that runs upstream Triton's tutorials under the drop-in:
`extract` against a throwaway git repository laid out as upstream is, `run` on stand-in tutorials (one
passes and prints a benchmark table, one fails, one hangs, ...). No upstream code, network or GPU."""
import importlib.util
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "upstream_tutorials.py"
_spec = importlib.util.spec_from_file_location("upstream_tutorials", SCRIPT)
harness = importlib.util.module_from_spec(_spec)
sys.modules["upstream_tutorials"] = harness  # dataclasses look their module up
_spec.loader.exec_module(harness)

BENCH = """
    import triton
    import triton.testing

    @triton.testing.perf_report(triton.testing.Benchmark(
        x_names=["size"], x_vals=[1, 2], line_arg="provider", line_vals=["a"], line_names=["A"],
        plot_name="fake-bench", args={}, ylabel="GB/s"))
    def bench(size, provider):
        return WORK(size)
    """
TUTORIALS = {
    "01-pass.py": BENCH.replace("WORK(size)", "float(size)") + """
    print("imported", triton.__name__)
    bench.run(print_data=True, save_path=".")
    open("written-by-the-tutorial.txt", "w").write("x")
    """,
    "02-fail.py": """
    print("about to fail")
    raise ValueError("boom")
    """,
    "03-hang.py": """
    import time
    print("waiting", flush=True)
    time.sleep(600)
    """,
    "04-missing.py": "import no_such_package_for_tutorials\n",
    "05-gpu.py": """
    raise RuntimeError("Found no NVIDIA driver on your system")
    """,
    "06-bench-hang.py": "\n    import time" + BENCH.replace("WORK(size)", "time.sleep(600)") + """
    bench.run(print_data=True)
    """,
}


def _write(folder: Path, files: dict) -> None:
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(textwrap.dedent(text).lstrip("\n"))


def _cuda_here() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except ImportError:
        return False


@pytest.fixture(scope="module")
def tutorials(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tutorials") / "fake"
    folder.mkdir()
    _write(folder, TUTORIALS)
    (folder / harness.SOURCE).write_text(json.dumps({"commit": "f" * 40, "version": "9.9.0", "committed": "2026-01-01",
                                                     "subject": "fake upstream", "files": {}}))
    return folder


@pytest.fixture(scope="module")
def report(tutorials, tmp_path_factory):
    out, cwd = tmp_path_factory.mktemp("out"), tmp_path_factory.mktemp("cwd")
    before = sorted(p.name for p in tutorials.iterdir())
    done = subprocess.run([sys.executable, str(SCRIPT), "run", "--dir", str(tutorials), "--out", str(out),
                           "--timeout", "120", "--timeout-for", "03=3", "--timeout-for", "6=8"],
                          cwd=cwd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    # the tutorials wrote into their own temporary directories: nothing here, nothing beside them
    assert list(cwd.iterdir()) == [] and sorted(p.name for p in tutorials.iterdir()) == before
    return json.loads((out / "tutorials.json").read_text()), (out / "tutorials.md").read_text(), done


def test_each_tutorial_gets_its_status(report):
    data, _, _ = report
    runs = {t["file"]: t["kiln"] for t in data["tutorials"]}
    assert {name: run["status"] for name, run in runs.items()} == {
        "01-pass.py": "passed", "02-fail.py": "failed", "03-hang.py": "timeout",
        "04-missing.py": "missing package", "05-gpu.py": "failed" if _cuda_here() else "needs a GPU",
        "06-bench-hang.py": "benchmark cut"}
    assert all(t["triton"] is None for t in data["tutorials"])  # no --baseline
    assert data["total"]["kiln"]["passed"] == 1 and data["source"]["commit"] == "f" * 40


def test_a_run_records_what_it_imported_and_printed(report):
    data, _, _ = report
    runs = {t["file"]: t["kiln"] for t in data["tutorials"]}
    ok = runs["01-pass.py"]
    assert ok["returncode"] == 0 and ok["imported"].startswith("kiln.")  # the drop-in, checked in the process
    assert ok["tables"] == ["fake-bench"] and "fake-bench:" in ok["table_text"]
    assert ok["benchmarks_done"] == 1 and ok["to_benchmark"] is not None
    assert any(line.startswith("imported kiln") for line in ok["tail"])
    fail = runs["02-fail.py"]
    assert fail["returncode"] == 1 and fail["error"] == "ValueError: boom"
    assert "about to fail" in fail["tail"] and fail["tail"][-1] == "ValueError: boom"
    assert runs["04-missing.py"]["detail"] == "no_such_package_for_tutorials"
    hang, cut = runs["03-hang.py"], runs["06-bench-hang.py"]
    assert hang["limit"] == 3 and hang["tail"] == ["waiting"] and hang["to_benchmark"] is None
    assert cut["limit"] == 8 and cut["to_benchmark"] is not None and cut["benchmarks_done"] == 0


def test_the_markdown_lists_every_tutorial_and_the_tails_of_those_that_did_not_pass(report):
    data, md, done = report
    assert md == done.stdout
    assert "| 01-pass.py | passed |" in md
    assert "| 04-missing.py | missing package (no_such_package_for_tutorials) |" in md
    assert "### 02-fail.py (kiln): failed" in md and "`ValueError: boom`" in md and "about to fail" in md
    assert "### 01-pass.py" not in md  # passed: no tail
    assert "f" * 40 in md and "9.9.0" in md and "03: 3 s" in md


def test_baseline_runs_the_installed_triton_and_gives_ratios(tutorials, tmp_path, monkeypatch):
    fake = tmp_path / "site" / "triton"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("__version__ = '0.0-stand-in'\n")  # no triton.testing: the wrapper copes
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "one"
    _write(folder, {"01-hello.py": "import triton\nprint('hello from', triton.__name__)\n"})
    assert harness.main(["run", "--dir", str(folder), "--out", str(tmp_path / "out"), "--baseline"]) == 0
    data = json.loads((tmp_path / "out" / "tutorials.json").read_text())
    (t,) = data["tutorials"]
    assert t["kiln"]["status"] == t["triton"]["status"] == "passed"
    assert t["kiln"]["imported"].startswith("kiln.") and "0.0-stand-in" in t["triton"]["imported"]
    assert "hello from triton" in t["triton"]["tail"]
    assert t["wall_ratio"] == round(t["kiln"]["seconds"] / t["triton"]["seconds"], 3)
    assert t["to_benchmark_ratio"] is None  # neither ran a benchmark
    md = (tmp_path / "out" / "tutorials.md").read_text()
    assert "kiln/Triton (wall)" in md and "**Triton:** 1 passed" in md


def test_only_and_the_budget_bound_what_runs(tutorials, tmp_path, capsys):
    assert harness.main(["run", "--dir", str(tutorials), "--out", str(tmp_path), "--only", "4,03",
                         "--budget", "6"]) == 0
    data = json.loads((tmp_path / "tutorials.json").read_text())
    runs = {t["file"]: t["kiln"] for t in data["tutorials"]}
    assert list(runs) == ["03-hang.py", "04-missing.py"]
    assert runs["03-hang.py"]["status"] == "timeout" and runs["03-hang.py"]["limit"] <= 6
    assert runs["04-missing.py"]["status"] == "not run"  # the hang spent the budget


@pytest.mark.parametrize("args, message", [
    (["--only", "07"], "--only 07: no such tutorial"),
    (["--dir", "/no/such/dir"], "no such directory"),
])
def test_bad_run_arguments_exit_2_with_a_message(tutorials, tmp_path, capsys, args, message):
    argv = ["run", "--out", str(tmp_path)] + (args if "--dir" in args else ["--dir", str(tutorials), *args])
    assert harness.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("upstream_tutorials: ") and message in err


# ---- extract ------------------------------------------------------------------------------------

def _git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def fake_upstream(tmp_path_factory):
    repo = tmp_path_factory.mktemp("triton")
    _write(repo, {"python/triton/__init__.py": "__version__ = '9.9.0'\n",
                  "python/tutorials/01-a.py": "print('a')\n", "python/tutorials/02-b.py": "print('b')\n",
                  "python/tutorials/README.rst": "tutorials\n", "python/tutorials/gluon/01-g.py": "print('g')\n"})
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "fake upstream")
    return repo, _git(repo, "rev-parse", "HEAD")


def test_extract_writes_the_tutorials_of_the_ref_and_where_they_came_from(fake_upstream, tmp_path):
    repo, sha = fake_upstream
    assert harness.main(["extract", "--triton-git", str(repo), "--ref", sha[:8], "--dest", str(tmp_path)]) == 0
    dest = tmp_path / sha[:8]
    assert sorted(p.name for p in dest.iterdir()) == ["01-a.py", "02-b.py", "SOURCE.json"]  # no gluon, no rst
    assert (dest / "02-b.py").read_text() == "print('b')\n"
    source = json.loads((dest / "SOURCE.json").read_text())
    assert (source["commit"], source["version"], source["subject"]) == (sha, "9.9.0", "fake upstream")
    assert sorted(source["files"]) == ["01-a.py", "02-b.py"]
    # again, by name, over an earlier extract: replaced whole
    (dest / "99-stale.py").write_text("")
    assert harness.main(["extract", "--triton-git", str(repo / ".git"), "--ref", "HEAD", "--dest", str(tmp_path),
                         "--name", sha[:8]]) == 0
    assert not (dest / "99-stale.py").exists()


@pytest.mark.parametrize("args, message", [
    (["--ref", "deadbeef"], "no such commit"),
    (["--ref", "HEAD", "--name", "foreign"], "did not write"),
])
def test_bad_extract_arguments_exit_2_with_a_message(fake_upstream, tmp_path, capsys, args, message):
    repo, _ = fake_upstream
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "mine.txt").write_text("not the harness's")
    assert harness.main(["extract", "--triton-git", str(repo), "--dest", str(tmp_path), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("upstream_tutorials: ") and message in err
    assert (tmp_path / "foreign" / "mine.txt").exists()


# ---- reading a run ------------------------------------------------------------------------------

def test_benchmark_tables_are_found_in_printed_output():
    import kiln.testing
    table = kiln.testing._format_table(["size", "Triton (GB/s)"], [[4096, 1.5], [8192, 2.25]])
    lines = ["checks passed", "vector-add-performance:", *table.splitlines(), "after", "not-a-table:", "x"]
    ((name, text),) = harness.benchmark_tables(lines)
    assert name == "vector-add-performance" and text.splitlines()[-1].split() == ["1", "8192", "2.25"]


@pytest.mark.parametrize("mode, returncode, timed_out, probe, status", [
    ("kiln", 0, False, {}, "passed"),
    ("kiln", None, True, {"benchmarks": [{"start": 1.0, "end": None}]}, "benchmark cut"),
    ("kiln", 3, False, {"triton": {"name": "triton"}, "kiln": False}, "wrong triton"),
    ("triton", 3, False, {"triton": {"name": "kiln.dropin.facade"}, "kiln": True}, "wrong triton"),
    ("kiln", 1, False, {"exception": {"type": "ModuleNotFoundError", "message": "No module named 'triton'",
                                      "missing": "triton"}}, "wrong triton"),
    ("triton", 1, False, {"exception": {"type": "ModuleNotFoundError", "message": "No module named 'triton'",
                                        "missing": "triton"}}, "missing package"),
    # a triton module the drop-in lacks is kiln's gap, not a package to install
    ("kiln", 1, False, {"triton": {}, "kiln": True, "exception": {
        "type": "ModuleNotFoundError", "message": "No module named 'triton.x'", "missing": "triton.x"}}, "failed"),
    ("kiln", 1, False, {"triton": {}, "kiln": True, "cuda": True, "exception": {
        "type": "RuntimeError", "message": "CUDA error: out of memory", "missing": None}}, "failed"),
    ("kiln", 1, False, {"triton": {}, "kiln": True, "cuda": False, "exception": {
        "type": "AssertionError", "message": "Torch not compiled with CUDA enabled", "missing": None}}, "needs a GPU"),
    ("kiln", -11, False, {"triton": {}, "kiln": True}, "failed"),
])
def test_classify(mode, returncode, timed_out, probe, status):
    run = harness.Run(mode, returncode=returncode)
    harness.classify(run, timed_out, probe)
    assert run.status == status
    if returncode == -11:
        assert run.error == "killed by signal 11"
