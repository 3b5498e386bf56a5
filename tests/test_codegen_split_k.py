"""kiln.codegen.passes.split_k and kiln.codegen.lower.cluster: the split-K build of a GEMM's tile
kernel for launches with too few programs to fill the GPU (each program a cluster of CTAs sharing
its K loop, rank 0 adding the partial sums through distributed shared memory), on a CPU; on the GPU
against torch, and picked by the runtime only for such launches."""
import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.codegen import compile as compile_ir
from kiln.codegen.passes import split_k
from kiln.codegen.pipeline import PassContext
from kiln.codegen.target import parse_target
from kiln.runtime import launcher
from kiln.ir import parse_function, print_function, verify


@kiln.jit
def _matmul(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm, BM: tl.constexpr, BN: tl.constexpr,
            BK: tl.constexpr, VARIANT: tl.constexpr = "plain"):
    if VARIANT == "early_exit":  # Inductor's mm template opens so
        if M * N == 0:
            return
    if VARIANT == "exit_by_program":
        if tl.program_id(0) * M >= N * 64:
            return
    pid = tl.program_id(0)
    grid_n = tl.cdiv(N, BN)
    rm = (pid // grid_n) * BM + tl.arange(0, BM)
    rn = (pid % grid_n) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a_ptrs = a_ptr + (rm % M)[:, None] * stride_am + rk[None, :]
    b_ptrs = b_ptr + rk[:, None] * stride_bk + (rn % N)[None, :]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        a = tl.load(a_ptrs, mask=rk[None, :] < K - k * BK, other=0.0)
        b = tl.load(b_ptrs, mask=rk[:, None] < K - k * BK, other=0.0)
        acc = tl.dot(a, b, acc)
        if VARIANT == "store_in_loop":
            tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :], acc.to(tl.float16))
        a_ptrs += BK
        b_ptrs += BK * stride_bk
    if VARIANT == "grid":
        acc += tl.num_programs(0)
    if VARIANT == "guarded_store":  # an epilogue in a branch on the program
        if pid * BM < M * grid_n:
            tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :], acc.to(tl.float16),
                     mask=(rm[:, None] < M) & (rn[None, :] < N))
    else:
        tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :], acc.to(tl.float16),
                 mask=(rm[:, None] < M) & (rn[None, :] < N))


def _build(variant="plain", target="sm_90a"):
    x = np.zeros((64, 64), np.float16)
    return _matmul.warmup(x, x, x, 128, 1024, 4096, 4096, 1024, 1024, BM=128, BN=128, BK=64, VARIANT=variant,
                          num_warps=8, num_stages=3, grid=(1,), target=target)


def _binary(variant="plain", target="sm_90a"):
    """The metadata of the kernel's build for `target` (a launch's kernel object merges its builds')."""
    return _build(variant, target).build(target).metadata


def _source(variant="plain"):
    ir = _build(variant).ir
    return parse_function(ir if isinstance(ir, str) else print_function(ir))


@pytest.mark.parametrize("variant", ["plain", "early_exit", "guarded_store"])
def test_a_tile_gemm_is_marked_splittable_and_its_split_build_sums_a_cluster(variant):
    assert _binary(variant).get("splittable") is True
    fn = _source(variant)
    fn.attrs["split_k"] = 1
    k = compile_ir(fn, "sm_90a", {"num_warps": 8, "num_stages": 3})
    assert [a["name"] for a in k.metadata["args"] if a.get("split_k") == "1"] == ["split_k.ctas"]
    assert not any("launch_grid" in a for a in k.metadata["args"])  # one cluster per program, not persistent
    ptx = k.ptx
    assert ptx.count("barrier.cluster.arrive") == 2 and ptx.count("barrier.cluster.wait") == 2
    assert ptx.count("mapa.shared::cluster") == 3 * 16  # ranks 1, 2, 3 of a cluster of up to 4, 16 chunks each
    assert "ld.shared::cluster.v4.f32" in ptx and "st.shared.v4.f32" in ptx
    assert "wgmma.mma_async" in ptx and "cp.async.bulk.tensor" in ptx  # still TMA rings and wgmma
    # B (N-major, two 128-byte column groups) needs the LBO field: the descriptors drop the CTA's rank
    assert ", 4, 14;" in ptx  # bfe.u32 of the address's bits 4-17 (LLVM's fold of the shift and mask)
    plain = compile_ir(_source(), "sm_90a", {"num_warps": 8, "num_stages": 3}).ptx
    assert ", 4, 14;" not in plain and ", 16383;" not in plain
    assert k.metadata["n_spills"] == 0


@pytest.mark.parametrize("variant", ["grid", "store_in_loop", "exit_by_program"])
def test_kernels_that_read_the_grid_store_in_the_loop_or_exit_by_program_are_not_split(variant):
    # an exit that depends on the program could leave a cluster's ranks waiting for one that left
    assert "splittable" not in _binary(variant)
    fn = _source(variant)
    fn.attrs["split_k"] = 1
    split_k.apply(fn, PassContext(parse_target("sm_90a"), num_warps=8, num_stages=3))
    assert not any(op.name == "cluster_sum" for op in fn.walk())


@kiln.jit
def _tile_matmul(a_ptr, b_ptr, c_ptr, K, stride_k, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                 ACC: tl.constexpr = tl.int32):
    """One BM x BN tile of A @ B over K, accumulated in ACC (int32 for int8 inputs, or fp16)."""
    rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    a_ptrs = a_ptr + rm[:, None] * stride_k + rk[None, :]
    b_ptrs = b_ptr + rk[:, None] * BN + rn[None, :]
    acc = tl.zeros((BM, BN), dtype=ACC)
    for k in range(0, tl.cdiv(K, BK)):
        acc = tl.dot(tl.load(a_ptrs), tl.load(b_ptrs), acc, out_dtype=ACC)
        a_ptrs += BK
        b_ptrs += BK * BN
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], acc)


def test_an_int32_accumulator_is_split_and_summed_in_integers():
    x = np.zeros((64, 64), np.int8)
    k = _tile_matmul.warmup(x, x, np.zeros((64, 64), np.int32), 4096, 4096, BM=128, BN=128, BK=64, num_warps=8,
                            num_stages=3, grid=(1,), target="sm_90a")
    assert k.build("sm_90a").metadata["splittable"]
    ptx = k._variant_build(k.split_binaries, "sm_90a", split_k=1).ptx
    assert "wgmma.mma_async" in ptx and "s32.s8.s8" in ptx
    # the peers' partial sums read and added as int32s (wrapping, as the tensor cores' own adds)
    assert "ld.shared::cluster.v4.s32" in ptx and "add.s32" in ptx and "st.shared.v4.s32" in ptx
    assert "ld.shared::cluster.v4.f32" not in ptx


def test_an_fp16_accumulator_is_not_split():
    # its sums would round at other places than the kernel as written
    x = np.zeros((64, 64), np.float16)
    k = _tile_matmul.warmup(x, x, x, 4096, 4096, BM=128, BN=128, BK=64, ACC=tl.float16, num_warps=8, num_stages=3,
                            grid=(1,), target="sm_90a")
    assert "splittable" not in k.build("sm_90a").metadata
    assert "wgmma.mma_async" in k.build("sm_90a").ptx  # a tensor-core GEMM all the same


@kiln.jit
def _template_matmul(a_ptr, b_ptr, c_ptr, m, n, k, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                     SIZES: tl.constexpr):
    """Shaped as Inductor's mm template writes its GEMMs: sizes held as constants (SIZES == "fixed") or
    passed, an early exit on them, the strides tested to pick hinted index math, loads indexed by the
    loop counter and `acc += tl.dot(...)`."""
    if SIZES == "fixed":
        M = 128
        N = 4096
        K = 4096
    else:
        M = m
        N = n
        K = k
    if M * N == 0:
        return
    stride_am = K
    stride_bk = N
    pid = tl.program_id(0)
    pid_m = pid // tl.cdiv(N, BN)
    pid_n = pid % tl.cdiv(N, BN)
    tl.assume(pid_m >= 0)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    if stride_am == K and M >= BM:
        rows = tl.max_contiguous(tl.multiple_of(rm % M, BM), BM)
    else:
        rows = rm % M
    if stride_bk == N and N >= BN:
        cols = tl.max_contiguous(tl.multiple_of(rn % N, BN), BN)
    else:
        cols = rn % N
    ks = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for i in range(0, tl.cdiv(K, BK)):
        a = tl.load(a_ptr + (ks[None, :] + i * BK) + stride_am * rows[:, None])
        b = tl.load(b_ptr + cols[None, :] + stride_bk * (ks[:, None] + i * BK))
        acc += tl.dot(a, b)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    tl.store(c_ptr + rn[None, :] + N * rm[:, None], acc.to(tl.float16), mask)


@pytest.mark.parametrize("sizes", ["fixed", "passed"])
def test_a_gemm_shaped_as_inductors_template_compiles_for_hopper_and_is_split(sizes):
    # passed: the stride test stays a branch whose joined index math has no runs of one thread's
    # elements along B's rows; its copies then take a coalesced layout (a crash here before:
    # "async_copy needs runs of 4 bytes"). fixed: the branches fold to the hinted math.
    x = np.zeros((64, 64), np.float16)
    k = _template_matmul.warmup(x, x, x, 128, 4096, 4096, BM=64, BN=128, BK=64, SIZES=sizes, num_warps=4,
                                num_stages=3, grid=(1,), target="sm_90a")
    binary = k.build("sm_90a")
    assert binary.metadata["splittable"] and "wgmma.mma_async" in binary.ptx
    assert "cp.async.cg.shared.global" in binary.ptx  # 16-byte copies into the rings, B's too
    ptx = k._variant_build(k.split_binaries, "sm_90a", split_k=1).ptx
    assert ptx.count("barrier.cluster.arrive") == 2 and "wgmma.mma_async" in ptx


def test_other_targets_have_no_split_build():
    assert "splittable" not in _binary(target="sm_80")


def test_the_pass_splits_the_iterations_and_leaves_the_epilogue_to_rank_0():
    fn = _source()
    fn.attrs["split_k"] = 1
    split_k.apply(fn, PassContext(parse_target("sm_90a"), num_warps=8, num_stages=3))
    verify(fn)
    top = [op.name for op in fn.body.ops]
    assert top[:3] == ["program_id", "rem", "div"]  # raw id, rank, the program's id
    assert top[-6:] == ["for", "cluster_sum", "constant", "cmp", "if", "return"]
    assert [op.name for op in fn.walk()].count("program_id") == 1
    branch = fn.body.ops[-2]
    assert branch.name == "if" and any(op.name == "store" for op in branch.regions[0].ops)
    assert fn.attrs["persistent"] == 0
    text = print_function(fn, locs=False)
    assert 'name = "split_k.ctas", split_k = 1' in text


def test_after_an_early_exit_on_the_arguments_the_branch_that_holds_the_gemm_is_split():
    fn = _source("early_exit")
    fn.attrs["split_k"] = 1
    split_k.apply(fn, PassContext(parse_target("sm_90a"), num_warps=8, num_stages=3))
    verify(fn)
    assert [op.name for op in fn.body.ops][:3] == ["program_id", "rem", "div"]
    exit_branch = fn.body.ops[-2]
    assert exit_branch.name == "if" and [op.name for op in exit_branch.regions[0].ops] == ["yield"]
    rest = [op.name for op in exit_branch.regions[1].ops]
    assert rest[-6:] == ["for", "cluster_sum", "constant", "cmp", "if", "yield"]
    assert [op.name for op in fn.walk()].count("program_id") == 1


_SCALAR = {"add": lambda x, y: x + y, "sub": lambda x, y: x - y, "mul": lambda x, y: x * y,
           "div": lambda x, y: int(x / y), "rem": lambda x, y: x - y * int(x / y), "max": max, "min": min}


def _k_ranges(fn, K, ctas, programs=1):
    """[(first, end)] of the K loop in each rank of program 0, from the split pass's own ops (the
    kernel's int32 scalar math before the loop, evaluated here; the rest is skipped)."""
    loop = next(op for op in fn.body.ops if op.name == "for")
    ranges = []
    for rank in range(ctas):
        values = {fn.body.args[fn.arg_names.index("K")]: K, fn.body.args[-1]: ctas}
        for op in fn.body.ops[:fn.body.ops.index(loop)]:
            if op.name == "program_id":
                values[op.results[0]] = rank
            elif op.name == "constant" and isinstance(op.attrs["value"], int):
                values[op.results[0]] = op.attrs["value"]
            elif op.name in _SCALAR and all(v in values for v in op.operands) and not op.results[0].type.shape:
                values[op.results[0]] = _SCALAR[op.name](*(values[v] for v in op.operands))
        ranges.append((values[loop.operands[0]], values[loop.operands[1]]))
    return ranges


@pytest.mark.parametrize("K, ctas, ranges", [
    (64 * 64, 4, [(0, 16), (16, 32), (32, 48), (48, 64)]),  # 64 iterations: 16 each
    (32 * 64, 4, [(0, 16), (16, 32), (32, 32), (48, 32)]),  # 32: two ranks of 16, two with none
    (8 * 64, 2, [(0, 8), (8, 8)]),  # 8: rank 0 alone
    (100 * 64 + 1, 4, [(0, 26), (26, 52), (52, 78), (78, 101)]),
])
def test_each_rank_takes_an_even_share_of_at_least_min_share_iterations(K, ctas, ranges):
    fn = _source()
    fn.attrs["split_k"] = 1
    split_k.apply(fn, PassContext(parse_target("sm_90a"), num_warps=8, num_stages=3))
    assert split_k.MIN_SHARE == 16
    assert _k_ranges(fn, K, ctas) == ranges


@pytest.mark.parametrize("programs, resident, trips, ctas", [
    (64, 132, 1000, 2), (32, 132, 1000, 4), (34, 132, 1000, 2), (100, 132, 1000, 1),
    (32, 132, 256, 4), (32, 132, 255, 2),  # four CTAs need 64 iterations each
    (32, 132, 64, 2), (32, 132, 63, 1),  # two need 32 each: a shorter loop is not split
    (32, 132, None, 2), (100, 132, None, 1),  # the trip count unknown: two CTAs at most
])
def test_a_launch_takes_the_largest_cluster_that_keeps_every_cta_resident_and_busy(programs, resident, trips, ctas):
    assert launcher.cluster_ctas(programs, resident, trips) == ctas


def test_the_k_loops_trip_count_is_noted_for_the_launches_to_read_from_their_arguments():
    spec = _binary()["split_trips"]
    assert spec == [_matmul.arg_names.index("K"), 63, 64, 0, 1]  # range(0, tl.cdiv(K, 64)): (K + 63) / 64
    assert [launcher.split_trips(spec, [0] * 5 + [K]) for K in (4096, 4097, 1024, 63, 0, -5)] == [64, 65, 16, 1, 0, 0]
    assert launcher.split_trips(spec, [0] * 5 + [4096.0]) is None  # no int: not known
    assert launcher.split_trips(spec, []) is None and launcher.split_trips(None, [4096]) is None


@kiln.jit
def _stepped_matmul(a_ptr, b_ptr, c_ptr, K, stride_am, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                    FIXED_K: tl.constexpr = 0):
    rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(16, FIXED_K if FIXED_K else K, BK):  # range(lb, K, step) and constant bounds
        a = tl.load(a_ptr + rm[:, None] * stride_am + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * BN + rn[None, :])
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], acc.to(tl.float16))


@pytest.mark.parametrize("fixed, spec, K, trips", [
    (0, [3, 0, 1, 16, 64], 4096, 64), (0, [3, 0, 1, 16, 64], 4112, 64), (0, [3, 0, 1, 16, 64], 4113, 65),
    (1000, [-1, 1000, 1, 16, 64], 1, 16)])
def test_a_loop_stepping_through_k_or_of_constant_bounds_has_its_trip_count_noted(fixed, spec, K, trips):
    x = np.zeros((64, 64), np.float16)
    k = _stepped_matmul.warmup(x, x, x, 4096, 64, BM=64, BN=64, BK=64, FIXED_K=fixed, num_warps=4, num_stages=3,
                               grid=(1,), target="sm_90a")
    meta = k.build("sm_90a").metadata
    assert meta["splittable"] and meta["split_trips"] == spec
    assert launcher.split_trips(spec, [0, 0, 0, K]) == trips == len(range(16, fixed or K, 64))


def test_the_launcher_launches_each_program_as_a_cluster(monkeypatch):
    calls = []
    monkeypatch.setattr(launcher, "_cu_launch_kernel", lambda: None)
    monkeypatch.setattr(launcher, "_cu_launch_kernel_ex",
                        lambda: lambda config, *rest: calls.append(launcher.LaunchConfig.from_address(config)) or 0)
    from kiln.ir.types import parse_type
    run = launcher.make_launcher(type("Loaded", (), {"handle": 0})(), [parse_type("int32")], 8, 1024, "k",
                                 derived=[("split",)], resident=132)
    run((40, 1, 1), [7], 0)
    config = calls[0]
    assert (config.gridDimX, config.gridDimY, config.gridDimZ) == (80, 1, 1)
    attr = config.attrs[0]
    assert attr.id == launcher.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION and list(attr.value.clusterDim) == [2, 1, 1]
    # its K loop's trip count read from the launch's int argument: (K + 63) / 64 iterations
    run = launcher.make_launcher(type("Loaded", (), {"handle": 0})(), [parse_type("int32")], 8, 1024, "k",
                                 derived=[("split", [0, 63, 64, 0, 1])], resident=132)
    for K, ctas in ((16384, 4), (16320, 2), (4096, 2)):  # 256, 255, 64 iterations
        run((20, 1, 1), [K], 0)
        assert calls[-1].gridDimX == 20 * ctas and list(calls[-1].attrs[0].value.clusterDim) == [ctas, 1, 1]
    with pytest.raises(ValueError, match="no int32 argument"):  # a spec naming a pointer, or past the arguments
        launcher.make_launcher(type("Loaded", (), {"handle": 0})(), [parse_type("ptr<fp16>")], 8, 1024, "k",
                               derived=[("split", [0, 63, 64, 0, 1])], resident=132)


@pytest.mark.gpu
@pytest.mark.parametrize("shape, variant", [((128, 4096, 4096), "plain"), ((100, 1000, 3000), "plain"),
                                            ((64, 512, 100), "plain"), ((256, 2048, 8192), "plain"),
                                            ((100, 1000, 3000), "early_exit")])
def test_few_programs_take_the_split_build_on_the_gpu_and_match_torch(shape, variant, monkeypatch, cuda_torch):
    torch = cuda_torch
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("needs a Hopper GPU")
    M, N, K = shape
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    want = a.float() @ b.float()
    results, clusters = [], []
    sized = launcher.cluster_ctas
    monkeypatch.setattr(launcher, "cluster_ctas", lambda *args: clusters.append(sized(*args)) or clusters[-1])
    monkeypatch.setattr(launcher, "CLUSTER_SHARE", {4: 1, 2: 1})  # short and ragged K loops split too, to check
    for setting in ("1", "0"):  # KILN_SPLIT_K=0: the kernel as written
        monkeypatch.setenv("KILN_SPLIT_K", setting)
        kernel = kiln.jit(_matmul.fn)
        c = torch.full((M, N), 7.0, device="cuda", dtype=torch.float16)
        grid = (triton_cdiv(M, 128) * triton_cdiv(N, 128),)
        for _ in range(2):  # the same bits every time: rank 0 adds in rank order
            kernel[grid](a, b, c, M, N, K, a.stride(0), b.stride(0), c.stride(0), BM=128, BN=128, BK=64,
                         VARIANT=variant, num_warps=8, num_stages=3)
            torch.cuda.synchronize()
            results.append(c.clone())
        if setting == "1":
            assert clusters and all(n >= 2 for n in clusters)  # every launch split
            clusters.clear()
    assert not clusters  # none without
    torch.testing.assert_close(results[0].float(), want, atol=0.05 * K ** 0.5, rtol=0.01)
    torch.testing.assert_close(results[2].float(), want, atol=0.05 * K ** 0.5, rtol=0.01)
    assert torch.equal(results[0], results[1])


@pytest.mark.gpu
def test_an_int8_matmul_of_few_programs_is_split_on_the_gpu_and_exact(monkeypatch, cuda_torch):
    torch = cuda_torch
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("needs a Hopper GPU")
    K = 16384  # 256 iterations of 64: enough for four CTAs
    a = torch.randint(-128, 128, (128, K), dtype=torch.int8, device="cuda")
    b = torch.randint(-128, 128, (K, 128), dtype=torch.int8, device="cuda")
    want = (a.cpu().long() @ b.cpu().long()).int()  # |sum| < 2**28: no wrap
    clusters = []
    sized = launcher.cluster_ctas
    monkeypatch.setattr(launcher, "cluster_ctas", lambda *args: clusters.append(sized(*args)) or clusters[-1])
    c = torch.zeros((128, 128), dtype=torch.int32, device="cuda")
    kiln.jit(_tile_matmul.fn)[(1,)](a, b, c, K, a.stride(0), BM=128, BN=128, BK=64, num_warps=8, num_stages=3)
    torch.cuda.synchronize()
    assert clusters and set(clusters) == {4}  # one program: a cluster of four
    assert torch.equal(c.cpu(), want)


@pytest.mark.gpu
def test_a_k_loop_too_short_to_share_keeps_the_kernel_as_written_on_the_gpu(monkeypatch, cuda_torch):
    torch = cuda_torch
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("needs a Hopper GPU")
    monkeypatch.setenv("KILN_SPLIT_K", "1")
    M, N, K = 128, 1024, 1024  # 8 programs, 16 iterations: two CTAs would get 8 each
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    c = torch.zeros((M, N), device="cuda", dtype=torch.float16)
    kernel = kiln.jit(_matmul.fn)
    compiled = kernel[(8,)](a, b, c, M, N, K, a.stride(0), b.stride(0), c.stride(0), BM=128, BN=128, BK=64,
                            num_warps=8, num_stages=3)
    torch.cuda.synchronize()
    assert compiled.few_programs and not compiled.split_binaries and not compiled.split_launchers
    torch.testing.assert_close(c.float(), a.float() @ b.float(), atol=0.05 * K ** 0.5, rtol=0.01)


@pytest.mark.gpu
@pytest.mark.parametrize("sizes", ["fixed", "passed"])
def test_a_gemm_shaped_as_inductors_template_is_split_on_the_gpu_and_matches_torch(sizes, monkeypatch, cuda_torch):
    torch = cuda_torch
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("needs a Hopper GPU")
    M, N, K = 128, 4096, 4096  # the sizes "fixed" holds
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    clusters = []
    sized = launcher.cluster_ctas
    monkeypatch.setattr(launcher, "cluster_ctas", lambda *args: clusters.append(sized(*args)) or clusters[-1])
    c = torch.zeros((M, N), device="cuda", dtype=torch.float16)
    kiln.jit(_template_matmul.fn)[(M // 64 * (N // 128),)](a, b, c, M, N, K, BM=64, BN=128, BK=64, SIZES=sizes,
                                                           num_warps=4, num_stages=3)
    torch.cuda.synchronize()
    assert clusters and clusters[0] >= 2
    torch.testing.assert_close(c.float(), a.float() @ b.float(), atol=0.05 * K ** 0.5, rtol=0.01)


@pytest.mark.gpu
@pytest.mark.parametrize("setting", [None, "1"])
def test_kernels_compiled_as_inductor_compiles_them_split_only_when_asked(setting, monkeypatch, cuda_torch):
    """`triton.compile(ASTSource)` and its kernel's launch, as Inductor's under the drop-in."""
    torch = cuda_torch
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("needs a Hopper GPU")
    from kiln.dropin.compile import ASTSource, compile as triton_compile
    from kiln.dropin.jit import jit as triton_jit
    from kiln.runtime import GPUTarget
    if setting is None:
        monkeypatch.delenv("KILN_SPLIT_K", raising=False)
    else:
        monkeypatch.setenv("KILN_SPLIT_K", setting)
    M, N, K = 128, 1024, 4096
    names = ("a_ptr", "b_ptr", "c_ptr", "M", "N", "K", "stride_am", "stride_bk", "stride_cm")
    signature = {**{n: "*fp16" for n in names[:3]}, **{n: "i32" for n in names[3:]},
                 **{n: "constexpr" for n in ("BM", "BN", "BK", "VARIANT")}}
    constants = {"BM": 128, "BN": 128, "BK": 64, "VARIANT": "plain"}
    attrs = {(i,): [["tt.divisibility", 16]] for i in range(len(names))}
    kernel = triton_compile(ASTSource(triton_jit(_matmul.fn), signature, constants, attrs),
                            target=GPUTarget("cuda", 90, 32), options={"num_warps": 8, "num_stages": 3})
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    c = torch.zeros((M, N), device="cuda", dtype=torch.float16)
    clusters = []
    sized = launcher.cluster_ctas
    monkeypatch.setattr(launcher, "cluster_ctas", lambda *args: clusters.append(sized(*args)) or clusters[-1])
    kernel[(8,)](a, b, c, M, N, K, a.stride(0), b.stride(0), c.stride(0), 128, 128, 64, "plain")
    torch.cuda.synchronize()
    assert bool(clusters) == (setting == "1")
    torch.testing.assert_close(c.float(), a.float() @ b.float(), atol=0.05 * K ** 0.5, rtol=0.01)


def triton_cdiv(a, b):
    return (a + b - 1) // b


def test_a_split_build_that_cannot_be_made_leaves_the_launches_to_the_kernel_as_written(monkeypatch):
    import kiln.compiler as frontend_compiler
    kernel = _build()
    kernel.few_programs[0] = 66  # as _prepare sets it for a splittable kernel on a GPU

    def broken(*args):
        raise RuntimeError("a lowering bug")
    monkeypatch.setattr(frontend_compiler.driver, "compile_target", lambda device: "sm_90a")
    monkeypatch.setattr(frontend_compiler, "compile_binary", broken)
    with pytest.warns(RuntimeWarning, match="split-K build failed .*a lowering bug.*kernel as written"):
        assert kernel._prepare_split(0) is None
    assert 0 not in kernel.few_programs and not kernel.split_launchers  # not tried again


@pytest.mark.parametrize("code, refused", [(912, True), (701, True), (700, False)])
def test_a_refused_cluster_launch_leaves_the_launches_to_the_kernel_as_written(code, refused, monkeypatch):
    # 912: CUDA_ERROR_INVALID_CLUSTER_SIZE, 701: out of resources (a refusal: the launch did not run);
    # 700, an illegal address, is the kernel's own failure and is raised as it is
    import kiln.compiler as frontend_compiler
    from kiln.runtime.cuda_driver import CudaError
    kernel = _build()
    ran = []

    def split(grid, args, stream):
        raise CudaError("launching kernel k failed", code)
    kernel.launchers[0] = lambda grid, args, stream: ran.append((grid, stream))
    kernel.split_launchers[0], kernel.few_programs[0] = split, 66
    monkeypatch.setattr(frontend_compiler.driver, "device_and_stream", lambda: (0, 5))
    monkeypatch.setattr(frontend_compiler.config, "interpret", lambda: False)  # as on a GPU
    if not refused:
        with pytest.raises(CudaError):
            kernel._launch((8, 1, 1), [])
        assert kernel.split_launchers[0] is split and not ran
        return
    with pytest.warns(RuntimeWarning, match="split-K launch in clusters was refused.*kernel as written"):
        kernel._launch((8, 1, 1), [])
    assert ran == [((8, 1, 1), 5)]  # the kernel as written ran instead, on the caller's stream
    assert 0 not in kernel.few_programs and not kernel.split_launchers  # not tried again
    kernel._launch((8, 1, 1), [], stream=9)
    assert ran[-1] == ((8, 1, 1), 9)
