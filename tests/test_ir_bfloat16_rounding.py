"""bf16 constants are rounded without ml_dtypes (its import costs a cold compile 0.5 s of CPU): the IR's
bfloat16_bits, the frontend's constant folds and the lowering's LLVM constants give ml_dtypes' bits."""
import math

import ml_dtypes
import numpy as np
import pytest

from kiln.codegen.lower.types import BF16
from kiln.ir.types import bfloat16, bfloat16_bits, bfloat16_value, float16, float32, float64, int32
from kiln.language import semantic


def _ml_bits(value) -> int:
    with np.errstate(all="ignore"):
        return int(np.array([value], dtype=ml_dtypes.bfloat16).view(np.uint16)[0])


def _samples() -> list[float]:
    rng = np.random.default_rng(7)
    wide = rng.standard_normal(4000) * 10.0 ** rng.integers(-47, 45, 4000)  # fp64 values, bf16 subnormals and overflow
    with np.errstate(invalid="ignore"):
        fp32 = rng.integers(0, 2**32, 4000, dtype=np.uint64).astype(np.uint32).view(np.float32).astype(np.float64)
    halfway = []  # halfway between two bf16 values, and the doubles either side: where rounding twice goes wrong
    for hi in rng.integers(0, 2**16, 1000):
        mid = float(np.array([(int(hi) << 16) + 0x8000], dtype=np.uint32).view(np.float32)[0])
        halfway += [mid, math.nextafter(mid, 0.0), math.nextafter(mid, math.inf), math.nextafter(mid, -math.inf)]
    special = [0.0, -0.0, math.inf, -math.inf, 1e39, -1e39, 3.3961775292304e38, 5e-324, -5e-324, 1e-40,
               7.8725248361858e27, -1.0961485151705707e-36, 1.0 + 2**-8, 1.0 + 3 * 2**-9]
    return [v for v in [*wide, *fp32, *halfway, *special] if not math.isnan(v)]


def test_bfloat16_bits_round_as_ml_dtypes_does():
    values = _samples()
    assert [bfloat16_bits(v) for v in values] == [_ml_bits(v) for v in values]
    assert bfloat16_bits(math.nan) == _ml_bits(math.nan) == 0x7FC0
    assert bfloat16_bits(-math.nan) == _ml_bits(-math.nan) == 0xFFC0
    assert bfloat16_value(1.0 + 2**-8) == 1.0 and bfloat16_value(1.0 + 3 * 2**-9) == 1.0 + 2**-7


def test_the_lowering_prints_a_bf16_constant_with_those_bits():
    for v in (1.0 + 3 * 2**-9, -2.5e-39, 3.4e38):
        assert BF16.format_constant(v) == f"0xR{_ml_bits(v):04X}"


@pytest.mark.parametrize("src", [float16, float32, float64, int32])
def test_constant_casts_to_and_from_bf16_fold_as_ml_dtypes_rounds(src):
    values = [v for v in _samples() if abs(v) < 1 << 24] if src == int32 else _samples()
    with np.errstate(all="ignore"):
        exact = [float(np.array(v).astype(src.to_numpy())) for v in values]  # constants as src holds them
        exact = [int(v) if src == int32 else v for v in exact if not (src == int32 and not math.isfinite(v))]
        want = [float(np.array(v, dtype=src.to_numpy()).astype(ml_dtypes.bfloat16).astype(np.float64))
                for v in exact]
    got = [semantic._fold_cast(v, src, bfloat16) for v in exact]
    assert got == want or all(g == w or (math.isnan(g) and math.isnan(w)) for g, w in zip(got, want))
    if src != int32:  # and back: a bf16 constant read exactly
        back = [semantic._fold_cast(w, bfloat16, src) for w in want]
        with np.errstate(all="ignore"):
            ref = [float(np.array(w, dtype=ml_dtypes.bfloat16).astype(src.to_numpy())) for w in want]
        assert all(b == r or (math.isnan(b) and math.isnan(r)) for b, r in zip(back, ref))
