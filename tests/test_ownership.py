"""Every directory and socket kiln uses is this user's alone (or, asked for, a group's):
what another user could write is refused with a clear message. The tests run as root, so
the other user is uid 12345: files and sockets chowned to it, processes run as it."""
import os
import stat
import subprocess
import tempfile
import warnings

import pytest
import rogue_daemon

from kiln.cache import Cache, paths
from kiln.daemon import create_server, fake, tiers
from kiln.daemon.client import Client
from kiln.ir import parse_function
from kiln.proto import compile_key

OTHER = 12345
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="simulates another user with chown and setuid")


def kernel():
    return parse_function("kernel @victim(%x: ptr<int32>) {\n  %v = load %x : int32\n  store %x, %v\n  return\n}\n")


@pytest.fixture
def base(monkeypatch):
    """A directory everyone may traverse (as a home or /scratch is), so modes below it decide."""
    path = tempfile.mkdtemp(prefix="kiln-own-", dir="/tmp")
    os.chmod(path, 0o755)
    monkeypatch.delenv("KILN_RUNTIME_DIR", raising=False)
    monkeypatch.delenv("KILN_CACHE_SHARED", raising=False)
    monkeypatch.delenv("KILN_DAEMON", raising=False)
    monkeypatch.setattr(tiers, "_state", tiers._State())
    yield path
    subprocess.run(["rm", "-rf", path], check=False)


def _planted_server(sock: str):
    """Another user's server on `sock`, answering with a valid-looking reply of its own."""
    fn, options = kernel(), {"num_warps": 4}
    key = compile_key(fn, "sm_90a", options)
    return rogue_daemon.serve(sock, lambda request: rogue_daemon.response(
        key, {"name": "victim", "target": "sm_90a", "num_warps": 4, "shared": 0}))


def _compile_warnings(options=None):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        binary = tiers.cached_compile(kernel(), "sm_90a", options or {"num_warps": 4}, compile_fn=fake.compile)
    return binary, [str(w.message) for w in caught]


def test_a_socket_planted_under_a_shared_cache_dir_is_not_used(base, monkeypatch):
    """The report's case: KILN_CACHE_DIR under a 0777 directory, where another user made
    the cache and its run directory first and serves daemon.sock there."""
    os.chmod(base, 0o777)
    run = os.path.join(base, "cache", "run")
    os.makedirs(run)
    for d in (os.path.dirname(run), run):
        os.chmod(d, 0o777)
        os.chown(d, OTHER, OTHER)
    server, servicer = _planted_server(os.path.join(run, "daemon.sock"))
    os.chown(os.path.join(run, "daemon.sock"), OTHER, OTHER)
    monkeypatch.setenv("KILN_CACHE_DIR", os.path.join(base, "cache"))
    try:
        binary, messages = _compile_warnings()
    finally:
        server.stop(0)
    assert servicer.calls == 0 and binary.source == "local" and b"planted" not in binary.cubin
    assert any("refusing" in m and "owned by uid 12345" in m for m in messages), messages


@pytest.mark.parametrize("how", ["socket of another user", "runtime dir of another user", "runtime dir 0777",
                                 "runtime dir 0770"])
def test_the_daemon_socket_must_be_ours(base, monkeypatch, how):
    runtime = os.path.join(base, "run")
    os.makedirs(runtime, mode=0o700)
    sock = os.path.join(runtime, "daemon.sock")
    server, servicer = _planted_server(sock)
    if how == "socket of another user":
        os.chown(sock, OTHER, OTHER)
    elif how == "runtime dir of another user":
        os.chown(runtime, OTHER, OTHER)
    else:
        os.chmod(runtime, int(how[-4:], 8))
    monkeypatch.setenv("KILN_RUNTIME_DIR", runtime)
    monkeypatch.setenv("KILN_CACHE_DIR", os.path.join(base, "cache"))
    try:
        with pytest.raises(paths.UnsafePathError, match="refusing"):
            Client(f"unix:{sock}").healthy(1.0)
        binary, messages = _compile_warnings()
        monkeypatch.setenv("KILN_DAEMON", f"unix:{sock}")  # named outright: refused alike
        monkeypatch.setenv("KILN_CACHE_DIR", os.path.join(base, "cache2"))
        monkeypatch.setattr(tiers, "_state", tiers._State())
        named, _ = _compile_warnings()
    finally:
        server.stop(0)
    assert servicer.calls == 0 and binary.source == named.source == "local"
    assert any("refusing" in m for m in messages), messages


@pytest.mark.parametrize("mode,owner", [(0o777, 0), (0o770, 0), (0o700, OTHER), (0o755, OTHER)])
def test_a_cache_dir_others_could_write_is_refused(base, mode, owner):
    path = os.path.join(base, "c")
    os.mkdir(path)
    os.chmod(path, mode)
    os.chown(path, owner, owner)
    with pytest.raises(paths.UnsafePathError, match=f"refusing {path}: it is owned by uid {owner}"):
        Cache(path)


def _can_read_as(uid, gid, path) -> bool:
    return subprocess.run(["cat", path], user=uid, group=gid, extra_groups=[], capture_output=True).returncode == 0


def test_the_cache_and_runtime_dir_are_this_users_alone(base, monkeypatch):
    (open(os.path.join(base, "control"), "w")).close()
    assert _can_read_as(OTHER, OTHER, os.path.join(base, "control"))  # the setup lets modes decide
    monkeypatch.setenv("KILN_CACHE_DIR", os.path.join(base, "cache"))
    with Cache() as cache:
        cache.put_result("ab" * 32, {"cubin": bytes(range(256)) * 400}, {})
    assert stat.S_IMODE(os.stat(os.path.join(base, "cache")).st_mode) == 0o700
    assert not _can_read_as(OTHER, OTHER, os.path.join(base, "cache", "cache.db"))
    sock = os.path.join(base, "cache", "run", "daemon.sock")
    server, _ = create_server(f"unix:{sock}", "kiln.daemon.fake:compile", workers=1, cache=Cache())
    server.pool.close()
    assert stat.S_IMODE(os.stat(os.path.dirname(sock)).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(sock).st_mode) == 0o600


def test_a_shared_cache_is_the_groups(base, monkeypatch):
    group = 4242
    os.chown(base, 0, group)
    os.chmod(base, 0o2775)
    monkeypatch.setenv("KILN_CACHE_DIR", os.path.join(base, "cache"))
    monkeypatch.setenv("KILN_CACHE_SHARED", "1")
    with Cache() as cache:
        cache.put_result("ab" * 32, {"cubin": bytes(range(256)) * 400}, {})
        [blob] = [os.path.join(d, f) for d, _, files in os.walk(cache.path) for f in files if f.endswith(".val")]
    top = os.stat(os.path.join(base, "cache"))
    assert stat.S_IMODE(top.st_mode) == 0o2770 and top.st_gid == group
    assert stat.S_IMODE(os.stat(blob).st_mode) == 0o660
    assert stat.S_IMODE(os.stat(os.path.dirname(blob)).st_mode) == 0o2770
    db = os.path.join(base, "cache", "cache.db")
    assert _can_read_as(OTHER, group, db) and _can_read_as(OTHER, group, blob)
    assert not _can_read_as(OTHER, OTHER, db)
    from kiln.cache import env
    assert str(env.runtime_dir()) == os.path.join(base, "cache", f"run-{os.geteuid()}")  # the daemon's: ours alone
