"""An integer constant whose value is not finite is malformed IR: the verifier refuses it, so a
daemon answers INVALID_ARGUMENT (it was INTERNAL: codegen's OverflowError) and keeps serving."""
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


def test_the_daemon_refuses_it_as_invalid(tmp_path):
    cache = Cache(tmp_path / "cache", size_limit=1 << 30)
    server, _ = create_server(f"unix:{tmp_path / 'd.sock'}", "kiln.codegen:compile", workers=1, cache=cache)
    server.start()
    try:
        with Client(f"unix:{tmp_path / 'd.sock'}") as client:
            with pytest.raises(grpc.RpcError) as error:
                client.compile(kernel("int32", "inf"), "sm_90a", {"num_warps": 4})
            assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert client.healthy()
    finally:
        server.stop(1)
        cache.close()
