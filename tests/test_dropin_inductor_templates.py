"""Inductor's own GEMM templates, as the installed PyTorch writes them, compiled by kiln for the GPUs.

A torch.compile job in max-autotune mode on the CPU (Inductor's Triton CPU backend, kiln's drop-in)
makes Inductor write its templates (mm with sizes held as constants and passed, addmm with its bias
fused, bmm, mm_plus_mm); the job keeps each template's source, sets its block sizes to ones its GPU configs take,
and compiles it with kiln's `triton.compile` for sm_90a and sm_80 from fp16 operands, as a GPU job's
max-autotune would. A template with sizes passed once crashed lowering for Hopper (its stride tests
joined B's hinted and unhinted index math); each must compile, and on Hopper run its K loop on
wgmma and be a split-K GEMM.
"""
import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("torch")
from dropin_jobs import MAX_AUTOTUNE_ON_CPU  # noqa: E402
from kiln.dropin import doctor, hook  # noqa: E402

if doctor.installed_hook() is None:
    pytest.skip("kiln's drop-in hook is not installed here: reinstall with pip install -e .", allow_module_level=True)

JOB = textwrap.dedent('''
    import importlib.util, json, os, re, sys
    import torch
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
''') + MAX_AUTOTUNE_ON_CPU + textwrap.dedent('''
    inductor_config.compile_threads = 1
    inductor_config.test_configs.max_mm_configs = 1

    templates = {}

    def keep_template(src, kernel):
        if kernel.name.startswith("triton_tem_"):
            templates.setdefault(src.fn.src, (kernel.name, {str(k): str(v) for k, v in src.signature.items()}))
    real_compile = record_compiles(keep_template)

    a, b, bias = torch.randn(32, 64), torch.randn(64, 48), torch.randn(48)
    for fn, args, dynamic in ((lambda x, y: x @ y, (a, b), False), (lambda x, y: x @ y, (a, b), True),
                              (lambda x, y, z: torch.addmm(z, x, y), (a, b, bias), False),
                              (torch.bmm, (torch.randn(2, 32, 64), torch.randn(2, 64, 48)), False),
                              (lambda w, x, y, z: w @ x + y @ z, [torch.randn(64, 64) for _ in range(4)], False)):
        torch.compile(fn, mode="max-autotune-no-cudagraphs", dynamic=dynamic)(*args)
        torch._dynamo.reset()
    triton.compile = real_compile

    HEADER = ("import triton\\nimport triton.language as tl\\n"
              "from torch._inductor.runtime.triton_helpers import libdevice, math as tl_math\\n\\n@triton.jit\\n")
    results = []
    for n, (source, (name, signature)) in enumerate(templates.items()):
        for bm, bn, bk, warps, stages in ((64, 128, 64, 4, 3), (128, 128, 64, 8, 3)):
            text = source
            for dim, size in (("M", bm), ("N", bn), ("K", bk)):
                text, found = re.subn(rf"BLOCK_{dim} : tl.constexpr = \\d+", f"BLOCK_{dim} : tl.constexpr = {size}",
                                      text)
                assert found == 1, f"{name}: no BLOCK_{dim} line in the template"
            path = os.path.join(sys.argv[1], f"template_{n}_{bm}_{bn}.py")
            with open(path, "w") as f:
                f.write(HEADER + text)
            spec = importlib.util.spec_from_file_location(f"template_{n}_{bm}_{bn}", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            fp16 = {k: "*fp16" if v == "*fp32" else v for k, v in signature.items()}
            attrs = {(i,): [["tt.divisibility", 16]] for i in range(len(fp16))}
            for capability in (90, 80):
                row = {"name": name, "sizes": "passed" if any(v == "i32" for v in fp16.values()) else "fixed",
                       "config": [bm, bn, bk], "capability": capability}
                try:
                    kernel = triton.compile(ASTSource(getattr(module, name), fp16, {}, attrs),
                                            target=GPUTarget("cuda", capability, 32),
                                            options={"num_warps": warps, "num_stages": stages})
                    ptx = kernel.asm["ptx"]
                    row.update(wgmma="wgmma.mma_async" in ptx, mma="mma.sync" in ptx,
                               splittable=bool(kernel.binary.metadata.get("splittable")))
                except Exception as e:
                    row["error"] = f"{type(e).__name__}: {e}"[:500]
                results.append(row)
    print(json.dumps(results))
''')


def test_inductors_gemm_templates_compile_for_hopper_and_ampere(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(JOB)
    env = {**os.environ, hook.ENV: "1", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
           "KILN_CACHE_DIR": str(tmp_path / "kiln-cache"), "KILN_DAEMON": "off"}
    out = subprocess.run([sys.executable, str(script), str(tmp_path)], env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-4000:]
    results = json.loads(out.stdout.strip().splitlines()[-1])
    assert [r for r in results if "error" in r] == []
    names = {(r["name"], r["sizes"]) for r in results}
    assert {("triton_tem_fused_mm_0", "fixed"), ("triton_tem_fused_mm_0", "passed")} <= names, names
    assert any("addmm" in name for name, _ in names) and any("bmm" in name for name, _ in names), names
    assert any("fused_add" in name for name, _ in names), names  # a @ b + c @ d: mm_plus_mm's two K loops
    hopper = [r for r in results if r["capability"] == 90]
    ampere = [r for r in results if r["capability"] == 80]
    assert all(r["wgmma"] for r in hopper) and all(r["mma"] and not r["wgmma"] for r in ampere)
    # the 2-D GEMMs after their early exit on the sizes (fixed: folded; passed: a branch), split on Hopper
    assert all(r["splittable"] for r in hopper if "_mm_" in r["name"]), hopper
