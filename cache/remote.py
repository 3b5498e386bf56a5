"""The shared tier: compile results on a Redis server that the nodes of a cluster share.

`KILN_REMOTE_CACHE=redis://[user:pass@]host:port/db` (`rediss://` for TLS; redis-py's
query options such as `?ssl_ca_certs=/path/ca.pem` apply) turns it on. The lookup order
is memory -> node cache -> shared tier -> daemon -> compile here; a daemon writes each
compile through, and a hit is copied into the node cache.

An entry is one Redis hash, `kiln:v1:<compile key>`: field `entry` holds the JSON of the
node cache's action map (the key, each artifact's digest and size, the metadata and its
digest), `a:<name>` each artifact's bytes, and `mac` an HMAC-SHA256 of the key and the
entry under the cluster key (`KILN_REMOTE_CACHE_KEY` or `_FILE`), which the nodes share and
Redis never sees. The tier is untrusted storage: a read first checks the MAC, then all the
rest as the node cache does; an entry without this cluster's MAC, that names another key, an
artifact whose bytes do not hash to its digest or have another size, or anything else out of
shape is a miss (`refused`, one warning a process), is deleted, and never reaches the node cache. Entries larger than
`max_entry_bytes` are not written. Eviction is Redis's: give it a `maxmemory` and
`maxmemory-policy allkeys-lru`.

What a Redis writer without the cluster key can do: delete or damage entries (misses: the
nodes compile), fill the server, slow it down. What it cannot: have a node serve a binary or
metadata that no node of the cluster stored, or move one entry under another key. A node that
holds the key can store anything; the key is as secret as the nodes. Without a cluster key the
tier is off.

A tier that is down or slow costs one warning and at most a short connect timeout or the
call's total deadline (`deadline`: a reply trickled a byte at a time ends there, not after
many per-read timeouts); it is then left alone (every call a miss, `skipped`) for
`retry_after` seconds. Any error at all from the tier or its replies is a miss: nothing here
raises on the tier's account.

Importing redis-py takes ~100 ms, most of a cold node's first call that the tier serves:
`import kiln` starts that import in a thread where KILN_REMOTE_CACHE is set
(`import_client_in_background`), and the tier's first use waits for it.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import threading
import time
import warnings
from urllib.parse import urlsplit

from . import deadlines, env
from .store import _canonical, digest, is_bound, make_entry

log = logging.getLogger("kiln.cache")

PREFIX = "kiln:v1:"
CONNECT_TIMEOUT_S = 0.5
READ_TIMEOUT_S = 2.0  # a few MB of one entry, over a busy link
DEADLINE_S = 5.0  # a whole call: connect, request, every read of the reply
RETRY_AFTER_S = 30.0
MAX_ENTRY_BYTES = 64 << 20
COUNTS = "remote"  # the node cache's name for this node's counters of the tier
# read latency is counted in buckets (ms, upper bounds), so that processes add up
BUCKETS_MS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000)
OUTCOMES = ("hits", "misses", "refused", "errors", "skipped", "writes", "oversize")


_client_import: threading.Thread | None = None


def import_client_in_background() -> None:
    """Start importing redis-py in a daemon thread, once; `RemoteCache` waits for it. A fork
    waits for it too: a child must not inherit the import lock of a half-imported module."""
    global _client_import
    if _client_import is None:
        _client_import = threading.Thread(target=_import_client, name="kiln-redis-import", daemon=True)
        _client_import.start()
        os.register_at_fork(before=_client_imported)


def _import_client() -> None:
    try:
        import redis.backoff  # noqa: F401  (imports redis)
        import redis.retry  # noqa: F401
    except Exception:  # noqa: BLE001  missing or broken: RemoteCache's own import says so
        pass


def _client_imported() -> None:
    if _client_import is not None and _client_import is not threading.current_thread():
        _client_import.join()


class NoClusterKey(ValueError):
    """The shared tier was asked for without a cluster key to authenticate its entries."""


class RemoteCache:
    """The shared tier at `url`. `counts_to` (a node `Cache`) also keeps this process's
    counts, so that `kiln cache stats` shows what every process of the node saw."""

    def __init__(self, url: str, *, cluster_key: bytes | None = None, counts_to=None,
                 connect_timeout: float = CONNECT_TIMEOUT_S, timeout: float = READ_TIMEOUT_S,
                 retry_after: float = RETRY_AFTER_S, max_entry_bytes: int = MAX_ENTRY_BYTES,
                 deadline: float = DEADLINE_S):
        """`cluster_key` defaults to the environment's (`env.remote_cache_key`); without one, NoClusterKey."""
        import inspect

        self._cluster_key = cluster_key if cluster_key is not None else env.remote_cache_key()
        if not self._cluster_key:
            raise NoClusterKey("the shared tier needs a cluster key to authenticate its entries: set "
                               "KILN_REMOTE_CACHE_KEY (or KILN_REMOTE_CACHE_KEY_FILE) on every node")

        _client_imported()  # a background import under way: import redis below must not race it
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        self.where = redacted(url)
        self.retry_after, self.max_entry_bytes, self.deadline = retry_after, max_entry_bytes, deadline
        # no CLIENT SETINFO, no maintenance-notification handshake where this redis-py has them: each is
        # a round trip on a new connection, and a cold node's first call makes one (11 ms of 13 here)
        accepted = inspect.signature(redis.Redis.__init__).parameters
        setinfo = ("driver_info",) if "driver_info" in accepted else ("lib_name", "lib_version")
        quiet = {name: None for name in (*setinfo, "maint_notifications_config") if name in accepted}
        self._client = redis.Redis.from_url(url, socket_connect_timeout=connect_timeout, socket_timeout=timeout,
                                            retry=Retry(NoBackoff(), 0), health_check_interval=0, **quiet)
        self._errors = (redis.RedisError, OSError)
        self._data_error = redis.ResponseError  # the key holds another type: the entry's fault, not the tier's
        self._counts_to = counts_to
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}
        self._down_until = 0.0
        self._warned = self._warned_refused = False

    # --- entries ---------------------------------------------------------------------------
    def get(self, key: str) -> tuple[dict[str, bytes], dict, float] | None:
        """`(artifacts, metadata, created)` of `key`, or None: absent, refused, or the tier is down."""
        if self._skipping():
            return None
        t0 = time.perf_counter()
        try:
            fields = self._call(self._client.hgetall, PREFIX + key)
        except self._data_error as e:
            return self._refuse(key, f"not an entry ({e})")
        except Exception as e:  # noqa: BLE001 - down, past the deadline, or a reply out of shape: a miss
            return self._failed(e)
        if type(fields) is not dict:
            return self._failed(TypeError(f"HGETALL answered a {type(fields).__name__}"))
        counts = _latency(time.perf_counter() - t0)
        if not fields:
            self._add(misses=1, **counts)
            return None
        try:
            found = _decode(fields, key, self.max_entry_bytes, self._cluster_key)
        except Exception as e:  # noqa: BLE001 - fields of no shape _decode foresaw: the entry's fault
            found = f"unreadable ({type(e).__name__})"
        if isinstance(found, str):
            self._add(**counts)
            return self._refuse(key, found)
        self._add(hits=1, **counts)
        return found

    def put(self, key: str, artifacts: dict[str, bytes | str], metadata: dict, created: float | None = None) -> bool:
        """Write (or overwrite) `key`'s entry; whether it was written."""
        if self._skipping():
            return False
        entry, data = make_entry(key, artifacts, metadata, created)
        entry_bytes = _canonical(entry).encode()
        fields = {"entry": entry_bytes, "mac": _mac(self._cluster_key, key, entry_bytes),
                  **{f"a:{name}": blob for name, blob in data.items()}}
        if sum(map(len, fields.values())) > self.max_entry_bytes:
            self._add(oversize=1)
            log.info("key=%s event=remote_entry_too_large bytes=%d", key[:16], sum(map(len, fields.values())))
            return False
        def write():
            with self._client.pipeline(transaction=True) as pipe:  # no reader sees half an entry
                pipe.delete(PREFIX + key)
                pipe.hset(PREFIX + key, mapping=fields)
                pipe.execute()
        try:
            self._call(write)
        except Exception as e:  # noqa: BLE001
            self._failed(e)
            return False
        self._add(writes=1)
        return True

    def has(self, keys: list[str]) -> list[bool] | None:
        """Which of `keys` the tier holds (not checked), or None when it is down."""
        if not keys or self._skipping():
            return None if keys else []
        def exist():
            with self._client.pipeline(transaction=False) as pipe:
                for key in keys:
                    pipe.exists(PREFIX + key)
                return [bool(n) for n in pipe.execute()]
        try:
            return self._call(exist)
        except Exception as e:  # noqa: BLE001
            return self._failed(e)

    # --- the tier's health and numbers ---------------------------------------------------
    @property
    def up(self) -> bool:
        return time.monotonic() >= self._down_until

    def counts(self) -> dict[str, int]:
        """This process's counts (see `summary`)."""
        with self._lock:
            return dict(self._counts)

    def probe(self) -> dict:
        """The server as it answers now: round trip, memory, eviction policy, keys (for `kiln cache stats`)."""
        out = {"url": self.where, "reachable": False}
        try:
            t0 = time.perf_counter()
            self._client.ping()
            out["ping_ms"] = (time.perf_counter() - t0) * 1e3
            memory = self._client.info("memory")
            out.update(reachable=True, used_memory_bytes=memory.get("used_memory", 0),
                       maxmemory_bytes=memory.get("maxmemory", 0), maxmemory_policy=memory.get("maxmemory_policy", ""),
                       keys=self._client.dbsize())
        except self._errors as e:
            out["error"] = f"{type(e).__name__}: {e}"
        return out

    def close(self) -> None:
        self._client.close()

    # --- internals -----------------------------------------------------------------------
    def _skipping(self) -> bool:
        if self.up:
            return False
        self._add(skipped=1)
        return True

    def _failed(self, error: Exception) -> None:
        self._down_until = time.monotonic() + self.retry_after
        self._add(errors=1)
        log.warning("event=remote_cache_down url=%s error=%r retry_s=%.0f", self.where, str(error), self.retry_after)
        if not self._warned:
            self._warned = True
            warnings.warn(f"kiln: the shared cache at {self.where} failed ({type(error).__name__}: {error}); "
                          f"going on without it, asking again in {self.retry_after:.0f} s", RuntimeWarning, stacklevel=4)
        return None

    def _refuse(self, key: str, why: str) -> None:
        self._add(refused=1)
        log.warning("key=%s event=remote_entry_refused url=%s why=%r", key[:16], self.where, why)
        if not self._warned_refused:  # once: a forger could otherwise fill the job's log
            self._warned_refused = True
            warnings.warn(f"kiln: refused an entry of the shared cache at {self.where} ({why[:200]}); compiling "
                          "instead (entries refused later are only logged)", RuntimeWarning, stacklevel=4)
        try:
            self._call(self._client.delete, PREFIX + key)
        except Exception as e:  # noqa: BLE001
            self._failed(e)
        return None

    def _call(self, fn, *args):
        """`fn(*args)` on the tier, within the total deadline (TimeoutError past it). redis-py's
        timeouts are per read, so past the deadline the watcher (`deadlines`) shuts the client's
        connections, which ends the read that a trickling server would keep alive."""
        token = deadlines.start(self.deadline, self._client.connection_pool.disconnect)
        try:
            result = fn(*args)
        except BaseException:
            if not deadlines.stop(token):
                raise TimeoutError(f"no whole reply within {self.deadline:g} s") from None
            raise
        deadlines.stop(token)  # a reply that came as its connection was shut is whole all the same
        return result

    def _add(self, **counts: int) -> None:
        with self._lock:
            for name, n in counts.items():
                self._counts[name] = self._counts.get(name, 0) + n
        if self._counts_to is not None:
            try:
                self._counts_to.add_counts_later(COUNTS, counts)
            except Exception as e:  # noqa: BLE001 - a counter is not worth a failed call
                log.debug("event=remote_counts_not_kept error=%r", str(e))


def from_env(counts_to=None) -> RemoteCache | None:
    """The tier that KILN_REMOTE_CACHE names, or None."""
    from . import env
    url = env.remote_cache_url()
    return RemoteCache(url, counts_to=counts_to) if url else None


def redacted(url: str) -> str:
    """`url` without its user name and password."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


def _mac(cluster_key: bytes, key: str, entry_bytes: bytes) -> bytes:
    """The entry's authenticator: it binds the entry (and through its digests every artifact) to `key`."""
    return hmac.new(cluster_key, PREFIX.encode() + key.encode() + b"\0" + entry_bytes, hashlib.sha256).hexdigest().encode()


def _decode(fields: dict, key: str, max_bytes: int, cluster_key: bytes):
    """`(artifacts, metadata, created)` if `fields` are `key`'s entry, stored by a node of this
    cluster, whole and intact; else why not."""
    if sum(len(v) for v in fields.values()) > max_bytes:
        return "larger than the size cap"
    mac, entry_bytes = fields.get(b"mac"), fields.get(b"entry")
    if mac is None or entry_bytes is None or not hmac.compare_digest(mac, _mac(cluster_key, key, entry_bytes)):
        return "not authenticated by this cluster's key"
    try:
        entry = json.loads(fields[b"entry"])
        if not is_bound(entry, key):
            return "not this key's entry"
    except Exception as e:  # noqa: BLE001 - not JSON, not an entry, too deep (RecursionError): its fault
        return f"no readable entry ({type(e).__name__})"
    artifacts = {}
    for name, name_digest in entry["artifacts"].items():
        data = fields.get(f"a:{name}".encode())
        if data is None or len(data) != entry["sizes"][name] or digest(data) != name_digest:
            return f"artifact {name!r:.40} missing or damaged"
        artifacts[name] = data
    if len(fields) != len(artifacts) + 2:
        return "fields that the entry does not name"
    return artifacts, entry["metadata"], entry["created"]


def _latency(seconds: float) -> dict[str, int]:
    ms = seconds * 1e3
    bucket = next((str(b) for b in BUCKETS_MS if ms <= b), "inf")
    return {"gets": 1, "get_us": int(ms * 1e3), f"get_le_{bucket}": 1}


def summary(counts: dict[str, int]) -> dict:
    """Counts as reported: each outcome, and read latency (ms: the mean, and the bucket bound
    under which 50, 90 and 99 % of reads fell)."""
    gets = counts.get("gets", 0)

    def quantile(q: float) -> float:
        seen = 0
        for bound in (*BUCKETS_MS, "inf"):
            seen += counts.get(f"get_le_{bound}", 0)
            if gets and seen >= q * gets:
                return float(bound)
        return 0.0
    latency = {"mean": counts.get("get_us", 0) / gets / 1e3 if gets else 0.0,
               **{f"p{round(q * 100)}": quantile(q) for q in (0.5, 0.9, 0.99)}}
    return {**{name: counts.get(name, 0) for name in OUTCOMES}, "latency_ms": latency}
