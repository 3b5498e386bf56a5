"""Single flight: identical requests in flight share one compile, which lives as long as
someone waits for it: when its last waiter leaves (a client that cancelled, a deadline
that passed) the work is abandoned."""
from __future__ import annotations

import threading
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass
from typing import Callable


@dataclass
class _Flight:
    future: Future
    waiters: int = 1
    abandon: Callable[[], None] | None = None


class SingleFlight:
    def __init__(self):
        self._lock = threading.Lock()
        self._flights: dict[str, _Flight] = {}

    def join(self, key: str) -> tuple[Future, bool]:
        """The future for `key` and whether the caller owns it (must do the work and `land`).
        Every join is a waiter until the future is done or it `leave`s."""
        with self._lock:
            flight = self._flights.get(key)
            if flight is not None:
                flight.waiters += 1
                return flight.future, False
            flight = self._flights[key] = _Flight(Future())
            return flight.future, True

    def on_abandon(self, key: str, future: Future, abandon: Callable[[], None]) -> None:
        """Call `abandon` (which stops the work) if every waiter leaves before the flight lands."""
        with self._lock:
            flight = self._flights.get(key)
            if flight is not None and flight.future is future:
                flight.abandon = abandon
                return
        if future.cancelled():  # all of them left already
            abandon()

    def leave(self, key: str, future: Future) -> bool:
        """A waiter stops waiting. The last to leave an unfinished flight ends it: the work is
        abandoned, the future cancelled, and the next request starts afresh. True then."""
        with self._lock:
            flight = self._flights.get(key)
            if flight is None or flight.future is not future:
                return False
            flight.waiters -= 1
            if flight.waiters > 0:
                return False
            del self._flights[key]
        if not future.cancel():
            return False  # it landed meanwhile
        if flight.abandon is not None:
            flight.abandon()
        return True

    def land(self, key: str, future: Future, result=None, error: BaseException | None = None) -> None:
        """Forget the flight, then resolve its future: a request that comes after finds the cache."""
        with self._lock:
            flight = self._flights.get(key)
            if flight is not None and flight.future is future:
                del self._flights[key]
        try:
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(result)
        except InvalidStateError:  # every waiter had left: cancelled
            pass

    def __len__(self):
        return len(self._flights)
