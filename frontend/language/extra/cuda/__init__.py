"""`tl.extra.cuda`: CUDA's libdevice, as `from triton.language.extra.cuda import libdevice` finds it,
the special-register helpers and grid dependency control (`gdc_wait`, `gdc_launch_dependents`)."""
from . import gdc, libdevice  # noqa: F401
from .gdc import gdc_launch_dependents, gdc_wait  # noqa: F401
from .utils import globaltimer, num_threads, num_warps, smid  # noqa: F401
