"""Reference runs and diagnoses for the gradient-accumulation exercises.

Each check compares a student's run (recorded by helpers.spies) with a reference computed
on a copy of the model from whole, concatenated batches: the thing accumulation must reproduce.
When they differ, the check recomputes the gradients that each classic mistake would have
produced and names the mistake that matches.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from helpers.grads import clone_model, compare, grad_snapshot, param_snapshot

Batch = tuple[torch.Tensor, torch.Tensor]
GradDict = dict[str, torch.Tensor]

# Accumulated and full-batch gradients differ only by float32 summation order.
RTOL = 1e-4
ATOL = 1e-6


@dataclass
class CycleReference:
    """What one optimizer update should see, plus the gradients of the classic mistakes."""

    grads: GradDict
    loss: float
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


def _clip(grads: GradDict, max_norm: float) -> GradDict:
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads.values()]))
    factor = min(1.0, max_norm / (float(norm) + 1e-6))
    return {name: g * factor for name, g in grads.items()}


def _mistakes(micro: list[GradDict], sizes: list[int], accum_steps: int,
              max_norm: float | None) -> dict[str, GradDict]:
    count = len(micro)
    mistakes = {}
    if max_norm is not None:
        # Checked first: with equal micro-batches the unclipped gradient equals some of the
        # weighting mistakes below, and "not clipped" is then the true diagnosis.
        mistakes["not_clipped"] = _weighted_sum(micro, [s / sum(sizes) for s in sizes])
        running = None
        for grads in micro:
            step = {n: g / accum_steps for n, g in grads.items()}
            running = step if running is None else {n: running[n] + step[n] for n in step}
            running = _clip(running, max_norm)
        mistakes["clipped_every_micro_batch"] = running
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


def reference_run(model: nn.Module, loss_fn: Callable, cycles: Sequence[Sequence[Batch]], *,
                  lr: float, max_norm: float | None = None,
                  accum_steps: int | None = None) -> Reference:
    """Plain SGD (p -= lr * grad) on a copy of `model`, one update per cycle of (x, y) micro-batches.

    Each update uses the gradient of loss_fn over the whole cycle concatenated (loss_fn must
    average over samples, like F.cross_entropy), clipped to `max_norm` if given. The model
    itself is not touched. `accum_steps` (default: the longest cycle) is only used to name
    mistakes such as dividing a short cycle by accum_steps.
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
            full = _clip(full, max_norm)
        sizes = [len(mx) for mx, _ in cycle]
        references.append(CycleReference(full, loss.item(), _mistakes(micro, sizes, accum_steps, max_norm)))
        with torch.no_grad():
            for name, param in twin.named_parameters():
                param -= lr * full[name]
        twin.zero_grad(set_to_none=True)
    return Reference(references, param_snapshot(twin), accum_steps, sum(len(c) for c in cycles))


MISTAKE_MESSAGES = {
    "no_division": (
        "the gradient at update {update} is the plain sum of the micro-batch gradients, {n}x too large: "
        "divide each micro-batch loss by the number of micro-batches in the cycle (accum_steps)"
    ),
    "last_micro_batch_only": (
        "the gradient at update {update} holds only the last micro-batch: zero_grad() ran inside the "
        "cycle and wiped the earlier micro-batches. Call zero_grad() once, at the start of a cycle"
    ),
    "divided_by_accum_steps": (
        "update {update} divided its micro-batch losses by accum_steps={k}, but its cycle has "
        "{n} micro-batches: weight each micro-batch by its share of the samples in its own cycle"
    ),
    "equal_weights": (
        "update {update} weighted every micro-batch equally, but they hold different numbers of "
        "samples: weight each micro-batch's mean loss by its share of the samples in the cycle"
    ),
    "clipped_every_micro_batch": (
        "the gradient at update {update} was clipped after every micro-batch: clip once per "
        "cycle, after the last backward (and after scaler.unscale_)"
    ),
    "not_clipped": (
        "the gradient at update {update} was never clipped: call "
        "torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm) once per cycle, before step"
    ),
}
MISTAKE_MESSAGES["last_micro_batch_only_undivided"] = MISTAKE_MESSAGES["last_micro_batch_only"]


def diagnose_gradient(candidate: GradDict, cycle: CycleReference, update: int, cycle_size: int,
                      accum_steps: int) -> str | None:
    """None if `candidate` matches the cycle's full-batch gradient, else a message naming the mistake."""
    missing = [name for name, g in candidate.items() if g is None]
    if missing:
        return (f"at update {update} the parameters {missing[:3]} had no gradient: "
                "run loss.backward() for every micro-batch before optimizer.step()")
    result = compare(candidate, cycle.grads)
    if result.close(rtol=RTOL, atol=ATOL):
        return None
    for mistake, grads in cycle.mistakes.items():
        if compare(candidate, grads).close(rtol=RTOL, atol=ATOL):
            return MISTAKE_MESSAGES[mistake].format(update=update, k=accum_steps, n=cycle_size)
    return (f"the gradient at update {update} differs from the full-batch gradient of its cycle "
            f"({result}): it should be the gradient of the mean loss over all samples of the cycle")


def check_updates(log, reference: Reference, cycle_sizes: Sequence[int],
                  returned_losses: Sequence[float] | None = None, *,
                  final_params: GradDict | None = None) -> None:
    """Assert that a recorded run made the reference's updates; the message names the first mistake.

    `log` is a helpers.spies.CallLog recorded with model= and optimizer=; `cycle_sizes` are the
    micro-batch counts of the cycles; `final_params` the student's parameters after the run.
    """
    k, n = reference.accum_steps, reference.num_micro_batches
    expected_updates = len(reference.cycles)
    steps = log.of("step")
    backwards = log.count("backward")
    if backwards != n:
        raise AssertionError(f"loss.backward() ran {backwards} times for {n} micro-batches: "
                             "run exactly one backward per micro-batch")
    if len(steps) != expected_updates:
        if len(steps) == n:
            raise AssertionError(
                f"optimizer.step() ran {n} times for {n} micro-batches with accum_steps={k}: "
                f"step only when a cycle is full ({expected_updates} steps)")
        if len(steps) < expected_updates and n % k:
            raise AssertionError(
                f"optimizer.step() ran {len(steps)} times, but {n} micro-batches with accum_steps={k} "
                f"make {expected_updates} cycles: the last, shorter cycle never got its step, and its "
                "gradients would leak into the next epoch")
        raise AssertionError(f"optimizer.step() ran {len(steps)} times; expected {expected_updates}, "
                             "one per cycle of accum_steps micro-batches")
    for update, (call, cycle, size) in enumerate(zip(steps, reference.cycles, cycle_sizes, strict=True), 1):
        problem = diagnose_gradient(call.info["grads"], cycle, update, size, k)
        if problem:
            raise AssertionError(problem)
    if final_params is not None:
        result = compare(final_params, reference.final_params)
        if not result.close(rtol=RTOL, atol=ATOL):
            raise AssertionError("the gradients were right but the final parameters are not "
                                 f"({result}): change the parameters only through optimizer.step()")
    if returned_losses is not None:
        expected = [cycle.loss for cycle in reference.cycles]
        got = [float(v) for v in returned_losses]
        if len(got) != len(expected) or any(abs(a - b) > 1e-4 * max(1.0, abs(b))
                                            for a, b in zip(got, expected, strict=False)):
            raise AssertionError(
                f"returned losses {[round(v, 4) for v in got]}, but the mean losses of the cycles were "
                f"{[round(v, 4) for v in expected]}: return one number per update, the cycle's mean "
                "loss (the sum of its scaled micro-batch losses)")


def token_references(model: nn.Module, micro_batches: Sequence[Batch], ignore_index: int = -100):
    """(full, naive, loss) for next-token micro-batches of logits-producing `model`.

    full: gradients of the mean cross-entropy over every real token of all micro-batches, from
    one forward over all sequences right-padded to a common length (the model is causal, so the
    padding changes nothing). naive: gradients of the mean of per-micro-batch means, the
    October 2024 bug. loss: the full-batch mean loss. The model itself is not touched.
    """
    if not micro_batches:
        raise ValueError("token_references needs at least one micro-batch")
    twin = clone_model(model)
    length = max(inputs.shape[1] for inputs, _ in micro_batches)
    pad = [(F.pad(i, (0, length - i.shape[1])), F.pad(t, (0, length - t.shape[1]), value=ignore_index))
           for i, t in micro_batches]
    inputs, targets = _concat(pad)
    loss = F.cross_entropy(twin(inputs).flatten(0, 1), targets.flatten(), ignore_index=ignore_index)
    loss.backward()
    full = grad_snapshot(twin)
    twin.zero_grad(set_to_none=True)
    for i, t in micro_batches:
        mean = F.cross_entropy(twin(i).flatten(0, 1), t.flatten(), ignore_index=ignore_index)
        (mean / len(micro_batches)).backward()
    naive = grad_snapshot(twin)
    return full, naive, loss.item()


def check_token_gradients(candidate: GradDict, full: GradDict, naive: GradDict) -> None:
    """Assert that `candidate` equals the full-batch token-mean gradient; name the naive bug if it matches."""
    missing = [name for name, g in candidate.items() if g is None]
    if missing:
        raise AssertionError(f"after your function the parameters {missing[:3]} have no .grad: "
                             "call backward() on each micro-batch's loss")
    result = compare(candidate, full)
    if result.close(rtol=RTOL, atol=ATOL):
        return
    if compare(candidate, naive).close(rtol=RTOL, atol=ATOL):
        raise AssertionError(
            "your gradient is the average of per-micro-batch mean losses, the October 2024 "
            "gradient-accumulation bug: a micro-batch with 3 tokens weighs as much as one with 40. "
            "Sum the token losses (reduction='sum') and divide by the real tokens of the whole cycle")
    doubled = {name: 2 * g for name, g in full.items()}
    if compare(candidate, doubled).close(rtol=RTOL, atol=ATOL):
        raise AssertionError("your gradient is twice the expected one: did .grad hold gradients from "
                             "an earlier call? Do not call backward twice per micro-batch")
    raise AssertionError(f"your gradient differs from the full-batch token-mean gradient ({result}): "
                         "each token of the cycle must weigh 1 / (real tokens in the whole cycle)")


def check_amp_calls(log, num_micro_batches: int, num_updates: int) -> None:
    """Assert the GradScaler call pattern: scale every backward's loss, then unscale_, clip, step
    and update once per optimizer update, in that order."""
    scaled = log.count("scale")
    if scaled != num_micro_batches:
        raise AssertionError(f"scaler.scale(loss) ran {scaled} times for {num_micro_batches} "
                             "backward passes: every backward must go through scaler.scale(loss), or "
                             "the gradients are not scaled and scaler.step divides them by the scale anyway")
    clips = log.count("clip")
    if clips == num_micro_batches and num_micro_batches != num_updates:
        raise AssertionError(f"clip_grad_norm_ ran after every micro-batch ({clips} times): clip once per "
                             "cycle, after the last backward, so it sees the complete gradient")
    once_per_update = (("unscale_", "scaler.unscale_(optimizer)"),
                       ("scaler_step", "scaler.step(optimizer)"),
                       ("update", "scaler.update()"))
    for name, meaning in once_per_update:
        count = log.count(name)
        if count != num_updates:
            raise AssertionError(f"{meaning} ran {count} times for {num_updates} optimizer updates: "
                                 "call it exactly once per update")
    order = [c.name for c in log.calls if c.name in ("unscale_", "clip", "scaler_step", "update")]
    expected = ["unscale_", "clip", "scaler_step", "update"]
    if not clips:
        expected.remove("clip")
    if order == expected * num_updates:
        return
    position = {name: order.index(name) for name in set(order)}
    if clips and position["clip"] < position["unscale_"]:
        first_clip = log.of("clip")[0]
        scale = log.of("scale")[0].info.get("scale") if log.count("scale") else None
        raise AssertionError(
            "the gradients were clipped before unscale_: clipping saw gradients multiplied by the scale "
            f"{scale:g} (norm {first_clip.info['norm_seen']:.3g}), so max_norm cut them to almost nothing. "
            "Call scaler.unscale_(optimizer) before clip_grad_norm_")
    if position["update"] < position["scaler_step"]:
        raise AssertionError("scaler.update() ran before scaler.step(optimizer): step first, then update "
                             "the scale for the next iteration")
    raise AssertionError(f"the calls ran in the order {', '.join(order[:8])}; each update should run "
                         "unscale_, clip_grad_norm_, scaler.step, scaler.update, in that order")


@contextmanager
def first_linear_dtypes(model: nn.Module) -> Iterator[list[torch.dtype]]:
    """Yield a list that collects the output dtype of each call of the model's first nn.Linear,
    which tells whether a forward pass ran under autocast."""
    first = next((m for m in model.modules() if isinstance(m, nn.Linear)), None)
    if first is None:
        raise ValueError("first_linear_dtypes needs a model with at least one nn.Linear layer")
    seen: list[torch.dtype] = []
    handle = first.register_forward_hook(lambda _module, _args, output: seen.append(output.dtype))
    try:
        yield seen
    finally:
        handle.remove()
