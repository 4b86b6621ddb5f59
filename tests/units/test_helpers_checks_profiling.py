"""helpers.checks.profiling: each check passes a correct solution, names each classic mistake, turns
a raised error into a failure that says what the lesson says, and lets nothing reach stderr.

Then the lesson's CUDA-only code runs on a CPU stand-in, so that a first GPU run does not die on an
attribute error; and the checks run as the grader runs them, the student's function behind a channel
(helpers.transport.remote), answering what a kernel would send."""

import ast
import json
import statistics
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from support import cuda_branch
from torch.profiler import ProfilerActivity, profile, record_function, schedule
from torch.utils.data import DataLoader

from course_tools.lessons import REPO_ROOT
from helpers import data, models
from helpers.checks import profiling as cp
from helpers.checks.profiling import slow_loop as checks_slow_loop
from helpers.checks.profiling.slow_loop import reference_epoch
from helpers.checks.profiling.trace_shares import _outermost, labelled_shares
from helpers.collect import profiling as collect_profiling
from helpers.grads import param_snapshot
from helpers.transport import remote, wire

SOURCE = REPO_ROOT / "source" / "03_profiling" / "profiling.ipynb"


def _noisy():
    """What a harmless student function may do: warn, and print to stderr."""
    warnings.warn("a harmless warning from the student's code", UserWarning, stacklevel=2)
    print("a line on stderr", file=sys.stderr)


# ---------------------------------------------------------------------------------------------
# Exercise 1
# ---------------------------------------------------------------------------------------------

def compare_speed(step_a, step_b, sync, clock=time.perf_counter, repeats=11, warmup=2, *, summary="median",
                  interleave=True, synced=True, warm=True, noisy=False):
    if noisy:
        _noisy()
    for _ in range(warmup if warm else 0):
        step_a()
        step_b()

    def timed(step):
        if synced:
            sync()
        start = clock()
        step()
        if synced:
            sync()
        return clock() - start

    if interleave:
        rounds = [(timed(step_a), timed(step_b)) for _ in range(repeats)]
    else:
        times_a = [timed(step_a) for _ in range(repeats)]
        rounds = list(zip(times_a, [timed(step_b) for _ in range(repeats)], strict=True))
    ratios = [b / a for a, b in rounds]
    if summary == "float32":
        ratio = torch.tensor(ratios).median().item()
    elif summary == "mean":
        ratio = statistics.mean(ratios)
    else:
        ratio = statistics.median(ratios)
    return {"ratio": ratio, "low": min(ratios), "high": max(ratios)}


EX1_A = [0.010, 0.010, 0.010, 0.010, 0.100, 0.010, 0.010]
EX1_B = [0.005, 0.005, 0.004, 0.006, 0.005, 0.008, 0.003]


def check_ex1(function, **kwargs):
    return cp.check_compare_speed(function, EX1_A, EX1_B, warmup=2, repeats=5, first_call_extra_s=1.0,
                                  **kwargs)


def test_compare_speed_correct_and_float32_pass():
    assert check_ex1(compare_speed)["ratio"] == pytest.approx(0.4)
    # torch's float32 median is 0.4000000059604645: within the tolerance, once failed by 1e-9.
    check_ex1(lambda *a, **k: compare_speed(*a, **k, summary="float32"))
    result = cp.check_compare_speed(compare_speed, [0.02], [0.01], warmup=2, repeats=9, drift_per_call=0.05)
    assert 0.4 < result["ratio"] < 0.6


@pytest.mark.parametrize(("mistake", "phrase"), [
    ({"summary": "mean"}, "you took the mean"),
    ({"interleave": False}, "interleave them"),
    ({"synced": False}, "did not come right after sync()"),
    ({"warm": False}, "warm up both steps"),
])
def test_compare_speed_mistakes_named(mistake, phrase):
    with pytest.raises(AssertionError, match=phrase.replace("(", r"\(").replace(")", r"\)")):
        check_ex1(lambda *a, **k: compare_speed(*a, **k, **mistake))


def test_compare_speed_mean_message_prints_distinct_numbers():
    with pytest.raises(AssertionError) as failure:
        check_ex1(lambda *a, **k: compare_speed(*a, **k, summary="mean"))
    assert "ratio is 0.43," in str(failure.value) and "is 0.4:" in str(failure.value)


def test_compare_speed_warmup_counted_per_step():
    def warms_once(step_a, step_b, sync, clock, repeats, warmup):
        return compare_speed(step_a, step_b, sync, clock, repeats=repeats, warmup=1)
    with pytest.raises(AssertionError, match="each 2 times"):
        check_ex1(warms_once)


def test_compare_speed_zero_interval_named_only_when_it_is_the_cause():
    def times_nothing(step_a, step_b, sync, clock, repeats, warmup):
        for _ in range(warmup):
            step_a()
            step_b()
        sync()
        start = clock()
        sync()
        return {"ratio": 1 / (clock() - start)}
    with pytest.raises(AssertionError, match="two clock reads had no step between them"):
        check_ex1(times_nothing)

    def divides_by_zero_elsewhere(step_a, step_b, sync, clock, repeats, warmup):
        return {"ratio": 1 / 0}
    with pytest.raises(AssertionError) as failure:
        check_ex1(divides_by_zero_elsewhere)
    assert "ZeroDivisionError" in str(failure.value) and "no step between" not in str(failure.value)


def test_compare_speed_inverted_ratio_named():
    """time_a / time_b, the speed-up, where the spec asks for time_b / time_a."""
    def speedup(step_a, step_b, sync, clock, repeats, warmup):
        result = compare_speed(step_a, step_b, sync, clock, repeats=repeats, warmup=warmup)
        return {"ratio": 1 / result["ratio"], "low": 1 / result["high"], "high": 1 / result["low"]}

    with pytest.raises(AssertionError, match="you divided time_a by time_b") as failure:
        check_ex1(speedup)
    assert failure.value.mistake == "ratio_inverted"


def test_compare_speed_stderr_goes_to_stdout(capsys):
    check_ex1(lambda *a, **k: compare_speed(*a, **k, noisy=True))
    captured = capsys.readouterr()
    assert captured.err == ""
    assert "harmless warning" in captured.out and "a line on stderr" in captured.out


# ---------------------------------------------------------------------------------------------
# Exercise 2
# ---------------------------------------------------------------------------------------------

def find_bottleneck(phases, steps=4, *, per_phase=False, sched="right", self_time=False, noisy=False,
                    activities=(ProfilerActivity.CPU,)):
    if noisy:
        _noisy()
    schedules = {"right": schedule(wait=0, warmup=1, active=steps - 1, repeat=1),
                 "no_repeat": schedule(wait=0, warmup=1, active=steps - 1), "none": None}
    with profile(activities=list(activities), schedule=schedules[sched]) as prof:
        for _ in range(steps):
            for name, phase in phases.items():
                with record_function(name):
                    phase()
                if per_phase:
                    prof.step()
            if not per_phase:
                prof.step()
    attribute = "self_cpu_time_total" if self_time else "cpu_time_total"
    times = {e.key: getattr(e, attribute) for e in prof.key_averages() if e.key in phases}
    total = sum(times.values())
    return max(times, key=times.get), {name: times.get(name, 0.0) / total for name in phases}


PLAN = {"load": cp.Phase((0.004,)), "cold": cp.Phase((0.08, 0.0)), "forward": cp.Phase((0.012,), parts=3)}


def test_find_bottleneck_correct_passes(capsys):
    name, shares = cp.check_find_bottleneck(lambda p, steps: find_bottleneck(p, steps, noisy=True), PLAN,
                                            steps=3)
    # Shares are fractions of the measured time, and which phase is largest depends on how busy the
    # machine is (forward's share was 0.59 in one CI run; in another, a stall inside load's label
    # made load the largest): the check judges against the student's own profiler, so only that
    # the answer agrees with its shares is asserted, never a timing.
    assert name == max(shares, key=shares.get)
    assert sum(shares.values()) == pytest.approx(1.0)
    assert capsys.readouterr().err == ""


def test_find_bottleneck_right_answer_survives_a_busy_machine():
    # A preempted thread makes a label last longer than the phase inside it (here 30 ms of the
    # first phase's label in every step); the check compares with the student's own profiler, so a
    # right answer still passes, however the machine's timing wobbles.
    def preempted_step(phases, steps=4):
        delayed = dict(phases)
        first = next(iter(phases))
        delayed[first] = lambda: (time.sleep(0.03), phases[first]())
        return find_bottleneck(delayed, steps)
    name, shares = cp.check_find_bottleneck(preempted_step, PLAN, steps=3)
    assert name == max(shares, key=shares.get)


@pytest.mark.parametrize(("mistake", "phrase"), [
    ({"per_phase": True}, "call it once per training step"),
    ({"sched": "no_repeat"}, "Pass repeat=1"),
    ({"sched": "none"}, "the first step was measured"),
    ({"self_time": True}, "not its self time"),
])
def test_find_bottleneck_mistakes_named(mistake, phrase, capsys):
    with pytest.raises(AssertionError, match=phrase) as failure:
        cp.check_find_bottleneck(lambda p, steps: find_bottleneck(p, steps, **mistake), PLAN, steps=3)
    if mistake != {"self_time": True}:
        assert "self time" not in str(failure.value)
    # The profiler warns (on stderr) when a cycle's events are cleared: shown on stdout instead.
    assert capsys.readouterr().err == ""


def test_find_bottleneck_missing_repeat_names_the_error():
    with pytest.raises(AssertionError, match=r"max\(\) arg is an empty sequence.*repeat=1"):
        cp.check_find_bottleneck(lambda p, steps: find_bottleneck(p, steps, sched="no_repeat"), PLAN, steps=3)


def test_find_bottleneck_other_errors_are_not_blamed_on_the_schedule():
    def broken(phases, steps=4):
        raise KeyError("oops")
    with pytest.raises(AssertionError) as failure:
        cp.check_find_bottleneck(broken, PLAN, steps=3)
    assert "KeyError" in str(failure.value) and "repeat" not in str(failure.value)


def test_find_bottleneck_wrong_phase_order():
    def reversed_order(phases, steps=4):
        return find_bottleneck(dict(reversed(list(phases.items()))), steps)
    with pytest.raises(AssertionError, match="in the order given"):
        cp.check_find_bottleneck(reversed_order, PLAN, steps=3)


def test_find_bottleneck_without_the_cpu_activity_is_named(capsys):
    """A profiler of CUDA alone records no CPU time; on a machine without CUDA it even raises as it
    starts: either way the check names the missing CPU activity."""
    only_cuda = (ProfilerActivity.CUDA,)
    with pytest.raises(AssertionError, match="records CUDA, not the CPU: profile with") as failure:
        cp.check_find_bottleneck(lambda p, steps: find_bottleneck(p, steps, activities=only_cuda),
                                 PLAN, steps=3)
    assert failure.value.mistake == "cpu_activity_not_recorded"
    assert capsys.readouterr().err == ""


def test_find_bottleneck_may_record_cuda_beside_the_cpu(capsys):
    """The lesson's own `activities` (CPU, and CUDA where there is one) record the CPU: accepted."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # no CUDA to profile here
        name, shares = cp.check_find_bottleneck(
            lambda p, steps: find_bottleneck(
                p, steps, activities=(ProfilerActivity.CPU, ProfilerActivity.CUDA)), PLAN, steps=3)
    assert name == max(shares, key=shares.get)


def test_watch_profilers_restores_profile():
    init, step = profile.__init__, profile.step
    with collect_profiling.watch_profilers():
        assert profile.step is not step
    assert profile.__init__ is init and profile.step is step


# ---------------------------------------------------------------------------------------------
# Exercise 3
# ---------------------------------------------------------------------------------------------

def phase_shares(trace_path, phases, *, any_cat=False, any_ph=False, raise_none=True):
    events = json.loads(Path(trace_path).read_text())["traceEvents"]
    totals = dict.fromkeys(phases, 0.0)
    for event in events:
        if ((any_ph or event.get("ph") == "X") and (any_cat or event.get("cat") == "user_annotation")
                and event.get("name") in totals):
            totals[event["name"]] += event["dur"]
    whole = sum(totals.values())
    if raise_none and not whole:
        raise ValueError("none of the phases")
    return {phase: total / whole for phase, total in totals.items()}


E = cp.trace_event
EVENTS = [E("data", 300), E("forward", 100), E("data", 300), E("aten::mm", 5000, cat="cpu_op"),
          E("ProfilerStep#1", 2000), E("backward", 200), E("data", None, ph="i"),
          E("forward", 400, cat="gpu_user_annotation")]
PHASES = ["data", "forward", "backward", "optimizer"]
WANT = {"data": 600 / 900, "forward": 100 / 900, "backward": 200 / 900, "optimizer": 0.0}
GPU = {"data": 600 / 1300, "forward": 500 / 1300, "backward": 200 / 1300, "optimizer": 0.0}


def test_phase_shares_correct_passes(tmp_path):
    path = tmp_path / "trace.json"
    assert cp.check_phase_shares(phase_shares, path, EVENTS, WANT, GPU) == pytest.approx(WANT)
    real = cp.check_profiled_trace_shares(phase_shares, PHASES)
    assert set(real) == set(PHASES) and sum(real.values()) == pytest.approx(1)
    assert all(real[phase] > 0 for phase in PHASES)


def test_phase_shares_on_the_real_trace_must_match_its_events():
    def divides_by_every_event(trace_path, phases):
        events = json.loads(Path(trace_path).read_text())["traceEvents"]
        whole = sum(event.get("dur", 0) for event in events if event.get("ph") == "X")
        return {phase: sum(e["dur"] for e in events if e.get("ph") == "X" and e["name"] == phase) / whole
                for phase in phases}

    with pytest.raises(AssertionError, match="a real trace also holds operators"):
        cp.check_profiled_trace_shares(divides_by_every_event, PHASES)

    def forgets_the_optimizer(trace_path, phases):
        return phase_shares(trace_path, [phase for phase in phases if phase != "optimizer"])

    with pytest.raises(AssertionError, match="return one share per phase"):
        cp.check_profiled_trace_shares(forgets_the_optimizer, PHASES)


def test_a_kernel_cannot_claim_shares_its_trace_does_not_hold():
    labelled = [{"name": "data", "cat": "user_annotation", "ph": "X", "ts": 0, "dur": 30.0},
                {"name": "forward", "cat": "user_annotation", "ph": "X", "ts": 30, "dur": 10.0}]

    def half_and_half(inputs):
        return {"value": {"data": 0.5, "forward": 0.5}, "events": labelled}

    with pytest.raises(AssertionError, match="data's share should be 0.75000000, got 0.50000000"):
        cp.check_profiled_trace_shares(lying_kernel(half_and_half), ["data", "forward"])

    def without_events(inputs):
        return {"value": {"data": 0.75, "forward": 0.25}}

    with pytest.raises(AssertionError, match="held no labelled time"):
        cp.check_profiled_trace_shares(lying_kernel(without_events), ["data", "forward"])


@pytest.mark.parametrize(("mistake", "phrase"), [
    ({"any_cat": True}, "must not be added"),
    ({"any_ph": True}, "KeyError: 'dur'"),
])
def test_phase_shares_mistakes_named(tmp_path, mistake, phrase):
    with pytest.raises(AssertionError, match=phrase):
        cp.check_phase_shares(lambda t, p: phase_shares(t, p, **mistake), tmp_path / "t.json", EVENTS, WANT,
                              GPU)


def test_phase_shares_none_must_raise_value_error(tmp_path):
    path = tmp_path / "t.json"
    with pytest.raises(AssertionError, match="stopped with ZeroDivisionError: .*; check the summed duration"):
        cp.check_phase_shares(lambda t, p: phase_shares(t, p, raise_none=False), path, EVENTS, WANT)

    def zeros_when_none(trace_path, phases):
        return phase_shares(trace_path, phases) if "data" in phases else dict.fromkeys(phases, 0.0)
    with pytest.raises(AssertionError, match="should raise ValueError"):
        cp.check_phase_shares(zeros_when_none, path, EVENTS, WANT)


def test_phase_shares_str_path_named():
    def needs_a_path(trace_path, phases):
        return phase_shares(Path(trace_path.read_text()), phases)
    with pytest.raises(AssertionError, match=r"open it as Path\(trace_path\)"):
        cp.check_profiled_trace_shares(needs_a_path, PHASES)


def test_phase_shares_value_error_on_a_good_trace_fails(tmp_path):
    def always_raises(trace_path, phases):
        raise ValueError("nothing")
    with pytest.raises(AssertionError, match="on a trace that holds the phases"):
        cp.check_phase_shares(always_raises, tmp_path / "t.json", EVENTS, WANT)


# ---------------------------------------------------------------------------------------------
# Exercise 4
# ---------------------------------------------------------------------------------------------

def fast_epoch(model, optimizer, dataset, batch_size=16, num_workers=4, log_every=50, *,
               sync_every_step=False, log=True, pin=None, noisy=False, shuffle=False, drop_last=False,
               non_blocking=True):
    if noisy:
        _noisy()
    where = next(model.parameters()).device
    loader = DataLoader(dataset, batch_size=batch_size, num_workers=num_workers, shuffle=shuffle,
                        drop_last=drop_last, pin_memory=where.type == "cuda" if pin is None else pin)
    total, steps = torch.zeros((), device=where), 0
    for x, y in loader:
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x.to(where, non_blocking=non_blocking)),
                               y.to(where, non_blocking=non_blocking))
        loss.backward()
        optimizer.step()
        total += loss.item() if sync_every_step else loss.detach()
        steps += 1
        if log and steps % log_every == 0:
            print(f"step {steps}: {total.item() / steps:.4f}")
    return total.item() / steps


def check_ex4(function, **kwargs):
    dataset = data.SlowDataset(96, 8, num_classes=3, delay_s=0.0, seed=1)
    model = models.MLP(8, 16, 3, seed=2)
    return cp.check_fast_epoch(function, dataset, model, batch_size=16, num_workers=0, log_every=2, **kwargs)


def test_fast_epoch_correct_passes(capsys):
    assert "6 steps, 4 host syncs" in check_ex4(lambda *a, **k: fast_epoch(*a, **k, noisy=True))
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(("mistake", "phrase"), [
    ({"sync_every_step": True}, "keep the running loss on the device"),
    ({"log": False}, "print the running mean every log_every steps"),
    ({"pin": True}, "pinning helps only a copy to a GPU"),
])
def test_fast_epoch_mistakes_named(mistake, phrase):
    with pytest.raises(AssertionError, match=phrase):
        check_ex4(lambda *a, **k: fast_epoch(*a, **k, **mistake))


@pytest.mark.parametrize(("mistake", "name", "phrase"), [
    ({"shuffle": True}, "shuffled_batches", r"the DataLoader shuffled \(shuffle=True\)"),
    ({"drop_last": True}, "dropped_last_batch", r"dropped the last, shorter batch \(drop_last=True\)"),
])
def test_fast_epoch_loader_that_changes_the_batches_is_named(mistake, name, phrase):
    """100 samples in batches of 16: the last batch holds 4, which drop_last=True leaves out."""
    with pytest.raises(AssertionError, match=phrase) as failure:
        cp.check_fast_epoch(lambda *a, **k: fast_epoch(*a, **k, **mistake),
                            data.SlowDataset(100, 8, num_classes=3, delay_s=0.0, seed=1),
                            models.MLP(8, 16, 3, seed=2), batch_size=16, num_workers=0, log_every=2)
    assert failure.value.mistake == name


def test_fast_epoch_blocking_copies_are_named():
    with pytest.raises(AssertionError, match="12 of the 12 copies of a batch") as failure:
        check_ex4(lambda *a, **k: fast_epoch(*a, **k, non_blocking=False))
    assert failure.value.mistake == "blocking_copies"

    def moves_by_keyword(model, optimizer, dataset, batch_size=16, num_workers=4, log_every=50):
        where = next(model.parameters()).device
        total, steps = torch.zeros((), device=where), 0
        for x, y in DataLoader(dataset, batch_size=batch_size, num_workers=num_workers):
            optimizer.zero_grad(set_to_none=True)
            x = x.to(device=where, dtype=torch.float32, non_blocking=True)
            loss = F.cross_entropy(model(x), y.to(where, None, True))
            loss.backward()
            optimizer.step()
            total += loss.detach()
            steps += 1
            if steps % log_every == 0:
                print(f"step {steps}: {total.item() / steps:.4f}")
        return total.item() / steps

    check_ex4(moves_by_keyword)


def test_fast_epoch_num_workers_and_batch_size_passed_on():
    with pytest.raises(AssertionError, match="the DataLoader ran with num_workers=0"):
        cp.check_fast_epoch(lambda m, o, d, **k: fast_epoch(m, o, d, **{**k, "num_workers": 0}),
                            data.SlowDataset(32, 8, num_classes=3, delay_s=0.0, seed=1),
                            models.MLP(8, 16, 3, seed=2), batch_size=16, num_workers=1, log_every=2)
    with pytest.raises(AssertionError, match="the DataLoader ran with batch_size=16"):
        cp.check_fast_epoch(lambda m, o, d, **k: fast_epoch(m, o, d, **{**k, "batch_size": 16}),
                            data.SlowDataset(32, 8, num_classes=3, delay_s=0.0, seed=1),
                            models.MLP(8, 16, 3, seed=2), batch_size=8, num_workers=0, log_every=2)


def test_fast_epoch_returns_a_float():
    def returns_tensor(*args, **kwargs):
        return torch.tensor(fast_epoch(*args, **kwargs))
    with pytest.raises(AssertionError, match="as a Python float"):
        check_ex4(returns_tensor)


def test_fast_epoch_pin_memory_on_a_cuda_stand_in(monkeypatch):
    # The CUDA branch of the check, on a CPU: the check is told the model is on CUDA.
    monkeypatch.setattr(checks_slow_loop, "_device_of", lambda model: torch.device("cuda"))
    with pytest.raises(AssertionError, match="pin_memory=False"):
        check_ex4(fast_epoch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # no accelerator to pin for
        check_ex4(lambda *a, **k: fast_epoch(*a, **k, pin=True))


# ---------------------------------------------------------------------------------------------
# The lesson's CUDA-only code, on a CPU stand-in
# ---------------------------------------------------------------------------------------------

def test_pinned_copy_cell_runs_on_a_cpu_stand_in(monkeypatch, capsys, tmp_path):
    from helpers import report, timing

    # A CPU-only build cannot pin memory: pinning stands in as a plain copy.
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda self, *a, **k: self.clone())
    figures = tmp_path / "figures.jsonl"
    monkeypatch.setenv(report.FIGURES_ENV, str(figures))
    branch = cuda_branch("03_profiling", "cell-046").replace("64, 3, 224, 224", "4, 3, 32, 32")
    exec(compile(branch, "cell-046 (CUDA branch)", "exec"), {"torch": torch, "timing": timing,
                                                             "report": report, "device": torch.device("cpu")})
    out = capsys.readouterr().out
    assert "pageable, blocking" in out and "pinned, non_blocking" in out
    # The figures the GPU check reports for this cell are recorded too.
    assert figures.read_text().count("copy of a 37 MiB batch") == 2


def test_profiler_device_columns_exist_on_cpu():
    # The lesson tells GPU users to read device_time_total / self_device_time_total (PyTorch 2.13
    # has no cuda_time_total); a CUDA activity on a CPU-only machine is dropped with a warning.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            with record_function("forward"):
                torch.ones(4, 4) @ torch.ones(4, 4)
    event = next(e for e in prof.key_averages() if e.key == "forward")
    assert event.device_time_total == 0 and event.self_device_time_total == 0
    assert not hasattr(event, "cuda_time_total")
    # The prose names the old column to say it is gone; no code cell may read it.
    code = [cell["source"] for cell in json.loads(SOURCE.read_text())["cells"] if cell["cell_type"] == "code"]
    assert not any("cuda_time_total" in "".join(source) for source in code)


def test_find_bottleneck_cannot_supply_its_own_measurements():
    # Shares invented to match a key_averages the function planted on its own profiler: the check
    # reads the profiler's real measurements through the class, so the invention is caught.
    def planted(phases, steps=4):
        with profile(activities=[ProfilerActivity.CPU],
                     schedule=schedule(wait=0, warmup=1, active=steps - 1, repeat=1)) as prof:
            for _ in range(steps):
                for name, phase in phases.items():
                    with record_function(name):
                        phase()
                prof.step()
        fake = [type("Event", (), {"key": name, "count": steps - 1, "cpu_time_total": 1.0,
                                   "self_cpu_time_total": 1.0})() for name in phases]
        prof.key_averages = lambda: fake
        return "load", {name: 1 / len(phases) for name in phases}
    with pytest.raises(AssertionError, match="your profiler measured"):
        cp.check_find_bottleneck(planted, PLAN, steps=3)


# ---------------------------------------------------------------------------------------------
# The checks as the grader runs them: inputs and results through helpers.transport.wire, the student's
# function behind a channel. An honest kernel runs the collector (remote.serve); a lying one sends
# whatever it likes, and what only its process saw never passes a check.
# ---------------------------------------------------------------------------------------------

def behind_a_channel(function, name="the_students_function"):
    """The student's function as the grader sees it: a StudentFunction whose kernel runs the collector."""
    def channel(collector, _function_name, tree, buffers):
        return remote.serve(collector, function, tree, buffers)

    return remote.StudentFunction(name, channel)


def lying_kernel(answer):
    """A StudentFunction whose kernel answers `answer(inputs)` (the decoded inputs) to every call."""
    def channel(_collector, _function_name, tree, buffers):
        return wire.encode(answer(wire.decode(tree, buffers, objects=True)))

    return remote.StudentFunction("the_students_function", channel)


def test_the_checks_pass_a_right_answer_behind_a_channel(tmp_path):
    assert check_ex1(behind_a_channel(compare_speed))["ratio"] == pytest.approx(0.4)
    name, shares = cp.check_find_bottleneck(behind_a_channel(find_bottleneck), PLAN, steps=3)
    assert name == max(shares, key=shares.get)
    path = tmp_path / "trace.json"
    shares = behind_a_channel(phase_shares)
    assert cp.check_phase_shares(shares, path, EVENTS, WANT, GPU) == pytest.approx(WANT)
    assert sum(cp.check_profiled_trace_shares(shares, PHASES).values()) == pytest.approx(1)
    assert "6 steps, 4 host syncs" in check_ex4(behind_a_channel(fast_epoch))


def test_the_students_function_reads_a_trace_written_where_it_runs(tmp_path):
    seen = []

    def records_its_path(trace_path, phases):
        seen.append(trace_path)
        return phase_shares(trace_path, phases)

    grader_path = tmp_path / "grader_only" / "exercise3.json"
    grader_path.parent.mkdir()
    cp.check_phase_shares(behind_a_channel(records_its_path), grader_path, EVENTS, WANT, GPU)
    cp.check_phase_shares(behind_a_channel(records_its_path), str(grader_path), EVENTS, WANT, GPU)
    assert [type(path) for path in seen] == [type(grader_path)] * 2 + [str] * 2
    assert all(Path(path).name == "exercise3.json" and Path(path) != grader_path for path in seen)
    assert not any(Path(path).exists() for path in seen), "the kernel's temporary trace is removed"


def test_a_json_decoding_error_is_a_value_error_as_before(tmp_path):
    def reads_nothing(trace_path, phases):
        return json.loads("")

    with pytest.raises(AssertionError, match=r"phase_shares raised ValueError \(Expecting value"):
        cp.check_phase_shares(behind_a_channel(reads_nothing), tmp_path / "t.json", EVENTS, WANT)


def test_compare_speed_is_judged_on_the_checks_own_replay():
    def tampers(step_a, step_b, sync, clock, repeats, warmup):
        step_a.__self__.events.append("the right answer")
        return compare_speed(step_a, step_b, sync, clock, repeats=repeats, warmup=warmup)

    with pytest.raises(AssertionError, match="leave their machine alone"):
        check_ex1(tampers)

    def claims_another_ratio(inputs):
        events = "abab" + "scascscbsc" * 5      # a right run's log, with the ratio of another machine
        return {"value": {"ratio": 0.5, "low": 0.5, "high": 0.5}, "events": events,
                "event_count": len(events)}

    with pytest.raises(AssertionError, match="ratio is 0.5, but the median of the rounds' .* is 0.4"):
        check_ex1(lying_kernel(claims_another_ratio))


def test_fast_epoch_is_compared_with_the_checks_own_epoch_never_the_notebooks():
    def doubled(epoch):
        """Twice the learning rate: a student's edit of slow_epoch, and a fast_epoch to match it."""
        def run(model, optimizer, dataset, **kwargs):
            for group in optimizer.param_groups:
                group["lr"] *= 2
            return epoch(model, optimizer, dataset, **kwargs)
        return run

    dataset = data.SlowDataset(96, 8, num_classes=3, delay_s=0.0, seed=1)
    with pytest.raises(AssertionError, match="the model ended elsewhere than slow_epoch's"):
        cp.check_fast_epoch(doubled(fast_epoch), dataset, models.MLP(8, 16, 3, seed=2), batch_size=16,
                            num_workers=0, log_every=2)
    cp.check_fast_epoch(behind_a_channel(fast_epoch), dataset, models.MLP(8, 16, 3, seed=2), batch_size=16,
                        num_workers=0, log_every=2)


def test_reference_epoch_is_the_published_slow_epoch():
    cell = next("".join(c["source"]) for c in json.loads(SOURCE.read_text())["cells"]
                if "def slow_epoch(" in "".join(c["source"]))
    definition = next(node for node in ast.parse(cell).body
                      if isinstance(node, ast.FunctionDef) and node.name == "slow_epoch")
    namespace = {"DataLoader": DataLoader, "F": F, "BATCH": 16}
    exec(compile(ast.Module([definition], []), "slow_epoch", "exec"), namespace)
    dataset = data.SlowDataset(40, 8, num_classes=3, delay_s=0.0, seed=5)
    published, ours = models.MLP(8, 16, 3, seed=6), models.MLP(8, 16, 3, seed=6)
    optimizer = torch.optim.SGD(published.parameters(), lr=0.05)
    published_loss = namespace["slow_epoch"](published, optimizer, dataset, batch_size=16)
    assert reference_epoch(ours, dataset, 16, 0.05) == published_loss
    assert all(torch.equal(a, b) for a, b in zip(published.parameters(), ours.parameters(), strict=True))


def test_a_kernels_record_alone_earns_nothing():
    def claims_a_perfect_epoch(inputs):
        (model, *_rest), _ = inputs
        return {"value": 1.0, "parameters": param_snapshot(model),
                "loaders": {"settings": [{"num_workers": 0, "batch_size": 16, "pin_memory": False}],
                            "batches": 6},
                "syncs": {"counts": {"item": 4}, "reads_with_graph": 0}}

    with pytest.raises(AssertionError, match="the model ended elsewhere than slow_epoch's"):
        check_ex4(lying_kernel(claims_a_perfect_epoch))

    def claims_a_profile(inputs):
        return {"value": ("forward", {"load": 0.2, "cold": 0.1, "forward": 0.7}),
                "order": [*PLAN, "prof.step()"] * 3, "profiled": True, "table": "everything right",
                "actions": ["WARMUP", "RECORD", "RECORD_AND_SAVE", "NONE"]}

    with pytest.raises(AssertionError, match="the profiler saw the phases"):
        cp.check_find_bottleneck(lying_kernel(claims_a_profile), PLAN, steps=3)


def test_collect_profiling_never_imports_the_references():
    import subprocess

    probe = ("import sys, helpers.collect.profiling; "
             "assert 'helpers.checks.profiling' not in sys.modules, 'imports the references'")
    subprocess.run([sys.executable, "-c", probe], check=True)
    assert cp.Phase is collect_profiling.Phase


def test_compare_speed_timed_on_another_clock_is_told_so_not_that_nothing_ran():
    with pytest.raises(AssertionError, match="never read the clock it was given"):
        check_ex1(lambda a, b, sync, clock, repeats=11, warmup=2: compare_speed(
            a, b, sync, time.perf_counter, repeats=repeats, warmup=warmup))


def test_fast_epoch_whose_last_log_is_also_its_result_reads_once_fewer():
    """96 samples in batches of 16: 6 steps, logged at 2, 4 and 6; the read at step 6 can be the result."""
    def last_log_is_the_result(model, optimizer, dataset, batch_size=16, num_workers=4, log_every=50):
        loader = DataLoader(dataset, batch_size=batch_size, num_workers=num_workers)
        total, steps, mean = torch.zeros(()), 0, None
        for x, y in loader:
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            total += loss.detach()
            steps += 1
            if steps % log_every == 0:
                mean = total.item() / steps
                print(f"step {steps}: {mean:.4f}")
        return mean if steps % log_every == 0 else total.item() / steps

    assert "3 host syncs" in check_ex4(last_log_is_the_result)


NESTED = [E("forward", 400, ts=0), E("data", 100, ts=50), E("forward", 100, ts=200),
          E("backward", 200, ts=400), E("data", 300, ts=600), E("data", 300, ts=100, tid=2)]


def test_labels_inside_another_label_of_the_phases_are_left_out(tmp_path):
    """One thread: data inside forward and forward inside forward are already in forward's time; a
    label on another thread overlapping it is not nested."""
    want = {"data": 600 / 1200, "forward": 400 / 1200, "backward": 200 / 1200}
    assert labelled_shares(NESTED, list(want)) == pytest.approx(want)
    with pytest.raises(AssertionError, match="count a label twice when it runs inside another label"):
        cp.check_phase_shares(phase_shares, tmp_path / "trace.json", NESTED, want,
                              nested_counted={"data": 700 / 1400, "forward": 500 / 1400,
                                              "backward": 200 / 1400})

    def outermost_only(trace_path, phases):
        events = json.loads(Path(trace_path).read_text())["traceEvents"]
        try:
            return labelled_shares(events, phases)
        except AssertionError:
            raise ValueError("none of the phases") from None

    assert cp.check_phase_shares(outermost_only, tmp_path / "trace.json", NESTED, want) == pytest.approx(want)


def nested_across_threads(trace_path, phases):
    """Leaves nested labels out, but decides nesting over the whole trace, not per (pid, tid)."""
    events = json.loads(Path(trace_path).read_text())["traceEvents"]
    labels = sorted((e for e in events if e.get("ph") == "X" and e.get("cat") == "user_annotation"
                     and e.get("name") in phases), key=lambda e: (e["ts"], -e["dur"]))
    totals, counted_until = dict.fromkeys(phases, 0.0), float("-inf")
    for event in labels:
        if event["ts"] + event["dur"] <= counted_until:
            continue
        totals[event["name"]] += event["dur"]
        counted_until = event["ts"] + event["dur"]
    whole = sum(totals.values())
    if not whole:
        raise ValueError("none of the phases")
    return {phase: total / whole for phase, total in totals.items()}


def test_nesting_decided_across_threads_is_named(tmp_path):
    threads = [E("forward", 500, ts=0, tid=1), E("data", 300, ts=100, tid=2)]
    want = {"forward": 500 / 800, "data": 300 / 800}
    assert labelled_shares(threads, list(want)) == pytest.approx(want)
    with pytest.raises(AssertionError, match="labels nest only on the same pid and tid") as failure:
        cp.check_phase_shares(nested_across_threads, tmp_path / "trace.json", threads, want)
    assert failure.value.mistake == "nesting_across_threads"
    # On one thread it is right, and a wrong answer there is not blamed on threads.
    one_thread = [E("forward", 400, ts=0), E("data", 100, ts=50), E("backward", 200, ts=400)]
    assert cp.check_phase_shares(nested_across_threads, tmp_path / "trace.json", one_thread,
                                 {"forward": 400 / 600, "data": 0.0, "backward": 200 / 600})
    with pytest.raises(AssertionError) as failure:
        cp.check_phase_shares(phase_shares, tmp_path / "trace.json", NESTED,
                              {"data": 600 / 1200, "forward": 400 / 1200, "backward": 200 / 1200})
    assert failure.value.mistake == "wrong_shares"


def test_outermost_per_thread_switch():
    across = _outermost(NESTED, {"data", "forward", "backward"}, per_thread=False)
    per_thread = _outermost(NESTED, {"data", "forward", "backward"})
    assert [e["dur"] for e in per_thread if e.get("tid") == 2] == [300]
    assert not [e for e in across if e.get("tid") == 2]


def test_one_after_another_lays_events_end_to_end():
    events = cp.one_after_another([E("data", 300), E("data", None, ph="i"), E("forward", 100)])
    assert [e["ts"] for e in events] == [0, 300, 300]
