"""The grader's in-kernel guard, exercised in this process: what it restores, what it reports."""

import builtins

import pytest
import torch

import helpers.checks.accumulation
from course_tools.grading.kernel_guard import Guard


@pytest.fixture
def guard():
    made = Guard()
    yield made
    made.restore({})  # whatever a failing test left patched


def test_a_fresh_guard_finds_nothing(guard):
    assert guard.restore({}) == []


def test_patched_torch_function_is_restored(guard):
    original = torch.allclose
    torch.allclose = lambda *args, **kwargs: True
    assert guard.restore({}) == ["torch.allclose"]
    assert torch.allclose is original


def test_dynamos_own_wrapper_of_manual_seed_is_accepted_and_a_lookalike_is_not(monkeypatch):
    """torch._dynamo's first import wraps torch.manual_seed; the guard no longer imports it up front."""
    import types

    from torch._compile import _disable_dynamo

    seed = torch.random.manual_seed
    monkeypatch.setattr(torch, "manual_seed", seed)
    guard = Guard()
    wrapper = _disable_dynamo(seed)
    torch.manual_seed = wrapper
    assert guard.restore({}) == [] and torch.manual_seed is wrapper
    lookalike = types.FunctionType(wrapper.__code__, {}, "manual_seed", None,
                                   tuple(types.CellType(lambda value: value) for _ in wrapper.__closure__))
    torch.manual_seed = lookalike
    assert guard.restore({}) == ["torch.manual_seed"] and torch.manual_seed is wrapper


def test_method_added_to_tensor_is_removed(guard):
    torch.Tensor.__eq__ = lambda self, other: True
    assert "torch.Tensor.__eq__" in guard.restore({})
    assert "__eq__" not in vars(torch.Tensor)
    assert not torch.equal(torch.zeros(2), torch.ones(2))


def test_patched_builtin_is_restored(guard):
    original = builtins.isinstance
    builtins.isinstance = lambda obj, cls: True
    try:
        assert guard.restore({}) == ["builtins.isinstance"]
    finally:
        builtins.isinstance = original


def test_replaced_helper_function_and_its_code(guard):
    check = helpers.checks.accumulation.check_updates
    helpers.checks.accumulation.check_updates = lambda *args, **kwargs: None
    original_code = helpers.checks.accumulation.token_references.__code__
    helpers.checks.accumulation.token_references.__code__ = (lambda *args, **kwargs: None).__code__
    undone = guard.restore({})
    assert "helpers.checks.accumulation.check_updates" in undone
    assert "helpers.checks.accumulation.token_references.__code__" in undone
    assert helpers.checks.accumulation.check_updates is check
    assert helpers.checks.accumulation.token_references.__code__ is original_code


def test_remembered_globals_come_back(guard):
    namespace = {"checks_accumulation": helpers.checks.accumulation, "torch": torch}
    guard.remember(namespace, ["checks_accumulation", "torch", "not_bound_here"])
    namespace["checks_accumulation"] = object()
    namespace["my_function"] = len  # the student's own names are theirs
    undone = guard.restore(namespace)
    assert namespace["checks_accumulation"] is helpers.checks.accumulation
    assert namespace["my_function"] is len
    assert undone == ["the global 'checks_accumulation'"]


def test_replaced_module_in_sys_modules(guard, monkeypatch):
    import sys
    import types

    monkeypatch.setitem(sys.modules, "helpers.checks.accumulation",
                        types.ModuleType("helpers.checks.accumulation"))
    assert "sys.modules['helpers.checks.accumulation']" in guard.restore({})
    assert sys.modules["helpers.checks.accumulation"] is helpers.checks.accumulation


def test_ordinary_training_and_spies_leave_no_trace(guard):
    from helpers import data, models, spies

    model = models.MLP(6, 8, 3, seed=0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = data.make_blobs(16, 6, 3, seed=1)
    with spies.record(model=model, optimizer=optimizer), spies.record_host_syncs():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    assert guard.restore({}) == []
