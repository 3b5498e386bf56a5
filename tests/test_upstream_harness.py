"""scripts/upstream_tests.py, the harness that runs upstream Triton's language tests under the drop-in,
against a throwaway git repository laid out as upstream is: no upstream code and no network needed."""
import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "upstream_tests.py"
_spec = importlib.util.spec_from_file_location("upstream_tests", SCRIPT)
harness = importlib.util.module_from_spec(_spec)
sys.modules["upstream_tests"] = harness  # dataclasses look their module up
_spec.loader.exec_module(harness)

FAKE = {
    "python/test/conftest.py": """
        import pytest

        def pytest_addoption(parser):
            parser.addoption("--device", action="store", default="cuda")

        @pytest.fixture
        def device(request):
            return request.config.getoption("--device")
        """,
    "python/triton/_internal_testing.py": "MARK = 'stand-in'\n",
    "python/test/unit/language/helper.py": "VALUE = 2\n",
    "python/test/unit/language/test_x.py": """
        import os
        import pytest
        from triton._internal_testing import MARK
        from helper import VALUE

        def test_device_and_env(device):
            env = os.environ["KILN_DROPIN"], os.environ["TRITON_INTERPRET"]
            assert (device, env, MARK) == ("cpu", ("1", "1"), "stand-in")

        @pytest.mark.interpreter
        @pytest.mark.parametrize("n", [2])
        def test_helper(n):
            assert VALUE == n

        def test_wrong():
            assert VALUE == 3, "two is not three"

        def test_setup_error(no_such_fixture):
            pass

        @pytest.mark.skip(reason="not here")
        def test_skipped():
            pass
        """,
    "python/test/unit/language/test_broken.py": "import no_such_module_anywhere\n",
}


def _git(repo, *args):
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


@pytest.fixture(scope="module")
def fake_triton(tmp_path_factory):
    repo = tmp_path_factory.mktemp("triton")
    for path, text in FAKE.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text("\n".join(line[8:] if line.startswith(" " * 8) else line
                                           for line in text.strip("\n").splitlines()) + "\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "fake upstream")
    sha = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    return repo, sha


def test_report_counts_each_file_and_lists_failures(fake_triton, tmp_path, capsys):
    repo, sha = fake_triton
    out = tmp_path / "out"
    assert harness.main(["--triton-git", str(repo), "--commit", sha[:8], "--out", str(out), "--jobs", "2",
                         "--timeout", "30"]) == 0
    report = json.loads(next(out.glob("*-cpu-upstream-language-tests.json")).read_text())
    assert report["commit"] == sha
    files = {f["file"]: f for f in report["files"]}
    assert set(files) == {"test_x.py", "test_broken.py"}  # helper.py is copied, not run
    x = files["test_x.py"]
    assert (x["collected"], x["passed"], x["failed"], x["errors"], x["skipped"]) == (5, 2, 1, 1, 1)
    assert x["collection_error"] is None
    assert x["failures"] == [{"test": "test_x.py::test_wrong", "outcome": "failed",
                              "reason": "AssertionError: two is not three"},
                             {"test": "test_x.py::test_setup_error", "outcome": "error",
                              "reason": "fixture 'no_such_fixture' not found"}]
    broken = files["test_broken.py"]
    assert broken["collected"] == 0
    assert "No module named 'no_such_module_anywhere'" in broken["collection_error"]
    assert {k: report["total"][k] for k in ("files", "files_collected", "collected", "passed", "failed")} == \
        {"files": 2, "files_collected": 1, "collected": 5, "passed": 2, "failed": 1}

    md = next(out.glob("*-cpu-upstream-language-tests.md")).read_text()
    assert md == capsys.readouterr().out
    assert "| test_x.py | 5 | 2 | 1 | 1 | 1 | 50.0% |" in md
    assert "| test_broken.py | 0 | 0 | 0 | 0 | 0 | collection error |" in md
    assert "`test_x.py::test_wrong` (failed): AssertionError: two is not three" in md
    assert "1 of 2 files collected" in md and "50.0% of those that ran" in md


def test_files_and_k_select_what_runs(fake_triton, tmp_path, capsys):
    repo, sha = fake_triton
    scratch = tmp_path / "scratch"
    assert harness.main(["--triton-git", str(repo / ".git"), "--commit", sha, "--files", "test_x.py",
                         "-k", "helper or wrong or skipped", "--scratch", str(scratch)]) == 0
    md = capsys.readouterr().out
    assert "| test_x.py | 3 | 1 | 1 | 0 | 1 | 50.0% |" in md and "test_broken" not in md
    # laid out flat as a user would: upstream's conftest and _internal_testing beside a shim conftest
    assert {"conftest.py", "conftest_upstream.py", "_internal_testing_upstream.py", "helper.py",
            "test_x.py", "test_broken.py"} <= {p.name for p in scratch.iterdir()}


def test_m_runs_the_marked_subset(fake_triton, tmp_path, capsys):
    repo, sha = fake_triton
    assert harness.main(["--triton-git", str(repo / ".git"), "--commit", sha, "--files", "test_x.py",
                         "-m", "interpreter", "--scratch", str(tmp_path / "scratch")]) == 0
    md = capsys.readouterr().out
    assert "| test_x.py | 1 | 1 | 0 | 0 | 0 | 100.0% |" in md and "`-m interpreter`" in md


def test_suite_and_tag_name_the_report(fake_triton, tmp_path, capsys):
    repo, sha = fake_triton
    out = tmp_path / "out"
    assert harness.main(["--triton-git", str(repo), "--commit", sha, "--files", "test_x.py", "-k", "helper",
                         "--suite", "runtime", "--tag", "session9", "--out", str(out)]) == 0
    assert json.loads((out / next(out.glob("*-cpu-upstream-runtime-tests-session9.json")).name).read_text())[
        "suite"] == "runtime"
    assert capsys.readouterr().out.startswith("# Upstream Triton runtime tests under kiln's drop-in")


@pytest.mark.parametrize("args, message", [
    (["--triton-git", "/no/such/dir"], "no such directory"),
    (["--triton-git", "."], "not a git repository"),
    (["--commit", "deadbeef"], "no such commit"),
    (["--commit", "HEAD", "--files", "test_nothing*.py"], "matches nothing"),
])
def test_bad_arguments_exit_2_with_a_message(fake_triton, tmp_path, monkeypatch, capsys, args, message):
    repo, _ = fake_triton
    monkeypatch.chdir(tmp_path)  # "." is no git repository
    argv = args if args[0] == "--triton-git" else ["--triton-git", str(repo), *args]
    assert harness.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("upstream_tests: ") and message in err


def test_files_laid_out_once_run_compiled_for_the_gpu_without_git(fake_triton, tmp_path, capsys):
    """--extract-only lays the files out (and the commit) for a machine without upstream's git; --extracted runs
    them there, `--device cuda` without TRITON_INTERPRET (test_x's check of it fails so), over xdist workers."""
    repo, sha = fake_triton
    scratch, out = tmp_path / "scratch", tmp_path / "out"
    assert harness.main(["--triton-git", str(repo), "--commit", sha, "--files", "test_x.py", "--scratch", str(scratch),
                         "--extract-only"]) == 0
    assert (scratch / "UPSTREAM_COMMIT").read_text().strip() == sha and not (scratch / "junit").exists()
    capsys.readouterr()
    assert harness.main(["--extracted", str(scratch), "--files", "test_x.py", "-k", "helper or device_and_env",
                         "--device", "cuda", "--workers", "2", "--out", str(out)]) == 0
    report = json.loads(next(out.glob("*-cuda-upstream-language-tests.json")).read_text())
    assert report["commit"] == sha and (report["device"], report["workers"]) == ("cuda", 2)
    (x,) = report["files"]
    assert (x["passed"], x["failed"]) == (1, 1) and "TRITON_INTERPRET" in x["failures"][0]["reason"]
    md = capsys.readouterr().out
    assert md.startswith("# Upstream Triton language tests under kiln's drop-in (CUDA, ")
    assert "`KILN_DROPIN=1 python -m pytest FILE -q -p no:cacheprovider --device cuda --timeout 120 -n 2`" in md


@pytest.mark.parametrize("args", [[], ["--extracted", "x", "--triton-git", "y"], ["--triton-git", "y", "--extract-only"]])
def test_where_the_files_come_from_must_be_said_once(args):
    with pytest.raises(SystemExit) as stop:
        harness.parse_args(args)
    assert stop.value.code == 2


def test_a_directory_never_laid_out_is_refused(tmp_path, capsys):
    assert harness.main(["--extracted", str(tmp_path)]) == 2
    assert "no UPSTREAM_COMMIT there" in capsys.readouterr().err


def test_a_budget_interrupts_pytest_and_keeps_what_it_ran(fake_triton, tmp_path, capsys):
    """At --budget pytest gets a Ctrl-C: the file's report keeps the tests run until then (a device call that would
    otherwise end with nothing), and a file not started by then is reported as not run."""
    repo, sha = fake_triton
    scratch = tmp_path / "scratch"
    assert harness.main(["--triton-git", str(repo), "--commit", sha, "--files", "test_x.py", "--scratch", str(scratch),
                         "--extract-only"]) == 0
    (scratch / "test_slow.py").write_text("import time\n\ndef test_quick():\n    pass\n\n"
                                          "def test_slow():\n    time.sleep(60)\n\ndef test_never():\n    pass\n")
    capsys.readouterr()
    started = time.monotonic()
    assert harness.main(["--extracted", str(scratch), "--files", "test_slow.py", "test_x.py", "--budget", "6",
                         "--timeout", "120"]) == 0
    assert time.monotonic() - started < 40
    md = capsys.readouterr().out
    assert "| test_slow.py (stopped at the budget) |" in md
    slow = md.split("| test_slow.py (stopped at the budget) |")[1].split("\n")[0]
    assert [c.strip() for c in slow.split("|")[:3]] == ["1", "1", "0"]  # collected, passed, failed: test_quick
    assert "| test_x.py (stopped at the budget) | 0 | 0 |" in md and "not run: the budget was spent" in md
