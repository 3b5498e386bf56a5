"""Inductor's default-mode kernels of op families the other drop-in tests do not meet (scans, sorts,
top-k, arg-reductions, random numbers, index_add, embedding backward, Welford reductions, bucketize,
dynamic shapes), as the installed PyTorch writes them, compiled by kiln for sm_90a and sm_80.

On the CPU tier the drop-in runs Inductor's kernels in kiln's interpreter, which never lowers them;
here the job keeps every ASTSource it compiled and compiles each again for the two GPU targets, as a
GPU job's compile workers would: every one must build.
"""
import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("torch")
from kiln.dropin import doctor, hook  # noqa: E402

if doctor.installed_hook() is None:
    pytest.skip("kiln's drop-in hook is not installed here: reinstall with pip install -e .", allow_module_level=True)

JOB = textwrap.dedent('''
    import json
    import torch
    import torch._inductor.config as inductor_config
    import triton
    from triton.backends.compiler import GPUTarget

    inductor_config.cpu_backend = "triton"
    inductor_config.compile_threads = 1
    compiled = []
    real_compile = triton.compile

    def recording_compile(src, *args, **kwargs):
        kernel = real_compile(src, *args, **kwargs)
        compiled.append((src, dict(kwargs.get("options") or {}), kernel.name))
        return kernel
    triton.compile = recording_compile

    x, idx = torch.randn(67, 129), torch.randint(0, 67, (101,))
    jobs = [
        (lambda x: torch.cumsum(x, 1), (x,), False),
        (lambda x: torch.logcumsumexp(x, 1), (x,), False),
        (lambda x: torch.sort(x, 1)[0], (x,), True),
        (lambda x: torch.topk(x, 5, 1)[0], (x,), False),
        (lambda x: torch.argmax(x, 0), (x,), True),
        (lambda x: torch.nn.functional.dropout(x, 0.3, training=True), (x,), False),
        (lambda x, i: torch.zeros(67, 129).index_add(0, i, torch.ones(101, 129)), (x, idx), False),
        (lambda w, i: torch.autograd.grad(torch.nn.functional.embedding(i, w).sum(), w)[0],
         (x.clone().requires_grad_(), idx), False),
        (lambda x, w: torch.autograd.grad(torch.nn.functional.layer_norm(x, (129,), w).sum(), (x, w)),
         (x.clone().requires_grad_(), torch.randn(129, requires_grad=True)), True),
        (lambda x: torch.nn.functional.group_norm(x, 4), (torch.randn(2, 16, 8, 8),), False),
        (lambda x: torch.bucketize(x, torch.linspace(-2, 2, 9)), (x,), False),
    ]
    for fn, args, dynamic in jobs:
        torch.compile(fn, dynamic=dynamic)(*args)
        torch._dynamo.reset()
    triton.compile = real_compile

    failures = []
    for src, options, name in compiled:
        for capability in (90, 80):
            try:
                triton.compile(src, target=GPUTarget("cuda", capability, 32), options=options or None)
            except Exception as e:
                failures.append(f"{name} sm_{capability}: {type(e).__name__}: {e}"[:500])
    print(json.dumps({"kernels": sorted({name for _, _, name in compiled}), "failures": failures}))
''')


def test_inductors_kernels_of_other_op_families_compile_for_hopper_and_ampere(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(JOB)
    env = {**os.environ, hook.ENV: "1", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
           "KILN_CACHE_DIR": str(tmp_path / "kiln-cache"), "KILN_DAEMON": "off"}
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-4000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["failures"] == []
    assert len(result["kernels"]) >= 11, result["kernels"]  # each job's kernels at least
