"""`tl.extra`: vendor libraries. `tl.extra.libdevice` and `tl.extra.cuda.libdevice` are one module."""
from . import cuda, libdevice  # noqa: F401
