"""Single flight: identical requests in flight share one compile."""
from __future__ import annotations

import threading
from concurrent.futures import Future


class SingleFlight:
    def __init__(self):
        self._lock = threading.Lock()
        self._flights: dict[str, Future] = {}

    def join(self, key: str) -> tuple[Future, bool]:
        """The future for `key` and whether the caller owns it (must do the work and `land`)."""
        with self._lock:
            future = self._flights.get(key)
            if future is not None:
                return future, False
            future = self._flights[key] = Future()
            return future, True

    def land(self, key: str, future: Future, result=None, error: BaseException | None = None) -> None:
        """Forget the flight, then resolve its future: a request that comes after finds the cache."""
        with self._lock:
            if self._flights.get(key) is future:
                del self._flights[key]
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    def __len__(self):
        return len(self._flights)
