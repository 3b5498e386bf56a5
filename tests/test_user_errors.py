"""What a user sees when a kernel is wrong, or when there is no GPU: the message and the
user's own frames, not kiln's. Each script runs in a process of its own, as a user's would,
and its stderr is read as they would read it."""
import pathlib
import subprocess
import sys
import textwrap

import pytest

import kiln

REPO = pathlib.Path(kiln.__file__).resolve().parent.parent

HEADER = """
import numpy as np
import kiln as triton
import kiln.language as tl

@triton.jit
def bad(X, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(X + offs, tl.load(X + offs) + undefined_name)

@triton.jit
def good(X, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(X + offs, tl.load(X + offs) + 1)

tuned = triton.autotune([triton.Config({}, num_warps=1), triton.Config({}, num_warps=2)], key=["N"])(bad)
x = np.zeros(16, np.float32)
"""


def run_script(tmp_path, body: str, interpret: str) -> subprocess.CompletedProcess:
    script = tmp_path / "user_script.py"
    script.write_text(HEADER + textwrap.dedent(body))
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "KILN_INTERPRET": interpret, "KILN_DAEMON": "off",
           "KILN_CACHE_DIR": str(tmp_path / "cache")}
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.parametrize("interpret", ["0", "1"])
@pytest.mark.parametrize("call", ["bad[(1,)](x, N=16)", "bad.run(x, N=16, grid=(1,))",
                                  "bad.warmup(x, N=16, grid=(1,), target='sm_90a')", "tuned[(1,)](x, N=16)"])
def test_a_kernel_error_shows_the_users_frames_not_kilns(tmp_path, interpret, call):
    out = run_script(tmp_path, call, interpret)
    assert out.returncode == 1
    lines = out.stderr.splitlines()
    assert "CompilationError: " in out.stderr and "user_script.py:9:43: error: at 3:43: in bad" in out.stderr
    assert lines[-1].startswith("NameError"), out.stderr  # the reason last, as Triton's
    caret = next(i for i, line in enumerate(lines) if line.strip() == "^")
    assert lines[caret - 1][lines[caret].index("^"):].startswith("undefined_name")
    assert str(REPO) not in out.stderr, out.stderr  # no frame of kiln's own files
    assert f'File "{tmp_path / "user_script.py"}", line 18' in out.stderr  # the user's call
    assert len(lines) <= 12, out.stderr  # was 35-63 lines


def test_the_cause_is_still_the_underlying_error():
    import numpy as np

    import kiln.language as tl

    @kiln.jit
    def kernel(X, N: tl.constexpr):
        tl.store(X + tl.arange(0, N), not_defined_anywhere)  # noqa: F821

    with pytest.raises(kiln.CompilationError) as info:
        kernel[(1,)](np.zeros(4, np.float32), N=4)
    assert isinstance(info.value.__cause__, NameError) and info.value.__cause__.__traceback__ is None
    kiln_frame = info.value.__traceback__.tb_next  # below this test's own frame: the binder's, and nothing more
    assert kiln_frame.tb_frame.f_code.co_filename.startswith("<kiln") and kiln_frame.tb_next is None


def test_a_launch_without_a_gpu_says_so_in_a_few_lines(tmp_path):
    from kiln.runtime import cuda_driver
    if cuda_driver.is_available():
        pytest.skip("this machine has a GPU")
    out = run_script(tmp_path, "good[(1,)](x, N=16)", interpret="0")
    assert out.returncode == 1
    assert "NoGPUError: no GPU to launch on" in out.stderr, out.stderr
    assert "KILN_INTERPRET=1" in out.stderr and "warmup(" in out.stderr and "target=" in out.stderr
    assert "DynamicLibNotFoundError:" not in out.stderr and str(REPO) not in out.stderr
    assert len(out.stderr.splitlines()) <= 5, out.stderr  # was 32 lines
    ok = run_script(tmp_path, "good.warmup(x, N=16, grid=(1,), target='sm_90a')", interpret="0")
    assert ok.returncode == 0, ok.stderr  # what the message points at works here


def test_the_readme_shows_asm_where_warmup_puts_it(tmp_path):
    readme = (REPO / "README.md").read_text() + (REPO / "docs" / "usage.md").read_text()  # the user's docs
    assert "kernel.asm" not in readme  # a JITFunction has no asm: what warmup returns has
    out = run_script(tmp_path, "print(sorted(good.warmup(x, N=16, grid=(1,), target='sm_90a').asm))", "0")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['cubin', 'kir', 'llir', 'ptx']"
    assert "`compiled.asm` holds `kir`, `llir`, `ptx`, `cubin`" in readme
