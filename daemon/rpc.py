"""The gRPC side of the service: how its methods are registered, and how a handler waits.

Bytes that are not a request message reach the method as `Undecodable` (gRPC itself would
answer INTERNAL), and a handler waits for its compiles only as long as its client does:
`completed` stops when the RPC ends (the client cancelled or went away) or its deadline
passes, so that the caller can leave the compiles it joined.
"""
from __future__ import annotations

import queue
import time

import grpc

from kiln.proto import compiler_pb2 as pb

DEFAULT_DEADLINE_S = 600.0  # for a request that names none (gRPC then reports no time left as ~forever)
_SERVICE = pb.DESCRIPTOR.services_by_name["Compiler"]


class Undecodable:
    """What a method receives for bytes that are not its request message."""

    def __init__(self, error: str):
        self.error = error


def add_to_server(service, server: grpc.Server) -> None:
    """Serve `kiln.v1.Compiler` as the generated `add_CompilerServicer_to_server` does, but with
    request parsers that never raise."""
    handlers = {}
    for method in _SERVICE.methods:
        make = grpc.unary_stream_rpc_method_handler if method.server_streaming else grpc.unary_unary_rpc_method_handler
        handlers[method.name] = make(getattr(service, method.name),
                                     request_deserializer=_parser(getattr(pb, method.input_type.name)),
                                     response_serializer=getattr(pb, method.output_type.name).SerializeToString)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(_SERVICE.full_name, handlers),))


def _parser(message_class):
    def parse(data: bytes):
        try:
            return message_class.FromString(data)
        except Exception as e:  # noqa: BLE001 - whatever the bytes trip over, they are the request's fault
            return Undecodable(f"not a {message_class.DESCRIPTOR.full_name}: {type(e).__name__}: {e}")
    return parse


def time_left(context) -> float:
    left = context.time_remaining()
    return DEFAULT_DEADLINE_S if left is None else max(0.0, min(left, DEFAULT_DEADLINE_S))


def completed(futures, context):
    """`futures` as they complete, until the RPC ends or its deadline passes; the caller
    then finds some of them not done."""
    done: queue.SimpleQueue = queue.SimpleQueue()
    ended = object()
    if not context.add_callback(lambda: done.put(ended)):
        return  # the RPC is over already
    for future in futures:
        future.add_done_callback(done.put)
    deadline = time.monotonic() + time_left(context)
    for _ in range(len(futures)):
        try:
            future = done.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            return
        if future is ended:
            return
        yield future


def gone(context, what: str) -> tuple[grpc.StatusCode, str]:
    """The status for a request that stopped waiting: its deadline passed, or its client left."""
    if context.is_active():
        return grpc.StatusCode.DEADLINE_EXCEEDED, f"the {what} outlasted the request's deadline"
    return grpc.StatusCode.CANCELLED, "the client went away"
