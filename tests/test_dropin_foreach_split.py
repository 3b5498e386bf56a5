"""Inductor's foreach kernels split into groups the node daemon's workers compile at once
(KILN_FOREACH_ARGS; CPU tier: Inductor's Triton CPU backend on kiln's interpreter)."""
import json
import os
import subprocess
import sys
import textwrap
import types

import pytest

pytest.importorskip("torch")
from kiln.dropin import doctor, hook, inductor  # noqa: E402

JOB = textwrap.dedent("""
    import copy, glob, json, os, re
    import torch
    import torch._inductor.config as inductor_config
    from torch import nn

    inductor_config.cpu_backend = "triton"
    torch.manual_seed(0)
    blocks = [nn.Sequential(nn.LayerNorm(32), nn.Linear(32, 48), nn.Linear(48, 32)) for _ in range(4)]
    model = nn.Sequential(*blocks)
    twin = copy.deepcopy(model)
    x = torch.randn(8, 32)
    for m in (model, twin):
        m(x).square().mean().backward()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=True)
    eager = torch.optim.AdamW(twin.parameters(), lr=1e-2, foreach=True)

    @torch.compile
    def step():
        opt.step()
    step()
    eager.step()
    err = max((a - b).abs().max().item() for a, b in zip(model.parameters(), twin.parameters()))
    sources = [open(f).read() for f in glob.glob(os.environ["TORCHINDUCTOR_CACHE_DIR"] + "/**/*.py", recursive=True)]
    kernels = {n for s in sources for n in re.findall(r"def (triton_for_fused_\\d+)\\(", s)}
    print(json.dumps({"err": err, "foreach_kernels": len(kernels), "limit": inductor_config.combo_kernel_max_num_args}))
""")


def run(tmp_path, **settings):
    env = {k: v for k, v in os.environ.items() if k not in ("KILN_DAEMON", "KILN_FOREACH_ARGS")}
    env.update({hook.ENV: "1", "KILN_CACHE_DIR": str(tmp_path / "cache"), "KILN_RUNTIME_DIR": str(tmp_path / "run"),
                "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / ("inductor-" + "-".join(settings.values()))),
                **settings})
    (tmp_path / "job.py").write_text(JOB)
    try:
        proc = subprocess.run([sys.executable, str(tmp_path / "job.py")], env=env, capture_output=True, text=True,
                              timeout=600)
    finally:
        subprocess.run([sys.executable, "-m", "kiln.daemon", "daemon", "stop"], env=env, capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(doctor.installed_hook() is None, reason="kiln's drop-in hook is not installed here")
def test_an_adamw_step_becomes_several_foreach_kernels_with_eagers_results(tmp_path):
    split = run(tmp_path)
    whole = run(tmp_path, KILN_FOREACH_ARGS="0")
    assert split["limit"] == 64 and whole["limit"] == 250
    assert split["foreach_kernels"] > whole["foreach_kernels"], (split, whole)
    assert split["err"] <= 1e-6 and whole["err"] <= 1e-6, (split, whole)


def test_the_limit_is_lowered_only_with_a_daemon_and_never_raised(monkeypatch):
    cases = [({}, 64), ({"KILN_FOREACH_ARGS": "0"}, 250), ({"KILN_FOREACH_ARGS": "16"}, 16),
             ({"KILN_DAEMON": "off"}, 250)]
    for settings, limit in cases:
        for name in ("KILN_FOREACH_ARGS", "KILN_DAEMON"):
            monkeypatch.delenv(name, raising=False)
        for name, value in settings.items():
            monkeypatch.setenv(name, value)
        config = types.SimpleNamespace(combo_kernel_max_num_args=250)
        inductor.split_foreach_kernels(config)
        assert config.combo_kernel_max_num_args == limit, settings
    monkeypatch.delenv("KILN_FOREACH_ARGS", raising=False)
    monkeypatch.delenv("KILN_DAEMON", raising=False)
    mine = types.SimpleNamespace(combo_kernel_max_num_args=40)  # lower already: kept
    inductor.split_foreach_kernels(mine)
    assert mine.combo_kernel_max_num_args == 40


def test_a_malformed_limit_is_a_clear_error(monkeypatch):
    from kiln.cache import env
    monkeypatch.setenv("KILN_FOREACH_ARGS", "many")
    with pytest.raises(ValueError, match="KILN_FOREACH_ARGS='many'"):
        env.foreach_args()
