"""Dropout that stores no mask: whether element i survives is a function of (seed, i) only.

The kernel draws one uniform number per element from tl.rand's counter-based (Philox)
stream, keyed by the seed and the element's index; the backward pass, given the same seed,
draws the same numbers and so drops the same elements, with no mask kept in memory.
"""
import numpy as np

import kiln as triton
import kiln.language as tl

BLOCK = 1024


# main()'s launches, for `kiln prewarm` (3000 elements: a multiple of 8, not of 16): a seed
# divisible by 16 specializes differently.
@triton.jit(prewarm=[{"x": "*fp32:16", "out": "*fp32:16", "n": "i32:8", "p": "fp32", "seed": seed,
                      "BLOCK_SIZE": BLOCK} for seed in ("i32", "i32:16")])
def _seeded_dropout(x, out, n, p, seed, BLOCK_SIZE: tl.constexpr):
    """out = x / (1 - p) where the element survives (probability 1 - p), else 0."""
    i = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    valid = i < n
    survives = tl.rand(seed, i) >= p
    gain = tl.where(survives, 1.0 / (1.0 - p), 0.0)
    tl.store(out + i, tl.load(x + i, mask=valid) * gain, mask=valid)


def dropout(x: np.ndarray, p: float, seed: int) -> np.ndarray:
    out = np.empty_like(x)
    _seeded_dropout[(triton.cdiv(x.size, BLOCK),)](x, out, x.size, p, seed, BLOCK_SIZE=BLOCK)
    return out


def main():
    x = np.random.default_rng(3).uniform(1.0, 2.0, 3000).astype(np.float32)  # never 0 itself
    first, again, other = dropout(x, 0.5, seed=123), dropout(x, 0.5, seed=123), dropout(x, 0.5, seed=512)
    np.testing.assert_array_equal(first, again)  # the seed alone fixes the mask
    assert not np.array_equal(first != 0, other != 0), "another seed should drop other elements"
    kept = first != 0
    np.testing.assert_array_equal(first[kept], x[kept] * 2)
    assert 0.45 < kept.mean() < 0.55, kept.mean()
    # The mask regenerated for a different tensor of the same size is the same mask.
    np.testing.assert_array_equal(dropout(np.ones_like(x), 0.5, seed=123) != 0, kept)
    print(f"dropout: the seed alone fixes the mask; {kept.mean():.3f} of the elements kept")


if __name__ == "__main__":
    main()
