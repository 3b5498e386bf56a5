"""An integer constant whose value is not finite, or a constant whose value is no number, is malformed
IR: the verifier refuses it, so a daemon answers INVALID_ARGUMENT (it was INTERNAL: codegen's
OverflowError, or `&=` on a string) and keeps serving."""
import grpc
import pytest

from kiln.cache import Cache
from kiln.daemon import create_server
from kiln.daemon.client import Client
from kiln.ir import parse_function
from kiln.ir.verifier import VerificationError, verify

KERNEL = "kernel @k(%x: ptr<T>) {\n  %c = constant {value = V} : T\n  store %x, %c\n  return\n}\n"


def kernel(dtype, value):
    return parse_function(KERNEL.replace("T", dtype).replace("V", value))


@pytest.mark.parametrize("value", ["inf", "-inf", "nan"])
def test_an_integer_constant_must_be_finite(value):
    with pytest.raises(VerificationError, match="integer constant cannot be"):
        verify(kernel("int32", value))
    verify(kernel("fp32", value))  # a float's infinities and NaN are values like any other


@pytest.mark.parametrize("dtype", ["int32", "fp32", "int1"])
@pytest.mark.parametrize("value", ['"7"', "[1, 2]", '"abc"'])
def test_a_constant_value_must_be_a_number(dtype, value):
    with pytest.raises(VerificationError, match="a constant's value is a number"):
        verify(kernel(dtype, value))


def test_the_daemon_refuses_it_as_invalid(tmp_path):
    cache = Cache(tmp_path / "cache", size_limit=1 << 30)
    server, _ = create_server(f"unix:{tmp_path / 'd.sock'}", "kiln.codegen:compile", workers=1, cache=cache)
    server.start()
    try:
        with Client(f"unix:{tmp_path / 'd.sock'}") as client:
            for bad in (kernel("int32", "inf"), kernel("int32", '"7"'), kernel("fp32", "[1]")):
                with pytest.raises(grpc.RpcError) as error:
                    client.compile(bad, "sm_90a", {"num_warps": 4})
                assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT, error.value.details()
            assert client.healthy()
    finally:
        server.stop(1)
        cache.close()


def test_a_client_does_not_compile_what_the_daemon_refused_as_malformed(tmp_path, monkeypatch):
    from kiln.daemon import tiers

    def never(fn, target, options):
        raise AssertionError("compiled in this process")
    cache = Cache(tmp_path / "daemon-cache", size_limit=1 << 30)
    server, _ = create_server(f"unix:{tmp_path / 'd.sock'}", "kiln.codegen:compile", workers=1, cache=cache)
    server.start()
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "client-cache"))
    monkeypatch.setenv("KILN_DAEMON", f"unix:{tmp_path / 'd.sock'}")
    monkeypatch.setattr(tiers, "_state", tiers._State())
    try:
        with pytest.raises(VerificationError, match="integer constant cannot be inf"):
            tiers.cached_compile(kernel("int32", "inf"), "sm_90a", {"num_warps": 4}, compile_fn=never)
    finally:
        server.stop(1)
        cache.close()


@pytest.mark.parametrize("text, words", [
    ('  print %c {prefix = [1, 2], hex = false}\n', "attribute 'prefix' must be a string"),
    ('  print %c {prefix = "x", hex = "no"}\n', "attribute 'hex' must be a bool"),
])
def test_an_attribute_of_the_wrong_type_is_malformed(text, words):
    """Each attribute name has one type in every op that takes it: a request's attribute of another type
    reached codegen (`'list' object has no attribute 'encode'`: INTERNAL, found by fuzzing the real compiler)."""
    source = KERNEL.replace("T", "int32").replace("V", "1").replace("  store %x, %c\n", text)
    with pytest.raises(VerificationError, match=words):
        verify(parse_function(source))
