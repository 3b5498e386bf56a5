"""A client of the compile daemon.

The gRPC channel is made on first use and made again in a process forked after that (a
PyTorch DataLoader worker, say): a channel does not survive fork(), a new one does.
"""
from __future__ import annotations

import os
from typing import Iterable, Iterator

import grpc

from kiln.cache import paths
from kiln.ir.core import Function
from kiln.proto import compiler_pb2 as pb
from kiln.proto import compiler_pb2_grpc
from kiln.proto.convert import function_to_proto
from kiln.proto.messages import options_to_proto

from .auth import bearer


def compile_request(fn: Function, target: str, options: dict, include_ir_dumps: bool = False,
                    encoded=None) -> pb.CompileRequest:
    """`encoded`: fn's `function_to_proto`, where the caller made it already."""
    return pb.CompileRequest(ir=function_to_proto(fn) if encoded is None else encoded, target=target,
                             options=options_to_proto(options), include_ir_dumps=include_ir_dumps)


_CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", -1),  # cubins can be large
    ("grpc.use_local_subchannel_pool", 1),      # see Client.stub
    # a daemon that is starting is a local process moments away: retry it soon, not after seconds
    ("grpc.initial_reconnect_backoff_ms", 100), ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 2000),
]


class PlaintextToken(ValueError):
    """A token about to leave over plaintext TCP."""


def _check_plaintext_token(address: str) -> None:
    """A token goes over TLS or a Unix socket (mode 0600). Plaintext TCP carries it in the clear, and
    on loopback too it goes to whoever holds the port: any user of the host can bind one the daemon
    is not bound to (it stopped, or never started). KILN_DAEMON_PLAINTEXT_TOKEN=1 sends it all the same."""
    from kiln.cache import env
    if address.startswith("unix:") or env.daemon_plaintext_token_ok():
        return
    raise PlaintextToken(f"not sending the daemon token to {address} over plaintext TCP (whoever holds the "
                         "port gets it, loopback too): set KILN_DAEMON_TLS_CA to the daemon's CA to speak TLS, use "
                         "its Unix socket, or set KILN_DAEMON_PLAINTEXT_TOKEN=1 to send it anyway")


class Client:
    """Talks to the daemon at `address` ("unix:/path" or "host:port")."""

    def __init__(self, address: str, token: str | None = None, timeout: float = 600.0, tls_ca=None):
        """`tls_ca`: a PEM file of the CA that signed the daemon's certificate: speak TLS and verify it.
        A token goes only over TLS or a Unix socket, unless KILN_DAEMON_PLAINTEXT_TOKEN=1 (PlaintextToken)."""
        if token and not tls_ca:
            _check_plaintext_token(address)
        self.address, self.timeout, self.tls_ca = address, timeout, tls_ca
        self._metadata = bearer(token) if token else None
        self._pid, self._channel, self._stub = None, None, None

    @property
    def stub(self) -> compiler_pb2_grpc.CompilerStub:
        if self._pid != os.getpid():
            if self.address.startswith("unix:"):  # a socket another user could have put there is refused
                paths.check_socket(self.address[len("unix:"):])
            # After fork the parent's channel belongs to the parent: leave it and make our own,
            # with a subchannel pool of its own, or gRPC hands back the parent's connection.
            self._pid = os.getpid()
            if self.tls_ca:
                from .tls import channel_credentials
                self._channel = grpc.secure_channel(self.address, channel_credentials(self.tls_ca), _CHANNEL_OPTIONS)
            else:
                self._channel = grpc.insecure_channel(self.address, options=_CHANNEL_OPTIONS)
            self._stub = compiler_pb2_grpc.CompilerStub(self._channel)
        return self._stub

    def compile(self, fn: Function, target: str, options: dict, include_ir_dumps: bool = False,
                timeout: float | None = None, encoded=None) -> pb.CompileResponse:
        """Compile (or fetch from the node cache); raises grpc.RpcError with the daemon's status.
        `encoded`: fn's `function_to_proto`, where the caller made it already."""
        return self.stub.Compile(compile_request(fn, target, options, include_ir_dumps, encoded),
                                 timeout=timeout or self.timeout, metadata=self._metadata)

    def compile_many(self, kernels: Iterable[tuple[Function, str, dict]],
                     timeout: float | None = None) -> Iterator[pb.CompileBatchItem]:
        """Compile many kernels in parallel on the pool; items come back as they finish."""
        batch = pb.CompileBatchRequest(requests=[compile_request(*k) for k in kernels])
        return self.stub.CompileBatch(batch, timeout=timeout or self.timeout, metadata=self._metadata)

    def lookup(self, key: str, include_ir_dumps: bool = False, timeout: float = 10.0) -> pb.CompileResponse | None:
        reply = self.stub.Lookup(pb.LookupRequest(key=key, include_ir_dumps=include_ir_dumps), timeout=timeout,
                                 metadata=self._metadata)
        return reply.result if reply.found else None

    def claim(self, key: str, holder: str, wait: float, timeout: float | None = None,
              if_free: bool = False, kind: str = "") -> pb.ClaimResponse:
        """STORED (read `key` from the node cache) or YOURS (compute it, store it, `release`);
        `if_free`: BUSY at once while another holder computes it; `kind`: "" a graph, "autotune"."""
        return self.stub.Claim(pb.ClaimRequest(key=key, holder=holder, pid=os.getpid(), wait_seconds=wait,
                                               if_free=if_free, kind=kind),
                               timeout=timeout or wait + 10.0, metadata=self._metadata)

    def renew(self, holder: str, keys: list[str], timeout: float = 5.0) -> list[str]:
        """Keep `holder`'s leases; the keys it lost."""
        return list(self.stub.Renew(pb.RenewRequest(holder=holder, keys=keys), timeout=timeout,
                                    metadata=self._metadata).lost)

    def release(self, holder: str, keys: list[str], stored: bool, timeout: float = 5.0) -> None:
        self.stub.Release(pb.ReleaseRequest(holder=holder, keys=keys, stored=stored), timeout=timeout,
                          metadata=self._metadata)

    def stats(self, timeout: float = 10.0) -> pb.StatsResponse:
        return self.stub.Stats(pb.StatsRequest(), timeout=timeout, metadata=self._metadata)

    def healthy(self, timeout: float = 2.0) -> bool:
        """Whether the daemon answers and serves compiles."""
        from grpc_health.v1 import health_pb2, health_pb2_grpc
        self.stub  # noqa: B018 - (re)make the channel in this process
        try:
            reply = health_pb2_grpc.HealthStub(self._channel).Check(
                health_pb2.HealthCheckRequest(service="kiln.v1.Compiler"), timeout=timeout, metadata=self._metadata,
                wait_for_ready=True)
        except grpc.RpcError:
            return False
        return reply.status == health_pb2.HealthCheckResponse.SERVING

    def close(self) -> None:
        if self._channel is not None and self._pid == os.getpid():
            self._channel.close()
        self._pid = self._channel = self._stub = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
