"""Kernels in the shape torch.compile's Inductor generates them (its naming, index math, masks,
eviction hints, `tmpN` chains and helper reductions), written here for `bench/compile_speed.py`
so that it needs no PyTorch. Like `bench/kernels.py`, written for kiln and imported by Triton with
the import lines rewritten."""
import kiln as triton
import kiln.language as tl
from kiln.language.extra import libdevice


@triton.jit
def _maximum(a, b):
    return tl.maximum(a, b)


@triton.jit
def _max2(a, dim: tl.constexpr):
    # Inductor's triton_helpers.max2: a reduce with a combine function, not tl.max
    return tl.reduce(a, dim, _maximum)


@triton.jit
def triton_poi_fused_add_erf_mul_sigmoid_tanh_0(in_ptr0, in_ptr1, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    """bias + exact GELU, then tanh, sigmoid and a product with the biased input: a 9-op chain on bf16."""
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:]
    xmask = xindex < xnumel
    x2 = xindex
    x0 = xindex % 4096
    tmp0 = tl.load(in_ptr0 + (x2), xmask).to(tl.float32)
    tmp1 = tl.load(in_ptr1 + (x0), xmask, eviction_policy='evict_last').to(tl.float32)
    tmp2 = tmp0 + tmp1
    tmp3 = 0.5
    tmp4 = tmp2 * tmp3
    tmp5 = 0.7071067811865476
    tmp6 = tmp2 * tmp5
    tmp7 = libdevice.erf(tmp6)
    tmp8 = 1.0
    tmp9 = tmp7 + tmp8
    tmp10 = tmp4 * tmp9
    tmp11 = libdevice.tanh(tmp10)
    tmp12 = tl.sigmoid(tmp11)
    tmp13 = tmp12 * tmp2
    tl.store(out_ptr0 + (x2), tmp13, xmask)


@triton.jit
def triton_per_fused__softmax_1(in_ptr0, out_ptr2, xnumel, rnumel, XBLOCK: tl.constexpr):
    """A softmax over rows of 1024, each row whole in registers (a persistent reduction)."""
    RBLOCK: tl.constexpr = 1024
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < xnumel
    rindex = tl.arange(0, RBLOCK)[None, :]
    rmask = rindex < rnumel
    r1 = rindex
    x0 = xindex
    tmp0 = tl.load(in_ptr0 + (r1 + 1024 * x0), rmask & xmask, other=0.0).to(tl.float32)
    tmp1 = tl.broadcast_to(tmp0, [XBLOCK, RBLOCK])
    tmp3 = tl.where(rmask & xmask, tmp1, float("-inf"))
    tmp4 = _max2(tmp3, 1)[:, None]
    tmp5 = tmp0 - tmp4
    tmp6 = tl.exp(tmp5)
    tmp7 = tl.broadcast_to(tmp6, [XBLOCK, RBLOCK])
    tmp9 = tl.where(rmask & xmask, tmp7, 0)
    tmp10 = tl.sum(tmp9, 1)[:, None]
    tmp11 = tmp6 / tmp10
    tl.store(out_ptr2 + (r1 + 1024 * x0), tmp11, rmask & xmask)


@triton.jit
def triton_red_fused_mean_mul_pow_rsqrt_2(in_out_ptr0, in_ptr0, in_ptr1, out_ptr0, xnumel, rnumel,
                                          XBLOCK: tl.constexpr, RBLOCK: tl.constexpr):
    """RMSNorm over rows of 4096 in two looped passes (a reduction too wide for registers)."""
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < xnumel
    rbase = tl.arange(0, RBLOCK)[None, :]
    x0 = xindex
    _tmp3 = tl.full([XBLOCK, RBLOCK], 0, tl.float32)
    for roffset in range(0, rnumel, RBLOCK):
        rindex = roffset + rbase
        rmask = rindex < rnumel
        r1 = rindex
        tmp0 = tl.load(in_ptr0 + (r1 + 4096 * x0), rmask & xmask, eviction_policy='evict_last', other=0.0)
        tmp0 = tmp0.to(tl.float32)
        tmp1 = tmp0 * tmp0
        tmp2 = tl.broadcast_to(tmp1, [XBLOCK, RBLOCK])
        tmp4 = _tmp3 + tmp2
        _tmp3 = tl.where(rmask & xmask, tmp4, _tmp3)
    tmp3 = tl.sum(_tmp3, 1)[:, None]
    tmp5 = 4096.0
    tmp6 = tmp3 / tmp5
    tmp7 = 1e-06
    tmp8 = tmp6 + tmp7
    tmp9 = libdevice.rsqrt(tmp8)
    tl.debug_barrier()
    tl.store(in_out_ptr0 + (x0), tmp9, xmask)
    for roffset in range(0, rnumel, RBLOCK):
        rindex = roffset + rbase
        rmask = rindex < rnumel
        r1 = rindex
        tmp10 = tl.load(in_ptr0 + (r1 + 4096 * x0), rmask & xmask, eviction_policy='evict_first', other=0.0)
        tmp10 = tmp10.to(tl.float32)
        tmp12 = tl.load(in_ptr1 + (r1), rmask, eviction_policy='evict_last', other=0.0).to(tl.float32)
        tmp11 = tmp10 * tmp9
        tmp13 = tmp11 * tmp12
        tl.store(out_ptr0 + (r1 + 4096 * x0), tmp13, rmask & xmask)


@triton.jit
def triton_poi_fused_add_cat_mul_3(in_ptr0, in_ptr1, in_ptr2, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    """Rotary embedding on [seq 2048, heads 32, dim 128]: the rotated half as Inductor writes a cat
    (two masked loads joined by where), then q * cos + rotate_half(q) * sin."""
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:]
    xmask = xindex < xnumel
    x3 = xindex
    x0 = xindex % 128
    x4 = xindex // 128
    x2 = xindex // 4096
    tmp0 = tl.load(in_ptr0 + (x3), xmask).to(tl.float32)
    tmp1 = tl.load(in_ptr1 + (x0 + 128 * x2), xmask, eviction_policy='evict_last').to(tl.float32)
    tmp2 = tmp0 * tmp1
    tmp3 = x0
    tmp6 = tl.full([1], 64, tl.int64)
    tmp7 = tmp3 < tmp6
    tmp8 = tl.load(in_ptr0 + (64 + 128 * x4 + x0), tmp7 & xmask, other=0.0).to(tl.float32)
    tmp9 = -tmp8
    tmp10 = tl.full(tmp9.shape, 0.0, tmp9.dtype)
    tmp11 = tl.where(tmp7, tmp9, tmp10)
    tmp12 = tmp3 >= tmp6
    tmp15 = tl.load(in_ptr0 + (128 * x4 + (x0 - 64)), tmp12 & xmask, other=0.0).to(tl.float32)
    tmp16 = tl.where(tmp7, tmp11, tmp15)
    tmp17 = tl.load(in_ptr2 + (x0 + 128 * x2), xmask, eviction_policy='evict_last').to(tl.float32)
    tmp18 = tmp16 * tmp17
    tmp19 = tmp2 + tmp18
    tl.store(out_ptr0 + (x3), tmp19, xmask)
