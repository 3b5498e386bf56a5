"""How much work one request may ask of the daemon, checked on the wire message before it
is decoded. Each limit is far above any real Triton kernel, and far below what would hold
a worker for minutes (a 500k-argument kernel once did for 300 s).

    MAX_ARGS            1,024 kernel arguments: CUDA passes at most 32 KiB of parameters
                        (4 KiB before CUDA 12.1), 512-4,096 pointers
    MAX_OPS             65,536 operations, nested regions included (flash attention: ~1,000)
    MAX_BLOCK_ELEMENTS  1,048,576 elements in one block, Triton's TRITON_MAX_TENSOR_NUMEL
    MAX_BLOCK_RANK      16 dimensions
    MAX_BATCH_ITEMS     4,096 kernels in one CompileBatch (`prewarm` sends more in several)

Arguments and block sizes beyond these are kernels no GPU runs: INVALID_ARGUMENT. Too many
ops or batch items is a real request that asks too much: RESOURCE_EXHAUSTED.
"""
from __future__ import annotations

from kiln.proto.convert import ConversionError

MAX_ARGS = 1024
MAX_OPS = 1 << 16
MAX_BLOCK_ELEMENTS = 1 << 20
MAX_BLOCK_RANK = 16
MAX_BATCH_ITEMS = 4096


class TooMuchWork(ConversionError):
    """A request over one of the limits; `code` is the gRPC status to answer with."""

    def __init__(self, message: str, code: str = "RESOURCE_EXHAUSTED"):
        super().__init__(message)
        self.code = code


def check_function(fn) -> None:
    """Raise TooMuchWork if the `kiln.v1.Function` message `fn` is over a limit."""
    if len(fn.args) > MAX_ARGS:
        raise TooMuchWork(f"{len(fn.args)} kernel arguments; at most {MAX_ARGS}", "INVALID_ARGUMENT")
    for arg in fn.args:
        _check_type(arg.type)
    ops, pending = 0, [fn.body]  # regions to walk, without recursion: nesting is the sender's to choose
    while pending:
        body = pending.pop()
        ops += len(body)
        if ops > MAX_OPS:
            raise TooMuchWork(f"more than {MAX_OPS} operations in one kernel")
        for op in body:
            for t in op.result_types:
                _check_type(t)
            for region in op.regions:
                for t in region.arg_types:
                    _check_type(t)
                pending.append(region.ops)


def check_batch(items: int) -> None:
    if items > MAX_BATCH_ITEMS:
        raise TooMuchWork(f"{items} kernels in one batch; at most {MAX_BATCH_ITEMS} (send several batches)")


def _check_type(t) -> None:
    while True:  # a block of pointers to blocks is refused by the verifier; only its size is judged here
        kind = t.WhichOneof("kind")
        if kind == "block":
            shape = t.block.shape
            if len(shape) > MAX_BLOCK_RANK:
                raise TooMuchWork(f"a block of {len(shape)} dimensions; at most {MAX_BLOCK_RANK}", "INVALID_ARGUMENT")
            elements = 1
            for d in shape:
                elements *= max(d, 1)
                if elements > MAX_BLOCK_ELEMENTS:
                    raise TooMuchWork(f"a block of more than {MAX_BLOCK_ELEMENTS} elements "
                                      f"(shape {list(shape)[:MAX_BLOCK_RANK]})", "INVALID_ARGUMENT")
            t = t.block.element
        elif kind == "pointer":
            t = t.pointer.element
        else:
            return
