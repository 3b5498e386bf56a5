"""Block IR: the typed SSA form that the frontend builds and codegen and the interpreter consume."""
from .core import Block, Builder, Function, Loc, Operation, Value
from .ops import OPS
from .parser import IRParseError, copy_function, parse_function
from .printer import print_function
from .types import block_type, dtype, pointer_type, parse_type
from .verifier import VerificationError, verify


def canonical_bytes(fn: Function) -> bytes:
    """A deterministic serialization of `fn` (its full text form) for hashing."""
    return print_function(fn, locs=True).encode()
