"""The student's side of the gradient-accumulation checks (lesson 02): run the loop, report plain data.

Each collector runs next to the student's code (the notebook's kernel): it gets the model (with the
old gradients the check put in its .grad), the micro-batches and the specs of the optimizer and
GradScaler, builds those here (neither can travel), runs the student's function inside
`stderr_on_stdout()` with the lesson's spies installed and returns what came out: the returned
value or the error, the final parameters, the gradients each optimizer.step saw and the calls the
spies recorded. It judges nothing: helpers.checks.accumulation does, in the grader's process at
grading (see helpers.transport.remote). Nothing here imports a judge:
helpers/checks/ is a stub in the kernel at grading.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import torch
from torch import nn

from helpers import spies
from helpers.collect.autograd_graphs import graphs_alive
from helpers.collect.specs import build_optimizer, build_scaler, first_linear_dtypes, plain_calls
from helpers.grads import grad_snapshot, param_snapshot
from helpers.memory import SavedTensorMeter
from helpers.transport import remote
from helpers.transport.capture import stderr_on_stdout

# What torch.func raises under saved-tensor hooks (torch/_functorch): a correct loop written with
# torch.func.grad cannot run inside the saved-tensor meter.
_FUNCTORCH_REFUSES_HOOKS = "don't yet support saved tensor hooks"


def _refused_the_meter(outcome: dict) -> bool:
    raised = outcome.get("raised")
    return (isinstance(raised, dict) and raised.get("type") == "RuntimeError"
            and _FUNCTORCH_REFUSES_HOOKS in str(raised.get("message")))


def _put_back(model: nn.Module, start: nn.Module) -> None:
    """The model's parameters and .grad as they were in `start`, a deep copy taken before the run."""
    with torch.no_grad():
        for now, before in zip(model.parameters(), start.parameters(), strict=True):
            now.copy_(before)
            now.grad = None if before.grad is None else before.grad.clone()


@remote.collector
def collect_training(train: Callable, model: nn.Module, optimizer_spec: dict, loss_fn: Callable,
                     micro_batches: Sequence, accum_steps: int) -> dict:
    """train(model, optimizer, loss_fn, micro_batches, accum_steps) under the spies (model and
    optimizer), the optimizer built from optimizer_spec: its outcome, calls, final parameters and
    the most bytes of saved activations the autograd graph held at once. A loop that torch.func
    runs refuses the saved-tensor meter: it runs again from the same start without it
    ("peak_saved": None), and the count of graphs held at once judges its memory alone."""
    start = copy.deepcopy(model)

    def run(metered: bool) -> dict:
        optimizer = build_optimizer(optimizer_spec, model.parameters())
        with contextlib.ExitStack() as stack:
            stack.enter_context(stderr_on_stdout())
            log = stack.enter_context(spies.record(model=model, optimizer=optimizer))
            saved = stack.enter_context(SavedTensorMeter(model)) if metered else None
            graphs = stack.enter_context(graphs_alive(model))
            syncs = stack.enter_context(spies.record_host_syncs())
            outcome = remote.called(train, model, optimizer, loss_fn, micro_batches, accum_steps)
        return {**outcome, "calls": plain_calls(log), "params": param_snapshot(model),
                "peak_saved": saved.peak if saved is not None else None, "graphs": graphs.plain(),
                "host_reads": dict(syncs.counts), "reads_with_graph": int(syncs.reads_with_graph)}

    result = run(metered=True)
    if _refused_the_meter(result):
        _put_back(model, start)
        result = run(metered=False)
    return result


@contextmanager
def loss_reads(model: nn.Module) -> Iterator[Callable[[], int]]:
    """Count, inside the block, the host reads of floating-point values (helpers.spies'
    SyncLog.float_reads) made after the first backward through `model`; yields a function that
    returns that count. Exercise 3 reads its loss once, at the end: integer token counts may be
    read whenever the counting needs, and a float read before any backward is not a loss yet."""
    first = next(p for p in model.parameters() if p.requires_grad)
    at_first_backward: list[int] = []
    with spies.record_host_syncs() as syncs:
        def on_backward(_gradient: torch.Tensor) -> None:
            if not at_first_backward:
                at_first_backward.append(syncs.float_reads)

        handle = first.register_hook(on_backward)
        try:
            yield lambda: syncs.float_reads - at_first_backward[0] if at_first_backward else 0
        finally:
            handle.remove()


@remote.collector
def collect_token_accumulation(accumulate: Callable, model: nn.Module, micro_batches: Sequence,
                               ignore_index: int) -> dict:
    """accumulate(model, micro_batches, ignore_index=ignore_index) under the model's spies: its
    outcome, calls, what .grad holds afterwards, the parameters, and the host reads of a
    floating-point value after the first backward (loss_reads)."""
    with stderr_on_stdout(), spies.record(model=model) as log, SavedTensorMeter(model) as saved, \
            graphs_alive(model) as graphs, loss_reads(model) as reads:
        outcome = remote.called(accumulate, model, micro_batches, ignore_index=ignore_index)
    return {**outcome, "calls": plain_calls(log), "grads": grad_snapshot(model), "peak_saved": saved.peak,
            "graphs": graphs.plain(), "params": param_snapshot(model),
            "loss_reads": reads()}


@remote.collector
def collect_amp_training(train: Callable, model: nn.Module, optimizer_spec: dict, scaler_spec: dict,
                         loss_fn: Callable, micro_batches: Sequence, accum_steps: int, max_norm: float,
                         amp_dtype: torch.dtype | None) -> dict:
    """train(model, optimizer, scaler, loss_fn, micro_batches, accum_steps=, max_norm=, amp_dtype=)
    under the spies (model, optimizer, scaler), both built from their specs: its outcome, calls,
    final parameters, the dtypes the first Linear layer produced, the scale it left and its growth
    tracker (finite updates since the scale last changed)."""
    optimizer = build_optimizer(optimizer_spec, model.parameters())
    scaler = build_scaler(scaler_spec)
    loss_autocast: list[bool] = []     # whether autocast was on at each call of loss_fn

    def watched_loss_fn(output, target, *args, **kwargs):
        device = output.device.type if isinstance(output, torch.Tensor) else "cpu"
        loss_autocast.append(torch.is_autocast_enabled(device))
        return loss_fn(output, target, *args, **kwargs)

    with stderr_on_stdout(), spies.record(model=model, optimizer=optimizer, scaler=scaler) as log, \
            first_linear_dtypes(model) as dtypes, SavedTensorMeter(model) as saved, \
            graphs_alive(model) as graphs:
        outcome = remote.called(train, model, optimizer, scaler, watched_loss_fn, micro_batches,
                                accum_steps=accum_steps, max_norm=max_norm, amp_dtype=amp_dtype)
    return {**outcome, "calls": plain_calls(log), "params": param_snapshot(model), "peak_saved": saved.peak,
            "graphs": graphs.plain(), "dtypes": sorted(set(dtypes), key=str),
            "scale": float(scaler.get_scale()), "growth_tracker": int(scaler._get_growth_tracker()),
            "loss_autocast": loss_autocast}
