"""Inductor's `torch_key()`, computed once per node (KILN_SHARE_TORCH_KEY, under graph sharing).

Every FX graph, AOTAutograd and kernel cache key of PyTorch includes `torch_key()`: a SHA-256 of
the source of every module of the torch package, which each process computes afresh by reading
them all (2,300 files; 0.1-0.25 s on a rank's first compile, warm caches included, every rank of
the node at the same moment). Here a process asks the node cache for it instead, under a
fingerprint of the files it would read: each one's path, size and modification time, as Python
checks a `.pyc` against its source. Walking the package's folders for that costs ~0.02 s; a
file edited, added or removed makes another fingerprint, and the key is computed again (and
stored). The value is PyTorch's own, so every key built from it is the one PyTorch would build.
"""
from __future__ import annotations

import hashlib
import json
import os
import threading

_DOMAIN = "kiln torch_key v1"


def fingerprint(root: str, version: str, extra_folders: tuple[str, ...] = ()) -> str:
    """The hex SHA-256 of what `torch_key()` reads under `root`: the files of its packages
    (directories holding an `__init__.py`, as `pkgutil` walks them; the top one too) and those
    of `extra_folders`, each by path, size and modification time, with the torch `version`."""
    hasher = hashlib.sha256(json.dumps([_DOMAIN, os.path.abspath(root), version]).encode())
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = sorted(d for d in subfolders if os.path.isfile(os.path.join(folder, d, "__init__.py")))
        for name in sorted(files):
            _add(hasher, os.path.join(folder, name))
    for folder in extra_folders:
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            names = []
        hasher.update(f"{folder}\0{len(names)}\n".encode(errors="surrogateescape"))
        for name in names:
            _add(hasher, os.path.join(folder, name))
    return hasher.hexdigest()


def _add(hasher, path: str) -> None:
    try:
        stat = os.stat(path)
        line = f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}\n"
    except OSError:  # gone between the listing and now: said so
        line = f"{path}\0absent\n"
    hasher.update(line.encode(errors="surrogateescape"))


class SharedTorchKey:
    """Stands for `codecache.torch_key`: the value from the node cache when its fingerprint is
    there, else PyTorch's function's (then stored). `set`, `clear` and `prefetch` are PyTorch's
    (`prefetchable_cache`), so callers that use them find them."""

    def __init__(self, compute, root: str, version: str, extra_folders: tuple[str, ...] = ()):
        self._compute, self._root, self._version, self._extra = compute, root, version, extra_folders
        self._value: bytes | None = None
        self._lock = threading.Lock()
        self.source: str | None = None  # "node cache" or "computed", once asked

    def __call__(self) -> bytes:
        with self._lock:
            if self._value is None:
                self._value = self._load_or_compute()
            return self._value

    def set(self, value: bytes) -> None:
        with self._lock:
            self._value = value

    def clear(self) -> None:
        with self._lock:
            self._value = None

    def prefetch(self) -> None:
        """Nothing ahead: the node cache's answer comes sooner than a thread would."""

    def _load_or_compute(self) -> bytes:
        from kiln.daemon.tiers import cache_write_failed, node_cache
        key = fingerprint(self._root, self._version, self._extra)
        try:
            record = node_cache().get_record(key)
        except Exception:  # noqa: BLE001 - a cache that cannot be read: PyTorch computes it
            record = None
        value = _value_of(record)
        if value is not None:
            self.source = "node cache"
            return value
        value = self._compute()
        self.source = "computed"
        if isinstance(value, bytes):
            try:
                node_cache().put_record(key, {"torch_key": value.hex()})
            except Exception as e:  # noqa: BLE001 - the next process computes it too
                cache_write_failed(e)
        return value


def _value_of(record: dict | None) -> bytes | None:
    """The key a record holds, if it is one: 32 bytes, spelled in hex."""
    if record is None or set(record) != {"torch_key"} or not isinstance(record["torch_key"], str):
        return None
    text = record["torch_key"]
    if len(text) != 64 or not set(text) <= set("0123456789abcdef"):
        return None
    return bytes.fromhex(text)


def install(codecache) -> bool:
    """`codecache.torch_key` becomes a SharedTorchKey over PyTorch's; False (left as it is) where
    this PyTorch has no such function or computes it some other way (fbcode's stored hash)."""
    compute = getattr(codecache, "torch_key", None)
    root = getattr(codecache, "_TORCH_PATH", None)
    if not callable(compute) or not isinstance(root, str) or codecache.config.is_fbcode():
        return False
    import torch
    # PyTorch also reads a few C++ files beside the modules (torch_key's extra_files: which ones
    # varies by release): those in packages are walked already; aoti_runtime/ is not a package
    extra = (os.path.join(os.path.dirname(codecache.__file__), "codegen", "aoti_runtime"),)
    codecache.torch_key = SharedTorchKey(compute, root, torch.__version__, extra)
    return True
