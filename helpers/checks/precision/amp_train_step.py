"""Exercise 3, the AMP train step: the reference step (the same autocast step on a copy of the
model), the gradient the optimizer stepped with, the returned loss, the GradScaler's state after a
finite step, and a step whose gradients hold inf, which scaler.step must skip."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from helpers import spies
from helpers.checks.amp_calls import check_amp_calls, clip_grads
from helpers.checks.call_logs import call_log
from helpers.checks.precision.evidence import _same_tensors
from helpers.collect.precision import collect_amp_train_step
from helpers.collect.specs import optimizer_spec, scaler_spec
from helpers.diagnosis import mistake
from helpers.grads import GradDict, clone_model, compare, grad_snapshot, near, param_snapshot
from helpers.transport import errors, remote

# Exercise 3's optimizer: plain SGD, so the step the parameters took tells the gradient it used.
AMP_STEP_LR = 0.5
# Honest answers match the reference step to about 1e-7 (see check_amp_step_gradient).
AMP_STEP_RTOL = 1e-4


# Errors a realistic mistake makes torch (or Python) raise inside an exercise of lesson 01, matched
# on the message's own words, and what the course says about each. A pattern appears only in the
# error its mistake causes, so each fixed text is shown only when its cause is the cause.
AMP_STEP_ERRORS = (
    errors.Known(
        "loss_not_scaled", "did not use scaler.scale(loss",
        "every backward must go through scaler.scale(loss): call scaler.scale(loss).backward(), "
        "not loss.backward()"),
    errors.Known(
        "unscale_twice", "unscale_() has already been called on this optimizer since the last update()",
        "scaler.unscale_(optimizer) ran twice in one step: unscale once, after backward and before "
        "clipping; scaler.step knows the gradients are already unscaled"),
    errors.Known(
        "scaler_not_updated", "unscale_() is being called after step()",
        "scaler.unscale_(optimizer) ran after a scaler.step(optimizer) with no scaler.update() between "
        "them: the scaler clears its per-optimizer state only in update(), so call scaler.update() "
        "once right after every scaler.step(optimizer)"),
    errors.Known(
        "update_twice", "No inf checks were recorded prior to update",
        "scaler.update() ran with no scaler.step(optimizer) since the last update (twice in one step): "
        "call it once, right after scaler.step(optimizer)"),
    errors.Known(
        "grads_cleared_before_step", "No inf checks were recorded for this optimizer",
        "scaler.step(optimizer) found no gradients: they were cleared between backward and step. "
        "Clear old gradients at the start of the step, before the forward pass"),
    errors.Known(
        "backward_twice", "backward through the graph a second time",
        "backward ran twice on the same loss: call scaler.scale(loss).backward() once"),
    errors.Known(
        "backward_without_graph", "does not require grad and does not have a grad_fn",
        "the loss has no graph to backward through: do not run the forward under torch.no_grad() "
        "or inference_mode, and call .item() only on the value you return"),
    errors.Known(
        "item_before_scale", "outputs must be a Tensor",
        "scaler.scale() needs the loss tensor: call .item() only for the value you return"),
)


@dataclass
class AmpStepReference:
    """What one correct mixed-precision step gives the optimizer: the clipped and the unclipped
    unscaled gradients, and the loss (float), all from the same autocast forward."""

    grads: GradDict
    unclipped: GradDict
    loss: float
    loss_outside: GradDict  # the clipped gradient when only the forward, not the loss, ran under autocast


def amp_reference_step(model: nn.Module, loss_fn: Callable, x: torch.Tensor, y: torch.Tensor,
                       max_norm: float, amp_dtype: torch.dtype, scale: float) -> AmpStepReference:
    """The reference of Exercise 3, on a copy of `model` (left untouched): forward and loss under
    autocast in amp_dtype, backward of loss x scale, gradients divided by scale in float32, then
    clipped to max_norm. Same arithmetic as a correct step, so an honest answer matches it to
    float32 rounding (a float32 reference differs by the 16-bit rounding, several percent)."""
    def unscaled(loss_under_autocast: bool) -> tuple[GradDict, torch.Tensor]:
        clone = clone_model(model)
        with torch.autocast(x.device.type, dtype=amp_dtype):
            output = clone(x)
            loss = loss_fn(output, y) if loss_under_autocast else None
        loss = loss_fn(output, y) if loss is None else loss
        (loss * scale).backward()
        return {name: None if g is None else g / scale for name, g in grad_snapshot(clone).items()}, loss

    unclipped, loss = unscaled(True)
    outside, _ = unscaled(False)
    return AmpStepReference(clip_grads(unclipped, max_norm), unclipped, float(loss.detach()),
                            clip_grads(outside, max_norm))


def check_amp_step_gradient(candidate: GradDict, reference: AmpStepReference, max_norm: float,
                            stale: float | None = None, scale: float | None = None,
                            rtol: float = 1e-4) -> None:
    """Assert that the gradient Exercise 3's optimizer stepped with is the reference's clipped one
    (relative error below rtol; honest answers differ by about 1e-7), else name the mistake it
    matches: gradients cleared before the step, not clipped, the loss outside autocast, or old
    gradients (`stale` in every .grad before the step, scaled by `scale`) added in."""
    if all(g is None for g in candidate.values()):
        raise mistake("grads_cleared_before_step",
                      "the optimizer stepped with no gradients at all: they were cleared between "
                      "backward and step. Clear old gradients at the start of the step")
    result = compare(candidate, reference.grads)
    if result.relatively_close(rtol):
        return
    if max_norm < float("inf") and compare(candidate, reference.unclipped).relatively_close(rtol):
        raise mistake("not_clipped",
                      f"the gradient was not clipped to max_norm={max_norm:g} ({result}): call "
                      "clip_grad_norm_(model.parameters(), max_norm) after scaler.unscale_(optimizer)")
    if compare(candidate, reference.loss_outside).relatively_close(rtol):
        raise mistake("loss_outside_autocast",
                      f"the gradient is that of a loss computed outside torch.autocast ({result}): "
                      "compute the loss inside the with block too (outside it, a loss of 16-bit "
                      "outputs runs in 16 bits on a CPU)")
    if stale is not None and scale:
        leaked = clip_grads({n: g + stale / scale for n, g in reference.unclipped.items()}, max_norm)
        if compare(candidate, leaked).relatively_close(rtol):
            raise mistake("stale_grads_not_cleared",
                          f"the step used the new gradient plus what .grad held before ({result}): "
                          "clear old gradients first (optimizer.zero_grad(set_to_none=True))")
    raise mistake(
        "wrong_gradient",
        f"with max_norm={max_norm:g} the gradient given to the optimizer differs from the unscaled, "
        f"clipped gradient of the same autocast forward ({result}): unscale_, then clip, then step")


def _run_amp_step(amp_train_step: Callable, model: nn.Module, init_scale: float, args: tuple,
                  kwargs: dict) -> tuple[dict, spies.CallLog]:
    """amp_train_step(model, optimizer, scaler, *args, **kwargs) by its collector, with an SGD of
    AMP_STEP_LR and a CPU GradScaler built there from their specs: the outcome and the spies' log."""
    optimizer = torch.optim.SGD(model.parameters(), lr=AMP_STEP_LR)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale)
    outcome = remote.run_student(amp_train_step, collect_amp_train_step, model, optimizer_spec(optimizer),
                                 scaler_spec(scaler), args, kwargs)
    remote.raise_if_raised("amp_train_step", outcome, known=AMP_STEP_ERRORS,
                           expected="makes one scaled, clipped training step")
    return outcome, call_log(outcome.get("calls"))


def check_amp_train_step(amp_train_step: Callable, seed: int, x: torch.Tensor, y: torch.Tensor,
                         max_norm: float, amp_dtype: torch.dtype, init_scale: float = 1024.0,
                         fresh: bool = False):
    """Exercise 3: one amp_train_step on a new MLP(6, 8, 3, seed) whose .grad holds 5.0 from an
    earlier step (`fresh`: a model that never ran backward, every .grad None), with an SGD and a
    real CPU GradScaler; assert a float loss, parameters moved by one SGD step with the gradient of
    amp_reference_step, its loss, and the scaler's state after one finite step. A wrong step is
    explained from the spies' record (_explain_wrong_step). Returns the call log."""
    from helpers import models

    model = models.MLP(6, 8, 3, seed=seed)
    reference = amp_reference_step(model, F.cross_entropy, x, y, max_norm, amp_dtype, init_scale)
    before = param_snapshot(model)
    if not fresh:
        for param in model.parameters():
            param.grad = torch.full_like(param, 5.0)      # left over from an earlier step
    outcome, log = _run_amp_step(amp_train_step, model, init_scale, (F.cross_entropy, x, y),
                                 {"max_norm": max_norm, "amp_dtype": amp_dtype})
    if "value" not in outcome:
        raise mistake("loss_not_python_float",
                      f"return the loss as a float (loss.item()), not {outcome.get('returned')}")
    # The outcome decides: the parameters after the step, the loss, the scaler's state. The spies'
    # record came from the student's process and only names the mistake once the outcome is wrong.
    after = _same_tensors(outcome.get("parameters"), before)
    moved_by = None if after is None else {
        name: ((before[name].double() - after[name].double()) / AMP_STEP_LR).float() for name in before}
    if moved_by is None or not compare(moved_by, reference.grads).relatively_close(AMP_STEP_RTOL):
        _explain_wrong_step(log, outcome, reference, amp_dtype, max_norm, None if fresh else 5.0,
                            init_scale)
    loss = outcome["value"]
    if not near(loss, reference.loss, atol=1e-4 * max(1.0, abs(reference.loss))):
        scaled_loss = reference.loss * init_scale
        scaled = near(loss, scaled_loss, atol=1e-3 * max(1.0, abs(scaled_loss)))
        raise mistake("returned_scaled_loss" if scaled else "wrong_loss_returned",
                      f"returned {loss!r}, but the loss of the batch under autocast is "
                      f"{reference.loss!r}" + (
                          f": that is the loss times the scaler's scale ({init_scale:g}). Return "
                          "the loss itself (loss.item()), not scaler.scale(loss)" if scaled else ""))
    # One finite step leaves the scale where it was; only scaler.update() counts it (growth tracker 1).
    if outcome.get("growth_tracker") != 1 or outcome.get("scale") != init_scale:
        raise mistake(
            "scaler_not_updated",
            f"the parameters are right, but after one finite step the GradScaler holds scale "
            f"{outcome.get('scale')} with {outcome.get('growth_tracker')} steps counted since its last "
            f"change (expected {init_scale:g} and 1): call scaler.update() once, after "
            "scaler.step(optimizer)")
    return log


def _explain_wrong_step(log: spies.CallLog, outcome: dict, reference: AmpStepReference,
                        amp_dtype: torch.dtype, max_norm: float, stale: float | None,
                        init_scale: float) -> None:
    """Exercise 3's parameters moved wrongly: name the first mistake the student's record shows (the
    forward's dtype, the step count, the GradScaler calls, the gradient the optimizer stepped with),
    else say that only the final update is wrong."""
    dtypes = outcome.get("dtypes") if isinstance(outcome.get("dtypes"), list) else []
    if not dtypes or set(dtypes) != {amp_dtype}:
        raise mistake("forward_outside_autocast",
                      f"with amp_dtype={amp_dtype} the first Linear layer ran in "
                      f"{set(dtypes) or 'nothing'}: run the forward inside "
                      "torch.autocast(x.device.type, dtype=amp_dtype)")
    if log.count("step") != 1:
        raise mistake("wrong_step_count",
                      f"the optimizer stepped {log.count('step')} times in one training step: "
                      "call only scaler.step(optimizer)")
    check_amp_calls(log, num_micro_batches=1, num_updates=1)
    stepped_with = log.of("step")[0].info.get("grads")
    check_amp_step_gradient(stepped_with if isinstance(stepped_with, dict) else {}, reference, max_norm,
                            stale=stale, scale=init_scale)
    raise mistake("parameters_changed_outside_step",
                  "the optimizer stepped with the right gradient, but the parameters after the "
                  f"step are not those of one SGD step (lr={AMP_STEP_LR}) with it: change the "
                  "parameters only through scaler.step(optimizer)")


def check_amp_step_skips_inf(amp_train_step: Callable, x: torch.Tensor, y: torch.Tensor) -> None:
    """Exercise 3: with an inf in the input, a float16 step must leave the parameters unchanged and
    halve the scale from 1024 to 512 (scaler.step, then scaler.update). The parameters decide; a
    call of optimizer.step() only names why they moved. Counted: scaler.step ran (it, not the
    student's code, skips the step)."""
    from helpers import models

    model = models.MLP(6, 8, 3, seed=33)
    before = param_snapshot(model)
    bad = x.clone()
    bad[0, 0] = float("inf")
    outcome, log = _run_amp_step(amp_train_step, model, 1024.0,
                                 (F.cross_entropy, bad, y, 1.0, torch.float16), {})
    after = _same_tensors(outcome.get("parameters"), before)
    if after is None:
        raise mistake("evidence_unreadable",
                      "after an inf gradient the parameters did not come back from your function")
    moved = compare(after, before)
    if not moved.max_abs_error == 0:   # NaN counts as moved
        if log.count("step") != 0:
            raise mistake("inf_step_not_skipped",
                          "the optimizer stepped although the gradients held inf: call "
                          "scaler.step(optimizer), never optimizer.step() directly, so that such "
                          "steps are skipped")
        raise mistake("parameters_changed_on_inf",
                      f"after an inf gradient the parameters changed ({moved}): a step whose "
                      "gradients hold inf must leave them as they were")
    scale = outcome.get("scale")
    if scale != 512.0:
        raise mistake("scaler_not_updated",
                      f"after an inf gradient the scale should halve from 1024 to 512, it is "
                      f"{scale}: call scaler.update() after scaler.step()")
    # "A step that scaler.step skips": a step that skips the call itself (unscale_ has recorded the
    # inf, so update() still halves the scale) leaves the same outcome; counted.
    if log.count("scaler_step") != 1:
        raise mistake("inf_step_skipped_by_hand",
                      f"the parameters and the scale are right, but scaler.step(optimizer) ran "
                      f"{log.count('scaler_step')} times: call it on every step, the one whose gradients "
                      "hold inf included, and let it skip that step itself")
