"""Reference runs and diagnoses for the gradient-accumulation exercises (lesson 02).

Each check chooses the inputs, has the student's loop run on them by its collector in
helpers.collect.accumulation (through helpers.transport.remote: in the same process in the student's
notebook, in the sandboxed kernel at grading) and judges what came back here: the returned
losses, the final parameters and the gradient each optimizer.step saw, against a reference
computed on a copy of the model from whole, concatenated batches (the thing accumulation must
reproduce). When they differ, the check recomputes the gradients that each classic mistake would
have produced and names the mistake that matches. What the spies counted in the student's
process (backward passes, steps, the GradScaler's calls) is evidence from that process: it can
fail a check, and explains a failure, but a pass always needs the right parameters and losses.
An error of the student's code comes back as data and is named in the course's words
(`student_error`). The GradScaler call pattern is lesson 01's check (`helpers.checks.precision`).

At grading this module is replaced by a stub inside the sandbox (GRADER_ONLY below): its
references are the exercises' answers, and the student's kernel never needs them. The lesson's
own cells compare token gradients with `helpers.grads.token_references`, which stays importable.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from helpers import models, spies
from helpers.checks.amp_calls import check_amp_calls, clip_grads
from helpers.collect.accumulation import collect_amp_training, collect_token_accumulation, collect_training
from helpers.diagnosis import mistake, mistake_name
from helpers.grads import clone_model, compare, fill_grads, grad_snapshot, near, param_snapshot

# The test cells call checks_accumulation.token_references; the lesson's own cells need it too, so
# it lives in helpers.grads, which the kernel keeps at grading.
from helpers.grads import token_references as token_references
from helpers.memory import SavedTensorMeter
from helpers.transport import remote

Batch = tuple[torch.Tensor, torch.Tensor]
GradDict = dict[str, torch.Tensor]

# Accumulated and full-batch gradients differ only by float32 summation order.
RTOL = 1e-4
ATOL = 1e-6


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
            full = clip_grads(full, max_norm)
        sizes = [len(mx) for mx, _ in cycle]
        references.append(CycleReference(full, loss.item(), len(cycle),
                                         _mistakes(micro, sizes, accum_steps, max_norm)))
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
# The name each of those mistakes goes by in a class report (helpers.diagnosis.mistake).
MISTAKE_NAMES = {
    "no_division": "loss_not_divided",
    "last_micro_batch_only": "zero_grad_inside_cycle",
    "last_micro_batch_only_undivided": "zero_grad_inside_cycle",
    "divided_by_accum_steps": "short_cycle_divided_by_accum_steps",
    "equal_weights": "micro_batches_weighted_equally",
    "clipped_every_micro_batch": "clipped_every_micro_batch",
    "not_clipped": "not_clipped",
}


STALE_MESSAGE = (
    "the gradient at update {update} still holds the gradients that were in .grad before your "
    "function was called: clear them before the first backward, with zero_grad at the start of "
    "every cycle (or once before the loop as well as after every step)"
)


def _matches_cycle(candidate: GradDict, cycle: CycleReference) -> bool:
    """True if `candidate` is the cycle's gradient or the gradient of one of its classic mistakes."""
    return any(compare(candidate, grads).close(rtol=RTOL, atol=ATOL)
               for grads in (cycle.grads, *cycle.mistakes.values()))


def diagnose_gradient(candidate: GradDict, cycle: CycleReference, update: int, cycle_size: int,
                      accum_steps: int, stale: GradDict | None = None) -> str | None:
    """None if `candidate` matches the cycle's full-batch gradient, else a message naming the mistake.

    `stale`: the gradients .grad held before the student's function ran (only for the first
    update); a candidate that is those plus a cycle's gradient is named as leaked old gradients.
    """
    diagnosis = _gradient_diagnosis(candidate, cycle, update, cycle_size, accum_steps, stale)
    return None if diagnosis is None else diagnosis[1]


def _gradient_diagnosis(candidate: GradDict, cycle: CycleReference, update: int, cycle_size: int,
                        accum_steps: int, stale: GradDict | None = None) -> tuple[str, str] | None:
    """diagnose_gradient's message, with the name of the mistake it names: (name, message), or None."""
    missing = [name for name, g in candidate.items() if g is None]
    if missing:
        return "backward_missing", (f"at update {update} the parameters {missing[:3]} had no gradient: "
                                    "run loss.backward() for every micro-batch before optimizer.step()")
    result = compare(candidate, cycle.grads)
    if result.close(rtol=RTOL, atol=ATOL):
        return None
    if stale is not None and all(stale.get(name) is not None for name in candidate):
        without = {name: g - stale[name] for name, g in candidate.items()}
        if _matches_cycle(without, cycle):
            return "stale_grads_not_cleared", STALE_MESSAGE.format(update=update)
    for kind, grads in cycle.mistakes.items():
        if compare(candidate, grads).close(rtol=RTOL, atol=ATOL):
            return MISTAKE_NAMES[kind], MISTAKE_MESSAGES[kind].format(update=update, k=accum_steps,
                                                                     n=cycle_size)
    ratio = _scale_of(candidate, cycle.grads)
    if ratio is not None and ratio > 0 and not near(ratio, 1.0, rtol=0.02) and compare(
            candidate, {name: g * ratio for name, g in cycle.grads.items()}).close(rtol=RTOL, atol=ATOL):
        return "cycle_weights_not_one", (
            f"the gradient at update {update} points the right way but is {ratio:.3g} times the "
            f"full-batch gradient of its cycle of {cycle_size} micro-batches: the weights of this "
            "cycle's micro-batch losses add up to that, not 1. Weigh each micro-batch by its share "
            "of the samples of its own cycle, counted anew for every cycle, the short last one included")
    return "wrong_gradient", (
        f"the gradient at update {update} differs from the full-batch gradient of its cycle "
        f"({result}): it should be the gradient of the mean loss over all samples of the cycle")


def _scale_of(candidate: GradDict, reference: GradDict) -> float | None:
    """The factor s that makes s * reference closest to candidate (least squares), or None."""
    dot = norm = 0.0
    for name, want in reference.items():
        got = candidate.get(name)
        if want is None or got is None or got.shape != want.shape:
            return None
        dot += float((got.double() * want.double()).sum())
        norm += float((want.double() ** 2).sum())
    return dot / norm if norm > 0 else None


_NOT_GIVEN = object()

# A correct loop holds one micro-batch's saved activations at a time. A forward or a backward over
# two or more micro-batches at once holds about twice as much or more; 1.5x separates the two with
# room for another, equivalent way of writing the loss.
MEMORY_SLACK = 1.5


def micro_batch_peak(model: nn.Module, loss_fn: Callable, micro_batches: Sequence[Batch]) -> int:
    """The most bytes of saved activations one forward and backward of a single micro-batch holds,
    over `micro_batches` (each on its own copy of the model and of the batch, as the student's
    kernel receives them): what a correct accumulation loop peaks at."""
    peak = 0
    for x, y in micro_batches:
        twin = clone_model(model)
        with SavedTensorMeter(twin) as saved:
            loss_fn(twin(x.clone()), y.clone()).backward()
        peak = max(peak, saved.peak)
    return peak


def check_graphs_alive(graphs, micro_rows: int) -> None:
    """At most one micro-batch's autograd graph alive at once, and no forward on more rows than the
    largest micro-batch holds, as the model's layers saw them (helpers.collect.autograd_graphs: on every
    thread, whatever saved-tensor hooks, save_on_cpu or checkpoint were active)."""
    keys = ("most_alive", "most_rows", "forwards")
    if not (isinstance(graphs, dict) and all(type(graphs.get(key)) is int for key in keys)):
        raise mistake("evidence_unreadable", "could not read which autograd graphs your loop held")
    alive, rows = graphs["most_alive"], graphs["most_rows"]
    if graphs.get("hooks_lost"):
        raise mistake(
            "course_hooks_removed",
            "your function removed the hooks the check put on the model's layers (a module's "
            "_forward_hooks), which count the forward passes it held at once: leave the model's hooks "
            "as you found them")
    if alive > 1:
        raise mistake(
            "several_micro_batches_in_memory",
            f"the result is right, but the model's layers held the autograd graphs of {alive} forward passes "
            "at once: run each micro-batch's backward before the next forward, so that its graph is freed "
            "(saving the activations elsewhere, with save_on_cpu or checkpoint, or running the forward on "
            "another thread, still holds them)")
    if micro_rows and rows > micro_rows:
        raise mistake(
            "forward_over_whole_cycle",
            f"the result is right, but one forward pass ran {rows} rows at once, where the largest "
            f"micro-batch holds {micro_rows}: run the forward of each micro-batch on its own")


def check_activation_memory(peak_saved, single_peak: int, backwards: int, num_micro_batches: int,
                            graphs=None, micro_rows: int = 0) -> None:
    """The one requirement the parameters cannot show: at most one micro-batch's activations
    alive at once. `graphs` (the model's layers' record, check_graphs_alive) decides first; then
    `peak_saved`, what the student's kernel's saved-tensor meter measured, against `single_peak`.
    The backward count only explains a failure. A loop that torch.func runs cannot run under the
    meter (collect_training runs it again without): its `peak_saved` is None, and the graphs judge."""
    if graphs is not None:
        check_graphs_alive(graphs, micro_rows)
        if peak_saved is None:
            return
    if not isinstance(peak_saved, int) or isinstance(peak_saved, bool) or peak_saved < 0:
        raise mistake("evidence_unreadable", "could not read how much memory your loop's autograd graph held")
    if single_peak > 0 and peak_saved > MEMORY_SLACK * single_peak:
        counted = (f"; backward ran {backwards} times for {num_micro_batches} micro-batches"
                   if backwards != num_micro_batches else "")
        raise mistake(
            "several_micro_batches_in_memory",
            f"the result is right, but the autograd graph held {peak_saved / single_peak:.1f} micro-batches' "
            f"activations at once ({peak_saved} bytes; one micro-batch needs {single_peak}){counted}: run "
            "one forward and one backward per micro-batch, so that each backward frees its activations "
            "before the next forward (holding a whole cycle's is what accumulation exists to avoid)")


def check_updates(log, reference: Reference,
                  returned_losses: Sequence[float] | None = _NOT_GIVEN, *,
                  final_params: GradDict | None = None, stale_grads: GradDict | None = None,
                  activation_peaks: tuple | None = None) -> None:
    """Assert that a recorded run made the reference's updates; the message names the first mistake.

    `log` is a helpers.spies.CallLog recorded with model= and optimizer=; `reference` the
    reference_run of the same cycles (it knows each cycle's size); `returned_losses` what the
    student's function returned (a list of Python floats, one per update; omit it to skip that
    check); `final_params` the student's parameters after the run; `stale_grads` what .grad held
    before the run; `activation_peaks` (the student's peak of saved activations, one micro-batch's,
    and optionally the layers' graph record and the largest micro-batch's rows) judges memory once
    the parameters are right (without it, the backward passes are counted).
    """
    n = reference.num_micro_batches
    backwards = log.count("backward")
    if final_params is not None and compare(final_params, reference.final_params).close(rtol=RTOL, atol=ATOL):
        # The outcome is right. What the parameters cannot show is the memory it took: one
        # micro-batch's activations at a time is what accumulation is for.
        if activation_peaks is not None:
            peak_saved, single_peak, *graph_record = activation_peaks
            check_activation_memory(peak_saved, single_peak, backwards, n, *graph_record)
        elif backwards != n:
            raise mistake(
                "backward_not_per_micro_batch",
                f"the final parameters are right, but backward ran {backwards} times for {n} micro-batches: "
                "run one forward and one backward per micro-batch (a backward over a whole cycle at once "
                "keeps every micro-batch's activations in memory, which accumulation exists to avoid)")
        if returned_losses is not _NOT_GIVEN:
            check_returned_losses(returned_losses, [cycle.loss for cycle in reference.cycles])
        return
    _explain_wrong_updates(log, reference, backwards, stale_grads)
    if final_params is not None:
        result = compare(final_params, reference.final_params)
        raise mistake("parameters_changed_outside_step",
                      "the gradients each step saw were right but the final parameters are not "
                      f"({result}): change the parameters only through optimizer.step()")
    if returned_losses is not _NOT_GIVEN:
        check_returned_losses(returned_losses, [cycle.loss for cycle in reference.cycles])


def _explain_wrong_updates(log, reference: Reference, backwards: int, stale_grads: GradDict | None) -> None:
    """Name what made the updates differ from the reference's: the backward or step counts, then the
    first update whose gradient differs (a classic mistake, or old gradients leaking in)."""
    k, n = reference.accum_steps, reference.num_micro_batches
    expected_updates = len(reference.cycles)
    steps = log.of("step")
    tail = n % k
    if backwards == n - tail and tail and len(steps) == expected_updates - 1:
        # The backward count alone would say "one backward per micro-batch", which the loop did for
        # every micro-batch it ran: what it skipped is the last cycle.
        raise mistake(
            "last_cycle_skipped",
            f"the loop ran {backwards} of {n} micro-batches and stepped {len(steps)} times: with "
            f"accum_steps={k} the last, shorter cycle ({tail} micro-batch{'es' if tail > 1 else ''}) never "
            f"ran or got its step. Run it too: {expected_updates} cycles, the last one shorter")
    if backwards != n:
        raise mistake("backward_not_per_micro_batch",
                      f"backward ran {backwards} times for {n} micro-batches: "
                      "run exactly one backward per micro-batch")
    if len(steps) != expected_updates:
        if len(steps) == n:
            raise mistake(
                "step_every_micro_batch",
                f"optimizer.step() ran {n} times for {n} micro-batches with accum_steps={k}: "
                f"step only when a cycle is full ({expected_updates} steps)")
        if len(steps) < expected_updates and n % k:
            raise mistake(
                "last_cycle_not_stepped",
                f"optimizer.step() ran {len(steps)} times, but {n} micro-batches with accum_steps={k} "
                f"make {expected_updates} cycles: the last, shorter cycle never got its step, and its "
                "gradients would leak into the next epoch")
        if len(steps) == expected_updates + 1 and n % k == 0:
            raise mistake(
                "extra_step_after_last_cycle",
                f"optimizer.step() ran {len(steps)} times, but {n} micro-batches with accum_steps={k} make "
                f"exactly {expected_updates} cycles: your loop stepped once more after the last full cycle, "
                "with no micro-batch left (there are ceil(micro-batches / accum_steps) cycles)")
        raise mistake("wrong_step_count",
                      f"optimizer.step() ran {len(steps)} times; expected {expected_updates}, "
                      "one per cycle of accum_steps micro-batches")
    for update, (call, cycle) in enumerate(zip(steps, reference.cycles, strict=True), 1):
        diagnosis = _gradient_diagnosis(call.info["grads"], cycle, update, cycle.size, k,
                                        stale=stale_grads if update == 1 else None)
        if diagnosis:
            name, problem = diagnosis
            raise mistake(name, problem)


def check_returned_losses(returned, expected: Sequence[float], rtol: float = 1e-4) -> None:
    """Assert that `returned` is a list of Python floats, one per update, close to `expected`."""
    if not isinstance(returned, (list, tuple)):
        raise mistake("wrong_return_type",
                      f"your function returned {type(returned).__name__}, not a list: return a "
                      "list with one float per update, the mean loss of that cycle")
    kinds = {type(v).__name__ for v in returned if not isinstance(v, numbers.Real) or isinstance(v, bool)}
    if kinds:
        raise mistake(
            "loss_not_python_float",
            f"the returned losses hold {', '.join(sorted(kinds))}, not Python floats: sum loss.detach() "
            "over the cycle and call .item() once per update (a tensor that still requires grad keeps "
            "its whole graph in memory)")
    got = [float(v) for v in returned]
    if len(got) != len(expected) or any(not near(a, b, rtol=rtol, atol=rtol)
                                        for a, b in zip(got, expected, strict=False)):
        raise mistake(
            "wrong_loss_returned",
            f"returned losses {[float(f'{v:.6g}') for v in got]}, but the mean losses of the cycles were "
            f"{[float(f'{v:.6g}') for v in expected]}: return one number per update, the cycle's mean "
            "loss (the sum of its scaled micro-batch losses)")


def check_token_gradients(candidate: GradDict, full: GradDict, naive: GradDict,
                          before: GradDict | None = None) -> None:
    """Assert that `candidate` equals the full-batch token-mean gradient; name the naive bug if it matches.

    `before`: what .grad held when the student's function was called. The function must add
    its gradient to it (the caller clears), so `candidate - before` is compared.
    """
    missing = [name for name, g in candidate.items() if g is None]
    if missing:
        raise mistake("backward_missing",
                      f"after your function the parameters {missing[:3]} have no .grad: "
                      "call backward() on each micro-batch's loss")
    if before is not None:
        if compare(candidate, full).close(rtol=RTOL, atol=ATOL):
            raise mistake(
                "cleared_callers_grads",
                "your function cleared the gradients that .grad held when it was called: do not call "
                "zero_grad (or set .grad to None); the caller clears them, and may accumulate several "
                "calls into one update")
        candidate = {name: g - before[name] if before.get(name) is not None else g
                     for name, g in candidate.items()}
    result = compare(candidate, full)
    if result.close(rtol=RTOL, atol=ATOL):
        return
    if compare(candidate, naive).close(rtol=RTOL, atol=ATOL):
        raise mistake(
            "mean_of_micro_batch_means",
            "your gradient is the average of per-micro-batch mean losses, the October 2024 "
            "gradient-accumulation bug: a micro-batch with 3 tokens weighs as much as one with 40. "
            "Sum the token losses (reduction='sum') and divide by the real tokens of the whole cycle")
    doubled = {name: 2 * g for name, g in full.items()}
    if compare(candidate, doubled).close(rtol=RTOL, atol=ATOL):
        raise mistake("gradient_doubled",
                      "your gradient is twice the expected one: did .grad hold gradients from "
                      "an earlier call? Do not call backward twice per micro-batch")
    flat_candidate = torch.cat([g.flatten() for g in candidate.values()])
    flat_full = torch.cat([g.flatten() for g in full.values()])
    ratio = float(flat_candidate @ flat_full) / max(float(flat_full @ flat_full), 1e-30)
    if not near(ratio, 1.0, atol=1e-3) and compare(candidate, {n: ratio * g for n, g in full.items()}).close(
            rtol=RTOL, atol=ATOL):
        raise mistake(
            "wrong_token_divisor",
            f"your gradient differs from the full-batch token-mean gradient by a factor: it is {ratio:.4g} "
            "times it. The direction is right, the divisor is wrong: divide the summed token loss by the "
            "number of real target tokens (targets != ignore_index) of the whole cycle")
    raise mistake("wrong_gradient",
                  f"your gradient differs from the full-batch token-mean gradient ({result}): "
                  "each token of the cycle must weigh 1 / (real tokens in the whole cycle)")


# What torch raises for the classic GradScaler mistakes of an accumulation loop, and what the
# course says about each. Matched on torch's own message, so each fixed text appears only when
# its cause is the cause.
TORCH_ERRORS = (
    remote.Known(
        "update_without_step", "No inf checks were recorded prior to update",
        "scaler.update() ran without a scaler.step(optimizer) since the last update: update the scale "
        "once per optimizer step, right after scaler.step(optimizer), not after every micro-batch (the "
        "scale must stay the same for all micro-batches of a cycle)"),
    remote.Known(
        "unscale_twice", "unscale_() has already been called on this optimizer since the last update()",
        "scaler.unscale_(optimizer) ran twice in one cycle: unscale once per cycle, after the last "
        "micro-batch's backward, right before clipping"),
    remote.Known(
        "scaler_not_updated", "unscale_() is being called after step()",
        "scaler.unscale_(optimizer) ran after a scaler.step(optimizer) with no scaler.update() between "
        "them: the scaler clears its per-optimizer state only in update(), so call scaler.update() "
        "once right after every scaler.step(optimizer)"),
    remote.Known(
        "scaler_step_twice", "step() has already been called since the last update()",
        "scaler.step(optimizer) ran twice without scaler.update() between them: step and update once "
        "per cycle, after the last micro-batch's backward"),
    remote.Known(
        "loss_not_scaled", "Attempted update but _scale is None",
        "scaler.update() ran but no loss went through scaler.scale(loss): backward through "
        "scaler.scale(loss) for every micro-batch"),
)


def student_error(function: str, error: remote.Raised, *, expected: str = "",
                  num_micro_batches: int | None = None, accum_steps: int | None = None,
                  ignore_index: int | None = None) -> AssertionError:
    """remote.failure for this lesson: GradScaler's errors named by TORCH_ERRORS; with
    `num_micro_batches` and `accum_steps` (none of the micro-batches empty), a ZeroDivisionError
    named as an empty cycle; with `ignore_index`, cross_entropy's "Target <ignore_index> is out of
    bounds" as an ignore_index not passed on. `expected` says what the test was checking."""
    known = list(TORCH_ERRORS)
    if ignore_index is not None:
        known.append(remote.Known(
            "ignore_index_not_passed", f"Target {ignore_index} is out of bounds",
            f"the padding targets hold ignore_index={ignore_index}, and cross_entropy took them "
            "for a class: pass ignore_index=ignore_index on to F.cross_entropy (and count the "
            "real tokens with it)"))
    advice = ""
    if error.type == "ZeroDivisionError" and num_micro_batches is not None and accum_steps is not None:
        cycles = math.ceil(num_micro_batches / accum_steps)
        advice = (f"the test passed {num_micro_batches} micro-batches, none of them empty, with "
                  f"accum_steps={accum_steps}: that makes {cycles} cycles (ceil({num_micro_batches} / "
                  f"{accum_steps})), and a count of zero means your loop made one more, empty cycle")
    return remote.failure(function, error, known=known, advice=advice, expected=expected,
                          cause="empty_extra_cycle")


# ---------------------------------------------------------------------------------------------
# The exercises' runs: the test cell chooses the data and computes the reference; these have the
# student's function run on it by a collector (old gradients in .grad, the spies recording) and
# judge what comes back.

ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth")
NUMBERS = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight")


@contextmanager
def prefixed(where: str | None) -> Iterator[None]:
    """Start the message of an AssertionError raised inside the block with `where: `; None: unchanged."""
    if where is None:
        yield
        return
    try:
        yield
    except AssertionError as problem:
        raise _reworded(problem, f"{where}: {problem}") from None


def _reworded(problem: AssertionError, message: str) -> AssertionError:
    """`problem`'s diagnosis in other words: an AssertionError saying `message` under the name of the
    mistake `problem` was given (helpers.diagnosis.mistake), or under none if it had none."""
    name = mistake_name(problem)
    return AssertionError(message) if name is None else mistake(name, message)


def call_log(outcome: dict) -> spies.CallLog:
    """The CallLog a collector recorded, rebuilt from its plain data. An entry that is not a call the
    spies make is dropped: a log forged in the student's process can only lose calls, never pass."""
    log = spies.CallLog()
    calls = outcome.get("calls") if isinstance(outcome, dict) else None
    for call in calls if isinstance(calls, list) else []:
        if (isinstance(call, dict) and call.get("name") in spies.CALL_NAMES
                and isinstance(call.get("info"), dict)):
            log.calls.append(spies.Call(call["name"], len(log.calls), call["info"]))
    return log


def returned_tensors(outcome: dict, key: str, like: GradDict, what: str) -> GradDict:
    """outcome[key], a {name: tensor or None} dict with the names of `like` and its tensors' shapes
    (None, a parameter without .grad, is for the check to name); else the check fails: only a kernel
    that forges its answer sends anything else."""
    tensors = outcome.get(key)
    if not (isinstance(tensors, dict) and set(tensors) == set(like) and all(
            tensors[name] is None or isinstance(tensors[name], torch.Tensor) and tensors[name].shape == shape
            for name, shape in ((name, like[name].shape) for name in like))):
        raise mistake("evidence_unreadable", f"the check could not read {what} back from your function's run")
    return tensors


def _step_grads_readable(log: spies.CallLog, like: GradDict) -> None:
    """Each step's gradients, as the spies saw them, replaced by a readable dict (or the check fails)."""
    for number, call in enumerate(log.of("step"), 1):
        call.info["grads"] = returned_tensors(call.info, "grads", like, f"the gradients of update {number}")


def _cycles(micro_batches: Sequence[Batch], accum_steps: int) -> list[Sequence[Batch]]:
    """Consecutive runs of accum_steps micro-batches (the test's data: a multiple of accum_steps)."""
    return [micro_batches[i:i + accum_steps] for i in range(0, len(micro_batches), accum_steps)]


def check_training(train: Callable, name: str, model: nn.Module, micro_batches: Sequence[Batch],
                   accum_steps: int, reference: Reference, *, lr: float, old_seed: int | None,
                   old_scale: float = 1.0, where: str | None = None, name_empty_cycle: bool = False,
                   reads_per_update: int | None = None, detached_total: bool = False):
    """Exercises 1 and 2: on a copy of `model` whose .grad holds old gradients (fill_grads(old_scale,
    old_seed); old_seed=None: a fresh copy, every .grad None, as before a first backward), run
    train(model, SGD(lr), F.cross_entropy, micro_batches, accum_steps) under the spies
    (collect_training), and assert with check_updates that it made `reference`'s updates:
    backward and step counts, each update's gradient (no old gradient leaking in), the final
    parameters, the returned losses. The test's `model` is not touched.

    `reference`: the test's reference_run of the same model, cycles and lr. `name` is the function
    named in torch's errors; `where` starts a failed check's message; `name_empty_cycle` names a
    ZeroDivisionError as one cycle too many. `reads_per_update` counts the host reads (at most that
    many per update); `detached_total` wants none of them to carry an autograd graph (Exercise 1's
    "add up loss.detach()"). Returns the call log.
    """
    model = clone_model(model)
    old = None if old_seed is None else fill_grads(model, scale=old_scale, seed=old_seed)
    outcome = remote.run_student(train, collect_training, model, {"kind": "SGD", "lr": lr}, F.cross_entropy,
                                 list(micro_batches), accum_steps)
    error = remote.raised_of(outcome)
    if error is not None:
        sizes = {"num_micro_batches": len(micro_batches), "accum_steps": accum_steps}
        raise student_error(name, error, expected="makes the full-batch updates of every cycle",
                            **(sizes if name_empty_cycle else {}))
    log = call_log(outcome)
    final_params = returned_tensors(outcome, "params", param_snapshot(model), "the final parameters")
    _step_grads_readable(log, param_snapshot(model))
    peaks = (outcome.get("peak_saved"), micro_batch_peak(model, F.cross_entropy, micro_batches),
             outcome.get("graphs"), max(len(x) for x, _ in micro_batches))
    with prefixed(where):
        check_updates(log, reference, outcome["value"], final_params=final_params, stale_grads=old,
                      activation_peaks=peaks)
        if reads_per_update is not None:
            check_host_reads(outcome.get("host_reads"), len(reference.cycles), reads_per_update)
        if detached_total:
            check_total_detached(outcome.get("reads_with_graph"))
    return log


def check_total_detached(reads_with_graph) -> None:
    """Exercise 1's "add up loss.detach() over the cycle", which no outcome shows: no value read to
    the host still carries an autograd graph (helpers.spies.record_host_syncs)."""
    if type(reads_with_graph) is not int:
        raise mistake("evidence_unreadable", "could not read whether your loop's running loss kept its graph")
    if reads_with_graph:
        raise mistake(
            "total_keeps_graph",
            "the result is right, but the running loss you read still carries the autograd graph: "
            "total = total + loss keeps every micro-batch's graph alive until the read; add up "
            "loss.detach() over the cycle")


def check_host_reads(counts, updates: int, reads_per_update: int) -> None:
    """What the text counts and no outcome shows: host reads (.item(), float(t), printing a tensor...),
    at most `reads_per_update` per update, counted at torch's dispatch on every thread."""
    if not (isinstance(counts, dict) and all(type(n) is int for n in counts.values())):
        raise mistake("evidence_unreadable", "could not read how often your loop read values to the host")
    total, allowed = sum(counts.values()), reads_per_update * updates
    if total > allowed:
        kinds = ", ".join(f"{name} {n}" for name, n in counts.items() if n)
        raise mistake(
            "too_many_host_reads",
            f"the result is right, but your loop read values to the host {total} times ({kinds}) for "
            f"{updates} updates: add loss.detach() over the cycle and call .item() once per update (each "
            "read waits for the GPU)")


def check_token_accumulation(accumulate: Callable, model: nn.Module, micro_batches: Sequence[Batch],
                             ignore_index: int, references: tuple[GradDict, GradDict, float], *,
                             old_seed: int | None, where: str | None = None, unseen: bool = False):
    """Exercise 3: on a copy of `model` whose .grad holds the caller's gradients (noise of std 0.1,
    `old_seed`; None: a fresh copy, every .grad None, as zero_grad(set_to_none=True) leaves it),
    run accumulate(model, micro_batches, ignore_index=ignore_index) under the spies
    (collect_token_accumulation), and assert one backward per micro-batch, that .grad grew by the
    full-batch token-mean gradient (check_token_gradients), that the parameters did not move (the
    caller steps), that it returned the mean loss as a float (relative 1e-4), and, counted, that it
    read the loss to the host once, at the end (check_loss_reads). The test's `model` is not touched.

    `references`: the test's token_references(model, micro_batches, ignore_index) before the run.
    `where` (default: the ignore_index and the sequences per micro-batch) starts the messages;
    `unseen` gives the hidden data's shorter messages. Returns the call log.
    """
    full, naive, loss = references
    if where is None:
        where = (f"with ignore_index={ignore_index} and {[len(i) for i, _ in micro_batches]} sequences per "
                 "micro-batch")
    model = clone_model(model)
    old = None if old_seed is None else fill_grads(model, scale=0.1, seed=old_seed)
    before = param_snapshot(model)
    outcome = remote.run_student(accumulate, collect_token_accumulation, model, list(micro_batches),
                                 ignore_index)
    error = remote.raised_of(outcome)
    if error is not None:
        raise student_error("accumulate_token_gradients", error, ignore_index=ignore_index,
                            expected="adds the cycle's token-mean gradient to .grad")
    log, returned = call_log(outcome), outcome["value"]
    # The gradient cannot show whether the cycle ran as one graph: the memory the graph held can,
    # and a graph over the whole cycle also explains a wrong gradient best, so it comes first.
    backwards = log.count("backward")
    single = micro_batch_peak(model, lambda logits, targets: F.cross_entropy(
        logits.flatten(0, 1), targets.flatten(), ignore_index=ignore_index), micro_batches)
    try:
        check_activation_memory(outcome.get("peak_saved"), single, backwards, len(micro_batches),
                                outcome.get("graphs"), max(len(inputs) for inputs, _ in micro_batches))
    except AssertionError as failure:
        raise _reworded(failure, f"{where}: run one forward and one backward per micro-batch" if unseen
                        else f"{where}: {failure}") from None
    try:
        with prefixed(where):
            check_token_gradients(returned_tensors(outcome, "grads", before, ".grad"), full,
                                  naive, before=old)
    except AssertionError:
        if backwards == len(micro_batches):
            raise
        # A wrong gradient from too few or too many backward passes: the count names the cause.
        raise mistake("backward_not_per_micro_batch", (
            f"{where}: run one backward per micro-batch" if unseen else
            f"{where}: backward ran {backwards} times for {len(micro_batches)} micro-batches: "
            "run one forward and one backward per micro-batch (that is what keeps memory low)")) from None
    moved = compare(returned_tensors(outcome, "params", before, "the parameters"), before)
    if not moved.max_abs_error == 0:      # NaN counts as moved
        raise mistake("stepped_for_the_caller",
                      f"{where}: the gradient is right, but your function changed the parameters ({moved}): "
                      "do not step or update them, the caller steps once it has accumulated its cycle")
    if unseen:
        if not (isinstance(returned, float) and near(returned, loss, rtol=1e-4)):
            raise mistake("wrong_loss_returned",
                          f"{where}: returned loss {returned!r}, but the mean loss over the real "
                          f"tokens is {loss:.6g}")
    else:
        if not isinstance(returned, float):
            raise mistake("loss_not_python_float",
                          "return a Python float (.item() once, at the end), not "
                          f"{type(returned).__name__}")
        if not near(returned, loss, rtol=1e-4):
            raise mistake("wrong_loss_returned",
                          f"{where}: returned loss {returned:.6g}, but the mean loss over the real tokens "
                          f"of the cycle is {loss:.6g}")
    check_loss_reads(outcome.get("loss_reads"), where)
    return log


def check_loss_reads(reads, where: str) -> None:
    """Exercise 3's ".item() once, at the end", which no outcome shows: at most one host read of a
    floating-point value (the loss) after the first backward, counted at torch's dispatch by
    collect_token_accumulation. Integer token counts may be read whenever the counting needs."""
    if type(reads) is not int:
        raise mistake("evidence_unreadable",
                      "could not read how often your function read the loss to the host")
    if reads > 1:
        raise mistake(
            "loss_read_per_micro_batch",
            f"{where}: the gradient and the loss are right, but your function read a loss to the host "
            f"{reads} times after the first backward: add up the detached token losses on the device and "
            "call .item() once, at the end (each read waits for the GPU)")


@dataclass
class AmpRun:
    """What one run of Exercise 4's loop left: the final parameters, the old gradients .grad held
    before, the call log, the returned losses, the dtypes the first Linear layer produced and the
    GradScaler's scale at the end."""

    params: GradDict
    old: GradDict | None
    log: spies.CallLog
    losses: object
    dtypes: set[torch.dtype]
    scale: float
    growth_tracker: int
    peak_saved: object
    graphs: object = None
    loss_autocast: object = None


@dataclass
class AmpAccumulationChecks:
    """Exercise 4's checks of `train` (the student's train_accumulated_amp). Each runs it on a fresh
    MLP(6, 8, 3, seed) whose .grad holds old gradients, with SGD(lr) and a CPU GradScaler, and
    compares with `reference(model, cycles, max_norm)`: the test's plain SGD (same lr) on whole
    cycles, clipped to max_norm unless it is None."""

    train: Callable
    reference: Callable[[nn.Module, Sequence[Sequence[Batch]], float | None], Reference]
    lr: float = 0.5

    def run(self, seed: int, micro_batches: Sequence[Batch], accum_steps: int, max_norm: float,
            amp_dtype: torch.dtype | None = None, init_scale: float = 1024.0, fresh: bool = False) -> AmpRun:
        """The student's loop on a new MLP(seed) whose .grad holds old gradients (seed `seed`; `fresh`:
        none, every .grad None), with SGD(lr) and GradScaler("cpu", init_scale) built next to it
        (collect_amp_training)."""
        model = models.MLP(6, 8, 3, seed=seed)
        old = None if fresh else fill_grads(model, seed=seed)
        outcome = remote.run_student(self.train, collect_amp_training, model, {"kind": "SGD", "lr": self.lr},
                                     {"device": "cpu", "init_scale": init_scale}, F.cross_entropy,
                                     list(micro_batches), accum_steps, max_norm, amp_dtype)
        error = remote.raised_of(outcome)
        if error is not None:
            raise student_error("train_accumulated_amp", error,
                                expected="makes one scaled, clipped update per cycle")
        log = call_log(outcome)
        _step_grads_readable(log, param_snapshot(model))
        params = returned_tensors(outcome, "params", param_snapshot(model), "the final parameters")
        dtypes, scale = outcome.get("dtypes"), outcome.get("scale")
        dtypes = {d for d in dtypes if isinstance(d, torch.dtype)} if isinstance(dtypes, list) else set()
        scale = scale if isinstance(scale, float) else math.nan
        growth = outcome.get("growth_tracker")
        return AmpRun(params, old, log, outcome["value"], dtypes, scale,
                      growth if isinstance(growth, int) and not isinstance(growth, bool) else -1,
                      outcome.get("peak_saved"), outcome.get("graphs"), outcome.get("loss_autocast"))

    def _reference(self, seed: int, cycles: Sequence[Sequence[Batch]], max_norm: float | None) -> Reference:
        return self.reference(models.MLP(6, 8, 3, seed=seed), cycles, max_norm)

    def check_updates(self, seed: int, micro_batches: Sequence[Batch], accum_steps: int, max_norm: float, *,
                      clip: bool = True, where: str | None = None, fresh: bool = False) -> AmpRun:
        """Without autocast: check_updates against the reference of the same cycles, clipped to
        max_norm (`clip=False`: unclipped, for a max_norm too large to bind), then the scaler's
        state (one scaler.update() per cycle). Wrong parameters are explained first by the forward's
        dtype and the GradScaler call pattern (check_amp_calls). `where` starts the messages;
        `fresh` runs on a model without gradients."""
        run = self.run(seed, micro_batches, accum_steps, max_norm, fresh=fresh)
        cycles = _cycles(micro_batches, accum_steps)
        reference = self._reference(seed, cycles, max_norm if clip else None)
        # The final parameters decide; the spies' record names the mistake once they are wrong.
        params_right = compare(run.params, reference.final_params).close(rtol=RTOL, atol=ATOL)
        if not params_right and run.dtypes != {torch.float32}:
            raise mistake(
                "autocast_not_disabled",
                f"with amp_dtype=None the first Linear layer ran in {run.dtypes}: autocast must be off, pass "
                "enabled=amp_dtype is not None (with dtype=None autocast falls back to its default dtype)")
        with prefixed(where):
            if not params_right:
                check_amp_calls(run.log, num_micro_batches=len(micro_batches), num_updates=len(cycles))
            single = micro_batch_peak(models.MLP(6, 8, 3, seed=seed), F.cross_entropy, micro_batches)
            check_updates(run.log, reference, run.losses, final_params=run.params, stale_grads=run.old,
                          activation_peaks=(run.peak_saved, single, run.graphs,
                                            max(len(x) for x, _ in micro_batches)))
            # Finite updates leave the scale alone; only scaler.update() counts them in its tracker.
            if run.growth_tracker != len(cycles) or run.scale != 1024.0:
                raise mistake(
                    "scaler_not_updated",
                    f"the parameters are right, but after {len(cycles)} finite updates the GradScaler holds "
                    f"scale {run.scale:g} with {run.growth_tracker} updates counted (expected 1024 and "
                    f"{len(cycles)}): call scaler.update() once per cycle, after scaler.step(optimizer)")
        return run

    def check_skips_inf(self, seed: int, micro_batches: Sequence[Batch], accum_steps: int, max_norm: float, *,
                        inf_at: tuple[int, int, int], unseen: bool = False) -> AmpRun:
        """With an inf at inf_at = (micro-batch, row, column): assert the optimizer really stepped once
        per other cycle (scaler.step skipped the inf one), the parameters are the reference's over
        the other cycles, and the scale halved once, from 1024 to 512. The visible messages are
        worded for an inf in the last of two cycles, the `unseen` ones for the first of three."""
        bad = [(x.clone(), y) for x, y in micro_batches]
        index, row, column = inf_at
        bad[index][0][row, column] = float("inf")
        run = self.run(seed, bad, accum_steps, max_norm)
        cycles, skipped = _cycles(micro_batches, accum_steps), index // accum_steps
        kept = [cycle for number, cycle in enumerate(cycles) if number != skipped]
        steps, where = run.log.count("step"), f"{ORDINALS[skipped]} of {NUMBERS[len(cycles)]} cycles"
        after = compare(run.params, self._reference(seed, kept, max_norm).final_params)
        # The parameters decide; the optimizer's real steps only name why they are wrong.
        if not after.close(rtol=1e-4, atol=1e-6) and steps != len(kept):
            raise mistake(
                "inf_step_not_skipped",
                f"with an inf in the {where} the optimizer really stepped {steps} times, not {len(kept)}: "
                "let scaler.step(optimizer) skip the cycle whose gradients hold inf" if unseen else
                f"the optimizer really stepped {steps} times, but the {ORDINALS[skipped]} cycle's gradients "
                "hold inf: let scaler.step(optimizer) decide, it skips such steps")
        if not after.close(rtol=1e-4, atol=1e-6):
            raise mistake(
                "wrong_parameters_after_skip",
                f"with an inf in the {ORDINALS[skipped]} cycle the parameters are not those of the "
                f"{NUMBERS[len(kept)]} later updates ({after})" if unseen else
                f"after a skipped cycle the parameters are not those of the first update ({after}): "
                "only scaler.step may update them")
        if run.scale != 512.0:
            raise mistake(
                "scaler_not_updated",
                (f"after one inf in {NUMBERS[len(cycles)]} cycles the scale should be 512" if unseen else
                 "after one inf the scale should halve from 1024 to 512") +
                f", it is {run.scale:g}: call scaler.update() once per cycle, after scaler.step")
        # "Skipped by scaler.step, not by you": a loop that skips the call itself (unscale_ has
        # recorded the inf, so update() still halves the scale) leaves the same outcome; counted.
        scaler_steps = run.log.count("scaler_step")
        if scaler_steps != len(cycles):
            raise mistake(
                "inf_cycle_skipped_by_hand",
                f"the parameters and the scale are right, but scaler.step(optimizer) ran {scaler_steps} "
                f"times for {len(cycles)} cycles: call it once per cycle, the cycle whose gradients hold "
                "inf included, and let it skip that step itself")
        return run

    def check_float16(self, seed: int, micro_batches: Sequence[Batch], accum_steps: int, max_norm: float, *,
                      init_scale: float, unseen: bool = False) -> AmpRun:
        """With amp_dtype=torch.float16: assert the first Linear layer ran in float16, the parameters
        end within 1e-2 (relative) of the float32 reference and the returned losses within 1e-2 of
        its cycle losses. `unseen` gives the hidden data's messages."""
        run = self.run(seed, micro_batches, accum_steps, max_norm, amp_dtype=torch.float16,
                       init_scale=init_scale)
        if run.dtypes != {torch.float16}:
            advice = "use amp_dtype" if unseen else \
                "run the forward inside torch.autocast(device_type, dtype=amp_dtype)"
            raise mistake(
                "forward_outside_autocast",
                f"with amp_dtype=torch.float16 the first Linear layer produced {run.dtypes}: {advice}")
        float32 = self._reference(seed, _cycles(micro_batches, accum_steps), max_norm)
        after = compare(run.params, float32.final_params)
        if not after.relatively_close(1e-2):
            where = f"in float16 with accum_steps={accum_steps}" if unseen else "in float16"
            raise mistake("far_from_float32_reference",
                          f"{where} the parameters ended far from the float32 reference ({after})")
        check_returned_losses(run.losses, [cycle.loss for cycle in float32.cycles], rtol=1e-2)
        # Required by the text and invisible in the outcome (cross_entropy runs in float32 under
        # autocast anyway): counted at each call of loss_fn.
        calls = run.loss_autocast
        if not (isinstance(calls, list) and all(type(on) is bool for on in calls)):
            raise mistake("evidence_unreadable", "could not read whether your loss ran under autocast")
        outside = calls.count(False)
        if outside:
            raise mistake(
                "loss_outside_autocast",
                f"the loss was computed outside torch.autocast {outside} of {len(calls)} times: run each "
                "forward and its loss inside the autocast block (a loss under autocast runs in the dtype "
                "autocast chooses for it)")
        return run

