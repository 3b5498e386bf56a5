"""Which of a kernel's pointer (and descriptor) arguments an address is computed from, and whether a
loop's stores write only arguments that no load of the loop reads. Triton's pipeliner loads ahead of
a loop's stores whatever they write; kiln's does where a store and the loop's loads share no
argument (fla's recurrences: a chunk's state stored to `h`, each step's inputs loaded from `k`, `v`,
`w`), so that no iteration reads what another wrote unless two arguments alias.
"""
from __future__ import annotations

from kiln.ir import OPS
from kiln.ir.core import Block
from kiln.ir.types import scalar_of, tensormap_type

# side effects a pipelined loop may have: stores to global memory (a `store` through pointers or a
# tensor descriptor)
STORES = ("store",)


def _addresses(v) -> bool:
    """Is `v` a pointer, a block of pointers or a TMA map (a value an address is computed from)?"""
    t = scalar_of(v.type)
    return t.is_ptr() or isinstance(t, tensormap_type)


def roots(value, fn) -> set | None:
    """The ids of `fn`'s pointer and descriptor arguments that address `value` is computed from, or None
    where that is not known: a pointer loaded from memory, made from an integer, or carried by a region this
    does not follow. Only the pointers are followed: an offset (`addptr`'s, loaded or not) moves an address
    within its argument's memory. A TMA map derived from a pointer argument (pointer_tma's), or made by the
    kernel, counts as that pointer."""
    args = {id(a): i for i, a in enumerate(fn.args)}
    found, seen, stack = set(), set(), [value]
    while stack:
        v = stack.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        if id(v) in args:
            derived = fn.arg_attrs[args[id(v)]].get("tma_of")
            if derived is not None:
                stack.append(fn.args[derived[0]])
            else:
                found.add(id(v))
            continue
        op = v.defining_op
        if op is None:  # a block's argument: a loop's carried value
            loop = v.owner.parent if isinstance(v.owner, Block) else None
            if getattr(loop, "name", None) != "for" or v.index == 0:
                return None
            stack += [loop.operands[2 + v.index], v.owner.ops[-1].operands[v.index - 1]]
            continue
        if op.name == "tensormap_create":  # a map the kernel makes: of its base's memory
            stack.append(op.operands[1])
            continue
        if op.name in ("load", "descriptor_load", "local_load") or OPS[op.name].side_effects:
            return None
        if op.regions:
            if op.name == "for":
                stack += [op.operands[3 + v.index], op.regions[0].ops[-1].operands[v.index]]
            elif op.name == "if":
                stack += [region.ops[-1].operands[v.index] for region in op.regions if region.ops]
            else:
                return None
            continue
        pointers = [x for x in op.operands if _addresses(x)]
        if not pointers:  # an address from no address (an integer cast to a pointer)
            return None
        stack += pointers
    return found


def stores_unread(body, fn) -> bool:
    """Does every side effect in loop body `body` (nested regions included) store, and only to
    arguments that none of the body's loads reads from? False where it has no store at all too, and
    where some address's arguments are not known."""
    stored, read = set(), set()
    for op in body.walk():
        if op.name in ("load", "descriptor_load"):
            got = roots(op.operands[0], fn)
            if got is None:
                return False
            read |= got
        elif OPS[op.name].side_effects or op.attrs.get("volatile"):
            if op.name not in STORES or op.attrs.get("volatile"):
                return False
            got = roots(op.operands[0], fn)
            if not got:
                return False
            stored |= got
    return bool(stored) and not stored & read
