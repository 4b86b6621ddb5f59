"""Unit tests of helpers.checks.batchnorm: lesson 02's BatchNorm prediction on right and wrong answers."""

import pytest
import torch

from helpers.checks import batchnorm as cb

START = {"running_mean": torch.full((3,), 0.5), "running_var": torch.full((3,), 2.0)}


def batches(*rows):
    generator = torch.Generator().manual_seed(0)
    return [torch.randn(n, 3, generator=generator) * 2 + 1 for n in rows]


def right(micro_batches, momentum, mean, var, tracked):
    mean, var = mean.clone(), var.clone()
    for index, rows in enumerate(micro_batches):
        factor = 1 / (tracked + index + 1) if momentum is None else momentum
        mean = (1 - factor) * mean + factor * rows.mean(0)
        var = (1 - factor) * var + factor * rows.var(0)
    return mean, var


def biased(micro_batches, momentum, mean, var, tracked):
    for rows in micro_batches:
        mean = (1 - momentum) * mean + momentum * rows.mean(0)
        var = (1 - momentum) * var + momentum * rows.var(0, unbiased=False)
    return mean, var


def whole_cycle(micro_batches, momentum, mean, var, tracked):
    rows = torch.cat(micro_batches)
    return (1 - momentum) * mean + momentum * rows.mean(0), (1 - momentum) * var + momentum * rows.var(0)


def swapped(micro_batches, momentum, mean, var, tracked):
    for rows in micro_batches:
        mean = momentum * mean + (1 - momentum) * rows.mean(0)
        var = momentum * var + (1 - momentum) * rows.var(0)
    return mean, var


def counts_from_zero(micro_batches, momentum, mean, var, tracked):
    return right(micro_batches, momentum, mean, var, 0)


def counts_before_the_forward(micro_batches, momentum, mean, var, tracked):
    """1 / num_batches_tracked read before this forward is added."""
    return right(micro_batches, momentum, mean, var, tracked - 1)


def runs_batch_norm(micro_batches, momentum, mean, var, tracked):
    layer = torch.nn.BatchNorm1d(mean.numel(), momentum=momentum)
    layer.running_mean.copy_(mean)
    layer.running_var.copy_(var)
    layer.num_batches_tracked.fill_(tracked)
    for rows in micro_batches:
        layer(rows)
    return layer.running_mean.clone(), layer.running_var.clone()


def in_place(micro_batches, momentum, mean, var, tracked):
    for rows in micro_batches:
        mean.mul_(1 - momentum).add_(momentum * rows.mean(0))
        var.mul_(1 - momentum).add_(momentum * rows.var(0))
    return mean, var


@pytest.mark.parametrize("momentum", [0.3, None])
def test_a_correct_prediction_passes(momentum):
    cb.check_running_stats(right, batches(5, 2, 9), momentum, **START, num_batches_tracked=4)


def test_the_reference_is_a_real_batch_norm_and_leaves_its_inputs_alone():
    mean, var = START["running_mean"].clone(), START["running_var"].clone()
    got = cb.measure_running_stats(batches(4, 4), 0.1, mean, var, 2)
    want = right(batches(4, 4), 0.1, mean, var, 2)
    assert all(torch.allclose(a, b) for a, b in zip(got, want, strict=True))
    assert torch.equal(mean, START["running_mean"]) and torch.equal(var, START["running_var"])


@pytest.mark.parametrize(("wrong", "momentum", "says"), [
    (biased, 0.3, "the unbiased variance of each micro-batch"),
    (whole_cycle, 0.3, "once per micro-batch, not once with the whole cycle's"),
    (swapped, 0.3, "momentum is the weight of the new batch's statistic"),
    (counts_from_zero, None, "counting the forwards the layer had seen before"),
    (counts_before_the_forward, None, "counted after adding this forward"),
    (runs_batch_norm, 0.3, "ran a batch norm 3 times"),
    (in_place, 0.3, "changed the tensors it was given"),
    (lambda *args: right(*args)[0], 0.3, "should return (running_mean, running_var)"),
])
def test_each_mistake_is_named(wrong, momentum, says):
    with pytest.raises(AssertionError, match=says.replace("(", r"\(").replace(")", r"\)")):
        cb.check_running_stats(wrong, batches(5, 2, 9), momentum, **START, num_batches_tracked=4)


def test_an_unanswered_exercise_raises_not_implemented():
    def stub(*args):
        raise NotImplementedError("replace this line with your solution")

    with pytest.raises(NotImplementedError):
        cb.check_running_stats(stub, batches(4), 0.1)


def test_a_count_that_would_divide_by_zero_is_not_a_candidate_mistake():
    """From num_batches_tracked=0 with momentum=None, counting before the forward would divide by
    zero: that candidate is left out, and a wrong prediction is still shown with its numbers."""
    def from_one(micro_batches, momentum, mean, var, tracked):
        return right(micro_batches, momentum, mean, var, tracked + 1)

    with pytest.raises(AssertionError, match="BatchNorm1d ends with running_mean"):
        cb.check_running_stats(from_one, batches(5, 2, 9), None, **START, num_batches_tracked=0)
