"""Which dots the tensor cores' mma.sync can run: by their operand and accumulator types, shapes and
the target. The layouts pass gives such a dot's result an mma layout, smem_pipeline stages its
operands for it, the dot_staging pass writes down which engine runs each dot and where its operands
are staged, and lowering emits mma.sync or FMAs as that says.
"""
from __future__ import annotations

from ..scratch_bytes import scalar_bytes


def fp8_mma(ctx) -> bool:
    """Does the target have mma.sync on fp8 (e4m3, e5m2; sm_89 on, PTX 8.4)? The CPU
    emulator has it too."""
    return ctx.portable or (ctx.target.capability >= 89 and ctx.target.ptx_version >= 84)


def fp8_fragments_upcast(ctx) -> bool:
    """Do fp8 tiles on mma.sync rings run on fp16 mma.sync, each 8-bit fragment converted in registers
    after its ldmatrix (`cvt.rn.f16x2.e4m3x2`, sm_89 on), where the target's PTX has no fp8 mma.sync?
    As Triton on Hopper, whose hardware has none (its mma.sync on fp8 is emulated through fp16)."""
    return not fp8_mma(ctx) and ctx.target.capability >= 89


def mma_f16_accumulators(ctx, s_in, s_out) -> bool:
    """Does an mma.sync dot of `s_in` operands into `s_out` keep fp16 accumulators in the
    tensor cores, as Triton does for `out_dtype=float16` (rounded to fp16 after every
    instruction)? fp16 operands do; fp8 ones where the target's PTX has that mma (8.7);
    otherwise the dot sums in fp32 and rounds once at its end."""
    if s_out.name != "fp16":
        return False
    return s_in.name == "fp16" or (s_in.name in ("fp8e4nv", "fp8e5") and (ctx.portable or ctx.target.ptx_version >= 87))


def mma_eligible(op, ctx, rings=False) -> bool:
    """fp16/bf16 operands with a float accumulator (16x8x16 steps), int8 with int32 or,
    where the target has it, fp8 with fp32 or fp16 (16x8x32 steps), fp32 at tf32 precision
    with fp32 (16x8x8 steps). 2-D, or batched ([B, M, K] x [B, K, N]: staged whole, or on rings of
    batched tiles). fp8 too where its fragments are upcast (`fp8_fragments_upcast`): an `mma_dot`, or
    a dot smem_pipeline would put on rings (`rings`)."""
    a, b, acc = op.operands
    if len(a.type.shape) not in (2, 3):
        return False
    (M, K), (_, N) = a.type.shape[-2:], b.type.shape[-2:]
    s, s_acc = a.type.scalar, acc.type.scalar  # a may be a shared tile (mma_dot)
    if s.name == "int8":
        return s_acc.name == "int32" and M % 16 == 0 and N % 8 == 0 and K % 32 == 0
    if s.name in ("fp8e4nv", "fp8e5"):
        upcast = (rings or op.name == "mma_dot") and fp8_fragments_upcast(ctx)
        return (fp8_mma(ctx) or upcast) and s_acc.name in ("fp32", "fp16") and M % 16 == 0 and N % 8 == 0 \
            and K % 32 == 0
    if s.name == "fp32":  # tl.dot's default for fp32: one tf32 product (ieee stays exact; tf32x3 and bf16xN
        # were split into tf32 / bf16 dots by f32_dot_split)
        return (op.name == "mma_dot" or op.attrs.get("input_precision") == "tf32") and s_acc.name == "fp32" \
            and M % 16 == 0 and N % 8 == 0 and K % 8 == 0
    return (s.name in ("fp16", "bf16") and s_acc.is_floating()
            and s_acc.name != "fp64" and M % 16 == 0 and N % 8 == 0 and K % 16 == 0)


PAD_BYTES = 16  # padding per staged row: one warp's fragment loads of a k-step hit different banks


def mma_staging(op) -> tuple[int, int, bool, int, int]:
    """How an mma.sync dot with operands in registers stages them in shared memory: (A row stride,
    B row stride, B kept row-major, A bytes, A + B bytes). A is row-major with padded rows; 16-bit
    B too (ldmatrix transposes it as it loads), 8- and 32-bit B transposed (K innermost)."""
    a, b = op.operands[:2]
    (M, K), (_, N) = a.type.shape[-2:], b.type.shape[-2:]
    batch = a.type.shape[0] if len(a.type.shape) == 3 else 1  # a batched dot's: one 2-D tile after another
    size = a.type.scalar.itemsize
    a_stride = K + PAD_BYTES // size
    b_row_major = size == 2
    b_stride = (N if b_row_major else K) + PAD_BYTES // size
    a_bytes = batch * M * a_stride * size
    return a_stride, b_stride, b_row_major, a_bytes, a_bytes + batch * (K if b_row_major else N) * b_stride * size


def fma_staging(op) -> tuple[int, int, int, int]:
    """How a dot run on FMAs stages its operands in shared memory, elements as registers hold
    them: (k elements per A read, A row stride, A bytes, A + B bytes). Each thread reads its rows
    of A a vector of k at a time (16 bytes, or the largest power of two of elements dividing K),
    so A is row-major with rows padded by those 16 bytes (the rows a warp reads at one k then
    start 4 banks apart, not on one bank); B is row-major [K, N] as it is."""
    a, b = op.operands[:2]
    K = a.type.shape[-1]
    size = scalar_bytes(a.type)
    k_vec = 1
    while k_vec * 2 * size <= 16 and K % (k_vec * 2) == 0:
        k_vec *= 2
    a_stride = K + (PAD_BYTES // size if k_vec * size == 16 else 0)
    a_bytes = a.type.numel // K * a_stride * size
    return k_vec, a_stride, a_bytes, a_bytes + b.type.numel * scalar_bytes(b.type)


def staging_end(fn) -> int:
    """Where the dots' staging buffers of their own end (the dot_staging pass's `staging` attrs: two
    buffers each, from their offset), 0 without: the scratch area starts after them."""
    return max((offset + 2 * size for op in fn.walk() if op.name == "dot" and "staging" in op.attrs
                for offset, size in [op.attrs["staging"]]), default=0)


def on_tensor_cores(fn) -> bool:
    """Does a dot of the planned function `fn` run on tensor cores: wgmma (`warp_group_dot`) or
    mma.sync (`mma_dot`, or a `dot` the dot_staging pass gave `engine = "mma"`)?"""
    return any(op.name in ("warp_group_dot", "mma_dot") or (op.name == "dot" and op.attrs.get("engine") == "mma")
               for op in fn.walk())
