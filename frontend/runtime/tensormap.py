"""TMA maps for host TensorDescriptor arguments, encoded at launch for the compiled kernel.

A kernel that copies a descriptor's blocks with TMA records, in its metadata's argument
list, the box it reads (`"tma_box": "64x128:swizzle128"`: inner elements, rows, swizzle
bytes; kiln.ir.types' `shared_type.tma_box`). The launcher encodes the descriptor's tensor
with that box (`cuTensorMapEncodeTiled`) into the kernel's 128-byte by-value parameter.
Out-of-bounds elements of a box read as zero, as the descriptor's padding="zero" says.
"""
from __future__ import annotations

from kiln.ir.ops import LEAD_DIMS_MAX

NBYTES = 128
MAX_RANK = 2 + LEAD_DIMS_MAX  # a map's dims: a 2-D box of a descriptor of up to this many
_CACHE_LIMIT = 256


def encoder(box: tuple[int, int, int]):
    """fill(slot, address, descriptor): write the TMA map of a host TensorDescriptor (2 to 5 dims)
    whose base is at device `address`, read in boxes of `box`, into the 128-byte ctypes
    `slot`. Maps are kept per (address, shape, strides): a training loop passes the same
    few tensors again and again."""
    import ctypes
    from .cuda_driver import CudaError, _error_text

    inner, rows, swizzle = box
    cache: dict = {}

    def encode(address, desc) -> bytes:
        elem_bytes = desc._elem.primitive_bitwidth // 8
        if not 2 <= len(desc.shape) <= MAX_RANK or inner * elem_bytes != swizzle:
            raise ValueError(f"this kernel reads the descriptor in {inner}x{rows} boxes of "
                             f"{swizzle} bytes; got a {len(desc.shape)}-D descriptor of {elem_bytes}-byte elements")
        # innermost dim first; a dim before the block's two is read a box of 1 at a time (lead_dims)
        err, got = _encode(desc._elem.name, elem_bytes, address, list(reversed(desc.shape)),
                           [s * elem_bytes for s in reversed(desc.strides[:-1])], box)
        if got is None:
            raise CudaError(f"encoding a TMA map (shape {desc.shape}, strides {desc.strides}, box "
                            f"{inner}x{rows}) failed: {_error_text(err)}")
        return got

    def fill(slot, address, desc) -> None:
        key = (address, tuple(desc.shape), tuple(desc.strides), desc._elem.name)
        ctypes.memmove(slot, _kept(cache, key, lambda: encode(address, desc)), NBYTES)

    return fill


class DerivedMapUnusable(ValueError):
    """This launch's arguments do not make a TMA map the kernel can read (an extent below
    one, a stride TMA cannot take): the caller launches the build without derived maps."""


def derived_encoder(box: tuple[int, int, int], elem):
    """fill(slot, address, inner, outer, stride): the TMA map of the 2-D row-major tensor
    at `address` (`outer` rows of `inner` elements of `elem`, rows `stride` elements
    apart) that a kernel reads through pointers and kiln.codegen.passes.pointer_tma
    proved a TMA box (metadata `tma_of`). Raises DerivedMapUnusable where no map reads
    what the pointers would."""
    import ctypes

    elem_bytes = elem.itemsize
    cache: dict = {}

    def encode(address, inner, outer, stride) -> bytes:
        # an empty extent would read nothing where a map reads at least element 0; a row
        # stride under a row (overlapping rows) or past 2^40 bytes has no map
        if inner < 1 or outer < 1 or stride < inner or (stride * elem_bytes) % 16 or stride * elem_bytes >= 1 << 40 \
                or address % 16:
            raise DerivedMapUnusable(f"no TMA map for {outer}x{inner} elements, rows {stride} apart")
        err, got = _encode(elem.name, elem_bytes, address, [inner, outer], [stride * elem_bytes], box)
        if got is None:
            raise DerivedMapUnusable(f"encoding a TMA map of {outer}x{inner} elements failed ({err})")
        return got

    def fill(slot, address, inner, outer, stride) -> None:
        key = (address, inner, outer, stride)
        ctypes.memmove(slot, _kept(cache, key, lambda: encode(address, inner, outer, stride)), NBYTES)

    return fill


def _encode(elem_name: str, elem_bytes: int, address: int, dims: list, strides_bytes: list, box):
    """cuTensorMapEncodeTiled of a tensor of `dims` (innermost first), each dim after the first
    `strides_bytes` apart, read in `box`es (inner elements, rows, swizzle bytes; a box of 1 along
    every further dim), out-of-box elements zero: (the CUresult code, the map's 128 bytes or None
    where it failed)."""
    import ctypes
    from cuda.bindings import driver as cu

    inner_box, rows, swizzle = box
    kind = _FLOAT_TYPES.get(elem_name) or _RAW_TYPES[elem_bytes]
    u32, u64 = cu.cuuint32_t, cu.cuuint64_t
    boxes = [inner_box, rows] + [1] * (len(dims) - 2)
    err, tmap = cu.cuTensorMapEncodeTiled(
        getattr(cu.CUtensorMapDataType, f"CU_TENSOR_MAP_DATA_TYPE_{kind}"), len(dims), address,
        [u64(d) for d in dims], [u64(s) for s in strides_bytes], [u32(b) for b in boxes], [u32(1)] * len(dims),
        cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        getattr(cu.CUtensorMapSwizzle, f"CU_TENSOR_MAP_SWIZZLE_{swizzle}B"),
        cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
        cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    ok = err == cu.CUresult.CUDA_SUCCESS
    return int(err), ctypes.string_at(tmap.getPtr(), NBYTES) if ok else None


def _kept(cache: dict, key, make) -> bytes:
    """cache[key], made once; the cache is emptied when it reaches _CACHE_LIMIT maps."""
    got = cache.get(key)
    if got is None:
        if len(cache) >= _CACHE_LIMIT:
            cache.clear()
        got = cache[key] = make()
    return got


# CUtensorMapDataType names; any other element is moved as raw bytes of its width (fp8 as uint8)
_FLOAT_TYPES = {"fp16": "FLOAT16", "bf16": "BFLOAT16", "fp32": "FLOAT32"}
_RAW_TYPES = {1: "UINT8", 2: "UINT16", 4: "UINT32", 8: "UINT64"}
