"""A compile server that answers whatever a test tells it to: a daemon gone wrong, or
another user's server planted on our socket. Real gRPC on a real Unix socket."""
from concurrent import futures

import grpc

from kiln.proto import compiler_pb2 as pb
from kiln.proto import compiler_pb2_grpc
from kiln.proto.messages import metadata_to_proto


class _Answer(compiler_pb2_grpc.CompilerServicer):
    def __init__(self, reply):
        self.reply, self.calls = reply, 0

    def Compile(self, request, context):
        self.calls += 1
        return self.reply(request)


def serve(path: str, reply):
    """A started server on unix:`path` whose Compile returns `reply(request)`; (server, servicer)."""
    from grpc_health.v1 import health, health_pb2, health_pb2_grpc
    server = grpc.server(futures.ThreadPoolExecutor(4))
    servicer = _Answer(reply)
    compiler_pb2_grpc.add_CompilerServicer_to_server(servicer, server)
    checker = health.HealthServicer()
    checker.set("kiln.v1.Compiler", health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(checker, server)
    server.add_insecure_port(f"unix:{path}")
    server.start()
    return server, servicer


def response(key: str, metadata: dict, cubin: bytes = b"\x7fELF planted") -> pb.CompileResponse:
    return pb.CompileResponse(key=key, cache_status=pb.CACHE_HIT, cubin=cubin, ptx="// planted", kir="planted",
                              llir="planted", metadata=metadata_to_proto(metadata))
