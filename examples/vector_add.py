"""Vector addition: one program adds one block of elements (Triton tutorial 01)."""
import numpy as np

import kiln as triton
import kiln.language as tl


# The specialization main() launches, declared so `kiln prewarm examples/vector_add.py` builds it ahead.
@triton.jit(prewarm=[{"x_ptr": "*fp32:16", "y_ptr": "*fp32:16", "output_ptr": "*fp32:16", "n_elements": "i32:16",
                      "BLOCK_SIZE": 1024}])
def add_kernel(x_ptr, y_ptr, output_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements  # the last block may run past the end
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(output_ptr + offsets, x + y, mask=mask)


def add(x, y):
    output = np.empty_like(x)
    n_elements = x.size
    grid = lambda meta: (triton.cdiv(n_elements, meta["BLOCK_SIZE"]),)
    add_kernel[grid](x, y, output, n_elements, BLOCK_SIZE=1024)
    return output


def main():
    rng = np.random.default_rng(0)
    x = rng.random(98432, dtype=np.float32)
    y = rng.random(98432, dtype=np.float32)
    np.testing.assert_array_equal(add(x, y), x + y)
    print("vector_add: matches NumPy")


if __name__ == "__main__":
    main()
