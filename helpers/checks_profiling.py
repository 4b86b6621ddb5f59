"""Checks for the profiling lesson (03): each runs the student's function on a scenario whose answer
the check knows by construction (a fake clock, phases that sleep for known times, a trace the test
writes, a reference training run), and names the classic mistake it sees.

Every call into student code runs inside `helpers.capture.stderr_on_stdout()`, so a warning from
the student's code (or from the profiler it drives) never fails Validate while grading ignores it.
"""

from __future__ import annotations

import contextlib
import functools
import json
import statistics
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.profiler import ProfilerAction, record_function

from helpers import grads, spies
from helpers.capture import stderr_on_stdout
from helpers.fakes import FakeMachine

# Exercise 1's numbers are exact on the fake clock; an honest float32 computation (a median taken
# with torch) is within a few 1e-8 of them, a wrong one off by far more than this.
RATIO_RTOL = 1e-6
# Exercise 2: a label's total time is its body's wall time plus microseconds of profiler overhead;
# the phases sleep for milliseconds, so a correct share is within 0.01 of the measured one.
SHARE_ATOL = 0.05
# Exercise 3's shares are ratios of whole microseconds.
TRACE_SHARE_ATOL = 1e-6


def _reraise_as_failure(function_name: str, error: Exception, advice: str = "") -> None:
    raise AssertionError(f"{function_name} stopped with {type(error).__name__}: {error}"
                         + (f". {advice}" if advice else "")) from None


# ----------------------------------------------------------------------------------------------
# Exercise 1: compare_speed on a fake machine
# ----------------------------------------------------------------------------------------------

def _clock_reads_without_step(events: Sequence[str]) -> bool:
    """Whether two clock reads follow each other with no step in between (a 0 s interval)."""
    last_clock = None
    for index, event in enumerate(events):
        if event == "clock":
            if last_clock is not None and not any(e in ("A", "B") for e in events[last_clock + 1:index]):
                return True
            last_clock = index
    return False


@stderr_on_stdout()
def check_compare_speed(compare_speed: Callable, durations_a: Sequence[float],
                        durations_b: Sequence[float], *,
                        warmup: int, repeats: int, first_call_extra_s: float = 0.0,
                        drift_per_call: float = 0.0) -> dict:
    """Run compare_speed on a FakeMachine (durations in seconds per call, see helpers.fakes) and
    assert every clause of Exercise 1: warm-up, `repeats` interleaved rounds, a sync before every
    clock read, and ratio/low/high equal to the median/min/max of the rounds' time_b / time_a as
    measured on the fake clock. Returns the student's dict."""
    machine = FakeMachine(durations_a, durations_b, first_call_extra_s=first_call_extra_s,
                          drift_per_call=drift_per_call)
    took: list[tuple[str, float]] = []

    def timed(step, name):
        def run():
            before = machine.now
            step()
            took.append((name, machine.now - before))
        return run

    try:
        result = compare_speed(timed(machine.step_a, "A"), timed(machine.step_b, "B"), machine.sync,
                               machine.clock, repeats=repeats, warmup=warmup)
    except NotImplementedError:
        raise
    except ZeroDivisionError as error:
        if _clock_reads_without_step(machine.events):
            raise AssertionError(
                f"compare_speed stopped with ZeroDivisionError ({error}): two clock reads had no step "
                "between them, so a time came out as 0 s (the test's clock moves only while a step runs). "
                "Read clock() right before and right after each timed call") from None
        _reraise_as_failure("compare_speed", error)
    except statistics.StatisticsError as error:
        _reraise_as_failure("compare_speed", error, f"run repeats={repeats} rounds and take the median "
                            "of their ratios")
    warm = machine.warmup_steps()
    extra = f" (here {first_call_extra_s:g} s longer)" if first_call_extra_s else ""
    if warm.count("A") < warmup or warm.count("B") < warmup:
        raise AssertionError(
            f"before the first clock read {', '.join(warm) if warm else 'no step'} ran, "
            f"with warmup={warmup}: "
            f"warm up both steps, each {warmup} times, or the first, slow call{extra} is timed")
    timed_steps = machine.timed_steps()
    if len(timed_steps) != 2 * repeats:
        raise AssertionError(f"{repeats} rounds should time {repeats} calls of A and {repeats} of B, "
                             f"{len(timed_steps)} calls ran")
    pairs = [timed_steps[i:i + 2] for i in range(0, 2 * repeats, 2)]
    if not all(sorted(pair) == ["A", "B"] for pair in pairs):
        raise AssertionError(f"the timed calls ran as {''.join(timed_steps)}: interleave them, one A and "
                             "one B per round, so that drift in the machine's speed affects both alike")
    unsynced = machine.unsynced_clock_reads()
    if unsynced:
        raise AssertionError(f"{unsynced} clock reads did not come right after sync(): on a GPU the clock "
                             "would then measure how fast work is queued, not how long it takes")
    if not isinstance(result, Mapping) or not {"ratio", "low", "high"} <= set(result):
        raise AssertionError(f"return a dict with ratio, low and high, got {result!r}")
    rounds = [dict(took[i:i + 2]) for i in range(len(took) - 2 * repeats, len(took), 2)]
    ratios = [r["B"] / r["A"] for r in rounds]
    median = statistics.median(ratios)
    got = float(result["ratio"])
    if not _close(got, median):
        hint = ""
        if _close(got, statistics.mean(ratios)):
            hint = ": you took the mean, which one slow round drags"
        elif _close(got, statistics.median(r["B"] for r in rounds)
                    / statistics.median(r["A"] for r in rounds)):
            hint = ": you divided the median times; take the median of each round's ratio instead"
        raise AssertionError(f"ratio is {got:.9g}, but the median of the rounds' time_b / time_a is "
                             f"{median:.9g}{hint}")
    low, high = float(result["low"]), float(result["high"])
    if not (_close(low, min(ratios)) and _close(high, max(ratios))):
        raise AssertionError(f"low and high should be the smallest and largest ratios ({min(ratios):.9g} and "
                             f"{max(ratios):.9g}), got {low:.9g} and {high:.9g}")
    return dict(result)


def _close(value: float, reference: float) -> bool:
    return abs(value - reference) <= RATIO_RTOL * abs(reference) + 1e-12


# ----------------------------------------------------------------------------------------------
# Exercise 2: find_bottleneck on phases that sleep for known times
# ----------------------------------------------------------------------------------------------

STEP = "prof.step()"


@dataclass
class ProfilerLog:
    """What watch_profilers saw: the torch.profiler.profile objects made, and the phases run and
    prof.step() calls made, in order."""

    profilers: list = field(default_factory=list)
    order: list[str] = field(default_factory=list)

    def actions(self, steps: int) -> list[ProfilerAction] | None:
        """The last profiler's schedule for steps 0..steps (None without a profiler)."""
        if not self.profilers:
            return None
        return [self.profilers[-1].schedule(step) for step in range(steps + 1)]


@contextlib.contextmanager
def watch_profilers() -> Iterator[ProfilerLog]:
    """Record every torch.profiler.profile created while active and each prof.step() call."""
    log = ProfilerLog()
    cls = torch.profiler.profile
    original_init, original_step = cls.__init__, cls.step

    @functools.wraps(original_init)
    def init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        log.profilers.append(self)

    @functools.wraps(original_step)
    def step(self, *args, **kwargs):
        log.order.append(STEP)
        return original_step(self, *args, **kwargs)

    cls.__init__, cls.step = init, step
    try:
        yield log
    finally:
        cls.__init__, cls.step = original_init, original_step


@dataclass(frozen=True)
class Phase:
    """A test phase: sleeps `seconds[i]` on its i-th call (the last repeats), split over `parts`
    nested record_function labels when parts > 0 (so the phase's own label has no self time)."""

    seconds: tuple[float, ...]
    parts: int = 0


def _make_phase(name: str, phase: Phase, log: ProfilerLog, measured: dict[str, list[float]]):
    def run():
        calls = len(measured[name])
        seconds = phase.seconds[min(calls, len(phase.seconds) - 1)]
        log.order.append(name)
        started = time.perf_counter()
        if phase.parts:
            for part in range(phase.parts):
                with record_function(f"{name}.part{part}"):
                    time.sleep(seconds / phase.parts)
        elif seconds:
            time.sleep(seconds)
        measured[name].append(time.perf_counter() - started)
    return run


def _schedule_problem(actions: list[ProfilerAction] | None, steps: int) -> str:
    """What is wrong with the student's schedule for `steps` steps, or ''."""
    if actions is None:
        return ""
    recording = (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)
    if actions[0] in recording:
        return ("the first step was measured, so a phase that is slow only in its first call counts its "
                "start-up: skip that step with schedule(wait=0, warmup=1, active=steps - 1, repeat=1)")
    if actions[steps] != ProfilerAction.NONE and actions[steps - 1] == ProfilerAction.RECORD_AND_SAVE:
        return ("your schedule starts a new cycle after its active steps (repeat=0, the default, repeats "
                "forever): the profiler hands the finished cycle to on_trace_ready and clears it, so "
                "key_averages() after the loop is empty. Pass repeat=1")
    if [a in recording for a in actions[1:steps]] != [True] * (steps - 1):
        measured = [i for i, a in enumerate(actions[:steps]) if a in recording]
        return (f"your schedule measures steps {measured} "
                f"of 0..{steps - 1}: use schedule(wait=0, warmup=1, active=steps - 1, repeat=1)")
    return ""


@stderr_on_stdout()
def check_find_bottleneck(find_bottleneck: Callable, plan: Mapping[str, Phase], steps: int) -> tuple:
    """Run find_bottleneck on phases built from `plan` and assert Exercise 2's clauses: every phase
    run `steps` times in order, prof.step() once after each step, the first step not measured, and
    the dominant phase and each share equal (within SHARE_ATOL) to what the student's own profiler
    measured for steps 2..steps, a phase's time including its nested labels (so a busy machine's
    timing noise cannot fail a right answer). Returns (name, shares)."""
    measured: dict[str, list[float]] = {name: [] for name in plan}
    with watch_profilers() as log:
        phases = {name: _make_phase(name, phase, log, measured) for name, phase in plan.items()}
        try:
            result = find_bottleneck(phases, steps=steps)
        except NotImplementedError:
            raise
        except Exception as error:  # noqa: BLE001 - a student's error becomes a named failure
            _reraise_as_failure("find_bottleneck", error, _schedule_problem(log.actions(steps), steps))
    problem = _schedule_problem(log.actions(steps), steps)
    counts = {phase: len(times) for phase, times in measured.items()}
    phase_order = [event for event in log.order if event != STEP]
    if phase_order != list(plan) * steps:
        raise AssertionError(f"with steps={steps} every phase should run {steps} times, in the order given; "
                             f"they ran {counts}" + ("" if set(counts.values()) != {steps} else
                                                     f", as {', '.join(phase_order[:2 * len(plan)])}, ..."))
    step_calls = log.order.count(STEP)
    if log.order != ([*plan, STEP] * steps):
        if step_calls == steps * len(plan):
            raise AssertionError(
                f"prof.step() ran {step_calls} times for {steps} steps of {len(plan)} phases: call it once "
                "per training step, after all of the step's phases; the schedule counts prof.step() calls as "
                "steps, so stepping once per phase measures the wrong phases")
        raise AssertionError(f"the phases and prof.step() ran as {', '.join(log.order[:3 * (len(plan) + 1)])}"
                             f", ...: run one step's phases in order, then call prof.step() once "
                             f"({steps} times)")
    shares = result[1] if isinstance(result, tuple) and len(result) == 2 else None
    if not isinstance(shares, Mapping) or set(shares) != set(plan):
        raise AssertionError(f"return (name, shares) with one share per phase {list(plan)}, got {result!r}"
                             + (f": {problem}" if problem else ""))
    name, got = result[0], {phase: float(share) for phase, share in shares.items()}
    said = f"your function says {name!r} with shares {_rounded(got)}"
    if problem:
        raise AssertionError(f"{said}: {problem}")
    if not abs(sum(got.values()) - 1) <= 1e-6:
        raise AssertionError(f"the shares should sum to 1 over the phases, they sum to "
                             f"{sum(got.values()):.6f}")
    totals, self_totals = _profiled_totals(log, plan, steps)
    reference = {phase: total / sum(totals.values()) for phase, total in totals.items()}
    off = any(abs(got[p] - reference[p]) > SHARE_ATOL for p in plan)
    if name != max(reference, key=reference.get) or off:
        raise AssertionError(_diagnose_bottleneck(said, got, reference, self_totals, plan, steps))
    return name, got


def _profiled_totals(log: ProfilerLog, plan: Mapping[str, Phase], steps: int) -> tuple[dict, dict]:
    """Each phase label's cpu_time_total and self_cpu_time_total in the student's own profiler, after
    checking that it saw every phase once in each of steps 2..steps. The shares are compared with
    what that same profiler measured, so a busy machine's timing noise cannot fail a right answer."""
    if not log.profilers:
        raise AssertionError("find_bottleneck should profile the steps with torch.profiler.profile(...) "
                             "and read its key_averages()")
    # Through the class, so that a key_averages set on the student's profiler object is not used.
    averages = torch.profiler.profile.key_averages(log.profilers[-1])
    events = {event.key: event for event in averages if event.key in plan}
    seen = {phase: events[phase].count if phase in events else 0 for phase in plan}
    if set(seen.values()) != {steps - 1}:
        raise AssertionError(f"the profiler saw the phases {seen} times; with warmup=1 it should see "
                             f"each once in each of steps 2 to {steps} ({steps - 1} times): run every phase "
                             "inside the profile block and label it with record_function(name)")
    return ({phase: events[phase].cpu_time_total for phase in plan},
            {phase: events[phase].self_cpu_time_total for phase in plan})


def _rounded(shares: Mapping[str, float]) -> dict[str, float]:
    return {phase: round(share, 3) for phase, share in shares.items()}


def _diagnose_bottleneck(said, got, reference, self_totals, plan, steps) -> str:
    self_reference = {phase: total / sum(self_totals.values()) for phase, total in self_totals.items()}
    nested = [phase for phase, spec in plan.items() if spec.parts]
    if nested and all(abs(got[p] - self_reference[p]) <= SHARE_ATOL for p in plan):
        return (f"{said}, but {', '.join(nested)} runs all its work inside nested labels and takes "
                f"{_rounded(reference)}: use each label's total CPU time (cpu_time_total), which includes "
                "everything that runs inside it, not its self time")
    return (f"{said}, but your profiler measured {_rounded(reference)} over steps 2 to {steps} (the first is "
            "the warm-up): add each phase label's cpu_time_total from key_averages() and divide by their sum")


# ----------------------------------------------------------------------------------------------
# Exercise 3: phase_shares on traces the test writes
# ----------------------------------------------------------------------------------------------

def trace_event(name: str, dur: float | None, cat: str = "user_annotation", ph: str = "X") -> dict:
    """One Chrome-trace event as the profiler writes it (`dur` in microseconds; None: no dur)."""
    event = {"name": name, "cat": cat, "ph": ph, "ts": 0, "pid": 1, "tid": 1}
    if dur is not None:
        event["dur"] = dur
    return event


def _call_phase_shares(phase_shares: Callable, trace_path, phases) -> dict:
    try:
        return phase_shares(trace_path, phases)
    except (NotImplementedError, ValueError):
        raise
    except KeyError as error:
        if error.args == ("dur",):
            raise AssertionError(
                "phase_shares stopped with KeyError: 'dur': instant events (\"ph\": \"i\") have no duration; "
                "add only complete events (\"ph\": \"X\")") from None
        _reraise_as_failure("phase_shares", error)
    except AttributeError as error:
        if isinstance(trace_path, str) and "'str' object" in str(error):
            raise AssertionError(f"phase_shares stopped with AttributeError: {error}. trace_path may be a "
                                 "str: open it as Path(trace_path)") from None
        _reraise_as_failure("phase_shares", error)
    except Exception as error:  # noqa: BLE001 - a student's error becomes a named failure
        _reraise_as_failure("phase_shares", error)


@stderr_on_stdout()
def check_phase_shares(phase_shares: Callable, trace_path: Path, events: list[dict],
                       want: Mapping[str, float], gpu_counted: Mapping[str, float] | None = None) -> dict:
    """Write `events` as a Chrome trace at trace_path, run phase_shares(trace_path, list(want)) and
    assert Exercise 3: one share per phase equal to `want` (worked out by the test from the events
    it wrote; when the result equals `gpu_counted`, say that the gpu_user_annotation copies were
    added), then that asking for a phase the trace lacks raises ValueError."""
    Path(trace_path).write_text(json.dumps({"traceEvents": events}))
    try:
        got = _call_phase_shares(phase_shares, trace_path, list(want))
    except ValueError as error:
        raise AssertionError(f"phase_shares raised ValueError ({error}) on a trace that holds the phases "
                             f"{[p for p, share in want.items() if share]}") from None
    if not isinstance(got, Mapping) or set(got) != set(want):
        raise AssertionError(f"return one share per phase asked for {list(want)}, got {got!r}")
    if gpu_counted and all(abs(float(got[p]) - gpu_counted[p]) <= TRACE_SHARE_ATOL for p in want):
        raise AssertionError(f"your shares {_rounded(got)} count each label twice: GPU-side copies of the "
                             "labels (cat gpu_user_annotation) must not be added, only cat == "
                             "'user_annotation'")
    for phase, share in want.items():
        if abs(float(got[phase]) - share) > TRACE_SHARE_ATOL:
            raise AssertionError(
                f"{phase}'s share should be {share:.8f}, got {float(got[phase]):.8f}: add the durations of "
                "all its complete (\"ph\": \"X\") user_annotation events and divide by the sum over the "
                "phases")
    _check_none_raises(phase_shares, trace_path)
    return {phase: float(share) for phase, share in got.items()}


def _check_none_raises(phase_shares: Callable, trace_path: Path) -> None:
    try:
        _call_phase_shares(phase_shares, trace_path, ["no_such_phase"])
    except ValueError:
        return
    except AssertionError as problem:
        if "ZeroDivisionError" in str(problem):
            raise AssertionError("when none of the phases occurs, phase_shares stopped with "
                                 "ZeroDivisionError: check the summed duration and raise "
                                 "ValueError") from None
        raise
    raise AssertionError("phase_shares should raise ValueError when none of the phases occurs in the trace")


@stderr_on_stdout()
def check_shares_sum(phase_shares: Callable, trace_path, phases: Sequence[str]) -> dict:
    """Run phase_shares on a real profiler trace; assert one share per phase, summing to 1."""
    got = _call_phase_shares(phase_shares, trace_path, list(phases))
    if (not isinstance(got, Mapping) or set(got) != set(phases)
            or abs(sum(map(float, got.values())) - 1) > 1e-6):
        raise AssertionError(f"on the profiler's trace of the small model the shares should cover "
                             f"{list(phases)} and sum to 1: {got!r}")
    return {phase: float(share) for phase, share in got.items()}


# ----------------------------------------------------------------------------------------------
# Exercise 4: fast_epoch against slow_epoch
# ----------------------------------------------------------------------------------------------

@stderr_on_stdout()
def check_fast_epoch(fast_epoch: Callable, slow_epoch: Callable, dataset, model: torch.nn.Module, *,
                     batch_size: int, num_workers: int, log_every: int, lr: float = 0.05) -> str:
    """Run fast_epoch on `model` and slow_epoch on a copy (SGD, lr) and assert Exercise 4: a
    DataLoader with the given batch_size and num_workers (pin_memory on CUDA) that yields every
    batch, host syncs only every log_every steps and at the end, no graph in what is read, the
    same final parameters and the same mean loss as a float. Returns a one-line summary."""
    twin = grads.clone_model(model)
    reference_loss = slow_epoch(twin, torch.optim.SGD(twin.parameters(), lr=lr), dataset,
                                batch_size=batch_size)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    steps = -(-len(dataset) // batch_size)
    model_device = _device_of(model)
    try:
        with spies.record_loaders() as loaders, spies.record_host_syncs() as syncs:
            loss = fast_epoch(model, optimizer, dataset, batch_size=batch_size, num_workers=num_workers,
                              log_every=log_every)
    except NotImplementedError:
        raise
    except RuntimeError as error:
        if "same device" in str(error):
            _reraise_as_failure("fast_epoch", error, "keep the batches and the running total on the model's "
                                "device: torch.zeros((), device=...) and .to(device, non_blocking=True)")
        _reraise_as_failure("fast_epoch", error)
    if not loaders.settings:
        raise AssertionError("fast_epoch should load the data with a torch.utils.data.DataLoader")
    for settings in loaders.settings:
        if settings["num_workers"] != num_workers:
            raise AssertionError(
                f"the DataLoader ran with num_workers={settings['num_workers']}: pass num_workers on, so "
                f"that worker processes (here {num_workers}) decode the next batches while the model trains")
        if settings["batch_size"] != batch_size:
            raise AssertionError(f"the DataLoader ran with batch_size={settings['batch_size']}: pass "
                                 f"batch_size={batch_size} on")
        if model_device.type == "cuda" and not settings["pin_memory"]:
            raise AssertionError("the model is on CUDA but the DataLoader ran with pin_memory=False: pinned "
                                 "batches copy to the GPU with .to(device, non_blocking=True) without a stop")
    if loaders.batches != steps:
        raise AssertionError(f"fast_epoch took {loaders.batches} batches from its DataLoader for {steps} "
                             "steps: train on every batch the DataLoader yields, once")
    reads = steps // log_every + 1
    if syncs.total > reads:
        raise AssertionError(
            f"fast_epoch made {syncs.total} host syncs ({_nonzero(syncs.counts)}) for {steps} steps with "
            f"log_every={log_every}: keep the running loss on the device (total += loss.detach()) and "
            f"read it only every log_every steps and at the end ({reads} reads)")
    if syncs.total < reads:
        raise AssertionError(
            f"fast_epoch read the loss {syncs.total} times in {steps} steps with log_every={log_every}: "
            f"print the running mean every log_every steps ({steps // log_every} times) and read it once "
            "at the end")
    if syncs.reads_with_graph:
        raise AssertionError("the running total you read still carries the autograd graph: total += loss "
                             "keeps every step's graph alive (the PyTorch FAQ's memory leak); add "
                             "loss.detach()")
    params = grads.compare(grads.param_snapshot(model), grads.param_snapshot(twin))
    if not params.close(rtol=1e-5, atol=1e-6):
        raise AssertionError(f"the model ended elsewhere than slow_epoch's ({params}): same batches, same "
                             "order, same updates")
    if not isinstance(loss, float):
        raise AssertionError("return the mean loss as a Python float (read the total with .item() at the "
                             f"end), not a {type(loss).__name__}")
    if abs(loss - reference_loss) > 1e-4 * max(1.0, abs(reference_loss)):
        raise AssertionError(f"returned {loss:.6f}, slow_epoch returns {reference_loss:.6f}: the mean loss "
                             "over the batches")
    return f"{steps} steps, {syncs.total} host syncs, num_workers={num_workers}"


def _device_of(model: torch.nn.Module) -> torch.device:
    """The device of the model's first parameter (a seam: unit tests stand in a CUDA device)."""
    return next(model.parameters()).device


def _nonzero(counts: Mapping[str, int]) -> dict[str, int]:
    return {name: count for name, count in counts.items() if count}
