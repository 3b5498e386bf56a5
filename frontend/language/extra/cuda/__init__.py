"""`tl.extra.cuda`: CUDA's libdevice, as `from triton.language.extra.cuda import libdevice` finds it,
the special-register helpers, grid dependency control (`gdc_wait`, `gdc_launch_dependents`) and the
fp8e4b15 conversions (`convert_custom_float8_sm70` / `_sm80`)."""
from . import gdc, libdevice  # noqa: F401
from .gdc import gdc_launch_dependents, gdc_wait  # noqa: F401
from .utils import (  # noqa: F401
    convert_custom_float8_sm70, convert_custom_float8_sm80, globaltimer, num_threads, num_warps, smid,
)
