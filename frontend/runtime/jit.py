"""`triton.runtime.jit` under kiln's names: the JIT function, its decorator and tensor reinterpretation."""
from ..jit import JITFunction, KernelInterface, constexpr_function, jit  # noqa: F401
from ..tensor_wrapper import TensorWrapper, reinterpret  # noqa: F401
