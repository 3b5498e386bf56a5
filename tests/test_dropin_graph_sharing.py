"""torch.compile's graphs shared across processes of a node (drop-in mode, CPU tier: Inductor's
Triton CPU backend on kiln's interpreter): processes that compile the same model at once pay
for one compile per graph, a leader killed mid-compile leaves the others to compile it
themselves, and every process gets eager's results."""
import json
import os
import subprocess
import sys
import textwrap
import time

import pytest
from dropin_jobs import COMPILED_VS_EAGER, MLP_AND_STEP

pytest.importorskip("torch")
from kiln.dropin import doctor, hook  # noqa: E402

if doctor.installed_hook() is None:
    pytest.skip("kiln's drop-in hook is not installed here: reinstall with pip install -e .", allow_module_level=True)

JOB = textwrap.dedent("""
    import json, os, sys, time
    import torch
    import torch._inductor.config as inductor_config
    from torch._dynamo.utils import counters

    inductor_config.cpu_backend = "triton"
    inductor_config.coordinate_descent_tuning = sys.argv[1].endswith("-descent")  # as max-autotune has it
    # under descent, pointwise kernels get one config: no timing comes first, the descent asks the node
    inductor_config.triton.autotune_pointwise = not sys.argv[1].endswith("-descent")
    if sys.argv[1] in ("die-leading", "slow-leading"):  # this process dies two seconds into the first
        from kiln.daemon import artifacts                   # graph it leads, or takes 4 s longer on each
        claim = artifacts.NodeArtifacts.lookup

        def lookup(self, *args, **kwargs):
            value, part = claim(self, *args, **kwargs)
            if part == artifacts.LEADER:
                time.sleep(2 if sys.argv[1] == "die-leading" else 4)
                if sys.argv[1] == "die-leading":
                    os._exit(9)
            return value, part
        artifacts.NodeArtifacts.lookup = lookup
    from torch._inductor.runtime import triton_heuristics
    time_config, timed = triton_heuristics.CachingAutotuner.bench, []

    def bench(self, *args, **kwargs):  # the kernels whose configs this process timed (slowly, if asked)
        timed.append(self.fn.__name__)
        if sys.argv[1].startswith("slow-timing"):
            time.sleep(0.3)
        return time_config(self, *args, **kwargs)
    triton_heuristics.CachingAutotuner.bench = bench
    torch.manual_seed(0)
""") + MLP_AND_STEP + COMPILED_VS_EAGER + textwrap.dedent("""
    from kiln.daemon.artifacts import node_artifacts
    from kiln.dropin import backward_ahead
    print(json.dumps({"err": err, "scale": scale, "kiln": node_artifacts().counts, "ahead": backward_ahead.counts,
                      "timed": sorted(set(timed)), "descent_timings": counters["inductor"]["coordesc_tuning_bench"],
                      "fx_hits": counters["inductor"]["fxgraph_cache_hit"],
                      "aot_hits": counters["aot_autograd"]["autograd_cache_hit"]}))
""")
GRAPHS = 3  # the AOTAutograd entry, and Inductor's forward and backward graphs


@pytest.fixture
def node(tmp_path, monkeypatch):
    """A node of its own: cache, runtime directory (the daemon the jobs start lives there)."""
    env = {k: v for k, v in os.environ.items() if k != "KILN_DAEMON"}
    env.update({hook.ENV: "1", "KILN_CACHE_DIR": str(tmp_path / "cache"), "KILN_RUNTIME_DIR": str(tmp_path / "run"),
                "KILN_SHARE_GRAPHS": "1"})
    monkeypatch.setenv("KILN_RUNTIME_DIR", env["KILN_RUNTIME_DIR"])  # where this test finds the jobs' daemon
    (tmp_path / "job.py").write_text(JOB)
    yield tmp_path, env
    subprocess.run([sys.executable, "-m", "kiln.daemon", "daemon", "stop"], env=env, capture_output=True, timeout=60)


def start(tmp_path, env, name, how="normal"):
    """A rank: the job in a fresh process, with an Inductor cache directory of its own."""
    env = {**env, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / f"inductor-{name}")}
    return subprocess.Popen([sys.executable, str(tmp_path / "job.py"), how], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def result(proc, timeout=600):
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err[-4000:]
    got = json.loads(out.strip().splitlines()[-1])
    assert got["err"] <= 1e-5 * max(1.0, got["scale"]), got
    return got


def claims():
    """The graph claims of the node daemon that the jobs started."""
    from kiln.daemon.client import Client
    from kiln.daemon.launch import default_address
    with Client(default_address()) as client:
        return client.stats(timeout=10).claims


def test_three_processes_compile_each_graph_once_and_time_each_kernel_once(node):
    """Three ranks at once pay for one compile per graph (a follower compiles nothing itself), and the
    first to launch a kernel times its configs while the others wait for its choice (KILN_AUTOTUNE_ONCE):
    no kernel is timed by two processes. One run for both: each costs three processes of torch.compile."""
    tmp_path, env = node
    results = [result(rank) for rank in [start(tmp_path, env, str(i), "slow-timing") for i in range(3)]]
    stats = claims()
    assert stats.led == GRAPHS and stats.taken_over == 0, stats  # graphs and kernels' timings counted apart
    assert sum(r["kiln"]["led"] for r in results) == GRAPHS, results
    for follower in (r for r in results if not r["kiln"]["led"]):
        # compiled nothing itself: the AOTAutograd entry, or both graphs from the FX cache (on a busy host
        # its backward-ahead may read the backward once more: 3 hits, seen 2026-12-01)
        assert follower["aot_hits"] == 1 or follower["fx_hits"] >= 2, follower
    timed = [name for r in results for name in r["timed"]]
    assert timed and len(timed) == len(set(timed)), timed
    assert stats.autotune_led == len(timed) and stats.autotune_waited + stats.autotune_stored >= 1, stats


def wait_for_a_lease(proc):
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if claims().held:
                return
        except Exception:  # noqa: BLE001 - the daemon it starts is not up yet
            pass
        time.sleep(0.1)


def test_the_first_follower_compiles_the_backward_while_the_leader_compiles_the_forward(node):
    tmp_path, env = node
    env = {**env, "KILN_FOLLOWERS_TRACE": "0"}  # the others wait for the leader's AOTAutograd entry
    leader = start(tmp_path, env, "leader", "slow-leading")
    wait_for_a_lease(leader)  # the leader holds the AOTAutograd entry's lease: the others follow
    followers = [start(tmp_path, env, str(i)) for i in range(2)]
    led, *rest = [result(rank) for rank in [leader, *followers]]
    first = [r for r in rest if r["kiln"]["first_followers"]]
    assert len(first) == 1, rest
    assert first[0]["ahead"]["compiled"] == 1, first  # the backward
    # the leader's AOTAutograd entry; the forward graph is the first asker's (the leader sleeps at each lead,
    # and a follower may get there first: either one, on a busy host); the backward came from the first follower
    assert led["kiln"]["led"] >= 1 and sum(r["kiln"]["led"] for r in [led, *rest]) == GRAPHS, (led, rest)
    assert led["fx_hits"] >= 1, led
    stats = claims()
    assert stats.led == GRAPHS and stats.taken_over == 0 and stats.busy >= 1, stats


def test_a_leader_killed_mid_compile_leaves_the_others_to_compile(node):
    tmp_path, env = node
    doomed = start(tmp_path, env, "doomed", "die-leading")
    wait_for_a_lease(doomed)
    others = [start(tmp_path, env, str(i)) for i in range(2)]
    doomed.communicate(timeout=300)
    assert doomed.returncode == 9
    results = [result(rank) for rank in others]
    stats = claims()
    assert stats.taken_over >= 1 and stats.held == 0, stats
    assert sum(r["kiln"]["led"] for r in results) >= 1


def test_with_followers_trace_no_rank_waits_for_the_leaders_aotautograd_entry(node):
    """By default (KILN_FOLLOWERS_TRACE unset) every follower traces the graph and takes its forward
    (the leader's) and backward (the first follower's) from the node cache; still one compile per graph."""
    tmp_path, env = node
    env = {k: v for k, v in env.items() if k != "KILN_FOLLOWERS_TRACE"}
    leader = start(tmp_path, env, "leader", "slow-leading")
    wait_for_a_lease(leader)
    followers = [start(tmp_path, env, str(i)) for i in range(2)]
    led, *rest = [result(rank) for rank in [leader, *followers]]
    second = [r for r in rest if not r["kiln"]["first_followers"]]
    assert len(second) == 1 and second[0]["aot_hits"] == 0, rest  # did not wait for the AOTAutograd entry
    # its forward and backward from the cache, or one of them its own where it asked first (the
    # leader sleeps before it claims; a graph it led may be read back from the cache too, on a busy
    # host): either way no graph compiled twice (below)
    assert second[0]["fx_hits"] + second[0]["kiln"]["led"] >= 2, second
    stats = claims()
    assert stats.led == GRAPHS and stats.taken_over == 0, stats


def test_under_coordinate_descent_each_kernel_is_tuned_once_on_the_node(node):
    """max-autotune's coordinate descent: the rank that times a kernel's configs also descends from
    the fastest, and the others wait for the descent's end and launch its config."""
    tmp_path, env = node
    results = [result(rank) for rank in [start(tmp_path, env, str(i), "slow-timing-descent") for i in range(2)]]
    timed = [name for r in results for name in r["timed"]]
    assert timed and len(timed) == len(set(timed)), timed
    assert sum(r["descent_timings"] for r in results) > 0, results
    stats = claims()
    assert stats.autotune_led == len(timed) and stats.autotune_waited + stats.autotune_stored >= 1, stats


def test_with_autotune_once_off_each_rank_times_for_itself(node):
    tmp_path, env = node
    env = {**env, "KILN_AUTOTUNE_ONCE": "0"}
    results = [result(rank) for rank in [start(tmp_path, env, str(i), "slow-timing") for i in range(2)]]
    timed = [name for r in results for name in r["timed"]]
    assert len(timed) > len(set(timed)), timed
    assert claims().autotune_led == 0


def test_backward_ahead_leaves_an_aotautograd_it_does_not_know_as_it_is():
    import types

    from kiln.dropin import backward_ahead

    def aot_stage2_autograd(aot_state, aot_graph_capture, partition_fn, fw_compiler, bw_compiler):
        pass
    module = types.SimpleNamespace(aot_stage2_autograd=aot_stage2_autograd)  # the rest renamed or gone
    was = backward_ahead.installed
    try:
        backward_ahead.install(module)
        assert backward_ahead.installed.startswith("this PyTorch's AOTAutograd differs (_aot_stage2a_partition")
        assert module.aot_stage2_autograd is aot_stage2_autograd
    finally:
        backward_ahead.installed = was


def test_backward_ahead_is_on_in_a_dropin_process_of_this_pytorch(node):
    """The hook wraps this PyTorch's AOTAutograd once `graph_compile` is imported, unless turned off."""
    _, env = node
    probe = ("import torch._functorch._aot_autograd.graph_compile as g; from kiln.dropin import backward_ahead as b; "
             "print(b.installed, hasattr(g.aot_stage2_autograd, '__wrapped__'))")
    for value, expected in (("1", "on True"), ("0", "off (KILN_BACKWARD_AHEAD=0) False")):
        out = subprocess.run([sys.executable, "-c", probe], env={**env, "KILN_BACKWARD_AHEAD": value},
                             capture_output=True, text=True, timeout=300)
        assert out.stdout.strip() == expected, out.stderr[-2000:]


OLD_AOTAUTOGRAD = textwrap.dedent("""
    import dataclasses
    calls = []

    @dataclasses.dataclass
    class AOTConfig:
        bw_compiler: object
        force_non_lazy_backward_lowering: bool = False

    def aot_stage2_autograd(aot_state, aot_graph_capture):
        _fw, bw, _saved, symints, *_ = _aot_stage2a_partition("joint", [], None, "meta", aot_state)
        _aot_stage2b_fw_compile("fw")
        return _aot_stage2b_bw_compile(bw, None, "meta", "strides", symints, aot_state)

    def _aot_stage2a_partition(fx_g, joint_inputs, maybe_subclass_meta, fw_metadata, aot_config):
        return "fw", "bw", 1, 0, [], []

    def _aot_stage2b_fw_compile(fw_module, adjusted_flat_args=None):
        calls.append(("forward", fw_module))

    def _aot_stage2b_bw_compile(bw_module, maybe_subclass_meta, fw_metadata, fwd_output_strides,
                                num_symints_saved_for_bw, aot_config):
        calls.append(("backward", bw_module, fwd_output_strides, aot_config.force_non_lazy_backward_lowering))
""")


def test_backward_ahead_on_pytorch_2_11s_aotautograd():
    """2.11 reads the backward compiler from aot_config; the first follower's backward comes first,
    compiled at once with the traced strides, and the lazy one still follows the forward."""
    import types

    from kiln.dropin import backward_ahead
    module = types.ModuleType("old_graph_compile")
    exec(OLD_AOTAUTOGRAD, module.__dict__)
    was = backward_ahead.installed
    try:
        backward_ahead.install(module)
        assert backward_ahead.installed == "on"
        config = module.AOTConfig(bw_compiler="inductor's")
        module.aot_stage2_autograd(config, None)  # a leader's compile: as PyTorch's own
        assert module.calls == [("forward", "fw"), ("backward", "bw", "strides", False)]
        module.calls.clear()
        backward_ahead.arm(True)
        module.aot_stage2_autograd(config, None)  # the first follower's
        assert module.calls == [("backward", "bw", None, True), ("forward", "fw"), ("backward", "bw", "strides", False)]
    finally:
        backward_ahead.installed = was
