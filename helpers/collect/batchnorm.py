"""The student's side of lesson 02's BatchNorm prediction: call the function, report plain data.

It judges nothing (helpers.checks.batchnorm does, in the grader's process at grading); it reports
what the student's function returned, whether it changed the tensors it was given, and how many
batch-norm operations ran while it did, since the exercise asks for a prediction, not a run.
"""

from __future__ import annotations

import torch

from helpers.transport import remote
from helpers.transport.capture import stderr_on_stdout


class _BatchNormCounter(torch.overrides.TorchFunctionMode):
    """Counts the calls that run a batch norm (F.batch_norm, torch.batch_norm, native_batch_norm,
    a BatchNorm module's forward, which calls one of them), however they were reached."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if "batch_norm" in getattr(func, "__name__", ""):
            self.calls += 1
        return func(*args, **(kwargs or {}))


@remote.collector
def collect_running_stats(predict, micro_batches: list, momentum, running_mean: torch.Tensor,
                          running_var: torch.Tensor, num_batches_tracked: int) -> dict:
    """predict(micro_batches, momentum, running_mean, running_var, num_batches_tracked), the batch
    norms it ran and whether it changed its inputs."""
    given = [t.clone() for t in (*micro_batches, running_mean, running_var)]
    counter = _BatchNormCounter()
    with stderr_on_stdout(), counter:
        outcome = remote.called(predict, micro_batches, momentum, running_mean, running_var,
                                num_batches_tracked)
    after = (*micro_batches, running_mean, running_var)
    outcome["changed_inputs"] = not all(
        isinstance(now, torch.Tensor) and now.shape == before.shape and torch.equal(now, before)
        for now, before in zip(after, given, strict=True))
    outcome["batch_norm_calls"] = counter.calls
    return outcome
