"""`triton.tools.mxfp` (kiln.tools.mxfp): OCP microscaling E2M1 values and E8M0 scales on the host."""
import pytest

torch = pytest.importorskip("torch")
from kiln.tools.mxfp import MXFP4Tensor, MXScaleTensor  # noqa: E402

E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def test_every_e2m1_code_converts_and_comes_back():
    codes = torch.arange(16, dtype=torch.uint8)
    fp4 = MXFP4Tensor(size=(16,))
    fp4.data = codes
    values = fp4.to(torch.float32)
    assert values.tolist() == E2M1 + [-v for v in E2M1]
    assert torch.equal(MXFP4Tensor(values).data, codes)  # -0.0 keeps its sign bit


def test_from_float_rounds_to_nearest_even_and_clamps():
    values = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 0.26, 6.5, 1e9, float("inf"), float("-inf"),
                           float("nan"), -0.1])
    got = MXFP4Tensor(values).to(torch.float32).tolist()
    assert got[:7] == [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0]  # ties go to the even code
    assert got[7:] == [0.5, 6.0, 6.0, 6.0, -6.0, 6.0, -0.0]


@pytest.mark.parametrize("shape, dim", [((5,), 0), ((6, 7), 1), ((3, 4, 9), 2), ((7, 2), 0)])
def test_packing_puts_the_even_element_in_the_low_nibble_and_round_trips(shape, dim):
    fp4 = MXFP4Tensor(size=shape).random()
    packed = fp4.to_packed_tensor(dim)
    assert packed.shape[dim] == (shape[dim] + 1) // 2 and packed.dtype == torch.uint8
    first = fp4.data.narrow(dim, 0, 1).squeeze(dim)
    assert torch.equal(packed.narrow(dim, 0, 1).squeeze(dim) & 0xF, first)
    assert torch.equal(fp4.unpack_packed_tensor(packed, dim, shape), fp4.data)


def test_e8m0_scales():
    scales = MXScaleTensor(torch.tensor([1.0, 3.9, 0.25, 2.0**127, 1e-45, 0.0, -2.0, float("nan"), float("inf")]))
    assert scales.data.tolist() == [127, 128, 125, 254, 0, 255, 255, 255, 255]
    back = scales.to(torch.float32)
    assert back[:3].tolist() == [1.0, 2.0, 0.25] and torch.isnan(back[5:]).all()
    drawn = MXScaleTensor(size=(2000,)).random(low=0.5, high=8.0).data
    assert drawn.min() >= 126 and drawn.max() <= 130 and len(drawn.unique()) == 5


def test_bad_input_is_a_clear_error():
    with pytest.raises(ValueError, match="either data"):
        MXFP4Tensor()
    with pytest.raises(TypeError, match="torch tensor"):
        MXScaleTensor([1.0, 2.0])
    with pytest.raises(AssertionError, match="cannot pack along dim 2"):
        MXFP4Tensor(size=(4, 4)).random().to_packed_tensor(2)
    with pytest.raises(ValueError, match="float32 only"):
        MXFP4Tensor(size=(2,)).random().to(torch.float16)
    with pytest.raises(ValueError, match="low must not be above high"):
        MXScaleTensor(size=(2,)).random(low=8.0, high=1.0)
