"""kiln.cache: results round trip, corrupt data is a miss, LRU eviction, many processes at once,
export/import, prune."""
import glob
import json
import multiprocessing
import os
import sqlite3
import time
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


def test_copies_of_shared_entries_are_written_soon_after_and_only_where_absent(cache):
    """An entry read from the shared tier is copied on a thread of the cache's own, a moment later;
    an entry the node has meanwhile is left as it is."""
    cache.put_result("a" * 64, {"value": b"the node's"}, {"n": 1})
    cache.copy_result("a" * 64, {"value": b"the tier's"}, {"n": 2})
    cache.copy_result("b" * 64, {"value": b"copied"}, {"n": 3})
    deadline = time.monotonic() + 10
    while "b" * 64 not in cache and time.monotonic() < deadline:
        time.sleep(0.02)
    assert cache.get_result("b" * 64) == ({"value": b"copied"}, {"n": 3})
    assert cache.get_result("a" * 64) == ({"value": b"the node's"}, {"n": 1})
    cache.copy_result("c" * 64, {"value": b"at exit"}, {})
    cache.write_copies()  # what exit (or a test) writes at once
    assert cache.get_result("c" * 64)[0]["value"] == b"at exit"


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


def test_an_entry_is_bound_to_its_key(cache):
    """A row copied under another key, or with its metadata altered, is a miss and is deleted."""
    (a, art_a, meta_a), (b, art_b, meta_b) = _compiled(1), _compiled(2)
    cache.put_result(a, art_a, meta_a)
    cache.put_result(b, art_b, meta_b)
    with sqlite3.connect(cache.path / "cache.db") as db:
        [(row_a,)] = db.execute("SELECT value FROM Cache WHERE key = ?", ("action/" + a,))
        db.execute("UPDATE Cache SET value = ? WHERE key = ?", (row_a, "action/" + b))  # b now serves a's cubin
    assert cache.get_result(b) is None and b not in cache
    entry = json.loads(row_a)
    entry["metadata"]["shared"] = 1 << 16
    with sqlite3.connect(cache.path / "cache.db") as db:
        db.execute("UPDATE Cache SET value = ? WHERE key = ?", (json.dumps(entry), "action/" + a))
    assert cache.get_result(a) is None and a not in cache


def test_a_crafted_row_never_deletes_outside_the_cache(cache, tmp_path):
    """diskcache removes the file a row names when the row goes; a row that names a file
    outside the cache (by a relative or an absolute path) must not take it along."""
    outside = tmp_path / "victim" / "deep"
    outside.mkdir(parents=True)
    (outside / "precious.txt").write_text("keep me")
    cache.put_result(KEY, _artifacts(7, big=True), {})
    name = "blob/" + digest(_artifacts(7, big=True)["cubin"])
    for filename in (os.path.relpath(outside / "precious.txt", cache.path), str(outside / "precious.txt")):
        with sqlite3.connect(cache.path / "cache.db") as db:
            db.execute("UPDATE Cache SET filename = ?, mode = 2 WHERE key = ?", (filename, name))
        assert cache.get_blob(name[len("blob/"):]) is None  # refused, the row deleted
        assert (outside / "precious.txt").read_text() == "keep me"
        cache.put_result(KEY, _artifacts(7, big=True), {})
    cache.prune()
    cache.clear()
    assert (outside / "precious.txt").exists()


def test_cache_import_command_errors_are_one_line(tmp_path):
    import subprocess
    import sys
    (tmp_path / "junk.zip").write_bytes(b"PK not really")
    for path in (tmp_path / "missing.zip", tmp_path / "junk.zip", tmp_path):
        run = subprocess.run([sys.executable, "-m", "kiln.daemon", "cache", "import", str(path),
                              "--dir", str(tmp_path / "c")], capture_output=True, text=True, timeout=60)
        assert run.returncode == 1 and run.stdout == ""
        assert run.stderr.startswith("kiln cache import: ") and run.stderr.count("\n") == 1, run.stderr


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


def test_a_read_does_not_wait_for_a_writer(cache):
    """diskcache's own get writes the access time, so it queues behind any writer; ours reads at once
    and writes the access times later, in one transaction with its read counts."""
    import threading
    cache.put_result(KEY, _artifacts(1), {"name": "k1"})
    before = sqlite3.connect(cache.path / "cache.db").execute(
        "SELECT access_time FROM Cache WHERE key = ?", ("action/" + KEY,)).fetchone()[0]
    writer = sqlite3.connect(cache.path / "cache.db", isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")  # holds the write lock until the reads are done
    found = []
    reader = threading.Thread(target=lambda: found.extend([cache.get_result(KEY), cache.get_result("cd" * 32)]))
    reader.start()
    reader.join(timeout=30)  # diskcache's get would wait out its 60 s timeout, then raise
    alive = reader.is_alive()
    writer.execute("COMMIT")
    reader.join()
    assert not alive and found[0] is not None and found[1] is None
    cache.add_read_counts()
    after = sqlite3.connect(cache.path / "cache.db").execute(
        "SELECT access_time FROM Cache WHERE key = ?", ("action/" + KEY,)).fetchone()[0]
    assert after > before
    assert cache.stats()["hits"] == 1 and cache.stats()["misses"] == 1


def test_counts_added_later_are_written_in_one_transaction_with_the_reads(cache):
    cache.add_counts_later("remote", {"hits": 1, "misses": 2})
    assert cache.counts("remote") == {}  # held: no write transaction on the call it counts
    cache.stats()  # what stats shows includes what this process holds
    assert cache.counts("remote") == {"hits": 1, "misses": 2}
    for _ in range(64):  # enough events: written without being asked
        cache.add_counts_later("remote", {"misses": 1})
    assert cache.counts("remote") == {"hits": 1, "misses": 66}


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


def _compiled(i: int, options=None) -> tuple[str, dict, dict]:
    """(key, artifacts, metadata) of a real kernel, as the daemon stores it: its key is
    the compile key of the IR it carries."""
    from kiln.daemon import fake
    from kiln.ir import parse_function, print_function
    from kiln.proto import compile_key
    options = options or {"num_warps": 4}
    fn = parse_function(f"kernel @k{i}(%x: ptr<int32>) {{\n  %v = load %x : int32\n  store %x, %v\n  return\n}}\n")
    made = fake.compile(fn, "sm_90a", options)
    artifacts = {"cubin": made.cubin, "ptx": made.ptx, "llir": made.llir, "kir": made.kir, "ir": print_function(fn)}
    return compile_key(fn, "sm_90a", options), artifacts, {**made.metadata, "target": "sm_90a", "options": options}


def _rewrite(src, dst, change):
    """Copy archive `src` to `dst`, passing every member through change(name, data)."""
    with zipfile.ZipFile(src) as a, zipfile.ZipFile(dst, "w") as b:
        for name in a.namelist():
            b.writestr(name, change(name, a.read(name)))


def test_export_import_roundtrip(tmp_path, cache):
    keys = []
    for i in range(5):
        key, artifacts, metadata = _compiled(i)
        cache.put_result(key, artifacts, metadata, created=1000.0 + i)
        keys.append(key)
    archive = tmp_path / "kernels.zip"
    assert cache.export(archive) == 5
    with Cache(tmp_path / "other") as other:
        report = other.import_(archive)
        assert report.imported == 5 and report.refused == []
        assert other.ls() == cache.ls()
        for key in keys:
            assert other.get_result(key) == cache.get_result(key)
    with zipfile.ZipFile(archive) as zf:  # JSON index and raw blobs, nothing else
        index = json.loads(zf.read("index.json"))
        assert index["format"] == "kiln-cache-archive" and len(index["entries"]) == 5
        assert all(n == "index.json" or n.startswith("blobs/") for n in zf.namelist())
    assert cache.export(tmp_path / "some.zip", keys=[keys[1], "f" * 64]) == 1


def test_import_skips_corrupt_entries_and_refuses_junk(tmp_path, cache):
    (a, art_a, meta_a), (b, art_b, meta_b) = _compiled(1), _compiled(2)
    cache.put_result(a, art_a, meta_a)
    cache.put_result(b, art_b, meta_b)
    good, bad = tmp_path / "good.zip", tmp_path / "bad.zip"
    cache.export(good)
    _rewrite(good, bad, lambda name, data: b"x" + data if name == "blobs/" + digest(art_b["cubin"]) else data)
    with Cache(tmp_path / "other") as other:
        report = other.import_(bad)
        assert report.imported == 1 and report.refused == [(b, "blob cubin does not match its digest")]
        assert other.keys() == [a]
    (tmp_path / "junk.zip").write_bytes(b"not a zip")
    with pytest.raises(ArchiveError):
        cache.import_(tmp_path / "junk.zip")


def _archive_of(tmp_path, entries: list[dict], blobs: dict) -> str:
    path = tmp_path / "crafted.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("index.json", json.dumps({"format": "kiln-cache-archive", "version": 1, "entries": entries}))
        for d, data in blobs.items():
            zf.writestr(f"blobs/{d}", data)
    return path


def test_import_recomputes_keys_from_the_carried_ir(tmp_path, cache):
    """An archive's keys are not taken on trust: a cubin named under another kernel's key,
    or an entry whose options were altered, is refused."""
    (victim, _, _), (other, art, meta) = _compiled(1), _compiled(2)
    blobs = {digest(v.encode() if isinstance(v, str) else v): v.encode() if isinstance(v, str) else v
             for v in art.values()}
    names = {n: digest(v.encode() if isinstance(v, str) else v) for n, v in art.items()}
    entries = [
        {"key": victim, "artifacts": names, "metadata": meta, "created": 1.0},       # another kernel's key
        {"key": other, "artifacts": names, "metadata": {**meta, "options": {"num_warps": 8}}, "created": 1.0},
        {"key": other, "artifacts": {k: v for k, v in names.items() if k != "ir"}, "metadata": meta, "created": 1.0},
        {"key": other, "artifacts": names, "metadata": {**meta, "num_warps": "4"}, "created": 1.0},
        {"key": other, "artifacts": names, "metadata": meta, "created": 1.0},        # the one honest entry
    ]
    report = cache.import_(_archive_of(tmp_path, entries, blobs))
    assert report.imported == 1 and cache.keys() == [other]
    assert [why.split(" ")[0] for _, why in report.refused] == ["its", "its", "carries", "metadata"]
    assert cache.get_result(victim) is None


def test_import_caps_member_sizes(tmp_path, cache, monkeypatch):
    from kiln.cache import archive
    monkeypatch.setattr(archive, "MAX_MEMBER_BYTES", 1 << 20)
    key, art, meta = _compiled(3)
    art["cubin"] = bytes(4 << 20)  # zeros: a few kB deflated, 4 MiB read
    cache.put_result(key, art, meta)
    cache.export(tmp_path / "big.zip")
    with Cache(tmp_path / "other") as other:
        report = other.import_(tmp_path / "big.zip")
        assert report.imported == 0 and "over the limit" in report.refused[0][1] and other.keys() == []


@pytest.mark.parametrize("content", [None, b"not a zip", "no index", b"{not json", b"[1, 2]",
                                     json.dumps({"format": "kiln-cache-archive", "version": 1, "entries": {}}).encode(),
                                     json.dumps({"format": "kiln-cache-archive", "version": 1,
                                                 "entries": [[], {"key": 1}]}).encode()])
def test_malformed_archives_are_one_line_errors(tmp_path, cache, content):
    path = tmp_path / "a.zip"
    if isinstance(content, bytes) and content.startswith(b"not"):
        path.write_bytes(content)
    elif content is not None:
        with zipfile.ZipFile(path, "w") as zf:
            zf.writestr("other.txt" if content == "no index" else "index.json", b"x" if content == "no index" else content)
    try:
        report = cache.import_(path)
    except ArchiveError as e:
        assert "\n" not in str(e) and str(path) in str(e)
    else:
        assert report.imported == 0 and len(report.refused) == 2  # the entries that are not entries


def test_a_damaged_database_is_moved_aside(tmp_path):
    path = tmp_path / "c"
    with Cache(path) as cache:
        cache.put_result(KEY, _artifacts(1), {})
    (path / "cache.db").write_bytes(b"this is not SQLite" * 100)
    with pytest.warns(RuntimeWarning, match="damaged"):
        cache = Cache(path)
    with cache:
        assert cache.get_result(KEY) is None  # a fresh, working cache
        cache.put_result(KEY, _artifacts(1), {})
        assert cache.get_result(KEY) is not None
    [aside] = glob.glob(str(path / "cache.db.damaged-*"))
    assert open(aside, "rb").read().startswith(b"this is not SQLite")


def test_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "envdir"))
    monkeypatch.setenv("KILN_CACHE_SIZE", "64M")
    assert cache_dir() == tmp_path / "envdir"
    with Cache() as c:
        assert c.path == tmp_path / "envdir" and c.size_limit == 64 << 20
    assert parse_size("1.5G") == 3 << 29 and parse_size("4096") == 4096 and parse_size("10kb") == 10240
    with pytest.raises(ValueError):
        parse_size("lots")
