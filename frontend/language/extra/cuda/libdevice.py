"""`triton.language.extra.cuda.libdevice`: the same functions as `kiln.language.extra.libdevice`."""
from ..libdevice import *  # noqa: F401,F403
