"""`triton.profiler.data` (proton's): a session's profile read back without writing its file."""
from __future__ import annotations


def get(session: int | None = 0, phase: int = 0):
    """The profile of `session` so far as proton's hatchet JSON (`[tree, devices]`, each node
    `{"frame", "metrics", "children"}`); None for no session, as proton's. kiln keeps one phase, 0."""
    from . import _chosen
    if session is None:
        return None
    if phase != 0:
        raise ValueError(f"kiln.profiler keeps one phase of data, 0, not {phase!r}")
    return _chosen(session)[0].to_json()
