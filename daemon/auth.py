"""The shared-token check for a daemon that listens on TCP (a Unix socket relies on 0600)."""
from __future__ import annotations

import hmac

import grpc

HEADER = "authorization"
# The standard health service answers without the token: Kubernetes' gRPC probes (and
# grpc_health_probe) present none, and it tells only whether the daemon serves.
OPEN_PREFIX = "/grpc.health.v1.Health/"


def bearer(token: str) -> tuple[tuple[str, str]]:
    """The call metadata that presents `token`."""
    return ((HEADER, f"Bearer {token}"),)


class TokenInterceptor(grpc.ServerInterceptor):
    """Refuses every call but the health check that does not present the token, with UNAUTHENTICATED."""

    def __init__(self, token: str):
        self._expected = f"Bearer {token}".encode()

        def refuse(request, context):
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "this kiln daemon needs its token (KILN_DAEMON_TOKEN)")
        self._refuse = refuse

    def intercept_service(self, continuation, details):
        if details.method.startswith(OPEN_PREFIX):
            return continuation(details)
        presented = dict(details.invocation_metadata or ()).get(HEADER, "")
        if hmac.compare_digest(presented.encode(), self._expected):
            return continuation(details)
        handler = continuation(details)
        if handler is None:
            return None
        # answer in the shape the method expects (unary or streaming)
        if handler.request_streaming and handler.response_streaming:
            return grpc.stream_stream_rpc_method_handler(lambda it, ctx: self._refuse(None, ctx))
        if handler.request_streaming:
            return grpc.stream_unary_rpc_method_handler(lambda it, ctx: self._refuse(None, ctx))
        if handler.response_streaming:
            return grpc.unary_stream_rpc_method_handler(self._refuse)
        return grpc.unary_unary_rpc_method_handler(self._refuse)
