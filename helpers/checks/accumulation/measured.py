"""Lesson 02's "one micro-batch at a time", judged at grading by the memory the kernel's cgroup held,
as the grader reads it from outside the kernel (helpers.transport.remote.MemoryPeak).

Each exercise's loop runs once more, on one cycle of MEMORY_CYCLE micro-batches so wide that their
activations dwarf the inputs, the weights and the kernel itself: ROWS x HIDDEN float32 activations
in a one-layer MLP (Exercises 1, 2 and 4), or logits of TOKENS x VOCAB in a one-layer TinyLM
(Exercise 3): 40 MiB a micro-batch, above glibc's largest mmap threshold, so that each is mapped
and unmapped whole. A loop that frees each micro-batch's activations before the next forward peaks
at about three of them (the saved activations and the two gradients of that size in the backward:
measured 124 to 146 MiB); one that holds the cycle, by any route, at CYCLE of them plus those two
(240 MiB and up for a cycle of 4). The run's outcome is judged too, against the grader's
reference, so that a loop cannot pass by doing nothing on this workload. What the kernel's own
instruments recorded of the run (graphs alive) only explains a failure.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from helpers import data, grads, models
from helpers.checks.accumulation.activations import check_graphs_alive
from helpers.checks.accumulation.reference import Reference, reference_run
from helpers.checks.accumulation.shared import Batch, prefixed, returned_tensors, student_error
from helpers.checks.accumulation.updates import check_updates
from helpers.checks.call_logs import call_log
from helpers.checks.kept import kept
from helpers.collect.accumulation import collect_amp_training, collect_token_accumulation, collect_training
from helpers.diagnosis import mistake
from helpers.grads import GradDict, clone_model, near, param_snapshot
from helpers.transport import remote

MiB = 2**20
MEMORY_CYCLE, MEMORY_ROWS, MEMORY_HIDDEN = 4, 160, 65536
# Exercise 3: TOKEN_CYCLE micro-batches of TOKEN_SEQUENCES sequences of TOKEN_LENGTH next-token
# targets over a vocabulary of TOKEN_VOCAB; their logits are as large as the MLP's activations. A
# loop that frees each micro-batch peaks at up to 4.5 of them here (what log_softmax saves, the
# backward's gradients, and the last micro-batch's logits that a variable keeps while the next
# forward runs: measured 119 to 178 MiB over the demo class), so the cycle is longer and the bar
# higher: a held cycle of 8 holds 10 and more.
TOKEN_CYCLE, TOKEN_SEQUENCES, TOKEN_LENGTH, TOKEN_VOCAB = 8, 5, 64, 32768
TOKEN_ALLOWED, TOKEN_ALLOWANCE = 7, 2
# What passes, and what the notebook may have taken since its setup cell before the call without it
# counting as the call's, in micro-batches' activations. A loop that raised the kernel's usage first
# (memory allocated and freed, which the allocator keeps) to hide its peak in it still holds 6 - 1.
# A cycle of 8 told the two apart by more and cost the kernel twice the time (docs/run-time.md).
MEMORY_ALLOWED, MEMORY_ALLOWANCE = 4.5, 1
SEED = 17


@kept
def _loop_workload(seed: int, cycle: int, rows: int, hidden: int) -> tuple[nn.Module, list[Batch], Reference]:
    model = models.MLP(8, hidden, 3, depth=1, seed=seed)
    x, y = data.make_blobs(cycle * rows, 8, 3, seed=seed + 1)
    batches = data.split_micro_batches(x, y, micro_batch_size=rows)
    return model, batches, reference_run(model, F.cross_entropy, [batches], lr=0.1)


@kept
def _token_workload(seed: int, cycle: int, sequences: int, length: int,
                    vocab: int) -> tuple[nn.Module, list[Batch], tuple[GradDict, GradDict, float]]:
    model = models.TinyLM(vocab_size=vocab, d_model=16, n_heads=2, n_layers=1, max_length=length, seed=seed)
    generator = torch.Generator().manual_seed(seed + 1)
    batches = [data.lm_batch([torch.randint(1, vocab, (length + 1,), generator=generator)
                              for _ in range(sequences)]) for _ in range(cycle)]
    return model, batches, grads.token_references(model, batches, ignore_index=-100)


def check_cycle_memory(train: Callable, name: str, *, amp: bool = False) -> None:
    """At grading, where the grader reads the kernel's memory cgroup: one cycle of MEMORY_CYCLE wide
    micro-batches through train(model, SGD(0.1), F.cross_entropy, micro_batches, MEMORY_CYCLE)
    (with `amp`, train(model, optimizer, GradScaler, loss_fn, micro_batches, accum_steps=,
    max_norm=1e6, amp_dtype=None), Exercise 4's loop, in float32 with clipping that never binds),
    its update judged against the grader's reference and its peak against one micro-batch's
    activations. It runs once per test cell (the first call of each); elsewhere (the student's
    notebook, a grader without a cgroup) nothing runs."""
    if not (remote.measures_memory(train) and train.first_time("check_cycle_memory")):
        return
    model, batches, reference = _loop_workload(SEED, MEMORY_CYCLE, MEMORY_ROWS, MEMORY_HIDDEN)
    sgd = {"class": "SGD", "defaults": {"lr": 0.1}}
    if amp:
        outcome, peak = remote.run_student_measured(
            train, collect_amp_training, clone_model(model), sgd, {"device": "cpu", "init_scale": 1024.0},
            F.cross_entropy, list(batches), MEMORY_CYCLE, 1e6, None)
    else:
        outcome, peak = remote.run_student_measured(
            train, collect_training, clone_model(model), sgd, F.cross_entropy, list(batches), MEMORY_CYCLE)
    where = f"with {MEMORY_CYCLE} micro-batches of {MEMORY_ROWS} x {MEMORY_HIDDEN} activations"
    error = remote.raised_of(outcome)
    if error is not None:
        raise student_error(name, error, expected=f"makes the full-batch update {where}")
    log = call_log(outcome.get("calls"))
    final_params = returned_tensors(outcome, "params", param_snapshot(model), "the final parameters")
    with prefixed(where):
        check_updates(log, reference, outcome["value"], final_params=final_params, memory_judged_outside=True)
    _judge_peak(peak, f"{MEMORY_CYCLE} micro-batches of {MEMORY_ROWS} x {MEMORY_HIDDEN} activations",
                MEMORY_ROWS * MEMORY_HIDDEN * 4, outcome, MEMORY_ROWS,
                allowed=MEMORY_ALLOWED, allowance=MEMORY_ALLOWANCE, typical=3)


def check_token_cycle_memory(accumulate: Callable, name: str) -> None:
    """Exercise 3's check_cycle_memory: accumulate(model, micro_batches, ignore_index=-100) on a
    cycle of MEMORY_CYCLE micro-batches whose logits take 40 MiB each, its gradient and loss judged
    against the grader's token references and its peak against one micro-batch's logits; once per
    test cell, where the grader measures."""
    if not (remote.measures_memory(accumulate) and accumulate.first_time("check_token_cycle_memory")):
        return
    model, batches, (full, naive, loss) = _token_workload(SEED, TOKEN_CYCLE, TOKEN_SEQUENCES, TOKEN_LENGTH,
                                                           TOKEN_VOCAB)
    outcome, peak = remote.run_student_measured(accumulate, collect_token_accumulation, clone_model(model),
                                                list(batches), -100)
    what = f"{TOKEN_CYCLE} micro-batches of {TOKEN_SEQUENCES * TOKEN_LENGTH} tokens x {TOKEN_VOCAB} logits"
    error = remote.raised_of(outcome)
    if error is not None:
        raise student_error(name, error, ignore_index=-100,
                            expected=f"adds the token-mean gradient of {what}")
    from helpers.checks.accumulation.tokens import check_token_gradients  # tokens.py imports this module

    with prefixed(f"with {what}"):
        check_token_gradients(returned_tensors(outcome, "grads", param_snapshot(model), ".grad"), full, naive)
    returned = outcome.get("value")
    if not (isinstance(returned, float) and near(returned, loss, rtol=1e-4)):
        raise mistake("wrong_loss_returned",
                      f"with {what}: returned loss {returned!r}, but the mean loss over the real tokens is "
                      f"{loss:.6g}")
    _judge_peak(peak, what, TOKEN_SEQUENCES * TOKEN_LENGTH * TOKEN_VOCAB * 4, outcome, TOKEN_SEQUENCES,
                allowed=TOKEN_ALLOWED, allowance=TOKEN_ALLOWANCE, typical=4.5)


def _judge_peak(peak: remote.MemoryPeak, what: str, activations: int, outcome: dict, rows: int, *,
                allowed: float, allowance: float, typical: float) -> None:
    """The peak the grader read against `activations`, one micro-batch's bytes: at most `allowed` of
    them above the usage before the call, of which the notebook may have held `allowance` since
    its setup cell; `typical`, what a loop that frees each micro-batch peaks at (see the module)."""
    if not peak.measured:
        raise mistake("memory_unmeasured", f"the grader could not measure your loop's memory: {peak.why_not}")
    held = peak.held(int(allowance * activations))
    if held <= allowed * activations:
        return
    before = peak.before - peak.baseline
    raise mistake(
        "cycle_held_in_memory",
        f"the result is right, but for one cycle of {what} your loop's memory peaked {held / MiB:.0f} MiB "
        "above what the kernel held before the call, measured by the grader from outside your kernel; a "
        f"loop that frees each micro-batch's activations before the next forward stays near "
        f"{typical * activations / MiB:.0f} MiB, and {allowed * activations / MiB:.0f} MiB passes. Run "
        "each micro-batch's backward before the next forward (keeping the activations elsewhere, on the "
        "CPU, in files, on another thread or in another process, still holds them)."
        + (f" What your notebook held before the call beyond {allowance * activations / MiB:.0f} MiB above "
           f"its setup cell counts as the loop's: it held {before / MiB:.0f} MiB."
           if before > allowance * activations else "")
        + _kernel_saw(outcome, rows))


def _kernel_saw(outcome: dict, rows: int) -> str:
    """What the kernel's own instruments recorded of the same run, to say how the memory was held."""
    try:
        check_graphs_alive(outcome.get("graphs"), rows)
    except AssertionError as seen:
        return f" Your kernel's own record of that run: {seen}"
    return ""
