"""kiln.cache: results round trip, corrupt data is a miss, LRU eviction, many processes at once,
export/import, prune."""
import glob
import json
import multiprocessing
import os
import sqlite3
import zipfile

import diskcache
import pytest

from kiln.cache import ArchiveError, Cache, digest
from kiln.cache.env import cache_dir, parse_size

KEY = "ab" * 32


def _artifacts(i: int, big: bool = False) -> dict:
    """Artifacts whose bytes depend only on i; `big` ones are stored as files by diskcache."""
    cubin = (f"cubin {i} ".encode() * 8000)[: 40_000 if big else 2_000]
    return {"cubin": cubin, "ptx": f".version 8.0 // kernel {i}\n", "ir": f"kernel @k{i}() {{\n}}\n"}


@pytest.fixture
def cache(tmp_path):
    with Cache(tmp_path / "c", size_limit=1 << 30) as c:
        yield c


def test_put_get_roundtrip(cache):
    assert cache.get_result(KEY) is None
    cache.put_result(KEY, _artifacts(1, big=True), {"name": "k1", "n_regs": 40})
    artifacts, metadata = cache.get_result(KEY)
    want = {name: (v.encode() if isinstance(v, str) else v) for name, v in _artifacts(1, big=True).items()}
    assert artifacts == want
    assert metadata == {"name": "k1", "n_regs": 40}
    only, _ = cache.get_result(KEY, names=["cubin"])
    assert list(only) == ["cubin"]
    assert cache.get_result(KEY, names=["llir"]) is None  # not stored: a miss
    assert KEY in cache and cache.keys() == [KEY]
    stats = cache.stats()
    assert stats["entries"] == 1 and stats["blobs"] == 3 and stats["hits"] == 2 and stats["misses"] == 2
    [row] = cache.ls()
    assert row["key"] == KEY and row["name"] == "k1" and row["sizes"]["cubin"] == 40_000


def test_identical_artifacts_share_a_blob(cache):
    cache.put_result("a" * 64, _artifacts(1), {})
    cache.put_result("b" * 64, _artifacts(1), {})
    assert cache.stats()["blobs"] == 3


def test_metadata_must_be_json(cache):
    with pytest.raises(TypeError):
        cache.put_result(KEY, _artifacts(1), {"bad": object()})


def _corrupt_file_blob(path, data: bytes):
    [file] = [f for f in glob.glob(str(path / "*" / "*" / "*.val")) if open(f, "rb").read() == data]
    with open(file, "r+b") as f:
        f.seek(100)
        f.write(b"\xde\xad\xbe\xef")


def _corrupt_sqlite_blob(path, data: bytes):
    with sqlite3.connect(path / "cache.db") as db:
        n = db.execute("UPDATE Cache SET value = ? WHERE key = ?", (b"tampered", "blob/" + digest(data))).rowcount
    assert n == 1


@pytest.mark.parametrize("where", ["file", "sqlite"])
def test_corrupt_blob_is_a_miss_and_is_rewritten(cache, where):
    artifacts = _artifacts(2, big=where == "file")
    cache.put_result(KEY, artifacts, {"name": "k2"})
    corrupt = _corrupt_file_blob if where == "file" else _corrupt_sqlite_blob
    corrupt(cache.path, artifacts["cubin"])
    assert cache.get_result(KEY) is None  # detected, not a crash
    assert cache.get_blob(digest(artifacts["cubin"])) is None  # and deleted
    cache.put_result(KEY, artifacts, {"name": "k2"})  # the recompile rewrites it
    assert cache.get_result(KEY)[0]["cubin"] == artifacts["cubin"]


def test_unreadable_entry_is_a_miss(cache):
    cache.put_result(KEY, _artifacts(3), {})
    with sqlite3.connect(cache.path / "cache.db") as db:
        db.execute("UPDATE Cache SET value = ? WHERE key = ?", ("{not json", "action/" + KEY))
    assert cache.get_result(KEY) is None
    assert KEY not in cache


def test_pickled_values_are_refused(cache):
    class Boom:
        def __reduce__(self):
            return (os.getpid, ())  # harmless, but would run on unpickling
    with diskcache.Cache(str(cache.path)) as plain:
        plain.set("action/" + KEY, {"artifacts": {}, "metadata": Boom()})
        plain.set(("a", "tuple", "key"), b"pickled key")
    assert cache.get_result(KEY) is None
    assert cache.keys() == [KEY] and cache.ls() == []  # the foreign key is skipped, the entry unreadable
    with pytest.raises(TypeError):
        cache._dc.set("x", {"a": 1})


def test_size_limit_evicts_least_recently_used(tmp_path):
    with Cache(tmp_path / "c", size_limit=1_000_000) as cache:
        keys = [f"{i:064x}" for i in range(40)]
        for i, key in enumerate(keys[:12]):
            cache.put_result(key, _artifacts(i, big=True), {"i": i})
        assert cache.get_result(keys[0]) is not None  # touch the oldest
        for i, key in enumerate(keys[12:], 12):
            cache.put_result(key, _artifacts(i, big=True), {"i": i})
            assert cache.get_result(keys[0]) is not None  # in use, so never evicted
        assert cache._dc.volume() <= 1_000_000 + 500_000  # diskcache culls 10 rows per write
        assert cache.get_result(keys[1]) is None  # least recently used: gone
        assert cache.get_result(keys[-1]) is not None
        cache.prune()
        assert cache._dc.volume() <= 1_000_000


def test_prune_drops_orphans(cache):
    cache.put_result("a" * 64, _artifacts(1), {})
    cache.put_result("b" * 64, _artifacts(2), {})
    orphan = cache.put_blob(b"nobody names me")
    cache._dc.delete("blob/" + digest(_artifacts(2)["cubin"]))  # b loses a blob
    report = cache.prune()
    assert report["dropped_entries"] == 1 and report["dropped_blobs"] >= 1
    assert cache.get_blob(orphan) is None
    assert cache.keys() == ["a" * 64]
    cache.clear()
    assert cache.stats()["entries"] == 0


def _worker(path: str, worker: int, n: int) -> int:
    """Write n entries (the same keys in every worker) and read them all back, checking bytes."""
    import random
    checked = 0
    with Cache(path) as cache:
        order = list(range(n))
        random.Random(worker).shuffle(order)
        for i in order:
            cache.put_result(f"{i:064x}", _artifacts(i, big=i % 3 == 0), {"i": i, "by": worker})
            for j in random.Random(i * 7 + worker).sample(range(n), 5):
                got = cache.get_result(f"{j:064x}")
                if got is not None:
                    assert got[0]["cubin"] == _artifacts(j, big=j % 3 == 0)["cubin"] and got[1]["i"] == j
                    checked += 1
        for i in range(n):
            artifacts, metadata = cache.get_result(f"{i:064x}")
            assert artifacts["ptx"] == _artifacts(i)["ptx"].encode() and metadata["i"] == i
            checked += 1
    return checked


def test_many_processes_share_the_cache(tmp_path):
    path = str(tmp_path / "shared")
    Cache(path, size_limit=1 << 30).close()
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(4) as pool:
        checked = pool.starmap(_worker, [(path, w, 24) for w in range(4)])
    assert all(c >= 24 for c in checked)
    with Cache(path) as cache:
        assert cache.stats()["entries"] == 24
        assert cache.prune()["dropped_blobs"] == 0


def test_forked_child_reopens(cache):
    cache.put_result(KEY, _artifacts(4), {})
    pid = os.fork()
    if pid == 0:  # the child: its own SQLite connection, same data
        ok = cache.get_result(KEY) is not None
        cache.put_result("c" * 64, _artifacts(5), {})
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert cache.get_result("c" * 64) is not None


def test_export_import_roundtrip(tmp_path, cache):
    for i in range(5):
        cache.put_result(f"{i:064x}", _artifacts(i, big=i == 0), {"name": f"k{i}"}, created=1000.0 + i)
    archive = tmp_path / "kernels.zip"
    assert cache.export(archive) == 5
    with Cache(tmp_path / "other") as other:
        assert other.import_(archive) == 5
        assert other.ls() == cache.ls()
        for i in range(5):
            assert other.get_result(f"{i:064x}") == cache.get_result(f"{i:064x}")
    with zipfile.ZipFile(archive) as zf:  # JSON index and raw blobs, nothing else
        index = json.loads(zf.read("index.json"))
        assert index["format"] == "kiln-cache-archive" and len(index["entries"]) == 5
        assert all(n == "index.json" or n.startswith("blobs/") for n in zf.namelist())
    assert cache.export(tmp_path / "some.zip", keys=[f"{1:064x}", "f" * 64]) == 1


def test_import_skips_corrupt_entries_and_refuses_junk(tmp_path, cache):
    cache.put_result("a" * 64, _artifacts(1), {})
    cache.put_result("b" * 64, _artifacts(2), {})
    good, bad = tmp_path / "good.zip", tmp_path / "bad.zip"
    cache.export(good)
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(bad, "w") as dst:
        for name in src.namelist():
            data = src.read(name)
            dst.writestr(name, b"x" + data if name == "blobs/" + digest(_artifacts(2)["cubin"]) else data)
    with Cache(tmp_path / "other") as other:
        assert other.import_(bad) == 1
        assert other.keys() == ["a" * 64]
    (tmp_path / "junk.zip").write_bytes(b"not a zip")
    with pytest.raises(ArchiveError):
        cache.import_(tmp_path / "junk.zip")


def test_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "envdir"))
    monkeypatch.setenv("KILN_CACHE_SIZE", "64M")
    assert cache_dir() == tmp_path / "envdir"
    with Cache() as c:
        assert c.path == tmp_path / "envdir" and c.size_limit == 64 << 20
    assert parse_size("1.5G") == 3 << 29 and parse_size("4096") == 4096 and parse_size("10kb") == 10240
    with pytest.raises(ValueError):
        parse_size("lots")
