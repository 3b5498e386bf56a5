"""Deadlines for calls that run on their caller's own thread: one watcher thread for the process.

A call registers (`start(seconds, on_expiry)`) and, when it ends, unregisters (`stop(token)`);
a call still registered at its deadline has `on_expiry()` run on the watcher (the shared tier
shuts its connections there, which ends a read a trickling server would keep alive). The caller
keeps its own thread: handing each call to a new thread and waiting for it cost two handoffs of
the interpreter lock, each up to its switch interval while the rank's main thread compiles.
"""
from __future__ import annotations

import itertools
import os
import threading
import time

_lock = threading.Condition()
_due: dict[int, tuple[float, object]] = {}  # token -> (deadline, on_expiry)
_tokens = itertools.count()
_watcher: threading.Thread | None = None


def start(seconds: float, on_expiry) -> int:
    """Register a call that must end within `seconds`; its token for `stop`."""
    global _watcher
    token, deadline = next(_tokens), time.monotonic() + seconds
    with _lock:
        earliest = all(deadline < other for other, _ in _due.values())
        _due[token] = (deadline, on_expiry)
        if _watcher is None:
            _watcher = threading.Thread(target=_watch, name="kiln-deadlines", daemon=True)
            _watcher.start()
        elif earliest:  # the watcher sleeps until a later deadline, or without one
            _lock.notify()
    return token


def stop(token: int) -> bool:
    """Unregister a call that ended; whether it ended before its deadline (else `on_expiry` ran)."""
    with _lock:
        return _due.pop(token, None) is not None


def _watch() -> None:
    with _lock:
        while True:
            now = time.monotonic()
            expired = [token for token, (deadline, _) in _due.items() if deadline <= now]
            actions = [_due.pop(token)[1] for token in expired]
            if actions:
                _lock.release()
                try:
                    for action in actions:
                        try:
                            action()
                        except Exception:  # noqa: BLE001 - an expiry that fails leaves the call to its own timeouts
                            pass
                finally:
                    _lock.acquire()
                continue
            _lock.wait(min((deadline for deadline, _ in _due.values()), default=now + 3600) - now)


def _forget_after_fork() -> None:
    """A forked child has no watcher thread, and a lock the parent may have held: start afresh."""
    global _lock, _watcher
    _lock, _watcher = threading.Condition(), None
    _due.clear()


os.register_at_fork(after_in_child=_forget_after_fork)
