"""The shared tier on a real Redis server on loopback: two nodes (two cache directories, two
daemons) share compiles through it; damaged, foreign and oversized entries are misses; a
Redis that dies mid-run costs one warning and never a failed call."""
import json
import os
import signal
import tempfile
import warnings

import pytest

from kiln.cache import Cache
from kiln.cache.remote import PREFIX, NoClusterKey, RemoteCache, summary
from kiln.cache.store import make_entry
from kiln.daemon import cli, create_server, fake, prewarm, tiers
from kiln.daemon.artifacts import NodeArtifacts, artifact_key
from kiln.daemon.client import Client
from kiln.daemon.metrics import exposition
from kiln.ir import parse_function
from kiln.proto import compile_key
from redis_server import MISSING, RedisServer, find

redis = pytest.importorskip("redis", reason="the shared tier needs redis-py (a dependency of kiln)")
pytestmark = pytest.mark.skipif(find() is None, reason=MISSING)

IR = '''
kernel @{name}(%x: ptr<fp32>) {{
  %v = load %x : fp32
  %w = add %v, %v : fp32
  store %x, %w
  return
}}
'''
OPTIONS = {"num_warps": 4}
CLUSTER_KEY = "this-clusters-key-0123456789abcdef"


@pytest.fixture(autouse=True)
def cluster_key(monkeypatch):
    """Every node of these tests shares the cluster key that authenticates the tier's entries."""
    monkeypatch.setenv("KILN_REMOTE_CACHE_KEY", CLUSTER_KEY)


def kernel(name):
    return parse_function(IR.format(name=name))


def key_of(name, target="sm_90a"):
    return compile_key(kernel(name), target, OPTIONS)


@pytest.fixture(scope="module")
def server():
    with RedisServer() as srv:
        yield srv


@pytest.fixture
def url(server):
    redis.Redis.from_url(server.url).flushall()
    return server.url


class Node:
    """One node: its cache directory and, if started, its daemon (fake compiles, one worker)."""

    def __init__(self, monkeypatch, folder, url):
        self.monkeypatch, self.folder, self.url = monkeypatch, folder, url
        self.cache_dir = os.path.join(folder, "cache")
        self.daemon = None
        self.socket = os.path.join(tempfile.mkdtemp(prefix="kn-", dir="/tmp"), "d.sock")

    def start_daemon(self):
        self.daemon, _ = create_server(f"unix:{self.socket}", "kiln.daemon.fake:compile", workers=1,
                                       cache=Cache(self.cache_dir), remote_cache=self.url)
        self.daemon.start()
        return self

    def enter(self, daemon=True, shared=True):
        """Make this process one of the node's: its cache, its daemon (or none), the shared tier."""
        mp = self.monkeypatch
        mp.setenv("KILN_CACHE_DIR", self.cache_dir)
        mp.setenv("KILN_RUNTIME_DIR", os.path.join(self.folder, "run"))
        mp.setenv("KILN_DAEMON", f"unix:{self.socket}" if daemon else "off")
        if shared:
            mp.setenv("KILN_REMOTE_CACHE", self.url)
        else:
            mp.delenv("KILN_REMOTE_CACHE", raising=False)
        mp.setattr(tiers, "_state", tiers._State())  # a fresh process, as far as tiers knows
        return self

    def compile(self, name, compile_fn=None):
        return tiers.cached_compile(kernel(name), "sm_90a", OPTIONS, compile_fn=compile_fn or fake.compile)

    def stats(self):
        with Client(f"unix:{self.socket}") as client:
            return client.stats()

    def stop(self):
        if self.daemon is not None:
            self.daemon.stop(0)


@pytest.fixture
def nodes(monkeypatch, tmp_path, url):
    made = [Node(monkeypatch, str(tmp_path / name), url) for name in ("a", "b")]
    yield made
    for node in made:
        node.stop()


def must_not_compile(fn, target, options):
    raise AssertionError(f"{fn.name} was compiled, not found")


# --- two nodes -------------------------------------------------------------------------------

def test_node_b_first_call_is_a_shared_hit_after_node_a_compiled(nodes, capsys):
    a, b = (n.start_daemon() for n in nodes)
    first = a.enter().compile("shared_k", must_not_compile)
    assert first.source == "daemon" and a.stats().misses == 1  # node A's daemon compiled, and wrote through

    on_b = b.enter().compile("shared_k", must_not_compile)
    assert on_b.source == "shared" and on_b.cubin == first.cubin and on_b.ptx == first.ptx
    assert b.stats().requests == 0  # node B never asked its daemon
    again = b.enter().compile("shared_k", must_not_compile)
    assert again.source == "cache" and again.cubin == first.cubin  # the hit was copied into B's node cache

    # kiln cache stats on node B: this node's processes saw one hit, and the server answers
    assert cli.main(["cache", "stats", "--json"]) == 0
    shared = json.loads(capsys.readouterr().out)["shared"]
    assert shared["hits"] == 1 and shared["misses"] == 0 and shared["server"]["reachable"]
    assert shared["server"]["maxmemory_policy"] == "allkeys-lru"
    assert cli.main(["cache", "stats"]) == 0
    assert "shared tier redis://127.0.0.1" in capsys.readouterr().out


def test_a_daemon_reads_the_shared_tier_for_clients_that_do_not(nodes, capsys):
    a, b = (n.start_daemon() for n in nodes)
    first = a.enter().compile("via_daemon", must_not_compile)
    on_b = b.enter(shared=False).compile("via_daemon", must_not_compile)
    assert on_b.source == "daemon" and on_b.cubin == first.cubin
    s = b.stats()
    assert s.misses == 0 and s.remote_cache.hits == 1 and s.remote_cache.up and s.remote_cache.url.startswith("redis://")
    assert "kiln_remote_cache_hits_total 1" in exposition(s) and "kiln_remote_cache_up 1" in exposition(s)
    assert cli.main(["daemon", "status", "--address", f"unix:{b.socket}"]) == 0
    assert "shared tier redis://" in capsys.readouterr().out
    assert cli.main(["daemon", "status", "--json", "--address", f"unix:{b.socket}"]) == 0
    assert json.loads(capsys.readouterr().out)["remote_cache"]["hits"] == 1


def test_prewarm_fills_the_shared_tier_also_with_what_the_node_had(nodes, url):
    a = nodes[0].start_daemon().enter()
    kernels = [(kernel(f"pw{i}"), "sm_90a", OPTIONS) for i in range(3)]
    report = prewarm.through_daemon(kernels, f"unix:{a.socket}")
    assert report.ok and report.statuses["CACHE_MISS"] == 3 and report.shared[1] == 3
    redis.Redis.from_url(url).flushall()  # the tier lost them; the node cache still has them
    report = prewarm.through_daemon(kernels, f"unix:{a.socket}")
    assert report.statuses["CACHE_HIT"] == 3 and report.shared[1] == 3


def test_torch_compile_graphs_reach_a_new_node_through_the_tier(nodes):
    """What one node's ranks compiled (an FX graph's bytes, to kiln) a new node's first rank loads."""
    a, b = nodes
    a.enter(daemon=False)
    NodeArtifacts(wait=1.0).put("fx-graph-v1", "pt2:fx-graph-v1::graph:c1", b"\x80\x04 a pickled graph")
    b.enter(daemon=False)
    artifacts = NodeArtifacts(wait=1.0)
    assert artifacts.get("fx-graph-v1", "pt2:fx-graph-v1::graph:c1") == b"\x80\x04 a pickled graph"
    assert artifacts.get("fx-graph-v1", "pt2:fx-graph-v1::other:c1") is None
    tiers.node_cache().write_copies()  # the copy is written off the reader's path: now, not soon after
    stored = Cache(b.cache_dir).get_result(artifact_key("pt2:fx-graph-v1::graph:c1"))  # kept on node b
    assert stored[0]["value"] == b"\x80\x04 a pickled graph"


def test_prewarm_from_cache_fills_the_tier_with_torch_compiles_graphs(nodes, capsys):
    """A node that ran a job without the tier: `kiln prewarm --from-cache` with one writes its graphs
    there, and a new node's first rank loads them."""
    a, b = nodes
    a.start_daemon().enter(shared=False)
    NodeArtifacts(wait=1.0).put("fx-graph-v1", "pt2:fx-graph-v1::graph:c1", b"\x80\x04 a pickled graph")
    a.enter(shared=True)
    assert cli.main(["prewarm", "--from-cache", "--address", f"unix:{a.socket}"]) == 0
    assert "torch.compile's graphs and autotuning: 1 written to the shared tier, 0 there already" in capsys.readouterr().out
    assert cli.main(["prewarm", "--from-cache", "--json", "--address", f"unix:{a.socket}"]) == 0
    assert json.loads(capsys.readouterr().out)["artifacts"] == {"written": 0, "there": 1}
    b.enter(daemon=False)
    assert NodeArtifacts(wait=1.0).get("fx-graph-v1", "pt2:fx-graph-v1::graph:c1") == b"\x80\x04 a pickled graph"


# --- entries that must not be served ---------------------------------------------------------

def test_foreign_and_corrupt_entries_are_misses_and_are_rewritten(nodes, url):
    a, b = nodes
    a.enter(daemon=False)
    made = {name: a.compile(name) for name in ("good", "victim", "damaged")}
    r = redis.Redis.from_url(url)
    # another kernel's entry under the victim's key; a cubin altered in place
    r.delete(PREFIX + key_of("victim"))
    r.copy(PREFIX + key_of("good"), PREFIX + key_of("victim"))
    r.hset(PREFIX + key_of("damaged"), "a:cubin", b"\x7fELF planted")

    b.enter(daemon=False)
    for name in ("victim", "damaged"):
        binary = b.compile(name)
        assert binary.source == "local" and binary.cubin == made[name].cubin
    assert summary(tiers._state.shared_tier().counts())["refused"] == 2
    tier = RemoteCache(url)
    for name in ("victim", "damaged"):  # the recompile wrote them again, whole
        artifacts, metadata, _ = tier.get(key_of(name))
        assert metadata["name"] == name and artifacts["cubin"] == made[name].cubin


def test_an_entry_bound_to_its_key_but_of_another_kernel_is_refused(nodes, url):
    """Consistent in itself (its digests match), bound to the key, but its metadata names
    another kernel: the same check as the node cache's, then a recompile."""
    b = nodes[1].enter(daemon=False)
    theirs = fake.compile(kernel("other"), "sm_90a", OPTIONS)
    RemoteCache(url).put(key_of("mine"), {"cubin": theirs.cubin, "ptx": theirs.ptx, "llir": theirs.llir,
                                          "kir": theirs.kir}, {**theirs.metadata, "target": "sm_90a"})
    with pytest.warns(RuntimeWarning, match="ignored the shared cache's entry for mine"):
        binary = b.compile("mine")
    assert binary.source == "local" and binary.metadata["name"] == "mine"
    assert RemoteCache(url).get(key_of("mine"))[1]["name"] == "mine"


def test_entries_without_this_clusters_mac_are_refused_and_never_reach_the_node_cache(nodes, url):
    """A Redis writer without the cluster key: its own kernel's entry under the victim's key,
    valid in every digest; a cubin with flipped bytes and recomputed digests; launch metadata
    altered in range with its digest recomputed. Each is a miss, deleted, and compiled again."""
    a, b = nodes
    a.enter(daemon=False)
    made = {name: a.compile(name) for name in ("victim", "flipped", "resized")}
    theirs = fake.compile(kernel("attackers"), "sm_90a", OPTIONS)
    attacker = RemoteCache(url, cluster_key=b"not-this-clusters-key-0123456789")
    attacker.put(key_of("victim"), {"cubin": theirs.cubin, "ptx": theirs.ptx, "llir": theirs.llir, "kir": theirs.kir},
                 {**theirs.metadata, "name": "victim", "target": "sm_90a"})
    r = redis.Redis.from_url(url)
    for name, change in (("flipped", lambda art, meta: art.update(cubin=bytes(x ^ 0xFF for x in art["cubin"]))),
                         ("resized", lambda art, meta: meta.update(shared=16 << 20))):
        fields = r.hgetall(PREFIX + key_of(name))
        entry = json.loads(fields[b"entry"])
        artifacts = {n[2:].decode(): v for n, v in fields.items() if n.startswith(b"a:")}
        change(artifacts, entry["metadata"])
        forged, _ = make_entry(key_of(name), artifacts, entry["metadata"], entry["created"])
        r.hset(PREFIX + key_of(name), mapping={"entry": json.dumps(forged, sort_keys=True, separators=(",", ":")),
                                                **{f"a:{n}": v for n, v in artifacts.items()}})  # the old MAC stays
    b.enter(daemon=False)
    for name in ("victim", "flipped", "resized"):
        binary = b.compile(name)
        assert binary.source == "local" and binary.cubin == made[name].cubin and binary.metadata == made[name].metadata
    assert summary(tiers._state.shared_tier().counts())["refused"] == 3
    node_b = Cache(b.cache_dir)
    for name in ("victim", "flipped", "resized"):  # what b stored is its own compile
        assert node_b.get_result(key_of(name))[0]["cubin"] == made[name].cubin


def test_without_a_cluster_key_the_tier_is_off(nodes, url, monkeypatch, tmp_path):
    monkeypatch.delenv("KILN_REMOTE_CACHE_KEY")
    with pytest.raises(NoClusterKey):
        RemoteCache(url)
    a = nodes[0].enter(daemon=False)
    with pytest.warns(RuntimeWarning, match="needs a cluster key"):
        assert a.compile("k").source == "local"
    with pytest.warns(RuntimeWarning, match="no shared tier"):
        server, _ = create_server(f"unix:{tmp_path / 'd.sock'}", "kiln.daemon.fake:compile", workers=1,
                                  cache=Cache(str(tmp_path / "c")), remote_cache=url)
    server.stop(0)
    key_file = tmp_path / "cluster.key"
    key_file.write_text(CLUSTER_KEY + "\n")
    monkeypatch.setenv("KILN_REMOTE_CACHE_KEY_FILE", str(key_file))
    key_file.chmod(0o644)
    with pytest.raises(ValueError, match="chmod 600"):
        RemoteCache(url)
    key_file.chmod(0o600)
    assert RemoteCache(url)._cluster_key == CLUSTER_KEY.encode()
    monkeypatch.setenv("KILN_REMOTE_CACHE_KEY", "short")
    with pytest.raises(ValueError, match="at least 16"):
        RemoteCache(url)


def test_entry_checks(url):
    tier = RemoteCache(url, max_entry_bytes=1 << 16)
    key = "ab" * 32
    assert tier.put(key, {"cubin": b"\x7fELF" + bytes(100), "ptx": "// ptx"}, {"name": "k", "num_warps": 4, "shared": 0})
    assert tier.get(key)[0]["ptx"] == b"// ptx"
    r = redis.Redis.from_url(url)
    for damage in (lambda: r.hset(PREFIX + key, "a:ptx", b"// ptx, truncated"[:5]),
                   lambda: r.hset(PREFIX + key, "a:extra", b"not named by the entry"),
                   lambda: r.hset(PREFIX + key, "entry", b"{not json"),
                   lambda: (r.delete(PREFIX + key), r.set(PREFIX + key, b"a string, not a hash"))):
        tier.put(key, {"cubin": b"\x7fELF" + bytes(100), "ptx": "// ptx"}, {"name": "k", "num_warps": 4, "shared": 0})
        damage()
        assert tier.get(key) is None and not r.exists(PREFIX + key)  # a miss, and deleted
    assert not tier.put(key, {"cubin": bytes(1 << 17)}, {"name": "k", "num_warps": 4, "shared": 0})  # over the cap
    s = summary(tier.counts())
    assert (s["hits"], s["refused"], s["oversize"], s["errors"]) == (1, 4, 1, 0)


# --- a tier that is down -----------------------------------------------------------------------

def test_redis_killed_mid_run_costs_one_warning_and_no_failed_call(monkeypatch, tmp_path):
    with RedisServer() as srv:
        node = Node(monkeypatch, str(tmp_path / "n"), srv.url).enter(daemon=False)
        assert node.compile("before").source == "local"
        srv.stop()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            binaries = [node.compile(name) for name in ("after1", "after2", "after3")]
        assert [b.source for b in binaries] == ["local"] * 3
        assert len([w for w in caught if "shared cache" in str(w.message)]) == 1
        assert "failed" in str(caught[0].message) and "going on without it" in str(caught[0].message)
        s = summary(tiers._state.shared_tier().counts())
        assert s["errors"] == 1 and s["skipped"] >= 2  # left alone after the failure, not asked again


def test_a_tier_that_comes_back_is_used_again(tmp_path):
    with RedisServer() as srv:
        tier = RemoteCache(srv.url, retry_after=0.0)
        assert tier.put("cd" * 32, {"cubin": b"x"}, {"name": "k", "num_warps": 4, "shared": 0})
        srv.stop()
        with pytest.warns(RuntimeWarning, match="shared cache"):
            assert tier.get("cd" * 32) is None
        srv.start()  # the same port, empty: it lost its entries
        assert tier.get("cd" * 32) is None and tier.put("cd" * 32, {"cubin": b"x"}, {"name": "k", "num_warps": 4,
                                                                                     "shared": 0})
        assert tier.get("cd" * 32) is not None


def test_a_hung_tier_costs_one_read_timeout_then_is_skipped(tmp_path):
    """A server that accepts but does not answer (stopped with SIGSTOP): the read times out once."""
    with RedisServer() as srv:
        tier = RemoteCache(srv.url, timeout=0.2)
        assert tier.get("ef" * 32) is None  # connected, a miss
        os.kill(srv.proc.pid, signal.SIGSTOP)
        try:
            with pytest.warns(RuntimeWarning, match="TimeoutError"):
                assert tier.get("ef" * 32) is None
            assert not tier.put("ef" * 32, {"cubin": b"x"}, {"name": "k", "num_warps": 4, "shared": 0})
        finally:
            os.kill(srv.proc.pid, signal.SIGCONT)
        s = summary(tier.counts())
        assert (s["misses"], s["errors"], s["skipped"]) == (1, 1, 1)


def test_a_tier_over_tls(tmp_path):
    """rediss://, the server verified against the CA named in the URL; another CA is a failure."""
    pytest.importorskip("cryptography", reason="the TLS test makes its CA with `cryptography`")
    from tls_certs import make_pki
    pki = make_pki(tmp_path)
    with RedisServer(tls=pki) as srv:
        tier = RemoteCache(f"{srv.url}?ssl_ca_certs={pki['ca']}")
        assert tier.put("12" * 32, {"cubin": b"x"}, {"name": "k", "num_warps": 4, "shared": 0})
        assert tier.get("12" * 32)[0] == {"cubin": b"x"} and tier.where == srv.url
        stranger = RemoteCache(f"{srv.url}?ssl_ca_certs={pki['other_ca']}")
        with pytest.warns(RuntimeWarning, match="certificate verify failed"):
            assert stranger.get("12" * 32) is None


def test_a_daemon_whose_tier_is_down_still_compiles(monkeypatch, tmp_path):
    down = RedisServer().start()
    down.stop()  # a port where nothing listens
    node = Node(monkeypatch, str(tmp_path / "n"), down.url).start_daemon().enter(shared=False)
    try:
        with pytest.warns(RuntimeWarning, match="the shared cache at redis://127.0.0.1"):  # the daemon's own warning
            assert node.compile("tier_down", must_not_compile).source == "daemon"
        s = node.stats().remote_cache
        assert not s.up and s.errors == 1
    finally:
        node.stop()


def test_a_bad_url_is_a_warning_not_a_failure(monkeypatch, tmp_path):
    node = Node(monkeypatch, str(tmp_path / "n"), "http://not-redis").enter(daemon=False)
    with pytest.warns(RuntimeWarning, match="no shared cache"):
        assert node.compile("bad_url").source == "local"


def test_a_process_makes_one_tier_client_however_many_threads_ask_at_once(monkeypatch, tmp_path):
    import threading
    Node(monkeypatch, str(tmp_path / "n"), "redis://127.0.0.1:1/0").enter(daemon=False)  # no server needed to make it
    made = []
    original = tiers._State._make_shared_tier

    def slow_make(self):
        made.append(1)
        threading.Event().wait(0.05)  # the others ask meanwhile
        return original(self)
    monkeypatch.setattr(tiers._State, "_make_shared_tier", slow_make)
    got = []
    threads = [threading.Thread(target=lambda: got.append(tiers.shared_tier())) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(made) == 1 and len({id(tier) for tier in got}) == 1 and got[0] is not None
