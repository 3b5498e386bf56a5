"""Peak figures of the current GPU from its properties, as `triton.testing` offers them
(`get_dram_gbps`, `get_max_tensorcore_tflops`, `get_max_simd_tflops`): PyTorch's Inductor
reads them to estimate kernel run times when it schedules and autotunes.

An SM has four sub-cores; per clock each does a fixed number of operations per data type
(tensor cores from sm_80 on: 256 for tf32/int32, 512 for 16-bit, 1024 for 8-bit; before
sm_80 fp16 only, 256; FMA units: 32 for fp32, 64 for 16-bit). Memory is double data rate.
"""
from __future__ import annotations

SUBCORES_PER_SM = 4
_TENSOR_OPS = {"fp32": 256, "int32": 256, "fp16": 512, "bf16": 512, "int16": 512,
               "int8": 1024, "fp8e4nv": 1024, "fp8e4b15": 1024, "fp8e5": 1024}
_SIMD_OPS = {"fp32": 32, "fp16": 64, "bf16": 64}
_TORCH_NAMES = {"float32": "fp32", "int32": "int32", "float16": "fp16", "bfloat16": "bf16", "int16": "int16",
                "int8": "int8", "float8_e4m3fn": "fp8e4nv", "float8_e5m2": "fp8e5"}


def _name(dtype) -> str:
    """kiln's name of a kiln or PyTorch dtype (tl.float16 and torch.float16 alike)."""
    text = str(dtype).rsplit(".", 1)[-1]
    return _TORCH_NAMES.get(text, getattr(dtype, "name", text))


def _properties(device):
    from .runtime import cuda_driver, driver
    device = driver.active.get_current_device() if device is None else device
    props = driver.active.utils.get_device_properties(device)
    major = int(cuda_driver.target(device)[3:].rstrip("a")) // 10
    return props, major


def get_dram_gbps(device=None) -> float:
    """Peak DRAM bandwidth in GB/s: memory clock (kHz) x bus width (bits) x 2 transfers / 8."""
    props, _ = _properties(device)
    return props["mem_clock_rate"] * props["mem_bus_width"] * 2 / 8 / 1e6


def get_max_tensorcore_tflops(dtype, clock_rate, device=None) -> float:
    """Peak tensor-core TFLOP/s for `dtype` at `clock_rate` kHz."""
    props, major = _properties(device)
    name = _name(dtype)
    if major < 8:
        if name != "fp16":
            raise RuntimeError(f"tensor cores before sm_80 take fp16 only, not {dtype}")
        ops = 256
    elif name in _TENSOR_OPS:
        ops = _TENSOR_OPS[name]
    else:
        raise RuntimeError(f"dtype not supported by the tensor cores: {dtype}")
    return props["multiprocessor_count"] * SUBCORES_PER_SM * clock_rate * ops * 1e-9


def get_max_simd_tflops(dtype, clock_rate, device=None) -> float:
    """Peak FMA-unit TFLOP/s for `dtype` at `clock_rate` kHz."""
    props, major = _properties(device)
    name = _name(dtype)
    if name not in _SIMD_OPS or (major < 8 and name == "bf16"):
        raise RuntimeError(f"dtype not supported: {dtype}")
    return props["multiprocessor_count"] * SUBCORES_PER_SM * clock_rate * _SIMD_OPS[name] * 1e-9
