"""The service's counters and compile-latency percentiles."""
from __future__ import annotations

import threading
import time
from collections import Counter, deque


class ServiceStats:
    def __init__(self, window: int = 2048):
        self.started = time.monotonic()
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._latencies_ms: deque[float] = deque(maxlen=window)  # the most recent compiles

    def count(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._counts[name] += n

    def compiled(self, ms: float) -> None:
        with self._lock:
            self._latencies_ms.append(ms)

    def snapshot(self) -> dict:
        with self._lock:
            counts, lat = dict(self._counts), sorted(self._latencies_ms)
        pick = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] if lat else 0.0  # noqa: E731
        return {
            "uptime_s": time.monotonic() - self.started,
            **{k: counts.get(k, 0) for k in ("requests", "hits", "misses", "merged", "errors", "cancelled")},
            "latency_ms": {"p50": pick(0.5), "p90": pick(0.9), "p99": pick(0.99), "max": lat[-1] if lat else 0.0},
        }
