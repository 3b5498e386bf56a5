"""Requests the 100,000-request soak of the real compiler answered INTERNAL (tests/test_daemon_fuzz.py,
seed 7; bench/results/2026-11-28-cpu-fuzz-soak-100k.md), cut down to the op that broke: the verifier
refuses each (INVALID_ARGUMENT), where codegen made LLVM IR that LLVM refused, looked an attribute up in
a table, or had LLVM abort the worker process (inline asm operands and constraints). PTX text in inline
asm that ptxas refuses is the request's, not kiln's: INVALID_ARGUMENT too."""
import grpc
import pytest

from kiln.cache import Cache
from kiln.daemon import create_server
from kiln.daemon.client import Client
from kiln.daemon.pool import JobFailed
from kiln.daemon.service import _asm_refused
from kiln.ir import parse_function
from kiln.ir.ops import _asm_slots
from kiln.ir.types import bfloat16, float16, float32, float64, int1, int8, int16, int32, int64, pointer_type
from kiln.ir.verifier import VerificationError, verify

HEAD = "kernel @k(%x: ptr<int32>, %f: ptr<fp32>, %n: int32) {\n"
TAIL = "  return\n}\n"


def asm(constraints: str, text: str = "mov.b32 $0, $1;", pack: int = 1, operand: str = "%v", types="<64xint32>"):
    return (HEAD + '  %ar = arange {end = 64, start = 0} : <64xint32>\n  %p0 = splat %x : <64xptr<int32>>\n'
            "  %p = addptr %p0, %ar : <64xptr<int32>>\n  %v = load %p : <64xint32>\n"
            "  %w = cast %v : <64xfp32>\n  %b = cast %v : <64xint8>\n"
            f"  %r = inline_asm {operand} {{asm = {text!r}, constraints = {constraints!r}, pack = {pack}}} : {types}\n"
            .replace("'", '"') + TAIL)


REFUSED = [  # (what the soak sent, cut down; the verifier's words)
    (HEAD + "  assert %x {message = \"m\"}\n" + TAIL, "condition must be int1, not ptr<int32>"),   # xor ptr, -1
    (HEAD + "  assert %n {message = \"m\"}\n" + TAIL, "condition must be int1, not int32"),        # br i32
    (HEAD + "  %c = cast %x : fp32\n" + TAIL, "pointer converts only to and from a pointer or an integer"),
    (HEAD + "  %c = bitcast %x : fp64\n" + TAIL, "pointer converts only to and from a pointer or an integer"),
    (HEAD + "  %c = atomic_cas %x, %n, %n {scope = \"gpu\", sem = \"acq\\u0014ire\"} : int32\n" + TAIL,
     "sem must be one of"),                                                                        # KeyError
    (HEAD.replace("@k", "@g.ther_histogram") + TAIL, "kernel name 'g.ther_histogram' is not an identifier"),
    (asm("ssssssss"), "constraint 'ssssssss' is none of"),                       # asm without outputs
    (asm("=r,r", pack=16, operand="%b", types="<64xint8>"), "name 1 outputs and 1 inputs"),  # 16 bytes: 4 words
    (asm("=q,q"), "constraint '=q' is none of"),                                 # LLVM aborts
    (asm("=r,n"), "constraint 'n' is none of"),                                  # LLVM fatal error
    (asm("=r,{r3}"), "constraint '{r3}' is none of"),                            # LLVM asserts
    (asm(" =r,r"), "constraint ' =r' is none of"),                               # LLVM: no outputs
    (asm("r,=r"), "outputs, then inputs, then clobbers"),
    (asm("=r,~{memory},r"), "outputs, then inputs, then clobbers"),
    (asm("=r,r,r"), "name 1 outputs and 2 inputs"),
    (asm("=r,0", operand="%w"), "input 0 is tied to output 0: a fp32 to a int32"),  # LLVM asserts
    (asm("=r,1"), "tied to output 1: of 1 outputs"),
    (asm("=r,r", text="mov.b32 $0, $5;"), "'$5;' in the asm: its operands are $0 to $1"),
    (asm("=r,r", text="mov.b32 $0, $1; $"), "'$' in the asm"),                   # LLVM: bad $ operand
    (asm("=r,r", text="mov.b32 $0, ${1:a};"), "'${1:a};' in the asm"),          # LLVM asserts
]


@pytest.mark.parametrize("text, words", REFUSED, ids=[w[:30] for _, w in REFUSED])
def test_the_verifier_refuses_what_reached_codegen(text, words):
    with pytest.raises(VerificationError) as refused:
        verify(parse_function(text))
    assert words in str(refused.value)


@pytest.mark.parametrize("constraints, text", [
    ("=r,r", "mov.b32 $0, $1;"),
    ("=r,r,~{memory}", "mov.b32 $0, ${1}; // $$"),
    ("=r, r", "mov.b32 $0, $1;"),      # spaced, as Triton's own tests write it
    ("=&r,0", "add.s32 $0, $0, $1;"),  # an input tied to the output, of its type
    ("=f,r", "mov.b32 $0, $1;"),
])
def test_inline_asm_that_codegen_lowers_still_verifies(constraints, text):
    verify(parse_function(asm(constraints, text)))


@pytest.mark.parametrize("dtype", [int1, int8, int16, int32, int64, float16, bfloat16, float32, float64,
                                   pointer_type(float32)])
@pytest.mark.parametrize("pack", [1, 2, 4, 8, 16])
def test_the_verifier_counts_asm_operands_as_codegen_lowers_them(dtype, pack):
    from kiln.codegen.lower.asm import _slots
    assert _asm_slots(dtype, pack) == _slots(dtype, pack)[1]


def test_ptxas_refusing_inline_asm_is_the_requests_error():
    """The soak's `sub.b32` on f32 registers: ptxas's error, answered INVALID_ARGUMENT; the same error
    from a kernel without inline asm stays INTERNAL (kiln's PTX)."""
    ptxas = JobFailed("INTERNAL", "PTXAssembleError: nvJitLink failed: ERROR_PTX_COMPILE (4) ptxas ...")
    with_asm = parse_function(asm("=r,r"))
    assert _asm_refused(ptxas, with_asm).code == "INVALID_ARGUMENT"
    assert _asm_refused(ptxas, parse_function(HEAD + TAIL)).code == "INTERNAL"
    died = JobFailed("INTERNAL", "the compile worker died (SIGSEGV); it was replaced")
    assert _asm_refused(died, with_asm).code == "INTERNAL"


def test_the_daemon_answers_ptxas_refused_inline_asm_as_invalid(tmp_path):
    cache = Cache(tmp_path / "cache", size_limit=1 << 30)
    server, _ = create_server(f"unix:{tmp_path / 'd.sock'}", "kiln.codegen:compile", workers=1, cache=cache)
    server.start()
    try:
        with Client(f"unix:{tmp_path / 'd.sock'}") as client:
            stored = "  %fp0 = splat %f : <64xptr<fp32>>\n  %fp = addptr %fp0, %ar : <64xptr<fp32>>\n  store %fp, %r\n"
            bad = parse_function(asm("=f,f", "sub.b32 $0, $1, $1;", operand="%w", types="<64xfp32>").replace(
                "  return", stored + "  return"))
            with pytest.raises(grpc.RpcError) as error:
                client.compile(bad, "sm_90a", {"num_warps": 4})
            assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT, error.value.details()
            assert "ptxas refused the PTX of a kernel with inline assembly" in error.value.details()
            assert client.healthy()
    finally:
        server.stop(1)
        cache.close()
