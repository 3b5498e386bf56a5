"""The node-wide compile service: gRPC server, compile worker pool, single flight.

    create_server(address, compile_fn)      build a server (tests bind port 0 or a socket)
    tiers.cached_compile(fn, target, opts)  what the runtime calls on an in-memory miss:
                                            node cache -> daemon -> compile in-process
    client.Client(address)                  Compile, CompileBatch, Lookup, Stats
    prewarm                                 manifests, replay of the node cache
    cli.main                                `kiln daemon|prewarm|cache ...`

Imported lazily, so that a worker process (`kiln.daemon.worker`) never loads gRPC.
"""
__all__ = ["DEFAULT_COMPILE_FN", "Server", "create_server"]


def __getattr__(name):
    if name in __all__:
        from . import server
        return getattr(server, name)
    raise AttributeError(f"module 'kiln.daemon' has no attribute {name!r}")
