"""On a GPU: torch.compile under kiln's drop-in mode equals eager. Inductor's CUDA kernels are
compiled by kiln in Inductor's compile workers, handed to the job pickled (block IR and cubin),
loaded there and launched through kiln's runtime on the stream Inductor passes (PyTorch's current
one: the default stream, then a side stream)."""
import textwrap

import pytest
from dropin_jobs import run_on_gpu

pytestmark = pytest.mark.gpu

JOB = textwrap.dedent("""
    import json
    import torch
    import torch._inductor.config as inductor_config
    import triton

    inductor_config.compile_threads = 2  # compile workers: the binaries cross a process boundary
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    launched = set()
    triton.knobs.runtime.launch_enter_hook = lambda meta: launched.add(meta.get()["name"])
    torch.manual_seed(0)


    class Block(torch.nn.Module):
        def __init__(self, d=256, hidden=1024):
            super().__init__()
            self.norm = torch.nn.LayerNorm(d)
            self.up = torch.nn.Linear(d, hidden)
            self.down = torch.nn.Linear(hidden, d)
            self.scale = torch.nn.Parameter(torch.ones(d))

        def forward(self, x):
            h = x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))
            return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * self.scale  # RMSNorm


    def step(model, x):
        model.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        return [loss.detach()] + [p.grad.clone() for p in model.parameters()]


    def gap(got, want):
        return max(float((a - b).abs().max() / max(1.0, float(b.abs().max()))) for a, b in zip(got, want))


    model = Block().cuda()
    x = torch.randn(512, 256, device="cuda")
    compiled = torch.compile(model)
    eager = step(model, x)
    on_default = step(compiled, x)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        on_side = step(compiled, x)
    torch.cuda.synchronize()
    print(json.dumps({"triton": triton.__name__, "launched": sorted(launched),
                      "gap_default": gap(on_default, eager), "gap_side": gap(on_side, eager)}))
""")


def test_torch_compile_on_the_gpu_equals_eager(tmp_path):
    result, = run_on_gpu(tmp_path, JOB)
    assert result["triton"] == "kiln.dropin.facade"
    launched = result["launched"]
    assert any("layer_norm" in k for k in launched) and any("gelu_backward" in k for k in launched), launched
    assert result["gap_default"] <= 1e-4 and result["gap_side"] <= 1e-4, result
