"""Reference and diagnoses for lesson 02's BatchNorm prediction (Exercise 6).

The check chooses the micro-batches and the starting statistics, has the student's prediction
made by helpers.collect.batchnorm, runs a real nn.BatchNorm1d over the same micro-batches here and
names the mistake whose prediction the student's matches.

At grading this module is replaced by a stub inside the sandbox, as every module of helpers/checks/ is.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from helpers.collect.batchnorm import collect_running_stats
from helpers.diagnosis import mistake
from helpers.transport import errors, remote

RTOL, ATOL = 1e-5, 1e-6


def measure_running_stats(micro_batches: Sequence[torch.Tensor], momentum: float | None,
                          running_mean: torch.Tensor, running_var: torch.Tensor,
                          num_batches_tracked: int) -> tuple[torch.Tensor, torch.Tensor]:
    """What a BatchNorm1d in training mode holds after one forward per micro-batch."""
    layer = nn.BatchNorm1d(running_mean.numel(), momentum=momentum)
    with torch.no_grad():
        layer.running_mean.copy_(running_mean)
        layer.running_var.copy_(running_var)
        layer.num_batches_tracked.fill_(num_batches_tracked)
        for rows in micro_batches:
            layer(rows)
    return layer.running_mean.clone(), layer.running_var.clone()


def _updated(micro_batches, momentum, mean, var, tracked, *, biased=False, swapped=False,
             whole_cycle=False, count_from_zero=False, count_before_forward=False):
    """A prediction made one known way, right or wrong: the mistakes the check can name. None when
    that way cannot run on these inputs (1 / 0 with momentum=None)."""
    batches = [torch.cat(list(micro_batches))] if whole_cycle else list(micro_batches)
    mean, var = mean.clone(), var.clone()
    for index, rows in enumerate(batches):
        tracked_now = (index + 1) if count_from_zero else tracked + index + (0 if count_before_forward else 1)
        if momentum is None and tracked_now == 0:
            return None
        factor = 1.0 / tracked_now if momentum is None else momentum
        weight = 1 - factor if swapped else factor
        mean = (1 - weight) * mean + weight * rows.mean(0)
        var = (1 - weight) * var + weight * rows.var(0, correction=0 if biased else 1)
    return mean, var


MISTAKES = {
    "biased": ("running_var takes the unbiased variance of each micro-batch (divided by n - 1, "
               "torch.var's default), not the biased one that normalises it"),
    "whole_cycle": ("BatchNorm updates its statistics once per forward pass: once per micro-batch, "
                    "not once with the whole cycle's statistics"),
    "swapped": ("momentum is the weight of the new batch's statistic: "
                "new = (1 - momentum) * old + momentum * batch"),
    "count_from_zero": ("with momentum=None the factor is 1 / num_batches_tracked, counting the forwards "
                        "the layer had seen before this cycle too"),
    "count_before_forward": ("with momentum=None the factor is 1 / num_batches_tracked counted after adding "
                             "this forward: 1 / (num_batches_tracked + 1) for the first micro-batch"),
}
# The name each of those mistakes goes by in a class report (helpers.diagnosis.mistake).
MISTAKE_NAMES = {
    "biased": "biased_variance",
    "whole_cycle": "stats_from_whole_cycle",
    "swapped": "momentum_swapped",
    "count_from_zero": "tracked_count_from_zero",
    "count_before_forward": "tracked_counted_before_forward",
}


def _close(got, want: torch.Tensor) -> bool:
    return (isinstance(got, torch.Tensor) and got.shape == want.shape
            and torch.allclose(got.float(), want, rtol=RTOL, atol=ATOL))


def check_running_stats(predict, micro_batches: Sequence[torch.Tensor], momentum: float | None,
                        running_mean: torch.Tensor | None = None, running_var: torch.Tensor | None = None,
                        num_batches_tracked: int = 0) -> None:
    """predict(...) must return the (running_mean, running_var) a real BatchNorm1d holds after one
    forward per micro-batch, leave its inputs as they were and run no batch norm itself."""
    features = micro_batches[0].shape[1]
    running_mean = torch.zeros(features) if running_mean is None else running_mean
    running_var = torch.ones(features) if running_var is None else running_var
    sizes = "+".join(str(len(rows)) for rows in micro_batches)
    case = f"micro-batches of {sizes} rows, momentum={momentum}, num_batches_tracked={num_batches_tracked}"
    outcome = remote.run_student(predict, collect_running_stats, list(micro_batches), momentum,
                                 running_mean, running_var, num_batches_tracked)
    error = remote.raised_of(outcome)
    if error is not None:
        raise errors.failure("predict_running_stats", error,
                             expected="predicts running_mean and running_var after the cycle")
    if outcome["batch_norm_calls"]:
        raise mistake(
            "ran_model_to_predict",
            f"predict_running_stats ran a batch norm {outcome['batch_norm_calls']} times: predict the "
            "statistics with arithmetic (mean, var), without running BatchNorm")
    if outcome["changed_inputs"]:
        raise mistake(
            "inputs_modified_in_place",
            "predict_running_stats changed the tensors it was given (in-place updates such as mul_ or "
            "add_ on running_mean): work on copies, the caller's layer still holds them")
    value = outcome["value"]
    if not (isinstance(value, (tuple, list)) and len(value) == 2):
        raise mistake(
            "wrong_return_type",
            f"predict_running_stats should return (running_mean, running_var), got {type(value).__name__}")
    got_mean, got_var = value
    want_mean, want_var = measure_running_stats(micro_batches, momentum, running_mean, running_var,
                                                num_batches_tracked)
    if _close(got_mean, want_mean) and _close(got_var, want_var):
        return
    def made_by(name: str) -> bool:
        made = _updated(micro_batches, momentum, running_mean, running_var, num_batches_tracked,
                        **{name: True})
        return made is not None and all(_close(got, want) for got, want in zip(
            (got_mean, got_var), made, strict=True))

    matches = [name for name in MISTAKES if made_by(name)]
    which = "running_mean" if not _close(got_mean, want_mean) else "running_var"
    want = want_mean if which == "running_mean" else want_var
    got = got_mean if which == "running_mean" else got_var
    is_vector = isinstance(got, torch.Tensor) and got.dim() == 1
    shown = ([round(v, 4) for v in got.float().tolist()][:4] if is_vector
             else type(got).__name__)
    raise mistake(
        MISTAKE_NAMES[matches[0]] if len(matches) == 1 else "wrong_prediction",
        f"with {case}, BatchNorm1d ends with {which} {[round(v, 4) for v in want.tolist()][:4]}, you "
        f"predicted {shown}" + (f": {MISTAKES[matches[0]]}" if len(matches) == 1 else ""))
