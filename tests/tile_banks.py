"""Shared-memory banks of a tile's elements as kiln addresses them (codegen/lower/wgmma.tile_offset, run on
plain integers): for tests that a layout's accesses to a tile spread over the banks."""
from kiln.codegen.lower.wgmma import tile_offset

BANKS = 32


class _Integers:
    """tile_offset's builder and lowering on Python integers."""
    add, mul, xor = staticmethod(lambda x, y: x + y), staticmethod(lambda x, y: x * y), staticmethod(lambda x, y: x ^ y)
    udiv, urem = staticmethod(lambda x, y: x // y), staticmethod(lambda x, y: x % y)
    and_, lshr, shl = staticmethod(lambda x, y: x & y), staticmethod(lambda x, y: x >> y), staticmethod(lambda x, y: x << y)
    i32 = staticmethod(int)


def byte_offset(tile_type, row: int, col: int) -> int:
    return tile_offset(_Integers, tile_type, (row, col), _Integers)


def most_words_a_bank(tile_type, accesses) -> int:
    """The most distinct 4-byte words one bank serves for `accesses`: [(row, col, bytes)], one warp's
    access in one instruction (each access `bytes` long from its element)."""
    words = {(byte_offset(tile_type, r, c) + b) // 4 for r, c, n in accesses for b in range(0, n, 4)}
    return max(sum(1 for w in words if w % BANKS == bank) for bank in range(BANKS))
