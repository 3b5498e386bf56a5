"""`triton.testing`'s helpers for the GPU's own settings (kiln.testing): nvsmi, set_gpu_clock and
cuda_memcheck, against stand-ins of nvidia-smi and compute-sanitizer on PATH that record how they were called."""
import json
import os
import stat
import sys
import textwrap

import pytest

from kiln import testing

FAKE_SMI = textwrap.dedent('''\
    #!{python}
    import json, os, sys
    log = os.environ["FAKE_SMI_LOG"]
    with open(log, "a") as f:
        f.write(json.dumps(sys.argv[1:]) + "\\n")
    state = json.load(open(os.environ["FAKE_SMI_STATE"]))
    for arg in sys.argv[1:]:
        if arg.startswith("--lock-gpu-clocks="):
            state["clocks.current.sm"] = int(arg.split("=")[1].split(",")[0])
        if arg.startswith("--lock-memory-clocks="):
            state["clocks.current.memory"] = int(arg.split("=")[1].split(",")[0])
        if arg.startswith("--query-gpu="):
            print(", ".join(str(state[k]) for k in arg.split("=")[1].split(",")))
    json.dump(state, open(os.environ["FAKE_SMI_STATE"], "w"))
''')


def fake_tool(tmp_path, name: str, script: str):
    """`script` as the program `name` in tmp_path/bin (made once): that folder."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    tool = bin_dir / name
    tool.write_text(script.format(python=sys.executable))
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    return bin_dir


@pytest.fixture
def fake_smi(tmp_path, monkeypatch):
    bin_dir = fake_tool(tmp_path, "nvidia-smi", FAKE_SMI)
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"clocks.max.sm": 1980, "clocks.max.memory": 3201, "clocks.current.sm": 1980,
                                 "clocks.current.memory": 3201, "name": 7}))
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SMI_STATE", str(state))
    monkeypatch.setenv("FAKE_SMI_LOG", str(tmp_path / "calls.log"))
    return tmp_path / "calls.log"


def calls(log):
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_nvsmi_reads_gpu_0_s_fields_as_integers(fake_smi):
    assert testing.nvsmi(["clocks.max.sm"]) == [1980]
    assert testing.nvsmi(["clocks.max.sm", "clocks.max.memory"]) == [1980, 3201]
    assert calls(fake_smi)[0] == ["-i", "0", "--query-gpu=clocks.max.sm", "--format=csv,noheader,nounits"]


def test_a_field_that_is_not_a_number_is_a_clear_error(fake_smi, tmp_path):
    state = json.loads((tmp_path / "state.json").read_text())
    state["clocks.max.sm"] = "[N/A]"
    (tmp_path / "state.json").write_text(json.dumps(state))
    with pytest.raises(ValueError, match="not one integer per field"):
        testing.nvsmi(["clocks.max.sm"])


def test_set_gpu_clock_locks_then_resets_the_clocks_even_when_the_block_fails(fake_smi, monkeypatch):
    monkeypatch.setattr(testing, "get_max_tensorcore_tflops", lambda dtype, khz: 132 * 4 * 512 * khz * 1e-9)
    monkeypatch.setattr(testing, "get_dram_gbps", lambda: 4800.0)
    with testing.set_gpu_clock(1350, 1600) as (tflops, gbps):
        assert tflops == pytest.approx(132 * 4 * 512 * 1350e3 * 1e-9)
        assert gbps == pytest.approx(4800.0 * 1600 / 3201)
    with pytest.raises(KeyError):
        with testing.set_gpu_clock(1350, 1600):
            raise KeyError("inside")
    made = [c[2] for c in calls(fake_smi) if not c[2].startswith("--query")]
    assert made == ["-pm", "--lock-gpu-clocks=1350,1350", "--lock-memory-clocks=1600,1600", "-pm", "-rgc", "-rmc"] * 2


FAKE_SANITIZER = textwrap.dedent('''\
    #!{python}
    import os, subprocess, sys
    with open(os.environ["FAKE_SANITIZER_LOG"], "a") as f:
        f.write(" ".join(sys.argv[1:]) + "\\n")
    child = sys.argv[sys.argv.index("memcheck") + 1:]
    rc = subprocess.run(child).returncode
    print("========= ERROR SUMMARY: %d errors" % int(os.environ.get("FAKE_SANITIZER_ERRORS", "0")))
    sys.exit(rc)
''')

MEMCHECKED = textwrap.dedent('''\
    import os
    import pytest
    from kiln.testing import cuda_memcheck

    @pytest.mark.parametrize("size", [1, 2])
    @cuda_memcheck(size=2)
    def test_case(request, size):
        with open(os.environ["RUN_LOG"], "a") as f:
            f.write(f"{size} {bool(os.environ.get('KILN_UNDER_SANITIZER'))}\\n")
''')


@pytest.mark.parametrize("errors", [0, 3])
def test_cuda_memcheck_runs_the_matching_case_again_under_the_sanitizer(tmp_path, errors):
    bin_dir = fake_tool(tmp_path, "compute-sanitizer", FAKE_SANITIZER)
    (tmp_path / "test_memchecked.py").write_text(MEMCHECKED)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "RUN_LOG": str(tmp_path / "runs.log"),
           "FAKE_SANITIZER_LOG": str(tmp_path / "sanitizer.log"), "FAKE_SANITIZER_ERRORS": str(errors)}
    env.pop("KILN_UNDER_SANITIZER", None)
    import subprocess
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_memchecked.py"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    runs = sorted((tmp_path / "runs.log").read_text().split("\n")[:-1])
    assert runs == ["1 False", "2 True"]  # size 1 ran as it is; size 2 only in the sanitizer's child
    assert "--tool memcheck" in (tmp_path / "sanitizer.log").read_text()
    assert ("1 failed, 1 passed" in out.stdout) == bool(errors) and ("2 passed" in out.stdout) == (not errors), out.stdout
