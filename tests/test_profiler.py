"""kiln.profiler: proton's session and scope API, and the hatchet file its viewer reads."""
import json
import os
import types

import numpy as np
import pytest

import kiln
import kiln.language as tl
import kiln.profiler as proton
from kiln.runtime import cuda_driver


@kiln.jit
def _fill(x_ptr, value, N: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, N), value)


@kiln.jit
def _copy(x_ptr, y_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs))


pytestmark = pytest.mark.usefixtures("no_profiler_session_left")  # tests/conftest.py


@pytest.fixture
def fake_clock(monkeypatch):
    """Interpreted launches (and scopes with none inside) timed by a clock the test drives: each
    takes the next duration."""
    durations = []

    class Timing:
        def stop(self):
            self.ns = durations.pop(0)

        def discard(self):
            pass

        def result(self):
            return "CPU", 0, self.ns

    monkeypatch.setattr(proton, "_HostTiming", Timing)
    return durations


def _load(path):
    with open(path) as f:
        tree, devices = json.load(f)
    return tree, devices


def _child(node, name):
    matches = [c for c in node["children"] if c["frame"]["name"] == name]
    assert len(matches) == 1, [c["frame"]["name"] for c in node["children"]]
    return matches[0]


def test_launches_become_frames_under_their_scopes(tmp_path, fake_clock):
    x, y = np.zeros(16, np.float32), np.zeros(16, np.float32)
    fake_clock.extend([700, 300, 50, 20])
    session = proton.start(str(tmp_path / "run"))
    with proton.scope("fill", {"bytes": 64}):
        _fill[(1,)](x, 1.0, N=16)
        _fill[(1,)](x, 2.0, N=16)
    with proton.scope("copy"):
        with proton.scope("inner"):
            _copy[(1,)](x, y, N=16)
    proton.deactivate(session)
    _copy[(1,)](x, y, N=16)  # not recorded
    proton.activate(session)
    _fill[(1,)](x, 3.0, N=16)  # at the top level
    proton.finalize(session)

    assert y[0] == 2.0 and x[0] == 3.0 and fake_clock == []
    tree, devices = _load(tmp_path / "run.hatchet")
    assert tree["frame"] == {"name": "ROOT", "type": "function"}
    assert tree["metrics"]["time (ns)"] == 0 and tree["metrics"]["count"] == 0  # inclusive-metric hints
    fill = _child(tree, "fill")
    assert fill["metrics"] == {"bytes": 64}
    kernel = _child(fill, "_fill")
    assert kernel["metrics"] == {"time (ns)": 1000, "count": 2, "device_id": "0", "device_type": "CPU"}
    assert kernel["children"] == []
    assert _child(_child(_child(tree, "copy"), "inner"), "_copy")["metrics"]["time (ns)"] == 50
    assert _child(tree, "_fill")["metrics"]["time (ns)"] == 20
    assert devices == {}  # the interpreter has no GPU properties for the viewer


def test_interpreted_launches_are_timed_on_the_host_clock(tmp_path):
    x = np.zeros(16, np.float32)
    proton.start(str(tmp_path / "host"))
    for _ in range(3):
        _fill[(1,)](x, 1.0, N=16)
    proton.finalize()
    tree, _ = _load(tmp_path / "host.hatchet")
    metrics = _child(tree, "_fill")["metrics"]
    assert metrics["count"] == 3 and metrics["time (ns)"] > 0


def test_enter_and_exit_scope_profile_decorator_and_cpu_timed_scope(tmp_path, fake_clock):
    x = np.zeros(16, np.float32)
    fake_clock.extend([5, 6])

    @proton.profile(name=str(tmp_path / "decorated"))
    def work():
        proton.enter_scope("outer", metrics={"flops16": 10})
        with proton.cpu_timed_scope("timed"):
            _fill[(1,)](x, 1.0, N=16)
        proton.exit_scope(metrics={"flops16": 5})
        _fill[(1,)](x, 1.0, N=16)

    work()
    proton.finalize()
    tree, _ = _load(tmp_path / "decorated.hatchet")
    outer = _child(tree, "outer")
    assert outer["metrics"] == {"flops16": 15}
    timed = _child(outer, "timed")
    assert timed["metrics"]["cpu_time (ns)"] > 0 and _child(timed, "_fill")["metrics"]["time (ns)"] == 5
    assert tree["metrics"]["flops16"] == 0 and tree["metrics"]["cpu_time (ns)"] == 0


def test_scope_as_decorator_and_scope_errors(tmp_path, fake_clock):
    fake_clock.extend([1, 2])  # the launch in "step", then "a", which has none inside

    @proton.scope("step")
    def step(x):
        _fill[(1,)](x, 1.0, N=16)

    proton.start(str(tmp_path / "s"))
    step(np.zeros(16, np.float32))
    proton.enter_scope("a")
    with pytest.raises(ValueError, match="Scope name mismatch"):
        proton.exit_scope("b")
    proton.exit_scope("a")
    proton.finalize()
    tree, _ = _load(tmp_path / "s.hatchet")
    assert _child(_child(tree, "step"), "_fill")["metrics"]["count"] == 1
    assert _child(_child(tree, "a"), proton.OUTSIDE_KILN)["metrics"]["time (ns)"] == 2
    with pytest.raises(ValueError, match="hatchet"):
        proton.finalize(proton.start(str(tmp_path / "t")), output_format="chrome_trace")
    proton.finalize()
    with pytest.raises(ValueError, match="tree"):
        proton.start(data="trace")


def test_gpu_launches_are_timed_with_cuda_events(tmp_path, monkeypatch):
    """The event path, with a stand-in driver: events recorded around the launch on its stream,
    their elapsed time read at finalize, and the device's properties written for the viewer."""
    calls = []

    class FakeDriver:
        class CUdevice_attribute:
            pass

        def cuEventCreate(self, flags):
            calls.append("create")
            return 0, f"event{calls.count('create')}"

        def cuEventRecord(self, event, stream):
            calls.append(("record", event, stream))
            return (0,)

        def cuEventSynchronize(self, event):
            calls.append(("sync", event))
            return (0,)

        def cuEventElapsedTime(self, start, end):
            return 0, 1.25  # milliseconds

        def cuEventDestroy(self, event):
            calls.append(("destroy", event))
            return (0,)

    monkeypatch.setattr(cuda_driver, "cuda", lambda: FakeDriver())
    monkeypatch.setattr(cuda_driver, "device_and_stream", lambda: (0, 7))
    monkeypatch.setattr(cuda_driver, "_device_attribute", lambda device, name: len(name))
    monkeypatch.setattr(cuda_driver, "target", lambda device: "sm_90a")
    launched = []
    session = proton.start(str(tmp_path / "gpu"))
    kernel = types.SimpleNamespace(name="kernel", launch_metadata=None)
    proton.measure(kernel, (1, 1, 1), [], lambda: launched.append(calls[-1]), 7, interpreted=False)
    assert launched == [("record", "event1", 7)] and ("record", "event2", 7) in calls
    proton.finalize(session)
    tree, devices = _load(tmp_path / "gpu.hatchet")
    assert _child(tree, "kernel")["metrics"] == {"time (ns)": 1250000, "count": 1, "device_id": "0",
                                                 "device_type": "CUDA"}
    assert set(devices["CUDA"]["0"]) == {"clock_rate", "memory_clock_rate", "bus_width", "num_sms", "arch"}
    assert devices["CUDA"]["0"]["arch"] == "90"
    assert ("destroy", "event1") in calls and ("destroy", "event2") in calls


def test_default_name_and_no_recording_without_a_session(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _fill[(1,)](np.zeros(16, np.float32), 1.0, N=16)
    assert not proton._active
    proton.finalize(proton.start())
    assert os.path.exists(tmp_path / "proton.hatchet")


def _flops_metadata(grid, kernel, args):
    n = args["n"]
    return {"name": f"{kernel.name} [n={n}, BLOCK={args['BLOCK']}]", "flops32": 2 * n,
            "bytes": 3 * n * args["x_ptr"].itemsize, "ignored": 1}


@kiln.jit(launch_metadata=_flops_metadata)
def _axpy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, 2.0 * tl.load(x_ptr + offs, mask=offs < n) + 1.0, mask=offs < n)


def test_launch_hook_names_op_frames_from_launch_metadata(tmp_path, fake_clock):
    x, y = np.ones(16, np.float32), np.zeros(16, np.float32)
    fake_clock.extend([40, 2])
    hooked = proton.start(str(tmp_path / "hooked"), hook="triton")
    with proton.scope("step"):
        _axpy[(1,)](x, y, 12, BLOCK=16)
    _fill[(1,)](x, 1.0, N=16)  # no launch_metadata: the op frame is named after the kernel
    proton.finalize(hooked)
    tree, _ = _load(tmp_path / "hooked.hatchet")
    op = _child(_child(tree, "step"), "_axpy [n=12, BLOCK=16]")
    assert op["metrics"] == {"flops32": 24, "bytes": 144}
    assert _child(op, "_axpy")["metrics"]["time (ns)"] == 40
    assert _child(_child(tree, "_fill"), "_fill")["metrics"]["count"] == 1
    assert tree["metrics"]["flops32"] == 0 and tree["metrics"]["bytes"] == 0
    with pytest.raises(ValueError, match="hook"):
        proton.start(hook="cupti")


def _desc_metadata(grid, kernel, args):
    return {"name": f"scale [n={args['n']}]", "bytes": 2 * 4 * args["n"], "flops32": len(args["x_desc"])}


@kiln.jit(launch_metadata=_desc_metadata)
def _scale_rows(x_desc, y_ptr, n, BLOCK: tl.constexpr):
    block = x_desc.load([0, 0])
    tl.store(y_ptr + tl.arange(0, BLOCK)[:, None] * BLOCK + tl.arange(0, BLOCK)[None, :], block * 2.0)


def test_launch_metadata_sees_arguments_after_a_tensor_descriptor(tmp_path, fake_clock):
    from kiln.tools.tensor_descriptor import TensorDescriptor
    x, y = np.arange(64, dtype=np.float32).reshape(8, 8), np.zeros(64, np.float32)
    fake_clock.append(9)
    proton.start(str(tmp_path / "d"), hook="triton")
    _scale_rows[(1,)](TensorDescriptor.from_tensor(x, block_shape=[8, 8]), y, 64, BLOCK=8)
    proton.finalize()
    np.testing.assert_array_equal(y, 2 * x.ravel())
    tree, _ = _load(tmp_path / "d.hatchet")
    # the descriptor's launch pieces: its base, 2 sizes, 2 strides and the descriptor (its TMA map)
    assert _child(tree, "scale [n=64]")["metrics"] == {"bytes": 512, "flops32": 6}


def test_a_scope_with_no_kiln_launch_files_its_own_time(tmp_path, fake_clock):
    """Tutorial 09 times cuBLAS in a scope beside kiln's kernels: proton sees its kernels through
    CUPTI; kiln times the scope itself, on the stream, in an "(outside kiln)" frame."""
    x = np.zeros(16, np.float32)
    fake_clock.extend([500, 40])
    session = proton.start(str(tmp_path / "run"))
    with proton.scope("cublas", {"flops16": 10}):
        with proton.scope("inner"):
            np.dot(x, x)  # work kiln does not launch
    with proton.scope("kiln"):
        _fill[(1,)](x, 1.0, N=16)
    proton.finalize(session)
    assert fake_clock == []
    tree, _ = _load(tmp_path / "run.hatchet")
    inner = _child(_child(tree, "cublas"), "inner")
    assert _child(inner, proton.OUTSIDE_KILN)["metrics"]["time (ns)"] == 500
    assert [c["frame"]["name"] for c in _child(tree, "cublas")["children"]] == ["inner"]  # counted once
    assert [c["frame"]["name"] for c in _child(tree, "kiln")["children"]] == ["_fill"]


def test_a_scope_without_launches_on_the_gpu_is_timed_on_the_current_stream(tmp_path, monkeypatch):
    recorded = []

    class FakeDriver:
        class CUdevice_attribute:
            pass

        def cuEventCreate(self, flags):
            return 0, f"event{len(recorded)}-{id(object())}"

        def cuEventRecord(self, event, stream):
            recorded.append(stream)
            return (0,)

        def cuEventSynchronize(self, event):
            return (0,)

        def cuEventElapsedTime(self, start, end):
            return 0, 0.5

        def cuEventDestroy(self, event):
            nonlocal destroyed
            destroyed += 1
            return (0,)

    destroyed = 0
    monkeypatch.setenv("KILN_INTERPRET", "0")
    monkeypatch.setattr(cuda_driver, "cuda", lambda: FakeDriver())
    monkeypatch.setattr(cuda_driver, "is_available", lambda: True)
    monkeypatch.setattr(cuda_driver, "device_and_stream", lambda: (0, 9))
    monkeypatch.setattr(cuda_driver, "_device_attribute", lambda device, name: len(name))
    monkeypatch.setattr(cuda_driver, "target", lambda device: "sm_90a")
    session = proton.start(str(tmp_path / "gpu"))
    with proton.scope("cublas"):
        pass  # a library's kernels would run here, on the current stream
    with proton.scope("kiln"):
        proton.measure(types.SimpleNamespace(name="k", launch_metadata=None), (1, 1, 1), [], lambda: None, 9,
                       interpreted=False)
    proton.finalize(session)
    assert destroyed == 6  # the scope's unused events too
    tree, _ = _load(tmp_path / "gpu.hatchet")
    assert recorded[:2] == [9, 9]
    assert _child(_child(tree, "cublas"), proton.OUTSIDE_KILN)["metrics"]["time (ns)"] == 500000


def _profile_for_the_viewer(tmp_path, fake_clock):
    """fp16 scope of 2 launches (2 ms, 4e9 flops16, 1e6 bytes) and a copy of 1 launch (0.5 ms)."""
    x, y = np.zeros(16, np.float32), np.zeros(16, np.float32)
    fake_clock.extend([1_500_000, 500_000, 500_000])
    proton.start(str(tmp_path / "v"))
    with proton.scope("matmul fp16", {"flops16": 4e9, "bytes": 1e6}):
        _fill[(1,)](x, 1.0, N=16)
        _fill[(1,)](x, 2.0, N=16)
    with proton.scope("copy"):
        _copy[(1,)](x, y, N=16)
    proton.finalize()
    return str(tmp_path / "v.hatchet")


def test_viewer_derives_proton_metrics_inclusively(tmp_path, fake_clock):
    from kiln.profiler import viewer
    tree, metrics = viewer.parse(["tflop16/s", "time/ms", "avg_time/us", "gbyte/s", "count"],
                                 _profile_for_the_viewer(tmp_path, fake_clock))
    assert metrics == ["tflop16/s", "time/ms", "avg_time/us", "gbyte/s", "count"]
    names = {c.name: c for c in tree.children}
    fp16 = names["matmul fp16"]
    assert fp16.values["time/ms"] == pytest.approx(2.0) and fp16.values["count"] == 2
    assert fp16.values["tflop16/s"] == pytest.approx(4e9 / 2e-3 / 1e12)  # 2 TFLOP/s
    assert fp16.values["gbyte/s"] == pytest.approx(1e6 / 2e-3 / 1e9)
    assert fp16.values["avg_time/us"] == pytest.approx(1000.0)
    assert tree.values["time/ms"] == pytest.approx(2.5)  # the root holds the whole profile
    assert names["copy"].values["time/ms"] == pytest.approx(0.5)
    import math
    assert math.isnan(names["copy"].values["tflop16/s"])  # no flops measured there


def test_viewer_prints_a_tree_and_filters_it(tmp_path, fake_clock, capsys):
    from kiln.profiler import viewer
    path = _profile_for_the_viewer(tmp_path, fake_clock)
    tree, metrics = viewer.parse(["time/ms"], path, exclude="^copy$")
    viewer.print_tree(tree, metrics)
    out = capsys.readouterr().out.splitlines()
    assert out[:3] == ["2.000 ROOT", "└─ 2.000 matmul fp16", "   └─ 2.000 _fill"]  # the excluded scope is gone
    tree, metrics = viewer.parse(["time/ms"], path, threshold=0.5)  # copy is 0.5 of 2.5: below half
    assert [c.name for c in tree.children] == ["matmul fp16"]
    assert viewer.main(["-m", "time/us", "--print-sorted", path]) == 0
    printed = capsys.readouterr().out
    assert printed.index("matmul fp16") < printed.index("copy") and "2500.000 ROOT" in printed


def test_viewer_refuses_what_the_file_cannot_give(tmp_path, fake_clock, capsys):
    from kiln.profiler import viewer
    path = _profile_for_the_viewer(tmp_path, fake_clock)
    with pytest.raises(ValueError, match="'flops8' is not in"):
        viewer.parse(["flops8"], path)
    with pytest.raises(ValueError, match="util"):
        viewer.parse(["util"], path)
    (tmp_path / "bad.hatchet").write_text('{"not": "a profile"}')
    assert viewer.main(["-m", "time/ms", str(tmp_path / "bad.hatchet")]) == 2
    assert "not a profile" in capsys.readouterr().err
