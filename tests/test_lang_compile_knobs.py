"""Triton's options and knobs over fp32 arithmetic, as its CUDA backend takes them:
`enable_reflect_ftz` (a launch option: libdevice's flush-to-zero paths and the approximate roots'
.ftz forms), `knobs.language.default_fp_fusion` (enable_fp_fusion where a launch does not say it)
and `knobs.language.fp32_default` (the input precision of a dot that names none)."""
import re

import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.dropin import knobs


@kiln.jit
def _exp2(data):
    ptrs = data + tl.arange(0, 128)
    tl.store(ptrs, tl.math.exp2(tl.load(ptrs)) + tl.sqrt(tl.load(ptrs)))


def _mul_add():
    """A new kernel each time (as upstream's test defines it in the test): a kernel already built in
    this process keeps its build when the knob changes (Triton re-reads the knob at every launch)."""
    @kiln.jit
    def mul_add(data):
        ptrs = data + tl.arange(0, 128)
        tl.store(ptrs, tl.load(ptrs) * 1.5 + 1.0)
    return mul_add


@kiln.jit
def _dot(a_ptr, out_ptr):
    r = tl.arange(0, 16)
    a = tl.load(a_ptr + r[:, None] * 16 + r[None, :])
    tl.store(out_ptr + r[:, None] * 16 + r[None, :], tl.dot(a, a))


@pytest.fixture
def language_knobs():
    saved = (knobs.language.default_fp_fusion, knobs.language.fp32_default)
    yield knobs.language
    knobs.language.default_fp_fusion, knobs.language.fp32_default = saved


def _ptx(kernel, *args, **options):
    return kernel.warmup(*args, grid=(1,), target="sm_90a", **options).asm["ptx"]


@pytest.mark.parametrize("ftz", [False, True])
def test_enable_reflect_ftz(ftz):
    ptx = _ptx(_exp2, np.zeros(128, np.float32), enable_reflect_ftz=ftz)
    assert (re.search(r"ex2\.approx\.ftz\.f32", ptx) is not None) == ftz
    assert (re.search(r"sqrt\.approx\.ftz\.f32", ptx) is not None) == ftz
    assert re.search(r"(ex2|sqrt)\.approx\.f32", ptx) is not None or ftz


@pytest.mark.parametrize("fusion", [False, True])
def test_default_fp_fusion_knob(language_knobs, fusion):
    language_knobs.default_fp_fusion = fusion
    found_fma = re.search(r"(mad|fma)\.r[nzmp]\.(ftz\.)?f32", _ptx(_mul_add(), np.zeros(128, np.float32))) is not None
    assert found_fma == fusion
    # a launch that says it wins over the knob
    said = _ptx(_mul_add(), np.zeros(128, np.float32), enable_fp_fusion=not fusion)
    assert (re.search(r"(mad|fma)\.r[nzmp]\.(ftz\.)?f32", said) is not None) == (not fusion)


@pytest.mark.parametrize("default, precision", [(None, "tf32"), ("ieee", "ieee"), ("tf32x3", "tf32x3")])
def test_fp32_default_knob_is_a_dots_default_precision(language_knobs, default, precision):
    from kiln.ttir import kernel_with_calls
    language_knobs.fp32_default = default
    fn = kernel_with_calls(_dot, (np.zeros(256, np.float32), np.zeros(256, np.float32)))
    assert [op.attrs["input_precision"] for op in fn.walk() if op.name == "dot"] == [precision]


@pytest.mark.parametrize("arch, target", [("sm80", "sm_80"), ("sm89", "sm_89"), ("sm90", "sm_90a")])
def test_override_arch_names_the_target_every_compile_is_for(arch, target, monkeypatch):
    """knobs.runtime.override_arch (TRITON_OVERRIDE_ARCH) as Triton's CUDA backend reads it; KILN_TARGET comes first."""
    from kiln.runtime import cuda_driver
    monkeypatch.delenv("KILN_TARGET", raising=False)
    with knobs.runtime.scope():
        knobs.runtime.override_arch = arch
        assert cuda_driver.compile_target(0) == target
        monkeypatch.setenv("KILN_TARGET", "sm_86")
        assert cuda_driver.compile_target(0) == "sm_86"
        monkeypatch.delenv("KILN_TARGET")
        knobs.runtime.override_arch = "gfx942"
        with pytest.raises(ValueError, match=r"TRITON_OVERRIDE_ARCH must have the form \^sm\(\\d\+\)\$"):
            cuda_driver.compile_target(0)


def test_a_launch_s_arch_picks_the_target_its_warmup_builds_for(monkeypatch):
    """Triton's `arch=` option (`sm80`): warmup builds for that target with or without a GPU, num_ctas > 1 below
    sm_90 is refused as Triton refuses it, and a malformed name is Triton's ValueError."""
    monkeypatch.setenv("KILN_INTERPRET", "0")  # (the interpreter takes the option and builds nothing)
    data = np.zeros(128, np.float32)
    kernel = _mul_add()
    k80 = kernel.warmup(data, grid=(1,), arch="sm80")
    assert ".target sm_80" in k80.asm["ptx"] and k80.target_for(0) == "sm_80"
    assert ".target sm_90a" in kernel.warmup(data, grid=(1,), arch="sm90").asm["ptx"]
    with pytest.raises(ValueError, match=r"num_ctas > 1 requires NVIDIA SM90\+ \(Hopper\)"):
        kernel.warmup(data, grid=(1,), num_ctas=2, arch="sm80")
    with pytest.raises(ValueError, match="must have the form"):
        kernel.warmup(data, grid=(1,), arch="gfx942")
