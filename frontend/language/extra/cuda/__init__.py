"""`tl.extra.cuda`: CUDA's libdevice, as `from triton.language.extra.cuda import libdevice` finds it."""
from . import libdevice  # noqa: F401
