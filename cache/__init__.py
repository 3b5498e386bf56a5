"""The node-wide content-addressed cache of compiled kernels (`kiln.cache.Cache`).

Its names load on first use: `kiln.cache.env`, which `import kiln` reads its switches from, must not
bring in diskcache and SQLite with it."""

__all__ = ["ArchiveError", "Cache", "ImportReport", "digest"]
_HOME = {"ArchiveError": "archive", "ImportReport": "archive", "Cache": "store", "digest": "store"}


def __getattr__(name: str):
    if name not in _HOME:
        raise AttributeError(f"module 'kiln.cache' has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(f".{_HOME[name]}", __name__), name)
    globals()[name] = value
    return value
