"""What a compiled kernel's metadata may hold, checked in one place.

Metadata comes back from the node cache and from a daemon's reply: data that another
process wrote. `checked` holds every field to its type and range before the runtime uses
any of it (a launch's block size and shared memory come from here), and to the kernel,
target and warp count that were asked for, so an entry or reply meant for another kernel
is refused. A refusal is a `MetadataError`; callers treat it as a miss.
"""
from __future__ import annotations

import re

from kiln.ir import options as options_record

# far above any GPU's shared memory per CTA: a kernel that needs more than its GPU has
# is refused at launch (OutOfResources), not here
MAX_SHARED_BYTES = 16 << 20
_TARGET = re.compile(r"sm_(\d{2,3})[af]?\Z")
_SCALARS = (bool, int, float, str, type(None))
_MAX_TEXT = 4096


DEFAULT_NUM_WARPS = options_record.DEFAULT_NUM_WARPS  # codegen's, for options that name none


class MetadataError(ValueError):
    pass


def expected(name: str, target: str, options: dict) -> dict:
    """What the metadata of kernel `name` compiled for `target` with `options` must say."""
    return {"name": name, "target": target, "num_warps": options.get("num_warps", DEFAULT_NUM_WARPS)}


def _int(lo: int, hi: int):
    return (lambda v: type(v) is int and lo <= v <= hi), f"an int from {lo} to {hi}"


def _args(value) -> bool:
    return (type(value) is list and len(value) <= 65536
            and all(type(a) is dict and all(type(k) is str and _text(v) for k, v in a.items())
                    and _tma_box_ok(a.get("tma_box")) and _tma_of_ok(a.get("tma_of"))
                    and a.get("launch_grid") in (None, "0", "1", "2") and _scratch_ok(a.get("global_scratch"))
                    and a.get("split_k") in (None, "1") and a.get("tma_stride") in (None, "1")
                    for a in value))


def parse_global_scratch(text) -> int | None:
    """Bytes of global scratch each CTA takes through this argument (`"global_scratch":
    "256"`: two TMA maps the kernel makes, kiln.codegen.lower.tma), None for none;
    MetadataError otherwise."""
    if text is None:
        return None
    if type(text) is not str or not text.isdigit() or len(text) > 6 or int(text) % 128:
        raise MetadataError(f"not a global scratch size (a multiple of 128 bytes): {text!r:.60}")
    return int(text)


def _scratch_ok(text) -> bool:
    try:
        parse_global_scratch(text)
    except MetadataError:
        return False
    return True


_TMA_BOX = re.compile(r"(\d{1,3})x(\d{1,3}):swizzle(32|64|128)\Z")


def parse_tma_box(text) -> tuple[int, int, int] | None:
    """(inner elements, rows, swizzle bytes) of an argument's `tma_box` ("64x128:swizzle128":
    the box the launcher encodes a TMA map with), None for none; MetadataError otherwise."""
    if text is None or text == "":
        return None
    m = _TMA_BOX.match(text) if type(text) is str else None
    box = tuple(int(g) for g in m.groups()) if m else None
    if box is None or not (1 <= box[0] <= 256 and 1 <= box[1] <= 256):
        raise MetadataError(f"not a TMA box (at most 256x256, swizzle 32, 64 or 128): {text!r:.60}")
    return box


_TMA_OF = re.compile(r"(\d{1,5}),(\d{1,5}),(\d{1,5}),(\d{1,5})\Z")


def parse_tma_of(text) -> tuple[int, int, int, int] | None:
    """(base, inner extent, outer extent, outer stride): the indices of the arguments a
    derived TMA map is encoded from (`"tma_of": "0,5,3,6"`, kiln.codegen.passes.pointer_tma),
    None for none; MetadataError otherwise."""
    if text is None or text == "":
        return None
    m = _TMA_OF.match(text) if type(text) is str else None
    if m is None:
        raise MetadataError(f"not the argument indices of a derived TMA map: {text!r:.60}")
    return tuple(int(g) for g in m.groups())


def _tma_of_ok(text) -> bool:
    try:
        parse_tma_of(text)
    except MetadataError:
        return False
    return True


def _tma_box_ok(text) -> bool:
    try:
        parse_tma_box(text)
    except MetadataError:
        return False
    return True


def _split_trips(value) -> bool:
    """A split_k trip spec (kiln.codegen.passes.split_k.trip_spec): five int32 values."""
    return (type(value) is list and len(value) == 5 and all(type(v) is int and -(1 << 31) <= v < 1 << 31 for v in value)
            and value[0] >= -1 and value[2] >= 1 and value[4] >= 1)


def _options(value) -> bool:
    return (type(value) is dict and len(value) <= 64
            and all(type(k) is str and _plain(v) for k, v in value.items()))


def _text(value) -> bool:
    return type(value) is str and len(value) <= _MAX_TEXT


def _plain(value) -> bool:
    return type(value) in _SCALARS and (type(value) is not str or len(value) <= _MAX_TEXT)


# field -> (check, what it must be): every field codegen, the cache and the daemon put there;
# `num_warps` and `shared` size the launch
FIELDS = {
    "name": (lambda v: type(v) is str and 0 < len(v) <= 1024, "a kernel name"),
    "target": (lambda v: type(v) is str and _TARGET.match(v) is not None, "a target such as sm_90a"),
    "num_warps": (lambda v: type(v) is int and 1 <= v <= 32 and not v & (v - 1), "a power of two from 1 to 32"),
    "num_stages": _int(0, 64), "num_ctas": _int(1, 16), "threads": _int(32, 1024),
    "shared": _int(0, MAX_SHARED_BYTES), "n_regs": _int(0, 255), "n_spills": _int(0, 1 << 30),
    "ptx_version": _int(0, 1000), "splittable": (lambda v: v is True, "True (a split_k build applies)"),
    "split_trips": (_split_trips, "[arg, add, div, lb, step]: ints, arg >= -1, div and step >= 1"),
    "args": (_args, "a list of {name, type, llvm_type[, tma_box]} strings"),
    "options": (_options, "a dict of plain option values"),
}
REQUIRED = ("name", "num_warps", "shared")


def launched_warps(metadata: dict) -> int:
    """The warps a binary's CTA runs: its `threads` (a warp-specialized kernel's producer and
    replicated warps too), else its num_warps."""
    return metadata.get("threads", 32 * metadata.get("num_warps", 0)) // 32


def checked(metadata, *, name: str | None = None, target: str | None = None, num_warps: int | None = None) -> dict:
    """`metadata` if every field has its type and range and, for each of `name`, `target`
    and `num_warps` given, it is the metadata of that kernel, target and warp count;
    else MetadataError."""
    if type(metadata) is not dict:
        raise MetadataError(f"metadata is a {type(metadata).__name__}, not a dict")
    for field in REQUIRED:
        if field not in metadata:
            raise MetadataError(f"metadata lacks {field!r}")
    for field, value in metadata.items():
        check, expected = FIELDS.get(field, (None, ""))
        if check is not None:
            if not check(value):
                raise MetadataError(f"metadata {field} = {value!r:.80} is not {expected}")
        elif type(field) is not str or not _plain(value):
            raise MetadataError(f"metadata {field!r:.80} holds a {type(value).__name__}, not a plain value")
    # a warp-specialized kernel runs whole warpgroups more than its num_warps
    if "threads" in metadata and (metadata["threads"] < 32 * metadata["num_warps"]
                                  or (metadata["threads"] - 32 * metadata["num_warps"]) % 128):
        raise MetadataError(f"metadata threads = {metadata['threads']} with num_warps = {metadata['num_warps']}")
    for field, wanted in (("name", name), ("target", target), ("num_warps", num_warps)):
        if wanted is not None and field in metadata and metadata[field] != wanted:
            raise MetadataError(f"metadata {field} = {metadata[field]!r:.80} where {wanted!r:.80} was asked for")
    return metadata
