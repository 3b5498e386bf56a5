"""Single flight across processes, for values the processes store themselves (torch.compile's
FX graphs and AOTAutograd entries, in the node cache).

The first process to claim a missing key holds its lease and computes the value; the others
wait until it is stored, as Bazel merges identical actions. A lease ends when its holder
releases it (stored or not), dies (a process of this node that no longer exists), stops
renewing it for `stale_after` seconds, or has held it for `max_age`; a waiter that waited
its own `wait` seconds takes the lease over. Taking over is always safe: the worst case is
the compile the lease was there to save, never a wrong value, because only a stored value
under the same key is ever handed out.
"""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import Callable

STORED, YOURS, BUSY = "stored", "yours", "busy"
KINDS = ("", "autotune")  # what a claim is for: a compiled graph, or a kernel's autotuning choice


@dataclass
class _Lease:
    holder: str
    pid: int | None  # None: the holder is not a process of this node (its death cannot be seen)
    granted: float
    renewed: float
    busy_answers: int = 0  # if_free claims told BUSY while this lease was held


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: it exists
        return True
    return True


class Leases:
    """`stored(key)` says whether the value is in the store (read outside the table's lock)."""

    def __init__(self, stored: Callable[[str], bool], stale_after: float = 15.0, max_age: float = 3600.0,
                 alive: Callable[[int], bool] = pid_alive, clock: Callable[[], float] = time.monotonic,
                 recheck_s: float = 1.0):
        self._stored, self._alive, self._clock = stored, alive, clock
        self.stale_after, self.max_age = stale_after, max_age
        self.recheck_s = recheck_s  # a waiter looks at the store this often, and whenever a release wakes it
        self._cond = threading.Condition()
        self._leases: dict[str, _Lease] = {}
        self.counts = dict.fromkeys(("led", "stored", "waited", "taken_over", "released_stored",
                                     "released_unstored", "busy", "autotune_led", "autotune_stored",
                                     "autotune_waited"), 0)

    def claim(self, key: str, holder: str, pid: int | None, wait: float,
              cancelled: Callable[[], bool] = lambda: False, if_free: bool = False,
              kind: str = "") -> tuple[str, float, int]:
        """STORED or YOURS for `holder`, the seconds it waited for another holder first, and 0.
        `if_free`: BUSY at once while another holder's lease is valid (no wait, no taking over),
        with how many were told BUSY before during that lease (0: the first to ask after the holder).
        `kind` (KINDS) says which counts the claim goes to: led, stored and waited count graphs."""
        prefix = f"{kind}_" if kind else ""
        start = self._clock()
        waited = False
        while True:
            if self._stored(key):
                self._count(prefix + ("waited" if waited else "stored"))
                return STORED, self._clock() - start, 0
            with self._cond:
                lease = self._leases.get(key)
                now = self._clock()
                if if_free and lease is not None and lease.holder != holder and self._valid(lease, now):
                    self.counts["busy"] += 1
                    lease.busy_answers += 1
                    return BUSY, 0.0, lease.busy_answers - 1
                out_of_time = now - start >= wait or cancelled()
                if lease is None or lease.holder == holder or not self._valid(lease, now) or out_of_time:
                    taken = lease is not None and lease.holder != holder
                    self._leases[key] = _Lease(holder, pid, now, now)
                    self.counts["taken_over" if taken or waited else prefix + "led"] += 1
                    return YOURS, now - start, 0
                waited = True
                self._cond.wait(min(self.recheck_s, max(0.01, wait - (now - start))))

    def renew(self, holder: str, keys) -> list[str]:
        """Keep `holder`'s leases on `keys`; returns those it no longer holds."""
        lost = []
        with self._cond:
            now = self._clock()
            for key in keys:
                lease = self._leases.get(key)
                if lease is not None and lease.holder == holder:
                    lease.renewed = now
                else:
                    lost.append(key)
        return lost

    def release(self, holder: str, keys, stored: bool) -> None:
        """End `holder`'s leases on `keys`, and wake every waiter to look at the store again: a
        process that stored a key it did not hold (a rank that computed it without the lease)
        releases it too, so that those waiting on the holder take its value at once."""
        with self._cond:
            for key in keys:
                lease = self._leases.get(key)
                if lease is not None and lease.holder == holder:
                    del self._leases[key]
                    self.counts["released_stored" if stored else "released_unstored"] += 1
            self._cond.notify_all()

    def stats(self) -> dict:
        with self._cond:
            return {**self.counts, "held": len(self._leases)}

    def _valid(self, lease: _Lease, now: float) -> bool:
        if now - lease.renewed >= self.stale_after or now - lease.granted >= self.max_age:
            return False
        return lease.pid is None or self._alive(lease.pid)

    def _count(self, name: str) -> None:
        with self._cond:
            self.counts[name] += 1
