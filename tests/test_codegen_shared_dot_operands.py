"""A value several mma.sync dots read, itself or transposed, is stored to a shared tile once and every dot
reads it there (codegen/passes/shared_dot_operands.py): fla's kkt_solve, each chunk's k block A of some
16x16 dots and B (transposed) of others, and its block merge's tf32 dots on the inverses. Before, each
dot stored both of its operands itself (kkt_solve at one warp: 372 stores to shared memory, 164 after).
Checked as IR, emulated on the CPU against NumPy, and on the GPU."""
import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.codegen import compile as compile_ir
from kiln.codegen.lower.fragment_reuse import Fragments
from kiln.ir import parse_function
from kiln.ir.core import Block
from kiln.ir.types import block_type, shared_type

from test_codegen_emulate import in_child


@kiln.jit
def gram_blocks(k_ptr, out_ptr, merged_ptr, KD: tl.constexpr, BC: tl.constexpr, BK: tl.constexpr):
    """Two BC-row blocks k0, k1 of k (BC x KD): their Gram blocks k0 k0^T, k1 k0^T, k1 k1^T summed BK columns
    at a time; then, at tf32, k1k0 @ k0k0 and k1k1 @ k0k0 (k0k0 read by both)."""
    rows = tl.arange(0, BC)
    a00 = tl.zeros((BC, BC), tl.float32)
    a10 = tl.zeros((BC, BC), tl.float32)
    a11 = tl.zeros((BC, BC), tl.float32)
    for k0 in range(0, KD, BK):
        cols = k0 + tl.arange(0, BK)
        b0 = tl.load(k_ptr + rows[:, None] * KD + cols[None, :])
        b1 = tl.load(k_ptr + (BC + rows)[:, None] * KD + cols[None, :])
        a00 += tl.dot(b0, tl.trans(b0))
        a10 += tl.dot(b1, tl.trans(b0))
        a11 += tl.dot(b1, tl.trans(b1))
    square = rows[:, None] * BC + rows[None, :]
    tl.store(out_ptr + square, a00)
    tl.store(out_ptr + BC * BC + square, a10)
    tl.store(out_ptr + 2 * BC * BC + square, a11)
    tl.store(merged_ptr + square, tl.dot(a10, a00, input_precision="tf32"))
    tl.store(merged_ptr + BC * BC + square, tl.dot(a11, a00, input_precision="tf32"))


BC, KD, BK = 16, 64, 32


def _args():
    rng = np.random.default_rng(4)
    k = (rng.standard_normal((2 * BC, KD)) / 4).astype(np.float16)
    return k, np.zeros((3, BC, BC), np.float32), np.zeros((2, BC, BC), np.float32)


def _built(num_warps, target="sm_90a"):
    warm = gram_blocks.warmup(*_args(), KD=KD, BC=BC, BK=BK, grid=(1,), target=target, num_warps=num_warps)
    return compile_ir(parse_function(warm.asm["kir"]), target, {"num_warps": num_warps, "num_stages": 1}, link=False)


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_each_block_is_stored_once_for_every_dot_that_reads_it(target):
    kir = _built(1, target).kir
    loop = kir[kir.index(" = for "):]
    loop = loop[:loop.index("\n  }\n")]
    assert loop.count("local_store") == 2 and loop.count("= mma_dot ") == 3 and " = dot " not in loop
    assert loop.count("local_trans") == 2  # k0^T (its two dots read one view) and k1^T
    after = kir[kir.index("\n  }\n"):]
    # the merge at one warp: both tf32 dots read A and B (a00), products of dots, from registers
    assert after.count("local_store") == 0 and after.count("= mma_dot ") == 2 and " = dot " not in after
    kir = _built(2, target).kir
    after = kir[kir.index("\n  }\n"):]
    # at two warps (no warp holds all of a product): a00 stored once for both, each A by its dot
    assert after.count("local_store") == 3 and after.count("= mma_dot ") == 2 and " = dot " not in after


def test_a_value_one_dot_reads_is_staged_by_its_dot_as_before():
    @kiln.jit
    def one(a_ptr, b_ptr, c_ptr, S: tl.constexpr):
        r = tl.arange(0, S)
        tile = r[:, None] * S + r[None, :]
        tl.store(c_ptr + tile, tl.dot(tl.load(a_ptr + tile), tl.load(b_ptr + tile)))
    x = np.zeros((16, 16), np.float16)
    warm = one.warmup(x, x, np.zeros((16, 16), np.float32), S=16, grid=(1,), target="sm_80", num_warps=1)
    kir = compile_ir(parse_function(warm.asm["kir"]), "sm_80", {"num_warps": 1}, link=False).kir
    assert "mma_dot" not in kir and " = dot " in kir


def test_dots_reading_one_tile_load_its_fragments_once():
    # the loop's two trips (unrolled), per 16 bf16 columns of k: one ldmatrix.x4 of b0 as A, of b0^T as B, of b1 as
    # A, of b1^T as B (16; before, each of the three dots loaded both its operands: 24); the merge's two tf32 dots
    # read A and a00 as B from registers, a00's fragments shuffled once for both: per 8 columns of k and 8-column
    # tile, four shuffles (16)
    ptx = _built(1).ptx
    assert ptx.count("mma.sync") == 32 and ptx.count("ldmatrix.sync.aligned.m8n8.x4") == 16
    assert ptx.count("ldmatrix") == 16 and ptx.count("ld.shared.v2.b32") == 0 and ptx.count("shfl.sync") == 16


def test_fragments_are_kept_where_they_dominate_and_the_tile_is_unchanged():
    fn = parse_function(_built(1).kir)
    loop = next(op for op in fn.walk() if op.name == "for")
    body = loop.regions[0]
    tile = next(op.results[0] for op in body.ops if op.name == "local_alloc")
    view = next(op.results[0] for op in body.ops if op.name == "local_trans" and op.operands[0] is tile)
    fragments = Fragments(fn)
    assert fragments.reusable(tile) and fragments.reusable(view)
    loads = []

    def load():
        loads.append(1)
        return [len(loads)]
    with fragments.region(fn.body):
        fragments.get((view, "b"), load)
        with fragments.region(body):  # the loop stores the tile: the fragments from before it are stale there
            assert fragments.get((view, "b"), load) == [2]
            assert fragments.get((view, "b"), load) == [2]  # (a second dot of the same trip)
            fragments.stored(tile)
            assert fragments.get((view, "b"), load) == [3]
        # after the loop: neither what was loaded before it (the loop stored the tile) nor what it loaded (that
        # does not dominate what follows)
        assert fragments.get((view, "b"), load) == [4]
        with fragments.region(Block()):  # a region that stores nothing keeps them
            assert fragments.get((view, "b"), load) == [4]
        assert fragments.get((view, "b"), load) == [4]
    assert len(loads) == 4


def _reference(k):
    k = k.astype(np.float64)
    k0, k1 = k[:BC], k[BC:]
    a00, a10, a11 = k0 @ k0.T, k1 @ k0.T, k1 @ k1.T
    return np.stack([a00, a10, a11]), np.stack([a10 @ a00, a11 @ a00])


def _emulated(num_warps):
    from kiln.codegen.emulate import run_on_cpu
    k, out, merged = _args()
    warm = gram_blocks.warmup(k, out, merged, KD=KD, BC=BC, BK=BK, grid=(1,), target="sm_90a", num_warps=num_warps)
    run_on_cpu(warm.ir, (1,), [k, out, merged], num_warps=num_warps, options={"num_stages": 1})
    return k, out, merged


@pytest.mark.parametrize("num_warps", [1, 2])
def test_the_shared_tiles_give_numpy_s_products_emulated(num_warps):
    k, out, merged = in_child(_emulated, num_warps, timeout=300)
    want, want_merged = _reference(k)
    np.testing.assert_allclose(out, want, rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(merged, want_merged, rtol=2e-2, atol=2e-2)  # tf32 products


@pytest.mark.gpu
@pytest.mark.parametrize("num_warps", [1, 2, 4])
def test_the_shared_tiles_on_the_gpu(num_warps, cuda_torch):
    torch = cuda_torch
    k, out, merged = (torch.from_numpy(x).cuda() for x in _args())
    gram_blocks[(1,)](k, out, merged, KD=KD, BC=BC, BK=BK, num_warps=num_warps, num_stages=1)
    want, want_merged = _reference(k.cpu().numpy())
    np.testing.assert_allclose(out.cpu().numpy(), want, rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(merged.cpu().numpy(), want_merged, rtol=2e-2, atol=2e-2)


@kiln.jit
def tf32_chain(x_ptr, y_ptr, z_ptr, out_ptr, M: tl.constexpr, S: tl.constexpr):
    """(x y) z at tf32, x M x S, y and z S x S: the outer dot's A is the inner one's product."""
    rows, cols = tl.arange(0, M), tl.arange(0, S)
    square = cols[:, None] * S + cols[None, :]
    x = tl.load(x_ptr + rows[:, None] * S + cols[None, :])
    xy = tl.dot(x, tl.load(y_ptr + square), input_precision="tf32")
    tl.store(out_ptr + rows[:, None] * S + cols[None, :], tl.dot(xy, tl.load(z_ptr + square), input_precision="tf32"))


@kiln.jit
def half_chain(x_ptr, y_ptr, z_ptr, out_ptr, M: tl.constexpr, S: tl.constexpr):
    """(x y) z in fp16, the product rounded to fp16 before the outer dot reads it (attention's P V)."""
    rows, cols = tl.arange(0, M), tl.arange(0, S)
    square = cols[:, None] * S + cols[None, :]
    x = tl.load(x_ptr + rows[:, None] * S + cols[None, :])
    xy = tl.dot(x, tl.load(y_ptr + square)).to(tl.float16)
    tl.store(out_ptr + rows[:, None] * S + cols[None, :], tl.dot(xy, tl.load(z_ptr + square)))


def _half_chain_emulated(m, num_warps):
    from kiln.codegen.emulate import run_on_cpu
    rng = np.random.default_rng(6)
    x, y, z = (rng.integers(-2, 3, shape).astype(np.float16) for shape in ((m, 16), (16, 16), (16, 16)))
    out = np.zeros((m, 16), np.float32)
    warm = half_chain.warmup(x, y, z, out, M=m, S=16, grid=(1,), target="sm_80", num_warps=num_warps)
    kir = compile_ir(parse_function(warm.asm["kir"]), "sm_80", {"num_warps": num_warps}, link=False).kir
    run_on_cpu(warm.ir, (1,), [x, y, z, out], num_warps=num_warps)
    return x, y, z, out, kir


@pytest.mark.parametrize("m, num_warps", [(16, 1), (64, 4)])
def test_a_16_bit_product_is_read_from_registers_emulated(m, num_warps):
    # small integers: every product exact in fp16
    x, y, z, out, kir = in_child(_half_chain_emulated, m, num_warps, timeout=300)
    outer, = [op for op in parse_function(kir).walk() if op.name == "mma_dot"]
    assert isinstance(outer.operands[0].type, block_type)
    np.testing.assert_array_equal(out, (x.astype(np.float32) @ y @ z))


def _chain_args(m):
    rng = np.random.default_rng(5)
    x, y, z = (rng.standard_normal(shape).astype(np.float32) for shape in ((m, 16), (16, 16), (16, 16)))
    return x, y, z, np.zeros((m, 16), np.float32)


@pytest.mark.parametrize("m, num_warps", [(16, 1), (64, 4)])
def test_a_product_is_read_from_registers_by_the_next_tf32_dot(m, num_warps):
    # whole rows per warp is these shapes' mma layout: the product stays in registers, z goes to a tile
    warm = tf32_chain.warmup(*_chain_args(m), M=m, S=16, grid=(1,), target="sm_90a", num_warps=num_warps)
    built = compile_ir(parse_function(warm.asm["kir"]), "sm_90a", {"num_warps": num_warps}, link=False)
    outer, = [op for op in parse_function(built.kir).walk() if op.name == "mma_dot"]
    assert isinstance(outer.operands[0].type, block_type) and isinstance(outer.operands[1].type, shared_type)
    # z's fragments: per 8 columns of k and 8-column tile, one 8-byte load (the k order A's registers give)
    assert built.ptx.count("ld.shared.v2.b32") == 2 * 2


def _chain_emulated(m, num_warps):
    from kiln.codegen.emulate import run_on_cpu
    args = _chain_args(m)
    warm = tf32_chain.warmup(*args, M=m, S=16, grid=(1,), target="sm_90a", num_warps=num_warps)
    run_on_cpu(warm.ir, (1,), list(args), num_warps=num_warps)
    return args


@pytest.mark.parametrize("m, num_warps", [(16, 1), (64, 4), (64, 2)])
def test_tf32_products_from_registers_emulated(m, num_warps):
    x, y, z, out = in_child(_chain_emulated, m, num_warps, timeout=300)
    np.testing.assert_allclose(out, (x.astype(np.float64) @ y @ z), rtol=2e-2, atol=2e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("m, num_warps", [(16, 1), (64, 4), (64, 2)])
def test_tf32_products_from_registers_on_the_gpu(m, num_warps, cuda_torch):
    torch = cuda_torch
    x, y, z, out = (torch.from_numpy(v).cuda() for v in _chain_args(m))
    tf32_chain[(1,)](x, y, z, out, M=m, S=16, num_warps=num_warps)
    want = x.double().cpu().numpy() @ y.double().cpu().numpy() @ z.double().cpu().numpy()
    np.testing.assert_allclose(out.cpu().numpy(), want, rtol=2e-2, atol=2e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("m, num_warps", [(16, 1), (64, 4), (64, 2)])
def test_16_bit_products_from_registers_on_the_gpu(m, num_warps, cuda_torch):
    torch = cuda_torch
    gen = torch.Generator().manual_seed(6)
    x, y, z = (torch.randint(-2, 3, shape, generator=gen).half().cuda() for shape in ((m, 16), (16, 16), (16, 16)))
    out = torch.zeros(m, 16, dtype=torch.float32, device="cuda")
    half_chain[(1,)](x, y, z, out, M=m, S=16, num_warps=num_warps)
    assert torch.equal(out, x.float() @ y.float() @ z.float())


@kiln.jit
def tf32_products(w_ptr, x_ptr, y_ptr, z_ptr, out_ptr, S: tl.constexpr, A_PRODUCT: tl.constexpr):
    """A @ (y z / 2) at tf32, A the product w x (A_PRODUCT) or w as loaded: B is computed from a dot's product."""
    cols = tl.arange(0, S)
    square = cols[:, None] * S + cols[None, :]
    yz = tl.dot(tl.load(y_ptr + square), tl.load(z_ptr + square), input_precision="tf32")
    a = tl.load(w_ptr + square)
    if A_PRODUCT:
        a = tl.dot(a, tl.load(x_ptr + square), input_precision="tf32")
    tl.store(out_ptr + square, tl.dot(a, yz * 0.5, input_precision="tf32"))


def _products_args(s):
    rng = np.random.default_rng(7)
    return [rng.standard_normal((s, s)).astype(np.float32) for _ in range(4)] + [np.zeros((s, s), np.float32)]


def _products_want(w, x, y, z, a_product):
    w, x, y, z = (v.astype(np.float64) for v in (w, x, y, z))
    return ((w @ x) if a_product else w) @ (y @ z) / 2


@pytest.mark.parametrize("a_product", [True, False])
def test_a_tf32_b_computed_from_a_product_is_shuffled_from_registers_at_one_warp(a_product):
    warm = tf32_products.warmup(*_products_args(16), S=16, A_PRODUCT=a_product, grid=(1,), target="sm_90a",
                                num_warps=1)
    built = compile_ir(parse_function(warm.asm["kir"]), "sm_90a", {"num_warps": 1}, link=False)
    outer, = [op for op in parse_function(built.kir).walk() if op.name == "mma_dot"]
    assert isinstance(outer.operands[1].type, block_type)
    assert isinstance(outer.operands[0].type, block_type if a_product else shared_type)
    # 16x16 B: two 8-deep k-steps by two 8-column tiles, four shuffles each; nothing of B goes to shared memory
    assert built.ptx.count("shfl.sync") == 16 and "ld.shared.v2.b32" not in built.ptx


def test_at_two_warps_a_b_computed_from_a_product_goes_to_a_tile():
    warm = tf32_products.warmup(*_products_args(32), S=32, A_PRODUCT=True, grid=(1,), target="sm_90a", num_warps=2)
    built = compile_ir(parse_function(warm.asm["kir"]), "sm_90a", {"num_warps": 2}, link=False)
    dots = [op for op in parse_function(built.kir).walk() if op.name in ("dot", "mma_dot")]
    in_registers = [op for op in dots if op.name == "mma_dot" and isinstance(op.operands[1].type, block_type)]
    assert len(dots) == 3 and not in_registers
    assert "shfl.sync" not in built.ptx


def _products_emulated(s, a_product):
    from kiln.codegen.emulate import run_on_cpu
    args = _products_args(s)
    warm = tf32_products.warmup(*args, S=s, A_PRODUCT=a_product, grid=(1,), target="sm_90a", num_warps=1)
    run_on_cpu(warm.ir, (1,), args, num_warps=1)
    return args


@pytest.mark.parametrize("s, a_product", [(16, True), (16, False), (32, True)])
def test_b_shuffled_from_registers_emulated(s, a_product):
    w, x, y, z, out = in_child(_products_emulated, s, a_product, timeout=300)
    want = _products_want(w, x, y, z, a_product)
    np.testing.assert_allclose(out, want, rtol=2e-2, atol=2e-2 * np.abs(want).max())


@pytest.mark.gpu
@pytest.mark.parametrize("s, a_product", [(16, True), (16, False), (32, True), (64, False)])
def test_b_shuffled_from_registers_on_the_gpu(s, a_product, cuda_torch):
    torch = cuda_torch
    args = [torch.from_numpy(v).cuda() for v in _products_args(s)]
    tf32_products[(1,)](*args, S=s, A_PRODUCT=a_product, num_warps=1)
    want = _products_want(*(v.cpu().numpy() for v in args[:4]), a_product)
    np.testing.assert_allclose(args[4].cpu().numpy(), want, rtol=2e-2, atol=2e-2 * np.abs(want).max())
