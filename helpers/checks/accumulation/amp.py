"""Exercise 4 (train_accumulated_amp): accumulation with a GradScaler and clipping, judged on the scaled,
clipped updates and the scaler's state, the cycle whose gradients hold inf (skipped by scaler.step),
and a float16 run against the float32 reference."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from helpers import models, spies
from helpers.checks.accumulation.activations import micro_batch_peak
from helpers.checks.accumulation.measured import check_cycle_memory
from helpers.checks.accumulation.reference import Reference
from helpers.checks.accumulation.shared import (
    ATOL,
    RTOL,
    Batch,
    _step_grads_readable,
    prefixed,
    returned_tensors,
    student_error,
)
from helpers.checks.accumulation.updates import check_returned_losses, check_updates
from helpers.checks.amp_calls import check_amp_calls
from helpers.checks.call_logs import call_log
from helpers.collect.accumulation import collect_amp_training
from helpers.diagnosis import mistake
from helpers.grads import GradDict, compare, fill_grads, param_snapshot
from helpers.transport import remote

ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth")
NUMBERS = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight")


def _cycles(micro_batches: Sequence[Batch], accum_steps: int) -> list[Sequence[Batch]]:
    """Consecutive runs of accum_steps micro-batches (the test's data: a multiple of accum_steps)."""
    return [micro_batches[i:i + accum_steps] for i in range(0, len(micro_batches), accum_steps)]


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
        sgd = {"class": "SGD", "defaults": {"lr": self.lr}}
        scaler = {"device": "cpu", "init_scale": init_scale}
        outcome = remote.run_student(self.train, collect_amp_training, model, sgd, scaler, F.cross_entropy,
                                     list(micro_batches), accum_steps, max_norm, amp_dtype)
        error = remote.raised_of(outcome)
        if error is not None:
            raise student_error("train_accumulated_amp", error,
                                expected="makes one scaled, clipped update per cycle")
        log = call_log(outcome.get("calls"))
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
            # Where the grader reads the kernel's memory from outside, that measure judges it
            # (check_cycle_memory, once the updates are right); the kernel's own evidence judges here.
            measured = remote.measures_memory(self.train)
            peaks = None if measured else (
                run.peak_saved,
                micro_batch_peak(models.MLP(6, 8, 3, seed=seed), F.cross_entropy, micro_batches),
                run.graphs, max(len(x) for x, _ in micro_batches))
            check_updates(run.log, reference, run.losses, final_params=run.params, stale_grads=run.old,
                          activation_peaks=peaks, memory_judged_outside=measured)
        check_cycle_memory(self.train, "train_accumulated_amp", amp=True)
        with prefixed(where):
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
