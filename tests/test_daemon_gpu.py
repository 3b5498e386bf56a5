"""On a GPU: a cubin compiled by real codegen through the daemon loads and runs."""
import ctypes

import pytest

pytestmark = pytest.mark.gpu


def _gpu():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    pytest.importorskip("cuda.bindings.driver")
    return torch


def test_daemon_cubin_runs(tmp_path):
    torch = _gpu()
    from cuda.bindings import driver

    from kiln.cache import Cache
    from kiln.daemon import create_server
    from kiln.daemon.client import Client
    from test_daemon import kernel_ir

    major, minor = torch.cuda.get_device_capability()
    target = f"sm_{major}{minor}" + ("a" if major == 9 else "")
    server, port = create_server("127.0.0.1:0", workers=1, cache=Cache(tmp_path / "c"))
    server.start()
    try:
        with Client(f"127.0.0.1:{port}") as client:
            reply = client.compile(kernel_ir("scale3", scale=3), target, {"num_warps": 4})
    finally:
        server.stop(0)
    assert reply.cubin

    x = torch.arange(64, dtype=torch.float32, device="cuda")
    expected = x * 3
    torch.cuda.synchronize()

    def check(result):
        err, value = result[0], result[1:]
        assert err == driver.CUresult.CUDA_SUCCESS, err
        return value[0] if len(value) == 1 else value
    module = check(driver.cuModuleLoadData(reply.cubin))
    function = check(driver.cuModuleGetFunction(module, b"scale3"))
    arg = ctypes.c_void_p(x.data_ptr())
    params = (ctypes.c_void_p * 1)(ctypes.addressof(arg))
    stream = torch.cuda.current_stream().cuda_stream
    check(driver.cuLaunchKernel(function, 1, 1, 1, 128, 1, 1, 0, stream, ctypes.addressof(params), 0))
    torch.cuda.synchronize()
    assert torch.equal(x, expected)
    check(driver.cuModuleUnload(module))
