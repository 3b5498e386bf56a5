"""Attention, out = softmax(q k^T * scale) v, in one kernel that never materializes the scores.

A program owns BLOCK_M query rows. It walks the keys and values BLOCK_N at a time, keeping
per query row the largest score seen so far and the sum of exponentials relative to it; when
a later block raises the maximum, what was accumulated is scaled down to match (the online
softmax of FlashAttention). Exponentials are taken in base 2, the scale folded into the scores.
"""
import numpy as np

import kiln as triton
import kiln.language as tl

LOG2_E = tl.constexpr(1.4426950408889634)  # kernels read constexpr globals only, as in Triton


@triton.jit
def attn_fwd(Q, K, V, Out, sm_scale, stride_qm, stride_kn, stride_vn, stride_om, N_CTX,
             HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    """Q, K, V, Out are N_CTX x HEAD_DIM with unit stride along HEAD_DIM; CAUSAL lets query i
    see keys 0..i only."""
    first_query = tl.program_id(0) * BLOCK_M
    query = first_query + tl.arange(0, BLOCK_M)
    dim = tl.arange(0, HEAD_DIM)
    step = tl.arange(0, BLOCK_N)
    q = tl.load(Q + query[:, None] * stride_qm + dim[None, :], mask=query[:, None] < N_CTX, other=0.0)
    to_base2 = sm_scale * LOG2_E

    best = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)  # running maximum score, base 2
    denom = tl.zeros([BLOCK_M], dtype=tl.float32)  # running sum of exp2(score - best)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)  # running sum of exp2(score - best) * v

    last_key = N_CTX
    if CAUSAL:  # key blocks after this block's last query are masked out entirely: skip them
        last_key = tl.minimum(N_CTX, first_query + BLOCK_M)
    for key0 in tl.range(0, last_key, BLOCK_N):
        key = key0 + step
        k_t = tl.load(K + key[None, :] * stride_kn + dim[:, None], mask=key[None, :] < N_CTX, other=0.0)
        seen = key[None, :] < N_CTX
        if CAUSAL:
            seen = seen & (key[None, :] <= query[:, None])
        # Every query row sees key 0, so `best` is finite after the first block.
        score = tl.where(seen, tl.dot(q, k_t) * to_base2, float("-inf"))
        new_best = tl.maximum(best, tl.max(score, axis=1))
        weight = tl.math.exp2(score - new_best[:, None])
        shrink = tl.math.exp2(best - new_best)
        v_blk = tl.load(V + key[:, None] * stride_vn + dim[None, :], mask=key[:, None] < N_CTX, other=0.0)
        acc = tl.dot(weight.to(v_blk.dtype), v_blk, acc * shrink[:, None])
        denom = denom * shrink + tl.sum(weight, axis=1)
        best = new_best

    out = acc / denom[:, None]
    tl.store(Out + query[:, None] * stride_om + dim[None, :], out.to(Out.dtype.element_ty),
             mask=query[:, None] < N_CTX)


def attention(q, k, v, sm_scale, causal, block=32):
    n_ctx, head_dim = q.shape
    out = np.empty_like(q)
    rows = [t.strides[0] // t.itemsize for t in (q, k, v, out)]
    attn_fwd[(triton.cdiv(n_ctx, block),)](q, k, v, out, sm_scale, *rows, n_ctx, HEAD_DIM=head_dim,
                                          BLOCK_M=block, BLOCK_N=block, CAUSAL=causal)
    return out


def numpy_attention(q, k, v, sm_scale, causal):
    scores = sm_scale * (q.astype(np.float64) @ k.astype(np.float64).T)
    if causal:
        scores[np.triu_indices_from(scores, k=1)] = -np.inf
    weights = np.exp(scores - scores.max(axis=1, keepdims=True))
    return (weights / weights.sum(axis=1, keepdims=True)) @ v.astype(np.float64)


def main():
    rng = np.random.default_rng(11)
    n_ctx, head_dim, sm_scale = 112, 32, 0.2  # the last 32-row block is half empty
    q, k, v = (rng.standard_normal((n_ctx, head_dim)).astype(np.float16) for _ in "qkv")
    for causal in (False, True):
        got = attention(q, k, v, sm_scale, causal)
        np.testing.assert_allclose(got, numpy_attention(q, k, v, sm_scale, causal), rtol=1e-2, atol=2e-3)
    print("fused_attention: matches NumPy, with and without the causal mask")


if __name__ == "__main__":
    main()
