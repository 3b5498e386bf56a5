"""Triton 3.9's tl.atomic_load and tl.atomic_store: values on the interpreter against NumPy, their
orderings in the block IR and in the PTX for sm_80 and sm_90a (assembled by nvJitLink), and the
passes leaving them where the kernel put them."""
import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.compiler import ASTSource, compile as triton_compile
from kiln.runtime import GPUTarget


@kiln.jit
def _publish(data_ptr, flag_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.atomic_store(data_ptr + offs, tl.load(out_ptr + offs) * 2, sem="relaxed")
    tl.atomic_store(flag_ptr, 1)  # release, gpu
    seen = tl.atomic_load(flag_ptr)  # acquire, gpu
    got = tl.atomic_load(data_ptr + offs, mask=offs < N - 1, sem="relaxed", scope="sys")
    tl.store(out_ptr + offs, tl.where(offs < N - 1, got, -1.0) + seen)


def test_atomic_store_then_load_round_trips():
    data, flag = np.zeros(16, np.float32), np.zeros(1, np.int32)
    out = np.arange(16, dtype=np.float32)
    _publish[(1,)](data, flag, out, N=16)
    np.testing.assert_array_equal(data, np.arange(16) * 2)
    assert flag[0] == 1
    want = np.where(np.arange(16) < 15, np.arange(16) * 2.0, -1.0) + 1
    np.testing.assert_array_equal(out, want)


@kiln.jit
def _bad_sem(p):
    tl.atomic_load(p, sem="release")


@kiln.jit
def _bad_scope(p):
    tl.atomic_store(p, 1, scope="cluster")


def test_orderings_a_load_or_store_cannot_take_are_compile_errors():
    with pytest.raises(kiln.CompilationError, match="atomic_load: sem must be one of"):
        _bad_sem[(1,)](np.zeros(1, np.int32))
    with pytest.raises(kiln.CompilationError, match="atomic_store: scope must be one of"):
        _bad_scope[(1,)](np.zeros(1, np.int32))


@kiln.jit
def _spin(flag_ptr, data_ptr, out_ptr, N: tl.constexpr):
    while tl.atomic_load(flag_ptr, sem="acquire") == 0:
        pass
    offs = tl.arange(0, N)
    tl.store(out_ptr + offs, tl.atomic_load(data_ptr + offs, sem="relaxed", scope="cta"))
    tl.atomic_store(flag_ptr, 0, sem="relaxed", scope="sys")


def _compile(fn, signature, constants, arch):
    return triton_compile(ASTSource(fn, signature, constants), target=GPUTarget("cuda", arch, 32))


@pytest.mark.parametrize("arch", [80, 90])
def test_the_ptx_carries_each_ordering_and_assembles(arch):
    kernel = _compile(_spin, {"flag_ptr": "*i32", "data_ptr": "*fp32", "out_ptr": "*fp32", "N": "constexpr"},
                      {"N": 128}, arch)
    ptx, kir = kernel.asm["ptx"], kernel.asm["kir"]
    assert "ld.acquire.gpu.global" in ptx and "ld.relaxed.cta.global" in ptx and "st.relaxed.sys.global" in ptx
    assert kernel.asm["cubin"][:4] == b"\x7fELF"
    assert 'sem = "acquire"' in kir and 'scope = "cta"' in kir
    # the spin loop's load stays in the loop: a hoisted one would spin forever on a stale value
    loop = kir[kir.index("while"):]
    assert 'sem = "acquire"' in loop


def test_the_verifier_refuses_an_ordering_a_load_cannot_have():
    from kiln.ir import parse_function, verify
    text = ('kernel @k(%0: ptr<int32>) {\n  %1 = load %0 {scope = "gpu", sem = "release", volatile = true} : int32\n'
            '  return\n}\n')
    with pytest.raises(Exception, match="sem must be one of"):
        verify(parse_function(text))


@kiln.jit
def _poll_ready(flags_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    ok = tl.atomic_poll(flags_ptr + offs, 7)
    tl.store(out_ptr + offs, ok.to(tl.int32))
    tl.store(out_ptr + N, tl.atomic_poll(flags_ptr, 7, sem="relaxed", scope="sys").to(tl.int32))


def test_atomic_poll_returns_at_once_where_every_value_is_there():
    flags = np.full(32, 7, np.int32)
    out = np.zeros(33, np.int32)
    _poll_ready[(1,)](flags, out, N=32)
    np.testing.assert_array_equal(out, 1)


@kiln.jit
def _poll_timed(flags_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(out_ptr + offs, tl.atomic_poll(flags_ptr + offs, 1, timeout_ns=1000).to(tl.int32))


def test_atomic_poll_with_a_timeout_reads_the_global_timer_in_a_spin_loop():
    kernel = _compile(_poll_timed, {"flags_ptr": "*i64", "out_ptr": "*i32", "N": "constexpr"}, {"N": 64}, 90)
    ptx = kernel.asm["ptx"]
    assert "%globaltimer" in ptx and "ld.acquire.gpu.global" in ptx
    assert ptx.count("ld.acquire.gpu.global") >= 2  # the first read of every value, and the loop's
    with pytest.raises(kiln.CompilationError, match="16-, 32- or 64-bit integers"):
        _compile(_poll_timed, {"flags_ptr": "*fp32", "out_ptr": "*i32", "N": "constexpr"}, {"N": 64}, 90)


@kiln.jit
def _wide(p_ptr, q_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.atomic_store(q_ptr + offs, tl.atomic_load(p_ptr + offs) + 1)


@pytest.mark.parametrize("dtype", ["*i64", "*fp64", "*u64"])
def test_a_64_bit_atomic_access_reads_and_writes_each_element_whole(dtype):
    """Plain loads move 64-bit elements as pairs of 32-bit words; an atomic one must not tear them."""
    ptx = _compile(_wide, {"p_ptr": dtype, "q_ptr": dtype, "N": "constexpr"}, {"N": 256}, 90).asm["ptx"]
    loads = [line for line in ptx.splitlines() if "ld.acquire.gpu.global" in line]
    stores = [line for line in ptx.splitlines() if "st.release.gpu.global" in line]
    assert loads and stores
    assert all(".b64" in line and ".b32" not in line for line in loads + stores), loads + stores


@kiln.jit
def _handoff(data_ptr, flag_ptr, out_ptr, ok_ptr, N: tl.constexpr):
    """Program 1 publishes a block and raises a flag with release; program 0 polls the flag with
    acquire and must then see the whole block."""
    offs = tl.arange(0, N)
    if tl.program_id(0) == 1:
        tl.store(data_ptr + offs, offs.to(tl.float32) + 1)
        tl.debug_barrier()  # every thread's stores before the one thread's release (as in Triton)
        tl.atomic_store(flag_ptr, 1)
    else:
        seen = tl.atomic_poll(flag_ptr, 1, timeout_ns=2_000_000_000)
        tl.store(ok_ptr, seen.to(tl.int32))
        tl.store(out_ptr + offs, tl.load(data_ptr + offs))


@pytest.mark.gpu
def test_a_release_store_and_an_acquire_poll_hand_a_block_over_on_the_gpu(cuda_torch):
    torch = cuda_torch
    for _ in range(20):
        data = torch.zeros(1024, device="cuda")
        flag, ok = torch.zeros(1, dtype=torch.int32, device="cuda"), torch.zeros(1, dtype=torch.int32, device="cuda")
        out = torch.full((1024,), -1.0, device="cuda")
        _handoff[(2,)](data, flag, out, ok, N=1024)
        torch.cuda.synchronize()
        assert ok.item() == 1
        torch.testing.assert_close(out, torch.arange(1024, device="cuda", dtype=torch.float32) + 1, rtol=0, atol=0)
