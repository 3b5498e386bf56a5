"""Stores through a host TensorDescriptor leave by TMA: its strides arrive as int64 arguments and its
column start is often an int64 product cast to int32 (triton_kernels' mx upcast stores
`[(pid0 * 64).to(tl.int32), (pid1 * 128).to(tl.int32)]`). And a block broadcast from a much smaller
one, selected beside a computed block that is then stored, leaves the computed block's layout alone:
the small source moves, not the 64x128 fp32 tile (36 KB through shared memory). CPU (IR, PTX,
metadata) and the GPU against NumPy."""
import numpy as np
import pytest

import kiln
import kiln.language as tl

M, N = 200, 392  # edges past the last blocks: TMA drops what falls past the extents
BM, BN, GROUP = 64, 128, 32


@kiln.jit
def scaled_rows(x_desc, scale_ptr, y_desc, M, N, stride_scale):
    """y = x * 2^(scale - 127) per group of 32 columns, NaN where the scale is 255 (an e8m0 scale's
    NaN), in blocks of 64x128, each block's starts int64 products cast to int32 (mx upcast's shape)."""
    row = tl.program_id(0).to(tl.int64) * 64
    col = tl.program_id(1).to(tl.int64) * 128
    x = x_desc.load([row.to(tl.int32), col.to(tl.int32)]).to(tl.float32)
    rows = row + tl.arange(0, 64)[:, None]
    groups = col // 32 + tl.arange(0, 4)[None, :]
    mask = (rows < M) & (groups < tl.cdiv(N, 32))
    scale = tl.load(scale_ptr + rows * stride_scale + groups, mask=mask)
    factor = (scale.to(tl.uint32) << 23).to(tl.float32, bitcast=True)
    y = x.reshape([64, 4, 32]) * factor.reshape([64, 4, 1])
    y = tl.clamp(y, -1e30, 1e30)
    y = tl.where(scale.reshape([64, 4, 1]) == 255, float("nan"), y)
    y_desc.store([row.to(tl.int32), col.to(tl.int32)], y.reshape([64, 128]).to(tl.bfloat16))


def _operands():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((M, N)).astype(np.float32)
    scale = rng.integers(120, 135, (M, N // 8 // 4 + 1), dtype=np.uint8)  # N / 32 groups, rounded up
    scale[3, 2] = 255
    return x, scale


def _want(x, scale):
    factor = np.exp2(scale.astype(np.float64) - 127)
    factor = np.where(scale == 255, np.nan, factor)
    want = x.astype(np.float64) * np.repeat(factor, 32, axis=1)[:, :N]
    return np.clip(want, -1e30, 1e30)


def _grid():
    return (-(-M // BM), -(-N // BN))


def _warm():
    import ml_dtypes
    from kiln.tools.tensor_descriptor import TensorDescriptor
    x, scale = _operands()
    y = np.zeros((M, N), ml_dtypes.bfloat16)
    return scaled_rows.warmup(TensorDescriptor.from_tensor(x, [BM, BN]), scale,
                              TensorDescriptor.from_tensor(y, [BM, BN]), M, N, scale.shape[1], num_warps=4,
                              grid=_grid(), target="sm_90a")


def test_a_host_descriptor_store_is_a_tma_store():
    k = _warm()
    ptx = k.asm["ptx"]
    assert ptx.count("cp.async.bulk.tensor.2d.global.shared::cta") >= 1
    stored = [a for a in k.metadata["args"] if "tma_store" in a["name"]]
    assert len(stored) == 1 and stored[0]["tma_box"] == "64x64:swizzle128"  # 128 bf16 columns: two 64-column boxes


def test_the_selected_tile_keeps_its_own_layout():
    """Only the 64x4 scales and their NaN test convert (under a KB each); the 64x4x32 fp32 tile does not."""
    k = _warm()
    assert k.metadata["shared"] <= BM * BN * 2  # the TMA store's tile, and nothing larger beside it
    text = k.asm["ttgir"]
    converted = [line for line in text.splitlines() if "convert_layout" in line and "64x4x32" in line
                 and "scratch" in line]
    assert not converted, converted


def test_a_narrowing_cast_keeps_a_power_of_two_divisor():
    from kiln.codegen.analysis.axis_info import AxisAnalysis
    from kiln.ir import parse_function
    fn = parse_function("""kernel @k(%0: int64 {divisibility = 16}) {
  %1 = constant {value = 128} : int64
  %2 = program_id {axis = 0} : int32
  %3 = cast %2 : int64
  %4 = mul %3, %1 : int64
  %5 = cast %4 : int32
  %6 = cast %0 : int8
  return
}""")
    axis = AxisAnalysis(fn)
    by_name = {op.results[0]: op for op in fn.walk() if op.results}
    casts = [r for r, op in by_name.items() if op.name == "cast" and str(r.type) in ("int32", "int8")]
    assert [axis.get(r).divisibility[0] for r in casts] == [128, 16]
    assert all(axis.get(r).contiguity == (1,) for r in casts)


@pytest.mark.gpu
def test_host_descriptor_stores_match_numpy_on_the_gpu(hopper_torch):
    torch = hopper_torch
    from kiln.tools.tensor_descriptor import TensorDescriptor
    x, scale = _operands()
    x_d, scale_d = torch.from_numpy(x).cuda(), torch.from_numpy(scale).cuda()
    y_d = torch.full((M, N), 7.0, device="cuda", dtype=torch.bfloat16)
    scaled_rows[_grid()](TensorDescriptor.from_tensor(x_d, [BM, BN]), scale_d, TensorDescriptor.from_tensor(y_d, [BM, BN]),
                         M, N, scale.shape[1], num_warps=4)
    got = y_d.float().cpu().numpy()
    np.testing.assert_allclose(got, _want(x, scale), rtol=1e-2, atol=1e-30, equal_nan=True)


def test_the_launcher_encodes_a_map_from_an_int64_stride(monkeypatch):
    """The derived map's arguments: a pointer, two int32 extents, an int32 or int64 row stride."""
    from kiln.ir.types import parse_type
    from kiln.runtime import launcher
    fills = []
    monkeypatch.setattr(launcher, "_cu_launch_kernel", lambda: lambda *args: 0)
    monkeypatch.setattr(launcher, "derived_encoder", lambda box, elem: lambda slot, *values: fills.append(values))
    types = [parse_type(t) for t in ("ptr<bf16>", "int32", "int32", "int64")]
    run = launcher.make_launcher(type("Loaded", (), {"handle": 0})(), types, 4, 0, "k", {},
                                 [("map", (64, 64, 128), (0, 2, 1, 3))])
    run((1, 1, 1), [4096, 200, 392, 392], 0)
    assert fills == [(4096, 392, 200, 392)]
    with pytest.raises(ValueError, match="two int32 extents"):
        launcher.make_launcher(type("Loaded", (), {"handle": 0})(), [parse_type("ptr<bf16>")] + [parse_type("int64")] * 3,
                               4, 0, "k", {}, [("map", (64, 64, 128), (0, 2, 1, 3))])
