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


@triton.jit
def triton_for_fused_addcdiv_lerp_pow_sqrt_0(in_ptr0, in_ptr1, in_ptr2, in_ptr3, in_ptr4, in_ptr5, in_ptr6, in_ptr7, in_ptr8, in_ptr9, in_ptr10, in_ptr11, in_ptr12, in_ptr13, in_ptr14, in_ptr15, in_ptr16, in_ptr17, in_ptr18, in_ptr19, out_ptr0, out_ptr1, out_ptr2, out_ptr3, out_ptr4, out_ptr5, out_ptr6, out_ptr7, out_ptr8, out_ptr9, out_ptr10, out_ptr11):
    """A foreach AdamW step as Inductor fuses it for torch.compile'd `opt.step()`: one program
    range per parameter (branch on the program id), each the 4-tensor AdamW update with its step
    count's two `pow`s. Four parameters here; a model's has one branch per parameter."""
    pid = tl.program_id(0)
    XBLOCK: tl.constexpr = 1024
    num_xblocks_0 = tl.cdiv(1048576, XBLOCK)
    num_xblocks_1 = num_xblocks_0 + tl.cdiv(1024, XBLOCK)
    num_xblocks_2 = num_xblocks_1 + tl.cdiv(3145728, XBLOCK)
    num_xblocks_3 = num_xblocks_2 + tl.cdiv(4096, XBLOCK)
    if pid < num_xblocks_0:
        pid_offset = pid
        xnumel = 1048576
        xoffset = pid_offset * XBLOCK
        xindex = xoffset + tl.arange(0, XBLOCK)[:]
        xmask = xindex < xnumel
        x0 = xindex
        tmp0 = tl.load(in_ptr0 + (x0), xmask)
        tmp3 = tl.load(in_ptr1 + (x0), xmask)
        tmp4 = tl.load(in_ptr2 + (x0), xmask)
        tmp10 = tl.load(in_ptr3 + (x0), xmask)
        tmp16 = tl.load(in_ptr4 + (0))
        tmp17 = tl.broadcast_to(tmp16, [XBLOCK])
        tmp1 = tl.full([1], 0.999999, tl.float32)
        tmp2 = tmp0 * tmp1
        tmp5 = tmp4 - tmp3
        tmp6 = tl.full([1], 0.09999999999999998, tl.float32)
        tmp7 = tmp5 * tmp6
        tmp8 = tmp3 + tmp7
        tmp9 = tmp4 * tmp4
        tmp11 = tl.full([1], 0.999, tl.float32)
        tmp12 = tmp10 * tmp11
        tmp13 = tl.full([1], 0.0010000000000000009, tl.float32)
        tmp14 = tl.fma(tmp9, tmp13, tmp12)
        tmp15 = tl.sqrt_rn(tmp14)
        tmp18 = tl.full([1], 1.0, tl.float32)
        tmp19 = tmp17 + tmp18
        tmp20 = libdevice.pow(tmp11, tmp19)
        tmp21 = tmp18 - tmp20
        tmp22 = tl.sqrt_rn(tmp21)
        tmp23 = tl.full([1], 0.9, tl.float32)
        tmp24 = libdevice.pow(tmp23, tmp19)
        tmp25 = tmp18 - tmp24
        tmp26 = (tmp18 / tmp25)
        tmp27 = tl.full([1], 0.0001, tl.float32)
        tmp28 = tmp26 * tmp27
        tmp29 = -tmp28
        tmp30 = tmp22 * tmp29
        tmp31 = (tmp15 / tmp30)
        tmp32 = (tmp18 / tmp29)
        tmp33 = tl.full([1], 1e-08, tl.float32)
        tmp34 = tmp32 * tmp33
        tmp35 = tmp31 + tmp34
        tmp36 = (tmp8 / tmp35)
        tmp37 = tmp2 + tmp36
        tl.store(out_ptr0 + (x0), tmp37, xmask)
        tl.store(out_ptr1 + (x0), tmp8, xmask)
        tl.store(out_ptr2 + (x0), tmp14, xmask)
    elif pid < num_xblocks_1:
        pid_offset = pid - num_xblocks_0
        xnumel = 1024
        xoffset = pid_offset * XBLOCK
        xindex = xoffset + tl.arange(0, XBLOCK)[:]
        xmask = xindex < xnumel
        x0 = xindex
        tmp0 = tl.load(in_ptr5 + (x0), xmask)
        tmp3 = tl.load(in_ptr6 + (x0), xmask)
        tmp4 = tl.load(in_ptr7 + (x0), xmask)
        tmp10 = tl.load(in_ptr8 + (x0), xmask)
        tmp16 = tl.load(in_ptr9 + (0))
        tmp17 = tl.broadcast_to(tmp16, [XBLOCK])
        tmp1 = tl.full([1], 0.999999, tl.float32)
        tmp2 = tmp0 * tmp1
        tmp5 = tmp4 - tmp3
        tmp6 = tl.full([1], 0.09999999999999998, tl.float32)
        tmp7 = tmp5 * tmp6
        tmp8 = tmp3 + tmp7
        tmp9 = tmp4 * tmp4
        tmp11 = tl.full([1], 0.999, tl.float32)
        tmp12 = tmp10 * tmp11
        tmp13 = tl.full([1], 0.0010000000000000009, tl.float32)
        tmp14 = tl.fma(tmp9, tmp13, tmp12)
        tmp15 = tl.sqrt_rn(tmp14)
        tmp18 = tl.full([1], 1.0, tl.float32)
        tmp19 = tmp17 + tmp18
        tmp20 = libdevice.pow(tmp11, tmp19)
        tmp21 = tmp18 - tmp20
        tmp22 = tl.sqrt_rn(tmp21)
        tmp23 = tl.full([1], 0.9, tl.float32)
        tmp24 = libdevice.pow(tmp23, tmp19)
        tmp25 = tmp18 - tmp24
        tmp26 = (tmp18 / tmp25)
        tmp27 = tl.full([1], 0.0001, tl.float32)
        tmp28 = tmp26 * tmp27
        tmp29 = -tmp28
        tmp30 = tmp22 * tmp29
        tmp31 = (tmp15 / tmp30)
        tmp32 = (tmp18 / tmp29)
        tmp33 = tl.full([1], 1e-08, tl.float32)
        tmp34 = tmp32 * tmp33
        tmp35 = tmp31 + tmp34
        tmp36 = (tmp8 / tmp35)
        tmp37 = tmp2 + tmp36
        tl.store(out_ptr3 + (x0), tmp37, xmask)
        tl.store(out_ptr4 + (x0), tmp8, xmask)
        tl.store(out_ptr5 + (x0), tmp14, xmask)
    elif pid < num_xblocks_2:
        pid_offset = pid - num_xblocks_1
        xnumel = 3145728
        xoffset = pid_offset * XBLOCK
        xindex = xoffset + tl.arange(0, XBLOCK)[:]
        xmask = xindex < xnumel
        x0 = xindex
        tmp0 = tl.load(in_ptr10 + (x0), xmask)
        tmp3 = tl.load(in_ptr11 + (x0), xmask)
        tmp4 = tl.load(in_ptr12 + (x0), xmask)
        tmp10 = tl.load(in_ptr13 + (x0), xmask)
        tmp16 = tl.load(in_ptr14 + (0))
        tmp17 = tl.broadcast_to(tmp16, [XBLOCK])
        tmp1 = tl.full([1], 0.999999, tl.float32)
        tmp2 = tmp0 * tmp1
        tmp5 = tmp4 - tmp3
        tmp6 = tl.full([1], 0.09999999999999998, tl.float32)
        tmp7 = tmp5 * tmp6
        tmp8 = tmp3 + tmp7
        tmp9 = tmp4 * tmp4
        tmp11 = tl.full([1], 0.999, tl.float32)
        tmp12 = tmp10 * tmp11
        tmp13 = tl.full([1], 0.0010000000000000009, tl.float32)
        tmp14 = tl.fma(tmp9, tmp13, tmp12)
        tmp15 = tl.sqrt_rn(tmp14)
        tmp18 = tl.full([1], 1.0, tl.float32)
        tmp19 = tmp17 + tmp18
        tmp20 = libdevice.pow(tmp11, tmp19)
        tmp21 = tmp18 - tmp20
        tmp22 = tl.sqrt_rn(tmp21)
        tmp23 = tl.full([1], 0.9, tl.float32)
        tmp24 = libdevice.pow(tmp23, tmp19)
        tmp25 = tmp18 - tmp24
        tmp26 = (tmp18 / tmp25)
        tmp27 = tl.full([1], 0.0001, tl.float32)
        tmp28 = tmp26 * tmp27
        tmp29 = -tmp28
        tmp30 = tmp22 * tmp29
        tmp31 = (tmp15 / tmp30)
        tmp32 = (tmp18 / tmp29)
        tmp33 = tl.full([1], 1e-08, tl.float32)
        tmp34 = tmp32 * tmp33
        tmp35 = tmp31 + tmp34
        tmp36 = (tmp8 / tmp35)
        tmp37 = tmp2 + tmp36
        tl.store(out_ptr6 + (x0), tmp37, xmask)
        tl.store(out_ptr7 + (x0), tmp8, xmask)
        tl.store(out_ptr8 + (x0), tmp14, xmask)
    elif pid < num_xblocks_3:
        pid_offset = pid - num_xblocks_2
        xnumel = 4096
        xoffset = pid_offset * XBLOCK
        xindex = xoffset + tl.arange(0, XBLOCK)[:]
        xmask = xindex < xnumel
        x0 = xindex
        tmp0 = tl.load(in_ptr15 + (x0), xmask)
        tmp3 = tl.load(in_ptr16 + (x0), xmask)
        tmp4 = tl.load(in_ptr17 + (x0), xmask)
        tmp10 = tl.load(in_ptr18 + (x0), xmask)
        tmp16 = tl.load(in_ptr19 + (0))
        tmp17 = tl.broadcast_to(tmp16, [XBLOCK])
        tmp1 = tl.full([1], 0.999999, tl.float32)
        tmp2 = tmp0 * tmp1
        tmp5 = tmp4 - tmp3
        tmp6 = tl.full([1], 0.09999999999999998, tl.float32)
        tmp7 = tmp5 * tmp6
        tmp8 = tmp3 + tmp7
        tmp9 = tmp4 * tmp4
        tmp11 = tl.full([1], 0.999, tl.float32)
        tmp12 = tmp10 * tmp11
        tmp13 = tl.full([1], 0.0010000000000000009, tl.float32)
        tmp14 = tl.fma(tmp9, tmp13, tmp12)
        tmp15 = tl.sqrt_rn(tmp14)
        tmp18 = tl.full([1], 1.0, tl.float32)
        tmp19 = tmp17 + tmp18
        tmp20 = libdevice.pow(tmp11, tmp19)
        tmp21 = tmp18 - tmp20
        tmp22 = tl.sqrt_rn(tmp21)
        tmp23 = tl.full([1], 0.9, tl.float32)
        tmp24 = libdevice.pow(tmp23, tmp19)
        tmp25 = tmp18 - tmp24
        tmp26 = (tmp18 / tmp25)
        tmp27 = tl.full([1], 0.0001, tl.float32)
        tmp28 = tmp26 * tmp27
        tmp29 = -tmp28
        tmp30 = tmp22 * tmp29
        tmp31 = (tmp15 / tmp30)
        tmp32 = (tmp18 / tmp29)
        tmp33 = tl.full([1], 1e-08, tl.float32)
        tmp34 = tmp32 * tmp33
        tmp35 = tmp31 + tmp34
        tmp36 = (tmp8 / tmp35)
        tmp37 = tmp2 + tmp36
        tl.store(out_ptr9 + (x0), tmp37, xmask)
        tl.store(out_ptr10 + (x0), tmp8, xmask)
        tl.store(out_ptr11 + (x0), tmp14, xmask)
    else:
        pass
