"""The memory of a loop judged from outside the kernel (helpers.transport.remote.MemoryPeak and
helpers.checks.accumulation.measured), with the grader's side played by a channel
that runs the collector here and reports the peak a test chooses."""

import pytest
import torch
import torch.nn.functional as F

from helpers.checks.accumulation import loop
from helpers.checks.accumulation import measured as judged
from helpers.checks.accumulation.reference import reference_run
from helpers.data import make_blobs, split_micro_batches
from helpers.diagnosis import mistake_name
from helpers.models import MLP
from helpers.transport import remote

MiB = 2**20


def test_held_is_the_peak_above_the_usage_before_the_call():
    peak = remote.MemoryPeak(peak=300 * MiB, before=100 * MiB, baseline=90 * MiB, why_not="")
    assert peak.measured and peak.held(allowance=50 * MiB) == 200 * MiB


def test_memory_taken_since_the_setup_beyond_the_allowance_counts_as_the_calls():
    """A kernel that raised its usage first (memory freed that the allocator keeps) and holds its
    cycle in it peaks barely above the usage before the call: the excess counts all the same."""
    peak = remote.MemoryPeak(peak=1600 * MiB, before=1590 * MiB, baseline=50 * MiB, why_not="")
    assert peak.held(allowance=80 * MiB) == (1600 - 130) * MiB


def test_an_unmeasured_peak_cannot_be_judged():
    assert not remote.MemoryPeak().measured
    with pytest.raises(ValueError, match="measured only at grading"):
        remote.MemoryPeak().held(0)


@pytest.fixture
def small_workload(monkeypatch):
    """The measured workload at a size a unit test runs in milliseconds (40 KiB of activations)."""
    monkeypatch.setattr(judged, "MEMORY_ROWS", 10)
    monkeypatch.setattr(judged, "MEMORY_HIDDEN", 1024)
    return 10 * 1024 * 4


def measured(function, held_bytes, before_bytes=0, calls=None):
    """`function` as the grader sees it where it measures memory: the collector runs here, and every
    call reports a peak `held_bytes` above a usage `before_bytes` above the setup's."""
    def channel(collector, _name, tree, buffers, measure_memory=False):
        if calls is not None:
            calls.append(measure_memory)
        result = remote.serve(collector, function, tree, buffers)
        if not measure_memory:
            return result
        baseline = 500 * MiB
        before = baseline + before_bytes
        return (*result, remote.MemoryPeak(peak=before + held_bytes, before=before, baseline=baseline,
                                           why_not=""))

    return remote.StudentFunction("train_accumulated", channel, measures_memory=True)


def accumulated(model, optimizer, loss_fn, micro_batches, accum_steps):
    losses = []
    for index, (x, y) in enumerate(micro_batches):
        if index % accum_steps == 0:
            optimizer.zero_grad(set_to_none=True)
            total = 0.0
        loss = loss_fn(model(x), y) / accum_steps
        loss.backward()
        total = total + loss.detach()
        if (index + 1) % accum_steps == 0:
            optimizer.step()
            losses.append(total.item())
    return losses


def whole_cycles_on_cpu(model, optimizer, loss_fn, micro_batches, accum_steps):
    losses = []
    for start in range(0, len(micro_batches), accum_steps):
        optimizer.zero_grad(set_to_none=True)
        with torch.autograd.graph.save_on_cpu():
            cycle = micro_batches[start:start + accum_steps]
            loss = sum(loss_fn(model(x), y) for x, y in cycle) / accum_steps
        loss.backward()
        optimizer.step()
        losses.append(loss.detach().item())
    return losses


def does_nothing(model, optimizer, loss_fn, micro_batches, accum_steps):
    return [0.0] * (len(micro_batches) // accum_steps)


def test_a_peak_of_one_micro_batch_passes(small_workload):
    judged.check_cycle_memory(measured(accumulated, 3 * small_workload), "train_accumulated")


def test_a_peak_of_a_whole_cycle_fails_and_says_what_the_kernel_saw(small_workload):
    with pytest.raises(AssertionError) as failed:
        judged.check_cycle_memory(measured(whole_cycles_on_cpu, 10 * small_workload), "train_accumulated")
    assert mistake_name(failed.value) == "cycle_held_in_memory"
    message = str(failed.value)
    assert "measured by the grader from outside your kernel" in message
    assert "Your kernel's own record of that run" in message and "4 forward passes at once" in message
    assert "What your notebook held before the call" not in message


def test_memory_the_notebook_held_before_the_call_is_named_when_it_counts(small_workload):
    with pytest.raises(AssertionError, match="it held 0 MiB") as failed:
        judged.check_cycle_memory(measured(accumulated, 3 * small_workload, before_bytes=5 * small_workload),
                                  "train_accumulated")
    assert mistake_name(failed.value) == "cycle_held_in_memory"


def test_a_loop_that_does_nothing_on_the_measured_workload_fails_there(small_workload):
    with pytest.raises(AssertionError, match="backward ran 0 times"):
        judged.check_cycle_memory(measured(does_nothing, 0), "train_accumulated")


def test_no_peak_from_a_grader_that_promised_one_fails():
    def channel(collector, _name, tree, buffers, measure_memory=False):
        return (*remote.serve(collector, accumulated, tree, buffers), remote.MemoryPeak())

    function = remote.StudentFunction("train_accumulated", channel, measures_memory=True)
    with pytest.raises(AssertionError, match="could not measure") as failed:
        judged.check_cycle_memory(function, "train_accumulated")
    assert mistake_name(failed.value) == "memory_unmeasured"


def test_in_the_students_notebook_nothing_is_measured_and_nothing_runs():
    assert judged.check_cycle_memory(whole_cycles_on_cpu, "train_accumulated") is None


def small_training_check(train):
    model = MLP(6, 8, 3, seed=11)
    batches = split_micro_batches(*make_blobs(32, 6, 3, seed=12), micro_batch_size=8)
    reference = reference_run(model, F.cross_entropy, [batches[:4]], lr=0.5)
    return loop.check_training(train, "train_accumulated", model, batches, 4, reference, lr=0.5,
                               old_seed=None)


def test_where_memory_is_measured_the_kernels_evidence_no_longer_judges_it(small_workload):
    """save_on_cpu holds the cycle where the kernel's saved-tensor meter cannot see it; its graph
    count judged that in the kernel. Where the grader measures, the measure judges, once per test
    cell: here it reports one micro-batch's peak, and the loop passes the training check."""
    calls: list[bool] = []
    train = measured(whole_cycles_on_cpu, 3 * small_workload, calls=calls)
    small_training_check(train)
    small_training_check(train)
    assert calls == [False, True, False], "the measured workload runs once, after the first right updates"
    with pytest.raises(AssertionError, match="forward passes at once"):
        small_training_check(whole_cycles_on_cpu)


def amp_accumulated(model, optimizer, scaler, loss_fn, micro_batches, accum_steps, max_norm, amp_dtype):
    losses = []
    for index, (x, y) in enumerate(micro_batches):
        if index % accum_steps == 0:
            optimizer.zero_grad(set_to_none=True)
            total = 0.0
        with torch.autocast("cpu", dtype=amp_dtype or torch.bfloat16, enabled=amp_dtype is not None):
            loss = loss_fn(model(x), y) / accum_steps
        scaler.scale(loss).backward()
        total = total + loss.detach()
        if (index + 1) % accum_steps == 0:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            scaler.step(optimizer)
            scaler.update()
            losses.append(total.item())
    return losses


def test_the_mixed_precision_loop_is_measured_on_the_same_cycle(small_workload):
    judged.check_cycle_memory(measured(amp_accumulated, 3 * small_workload), "train_accumulated_amp",
                              amp=True)
    with pytest.raises(AssertionError, match="measured by the grader from outside your kernel"):
        judged.check_cycle_memory(measured(amp_accumulated, 10 * small_workload), "train_accumulated_amp",
                                  amp=True)


@pytest.fixture
def small_token_workload(monkeypatch):
    monkeypatch.setattr(judged, "TOKEN_SEQUENCES", 2)
    monkeypatch.setattr(judged, "TOKEN_LENGTH", 8)
    monkeypatch.setattr(judged, "TOKEN_VOCAB", 64)
    return 2 * 8 * 64 * 4


def token_accumulated(model, micro_batches, ignore_index=-100):
    tokens = sum((targets != ignore_index).sum() for _, targets in micro_batches)
    total = 0.0
    for inputs, targets in micro_batches:
        summed = F.cross_entropy(model(inputs).flatten(0, 1), targets.flatten(), ignore_index=ignore_index,
                                 reduction="sum")
        (summed / tokens).backward()
        total = total + summed.detach()
    return (total / tokens).item()


def token_sum_of_means(model, micro_batches, ignore_index=-100):
    total = 0.0
    for inputs, targets in micro_batches:
        loss = F.cross_entropy(model(inputs).flatten(0, 1), targets.flatten(), ignore_index=ignore_index)
        loss.backward()
        total += loss.item()
    return total


def test_the_token_loop_is_measured_on_a_cycle_of_wide_logits(small_token_workload):
    judged.check_token_cycle_memory(measured(token_accumulated, 3 * small_token_workload), "accumulate")
    with pytest.raises(AssertionError) as failed:
        judged.check_token_cycle_memory(measured(token_accumulated, 10 * small_token_workload), "accumulate")
    assert mistake_name(failed.value) == "cycle_held_in_memory"


def test_a_wrong_token_gradient_on_the_measured_cycle_is_named_first(small_token_workload):
    with pytest.raises(AssertionError, match="with 8 micro-batches of 16 tokens x 64 logits"):
        judged.check_token_cycle_memory(measured(token_sum_of_means, 0), "accumulate")
