"""A NumPy interpreter of block IR: runs kernels on the CPU, one program at a time,
each op on the whole block, against the caller's NumPy arrays or CPU tensors."""
from .errors import InterpreterError
from .run import run

__all__ = ["run", "InterpreterError"]
