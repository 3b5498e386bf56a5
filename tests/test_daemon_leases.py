"""Single flight across processes (`kiln.daemon.leases`, and its RPCs on a real server): the
first claimant of a missing key computes it, the others wait for the stored value, and a
holder that died, went stale, gave up or outlasted a waiter's patience hands the lease on."""
import os
import threading
import time

import grpc
import pytest

from kiln.cache import Cache
from kiln.daemon import create_server
from kiln.daemon.artifacts import NodeArtifacts, artifact_key
from kiln.daemon.client import Client
from kiln.daemon.leases import BUSY, STORED, YOURS, Leases
from kiln.proto import compiler_pb2 as pb

KEY = "ab" * 32


class Store:
    def __init__(self):
        self.keys = set()

    def __call__(self, key):
        return key in self.keys


def claim_in_thread(leases, holder, wait=30.0, key=KEY):
    result = {}
    thread = threading.Thread(target=lambda: result.update(out=leases.claim(key, holder, None, wait)))
    thread.start()
    return thread, result


def test_first_claim_leads_and_a_second_waits_for_the_stored_value():
    store = Store()
    leases = Leases(store)
    assert leases.claim(KEY, "a", None, 30.0)[0] == YOURS
    thread, result = claim_in_thread(leases, "b")
    time.sleep(0.2)
    assert thread.is_alive()  # waiting for a's value
    store.keys.add(KEY)
    leases.release("a", [KEY], stored=True)
    thread.join(10)
    assert result["out"][0] == STORED
    assert leases.stats() == {"led": 1, "stored": 0, "waited": 1, "taken_over": 0, "released_stored": 1,
                              "released_unstored": 0, "busy": 0, "held": 0, "autotune_led": 0, "autotune_stored": 0,
                              "autotune_waited": 0}
    assert leases.claim(KEY, "c", None, 30.0)[0] == STORED


def test_autotuning_claims_are_counted_apart_from_graphs():
    store = Store()
    leases = Leases(store)
    assert leases.claim(KEY, "a", None, 30.0, kind="autotune")[0] == YOURS
    store.keys.add(KEY)
    leases.release("a", [KEY], stored=True)
    assert leases.claim(KEY, "b", None, 30.0, kind="autotune")[0] == STORED
    counts = leases.stats()
    assert (counts["led"], counts["stored"], counts["autotune_led"], counts["autotune_stored"]) == (0, 0, 1, 1)


def test_an_if_free_claim_neither_waits_nor_takes_over_and_says_who_asked_first():
    store = Store()
    leases = Leases(store)
    assert leases.claim(KEY, "a", None, 30.0, if_free=True)[0] == YOURS  # free: the lease as any claim
    assert leases.claim(KEY, "b", None, 30.0, if_free=True) == (BUSY, 0.0, 0)
    assert leases.claim(KEY, "c", None, 0.0, if_free=True) == (BUSY, 0.0, 1)  # no wait left: still a's
    assert leases.claim(KEY, "a", None, 0.0, if_free=True)[0] == YOURS  # its own lease
    leases.release("a", [KEY], stored=False)
    assert leases.claim(KEY, "b", None, 30.0, if_free=True)[0] == YOURS
    assert leases.claim(KEY, "c", None, 30.0, if_free=True) == (BUSY, 0.0, 0)  # a new lease counts anew
    store.keys.add(KEY)
    assert leases.claim(KEY, "d", None, 30.0, if_free=True)[0] == STORED
    assert leases.stats()["busy"] == 3


def test_a_release_by_another_wakes_the_waiters_to_look_at_the_store():
    """A rank that stored a key it did not hold releases it: those waiting on the holder look
    again at once (here they would otherwise look only after an hour)."""
    store = Store()
    leases = Leases(store, recheck_s=3600.0)
    leases.claim(KEY, "a", None, 30.0)
    thread, result = claim_in_thread(leases, "b", wait=7200.0)
    time.sleep(0.2)
    store.keys.add(KEY)  # "c" computed it without the lease
    leases.release("c", [KEY], stored=True)
    thread.join(30)
    assert not thread.is_alive() and result["out"][0] == STORED
    assert leases.stats()["held"] == 1  # a's lease is a's to end


def test_a_holder_that_releases_unstored_hands_the_lease_to_one_waiter():
    leases = Leases(Store())
    leases.claim(KEY, "a", None, 30.0)
    waiters = [claim_in_thread(leases, name) for name in ("b", "c")]
    time.sleep(0.2)
    leases.release("a", [KEY], stored=False)
    time.sleep(0.5)
    done = [result["out"][0] for thread, result in waiters if not thread.is_alive()]
    assert done == [YOURS]  # one takes it over; the other waits for that one
    leases.release(next(name for name, (t, _) in zip("bc", waiters) if not t.is_alive()), [KEY], stored=False)
    for thread, result in waiters:
        thread.join(10)
        assert result["out"][0] == YOURS
    assert leases.stats()["taken_over"] == 2


def test_a_dead_holder_loses_its_lease():
    alive = {1234: True}
    leases = Leases(Store(), alive=lambda pid: alive[pid])
    leases.claim(KEY, "a", 1234, 30.0)
    thread, result = claim_in_thread(leases, "b")
    time.sleep(0.2)
    alive[1234] = False
    thread.join(10)
    assert result["out"][0] == YOURS and leases.stats()["taken_over"] == 1


def test_a_holder_that_stops_renewing_goes_stale():
    now = [0.0]
    leases = Leases(Store(), stale_after=15.0, clock=lambda: now[0])
    leases.claim(KEY, "a", None, 30.0)
    now[0] = 10.0
    assert leases.renew("a", [KEY, "cd" * 32]) == ["cd" * 32]
    now[0] = 24.0  # 14 s after the renewal: still a's
    assert leases.renew("a", [KEY]) == []
    now[0] = 40.0
    assert leases.claim(KEY, "b", None, 0.0)[0] == YOURS
    assert leases.renew("a", [KEY]) == [KEY]


def test_a_waiter_that_waited_long_enough_takes_over():
    leases = Leases(Store())
    leases.claim(KEY, "a", None, 30.0)
    outcome, waited, _ = leases.claim(KEY, "b", None, 0.3)
    assert outcome == YOURS and waited >= 0.3


# --- the RPCs, on a real server --------------------------------------------------------------

@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    cache = Cache(tmp_path_factory.mktemp("leases-cache"), size_limit=1 << 30)
    path = tmp_path_factory.mktemp("leases-run") / "d.sock"
    server, _ = create_server(f"unix:{path}", "kiln.daemon.fake:compile", workers=1, cache=cache)
    server.start()
    yield server, f"unix:{path}", cache
    server.stop(1)
    cache.close()


def test_claims_over_grpc(daemon):
    server, address, cache = daemon
    key = artifact_key("test_claims_over_grpc")
    with Client(address) as a, Client(address) as b:
        assert a.claim(key, "a", 5.0).outcome == pb.ClaimResponse.YOURS
        assert a.renew("a", [key]) == []
        got = {}
        thread = threading.Thread(target=lambda: got.update(reply=b.claim(key, "b", 30.0)))
        thread.start()
        time.sleep(0.3)
        cache.put_result(key, {"value": b"graph"}, {"name": "g"})
        a.release("a", [key], stored=True)
        thread.join(10)
        assert got["reply"].outcome == pb.ClaimResponse.STORED and got["reply"].waited_s > 0.2
        claims = a.stats().claims
        assert (claims.led, claims.waited, claims.released_stored, claims.held) == (1, 1, 1, 0)


def test_an_if_free_claim_over_grpc(daemon):
    server, address, cache = daemon
    key = artifact_key("test_an_if_free_claim_over_grpc")
    with Client(address) as a, Client(address) as b:
        assert a.claim(key, "a", 5.0, if_free=True).outcome == pb.ClaimResponse.YOURS
        first, second = (b.claim(key, holder, 0.5, if_free=True) for holder in ("b", "c"))
        assert (first.outcome, first.busy_before, second.outcome, second.busy_before) == \
            (pb.ClaimResponse.BUSY, 0, pb.ClaimResponse.BUSY, 1)
        a.release("a", [key], stored=False)


def test_a_unix_peer_that_exits_loses_its_lease(daemon, tmp_path):
    """The daemon sees a holder's death on its node: no need to wait for the lease to go stale."""
    server, address, _ = daemon
    key = artifact_key("test_a_unix_peer_that_exits_loses_its_lease")
    pid = os.fork()
    if pid == 0:
        try:
            Client(address).claim(key, "child", 5.0)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    with Client(address) as b:
        reply = b.claim(key, "b", 30.0)
    assert reply.outcome == pb.ClaimResponse.YOURS and reply.waited_s < 5


@pytest.mark.parametrize("call", [
    lambda c: c.claim("not-a-key", "a", 1.0),
    lambda c: c.claim(KEY, "", 1.0),
    lambda c: c.release("x" * 300, [KEY], False),
    lambda c: c.renew("a", [KEY] * 2000),
    lambda c: c.claim(KEY, "a", 1.0, kind="graph-or-whatever"),
])
def test_malformed_claims_are_invalid_argument(daemon, call):
    with Client(daemon[1]) as client:
        with pytest.raises(grpc.RpcError) as error:
            call(client)
        assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert client.healthy()


def test_node_artifacts_that_store_a_key_they_do_not_hold_release_it(daemon, monkeypatch):
    server, address, cache = daemon
    monkeypatch.setenv("KILN_CACHE_DIR", str(cache.path))
    monkeypatch.setenv("KILN_DAEMON", address)
    from kiln.daemon import tiers
    monkeypatch.setattr(tiers._state, "cache", None)
    monkeypatch.setattr(server.service.leases, "recheck_s", 3600.0)
    name = "pt2:autograd-experimental::test_node_artifacts_that_store:c1"
    leader, first, other = NodeArtifacts(wait=7200.0), NodeArtifacts(wait=7200.0), NodeArtifacts(wait=7200.0)
    assert leader.lookup("autograd-experimental", name)[1] == "leader"
    assert first.lookup("autograd-experimental", name, first_follower_goes_on=True)[1] == "first follower"
    got = {}
    thread = threading.Thread(target=lambda: got.update(out=other.lookup("autograd-experimental", name)))
    thread.start()
    time.sleep(0.3)
    first.put("autograd-experimental", name, b"entry")  # the first follower's entry, before the leader's
    thread.join(30)
    assert not thread.is_alive() and got["out"] == (b"entry", "waited"), got
    with Client(address) as client:
        held = client.stats().claims.held
        leader.put("autograd-experimental", name, b"entry")
        assert client.stats().claims.held == held - 1  # the leader's lease ends with its put


def test_node_artifacts_without_a_daemon_are_the_node_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("KILN_DAEMON", "off")
    from kiln.daemon import tiers
    monkeypatch.setattr(tiers._state, "cache", None)
    artifacts = NodeArtifacts(wait=1.0)
    assert artifacts.get("fx-graph-v1", "pt2:fx-graph-v1::k:c1") is None
    artifacts.put("fx-graph-v1", "pt2:fx-graph-v1::k:c1", b"\x00bytes")
    assert artifacts.get("fx-graph-v1", "pt2:fx-graph-v1::k:c1") == b"\x00bytes"
    assert artifacts.get("fx-graph-v1", "pt2:fx-graph-v1::other:c1") is None
    assert artifacts.counts == {"hits": 1, "waited": 0, "led": 0, "first_followers": 0, "misses": 2, "puts": 1,
                                "autotune_hits": 0, "autotune_waited": 0, "autotune_led": 0, "autotune_misses": 0}


def test_the_status_text_counts_graphs_and_autotuning_choices_apart():
    from kiln.daemon.cli import _status_text
    stats = pb.StatsResponse(claims=pb.ClaimStats(led=2, waited=5, autotune_led=3, autotune_waited=4, autotune_stored=1))
    text = _status_text("unix:/run/kiln.sock", stats)
    assert "torch.compile graphs: compiled here 2 (taken over 0), served 5 (after waiting 5)" in text
    assert "autotuning: configs timed here for 3 kernels, choices served 5 (after waiting 4)" in text


def test_ranks_waiting_for_a_graph_leave_the_daemon_answering_others(tmp_path):
    # each waiting claim holds an RPC thread of the daemon until the leader stores or lets go: more
    # waiters than the old 64 threads must not keep a quick RPC (here Stats) from an answer
    path = tmp_path / "d.sock"
    server, _ = create_server(f"unix:{path}", "kiln.daemon.fake:compile", workers=1, cache=Cache(tmp_path / "c"))
    server.start()
    address = f"unix:{path}"
    ended = []

    def wait_for_the_graph(rank):
        try:
            Client(address).claim(KEY, f"rank-{rank}", 120.0)
        except grpc.RpcError:
            pass  # the daemon stopped under it (below)
        ended.append(rank)
    waiters = [threading.Thread(target=wait_for_the_graph, args=(i,)) for i in range(80)]
    try:
        leader = Client(address)
        assert leader.claim(KEY, "leader", 0.0).outcome == pb.ClaimResponse.YOURS
        for waiter in waiters:
            waiter.start()
        deadline = time.monotonic() + 30
        while sum(t.name.startswith("kiln-rpc") for t in threading.enumerate()) < 80 and time.monotonic() < deadline:
            time.sleep(0.01)  # each waiting claim holds a thread of the (in-process) daemon
        assert leader.stats(timeout=30.0) is not None  # with every thread held this waited for the claims (120 s)
    finally:
        server.stop(0)  # ends the waits
        for waiter in waiters:
            waiter.join(timeout=60)
    assert sorted(ended) == list(range(80))
