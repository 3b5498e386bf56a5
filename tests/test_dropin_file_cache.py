"""`triton.runtime.cache` in the drop-in mode: Triton's file cache managers, and
TRITON_CACHE_MANAGER choosing another (Liger-Kernel installs its own this way)."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from kiln.dropin import doctor, file_cache, knobs


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TRITON_CACHE_MANAGER", raising=False)
    return tmp_path / "cache"


def test_files_and_groups_round_trip(cache_dir):
    manager = file_cache.get_cache_manager("ab12")
    assert isinstance(manager, file_cache.FileCacheManager)
    assert manager.cache_dir == str(cache_dir / "files" / "ab12") and manager.get_file("k.json") is None
    text = manager.put({"a": 1}, "k.json")  # not bytes: written as its str
    binary = manager.put(b"\x7fELF", "k.cubin")
    assert open(text).read() == "{'a': 1}" and open(binary, "rb").read() == b"\x7fELF"
    assert manager.get_file("k.cubin") == binary and manager.has_file("k.json")
    manager.put_group("k.json", {"k.json": text, "k.cubin": binary})
    assert manager.get_group("k.json") == {"k.json": text, "k.cubin": binary}
    assert not [f for f in os.listdir(manager.cache_dir) if ".tmp." in f]  # nothing half written is left


def test_a_broken_or_incomplete_group_is_a_miss(cache_dir):
    manager = file_cache.FileCacheManager("cd34")
    assert manager.get_group("g") is None
    manager.put("not json", "__grp__g")
    assert manager.get_group("g") is None
    manager.put(json.dumps({"child_paths": {"gone": os.path.join(manager.cache_dir, "gone")}}), "__grp__g")
    assert manager.get_group("g") is None
    manager.put(json.dumps({"child_paths": ["a list"]}), "__grp__g")
    assert manager.get_group("g") is None


def test_dump_and_override_managers_use_their_own_directories(cache_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_DUMP_DIR", str(tmp_path / "dump"))
    assert file_cache.get_dump_manager("ef").cache_dir == str(tmp_path / "dump" / "ef")
    override = file_cache.get_override_manager("ef")
    assert override.cache_dir == str(cache_dir / "override" / "ef") and not os.path.exists(override.cache_dir)


class Recording(file_cache.FileCacheManager):
    pass


def test_the_manager_class_comes_from_the_knob_or_the_environment(cache_dir, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_MANAGER", f"{__name__}:Recording")
    assert type(file_cache.get_cache_manager("01")).__name__ == "Recording"
    monkeypatch.setattr(knobs.cache, "manager_class", file_cache.FileCacheManager)
    assert type(file_cache.get_cache_manager("01")) is file_cache.FileCacheManager
    monkeypatch.setattr(knobs.cache, "manager_class", None)
    monkeypatch.setenv("TRITON_CACHE_MANAGER", "no-colon")
    with pytest.raises(ValueError, match="expected 'module:Class'"):
        file_cache.get_cache_manager("01")


@pytest.mark.skipif(doctor.installed_hook() is None, reason="kiln's drop-in hook is not installed here")
def test_under_the_drop_in_triton_runtime_cache_is_this_module(cache_dir, tmp_path):
    (tmp_path / "mine.py").write_text(textwrap.dedent("""
        from triton.runtime.cache import FileCacheManager
        class Mine(FileCacheManager):
            pass
    """))
    code = textwrap.dedent("""
        import os
        import triton.runtime.cache as c
        from triton.runtime.cache import get_cache_manager
        os.environ["TRITON_CACHE_MANAGER"] = "mine:Mine"
        print(c.__name__, type(get_cache_manager("ab")).__name__)
    """)
    env = {**os.environ, "KILN_DROPIN": "1", "PYTHONPATH": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["kiln.dropin.file_cache", "Mine"], out.stderr


@pytest.fixture
def redis_store(monkeypatch):
    from redis_server import MISSING, RedisServer, find
    if find() is None:
        pytest.skip(MISSING)
    pytest.importorskip("redis")
    with RedisServer() as server:
        monkeypatch.setenv("TRITON_REDIS_HOST", "127.0.0.1")
        monkeypatch.setenv("TRITON_REDIS_PORT", str(server.port))
        monkeypatch.setenv("TRITON_REMOTE_CACHE_BACKEND", "kiln.dropin.file_cache:RedisRemoteCacheBackend")
        yield server


def test_the_remote_manager_shares_files_and_groups_through_redis(cache_dir, redis_store, tmp_path, monkeypatch):
    writer = file_cache.RemoteCacheManager("ef56")
    cubin = writer.put(b"\x7fELF", "k.cubin")
    meta = writer.put({"a": 1}, "k.json")
    writer.put_group("k.json", {"k.json": meta, "k.cubin": cubin})
    import redis
    stored = redis.Redis(port=redis_store.port).get("triton:ef56:k.cubin")
    assert stored == b"\x7fELF"  # Triton's key format
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "other-node"))  # another machine: nothing local
    reader = file_cache.RemoteCacheManager("ef56")
    group = reader.get_group("k.json")
    assert sorted(group) == ["k.cubin", "k.json"] and open(group["k.cubin"], "rb").read() == b"\x7fELF"
    assert group["k.cubin"].startswith(str(tmp_path / "other-node"))
    assert reader.get_file("missing") is None and reader.get_group("missing") is None


def test_a_remote_group_naming_paths_outside_the_cache_is_a_miss(cache_dir, redis_store):
    import redis
    store = redis.Redis(port=redis_store.port)  # what another writer (or a damaged store) left there
    store.set("triton:ab78:../escape", b"x")
    store.set("triton:ab78:__grp__g", json.dumps({"child_paths": ["../escape"]}))
    assert file_cache.RemoteCacheManager("ab78").get_group("g") is None
    assert not (cache_dir / "files" / "escape").exists()


def test_the_remote_manager_needs_a_store(cache_dir, monkeypatch):
    monkeypatch.delenv("TRITON_REMOTE_CACHE_BACKEND", raising=False)
    with pytest.raises(RuntimeError, match="TRITON_REMOTE_CACHE_BACKEND"):
        file_cache.RemoteCacheManager("ab90")
