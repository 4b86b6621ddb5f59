"""What several of lesson 02's judges share: the tolerances, the course's words for the errors the
student's code raises (TORCH_ERRORS, student_error), and the reading of a collector's outcome back
as the judge's data (returned_tensors; the call log is helpers.checks.call_logs), with `prefixed`
to say where a check failed."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from helpers import spies
from helpers.diagnosis import mistake, mistake_name
from helpers.grads import GradDict
from helpers.transport import errors

Batch = tuple[torch.Tensor, torch.Tensor]

# Accumulated and full-batch gradients differ only by float32 summation order.
RTOL = 1e-4
ATOL = 1e-6


# What torch raises for the classic GradScaler mistakes of an accumulation loop, and what the
# course says about each. Matched on torch's own message, so each fixed text appears only when
# its cause is the cause.
TORCH_ERRORS = (
    errors.Known(
        "update_without_step", "No inf checks were recorded prior to update",
        "scaler.update() ran without a scaler.step(optimizer) since the last update: update the scale "
        "once per optimizer step, right after scaler.step(optimizer), not after every micro-batch (the "
        "scale must stay the same for all micro-batches of a cycle)"),
    errors.Known(
        "unscale_twice", "unscale_() has already been called on this optimizer since the last update()",
        "scaler.unscale_(optimizer) ran twice in one cycle: unscale once per cycle, after the last "
        "micro-batch's backward, right before clipping"),
    errors.Known(
        "scaler_not_updated", "unscale_() is being called after step()",
        "scaler.unscale_(optimizer) ran after a scaler.step(optimizer) with no scaler.update() between "
        "them: the scaler clears its per-optimizer state only in update(), so call scaler.update() "
        "once right after every scaler.step(optimizer)"),
    errors.Known(
        "scaler_step_twice", "step() has already been called since the last update()",
        "scaler.step(optimizer) ran twice without scaler.update() between them: step and update once "
        "per cycle, after the last micro-batch's backward"),
    errors.Known(
        "loss_not_scaled", "Attempted update but _scale is None",
        "scaler.update() ran but no loss went through scaler.scale(loss): backward through "
        "scaler.scale(loss) for every micro-batch"),
)


def student_error(function: str, error: errors.Raised, *, expected: str = "",
                  num_micro_batches: int | None = None, accum_steps: int | None = None,
                  ignore_index: int | None = None) -> AssertionError:
    """errors.failure for this lesson: GradScaler's errors named by TORCH_ERRORS; with
    `num_micro_batches` and `accum_steps` (none of the micro-batches empty), a ZeroDivisionError
    named as an empty cycle; with `ignore_index`, cross_entropy's "Target <ignore_index> is out of
    bounds" as an ignore_index not passed on. `expected` says what the test was checking."""
    known = list(TORCH_ERRORS)
    if ignore_index is not None:
        known.append(errors.Known(
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
    return errors.failure(function, error, known=known, advice=advice, expected=expected,
                          cause="empty_extra_cycle")


# ---------------------------------------------------------------------------------------------
# The exercises' runs: the test cell chooses the data and computes the reference; these have the
# student's function run on it by a collector (old gradients in .grad, the spies recording) and
# judge what comes back.

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
