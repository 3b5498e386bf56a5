"""`triton.runtime.interpreter` under the drop-in. Under TRITON_INTERPRET=1 Triton's @jit makes an
`InterpretedFunction`; kiln's @jit makes a JITFunction that interprets itself in that mode, so no
kernel of kiln's is an InterpretedFunction and code that asks (PyTorch's Inductor and its custom-op
library do) treats kiln's kernels as compiled ones, which they are to it. The class stays for code that
names it or wraps a function in it: that gives a kiln JITFunction, interpreted where the mode says."""
from __future__ import annotations

from .jit import JITFunction


class InterpretedFunction(JITFunction):
    """A kernel run by the interpreter, as Triton's interpreter wraps one: here a kiln JITFunction."""
