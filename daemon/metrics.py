"""An optional Prometheus endpoint: the numbers of `kiln daemon status`, through
prometheus-client (its text format and its HTTP server), read from the service at each scrape,
with every compile's latency as a histogram in seconds and `kiln_build_info`."""
from __future__ import annotations

import threading
import weakref

from prometheus_client import CollectorRegistry, Histogram, generate_latest, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

# From a small kernel's compile to the default compile timeout (300 s).
COMPILE_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


def families(stats) -> list:
    """A StatsResponse as metric families (a counter's samples gain the suffix `_total`)."""
    out = []
    for name, kind, value, help_text in (
        ("kiln_daemon_workers", "gauge", stats.workers, "compile worker processes"),
        ("kiln_daemon_busy_workers", "gauge", stats.busy_workers, "workers compiling now"),
        ("kiln_daemon_queue_depth", "gauge", stats.queue_depth, "compiles waiting for a worker"),
        ("kiln_daemon_requests", "counter", stats.requests, "compile requests"),
        ("kiln_daemon_cache_hits", "counter", stats.hits, "requests answered from the node cache"),
        ("kiln_daemon_cache_misses", "counter", stats.misses, "compiles run"),
        ("kiln_daemon_merged", "counter", stats.merged, "requests that joined a compile in flight"),
        ("kiln_daemon_errors", "counter", stats.errors, "requests that failed"),
        ("kiln_daemon_worker_restarts", "counter", stats.worker_restarts, "workers replaced"),
        ("kiln_cache_entries", "gauge", stats.cache.entries, "kernels in the node cache"),
        ("kiln_cache_bytes", "gauge", stats.cache.volume_bytes, "size of the node cache"),
        *_remote_cache(stats.remote_cache),
    ):
        family = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
        out.append(family(name, help_text, value=value))
    info = GaugeMetricFamily("kiln_build_info", "the kiln the daemon runs (always 1)", labels=["version"])
    info.add_metric([stats.version], 1)
    out.append(info)
    if stats.remote_cache.url:
        lat = stats.remote_cache.read_latency
        out.append(_quantiles("kiln_remote_cache_read_ms", "shared-tier read latency (bucket bounds)",
                              (("0.5", lat.p50_ms), ("0.9", lat.p90_ms), ("0.99", lat.p99_ms))))
    return out


def _quantiles(name: str, help_text: str, values) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, help_text, labels=["quantile"])
    for quantile, value in values:
        family.add_metric([quantile], value)
    return family


def _remote_cache(r) -> list:
    """The shared tier's series (none when the daemon has no shared tier)."""
    if not r.url:
        return []
    return [("kiln_remote_cache_up", "gauge", int(r.up), "1 while the shared tier answers, 0 while it is skipped"),
            *((f"kiln_remote_cache_{name}", "counter", getattr(r, name), f"shared-tier {what}")
              for name, what in (("hits", "reads that found an intact entry"), ("misses", "reads that found none"),
                                 ("refused", "entries refused by their checks (then deleted)"),
                                 ("errors", "calls that failed (down, timed out)"),
                                 ("skipped", "calls not made while it was down"), ("writes", "entries written")))]


class _Collector:
    """Reads the service at each scrape."""

    def __init__(self, service):
        self.service = service
        self.compile_seconds = compile_seconds(service.stats)

    def collect(self):
        yield from families(self.service.Stats(None, None))
        yield CounterMetricFamily("kiln_daemon_cancelled", "compiles abandoned: every request for them had gone",
                                  value=self.service.stats.snapshot()["cancelled"])
        yield from self.compile_seconds.collect()


_histograms: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_histograms_lock = threading.Lock()


def compile_seconds(stats) -> Histogram:
    """The histogram of every compile `stats` (the service's ServiceStats) records from now on,
    in seconds: the service keeps only recent compiles' percentiles in ms (for `kiln daemon
    status`), which a scraper can sum neither over time nor over daemons. Made once per stats."""
    with _histograms_lock:
        histogram = _histograms.get(stats)
        if histogram is None:
            histogram = Histogram("kiln_compile_seconds", "compile latency of the kernels compiled (cache misses)",
                                  buckets=COMPILE_BUCKETS_S, registry=None)
            recent = stats.compiled

            def compiled(ms: float) -> None:
                recent(ms)
                histogram.observe(ms / 1e3)
            stats.compiled = compiled  # the service reports each compile here
            _histograms[stats] = histogram
        return histogram


def exposition(stats) -> str:
    """A StatsResponse in Prometheus' text format."""
    registry = CollectorRegistry()
    registry.register(type("_Once", (), {"collect": lambda self: families(stats)})())
    return generate_latest(registry).decode()


def serve_metrics(service, host: str, port: int):
    """Serve /metrics for `service` on a daemon thread; returns the HTTP server (`.server_address`, `.shutdown()`).
    Call it before the service's first compile, which the latency histogram would miss."""
    registry = CollectorRegistry()
    registry.register(_Collector(service))
    httpd, _ = start_http_server(port, host, registry=registry)
    return httpd
