"""bench/dropin.py's own logic, without running a model: comparing losses, telling which `triton` a
run had, recording a job that fails or overruns (with its stderr) and reporting it."""
import importlib.util
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("bench_dropin", os.path.join(HERE, "..", "bench", "dropin.py"))
dropin = importlib.util.module_from_spec(spec)
spec.loader.exec_module(dropin)


def test_losses_equal_within_tolerance():
    same = dropin.losses_equal([1.0, 0.5], [1.0, 0.5 + 1e-7], rtol=1e-4, atol=0)
    assert same["equal"] and same["max_abs"] == pytest.approx(1e-7)
    assert not dropin.losses_equal([1.0, 0.5], [1.0, 0.51], rtol=1e-4, atol=0)["equal"]
    assert not dropin.losses_equal([1.0], [1.0, 0.5], rtol=1e-4, atol=0)["equal"]


def test_a_run_under_the_wrong_triton_fails():
    run = {"ok": True, "triton_module": "triton"}
    dropin.check_flavour(run, "kiln")
    assert not run["ok"] and "the kiln run" in run["error"]
    run = {"ok": True, "triton_module": "kiln.dropin.facade"}
    dropin.check_flavour(run, "kiln")
    assert run["ok"]


def test_a_job_past_its_timeout_is_killed_and_recorded(tmp_path):
    pytest.importorskip("torch", reason="the job imports torch before it can outlast its timeout")
    job = dropin.Job({"flavour": "triton"}, {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}, str(tmp_path))
    run = job.finish(timeout=0)  # at least a second: the worker is still importing
    assert not run["ok"] and run["error"].startswith("timed out")
    assert job.proc.returncode is not None


def test_report_lists_failures_and_skips():
    failed = {"ok": False, "error": "exit status 1", "stderr_tail": "Traceback ...\nRuntimeError: boom"}
    good = {"ok": True, "first_step_s": 2.0, "step_s": 0.004, "losses": [1.0], "triton_kernels_in_cache": 12}
    results = {"device": "cuda", "machine": "GPU", "date": "2026-11-24", "rtol": 1e-4, "atol": 1e-6,
               "daemon_workers": 8, "skipped": ["gpt default kiln_warm"],
               "one_process": {"mlp/default": {"triton_cold": good, "kiln_cold": {
                   **good, "first_step_s": 1.0, "daemon": {"compiles": 9, "requests": 10, "merged": 0}},
                   "losses_equal_cold": {"equal": True, "max_rel": 0.0}, "triton_warm": good, "kiln_warm": failed}}}
    text = dropin.markdown(results)
    assert "| mlp | default | cold | 2.00 | 1.00 | 0.50 | 4.00 | 4.00 | 1.00 | yes (0.0e+00) |  | 9 (10 requests" in text
    assert "**mlp/default kiln_warm failed**: exit status 1" in text and "RuntimeError: boom" in text
    assert "Skipped (past the time budget): gpt default kiln_warm." in text


def test_report_shows_first_step_grad_errors():
    triton = {"ok": True, "first_step_s": 2.0, "step_s": 0.004, "losses": [1.0], "grad_error": 3e-7,
              "eager_grad_error": 2e-7}
    kiln = {**triton, "grad_error": 4e-7}
    results = {"device": "cuda", "machine": "GPU", "date": "2026-11-24", "rtol": 1e-4, "atol": 1e-6,
               "daemon_workers": 8, "skipped": [], "one_process": {"mlp/default": {"triton_cold": triton,
                                                                                    "kiln_cold": kiln}}}
    assert "| 3.0e-07 / 4.0e-07 (2.0e-07) |" in dropin.markdown(results)


def test_grad_errors_against_float64():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 8))
    batch = (torch.randn(4, 8), torch.randn(4, 8))
    torch.nn.functional.mse_loss(model(batch[0]), batch[1]).backward()
    grads = [p.grad.clone() for p in model.parameters()]
    exact = dropin.grad_errors(model, batch, grads)
    assert exact["grad_error"] < 1e-5 and exact["eager_grad_error"] == exact["grad_error"]
    grads[1] = grads[1] * 1.01  # one parameter's gradient 1% off: that is the figure
    assert dropin.grad_errors(model, batch, grads)["grad_error"] == pytest.approx(0.01, rel=1e-3)


def test_timers_count_calls_and_time_of_wrapped_functions():
    pytest.importorskip("torch")
    owner = type("Owner", (), {"work": staticmethod(lambda x: x + 1)})
    timers = dropin._Timers()
    timers.wrap(owner, "work", "work")
    assert owner.work(1) == 2 and owner.work(2) == 3
    parts = timers.snapshot()
    assert parts["work"]["calls"] == 2 and parts["work"]["s"] >= 0 and "inductor_counters" in parts


def test_report_shows_where_the_first_step_went():
    parts = {"triton.compile": {"calls": 22, "s": 0.5}, "precompile": {"calls": 22, "s": 0.9},
             "inductor_counters": {"fxgraph_cache_hit": 3}}
    run = {"ok": True, "first_step_s": 2.0, "step_s": 0.004, "losses": [1.0], "first_step_parts": parts}
    results = {"device": "cuda", "machine": "GPU", "date": "2026-11-24", "rtol": 1e-4, "atol": 1e-6,
               "daemon_workers": 8, "skipped": [], "one_process": {"mlp/default": {"kiln_warm": run}}}
    assert "| mlp default | warm | kiln | 22 / 0.50 | 22 / 0.90 |  |  | fxgraph_cache_hit 3 |" in dropin.markdown(results)


def test_first_step_stages_from_compilation_time_metrics():
    metrics = {"_compile.compile_inner": [3.0, 1.0], "OutputGraph.call_user_compiler": [2.5, 0.5],
               "backward._backward_impl": [1.2], "GraphLowering.codegen": [0.4, 0.2, 0.1],
               "async_compile.wait": [0.9], "async_compile.precompile": [0.1],
               "CachingAutotuner.benchmark_all_configs": [0.05, 0.05], "mm_template_autotuning": [0.2],
               "some_new_entry": [0.0004, 0.0004], "never_called": []}
    totals = dropin.compile_time_totals(metrics)
    assert totals["some_new_entry"] == 0.001 and "never_called" not in totals  # every entry, summed to ms
    assert dropin.headline_stages(totals) == {
        "dynamo_s": 1.0, "aot_inductor_s": 3.0, "backward_compile_s": 1.2, "inductor_codegen_s": 0.7,
        "kernel_compile_wait_s": 1.0, "autotune_s": 0.3}
    # only the calls after a snapshot (the first step's), and a stage with no entry is absent
    since = dropin.compile_time_totals(metrics, since={"_compile.compile_inner": 1, "GraphLowering.codegen": 3})
    assert since["_compile.compile_inner"] == 1.0 and "GraphLowering.codegen" not in since
    assert dropin.headline_stages({"async_compile.wait": 0.5}) == {"kernel_compile_wait_s": 0.5}


def test_first_step_breakdown_in_this_process():
    pytest.importorskip("torch")
    before = dropin.compile_accounting()
    breakdown = dropin.first_step_breakdown(before, cuda_init=None)
    assert breakdown["cuda_init"] is None and breakdown["cpu_s"] >= 0 and breakdown["children_cpu_s"] >= 0
    assert set(breakdown["cache_counters"]) == {"inductor", "aot_autograd"}


def test_node_cpu_from_proc_stat_line():
    tick = os.sysconf("SC_CLK_TCK")
    line = f"cpu  {3 * tick} {tick} {2 * tick} 999999 5000 {tick} {tick} 700 0 0"  # idle, iowait, steal not counted
    assert dropin.busy_cpu_seconds(line) == pytest.approx(8.0)


def test_jobs_run_at_pytorchs_compile_threads(monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_COMPILE_THREADS", "2")
    dirs = {"triton": "t", "inductor": "i", "kiln": "k", "cuda": "c"}
    for flavour in ("triton", "kiln"):
        assert "TORCHINDUCTOR_COMPILE_THREADS" not in dropin.flavour_env(flavour, dirs, None)


def test_each_run_has_its_own_driver_jit_cache(tmp_path):
    # nvJitLink relinks a PTX from the driver's JIT cache in 2 ms: a cold run must not find an earlier run's links
    dirs = dropin.fresh_dirs(str(tmp_path), "cold")
    for flavour in ("triton", "kiln"):
        assert dropin.flavour_env(flavour, dirs, None)["CUDA_CACHE_PATH"] == dirs["cuda"]
    assert dirs["cuda"] != dropin.fresh_dirs(str(tmp_path), "new-node")["cuda"]


def test_report_shows_where_the_n_processes_first_steps_went():
    def rank(first, dynamo):
        return {"ok": True, "first_step_s": first, "first_step_breakdown": {
            "dynamo_s": dynamo, "aot_inductor_s": 2.0, "kernel_compile_wait_s": 1.5, "cpu_s": 3.0, "cuda_init": 0.25}}
    run = {"ok": True, "processes": 3, "each": [rank(4.0, 1.0), rank(5.0, 2.0), rank(6.0, 3.0)],
           "first_step_max_s": 6.0, "first_step_median_s": 5.0, "node_cpu_s": 40.0}
    results = {"device": "cuda", "machine": "GPU", "date": "2026-11-24", "rtol": 1e-4, "atol": 1e-6,
               "daemon_workers": 8, "skipped": [], "one_process": {},
               "eight_processes": {"model": "gpt", "mode": "default", "processes": 3,
                                   "runs": {"kiln_cold": run}}}
    text = dropin.markdown(results)
    assert "(PyTorch's default compile threads)" in text
    assert "| kiln | cold | 6.00 / 5.00 | 40.0 | 2.00 | 2.00 |  |  | 1.50 |  | 3.00 | 0.25 |" in text
    assert "| kiln, its slowest rank | cold | 6.00 | | 3.00 | 2.00 |  |  | 1.50 |  | 3.00 | 0.25 |" in text


def test_report_holds_a_new_nodes_first_step_against_the_warm_one():
    def run(worst):
        return {"ok": True, "processes": 2, "each": [{"ok": True, "first_step_s": worst}], "first_step_max_s": worst,
                "first_step_median_s": worst, "node_cpu_s": 10.0}
    new_node = dict(run(3.3), shared_tier_hits=52)
    results = {"device": "cuda", "machine": "GPU", "date": "2026-11-28", "rtol": 1e-4, "atol": 1e-6,
               "daemon_workers": 8, "skipped": [], "one_process": {},
               "eight_processes": {"model": "gpt", "mode": "default", "processes": 2,
                                   "runs": {"triton_cold": run(18.0), "kiln_cold": run(10.0), "kiln_warm": run(3.0),
                                            "kiln_new_node": new_node}}}
    text = dropin.markdown(results)
    assert "| new node (warm Redis) |  /  | 3.30 / 3.30 |  |" in text
    assert "worst first step 3.30 s, 1.10 of its warm run's; 52 shared-tier hits" in text


def test_without_redis_the_new_node_is_skipped_saying_why(monkeypatch):
    sys.path.insert(0, HERE)
    import redis_server
    monkeypatch.setattr(redis_server, "find", lambda: None)
    assert dropin.shared_tier().startswith("no redis-server here")


def test_the_kernels_inductor_generated_are_kept(tmp_path):
    cache = tmp_path / "root" / "cold-kiln-inductor-x1" / "ab"
    cache.mkdir(parents=True)
    (cache / "cabc.py").write_text("@triton.jit\ndef triton_poi_0(x): pass\n")
    (cache / "cwrapper.py").write_text("async_compile.wait(globals())\n")  # a graph's wrapper: not a kernel
    (tmp_path / "root" / "cold-kiln-kiln-x2").mkdir()
    (tmp_path / "root" / "cold-kiln-kiln-x2" / "other.py").write_text("@triton.jit\n")  # not Inductor's cache
    assert dropin.keep_kernel_sources(str(tmp_path / "root"), str(tmp_path / "kept")) == 1
    assert sorted(p.name for p in (tmp_path / "kept").iterdir()) == ["cabc.py"]


def test_a_failed_run_of_several_jobs_says_why():
    run = {"ok": False, "processes": 8, "errors": [{"ok": False, "error": "timed out at 440 s"}]}
    assert dropin.brief(run) == "FAILED (1+ jobs failed: timed out at 440 s)"


def test_each_run_is_kept_as_it_ends(tmp_path):
    import types
    bench = types.SimpleNamespace(args=types.SimpleNamespace(out=str(tmp_path), name="dropin-x"))
    checkpoint = dropin.Bench.checkpoint
    checkpoint(bench, "8 processes", {"triton_cold": {"ok": False}})
    checkpoint(bench, "gpt/default", {"kiln_cold": {"ok": True}})
    import json
    assert json.loads((tmp_path / "dropin-x-partial.json").read_text()) == {
        "8 processes": {"triton_cold": {"ok": False}}, "gpt/default": {"kiln_cold": {"ok": True}}}


def _eight(runs, processes=2):
    return {"device": "cuda", "machine": "GPU", "date": "2026-11-29", "rtol": 1e-4, "atol": 1e-6, "daemon_workers": 8,
            "skipped": [], "one_process": {},
            "eight_processes": {"model": "gpt", "mode": "max-autotune-no-cudagraphs", "processes": processes,
                                "runs": runs}}


def test_calls_of_one_flavour_each_merge_into_one_eight_process_table(tmp_path):
    kiln = {"ok": True, "processes": 2, "each": [{"ok": True, "first_step_s": 50.0}] * 2, "first_step_max_s": 50.0,
            "first_step_median_s": 50.0}
    timed_out = {"ok": False, "wall_s": 530.0, "error": "timed out at 530 s"}
    triton = {"ok": False, "processes": 2, "each": [timed_out, dict(timed_out, wall_s=531.0)],
              "released_after_s": 12.0}
    paths = []
    for name, runs in (("kiln", {"kiln_cold": kiln}), ("triton", {"triton_cold": triton})):
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(dropin.json.dumps(_eight(runs)))
    text = dropin.markdown(dropin.merged([str(p) for p in paths], 1e-4, 1e-6))
    # every Triton rank was still compiling when killed: its worst first step is at least 530 - 12 s
    assert "| cold | > 518 (every rank timed out) | 50.00 / 50.00 | < 0.097 |" in text


def test_a_timeout_bound_needs_every_rank_timed_out_and_the_release_time():
    timed_out = {"ok": False, "wall_s": 100.0, "error": "timed out at 100 s"}
    assert dropin._timed_out_bound({"each": [timed_out], "released_after_s": 10.0}) == 90.0
    assert dropin._timed_out_bound({"each": [timed_out]}) is None
    assert dropin._timed_out_bound({"each": [timed_out, {"ok": True, "first_step_s": 5.0}],
                                    "released_after_s": 10.0}) is None
    assert dropin._timed_out_bound({"each": [{"ok": False, "error": "exit status 1"}], "released_after_s": 1.0}) is None


def test_merging_another_models_eight_process_job_is_refused(tmp_path):
    paths = [tmp_path / "a.json", tmp_path / "b.json"]
    paths[0].write_text(dropin.json.dumps(_eight({})))
    paths[1].write_text(dropin.json.dumps(_eight({}, processes=4)))
    with pytest.raises(SystemExit, match="another 8-process job"):
        dropin.merged([str(p) for p in paths], 1e-4, 1e-6)


def test_each_run_records_the_hosts_python_speed_beside_its_figures():
    host = dropin.host_probe()
    assert host["python_probe_s"] > 0 and set(host) == {"cpu", "python_probe_s"}
    results = dict(_eight({}), host={"cpu": "Some CPU", "python_probe_s": 0.0512})
    assert "Host: Some CPU, Python probe 0.051 s (host_probe)." in dropin.markdown(results)
