"""The types of block IR, which are also the dtypes of `kiln.language`.

A value is a scalar (`fp32`), a pointer (`ptr<fp32>`) or a block of either with a
power-of-two shape (`<64x32xfp32>`). Types are immutable and compared by value; their
names are Triton's, so `tl.float32` prints as `fp32` in both places.
"""
from __future__ import annotations

import functools

import numpy as np

from .layout import parse_layout


class dtype:
    """A scalar type: a signed, unsigned or boolean integer or a floating-point number."""

    __slots__ = ("name", "kind", "primitive_bitwidth", "signed")
    SIGNED_INTS = ("int8", "int16", "int32", "int64")
    UNSIGNED_INTS = ("int1", "uint8", "uint16", "uint32", "uint64")
    FLOATS = ("fp8e4nv", "fp8e5", "fp8e4b8", "fp8e5b16", "fp8e4b15", "fp16", "bf16", "fp32", "fp64")

    def __new__(cls, *args, **kwargs):  # kwargs: pointer_type(t, const=True)
        if cls is dtype and args and args[0] in _SCALARS:
            return _SCALARS[args[0]]
        return super().__new__(cls)

    def __init__(self, name: str):
        if name not in _SCALAR_INFO:
            raise TypeError(f"unknown dtype {name!r}")
        kind, bits, signed = _SCALAR_INFO[name]
        self.name, self.kind, self.primitive_bitwidth, self.signed = name, kind, bits, signed

    def __getnewargs__(self):
        return (self.name,)

    # --- Triton's predicates -------------------------------------------------------
    def is_floating(self): return self.kind == "float"
    def is_int(self): return self.kind in ("int", "bool")
    def is_bool(self): return self.kind == "bool"
    def is_int1(self): return self.name == "int1"
    def is_int_signed(self): return self.is_int() and self.signed
    def is_int_unsigned(self): return self.is_int() and not self.signed
    def is_ptr(self): return False
    def is_block(self): return False
    def is_void(self): return False
    def is_standard_floating(self): return self.name in ("fp16", "bf16", "fp32", "fp64")
    def is_fp8(self): return self.name.startswith("fp8")
    def is_fp16(self): return self.name == "fp16"
    def is_bf16(self): return self.name == "bf16"
    def is_fp32(self): return self.name == "fp32"
    def is_fp64(self): return self.name == "fp64"

    def is_const(self): return False

    def get_int_max_value(self):
        """The largest value of an integer type (Triton's; int1 is unsigned: 1)."""
        bits = self.primitive_bitwidth
        return (1 << (bits - 1)) - 1 if self.is_int_signed() else (1 << bits) - 1

    def get_int_min_value(self):
        return -(1 << (self.primitive_bitwidth - 1)) if self.is_int_signed() else 0

    def with_element_ty(self, element_ty):
        """This type with `element_ty` as its element: a block keeps its shape."""
        return element_ty

    @staticmethod
    def is_dtype(type_str):
        return type_str in _SCALAR_INFO

    def __getattr__(self, attr):
        # is_int8, is_uint32, ... as in Triton.
        if attr.startswith("is_") and attr[3:] in _SCALAR_INFO:
            return lambda: self.name == attr[3:]
        raise AttributeError(attr)

    @property
    def int_bitwidth(self): return self.primitive_bitwidth if self.is_int() else None
    @property
    def int_signedness(self): return "signed" if self.signed else "unsigned"
    @property
    def fp_mantissa_width(self): return _MANTISSA.get(self.name)
    @property
    def itemsize(self): return max(1, self.primitive_bitwidth // 8)
    @property
    def scalar(self): return self
    @property
    def element_ty(self): return self
    @property
    def shape(self): return ()
    @property
    def numel(self): return 1

    def to_numpy(self) -> np.dtype:
        found = _NUMPY.get(self.name)
        return found if found is not None else _ml_dtypes()[self.name]

    def to_ir(self, builder=None):
        return self

    def __eq__(self, other):
        return type(other) is type(self) and _key(self) == _key(other)

    def __hash__(self):
        return hash(_key(self))

    def __str__(self):
        return self.name

    def __repr__(self):
        # Triton's form, an expression that evaluates to the dtype where `triton` is kiln
        name = "float" + self.name[2:] if self.name.startswith("fp") else self.name.replace("bf", "bfloat", 1)
        return f"triton.language.{name}"

    @property
    def cache_key_part(self):
        return str(self)


class pointer_type(dtype):
    """A global-memory pointer to `element_ty` (Triton's `tl.pointer_type`)."""

    __slots__ = ("element_ty_", "address_space", "const")

    def __init__(self, element_ty: dtype, address_space: int = 1, const: bool = False):
        if not isinstance(element_ty, dtype) or isinstance(element_ty, block_type):
            raise TypeError(f"pointer element must be a scalar or pointer type, not {element_ty!r}")
        self.name, self.kind, self.primitive_bitwidth, self.signed = f"ptr<{element_ty}>", "ptr", 64, False
        self.element_ty_, self.address_space, self.const = element_ty, address_space, const

    def __getnewargs__(self):
        return (self.element_ty_,)

    @property
    def element_ty(self): return self.element_ty_
    def is_ptr(self): return True
    def is_floating(self): return False
    def is_int(self): return False
    def is_const(self): return self.const

    def to_numpy(self) -> np.dtype:
        return np.dtype(np.uint64)

    def __repr__(self):
        return f"pointer<{self.element_ty_}>"  # as Triton prints it


class block_type(dtype):
    """A block of `element_ty` with a static shape of powers of two.

    In the GPU stage a block type also carries an `encoding`: how the block's elements are
    spread over the CTA's threads (a `kiln.ir.layout` layout, printed after the element
    type: `<64x32xfp16:blocked:spt1.8:tpw4.8:wpc4.1:order1.0>`). Type equality ignores it
    (the ops' type rules are about shapes and elements); `kiln.ir.layout_check` checks
    that the encodings of an op's operands are the ones the op reads them in.
    """

    __slots__ = ("element_ty_", "shape_", "encoding")

    def __init__(self, element_ty: dtype, shape, encoding=None):
        if isinstance(element_ty, block_type) or not isinstance(element_ty, dtype):
            raise TypeError(f"block element must be a scalar or pointer type, not {element_ty!r}")
        shape = tuple(int(getattr(d, "value", d)) for d in shape)
        if not shape:
            raise TypeError("a block needs at least one dimension")
        if encoding is not None and getattr(encoding, "rank", None) != len(shape):
            raise TypeError(f"encoding {encoding} does not fit a block of rank {len(shape)}")
        self.element_ty_, self.shape_, self.encoding = element_ty, shape, encoding
        self.name = "<" + "x".join(map(str, shape)) + f"x{element_ty}" + (f":{encoding}" if encoding else "") + ">"
        self.kind, self.primitive_bitwidth, self.signed = element_ty.kind, element_ty.primitive_bitwidth, element_ty.signed

    def __getnewargs__(self):
        return (self.element_ty_, self.shape_, self.encoding)

    def with_encoding(self, encoding) -> "block_type":
        return block_type(self.element_ty_, self.shape_, encoding)

    @property
    def element_ty(self): return self.element_ty_
    @property
    def scalar(self): return self.element_ty_
    @property
    def shape(self): return self.shape_
    @property
    def numel(self):
        n = 1
        for d in self.shape_:
            n *= d
        return n
    def is_block(self): return True
    def is_ptr(self): return False
    def get_block_shapes(self): return self.shape_
    def with_element_ty(self, element_ty): return block_type(element_ty, self.shape_, self.encoding)

    def to_numpy(self) -> np.dtype:
        return self.element_ty_.to_numpy()

    def __repr__(self):
        return f"<{list(self.shape_)}, {self.element_ty_!r}>"


# `swizzle` of a tile stored in whole rows whose 32-byte units are XORed with the row mod 4 (Triton's
# swizzled_shared<vec = 32 bytes, perPhase = 1, maxPhase = 4>): mma.sync reads a 32-bit B stored N-major
# a register a load, lanes (g, t) row t column g of 8 columns, which then take every bank once (a TMA
# swizzle gives them two lanes a bank). cp.async and plain loads and stores address it; TMA and wgmma do not.
ROW_XOR_32 = 1


class shared_type(dtype):
    """A buffer in shared memory (the GPU stage of block IR; codegen's passes make them).

    `shape` is the buffer's logical shape: `<4x128x64>` is a ring of four 128x64 tiles, or a
    batched tile (a 3-D dot's operand: four 128x64 tiles, one a batch); `<3x4x128x64>` a ring of
    three such batched tiles. The same bytes either way: each leading index one 2-D tile after
    the last. The last two dims are one tile, stored with tile dim `order[0]` contiguous, in rows of
    `swizzle` bytes (32, 64 or 128; 0 for no swizzle): tile element (outer, inner) sits in
    the region of its `swizzle`-byte column chunk, at row `outer` of it, and within every
    1024 bytes the 16-byte unit bits are XORed with the row bits, as the tensor cores and
    TMA read them. Printed `smem<4x128x64xfp16:swizzle128:order1.0>`. `swizzle` ROW_XOR_32
    (rows of at least 128 bytes): whole rows, printed `rowxor32`.
    """

    __slots__ = ("element_ty_", "shape_", "swizzle", "order")

    def __init__(self, element_ty: dtype, shape, swizzle: int = 0, order=None):
        if isinstance(element_ty, (block_type, shared_type)) or not isinstance(element_ty, dtype):
            raise TypeError(f"shared buffer element must be a scalar type, not {element_ty!r}")
        shape = tuple(int(d) for d in shape)
        order = tuple(int(d) for d in (order if order is not None else (1, 0)))
        if len(shape) not in (2, 3, 4) or any(not is_power_of_two(d) for d in shape[-2:]) or min(shape) < 1:
            raise TypeError(f"a shared buffer is a tile of power-of-two dims, a batch or a ring of them, not {shape}")
        if swizzle not in (0, 32, 64, 128, ROW_XOR_32):
            raise TypeError(f"swizzle must be 0, 32, 64 or 128 bytes or ROW_XOR_32, not {swizzle}")
        if sorted(order) != [0, 1]:
            raise TypeError(f"order {order} must be (1, 0) or (0, 1): the tile's dims")
        if swizzle == ROW_XOR_32 and shape[-2:][order[0]] * element_ty.itemsize < 128:
            raise TypeError(f"a row-XOR tile's rows hold four 32-byte units at least, not {shape}")
        self.element_ty_, self.shape_, self.swizzle, self.order = element_ty, shape, swizzle, order
        dims = "x".join(map(str, shape))
        mode = "rowxor32" if swizzle == ROW_XOR_32 else f"swizzle{swizzle}"
        self.name = f"smem<{dims}x{element_ty}:{mode}:order{order[0]}.{order[1]}>"
        self.kind, self.primitive_bitwidth, self.signed = "shared", element_ty.primitive_bitwidth, False

    def __getnewargs__(self):
        return (self.element_ty_, self.shape_, self.swizzle, self.order)

    @property
    def element_ty(self): return self.element_ty_
    @property
    def scalar(self): return self.element_ty_
    @property
    def shape(self): return self.shape_
    @property
    def numel(self):
        n = 1
        for d in self.shape_:
            n *= d
        return n
    @property
    def nbytes(self) -> int:
        return self.numel * self.element_ty_.itemsize
    def is_block(self): return False
    def is_floating(self): return False
    def is_int(self): return False

    def tile(self) -> "shared_type":
        """One tile of the ring (a 2-D tile of a batched one): the type of `local_index`."""
        return shared_type(self.element_ty_, self.shape_[1:], self.swizzle, self.order)

    @property
    def tile_shape(self) -> tuple:
        """The 2-D tile's dims (the last two), which `order` names."""
        return self.shape_[-2:]

    @property
    def tile_bytes(self) -> int:
        """Bytes of one 2-D tile: from a batch's tile to the next one's."""
        return self.tile_shape[0] * self.tile_shape[1] * self.element_ty_.itemsize

    def tma_box(self) -> tuple[int, int, int]:
        """(inner elements, rows, swizzle bytes) of the TMA box that fills this tile one swizzle-wide
        column chunk at a time (a chunk is every row's `swizzle` bytes of the inner dim)."""
        if self.swizzle == ROW_XOR_32:
            raise TypeError(f"TMA writes no row-XOR tile ({self.name})")
        return self.swizzle // self.element_ty.itemsize, self.tile_shape[self.order[1]], self.swizzle

    def transposed(self) -> "shared_type":
        """The same tile read with its two dims swapped: element (j, i) of the result is
        element (i, j) of this one, at the same byte (each batch's, of a batched tile)."""
        inner, outer = self.order
        return shared_type(self.element_ty_, self.shape_[:-2] + self.shape_[:-3:-1], self.swizzle, (outer, inner))

    def __repr__(self):
        return self.name


class tensormap_type(dtype):
    """A TMA tensor map: the 128 bytes that describe a global tensor to Hopper's bulk tensor
    copies. A kernel receives one per host TensorDescriptor argument (a by-value kernel
    parameter the launcher encodes); only `descriptor_load` reads it. Printed `tensormap`."""

    __slots__ = ()
    NBYTES = 128

    def __new__(cls):
        return _TENSORMAP if "_TENSORMAP" in globals() else object.__new__(cls)

    def __init__(self):
        self.name, self.kind, self.primitive_bitwidth, self.signed = "tensormap", "tensormap", 8 * self.NBYTES, False

    def __getnewargs__(self):
        return ()

    def is_floating(self): return False
    def is_int(self): return False

    def to_numpy(self) -> np.dtype:
        raise TypeError("a tensormap has no NumPy dtype")


_TENSORMAP = tensormap_type()
tensormap = _TENSORMAP


def _key(t):
    if isinstance(t, block_type):
        return ("block", _key(t.element_ty_), t.shape_)
    if isinstance(t, pointer_type):
        return ("ptr", _key(t.element_ty_), t.address_space)
    if isinstance(t, shared_type):
        return ("shared", _key(t.element_ty_), t.shape_, t.swizzle, t.order)
    return (t.name,)


_SCALAR_INFO = {
    "int1": ("bool", 1, False),
    "int8": ("int", 8, True), "int16": ("int", 16, True),
    "int32": ("int", 32, True), "int64": ("int", 64, True),
    "uint8": ("int", 8, False), "uint16": ("int", 16, False),
    "uint32": ("int", 32, False), "uint64": ("int", 64, False),
    "fp8e4nv": ("float", 8, True), "fp8e5": ("float", 8, True),
    # AMD's fnuz formats (bias 8 and 16, no infinities, one NaN, no -0), as Triton names them
    "fp8e4b8": ("float", 8, True), "fp8e5b16": ("float", 8, True),
    # Triton's fp8 with exponent bias 15 (pre-Hopper only); kiln moves its bytes but does not convert it
    "fp8e4b15": ("float", 8, True),
    "fp16": ("float", 16, True), "bf16": ("float", 16, True),
    "fp32": ("float", 32, True), "fp64": ("float", 64, True),
}
_MANTISSA = {"fp8e4nv": 3, "fp8e5": 2, "fp8e4b8": 3, "fp8e5b16": 2, "fp8e4b15": 3, "fp16": 10, "bf16": 7, "fp32": 23, "fp64": 52}
_NUMPY = {
    "int1": np.dtype(np.bool_),
    "int8": np.dtype(np.int8), "int16": np.dtype(np.int16),
    "int32": np.dtype(np.int32), "int64": np.dtype(np.int64),
    "uint8": np.dtype(np.uint8), "uint16": np.dtype(np.uint16),
    "uint32": np.dtype(np.uint32), "uint64": np.dtype(np.uint64),
    "fp8e4b15": np.dtype(np.uint8),  # its raw bytes (no NumPy format); from_numpy finds uint8 first
    "fp16": np.dtype(np.float16), "fp32": np.dtype(np.float32), "fp64": np.dtype(np.float64),
}


@functools.cache
def _ml_dtypes() -> dict:
    """The NumPy dtypes of fp8 and bf16, from ml_dtypes, imported at their first use and not with the IR:
    ml_dtypes 0.7 takes 0.5 s of CPU to import, which a compile that meets neither never pays."""
    import ml_dtypes
    return {"fp8e4nv": np.dtype(ml_dtypes.float8_e4m3fn), "fp8e5": np.dtype(ml_dtypes.float8_e5m2),
            "fp8e4b8": np.dtype(ml_dtypes.float8_e4m3fnuz), "fp8e5b16": np.dtype(ml_dtypes.float8_e5m2fnuz),
            "bf16": np.dtype(ml_dtypes.bfloat16)}


def bfloat16_bits(value) -> int:
    """The bits of the float `value` rounded to bfloat16 as ml_dtypes rounds it (to nearest even, once; a
    NaN quiet, its sign kept), without importing ml_dtypes: the float rounded to fp32 toward odd (exact
    where it is, else its last bit set), which then rounds to nearest even as the float itself would."""
    x = float(value)
    with np.errstate(over="ignore"):
        near = np.float32(x)
    bits = int(np.array([near]).view(np.uint32)[0])
    if x != x:
        return 0xFFC0 if bits >> 31 else 0x7FC0
    if float(near) != x:  # inexact: the fp32 toward zero, its last bit set
        bits = (bits - (abs(float(near)) > abs(x))) | 1
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF


def bfloat16_value(value) -> float:
    """The float `value` rounded to bfloat16 (bfloat16_bits), as a Python float."""
    return float(np.array([bfloat16_bits(value) << 16], dtype=np.uint32).view(np.float32)[0])


_SCALARS: dict[str, dtype] = {}
for _name in _SCALAR_INFO:
    _SCALARS[_name] = object.__new__(dtype)
    _SCALARS[_name].__init__(_name)

int1, int8, int16, int32, int64 = (_SCALARS[n] for n in ("int1", "int8", "int16", "int32", "int64"))
uint8, uint16, uint32, uint64 = (_SCALARS[n] for n in ("uint8", "uint16", "uint32", "uint64"))
float8e4nv, float8e5 = _SCALARS["fp8e4nv"], _SCALARS["fp8e5"]
float8e4b8, float8e5b16, float8e4b15 = _SCALARS["fp8e4b8"], _SCALARS["fp8e5b16"], _SCALARS["fp8e4b15"]
float16, bfloat16, float32, float64 = (_SCALARS[n] for n in ("fp16", "bf16", "fp32", "fp64"))
SCALAR_TYPES = dict(_SCALARS)


def from_numpy(np_dtype) -> dtype:
    """The scalar type whose NumPy dtype is `np_dtype`."""
    np_dtype = np.dtype(np_dtype)
    # NumPy's own dtypes first: ml_dtypes is imported only for another
    found = _named(_NUMPY, np_dtype) or _named(_ml_dtypes(), np_dtype)
    if found is None:
        raise TypeError(f"no kiln dtype for NumPy dtype {np_dtype}")
    return found


def _named(table: dict, np_dtype):
    """The first scalar type (in _SCALARS' order) that `table` maps to `np_dtype`, or None. A name the
    table lacks is skipped, not compared: NumPy reads `dtype == None` as float64."""
    return next((t for t in _SCALARS.values() if t.name in table and table[t.name] == np_dtype), None)


def half_float_bits(value, name: str) -> int:
    """The 16 bits a host passes for a number given to an `fp16` or `bf16` scalar argument, as
    Triton's launcher packs them: fp16 rounded to nearest even (infinity past its range), bf16
    the upper half of the value rounded to fp32 (truncated, not rounded)."""
    with np.errstate(over="ignore"):
        if name == "fp16":
            return int(np.array(float(value), np.float16).view(np.uint16))
        if name == "bf16":
            return int(np.array(float(value), np.float32).view(np.uint32)) >> 16
    raise TypeError(f"{name} is no 16-bit float type")


def scalar_of(t: dtype) -> dtype:
    return t.element_ty_ if isinstance(t, block_type) else t


def with_shape(t: dtype, shape) -> dtype:
    """`t`'s element type as a block of `shape`, or the scalar itself for shape ()."""
    scalar = scalar_of(t)
    return block_type(scalar, shape) if shape else scalar


def is_power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def parse_type(text: str) -> dtype:
    """The type spelled `text` in block IR (`fp32`, `ptr<int8>`, `<64x2xptr<fp16>>`)."""
    text = text.strip()
    if text in _SCALARS:
        return _SCALARS[text]
    if text == "tensormap":
        return tensormap
    if text.startswith("smem<") and text.endswith(">"):
        return _parse_shared(text[5:-1])
    if text.startswith("ptr<") and text.endswith(">"):
        return pointer_type(parse_type(text[4:-1]))
    if text.startswith("<") and text.endswith(">"):
        inner = text[1:-1]
        dims = []
        while True:
            head, sep, rest = inner.partition("x")
            if not sep or not head.isdigit():
                break
            dims.append(int(head))
            inner = rest
        if dims:
            element, _, encoding = _split_encoding(inner)
            return block_type(parse_type(element), dims, parse_layout(encoding) if encoding else None)
    raise ValueError(f"not a type: {text!r}")


def _split_encoding(inner: str) -> tuple[str, str, str]:
    """`ptr<fp16>:blocked:...` -> (`ptr<fp16>`, ":", `blocked:...`): the first colon outside <>."""
    depth = 0
    for i, ch in enumerate(inner):
        depth += (ch == "<") - (ch == ">")
        if ch == ":" and depth == 0:
            return inner[:i], ":", inner[i + 1:]
    return inner, "", ""


def _parse_shared(inner: str) -> shared_type:
    """`4x128x64xfp16:swizzle128:order1.0` (the inside of `smem<...>`)."""
    parts = inner.split(":")
    row_xor = len(parts) == 3 and parts[1] == "rowxor32"
    if len(parts) != 3 or not (row_xor or parts[1].startswith("swizzle")) or not parts[2].startswith("order"):
        raise ValueError(f"not a shared buffer type: smem<{inner}>")
    block = parse_type(f"<{parts[0]}>")
    order = parts[2][len("order"):].split(".")
    if not isinstance(block, block_type) or not (row_xor or parts[1][7:].isdigit()) or \
            not all(o.isdigit() for o in order):
        raise ValueError(f"not a shared buffer type: smem<{inner}>")
    swizzle = ROW_XOR_32 if row_xor else int(parts[1][7:])
    return shared_type(block.element_ty, block.shape, swizzle, [int(o) for o in order])
