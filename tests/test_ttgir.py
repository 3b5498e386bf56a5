"""`asm["ttgir"]` (kiln.ttgir): a binary's GPU-stage block IR in Triton's TTGIR spelling, read by
tools and tests written for Triton (the target, the reductions and conversions left, the dots' kind)."""
import pickle
import re

import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.dropin.compile import ASTSource, compile as dropin_compile
from kiln.dropin.jit import jit as dropin_jit
from kiln.ir import parse_function
from kiln.ir.index_math import index_values
from kiln.ir.layout_moves import moves_no_data
from kiln.runtime import GPUTarget


@kiln.jit
def row_sums(X, Y, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Each program sums its rows over the columns its strided loop visits."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    total = tl.zeros([BLOCK_M], dtype=tl.float32)
    for start in range(tl.program_id(1), tl.cdiv(N, BLOCK_N), tl.num_programs(1)):
        cols = start * BLOCK_N + tl.arange(0, BLOCK_N)
        total = total + tl.sum(tl.load(X + rows[:, None] * N + cols[None, :]), axis=1)
    tl.store(Y + rows * tl.num_programs(1) + tl.program_id(1), total)


@kiln.jit
def tile_matmul(a, b, c, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    acc = tl.zeros((BM, BN), tl.float32)
    for k in range(0, K, BK):
        acc += tl.dot(tl.load(a + rm[:, None] * K + (k + rk)[None, :]), tl.load(b + (k + rk)[:, None] * BN + rn[None, :]))
    tl.store(c + rm[:, None] * BN + rn[None, :], acc.to(tl.float16))


@dropin_jit
def scaled_rows(X, Y, factor, BLOCK: tl.constexpr):
    """Triton's `@triton.jit` under the drop-in (what Inductor's compile workers pickle)."""
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(Y + rows, tl.load(X + rows) * factor)


def _row_sums(target="sm_90a"):
    x, y = np.zeros((32, 512), np.float32), np.zeros((32, 2), np.float32)
    return row_sums.warmup(x, y, 512, 32, 128, grid=(1, 2, 1), target=target)


def _matmul(target="sm_90a"):
    x = np.zeros(64 * 256, np.float16)
    return tile_matmul.warmup(x, x, x, 256, 64, 64, 32, grid=(1,), target=target, num_warps=4, num_stages=3)


def _aliases_used_and_defined(text):
    defined = re.findall(r"^(#\w+) = ", text, re.M)
    used = set(re.findall(r"(#(?!ttg\b)[a-z]+\d*)\b", text.split("module attributes", 1)[1]))
    return defined, used


def test_the_gpu_stage_is_written_op_for_op_in_triton_s_spelling():
    kernel = _row_sums()
    ttgir, kir = kernel.asm["ttgir"], kernel.built.kir
    assert 'ttg.target = "cuda:90"' in ttgir and '"ttg.num-warps" = 4 : i32' in ttgir
    # each thread's runs of a step's block reduced in the loop, the exchange between threads after it
    assert ttgir.count('"tt.reduce"') == kir.count(" = reduce ") == 2
    loop = ttgir[ttgir.index("scf.for"):ttgir.index("scf.yield")]
    assert loop.count('"tt.reduce"') == 1 and "(tensor<32x32x4xf32, #blocked" in loop
    fn = parse_function(kir)
    index = index_values(fn)  # its conversions are recomputations in the new layout, as lowering does them
    moved = [op for op in fn.walk() if op.name == "convert_layout" and op.operands[0] not in index]
    assert ttgir.count("ttg.convert_layout") == len(moved) < kir.count(" = convert_layout ")
    assert ttgir.count("scf.for") == kir.count(" = for ") + kir.count("  for ")
    assert "#ttg.slice<{dim = 1, parent = #ttg.slice<{dim = 2, parent = #blocked" in ttgir  # slices of slices
    assert "kiln." not in ttgir  # every op of this kernel has a TTGIR name
    defined, used = _aliases_used_and_defined(ttgir)
    assert len(defined) == len(set(defined)) and used <= set(defined)


def test_the_blocked_layout_lists_its_fields_as_triton_s_encoding_does():
    ttgir = _row_sums().asm["ttgir"]
    assert "#ttg.blocked<{sizePerThread = [1, 4], threadsPerWarp = [1, 32], warpsPerCTA = [4, 1], order = [1, 0]}>" \
        in ttgir  # the loads' fp32 rows, four consecutive columns a thread


@kiln.jit
def flattened_transpose(src, dst, ROWS: tl.constexpr, COLS: tl.constexpr):
    """A block transposed and flattened: the flat order needs the elements in other threads."""
    x = tl.load(src + tl.arange(0, ROWS)[:, None] * COLS + tl.arange(0, COLS)[None, :])
    x = tl.permute(tl.reshape(x, (ROWS, COLS // 8, 8)), (1, 2, 0))
    tl.store(dst + tl.arange(0, ROWS * COLS), tl.reshape(x, (ROWS * COLS,)))


def test_index_math_is_recomputed_and_only_moved_elements_convert():
    x = np.zeros((32, 32), np.int32)
    kernel = flattened_transpose.warmup(x, x, 32, 32, grid=(1,), target="sm_90a")
    ttgir, fn = kernel.asm["ttgir"], parse_function(kernel.built.kir)
    exchanging = [op for op in fn.walk() if op.name in ("reshape", "permute") and not moves_no_data(op, 4)]
    converts = [line for line in ttgir.splitlines() if "ttg.convert_layout" in line]
    assert len(exchanging) == 1 and len(converts) == 1  # the one shape op that moves elements
    assert "tensor<4x8x32xi32," in converts[0]  # the data before the last reshape, not its addresses


def test_the_target_is_the_one_the_binary_was_built_for():
    assert 'ttg.target = "cuda:80"' in _row_sums("sm_80").asm["ttgir"]
    assert 'ttg.target = "cuda:90"' in _row_sums("sm_90a").asm["ttgir"]


def test_a_hopper_k_loop_shows_its_rings_copies_and_wgmma():
    kernel = _matmul()
    ttgir = kernel.asm["ttgir"]
    assert f'ttg.shared = {kernel.metadata["shared"]} : i32' in ttgir
    assert re.search(r"ttg\.local_alloc \{allocation\.offset = \d+ : i32\} : \(\) -> "
                     r"!ttg\.memdesc<4x64x32xf16, #shared\d*, #smem, mutable>", ttgir)
    assert "#smem = #ttg.shared_memory" in ttgir
    assert re.search(r"#shared\d* = #ttg\.nvmma_shared<\{swizzlingByteWidth = 128, transposed = false, "
                     r"elementBitWidth = 16\}>", ttgir)
    assert "ttg.async_copy_global_to_local" in ttgir and "ttg.async_commit_group" in ttgir
    assert "ttg.async_wait {num = 1 : i32}" in ttgir  # one k-step's copies in flight past the one read
    assert re.search(r"ttng\.warp_group_dot %\w+, %\w+, %\w+ \{isAsync = true\} : !ttg\.memdesc<64x32xf16, .*"
                     r" -> tensor<64x64xf32, #mma>", ttgir)
    assert "#mma = #ttg.nvidia_mma<{versionMajor = 3, versionMinor = 0, warpsPerCTA = [4, 1]" in ttgir
    assert "ttng.warp_group_dot_wait" in ttgir and "ttng.fence_async_shared" in ttgir
    # the launch grid's arguments the persistent form takes, named as identifiers
    assert "%launch_grid_0: i32" in ttgir
    defined, used = _aliases_used_and_defined(ttgir)
    assert len(defined) == len(set(defined)) and used <= set(defined)


def test_an_ampere_k_loop_runs_its_dots_on_mma_sync_tiles():
    ttgir = _matmul("sm_80").asm["ttgir"]
    assert "ttng.warp_group_dot" not in ttgir and "tt.dot" in ttgir
    assert "ttg.async_copy_global_to_local" in ttgir


def test_a_warp_specialized_kernel_shows_its_partitions_and_tma_copies():
    from test_codegen_warp_specialize import _built
    kernel = _built(ws=True, warps=4, tile=(128, 128, 64))
    ttgir = kernel.asm["ttgir"]
    assert re.search(r"ttg\.warp_specialize\(\) attributes \{replicas = 2 : i32, actualRegisters = "
                     r"array<i32: \d+, \d+>\}", ttgir)
    assert "partition0() num_warps(4) {" in ttgir and ttgir.count("ttg.warp_yield") == 2
    assert '"ttg.total-num-warps" = 12 : i32' in ttgir  # two replicas of four warps and a producer of four
    assert "ttng.async_tma_copy_global_to_local" in ttgir and "ttng.barrier_expect" in ttgir
    assert "ttng.wait_barrier" in ttgir and "ttng.arrive_barrier" in ttgir and "ttng.init_barrier" in ttgir


def test_before_a_build_there_is_no_ttgir():
    kernel = row_sums.warmup(np.zeros((32, 512), np.float32), np.zeros((32, 2), np.float32), 512, 32, 128,
                             grid=(1, 2, 1), num_warps=2)  # nothing built: no GPU here
    if kernel.built is not None:
        pytest.skip("a GPU built the kernel")
    assert kernel.asm.get("ttgir") is None
    with pytest.raises(KeyError):
        kernel.asm["ttgir"]


def test_a_triton_compile_gives_ttir_and_ttgir_and_still_pickles():
    signature = {"X": "*fp32", "Y": "*fp32", "factor": "fp32", "BLOCK": "constexpr"}
    compiled = dropin_compile(ASTSource(scaled_rows, signature, {"BLOCK": 128}), target=GPUTarget("cuda", 80, 32),
                              options={"num_warps": 4})
    ttgir = compiled.asm["ttgir"]
    assert 'ttg.target = "cuda:80"' in ttgir and "arith.mulf" in ttgir and "tt.store" in ttgir
    assert "tt.func public @scaled_rows" in compiled.asm["ttir"] and "#blocked" not in compiled.asm["ttir"]
    again = pickle.loads(pickle.dumps(compiled))  # as from an Inductor compile worker
    assert again.asm["ttgir"] == ttgir


def test_the_rendering_reads_the_binary_s_own_ir():
    kernel = _matmul()
    fn = parse_function(kernel.built.kir)
    ops = sum(1 for op in fn.walk() if op.name == "warp_group_dot")
    assert kernel.asm["ttgir"].count("ttng.warp_group_dot ") == ops >= 1
