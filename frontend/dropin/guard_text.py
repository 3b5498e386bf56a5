"""Dynamo's guards described without printing tensors (KILN_BRIEF_GUARD_TEXT, under graph sharing).

PyTorch 2.10-2.12 describe an identity guard (`___check_obj_id`) with `repr()` of the object it
checks, for the text of a guard-failure message. For a parameter that prints its values: a copy
from the GPU that waits for the device. An optimizer step guards on every parameter it updates,
so a rank built its guards in 0.4-1.3 s (0.3 s alone) on an H200 that the node's other ranks kept
busy; stack samples of those guard builds were mostly `Tensor.__repr__`. While Dynamo builds an
identity guard, a plain tensor's or parameter's repr is its kind, shape, dtype and device. The
guard is the same check (`id(x) == y`); only the text a failure shows differs. Later PyTorch
releases describe these guards by type alone, which this leaves as it is.
"""
from __future__ import annotations

import functools
import threading

_building = threading.local()  # `on` while this thread builds an identity guard


def brief_repr(tensor) -> str:
    """What a guard says of `tensor`: enough to tell which it is, nothing read from the device."""
    try:
        return f"{type(tensor).__name__}(shape={tuple(tensor.shape)}, dtype={tensor.dtype}, device={tensor.device})"
    except Exception:  # noqa: BLE001 - a tensor without storage metadata: its kind is enough
        return f"<{type(tensor).__name__}>"


def briefly(fn):
    """`fn`, during which tensors' reprs on this thread are `brief_repr`s."""
    @functools.wraps(fn)
    def call(*args, **kwargs):
        outer = getattr(_building, "on", False)
        _building.on = True
        try:
            return fn(*args, **kwargs)
        finally:
            _building.on = outer
    return call


def _repr_of(original):
    @functools.wraps(original)
    def __repr__(self, *args, **kwargs):
        if getattr(_building, "on", False):
            return brief_repr(self)
        return original(self, *args, **kwargs)
    __repr__.kiln_brief = True
    return __repr__


def install(guards) -> None:
    """Run on `torch._dynamo.guards` once imported: its identity guards describe tensors briefly."""
    import torch

    builder = getattr(guards, "GuardBuilder", None)
    if builder is None or not hasattr(builder, "id_match_unchecked"):
        return  # a PyTorch whose guards kiln does not know: as they are
    if getattr(builder.id_match_unchecked, "kiln_brief", False):
        return
    for cls in (torch.Tensor, torch.nn.Parameter):
        if "__repr__" in vars(cls) and not getattr(vars(cls)["__repr__"], "kiln_brief", False):
            cls.__repr__ = _repr_of(vars(cls)["__repr__"])
    builder.id_match_unchecked = briefly(builder.id_match_unchecked)
    builder.id_match_unchecked.kiln_brief = True
