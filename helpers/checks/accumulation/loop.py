"""Exercises 1 and 2 (train_accumulated, train_accumulated_any_sizes): the accumulation loop, run on a
model whose .grad holds old gradients and judged on its updates (helpers.checks.accumulation.updates),
its memory, its reads to the host and its running loss."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch.nn.functional as F
from torch import nn

from helpers import data, models
from helpers.checks.accumulation.activations import check_graphs_alive, micro_batch_peak
from helpers.checks.accumulation.reference import Reference, reference_run
from helpers.checks.accumulation.shared import (
    Batch,
    _step_grads_readable,
    prefixed,
    returned_tensors,
    student_error,
)
from helpers.checks.accumulation.updates import check_updates
from helpers.checks.call_logs import call_log
from helpers.checks.kept import kept
from helpers.collect.accumulation import collect_training
from helpers.diagnosis import mistake
from helpers.grads import clone_model, fill_grads, param_snapshot
from helpers.transport import remote

MiB = 2**20


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
    if peaks is None and train.first_time("check_cycle_memory"):
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


# The workload on which the grader measures a loop's memory from outside the kernel: one cycle of
# CYCLE micro-batches through a one-layer MLP so wide that activations dwarf everything else. One
# micro-batch's hidden activations are ROWS x HIDDEN float32 (40 MiB, above glibc's largest mmap
# threshold, so each is mapped and unmapped whole). Its forward and backward peak at about three
# of them (what the ReLU saves, and the two gradients of that size in the backward); a loop that
# holds the whole cycle holds at least CYCLE of them (10 in all, measured: 399 MiB against 125).
MEMORY_CYCLE, MEMORY_ROWS, MEMORY_HIDDEN = 8, 160, 65536
# What passes, and what the notebook may have taken since its setup cell before the call without it
# counting as the call's, in micro-batches' activations. A loop that raised the kernel's usage first
# (memory allocated and freed, which the allocator keeps) to hide its peak in it still holds 10 - 2.
MEMORY_ALLOWED, MEMORY_ALLOWANCE = 5, 2


@kept
def _memory_workload(seed: int, cycle: int, rows: int,
                     hidden: int) -> tuple[nn.Module, list[Batch], Reference]:
    model = models.MLP(8, hidden, 3, depth=1, seed=seed)
    x, y = data.make_blobs(cycle * rows, 8, 3, seed=seed + 1)
    batches = data.split_micro_batches(x, y, micro_batch_size=rows)
    return model, batches, reference_run(model, F.cross_entropy, [batches], lr=0.1)


def check_cycle_memory(train: Callable, name: str, seed: int = 17) -> None:
    """At grading: one cycle of MEMORY_CYCLE large micro-batches, whose peak the grader reads from
    the kernel's memory cgroup (helpers.transport.remote.MemoryPeak), judged against the bytes one
    micro-batch's activations take; the update is judged too, so that a loop cannot pass by doing
    nothing on it. Holding the cycle by any route (one graph, save_on_cpu, files, a thread, a child
    process, a copy of the model) raises the peak. The kernel's own evidence (graphs alive) only
    explains a failure. In the student's notebook, or on a grader without a memory cgroup of each
    kernel's own, nothing is measured and check_training's in-kernel evidence judges instead."""
    if not remote.measures_memory(train):
        return
    model, batches, reference = _memory_workload(seed, MEMORY_CYCLE, MEMORY_ROWS, MEMORY_HIDDEN)
    outcome, peak = remote.run_student_measured(
        train, collect_training, clone_model(model), {"class": "SGD", "defaults": {"lr": 0.1}},
        F.cross_entropy, list(batches), MEMORY_CYCLE)
    where = f"with {MEMORY_CYCLE} micro-batches of {MEMORY_ROWS} x {MEMORY_HIDDEN} activations"
    error = remote.raised_of(outcome)
    if error is not None:
        raise student_error(name, error, expected=f"makes the full-batch update {where}")
    log = call_log(outcome.get("calls"))
    final_params = returned_tensors(outcome, "params", param_snapshot(model), "the final parameters")
    with prefixed(where):
        check_updates(log, reference, outcome["value"], final_params=final_params, memory_judged_outside=True)
    if not peak.measured:
        raise mistake("memory_unmeasured", f"the grader could not measure your loop's memory: {peak.why_not}")
    activations = MEMORY_ROWS * MEMORY_HIDDEN * 4
    allowance = MEMORY_ALLOWANCE * activations
    held = peak.held(allowance)
    if held > MEMORY_ALLOWED * activations:
        before = peak.before - peak.baseline
        raise mistake(
            "cycle_held_in_memory",
            f"the result is right, but for one cycle of {MEMORY_CYCLE} micro-batches of {MEMORY_ROWS} x "
            f"{MEMORY_HIDDEN} activations your loop's memory peaked {held / MiB:.0f} MiB above what the "
            "kernel held before the call, measured by the grader from outside your kernel; a loop that "
            f"frees each micro-batch's activations before the next forward stays near "
            f"{3 * activations / MiB:.0f} MiB, and {MEMORY_ALLOWED * activations / MiB:.0f} MiB passes. "
            "Run each micro-batch's backward before the next forward (keeping the activations elsewhere, "
            "on the CPU, in files, on another thread or in another process, still holds them)."
            + (f" What your notebook held before the call beyond {allowance / MiB:.0f} MiB above its setup "
               f"cell counts as the loop's: it held {before / MiB:.0f} MiB." if before > allowance else "")
            + _kernel_saw(outcome))


def _kernel_saw(outcome: dict) -> str:
    """What the kernel's own instruments recorded of the same run, to say how the memory was held."""
    try:
        check_graphs_alive(outcome.get("graphs"), MEMORY_ROWS)
    except AssertionError as seen:
        return f" Your kernel's own record of that run: {seen}"
    return ""
