"""`triton.runtime.cache` in the drop-in mode: Triton's file cache managers, for the code that
keeps its own files beside compiled kernels or swaps in its own manager (Liger-Kernel's
`TRITON_CACHE_MANAGER=module:Class`), and Triton's remote manager over a store such as Redis
(`RemoteCacheManager`, `RedisRemoteCacheBackend`). kiln's compiles do not go through them: its
binaries live in the node cache (kiln.cache) and its own shared tier; these files live under its
directory, in `files/KEY/`.
"""
from __future__ import annotations

import base64
import hashlib
import importlib
import json
import os
import uuid
from abc import ABC, abstractmethod

from kiln.cache.env import triton_cache_manager

from . import knobs


class CacheManager(ABC):
    def __init__(self, key, override=False, dump=False):
        pass

    @abstractmethod
    def get_file(self, filename) -> str | None:
        ...

    @abstractmethod
    def put(self, data, filename, binary=True) -> str:
        ...

    @abstractmethod
    def get_group(self, filename: str) -> dict[str, str] | None:
        ...

    @abstractmethod
    def put_group(self, filename: str, group: dict[str, str]):
        ...


class FileCacheManager(CacheManager):
    """Files of one `key` in one directory: the cache's (or, with `dump`/`override`, the dump or
    override directory's), with whole-file writes that a reader never sees half done."""

    def __init__(self, key, override=False, dump=False):
        self.key = key
        self.lock_path = None
        if dump:
            self.cache_dir = os.path.join(knobs.cache.dump_dir, key)
        elif override:
            self.cache_dir = os.path.join(knobs.cache.override_dir, key)
            return  # an override directory is read, never made
        else:
            self.cache_dir = os.path.join(knobs.cache.dir, "files", key)
        self.lock_path = os.path.join(self.cache_dir, "lock")
        os.makedirs(self.cache_dir, exist_ok=True)

    def _make_path(self, filename) -> str:
        return os.path.join(self.cache_dir, filename)

    def has_file(self, filename) -> bool:
        if not self.cache_dir:
            raise RuntimeError("Could not create or locate cache dir")
        return os.path.exists(self._make_path(filename))

    def get_file(self, filename) -> str | None:
        return self._make_path(filename) if self.has_file(filename) else None

    def get_group(self, filename: str) -> dict[str, str] | None:
        """The files a group names, if the group file and all of them are there."""
        children = _group_children(self.get_file(_group_name(filename)))
        if not isinstance(children, dict):
            return None
        group = {}
        for name, child in children.items():
            if not isinstance(child, str) or not os.path.exists(child):
                return None
            group[name] = child
        return group

    def put_group(self, filename: str, group: dict[str, str]) -> str:
        if not self.cache_dir:
            raise RuntimeError("Could not create or locate cache dir")
        children = {name: self._make_path(name) for name in group}
        return self.put(json.dumps({"child_paths": children}), _group_name(filename), binary=False)

    def put(self, data, filename, binary=True) -> str:
        if not self.cache_dir:
            raise RuntimeError("Could not create or locate cache dir")
        binary = isinstance(data, bytes)
        if not binary:
            data = str(data)
        path = self._make_path(filename)
        temp = f"{path}.tmp.pid_{os.getpid()}_{uuid.uuid4().hex}"  # then renamed: readers see all or nothing
        with open(temp, "wb" if binary else "w") as f:
            f.write(data)
        os.replace(temp, path)
        return path


class RemoteCacheBackend(ABC):
    """A store of cache files outside the machine, for one cache key (Triton's interface): `get` gives
    the ones it has of `filenames`, `put` stores one."""

    def __init__(self, key: str):
        pass

    @abstractmethod
    def get(self, filenames: list[str]) -> dict[str, bytes]:
        ...

    @abstractmethod
    def put(self, filename: str, data: bytes):
        ...


class RedisRemoteCacheBackend(RemoteCacheBackend):
    """Cache files in Redis (`knobs.redis`: TRITON_REDIS_HOST, TRITON_REDIS_PORT and the key format, by default
    `triton:{key}:{filename}`), as Triton's."""

    def __init__(self, key: str):
        import redis
        self.key = key
        self.key_format = knobs.redis.key_format
        self.redis = redis.Redis(host=knobs.redis.host, port=knobs.redis.port)

    def _name(self, filename: str) -> str:
        return self.key_format.format(key=self.key, filename=filename)

    def get(self, filenames: list[str]) -> dict[str, bytes]:
        found = self.redis.mget([self._name(f) for f in filenames])
        return {f: data for f, data in zip(filenames, found) if data is not None}

    def put(self, filename: str, data: bytes):
        self.redis.set(self._name(filename), data)


class RemoteCacheManager(CacheManager):
    """Triton's manager over a remote store (`knobs.cache.remote_manager_class`, TRITON_REMOTE_CACHE_BACKEND):
    files are put there and read from there, and kept as local files (the key's FileCacheManager) so callers get
    paths; dump and override directories stay local. Select it with TRITON_CACHE_MANAGER=
    `triton.runtime.cache:RemoteCacheManager`."""

    def __init__(self, key, override=False, dump=False):
        backend = knobs.cache.remote_manager_class
        if backend is None:
            raise RuntimeError("RemoteCacheManager needs a store: set TRITON_REMOTE_CACHE_BACKEND=module:Class "
                               "(e.g. triton.runtime.cache:RedisRemoteCacheBackend)")
        self.local = FileCacheManager(key, override=override, dump=dump)
        self.remote = None if (override or dump) else backend(key)

    def _kept(self, filename: str, data) -> str:
        return self.local.put(data, filename)

    def get_file(self, filename) -> str | None:
        if self.remote is None:
            return self.local.get_file(filename)
        found = self.remote.get([filename])
        return self._kept(filename, found[filename]) if filename in found else None

    def put(self, data, filename, binary=True) -> str:
        if self.remote is None:
            return self.local.put(data, filename, binary=binary)
        if not isinstance(data, bytes):
            data = str(data).encode()
        self.remote.put(filename, data)
        return self._kept(filename, data)

    def get_group(self, filename: str) -> dict[str, str] | None:
        """The files a group names, fetched from the store together; None unless the group and all its
        files are there."""
        if self.remote is None:
            return self.local.get_group(filename)
        children = _group_children(self.get_file(_group_name(filename)))
        if not isinstance(children, list) or not all(_plain_name(c) for c in children):
            return None  # names from the store become local paths: a file name, nothing else
        found = self.remote.get(children)
        if len(found) != len(children):
            return None
        return {name: self._kept(name, data) for name, data in found.items()}

    def put_group(self, filename: str, group: dict[str, str]) -> str:
        if self.remote is None:
            return self.local.put_group(filename, group)
        return self.put(json.dumps({"child_paths": sorted(group)}), _group_name(filename))


def _group_children(path: str | None):
    """The `child_paths` a group file holds (a dict of paths locally, a list of names in a remote
    store), or None where the file is missing or broken (a miss)."""
    if path is None:
        return None
    try:
        with open(path) as f:
            return json.load(f)["child_paths"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _plain_name(name) -> bool:
    return isinstance(name, str) and name not in ("", ".", "..") and os.path.basename(name) == name \
        and "\\" not in name and "\0" not in name


def _base32(key: str) -> str:
    """Triton's spelling of a hex digest in cache paths. Inductor spells a kernel's directory with
    this module's `_base32` (kiln.dropin.triton_files writes there), as with Triton 3.6's."""
    return base64.b32encode(bytes.fromhex(key)).decode().rstrip("=")


def _group_name(filename: str) -> str:
    return f"__grp__{filename}"


def _manager_class():
    """`knobs.cache.manager_class`, else TRITON_CACHE_MANAGER ("module:Class"), else FileCacheManager."""
    chosen = knobs.cache.manager_class or triton_cache_manager()
    if not chosen:
        return FileCacheManager
    if isinstance(chosen, type):
        return chosen
    module, sep, name = chosen.partition(":")
    if not sep or not module or not name:
        raise ValueError(f"TRITON_CACHE_MANAGER={chosen!r}: expected 'module:Class'")
    return getattr(importlib.import_module(module), name)


def get_cache_manager(key) -> CacheManager:
    return _manager_class()(key)


def get_override_manager(key) -> CacheManager:
    return _manager_class()(key, override=True)


def get_dump_manager(key) -> CacheManager:
    return _manager_class()(key, dump=True)


def make_so_cache_key(version_hash, signature, constants, ids, **kwargs) -> str:
    """Triton's key of a compiled launcher module (base32 of a SHA-256): the version, the signature with
    every pointer spelled `ptr`, the constants, the argument ids and any further values, in order."""
    kinds = "".join("ptr" if str(kind).startswith("*") else str(kind) for kind in signature.values())
    text = "-".join([f"{version_hash}-{kinds}-{constants}-{ids}", *(str(value) for value in kwargs.values())])
    return _base32(hashlib.sha256(text.encode()).hexdigest())


def triton_key() -> str:
    """`triton.runtime.cache.triton_key`: kiln's (kiln.dropin.backends), where Triton keeps it."""
    from .backends import triton_key as key
    return key()


def get_cache_key(src, backend, backend_options, env_vars) -> str:
    """`triton.runtime.cache.get_cache_key`: the compile's key (kiln.dropin.compile), where Triton keeps it."""
    from .compile import get_cache_key as key
    return key(src, backend, backend_options, env_vars)
