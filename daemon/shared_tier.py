"""The daemon's side of the shared tier (`kiln.cache.remote`): read it after the node cache,
fill it from what a prewarm found in the node cache, report it in Stats.

Writing each compile through is one call in `CompilerService._landed`, after the waiters
have their answer.
"""
from __future__ import annotations

import logging

from kiln.cache.metadata import MetadataError, checked, expected
from kiln.cache.remote import summary
from kiln.proto import compiler_pb2 as pb

log = logging.getLogger("kiln.daemon")


def fetch(service, req) -> dict | None:
    """`req`'s result from the shared tier, copied into the node cache; None on a miss."""
    from .service import _result_from_cache

    found = service.remote.get(req.key)
    if found is None:
        return None
    artifacts, metadata, created = found
    try:
        checked(metadata, **expected(req.fn.name, req.target, req.options))
        result = _result_from_cache(artifacts, metadata)
    except (MetadataError, UnicodeDecodeError, KeyError) as e:  # bound to the key, but not this kernel's
        log.warning("key=%s event=remote_entry_refused error=%r", req.key[:16], str(e))
        return None
    try:
        service.cache.copy_result(req.key, artifacts, metadata, created)
    except Exception as e:  # noqa: BLE001 - a full disk must not fail the request
        log.error("key=%s event=cache_write_failed error=%r", req.key[:16], str(e))
    log.info("key=%s kernel=%s event=remote_hit", req.key[:16], req.fn.name)
    return result


def fill(service, keys: list[str]) -> int:
    """Write the node cache's entries of `keys` that the shared tier lacks; how many."""
    present = service.remote.has(keys)
    written = 0
    for key, there in zip(keys, present or ()):
        if there:
            continue
        hit = service.cache.get_result(key)
        if hit is not None and service.remote.put(key, *hit):
            written += 1
    return written


def stats_message(remote) -> pb.RemoteCacheStats:
    if remote is None:
        return pb.RemoteCacheStats()
    s = summary(remote.counts())
    lat = s["latency_ms"]
    return pb.RemoteCacheStats(
        url=remote.where, up=remote.up, hits=s["hits"], misses=s["misses"], refused=s["refused"], errors=s["errors"],
        skipped=s["skipped"], writes=s["writes"], read_mean_ms=lat["mean"],
        read_latency=pb.LatencyPercentiles(p50_ms=lat["p50"], p90_ms=lat["p90"], p99_ms=lat["p99"]))
