"""Dynamo's identity guards describe tensors without printing them (kiln.dropin.guard_text)."""
import threading
import types

import pytest

torch = pytest.importorskip("torch")

from kiln.dropin import guard_text  # noqa: E402


@pytest.fixture
def restored(monkeypatch):
    """Whatever `install` patches goes back after the test."""
    import torch._dynamo.guards as guards
    for cls in (torch.Tensor, torch.nn.Parameter):
        monkeypatch.setattr(cls, "__repr__", vars(cls)["__repr__"])
    monkeypatch.setattr(guards.GuardBuilder, "id_match_unchecked", guards.GuardBuilder.id_match_unchecked)
    return guards


def fake_guards():
    """A `torch._dynamo.guards` whose identity guard says what PyTorch 2.10-2.12 say: the object's repr."""
    class GuardBuilder:
        def id_match_unchecked(self, val):
            return f"___check_obj_id(x, {id(val)}), type={val!r}"
    return types.SimpleNamespace(GuardBuilder=GuardBuilder)


def test_an_identity_guard_names_a_parameter_without_its_values(restored):
    guards = fake_guards()
    param = torch.nn.Parameter(torch.arange(6.0).reshape(2, 3))
    assert "0., 1., 2." in guards.GuardBuilder().id_match_unchecked(param)  # PyTorch's text: the values
    guard_text.install(guards)
    text = guards.GuardBuilder().id_match_unchecked(param)
    assert text.endswith("type=Parameter(shape=(2, 3), dtype=torch.float32, device=cpu)"), text
    assert "0., 1., 2." in repr(param) and "tensor([1, 2])" == repr(torch.tensor([1, 2]))  # elsewhere: as ever


def test_install_twice_wraps_once_and_other_threads_print_in_full(restored):
    guards = fake_guards()
    guard_text.install(guards)
    wrapped = guards.GuardBuilder.id_match_unchecked
    guard_text.install(guards)
    assert guards.GuardBuilder.id_match_unchecked is wrapped
    inside, printed = threading.Event(), []

    class Slow:  # an object whose repr lets another thread print a tensor while the guard is being built
        def __repr__(self):
            inside.set()
            thread.join()
            return "slow"

    thread = threading.Thread(target=lambda: (inside.wait(), printed.append(repr(torch.tensor([3.0])))))
    thread.start()
    assert guards.GuardBuilder().id_match_unchecked(Slow()).endswith("type=slow")
    assert printed == ["tensor([3.])"]


def test_a_compiled_module_runs_with_its_guards_built_so(restored):
    guard_text.install(restored)
    model = torch.nn.Linear(4, 3)
    compiled = torch.compile(model, backend="eager")
    x = torch.randn(2, 4)
    assert torch.equal(compiled(x), model(x))
    with torch.no_grad():
        model.weight.add_(1.0)  # same objects: the guards hold, the values are read at run time
    assert torch.equal(compiled(x), model(x))
