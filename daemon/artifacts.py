"""Values that every process of the node computes alike and shares through the node cache
(torch.compile's FX graphs and AOTAutograd entries, autotuning results), with single flight
through the node daemon: of the ranks that miss the same key at once, one computes it and
the others wait for it (see `leases`).

The values are bytes to kiln: they are stored content-addressed and bound to their key as
compile results are, read back only under the same key, and never interpreted here. With a
shared tier (KILN_REMOTE_CACHE) they are written through to it and read from it on a node
miss, authenticated by the cluster key as kernels are (`kiln.cache.remote`), so a new node's
ranks load the graphs another node compiled. Their
key is the caller's (PyTorch's, which covers its version, configuration, the graph, its
inputs' devices and the device's properties); kiln hashes it with a namespace of its own.
"""
from __future__ import annotations

import hashlib
import logging
import os
import socket
import threading
import time
import uuid

from kiln.cache import env

from . import launch, tiers

log = logging.getLogger("kiln.artifacts")

RENEW_EVERY_S = 5.0  # the daemon takes a lease over after 15 s without a renewal
HIT, WAITED, LEADER, FIRST_FOLLOWER, FOLLOWER, MISS = "hit", "waited", "leader", "first follower", "follower", "miss"


def artifact_key(name: str) -> str:
    return hashlib.sha256(b"kiln-artifact\0" + name.encode()).hexdigest()


class NodeArtifacts:
    """This process's view of the shared values: `get` (which may wait for another process
    computing the same key, and otherwise makes this one the computer) and `put`."""

    def __init__(self, wait: float | None = None):
        self.wait = env.graph_wait_seconds() if wait is None else wait
        self._lock = threading.Lock()
        self._pid, self._id, self._heartbeat = None, None, None
        self._held: dict[str, str] = {}  # namespace -> the artifact key this process computes
        self.counts = dict.fromkeys(("hits", "waited", "led", "first_followers", "misses", "puts", "autotune_hits",
                                     "autotune_waited", "autotune_led", "autotune_misses"), 0)

    def get(self, namespace: str, name: str, single_flight: bool = True, kind: str = "") -> bytes | None:
        return self.lookup(namespace, name, single_flight, kind=kind)[0]

    def lookup(self, namespace: str, name: str, single_flight: bool = True,
               first_follower_goes_on: bool = False, followers_go_on: bool = False,
               kind: str = "") -> tuple[bytes | None, str]:
        """The value, if stored, and this process's part: HIT, WAITED (for another process's
        value), LEADER (none stored: compute it, `put` it), MISS (none stored, no lease), or
        FIRST_FOLLOWER (`first_follower_goes_on`: another process computes it and this one was
        the first to ask since: a miss at once, without the lease, to do work of its own that
        the wait would hold up; the others wait as ever, or with `followers_go_on` go on too,
        FOLLOWER). `kind` is what the daemon counts the claim as (`kiln.daemon.leases.KINDS`)."""
        count = self._count if not kind else (lambda what: self._count(f"{kind}_{what}"))
        key = artifact_key(name)
        value = self._read(key)
        if value is not None:
            count("hits")
            return value, HIT
        address = self._address() if single_flight else None
        if address is None:
            count("misses")
            return None, MISS
        self._release_other(namespace, key)
        from kiln.proto import compiler_pb2 as pb
        try:
            client = tiers.daemon_client(address)
            reply = client.claim(key, self._holder(), self.wait, if_free=first_follower_goes_on, kind=kind)
            if reply.outcome == pb.ClaimResponse.BUSY:
                if reply.busy_before == 0:
                    count("first_followers")
                    return None, FIRST_FOLLOWER
                if followers_go_on:
                    count("misses")
                    return None, FOLLOWER
                reply = client.claim(key, self._holder(), self.wait, kind=kind)
        except Exception as e:  # noqa: BLE001 - a daemon that is down makes this a plain miss
            tiers.warn_once("artifacts-daemon", f"kiln: graph sharing through the daemon at {address} failed "
                                                f"({_describe(e)}); this process compiles its own graphs")
            count("misses")
            return None, MISS
        if reply.outcome == pb.ClaimResponse.STORED:
            value = self._read(key)
            if value is not None:
                waited = reply.waited_s > 0.05
                count("waited" if waited else "hits")
                return value, WAITED if waited else HIT
            count("misses")  # stored, then evicted or unreadable: compile without a lease
            return None, MISS
        with self._lock:
            self._held[namespace] = key
        self._ensure_heartbeat(address)
        count("led")
        return None, LEADER

    def put(self, namespace: str, name: str, value: bytes) -> None:
        key = artifact_key(name)
        metadata = {"name": name[:200], "kind": "torch-artifact", "namespace": namespace}
        tier = tiers.shared_tier()
        if tier is not None:  # never raises; a tier that is down was warned of
            tier.put(key, {"value": bytes(value)}, metadata)
        try:
            tiers.node_cache().put_result(key, {"value": bytes(value)}, metadata)
            stored = True
            self._count("puts")
        except Exception as e:  # noqa: BLE001 - a cache that cannot be written loses sharing, not the job
            tiers.cache_write_failed(e, "artifacts-write")
            stored = False
        with self._lock:
            held = self._held.get(namespace) == key
            if held:
                del self._held[namespace]
        if held or stored:  # stored without the lease: the release wakes those waiting on its holder
            self._release([key], stored)

    def abandon(self, namespace: str) -> None:
        """Release, unstored, the key this process claimed in `namespace` (it will not compute it)."""
        with self._lock:
            key = self._held.pop(namespace, None)
        if key is not None:
            self._release([key], False)

    def release_all(self) -> None:
        with self._lock:
            keys, self._held = list(self._held.values()), {}
        if keys:
            self._release(keys, False)

    # --- the rest ---------------------------------------------------------------------------
    def _read(self, key: str) -> bytes | None:
        """The value from the node cache, else from the shared tier (then kept in the node cache)."""
        try:
            result = tiers.node_cache().get_result(key, names=("value",))
        except Exception as e:  # noqa: BLE001 - a cache that cannot be read is a miss
            tiers.warn_once("artifacts-read", f"kiln: the node cache cannot be read ({e})")
            result = None
        if result is not None:
            return result[0]["value"]
        tier = tiers.shared_tier()
        found = tier.get(key) if tier is not None else None
        if found is None or set(found[0]) != {"value"}:
            return None
        artifacts, metadata, created = found
        try:
            tiers.node_cache().copy_result(key, artifacts, metadata, created)
        except Exception as e:  # noqa: BLE001
            tiers.cache_write_failed(e, "artifacts-write")
        return artifacts["value"]

    def _address(self) -> str | None:
        address = launch.configured_address()
        if address is None:
            return None
        try:
            if address == launch.default_address():
                launch.ensure_daemon()
        except Exception as e:  # noqa: BLE001
            tiers.warn_once("artifacts-daemon", f"kiln: no compile daemon for graph sharing ({e})")
            return None
        return address

    def _holder(self) -> str:
        with self._lock:
            if self._pid != os.getpid():  # a forked child is another holder, with no leases
                self._pid, self._held = os.getpid(), {}
                self._id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
                self._heartbeat = None
            return self._id

    def _release_other(self, namespace: str, key: str) -> None:
        """A process compiles one graph at a time: asking for another key of the same namespace
        means the one it held was not stored (its compile failed or it was not cacheable)."""
        with self._lock:
            old = self._held.get(namespace)
            if old is None or old == key:
                return
            del self._held[namespace]
        self._release([old], False)

    def _release(self, keys: list[str], stored: bool) -> None:
        address = launch.configured_address()
        if address is None:
            return
        try:
            tiers.daemon_client(address).release(self._holder(), keys, stored)
        except Exception as e:  # noqa: BLE001 - the lease then runs out on the daemon
            log.info("release failed: %s", _describe(e))

    def _ensure_heartbeat(self, address: str) -> None:
        with self._lock:
            if self._heartbeat is not None:
                return
            self._heartbeat = threading.Thread(target=self._renew_forever, args=(address, os.getpid()),
                                               name="kiln-lease-renewal", daemon=True)
            self._heartbeat.start()

    def _renew_forever(self, address: str, pid: int) -> None:
        while os.getpid() == pid:
            time.sleep(RENEW_EVERY_S)
            with self._lock:
                keys = list(self._held.values())
            if keys:
                try:
                    tiers.daemon_client(address).renew(self._holder(), keys)
                except Exception as e:  # noqa: BLE001
                    log.info("renewal failed: %s", _describe(e))

    def _count(self, name: str) -> None:
        with self._lock:
            self.counts[name] += 1


def _describe(error: Exception) -> str:
    code = getattr(error, "code", None)
    if callable(code):
        return f"{code().name}: {error.details()}"
    return f"{type(error).__name__}: {error}"


_process = None


def node_artifacts() -> NodeArtifacts:
    """This process's NodeArtifacts (its leases are released when it exits)."""
    global _process
    if _process is None:
        import atexit
        _process = NodeArtifacts()
        atexit.register(_process.release_all)
    return _process
