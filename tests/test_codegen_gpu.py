"""GPU tier of codegen alone: the corpus kernels of `test_codegen_emulate.py`, compiled
for the GPU at hand and launched straight from their cubins (no frontend), must match
NumPy exactly as their CPU-emulated runs do. Skipped without a CUDA GPU.

It isolates codegen from the rest of the stack: when a language test fails on the GPU
but these pass, look at the frontend or the runtime first.
"""
import numpy as np
import pytest

import test_codegen_emulate as kernels

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def run_on_gpu(name, grid, args, num_warps=4):
    """Launch corpus kernel `name`; NumPy arrays go to the GPU and are copied back in place."""
    from kiln.codegen import compile
    from kiln.runtime.cuda_driver import compile_target, ensure_context
    from kiln.runtime.launcher import launcher_for
    from kiln.runtime.module import LoadedKernel
    fn = kernels._kernel(name)
    torch.cuda.init()
    ensure_context(torch.cuda.current_device())
    ck = compile(fn, compile_target(torch.cuda.current_device()), {"num_warps": num_warps})
    loaded = LoadedKernel(fn.name, ck.cubin, ck.ptx, ck.metadata["shared"])
    launch = launcher_for(loaded, [a.type for a in fn.args], ck.metadata, fn.name, torch.cuda.current_device())
    device_args, copies = [], []
    for a in args:
        if isinstance(a, np.ndarray):
            raw = torch.from_numpy(np.ascontiguousarray(a).view(np.uint8).reshape(-1)).cuda()
            device_args.append(raw)
            copies.append((a, raw))
        else:
            device_args.append(a)
    grid = tuple(grid) + (1,) * (3 - len(grid))
    launch(grid, device_args, torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    for host, raw in copies:
        host.view(np.uint8).reshape(-1)[:] = raw.cpu().numpy()
    return []


@pytest.fixture(autouse=True)
def on_gpu(monkeypatch):
    monkeypatch.setattr(kernels, "run", run_on_gpu)


def test_vector_add():
    assert kernels.check_vector_add(1936, 4)


def test_masked_copy():
    assert kernels.check_masked_copy()


@pytest.mark.parametrize("num_warps", [1, 4, 8])
def test_softmax_row(num_warps):
    err, tail = kernels.check_softmax_row(num_warps)
    assert err < 1e-6 and tail == 0


def test_softmax_2d():
    assert kernels.check_softmax_2d() < 1e-6


def test_layer_norm():
    assert kernels.check_layer_norm() < 1e-2


def test_argmax():
    assert kernels.check_argmax()


def test_scan():
    err, rev_ok = kernels.check_scan()
    assert err < 1e-4 and rev_ok


@pytest.mark.parametrize("n", [0, 5])
def test_loops(n):
    assert kernels.check_loops(n)


def test_shapes():
    assert kernels.check_shapes()


@pytest.mark.parametrize("name,dt,acc", [("f32", np.float32, np.float32), ("f16", np.float16, np.float32),
                                         ("i8", np.int8, np.int32), ("tf32", np.float32, np.float32),
                                         ("add_f16", np.float16, np.float32)])  # acc + dot(a, b): one dot
def test_dot(name, dt, acc):
    assert kernels.check_dot(name, dt, acc) < 1e-3  # tf32: against the inputs' top 19 bits


def test_dot_bf16():
    import ml_dtypes
    assert kernels.check_dot("bf16", ml_dtypes.bfloat16, np.float32) < 1e-3


def test_batched_dot():
    assert kernels.check_batched_dot() < 1e-3


def test_casts():
    got = kernels.check_casts()
    assert all(got.values()), got


def test_fp8_conversions():
    # sm_89+: the hardware cvt (e4m3, e5m2); the CPU tier checks the integer path. A NaN
    # may be another NaN code: on the H200 e5m2's came out unlike ml_dtypes' 0x7E
    assert kernels.check_fp8(nan_bits=False) == (True, True, True, True)
    assert kernels.check_fp8_fnuz() == (True, True, True, True)


def test_math():
    err_h, err_d, finite = kernels.check_math()
    assert err_h < 4e-3 and err_d < 1e-12 and finite


def test_umulhi_and_shifts():
    assert kernels.check_philox()


@pytest.mark.parametrize("num_warps", [1, 8])
def test_other_warp_counts(num_warps):
    assert all(kernels.check_with_warps(num_warps))
