"""`tl.dot_scaled`: a matrix product of microscaled operands, built from existing ops.

Each operand is decoded (fp4 e2m1 unpacked from bytes, fp8 bitcast from bytes) to the compute
type and multiplied there by its scale: an e8m0 power of two per 32 elements along K (MX formats),
or an fp8 e4m3 factor per 16 (NVFP4's); fp4 and fp8 for bfloat16 in fp32, then rounded: the same
values, fewer instructions. The product is an ordinary `dot` of the compute type with an fp32
accumulator: what Triton does on GPUs without native MX instructions (Hopper and older). The compute
type is bfloat16, or float16 where an operand is fp16 (bfloat16 would round its mantissa); the scale
is then an fp16 too, so as on those GPUs a factor below fp16's range is 0 and a scaled value above it
is inf. Operands are 2-D, or 3-D with a leading batch dim (a batched dot); fp4 may be packed along
M or N instead of K (`lhs_k_pack` / `rhs_k_pack` False), as Triton's.
"""
from __future__ import annotations

from . import semantic
from .core import bfloat16, builtin, float8e4nv, float8e5, float16, float32, int32, tensor, uint8
from .semantic import unwrap

_FORMATS = {"e2m1": None, "e4m3": float8e4nv, "e5m2": float8e5, "bf16": bfloat16, "fp16": float16}


def _group(scale: tensor) -> int:
    """Elements along K sharing one scale: 16 for e4m3 scales (NVFP4), 32 for e8m0 ones (MX)."""
    return 16 if scale.dtype == float8e4nv else 32


def _shift(x, bits, left=True):
    return semantic.shl(x, bits) if left else semantic.shr(x, bits)


def _e2m1_to_fp32(codes: tensor) -> tensor:
    """4-bit e2m1 codes (in int32) as fp32: exponent bias 1, one mantissa bit, no inf or NaN. The
    code's exponent and mantissa bits go where fp32's are, so the bits read as its value times
    2**-126 (e2m1's subnormal 0.5 an fp32 subnormal), which one exact multiply undoes: five integer
    ops and a multiply a value, no select."""
    magnitude = _shift(semantic.and_(codes, 7), 22)
    sign = _shift(semantic.and_(codes, 8), 28)
    tiny = semantic.cast(semantic.or_(magnitude, sign), float32, bitcast=True)
    return semantic.mul(tiny, 2.0 ** 126)


def _unpack_fp4(packed: tensor, axis: int) -> tensor:
    """Bytes holding two e2m1 values each (the lower index in the low nibble), unpacked along `axis`,
    as fp32."""
    last = len(packed.type.shape) - 1
    if axis != last:  # unpacked along the last dim between two swaps of `axis` and it
        order = list(range(last + 1))
        order[axis], order[last] = last, axis
        return semantic.permute(_unpack_fp4(semantic.permute(packed, order), last), order)
    packed = semantic.cast(semantic.cast(packed, uint8, bitcast=True), int32)
    low, high = semantic.and_(packed, 15), _shift(packed, 4, left=False)
    pairs = semantic.join(_e2m1_to_fp32(low), _e2m1_to_fp32(high))
    shape = list(pairs.type.shape)
    return semantic.reshape(pairs, shape[:-2] + [shape[-2] * 2])


def _decoded_type(fmt: str, compute):
    """The type an operand in format `fmt` is decoded to and scaled in: fp32 for fp4 and fp8 where the
    compute type is bf16 (each value and each factor exact in both, so the fp32 product rounded once is
    the bf16 product, with no bf16 unpacked from its pair for a multiply of its own), else `compute`."""
    return float32 if compute == bfloat16 and fmt in ("e2m1", "e4m3", "e5m2") else compute


def _decode(x, fmt: str, pack_axis: int, to) -> tensor:
    """Operand `x` in format `fmt` as type `to` (every value exact); fp4 is packed along `pack_axis`.
    A 16-bit operand already of that type is used as it is: a round trip through fp32 would make it a
    computed operand, staged to shared memory a second time."""
    x = semantic.to_tensor(x)
    if fmt == "e2m1":
        values = _unpack_fp4(x, pack_axis)
        return values if to == float32 else semantic.cast(values, to)
    want = _FORMATS[fmt]
    if x.dtype != want:
        if x.dtype.primitive_bitwidth != want.primitive_bitwidth or not x.dtype.is_int():
            raise TypeError(f"dot_scaled: a {fmt} operand must be {want} (or raw bytes of it), not {x.dtype}")
        x = semantic.cast(x, want, bitcast=True)
    return x if x.dtype == to else semantic.cast(x, to)


def _scale_factors(scale, batch: list, rows: int, k: int, fast_math: bool, name: str) -> tensor:
    """Scales [*batch, rows, k / group] as fp32 factors, one per group: an e4m3 scale's value, an
    e8m0 one's 2**(s - 127) (NaN for 0xFF)."""
    scale = semantic.to_tensor(scale)
    want = batch + [rows, k // _group(scale)]
    if list(scale.type.shape) != want:  # Triton's words (its shape as strings too)
        raise ValueError(f"{name} must be a tensor of shape {want}. Got {[str(d) for d in scale.type.shape]}")
    if scale.dtype == float8e4nv:
        return semantic.cast(scale, float32)
    s = semantic.cast(semantic.cast(scale, uint8, bitcast=True), int32)
    factor = semantic.cast(_shift(s, 23), float32, bitcast=True)
    if not fast_math:
        factor = semantic.where(semantic.equal(s, 255), float("nan"), factor)
    return factor


def _scaled(x: tensor, factor: tensor, k_axis: int) -> tensor:
    """`x` (K along `k_axis`) times the factor of each element's group along K (`factor`: x's shape with
    K / group at `k_axis`), in x's type. The groups are a dim of their own while they multiply: x only
    reshaped, the factors broadcast along the group (no block of factors as large as x to move between
    layouts)."""
    shape = list(x.type.shape)
    groups = factor.type.shape[k_axis]
    grouped = shape[:k_axis] + [groups, shape[k_axis] // groups] + shape[k_axis + 1:]
    factor = semantic.broadcast_to(semantic.expand_dims(semantic.cast(factor, x.dtype), k_axis + 1), grouped)
    return semantic.reshape(semantic.mul(semantic.reshape(x, grouped), factor), shape)


@builtin
def dot_scaled(lhs, lhs_scale, lhs_format, rhs, rhs_scale, rhs_format, acc=None, fast_math=False,
               lhs_k_pack=True, rhs_k_pack=True, out_dtype=float32):
    """(lhs * lhs_scale) @ (rhs * rhs_scale) + acc for formats e2m1, e4m3, e5m2, bf16, fp16; scales
    e8m0 (uint8, one per 32 along K) or e4m3 (one per 16)."""
    lhs_format, rhs_format = unwrap(lhs_format), unwrap(rhs_format)
    for fmt in (lhs_format, rhs_format):
        if fmt not in _FORMATS:
            raise ValueError(f"dot_scaled: format must be one of {sorted(_FORMATS)}, not {fmt!r}")
    lhs_k_pack, rhs_k_pack = bool(unwrap(lhs_k_pack)), bool(unwrap(rhs_k_pack))
    for fmt, k_pack in ((lhs_format, lhs_k_pack), (rhs_format, rhs_k_pack)):
        if not k_pack and fmt != "e2m1":
            raise ValueError(f"dot_scaled: only an e2m1 operand may be packed along M or N, not a {fmt} one")
    lhs, rhs = semantic.to_tensor(lhs), semantic.to_tensor(rhs)
    rank = len(lhs.type.shape)
    if rank not in (2, 3) or len(rhs.type.shape) != rank:
        raise ValueError(f"dot_scaled: operands must be both 2-D or both 3-D, not {lhs.shape} and {rhs.shape}")
    fast_math = bool(unwrap(fast_math))
    compute = float16 if "fp16" in (lhs_format, rhs_format) else bfloat16
    a = _decode(lhs, lhs_format, rank - (1 if lhs_k_pack else 2), _decoded_type(lhs_format, compute))  # [.., M, K]
    b = _decode(rhs, rhs_format, rank - (2 if rhs_k_pack else 1), _decoded_type(rhs_format, compute))  # [.., K, N]
    (*batch, m, k), (k2, n) = a.type.shape, b.type.shape[-2:]
    if k != k2:
        raise ValueError(f"dot_scaled: K differs between lhs ({k}) and rhs ({k2}) after unpacking")
    if unwrap(lhs_scale) is not None:
        a = _scaled(a, _scale_factors(lhs_scale, batch, m, k, fast_math, "lhs_scale"), k_axis=rank - 1)
    if unwrap(rhs_scale) is not None:
        factors = _scale_factors(rhs_scale, batch, n, k, fast_math, "rhs_scale")  # [.., N, K / group]
        b = _scaled(b, semantic.permute(factors, list(range(rank - 2)) + [rank - 1, rank - 2]), k_axis=rank - 2)
    a, b = (x if x.dtype == compute else semantic.cast(x, compute) for x in (a, b))
    return semantic.dot(a, b, acc, None, None, None, unwrap(out_dtype))
