"""Unit tests of helpers.grads."""

import math

import pytest
import torch
from torch import nn

from helpers.data import make_blobs
from helpers.grads import (
    Comparison,
    clone_model,
    compare,
    fill_grads,
    full_batch_gradients,
    global_grad_norm,
    grad_snapshot,
    param_snapshot,
)
from helpers.models import MLP


@pytest.fixture
def model_and_data():
    x, y = make_blobs(16, 4, 3)
    return MLP(4, 8, 3), x, y


def test_clone_model_copies_weights_and_clears_grads(model_and_data):
    model, x, y = model_and_data
    nn.functional.cross_entropy(model(x), y).backward()
    clone = clone_model(model)
    assert all(p.grad is None for p in clone.parameters())
    assert all(p.grad is not None for p in model.parameters())
    assert all(torch.equal(a, b) and a.dtype == b.dtype and a.device == b.device
               for a, b in zip(clone.parameters(), model.parameters(), strict=True))
    with torch.no_grad():
        next(clone.parameters()).add_(1)
    assert not torch.equal(next(clone.parameters()), next(model.parameters()))


def test_snapshots_are_detached_copies(model_and_data):
    model, x, y = model_and_data
    assert all(g is None for g in grad_snapshot(model).values())
    nn.functional.cross_entropy(model(x), y).backward()
    grads, params = grad_snapshot(model), param_snapshot(model)
    assert list(grads) == [name for name, _ in model.named_parameters()]
    first = next(model.parameters())
    first.grad.zero_()
    with torch.no_grad():
        first.add_(1)
    name = next(iter(grads))
    assert grads[name].abs().sum() > 0
    assert not torch.equal(params[name], first)
    assert not params[name].requires_grad


def test_full_batch_gradients_leave_model_untouched(model_and_data):
    model, x, y = model_and_data
    before = param_snapshot(model)
    grads = full_batch_gradients(model, nn.functional.cross_entropy, x, y)
    assert all(p.grad is None for p in model.parameters())
    assert compare(param_snapshot(model), before).max_abs_error == 0
    nn.functional.cross_entropy(model(x), y).backward()
    assert compare(grads, grad_snapshot(model)).max_abs_error == 0


def test_full_batch_gradients_reject_bad_input(model_and_data):
    model, x, y = model_and_data
    with pytest.raises(ValueError, match="same batch size, got 16 and 15"):
        full_batch_gradients(model, nn.functional.cross_entropy, x, y[:15])
    per_sample = nn.CrossEntropyLoss(reduction="none")
    with pytest.raises(ValueError, match=r"scalar tensor, got \[16\]"):
        full_batch_gradients(model, per_sample, x, y)


def test_compare_identical_and_scaled():
    reference = {"a": torch.tensor([3.0, 4.0]), "b": torch.tensor([0.0])}
    same = compare(dict(reference), reference)
    assert same.max_abs_error == 0 and same.relative_error == 0 and same.close()
    doubled = compare({k: 2 * v for k, v in reference.items()}, reference)
    assert doubled.max_abs_error == pytest.approx(4.0)
    assert doubled.relative_error == pytest.approx(1.0)
    assert doubled.per_tensor == {"a": pytest.approx(1.0), "b": 0.0}
    assert not doubled.close()


def test_compare_relative_error_is_global():
    reference = {"a": torch.tensor([1.0, 0.0]), "b": torch.tensor([0.0, 1.0])}
    candidate = {"a": torch.tensor([1.0, 0.0]), "b": torch.tensor([0.0, 2.0])}
    result = compare(candidate, reference)
    assert result.relative_error == pytest.approx(1 / math.sqrt(2))
    assert result.per_tensor["a"] == 0 and result.per_tensor["b"] == pytest.approx(1.0)


def test_compare_zero_reference():
    zeros = {"a": torch.zeros(3)}
    assert compare(zeros, zeros).relative_error == 0.0
    assert compare({"a": torch.ones(3)}, zeros).relative_error == math.inf


def test_compare_tolerance_scales_with_reference():
    reference = {"a": torch.tensor([1000.0, 1.0])}
    result = compare({"a": torch.tensor([1000.001, 1.0])}, reference)
    assert result.close(rtol=1e-5, atol=0.0)
    assert not result.close(rtol=1e-7, atol=0.0)


def test_compare_missing_and_unexpected():
    reference = {"a": torch.ones(2), "b": None, "c": None}
    result = compare({"a": None, "b": None, "c": torch.ones(1)}, reference)
    assert result.missing == ("a",) and result.unexpected == ("c",)
    # Missing and unexpected tensors count as zeros: ||[1, 1, 1]|| / ||[1, 1]||.
    assert result.relative_error == pytest.approx(math.sqrt(1.5))
    assert not result.close()
    assert "missing: a" in str(result)


def test_compare_mixed_dtypes():
    reference = {"w": torch.randn(10)}
    result = compare({"w": reference["w"].to(torch.bfloat16)}, reference)
    assert 0 < result.relative_error < 1e-2


def test_compare_rejects_mismatches():
    with pytest.raises(ValueError, match=r"only in candidate \['x'\], only in reference \['y'\]"):
        compare({"x": torch.ones(1)}, {"y": torch.ones(1)})
    with pytest.raises(ValueError, match=r"'w' has shape \[2\] in candidate but \[3\]"):
        compare({"w": torch.ones(2)}, {"w": torch.ones(3)})
    with pytest.raises(TypeError, match="dict of name -> tensor"):
        compare([torch.ones(1)], {"w": torch.ones(1)})


def test_comparison_str():
    result = Comparison(3.1e-08, 2.2e-07, {}, ())
    assert str(result) == "max abs error 3.1e-08, relative error 2.2e-07"


def test_global_grad_norm():
    grads = {"a": torch.tensor([3.0]), "b": torch.tensor([[4.0]]), "c": None}
    assert global_grad_norm(grads) == pytest.approx(5.0)
    with pytest.raises(ValueError, match="grads is empty"):
        global_grad_norm({})


def test_fill_grads_sets_seeded_noise_of_each_parameters_shape(model_and_data):
    model, _, _ = model_and_data
    snapshot = fill_grads(model, scale=2.0, seed=3)
    for name, parameter in model.named_parameters():
        assert parameter.grad.shape == parameter.shape and parameter.grad.dtype == parameter.dtype
        assert torch.equal(parameter.grad, snapshot[name])
        assert snapshot[name].data_ptr() != parameter.grad.data_ptr()
    again = fill_grads(MLP(4, 8, 3), scale=2.0, seed=3)
    assert all(torch.equal(again[name], snapshot[name]) for name in snapshot)
    other = fill_grads(MLP(4, 8, 3), scale=2.0, seed=4)
    assert not all(torch.equal(other[name], snapshot[name]) for name in snapshot)
    assert 1.0 < float(torch.cat([g.flatten() for g in snapshot.values()]).std()) < 3.0
    with pytest.raises(TypeError, match="torch.nn.Module"):
        fill_grads("not a model")
