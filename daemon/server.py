"""Build the compile server: `create_server(address, compile_fn) -> (server, port)`.

Making is kept apart from serving (the caller starts it), so that tests bind port 0 or a
Unix socket of their own. The server offers `kiln.v1.Compiler`, the standard
`grpc.health.v1` health service and server reflection.
"""
from __future__ import annotations

import os
import socket
import warnings
from concurrent import futures
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from kiln.cache import Cache, paths
from kiln.cache.remote import RemoteCache
from kiln.proto import compiler_pb2

from .auth import TokenInterceptor
from .pool import WorkerPool
from .rpc import add_to_server
from .service import CompilerService

DEFAULT_COMPILE_FN = "kiln.codegen:compile"
SERVICE_NAME = compiler_pb2.DESCRIPTOR.services_by_name["Compiler"].full_name


class Server:
    """The gRPC server with its worker pool: start, then stop (which drains work in flight)."""

    def __init__(self, grpc_server: grpc.Server, service: CompilerService, health_servicer, address: str):
        self.grpc, self.service, self.health, self.address = grpc_server, service, health_servicer, address

    @property
    def pool(self) -> WorkerPool:
        return self.service.pool

    def start(self) -> "Server":
        self.grpc.start()
        return self

    def stop(self, grace: float | None = 10.0) -> None:
        """Refuse new RPCs, let those in flight finish (up to `grace` seconds), stop the workers."""
        self.health.enter_graceful_shutdown()
        self.grpc.stop(grace).wait()
        self.pool.close()


# An RPC holds one of these threads while it runs, and a compile or a rank's wait for another rank's
# graph or autotuning runs for seconds: a node's ranks (each with Inductor's compile threads, one
# per core) and their waits can hold more than a few dozen at once, and an RPC that would answer at
# once (a hit, a claim) then queued behind them (with 64 threads and 70 waiting claims a Stats call
# took 2.5 s, CPU, 2026-11-29). The pool starts threads only as RPCs need them.
RPC_THREADS = 1024


def create_server(address: str, compile_fn: str = DEFAULT_COMPILE_FN, *, workers: int | None = None,
                  cache: Cache | None = None, compile_timeout: float = 300.0,
                  max_request_bytes: int = 16 << 20, rpc_threads: int | None = None,
                  token: str | None = None, tls: grpc.ServerCredentials | None = None,
                  remote_cache: str | None = None) -> tuple[Server, int]:
    """A compile server bound to `address` ("unix:/path", or "host:port" with port 0 for any).

    `compile_fn` names the function the workers call ("module:function", with the
    signature of `kiln.codegen.compile`). With `token`, every call must present it (see
    `auth`): the way to listen on TCP; with `tls` (`tls.server_credentials`) it listens with
    TLS. `remote_cache` (a redis:// URL) is the shared tier it reads after the node cache and
    writes each compile through to. Returns the server, not yet started, and the bound TCP
    port (0 for a Unix socket).
    """
    cache = cache if cache is not None else Cache()
    remote = _shared_tier(remote_cache, cache) if remote_cache else None
    pool = WorkerPool(compile_fn, workers or default_workers(), compile_timeout)
    service = CompilerService(pool, cache, remote=remote)
    server = grpc.server(
        futures.ThreadPoolExecutor(rpc_threads or RPC_THREADS, thread_name_prefix="kiln-rpc"),
        options=[("grpc.max_receive_message_length", max_request_bytes),
                 ("grpc.max_send_message_length", -1),
                 ("grpc.so_reuseport", 0)],
        interceptors=[TokenInterceptor(token)] if token else None)
    add_to_server(service, server)  # bytes that are no message: INVALID_ARGUMENT, not INTERNAL
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    for name in ("", SERVICE_NAME):
        health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    reflection.enable_server_reflection(
        (SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME), server)
    try:
        port = _bind(server, address, tls)
    except BaseException:
        pool.close()
        raise
    return Server(server, service, health_servicer, address), port


def _shared_tier(url: str, cache: Cache) -> RemoteCache | None:
    """The shared tier at `url`, or None (with one warning) where it cannot be had, such as
    without a cluster key: the daemon then serves from its node cache alone."""
    try:
        return RemoteCache(url, counts_to=cache)
    except ValueError as e:  # NoClusterKey, a bad key file
        warnings.warn(f"kiln daemon: no shared tier ({e})", RuntimeWarning, stacklevel=3)
        return None


def default_workers() -> int:
    """One worker per core, up to 16: each holds LLVM (~150 MB), and a node rarely needs more."""
    return max(1, min(16, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))


def _bind(server: grpc.Server, address: str, tls: grpc.ServerCredentials | None = None) -> int:
    if not address.startswith("unix:"):
        return server.add_secure_port(address, tls) if tls else server.add_insecure_port(address)
    path = Path(address[len("unix:"):])
    paths.socket_dir(path.parent)
    if path.exists():
        _remove_stale_socket(path)
    old = os.umask(0o177)  # the socket is born 0600: only this user may compile through it
    try:
        server.add_insecure_port(address)
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    return 0


def _remove_stale_socket(path: Path) -> None:
    """Remove the socket a dead daemon left behind; refuse to take over a live one."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
    except (ConnectionRefusedError, FileNotFoundError):
        path.unlink(missing_ok=True)
        return
    finally:
        probe.close()
    raise RuntimeError(f"a daemon already listens on {path}")
