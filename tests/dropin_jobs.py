"""Runs a torch.compile job script under the drop-in on the GPU, in a fresh process with its own
Inductor and Triton cache directories (the GPU tier's drop-in tests)."""
import json
import os
import subprocess
import sys

import pytest

# A job script's model and step (its forward and backward, the loss and every gradient), at the
# script's top level: a small MLP with LayerNorm and GELU, as Inductor fuses them.
MLP_AND_STEP = """
class MLP(torch.nn.Module):
    def __init__(self, d, hidden):
        super().__init__()
        self.norm = torch.nn.LayerNorm(d)
        self.up = torch.nn.Linear(d, hidden)
        self.down = torch.nn.Linear(hidden, d)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


def step(model, x):
    model.zero_grad()
    loss = model(x).pow(2).mean()
    loss.backward()
    return [loss.detach()] + [p.grad.clone() for p in model.parameters()]

"""

# ...and the job's check of it: the compiled step against eager, as `err` within `scale`.
COMPILED_VS_EAGER = """
model = MLP(32, 64)
x = torch.randn(16, 32)
compiled = step(torch.compile(model), x)
eager = step(model, x)
err = max(float((a - b).abs().max()) for a, b in zip(compiled, eager))
scale = max(float(b.abs().max()) for b in eager)
"""


def run_on_gpu(tmp_path, text: str, runs: int = 1, timeout: float = 300) -> list:
    """The JSON line each run of the job prints last; skips without a GPU or the drop-in hook."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    from kiln.dropin import doctor, hook
    if doctor.installed_hook() is None:
        pytest.skip("kiln's drop-in hook is not installed here: reinstall with pip install -e .")
    script = tmp_path / "job.py"
    script.write_text(text)
    env = {**os.environ, hook.ENV: "1", "KILN_INTERPRET": "0", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
           "TRITON_CACHE_DIR": str(tmp_path / "triton")}
    results = []
    for _ in range(runs):  # later runs find the caches the first one filled
        out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=timeout)
        assert out.returncode == 0, out.stderr[-4000:]
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return results


# Inductor's max-autotune on the CPU under the drop-in (kiln's interpreter runs the kernels): its Triton CPU
# backend, GEMMs as Triton templates only (ATen's, timed against the interpreter, would win at random), and
# no epilogue-fusion benchmarking (Inductor's CPU path of it is broken: tests/test_dropin_max_autotune.py);
# `record_compiles` lets a job see what triton.compile made in its process.
MAX_AUTOTUNE_ON_CPU = """
import torch._inductor.config as inductor_config
inductor_config.cpu_backend = "triton"
inductor_config.max_autotune_gemm_backends = "TRITON"
inductor_config.benchmark_epilogue_fusion = False

def record_compiles(record):  # record(src, kernel) sees each triton.compile of this process; gives the unwrapped one
    real_compile = triton.compile

    def recording_compile(src, *args, **kwargs):
        kernel = real_compile(src, *args, **kwargs)
        record(src, kernel)
        return kernel
    triton.compile = recording_compile
    return real_compile
"""
