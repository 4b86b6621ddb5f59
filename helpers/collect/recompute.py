"""The student's side of lesson 04's forward-pass prediction (Exercise 6): call it, report plain data.

It judges nothing (helpers.checks.recompute does, in the grader's process at grading). It reports
the prediction as an exact int, or what else came back, and how many module forwards ran while the
prediction was made, since the exercise asks for arithmetic, not a run.
"""

from __future__ import annotations

import math

import numpy
import torch
from torch import nn

from helpers.transport import remote
from helpers.transport.capture import stderr_on_stdout


def _whole_count(value) -> int | None:
    """`value` as an exact int when it is a whole number of an exact built-in, numpy or one-element
    torch type (24, 24.0, numpy.int64(24), torch.tensor(24)), else None. A bool is not a count, and
    no subclass is asked anything: that would run the student's code here."""
    kind = type(value)
    if kind is torch.Tensor and value.numel() == 1 and not value.is_complex():
        value, kind = value.item(), type(value.item())
    elif kind.__module__ == "numpy" and issubclass(kind, (numpy.integer, numpy.floating)):
        value = value.item()
        kind = type(value)
    if kind is int:
        return value
    if kind is float and math.isfinite(value) and value.is_integer():
        return int(value)
    return None


@remote.collector
def collect_block_forwards(predict, depth: int, blocks_per_segment: int | None, accum_steps: int,
                           checkpoint_last: bool) -> dict:
    """predict(depth, blocks_per_segment, accum_steps, checkpoint_last) as {"count": int or None,
    "shown": what came back, as text}, and the module forwards it ran."""
    forwards = 0

    def count(module, args):
        nonlocal forwards
        forwards += 1

    handle = nn.modules.module.register_module_forward_pre_hook(count)
    try:
        with stderr_on_stdout():
            outcome = remote.called(predict, depth, blocks_per_segment, accum_steps, checkpoint_last)
    finally:
        handle.remove()
    if "value" in outcome:
        value = outcome.pop("value")
        outcome["count"] = _whole_count(value)
        outcome["shown"] = f"{type(value).__name__} {_shown(value)}"
    outcome["module_forwards"] = forwards
    return outcome


def _shown(value) -> str:
    try:
        text = repr(value) if type(value) in (int, float, str, type(None)) else ""
    except Exception:  # noqa: BLE001 - a value whose repr fails is still reported
        text = ""
    return text[:60]
