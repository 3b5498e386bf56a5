"""The node cache: content-addressed blobs and an action map, on python-diskcache.

A blob is stored under the SHA-256 of its bytes and checked against it on every read: a
blob that does not hash to its name is deleted and reported as a miss, so the next
compile rewrites it. The action map takes a compile key to the digests of its artifacts
(cubin, PTX, LLVM IR, block IR, ...) and its metadata, as JSON. Both live in one
diskcache directory (SQLite plus files), so any number of processes can share it, and
one size limit with least-recently-used eviction covers both; a read touches every entry
it uses, so a kernel in use stays.

Reads take no write lock. diskcache's own `get` under that policy writes the entry's access time in
a write transaction, so every read, a miss too, queues on SQLite's one write lock: eight ranks
of sixteen compile threads each waited up to half a second to learn of a miss. A read here is
one SELECT (in WAL mode a reader never waits for the writer), and the access times of what a
process read are written later, in one transaction with its read counts.
"""
from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import os
import re
import sqlite3
import threading
import time
import warnings
import weakref
from pathlib import Path

import diskcache

from . import env, paths

_BLOB = "blob/"
_ACTION = "action/"
_COUNTS = "counts/"
_RECORD = "record/"  # small JSON records keyed by a hash of their inputs (kiln.dropin.warm's source keys)
_DIGEST = re.compile(r"[0-9a-f]{64}\Z")
# the only files diskcache names: two levels of two hex digits, then 28 more and `.val`
_VALUE_FILE = re.compile(r"[0-9a-f]{2}/[0-9a-f]{2}/[0-9a-f]{28}\.val\Z")
_NODE_COUNTS = "node"  # the node cache's own hits and misses, of every process
_COUNT_EVERY = 64      # reads a process counts (and entries it touches) before it writes them to the node cache
_SELECT = ("SELECT mode, filename, value FROM Cache WHERE key = ? AND raw = ?"
           " AND (expire_time IS NULL OR expire_time > ?)")
_open_caches: weakref.WeakSet = weakref.WeakSet()  # their counts are added at exit


class _NoPickles(diskcache.Disk):
    """Stores bytes and text only, and refuses to unpickle what another writer left."""

    def store(self, value, read, key=diskcache.core.UNKNOWN):
        if type(value) not in (bytes, str):
            raise TypeError(f"the kiln cache stores bytes and str only, not {type(value).__name__}")
        return super().store(value, read, key)

    def fetch(self, mode, filename, value, read):
        if mode == diskcache.core.MODE_PICKLE:
            raise OSError("refusing a pickled cache value")  # diskcache reads OSError as a miss
        if filename is not None and not self._ours(filename):
            raise OSError(f"refusing a cache row that names the file {filename!r}")
        return super().fetch(mode, filename, value, read)

    def remove(self, file_path):
        # a row's file name is data: one that leads out of the cache is never followed
        if self._ours(file_path):
            super().remove(file_path)

    def _ours(self, filename) -> bool:
        """Whether `filename` (from a row) is a value file diskcache made inside this cache."""
        if type(filename) is not str or not _VALUE_FILE.match(filename):
            return False
        root = os.path.realpath(self._directory)
        return os.path.realpath(os.path.join(root, filename)).startswith(root + os.sep)

    def get(self, key, raw):
        if not raw:
            return "<a pickled key, not read>"  # matches neither blob/ nor action/: ignored
        return super().get(key, raw)


class _PrivateNoPickles(_NoPickles):
    """For a cache of this user's: every file it writes is theirs alone (0600 in 0700 directories)."""

    def store(self, value, read, key=diskcache.core.UNKNOWN):
        size, mode, filename, db_value = super().store(value, read, key)
        if filename is not None:  # diskcache's two levels of directories, then the file
            file = Path(self._directory, filename)
            paths.private_file(file, (file.parent, file.parent.parent))
        return size, mode, filename, db_value


class _SharedNoPickles(_NoPickles):
    """For a cache shared by a group: every file it writes is the group's to read and replace."""

    def store(self, value, read, key=diskcache.core.UNKNOWN):
        size, mode, filename, db_value = super().store(value, read, key)
        if filename is not None:  # diskcache's two levels of directories, then the file
            file = Path(self._directory, filename)
            paths.share_file(file, (file.parent, file.parent.parent))
        return size, mode, filename, db_value


def _is_damage(error: sqlite3.DatabaseError) -> bool:
    """Whether SQLite says the database itself is damaged (not: the disk is full, an I/O error)."""
    name = getattr(error, "sqlite_errorname", "")  # Python 3.11+
    if name:
        return name in ("SQLITE_CORRUPT", "SQLITE_NOTADB")
    text = str(error)
    return "malformed" in text or "not a database" in text


class CacheNotWritable(OSError):
    """A write to a node cache opened read-only (its disk full when it was opened)."""


class _ReadOnlyStore:
    """What `Cache` uses of diskcache, reading diskcache's database in place without writing a byte:
    for a disk too full for SQLite to open it as usual. Writes raise CacheNotWritable, which every
    writer takes as "not stored"."""

    def __init__(self, path: Path):
        self._disk = _NoPickles(str(path))  # its fetch: no pickles, no files outside the cache
        self._db = None
        # read-only as usual; else as a file that will not change (no -shm to create: the disk is full)
        for mode in ("mode=ro", "immutable=1"):
            if self._db is None and (path / "cache.db").exists():
                db = sqlite3.connect(f"file:{path / 'cache.db'}?{mode}", uri=True, check_same_thread=False)
                try:
                    db.execute("SELECT count(*) FROM Cache").fetchall()
                    self._db = db
                except sqlite3.Error:
                    db.close()

    def _rows(self, sql: str, *args) -> list:
        if self._db is None:
            return []
        try:
            return self._db.execute(sql, args).fetchall()
        except sqlite3.Error:
            return []

    def get(self, key, default=None):
        rows = self._rows("SELECT mode, filename, value FROM Cache WHERE key = ? AND raw = 1", key)
        if not rows:
            return default
        try:
            return self._disk.fetch(*rows[0], False)
        except OSError:
            return default

    def __contains__(self, key) -> bool:
        return bool(self._rows("SELECT 1 FROM Cache WHERE key = ? AND raw = 1", key))

    def iterkeys(self):
        return iter([key for (key,) in self._rows("SELECT key FROM Cache WHERE raw = 1 ORDER BY rowid")])

    def volume(self) -> int:
        rows = self._rows("SELECT value FROM Settings WHERE key = 'size'")
        return int(rows[0][0]) if rows else 0

    @property
    def size_limit(self) -> int:
        rows = self._rows("SELECT value FROM Settings WHERE key = 'size_limit'")
        return int(rows[0][0]) if rows else 0

    def transact(self):
        return contextlib.nullcontext()

    def set(self, *args, **kwargs):
        raise CacheNotWritable("the node cache was opened read-only (its disk was full)")

    clear = cull = set

    def delete(self, key) -> bool:  # a bad entry stays until the cache can be written again
        return False

    def close(self):
        if self._db is not None:
            self._db.close()


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _canonical(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


def make_entry(key: str, artifacts: dict[str, bytes | str], metadata: dict,
               created: float | None = None) -> tuple[dict, dict[str, bytes]]:
    """The action-map entry of a compile result (`artifacts` by name, str as UTF-8), and the
    artifacts as bytes: what the node cache stores, and the shared tier (`remote`) too."""
    data = {name: value.encode() if isinstance(value, str) else bytes(value) for name, value in sorted(artifacts.items())}
    entry = {"key": key, "artifacts": {n: digest(d) for n, d in data.items()}, "sizes": {n: len(d) for n, d in data.items()},
             "metadata": metadata, "metadata_digest": digest(_canonical(metadata).encode()),
             "created": time.time() if created is None else created}
    return entry, data


def is_bound(entry: dict, key: str) -> bool:
    """Whether `entry` is well formed and is `key`'s: it names the key, each artifact a digest
    and a size, and its metadata hashes to the digest it records."""
    artifacts, sizes = entry["artifacts"], entry["sizes"]
    return (entry["key"] == key and type(artifacts) is dict and type(sizes) is dict
            and type(entry["metadata"]) is dict and type(entry["created"]) in (int, float)
            and all(type(d) is str and _DIGEST.match(d) and type(sizes.get(n)) is int for n, d in artifacts.items())
            and entry["metadata_digest"] == digest(_canonical(entry["metadata"]).encode()))


class Cache:
    """The node cache at `path` (default `$KILN_CACHE_DIR` or ~/.cache/kiln).

    `size_limit` (bytes; default `$KILN_CACHE_SIZE` or 8 GiB) is stored in the cache
    directory, so the last process to open it with an explicit limit sets it for all. The
    directory is this user's alone (0700) unless `shared` (default `$KILN_CACHE_SHARED`):
    then a group's (see `paths`). One that others could write is refused.
    """

    def __init__(self, path: str | os.PathLike | None = None, size_limit: int | None = None,
                 shared: bool | None = None):
        self.path = Path(path) if path is not None else env.cache_dir()
        self._size_limit = size_limit if size_limit is not None else env.cache_size_limit()
        self.shared = env.cache_shared() if shared is None else shared
        self.hits = self.misses = 0  # this process's reads
        self._open()
        _open_caches.add(self)

    def _open(self):
        self._pid = os.getpid()
        self._uncounted = {"hits": 0, "misses": 0}  # not yet added to the node's counters (a forked child starts at 0)
        self._touched: dict[str, float] = {}  # key -> when this process last read it, not yet written
        self._later: dict[str, dict[str, int]] = {}  # counts `add_counts_later` holds: name -> field -> n
        self._later_since = 0.0  # when the oldest of them came
        self._copies: dict[str, tuple] = {}  # entries of the shared tier `copy_result` holds: key -> put_result's args
        self._copier: threading.Thread | None = None
        self._pending_lock = threading.Lock()
        self._reader_lock = threading.Lock()
        self._read_db, self._read_pid = None, None
        (paths.shared_dir if self.shared else paths.private_dir)(self.path)
        try:
            self._store = self._diskcache()
        except sqlite3.DatabaseError as e:
            if not _is_damage(e):  # full, or an I/O error: the entries are fine, only writing is not
                warnings.warn(f"kiln: the node cache at {self.path} cannot be written ({e}): serving what it "
                              "holds, storing nothing new", RuntimeWarning, stacklevel=3)
                self._store = _ReadOnlyStore(self.path)
                return
            # a damaged cache.db: a cache is worth less than a start
            aside = self.path / f"cache.db.damaged-{int(time.time())}"
            for suffix in ("", "-wal", "-shm"):
                if (self.path / f"cache.db{suffix}").exists():
                    os.replace(self.path / f"cache.db{suffix}", f"{aside}{suffix}")
            warnings.warn(f"kiln: the node cache's database was damaged ({e}); moved it to {aside} and "
                          "started an empty one", RuntimeWarning, stacklevel=3)
            self._store = self._diskcache()
        # SQLite gives its -wal and -shm files the database's mode
        (paths.share_file if self.shared else paths.private_file)(self.path / "cache.db")

    def _diskcache(self) -> diskcache.Cache:
        return diskcache.Cache(str(self.path), size_limit=self._size_limit,
                               disk=_SharedNoPickles if self.shared else _PrivateNoPickles,
                               eviction_policy="least-recently-used")

    @property
    def _dc(self) -> diskcache.Cache:
        # SQLite connections must not cross fork(): a forked child (a DataLoader worker, say) reopens.
        if os.getpid() != self._pid:
            self._open()
        return self._store

    @property
    def size_limit(self) -> int:
        return self._dc.size_limit

    def close(self):
        self.add_read_counts()
        self._store.close()
        with self._reader_lock:
            if self._read_db is not None:
                self._read_db.close()
                self._read_db = None

    def _reader(self) -> sqlite3.Connection:
        """This process's one connection for reads, shared by its threads under `_reader_lock`:
        diskcache opens one per thread, and a rank's sixteen compile threads each opening theirs
        (connect, then its settings' pragmas) at their first kernel cost them a good part of the
        miss they were asking about."""
        if self._read_db is None or self._read_pid != os.getpid():
            self._read_db = sqlite3.connect(self.path / "cache.db", timeout=60, isolation_level=None,
                                            check_same_thread=False)
            self._read_pid = os.getpid()
        return self._read_db

    def _get(self, key: str):
        """The value stored under `key`, or None; see the module's doc for why not diskcache's `get`."""
        store = self._dc
        if not isinstance(store, diskcache.Cache):  # the read-only store of a full disk
            return store.get(key)
        db_key, raw = store.disk.put(key)
        with self._reader_lock:
            rows = self._reader().execute(_SELECT, (db_key, raw, time.time())).fetchall()
        if not rows:
            return None
        try:
            value = store.disk.fetch(*rows[0], False)
        except OSError:  # deleted since the SELECT, or a row we refuse: a miss
            return None
        with self._pending_lock:
            self._touched[key] = time.time()
            full = len(self._touched) >= _COUNT_EVERY
        if full:
            self.add_read_counts()
        return value

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # --- blobs ---------------------------------------------------------------------------
    def _write_touches(self) -> None:
        """Before this process writes (a write may evict): the access times of what it read."""
        if self._touched:
            self.add_read_counts()

    def put_blob(self, data: bytes) -> str:
        self._write_touches()
        name = digest(data)
        if _BLOB + name not in self._dc:  # kept if present, as _write_entry's
            self._dc.set(_BLOB + name, bytes(data))
        return name

    def get_blob(self, name: str) -> bytes | None:
        """The blob whose SHA-256 is `name`, or None if it is absent or corrupt (then deleted)."""
        data = self._get(_BLOB + name)
        if data is None:
            return None
        if type(data) is not bytes or digest(data) != name:
            self._dc.delete(_BLOB + name)
            return None
        return data

    # --- results -------------------------------------------------------------------------
    def put_result(self, key: str, artifacts: dict[str, bytes | str], metadata: dict,
                   created: float | None = None) -> None:
        """Store a compile result: `artifacts` by name (str is stored as UTF-8) and
        JSON-able `metadata`. Blobs are written before the entry that names them."""
        self._write_touches()
        self._write_entry(key, *make_entry(key, artifacts, metadata, created))

    def _write_entry(self, key: str, entry: dict, data: dict[str, bytes]) -> None:
        """The entry's blobs that the cache lacks, then the entry. A blob is named by its bytes, so
        one present is kept: rewriting it would replace its file under a concurrent reader (a
        spurious miss there); a corrupt one is deleted by the read that finds it."""
        for name, blob in data.items():
            if _BLOB + entry["artifacts"][name] not in self._dc:
                self._dc.set(_BLOB + entry["artifacts"][name], blob)
        self._dc.set(_ACTION + key, _canonical(entry))

    def copy_result(self, key: str, artifacts: dict[str, bytes | str], metadata: dict,
                    created: float | None = None) -> None:
        """`put_result` of an entry read from the shared tier, written soon after on a thread of its
        own, with the others copied meanwhile, in one transaction, and only where the node lacks it:
        on a new node every rank reads the same entries at once, and their copies, each blob a write
        transaction, queued on the node's one write lock on the ranks' critical path."""
        if os.getpid() != self._pid:  # a forked child: its parent's copier is not its own
            return self.put_result(key, artifacts, metadata, created)
        with self._pending_lock:
            self._copies[key] = (artifacts, metadata, created)
            if self._copier is not None:
                return
            self._copier = threading.Thread(target=self._write_copies, name="kiln-cache-copies", daemon=True)
        self._copier.start()

    def _write_copies(self, gather_s: float = 0.05) -> None:
        time.sleep(gather_s)
        while True:
            with self._pending_lock:
                copies, self._copies = self._copies, {}
                if not copies:
                    self._copier = None
                    return
            self.write_copies(copies)

    def write_copies(self, copies: dict[str, tuple] | None = None) -> None:
        """Write `copies` (default: those `copy_result` still holds) that the node lacks."""
        if copies is None:
            with self._pending_lock:
                copies, self._copies = self._copies, {}
        if not copies or os.getpid() != self._pid:
            return
        try:
            self._write_touches()
            with self._dc.transact():
                for key, (artifacts, metadata, created) in copies.items():
                    if _ACTION + key not in self._dc:
                        self._write_entry(key, *make_entry(key, artifacts, metadata, created))
        except Exception:  # noqa: BLE001 - a copy lost is a later read of the shared tier
            pass

    def get_result(self, key: str, names=None) -> tuple[dict[str, bytes], dict] | None:
        """`(artifacts, metadata)` stored under `key`, or None on a miss. With `names`,
        only those artifacts are read. A missing, corrupt or resized blob makes it a miss."""
        entry = self.entry(key)
        result = None
        if entry is not None:
            wanted = entry["artifacts"] if names is None else {n: entry["artifacts"].get(n) for n in names}
            artifacts = {name: self.get_blob(d) if d else None for name, d in wanted.items()}
            if all(v is not None and len(v) == entry["sizes"].get(name) for name, v in artifacts.items()):
                result = artifacts, entry["metadata"]
        outcome = "misses" if result is None else "hits"
        with self._pending_lock:
            setattr(self, outcome, getattr(self, outcome) + 1)
            self._uncounted[outcome] += 1
            full = sum(self._uncounted.values()) >= _COUNT_EVERY
        if full:
            self.add_read_counts()
        return result

    def add_read_counts(self) -> None:
        """Add this process's uncounted reads to the node's hit and miss counters, and write the
        access times of the entries it read (least-recently-used eviction keeps those), in one
        transaction."""
        if os.getpid() != self._pid:
            return
        with self._pending_lock:
            uncounted, self._uncounted = self._uncounted, {"hits": 0, "misses": 0}
            touched, self._touched = self._touched, {}
            later, self._later = self._later, {}
        if not any(uncounted.values()) and not touched and not later:
            return
        try:
            with self._dc.transact():
                if any(uncounted.values()):
                    self.add_counts(_NODE_COUNTS, uncounted)
                for name, counts in later.items():
                    self.add_counts(name, counts)
                self._touch(touched)
        except Exception:  # noqa: BLE001 - counters and access times are worth less than the reads
            pass

    def _touch(self, touched: dict[str, float]) -> None:
        sql = getattr(self._dc, "_sql", None)
        if sql is None or not touched:
            return
        for key, when in touched.items():  # an entry deleted since is simply not there
            db_key, raw = self._dc.disk.put(key)
            sql("UPDATE Cache SET access_time = max(access_time, ?) WHERE key = ? AND raw = ?", (when, db_key, raw))

    def entry(self, key: str) -> dict | None:
        """The action-map entry of `key` ({key, artifacts: digests, sizes, metadata,
        metadata_digest, created}), if it is well formed and bound to `key`."""
        raw = self._get(_ACTION + key)
        if raw is None:
            return None
        try:
            entry = json.loads(raw)
            if is_bound(entry, key):
                return entry
        except (ValueError, KeyError, TypeError, AttributeError):
            pass
        self._dc.delete(_ACTION + key)  # unreadable or not this key's: a miss, rewritten by the next compile
        return None

    def __contains__(self, key: str) -> bool:
        return _ACTION + key in self._dc

    # --- records: small JSON values bound to their keys -------------------------------------
    def put_record(self, key: str, record: dict) -> None:
        """Store `record` (JSON-able) under `key` (a hex SHA-256), with the key and its digest."""
        if not _DIGEST.match(key):
            raise ValueError(f"a record's key is a hex SHA-256, not {key!r}")
        body = _canonical(record)
        self._write_touches()
        self._dc.set(_RECORD + key, _canonical({"key": key, "record": record, "digest": digest(body.encode())}))

    def get_record(self, key: str) -> dict | None:
        """The record stored under `key`, or None if absent or not bound to `key` (then deleted)."""
        raw = self._get(_RECORD + key)
        if raw is None:
            return None
        try:
            entry = json.loads(raw)
            if (type(entry) is dict and entry.get("key") == key and type(entry.get("record")) is dict
                    and entry.get("digest") == digest(_canonical(entry["record"]).encode())):
                return entry["record"]
        except (ValueError, TypeError):
            pass
        self._dc.delete(_RECORD + key)
        return None

    # --- counters: what this node's processes saw of the shared tier -----------------------
    def add_counts(self, name: str, counts: dict[str, int]) -> None:
        """Add `counts` to the counters kept under `name`, atomically for every process."""
        with self._dc.transact():
            total = self.counts(name)
            for field, n in counts.items():
                total[field] = total.get(field, 0) + n
            self._dc.set(_COUNTS + name, _canonical(total))

    def add_counts_later(self, name: str, counts: dict[str, int]) -> None:
        """`add_counts`, written with this process's read counts (every 64 events, at 5 s old, at exit,
        before `stats`): a counter is not worth a write transaction on the call it counts."""
        now = time.monotonic()
        with self._pending_lock:
            if not self._later:
                self._later_since = now
            held = self._later.setdefault(name, {})
            for field, n in counts.items():
                held[field] = held.get(field, 0) + n
            due = sum(sum(c.values()) for c in self._later.values()) >= _COUNT_EVERY or now - self._later_since > 5.0
        if due:
            self.add_read_counts()

    def zero_counts(self) -> None:
        """Zero every counter kept here (the node's reads, what its processes saw of the shared
        tier), as `ccache -z`; this process's uncounted reads are counted first, and zeroed too."""
        write_pending_counts()
        with self._dc.transact():
            for key in [k for k in self._dc.iterkeys() if k.startswith(_COUNTS)]:
                self._dc.delete(key)

    def counts(self, name: str) -> dict[str, int]:
        try:
            # diskcache's own read: inside add_counts' transaction it sees what that transaction holds
            total = json.loads(self._dc.get(_COUNTS + name) or "{}")
        except ValueError:
            return {}
        ok = type(total) is dict and all(type(v) is int for v in total.values())
        return total if ok else {}

    # --- maintenance ---------------------------------------------------------------------
    def keys(self) -> list[str]:
        return [k[len(_ACTION):] for k in self._dc.iterkeys() if k.startswith(_ACTION)]

    def ls(self) -> list[dict]:
        """Every entry, oldest first: key, created, name, artifact sizes."""
        rows = []
        for key in self.keys():
            entry = self.entry(key)
            if entry is not None:
                rows.append({"key": key, "created": entry["created"], "name": entry["metadata"].get("name", ""),
                             "target": entry["metadata"].get("target", ""), "sizes": entry["sizes"]})
        return sorted(rows, key=lambda r: r["created"])

    def stats(self) -> dict:
        """Size and counts; `hits` and `misses` are the reads of every process on the node."""
        keys = list(self._dc.iterkeys())
        entries = sum(k.startswith(_ACTION) for k in keys)
        write_pending_counts()
        reads = self.counts(_NODE_COUNTS)
        return {"path": str(self.path), "entries": entries, "blobs": sum(k.startswith(_BLOB) for k in keys),
                "volume_bytes": self._dc.volume(), "size_limit_bytes": self.size_limit,
                "hits": reads.get("hits", 0), "misses": reads.get("misses", 0)}

    def prune(self) -> dict:
        """Drop entries whose blobs are gone, blobs no entry names, then evict down to the
        size limit. A write racing with it can lose its blobs, which is a later miss."""
        referenced, dropped_entries = set(), 0
        for key in self.keys():
            entry = self.entry(key)
            if entry is None:
                continue
            names = set(entry["artifacts"].values())
            if all(_BLOB + n in self._dc for n in names):
                referenced |= names
            else:
                self._dc.delete(_ACTION + key)
                dropped_entries += 1
        dropped_blobs = 0
        for k in list(self._dc.iterkeys()):
            if k.startswith(_BLOB) and k[len(_BLOB):] not in referenced:
                dropped_blobs += self._dc.delete(k)
        evicted = self._dc.cull()
        return {"dropped_entries": dropped_entries, "dropped_blobs": dropped_blobs, "evicted": evicted}

    def clear(self) -> int:
        return self._dc.clear()

    def export(self, file, keys=None) -> int:
        """Write entries (all, or `keys`) with their blobs to a portable archive; see `archive`."""
        from .archive import export_archive
        return export_archive(self, file, keys)

    def import_(self, file):
        """Store the archive's entries whose keys their IR reproduces; an `ImportReport`."""
        from .archive import import_archive
        return import_archive(self, file)


@atexit.register
def write_pending_counts():
    """Write what every node cache this process opened still holds: copies, counts and access times."""
    for cache in list(_open_caches):
        cache.write_copies()
        cache.add_read_counts()
