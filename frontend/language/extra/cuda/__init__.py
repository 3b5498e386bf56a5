"""`tl.extra.cuda`: CUDA's libdevice, as `from triton.language.extra.cuda import libdevice` finds it,
and the special-register helpers."""
from . import libdevice  # noqa: F401
from .utils import globaltimer, num_threads, num_warps, smid  # noqa: F401
