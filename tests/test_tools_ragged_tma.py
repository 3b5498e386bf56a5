"""`kiln.tools.ragged_tma` (Triton's `triton.tools.ragged_tma`): descriptors that read and write one
slice of rows at a time, bounded by the descriptor. In the interpreter (CPU) against NumPy, compiled
for sm_90a without a GPU, and on a GPU against torch (`-m gpu`)."""
import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.tools.ragged_tma import atomic_add_ragged, create_ragged_descriptor, load_ragged, store_ragged

OFFSETS, SIZES = [0, 5, 17], [5, 12, 20]  # three slices of a 40-row tensor; rows 37.. belong to none


@kiln.jit
def double_slices(src, dst, offsets, sizes, BLOCK_ROWS: tl.constexpr):
    """dst = 2 * src on each slice's rows, a block of rows at a time (the last block runs past the slice)."""
    s = tl.program_id(0)
    off, size = tl.load(offsets + s), tl.load(sizes + s)
    for r in range(0, size, BLOCK_ROWS):
        store_ragged(dst, off, size, [r, 0], load_ragged(src, off, size, [r, 0]) * 2)


@kiln.jit
def middle_dim_sums(src, dst, offsets, sizes, BLOCK_ROWS: tl.constexpr):
    """For a [B, rows, D] tensor ragged along rows: dst[b] += src[b] on each slice, by atomic adds."""
    b, s = tl.program_id(0), tl.program_id(1)
    off, size = tl.load(offsets + s), tl.load(sizes + s)
    for r in range(0, size, BLOCK_ROWS):
        block = load_ragged(src, off, size, [b, r, 0], ragged_dim=1)
        atomic_add_ragged(dst, off, size, [b, r, 0], block, ragged_dim=1)


def _slices():
    return np.array(OFFSETS, np.int32), np.array(SIZES, np.int32)


def _doubled(x):
    want = np.full_like(x, -1)
    end = OFFSETS[-1] + SIZES[-1]
    want[:end] = 2 * x[:end]
    return want


def test_a_ragged_copy_reads_and_writes_only_its_slices_rows(monkeypatch):
    monkeypatch.setenv("KILN_INTERPRET", "1")
    x = np.arange(40 * 16, dtype=np.float32).reshape(40, 16)
    y = np.full_like(x, -1)
    double_slices[(3,)](create_ragged_descriptor(x, [8, 16]), create_ragged_descriptor(y, [8, 16]), *_slices(),
                        BLOCK_ROWS=8)
    np.testing.assert_array_equal(y, _doubled(x))


def test_rows_past_a_slice_load_as_zeros_and_atomic_adds_stop_at_its_end(monkeypatch):
    monkeypatch.setenv("KILN_INTERPRET", "1")
    x = np.arange(2 * 40 * 16, dtype=np.float32).reshape(2, 40, 16)
    y = np.ones_like(x)
    middle_dim_sums[(2, 3)](create_ragged_descriptor(x, [1, 8, 16], ragged_dim=1),
                            create_ragged_descriptor(y, [1, 8, 16], ragged_dim=-2), *_slices(), BLOCK_ROWS=8)
    want = np.ones_like(x)
    want[:, :37] += x[:, :37]
    np.testing.assert_array_equal(y, want)


def test_the_descriptor_is_the_tensor_with_two_leading_dimensions():
    x = np.zeros((40, 16), np.float16)
    desc = create_ragged_descriptor(x, [8, 16])
    assert desc.shape == [0x7FFF0000, 0x7FFF0000, 1 << 30, 16] and desc.block_shape == [1, 1, 8, 16]
    assert desc.strides == [(1 << 34) - 16, 16, 16, 1]


@pytest.mark.parametrize("shape, block, dim, message", [
    ((40,), [8], 0, "2- or 3-D"),
    ((2, 3, 4, 16), [1, 1, 1, 16], 0, "2- or 3-D"),
    ((40, 16), [8, 16], 1, "cannot be the last"),
    ((40, 16), [8], 0, "one size per dimension"),
])
def test_descriptors_it_cannot_make_are_refused(shape, block, dim, message):
    with pytest.raises(ValueError, match=message):
        create_ragged_descriptor(np.zeros(shape, np.float32), block, ragged_dim=dim)


def test_a_ragged_kernel_compiles_for_hopper_without_a_gpu():
    x = np.zeros((40, 16), np.float32)
    desc = create_ragged_descriptor(x, [8, 16])
    compiled = double_slices.warmup(desc, desc, *_slices(), BLOCK_ROWS=8, grid=(3,), target="sm_90a")
    assert compiled.asm["cubin"][:4] == b"\x7fELF"


@pytest.mark.gpu
def test_a_ragged_copy_on_the_gpu_matches_numpy():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    x = torch.arange(40 * 16, dtype=torch.float32, device="cuda").reshape(40, 16)
    y = torch.full_like(x, -1)
    offsets, sizes = (torch.tensor(v, device="cuda") for v in _slices())
    double_slices[(3,)](create_ragged_descriptor(x, [8, 16]), create_ragged_descriptor(y, [8, 16]), offsets, sizes,
                        BLOCK_ROWS=8)
    np.testing.assert_array_equal(y.cpu().numpy(), _doubled(x.cpu().numpy()))
