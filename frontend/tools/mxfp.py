"""`triton.tools.mxfp`: host-side helpers for the OCP microscaling (MX) formats, as Triton's tests
and users make data for `tl.dot_scaled` with them (torch tensors; CPU or GPU).

- `MXFP4Tensor`: 4-bit E2M1 floats, one per uint8 (bits `S EE M`, in the low nibble); magnitudes
  0, 0.5, 1, 1.5, 2, 3, 4, 6 (exponent bias 1; E = 0 is subnormal, 0.5 * M). From float32: round to
  nearest, ties to the even encoding; beyond 6 (and +-inf, NaN) clamps to +-6, keeping the sign.
  `to_packed_tensor(dim)` puts two along `dim` in one byte, the even-indexed one in the low nibble
  (an odd length is padded with a zero); `unpack_packed_tensor` undoes it.
- `MXScaleTensor`: 8-bit E8M0 block scales, 2^(e - 127); 255 is NaN. From float32: floor(log2(v)),
  clamped to [0, 254]; v <= 0, NaN and inf give 255.

Reference: the OCP Microscaling Formats (MX) v1.0 specification.
"""
from __future__ import annotations

import torch

_E2M1_MAGNITUDES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)  # encoding 0..7 (sign bit apart)
_E8M0_NAN = 255
_E8M0_BIAS = 127


def _size(size) -> tuple:
    size = tuple(size) if isinstance(size, (tuple, list, torch.Size)) else (size,)
    if not all(isinstance(n, int) and n >= 0 for n in size):
        raise ValueError(f"a size is a tuple of non-negative ints, not {size!r}")
    return size


class _MXTensor:
    """`data` (uint8 codes) from float32 `data`, or room for `size` codes made by `random()`."""

    def __init__(self, data=None, size=None, device=None):
        self.device = device
        if data is not None:
            if not isinstance(data, torch.Tensor):
                raise TypeError(f"data must be a torch tensor of float32 values, not a {type(data).__name__}")
            self.device = data.device
            self.data = self._from_float(data.to(torch.float32))
            self.size = tuple(self.data.shape)
        elif size is not None:
            self.size = _size(size)
        else:
            raise ValueError("give either data (a float32 torch tensor) or size")

    def _from_float(self, values):
        raise NotImplementedError


class MXFP4Tensor(_MXTensor):
    """Four-bit E2M1 floats (OCP MX), one code per uint8."""

    def random(self):
        """Every code (both zeros included) with equal chance."""
        self.data = torch.randint(0, 16, self.size, dtype=torch.uint8, device=self.device)
        return self

    def to(self, dtype):
        """The values as float32 (the one dtype offered)."""
        if dtype != torch.float32:
            raise ValueError(f"an MXFP4Tensor converts to torch.float32 only, not {dtype}")
        table = torch.tensor(_E2M1_MAGNITUDES, dtype=torch.float32, device=self.data.device)
        magnitude = table[(self.data & 0x7).long()]
        return torch.where((self.data & 0x8) != 0, -magnitude, magnitude)

    def _from_float(self, values):
        sign = torch.signbit(values).to(torch.uint8) << 3
        magnitude = torch.nan_to_num(values.abs(), nan=float("inf"))
        table = torch.tensor(_E2M1_MAGNITUDES, dtype=torch.float32, device=values.device)
        # the two neighbours of each value: the largest code at or below it, and the next
        below = (torch.searchsorted(table, magnitude.contiguous(), right=True) - 1).clamp(0, len(table) - 1)
        above = (below + 1).clamp(max=len(table) - 1)
        down, up = magnitude - table[below], table[above] - magnitude
        take_above = (up < down) | ((up == down) & (above % 2 == 0) & (above != below))
        code = torch.where(take_above, above, below).to(torch.uint8)
        return sign | code

    def to_packed_tensor(self, dim):
        """Two codes per byte along `dim` (the even-indexed one in the low nibble); an odd length
        along `dim` gets a zero code at its end."""
        data = self.data
        if not 0 <= dim < data.ndim:
            raise AssertionError(f"cannot pack along dim {dim} of a {data.ndim}-d tensor")
        if data.shape[dim] % 2:
            pad = torch.zeros_like(data.narrow(dim, 0, 1))
            data = torch.cat([data, pad], dim=dim)
        pairs = data.unflatten(dim, (data.shape[dim] // 2, 2))
        return pairs.select(dim + 1, 0) | (pairs.select(dim + 1, 1) << 4)

    def unpack_packed_tensor(self, packed_tensor, dim, original_shape):
        """The codes of `to_packed_tensor(dim)`'s result, one per uint8, in `original_shape`."""
        low, high = packed_tensor & 0x0F, packed_tensor >> 4
        codes = torch.stack([low, high], dim=dim + 1).flatten(dim, dim + 1)
        return codes.narrow(dim, 0, original_shape[dim]).reshape(original_shape)


class MXScaleTensor(_MXTensor):
    """E8M0 block scale factors (OCP MX): 2^(code - 127), 255 NaN."""

    def random(self, low=None, high=None):
        """Codes of scales in [low, high] (powers of two; by default every code but NaN's)."""
        lowest = 0 if low is None else max(0, int(torch.log2(torch.tensor(float(low))).floor()) + _E8M0_BIAS)
        highest = 254 if high is None else min(254, max(0, int(torch.log2(torch.tensor(float(high))).floor())
                                                         + _E8M0_BIAS))
        if lowest > highest:
            raise ValueError(f"random(low={low}, high={high}): low must not be above high")
        self.data = torch.randint(lowest, highest + 1, self.size, dtype=torch.uint8, device=self.device)
        return self

    def to(self, dtype):
        """The scales as float32 (the one dtype offered); the NaN code gives NaN."""
        if dtype != torch.float32:
            raise ValueError(f"an MXScaleTensor converts to torch.float32 only, not {dtype}")
        value = torch.pow(2.0, self.data.to(torch.float32) - _E8M0_BIAS)
        return torch.where(self.data == _E8M0_NAN, torch.full_like(value, float("nan")), value)

    def _from_float(self, values):
        valid = (values > 0) & torch.isfinite(values)
        exponent = torch.floor(torch.log2(torch.where(valid, values, torch.ones_like(values)))) + _E8M0_BIAS
        code = exponent.clamp(0, 254).to(torch.uint8)
        return torch.where(valid, code, torch.full_like(code, _E8M0_NAN))
