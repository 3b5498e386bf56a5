"""`tl.extra.cuda` helpers that read special registers, as inline PTX (GPU only)."""
from __future__ import annotations

from ... import semantic
from ...core import builtin, int32, int64


@builtin
def globaltimer():
    """The GPU's global nanosecond timer (%globaltimer), as int64."""
    return semantic.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], int64, False, 1)


@builtin
def smid():
    """The index of the SM running this program (%smid), as int32."""
    return semantic.inline_asm_elementwise("mov.u32 $0, %smid;", "=r", [], int32, False, 1)
