"""The student's side of the memory lesson's checks (lesson 04): call the function, report plain data.

Each collector runs next to the student's code (the notebook's kernel), gets the inputs the check
chose, calls the student's function inside `stderr_on_stdout()` and returns what came out and what
the lesson's tools observed while it ran. It judges nothing: helpers.checks.memory does, in the
grader's process at grading (see helpers.transport.remote).
"""

from __future__ import annotations

import operator
import warnings

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from helpers.collect.specs import PLAIN_TYPES
from helpers.grads import clone_model, compare, grad_snapshot, param_snapshot
from helpers.memory import peak_bytes
from helpers.transport import remote, wire
from helpers.transport.capture import stderr_on_stdout


def _whole_number(value) -> int | None:
    """`value` as an int if it is a whole number of any integer type (int, numpy's, a 0-dim integer
    tensor: whatever operator.index accepts), else None; a bool is not a size."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def forward_backward(model: nn.Module, x: torch.Tensor, checkpointing: bool) -> None:
    """model's blocks on x (each one checkpointed, or none), then backward of the output's mean square."""
    h = x
    for block in model.blocks:
        h = checkpoint(block, h, use_reentrant=False) if checkpointing else block(h)
    h.pow(2).mean().backward()


def peak_structure(model: nn.Module) -> tuple:
    """What micro_batch_peak depends on: the width, and the blocks' layers, shapes, dtypes and
    modes. Not the weights' values: no layer of a ResidualMLP allocates by value, so two models
    that differ only in their seed peak alike."""
    blocks = model.blocks
    return (model.dim, repr(blocks),
            tuple((name, tuple(p.shape), p.dtype, p.requires_grad) for name, p in blocks.named_parameters()),
            tuple(module.training for module in blocks.modules()))


# structure -> {(micro_batch, checkpointing): peak bytes}: each measured once in a process, however
# many checks, budgets and students ask (a grader judges a whole class with the same few models).
_PEAKS: dict[tuple, dict[tuple[int, bool], int]] = {}
_STRUCTURES_KEPT = 32


def _known_of(model: nn.Module) -> dict[tuple[int, bool], int] | None:
    try:
        structure = peak_structure(model)
        hash(structure)
    except Exception:  # noqa: BLE001 - a model this lesson did not build: measure it every time
        return None
    if structure not in _PEAKS and len(_PEAKS) >= _STRUCTURES_KEPT:
        _PEAKS.pop(next(iter(_PEAKS)))
    return _PEAKS.setdefault(structure, {})


def known_peaks(model: nn.Module) -> dict[tuple[int, bool], int]:
    """The peaks of `model`'s structure measured so far in this process."""
    return dict(_known_of(model) or {})


def micro_batch_peak(model: nn.Module, micro_batch: int, checkpointing: bool) -> int:
    """The peak bytes one micro-batch's forward and backward add, from the second micro-batch of an
    accumulation cycle on: the gradients exist already (as zeros here), the input is made before.

    The smaller of two runs: a grader process that had graded other notebooks once measured a
    checkpointed run one activation above what the same process measured moments before (the
    profiler's event count, not the run, differed). A plan judged against a budget must not lose
    points to that. Measured once per structure in a process (peak_structure), so every check and
    every student of a class is judged against the same number."""
    known, key = _known_of(model), (micro_batch, bool(checkpointing))
    if known is not None and key in known:
        return known[key]
    for parameter in model.parameters():
        parameter.grad = torch.zeros_like(parameter)
    x = torch.randn(micro_batch, model.dim)
    peak = min(peak_bytes(lambda: forward_backward(model, x, checkpointing), "cpu") for _ in range(2))
    model.zero_grad(set_to_none=True)
    if known is not None:
        known[key] = peak
    return peak


@wire.carried("model", "calls", "known")
class PeakMeasure:
    """measure(micro_batch, checkpointing): the peak bytes one micro-batch's forward and backward of
    a ResidualMLP add to memory once its gradients exist, with every block checkpointed or none.
    Records the calls it gets. `known`: peaks the grader has measured already, answered as they are
    instead of measured again in the kernel."""

    def __init__(self, model: nn.Module, known: dict[tuple[int, bool], int] | None = None):
        self.model = model
        self.calls: list[tuple] = []
        self.known = dict(known or {})

    def __call__(self, micro_batch: int, checkpointing: bool) -> int:
        size = _whole_number(micro_batch)
        self.calls.append((micro_batch if size is None else size, checkpointing))
        if size is None or size < 1:
            return 0        # nothing to measure in a micro-batch of 0, -1 or 2.5: the check says so
        return self.bytes(size, bool(checkpointing))

    def bytes(self, micro_batch: int, checkpointing: bool) -> int:
        """The measurement itself, not recorded as the student's call."""
        key = (micro_batch, bool(checkpointing))
        return self.known[key] if key in self.known else micro_batch_peak(self.model, *key)


@remote.collector
def collect_training_bytes(predict, model: nn.Module, optimizer_name: str) -> dict:
    """predict(model, optimizer_name), and whether it ran anything: the model (gradients or changed
    weights) or any module at all (a copy of the model trained for a step, say)."""
    before = param_snapshot(model)
    forwards = []
    handle = nn.modules.module.register_module_forward_pre_hook(lambda module, args: forwards.append(1))
    try:
        with stderr_on_stdout():
            outcome = remote.called(predict, model, optimizer_name)
    finally:
        handle.remove()
    outcome["ran"] = (bool(forwards) or any(p.grad is not None for p in model.parameters())
                      or compare(param_snapshot(model), before).max_abs_error != 0)
    return outcome


@remote.collector
def collect_saved_bytes(predict, model: nn.Module, batch_size: int) -> dict:
    """predict(model, batch_size)."""
    with stderr_on_stdout():
        return remote.called(predict, model, batch_size)


def _uses_reentrant_checkpoint(function, model: nn.Module, x: torch.Tensor, args: tuple) -> bool:
    """Whether function(model, x, *args) checkpoints with the reentrant variant (seen on a grad input)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            out = function(clone_model(model), x.detach().clone().requires_grad_(), *args)
        except Exception:  # noqa: BLE001 - only a probe: its failure proves nothing
            return False
    pending, seen = [getattr(out, "grad_fn", None)], set()
    while pending:
        node = pending.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if type(node).__name__ == "CheckpointFunctionBackward":
            return True
        pending.extend(next_node for next_node, _ in node.next_functions)
    return False


@remote.collector
def collect_checkpointed_forward(function, model: nn.Module, x: torch.Tensor, args: tuple) -> dict:
    """function(model, x, *args), then backward of its output's mean square, both inside one peak
    measurement: the output, the gradients, the peak bytes and the warnings it raised."""
    seen: dict = {}

    def forward_and_backward():
        seen["outcome"] = remote.called(function, model, x, *args)
        out = seen["outcome"].get("value")
        # Only an exact tensor is used: a subclass's __torch_function__ would run the student's code
        # in place of the backward the measurement needs.
        if type(out) is torch.Tensor and out.requires_grad:
            try:
                out.pow(2).mean().backward()
            except RuntimeError as error:
                seen["backward_error"] = str(error)[:2000]

    with stderr_on_stdout(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            peak = peak_bytes(forward_and_backward, "cpu")
        except Exception as error:  # noqa: BLE001 - a profiler left running, a replaced helper: no peak
            peak = None
            seen.setdefault("measure_error", f"{type(error).__name__}: {error}"[:500])
    report = {"warnings": [str(w.message) for w in caught], "peak_bytes": peak}
    if "outcome" not in seen:
        return {**report, "measure_error": seen.get("measure_error", "the measurement never ran")}
    outcome = seen["outcome"]
    if "raised" in outcome:
        return {**outcome, **report}
    out = outcome["value"]
    if type(out) is not torch.Tensor:
        return {"returned": type(out).__name__, **report}
    report.update(output=out.detach(), requires_grad=bool(out.requires_grad))
    if not out.requires_grad:
        return {**report, "reentrant": _uses_reentrant_checkpoint(function, model, x, args)}
    if "backward_error" in seen:
        return {**report, "backward_error": seen["backward_error"]}
    if peak is not None:
        report["peak_bytes"] = min(peak, _second_peak(function, model, x, args, peak))
    return {**report, "grads": grad_snapshot(model), "x_grad": x.grad}


def fresh_run_peak(forward, model: nn.Module, x: torch.Tensor) -> int:
    """The peak bytes of forward(model, x) and the backward of its output's mean square (when the
    output is an exact tensor that requires grad), on fresh copies of `model` (no gradients yet)
    and of x. The grader measures its references so too (helpers.checks.memory)."""
    copy, x_copy = clone_model(model), x.detach().clone().requires_grad_(x.requires_grad)

    def forward_and_backward():
        out = forward(copy, x_copy)     # alive through backward, as the student's returned output is
        if type(out) is torch.Tensor and out.requires_grad:
            out.pow(2).mean().backward()

    return peak_bytes(forward_and_backward, "cpu")


def _second_peak(function, model: nn.Module, x: torch.Tensor, args: tuple, first: int) -> int:
    """The peak of a second run of the student's function (fresh_run_peak), or `first` if that run
    fails. The grader measures its references as the smaller of two runs as well: a long-lived
    process once measured a run one activation high, and a student must not lose points to that."""
    with stderr_on_stdout(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return fresh_run_peak(lambda m, h: function(m, h, *args), model, x)
        except Exception:  # noqa: BLE001 - the first run's peak stands
            return first


def _plain(value):
    return value if isinstance(value, PLAIN_TYPES) else repr(value)[:80]


@remote.collector
def collect_plan(plan, effective_batch: int, budget: int, measure: PeakMeasure) -> dict:
    """plan(effective_batch, budget, measure), and the calls it made to measure."""
    with stderr_on_stdout():
        outcome = remote.called(plan, effective_batch, budget, measure)
    outcome["calls"] = [tuple(_plain(a) for a in call) for call in measure.calls]
    return outcome
