"""Row-wise softmax in one pass over memory: each program owns whole rows (Triton tutorial 02)."""
import numpy as np

import kiln as triton
import kiln.language as tl


# The specialization main() launches (strides of 781 elements), for `kiln prewarm`.
@triton.jit(prewarm=[{"output_ptr": "*fp32:16", "input_ptr": "*fp32:16", "input_row_stride": "i32",
                      "output_row_stride": "i32", "n_rows": "i32", "n_cols": "i32", "BLOCK_SIZE": 1024,
                      "num_stages": 2, "num_warps": 4}])
def softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_rows, n_cols,
                   BLOCK_SIZE: tl.constexpr, num_stages: tl.constexpr):
    row_start = tl.program_id(0)
    row_step = tl.num_programs(0)
    for row_idx in tl.range(row_start, n_rows, row_step, num_stages=num_stages):
        row_start_ptr = input_ptr + row_idx * input_row_stride
        col_offsets = tl.arange(0, BLOCK_SIZE)
        mask = col_offsets < n_cols
        # Padding with -inf leaves the max and the sum of exponentials unchanged.
        row = tl.load(row_start_ptr + col_offsets, mask=mask, other=-float("inf"))
        row_minus_max = row - tl.max(row, axis=0)
        numerator = tl.exp(row_minus_max)
        denominator = tl.sum(numerator, axis=0)
        softmax_output = numerator / denominator
        output_row_start_ptr = output_ptr + row_idx * output_row_stride
        tl.store(output_row_start_ptr + col_offsets, softmax_output, mask=mask)


def softmax(x, num_programs=None):
    n_rows, n_cols = x.shape
    BLOCK_SIZE = triton.next_power_of_2(n_cols)
    y = np.empty_like(x)
    num_programs = num_programs or min(n_rows, 8)
    softmax_kernel[(num_programs, 1, 1)](y, x, x.strides[0] // x.itemsize, y.strides[0] // y.itemsize,
                                         n_rows, n_cols, BLOCK_SIZE=BLOCK_SIZE, num_stages=2, num_warps=4)
    return y


def reference(x):
    z = x - x.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def main():
    x = np.random.default_rng(0).standard_normal((37, 781)).astype(np.float32)
    np.testing.assert_allclose(softmax(x), reference(x), rtol=1e-5, atol=1e-6)
    print("fused_softmax: matches NumPy")


if __name__ == "__main__":
    main()
