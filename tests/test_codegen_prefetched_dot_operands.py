"""A load read only as a dot's operand keeps its coalesced layout (16-byte pieces): the dot stages
its operands in shared memory whatever their layout. The same holds when the prefetch pass carries
the load one iteration ahead: the loop's start and its yield lead to the body's value, which the
dot reads (kiln.codegen.passes.layouts, `only_dot_operand`). In the accumulator's layout instead,
fla's 16x32 fp16 tiles on 2 warps were loaded 4 bytes at a time, each piece its own 64-bit pointer."""
import pathlib
import re

import numpy as np

from kiln.ir import parse_function

from test_codegen_emulate import in_child


CORPUS = pathlib.Path(__file__).parent / "codegen_corpus"


def _dot_f16_padded():
    """The corpus's 32x32 fp16 K loop whose B is padded with ones past K: no ring copies a load whose
    `other` is not zero, so both loads are carried a loop ahead in registers."""
    from kiln.codegen import compile
    return compile(parse_function((CORPUS / "dot_f16_padded.kir").read_text()), "sm_90a")


def test_operands_loaded_a_loop_ahead_are_read_16_bytes_at_a_time():
    built = _dot_f16_padded()
    assert "mma.sync" in built.ptx and "cp.async" not in built.ptx
    # A's and B's 32x32 halves on 4 warps: one 16-byte load a thread each, before the loop and in it
    loads = re.findall(r"ld\.global\.([a-z0-9.]+)", built.ptx)
    assert loads == ["v4.b32"] * 4


def _emulated():
    from kiln.codegen.emulate import run_on_cpu
    rng = np.random.default_rng(11)
    k = 96
    a = rng.standard_normal((32, k)).astype(np.float16)
    b = rng.standard_normal((k, 32)).astype(np.float16)
    c = np.zeros((32, 32), np.float32)
    run_on_cpu(parse_function((CORPUS / "dot_f16.kir").read_text()), (1,), [a, b, c, k])
    return a, b, c


def test_the_prefetched_loop_matches_numpy():
    a, b, c = in_child(_emulated, timeout=300)
    np.testing.assert_allclose(c, a.astype(np.float32) @ b.astype(np.float32), rtol=1e-3, atol=1e-3)
