"""Dropout whose mask is regenerated from a seed instead of stored (Triton tutorial 04)."""
import numpy as np

import kiln as triton
import kiln.language as tl


# main()'s launches (3000 elements; seed 512 is divisible by 16, seed 123 is not), for `kiln prewarm`.
@triton.jit(prewarm=[{"x_ptr": "*fp32:16", "output_ptr": "*fp32:16", "n_elements": "i32", "p": "fp32", "seed": seed,
                      "BLOCK_SIZE": 1024} for seed in ("i32", "i32:16")])
def _seeded_dropout(x_ptr, output_ptr, n_elements, p, seed, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    # The same (seed, offset) always gives the same random number, so no mask is kept in memory.
    random = tl.rand(seed, offsets)
    x_keep = random > p
    output = tl.where(x_keep, x / (1 - p), 0.0)
    tl.store(output_ptr + offsets, output, mask=mask)


def seeded_dropout(x, p, seed):
    output = np.empty_like(x)
    n_elements = x.size
    grid = lambda meta: (triton.cdiv(n_elements, meta["BLOCK_SIZE"]),)
    _seeded_dropout[grid](x, output, n_elements, p, seed, BLOCK_SIZE=1024)
    return output


def main():
    x = np.random.default_rng(0).standard_normal(3000).astype(np.float32) + 5.0
    a = seeded_dropout(x, p=0.5, seed=123)
    b = seeded_dropout(x, p=0.5, seed=123)
    c = seeded_dropout(x, p=0.5, seed=512)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    kept = a != 0
    np.testing.assert_allclose(a[kept], x[kept] * 2, rtol=1e-6)
    assert 0.4 < kept.mean() < 0.6, kept.mean()
    print(f"dropout: reproducible per seed, kept {kept.mean():.3f} of the elements")


if __name__ == "__main__":
    main()
