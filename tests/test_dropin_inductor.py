"""torch.compile under kiln's drop-in mode on the CPU tier: Inductor's Triton CPU backend
(`cpu_backend = "triton"`) generates Triton kernels, `import triton` is kiln, and kiln's
interpreter runs them (forward and backward of a small MLP with LayerNorm and GELU), with the
compile in Inductor's worker processes or in the job's own."""
import json
import os
import subprocess
import sys
import textwrap

import pytest
from dropin_jobs import COMPILED_VS_EAGER, MLP_AND_STEP

pytest.importorskip("torch")
from kiln.dropin import doctor, hook  # noqa: E402

if doctor.installed_hook() is None:
    pytest.skip("kiln's drop-in hook is not installed here: reinstall with pip install -e .", allow_module_level=True)

JOB = textwrap.dedent("""
    import json, sys
    import torch
    import torch._inductor.config as inductor_config
    import triton

    inductor_config.cpu_backend = "triton"
    inductor_config.compile_threads = int(sys.argv[1])
    launched = set()
    triton.knobs.runtime.launch_enter_hook = lambda meta: launched.add(meta.get()["name"])
    torch.manual_seed(0)


""") + MLP_AND_STEP + COMPILED_VS_EAGER + textwrap.dedent("""
    import os

    def cmdline(pid):
        try:
            return open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace")
        except OSError:  # gone meanwhile
            return ""

    def ours(pid):  # this job's descendant: another test's job may run its own workers beside it
        while pid not in ("0", "1"):
            try:
                pid = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1]
            except (OSError, IndexError):
                return False
            if pid == str(os.getpid()):
                return True
        return False
    workers = [p for p in os.listdir("/proc") if p.isdigit() and "compile_worker" in cmdline(p) and ours(p)]
    print(json.dumps({"triton": triton.__name__, "err": err, "scale": scale, "launched": sorted(launched),
                      "workers": len(workers)}))
""")


@pytest.mark.parametrize("compile_threads", [1, 2], ids=["in-process", "compile-workers"])
def test_mlp_forward_backward_equals_eager(tmp_path, compile_threads):
    script = tmp_path / "job.py"
    script.write_text(JOB)
    env = {**os.environ, hook.ENV: "1", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    out = subprocess.run([sys.executable, str(script), str(compile_threads)], env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-4000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["triton"] == "kiln.dropin.facade"
    assert (result["workers"] > 0) == (compile_threads > 1), result["workers"]  # Inductor's worker subprocesses
    launched = result["launched"]
    assert any("layer_norm" in k and "backward" not in k for k in launched), launched  # forward kernels
    assert any("gelu_backward" in k for k in launched) and any("layer_norm_backward" in k for k in launched)
    assert result["err"] <= 1e-5 * max(1.0, result["scale"]), result


USER_KERNEL_JOB = textwrap.dedent("""
    import json
    import torch
    import torch._inductor.config as inductor_config
    import triton
    import triton.language as tl

    inductor_config.cpu_backend = "triton"


    THREE: tl.constexpr = tl.constexpr(3)  # Inductor writes it out with its annotation's module


    @triton.constexpr_function
    def doubled(x):
        return 2 * x


    @triton.autotune(configs=[triton.Config({"BLOCK": 32}), triton.Config({"BLOCK": 64})], key=["n"])
    @triton.jit
    def scale_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * doubled(THREE), mask=offs < n)


    def f(x):
        y = torch.empty_like(x)
        n = x.numel()
        scale_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, n)
        return y + 1


    x = torch.arange(100, dtype=torch.float32)
    out = torch.compile(f)(x)
    print(json.dumps({"triton": triton.__name__, "equal": bool(torch.equal(out, x * 6 + 1)),
                      "constexpr_src": scale_kernel.base_fn.__globals__["doubled"].src.split("(")[0]}))
""")


def test_a_users_autotuned_kernel_inside_torch_compile(tmp_path):
    """Dynamo wraps a user's `@triton.autotune` kernel (it reads Triton's Autotuner attributes)
    and Inductor copies its source, and the source of the constexpr functions it calls, into
    the module it generates."""
    script = tmp_path / "job.py"
    script.write_text(USER_KERNEL_JOB)
    env = {**os.environ, hook.ENV: "1", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"), "KILN_INTERPRET": "1"}
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-4000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result == {"triton": "kiln.dropin.facade", "equal": True, "constexpr_src": "def doubled"}, out.stderr[-2000:]


TRITON_INTERPRET_JOB = textwrap.dedent("""
    import json
    import torch
    import torch._inductor.config as inductor_config
    import triton
    from triton.runtime.interpreter import InterpretedFunction
    inductor_config.cpu_backend = "triton"

    @triton.jit
    def kernel(x):
        pass

    def f(x, y):
        return torch.relu(x * y + 1).sum(0)
    x, y = torch.randn(64, 32), torch.randn(64, 32)
    print(json.dumps({"close": bool(torch.allclose(torch.compile(f)(x, y), f(x, y), atol=1e-5)),
                      "kiln_kernel_is_interpreted_function": isinstance(kernel, InterpretedFunction)}))
""")


def test_torch_compile_under_tritons_interpreter_switch(tmp_path):
    """TRITON_INTERPRET=1: Inductor asks for Triton's interpreter's function class while it launches
    (triton.runtime.interpreter); kiln's kernels interpret themselves and are not of it."""
    script = tmp_path / "job.py"
    script.write_text(TRITON_INTERPRET_JOB)
    env = {**os.environ, hook.ENV: "1", "TRITON_INTERPRET": "1", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-4000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"close": True, "kiln_kernel_is_interpreted_function": False}


USER_KERNELS_UNDER_TRITON_INTERPRET_JOB = textwrap.dedent("""
    import json
    import torch
    import triton
    import triton.language as tl


    @triton.jit
    def axpy(x_ptr, A: tl.constexpr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, A * tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


    @triton.autotune(configs=[triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 64})], key=["n"])
    @triton.jit
    def shifted(x_ptr, out_ptr, n, SHIFT: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + SHIFT, mask=offs < n)


    def f(x, y):
        out = torch.empty_like(x)
        n = x.numel()
        axpy[(triton.cdiv(n, 32),)](x, 3.0, y, out, n, BLOCK=32)
        again = torch.empty_like(x)
        shifted[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](out * 2, again, n, SHIFT=5)
        return again + 1


    x, y = torch.randn(100), torch.randn(100)
    print(json.dumps({"equal": bool(torch.equal(torch.compile(f)(x, y), f(x, y)))}))
""")


@pytest.mark.parametrize("share_graphs", ["1", "0"])
def test_users_kernels_inside_torch_compile_under_tritons_interpreter_switch(tmp_path, share_graphs):
    """TRITON_INTERPRET=1: Dynamo traces a user's kiln kernel (a JITFunction), and Inductor's
    interpreter launch would call it with its config's constexprs only (TypeError: missing `A`);
    Inductor launches it compiled instead, so constexprs given at the call, one of them between
    tensors, and an autotuned one's config reach it, graph sharing on or off."""
    script = tmp_path / "job.py"
    script.write_text(USER_KERNELS_UNDER_TRITON_INTERPRET_JOB)
    env = {**os.environ, hook.ENV: "1", "TRITON_INTERPRET": "1", "KILN_SHARE_GRAPHS": share_graphs,
           "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-4000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"equal": True}, out.stderr[-2000:]
