"""Exercises 1 and 2 (train_accumulated, train_accumulated_any_sizes): the accumulation loop, run on a
model whose .grad holds old gradients and judged on its updates (helpers.checks.accumulation.updates),
its memory, its reads to the host and its running loss."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch.nn.functional as F
from torch import nn

from helpers.checks.accumulation.activations import micro_batch_peak
from helpers.checks.accumulation.measured import check_cycle_memory
from helpers.checks.accumulation.reference import Reference
from helpers.checks.accumulation.shared import (
    Batch,
    _step_grads_readable,
    prefixed,
    returned_tensors,
    student_error,
)
from helpers.checks.accumulation.updates import check_updates
from helpers.checks.call_logs import call_log
from helpers.collect.accumulation import collect_training
from helpers.diagnosis import mistake
from helpers.grads import clone_model, fill_grads, param_snapshot
from helpers.transport import remote


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

    Where the grader reads the kernel's memory from outside, the kernel's own evidence of memory
    (graphs alive, saved-tensor bytes) no longer judges: once the first call of a test cell made the
    right updates, check_cycle_memory judges the loop's memory from outside, in the place where that
    evidence would have.

    `reference`: the test's reference_run of the same model, cycles and lr. `name` is the function
    named in torch's errors; `where` starts a failed check's message; `name_empty_cycle` names a
    ZeroDivisionError as one cycle too many. `reads_per_update` counts the host reads (at most that
    many per update); `detached_total` wants none of them to carry an autograd graph (Exercise 1's
    "add up loss.detach()"). Returns the call log.
    """
    model = clone_model(model)
    old = None if old_seed is None else fill_grads(model, scale=old_scale, seed=old_seed)
    sgd = {"class": "SGD", "defaults": {"lr": lr}}
    outcome = remote.run_student(train, collect_training, model, sgd, F.cross_entropy, list(micro_batches),
                                 accum_steps)
    error = remote.raised_of(outcome)
    if error is not None:
        sizes = {"num_micro_batches": len(micro_batches), "accum_steps": accum_steps}
        raise student_error(name, error, expected="makes the full-batch updates of every cycle",
                            **(sizes if name_empty_cycle else {}))
    log = call_log(outcome.get("calls"))
    final_params = returned_tensors(outcome, "params", param_snapshot(model), "the final parameters")
    _step_grads_readable(log, param_snapshot(model))
    # Where the grader reads the kernel's memory from outside, that measure judges the loop's memory
    # (check_cycle_memory, on a workload large enough to tell); the kernel's own evidence judges here.
    peaks = None if remote.measures_memory(train) else (
        outcome.get("peak_saved"), micro_batch_peak(model, F.cross_entropy, micro_batches),
        outcome.get("graphs"), max(len(x) for x, _ in micro_batches))
    with prefixed(where):
        check_updates(log, reference, outcome["value"], final_params=final_params, stale_grads=old,
                      activation_peaks=peaks, memory_judged_outside=peaks is None)
    check_cycle_memory(train, name)
    with prefixed(where):
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

