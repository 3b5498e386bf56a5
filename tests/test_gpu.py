"""GPU tier: the example kernels compiled by kiln run on the GPU and match PyTorch.

Skipped without a CUDA GPU. Inputs are fresh random tensors and outputs are poisoned
with NaN/garbage before each run, so a kernel that writes nothing cannot pass.
"""
import importlib
import importlib.util
import os
import sys

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))

import kiln  # noqa: E402
import kiln.language as tl  # noqa: E402


@pytest.fixture(autouse=True)
def on_gpu(monkeypatch):
    monkeypatch.setenv("KILN_INTERPRET", "0")


def poisoned(shape, dtype):
    out = torch.empty(shape, dtype=dtype, device="cuda")
    out.fill_(float("nan") if dtype.is_floating_point else -12345)
    return out


@pytest.mark.parametrize("n", [1, 1000, 98432, 1 << 20])
def test_vector_add(n):
    add_kernel = importlib.import_module("vector_add").add_kernel
    x, y = torch.rand(n, device="cuda"), torch.rand(n, device="cuda")
    out = poisoned(n, torch.float32)
    add_kernel[(kiln.cdiv(n, 1024),)](x, y, out, n, BLOCK_SIZE=1024)
    torch.testing.assert_close(out, x + y, rtol=0, atol=0)


@pytest.mark.parametrize("shape", [(1, 7), (37, 781), (256, 1024), (64, 4096)])
def test_fused_softmax(shape):
    softmax_kernel = importlib.import_module("fused_softmax").softmax_kernel
    x = torch.randn(shape, device="cuda")
    y = poisoned(shape, torch.float32)
    block = kiln.next_power_of_2(shape[1])
    softmax_kernel[(min(shape[0], 132),)](y, x, x.stride(0), y.stride(0), shape[0], shape[1],
                                         BLOCK_SIZE=block, num_stages=2, num_warps=8 if block >= 2048 else 4)
    torch.testing.assert_close(y, torch.softmax(x, dim=1), rtol=1e-5, atol=1e-6)


def test_layer_norm_forward_fp16():
    fwd = importlib.import_module("layer_norm")._layer_norm_fwd_fused
    M, N = 64, 1024
    x = torch.randn(M, N, device="cuda", dtype=torch.float16)
    w = torch.rand(N, device="cuda", dtype=torch.float16)
    b = torch.rand(N, device="cuda", dtype=torch.float16)
    y = poisoned((M, N), torch.float16)
    mean, rstd = poisoned(M, torch.float32), poisoned(M, torch.float32)
    fwd[(M,)](x, y, w, b, mean, rstd, x.stride(0), N, 1e-5, BLOCK_SIZE=1024, num_warps=8)
    ref = torch.nn.functional.layer_norm(x.float(), (N,), w.float(), b.float(), 1e-5)
    torch.testing.assert_close(y.float(), ref, rtol=1e-2, atol=1e-2)


def test_matmul_fp16():
    mm = importlib.import_module("matmul")
    a = torch.randn(256, 192, device="cuda", dtype=torch.float16)
    b = torch.randn(192, 128, device="cuda", dtype=torch.float16)
    c = poisoned((256, 128), torch.float16)
    grid = lambda META: (kiln.cdiv(256, META["BLOCK_SIZE_M"]) * kiln.cdiv(128, META["BLOCK_SIZE_N"]),)
    mm.matmul_kernel[grid](a, b, c, 256, 128, 192, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                           c.stride(0), c.stride(1), ACTIVATION="")
    torch.testing.assert_close(c.float(), (a.float() @ b.float()), rtol=2e-2, atol=5e-2)


@pytest.mark.parametrize("shape", [(1000, 600, 200), (3000, 5000, 1000)])
@pytest.mark.parametrize("cfg", [(128, 256, 64, 3, 8), (128, 128, 32, 4, 4)])
def test_tutorial_matmul_at_multiples_of_8(shape, cfg):
    """Tutorial 03's kernel (bench/kernels.py: rows wrapped with `% M`, grouped tiles) where M, N, K
    are multiples of 8 and not of 16: kiln knows its rows 16-byte aligned (divisibility 8) and reads
    them with TMA into wgmma on Hopper; the edges of every dimension are partial tiles."""
    spec = importlib.util.spec_from_file_location("kiln_bench_kernels", os.path.join(
        os.path.dirname(__file__), "..", "bench", "kernels.py"))
    kernels = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kernels)
    (M, N, K), (bm, bn, bk, stages, warps) = shape, cfg
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    c = poisoned((M, N), torch.float16)
    args = (a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    options = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, num_warps=warps, num_stages=stages)
    grid = (kiln.cdiv(M, bm) * kiln.cdiv(N, bn),)
    kernels.matmul_kernel[grid](*args, **options)
    torch.testing.assert_close(c.float(), a.float() @ b.float(), rtol=2e-2, atol=0.5)
    if _compiles_for_hopper():
        ptx = kernels.matmul_kernel.warmup(*args, grid=grid, **options).asm["ptx"]
        assert "cp.async.bulk.tensor.2d" in ptx and "wgmma.mma_async" in ptx


def test_dropout_matches_interpreter_stream():
    drop = importlib.import_module("dropout")._seeded_dropout
    n = 5000
    x = torch.randn(n, device="cuda") + 5
    out = poisoned(n, torch.float32)
    drop[(kiln.cdiv(n, 1024),)](x, out, n, 0.5, 123, BLOCK_SIZE=1024)
    import numpy as np
    os.environ["KILN_INTERPRET"] = "1"
    try:
        ref = np.empty(n, np.float32)
        drop[(kiln.cdiv(n, 1024),)](x.cpu().numpy(), ref, n, 0.5, 123, BLOCK_SIZE=1024)
    finally:
        os.environ["KILN_INTERPRET"] = "0"
    torch.testing.assert_close(out.cpu(), torch.from_numpy(ref), rtol=1e-6, atol=1e-6)


@kiln.jit
def histogram_kernel(x_ptr, hist_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    bins = tl.load(x_ptr + offs, mask=mask, other=0)
    tl.atomic_add(hist_ptr + bins, 1, mask=mask)


def test_atomic_histogram():
    x = torch.randint(0, 16, (10000,), device="cuda", dtype=torch.int32)
    hist = torch.zeros(16, device="cuda", dtype=torch.int32)
    histogram_kernel[(kiln.cdiv(10000, 256),)](x, hist, 10000, BLOCK=256)
    torch.testing.assert_close(hist, torch.bincount(x, minlength=16).int())


@kiln.jit
def row_stats_kernel(x_ptr, sum_ptr, max_ptr, arg_ptr, cum_ptr, N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, N)
    x = tl.load(x_ptr + row * N + cols)
    tl.store(sum_ptr + row, tl.sum(x, axis=0))
    tl.store(max_ptr + row, tl.max(x, axis=0))
    tl.store(arg_ptr + row, tl.argmax(x, axis=0))
    tl.store(cum_ptr + row * N + cols, tl.cumsum(x, axis=0))


def test_reductions_and_scan():
    M, N = 8, 256
    x = torch.randn(M, N, device="cuda")
    s, m = poisoned(M, torch.float32), poisoned(M, torch.float32)
    a, c = poisoned(M, torch.int32), poisoned((M, N), torch.float32)
    row_stats_kernel[(M,)](x, s, m, a, c, N=N)
    torch.testing.assert_close(s, x.sum(1), rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(m, x.max(1).values)
    torch.testing.assert_close(a, x.argmax(1).int())
    torch.testing.assert_close(c, x.cumsum(1), rtol=1e-4, atol=1e-4)


def test_compiled_kernel_metadata():
    add_kernel = importlib.import_module("vector_add").add_kernel
    x = torch.rand(4096, device="cuda")
    k = add_kernel[(4,)](x, x, x, 4096, BLOCK_SIZE=1024)
    assert {"kir", "llir", "ptx", "cubin"} <= set(k.asm)
    assert k.n_regs > 0 and k.n_spills == 0 and k.shared >= 0
    assert "ld.global.v4" in k.asm["ptx"]


def test_launch_error_names_kernel_and_driver_message():
    add_kernel = importlib.import_module("vector_add").add_kernel
    x = torch.rand(16, device="cuda")
    with pytest.raises(RuntimeError, match=r"add_kernel.*CUDA_ERROR_INVALID_VALUE"):
        add_kernel[(2**31,)](x, x, x, 16, BLOCK_SIZE=1024)


def test_block_pointers_on_gpu():
    sys.path.insert(0, os.path.dirname(__file__))
    bp = importlib.import_module("test_block_pointers")
    M, N = 37, 45
    x = torch.randn(M, N, device="cuda")
    out = poisoned(M, torch.float32)
    bp.row_sums[(kiln.cdiv(M, 8),)](x, out, M, N, BM=8, BN=16)
    torch.testing.assert_close(out, x.sum(1), rtol=1e-5, atol=1e-4)
    big = torch.randn(M, 64, device="cuda")
    dst = poisoned((M, N), torch.float32)
    bp.tile_copy[(kiln.cdiv(M, 16), kiln.cdiv(N, 8))](big, dst, M, N, 64, BM=16, BN=8)
    torch.testing.assert_close(dst, big[:, :N] * 2)


def test_triton_host_apis():
    from kiln.runtime import driver
    props = driver.active.utils.get_device_properties(driver.active.get_current_device())
    assert props["multiprocessor_count"] == torch.cuda.get_device_properties(0).multi_processor_count
    assert props["warpSize"] == 32 and props["max_shared_mem"] >= 48 * 1024
    add_kernel = importlib.import_module("vector_add").add_kernel
    x = torch.rand(4096, device="cuda")
    k = add_kernel.warmup(x, x, x, 4096, BLOCK_SIZE=1024, grid=(1,))
    k._init_handles()
    assert k.n_regs > 0 and k.metadata.shared == k.shared and k.metadata.num_warps == 4


DEBUG_SCRIPT = r"""
import sys, torch
import kiln, kiln.language as tl

@kiln.jit(debug=DEBUG)
def check(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=1.0)
    tl.device_print("x=", x)
    tl.device_assert(x > 0, "x must be positive")

x = torch.tensor([1.0, 2.0, -3.0, 4.0], device="cuda")
check[(1,)](x, 4, BLOCK=4)
torch.cuda.synchronize()
print("finished")
"""


@pytest.mark.parametrize("debug", [True, False])
def test_device_print_and_assert_in_a_fresh_process(debug, tmp_path):
    import subprocess
    script = tmp_path / "debug_kernel.py"
    script.write_text(DEBUG_SCRIPT.replace("DEBUG", str(debug)))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, KILN_INTERPRET="0"))
    assert "idx (2) x=-3.0" in out.stdout, out.stdout + out.stderr
    if debug:  # the failed assert stops the kernel and poisons the context
        assert out.returncode != 0 and "finished" not in out.stdout
        assert "x must be positive" in out.stdout + out.stderr
    else:  # Triton drops device_assert outside debug mode
        assert out.returncode == 0 and "finished" in out.stdout, out.stderr


class CudaArray:
    """Exposes only __cuda_array_interface__, as CuPy and Numba arrays do."""

    def __init__(self, tensor):
        self.tensor = tensor
        self.__cuda_array_interface__ = tensor.__cuda_array_interface__


def test_cuda_array_interface_and_dlpack_arguments():
    add_kernel = importlib.import_module("vector_add").add_kernel
    x, y = torch.rand(3000, device="cuda"), torch.rand(3000, device="cuda")
    out = poisoned(3000, torch.float32)
    add_kernel[(3,)](CudaArray(x), torch.utils.dlpack.to_dlpack(y), CudaArray(out), 3000, BLOCK_SIZE=1024)
    torch.testing.assert_close(out, x + y, rtol=0, atol=0)


def test_cubin_refused_falls_back_to_ptx():
    from kiln.runtime.module import LoadedKernel
    add_kernel = importlib.import_module("vector_add").add_kernel
    x = torch.rand(64, device="cuda")
    k = add_kernel.warmup(x, x, x, 64, BLOCK_SIZE=64, grid=(1,))
    k._init_handles()
    binary = next(iter(k.binaries.values()))
    loaded = LoadedKernel(k.name, b"not a cubin", binary.ptx, 0)
    assert loaded.loaded_from == "ptx" and loaded.n_regs > 0


@kiln.jit
def transpose_kernel(x_ptr, y_ptr, N: tl.constexpr):
    rows, cols = tl.arange(0, N), tl.arange(0, N)
    x = tl.load(x_ptr + rows[:, None] * N + cols[None, :])
    tl.store(y_ptr + rows[:, None] * N + cols[None, :], tl.trans(x))


def test_layout_conversion_beyond_48kb_of_shared_memory():
    x = torch.randn(128, 128, device="cuda")
    y = poisoned((128, 128), torch.float32)
    k = transpose_kernel[(1,)](x, y, N=128, num_warps=8)
    torch.testing.assert_close(y, x.t().contiguous(), rtol=0, atol=0)
    assert k.shared > 48 * 1024, k.shared  # dynamic shared memory raised with cuFuncSetAttribute


def test_more_shared_memory_than_the_gpu_has_is_out_of_resources():
    x = torch.randn(256, 256, device="cuda")
    with pytest.raises(kiln.OutOfResources, match="shared memory") as info:
        transpose_kernel[(1,)](x, x, N=256, num_warps=8)
    # the transpose renames registers; the store's conversion takes the tile with a bank-conflict pad
    assert info.value.required == 256 * (256 + 4) * 4 > info.value.limit


def test_autotune_skips_a_config_that_is_out_of_resources():
    tuned = kiln.autotune([kiln.Config({"N": 256}, num_warps=8), kiln.Config({"N": 64}, num_warps=4)],
                          key=[])(transpose_kernel)
    x = torch.randn(64, 64, device="cuda")
    y = poisoned((64, 64), torch.float32)
    tuned[(1,)](x, y)
    assert tuned.best_config.kwargs == {"N": 64}


def test_interpreter_runs_on_cuda_tensors_through_host_copies(monkeypatch):
    monkeypatch.setenv("KILN_INTERPRET", "1")
    sys.path.insert(0, os.path.dirname(__file__))
    bp = importlib.import_module("test_block_pointers")
    big = torch.randn(37, 64, device="cuda")
    dst = poisoned((37, 45), torch.float32)
    bp.tile_copy[(kiln.cdiv(37, 16), kiln.cdiv(45, 8))](big, dst, 37, 45, 64, BM=16, BN=8)
    torch.testing.assert_close(dst, big[:, :45] * 2)
    view = big[:, 8:]  # a strided view: the host copy keeps its storage offset and strides
    dst = poisoned((37, 45), torch.float32)
    bp.tile_copy[(kiln.cdiv(37, 16), kiln.cdiv(45, 8))](view, dst, 37, 45, view.stride(0), BM=16, BN=8)
    torch.testing.assert_close(dst, big[:, 8:53] * 2)
    x = torch.rand(1000, device="cuda")
    y = poisoned(1000, torch.float32)
    importlib.import_module("vector_add").add_kernel[(1,)](x, x, y, 1000, BLOCK_SIZE=1024)
    torch.testing.assert_close(y, 2 * x)


@pytest.mark.parametrize("causal", [False, True])
def test_fused_attention(causal):
    fa = importlib.import_module("fused_attention")
    n_ctx, head_dim = 200, 64
    q, k, v = (torch.randn(n_ctx, head_dim, device="cuda", dtype=torch.float16) for _ in range(3))
    out = poisoned((n_ctx, head_dim), torch.float16)
    fa.attn_fwd[(kiln.cdiv(n_ctx, 64),)](q, k, v, out, 0.125, q.stride(0), k.stride(0), v.stride(0), out.stride(0),
                                        n_ctx, HEAD_DIM=head_dim, BLOCK_M=64, BLOCK_N=64, CAUSAL=causal,
                                        num_warps=4)
    ref = torch.nn.functional.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=causal,
                                                           scale=0.125)[0]
    torch.testing.assert_close(out, ref, atol=2e-2, rtol=2e-2)


@kiln.jit
def _tiled_matmul(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, ACC: tl.constexpr):
    pid = tl.program_id(0)
    pid_m, pid_n = pid // tl.cdiv(N, BN), pid % tl.cdiv(N, BN)
    rm = (pid_m * BM + tl.arange(0, BM)) % M
    rn = (pid_n * BN + tl.arange(0, BN)) % N
    rk = tl.arange(0, BK)
    a_ptrs = a_ptr + rm[:, None] * sam + rk[None, :] * sak
    b_ptrs = b_ptr + rk[:, None] * sbk + rn[None, :] * sbn
    acc = tl.zeros((BM, BN), dtype=ACC)
    for k in range(0, tl.cdiv(K, BK)):
        a = tl.load(a_ptrs, mask=rk[None, :] < K - k * BK, other=0)
        b = tl.load(b_ptrs, mask=rk[:, None] < K - k * BK, other=0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BK * sak
        b_ptrs += BK * sbk
    cm = pid_m * BM + tl.arange(0, BM)
    cn = pid_n * BN + tl.arange(0, BN)
    tl.store(c_ptr + cm[:, None] * scm + cn[None, :] * scn, acc.to(c_ptr.dtype.element_ty),
             mask=(cm[:, None] < M) & (cn[None, :] < N))


def _compiles_for_hopper() -> bool:
    """Kernels here are built for sm_90a (a Hopper, and no KILN_TARGET naming an older target)."""
    from kiln.runtime.cuda_driver import compile_target
    return compile_target(torch.cuda.current_device()) == "sm_90a"


@pytest.mark.parametrize("dtype,cfg", [
    ("fp16", (128, 256, 64, 3, 8)), ("fp16", (128, 128, 32, 4, 4)), ("fp16", (64, 256, 32, 4, 4)),
    ("fp16", (128, 64, 64, 2, 4)), ("bf16", (128, 128, 64, 4, 4)), ("bf16", (64, 128, 64, 4, 4)),
    ("fp8", (128, 256, 128, 3, 8)), ("fp8", (128, 64, 64, 4, 4)),
    ("tf32", (128, 128, 32, 3, 4)), ("tf32", (128, 64, 32, 4, 4)), ("tf32", (64, 256, 32, 3, 8)),
    ("int8", (128, 256, 128, 3, 8)), ("int8", (128, 128, 64, 4, 4)), ("int8", (64, 256, 64, 3, 4)),
])
@pytest.mark.parametrize("shape", [(208, 336, 272), (200, 328, 300), (200, 328, 296)])
def test_pipelined_tensor_core_matmul(dtype, cfg, shape):
    """Loops of dots on loads: cp.async rings and wgmma on Hopper (mma.sync elsewhere).
    M, N, K are not multiples of the tile, so the masks and the zero fill of the copies
    matter; where they are not multiples of 8 either (kiln specializes integers on 16 and 8),
    rows cannot be copied in 4-byte pieces and the dot takes the mma.sync path. fp8, tf32 and int8 take B K-major (wgmma
    reads only K-major tiles of them); int8 accumulates in int32 (.s32.s8.s8), exactly."""
    BM, BN, BK, stages, warps = cfg
    M, N, K = shape
    torch_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp8": torch.float8_e4m3fn,
                   "tf32": torch.float32, "int8": torch.int8}[dtype]
    if dtype == "fp8" and torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("fp8 needs sm_89 or newer")

    def rand(*shape):
        if dtype == "int8":
            return torch.randint(-128, 128, shape, dtype=torch.int8, device="cuda")
        return torch.randn(*shape, device="cuda").to(torch_dtype)
    a = rand(M, K)
    b = rand(N, K).T if dtype in ("fp8", "tf32", "int8") else rand(K, N)
    c = poisoned((M, N), torch.int32 if dtype == "int8" else torch.float16)
    grid = (kiln.cdiv(M, BM) * kiln.cdiv(N, BN),)
    args = (a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    options = dict(BM=BM, BN=BN, BK=BK, ACC=tl.int32 if dtype == "int8" else tl.float32, num_warps=warps,
                   num_stages=stages)
    _tiled_matmul[grid](*args, **options)
    if dtype == "int8":  # exact: |sums| < 2^53 in float64
        assert torch.equal(c, (a.double() @ b.double()).to(torch.int32))
    else:
        ref = a.float() @ b.float()
        torch.testing.assert_close(c.float(), ref, rtol=3e-2, atol=0.5 if dtype != "fp8" else 2.0)
    if _compiles_for_hopper() and warps % 4 == 0 and stages >= 2 and K % 8 == 0:
        assert "wgmma.mma_async" in _tiled_matmul.warmup(*args, grid=grid, **options).asm["ptx"]


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("cfg", [(128, 64, 64, 3, 8), (128, 128, 128, 3, 8), (64, 64, 64, 2, 4),
                                 (128, 64, 128, 3, 8), (128, 32, 64, 4, 4)])
@pytest.mark.parametrize("n_ctx", [256, 300])
@pytest.mark.parametrize("causal", [False, True])
def test_pipelined_tensor_core_attention(dtype, cfg, n_ctx, causal):
    """Attention's loop: two dots with a softmax between them. On Hopper K and V go
    through cp.async rings, Q is stored to shared memory once and P stays in registers
    as wgmma's A; n_ctx = 300 is not a multiple of the blocks (masked copies)."""
    fa = importlib.import_module("fused_attention")
    BM, BN, D, stages, warps = cfg
    torch_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
    q, k, v = (torch.randn(n_ctx, D, device="cuda", dtype=torch_dtype) for _ in range(3))
    out = poisoned((n_ctx, D), torch_dtype)
    grid = (kiln.cdiv(n_ctx, BM),)
    args = (q, k, v, out, 0.125, q.stride(0), k.stride(0), v.stride(0), out.stride(0), n_ctx)
    options = dict(HEAD_DIM=D, BLOCK_M=BM, BLOCK_N=BN, CAUSAL=causal, num_warps=warps, num_stages=stages)
    fa.attn_fwd[grid](*args, **options)
    ref = torch.nn.functional.scaled_dot_product_attention(q[None].float(), k[None].float(), v[None].float(),
                                                           is_causal=causal, scale=0.125)[0]
    torch.testing.assert_close(out.float(), ref, atol=2e-2, rtol=2e-2)
    if _compiles_for_hopper():
        ptx = fa.attn_fwd.warmup(*args, grid=grid, **options).asm["ptx"]
        assert "wgmma.mma_async" in ptx and "cp.async" in ptx
