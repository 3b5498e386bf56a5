"""Elementwise addition of two float vectors, one block of indices per program."""
import numpy as np

import kiln as triton
import kiln.language as tl

BLOCK = 1024


# main() adds vectors of a length divisible by 16 and of one that is not; both are declared
# here so that `kiln prewarm examples/vector_add.py` builds them ahead of the first call.
@triton.jit(prewarm=[{"a": "*fp32:16", "b": "*fp32:16", "out": "*fp32:16", "size": size, "BLOCK_SIZE": BLOCK}
                     for size in ("i32", "i32:16")])
def add_kernel(a, b, out, size, BLOCK_SIZE: tl.constexpr):
    """out[i] = a[i] + b[i] over the BLOCK_SIZE indices that this program owns."""
    idx = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    inside = idx < size  # only the last program's block can stick out of the vectors
    total = tl.load(a + idx, mask=inside) + tl.load(b + idx, mask=inside)
    tl.store(out + idx, total, mask=inside)


def vector_add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.shape != b.shape:
        raise ValueError(f"shapes differ: {a.shape} and {b.shape}")
    out = np.empty_like(a)
    add_kernel[(triton.cdiv(a.size, BLOCK),)](a, b, out, a.size, BLOCK_SIZE=BLOCK)
    return out


def main():
    rng = np.random.default_rng(1)
    for size in (98_304, 4_099):
        a = rng.standard_normal(size).astype(np.float32)
        b = rng.standard_normal(size).astype(np.float32)
        np.testing.assert_array_equal(vector_add(a, b), a + b)
    print("vector_add: matches NumPy")


if __name__ == "__main__":
    main()
