"""C = A @ B in fp16 with fp32 accumulation, autotuned, with an optional fused activation.

Each program computes one BLOCK_SIZE_M x BLOCK_SIZE_N tile of C, stepping through K a
BLOCK_SIZE_K slab at a time. The launch is a flat list of tiles; tl.swizzle2d reorders it so
that programs running together cover a few tile rows column by column (BAND rows at a time):
they reuse the same slabs of A and of B while those are still in L2.
"""
import numpy as np

import kiln as triton
import kiln.language as tl

TUNING = [
    triton.Config({"BLOCK_SIZE_M": 32, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 32, "BAND": 4}, num_warps=4, num_stages=3),
    triton.Config({"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 32, "BAND": 8}, num_warps=4, num_stages=4),
]

# main()'s two products (96 x 80 by 80 x 72, contiguous), for `kiln prewarm`, which builds
# each of them with every config in TUNING (72: a multiple of 8, not of 16).
_FP16_CONTIGUOUS = {"a": "*fp16:16", "b": "*fp16:16", "c": "*fp16:16", "M": "i32:16", "N": "i32:8", "K": "i32:16",
                    "sam": "i32:16", "sak": 1, "sbk": "i32:8", "sbn": 1, "scm": "i32:8", "scn": 1}


@triton.autotune(configs=TUNING, key=["M", "N", "K"])
@triton.jit(prewarm=[dict(_FP16_CONTIGUOUS, ACTIVATION=act) for act in ("", "leaky_relu")])
def matmul_kernel(a, b, c, M, N, K, sam, sak, sbk, sbn, scm, scn,
                  BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
                  BAND: tl.constexpr, ACTIVATION: tl.constexpr):
    """s** are element strides: sam is A's along M, sak along K, and so on."""
    tiles_m, tiles_n = tl.cdiv(M, BLOCK_SIZE_M), tl.cdiv(N, BLOCK_SIZE_N)
    t = tl.program_id(0)
    tile_m, tile_n = tl.swizzle2d(t // tiles_n, t % tiles_n, tiles_m, tiles_n, BAND)
    row = tile_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    col = tile_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    kk = tl.arange(0, BLOCK_SIZE_K)
    row_ok, col_ok = row[:, None] < M, col[None, :] < N

    total = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_SIZE_K):
        k = k0 + kk
        a_slab = tl.load(a + row[:, None] * sam + k[None, :] * sak, mask=row_ok & (k[None, :] < K), other=0.0)
        b_slab = tl.load(b + k[:, None] * sbk + col[None, :] * sbn, mask=(k[:, None] < K) & col_ok, other=0.0)
        total = tl.dot(a_slab, b_slab, total)

    if ACTIVATION == "leaky_relu":  # fused into the epilogue while the tile is in registers
        total = tl.where(total > 0, total, total * 0.01)
    tl.store(c + row[:, None] * scm + col[None, :] * scn, total.to(tl.float16), mask=row_ok & col_ok)


def matmul(a: np.ndarray, b: np.ndarray, activation: str = "") -> np.ndarray:
    (M, K), (K_b, N) = a.shape, b.shape
    if K != K_b:
        raise ValueError(f"cannot multiply {a.shape} by {b.shape}")
    c = np.empty((M, N), dtype=np.float16)
    elements = [s // a.itemsize for s in (*a.strides, *b.strides, *c.strides)]

    def tiles(cfg):
        return (triton.cdiv(M, cfg["BLOCK_SIZE_M"]) * triton.cdiv(N, cfg["BLOCK_SIZE_N"]),)

    matmul_kernel[tiles](a, b, c, M, N, K, *elements, ACTIVATION=activation)
    return c


def main():
    rng = np.random.default_rng(7)
    a = rng.uniform(-1, 1, (96, 80)).astype(np.float16)
    b = rng.uniform(-1, 1, (80, 72)).astype(np.float16)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(matmul(a, b), exact, rtol=1e-2, atol=1e-2)
    np.testing.assert_allclose(matmul(a, b, "leaky_relu"), np.maximum(exact, 0.01 * exact), rtol=1e-2, atol=1e-2)
    print(f"matmul: matches NumPy (autotuner chose {matmul_kernel.best_config})")


if __name__ == "__main__":
    main()
