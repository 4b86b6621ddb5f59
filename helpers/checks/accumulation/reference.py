"""The reference the updates of Exercises 1, 2 and 4 are judged against: plain SGD on whole, concatenated
cycles (reference_run), with the gradient each classic accumulation mistake would have given instead."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from helpers.checks.accumulation.shared import Batch
from helpers.checks.amp_calls import clip_grads
from helpers.checks.kept import kept
from helpers.grads import GradDict, clone_model, grad_snapshot, param_snapshot


@dataclass
class CycleReference:
    """What one optimizer update should see (its cycle has `size` micro-batches), plus the
    gradients of the classic mistakes."""

    grads: GradDict
    loss: float
    size: int
    mistakes: dict[str, GradDict] = field(default_factory=dict)


@dataclass
class Reference:
    """A full-batch SGD run: one CycleReference per update and the final parameters."""

    cycles: list[CycleReference]
    final_params: GradDict
    accum_steps: int
    num_micro_batches: int


def _concat(cycle: Sequence[Batch]) -> Batch:
    return torch.cat([x for x, _ in cycle]), torch.cat([y for _, y in cycle])


def _micro_grads(model: nn.Module, loss_fn: Callable, cycle: Sequence[Batch]) -> list[GradDict]:
    grads = []
    for x, y in cycle:
        model.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        grads.append(grad_snapshot(model))
    model.zero_grad(set_to_none=True)
    return grads


def _weighted_sum(grads: list[GradDict], weights: list[float]) -> GradDict:
    return {name: sum(w * g[name] for g, w in zip(grads, weights, strict=True)) for name in grads[0]}



def _mistakes(micro: list[GradDict], sizes: list[int], accum_steps: int,
              max_norm: float | None) -> dict[str, GradDict]:
    count = len(micro)
    mistakes = {}
    if max_norm is not None:
        # Checked first: with equal micro-batches the unclipped gradient equals some of the
        # weighting mistakes below, and "not clipped" is then the true diagnosis.
        mistakes["not_clipped"] = _weighted_sum(micro, [s / sum(sizes) for s in sizes])
        accumulated = None
        for grads in micro:
            step = {n: g / accum_steps for n, g in grads.items()}
            accumulated = step if accumulated is None else {n: accumulated[n] + step[n] for n in step}
            accumulated = clip_grads(accumulated, max_norm)
        mistakes["clipped_every_micro_batch"] = accumulated
    mistakes.update({
        "no_division": _weighted_sum(micro, [1.0] * count),
        "last_micro_batch_only": _weighted_sum(micro[-1:], [1.0 / accum_steps]),
        "last_micro_batch_only_undivided": micro[-1],
        "equal_weights": _weighted_sum(micro, [1.0 / count] * count),
    })
    if count != accum_steps:
        # In a full cycle this equals "equal_weights"; only a short cycle tells them apart.
        mistakes["divided_by_accum_steps"] = _weighted_sum(micro, [1.0 / accum_steps] * count)
    return mistakes


@kept
def reference_run(model: nn.Module, loss_fn: Callable, cycles: Sequence[Sequence[Batch]], *,
                  lr: float, max_norm: float | None = None,
                  accum_steps: int | None = None) -> Reference:
    """Plain SGD (p -= lr * grad) on a copy of `model`, one update per cycle of (x, y) micro-batches.

    Each update uses the gradient of loss_fn over the whole cycle concatenated (loss_fn must
    average over samples, like F.cross_entropy), clipped to `max_norm` if given. The model
    itself is not touched. `accum_steps` (default: the longest cycle) is only used to name
    mistakes such as dividing a short cycle by accum_steps. Computed once per process for equal
    arguments (helpers.checks.kept): every student of a class is judged against the same run.
    """
    if not cycles or any(len(cycle) == 0 for cycle in cycles):
        raise ValueError("reference_run needs at least one cycle, each with at least one micro-batch")
    twin = clone_model(model)
    accum_steps = accum_steps or max(len(cycle) for cycle in cycles)
    references = []
    for cycle in cycles:
        micro = _micro_grads(twin, loss_fn, cycle)
        x, y = _concat(cycle)
        loss = loss_fn(twin(x), y)
        loss.backward()
        full = grad_snapshot(twin)
        if max_norm is not None:
            full = clip_grads(full, max_norm)
        sizes = [len(mx) for mx, _ in cycle]
        references.append(CycleReference(full, loss.item(), len(cycle),
                                         _mistakes(micro, sizes, accum_steps, max_norm)))
        with torch.no_grad():
            for name, param in twin.named_parameters():
                param -= lr * full[name]
        twin.zero_grad(set_to_none=True)
    return Reference(references, param_snapshot(twin), accum_steps, sum(len(c) for c in cycles))
