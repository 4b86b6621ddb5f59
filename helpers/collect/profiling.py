"""The student's side of the profiling lesson's checks (lesson 03): call the function, report plain data.

Each collector runs next to the student's code (the notebook's kernel), gets the inputs the check
chose, calls the student's function inside `stderr_on_stdout()` and returns what came out and what
the lesson's tools observed while it ran: the fake machine's event log, the phases and prof.step()
calls in order and the student's profiler's own table, the DataLoaders and host syncs of an epoch.
It judges nothing: helpers.checks.profiling does, in the grader's process at grading (see
helpers.transport.remote). What cannot travel is built here from plain specs: the phases of Exercise 2, the
trace files of Exercise 3 (written in this process's own temporary folder, which the grader's
cannot see, one of them a real trace profiled here), the optimizer of Exercise 4.
"""

from __future__ import annotations

import contextlib
import functools
import json
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from helpers import spies
from helpers.fakes import FakeMachine
from helpers.grads import param_snapshot
from helpers.transport import remote, wire
from helpers.transport.capture import stderr_on_stdout

# ----------------------------------------------------------------------------------------------
# Exercise 1: compare_speed on a fake machine
# ----------------------------------------------------------------------------------------------

# The machine's event log travels as one letter per event: a runaway loop's millions of events stay
# one string instead of a list too long for the wire.
EVENT_LETTERS = {"A": "a", "B": "b", "sync": "s", "clock": "c"}
MAX_EVENTS = wire.MAX_STRING


@remote.collector
def collect_compare_speed(compare_speed: Callable, machine: FakeMachine, repeats: int, warmup: int) -> dict:
    """compare_speed(step_a, step_b, sync, clock, repeats=, warmup=) on the machine the check built:
    what it returned, and the machine's event log ("events", one letter per event of
    EVENT_LETTERS, at most MAX_EVENTS of them; "event_count" is the full count)."""
    with stderr_on_stdout():
        outcome = remote.called(compare_speed, machine.step_a, machine.step_b, machine.sync, machine.clock,
                                repeats=repeats, warmup=warmup)
    # "?" for an entry the machine never logs: the student's code appended it, and the check says so.
    letters = "".join(EVENT_LETTERS.get(event, "?") for event in machine.events[:MAX_EVENTS])
    return {**outcome, "events": letters, "event_count": len(machine.events)}


# ----------------------------------------------------------------------------------------------
# Exercise 2: find_bottleneck on phases that sleep for known times
# ----------------------------------------------------------------------------------------------

STEP = "prof.step()"
# What a check reads of each phase label in the student's profiler's key_averages().
TABLE_COLUMNS = ("count", "cpu_time_total", "self_cpu_time_total")


@dataclass(frozen=True)
class Phase:
    """A test phase: sleeps `seconds[i]` on its i-th call (the last repeats), split over `parts`
    nested record_function labels when parts > 0 (so the phase's own label has no self time)."""

    seconds: tuple[float, ...]
    parts: int = 0


def phase_spec(plan: dict[str, Phase]) -> dict[str, list]:
    """A plan of phases as plain data: {name: [seconds, parts]} (a frozen dataclass cannot travel)."""
    return {name: [list(phase.seconds), phase.parts] for name, phase in plan.items()}


def _phases_of(spec: dict[str, list]) -> dict[str, Phase]:
    return {name: Phase(tuple(seconds), parts) for name, (seconds, parts) in spec.items()}


@dataclass
class ProfilerLog:
    """What watch_profilers saw: the torch.profiler.profile objects made, and the phases run and
    prof.step() calls made, in order."""

    profilers: list = field(default_factory=list)
    order: list[str] = field(default_factory=list)

    def actions(self, steps: int) -> list[str] | None:
        """The names of the last profiler's ProfilerActions for steps 0..steps (None without a
        profiler, or when its schedule does not answer with actions)."""
        if not self.profilers:
            return None
        try:
            actions = [self.profilers[-1].schedule(step) for step in range(steps + 1)]
        except Exception:  # noqa: BLE001 - a schedule the student wrote may raise anything
            return None
        if not all(isinstance(action, torch.profiler.ProfilerAction) for action in actions):
            return None
        return [action.name for action in actions]

    def activities(self) -> list[str] | None:
        """The names of the activities the last profiler records (["CPU"], say; [] for none), or None
        without a profiler or when they cannot be read."""
        if not self.profilers:
            return None
        recorded = getattr(self.profilers[-1], "activities", None)
        try:
            return sorted(activity.name for activity in recorded
                          if isinstance(activity, torch.profiler.ProfilerActivity))
        except Exception:  # noqa: BLE001 - a profiler object the student's code altered
            return None


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


def profiled_table(log: ProfilerLog, labels) -> dict:
    """{"table": {label: {column: value}}} for the labels the last profiler measured, read through
    the class so that a key_averages set on the student's profiler object is not used;
    {"table_error": why} when the profiler cannot give its table; {} without a profiler."""
    if not log.profilers:
        return {}
    try:
        averages = torch.profiler.profile.key_averages(log.profilers[-1])
        table = {event.key: {column: getattr(event, column) for column in TABLE_COLUMNS}
                 for event in averages if event.key in labels}
    except Exception as error:  # noqa: BLE001 - a profiler left running, or never started
        return {"table_error": f"{type(error).__name__}: {error}"[:2000]}
    return {"table": table}


@remote.collector
def collect_find_bottleneck(find_bottleneck: Callable, plan: dict[str, list], steps: int) -> dict:
    """find_bottleneck(phases, steps=steps) on phases built from `plan` (see phase_spec): what it
    returned, the phases and prof.step() calls in order ("order"), the last profiler's schedule as
    action names ("actions"), the activities it records ("activities"), whether a profiler was made
    ("profiled") and that profiler's own table of the phase labels (see profiled_table)."""
    phases_plan = _phases_of(plan)
    measured: dict[str, list[float]] = {name: [] for name in phases_plan}
    with stderr_on_stdout():     # the profiler warns, on stderr, also when its table is read
        with watch_profilers() as log:
            phases = {name: _make_phase(name, phase, log, measured) for name, phase in phases_plan.items()}
            outcome = remote.called(find_bottleneck, phases, steps=steps)
        return {**outcome, "order": list(log.order), "actions": log.actions(steps),
                "activities": log.activities(), "profiled": bool(log.profilers),
                **profiled_table(log, set(phases_plan))}


# ----------------------------------------------------------------------------------------------
# Exercise 3: phase_shares on traces
# ----------------------------------------------------------------------------------------------

def _call_shares(phase_shares: Callable, trace_path, phases: list[str]) -> dict:
    """remote.called(phase_shares, trace_path, phases), plus "value_error": True when what it raised
    is a ValueError (or a subclass, such as json's decoding error): the lesson's answer to a trace
    without the phases, which a type name alone cannot tell."""
    value_error = False

    def shares():
        nonlocal value_error
        try:
            return phase_shares(trace_path, phases)
        except ValueError:
            value_error = True
            raise

    with stderr_on_stdout():
        outcome = remote.called(shares)
    return {**outcome, "value_error": value_error} if "raised" in outcome else outcome


@remote.collector
def collect_phase_shares_of_events(phase_shares: Callable, events: list[dict], file_name: str,
                                   as_str: bool, phases: list[str]) -> dict:
    """Write `events` as a Chrome trace named `file_name` in a temporary folder of this process,
    then phase_shares(its path, phases), the path passed as a str when `as_str`."""
    with tempfile.TemporaryDirectory(prefix="profiling-check-") as folder:
        path = Path(folder) / Path(file_name).name
        path.write_text(json.dumps({"traceEvents": events}))
        return _call_shares(phase_shares, str(path) if as_str else path, phases)


# The fields of a trace event the check reads; the rest (args, ids) stays here.
TRACE_FIELDS = ("name", "cat", "ph", "ts", "dur")


def profiled_loop_events(phases: list[str], steps: int = 3) -> list[dict]:
    """A real trace: `steps` training steps of a small model under torch.profiler (CPU), after one
    warm-up step, each phase of `phases` labelled with record_function, exported as a Chrome trace
    and read back: the profiler's own events (its operators and step labels among them)."""
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    inputs, targets = torch.randn(8, 16), torch.randint(0, 4, (8,))
    step: dict = {}

    def run(phase: str) -> None:
        if phase == "data":
            step["batch"] = inputs.clone(), targets.clone()
        elif phase == "forward":
            x, y = step.get("batch", (inputs, targets))
            step["loss"] = torch.nn.functional.cross_entropy(model(x), y)
        elif phase == "backward" and "loss" in step:
            step.pop("loss").backward()
        elif phase == "optimizer":
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

    plan = schedule(wait=0, warmup=1, active=steps, repeat=1)
    with profile(activities=[ProfilerActivity.CPU], schedule=plan) as prof:
        for _ in range(steps + 1):
            for phase in phases:
                with record_function(phase):
                    run(phase)
            prof.step()
    with tempfile.TemporaryDirectory(prefix="profiling-check-") as folder:
        path = Path(folder) / "trace.json"
        prof.export_chrome_trace(str(path))
        events = json.loads(path.read_text())["traceEvents"]
    return [{key: event[key] for key in TRACE_FIELDS if key in event} for event in events]


@remote.collector
def collect_phase_shares_of_a_profiled_loop(phase_shares: Callable, phases: list[str]) -> dict:
    """Profile a small training loop here (profiled_loop_events), write its trace in a temporary
    folder of this process and run phase_shares(its path as a str, phases); the outcome carries the
    trace's events ("events"), from which the check works out the shares it expects."""
    events = profiled_loop_events(phases)
    with tempfile.TemporaryDirectory(prefix="profiling-check-") as folder:
        path = Path(folder) / "profiled_loop.json"
        path.write_text(json.dumps({"traceEvents": events}))
        outcome = _call_shares(phase_shares, str(path), phases)
    return {**outcome, "events": events}


# ----------------------------------------------------------------------------------------------
# Exercise 4: fast_epoch
# ----------------------------------------------------------------------------------------------

@remote.collector
def collect_fast_epoch(fast_epoch: Callable, model: torch.nn.Module, device: torch.device, lr: float,
                       dataset, batch_size: int, num_workers: int, log_every: int) -> dict:
    """fast_epoch(model, SGD(lr), dataset, batch_size=, num_workers=, log_every=) with the model on
    `device` (the wire brings every tensor to the CPU): the loss if it is a float ("value", else
    "returned": its type's name), the parameters afterwards, every DataLoader's settings and the
    batches taken ("loaders"), and the host syncs and batch copies to the device counted ("syncs")."""
    model = model.to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    with stderr_on_stdout(), spies.record_loaders() as loaders, spies.record_host_syncs() as syncs:
        outcome = remote.called(fast_epoch, model, optimizer, dataset, batch_size=batch_size,
                                num_workers=num_workers, log_every=log_every)
    if "value" in outcome:
        loss = outcome.pop("value")
        if isinstance(loss, float):
            outcome["value"] = float(loss)
        else:
            outcome["returned"] = type(loss).__name__
    return {**outcome, "parameters": param_snapshot(model),
            "loaders": {"settings": [dict(settings) for settings in loaders.settings],
                        "batches": loaders.batches},
            "syncs": {"counts": dict(syncs.counts), "reads_with_graph": syncs.reads_with_graph,
                      "batch_copies": syncs.batch_copies,
                      "blocking_batch_copies": syncs.blocking_batch_copies}}
