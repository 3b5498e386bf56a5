"""Kernels that fold a reduction of each step's block into a carried value, written the plain way
(`acc = acc + tl.sum(x, 1)` in the loop); `bench/loop_reductions.py` imports this file as kiln's and
as upstream Triton's (bench/kernel_source.py)."""
import kiln as triton
import kiln.language as tl


@triton.jit
def row_sums_kernel(x_ptr, out_ptr, n_rows, n_cols, stride, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    acc = tl.zeros([BLOCK_M], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        x = tl.load(x_ptr + rows[:, None] * stride + cols[None, :], mask=(rows[:, None] < n_rows) & (cols[None, :] < n_cols),
                    other=0.0)
        acc = acc + tl.sum(x, axis=1)
    tl.store(out_ptr + rows, acc, mask=rows < n_rows)


@triton.jit
def row_maxes_kernel(x_ptr, out_ptr, n_rows, n_cols, stride, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    acc = tl.full([BLOCK_M], float("-inf"), tl.float32)
    for start in range(0, n_cols, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        x = tl.load(x_ptr + rows[:, None] * stride + cols[None, :], mask=(rows[:, None] < n_rows) & (cols[None, :] < n_cols),
                    other=float("-inf"))
        acc = tl.maximum(acc, tl.max(x, axis=1))
    tl.store(out_ptr + rows, acc, mask=rows < n_rows)
