"""helpers.checks.kept: a judge's reference computed once per process for equal arguments."""

import functools

import torch
import torch.nn.functional as F

from helpers.checks.accumulation import reference_run
from helpers.checks.kept import kept, key_of
from helpers.models import MLP


def counted():
    calls = []

    @kept
    def total(values, scale=1.0):
        calls.append(1)
        return {"sum": sum(v.detach().sum() for v in values) * scale}

    return total, calls


def test_equal_arguments_compute_once_and_each_caller_gets_a_copy():
    total, calls = counted()
    first = total([torch.ones(3), torch.arange(4.0)], scale=2.0)
    again = total([torch.ones(3), torch.arange(4.0)], scale=2.0)
    assert calls == [1] and torch.equal(first["sum"], again["sum"])
    again["sum"] += 100                      # a caller that changes its copy changes nobody else's
    assert total([torch.ones(3), torch.arange(4.0)], scale=2.0)["sum"].item() == 18.0 and calls == [1]


def test_any_difference_in_an_argument_computes_again():
    total, calls = counted()
    total([torch.ones(3)])
    for other in ([torch.ones(4)], [torch.ones(3, dtype=torch.float64)], [torch.ones(3).requires_grad_()],
                  [torch.tensor([1.0, 1.0, 1.0 + 1e-7])]):
        total(other)
    total([torch.ones(3)], scale=3.0)
    assert len(calls) == 6


def test_modules_are_equal_by_state_and_mode_and_functions_by_identity():
    assert key_of(MLP(6, 8, 3, seed=1)) == key_of(MLP(6, 8, 3, seed=1))
    assert key_of(MLP(6, 8, 3, seed=1)) != key_of(MLP(6, 8, 3, seed=2))
    assert key_of(MLP(6, 8, 3, seed=1)) != key_of(MLP(6, 8, 3, seed=1).eval())
    frozen = MLP(6, 8, 3, seed=1)
    next(frozen.parameters()).requires_grad_(False)
    assert key_of(frozen) != key_of(MLP(6, 8, 3, seed=1))
    assert key_of(functools.partial(F.cross_entropy, ignore_index=-1)) == key_of(
        functools.partial(F.cross_entropy, ignore_index=-1))
    assert key_of(functools.partial(F.cross_entropy, ignore_index=-1)) != key_of(
        functools.partial(F.cross_entropy, ignore_index=-100))


def test_a_result_that_cannot_be_copied_is_computed_each_time():
    calls = []

    @kept
    def in_a_graph(x):
        calls.append(1)
        return x * 2

    x = torch.ones(2, requires_grad=True)
    assert in_a_graph(x).grad_fn is not None and in_a_graph(x).grad_fn is not None and calls == [1, 1]


def test_an_argument_it_cannot_compare_is_never_kept():
    calls = []

    @kept
    def run(thing):
        calls.append(1)
        return len(calls)

    class Opaque:
        pass

    same = Opaque()
    assert run(same) == 1 and run(same) == 2


def test_the_reference_run_is_kept_and_equals_a_fresh_one():
    batches = [(torch.randn(4, 6, generator=torch.Generator().manual_seed(i)), torch.tensor([0, 1, 2, 0]))
               for i in range(4)]
    before = len(reference_run.kept_results)
    kept_run = reference_run(MLP(6, 8, 3, seed=3), F.cross_entropy, [batches[:2], batches[2:]], lr=0.5)
    again = reference_run(MLP(6, 8, 3, seed=3), F.cross_entropy, [batches[:2], batches[2:]], lr=0.5)
    assert len(reference_run.kept_results) == before + 1
    fresh = reference_run.__wrapped__(MLP(6, 8, 3, seed=3), F.cross_entropy, [batches[:2], batches[2:]],
                                      lr=0.5)
    for name, value in fresh.final_params.items():
        assert torch.equal(value, kept_run.final_params[name])
        assert torch.equal(value, again.final_params[name])
    assert kept_run.final_params is not again.final_params


def test_the_lessons_datasets_are_equal_by_their_samples():
    from torch.utils.data import TensorDataset

    from helpers.data import SlowDataset

    assert key_of(SlowDataset(20, 4, seed=1, delay_s=0.0)) == key_of(SlowDataset(20, 4, seed=1, delay_s=0.0))
    assert key_of(SlowDataset(20, 4, seed=1, delay_s=0.0)) != key_of(SlowDataset(20, 4, seed=2, delay_s=0.0))
    assert key_of(SlowDataset(20, 4, seed=1, delay_s=0.0)) != key_of(SlowDataset(20, 4, seed=1, delay_s=0.1))
    assert key_of(TensorDataset(torch.ones(3))) != key_of(TensorDataset(torch.zeros(3)))
