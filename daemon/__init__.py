"""The node-wide compile service: gRPC server, compile worker pool, single flight.

Imported lazily, so that a worker process (`kiln.daemon.worker`) never loads gRPC.
"""
__all__ = ["DEFAULT_COMPILE_FN", "Server", "create_server"]


def __getattr__(name):
    if name in __all__:
        from . import server
        return getattr(server, name)
    raise AttributeError(f"module 'kiln.daemon' has no attribute {name!r}")
