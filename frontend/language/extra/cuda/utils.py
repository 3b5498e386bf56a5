"""`tl.extra.cuda` helpers: the launch shape as constants, special registers as inline PTX (GPU only)."""
from __future__ import annotations

from ... import semantic
from ...core import builtin, constexpr, int32, int64


@builtin
def num_warps():
    """The kernel's num_warps, a compile-time constant."""
    from kiln import config  # kiln.language is imported before kiln.config exists
    return constexpr(int(semantic.state.options.get("num_warps", config.DEFAULT_NUM_WARPS)))


@builtin
def num_threads():
    """The threads of one program: num_warps * 32."""
    return constexpr(num_warps().value * 32)


@builtin
def globaltimer():
    """The GPU's global nanosecond timer (%globaltimer), as int64."""
    return semantic.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], int64, False, 1)


@builtin
def smid():
    """The index of the SM running this program (%smid), as int32."""
    return semantic.inline_asm_elementwise("mov.u32 $0, %smid;", "=r", [], int32, False, 1)
