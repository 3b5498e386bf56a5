"""Row-XOR shared tiles (`smem<...:rowxor32:...>`): a 32-bit B stored N-major on an mma.sync ring, whole
rows whose 32-byte units are XORed with the row mod 4. mma.sync reads such a B a register a load, lane
(g, t) row t (and t + 4) of column g of 8; in a 128-byte TMA swizzle rows 0-3 flip the same unit bits
as the lanes' two 16-byte units, two lanes a bank (tutorial 03's tf32 16x128x32 on one warp ran at half
its speed on an H100). The type, its addresses (the lowering's own function, evaluated on integers) and
the rings smem_plan gives it; its kernels run in test_codegen_mma_ring.py."""
import re

import numpy as np
import pytest

from kiln.codegen.lower.wgmma import constant_step, tile_offset
from kiln.ir.types import ROW_XOR_32, float32, parse_type, shared_type


class _Ints:
    """The builder calls tile_offset makes, on Python ints."""
    add = staticmethod(lambda a, b: a + b)
    mul = staticmethod(lambda a, b: a * b)
    udiv = staticmethod(lambda a, b: a // b)
    urem = staticmethod(lambda a, b: a % b)
    and_ = staticmethod(lambda a, b: a & b)
    lshr = staticmethod(lambda a, b: a >> b)
    xor = staticmethod(lambda a, b: a ^ b)
    shl = staticmethod(lambda a, b: a << b)


class _Lowering:
    b = _Ints()
    i32 = staticmethod(lambda x: x)


def _offset(t, row, col):
    return tile_offset(_Lowering, t, (row, col))


def _wavefronts(addresses, width=4):
    """Shared memory's passes for one warp's accesses of `width` bytes at `addresses` (distinct words
    of one bank each take a pass)."""
    banks = {}
    for a in set(addresses):
        for w in range(0, width, 4):
            banks.setdefault((a + w) // 4 % 32, set()).add((a + w) // 128)
    return max(len(rows) for rows in banks.values())


B_TILE = shared_type(float32, (32, 128), ROW_XOR_32, (1, 0))  # [K, N], N inner


def test_the_type_prints_parses_and_refuses_what_it_cannot_be():
    ring = shared_type(float32, (3, 32, 128), ROW_XOR_32, (1, 0))
    assert str(ring) == "smem<3x32x128xfp32:rowxor32:order1.0>"
    assert parse_type(str(ring)) == ring and ring.tile() == B_TILE
    with pytest.raises(TypeError, match="four 32-byte units"):
        shared_type(float32, (32, 16), ROW_XOR_32, (1, 0))  # 64-byte rows
    with pytest.raises(TypeError, match="TMA"):
        B_TILE.tma_box()


def test_every_byte_of_a_tile_has_its_own_place_in_its_rows():
    offsets = {_offset(B_TILE, r, c) for r in range(32) for c in range(128)}
    assert offsets == set(range(0, 32 * 128 * 4, 4))
    assert all(_offset(B_TILE, r, c) // 512 == r for r in range(32) for c in range(0, 128, 8))
    # a 16-byte copy stays one run: its four elements in one 32-byte unit
    assert all(_offset(B_TILE, r, c + 3) - _offset(B_TILE, r, c) == 12 for r in range(8) for c in range(0, 128, 4))


@pytest.mark.parametrize("first_col", [0, 8, 56, 120])
@pytest.mark.parametrize("k0", [0, 8, 24])
def test_mma_fragment_loads_take_every_bank_once(first_col, k0):
    for rows in ((lambda t: k0 + t), (lambda t: k0 + t + 4)):  # the fragment's two registers
        reads = [_offset(B_TILE, rows(t), first_col + g) for g in range(8) for t in range(4)]
        assert _wavefronts(reads) == 1
    swizzled = shared_type(float32, (32, 128), 128, (1, 0))  # why: the TMA swizzle's two lanes a bank
    assert _wavefronts([_offset(swizzled, k0 + t, first_col + g) for g in range(8) for t in range(4)]) == 2


@pytest.mark.parametrize("row", range(4))
def test_a_warp_copying_a_row_writes_every_bank_once_a_pass(row):
    writes = [_offset(B_TILE, row, 4 * lane) for lane in range(32)]
    assert all(_wavefronts(writes[q:q + 8], width=16) == 1 for q in range(0, 32, 8))  # 8 lanes a pass


def test_copies_share_an_address_four_rows_apart():
    assert constant_step(B_TILE, (0, 4), (4, 4)) == 4 * 512 == _offset(B_TILE, 4, 4) - _offset(B_TILE, 0, 4)
    assert constant_step(B_TILE, (0, 4), (4, 36)) == _offset(B_TILE, 4, 36) - _offset(B_TILE, 0, 4)
    assert constant_step(B_TILE, (0, 4), (2, 4)) is None  # another row mod 4: another XOR
    assert constant_step(B_TILE, (0, 4), (0, 12)) is None  # another unit within 128 bytes


def _planned(num_warps, target="sm_90a"):
    import test_codegen_mma_ring as ring
    kir = ring._matmul_ir("tf32", False, False, num_warps=num_warps, target=target)
    return ring._optimized(kir, target, num_warps=num_warps, num_stages=3)


@pytest.mark.parametrize("num_warps", [1, 2])
def test_mma_sync_rings_of_an_n_major_tf32_b_are_row_xor(num_warps):
    planned = _planned(num_warps)
    assert "mma_dot" in planned and ":rowxor32:" in planned and "async_copy" in planned


def test_wgmma_rings_keep_tma_swizzles():
    planned = _planned(4)  # Hopper's 4 warps: wgmma, which reads tf32 K-major only
    assert "rowxor32" not in planned and "swizzle" in planned


def _tutorial_matmul(bm, bn, bk, warps, stages):
    from bench_support import bench_kernels
    kernels = bench_kernels()  # tutorial 03's matmul
    M = N = K = 1024
    a, b, c = (np.zeros((M, K), np.float32), np.zeros((K, N), np.float32), np.zeros((M, N), np.float32))
    return kernels.matmul_kernel.warmup(a, b, c, M, N, K, K, 1, N, 1, N, 1, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
                                        GROUP_M=8, num_warps=warps, num_stages=stages, grid=(1,), target="sm_90a")


def test_the_one_warp_pointer_matmul_no_longer_spills():
    assert _tutorial_matmul(16, 128, 32, 1, 3).metadata["n_spills"] == 0  # 24 bytes in a TMA swizzle


@pytest.mark.parametrize("config,bases_before", [((16, 128, 32, 1, 3), 98), ((64, 128, 32, 2, 3), 64)])
def test_b_fragment_loads_add_immediates_to_a_few_addresses(config, bases_before):
    """Loads of elements a constant apart (wgmma.constant_step: whole units of rows 4 apart) share one
    address, each adding its immediate, where each column tile's load kept its own offset live through
    the loop (the two-warp 64x128x32 build then spilled 368 bytes)."""
    k = _tutorial_matmul(*config)
    loads = re.findall(r"ld\.shared\.b32\s+%r\d+, \[(%r\d+)(?:\+-?\d+)?\]", k.asm["ptx"])
    assert len(loads) >= 64 and len(set(loads)) <= 4 < bases_before  # one per 8-column unit's XOR
    assert k.metadata["n_spills"] == 0
