"""Exercise 3 (accumulate_token_gradients): the cycle's token-mean gradient added to .grad (not the mean
of the micro-batches' means), one forward and backward per micro-batch, the parameters left to the
caller and the mean loss read to the host once, at the end."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from helpers import grads
from helpers.checks.accumulation.activations import check_activation_memory, micro_batch_peak
from helpers.checks.accumulation.measured import check_token_cycle_memory
from helpers.checks.accumulation.shared import (
    ATOL,
    RTOL,
    Batch,
    _reworded,
    prefixed,
    returned_tensors,
    student_error,
)
from helpers.checks.call_logs import call_log
from helpers.checks.kept import kept
from helpers.collect.accumulation import collect_token_accumulation
from helpers.diagnosis import mistake
from helpers.grads import GradDict, clone_model, compare, fill_grads, near, param_snapshot
from helpers.transport import remote

_kept_token_references = kept(grads.token_references)


def token_references(model: nn.Module, micro_batches, ignore_index: int = -100):
    """What the test cells call: helpers.grads.token_references (the lesson's own cells use it, so it
    lives with the student's tools, which the kernel keeps at grading), computed once per process for
    equal arguments (helpers.checks.kept). A plain function, like every name a test cell calls."""
    return _kept_token_references(model, micro_batches, ignore_index=ignore_index)


def _token_loss(logits: torch.Tensor, targets: torch.Tensor, ignore_index: int) -> torch.Tensor:
    """The mean cross-entropy over every token that is not ignore_index."""
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=ignore_index)


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
    log, returned = call_log(outcome.get("calls")), outcome["value"]
    # The gradient cannot show whether the cycle ran as one graph: the memory the graph held can,
    # and a graph over the whole cycle also explains a wrong gradient best, so it comes first.
    backwards = log.count("backward")
    # Where the grader reads the kernel's memory from outside, that measure judges it, once the
    # outcome is right (check_token_cycle_memory, below); the kernel's own evidence judges here.
    if not remote.measures_memory(accumulate):
        token_loss = functools.partial(_token_loss, ignore_index=ignore_index)
        single = micro_batch_peak(model, token_loss, micro_batches)
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
    check_token_cycle_memory(accumulate, "accumulate_token_gradients")
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
