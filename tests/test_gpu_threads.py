"""GPU tier: a launch from a thread where no CUDA context is current. PyTorch's autograd runs a
custom Function's backward on a thread of its own, and on device 0 it sets no device (it thinks one
is set), so nothing makes the primary context current there: kiln's launcher makes it current as
Triton's does (fla's recompute_w_u_fwd_kernel, launched in its backward, failed with
CUDA_ERROR_INVALID_CONTEXT)."""
import threading

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

import kiln  # noqa: E402
import kiln.language as tl  # noqa: E402


@pytest.fixture(autouse=True)
def on_gpu(monkeypatch):
    monkeypatch.setenv("KILN_INTERPRET", "0")


@kiln.jit
def _twice(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


def _in_new_thread(fn):
    failures = []

    def run():
        try:
            fn()
        except BaseException as e:  # reported by the test's thread
            failures.append(e)
    t = threading.Thread(target=run)
    t.start()
    t.join()
    if failures:
        raise failures[0]


def test_a_kernel_launched_first_on_the_main_thread_launches_from_a_fresh_one():
    x = torch.rand(5000, device="cuda")
    out = torch.full_like(x, float("nan"))
    _twice[(5,)](x, out, 5000, BLOCK=1024)
    again = torch.full_like(x, float("nan"))
    torch.cuda.synchronize()
    _in_new_thread(lambda: _twice[(5,)](x, again, 5000, BLOCK=1024))
    torch.cuda.synchronize()
    torch.testing.assert_close(again, x * 2, rtol=0, atol=0)


def test_a_kernel_launches_in_autograd_backward():
    class Twice(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            out = torch.empty_like(x)
            _twice[(kiln.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
            return out

        @staticmethod
        def backward(ctx, grad):
            grad = grad.contiguous()  # sum()'s gradient comes expanded: one element, stride 0
            out = torch.empty_like(grad)
            _twice[(kiln.cdiv(grad.numel(), 1024),)](grad, out, grad.numel(), BLOCK=1024)
            return out

    x = torch.rand(3000, device="cuda", requires_grad=True)
    Twice.apply(x).sum().backward()
    torch.testing.assert_close(x.grad, torch.full_like(x, 2.0), rtol=0, atol=0)

