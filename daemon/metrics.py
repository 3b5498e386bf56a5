"""An optional Prometheus endpoint: the numbers of `kiln daemon status`, as plain text."""
from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def exposition(stats) -> str:
    """A StatsResponse in Prometheus' text format."""
    lat = stats.compile_latency
    lines = []
    for name, kind, value, help_text in (
        ("kiln_daemon_workers", "gauge", stats.workers, "compile worker processes"),
        ("kiln_daemon_busy_workers", "gauge", stats.busy_workers, "workers compiling now"),
        ("kiln_daemon_queue_depth", "gauge", stats.queue_depth, "compiles waiting for a worker"),
        ("kiln_daemon_requests_total", "counter", stats.requests, "compile requests"),
        ("kiln_daemon_cache_hits_total", "counter", stats.hits, "requests answered from the node cache"),
        ("kiln_daemon_cache_misses_total", "counter", stats.misses, "compiles run"),
        ("kiln_daemon_merged_total", "counter", stats.merged, "requests that joined a compile in flight"),
        ("kiln_daemon_errors_total", "counter", stats.errors, "requests that failed"),
        ("kiln_daemon_worker_restarts_total", "counter", stats.worker_restarts, "workers replaced"),
        ("kiln_cache_entries", "gauge", stats.cache.entries, "kernels in the node cache"),
        ("kiln_cache_bytes", "gauge", stats.cache.volume_bytes, "size of the node cache"),
        *_remote_cache(stats.remote_cache),
    ):
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", f"{name} {value}"]
    lines += ["# HELP kiln_daemon_compile_ms recent compile latency", "# TYPE kiln_daemon_compile_ms gauge"]
    for quantile, value in (("0.5", lat.p50_ms), ("0.9", lat.p90_ms), ("0.99", lat.p99_ms), ("1", lat.max_ms)):
        lines.append(f'kiln_daemon_compile_ms{{quantile="{quantile}"}} {value}')
    if stats.remote_cache.url:
        lines += ["# HELP kiln_remote_cache_read_ms shared-tier read latency (bucket bounds)",
                  "# TYPE kiln_remote_cache_read_ms gauge"]
        lat = stats.remote_cache.read_latency
        for quantile, value in (("0.5", lat.p50_ms), ("0.9", lat.p90_ms), ("0.99", lat.p99_ms)):
            lines.append(f'kiln_remote_cache_read_ms{{quantile="{quantile}"}} {value}')
    return "\n".join(lines) + "\n"


def _remote_cache(r) -> list:
    """The shared tier's series (none when the daemon has no shared tier)."""
    if not r.url:
        return []
    return [("kiln_remote_cache_up", "gauge", int(r.up), "1 while the shared tier answers, 0 while it is skipped"),
            *((f"kiln_remote_cache_{name}_total", "counter", getattr(r, name), f"shared-tier {what}")
              for name, what in (("hits", "reads that found an intact entry"), ("misses", "reads that found none"),
                                 ("refused", "entries refused by their checks (then deleted)"),
                                 ("errors", "calls that failed (down, timed out)"),
                                 ("skipped", "calls not made while it was down"), ("writes", "entries written")))]


def serve_metrics(service, host: str, port: int) -> ThreadingHTTPServer:
    """Serve GET /metrics for `service` on a daemon thread; returns the HTTP server."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path != "/metrics":
                self.send_error(404)
                return
            body = exposition(service.Stats(None, None)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):  # the daemon has its own logs
            pass

    httpd = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=httpd.serve_forever, name="kiln-metrics", daemon=True).start()
    return httpd
