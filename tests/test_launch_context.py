"""A launch on a thread where no CUDA context is current (autograd's backward thread on device 0) fails
with CUDA_ERROR_INVALID_CONTEXT; the kernel then makes the device's primary context current and launches
again (tests/test_gpu_threads.py runs it on the GPU). Here the retry itself, on the CPU, with a launcher
that fails as cuLaunchKernel does on such a thread."""


def test_a_launch_refused_for_want_of_a_context_makes_it_current_and_launches_again(monkeypatch):
    from kiln import compiler
    from kiln.runtime import cuda_driver

    made_current, calls = [], []

    def launcher(grid, args, stream):
        calls.append(grid)
        if not made_current:
            raise cuda_driver.CudaError("launching kernel k failed: CUDA_ERROR_INVALID_CONTEXT", 201)
    kernel = compiler.CompiledKernel.__new__(compiler.CompiledKernel)
    kernel.launchers, kernel.few_programs, kernel.split_launchers = {0: launcher}, {}, {}
    monkeypatch.setattr(compiler.config, "interpret", lambda: False)
    monkeypatch.setattr(cuda_driver, "device_and_stream", lambda: (0, 0))
    monkeypatch.setattr(cuda_driver, "ensure_context", lambda device: made_current.append(device))
    kernel._launch((2, 1, 1), [], None)
    assert made_current == [0] and calls == [(2, 1, 1)] * 2

