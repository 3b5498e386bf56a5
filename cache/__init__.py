"""The node-wide content-addressed cache of compiled kernels (`kiln.cache.Cache`)."""
from .archive import ArchiveError, ImportReport
from .store import Cache, digest

__all__ = ["ArchiveError", "Cache", "ImportReport", "digest"]
