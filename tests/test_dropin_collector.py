"""The cycle collector's full passes kept out of torch.compile's frame compiles (kiln.dropin.collector)."""
import gc
import threading
import types

import pytest

from kiln.dropin import collector, inductor


def full_passes_during(fn) -> int:
    passes = []

    def seen(phase, info):
        if phase == "start" and info["generation"] == 2:
            passes.append(1)
    gc.callbacks.append(seen)
    try:
        fn()
    finally:
        gc.callbacks.remove(seen)
    return len(passes)


def allocate():
    # enough surviving containers for many young collections, and so for full passes at Python's thresholds
    keep = [[i] for i in range(400_000)]
    return len(keep)


@pytest.fixture
def default_thresholds():
    saved = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*saved)


def test_no_full_pass_inside_and_the_thresholds_come_back(default_thresholds):
    assert full_passes_during(allocate) > 0  # the control: Python's own schedule
    with collector.without_full_collections():
        assert gc.get_threshold() == (700, 10, collector.NEVER)
        assert full_passes_during(allocate) == 0
    assert gc.get_threshold() == (700, 10, 10)


def test_nested_and_failing_compiles_restore_the_thresholds(default_thresholds):
    with pytest.raises(ValueError):
        with collector.without_full_collections():
            with collector.without_full_collections():
                raise ValueError("a compile that fails")
    assert gc.get_threshold() == (700, 10, 10)


def test_two_threads_compiling_restore_once_both_are_done(default_thresholds):
    first_in, second_out = threading.Event(), threading.Event()

    def first():
        with collector.without_full_collections():
            first_in.set()
            second_out.wait(10)
            assert gc.get_threshold()[2] == collector.NEVER  # the other thread's exit left it deferred
    thread = threading.Thread(target=first)
    thread.start()
    first_in.wait(10)
    with collector.without_full_collections():
        pass
    second_out.set()
    thread.join(10)
    assert gc.get_threshold() == (700, 10, 10)


def test_dynamos_frame_compile_is_wrapped_unless_turned_off(monkeypatch, default_thresholds):
    def _compile(code, *args, **kwargs):
        return gc.get_threshold()[2], code
    for setting, deferred in (("1", True), ("0", False)):
        monkeypatch.setenv("KILN_DEFER_FULL_GC", setting)
        convert_frame = types.SimpleNamespace(_compile=_compile)
        inductor.defer_full_collections(convert_frame)
        assert convert_frame._compile("code", skip=1) == ((collector.NEVER if deferred else 10), "code")
        assert (convert_frame._compile is _compile) is not deferred
