"""A 2-D block of a host TensorDescriptor of 3 to 5 dims whose other block dims are 1 (a batched or
ragged matmul's `desc.load([z, m, k]).reshape(BM, BK)`, triton_kernels' MoE GEMMs) is copied by TMA
on Hopper like a 2-D descriptor's: the frontend's `descriptor_load` takes the 2-D block with
`lead_dims` offsets before its two, the kernel's reshape cancels the frontend's (canonicalize), the
ring's `tma_copy` carries every coordinate (`cp.async.bulk.tensor.3d` ... `.5d`), and the launcher
encodes a map of the descriptor's rank with a box of 1 along the leading dims. Before, such blocks
were loaded through a pointer per element (a 256x128 fp8 block: 128 64-bit pointers a thread, 980
bytes of spills in triton_kernels' persistent matmul). Checked in the interpreter, as IR and PTX on
the CPU, and on the GPU against NumPy."""
import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.ir import parse_function, print_function, verify

RNG = np.random.default_rng(11)


@kiln.jit
def batched_matmul(a_desc, b_desc, c_ptr, M, N, K, LEAD: tl.constexpr, B_TRANSPOSED: tl.constexpr,
                   BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """c[z] = a[z] @ b[z] (b[z] stored transposed: B_TRANSPOSED) for z = program_id(2); with LEAD = 2
    the batch is two dims, z = (z // 2, z % 2)."""
    z, m, n = tl.program_id(2), tl.program_id(0) * BM, tl.program_id(1) * BN
    acc = tl.zeros([BM, BN], tl.float32)
    for k in range(0, K, BK):
        if LEAD == 1:
            a = a_desc.load([z, m, k]).reshape(BM, BK)
            b = b_desc.load([z, n, k]).reshape(BN, BK).T if B_TRANSPOSED else b_desc.load([z, k, n]).reshape(BK, BN)
        else:
            a = a_desc.load([z // 2, z % 2, m, k]).reshape(BM, BK)
            if B_TRANSPOSED:
                b = b_desc.load([z // 2, z % 2, n, k]).reshape(BN, BK).T
            else:
                b = b_desc.load([z // 2, z % 2, k, n]).reshape(BK, BN)
        acc = tl.dot(a, b, acc)
    rows, cols = m + tl.arange(0, BM), n + tl.arange(0, BN)
    tl.store(c_ptr + z * M * N + rows[:, None] * N + cols[None, :], acc, mask=(rows[:, None] < M) & (cols[None, :] < N))


M, N, K, BM, BN, BK = 200, 136, 72, 64, 128, 32  # edges past every block: their boxes read zeros


def _operands(lead, b_transposed):
    batch = (3,) if lead == 1 else (2, 2)
    a = RNG.standard_normal((*batch, M, K)).astype(np.float16)
    b = RNG.standard_normal((*batch, K, N)).astype(np.float16)
    b_stored = np.ascontiguousarray(np.swapaxes(b, -1, -2)) if b_transposed else b
    return a, b, b_stored, np.zeros((int(np.prod(batch)), M, N), np.float32)


def _descriptors(a, b_stored, lead, b_transposed, tensor_descriptor):
    unit = [1] * lead
    b_block = unit + ([BN, BK] if b_transposed else [BK, BN])
    return tensor_descriptor.from_tensor(a, unit + [BM, BK]), tensor_descriptor.from_tensor(b_stored, b_block)


def _want(a, b):
    return (a.astype(np.float32) @ b.astype(np.float32)).reshape(-1, M, N)


def _grid(c):
    return (-(-M // BM), -(-N // BN), c.shape[0])


@pytest.mark.parametrize("lead", [1, 2])
@pytest.mark.parametrize("b_transposed", [False, True])
def test_batched_blocks_in_the_interpreter(lead, b_transposed):
    from kiln.tools.tensor_descriptor import TensorDescriptor
    a, b, b_stored, c = _operands(lead, b_transposed)
    batched_matmul[_grid(c)](*_descriptors(a, b_stored, lead, b_transposed, TensorDescriptor), c, M, N, K,
                             LEAD=lead, B_TRANSPOSED=b_transposed, BM=BM, BN=BN, BK=BK)
    np.testing.assert_allclose(c, _want(a, b), rtol=1e-2, atol=1e-2)


def _warm(lead, b_transposed, target="sm_90a"):
    from kiln.tools.tensor_descriptor import TensorDescriptor
    a, b, b_stored, c = _operands(lead, b_transposed)
    return batched_matmul.warmup(*_descriptors(a, b_stored, lead, b_transposed, TensorDescriptor), c, M, N, K,
                                 LEAD=lead, B_TRANSPOSED=b_transposed, BM=BM, BN=BN, BK=BK, num_warps=4,
                                 num_stages=3, grid=_grid(c), target=target)


def test_the_frontend_loads_the_2d_block_with_its_leading_offsets():
    text = _warm(1, False).ir
    text = text if isinstance(text, str) else print_function(text)
    loads = [line for line in text.splitlines() if " = descriptor_load " in line]
    assert len(loads) == 2 and all("lead_dims = 1" in line for line in loads)
    assert ": <64x32xfp16>" in loads[0] and ": <32x128xfp16>" in loads[1]


@pytest.mark.parametrize("lead, b_transposed", [(1, False), (1, True), (2, False)])
def test_batched_blocks_are_tma_copies_of_their_rank(lead, b_transposed):
    k = _warm(lead, b_transposed)
    ptx = k.asm["ptx"]
    assert ptx.count(f"cp.async.bulk.tensor.{2 + lead}d.shared::cluster.global") >= 2
    assert "cp.async.bulk.tensor.2d" not in ptx and "cp.async.cg" not in ptx and "ld.global.v" not in ptx
    assert "wgmma.mma_async" in ptx
    boxes = [arg.get("tma_box") for arg in k.metadata["args"] if arg.get("tma_box")]
    assert boxes == ["32x64:swizzle64", "32x128:swizzle64" if b_transposed else "64x32:swizzle128"]
    copies = [line for line in k.asm["ttgir"].splitlines() if "async_tma_copy_global_to_local" in line]
    assert copies and all(line.split("[", 1)[1].split("]")[0].count(",") == 1 + lead for line in copies)


def test_lead_dims_are_checked():
    from kiln.ir.ops import LEAD_DIMS_MAX
    text = print_function(_warm(1, False).ir) if not isinstance(_warm(1, False).ir, str) else _warm(1, False).ir
    bad = text.replace("lead_dims = 1", f"lead_dims = {LEAD_DIMS_MAX + 1}", 1)
    with pytest.raises(Exception, match="lead_dims"):
        verify(parse_function(bad))


def test_the_launcher_finds_each_map_s_descriptor_base(monkeypatch):
    """A host descriptor arrives as its base, its sizes and strides (2 to 5 of each), then its map: the
    launcher encodes the map from the base's address (it took the base 5 arguments back: 2-D only)."""
    from kiln.ir.types import float16 as fp16, int32, pointer_type, tensormap
    from kiln.runtime import launcher
    types = [pointer_type(fp16), *[int32] * 6, tensormap, pointer_type(fp16), *[int32] * 4, tensormap,
             pointer_type(fp16), *[int32] * 10, tensormap]
    assert [launcher._descriptor_base(types, i) for i in (7, 13, 25)] == [0, 8, 14]
    assert launcher._descriptor_base([*[int32] * 5, tensormap], 5) is None
    monkeypatch.setattr(launcher, "_cu_launch_kernel", lambda: (lambda *a: 0))  # built, not launched
    launcher.make_launcher(type("Loaded", (), {"handle": 0})(), types, 4, 0, "k",
                           {7: (32, 64, 64), 13: (32, 64, 64), 25: (32, 64, 64)})


@pytest.mark.gpu
@pytest.mark.parametrize("lead", [1, 2])
@pytest.mark.parametrize("b_transposed", [False, True])
def test_batched_blocks_on_the_gpu(lead, b_transposed, cuda_torch):
    torch = cuda_torch
    from kiln.tools.tensor_descriptor import TensorDescriptor
    a, b, b_stored, c = _operands(lead, b_transposed)
    a_d, b_d, c_d = (torch.from_numpy(x).cuda() for x in (a, b_stored, c))
    batched_matmul[_grid(c)](*_descriptors(a_d, b_d, lead, b_transposed, TensorDescriptor), c_d, M, N, K,
                             LEAD=lead, B_TRANSPOSED=b_transposed, BM=BM, BN=BN, BK=BK, num_warps=4, num_stages=3)
    np.testing.assert_allclose(c_d.cpu().numpy(), _want(a, b), rtol=1e-2, atol=1e-2)
