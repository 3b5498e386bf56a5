"""torch.compile(mode="max-autotune-no-cudagraphs") under kiln's drop-in mode on the CPU tier.

With Inductor's Triton CPU backend (`cpu_backend = "triton"`) that mode does on top of the default
one: GEMMs become Triton templates (`mm`/`addmm` of torch/_inductor/kernel/mm.py) of several
configs each, every config compiled through `triton.compile` (kiln's) and timed by Inductor's own
CPU benchmarker (a wall-clock loop around the launcher; `triton.testing.do_bench` is its GPU path)
before the fastest is fused with its epilogue into the graph's `triton_tem_*` kernel; and the
pointwise and reduction kernels go through coordinate-descent tuning at their first launch (more
configs compiled, each launched and timed). The job here trains the MLP of
tests/test_dropin_inductor.py for one step (forward, backward, AdamW, the model and the optimizer
step each compiled in that mode) with Inductor's compile workers, and checks its loss, gradients and
updated weights against eager, which kernels ran, and that several configs of each kind were
compiled by kiln in the job's process.

Three settings keep it deterministic and short: GEMM choices are Triton's only (ATen's, timed
against kiln's interpreter, would win at random), at most 4 configs per GEMM, and 1/5 ms
benchmarking for the coordinate descent. `benchmark_epilogue_fusion` is off: Inductor's CPU side of it
fails before any Triton call (PyTorch 2.13: the benchmark module it writes does not parse —
`CpuDeviceOpOverrides.import_get_raw_stream_as` is two lines inside a dedent — and, that fixed,
`CpuInterface.device` raises NotImplementedError), with any Triton.
"""
import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("torch")
from dropin_jobs import MAX_AUTOTUNE_ON_CPU, MLP_AND_STEP  # noqa: E402
from kiln.dropin import doctor, hook  # noqa: E402

if doctor.installed_hook() is None:
    pytest.skip("kiln's drop-in hook is not installed here: reinstall with pip install -e .", allow_module_level=True)

JOB = textwrap.dedent("""
    import copy, json, sys
    import torch
    import triton
""") + MAX_AUTOTUNE_ON_CPU + textwrap.dedent("""
    inductor_config.compile_threads = 2
    inductor_config.test_configs.max_mm_configs = 4
    inductor_config.inductor_default_autotune_warmup = 1
    inductor_config.inductor_default_autotune_rep = 5
    MODE = "max-autotune-no-cudagraphs"

    launched = set()
    triton.knobs.runtime.launch_enter_hook = lambda meta: launched.add(meta.get()["name"])
    compiled_here = []  # triton.compile in this process: templates' configs, coordinate descent's
    record_compiles(lambda src, kernel: compiled_here.append({
        "name": kernel.name, "module": type(kernel).__module__, "hash": kernel.hash,
        "config": repr(sorted(src.constants.items())) + f" w{kernel.metadata.num_warps} s{kernel.metadata.num_stages}"}))
    torch.manual_seed(0)
""") + MLP_AND_STEP + textwrap.dedent("""
    def train_step(model, forward, optimizer_step, optimizer, x):
        optimizer.zero_grad(set_to_none=True)
        loss = forward(x).pow(2).mean()
        loss.backward()
        grads = [p.grad.clone() for p in model.parameters()]
        optimizer_step()
        return [loss.detach()] + grads + [p.detach().clone() for p in model.parameters()]


    model = MLP(32, 64)
    reference = copy.deepcopy(model)
    x = torch.randn(16, 32)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    reference_opt = torch.optim.AdamW(reference.parameters(), lr=1e-3, weight_decay=0.01)

    @torch.compile(mode=MODE)
    def opt_step():
        opt.step()

    compiled = train_step(model, torch.compile(model, mode=MODE), opt_step, opt, x)
    eager = train_step(reference, reference, reference_opt.step, reference_opt, x)
    errors = [float((a - b).abs().max()) for a, b in zip(compiled, eager)]
    scales = [float(b.abs().max()) for b in eager]
    print(json.dumps({"triton": triton.__name__, "errors": errors, "scales": scales, "launched": sorted(launched),
                      "compiled_here": compiled_here}))
""")


def test_mlp_training_step_max_autotune_equals_eager(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(JOB)
    env = {**os.environ, hook.ENV: "1", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
           "KILN_CACHE_DIR": str(tmp_path / "kiln-cache")}
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-4000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["triton"] == "kiln.dropin.facade"
    launched = result["launched"]
    # the GEMMs ran as templates (max-autotune's; the default mode calls ATen's mm) with fused epilogues
    templates = [k for k in launched if k.startswith("triton_tem_")]
    assert len(templates) >= 3 and any("gelu" in k for k in templates), launched
    assert "triton_mm" in launched, launched  # each template config launched by Inductor's benchmark
    assert any("layer_norm_backward" in k for k in launched) and any("addcdiv" in k for k in launched), launched
    compiled = result["compiled_here"]
    assert {c["module"] for c in compiled} == {"kiln.dropin.compile"}, compiled
    mm_configs = {c["config"] for c in compiled if c["name"] == "triton_mm"}  # a template's own source each
    mm_kernels = {c["hash"] for c in compiled if c["name"] == "triton_mm"}
    assert len(mm_configs) >= 2 and len(mm_kernels) >= 12, (mm_configs, len(mm_kernels))  # 6 GEMMs, 4 configs
    tuned = {}  # coordinate descent: one kernel compiled with several configs in this process
    for c in compiled:
        if c["name"] != "triton_mm":
            tuned.setdefault(c["name"], set()).add(c["config"])
    assert any(len(configs) > 1 for configs in tuned.values()), tuned
    # the loss, the gradients and the weights after AdamW's step, each against eager's
    assert all(e <= 1e-5 * max(1.0, s) for e, s in zip(result["errors"], result["scales"])), result["errors"]
