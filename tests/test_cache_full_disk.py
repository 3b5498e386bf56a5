"""A node cache on a full disk is kept and served, not taken for damaged: a process that opens it
reads every entry, stores nothing new (one warning), and a daemon starts on it and compiles."""
import os
import sqlite3
import warnings

import pytest

from kiln.cache import Cache
from kiln.cache.store import CacheNotWritable
from kiln.daemon import create_server
from kiln.daemon.client import Client
from kiln.ir import parse_function

KEYS = [f"{i:064x}" for i in range(8)]
KERNEL = "kernel @k(%x: ptr<fp32>) {\n  %v = load %x : fp32\n  store %x, %v\n  return\n}\n"


def sqlite_error(message, name):
    error = sqlite3.OperationalError(message)
    error.sqlite_errorname = name
    return error


@pytest.fixture
def filled(tmp_path):
    """A cache of 8 entries (small and file-sized values), closed."""
    with Cache(tmp_path / "cache") as cache:
        for i, key in enumerate(KEYS):
            cache.put_result(key, {"cubin": os.urandom(100 if i % 2 else 200_000)}, {"name": f"k{i}"})
    return tmp_path / "cache"


@pytest.fixture
def disk_full(monkeypatch):
    """SQLite's answers when the disk is full: opening the cache as usual fails as it did on a full disk."""
    def refuse(self):
        raise sqlite_error("disk I/O error", "SQLITE_IOERR")
    monkeypatch.setattr(Cache, "_diskcache", refuse)


@pytest.mark.parametrize("error", [("disk I/O error", "SQLITE_IOERR"), ("database or disk is full", "SQLITE_FULL")])
def test_a_full_disk_keeps_the_cache_and_serves_it(filled, monkeypatch, error):
    monkeypatch.setattr(Cache, "_diskcache", lambda self: (_ for _ in ()).throw(sqlite_error(*error)))
    with pytest.warns(RuntimeWarning, match="cannot be written"):
        cache = Cache(filled)
    assert sorted(cache.keys()) == KEYS
    assert all(cache.get_result(key)[1]["name"] == f"k{i}" for i, key in enumerate(KEYS))
    with pytest.raises(CacheNotWritable):
        cache.put_result("f" * 64, {"cubin": b"x"}, {"name": "new"})
    assert not [name for name in os.listdir(filled) if "damaged" in name]  # nothing moved aside
    cache.close()


def test_damage_is_still_moved_aside(filled, monkeypatch):
    opened = []

    def damaged_once(self, real=Cache._diskcache):
        if not opened:
            opened.append(1)
            raise sqlite_error("database disk image is malformed", "SQLITE_CORRUPT")
        return real(self)
    monkeypatch.setattr(Cache, "_diskcache", damaged_once)
    with pytest.warns(RuntimeWarning, match="damaged"):
        cache = Cache(filled)
    assert cache.keys() == [] and [name for name in os.listdir(filled) if "damaged" in name]
    cache.close()


def test_a_daemon_starts_on_a_full_disk_and_compiles(filled, disk_full, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        cache = Cache(filled)
    server, _ = create_server(f"unix:{tmp_path / 'd.sock'}", "kiln.daemon.fake:compile", workers=1, cache=cache)
    server.start()
    try:
        fn = parse_function(KERNEL)
        with Client(f"unix:{tmp_path / 'd.sock'}") as client:
            assert client.compile(fn, "sm_90a", {"num_warps": 4}).cubin  # compiled, not stored
            assert client.stats().cache.entries == 8
    finally:
        server.stop(1)
        cache.close()


def test_a_process_on_a_full_disk_warns_once(filled, disk_full, monkeypatch):
    """Opening the cache read-only warns; the compiles that then cannot store say nothing more."""
    from kiln.daemon import tiers
    monkeypatch.setenv("KILN_CACHE_DIR", str(filled))
    monkeypatch.setenv("KILN_DAEMON", "off")
    monkeypatch.setattr(tiers, "_state", tiers._State())
    fn = parse_function(KERNEL)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for options in ({"num_warps": 4}, {"num_warps": 8}):
            assert tiers.cached_compile(fn, "sm_90a", options).cubin
    said = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(said) == 1 and "cannot be written" in said[0], said
