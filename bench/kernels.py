"""The benchmarked kernels, written once for Triton; `bench/run.py` imports this file twice,
once as written (kiln) and once with the two import lines pointed at upstream Triton."""
import kiln as triton
import kiln.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def softmax_kernel(out_ptr, in_ptr, in_stride, out_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * in_stride + cols, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    tl.store(out_ptr + row * out_stride + cols, num / tl.sum(num, axis=0), mask=mask)


@triton.jit
def layer_norm_kernel(X, Y, W, B, Mean, Rstd, stride, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    X += row * stride
    Y += row * stride
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        acc += tl.load(X + cols, mask=cols < N, other=0.).to(tl.float32)
    mean = tl.sum(acc, axis=0) / N
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        x = tl.load(X + cols, mask=cols < N, other=0.).to(tl.float32)
        x = tl.where(cols < N, x - mean, 0.)
        acc += x * x
    rstd = 1 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
    tl.store(Mean + row, mean)
    tl.store(Rstd + row, rstd)
    for off in range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        mask = cols < N
        w = tl.load(W + cols, mask=mask)
        b = tl.load(B + cols, mask=mask)
        x = tl.load(X + cols, mask=mask, other=0.).to(tl.float32)
        tl.store(Y + cols, (x - mean) * rstd * w + b, mask=mask)


@triton.jit
def rotary_interleaved_kernel(x_ptr, cos_ptr, sin_ptr, out_ptr, n_rows, HEADS: tl.constexpr, D: tl.constexpr,
                              ROWS: tl.constexpr):
    """Rotary embedding on interleaved pairs (x[2i], x[2i+1]) as complex numbers (LLaMA's form):
    ROWS rows of D of x [tokens * HEADS, D], each token's cos and sin [tokens, D / 2] for all its heads."""
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)[:, None]
    mask = rows < n_rows
    whole = rows * D + tl.arange(0, D)[None, :]
    freqs = (rows // HEADS) * (D // 2) + tl.arange(0, D // 2)[None, :]
    real, imag = tl.split(tl.reshape(tl.load(x_ptr + whole, mask=mask).to(tl.float32), [ROWS, D // 2, 2]))
    c, s = tl.load(cos_ptr + freqs, mask=mask), tl.load(sin_ptr + freqs, mask=mask)
    rotated = tl.join(real * c - imag * s, real * s + imag * c)
    tl.store(out_ptr + whole, tl.reshape(rotated, [ROWS, D]).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _grouped_tile(pid, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """Tutorial 03's tile order: GROUP_M rows of tiles at a time, so their A and B stay in L2."""
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    group = GROUP_M * num_pid_n
    first_m = (pid // group) * GROUP_M
    size_m = min(num_pid_m - first_m, GROUP_M)
    return first_m + (pid % group) % size_m, (pid % group) // size_m


@triton.jit
def _k_steps(a_ptr, b_ptr, pid_m, pid_n, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, k_first, k_last,
             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, WARP_SPECIALIZE: tl.constexpr = False):
    """Tutorial 03's tile over its k-steps k_first .. k_last - 1: the fp32 accumulator."""
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + (k_first * BLOCK_K + offs_k)[None, :] * stride_ak
    b_ptrs = b_ptr + (k_first * BLOCK_K + offs_k)[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in tl.range(k_first, k_last, warp_specialize=WARP_SPECIALIZE):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_K, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_K, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    return acc


@triton.jit
def _store_c(c_ptr, acc, pid_m, pid_n, M, N, stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    tl.store(c_ptrs, acc.to(tl.float16), mask=(offs_cm[:, None] < M) & (offs_cn[None, :] < N))


@triton.jit
def _matmul_tile(a_ptr, b_ptr, c_ptr, pid_m, pid_n, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm,
                 stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                 WARP_SPECIALIZE: tl.constexpr = False):
    """Tutorial 03's tile: C[pid_m, pid_n] = A[pid_m, :] @ B[:, pid_n], stored as fp16."""
    acc = _k_steps(a_ptr, b_ptr, pid_m, pid_n, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, 0,
                   tl.cdiv(K, BLOCK_K), BLOCK_M, BLOCK_N, BLOCK_K, WARP_SPECIALIZE)
    _store_c(c_ptr, acc, pid_m, pid_n, M, N, stride_cm, stride_cn, BLOCK_M, BLOCK_N)


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    pid_m, pid_n = _grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    _matmul_tile(a_ptr, b_ptr, c_ptr, pid_m, pid_n, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm,
                 stride_cn, BLOCK_M, BLOCK_N, BLOCK_K)


@triton.jit
def block_scaled_matmul_kernel(a_ptr, b_ptr, c_ptr, a_scale_ptr, b_scale_ptr, M, N, K, stride_am, stride_bn,
                               stride_cm, stride_asm, stride_bsn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                               BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, SCALE_BLOCK: tl.constexpr):
    """fp8 A (M x K) times fp8 B given as N x K (a weight), both K-major, with block scales in fp32: A's per row
    and SCALE_BLOCK columns (`a_scale[m, k // SCALE_BLOCK]`), B's per SCALE_BLOCK x SCALE_BLOCK block
    (`b_scale[n // SCALE_BLOCK, k // SCALE_BLOCK]`): each K step's product scaled before it is summed, the
    scales loaded in the loop (the form of the block-quantized fp8 GEMMs serving engines run).
    BLOCK_K and BLOCK_N divide SCALE_BLOCK."""
    pid_m, pid_n = _grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :]
    b_ptrs = b_ptr + offs_k[:, None] + offs_n[None, :] * stride_bn
    a_scales = a_scale_ptr + offs_m * stride_asm
    b_scales = b_scale_ptr + (pid_n * BLOCK_N // SCALE_BLOCK) * stride_bsn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_K, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_K, other=0.0)
        group = k * BLOCK_K // SCALE_BLOCK
        a_scale = tl.load(a_scales + group)
        b_scale = tl.load(b_scales + group)
        acc += tl.dot(a, b) * a_scale[:, None] * b_scale
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K
    _store_c(c_ptr, acc, pid_m, pid_n, M, N, stride_cm, 1, BLOCK_M, BLOCK_N)


@triton.jit
def matmul_kernel_ws(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """matmul_kernel with its K loop asking for warp specialization (`tl.range(..., warp_specialize=True)`)."""
    pid_m, pid_n = _grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    _matmul_tile(a_ptr, b_ptr, c_ptr, pid_m, pid_n, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm,
                 stride_cn, BLOCK_M, BLOCK_N, BLOCK_K, True)


@triton.jit
def int8_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """Tutorial 03's matmul on int8 inputs into an int32 C (W8A8): an int32 accumulator."""
    pid_m, pid_n = _grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_K, other=0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_K, other=0)
        acc = tl.dot(a, b, acc, out_dtype=tl.int32)  # Triton 3.6 asks for it with an int32 acc
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    tl.store(c_ptrs, acc, mask=(offs_cm[:, None] < M) & (offs_cn[None, :] < N))


@triton.jit
def gate_up_kernel(x_ptr, wg_ptr, wu_ptr, out_ptr, M, N, K, stride_xm, stride_wk, stride_om,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """A SwiGLU MLP's first half fused: silu(x @ wg) * (x @ wu), fp16 x [M, K] and weights [K, N]. The x
    tile feeds two dots, each on its own weight tile, summed side by side in one K loop."""
    pid_m, pid_n = _grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    x_ptrs = x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :]
    wg_ptrs = wg_ptr + offs_k[:, None] * stride_wk + offs_n[None, :]
    wu_ptrs = wu_ptr + offs_k[:, None] * stride_wk + offs_n[None, :]
    gate = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        x = tl.load(x_ptrs, mask=offs_k[None, :] < K - k * BLOCK_K, other=0.0)
        wg = tl.load(wg_ptrs, mask=offs_k[:, None] < K - k * BLOCK_K, other=0.0)
        wu = tl.load(wu_ptrs, mask=offs_k[:, None] < K - k * BLOCK_K, other=0.0)
        gate = tl.dot(x, wg, gate)
        up = tl.dot(x, wu, up)
        x_ptrs += BLOCK_K
        wg_ptrs += BLOCK_K * stride_wk
        wu_ptrs += BLOCK_K * stride_wk
    h = gate * tl.sigmoid(gate) * up
    offs_om = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_on = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    tl.store(out_ptr + offs_om[:, None] * stride_om + offs_on[None, :], h.to(tl.float16),
             mask=(offs_om[:, None] < M) & (offs_on[None, :] < N))


@triton.jit
def dequant_matmul_kernel(a_ptr, w_ptr, s_ptr, c_ptr, M, N, K, stride_am, stride_wk, stride_sk, stride_cm,
                          GROUP_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                          BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """C = A @ (W * S), fp16 activations A [M, K], int8 weights W [K, N] and fp16 scales S
    [K / GROUP_K, N]: the weights are converted in the loop (a B operand computed there)."""
    pid_m, pid_n = _grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :]
    w_ptrs = w_ptr + offs_k[:, None] * stride_wk + offs_n[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_K, other=0.0)
        w = tl.load(w_ptrs, mask=offs_k[:, None] < K - k * BLOCK_K, other=0)
        s = tl.load(s_ptr + (k * BLOCK_K // GROUP_K) * stride_sk + offs_n)
        acc = tl.dot(a, w.to(tl.float16) * s[None, :], acc)
        a_ptrs += BLOCK_K
        w_ptrs += BLOCK_K * stride_wk
    offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    tl.store(c_ptr + stride_cm * offs_cm[:, None] + offs_cn[None, :], acc.to(tl.float16),
             mask=(offs_cm[:, None] < M) & (offs_cn[None, :] < N))


@triton.jit
def persistent_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm,
                             stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                             GROUP_M: tl.constexpr, NUM_SMS: tl.constexpr):
    """matmul_kernel written persistent, as Triton's tutorial 09 writes it: NUM_SMS programs,
    each looping over the tiles pid, pid + NUM_SMS, ..."""
    num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    for tile in range(tl.program_id(0), num_tiles, NUM_SMS):
        pid_m, pid_n = _grouped_tile(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        _matmul_tile(a_ptr, b_ptr, c_ptr, pid_m, pid_n, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                     stride_cm, stride_cn, BLOCK_M, BLOCK_N, BLOCK_K)


@triton.jit
def stream_k_matmul_kernel(a_ptr, b_ptr, c_ptr, partial_ptr, arrived_ptr, M, N, K, stride_am, stride_ak, stride_bk,
                           stride_bn, stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                           BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, NUM_SMS: tl.constexpr):
    """persistent_matmul_kernel whose last, partial wave of tiles is shared out k-step by k-step over all
    NUM_SMS programs (stream-K): the whole waves run tile by tile; the tail's k-steps are cut into NUM_SMS
    runs, one a program. A program whose run covers part of a tile stores its fp32 partial in the tile's
    slot for it (`partial_ptr`: [tail tiles, stream_k_slots(...), BLOCK_M, BLOCK_N]) and counts its k-steps in
    `arrived_ptr` ([tail tiles] int32, zero between launches); the program whose count completes the tile
    adds the other slots to its own partial, stores C and zeroes the count for the next launch."""
    pid = tl.program_id(0)
    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    k_steps = tl.cdiv(K, BLOCK_K)
    whole = tiles - tiles % NUM_SMS
    for tile in range(pid, whole, NUM_SMS):
        pid_m, pid_n = _grouped_tile(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = _k_steps(a_ptr, b_ptr, pid_m, pid_n, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, 0, k_steps,
                       BLOCK_M, BLOCK_N, BLOCK_K)
        _store_c(c_ptr, acc, pid_m, pid_n, M, N, stride_cm, stride_cn, BLOCK_M, BLOCK_N)
    tail = (tiles - whole) * k_steps
    share = tl.cdiv(tail, NUM_SMS)
    slots = tl.cdiv(k_steps, share) + 1  # the most programs one tile's k-steps can fall to
    step = pid * share
    end = tl.minimum(step + share, tail)
    block = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    while step < end:
        t = step // k_steps
        k_first = step % k_steps
        k_last = tl.minimum(k_steps, k_first + end - step)
        pid_m, pid_n = _grouped_tile(whole + t, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = _k_steps(a_ptr, b_ptr, pid_m, pid_n, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, k_first,
                       k_last, BLOCK_M, BLOCK_N, BLOCK_K)
        if k_last - k_first == k_steps:
            _store_c(c_ptr, acc, pid_m, pid_n, M, N, stride_cm, stride_cn, BLOCK_M, BLOCK_N)
        else:
            first = t * k_steps // share  # the program whose run holds the tile's first k-step
            tile_slots = partial_ptr + t * slots * BLOCK_M * BLOCK_N
            tl.store(tile_slots + (pid - first) * BLOCK_M * BLOCK_N + block, acc)
            tl.debug_barrier()  # every thread's partial stored before the count says so
            arrived = tl.atomic_add(arrived_ptr + t, k_last - k_first, sem="acq_rel")
            if arrived + k_last - k_first == k_steps:
                last = ((t + 1) * k_steps - 1) // share
                for other in range(first, last + 1):
                    if other != pid:
                        acc += tl.load(tile_slots + (other - first) * BLOCK_M * BLOCK_N + block, cache_modifier=".cg")
                tl.store(arrived_ptr + t, 0)
                _store_c(c_ptr, acc, pid_m, pid_n, M, N, stride_cm, stride_cn, BLOCK_M, BLOCK_N)
        step += k_last - k_first


def stream_k_slots(M, N, K, BLOCK_M, BLOCK_N, BLOCK_K, programs):
    """(tail tiles, slots per tail tile) of stream_k_matmul_kernel's partial workspace (at least 1 each)."""
    cdiv = lambda a, b: -(-a // b)  # noqa: E731
    tiles, k_steps = cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N), cdiv(K, BLOCK_K)
    tail = tiles % programs
    share = max(cdiv(tail * k_steps, programs), 1)
    return max(tail, 1), cdiv(k_steps, share) + 1


@triton.jit
def matmul_descriptor_kernel(a_desc, b_desc, c_desc, M, N, K,
                             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """Tutorial 03's matmul through host TensorDescriptors (Triton 3.6's tutorial 09 without
    persistence): A [M, K], B [K, N] and C blocks by offsets; on Hopper both libraries copy
    them with TMA."""
    pid_m, pid_n = _grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = a_desc.load([pid_m * BLOCK_M, k * BLOCK_K])
        b = b_desc.load([k * BLOCK_K, pid_n * BLOCK_N])
        acc = tl.dot(a, b, acc)
    c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(c_desc.dtype))

@triton.jit
def matmul_descriptor_bt_kernel(a_desc, b_desc, c_desc, M, N, K,
                                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """Triton 3.6's tutorial 09 TMA matmul (without its warp_specialize hint): A [M, K] and B stored [N, K],
    each block of B read transposed."""
    pid_m, pid_n = _grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    _descriptor_tile(a_desc, b_desc, c_desc, pid_m, pid_n, K, BLOCK_M, BLOCK_N, BLOCK_K)


@triton.jit
def _descriptor_tile(a_desc, b_desc, c_desc, pid_m, pid_n, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     BLOCK_K: tl.constexpr):
    """C's tile (pid_m, pid_n) through descriptors, B stored [N, K] and each of its blocks read transposed."""
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in tl.range(tl.cdiv(K, BLOCK_K)):
        a = a_desc.load([pid_m * BLOCK_M, k * BLOCK_K])
        b = b_desc.load([pid_n * BLOCK_N, k * BLOCK_K])
        acc = tl.dot(a, b.T, acc)
    c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(c_desc.dtype))


@triton.jit
def _descriptor_tiles(a_desc, b_desc, c_desc, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                      BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, NUM_SMS: tl.constexpr):
    """Tutorial 09's persistent loop over descriptors: tiles pid, pid + NUM_SMS, ... (`flatten`, as the
    tutorial asks)."""
    num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    for tile in tl.range(tl.program_id(0), num_tiles, NUM_SMS, flatten=True):
        pid_m, pid_n = _grouped_tile(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        _descriptor_tile(a_desc, b_desc, c_desc, pid_m, pid_n, K, BLOCK_M, BLOCK_N, BLOCK_K)


@triton.jit
def tma_persistent_matmul_kernel(a_desc, b_desc, c_desc, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                                 BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, NUM_SMS: tl.constexpr):
    """Triton 3.6's tutorial 09 TMA persistent matmul (without its warp_specialize and epilogue-subtile
    options): host descriptors of A [M, K], B [N, K] and C."""
    _descriptor_tiles(a_desc, b_desc, c_desc, M, N, K, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, NUM_SMS)


@triton.jit
def descriptor_persistent_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                                        BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, NUM_SMS: tl.constexpr):
    """Triton 3.6's tutorial 09 descriptor persistent matmul (without its warp_specialize and epilogue-subtile
    options): the kernel makes the descriptors of A [M, K], B [N, K] and C, row-major."""
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[K, 1], block_shape=[BLOCK_N, BLOCK_K])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
    _descriptor_tiles(a_desc, b_desc, c_desc, M, N, K, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, NUM_SMS)


@triton.jit
def matmul_device_descriptor_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                                    BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """The same matmul through descriptors the kernel makes (`tl.make_tensor_descriptor`, as
    Triton 3.6's tutorial 09 does): A [M, K], B [K, N] and C, row-major."""
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1], block_shape=[BLOCK_K, BLOCK_N])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
    pid_m, pid_n = _grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        acc = tl.dot(a_desc.load([pid_m * BLOCK_M, k * BLOCK_K]), b_desc.load([k * BLOCK_K, pid_n * BLOCK_N]), acc)
    c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(c_desc.dtype))


@triton.jit
def grouped_matmul_kernel(a_ptrs, b_ptrs, c_ptrs, sizes, n_groups, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                          BLOCK_K: tl.constexpr):
    """C_g = A_g @ B_g^T for n_groups fp16 problems whose addresses (int64 arrays) and sizes
    (M, N, K per group) are read from memory, through descriptors made in the kernel (the
    shape of Triton 3.6's tutorial 08 TMA kernel); the programs walk all groups' tiles."""
    tile = tl.program_id(0)
    first = 0
    for g in range(n_groups):
        M = tl.load(sizes + 3 * g)
        N = tl.load(sizes + 3 * g + 1)
        K = tl.load(sizes + 3 * g + 2)
        tiles_n = tl.cdiv(N, BLOCK_N)
        tiles = tl.cdiv(M, BLOCK_M) * tiles_n
        if tile >= first and tile < first + tiles:
            a_desc = tl.make_tensor_descriptor(tl.load(a_ptrs + g).to(tl.pointer_type(tl.float16)), shape=[M, K],
                                               strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
            b_desc = tl.make_tensor_descriptor(tl.load(b_ptrs + g).to(tl.pointer_type(tl.float16)), shape=[N, K],
                                               strides=[K, 1], block_shape=[BLOCK_N, BLOCK_K])
            c_desc = tl.make_tensor_descriptor(tl.load(c_ptrs + g).to(tl.pointer_type(tl.float16)), shape=[M, N],
                                               strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
            while tile >= first and tile < first + tiles:
                pid_m = (tile - first) // tiles_n
                pid_n = (tile - first) % tiles_n
                acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
                for k in range(0, tl.cdiv(K, BLOCK_K)):
                    a = a_desc.load([pid_m * BLOCK_M, k * BLOCK_K])
                    b = b_desc.load([pid_n * BLOCK_N, k * BLOCK_K])
                    acc = tl.dot(a, b.T, acc)
                c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(tl.float16))
                tile += tl.num_programs(0)
        first += tiles


@triton.jit
def _attention_block(acc, row_sum, row_max, q, k_ptrs, v_ptrs, stride_kn, stride_vn, qk_scale, lo, hi, offs_m, offs_n,
                     BLOCK_N: tl.constexpr, DIAGONAL: tl.constexpr):
    """Keys lo .. hi for one block of query rows: the rows' running maximum and sum of
    exp2(scaled score) rescale what the earlier keys gave, and P @ V accumulates."""
    for start_n in range(lo, hi, BLOCK_N):
        scores = tl.dot(q, tl.load(k_ptrs + start_n * stride_kn))
        if DIAGONAL:  # a query sees no key after it
            scores = tl.where(offs_m[:, None] >= start_n + offs_n[None, :], scores, -1.0e6)
        acc, row_sum, row_max = _attention_step(acc, row_sum, row_max, scores, tl.max(scores, 1), qk_scale, v_ptrs,
                                                start_n * stride_vn)
    return acc, row_sum, row_max


@triton.jit
def _attention_step(acc, row_sum, row_max, scores, scores_max, qk_scale, v_ptrs, v_offset):
    """One key block folded into the rows' running maximum and sum of exp2(scaled score) (their earlier
    part rescaled) and into acc, P @ V: (acc, row_sum, row_max) after it."""
    new_max = tl.maximum(row_max, scores_max * qk_scale)
    p = tl.math.exp2(scores * qk_scale - new_max[:, None])
    rescale = tl.math.exp2(row_max - new_max)
    row_sum = row_sum * rescale + tl.sum(p, 1)
    v = tl.load(v_ptrs + v_offset)
    return tl.dot(p.to(v.dtype), v, acc * rescale[:, None]), row_sum, new_max


@triton.jit
def _attention_operands(Q, K, V, stride_qz, stride_qh, stride_qm, stride_qd, stride_kz, stride_kh, stride_kn, stride_kd,
                        stride_vz, stride_vh, stride_vn, stride_vd, H, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                        BLOCK_N: tl.constexpr):
    """The pointer forwards' program: its query rows and their q, and the pointers of its (batch, head)'s first
    key block, K read transposed (head dim by keys) and V as stored (keys by head dim)."""
    batch, head = tl.program_id(1) // H, tl.program_id(1) % H
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + batch * stride_qz + head * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd)
    k_ptrs = K + batch * stride_kz + head * stride_kh + offs_d[:, None] * stride_kd + offs_n[None, :] * stride_kn
    v_ptrs = V + batch * stride_vz + head * stride_vh + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd
    return offs_m, offs_n, q, k_ptrs, v_ptrs


@triton.jit
def _attention_output(Out, M, acc, row_sum, row_max, offs_m, stride_oz, stride_oh, stride_om, stride_od, H, N_CTX,
                      HEAD_DIM: tl.constexpr):
    """The rows' log-sum-exp (base 2, of the scaled scores) into M and the normalized output into Out."""
    batch, head = tl.program_id(1) // H, tl.program_id(1) % H
    offs_d = tl.arange(0, HEAD_DIM)
    tl.store(M + tl.program_id(1) * N_CTX + offs_m, row_max + tl.math.log2(row_sum))
    o_ptrs = Out + batch * stride_oz + head * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :] * stride_od
    tl.store(o_ptrs, (acc / row_sum[:, None]).to(Out.dtype.element_ty))


@triton.jit
def attention_fwd_kernel(Q, K, V, Out, M, sm_scale,
                         stride_qz, stride_qh, stride_qm, stride_qd, stride_kz, stride_kh, stride_kn, stride_kd,
                         stride_vz, stride_vh, stride_vn, stride_vd, stride_oz, stride_oh, stride_om, stride_od,
                         H, N_CTX, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                         CAUSAL: tl.constexpr):
    """FlashAttention-2 forward with pointers: one program per BLOCK_M query rows of one
    (batch, head); N_CTX a multiple of BLOCK_M and BLOCK_N. M[batch, head, row] gets the
    row's log-sum-exp in base 2 of the scaled scores, which the backward kernels read."""
    offs_m, offs_n, q, k_ptrs, v_ptrs = _attention_operands(
        Q, K, V, stride_qz, stride_qh, stride_qm, stride_qd, stride_kz, stride_kh, stride_kn, stride_kd, stride_vz,
        stride_vh, stride_vn, stride_vd, H, HEAD_DIM, BLOCK_M, BLOCK_N)
    qk_scale = sm_scale * 1.44269504  # exp(x) = exp2(x * log2(e))
    row_max = tl.full([BLOCK_M], -float("inf"), tl.float32)
    row_sum = tl.full([BLOCK_M], 1.0, tl.float32)  # the first block's rescale (exp2(-inf)) clears it
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    first_diagonal = tl.program_id(0) * BLOCK_M
    # causal: the keys before this block of rows need no mask, the block on the diagonal does
    unmasked_end = first_diagonal if CAUSAL else N_CTX
    acc, row_sum, row_max = _attention_block(acc, row_sum, row_max, q, k_ptrs, v_ptrs, stride_kn, stride_vn, qk_scale,
                                             0, unmasked_end, offs_m, offs_n, BLOCK_N, False)
    if CAUSAL:
        acc, row_sum, row_max = _attention_block(acc, row_sum, row_max, q, k_ptrs, v_ptrs, stride_kn, stride_vn,
                                                 qk_scale, first_diagonal, first_diagonal + BLOCK_M, offs_m, offs_n,
                                                 BLOCK_N, True)
    _attention_output(Out, M, acc, row_sum, row_max, offs_m, stride_oz, stride_oh, stride_om, stride_od, H, N_CTX,
                      HEAD_DIM)


@triton.jit
def attention_ahead_fwd_kernel(Q, K, V, Out, M, sm_scale,
                               stride_qz, stride_qh, stride_qm, stride_qd, stride_kz, stride_kh, stride_kn, stride_kd,
                               stride_vz, stride_vh, stride_vn, stride_vd, stride_oz, stride_oh, stride_om, stride_od,
                               H, N_CTX, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                               LATE_MAX: tl.constexpr = False):
    """`attention_fwd_kernel` without a causal mask, pipelined by hand as FlashAttention-3 overlaps a
    warpgroup's softmax with its next GEMM: each iteration issues the next key block's scores before this
    block's softmax, so the tensor cores work through the exponentials, and takes their row maximum after
    this block's P @ V is issued (LATE_MAX: where that block's softmax starts, the next iteration). The
    first block's scores come before the loop, the last block's P @ V after it; N_CTX at least 2 * BLOCK_N."""
    offs_m, offs_n, q, k_ptrs, v_ptrs = _attention_operands(
        Q, K, V, stride_qz, stride_qh, stride_qm, stride_qd, stride_kz, stride_kh, stride_kn, stride_kd, stride_vz,
        stride_vh, stride_vn, stride_vd, H, HEAD_DIM, BLOCK_M, BLOCK_N)
    qk_scale = sm_scale * 1.44269504
    row_max = tl.full([BLOCK_M], -float("inf"), tl.float32)
    row_sum = tl.full([BLOCK_M], 1.0, tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    scores = tl.dot(q, tl.load(k_ptrs))
    block_max = tl.max(scores, 1)
    for start_n in range(0, N_CTX - BLOCK_N, BLOCK_N):
        following = tl.dot(q, tl.load(k_ptrs + (start_n + BLOCK_N) * stride_kn))
        if LATE_MAX:
            block_max = tl.max(scores, 1)
        acc, row_sum, row_max = _attention_step(acc, row_sum, row_max, scores, block_max, qk_scale, v_ptrs,
                                                start_n * stride_vn)
        scores = following
        if not LATE_MAX:
            block_max = tl.max(following, 1)  # after P @ V's issue: the next scores are awaited here
    if LATE_MAX:
        block_max = tl.max(scores, 1)
    acc, row_sum, row_max = _attention_step(acc, row_sum, row_max, scores, block_max, qk_scale, v_ptrs,
                                            (N_CTX - BLOCK_N) * stride_vn)
    _attention_output(Out, M, acc, row_sum, row_max, offs_m, stride_oz, stride_oh, stride_om, stride_od, H, N_CTX,
                      HEAD_DIM)


@triton.jit
def _attention_descriptor_block(acc, row_sum, row_max, q, k_desc, v_desc, first_row, qk_scale, lo, hi, offs_m,
                                offs_n, BLOCK_N: tl.constexpr, DIAGONAL: tl.constexpr, V_ROWS: tl.constexpr = False):
    """`_attention_block` with K and V read through descriptors over all heads' rows; V_ROWS:
    V's descriptor is over V^T ([Z * H * HEAD_DIM, N_CTX], this head's rows from V_ROWS's
    multiple of the program's head), as fp8 needs it (wgmma reads 8-bit tiles K-major only)."""
    for start_n in range(lo, hi, BLOCK_N):
        scores = tl.dot(q, k_desc.load([first_row + start_n, 0]).T)
        if DIAGONAL:
            scores = tl.where(offs_m[:, None] >= start_n + offs_n[None, :], scores, -1.0e6)
        new_max = tl.maximum(row_max, tl.max(scores, 1) * qk_scale)
        p = tl.math.exp2(scores * qk_scale - new_max[:, None])
        rescale = tl.math.exp2(row_max - new_max)
        row_sum = row_sum * rescale + tl.sum(p, 1)
        if V_ROWS:
            v = v_desc.load([tl.program_id(1) * V_ROWS, start_n]).T
        else:
            v = v_desc.load([first_row + start_n, 0])
        acc = tl.dot(p.to(v.dtype), v, acc * rescale[:, None])
        row_max = new_max
    return acc, row_sum, row_max


@triton.jit
def attention_descriptor_fwd_kernel(Q, K, V, Out, M, sm_scale, Z, H, N_CTX, HEAD_DIM: tl.constexpr,
                                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    """The same forward through descriptors the kernel makes over contiguous [Z, H, N_CTX,
    HEAD_DIM] tensors seen as Z * H * N_CTX rows (as Triton 3.6's tutorial 06 does): their
    row count is computed in the kernel, so no launcher can encode their TMA maps."""
    rows = Z * H * N_CTX
    q_desc = tl.make_tensor_descriptor(Q, shape=[rows, HEAD_DIM], strides=[HEAD_DIM, 1], block_shape=[BLOCK_M, HEAD_DIM])
    k_desc = tl.make_tensor_descriptor(K, shape=[rows, HEAD_DIM], strides=[HEAD_DIM, 1], block_shape=[BLOCK_N, HEAD_DIM])
    v_desc = tl.make_tensor_descriptor(V, shape=[rows, HEAD_DIM], strides=[HEAD_DIM, 1], block_shape=[BLOCK_N, HEAD_DIM])
    o_desc = tl.make_tensor_descriptor(Out, shape=[rows, HEAD_DIM], strides=[HEAD_DIM, 1],
                                       block_shape=[BLOCK_M, HEAD_DIM])
    _attention_rows_fwd(q_desc, k_desc, v_desc, o_desc, M, sm_scale, N_CTX, HEAD_DIM, BLOCK_M, BLOCK_N, CAUSAL)


@triton.jit
def attention_host_descriptor_fwd_kernel(q_desc, k_desc, v_desc, o_desc, M, sm_scale, N_CTX, HEAD_DIM: tl.constexpr,
                                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    """The same forward through host TensorDescriptors over Z * H * N_CTX rows of HEAD_DIM (tutorial
    06's way on Hopper in Triton 3.6): the launcher encodes the maps, K and V come by TMA."""
    _attention_rows_fwd(q_desc, k_desc, v_desc, o_desc, M, sm_scale, N_CTX, HEAD_DIM, BLOCK_M, BLOCK_N, CAUSAL)


@triton.jit
def attention_host_descriptor_fp8_fwd_kernel(q_desc, k_desc, vt_desc, o_desc, M, sm_scale, N_CTX,
                                             HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                                             CAUSAL: tl.constexpr):
    """The host-descriptor forward in fp8 (tutorial 06's fp8 path on Hopper): Q, K and O over
    Z * H * N_CTX rows, V transposed over Z * H * HEAD_DIM rows of N_CTX."""
    _attention_rows_fwd(q_desc, k_desc, vt_desc, o_desc, M, sm_scale, N_CTX, HEAD_DIM, BLOCK_M, BLOCK_N, CAUSAL,
                        HEAD_DIM)


@triton.jit
def _attention_rows_fwd(q_desc, k_desc, v_desc, o_desc, M, sm_scale, N_CTX, HEAD_DIM: tl.constexpr,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
                        V_ROWS: tl.constexpr = False):
    """One program's BLOCK_M query rows of one (batch, head) through descriptors over all heads' rows."""
    first_row = tl.program_id(1) * N_CTX
    start_m = tl.program_id(0) * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    q = q_desc.load([first_row + start_m, 0])
    qk_scale = sm_scale * 1.44269504
    row_max = tl.full([BLOCK_M], -float("inf"), tl.float32)
    row_sum = tl.full([BLOCK_M], 1.0, tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    unmasked_end = start_m if CAUSAL else N_CTX
    acc, row_sum, row_max = _attention_descriptor_block(acc, row_sum, row_max, q, k_desc, v_desc, first_row, qk_scale,
                                                        0, unmasked_end, offs_m, offs_n, BLOCK_N, False, V_ROWS)
    if CAUSAL:
        acc, row_sum, row_max = _attention_descriptor_block(acc, row_sum, row_max, q, k_desc, v_desc, first_row,
                                                            qk_scale, start_m, start_m + BLOCK_M, offs_m, offs_n,
                                                            BLOCK_N, True, V_ROWS)
    tl.store(M + tl.program_id(1) * N_CTX + offs_m, row_max + tl.math.log2(row_sum))
    o_desc.store([first_row + start_m, 0], (acc / row_sum[:, None]).to(q.dtype))


# FlashAttention-2 backward, in three kernels over contiguous [Z, H, N_CTX, HEAD_DIM] tensors:
# Delta = rowsum(O * dO); dK and dV per block of keys (a loop over query blocks); dQ per
# block of queries (a loop over key blocks). P is recomputed from the forward's M.

@triton.jit
def attention_bwd_preprocess_kernel(O, DO, Delta, N_CTX, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr):
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    rows = tl.program_id(1) * N_CTX * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :]
    o = tl.load(O + rows).to(tl.float32)
    do = tl.load(DO + rows).to(tl.float32)
    tl.store(Delta + tl.program_id(1) * N_CTX + offs_m, tl.sum(o * do, axis=1))


@triton.jit
def _attention_bwd_dkdv_block(dk, dv, k, v, Q, DO, M, Delta, start_n, lo, hi, qk_scale, HEAD_DIM: tl.constexpr,
                              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DIAGONAL: tl.constexpr):
    """Query rows lo .. hi of the dK, dV sums of keys start_n .. start_n + BLOCK_N; the
    scores are kept transposed (keys by queries) so both sums are dots with A in registers."""
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    for start_m in range(lo, hi, BLOCK_M):
        qT = tl.load(Q + (start_m + offs_m)[None, :] * HEAD_DIM + offs_d[:, None])
        m = tl.load(M + start_m + offs_m)
        pT = tl.math.exp2(tl.dot(k, qT) * qk_scale - m[None, :])
        if DIAGONAL:
            pT = tl.where(start_m + offs_m[None, :] >= offs_n[:, None], pT, 0.0)
        do = tl.load(DO + (start_m + offs_m)[:, None] * HEAD_DIM + offs_d[None, :])
        dv = tl.dot(pT.to(do.dtype), do, dv)
        delta = tl.load(Delta + start_m + offs_m)
        dsT = pT * (tl.dot(v, tl.trans(do)) - delta[None, :])
        dk = tl.dot(dsT.to(qT.dtype), tl.trans(qT), dk)
    return dk, dv


@triton.jit
def attention_bwd_dkdv_kernel(Q, K, V, DO, DK, DV, M, Delta, sm_scale, N_CTX, HEAD_DIM: tl.constexpr,
                              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    """dK and dV of BLOCK_N keys of one (batch, head); N_CTX a multiple of BLOCK_N, BLOCK_N
    of BLOCK_M."""
    tl.static_assert(BLOCK_N % BLOCK_M == 0)
    start_n = tl.program_id(0) * BLOCK_N
    head = tl.program_id(1) * N_CTX * HEAD_DIM
    Q, K, V, DO, DK, DV = Q + head, K + head, V + head, DO + head, DK + head, DV + head
    M, Delta = M + tl.program_id(1) * N_CTX, Delta + tl.program_id(1) * N_CTX
    rows = (start_n + tl.arange(0, BLOCK_N))[:, None] * HEAD_DIM + tl.arange(0, HEAD_DIM)[None, :]
    k = tl.load(K + rows)
    v = tl.load(V + rows)
    dk = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.44269504
    lo = 0
    if CAUSAL:  # queries before the keys see none of them; the diagonal block is masked
        dk, dv = _attention_bwd_dkdv_block(dk, dv, k, v, Q, DO, M, Delta, start_n, start_n, start_n + BLOCK_N,
                                           qk_scale, HEAD_DIM, BLOCK_M, BLOCK_N, True)
        lo = start_n + BLOCK_N
    dk, dv = _attention_bwd_dkdv_block(dk, dv, k, v, Q, DO, M, Delta, start_n, lo, N_CTX, qk_scale, HEAD_DIM,
                                       BLOCK_M, BLOCK_N, False)
    tl.store(DV + rows, dv.to(DV.dtype.element_ty))
    tl.store(DK + rows, (dk * sm_scale).to(DK.dtype.element_ty))


@triton.jit
def _attention_bwd_dq_block(dq, q, do, m, delta, K, V, start_m, lo, hi, qk_scale, HEAD_DIM: tl.constexpr,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DIAGONAL: tl.constexpr):
    """Keys lo .. hi of the dQ sum of queries start_m .. start_m + BLOCK_M."""
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    for start_n in range(lo, hi, BLOCK_N):
        cols = (start_n + offs_n)[None, :] * HEAD_DIM + offs_d[:, None]
        kT = tl.load(K + cols)
        p = tl.math.exp2(tl.dot(q, kT) * qk_scale - m[:, None])
        if DIAGONAL:
            p = tl.where(offs_m[:, None] >= start_n + offs_n[None, :], p, 0.0)
        vT = tl.load(V + cols)
        ds = p * (tl.dot(do, vT) - delta[:, None])
        dq = tl.dot(ds.to(kT.dtype), tl.trans(kT), dq)
    return dq


@triton.jit
def attention_bwd_dq_kernel(Q, K, V, DO, DQ, M, Delta, sm_scale, N_CTX, HEAD_DIM: tl.constexpr,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    """dQ of BLOCK_M queries of one (batch, head); N_CTX a multiple of BLOCK_M, BLOCK_M of
    BLOCK_N."""
    tl.static_assert(BLOCK_M % BLOCK_N == 0)
    start_m = tl.program_id(0) * BLOCK_M
    head = tl.program_id(1) * N_CTX * HEAD_DIM
    Q, K, V, DO, DQ = Q + head, K + head, V + head, DO + head, DQ + head
    offs_m = start_m + tl.arange(0, BLOCK_M)
    rows = offs_m[:, None] * HEAD_DIM + tl.arange(0, HEAD_DIM)[None, :]
    q = tl.load(Q + rows)
    do = tl.load(DO + rows)
    m = tl.load(M + tl.program_id(1) * N_CTX + offs_m)
    delta = tl.load(Delta + tl.program_id(1) * N_CTX + offs_m)
    dq = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.44269504
    if CAUSAL:  # keys after the queries are masked off: only the diagonal block needs the mask
        dq = _attention_bwd_dq_block(dq, q, do, m, delta, K, V, start_m, 0, start_m, qk_scale, HEAD_DIM, BLOCK_M,
                                     BLOCK_N, False)
        dq = _attention_bwd_dq_block(dq, q, do, m, delta, K, V, start_m, start_m, start_m + BLOCK_M, qk_scale,
                                     HEAD_DIM, BLOCK_M, BLOCK_N, True)
    else:
        dq = _attention_bwd_dq_block(dq, q, do, m, delta, K, V, start_m, 0, N_CTX, qk_scale, HEAD_DIM, BLOCK_M,
                                     BLOCK_N, False)
    tl.store(DQ + rows, (dq * sm_scale).to(DQ.dtype.element_ty))


@triton.jit
def fp8_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                      BLOCK_K: tl.constexpr, IMPRECISE: tl.constexpr):
    """C = A @ B^T in fp32 for fp8 A [M, K] and B [N, K] (K-major), IMPRECISE > 0: the dot's
    max_num_imprecise_acc (bench/imprecise_acc.py)."""
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.trans(tl.load(b_ptr + rn[:, None] * K + (k + rk)[None, :]))
        if IMPRECISE > 0:
            acc = tl.dot(a, b, acc, max_num_imprecise_acc=IMPRECISE)
        else:
            acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)


@triton.jit
def f16_acc_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                          BLOCK_K: tl.constexpr):
    """C = A @ B^T for fp16 or fp8 A [M, K] and B [N, K] (K-major), summed in fp16 accumulators
    (`out_dtype=tl.float16`; bench/f16_accumulators.py)."""
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float16)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.trans(tl.load(b_ptr + rn[:, None] * K + (k + rk)[None, :]))
        acc = tl.dot(a, b, acc, out_dtype=tl.float16)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)


@triton.jit
def precision_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                            BLOCK_K: tl.constexpr, PRECISION: tl.constexpr):
    """C = A @ B for A [M, K] and B [K, N] (row-major) at `input_precision=PRECISION` (bench/dot_formats.py:
    fp32 at tf32, the split tf32x3 / bf16x3 / bf16x6, ieee; fp8 with PRECISION None)."""
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :])
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)


@triton.jit
def scaled_a_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, SCALE: tl.constexpr, BLOCK_M: tl.constexpr,
                           BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """C = (A * SCALE in B's type) @ B for fp32 or fp16 A [M, K] and fp16 B [K, N], row-major: an A the
    loop computes from its load, which reaches the tensor cores from registers (bench/dot_formats.py)."""
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :])
        acc = tl.dot((a * SCALE).to(b.dtype), b, acc)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)


@triton.jit
def mx_weight_matmul_kernel(a_ptr, w_ptr, w_scale_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                            BLOCK_K: tl.constexpr, FORMAT: tl.constexpr):
    """C = A @ (W * 2**(S - 127))^T: bf16 A [M, K] times MX weights in FORMAT, "e2m1" (W [N, K/2], codes two a
    byte along K, the lower k in the low nibble) or "e4m3" / "e5m2" (W [N, K], a byte each), with e8m0 scales
    S [N, K/32], one per 32 along K: a weight-only mxfp4 or mxfp8 layer as MoE models run it on Hopper, through
    tl.dot_scaled (bench/dot_formats.py)."""
    PER_BYTE: tl.constexpr = 2 if FORMAT == "e2m1" else 1
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    rw = tl.arange(0, BLOCK_K // PER_BYTE)
    rs = tl.arange(0, BLOCK_K // 32)
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        w = tl.load(w_ptr + rn[:, None] * (K // PER_BYTE) + (k // PER_BYTE + rw)[None, :])
        scale = tl.load(w_scale_ptr + rn[:, None] * (K // 32) + (k // 32 + rs)[None, :])
        acc = tl.dot_scaled(a, None, "bf16", w.T, scale, FORMAT, acc)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)


@triton.jit
def tiny_kernel(x_ptr, y_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * alpha, mask=mask)


@triton.jit
def batched_dot_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BT: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                       BK: tl.constexpr):
    """c[z] = a[z] @ b[z] over [batches, M, K] x [batches, K, N] (contiguous, every size a multiple of its
    block), BT batches a program in one 3-D tl.dot (a batched dot)."""
    rb = tl.program_id(0) * BT + tl.arange(0, BT)
    rm = tl.program_id(1) * BM + tl.arange(0, BM)
    rn = tl.program_id(2) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a = a_ptr + rb[:, None, None] * M * K + rm[None, :, None] * K + rk[None, None, :]
    b = b_ptr + rb[:, None, None] * K * N + rk[None, :, None] * N + rn[None, None, :]
    acc = tl.zeros((BT, BM, BN), dtype=tl.float32)
    for _ in range(0, K, BK):
        acc = tl.dot(tl.load(a), tl.load(b), acc)
        a += BK
        b += BK * N
    c = c_ptr + rb[:, None, None] * M * N + rm[None, :, None] * N + rn[None, None, :]
    tl.store(c, acc.to(c_ptr.dtype.element_ty))


@triton.jit
def chunk_state_grad_kernel(q_ptr, do_ptr, dh_ptr, scale, T, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
                            BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr):
    """A linear-attention backward's state gradient over q [B, T, H, K] and do [B, T, H, V] (T a multiple of BT,
    K of BK, V of BV): program (k, v, b * H + h) walks its sequence's chunks last to first, storing into its BK x BV
    block of dh[b, chunk, h] the sum over the later chunks of (q_chunk^T * scale) @ do_chunk, then adding its own
    (the loop of fla's chunk_bwd_kernel_dh without gates). q^T is read with memory along K, the dot's M."""
    i_k, i_v, i_bh = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    i_b, i_h = i_bh // H, i_bh % H
    n_chunks = T // BT
    ks = i_k * BK + tl.arange(0, BK)
    vs = i_v * BV + tl.arange(0, BV)
    q_ptr += (i_b * T * H + i_h) * K
    do_ptr += (i_b * T * H + i_h) * V
    state = tl.zeros((BK, BV), dtype=tl.float32)
    for t in range(n_chunks - 1, -1, -1):
        dh = dh_ptr + ((i_b * n_chunks + t) * H + i_h).to(tl.int64) * K * V
        tl.store(dh + ks[:, None] * V + vs[None, :], state.to(dh_ptr.dtype.element_ty))
        ts = t * BT + tl.arange(0, BT)
        q_t = tl.load(q_ptr + ks[:, None] + ts[None, :] * (H * K))
        d = tl.load(do_ptr + ts[:, None] * (H * V) + vs[None, :])
        state += tl.dot((q_t * scale).to(q_t.dtype), d)
