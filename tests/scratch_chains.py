"""Kernels whose reductions, conversions, exchanges and scans follow one another with no
barrier before each (kiln.codegen.passes.scratch_barriers gives neighbours disjoint bytes):
tests/test_gpu_racecheck.py runs them under racecheck, tests/test_codegen_scratch_barriers.py
checks their plans."""
import kiln
import kiln.language as tl


@kiln.jit
def chains(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n + cols, mask=cols < n, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    p = e / tl.sum(e, axis=0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for i in range(3):
        acc += p * tl.sum(p, axis=0)
        acc -= tl.min(acc, axis=0)
    idx = tl.argmax(acc, axis=0)
    tl.store(out_ptr + row * n + cols, acc + idx, mask=cols < n)


@kiln.jit
def rows_and_cols(x_ptr, out_ptr, N: tl.constexpr):
    r = tl.arange(0, N)
    t = tl.load(x_ptr + r[:, None] * N + r[None, :])
    s = tl.sum(t, axis=0) + tl.sum(t, axis=1)
    s = s + tl.max(s, axis=0)
    tl.store(out_ptr + r, s)


@kiln.jit
def exchanges(x_ptr, out_ptr, h_ptr, N: tl.constexpr):
    r = tl.arange(0, N)
    t = tl.load(x_ptr + r[:, None] * N + r[None, :])
    a, b = tl.split(tl.reshape(tl.trans(t), [N, N // 2, 2]))
    v = tl.reshape(tl.join(b, a), [N, N])
    tl.store(out_ptr + r[:, None] * N + r[None, :], v + tl.sum(v, axis=0)[None, :])
    tl.store(h_ptr + tl.arange(0, 8), tl.histogram(r % 7, 8))


@kiln.jit
def scans(x_ptr, out_ptr, N: tl.constexpr):
    r = tl.arange(0, N)
    x = tl.load(x_ptr + r)
    c = tl.cumsum(x, axis=0)
    m = tl.cumsum(c * 0.5, axis=0, reverse=True)
    tl.store(out_ptr + r, m + tl.sum(c, axis=0))
