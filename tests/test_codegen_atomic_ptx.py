"""Each element's atomic is one PTX `atom` carrying the op's ordering and scope, spelled as Triton spells
it (`atom.global.<scope>.<sem>.<op>.<type>`, compare-and-swap `atom.global.<sem>.<scope>.cas.b<bits>`;
upstream's test_atomic_rmw and test_atomic_cas read it), for every type an atom takes; bf16 adds before
sm_90 are LLVM's compare-and-swap loop with the ordering kept (codegen/lower/memory.py)."""
import numpy as np
import pytest

import kiln
import kiln.language as tl


@kiln.jit
def _atomics(Z, X, OP: tl.constexpr, SEM: tl.constexpr, SCOPE: tl.constexpr):
    offs = tl.arange(0, 4)
    x = tl.load(X + offs)
    if OP == "add":
        tl.atomic_add(Z + offs, x, sem=SEM, scope=SCOPE)
    elif OP == "max":
        tl.atomic_max(Z + offs, x, sem=SEM, scope=SCOPE)
    elif OP == "min":
        tl.atomic_min(Z + offs, x, sem=SEM, scope=SCOPE)
    elif OP == "and":
        tl.atomic_and(Z + offs, x, sem=SEM, scope=SCOPE)
    elif OP == "xchg":
        tl.atomic_xchg(Z + offs, x, sem=SEM, scope=SCOPE)
    else:
        tl.atomic_cas(Z + offs, x, x + 1, sem=SEM, scope=SCOPE)


def _ptx(dtype, op, sem="acq_rel", scope="gpu", target="sm_90a"):
    a = np.zeros(4, dtype) if dtype != "bf16" else kiln.reinterpret(np.zeros(4, np.uint16), tl.bfloat16)
    return _atomics.warmup(a, a, OP=op, SEM=sem, SCOPE=scope, grid=(1,), target=target).asm["ptx"]


@pytest.mark.parametrize("dtype, op, instruction", [
    (np.float32, "add", "add.f32"), (np.float64, "add", "add.f64"), (np.float16, "add", "add.noftz.f16"),
    ("bf16", "add", "add.noftz.bf16"), (np.int32, "add", "add.u32"), (np.int64, "add", "add.u64"),
    (np.uint32, "max", "max.u32"), (np.int64, "min", "min.s64"), (np.uint64, "and", "and.b64"),
    (np.int32, "xchg", "exch.b32"), (np.float64, "xchg", "exch.b64"),
])
@pytest.mark.parametrize("sem, scope", [("acq_rel", "gpu"), ("relaxed", "cta"), ("release", "sys"),
                                        ("acquire", "gpu")])
def test_an_rmw_is_one_ordered_scoped_atom(dtype, op, instruction, sem, scope):
    ptx = _ptx(dtype, op, sem, scope)
    assert f"atom.global.{scope}.{sem}.{instruction} " in ptx
    assert "fence." not in ptx and "atom.global.cas" not in ptx


@pytest.mark.parametrize("dtype, bits", [(np.int16, 16), (np.float32, 32), (np.uint64, 64)])
def test_a_compare_and_swap_is_one_ordered_scoped_atom(dtype, bits):
    assert f"atom.global.acquire.cta.cas.b{bits} " in _ptx(dtype, "cas", "acquire", "cta")


@pytest.mark.parametrize("target, wanted", [("sm_80", "atom.acq_rel.gpu.global.cas.b32"),
                                            ("sm_90a", "atom.global.gpu.acq_rel.add.noftz.bf16")])
def test_bf16_adds_before_hopper_are_a_compare_and_swap_loop_keeping_the_order(target, wanted):
    ptx = _ptx("bf16", "add", target=target)
    assert wanted in ptx and "fence." not in ptx
