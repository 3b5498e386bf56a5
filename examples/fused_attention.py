"""Fused attention (FlashAttention-2 style forward) in the manner of Triton tutorial 06.

One program owns BLOCK_M query rows and streams over the keys and values in blocks of
BLOCK_N, keeping a running maximum and normalizer so the full score matrix never exists.
"""
import numpy as np

import kiln as triton
import kiln.language as tl


@triton.jit
def _attn_inner(acc, m_i, l_i, q, k_ptrs, v_ptrs, stride_kn, stride_vn, offs_n, start, end, qk_scale,
                BLOCK_N: tl.constexpr, CAUSAL_MASK: tl.constexpr, offs_m, N_CTX):
    for start_n in tl.range(start, end, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        k = tl.load(k_ptrs + start_n * stride_kn, mask=(start_n + offs_n)[None, :] < N_CTX, other=0.0)
        qk = tl.dot(q, k)
        if CAUSAL_MASK:
            keep = offs_m[:, None] >= (start_n + offs_n[None, :])
            qk = qk * qk_scale + tl.where(keep, 0, -1.0e6)
            m_ij = tl.maximum(m_i, tl.max(qk, 1))
            qk -= m_ij[:, None]
        else:
            m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            qk = qk * qk_scale - m_ij[:, None]
        qk = tl.where((start_n + offs_n)[None, :] < N_CTX, qk, -float("inf"))
        p = tl.math.exp2(qk)
        l_ij = tl.sum(p, 1)
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + l_ij
        acc = acc * alpha[:, None]
        v = tl.load(v_ptrs + start_n * stride_vn, mask=(start_n + offs_n)[:, None] < N_CTX, other=0.0)
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_ij
    return acc, m_i, l_i


@triton.jit
def attn_fwd(Q, K, V, Out, sm_scale, stride_qm, stride_kn, stride_vn, stride_om, N_CTX,
             HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    tl.static_assert(BLOCK_N <= HEAD_DIM)
    start_m = tl.program_id(0)
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + offs_m[:, None] * stride_qm + offs_d[None, :], mask=offs_m[:, None] < N_CTX, other=0.0)
    k_ptrs = K + offs_n[None, :] * stride_kn + offs_d[:, None]
    v_ptrs = V + offs_n[:, None] * stride_vn + offs_d[None, :]
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32) + 1.0
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.44269504
    if CAUSAL:
        acc, m_i, l_i = _attn_inner(acc, m_i, l_i, q, k_ptrs, v_ptrs, stride_kn, stride_vn, offs_n, 0,
                                    start_m * BLOCK_M, qk_scale, BLOCK_N, False, offs_m, N_CTX)
        acc, m_i, l_i = _attn_inner(acc, m_i, l_i, q, k_ptrs, v_ptrs, stride_kn, stride_vn, offs_n,
                                    start_m * BLOCK_M, (start_m + 1) * BLOCK_M, qk_scale, BLOCK_N, True, offs_m, N_CTX)
    else:
        acc, m_i, l_i = _attn_inner(acc, m_i, l_i, q, k_ptrs, v_ptrs, stride_kn, stride_vn, offs_n, 0, N_CTX,
                                    qk_scale, BLOCK_N, False, offs_m, N_CTX)
    acc = acc / l_i[:, None]
    tl.store(Out + offs_m[:, None] * stride_om + offs_d[None, :], acc.to(Out.dtype.element_ty),
             mask=offs_m[:, None] < N_CTX)


def reference(q, k, v, scale, causal):
    s = (q.astype(np.float32) @ k.astype(np.float32).T) * scale
    if causal:
        n = s.shape[0]
        s = np.where(np.tril(np.ones((n, n), bool)), s, -np.inf)
    s = s - s.max(1, keepdims=True)
    p = np.exp(s)
    return (p / p.sum(1, keepdims=True)) @ v.astype(np.float32)


def attention(q, k, v, sm_scale, causal, block=32):
    n_ctx, head_dim = q.shape
    out = np.zeros_like(q)
    attn_fwd[(triton.cdiv(n_ctx, block),)](q, k, v, out, sm_scale, q.strides[0] // q.itemsize,
                                          k.strides[0] // k.itemsize, v.strides[0] // v.itemsize,
                                          out.strides[0] // out.itemsize, n_ctx, HEAD_DIM=head_dim,
                                          BLOCK_M=block, BLOCK_N=block, CAUSAL=causal)
    return out


def main():
    rng = np.random.default_rng(0)
    for causal in (False, True):
        n_ctx, head_dim = 112, 32
        q, k, v = (rng.standard_normal((n_ctx, head_dim)).astype(np.float16) for _ in range(3))
        out = attention(q, k, v, 0.2, causal)
        np.testing.assert_allclose(out.astype(np.float32), reference(q, k, v, 0.2, causal), atol=2e-3, rtol=1e-2)
    print("fused_attention: matches NumPy (causal and not)")


if __name__ == "__main__":
    main()
