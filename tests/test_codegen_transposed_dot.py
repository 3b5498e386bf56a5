"""C = A @ B run as C^T = B^T A^T where B is an 8- or 32-bit tile along N (kiln.codegen.lower.transposed_dot):
the fragments' lane formulas played against the instructions' semantics (PTX ISA), the accumulator's
registers against `transposed_wgmma_layout`, and the builds' PTX."""
import numpy as np
import pytest

from kiln.codegen.lower.tile_transpose import column_selectors, source_row
from kiln.codegen.lower.transposed_dot import native_order
from kiln.ir.layout import thread_elements, transposed_instr_n, transposed_wgmma_layout

from test_codegen_tile_transpose import _ldmatrix_trans_x4, _prmt


def test_an_8_bit_fragment_holds_the_columns_of_its_rows():
    # 32 rows of k, 16 bytes along N from the warp's first column: lane (g, t)'s a0 a1 are columns 2g and
    # 2g + 1 at k 4t .. 4t + 3 (its rows g and g + 8), a2 a3 the same 16 rows of k further
    block = np.random.default_rng(5).integers(0, 256, (32, 16), dtype=np.uint8)
    loaded = _ldmatrix_trans_x4([block[source_row(lane)] for lane in range(32)])
    for lane, words in enumerate(loaded):
        g, t = divmod(lane, 4)
        even, odd = column_selectors(lane)
        got = [_prmt(words[2 * c], words[2 * c + 1], sel) for c in range(2) for sel in (even, odd)]
        want = [block[16 * c + 4 * t: 16 * c + 4 * t + 4, 2 * g + column] for c in range(2) for column in range(2)]
        assert got == [int.from_bytes(bytes(w), "little") for w in want]


@pytest.mark.parametrize("shape,warps", [((128, 128), 4), ((64, 256), 8), ((256, 64), 4), ((512, 128), 8)])
def test_the_instructions_registers_land_where_the_layout_puts_them(shape, warps):
    layout = transposed_wgmma_layout(shape, warps)
    M, N = shape
    instr_n = transposed_instr_n(M)
    n_rows, n_cols = N // (16 * warps), M // instr_n
    order = native_order(layout, shape, instr_n, n_rows, n_cols)
    assert sorted(order) == list(range(M * N // (32 * warps)))
    held = thread_elements(layout, shape, warps)
    for tid in range(32 * warps):
        warp, lane = divmod(tid, 32)
        g, t = divmod(lane, 4)
        native = []  # wgmma's d[4j + r] of instruction (mi, ni): row g + 8(r / 2), column 2t + r % 2 of C^T
        for mi in range(n_rows):
            for ni in range(n_cols):
                for j in range(instr_n // 8):
                    for r in range(4):
                        row = 16 * warps * mi + 16 * warp + g + 8 * (r // 2)  # warpgroups' 64-row slabs
                        column = ni * instr_n + 8 * j + 2 * t + r % 2
                        slab, within = divmod(row, 16)
                        native.append((column, 16 * slab + 2 * (within % 8) + within // 8))  # C's (row, column)
        assert [held[tid][i] for i in order] == native


def test_shapes_the_transposed_layout_takes():
    assert transposed_wgmma_layout((128, 64), 8) is None  # N under the two warpgroups' 128 rows
    assert transposed_wgmma_layout((12, 128), 4) is None  # M not a multiple of 8
    assert transposed_wgmma_layout((384, 128), 4) is not None and transposed_instr_n(384) == 192
    assert transposed_instr_n(40, int8=True) == 8  # int8 widths: 8, 16, 24, 32, then multiples of 16


def _row_xor_32(k, n, row_bytes):
    """Byte offset of 32-bit element (k, n) in a tile of whole rows XORed in 32-byte units (ir.types.ROW_XOR_32)."""
    return (k * row_bytes + 4 * n) ^ ((k & 3) << 5)


@pytest.mark.parametrize("bn", [32, 64, 128, 256])
def test_a_tf32_fragments_8_byte_loads_meet_no_bank_conflict_in_rows_xored_by_32_bytes(bn):
    # a half warp's 8-byte loads (lanes (g, t), g < 4 or g >= 4): row k + t, columns n0 + 2g and n0 + 2g + 1
    for n0 in range(0, bn, 16):
        for half in (range(16), range(16, 32)):
            banks = set()
            for lane in half:
                g, t = divmod(lane, 4)
                start = _row_xor_32(t, n0 + 2 * g, 4 * bn) % 128 // 4
                banks |= {start, start + 1}
            assert len(banks) == 32


def test_the_tf32_ring_the_fragments_are_read_from_is_rows_xored_by_32_bytes():
    from kiln.codegen.pipeline import PassContext, run_passes
    from kiln.codegen.target import parse_target
    from kiln.ir import parse_function
    from test_codegen_pointer_tma import _tf32_build
    kernel = _tf32_build(bm=128, bn=128, warps=4, maxnreg=255)
    fn = parse_function(kernel.asm["kir"])
    run_passes(fn, PassContext(parse_target("sm_90a"), 4, 3))
    [dot] = [op for op in fn.walk() if op.name == "warp_group_dot"]
    assert dot.attrs.get("transposed") == 1
    assert "rowxor32" in str(dot.operands[1].type) and "swizzle128" in str(dot.operands[0].type)
