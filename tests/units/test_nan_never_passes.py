"""No check passes NaN: a student's number is compared with the reference through helpers.grads.near
(or Comparison.relatively_close), where NaN and infinities are near only themselves.

Each test hands a check an answer that is right except for a NaN (or an infinity) where a number
belongs; written as `abs(got - want) > tol`, each of these checks once let it through."""

import math

import pytest
import torch
import torch.nn.functional as F

from helpers import data, models
from helpers.checks import batchnorm as checks_batchnorm
from helpers.checks import precision as checks_precision
from helpers.checks import profiling as checks_profiling
from helpers.checks.accumulation.updates import check_returned_losses
from helpers.data import make_blobs
from helpers.grads import compare, near

NAN, INF = math.nan, math.inf


@pytest.mark.parametrize(("value", "reference", "expected"), [
    (1.0, 1.0, True), (1.0 + 1e-9, 1.0, True), (NAN, 1.0, False), (1.0, NAN, False), (NAN, NAN, True),
    (INF, 1.0, False), (INF, INF, True), (-INF, INF, False), (INF, NAN, False), (True, 1.0, False),
    ("1.0", 1.0, False), (torch.tensor(1.0), 1.0, False), (3, 3, True),
])
def test_near_is_near_only_a_number_and_nan_only_itself(value, reference, expected):
    assert near(value, reference, rtol=1e-6, atol=1e-6) is expected


def test_a_comparison_with_nan_is_never_relatively_close():
    nan_grads = {"w": torch.full((3,), NAN)}
    assert not compare(nan_grads, {"w": torch.ones(3)}).relatively_close(1.0)
    assert not compare({"w": torch.ones(3)}, {"w": torch.zeros(3)}).relatively_close(1e9)
    assert compare({"w": torch.ones(3)}, {"w": torch.ones(3)}).relatively_close(1e-9)


# ---------------------------------------------------------------------------------- lesson 01

def amp_step(model, optimizer, scaler, loss_fn, x, y, max_norm=1.0, amp_dtype=torch.float16):
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=amp_dtype):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss.item()


def test_01_a_step_that_leaves_every_parameter_nan_fails():
    def nan_parameters(model, *args, **kwargs):
        amp_step(model, *args, **kwargs)
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.fill_(NAN)
        return NAN

    x, y = make_blobs(32, 6, 3, seed=31)
    checks_precision.check_amp_train_step(amp_step, 32, x, y, 0.05, torch.float16)
    with pytest.raises(AssertionError):
        checks_precision.check_amp_train_step(nan_parameters, 32, x, y, 0.05, torch.float16)


@pytest.mark.parametrize("loss", [NAN, INF])
def test_01_a_right_step_that_returns_a_nan_or_infinite_loss_fails(loss):
    def right_step_wrong_loss(*args, **kwargs):
        amp_step(*args, **kwargs)
        return loss

    x, y = make_blobs(32, 6, 3, seed=31)
    with pytest.raises(AssertionError, match="the loss of the batch under autocast"):
        checks_precision.check_amp_train_step(right_step_wrong_loss, 32, x, y, 0.05, torch.float16)


# ---------------------------------------------------------------------------------- lesson 02

def test_02_nan_losses_fail_the_returned_losses():
    with pytest.raises(AssertionError, match="the mean losses of the cycles"):
        check_returned_losses([NAN, NAN], [1.0, 2.0])
    with pytest.raises(AssertionError, match="the mean losses of the cycles"):
        check_returned_losses([1.0, INF], [1.0, 2.0])


def test_02_a_nan_running_mean_fails_the_batchnorm_prediction():
    def nan_prediction(micro_batches, momentum, mean, var, tracked):
        return torch.full_like(mean, NAN), torch.full_like(var, NAN)

    rows = [torch.randn(4, 3), torch.randn(4, 3)]
    with pytest.raises(AssertionError, match="BatchNorm1d ends with running_mean"):
        checks_batchnorm.check_running_stats(nan_prediction, rows, 0.1)


# ---------------------------------------------------------------------------------- lesson 03

def test_03_a_nan_ratio_fails_compare_speed():
    def nan_ratio(step_a, step_b, sync, clock, repeats=11, warmup=2):
        def timed(step):
            sync()
            start = clock()
            step()
            sync()
            return clock() - start

        for _ in range(warmup):
            step_a(), step_b()
        for _ in range(repeats):
            timed(step_a), timed(step_b)
        return {"ratio": NAN, "low": NAN, "high": NAN}

    with pytest.raises(AssertionError, match="ratio is nan"):
        checks_profiling.check_compare_speed(nan_ratio, [0.010] * 7, [0.005] * 7, warmup=2, repeats=5)


def test_03_nan_shares_fail_phase_shares(tmp_path):
    event = checks_profiling.trace_event
    events = [event("data", 300), event("forward", 100)]
    want = {"data": 0.75, "forward": 0.25}
    with pytest.raises(AssertionError, match="data's share should be 0.75000000, got nan"):
        checks_profiling.check_phase_shares(lambda path, phases: dict.fromkeys(phases, NAN),
                                            tmp_path / "trace.json", events, want, {})
    with pytest.raises(AssertionError, match="share should be"):
        checks_profiling.check_profiled_trace_shares(lambda path, phases: dict.fromkeys(phases, NAN),
                                                     ["data", "forward", "backward", "optimizer"])


def test_03_a_nan_mean_loss_fails_the_fast_epoch():
    def nan_epoch(model, optimizer, dataset, batch_size=16, num_workers=4, log_every=50):
        loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, num_workers=num_workers)
        total, steps = torch.zeros(()), 0
        for x, y in loader:
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            total += loss.detach()
            steps += 1
            if steps % log_every == 0:
                print(f"step {steps}: {total.item() / steps:.4f}")
        total.item()
        return NAN

    with pytest.raises(AssertionError, match="returned nan"):
        checks_profiling.check_fast_epoch(nan_epoch, data.SlowDataset(96, 8, num_classes=3, delay_s=0.0,
                                                                      seed=1),
                                          models.MLP(8, 16, 3, seed=2), batch_size=16, num_workers=0,
                                          log_every=2)
